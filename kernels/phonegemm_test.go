package kernels

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/quant"
)

// TestMatMulQTiledPrefill runs the tiled-layout prefill GEMM (qmt_mm) in
// both formats and storages on row counts that do and do not fill its
// 4-row block, 11 columns (the last block of four has three), a weight of
// twelve 32-weight chunks, and an elastic corner (K and N below the stored
// shape, padded strides). Group 128 and an fp32 bias share the programs
// TestMatMulQ builds.
func TestMatMulQTiledPrefill(t *testing.T) {
	for _, f := range qFormats {
		_, wp := qWeight(t, 41, f, 384, 11, 128)
		wq := uploadQTile4(t, wp)
		for _, s := range storages {
			for _, m := range []int{4, 7, 13} {
				p := QMatMulParams{M: m, N: 11, K: 384}
				if m == 13 {
					p.N, p.K, p.LDA, p.LDC = 9, 256, 387, 12
				}
				g, err := p.resolve(wq, true)
				if err != nil {
					t.Fatal(err)
				}
				if name, _, _ := testLib.qpick(g); name != "qmt_mm" {
					t.Fatalf("M=%d on the tiled layout picks %s, want qmt_mm", m, name)
				}
				got, want := qRun(t, s, wq, wp, p, m != 4)
				laClose(t, fmt.Sprintf("%s/%s/M%dN%dK%d", f, s, m, p.N, p.K), s, got, want)
			}
		}
	}
}

// TestHalfRounding checks the Go emulation's rounding to half by hand:
// ties to even, a tie broken by the exact sum's tail, the subnormal grid,
// underflow and overflow.
func TestHalfRounding(t *testing.T) {
	for _, c := range []struct {
		a, b, c, want float64
	}{
		{1, 1, 0x1p-11, 1},                              // tie between 1 and 1+2^-10: even (1)
		{1, 1, 3 * 0x1p-11, 1 + 0x1p-9},                 // tie: the even neighbour is 1+2^-9
		{1 + 0x1p-10, 0x1p-11, 1, 1 + 0x1p-10},          // 1 + 2^-11 + 2^-21: just above the tie
		{-(1 + 0x1p-10), 0x1p-12, 1, 1 - 0x1p-11},       // 1 - 2^-12 - 2^-22: just below the tie
		{0x1p-12, 0x1p-12, 0, 0x1p-24},                  // exactly the smallest subnormal
		{0x1p-13, 0x1p-12, 0, 0},                        // 2^-25: a tie, to the even 0
		{0x1p-13 + 0x1p-23, 0x1p-12, 0, 0x1p-24},        // just above 2^-25
		{3 * 0x1p-14, 0x1p-11, 0, 0x1p-23},              // 1.5 * 2^-24: tie to the even 2^-23
		{0x1p-14, 1, 0x1p-25, 0x1p-14},                  // 2^-14 + 2^-25: a tie at the subnormal spacing
		{256, 256, -32, 65504},                          // exactly the largest half
		{256, 256, -17, 65504},                          // 65519 rounds down to it
		{256, 256, -16, math.Inf(1)},                    // 65520: the tie goes to the even 65536, infinite
		{-256, 256, 16, math.Inf(-1)},                   // and to minus infinity
		{0.1015625, 0.0999755859375, 0, 1331 * 0x1p-17}, // 1330.9 * 2^-17 rounds up
	} {
		if got := hfma(c.a, c.b, c.c); got != c.want {
			t.Errorf("hfma(%g, %g, %g) = %.17g, want %.17g", c.a, c.b, c.c, got, c.want)
		}
	}
	// Rounding float32 values through dtype's converter (round to nearest
	// even, which vstore_half_rte uses) agrees with hround on every 97th
	// float in [2^-26, 2^17).
	for b := math.Float32bits(0x1p-26); b < math.Float32bits(0x1p17); b += 97 * 1021 {
		x := math.Float32frombits(b)
		if got, want := hcvt(x), float64(roundTrip(F16, x)); got != want {
			t.Fatalf("hcvt(%g) = %g, dtype's conversion gives %g", x, got, want)
		}
	}
}

// withHalfEmu runs fn with the kernels' half paths built in their exact
// emulation (-DHALF_EMU).
func withHalfEmu(t *testing.T, fn func()) {
	t.Helper()
	halfEmu = true
	defer func() { halfEmu = false }()
	fn()
}

