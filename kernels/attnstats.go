package kernels

import (
	"fmt"
	"math"
)

// Attention statistics: how much probability each key received from the
// query rows of one attention call, and how many rows could attend it
// (LLMS's information density is their ratio, averaged over heads and
// layers). The statistics reuse the rows' log-sum-exp that Attention
// writes to AttentionParams.LSE, so they cost one more pass of dot
// products over the keys and no softmax.

// statsOperands lists what AttentionStats reads and writes.
func (p AttentionParams) statsOperands(s Storage, q, k, lse, sum, count, peak Buf, hasMask bool) []bufUse {
	if p.empty() || p.SeqKV == 0 {
		return nil
	}
	tensor := func(l AttnLayout, heads, seq int) int {
		return stridedEnd(p.Batch, l.Batch, heads, l.Head, seq, l.Seq, p.HeadDim, 1)
	}
	n := p.Batch * p.Heads * p.SeqKV
	ops := []bufUse{
		{"Q", q, s, tensor(p.Q, p.Heads, p.SeqQ)},
		{"K", k, s, tensor(p.K, p.KVHeads, p.SeqKV)},
		{"LSE", lse, F32, p.Batch * p.Heads * p.SeqQ},
		{"sum", sum, F32, n},
		{"count", count, F32, n},
		{"peak", peak, F32, n},
	}
	if hasMask {
		ms := p.MaskStrides
		ops = append(ops, bufUse{"mask", p.Mask, s, stridedEnd(p.Batch, ms[0], p.Heads, ms[1], p.SeqQ, ms[2], p.SeqKV, ms[3])})
	}
	return ops
}

// AttentionStats computes, for the attention p describes (Q, K, mask,
// scale and causality as Attention took them; p.LSE is ignored), per batch,
// query head and key j:
//
//	sum[b,h,j]   = Σ_i exp(score(b,h,i,j) - lse[b,h,i])
//	peak[b,h,j]  = max_i exp(score(b,h,i,j) - lse[b,h,i])   (0 with no row)
//	count[b,h,j] = #{i : row i may attend key j}
//
// where lse is what Attention wrote to p.LSE for the same call, and a row
// may attend a key when causality allows it and its mask value is finite
// and above the replace threshold (MaskedF32 or MaskedF16). lse, sum,
// count and peak are fp32 whatever s is; sum, count and peak are [Batch,
// Heads, SeqKV].
func (l *Lib) AttentionStats(s Storage, q, k, lse, sum, count, peak Buf, p AttentionParams) error {
	if err := l.attentionStats(s, q, k, lse, sum, count, peak, p); err != nil {
		return fmt.Errorf("kernels: AttentionStats B=%d H=%d/%d Sq=%d Skv=%d D=%d: %w", p.Batch, p.Heads, p.KVHeads, p.SeqQ, p.SeqKV, p.HeadDim, err)
	}
	return nil
}

// statsOneItem launches the statistics kernel with one work-item per
// work-group on CPU devices (the old launch; benchmarks set it).
var statsOneItem = false

// statsBuildOptions are the build options of the statistics kernels: the
// storage, the head size, the storage's masked-score threshold and, for
// the GPU form, ATT_GPU.
func statsBuildOptions(s Storage, headDim int, gpu bool) string {
	masked := MaskedF32
	if s == F16 {
		masked = MaskedF16
	}
	opts := fmt.Sprintf("%s -DHD=%d -DMASKED_AT=%ef", s.define(), headDim, float32(masked))
	if gpu {
		opts += " -DATT_GPU"
	}
	return opts
}

