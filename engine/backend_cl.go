package engine

import (
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// clBackend runs steps on an OpenCL device through the kernel library.
type clBackend struct {
	lib   *kernels.Lib
	dev   *opencl.Device
	owned bool // the session opened the device and closes it
	label bool // SetLabel before each step (profiling or Labels)
}

func (b *clBackend) name() string                    { return "OpenCL" }
func (b *clBackend) supports(s kernels.Storage) bool { return true }

func (b *clBackend) alloc(size int) (*buffer, error) {
	m, err := b.dev.Alloc(size)
	if err != nil {
		return nil, err
	}
	return &buffer{cl: m, size: size}, nil
}

func (b *clBackend) release(x *buffer) {
	if x != nil && x.cl != nil {
		x.cl.Release()
	}
}

func (b *clBackend) write(x *buffer, off int, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return b.dev.Write(x.cl, off, src)
}

func (b *clBackend) read(x *buffer, off int, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	return b.dev.Read(x.cl, off, dst)
}

func (b *clBackend) finish() error { return b.dev.Finish() }

func (b *clBackend) setLabel(l string) {
	if b.label {
		b.dev.SetLabel(l)
	}
}

func (b *clBackend) close() error {
	if b.owned {
		return b.dev.Close()
	}
	return nil
}

func kb(t tref) kernels.Buf { return kernels.Buf{Mem: t.b.cl, Off: t.off} }

func kbOpt(t *tref) kernels.Buf {
	if t == nil {
		return kernels.Buf{}
	}
	return kb(*t)
}

func (b *clBackend) chain(c *kernels.Chain, out []int, ins []chainArg, outs []tref) error {
	args := make([]kernels.ElemArg, len(ins))
	for i, in := range ins {
		args[i] = kernels.ElemArg{Buf: kb(in.t), Shape: in.shape}
	}
	bufs := make([]kernels.Buf, len(outs))
	for i, o := range outs {
		bufs[i] = kb(o)
	}
	return b.lib.RunChain(c, out, args, bufs)
}

func (b *clBackend) matmul(s kernels.Storage, a, w, c tref, bias *tref, p kernels.MatMulParams) error {
	p.Bias = kbOpt(bias)
	return b.lib.MatMul(s, kb(a), kb(w), kb(c), p)
}

func (b *clBackend) conv(s kernels.Storage, x, w, y tref, bias *tref, scratch *tref, p kernels.ConvParams) error {
	p.Bias = kbOpt(bias)
	return b.lib.Conv2D(s, kb(x), kb(w), kb(y), kbOpt(scratch), p)
}

func (b *clBackend) pool(s kernels.Storage, x, y tref, p kernels.PoolParams, avg bool) error {
	if avg {
		return b.lib.AvgPool(s, kb(x), kb(y), p)
	}
	return b.lib.MaxPool(s, kb(x), kb(y), p)
}

func (b *clBackend) globalPool(s kernels.Storage, x, y tref, planes, hw int, avg bool) error {
	if avg {
		return b.lib.GlobalAvgPool(s, kb(x), kb(y), planes, hw)
	}
	return b.lib.GlobalMaxPool(s, kb(x), kb(y), planes, hw)
}

func (b *clBackend) layerNorm(p kernels.NormParams, x, scale tref, bias *tref, out tref) error {
	return b.lib.LayerNorm(p, kb(x), kb(scale), kbOpt(bias), kb(out))
}

func (b *clBackend) groupNorm(p kernels.GroupNormParams, x, scale, bias, out tref) error {
	return b.lib.GroupNorm(p, kb(x), kb(scale), kb(bias), kb(out))
}

func (b *clBackend) softmax(s kernels.Storage, log bool, x, out tref, outer, n, inner int) error {
	if log {
		return b.lib.LogSoftmax(s, kb(x), kb(out), outer, n, inner)
	}
	return b.lib.Softmax(s, kb(x), kb(out), outer, n, inner)
}

func (b *clBackend) reduce(s kernels.Storage, op kernels.ReduceOp, x tref, shape, axes []int, out tref) error {
	return b.lib.Reduce(s, op, kb(x), shape, axes, kb(out))
}

func (b *clBackend) argReduce(s kernels.Storage, isMin, last bool, x tref, outer, r, inner int, out tref) error {
	return b.lib.ArgReduce(s, isMin, last, kb(x), outer, r, inner, kb(out))
}

func (b *clBackend) cumSum(s kernels.Storage, x, out tref, outer, r, inner int, exclusive, reverse bool) error {
	return b.lib.CumSum(s, kb(x), kb(out), outer, r, inner, exclusive, reverse)
}

func (b *clBackend) copy(esize int, dst tref, dv kernels.View, src tref, sv kernels.View) error {
	return b.lib.Copy(esize, kb(dst), dv, kb(src), sv)
}

func (b *clBackend) gather(esize int, data tref, shape []int, axis int, idx tref, it dtype.Type, nidx int, dst tref) error {
	return b.lib.Gather(esize, kb(data), shape, axis, kb(idx), it, nidx, kb(dst))
}

func (b *clBackend) gatherElements(esize int, data tref, dataShape []int, axis int, idx tref, it dtype.Type, idxShape []int, dst tref) error {
	return b.lib.GatherElements(esize, kb(data), dataShape, axis, kb(idx), it, idxShape, kb(dst))
}

func (b *clBackend) pad(esize int, src tref, shape, pads []int, mode kernels.PadMode, value uint64, dst tref) error {
	return b.lib.Pad(esize, kb(src), shape, pads, mode, value, kb(dst))
}

// errNoDevice wraps an OpenCL open failure with the fallback.
func errNoDevice(err error) error {
	return &NoDeviceError{Err: err}
}
