package kernels

import (
	"fmt"

	"github.com/tlite/tlite/graph/dtype"
)

// Device is everything a lowering needs from the hardware it runs on:
// memory, and one method per kernel family, all in Buf terms. It is the
// engine's only seam to compute. Two implementations exist: *Lib, which
// enqueues the OpenCL kernels, and *HostDevice, which runs the families'
// pure-Go references over host memory (the CPU as just another device).
// A new op is kernels/<family>.{cl,go,_test.go}, a method here implemented
// by both, and engine/lower_<family>.go.
//
// Launch methods enqueue and may return before the work is done; Finish
// waits. A Buf passed to Write, Read or Release is an allocation as Alloc
// returned it; every other Buf may start at any element offset.
//
// Room left for the systems of shared/systems-spec.md §0.3, deliberately
// not built yet:
//   - H1 (slot read/write): host<->device copies of given K/V rows attach
//     here as one batched method over a cache Buf, a slot list and a row
//     size, next to KVWrite; the cache layout [capacity, heads, head_dim]
//     makes one slot of one layer contiguous, so it needs no new kernel.
//   - H2 (layer hook): a host callback between layers is no device method.
//     It attaches in the engine as a host step that calls Finish, and then
//     uses Read/Write and the H1 copies.
//   - H3 (attention statistics): an optional statistics Buf in
//     AttentionParams (like Mask, unset by default), filled by a second
//     kernel from the per-row log-sum-exp the attention kernel keeps.
//   - H5 (LoRA side branch): y += (x·A)·B·(α/r) attaches as an epilogue of
//     MatMul and MatMulQ through fields of their params (A, B, rank,
//     scale), unset by default, so that existing launches do not change.
type Device interface {
	// Name names the device kind for messages ("OpenCL", "pure-Go").
	Name() string
	// Supports reports whether this device computes on activations
	// stored as s.
	Supports(s Storage) bool
	// CheckAttentionPrecision reports whether attention launches on
	// activations stored as s can have arithmetic p (AttnAuto and
	// AttnFP32 always can); sessions call it at Open.
	CheckAttentionPrecision(s Storage, p AttnPrecision) error
	// WeightLayout is the constant-weight layout MatMul runs fastest on;
	// the engine stores weights so at load when it can.
	WeightLayout() WeightLayout
	// QuantLayout is the layout of packed 4-bit weights MatMulQ reads
	// fastest; the engine repacks them so at load when it can.
	QuantLayout() QLayout

	// Alloc returns a new allocation of size bytes.
	Alloc(size int) (Buf, error)
	// Release frees an allocation; releasing a zero Buf does nothing.
	Release(b Buf)
	// Write copies src into allocation b from byte off on.
	Write(b Buf, off int, src []byte) error
	// Read copies allocation b's bytes from byte off on into dst.
	Read(b Buf, off int, dst []byte) error
	// Finish waits for everything enqueued.
	Finish() error
	// SetLabel names the launches that follow, for profiles.
	SetLabel(label string)

	// RunChain computes an element-wise chain (see Chain).
	RunChain(c *Chain, outShape []int, ins []ElemArg, outs []Buf) error
	// MatMul computes c = a·b (+ p.Bias).
	MatMul(s Storage, a, b, c Buf, p MatMulParams) error
	// MatMulQ computes c = a·w (+ p.Bias) with w a packed 4-bit weight.
	MatMulQ(s Storage, a Buf, w QBuf, c Buf, p QMatMulParams) error
	// Conv2D computes a 2-D convolution; scratch, when set, may hold the
	// im2col matrix.
	Conv2D(s Storage, x, w, y, scratch Buf, p ConvParams) error
	// MaxPool, AvgPool, GlobalAvgPool and GlobalMaxPool pool NCHW planes.
	MaxPool(s Storage, x, y Buf, p PoolParams) error
	AvgPool(s Storage, x, y Buf, p PoolParams) error
	GlobalAvgPool(s Storage, x, y Buf, planes, hw int) error
	GlobalMaxPool(s Storage, x, y Buf, planes, hw int) error
	// LayerNorm normalises rows of p.Cols; bias may be unset.
	LayerNorm(p NormParams, x, scale, bias, out Buf) error
	// AddLayerNorm and AddRMSNorm normalise x (+ res), writing the sum to
	// sum when it is set.
	AddLayerNorm(p NormParams, x, res, sum, scale, bias, out Buf) error
	AddRMSNorm(p NormParams, x, res, sum, scale, out Buf) error
	// GroupNorm normalises channel groups (InstanceNorm is one group per channel).
	GroupNorm(p GroupNormParams, x, scale, bias, out Buf) error
	// Softmax and LogSoftmax normalise axis n of [outer, n, inner].
	Softmax(s Storage, x, out Buf, outer, n, inner int) error
	LogSoftmax(s Storage, x, out Buf, outer, n, inner int) error
	// Reduce, ArgReduce and CumSum reduce or scan along axes.
	Reduce(s Storage, op ReduceOp, x Buf, shape, axes []int, out Buf) error
	ArgReduce(s Storage, isMin, last bool, x Buf, outer, r, inner int, out Buf) error
	CumSum(s Storage, x, out Buf, outer, r, inner int, exclusive, reverse bool) error
	// Copy, Gather, GatherElements and Pad move elements of esize bytes
	// between strided views; indices are int32 or int64.
	Copy(esize int, dst Buf, dv View, src Buf, sv View) error
	Gather(esize int, data Buf, shape []int, axis int, indices Buf, it dtype.Type, nidx int, dst Buf) error
	GatherElements(esize int, data Buf, dataShape []int, axis int, indices Buf, it dtype.Type, idxShape []int, dst Buf) error
	Pad(esize int, src Buf, shape, pads []int, mode PadMode, value uint64, dst Buf) error
	// VisionDevice: Resize, transposed and 3-D convolution, 3-D pooling
	// and MaxPool's Indices.
	VisionDevice
	// KVWrite writes new K or V rows into a cache at the given slots.
	KVWrite(esize int, cache Buf, cv View, src Buf, sv View, pos Buf, pt dtype.Type, perBatch bool) error
	// Attention computes fused scaled-dot-product attention.
	Attention(s Storage, q, k, v, o Buf, p AttentionParams) error
	// AttentionStats sums each key's softmax probabilities over the rows
	// of an Attention call that wrote p.LSE (see attnstats.go).
	AttentionStats(s Storage, q, k, lse, sum, count, peak Buf, p AttentionParams) error
	// AttentionStatsAcc adds those sums, over the query heads and
	// weighted, into per-key totals kept across calls, and keeps each
	// key's peak probability there (see attnstats.go).
	AttentionStatsAcc(s Storage, q, k, lse, sum, count, peak Buf, p AttentionParams, weight float32, addCount bool) error
	// Rotary applies a rotary position embedding (see RotaryParams) to a
	// and, unless it is the zero RotaryTensor, b.
	Rotary(p RotaryParams, cos, sin Buf, a, b RotaryTensor) error
}

