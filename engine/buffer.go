package engine

import "github.com/tlite/tlite/kernels"

// buffer is one allocation of the session's device, as kernels.Device
// Alloc returned it, with its size.
type buffer struct {
	m    kernels.Buf
	size int
}

// host is the allocation's bytes on the host device (nil on OpenCL).
func (b *buffer) host() []byte { return b.m.Host }

// tref addresses a tensor: a buffer and the element offset it starts at
// (elements of the tensor's own storage type).
type tref struct {
	b   *buffer
	off int
}

// buf is t as a kernel argument.
func (t tref) buf() kernels.Buf {
	return kernels.Buf{Mem: t.b.m.Mem, Host: t.b.m.Host, Off: t.off}
}

// optBuf is t as a kernel argument, or the zero Buf (absent) for nil.
func optBuf(t *tref) kernels.Buf {
	if t == nil {
		return kernels.Buf{}
	}
	return t.buf()
}

// chainArg is one input of an element-wise chain: its tensor and its own
// shape, which broadcasts to the chain's output shape.
type chainArg struct {
	t     tref
	shape []int
}

// runChain launches c on dev.
func runChain(dev kernels.Device, c *kernels.Chain, out []int, ins []chainArg, outs []tref) error {
	args := make([]kernels.ElemArg, len(ins))
	for i, in := range ins {
		args[i] = kernels.ElemArg{Buf: in.t.buf(), Shape: in.shape}
	}
	bufs := make([]kernels.Buf, len(outs))
	for i, o := range outs {
		bufs[i] = o.buf()
	}
	return dev.RunChain(c, out, args, bufs)
}

// allocBuffer allocates size bytes on dev.
func allocBuffer(dev kernels.Device, size int) (*buffer, error) {
	m, err := dev.Alloc(size)
	if err != nil {
		return nil, err
	}
	return &buffer{m: m, size: size}, nil
}