// TestHalfPathsBitExact runs the half paths of mm_reg and qmt_mm on PoCL
// in halfmath.cl's float emulation of half arithmetic (PoCL has no
// cl_khr_fp16) and compares every output bit for bit with the Go
// emulation, which computes each half operation exactly and rounds once.
// The kernels' text is the one the cl_khr_fp16 build compiles (only
// halfmath.cl's macros differ), so this pins its sequence of roundings; the
// real half build is compiled and register-checked by tools/kernelgate.sh.
// Shapes: M, N and K not multiples of the blocks (4 rows, 4 columns, runs
// of 16 and vectors of 4 along K; for qmt_mm an odd number of chunks), an
// fp32 and an fp16 bias, alpha and beta.
func TestHalfPathsBitExact(t *testing.T) {
	withHalfEmu(t, func() {
		defer func() { mmForce = "" }()
		mmForce = "mm_reg"
		for _, sh := range [][3]int{{5, 7, 37}, {9, 6, 70}} {
			m, n, k := sh[0], sh[1], sh[2]
			p := MatMulParams{M: m, N: n, K: k, TransB: true, Weight: F16, LDA: k + 3,
				Scaled: true, Alpha: 0.75, Beta: -1.5, BiasColStride: 1}
			got, want := mmRun(t, F16, p, true)
			// Recompute the emulation from the same inputs mmRun used.
			a, b := laRand(1, (m-1)*(k+3)+k, F16), laRand(2, (n-1)*k+k, F16)
			bias := laRand(4, n, F16)
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					v := mmRegHalfSim(a[i*(k+3):i*(k+3)+k], b[j*k:j*k+k], p.Alpha, p.Beta, &bias[j])
					want[i*n+j] = roundTrip(F16, v)
				}
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("mm_reg %v: output %d: kernel %g, Go emulation %g", sh, i, got[i], want[i])
				}
			}
		}
		// qmt_mm: E0M4 and INT4 in fp16 storage (the formats and storage
		// that have a half path), 13 rows, 7 columns, 3 groups of 32 (3
		// chunks, 2 x 2 outputs per work-item), with an fp16 bias and then
		// with none (INT4: with one); and INT4 at 3 groups of 64 (6 chunks,
		// parameters every second chunk, 4 x 2 outputs per work-item), with
		// an fp16 bias: the program TestQmtR1HalfBitExact builds at group 64.
		for _, fc := range []struct {
			f      quant.Format
			group  int
			biases []bool
		}{{quant.E0M4, 32, []bool{true, false}}, {quant.Int4, 32, []bool{true}}, {quant.Int4, 64, []bool{true}}} {
			const m, n = 13, 7
			k := 3 * fc.group
			lda := k + 5
			_, wp := qWeight(t, 43, fc.f, k, n, fc.group)
			wq := uploadQTile4(t, wp)
			for _, withBias := range fc.biases {
				p := QMatMulParams{M: m, N: n, K: k, LDA: lda, BiasStorage: F16}
				got, want := qRun(t, F16, wq, wp, p, withBias)
				a := laRand(11, m*lda, F16)
				bias := laRand(13, n, F16)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						var bp *float32
						if withBias {
							bp = &bias[j]
						}
						want[i*n+j] = roundTrip(F16, qmtHalfSim(a[i*lda:i*lda+k], wp, j, bp))
					}
				}
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("qmt_mm %s group %d (bias %v): output %d: kernel %g, Go emulation %g", fc.f, fc.group, withBias, i, got[i], want[i])
					}
				}
			}
		}
	})
}

// halfBound is the error bound of a half path's output against the exact
// product, derived from the roundings the path makes (Higham, Accuracy and
// Stability, ch. 3): s = sum |a_k w_k| over the output's terms, n terms
// summed in half runs of at most run, nf float additions after them, and
// wErr = sum |a_k| * (bound on the error of the half weight w_k). Each
// half rounding errs by at most u|x| + eta (eta covers the subnormal
// range), each float one by floatU|x|; the fp16 store adds u|y| + eta.
func halfBound(s, wErr float64, n, run, nf int, y float64) float64 {
	runErr := gammaN(run, halfU)*(s+wErr) + 2*float64(n)*halfEta
	sumErr := gammaN(nf+2, floatU) * (s + wErr + runErr)
	return wErr + runErr + sumErr + halfU*(math.Abs(y)+wErr+runErr+sumErr) + halfEta
}

