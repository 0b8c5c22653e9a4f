package kernels

import (
	_ "embed"
	"fmt"
	"math"
	"strings"

	"github.com/tlite/tlite/opencl"
)

//go:embed attention.cl
var attentionSrc string

// attentionProgSrc is the attention family's program text: halfmath.cl's
// half arithmetic layer (for the GPU kernels' half path), then
// attention.cl. Joined once (see matmulProgSrc).
var attentionProgSrc = halfMathSrc + "\n" + attentionSrc

// AttnLayout gives a [B, heads, S, D] tensor's element strides for batch,
// head and sequence; D is contiguous. The zero value means packed
// [B, heads, S, D].
type AttnLayout struct{ Batch, Head, Seq int }

func (a AttnLayout) orPacked(heads, seq, d int) AttnLayout {
	if a == (AttnLayout{}) {
		return AttnLayout{Batch: heads * seq * d, Head: seq * d, Seq: d}
	}
	return a
}

// AttentionParams describes fused scaled-dot-product attention:
//
//	O[b,h,i] = softmax_j(Scale * Q[b,h,i]·K[b,g,j] + Mask[b,h,i,j]) V[b,g,j]
//
// with g = h / (Heads/KVHeads) (grouped-query attention), j < SeqKV, and,
// when Causal, j <= Past + i (query i is token Past+i of the sequence).
type AttentionParams struct {
	Batch, Heads, KVHeads int
	SeqQ, SeqKV, HeadDim  int
	// Scale multiplies the scores; 0 means 1/sqrt(HeadDim).
	Scale  float32
	Causal bool
	Past   int
	// Q, K, V and O layouts. K and V with Seq = HeadDim and Head = the
	// cache's capacity times HeadDim read a KV cache in place; O with
	// Head = HeadDim and Seq = Heads*HeadDim writes [B, SeqQ, Heads, D].
	Q, K, V, O AttnLayout
	// Mask, when Mask.Mem is set, is an additive mask in the activation
	// storage, element (b, h, i, j) at b*MaskStrides[0] + h*MaskStrides[1] +
	// i*MaskStrides[2] + j*MaskStrides[3]; a stride of 0 broadcasts (a
	// [1, 1, Sq, Skv] mask is strides (0, 0, Skv, 1)). A mask value at or
	// below MaskedF32 (fp32 storage) or MaskedF16 (fp16 storage) replaces
	// the score instead of being added, so that a row whose keys are all
	// masked with the most negative float averages V uniformly, as PyTorch
	// computes it, in both storages; -inf still gives a key weight 0.
	Mask        Buf
	MaskStrides [4]int
	// LSE, when set, receives each query row's log-sum-exp of its scores
	// (after scale and mask), fp32 whatever the storage, packed
	// [Batch, Heads, SeqQ]; -inf for a row that sees no key. Row i's
	// probability of key j is then exp(score(i, j) - LSE[i]), which is what
	// AttentionStats reads.
	LSE Buf
	// Precision is the arithmetic of the GPU attention kernels (attn_wg,
	// attn_split with attn_combine, attn_qtile); the zero value,
	// AttnAuto, is the Lib's default (SetAttentionHalf). A launch that
	// asks for AttnFP16 where it cannot have it fails (see
	// Lib.CheckAttentionPrecision).
	Precision AttnPrecision
}

// AttnPrecision selects the arithmetic of the GPU attention kernels. It
// is a launch parameter rather than a Lib setting so that sessions sharing
// a Lib (and its compiled programs) may each choose their own: each
// precision is a program of its own, keyed by its build options.
type AttnPrecision uint8

const (
	// AttnAuto is the Lib's default: half arithmetic where the device
	// has cl_khr_fp16 and activations are stored in fp16, unless
	// SetAttentionHalf(false) turned it off; fp32 otherwise.
	AttnAuto AttnPrecision = iota
	// AttnFP32 computes in fp32 whatever the device and storage.
	AttnFP32
	// AttnFP16 computes in half (attention.cl's ATT_HALF; its accuracy is
	// stated and tested in attnhalf_test.go). It needs fp16 storage, a
	// device with cl_khr_fp16 and a GPU (the CPU variants attn_row and
	// attn_lanes have no half path); elsewhere a launch fails.
	AttnFP16
)

