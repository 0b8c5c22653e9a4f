package kernels

import (
	"math"
	"testing"

	"github.com/tlite/tlite/graph/quant"
)

// gemvC4HalfSim is mm_gemv_c4's half path (halfmath.cl's HALF_EMU build,
// local-memory reduction) for one output: a and b are the row of A and
// the row of B (K values each, halves). Lane t of 64 takes the runs of
// four at k = 4t, 4t + 256, ..., each a chain of four half fmas from zero
// added to the lane's float sum, then the K % 4 tail k = K&^3 + t, ... by
// float fma; 16 lanes' sums meet in runs of four, then one lane adds the
// 16 runs; then alpha times the sum plus beta times the bias by float fma.
func gemvC4HalfSim(a, b []float32, alpha, beta float32, bias *float32) float32 {
	const lanes = 64
	k := len(a)
	k4 := k &^ 3
	var acc [lanes]float32
	for t := range acc {
		for k0 := 4 * t; k0 < k4; k0 += 4 * lanes {
			h := 0.0
			for i := k0; i < k0+4; i++ {
				h = hfma(float64(a[i]), float64(b[i]), h)
			}
			acc[t] = float32(acc[t] + float32(h))
		}
		for i := k4 + t; i < k; i += lanes {
			acc[t] = ffma(a[i], b[i], acc[t])
		}
	}
	var s float32
	for p := 0; p < lanes/4; p++ {
		s = float32(s + float32(float32(float32(acc[4*p]+acc[4*p+1])+acc[4*p+2])+acc[4*p+3]))
	}
	v := float32(alpha * s)
	if bias != nil {
		v = ffma(beta, *bias, v)
	}
	return v
}

// TestGemvC4HalfBitExact runs mm_gemv_c4's half path in halfmath.cl's
// float emulation on PoCL and compares every output bit for bit with the
// Go emulation: 2 rows, 7 columns (not a multiple of the four a group
// takes), K = 535 (two rounds of the 64 lanes' runs of four, a partial
// round and a K % 4 tail), a row stride past K, alpha, beta and a bias.
func TestGemvC4HalfBitExact(t *testing.T) {
	withHalfEmu(t, func() {
		defer func() { mmForce = "" }()
		mmForce = "mm_gemv_c4"
		const m, n, k, lda = 2, 7, 535, 538
		p := MatMulParams{M: m, N: n, K: k, TransB: true, Weight: F16, LDA: lda,
			Scaled: true, Alpha: 0.75, Beta: -1.5, BiasColStride: 1}
		got, want := mmRun(t, F16, p, true)
		// mmRun's inputs, from the same seeds.
		a, b := laRand(1, (m-1)*lda+k, F16), laRand(2, (n-1)*k+k, F16)
		bias := laRand(4, n, F16)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				want[i*n+j] = roundTrip(F16, gemvC4HalfSim(a[i*lda:i*lda+k], b[j*k:j*k+k], p.Alpha, p.Beta, &bias[j]))
			}
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("mm_gemv_c4: output %d: kernel %g, Go emulation %g", i, got[i], want[i])
			}
		}
	})
}

// TestGemvC4HalfAccuracy holds the Go emulation of mm_gemv_c4's half path
// to halfBound against the exact product in float64 at K = 4096 (runs of
// 4 in half; each term then meets at most K/256 lane additions and the
// reduction's 19 float additions), on random halves in [-1, 1) and on all
// ones, and logs the largest error as a fraction of the bound and of the
// output scale.
func TestGemvC4HalfAccuracy(t *testing.T) {
	const k = 4096
	for _, tc := range []struct {
		name string
		a, b []float32
	}{
		{"mm_gemv_c4 random", laRand(61, k, F16), laRand(62, 3*k, F16)},
		{"mm_gemv_c4 ones", ones(k), ones(3 * k)},
	} {
		var got, exact, bound []float64
		for j := 0; j < 3; j++ {
			b := tc.b[j*k : (j+1)*k]
			y := float64(roundTrip(F16, gemvC4HalfSim(tc.a, b, 1, 0, nil)))
			s, ex := 0.0, 0.0
			for i := range tc.a {
				s += math.Abs(float64(tc.a[i]) * float64(b[i]))
				ex += float64(tc.a[i]) * float64(b[i])
			}
			got, exact = append(got, y), append(exact, ex)
			bound = append(bound, halfBound(s, 0, k, 4, k/256+19, ex))
		}
		checkHalfBound(t, tc.name, got, exact, bound)
	}
}

