package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/quant"
)

// HostDevice is the Device that runs each family's pure-Go reference over
// host memory. It stores floats as float32 only (Supports(F16) is false).
// It serves as the "go" device, and as the CPU executor the engine uses to
// fold constants and run host-side shape computations. Its buffers are
// read in place as float32 and int64, so it assumes a little-endian host,
// as the packed weight format does.
type HostDevice struct {
	// Timing, when set, receives the wall time of each labelled stretch of
	// work: SetLabel closes the previous label's stretch, Finish the last.
	Timing func(label string, d time.Duration)
	label  string
	start  time.Time
}

// Name is "pure-Go".
func (h *HostDevice) Name() string { return "pure-Go" }

// Supports reports whether s is F32, the only float storage of the host.
func (h *HostDevice) Supports(s Storage) bool { return s == F32 }

// CheckAttentionPrecision refuses AttnFP16: the reference attention
// computes in float only.
func (h *HostDevice) CheckAttentionPrecision(s Storage, p AttnPrecision) error {
	switch p {
	case AttnAuto, AttnFP32:
		return nil
	}
	return fmt.Errorf("kernels: attention precision %v: the pure-Go backend has no fp16 attention (want auto or fp32)", p)
}

// WeightLayout is AnyLayout: the reference product reads B as stored, and
// converting weights at load would only cost memory.
func (h *HostDevice) WeightLayout() WeightLayout { return AnyLayout }

// Alloc returns size zeroed bytes, backed by uint64s so that float32 and
// int64 views of them are aligned.
func (h *HostDevice) Alloc(size int) (Buf, error) {
	if size < 0 {
		return Buf{}, fmt.Errorf("kernels: negative allocation %d", size)
	}
	words := make([]uint64, (size+7)/8)
	var b []byte
	if len(words) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)[:size]
	}
	return Buf{Host: b}, nil
}

// Release does nothing: host memory goes with its last reference.
func (h *HostDevice) Release(Buf) {}

// Write copies src into b at byte off.
func (h *HostDevice) Write(b Buf, off int, src []byte) error {
	if off < 0 || off+len(src) > len(b.Host) {
		return fmt.Errorf("kernels: write of %d bytes at %d into a %d-byte buffer", len(src), off, len(b.Host))
	}
	copy(b.Host[off:], src)
	return nil
}

// Read copies b's bytes from off into dst.
func (h *HostDevice) Read(b Buf, off int, dst []byte) error {
	if off < 0 || off+len(dst) > len(b.Host) {
		return fmt.Errorf("kernels: read of %d bytes at %d from a %d-byte buffer", len(dst), off, len(b.Host))
	}
	copy(dst, b.Host[off:])
	return nil
}

// Finish closes the last labelled stretch; host work is already done.
func (h *HostDevice) Finish() error {
	h.SetLabel("")
	return nil
}

// SetLabel closes the previous stretch's timing and starts the next one.
func (h *HostDevice) SetLabel(l string) {
	if h.Timing == nil {
		return
	}
	now := time.Now()
	if h.label != "" {
		h.Timing(h.label, now.Sub(h.start))
	}
	h.label, h.start = l, now
}

// hostBytes is b's bytes from element b.Off of esize bytes on.
func hostBytes(b Buf, esize int) []byte {
	o := b.Off * esize
	if o > len(b.Host) {
		return nil
	}
	return b.Host[o:]
}

// hostF32 views b from element b.Off as float32s; nil for an unset Buf.
func hostF32(b Buf) []float32 {
	n := len(b.Host) / 4
	if n == 0 || b.Off >= n {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b.Host[0])), n)[b.Off:]
}

// hostI64 views b from element b.Off as int64s.
func hostI64(b Buf) []int64 {
	n := len(b.Host) / 8
	if n == 0 || b.Off >= n {
		return nil
	}
	return unsafe.Slice((*int64)(unsafe.Pointer(&b.Host[0])), n)[b.Off:]
}

// hostU32 views b from element b.Off as uint32s.
func hostU32(b Buf) []uint32 {
	n := len(b.Host) / 4
	if n == 0 || b.Off >= n {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b.Host[0])), n)[b.Off:]
}