// String names p as ParseAttnPrecision reads it.
func (p AttnPrecision) String() string {
	switch p {
	case AttnAuto:
		return "auto"
	case AttnFP32:
		return "fp32"
	case AttnFP16:
		return "fp16"
	}
	return fmt.Sprintf("AttnPrecision(%d)", uint8(p))
}

// ParseAttnPrecision reads "auto" (or ""), "fp32" or "fp16".
func ParseAttnPrecision(s string) (AttnPrecision, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return AttnAuto, nil
	case "fp32", "f32":
		return AttnFP32, nil
	case "fp16", "f16", "half":
		return AttnFP16, nil
	}
	return AttnAuto, fmt.Errorf("attention precision %q: want auto, fp32 or fp16", s)
}

// CheckAttentionPrecision reports whether attention launches in storage s
// can have precision p on this Lib's device: AttnFP16 needs fp16 storage,
// cl_khr_fp16 and a GPU (whose kernels have the half path). AttnAuto and
// AttnFP32 are always possible. Sessions call it at Open so that a
// request the device cannot honour fails there, not at the first run.
func (l *Lib) CheckAttentionPrecision(s Storage, p AttnPrecision) error {
	switch p {
	case AttnAuto, AttnFP32:
		return nil
	case AttnFP16:
	default:
		return fmt.Errorf("kernels: attention precision %v: not one of auto, fp32, fp16", p)
	}
	inf := l.info()
	switch {
	case s != F16:
		return fmt.Errorf("kernels: fp16 attention arithmetic needs fp16 activation storage (storage is %s)", s)
	case !inf.FP16:
		return fmt.Errorf("kernels: fp16 attention arithmetic: device %q has no cl_khr_fp16", inf.Name)
	case inf.Type != "GPU":
		return fmt.Errorf("kernels: fp16 attention arithmetic: device %q is a %s; only the GPU attention kernels have a half path", inf.Name, inf.Type)
	}
	return nil
}

// Mask values at or below these replace the score (see
// AttentionParams.Mask). MaskedF16 is fp16's lowest finite value, which is
// what the most negative float (-3.4e38, PyTorch's usual mask) saturates to
// in fp16 storage: added to a score it would not swallow it as -3.4e38
// does, and a fully masked row would be a softmax of its scores instead of
// a uniform average.
const (
	MaskedF32 = -1e30
	MaskedF16 = -65504
)

// norm fills defaults and validates.
func (p AttentionParams) norm() (AttentionParams, error) {
	for _, v := range []int{p.Batch, p.Heads, p.KVHeads, p.SeqQ, p.SeqKV, p.HeadDim, p.Past} {
		if v < 0 {
			return p, fmt.Errorf("negative size or position")
		}
	}
	if p.Heads > 0 && (p.KVHeads == 0 || p.Heads%p.KVHeads != 0) {
		return p, fmt.Errorf("%d query heads do not divide into %d kv heads", p.Heads, p.KVHeads)
	}
	if p.Scale == 0 && p.HeadDim > 0 {
		p.Scale = float32(1 / math.Sqrt(float64(p.HeadDim)))
	}
	p.Q = p.Q.orPacked(p.Heads, p.SeqQ, p.HeadDim)
	p.O = p.O.orPacked(p.Heads, p.SeqQ, p.HeadDim)
	p.K = p.K.orPacked(p.KVHeads, p.SeqKV, p.HeadDim)
	p.V = p.V.orPacked(p.KVHeads, p.SeqKV, p.HeadDim)
	for _, l := range []AttnLayout{p.Q, p.K, p.V, p.O} {
		if l.Batch < 0 || l.Head < 0 || l.Seq < 0 {
			return p, fmt.Errorf("negative layout stride")
		}
	}
	for _, s := range p.MaskStrides {
		if s < 0 {
			return p, fmt.Errorf("negative mask stride")
		}
	}
	return p, nil
}

func (p AttentionParams) empty() bool {
	return p.Batch == 0 || p.Heads == 0 || p.SeqQ == 0 || p.HeadDim == 0
}