// qChunkHalfSim is the half sum of chunk e (32 weights) of column n of
// the 4-bit weight p (E0M4 or INT4, decoded as qHalfTerm does) against a, in the order qmt_mm and qmt_r1 share: the
// group's parameters rounded to half, each weight decoded by half fma,
// the products summed by half fma from zero for k = kb + t*qw + 0..3,
// t = 0..7.
func qChunkHalfSim(a []float32, p *quant.Packed, n, e int) float32 {
	qw := p.Group / 8
	g := 4 * e / qw
	kb := g*p.Group + 4*e%qw
	h := 0.0
	for t := 0; t < 8; t++ {
		for j := 0; j < 4; j++ {
			h = qHalfTerm(h, a, p, kb+t*qw+j, n)
		}
	}
	return float32(h)
}

// qmtR1HalfSim is qmt_r1's half path (HALF_EMU build, local-memory
// reduction) for output (row a, column n): lane l of 64 adds the half sums
// of chunks l, l + 64, ... to its float sum; the four columns' 64 lane
// sums meet in 16 runs of four lanes each (from zero), then one lane adds
// the 16 runs in order; then the bias (nil for none) in float.
func qmtR1HalfSim(a []float32, p *quant.Packed, n int, bias *float32) float32 {
	const lanes = 64
	var acc [lanes]float32
	for l := range acc {
		for e := l; e < len(a)/32; e += lanes {
			acc[l] = float32(acc[l] + qChunkHalfSim(a, p, n, e))
		}
	}
	var runs [lanes / 4]float32
	for part := range runs {
		var s float32
		for j := 0; j < 4; j++ {
			s = float32(s + acc[4*part+j])
		}
		runs[part] = s
	}
	s := runs[0]
	for _, r := range runs[1:] {
		s = float32(s + r)
	}
	if bias != nil {
		s = float32(s + *bias)
	}
	return s
}

// TestQmtR1HalfBitExact runs qmt_r1's half path in halfmath.cl's float
// emulation on PoCL and compares every output bit for bit with the Go
// emulation, for E0M4 and INT4 weights in fp16 storage on the four-column
// tiled layout, with an fp16 bias. Shapes: 2 or 3 rows (a work-group per
// row), 7 columns (a partial block of four), a row stride past K, and K a
// number of chunks above and not a multiple of the 64 lanes (some lanes
// add two chunks' sums, the rest one): groups of 32 (K = 2240, 70 groups:
// new parameters every chunk; the options of TestHalfPathsBitExact's
// qmt_mm builds, so the two share their programs), INT4 groups of 64
// (K = 2112, 33 groups of two chunks each; TestHalfPathsBitExact's INT4
// qmt_mm at group 64 shares this program) and INT4 groups of 128
// (K = 2176, 17 groups of four chunks each). K must be a multiple of the
// group (MatMulQ refuses others), so no shape has a partial group.
func TestQmtR1HalfBitExact(t *testing.T) {
	withHalfEmu(t, func() {
		defer func() { qForce = "" }()
		qForce = "qmt_r1"
		for i, sh := range []struct {
			f           quant.Format
			m, k, group int
		}{
			{quant.E0M4, 2, 2240, 32},
			{quant.Int4, 3, 2240, 32},
			{quant.Int4, 2, 2112, 64},
			{quant.Int4, 3, 2176, 128},
		} {
			const n = 7
			lda := sh.k + 3
			_, wp := qWeight(t, int64(80+i), sh.f, sh.k, n, sh.group)
			wq := uploadQTile4(t, wp)
			p := QMatMulParams{M: sh.m, N: n, K: sh.k, LDA: lda, BiasStorage: F16}
			got, want := qRun(t, F16, wq, wp, p, true)
			a := laRand(11, sh.m*lda, F16)
			bias := laRand(13, n, F16)
			for r := 0; r < sh.m; r++ {
				for c := 0; c < n; c++ {
					want[r*n+c] = roundTrip(F16, qmtR1HalfSim(a[r*lda:r*lda+sh.k], wp, c, &bias[c]))
				}
			}
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					t.Fatalf("qmt_r1 %s group %d K %d: output %d: kernel %g, Go emulation %g", sh.f, sh.group, sh.k, j, got[j], want[j])
				}
			}
		}
	})
}
