package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/tlite/tlite/graph/quant"
)

// qmmLanes is quant.cl's QV for a group of the given size: the widest of
// 16, 8 and 4 words that divides the group's group/8 words.
func qmmLanes(group int) int {
	switch qw := group / 8; {
	case qw%16 == 0:
		return 16
	case qw%8 == 0:
		return 8
	}
	return 4
}

// qmmHalfSim is the Q_HALF path of qmm_1x4 and qmm_4x2 (quant.cl's QSTEP,
// QH_BEGIN and QH_END with one accumulator per output, NA = 1) for output
// (row a, column n) of the E0M4 weight p in the column layout. Lane i of
// the QV-wide vectors starts each group from a half zero and, for every
// QV-word step h of the group's words and nibble t = 0..7 in that order,
// decodes weight k = g*QG + t*QW + h + i as hfma(1 + q/16, half(d),
// half(m)) and adds a[k] times it by half fma; at the group's end the
// half sum is added to the lane's float sum. After the last group the
// lanes are summed as qhsum does (the upper half of the vector added to
// the lower until four lanes are left, then (x + y) + (z + w)), then the
// bias (nil for none) in float.
func qmmHalfSim(a []float32, p *quant.Packed, n int, bias *float32) float32 {
	qw, qv := p.Group/8, qmmLanes(p.Group)
	acc := make([]float32, qv)
	for g := 0; g < len(a)/p.Group; g++ {
		for i := range acc {
			h := 0.0
			for hh := 0; hh < qw; hh += qv {
				for t := 0; t < 8; t++ {
					h = qHalfTerm(h, a, p, g*p.Group+t*qw+hh+i, n)
				}
			}
			acc[i] += float32(h)
		}
	}
	for w := qv / 2; w >= 4; w /= 2 {
		for i := 0; i < w; i++ {
			acc[i] += acc[i+w]
		}
	}
	s := (acc[0] + acc[1]) + (acc[2] + acc[3])
	if bias != nil {
		s += *bias
	}
	return s
}

// qmmHalfExact returns the exact (float64) output (row a, column n) of the
// E0M4 weight p plus bias (nil for none) and the halfBound of the Q_HALF
// path's fp16 output around it: runs of 8*QW/QV terms in half per lane and
// group, then K/QG group additions, the lanes' reduction (log2 QV) and the
// bias in float. The bias is counted into the sum of magnitudes, which
// covers its share of the float roundings.
func qmmHalfExact(a []float32, p *quant.Packed, n int, bias *float32) (exact, bound float64) {
	qv := qmmLanes(p.Group)
	s, wErr := 0.0, 0.0
	for k := range a {
		q, d, m := qCode(p, k, n)
		base := 1 + float64(q)/16
		wv := exactFMA(base, float64(d), float64(m))
		av := math.Abs(float64(a[k]))
		s += av * math.Abs(wv)
		// d and m rounded to half (u each), then one fma rounding.
		wErr += av * ((2*halfU+halfU*halfU)*(base*math.Abs(float64(d))+math.Abs(float64(m))) + 3*halfEta)
		exact += float64(a[k]) * wv
	}
	if bias != nil {
		exact += float64(*bias)
		s += math.Abs(float64(*bias))
	}
	nf := len(a)/p.Group + int(math.Log2(float64(qv))) + 1
	return exact, halfBound(s, wErr, len(a), 8*(p.Group/8)/qv, nf, exact)
}

