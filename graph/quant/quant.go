// Package quant is tlite's host-side 4-bit weight quantization: the E0M4
// format of Transformer-Lite (Li et al. 2024, "Transformer-Lite:
// High-efficiency Deployment of Large Language Models on Mobile Phone GPUs")
// and a group-wise asymmetric INT4 baseline, their exact reference
// dequantization, the packed layout the OpenCL kernels read (kernels.MatMulQ)
// and `tl quantize` stores, and error reports comparing the two formats.
//
// # The weight and its groups
//
// A quantized weight is the matrix W of a product Y = X W with X of shape
// [M, K] and W of shape [K, N]: K input features, N output features. ONNX
// MatMul stores W as [K, N] (LayoutKN); Gemm with transB=1 and PyTorch Linear
// store it as [N, K] (LayoutNK). Either is accepted at quantization time; the
// packed form is always the same. Each output column n is cut along K into
// groups of G consecutive weights (G a multiple of 32, 128 by default), and
// every group carries two float32 parameters.
//
// # E0M4
//
// A group with minimum lo and maximum hi is mapped affinely into [2^0, 2^1]:
// the mapped value v = 1 + (x - lo)/d with d = hi - lo (rounded to 19
// significant bits, see below), so every mapped value has the same exponent
// and only its mantissa varies. The code q is the top four mantissa bits of
// float32(v) (y1), rounded with the fifth (y2): q = min(y1+y2, 15), i.e.
// round half up with saturation. The values that can be represented are
// v = 1 + q/16: a step of d/16, finer than INT4's d/15, paid for by the top
// sixteenth of the range saturating at q = 15 (the maximum itself maps to 2).
// On Gaussian weights with groups of 128 this gives an MAE 0.954 times
// INT4's (TestMAERatioNormal); Transformer-Lite's Table 2 reports about
// 0.955 on real LLM weights. When the group spans zero,
// the mapped position of 0 (the "bias" of the map) has its mantissa bits
// below the top four zeroed before the codes are taken: 0 is then a
// representable point and a weight of exactly 0 dequantizes to exactly 0.
// The truncation shifts the grid down by less than a step; values it pushes
// below 1 are clamped to q = 0, so the worst error of any weight is d/16.
//
// Dequantization is two bit operations and one fused multiply-add:
//
//	w = fma(as_float(0x3F800000 | q<<19), d, m)       (float32: 23-bit mantissa)
//	w = fma(as_half(0x3C00 | q<<6), d, m)              (fp16: 10-bit mantissa)
//
// Both bit patterns are exactly 1 + q/16. The stored parameters are d and
// m = -bias*d. d is rounded to 19 significant bits so that bias*d (bias has
// 5 significant bits) is exact in float32, which makes fma(bias, d, m) = 0
// exactly. A group whose weights are all equal has d = 0 and m = that value.
//
// # INT4
//
// The baseline is the usual asymmetric integer scheme with an integer zero
// point (as GPTQ and AWQ use): the range [min(lo, 0), max(hi, 0)] is split
// into 15 steps of s = range/15, z = round(-min/s) in [0, 15], q =
// clamp(round(x/s) + z, 0, 15), and w = (q - z) * s: a convert, a subtract
// and a multiply on the device. The parameters stored are s and z (z as a
// float32 holding an integer).
//
// # Packed layout
//
// Codes, column-major by output column n, groups along K:
//
//	Words:  N columns x K/8 uint32 words. Column n starts at word n*K/8;
//	        its group g occupies words [g*G/8, (g+1)*G/8) of the column.
//	        Within a group, word i (0 <= i < G/8) holds in bits 4t..4t+3
//	        (t = 0..7) the code of the weight at k = g*G + t*(G/8) + i.
//	Params: N columns x K/G groups x 2 float32: column n, group g is at
//	        element 2*(n*K/G + g): (d, m) for E0M4, (s, z) for INT4.
//
// The nibble order inside a group (t-major across words) lets a kernel
// decode nibble t of a vector of consecutive words with one shift for all
// lanes and meet a contiguous vector of activations (k = g*G + t*G/8 + i for
// consecutive i), which is what makes vectorised unpacking cheap.
//
// Because a column's groups are consecutive and columns follow each other,
// the top-left [K', N'] corner of a packed weight (K' a multiple of G) is
// addressed in place with the full matrix's column strides (K/8 words, 2K/G
// params): an elastic sub-model needs no repacking, and quantizing that
// corner on its own gives exactly the same codes and parameters.
//
// MarshalBinary writes the same arrays behind a 64-byte header (see Header),
// little-endian and 64-byte aligned, so that a file can be memory-mapped and
// its arrays handed to the device without a copy.
package quant

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
)