func (l *Lib) attentionStats(s Storage, q, k, lse, sum, count, peak Buf, p AttentionParams) error {
	p, err := p.norm()
	if err != nil {
		return err
	}
	hasMask := p.Mask.Mem != nil
	if err := checkBufUses(p.statsOperands(s, q, k, lse, sum, count, peak, hasMask)); err != nil {
		return err
	}
	if p.empty() || p.SeqKV == 0 {
		return nil
	}
	kern, err := l.kernel("attention", attentionProgSrc, statsBuildOptions(s, p.HeadDim, l.info().Type == "GPU"), "attn_colstats")
	if err != nil {
		return err
	}
	mask, hm := p.Mask, int32(1)
	if !hasMask {
		mask, hm = q, 0 // placeholder, never read
	}
	causal := int32(0)
	if p.Causal {
		causal = 1
	}
	i32 := func(v int) int32 { return int32(v) }
	ms := p.MaskStrides
	// The work-items are independent (no barriers). On CPUs a work-group
	// holds up to 64 consecutive keys (the largest power of two dividing
	// SeqKV): with one item per group, as attention uses there, PoCL's
	// per-group overhead made a decode step's statistics cost about as
	// much as the rest of the step (BenchmarkAttentionStatsLocal compares
	// the two; statsOneItem restores the old launch).
	var local []int
	if l.info().Type != "GPU" {
		local = []int{1, 1, 1}
		if !statsOneItem {
			w := 64
			for p.SeqKV%w != 0 {
				w /= 2
			}
			local = []int{w, 1, 1}
		}
	}
	return l.dev.Launch(kern, []int{p.SeqKV, p.Heads, p.Batch}, local,
		q.Mem, i32(q.Off), i32(p.Q.Batch), i32(p.Q.Head), i32(p.Q.Seq),
		k.Mem, i32(k.Off), i32(p.K.Batch), i32(p.K.Head), i32(p.K.Seq),
		mask.Mem, i32(mask.Off), i32(ms[0]), i32(ms[1]), i32(ms[2]), i32(ms[3]), hm,
		lse.Mem, i32(lse.Off), sum.Mem, i32(sum.Off), count.Mem, i32(count.Off), peak.Mem, i32(peak.Off),
		i32(p.Heads), i32(p.KVHeads), i32(p.SeqQ), i32(p.SeqKV), i32(p.Past), causal, p.Scale)
}

// AttentionStatsRef is the pure-Go reference for AttentionStats on host
// tensors (mask nil for none; p.Mask is ignored), in float64 over fp32
// tensors: mask values at or below MaskedF32 replace the score.
func AttentionStatsRef(q, k, mask, lse, sum, count, peak []float32, p AttentionParams) error {
	p, err := p.norm()
	if err != nil {
		return fmt.Errorf("kernels: AttentionStatsRef: %w", err)
	}
	have := map[string]int{"Q": len(q), "K": len(k), "LSE": len(lse), "sum": len(sum), "count": len(count), "peak": len(peak), "mask": len(mask)}
	if err := checkSliceLens(p.statsOperands(F32, Buf{}, Buf{}, Buf{}, Buf{}, Buf{}, Buf{}, mask != nil), have); err != nil {
		return fmt.Errorf("kernels: AttentionStatsRef: %w", err)
	}
	if p.empty() || p.SeqKV == 0 {
		return nil
	}
	group := p.Heads / p.KVHeads
	for b := 0; b < p.Batch; b++ {
		for h := 0; h < p.Heads; h++ {
			g := h / group
			for j := 0; j < p.SeqKV; j++ {
				var s, c, pk float64
				ko := b*p.K.Batch + g*p.K.Head + j*p.K.Seq
				for i := 0; i < p.SeqQ; i++ {
					if p.Causal && j > p.Past+i {
						continue
					}
					qo := b*p.Q.Batch + h*p.Q.Head + i*p.Q.Seq
					var dot float64
					for d := 0; d < p.HeadDim; d++ {
						dot += float64(q[qo+d]) * float64(k[ko+d])
					}
					sc, open := dot*float64(p.Scale), true
					if mask != nil {
						ms := p.MaskStrides
						m := float64(mask[b*ms[0]+h*ms[1]+i*ms[2]+j*ms[3]])
						if m <= MaskedF32 {
							sc, open = m, false
						} else {
							sc += m
						}
					}
					if open && !math.IsInf(sc, -1) {
						c++
					}
					if l := float64(lse[(b*p.Heads+h)*p.SeqQ+i]); !math.IsInf(l, -1) && !math.IsInf(sc, -1) {
						pr := math.Exp(sc - l)
						s += pr
						pk = math.Max(pk, pr)
					}
				}
				sum[(b*p.Heads+h)*p.SeqKV+j] = float32(s)
				count[(b*p.Heads+h)*p.SeqKV+j] = float32(c)
				peak[(b*p.Heads+h)*p.SeqKV+j] = float32(pk)
			}
		}
	}
	return nil
}

