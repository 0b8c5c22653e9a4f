package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
)

// goBackend runs the kernel families' pure-Go references on host memory.
// It stores floats as float32 only. It serves as the "go" device, and as
// the CPU executor for constant folding and host-side shape computations.
type goBackend struct {
	// timing, when non-nil, receives each step's wall time (the go
	// backend's profile).
	timing func(label string, d time.Duration)
	label  string
	start  time.Time
}

func (g *goBackend) name() string                    { return "pure-Go" }
func (g *goBackend) supports(s kernels.Storage) bool { return s == kernels.F32 }

func (g *goBackend) alloc(size int) (*buffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("engine: negative allocation %d", size)
	}
	// Backed by uint64s so that float32 and int64 views are aligned.
	words := make([]uint64, (size+7)/8)
	var host []byte
	if len(words) > 0 {
		host = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)[:size]
	}
	return &buffer{host: host, size: size}, nil
}

func (g *goBackend) release(*buffer) {}

func (g *goBackend) write(b *buffer, off int, src []byte) error {
	if off < 0 || off+len(src) > b.size {
		return fmt.Errorf("engine: write of %d bytes at %d into a %d-byte buffer", len(src), off, b.size)
	}
	copy(b.host[off:], src)
	return nil
}

func (g *goBackend) read(b *buffer, off int, dst []byte) error {
	if off < 0 || off+len(dst) > b.size {
		return fmt.Errorf("engine: read of %d bytes at %d from a %d-byte buffer", len(dst), off, b.size)
	}
	copy(dst, b.host[off:])
	return nil
}

func (g *goBackend) finish() error {
	g.setLabel("")
	return nil
}

// setLabel closes the previous step's timing and starts the next one.
func (g *goBackend) setLabel(l string) {
	if g.timing == nil {
		return
	}
	now := time.Now()
	if g.label != "" {
		g.timing(g.label, now.Sub(g.start))
	}
	g.label, g.start = l, now
}

func (g *goBackend) close() error { return nil }

// bytesAt is the buffer's bytes from element off of esize bytes on.
func bytesAt(t tref, esize int) []byte { return t.b.host[t.off*esize:] }

// f32At views the buffer from element off as float32s.
func f32At(t tref) []float32 {
	h := t.b.host
	n := len(h) / 4
	if n == 0 || t.off >= n {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&h[0])), n)[t.off:]
}

// i64At views the buffer from element off as int64s.
func i64At(t tref) []int64 {
	h := t.b.host
	n := len(h) / 8
	if n == 0 || t.off >= n {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&h[0])), n)[t.off:]
}

func f32Opt(t *tref) []float32 {
	if t == nil {
		return nil
	}
	return f32At(*t)
}

func (g *goBackend) f32only(s kernels.Storage) error {
	if s != kernels.F32 {
		return fmt.Errorf("engine: the pure-Go backend stores floats as float32 only")
	}
	return nil
}