// operands lists the tensors p touches in storage s.
func (p AttentionParams) operands(s Storage, q, k, v, o Buf, hasMask bool) []bufUse {
	if p.empty() {
		return nil
	}
	tensor := func(l AttnLayout, heads, seq int) int {
		return stridedEnd(p.Batch, l.Batch, heads, l.Head, seq, l.Seq, p.HeadDim, 1)
	}
	ops := []bufUse{
		{"Q", q, s, tensor(p.Q, p.Heads, p.SeqQ)},
		{"O", o, s, tensor(p.O, p.Heads, p.SeqQ)},
	}
	if p.SeqKV > 0 {
		ops = append(ops, bufUse{"K", k, s, tensor(p.K, p.KVHeads, p.SeqKV)},
			bufUse{"V", v, s, tensor(p.V, p.KVHeads, p.SeqKV)})
		if p.LSE.Mem != nil || p.LSE.Host != nil {
			ops = append(ops, bufUse{"LSE", p.LSE, F32, p.Batch * p.Heads * p.SeqQ})
		}
		if hasMask {
			ms := p.MaskStrides
			ops = append(ops, bufUse{"mask", p.Mask, s, stridedEnd(p.Batch, ms[0], p.Heads, ms[1], p.SeqQ, ms[2], p.SeqKV, ms[3])})
		}
	}
	return ops
}

// attnLanes is attn_lanes' query rows per work-item (RW in attention.cl).
const attnLanes = 16

// attnVariant picks the kernel for device type devType. On CPUs attn_lanes
// costs the same per work-item whether its 16 lanes hold 16 query rows or
// one, while attn_row pays per row a horizontal sum per key on top of the
// same multiply-adds. Measured on PoCL (2 cores, head sizes 64 and 128,
// 512-1024 keys) the two break even at about 4 rows per kv head (query
// heads in a group times Sq) and attn_lanes is ahead from 8 up, 1.7-3x at
// CLIP's 50-77; a decode step of plain multi-head attention (1 row) is 4-5x
// faster in attn_row.
func attnVariant(devType string, p AttentionParams) string {
	if devType == "GPU" {
		return "attn_wg"
	}
	if p.Heads/p.KVHeads*p.SeqQ >= 8 {
		return "attn_lanes"
	}
	return "attn_row"
}

// attnForce, when set by a test, selects the attention variant regardless of
// the device.
var attnForce string

// Split-K decode (attn_split + attn_combine): a GPU decode step (one query
// row per head) whose context is at least attnSplitMin keys is cut into
// ranges of attnSplitLen keys, one work-group each, so that a long context
// occupies the whole GPU rather than one work-group per head; up to
// attnSplitMaxGroup query heads per kv head share its K and V loads. The
// numbers are by construction (no GPU here): 256 keys keep a work-group's
// four 64-key blocks, and 512 keys give at least two ranges. Groups of up
// to 4 heads and head sizes up to attnGroupMaxDim keep attn_split and
// attn_qtile within 64 registers on the register gate's target (8 heads
// took 82-98).
var (
	attnSplitLen      = 256
	attnSplitMin      = 512
	attnSplitMaxGroup = 4
)

// attnGroupMaxDim is the largest head size attn_split and attn_qtile take
// (two head dimensions per work-item and row).
const attnGroupMaxDim = 128

// attnSplits reports whether p runs split-K on a GPU, and its ranges.
func attnSplits(devType string, p AttentionParams) (bool, int) {
	ns := (p.SeqKV + attnSplitLen - 1) / attnSplitLen
	ok := p.SeqQ == 1 && p.SeqKV > 0 && p.Heads/p.KVHeads <= attnSplitMaxGroup && p.HeadDim <= attnGroupMaxDim
	if attnForce == "attn_split" {
		return ok, ns
	}
	return ok && devType == "GPU" && p.SeqKV >= attnSplitMin && attnForce == "", ns
}

// Attention computes fused attention as p describes, all tensors in storage
// s. A KV cache is read in place through p.K and p.V; no score matrix is
// materialised. An empty output launches nothing.
func (l *Lib) Attention(s Storage, q, k, v, o Buf, p AttentionParams) error {
	if err := l.attention(s, q, k, v, o, p); err != nil {
		return fmt.Errorf("kernels: Attention B=%d H=%d/%d Sq=%d Skv=%d D=%d: %w", p.Batch, p.Heads, p.KVHeads, p.SeqQ, p.SeqKV, p.HeadDim, err)
	}
	return nil
}