// AttentionStats runs AttentionStatsRef.
func (h *HostDevice) AttentionStats(s Storage, q, k, lse, sum, count, peak Buf, p AttentionParams) error {
	if err := f32only(s); err != nil {
		return err
	}
	return AttentionStatsRef(hostF32(q), hostF32(k), hostF32(p.Mask), hostF32(lse), hostF32(sum), hostF32(count), hostF32(peak), p)
}

// Accumulated statistics: AttentionStatsAcc adds what AttentionStats
// computes, summed over the query heads, into per-key totals that stay
// on the device across calls (and across the layers of a step), so that a
// caller gathering statistics over many decode steps reads them once
// instead of per step.

// statsAccOperands lists what AttentionStatsAcc reads and writes.
func (p AttentionParams) statsAccOperands(s Storage, q, k, lse, sum, count, peak Buf, hasMask bool) []bufUse {
	if p.empty() || p.SeqKV == 0 {
		return nil
	}
	ops := p.statsOperands(s, q, k, lse, sum, count, peak, hasMask)
	for i := range ops {
		switch ops[i].name {
		case "sum", "count", "peak":
			ops[i].end = p.SeqKV
		}
	}
	return ops
}

// AttentionStatsAcc adds, for the attention p describes (batch 1; Q, K,
// mask, scale and causality as Attention took them with p.LSE set; p.LSE
// itself is ignored, lse is passed), weight times each key's statistics
// summed over the query heads:
//
//	sum[j]   += weight · Σ_h Σ_i exp(score(h,i,j) - lse[h,i])
//	peak[j]   = max(peak[j], max_h max_i exp(score(h,i,j) - lse[h,i]))
//	count[j] += weight · #{i : row i of head 0 may attend key j}   (when addCount)
//
// sum, count and peak are fp32 [SeqKV] (keys beyond SeqKV untouched). Calls run
// in queue order, so the launches of several layers and steps may add into
// the same buffers; the caller zeroes them when it reads them.
func (l *Lib) AttentionStatsAcc(s Storage, q, k, lse, sum, count, peak Buf, p AttentionParams, weight float32, addCount bool) error {
	if err := l.attentionStatsAcc(s, q, k, lse, sum, count, peak, p, weight, addCount); err != nil {
		return fmt.Errorf("kernels: AttentionStatsAcc H=%d/%d Sq=%d Skv=%d D=%d: %w", p.Heads, p.KVHeads, p.SeqQ, p.SeqKV, p.HeadDim, err)
	}
	return nil
}

// statsAccKeys is the number of keys one work-item of attn_colstats_acc
// takes on CPUs, a multiple of its tile (RT, 16 keys whose exps are one
// vector exp): enough work per item that PoCL's per-item cost is small
// next to it, enough items to spread on every core (32 for a 1,024-key
// decode step).
const statsAccKeys = 32

// statsAccGPU, set by tests, launches attn_colstats_acc as on a GPU (its
// ATT_GPU form, one key per work-item) whatever the device.
var statsAccGPU = false

// checkStatsAcc validates what only the accumulating form asks.
func checkStatsAcc(p AttentionParams, weight float32) error {
	if p.Batch != 1 {
		return fmt.Errorf("accumulated statistics need batch 1, got %d", p.Batch)
	}
	if !(weight > 0) || math.IsInf(float64(weight), 0) {
		return fmt.Errorf("statistics weight %g", weight)
	}
	return nil
}

