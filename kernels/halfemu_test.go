package kernels

import (
	"math"
	"math/big"
	"testing"

	"github.com/tlite/tlite/graph/quant"
)

// A Go emulation of the half arithmetic of the phone prefill GEMMs
// (halfmath.cl; mm_reg and qmt_mm's half paths). Every half operation is
// computed exactly with math/big and rounded once, so it is independent of
// the kernels' own float emulation (-DHALF_EMU), which tests compare with
// it bit for bit on PoCL.

const (
	halfU   = 1.0 / 2048     // unit roundoff of half: 2^-11
	halfEta = 1.0 / 33554432 // half the subnormal spacing: 2^-25
	floatU  = 1.0 / 16777216 // unit roundoff of float: 2^-24
)

// hround rounds z to the nearest half, ties to even: on the subnormal grid
// of 2^-24 below 2^-14, to infinity beyond 65504.
func hround(z *big.Float) float64 {
	if z.Sign() == 0 {
		return 0
	}
	exp := z.MantExp(nil) // |z| = mant * 2^exp, 0.5 <= mant < 1
	prec := 11
	if exp < -13 {
		prec = exp + 24
	}
	if prec <= 0 {
		// |z| < 2^-24: 2^-24 above the midpoint 2^-25, else 0 (a tie goes
		// to the even 0).
		abs := new(big.Float).Abs(z)
		if prec == 0 && abs.Cmp(big.NewFloat(0x1p-25)) > 0 {
			return math.Copysign(0x1p-24, float64(z.Sign()))
		}
		return math.Copysign(0, float64(z.Sign()))
	}
	r := new(big.Float).SetMode(big.ToNearestEven).SetPrec(uint(prec)).Set(z)
	f, _ := r.Float64()
	if math.Abs(f) > 65504 {
		return math.Inf(z.Sign())
	}
	return f
}

// exact returns x as a big.Float wide enough for any sum of products of
// halves and floats to stay exact.
func exact(x float64) *big.Float { return new(big.Float).SetPrec(400).SetFloat64(x) }

// hfma is half fma: a*b + c rounded once to half.
func hfma(a, b, c float64) float64 {
	z := exact(a)
	z.Mul(z, exact(b)).Add(z, exact(c))
	return hround(z)
}

// hcvt rounds a float to half.
func hcvt(x float32) float64 { return hround(exact(float64(x))) }

// ffma is float32 fma: a*b + c rounded once to float.
func ffma(a, b, c float32) float32 {
	z := exact(float64(a))
	z.Mul(z, exact(float64(b))).Add(z, exact(float64(c)))
	f, _ := z.Float32()
	return f
}

// mmRegHalfSim is mm_reg's half path for one output: a and b are row m of
// A and column n of B (K values each, already halves), in the kernel's
// order: runs of up to 16 k summed by half fma from zero, each added to a
// float sum, the K % 4 tail by float fma, then alpha times the sum plus
// beta times the bias by float fma (bias nil for none).
func mmRegHalfSim(a, b []float32, alpha, beta float32, bias *float32) float32 {
	k := len(a)
	k4 := k &^ 3
	var acc float32
	for k0 := 0; k0 < k4; k0 += 16 {
		h := 0.0
		for i := k0; i < min(k0+16, k4); i++ {
			h = hfma(float64(a[i]), float64(b[i]), h)
		}
		acc += float32(h)
	}
	for i := k4; i < k; i++ {
		acc = ffma(a[i], b[i], acc)
	}
	v := alpha * acc
	if bias != nil {
		v = ffma(beta, *bias, v)
	}
	return v
}

// qCode returns the 4-bit code of weight (k, n) of p and its group's two
// parameters (graph/quant's order: E0M4 decodes fma(1 + q/16, d, m)).
func qCode(p *quant.Packed, k, n int) (q uint32, d, m float32) {
	qw := p.Group / 8
	g, r := k/p.Group, k%p.Group
	t, i := r/qw, r%qw
	q = p.Words[n*(p.K/8)+g*qw+i] >> (4 * t) & 0xF
	groups := p.K / p.Group
	return q, p.Params[n*2*groups+2*g], p.Params[n*2*groups+2*g+1]
}

// qmtHalfSim is qmt_mm's half path for output (row a, column n) over the
// first len(a) rows of the E0M4 weight p: per 32-weight chunk e the group's
// parameters rounded to half, each weight decoded by half fma, the chunk's
// products summed by half fma from zero in the kernel's order (t = 0..7,
// then the four weights of the run), and the chunk's sum added to a float
// sum; then the bias (nil for none) in float.
func qmtHalfSim(a []float32, p *quant.Packed, n int, bias *float32) float32 {
	var acc float32
	for e := 0; e < len(a)/32; e++ {
		acc += qChunkHalfSim(a, p, n, e)
	}
	if bias != nil {
		acc += *bias
	}
	return acc
}

// qHalfTerm is one step of every 4-bit half path: weight k of column n
// decoded by half fma from its group's parameters rounded to half (E0M4:
// hfma(1 + q/16, d, m); INT4: hfma(q - z, s, 0), q - z exact), then a[k]
// times it added to the half sum h by half fma.
func qHalfTerm(h float64, a []float32, p *quant.Packed, k, n int) float64 {
	q, d, m := qCode(p, k, n)
	if p.Format == quant.Int4 {
		return hfma(float64(a[k]), hfma(float64(q)-hcvt(m), hcvt(d), 0), h)
	}
	return hfma(float64(a[k]), hfma(1+float64(q)/16, hcvt(d), hcvt(m)), h)
}

// checkHalfBound fails the test at the first output whose error against
// its exact value exceeds its bound, and logs the largest error as a
// fraction of the output scale and of the bound.
func checkHalfBound(t *testing.T, name string, got, exact, bound []float64) {
	t.Helper()
	worst, scale, maxErr := 0.0, 0.0, 0.0
	for i := range got {
		e := math.Abs(got[i] - exact[i])
		if !(e <= bound[i]) {
			t.Fatalf("%s: output %d = %g, exact %g: error %.3g over the bound %.3g", name, i, got[i], exact[i], e, bound[i])
		}
		worst = math.Max(worst, e/bound[i])
		scale = math.Max(scale, math.Abs(exact[i]))
		maxErr = math.Max(maxErr, e)
	}
	t.Logf("%s: largest error %.3g = %.2g of the output scale %.3g, %.2g of its bound", name, maxErr, maxErr/scale, scale, worst)
}

// gammaN is n*u/(1 - n*u), the bound on the relative error of n
// successive roundings with unit roundoff u.
func gammaN(n int, u float64) float64 { return float64(n) * u / (1 - float64(n)*u) }