// TestQmmHalfBitExact runs the Q_HALF path of qmm_1x4 and qmm_4x2 (E0M4
// weights, fp16 storage) in halfmath.cl's float emulation of half
// arithmetic (-DHALF_EMU -DQMM_EMU; PoCL has no cl_khr_fp16) and compares
// every output bit for bit with the Go emulation, which computes each half
// operation exactly and rounds once; the kernels' text is the one the
// cl_khr_fp16 build compiles (only the QH* macros differ). Shapes: M = 1,
// 3, 5 (partial row blocks of 4x2), N = 7 (partial column blocks), a row
// stride past K and a padded output stride (elements past a row must
// survive), with an fp16 bias and without; group sizes 256 (16-lane
// vectors, two vector steps per group summed in one half run, 2 groups)
// and 64 (8 lanes, 3 groups). Each group size is a program of its own,
// 3-5 s to build cold, so the test stops at two: 128 differs from 256
// only in running one vector step per group; 32 (4 lanes) is not run.
// Each output is also held to halfBound against the exact float64
// product.
func TestQmmHalfBitExact(t *testing.T) {
	withHalfEmu(t, func() {
		defer func() { qForce = "" }()
		worst := 0.0
		for gi, sh := range []struct{ group, k int }{
			{256, 2 * 256},
			{64, 3 * 64},
		} {
			const n = 7
			_, wp := qWeight(t, int64(90+gi), quant.E0M4, sh.k, n, sh.group)
			wq, err := testLib.uploadQAs(wp, QLayoutColumns)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(wq.Release)
			for _, name := range []string{"qmm_1x4", "qmm_4x2"} {
				qForce = name
				for _, m := range []int{1, 3, 5} {
					for _, withBias := range []bool{true, false} {
						label := fmt.Sprintf("%s group %d K %d M %d bias %v", name, sh.group, sh.k, m, withBias)
						lda, ldc := sh.k+3, n+2
						p := QMatMulParams{M: m, N: n, K: sh.k, LDA: lda, LDC: ldc, BiasStorage: F16}
						got, want := qRun(t, F16, wq, wp, p, withBias)
						// qRun's inputs, from the same seeds.
						a := laRand(11, m*lda, F16)
						bias := laRand(13, n, F16)
						for r := 0; r < m; r++ {
							for c := 0; c < n; c++ {
								var bp *float32
								if withBias {
									bp = &bias[c]
								}
								row := a[r*lda : r*lda+sh.k]
								want[r*ldc+c] = roundTrip(F16, qmmHalfSim(row, wp, c, bp))
								ex, bound := qmmHalfExact(row, wp, c, bp)
								e := math.Abs(float64(got[r*ldc+c]) - ex)
								if !(e <= bound) {
									t.Fatalf("%s: output (%d, %d) = %g, exact %g: error %.3g over the bound %.3g", label, r, c, got[r*ldc+c], ex, e, bound)
								}
								worst = math.Max(worst, e/bound)
							}
						}
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s: output element %d: kernel %g, Go emulation %g", label, i, got[i], want[i])
							}
						}
					}
				}
			}
		}
		t.Logf("largest error against the exact product: %.2g of its bound", worst)
	})
}

// TestQmmHalfAccuracy holds the Go emulation of the qmm_* Q_HALF path
// (which TestQmmHalfBitExact ties to the kernels) to halfBound against the
// exact float64 product at a model size (K = 4096, groups of 128: runs of
// 8 terms per lane in half), for a Gaussian E0M4 weight against random
// activations and for a constant weight against all ones (which a half sum
// across all of K would stall on), and logs the largest error as a
// fraction of the bound and of the output scale.
func TestQmmHalfAccuracy(t *testing.T) {
	const k, n = 4096, 3
	_, pr := qWeight(t, 97, quant.E0M4, k, n, 128)
	wc := make([]float32, k*n)
	for i := range wc {
		wc[i] = 0.5
	}
	pc, err := quant.Quantize(wc, k, n, quant.Options{Format: quant.E0M4, Group: 128})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		a    []float32
		p    *quant.Packed
	}{
		{"random", laRand(98, k, F16), pr},
		{"constant weight, ones", ones(k), pc},
	} {
		var got, exact, bound []float64
		for c := 0; c < n; c++ {
			ex, b := qmmHalfExact(tc.a, tc.p, c, nil)
			got = append(got, float64(roundTrip(F16, qmmHalfSim(tc.a, tc.p, c, nil))))
			exact, bound = append(exact, ex), append(bound, b)
		}
		checkHalfBound(t, "qmm_* half "+tc.name, got, exact, bound)
	}
}