func (l *Lib) attentionStatsAcc(s Storage, q, k, lse, sum, count, peak Buf, p AttentionParams, weight float32, addCount bool) error {
	p, err := p.norm()
	if err != nil {
		return err
	}
	if err := checkStatsAcc(p, weight); err != nil {
		return err
	}
	hasMask := p.Mask.Mem != nil
	if err := checkBufUses(p.statsAccOperands(s, q, k, lse, sum, count, peak, hasMask)); err != nil {
		return err
	}
	if p.empty() || p.SeqKV == 0 {
		return nil
	}
	gpu := l.info().Type == "GPU" || statsAccGPU
	kern, err := l.kernel("attention", attentionProgSrc, statsBuildOptions(s, p.HeadDim, gpu), "attn_colstats_acc")
	if err != nil {
		return err
	}
	mask, hm := p.Mask, int32(1)
	if !hasMask {
		mask, hm = q, 0 // placeholder, never read
	}
	causal, addC := int32(0), int32(0)
	if p.Causal {
		causal = 1
	}
	if addCount {
		addC = 1
	}
	per, global, local := statsAccKeys, []int{(p.SeqKV + statsAccKeys - 1) / statsAccKeys}, []int{1}
	if gpu {
		per, global, local = 1, []int{(p.SeqKV + 63) / 64 * 64}, []int{64}
	}
	i32 := func(v int) int32 { return int32(v) }
	ms := p.MaskStrides
	return l.dev.Launch(kern, global, local,
		q.Mem, i32(q.Off), i32(p.Q.Head), i32(p.Q.Seq),
		k.Mem, i32(k.Off), i32(p.K.Head), i32(p.K.Seq),
		mask.Mem, i32(mask.Off), i32(ms[1]), i32(ms[2]), i32(ms[3]), hm,
		lse.Mem, i32(lse.Off), sum.Mem, i32(sum.Off), count.Mem, i32(count.Off), peak.Mem, i32(peak.Off),
		i32(p.Heads), i32(p.KVHeads), i32(p.SeqQ), i32(p.SeqKV), i32(p.Past), causal, p.Scale,
		weight, addC, i32(per))
}

// AttentionStatsAccRef is the pure-Go reference for AttentionStatsAcc on
// host tensors (mask nil for none; p.Mask is ignored), in float64 over
// fp32 tensors, adding into sum and count and raising peak.
func AttentionStatsAccRef(q, k, mask, lse, sum, count, peak []float32, p AttentionParams, weight float32, addCount bool) error {
	p, err := p.norm()
	if err != nil {
		return fmt.Errorf("kernels: AttentionStatsAccRef: %w", err)
	}
	if err := checkStatsAcc(p, weight); err != nil {
		return fmt.Errorf("kernels: AttentionStatsAccRef: %w", err)
	}
	have := map[string]int{"Q": len(q), "K": len(k), "LSE": len(lse), "sum": len(sum), "count": len(count), "peak": len(peak), "mask": len(mask)}
	if err := checkSliceLens(p.statsAccOperands(F32, Buf{}, Buf{}, Buf{}, Buf{}, Buf{}, Buf{}, mask != nil), have); err != nil {
		return fmt.Errorf("kernels: AttentionStatsAccRef: %w", err)
	}
	if p.empty() || p.SeqKV == 0 {
		return nil
	}
	group := p.Heads / p.KVHeads
	for j := 0; j < p.SeqKV; j++ {
		var s, c, pk float64
		for h := 0; h < p.Heads; h++ {
			ko := (h/group)*p.K.Head + j*p.K.Seq
			for i := 0; i < p.SeqQ; i++ {
				if p.Causal && j > p.Past+i {
					continue
				}
				qo := h*p.Q.Head + i*p.Q.Seq
				var dot float64
				for d := 0; d < p.HeadDim; d++ {
					dot += float64(q[qo+d]) * float64(k[ko+d])
				}
				sc, open := dot*float64(p.Scale), true
				if mask != nil {
					ms := p.MaskStrides
					m := float64(mask[h*ms[1]+i*ms[2]+j*ms[3]])
					if m <= MaskedF32 {
						sc, open = m, false
					} else {
						sc += m
					}
				}
				if h == 0 && open && !math.IsInf(sc, -1) {
					c++
				}
				if l := float64(lse[h*p.SeqQ+i]); !math.IsInf(l, -1) && !math.IsInf(sc, -1) {
					pr := math.Exp(sc - l)
					s += pr
					pk = math.Max(pk, pr)
				}
			}
		}
		sum[j] += float32(float64(weight) * s)
		peak[j] = max(peak[j], float32(pk))
		if addCount {
			count[j] += float32(float64(weight) * c)
		}
	}
	return nil
}

// AttentionStatsAcc runs AttentionStatsAccRef.
func (h *HostDevice) AttentionStatsAcc(s Storage, q, k, lse, sum, count, peak Buf, p AttentionParams, weight float32, addCount bool) error {
	if err := f32only(s); err != nil {
		return err
	}
	return AttentionStatsAccRef(hostF32(q), hostF32(k), hostF32(p.Mask), hostF32(lse), hostF32(sum), hostF32(count), hostF32(peak), p, weight, addCount)
}