// WeightLayout is a layout of a matrix product's constant B operand.
type WeightLayout int

const (
	// AnyLayout: no preference; weights stay as the model stores them.
	AnyLayout WeightLayout = iota
	// LayoutKN is B as [K, N] (TransB false).
	LayoutKN
	// LayoutNK is B as [N, K] (TransB true).
	LayoutNK
)

var (
	_ Device = (*Lib)(nil)
	_ Device = (*HostDevice)(nil)
)

// WeightLayout is LayoutNK or LayoutKN as PrefersTransB says.
func (l *Lib) WeightLayout() WeightLayout {
	if l.PrefersTransB() {
		return LayoutNK
	}
	return LayoutKN
}

// Name is "OpenCL".
func (l *Lib) Name() string { return "OpenCL" }

// Supports is true for both storages: kernels convert fp16 on load and
// store where the device lacks cl_khr_fp16.
func (l *Lib) Supports(Storage) bool { return true }

// Alloc allocates size bytes of device memory.
func (l *Lib) Alloc(size int) (Buf, error) {
	m, err := l.dev.Alloc(size)
	if err != nil {
		return Buf{}, err
	}
	return Buf{Mem: m}, nil
}

// Release frees b's device memory.
func (l *Lib) Release(b Buf) {
	if b.Mem != nil {
		b.Mem.Release()
	}
}

// Write copies src to b at byte off.
func (l *Lib) Write(b Buf, off int, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if b.Mem == nil {
		return fmt.Errorf("kernels: write of %d bytes to no device buffer", len(src))
	}
	return l.dev.Write(b.Mem, off, src)
}

// Read copies b's bytes at byte off into dst.
func (l *Lib) Read(b Buf, off int, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	if b.Mem == nil {
		return fmt.Errorf("kernels: read of %d bytes from no device buffer", len(dst))
	}
	return l.dev.Read(b.Mem, off, dst)
}

// Finish waits for the device's queue, then reports a fault a kernel
// marked since the last Finish (see fault.go).
func (l *Lib) Finish() error {
	if err := l.dev.Finish(); err != nil {
		return err
	}
	return l.checkFaults()
}

// SetLabel names the launches that follow in the device's profile.
func (l *Lib) SetLabel(label string) { l.label = label; l.dev.SetLabel(label) }