func (l *Lib) attention(s Storage, q, k, v, o Buf, p AttentionParams) error {
	p, err := p.norm()
	if err != nil {
		return err
	}
	hasMask := p.Mask.Mem != nil
	if err := checkBufUses(p.operands(s, q, k, v, o, hasMask)); err != nil {
		return err
	}
	if p.empty() {
		return nil
	}
	if split, ns := attnSplits(l.info().Type, p); split {
		return l.attentionSplit(s, q, k, v, o, p, ns)
	}
	if attnQTiled(l.info().Type, p) {
		return l.attentionQTile(s, q, k, v, o, p)
	}
	name := attnVariant(l.info().Type, p)
	if attnForce != "" {
		name = attnForce
	}
	opts := attnOpts(s, p, "")
	if name == "attn_wg" {
		half, err := l.attnHalfOptions(s, p.Precision)
		if err != nil {
			return err
		}
		opts += " -DATT_GPU" + half
	} else if p.Precision == AttnFP16 {
		return fmt.Errorf("fp16 attention arithmetic: %s has no half path", name)
	}
	kern, err := l.kernel("attention", attentionProgSrc, opts, name)
	if err != nil {
		return err
	}
	// One work-item per work-group on CPUs, so that even a decode step's
	// handful of rows spreads over every core.
	var global, local []int
	switch name {
	case "attn_wg":
		global, local = []int{p.SeqQ * 64, p.Heads, p.Batch}, []int{64, 1, 1}
	case "attn_lanes":
		rows := p.Heads / p.KVHeads * p.SeqQ
		global, local = []int{(rows + attnLanes - 1) / attnLanes, p.KVHeads, p.Batch}, []int{1, 1, 1}
	default:
		global, local = []int{p.SeqQ, p.Heads, p.Batch}, []int{1, 1, 1}
	}
	return l.dev.Launch(kern, global, local, attnArgs(q, k, v, o, p)...)
}

// attnOpts are attention.cl's build options for storage s and p's head
// size, with a variant's own defines appended.
func attnOpts(s Storage, p AttentionParams, extra string) string {
	masked := MaskedF32
	if s == F16 {
		masked = MaskedF16
	}
	return fmt.Sprintf("%s -DHD=%d -DMASKED_AT=%ef%s", s.define(), p.HeadDim, float32(masked), extra)
}

// attnHalfOptions are the GPU attention kernels' (attn_wg, attn_split
// with attn_combine, attn_qtile) extra build options in storage s at
// precision p: their half path (attention.cl's ATT_HALF, with
// -cl-mad-enable) for AttnFP16, and for AttnAuto where the device has
// cl_khr_fp16, the storage is fp16 and the Lib has not been told
// otherwise (SetAttentionHalf); none for AttnFP32. The half path is built
// in its exact emulation when a test asks (halfEmu) or the Lib was opened
// with TLITE_KERNEL_HALF_EMU (l.attnEmu). AttnFP16 where the Lib cannot
// have it is an error (CheckAttentionPrecision).
func (l *Lib) attnHalfOptions(s Storage, p AttnPrecision) (string, error) {
	switch p {
	case AttnFP32:
		return "", nil
	case AttnFP16:
		if err := l.CheckAttentionPrecision(s, p); err != nil {
			return "", err
		}
		return attnHalfOpts(s, true, l.attnEmu), nil
	case AttnAuto:
		return attnHalfOpts(s, l.info().FP16 && !l.attnHalfOff, l.attnEmu), nil
	}
	return "", l.CheckAttentionPrecision(s, p)
}

// attnHalfOpts is attnHalfOptions for a device with (half) or without
// usable half arithmetic; emu builds the half path's exact emulation where
// it is selected. fp32 storage keeps fp32 arithmetic: its inputs carry
// more than half's 11 bits.
func attnHalfOpts(s Storage, half, emu bool) string {
	switch {
	case s != F16:
		return ""
	case halfEmu, half && emu:
		return " -DATT_HALF -DHALF_EMU"
	case half:
		return " -DATT_HALF -DHALF_MATH -cl-mad-enable"
	}
	return ""
}

// SetAttentionHalf turns the GPU attention kernels' half arithmetic on
// (the default) or off for launches at AttnAuto (AttentionParams.
// Precision; AttnFP32 and AttnFP16 launches ignore it). It applies where
// the device has cl_khr_fp16 and activations are stored in fp16; off,
// those kernels compute in fp32 from the fp16 storage, as on a device
// without cl_khr_fp16. The half path's accuracy is stated and tested in
// attnhalf_test.go. Programs already built stay; launches after the call
// pick by the new setting. It is the Lib's, shared by every session on it:
// a session chooses its own with engine.Options.AttentionPrecision.
func (l *Lib) SetAttentionHalf(on bool) {
	l.attnHalfOff = !on
}