// Format is how a quantized weight is stored: one of the two packed 4-bit
// formats, or FP16 (half-precision floats, which `tl quantize` writes as
// ordinary float16 initializers rather than packed weights). It is the one
// format enum of the quantization code: the packed header, MatMulQ's
// format attribute and qonnx's options all use it.
type Format uint32

const (
	// E0M4 is Transformer-Lite's 4-bit format: four mantissa bits under a
	// shared exponent, decoded with two bit operations and one fma.
	E0M4 Format = 1
	// Int4 is group-wise asymmetric INT4 with an integer zero point.
	Int4 Format = 2
	// FP16 stores weights as IEEE half floats; it is no packed format.
	FP16 Format = 3
)

// String names the format as reports print it.
func (f Format) String() string {
	switch f {
	case E0M4:
		return "e0m4"
	case Int4:
		return "int4"
	case FP16:
		return "fp16"
	}
	return fmt.Sprintf("format(%d)", uint32(f))
}

// FourBit reports whether f is one of the packed 4-bit formats, the only
// ones a Packed weight or a MatMulQ node may carry.
func (f Format) FourBit() bool { return f == E0M4 || f == Int4 }

// Layout is how a float weight matrix is stored before quantization.
type Layout int

const (
	// LayoutKN is [K, N] row-major: ONNX MatMul's second operand.
	LayoutKN Layout = iota
	// LayoutNK is [N, K] row-major: Gemm with transB=1, PyTorch Linear.
	LayoutNK
)

// String names the layout.
func (l Layout) String() string {
	if l == LayoutNK {
		return "NK"
	}
	return "KN"
}

// DefaultGroup is the group size used when Options.Group is 0.
const DefaultGroup = 128

// e0m4One is the float32 bit pattern of 1.0, the shared exponent of every
// decoded E0M4 value; a code goes into the top mantissa bits at e0m4Shift.
const (
	e0m4One   = 0x3F800000
	e0m4Shift = 19
	// E0M4Half is the fp16 bit pattern of 1.0, the exponent an fp16 decoder
	// ORs with q<<6.
	E0M4Half = 0x3C00
)

// Options select the format, group size and source layout of Quantize.
type Options struct {
	Format Format // E0M4 or Int4
	Group  int    // weights per group along K; 0 = DefaultGroup
	Layout Layout // layout of the float weight given
}

// Packed is a quantized weight W of logical shape [K, N] in the packed
// layout the package comment describes.
type Packed struct {
	Format Format
	Group  int
	K, N   int
	// Words holds the 4-bit codes: N*K/8 words.
	Words []uint32
	// Params holds the per-group parameter pairs: N*(K/Group)*2 values.
	Params []float32
}

// WordsPerColumn is the column stride of Words (K/8).
func (p *Packed) WordsPerColumn() int { return p.K / 8 }

// ParamsPerColumn is the column stride of Params (2*K/Group).
func (p *Packed) ParamsPerColumn() int { return 2 * (p.K / p.Group) }

// Bytes is the size of the packed arrays: codes plus parameters.
func (p *Packed) Bytes() int { return 4*len(p.Words) + 4*len(p.Params) }

// checkGroup validates a group size against K.
func checkGroup(group, k int) error {
	if group < 32 || group%32 != 0 {
		return fmt.Errorf("group size %d: must be a positive multiple of 32", group)
	}
	if k%group != 0 {
		return fmt.Errorf("K = %d is not a multiple of the group size %d (pad K or pick a group size that divides it)", k, group)
	}
	return nil
}

// Validate checks that p's sizes agree with each other.
func (p *Packed) Validate() error {
	if p == nil {
		return errors.New("quant: nil packed weight")
	}
	if !p.Format.FourBit() {
		return fmt.Errorf("quant: unknown format %d", uint32(p.Format))
	}
	if p.K <= 0 || p.N <= 0 {
		return fmt.Errorf("quant: packed weight of shape [%d, %d]: dimensions must be positive", p.K, p.N)
	}
	if err := checkGroup(p.Group, p.K); err != nil {
		return fmt.Errorf("quant: packed weight [%d, %d]: %w", p.K, p.N, err)
	}
	if want := p.N * p.K / 8; len(p.Words) != want {
		return fmt.Errorf("quant: packed weight [%d, %d]: %d code words, want %d", p.K, p.N, len(p.Words), want)
	}
	if want := p.N * p.ParamsPerColumn(); len(p.Params) != want {
		return fmt.Errorf("quant: packed weight [%d, %d]: %d parameters, want %d", p.K, p.N, len(p.Params), want)
	}
	return nil
}