// loadHost decodes n elements of type et at t into a HostTensor.
func loadHost(t tref, et kernels.ElemType, shape []int) kernels.HostTensor {
	h := kernels.NewHostTensor(et, shape)
	n := h.Len()
	raw := bytesAt(t, et.Size())
	le := binary.LittleEndian
	for i := 0; i < n; i++ {
		switch et {
		case kernels.EF32:
			h.F[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		case kernels.EF16:
			h.F[i] = dtype.HalfToFloat32(le.Uint16(raw[2*i:]))
		case kernels.EI64:
			h.I[i] = int64(le.Uint64(raw[8*i:]))
		case kernels.EI32:
			h.I[i] = int64(int32(le.Uint32(raw[4*i:])))
		case kernels.EI8:
			h.I[i] = int64(int8(raw[i]))
		case kernels.EU8, kernels.EBool:
			h.I[i] = int64(raw[i])
		}
	}
	return h
}

// storeHost encodes a HostTensor into the buffer at t.
func storeHost(t tref, h kernels.HostTensor) {
	raw := bytesAt(t, h.Type.Size())
	le := binary.LittleEndian
	for i := 0; i < h.Len(); i++ {
		switch h.Type {
		case kernels.EF32:
			le.PutUint32(raw[4*i:], math.Float32bits(h.F[i]))
		case kernels.EF16:
			le.PutUint16(raw[2*i:], dtype.Float32ToHalf(h.F[i]))
		case kernels.EI64:
			le.PutUint64(raw[8*i:], uint64(h.I[i]))
		case kernels.EI32:
			le.PutUint32(raw[4*i:], uint32(h.I[i]))
		case kernels.EI8, kernels.EU8:
			raw[i] = byte(h.I[i])
		case kernels.EBool:
			raw[i] = 0
			if h.I[i] != 0 {
				raw[i] = 1
			}
		}
	}
}

func (g *goBackend) chain(c *kernels.Chain, out []int, ins []chainArg, outs []tref) error {
	hs := make([]kernels.HostTensor, len(ins))
	for i, in := range ins {
		hs[i] = loadHost(in.t, c.Inputs[i], in.shape)
	}
	res, err := kernels.RunChainRef(c, out, hs)
	if err != nil {
		return err
	}
	for i, r := range res {
		storeHost(outs[i], r)
	}
	return nil
}

func (g *goBackend) matmul(s kernels.Storage, a, w, c tref, bias *tref, p kernels.MatMulParams) error {
	if err := g.f32only(s); err != nil {
		return err
	}
	return kernels.MatMulRef(f32At(a), f32At(w), f32Opt(bias), f32At(c), p)
}

func (g *goBackend) conv(s kernels.Storage, x, w, y tref, bias *tref, scratch *tref, p kernels.ConvParams) error {
	if err := g.f32only(s); err != nil {
		return err
	}
	return kernels.Conv2DRef(f32At(x), f32At(w), f32Opt(bias), f32At(y), p)
}

func (g *goBackend) pool(s kernels.Storage, x, y tref, p kernels.PoolParams, avg bool) error {
	if err := g.f32only(s); err != nil {
		return err
	}
	return kernels.PoolRef(f32At(x), f32At(y), p, avg)
}

func (g *goBackend) globalPool(s kernels.Storage, x, y tref, planes, hw int, avg bool) error {
	if err := g.f32only(s); err != nil {
		return err
	}
	return kernels.GlobalPoolRef(f32At(x), f32At(y), planes, hw, avg)
}

func (g *goBackend) layerNorm(p kernels.NormParams, x, scale tref, bias *tref, out tref) error {
	if err := g.f32only(p.Storage); err != nil {
		return err
	}
	if err := g.f32only(p.Weights); err != nil {
		return err
	}
	kernels.LayerNormRef(p, f32At(x), f32At(scale), f32Opt(bias), f32At(out))
	return nil
}

func (g *goBackend) groupNorm(p kernels.GroupNormParams, x, scale, bias, out tref) error {
	if err := g.f32only(p.Storage); err != nil {
		return err
	}
	return kernels.GroupNormRef(p, f32At(x), f32At(scale), f32At(bias), f32At(out))
}

func (g *goBackend) softmax(s kernels.Storage, log bool, x, out tref, outer, n, inner int) error {
	if err := g.f32only(s); err != nil {
		return err
	}
	kernels.SoftmaxRef(s, log, f32At(x), f32At(out), outer, n, inner)
	return nil
}

func (g *goBackend) reduce(s kernels.Storage, op kernels.ReduceOp, x tref, shape, axes []int, out tref) error {
	if err := g.f32only(s); err != nil {
		return err
	}
	return kernels.ReduceRef(s, op, f32At(x), shape, axes, f32At(out))
}

func (g *goBackend) argReduce(s kernels.Storage, isMin, last bool, x tref, outer, r, inner int, out tref) error {
	if err := g.f32only(s); err != nil {
		return err
	}
	if outer*inner == 0 {
		return nil
	}
	if r == 0 {
		return fmt.Errorf("engine: arg-reduction over an empty axis")
	}
	kernels.ArgReduceRef(isMin, last, f32At(x), outer, r, inner, i64At(out))
	return nil
}

func (g *goBackend) cumSum(s kernels.Storage, x, out tref, outer, r, inner int, exclusive, reverse bool) error {
	if err := g.f32only(s); err != nil {
		return err
	}
	kernels.CumSumRef(s, f32At(x), f32At(out), outer, r, inner, exclusive, reverse)
	return nil
}

func (g *goBackend) copy(esize int, dst tref, dv kernels.View, src tref, sv kernels.View) error {
	return kernels.CopyRef(esize, bytesAt(dst, esize), dv, bytesAt(src, esize), sv)
}

// indices decodes n int32 or int64 indices at t.
func indices(t tref, it dtype.Type, n int) ([]int64, error) {
	out := make([]int64, n)
	switch it {
	case dtype.Int64:
		copy(out, i64At(t)[:n])
	case dtype.Int32:
		raw := bytesAt(t, 4)
		for i := range out {
			out[i] = int64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
		}
	default:
		return nil, fmt.Errorf("engine: index type %v; want int32 or int64", it)
	}
	return out, nil
}

func (g *goBackend) gather(esize int, data tref, shape []int, axis int, idx tref, it dtype.Type, nidx int, dst tref) error {
	ix, err := indices(idx, it, nidx)
	if err != nil {
		return err
	}
	return kernels.GatherRef(esize, bytesAt(data, esize), shape, axis, ix, bytesAt(dst, esize))
}

func (g *goBackend) gatherElements(esize int, data tref, dataShape []int, axis int, idx tref, it dtype.Type, idxShape []int, dst tref) error {
	ix, err := indices(idx, it, numel(idxShape))
	if err != nil {
		return err
	}
	return kernels.GatherElementsRef(esize, bytesAt(data, esize), dataShape, axis, ix, idxShape, bytesAt(dst, esize))
}

func (g *goBackend) pad(esize int, src tref, shape, pads []int, mode kernels.PadMode, value uint64, dst tref) error {
	return kernels.PadRef(esize, bytesAt(src, esize), shape, pads, mode, value, bytesAt(dst, esize))
}