// attnArgs are the arguments every attention kernel starts with: Q, K, V
// and O with their strides, the mask, the sizes and the LSE output. A
// missing mask or LSE is passed as a placeholder buffer with its flag 0
// (never read or written); a variant appends its own arguments.
func attnArgs(q, k, v, o Buf, p AttentionParams, extra ...any) []any {
	mask, hm := p.Mask, int32(1)
	if p.Mask.Mem == nil {
		mask, hm = q, 0
	}
	causal := int32(0)
	if p.Causal {
		causal = 1
	}
	lse, hl := p.LSE, int32(1)
	if lse.Mem == nil {
		lse, hl = o, 0
	}
	i32 := func(v int) int32 { return int32(v) }
	ms := p.MaskStrides
	return append([]any{
		q.Mem, i32(q.Off), i32(p.Q.Batch), i32(p.Q.Head), i32(p.Q.Seq),
		k.Mem, i32(k.Off), i32(p.K.Batch), i32(p.K.Head), i32(p.K.Seq),
		v.Mem, i32(v.Off), i32(p.V.Batch), i32(p.V.Head), i32(p.V.Seq),
		o.Mem, i32(o.Off), i32(p.O.Batch), i32(p.O.Head), i32(p.O.Seq),
		mask.Mem, i32(mask.Off), i32(ms[0]), i32(ms[1]), i32(ms[2]), i32(ms[3]), hm,
		i32(p.Heads), i32(p.KVHeads), i32(p.SeqQ), i32(p.SeqKV), i32(p.Past), causal, p.Scale,
		lse.Mem, i32(lse.Off), hl,
	}, extra...)
}

// attnQTiled reports whether p runs attn_qtile: GPU prefill (more than
// one query row per head) with at most attnSplitMaxGroup query heads per
// kv head and heads up to attnGroupMaxDim, or forced by a test.
func attnQTiled(devType string, p AttentionParams) bool {
	ok := p.SeqQ > 1 && p.Heads/p.KVHeads <= attnSplitMaxGroup && p.HeadDim <= attnGroupMaxDim
	if attnForce == "attn_qtile" {
		return ok
	}
	return ok && devType == "GPU" && attnForce == ""
}

// attnTileRows is attn_qtile's query positions per work-group (ATT_TQ):
// four rows per tile in all, heads of the group times positions.
func attnTileRows(group int) int {
	if group >= 4 {
		return 1
	}
	return 4 / group
}

// attentionQTile launches attn_qtile for a checked prefill.
func (l *Lib) attentionQTile(s Storage, q, k, v, o Buf, p AttentionParams) error {
	group := p.Heads / p.KVHeads
	half, err := l.attnHalfOptions(s, p.Precision)
	if err != nil {
		return err
	}
	kern, err := l.kernel("attention", attentionProgSrc, attnOpts(s, p, fmt.Sprintf(" -DATT_GPU -DATT_G=%d", group)+half), "attn_qtile")
	if err != nil {
		return err
	}
	tq := attnTileRows(group)
	return l.dev.Launch(kern, []int{(p.SeqQ + tq - 1) / tq * 64, p.KVHeads, p.Batch}, []int{64, 1, 1}, attnArgs(q, k, v, o, p)...)
}

// attentionSplit launches attn_split over ns ranges of the keys and
// attn_combine, for a checked decode step (SeqQ 1). The partial results
// live in a scratch buffer the Lib keeps (B*H*ns*(HD+2) floats, grown on
// demand: under 1 MiB for 32 heads of 128 at 8k keys).
func (l *Lib) attentionSplit(s Storage, q, k, v, o Buf, p AttentionParams, ns int) error {
	half, err := l.attnHalfOptions(s, p.Precision)
	if err != nil {
		return err
	}
	opts := attnOpts(s, p, fmt.Sprintf(" -DATT_GPU -DATT_G=%d", p.Heads/p.KVHeads)+half)
	ks, err := l.kernel("attention", attentionProgSrc, opts, "attn_split")
	if err != nil {
		return err
	}
	kc, err := l.kernel("attention", attentionProgSrc, opts, "attn_combine")
	if err != nil {
		return err
	}
	part, err := l.attnScratch(4 * p.Batch * p.Heads * ns * (p.HeadDim + 2))
	if err != nil {
		return err
	}
	if err := l.dev.Launch(ks, []int{ns * 64, p.KVHeads, p.Batch}, []int{64, 1, 1},
		attnArgs(q, k, v, o, p, int32(attnSplitLen), part)...); err != nil {
		return err
	}
	lse, hl := p.LSE, int32(1)
	if lse.Mem == nil {
		lse, hl = o, 0
	}
	i32 := func(v int) int32 { return int32(v) }
	return l.dev.Launch(kc, []int{64, p.Heads, p.Batch}, []int{64, 1, 1},
		part, i32(ns), o.Mem, i32(o.Off), i32(p.O.Batch), i32(p.O.Head),
		lse.Mem, i32(lse.Off), hl, i32(p.Heads))
}

