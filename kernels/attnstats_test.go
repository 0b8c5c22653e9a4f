package kernels

import (
	"fmt"
	"math"
	"testing"
)

// probsDump is the full softmax probability tensor [B, H, Sq, Skv] of the
// attention p describes (fp32 host tensors, mask nil for none) and, per
// (b, h, j), the rows that may attend key j: what AttentionStats
// summarises, computed the long way. Tests only.
func probsDump(q, k, mask []float32, p AttentionParams) (probs []float64, counts []float64) {
	p, _ = p.norm()
	group := p.Heads / p.KVHeads
	probs = make([]float64, p.Batch*p.Heads*p.SeqQ*p.SeqKV)
	counts = make([]float64, p.Batch*p.Heads*p.SeqKV)
	for b := 0; b < p.Batch; b++ {
		for h := 0; h < p.Heads; h++ {
			for i := 0; i < p.SeqQ; i++ {
				row := probs[((b*p.Heads+h)*p.SeqQ+i)*p.SeqKV:][:p.SeqKV]
				mx := math.Inf(-1)
				for j := range row {
					s := math.Inf(-1)
					if !p.Causal || j <= p.Past+i {
						var dot float64
						for d := 0; d < p.HeadDim; d++ {
							dot += float64(q[b*p.Q.Batch+h*p.Q.Head+i*p.Q.Seq+d]) * float64(k[b*p.K.Batch+h/group*p.K.Head+j*p.K.Seq+d])
						}
						s, open := dot*float64(p.Scale), true
						if mask != nil {
							ms := p.MaskStrides
							m := float64(mask[b*ms[0]+h*ms[1]+i*ms[2]+j*ms[3]])
							if m <= MaskedF32 {
								s, open = m, false
							} else {
								s += m
							}
						}
						if open && !math.IsInf(s, -1) {
							counts[(b*p.Heads+h)*p.SeqKV+j]++
						}
						row[j] = s
					} else {
						row[j] = s
					}
					mx = math.Max(mx, row[j])
				}
				var sum float64
				for j := range row {
					if math.IsInf(mx, -1) || math.IsInf(row[j], -1) {
						row[j] = 0
						continue
					}
					row[j] = math.Exp(row[j] - mx)
					sum += row[j]
				}
				for j := range row {
					if sum > 0 {
						row[j] /= sum
					}
				}
			}
		}
	}
	return probs, counts
}

// columnSums sums probs [B, H, Sq, Skv] over the rows.
func columnSums(probs []float64, p AttentionParams) []float32 {
	out := make([]float32, p.Batch*p.Heads*p.SeqKV)
	for bh := 0; bh < p.Batch*p.Heads; bh++ {
		for i := 0; i < p.SeqQ; i++ {
			for j := 0; j < p.SeqKV; j++ {
				out[bh*p.SeqKV+j] += float32(probs[(bh*p.SeqQ+i)*p.SeqKV+j])
			}
		}
	}
	return out
}

// columnPeaks is the largest of probs [B, H, Sq, Skv] over the rows.
func columnPeaks(probs []float64, p AttentionParams) []float32 {
	out := make([]float32, p.Batch*p.Heads*p.SeqKV)
	for bh := 0; bh < p.Batch*p.Heads; bh++ {
		for i := 0; i < p.SeqQ; i++ {
			for j := 0; j < p.SeqKV; j++ {
				out[bh*p.SeqKV+j] = max(out[bh*p.SeqKV+j], float32(probs[(bh*p.SeqQ+i)*p.SeqKV+j]))
			}
		}
	}
	return out
}