// Code returns the 4-bit code of weight (k, n).
func (p *Packed) Code(k, n int) uint8 {
	w := p.K / 8
	g, kk := k/p.Group, k%p.Group
	gw := p.Group / 8
	t, i := kk/gw, kk%gw
	return uint8(p.Words[n*w+g*gw+i]>>(4*t)) & 15
}

// GroupParams returns the two parameters of the group holding weight (k, n):
// (d, m) for E0M4, (s, z) for INT4.
func (p *Packed) GroupParams(k, n int) (float32, float32) {
	j := n*p.ParamsPerColumn() + 2*(k/p.Group)
	return p.Params[j], p.Params[j+1]
}

// At returns the dequantized weight (k, n), computed as the kernels do.
func (p *Packed) At(k, n int) float32 {
	a, b := p.GroupParams(k, n)
	return DecodeValue(p.Format, p.Code(k, n), a, b)
}

// E0M4Bits returns the float32 bit pattern an E0M4 code decodes to before
// the group's fma: 0x3F800000 | q<<19, the value 1 + q/16.
func E0M4Bits(q uint8) uint32 { return e0m4One | uint32(q&15)<<e0m4Shift }

// DecodeValue dequantizes code q with a group's parameters (a, b): for E0M4
// fma(as_float(0x3F800000|q<<19), a, b), for INT4 (q - b) * a, each rounded
// once to float32 as a device's fma or multiply would.
func DecodeValue(f Format, q uint8, a, b float32) float32 {
	if f == E0M4 {
		x := math.Float32frombits(E0M4Bits(q))
		return float32(math.FMA(float64(x), float64(a), float64(b)))
	}
	return (float32(q&15) - b) * a
}

// Dequantize returns the weight p approximates as [K, N] row-major.
func Dequantize(p *Packed) []float32 {
	out := make([]float32, p.K*p.N)
	parallel(p.N, func(n0, n1 int) {
		for n := n0; n < n1; n++ {
			for k := 0; k < p.K; k++ {
				out[k*p.N+n] = p.At(k, n)
			}
		}
	})
	return out
}

// QuantizeE0M4 quantizes w, stored [rows=K, cols=N] as ONNX MatMul's weight,
// to E0M4 with the given group size (0 = DefaultGroup).
func QuantizeE0M4(w []float32, rows, cols, group int) (*Packed, error) {
	return Quantize(w, rows, cols, Options{Format: E0M4, Group: group})
}

// QuantizeInt4 quantizes w, stored [rows=K, cols=N], to group-wise INT4.
func QuantizeInt4(w []float32, rows, cols, group int) (*Packed, error) {
	return Quantize(w, rows, cols, Options{Format: Int4, Group: group})
}

// Quantize quantizes the rows x cols matrix w, stored as o.Layout says
// (LayoutKN: rows = K, cols = N; LayoutNK: rows = N, cols = K), into the
// packed layout. K must be a multiple of the group size; weights must be
// finite.
func Quantize(w []float32, rows, cols int, o Options) (*Packed, error) {
	if !o.Format.FourBit() {
		return nil, fmt.Errorf("quant: unknown format %d", uint32(o.Format))
	}
	group := o.Group
	if group == 0 {
		group = DefaultGroup
	}
	if rows <= 0 || cols <= 0 {
		return nil, fmt.Errorf("quant: %s weight of shape [%d, %d]: dimensions must be positive", o.Layout, rows, cols)
	}
	if len(w) != rows*cols {
		return nil, fmt.Errorf("quant: %s weight of shape [%d, %d] needs %d values, got %d", o.Layout, rows, cols, rows*cols, len(w))
	}
	k, n := rows, cols
	at := func(kk, nn int) float32 { return w[kk*cols+nn] }
	if o.Layout == LayoutNK {
		k, n = cols, rows
		at = func(kk, nn int) float32 { return w[nn*cols+kk] }
	}
	if err := checkGroup(group, k); err != nil {
		return nil, fmt.Errorf("quant: %s weight [%d, %d] (K=%d, N=%d): %w", o.Layout, rows, cols, k, n, err)
	}
	for i, x := range w {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, fmt.Errorf("quant: %s weight [%d, %d]: element %d (row %d, column %d) is %v; only finite weights can be quantized",
				o.Layout, rows, cols, i, i/cols, i%cols, x)
		}
	}
	p := &Packed{Format: o.Format, Group: group, K: k, N: n,
		Words: make([]uint32, n*k/8), Params: make([]float32, n*2*(k/group))}
	ngroups := k / group
	gw := group / 8
	parallel(n, func(n0, n1 int) {
		x := make([]float32, group)
		q := make([]uint8, group)
		for nn := n0; nn < n1; nn++ {
			for g := 0; g < ngroups; g++ {
				for j := range x {
					x[j] = at(g*group+j, nn)
				}
				var a, b float32
				if o.Format == E0M4 {
					a, b = quantizeE0M4Group(x, q)
				} else {
					a, b = quantizeInt4Group(x, q)
				}
				pj := nn*2*ngroups + 2*g
				p.Params[pj], p.Params[pj+1] = a, b
				words := p.Words[nn*(k/8)+g*gw : nn*(k/8)+(g+1)*gw]
				for j, c := range q {
					t, i := j/gw, j%gw
					words[i] |= uint32(c) << (4 * t)
				}
			}
		}
	})
	return p, nil
}