// attnScratch returns the Lib's split-K scratch buffer, at least size
// bytes. A larger request replaces it (launches already enqueued keep
// the old one alive: OpenCL releases a buffer only when its commands end).
func (l *Lib) attnScratch(size int) (*opencl.Buffer, error) {
	if l.attnPart != nil && l.attnPart.Size() >= size {
		return l.attnPart, nil
	}
	b, err := l.dev.Alloc(max(size, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("split-K scratch of %d bytes: %w", size, err)
	}
	if l.attnPart != nil {
		l.attnPart.Release()
	}
	l.attnPart = b
	return b, nil
}

// AttentionRef is the pure-Go reference for Attention on host tensors (mask
// nil for none; p.Mask is ignored), with a plain two-pass softmax in float64.
// The tensors are fp32, so mask values at or below MaskedF32 replace the
// score.
func AttentionRef(q, k, v, mask, o []float32, p AttentionParams) error {
	return AttentionLSERef(q, k, v, mask, o, nil, p)
}

// AttentionLSERef is AttentionRef that also writes each row's log-sum-exp
// into lse ([Batch, Heads, SeqQ]; nil for none), as p.LSE asks of
// Attention.
func AttentionLSERef(q, k, v, mask, o, lse []float32, p AttentionParams) error {
	p, err := p.norm()
	if err != nil {
		return fmt.Errorf("kernels: AttentionRef: %w", err)
	}
	have := map[string]int{"Q": len(q), "K": len(k), "V": len(v), "O": len(o), "mask": len(mask), "LSE": len(lse)}
	if lse != nil {
		p.LSE = Buf{Host: []byte{0}}
	}
	if err := checkSliceLens(p.operands(F32, Buf{}, Buf{}, Buf{}, Buf{}, mask != nil), have); err != nil {
		return fmt.Errorf("kernels: AttentionRef: %w", err)
	}
	if p.empty() {
		return nil
	}
	group := p.Heads / p.KVHeads
	scores := make([]float64, p.SeqKV)
	for b := 0; b < p.Batch; b++ {
		for h := 0; h < p.Heads; h++ {
			g := h / group
			for i := 0; i < p.SeqQ; i++ {
				qo := b*p.Q.Batch + h*p.Q.Head + i*p.Q.Seq
				oo := b*p.O.Batch + h*p.O.Head + i*p.O.Seq
				mx := math.Inf(-1)
				for j := 0; j < p.SeqKV; j++ {
					s := math.Inf(-1)
					if !p.Causal || j <= p.Past+i {
						ko := b*p.K.Batch + g*p.K.Head + j*p.K.Seq
						var dot float64
						for d := 0; d < p.HeadDim; d++ {
							dot += float64(q[qo+d]) * float64(k[ko+d])
						}
						s = dot * float64(p.Scale)
						if mask != nil {
							ms := p.MaskStrides
							m := float64(mask[b*ms[0]+h*ms[1]+i*ms[2]+j*ms[3]])
							if m <= MaskedF32 {
								s = m
							} else {
								s += m
							}
						}
					}
					scores[j] = s
					mx = math.Max(mx, s)
				}
				out := make([]float64, p.HeadDim)
				if lse != nil {
					lse[(b*p.Heads+h)*p.SeqQ+i] = float32(math.Inf(-1))
				}
				if !math.IsInf(mx, -1) {
					var sum float64
					for j := range scores {
						scores[j] = math.Exp(scores[j] - mx)
						sum += scores[j]
					}
					if lse != nil {
						lse[(b*p.Heads+h)*p.SeqQ+i] = float32(mx + math.Log(sum))
					}
					for j, w := range scores {
						vo := b*p.V.Batch + g*p.V.Head + j*p.V.Seq
						for d := range out {
							out[d] += w / sum * float64(v[vo+d])
						}
					}
				}
				for d, x := range out {
					o[oo+d] = float32(x)
				}
			}
		}
	}
	return nil
}