// statsRun runs Attention with LSE and then AttentionStats on the OpenCL
// library (variant forced) or on the host device, returning the LSE,
// sums, counts and peaks.
func statsRun(t *testing.T, dev string, s Storage, q, k, v, mask []float32, p AttentionParams) (lse, sum, count, peak []float32) {
	t.Helper()
	nl, ns := p.Batch*p.Heads*p.SeqQ, p.Batch*p.Heads*p.SeqKV
	no := p.Batch * p.Heads * p.SeqQ * p.HeadDim
	if dev == "go" {
		hd := &HostDevice{}
		buf := func(xs []float32) Buf {
			b := make([]byte, 4*len(xs))
			for i, x := range xs {
				putElem(b, F32, i, x)
			}
			return Buf{Host: b}
		}
		qb, kb, vb, ob := buf(q), buf(k), buf(v), buf(make([]float32, no))
		lb, sb, cb, pb := buf(make([]float32, nl)), buf(make([]float32, ns)), buf(make([]float32, ns)), buf(make([]float32, ns))
		if mask != nil {
			p.Mask = buf(mask)
		}
		p.LSE = lb
		if err := hd.Attention(F32, qb, kb, vb, ob, p); err != nil {
			t.Fatal(err)
		}
		if err := hd.AttentionStats(F32, qb, kb, lb, sb, cb, pb, p); err != nil {
			t.Fatal(err)
		}
		return hostF32(lb)[:nl], hostF32(sb)[:ns], hostF32(cb)[:ns], hostF32(pb)[:ns]
	}
	if mask != nil {
		p.Mask = upload(t, s, mask)
	}
	qb, kb := upload(t, s, q), upload(t, s, k)
	lb, sb, cb, pb := alloc(t, F32, nl), alloc(t, F32, ns), alloc(t, F32, ns), alloc(t, F32, ns)
	p.LSE = lb
	if err := testLib.Attention(s, qb, kb, upload(t, s, v), alloc(t, s, no), p); err != nil {
		t.Fatal(err)
	}
	if err := testLib.AttentionStats(s, qb, kb, lb, sb, cb, pb, p); err != nil {
		t.Fatal(err)
	}
	return download(t, F32, lb, nl), download(t, F32, sb, ns), download(t, F32, cb, ns), download(t, F32, pb, ns)
}

var statsTargets = []string{"attn_row", "attn_lanes", "attn_wg", "go"}

// TestAttentionStatsFig6a is LLMS's Fig. 6a example: in a causal prefill
// of four tokens, token "a" (column 1) gets probabilities 0.3, 0.5 and 0.1
// from the three rows that can see it, so its information density, the
// mean of the column over its unmasked rows, is 0.9 / 3 = 0.3. The
// probabilities are put in through the mask (log p, with zero scores).
func TestAttentionStatsFig6a(t *testing.T) {
	defer func() { attnForce = "" }()
	A := [4][4]float64{
		{1},
		{0.7, 0.3},
		{0.2, 0.5, 0.3},
		{0.4, 0.1, 0.3, 0.2},
	}
	p := AttentionParams{Batch: 1, Heads: 1, KVHeads: 1, SeqQ: 4, SeqKV: 4, HeadDim: 1, Scale: 1, Causal: true, MaskStrides: [4]int{0, 0, 4, 1}}
	mask := make([]float32, 16)
	for i := range A {
		for j := 0; j <= i; j++ {
			mask[i*4+j] = float32(math.Log(A[i][j]))
		}
	}
	zeros := make([]float32, 4)
	for _, target := range statsTargets {
		attnForce = target
		_, sum, count, peak := statsRun(t, target, F32, zeros, zeros, zeros, mask, p)
		for j := 0; j < 4; j++ {
			var want, wantPeak float64
			for i := j; i < 4; i++ {
				want += A[i][j]
				wantPeak = math.Max(wantPeak, A[i][j])
			}
			if math.Abs(float64(sum[j])-want) > 1e-6 || count[j] != float32(4-j) {
				t.Errorf("%s: column %d sums %g over %g rows; want %g over %d", target, j, sum[j], count[j], want, 4-j)
			}
			// Token a's peak is row 2's 0.5, not the mean 0.3.
			if math.Abs(float64(peak[j])-wantPeak) > 1e-6 {
				t.Errorf("%s: column %d peak %g; want %g", target, j, peak[j], wantPeak)
			}
		}
		if d := sum[1] / count[1]; math.Abs(float64(d)-0.3) > 1e-6 {
			t.Errorf("%s: density of token a is %g; want 0.3", target, d)
		}
	}
}