// EncodeE0M4 is the E0M4 rounding rule for a value v already mapped into a
// group's range: v's top four mantissa bits y1, plus its fifth bit y2,
// saturated at 15. Values below 1 give 0 and values from 2 up give 15 (only
// the bias shift and float rounding put values there).
func EncodeE0M4(v float32) uint8 {
	if !(v >= 1) {
		return 0
	}
	if v >= 2 {
		return 15
	}
	bits := math.Float32bits(v)
	y1 := (bits >> e0m4Shift) & 15
	y2 := (bits >> (e0m4Shift - 1)) & 1
	return uint8(min(y1+y2, 15))
}

// truncE0M4 is the code of the grid point at or below v in [1, 2]: v with
// its mantissa bits below the top four zeroed. 2 (a group whose maximum is
// 0) has no such mantissa; the nearest point below it is q = 15.
func truncE0M4(v float64) uint8 {
	if v >= 2 {
		return 15
	}
	return uint8(math.Float32bits(float32(v)) >> e0m4Shift & 15)
}

// roundSig rounds x to sig significant bits (round half to even).
func roundSig(x float64, sig int) float32 {
	if x == 0 {
		return 0
	}
	_, e := math.Frexp(x) // x = f * 2^e, 0.5 <= |f| < 1
	scale := math.Ldexp(1, sig-e)
	return float32(math.RoundToEven(x*scale) / scale)
}

// quantizeE0M4Group fills q with the codes of x and returns (d, m).
func quantizeE0M4Group(x []float32, q []uint8) (float32, float32) {
	lo, hi := groupRange(x)
	if lo == hi {
		clear(q)
		return 0, float32(lo)
	}
	d := roundSig(hi-lo, 24-5)
	dd := float64(d)
	var m float64
	if lo <= 0 && hi >= 0 {
		// The map's bias (where 0 lands) keeps only the bits a code keeps,
		// so that 0 is one of the representable points. Truncating (rather
		// than rounding) shifts the grid down by under a step, which spreads
		// the clipping over both ends of the range instead of piling it on
		// the already saturated top: 3% lower MAE on Gaussian weights.
		bias := 1 - lo/dd
		qb := truncE0M4(bias)
		m = -float64(math.Float32frombits(E0M4Bits(qb))) * dd // exact: 5 x 19 bits
	} else {
		m = lo - dd
	}
	mf := float32(m)
	for j, v := range x {
		q[j] = EncodeE0M4(float32((float64(v) - float64(mf)) / dd))
	}
	return d, mf
}

// quantizeInt4Group fills q with the codes of x and returns (s, z).
func quantizeInt4Group(x []float32, q []uint8) (float32, float32) {
	lo, hi := groupRange(x)
	lo, hi = math.Min(lo, 0), math.Max(hi, 0)
	if lo == hi {
		clear(q)
		return 0, 0
	}
	s := float32((hi - lo) / 15)
	z := math.Min(15, math.Max(0, math.Round(-lo/float64(s))))
	for j, v := range x {
		c := math.Round(float64(v)/float64(s)) + z
		q[j] = uint8(math.Min(15, math.Max(0, c)))
	}
	return s, float32(z)
}

func groupRange(x []float32) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range x {
		lo = math.Min(lo, float64(v))
		hi = math.Max(hi, float64(v))
	}
	return lo, hi
}

// parallel splits [0, n) into contiguous chunks, one per CPU.
func parallel(n int, f func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 || n < 64 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := n*w/workers, n*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}