func f32only(s Storage) error {
	if s != F32 {
		return fmt.Errorf("kernels: the pure-Go device stores floats as float32 only")
	}
	return nil
}

// loadHost decodes the elements of a tensor of type et and shape at b.
func loadHost(b Buf, et ElemType, shape []int) HostTensor {
	h := NewHostTensor(et, shape)
	n := h.Len()
	raw := hostBytes(b, et.Size())
	le := binary.LittleEndian
	for i := 0; i < n; i++ {
		switch et {
		case EF32:
			h.F[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		case EF16:
			h.F[i] = dtype.HalfToFloat32(le.Uint16(raw[2*i:]))
		case EI64:
			h.I[i] = int64(le.Uint64(raw[8*i:]))
		case EI32:
			h.I[i] = int64(int32(le.Uint32(raw[4*i:])))
		case EI8:
			h.I[i] = int64(int8(raw[i]))
		case EU8, EBool:
			h.I[i] = int64(raw[i])
		}
	}
	return h
}

// storeHost encodes t into b.
func storeHost(b Buf, t HostTensor) {
	raw := hostBytes(b, t.Type.Size())
	le := binary.LittleEndian
	for i := 0; i < t.Len(); i++ {
		switch t.Type {
		case EF32:
			le.PutUint32(raw[4*i:], math.Float32bits(t.F[i]))
		case EF16:
			le.PutUint16(raw[2*i:], dtype.Float32ToHalf(t.F[i]))
		case EI64:
			le.PutUint64(raw[8*i:], uint64(t.I[i]))
		case EI32:
			le.PutUint32(raw[4*i:], uint32(t.I[i]))
		case EI8, EU8:
			raw[i] = byte(t.I[i])
		case EBool:
			raw[i] = 0
			if t.I[i] != 0 {
				raw[i] = 1
			}
		}
	}
}

// hostIndices decodes n int32 or int64 indices at b.
func hostIndices(b Buf, it dtype.Type, n int) ([]int64, error) {
	out := make([]int64, n)
	switch it {
	case dtype.Int64:
		copy(out, hostI64(b)[:n])
	case dtype.Int32:
		raw := hostBytes(b, 4)
		for i := range out {
			out[i] = int64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
		}
	default:
		return nil, fmt.Errorf("kernels: index type %v; want int32 or int64", it)
	}
	return out, nil
}

// RunChain runs the chain's reference.
func (h *HostDevice) RunChain(c *Chain, outShape []int, ins []ElemArg, outs []Buf) error {
	hs := make([]HostTensor, len(ins))
	for i, in := range ins {
		hs[i] = loadHost(in.Buf, c.Inputs[i], in.Shape)
	}
	res, err := RunChainRef(c, outShape, hs)
	if err != nil {
		return err
	}
	for i, r := range res {
		storeHost(outs[i], r)
	}
	return nil
}

// MatMul runs MatMulRef.
func (h *HostDevice) MatMul(s Storage, a, b, c Buf, p MatMulParams) error {
	if err := f32only(s); err != nil {
		return err
	}
	return MatMulRef(hostF32(a), hostF32(b), hostF32(p.Bias), hostF32(c), p)
}

// MatMulQ runs MatMulQRef on the packed arrays where they lie.
func (h *HostDevice) MatMulQ(s Storage, a Buf, w QBuf, c Buf, p QMatMulParams) error {
	if err := f32only(s); err != nil {
		return err
	}
	if w.Group <= 0 || w.K <= 0 || w.N <= 0 || w.K%w.Group != 0 || w.K%8 != 0 {
		return fmt.Errorf("kernels: MatMulQ: stored weight [%d, %d] in groups of %d", w.K, w.N, w.Group)
	}
	q, pp := hostU32(w.Q), hostF32(w.P)
	if w.Layout == QLayoutTile4 {
		pk, err := UnpackQTile4(w.Format, w.Group, w.K, w.N, q, pp)
		if err != nil {
			return err
		}
		return MatMulQRef(hostF32(a), pk, hostF32(p.Bias), hostF32(c), p)
	}
	nw, np := w.N*w.K/8, w.N*2*(w.K/w.Group)
	if len(q) < nw || len(pp) < np {
		return fmt.Errorf("kernels: MatMulQ: the packed arrays hold %d words and %d parameters; [%d, %d] in groups of %d needs %d and %d",
			len(q), len(pp), w.K, w.N, w.Group, nw, np)
	}
	pk := &quant.Packed{Format: w.Format, Group: w.Group, K: w.K, N: w.N, Words: q[:nw], Params: pp[:np]}
	return MatMulQRef(hostF32(a), pk, hostF32(p.Bias), hostF32(c), p)
}

// Conv2D runs Conv2DResRef (with p.Res and p.Scale); it needs no scratch.
func (h *HostDevice) Conv2D(s Storage, x, w, y, scratch Buf, p ConvParams) error {
	if err := f32only(s); err != nil {
		return err
	}
	return Conv2DResRef(hostF32(x), hostF32(w), hostF32(p.Bias), hostF32(p.Res), hostF32(p.Scale), hostF32(y), p)
}

// MaxPool runs PoolRef.
func (h *HostDevice) MaxPool(s Storage, x, y Buf, p PoolParams) error {
	if err := f32only(s); err != nil {
		return err
	}
	return PoolRef(hostF32(x), hostF32(y), p, false)
}

// AvgPool runs PoolRef.
func (h *HostDevice) AvgPool(s Storage, x, y Buf, p PoolParams) error {
	if err := f32only(s); err != nil {
		return err
	}
	return PoolRef(hostF32(x), hostF32(y), p, true)
}

// GlobalAvgPool runs GlobalPoolRef.
func (h *HostDevice) GlobalAvgPool(s Storage, x, y Buf, planes, hw int) error {
	if err := f32only(s); err != nil {
		return err
	}
	return GlobalPoolRef(hostF32(x), hostF32(y), planes, hw, true)
}

// GlobalMaxPool runs GlobalPoolRef.
func (h *HostDevice) GlobalMaxPool(s Storage, x, y Buf, planes, hw int) error {
	if err := f32only(s); err != nil {
		return err
	}
	return GlobalPoolRef(hostF32(x), hostF32(y), planes, hw, false)
}

// LayerNorm runs LayerNormRef.
func (h *HostDevice) LayerNorm(p NormParams, x, scale, bias, out Buf) error {
	if err := f32only(p.Storage); err != nil {
		return err
	}
	if err := f32only(p.Weights); err != nil {
		return err
	}
	LayerNormRef(p, hostF32(x), hostF32(scale), hostF32(bias), hostF32(out))
	return nil
}

// AddLayerNorm runs AddLayerNormRef.
func (h *HostDevice) AddLayerNorm(p NormParams, x, res, sum, scale, bias, out Buf) error {
	if err := f32only(p.Storage); err != nil {
		return err
	}
	AddLayerNormRef(p, hostF32(x), hostF32(res), hostF32(sum), hostF32(scale), hostF32(bias), hostF32(out))
	return nil
}

// AddRMSNorm runs AddRMSNormRef.
func (h *HostDevice) AddRMSNorm(p NormParams, x, res, sum, scale, out Buf) error {
	if err := f32only(p.Storage); err != nil {
		return err
	}
	AddRMSNormRef(p, hostF32(x), hostF32(res), hostF32(sum), hostF32(scale), hostF32(out))
	return nil
}

// GroupNorm runs GroupNormRef.
func (h *HostDevice) GroupNorm(p GroupNormParams, x, scale, bias, out Buf) error {
	if err := f32only(p.Storage); err != nil {
		return err
	}
	return GroupNormRef(p, hostF32(x), hostF32(scale), hostF32(bias), hostF32(out))
}

// Softmax runs SoftmaxRef.
func (h *HostDevice) Softmax(s Storage, x, out Buf, outer, n, inner int) error {
	if err := f32only(s); err != nil {
		return err
	}
	SoftmaxRef(s, false, hostF32(x), hostF32(out), outer, n, inner)
	return nil
}

// LogSoftmax runs SoftmaxRef.
func (h *HostDevice) LogSoftmax(s Storage, x, out Buf, outer, n, inner int) error {
	if err := f32only(s); err != nil {
		return err
	}
	SoftmaxRef(s, true, hostF32(x), hostF32(out), outer, n, inner)
	return nil
}

// Reduce runs ReduceRef.
func (h *HostDevice) Reduce(s Storage, op ReduceOp, x Buf, shape, axes []int, out Buf) error {
	if err := f32only(s); err != nil {
		return err
	}
	return ReduceRef(s, op, hostF32(x), shape, axes, hostF32(out))
}

// ArgReduce runs ArgReduceRef.
func (h *HostDevice) ArgReduce(s Storage, isMin, last bool, x Buf, outer, r, inner int, out Buf) error {
	if err := f32only(s); err != nil {
		return err
	}
	if outer*inner == 0 {
		return nil
	}
	if r == 0 {
		return fmt.Errorf("kernels: arg-reduction over an empty axis")
	}
	ArgReduceRef(isMin, last, hostF32(x), outer, r, inner, hostI64(out))
	return nil
}

// CumSum runs CumSumRef.
func (h *HostDevice) CumSum(s Storage, x, out Buf, outer, r, inner int, exclusive, reverse bool) error {
	if err := f32only(s); err != nil {
		return err
	}
	CumSumRef(s, hostF32(x), hostF32(out), outer, r, inner, exclusive, reverse)
	return nil
}

// Copy runs CopyRef.
func (h *HostDevice) Copy(esize int, dst Buf, dv View, src Buf, sv View) error {
	return CopyRef(esize, hostBytes(dst, esize), dv, hostBytes(src, esize), sv)
}

// Gather runs GatherRef.
func (h *HostDevice) Gather(esize int, data Buf, shape []int, axis int, indices Buf, it dtype.Type, nidx int, dst Buf) error {
	ix, err := hostIndices(indices, it, nidx)
	if err != nil {
		return err
	}
	return GatherRef(esize, hostBytes(data, esize), shape, axis, ix, hostBytes(dst, esize))
}

// GatherElements runs GatherElementsRef.
func (h *HostDevice) GatherElements(esize int, data Buf, dataShape []int, axis int, indices Buf, it dtype.Type, idxShape []int, dst Buf) error {
	n := 1
	for _, d := range idxShape {
		n *= d
	}
	ix, err := hostIndices(indices, it, n)
	if err != nil {
		return err
	}
	return GatherElementsRef(esize, hostBytes(data, esize), dataShape, axis, ix, idxShape, hostBytes(dst, esize))
}

// Pad runs PadRef.
func (h *HostDevice) Pad(esize int, src Buf, shape, pads []int, mode PadMode, value uint64, dst Buf) error {
	return PadRef(esize, hostBytes(src, esize), shape, pads, mode, value, hostBytes(dst, esize))
}

// KVWrite runs KVWriteRef; sv.Shape[2] positions are read from pos.
func (h *HostDevice) KVWrite(esize int, cache Buf, cv View, src Buf, sv View, pos Buf, pt dtype.Type, perBatch bool) error {
	if len(sv.Shape) != 4 {
		return fmt.Errorf("kernels: KVWrite: new rows of rank %d; want 4", len(sv.Shape))
	}
	n := sv.Shape[2]
	if perBatch {
		n *= sv.Shape[0]
	}
	ix, err := hostIndices(pos, pt, n)
	if err != nil {
		return err
	}
	return KVWriteRef(esize, hostBytes(cache, esize), cv, hostBytes(src, esize), sv, ix, perBatch)
}

// Attention runs AttentionRef.
func (h *HostDevice) Attention(s Storage, q, k, v, o Buf, p AttentionParams) error {
	if err := f32only(s); err != nil {
		return err
	}
	return AttentionLSERef(hostF32(q), hostF32(k), hostF32(v), hostF32(p.Mask), hostF32(o), hostF32(p.LSE), p)
}