// TestHalfPathsAccuracy holds the Go emulation of each half path (which
// TestHalfPathsBitExact ties to the kernels) to the error bound derived
// from fp16 rounding (halfBound), against the exact product in float64, at
// model sizes (K = 4096; an E0M4 weight of a trained layer's spread), and
// on an input where a sum held in half across all of K would stall: 4096
// terms of 1 or 0.5 reach 2048 or 1024, where half's spacing swallows
// them. It logs the largest error seen as a fraction of the bound and of
// the output's scale: the accuracy to expect, stated per path.
func TestHalfPathsAccuracy(t *testing.T) {
	const k = 4096
	// mm_reg: random halves in [-1, 1), and all ones.
	for _, tc := range []struct {
		name string
		a, b []float32
	}{
		{"mm_reg random", laRand(51, k, F16), laRand(52, 3*k, F16)},
		{"mm_reg ones", ones(k), ones(3 * k)},
	} {
		var got, ex, bound []float64
		for j := 0; j < 3; j++ {
			b := tc.b[j*k : (j+1)*k]
			y := float64(roundTrip(F16, mmRegHalfSim(tc.a, b, 1, 0, nil)))
			s, e := 0.0, 0.0
			for i := range tc.a {
				s += math.Abs(float64(tc.a[i]) * float64(b[i]))
				e += float64(tc.a[i]) * float64(b[i])
			}
			got, ex = append(got, y), append(ex, e)
			bound = append(bound, halfBound(s, 0, k, 16, k/16, e))
		}
		checkHalfBound(t, tc.name, got, ex, bound)
	}
	// qmt_mm: E0M4 group 128 of a Gaussian weight (sigma 0.05), and of a
	// constant 0.5, against activations in [-1, 1) and all ones.
	_, pr := qWeight(t, 53, quant.E0M4, k, 3, 128)
	wc := make([]float32, k*3)
	for i := range wc {
		wc[i] = 0.5
	}
	pc, err := quant.Quantize(wc, k, 3, quant.Options{Format: quant.E0M4, Group: 128})
	if err != nil {
		t.Fatal(err)
	}
	// INT4 group 128 of the same Gaussian weight's spread.
	_, pi := qWeight(t, 53, quant.Int4, k, 3, 128)
	for _, tc := range []struct {
		name string
		a    []float32
		p    *quant.Packed
	}{
		{"qmt_mm random", laRand(54, k, F16), pr},
		{"qmt_mm constant weight, ones", ones(k), pc},
		{"qmt_mm INT4 random", laRand(55, k, F16), pi},
	} {
		// qmt_r1 shares qmt_mm's chunk order and adds the chunks' sums in
		// another order (over lanes, then a reduction), within the same
		// count of float additions: the same bound holds.
		var got, gotR1, ex, bound []float64
		for n := 0; n < 3; n++ {
			y := float64(roundTrip(F16, qmtHalfSim(tc.a, tc.p, n, nil)))
			gotR1 = append(gotR1, float64(roundTrip(F16, qmtR1HalfSim(tc.a, tc.p, n, nil))))
			s, wErr, e := 0.0, 0.0, 0.0
			for kk := range tc.a {
				q, d, m := qCode(tc.p, kk, n)
				av := math.Abs(float64(tc.a[kk]))
				var wv float64
				if tc.p.Format == quant.Int4 {
					// (q - z) * s: q - z exact, s rounded to half
					// (u|s| + eta), the product rounded once.
					qz := float64(q) - float64(m)
					wv = qz * float64(d)
					e1 := math.Abs(qz) * (halfU*math.Abs(float64(d)) + halfEta)
					wErr += av * (e1 + halfU*(math.Abs(wv)+e1) + halfEta)
				} else {
					// The exact decoded weight, and the bound on its half
					// decode: d and m rounded to half (u each), then one
					// fma rounding: (2u + u^2)(|base*d| + |m|) + eta.
					base := 1 + float64(q)/16
					wv = exactFMA(base, float64(d), float64(m))
					wErr += av * ((2*halfU+halfU*halfU)*(base*math.Abs(float64(d))+math.Abs(float64(m))) + 3*halfEta)
				}
				s += av * math.Abs(wv)
				e += float64(tc.a[kk]) * wv
			}
			got, ex = append(got, y), append(ex, e)
			bound = append(bound, halfBound(s, wErr, k, 32, k/32, e))
		}
		checkHalfBound(t, tc.name, got, ex, bound)
		checkHalfBound(t, strings.Replace(tc.name, "qmt_mm", "qmt_r1", 1), gotR1, ex, bound)
	}
}

func ones(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// exactFMA is a*b + c rounded once to float64.
func exactFMA(a, b, c float64) float64 {
	z := exact(a)
	z.Mul(z, exact(b)).Add(z, exact(c))
	f, _ := z.Float64()
	return f
}