// TestAttentionStats: on odd shapes (GQA, a cache read in place, causal
// chunks with a past, broadcast and per-head masks with -inf entries, head
// sizes without a vector width), every variant's LSE and the statistics
// kernel agree with a full probability dump, in both storages, and so does
// the host device.
func TestAttentionStats(t *testing.T) {
	defer func() { attnForce = "" }()
	cases := []string{"plain", "gqa 4:1", "decode cache", "chunk with past", "mask broadcast", "mask full + bshd", "long chunk gqa mask"}
	for _, target := range statsTargets {
		attnForce = target
		for _, name := range cases {
			c := attnCases[name]
			for _, s := range storages {
				if target == "go" && s == F16 {
					continue
				}
				if d := c.p.HeadDim; (d == 24 || d == 12) && (s == F16 || target == "attn_wg") {
					continue
				}
				p := c.p
				d := p.HeadDim
				capacity := c.capacity
				if capacity == 0 {
					capacity = p.SeqKV
				} else {
					p.K = AttnLayout{Batch: p.KVHeads * capacity * d, Head: capacity * d, Seq: d}
					p.V = p.K
				}
				q := laRand(51, p.Batch*p.Heads*p.SeqQ*d, s)
				for i := range q {
					q[i] = roundTrip(s, 3*q[i])
				}
				k := laRand(52, p.Batch*p.KVHeads*capacity*d, s)
				v := laRand(53, p.Batch*p.KVHeads*capacity*d, s)
				var mask []float32
				if c.maskShape != nil {
					ms := c.maskShape
					mask = laRand(55, ms[0]*ms[1]*ms[2]*ms[3], s)
					for i := range mask {
						if i%5 == 3 {
							mask[i] = float32(math.Inf(-1))
						}
						if i%7 == 2 {
							mask[i] = -math.MaxFloat32
						}
					}
					st := [4]int{ms[1] * ms[2] * ms[3], ms[2] * ms[3], ms[3], 1}
					for i := 0; i < 2; i++ {
						if ms[i] == 1 {
							st[i] = 0
						}
					}
					p.MaskStrides = st
				}
				what := fmt.Sprintf("%s/%s/%s", target, name, s)
				lse, sum, count, peak := statsRun(t, target, s, q, k, v, mask, p)
				wantLSE := make([]float32, len(lse))
				if err := AttentionLSERef(q, k, v, mask, make([]float32, p.Batch*p.Heads*p.SeqQ*d), wantLSE, p); err != nil {
					t.Fatal(err)
				}
				// LSE is fp32 in both storages.
				assertClose(t, what+" lse", lse, wantLSE, 2e-4, 2e-5)
				pn, _ := p.norm()
				probs, counts := probsDump(q, k, mask, pn)
				assertClose(t, what+" sums", sum, columnSums(probs, pn), 2e-4, 1e-4)
				assertClose(t, what+" peaks", peak, columnPeaks(probs, pn), 2e-4, 1e-4)
				wc := make([]float32, len(counts))
				for i, c := range counts {
					wc[i] = float32(c)
				}
				assertClose(t, what+" counts", count, wc, 0, 0)
				// Each row's probabilities sum to 1 (rows that see a key).
				var total, rows float64
				for _, x := range sum {
					total += float64(x)
				}
				for i := range wantLSE {
					if !math.IsInf(float64(wantLSE[i]), -1) {
						rows++
					}
				}
				if math.Abs(total-rows) > 1e-3*rows {
					t.Errorf("%s: the sums add up to %g over %g rows", what, total, rows)
				}
			}
		}
	}
}
