package quant

import (
	"bytes"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// normal returns n values from N(0, sigma^2) with a fixed seed.
func normal(seed int64, n int, sigma float64) []float32 {
	r := rand.New(rand.NewSource(seed))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64() * sigma)
	}
	return out
}

// column returns a [K, 1] weight holding xs, for hand-computed groups.
func column(t *testing.T, f Format, xs []float32) *Packed {
	t.Helper()
	p, err := Quantize(xs, len(xs), 1, Options{Format: f, Group: len(xs)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestE0M4ByHand(t *testing.T) {
	// Group range [-1, 3]: d = 4, v = 1 + (x+1)/4. The bias (where 0 maps)
	// is 1.25 = 1 + 4/16, already on the grid: m = -1.25*4 = -5, and a code
	// q decodes to (1 + q/16)*4 - 5.
	cases := []struct {
		x, want float32
		q       uint8
	}{
		{-1, -1, 0},
		{0, 0, 4},
		{3, 2.75, 15},    // v = 2: past the last point, saturates
		{0.125, 0.25, 5}, // v = 1.28125 = 1 + 4.5/16: fifth bit set, rounds up
		{0.12, 0, 4},     // v = 1.28 = 1 + 4.48/16: fifth bit clear
		{0.24, 0.25, 5},  // v = 1.31 = 1 + 4.96/16
		{1, 1, 8},        // v = 1.5 exactly
		{2.8, 2.75, 15},  // v = 1.95 = 1 + 15.2/16
		{2.9, 2.75, 15},  // v = 1.975 = 1 + 15.6/16: y1+y2 = 16, min gives 15
		{-0.9, -1, 0},    // v = 1.025 = 1 + 0.4/16
	}
	xs := make([]float32, 32)
	for i, c := range cases {
		xs[i] = c.x
	}
	p := column(t, E0M4, xs)
	if d, m := p.GroupParams(0, 0); d != 4 || m != -5 {
		t.Fatalf("params (d, m) = (%v, %v), want (4, -5)", d, m)
	}
	for i, c := range cases {
		if q := p.Code(i, 0); q != c.q {
			t.Errorf("x = %v: code %d, want %d", c.x, q, c.q)
		}
		if got := p.At(i, 0); got != c.want {
			t.Errorf("x = %v: dequantized %v, want %v", c.x, got, c.want)
		}
	}
	// The zeros padding the group are exact too.
	for i := len(cases); i < 32; i++ {
		if got := p.At(i, 0); got != 0 {
			t.Fatalf("padding zero %d dequantized to %v", i, got)
		}
	}
}

func TestE0M4BiasRounding(t *testing.T) {
	// Range [-1, 2]: d = 3, the unrounded bias 1 + 1/3 = 1 + 5.33/16 is
	// truncated to 1 + 5/16: bias 1.3125, m = -3.9375. 0 is exact; -1 maps to 0.979, below the
	// exponent's range, and clamps to q = 0; 2 maps to 1.979 -> q = 15.
	xs := make([]float32, 64)
	xs[0], xs[1], xs[2], xs[3] = -1, 2, 0.5, 1.2
	p := column(t, E0M4, xs)
	if d, m := p.GroupParams(0, 0); d != 3 || m != -3.9375 {
		t.Fatalf("params (d, m) = (%v, %v), want (3, -3.9375)", d, m)
	}
	// 0.5 maps to 1.3125 + 1/6 = 1 + 7.67/16: y1 = 7, y2 = 1 -> 8 -> 0.5625.
	// 1.2 maps to 1.7125 = 1 + 11.4/16 -> 11 -> 1.6875*3 - 3.9375 = 1.125.
	for i, want := range []float32{-0.9375, 1.875, 0.5625, 1.125, 0} {
		if got := p.At(i, 0); got != want {
			t.Errorf("x = %v: dequantized %v, want %v", xs[i], got, want)
		}
	}
}

func TestE0M4GroupMaxZero(t *testing.T) {
	// Range [-1, 0]: the bias is 2, outside [1, 2); the nearest point
	// below is 1 + 15/16, so m = -1.9375, 0 is exact and -1 (mapped to
	// 0.9375) clamps to q = 0.
	xs := make([]float32, 32)
	xs[0], xs[1], xs[2] = -1, -0.5, -0.47
	p := column(t, E0M4, xs)
	if d, m := p.GroupParams(0, 0); d != 1 || m != -1.9375 {
		t.Fatalf("params (d, m) = (%v, %v), want (1, -1.9375)", d, m)
	}
	// -0.5 maps to 1.4375 = 1 + 7/16; -0.47 to 1.4675 = 1 + 7.48/16 -> 7.
	for i, want := range []float32{-0.9375, -0.5, -0.5, 0} {
		if got := p.At(i, 0); got != want {
			t.Errorf("x = %v: dequantized %v, want %v", xs[i], got, want)
		}
	}
}

func TestEncodeE0M4Boundaries(t *testing.T) {
	for _, c := range []struct {
		v float32
		q uint8
	}{
		{1, 0}, {1 + 0.5/16 - 1e-7, 0}, {1 + 0.5/16, 1}, {1 + 1.0/16, 1},
		{1 + 14.5/16, 15}, {1 + 14.5/16 - 1e-7, 14}, {1.999, 15}, {2, 15}, {5, 15},
		{0.99, 0}, {-3, 0}, {float32(math.NaN()), 0},
	} {
		if q := EncodeE0M4(c.v); q != c.q {
			t.Errorf("EncodeE0M4(%v) = %d, want %d", c.v, q, c.q)
		}
	}
	// The decoded bit patterns are exactly 1 + q/16, in fp32 and in fp16.
	for q := uint8(0); q < 16; q++ {
		want := 1 + float32(q)/16
		if got := math.Float32frombits(E0M4Bits(q)); got != want {
			t.Errorf("E0M4Bits(%d) decodes to %v, want %v", q, got, want)
		}
		h := uint16(E0M4Half | uint32(q)<<6)
		// fp16 1.xxxx: exponent 15 (bias 15), mantissa q<<6 of 10 bits.
		if got := float32(1 + float64(h&0x3FF)/1024); (h>>10) != 15 || got != want {
			t.Errorf("fp16 pattern %#04x for q=%d is not %v", h, q, want)
		}
	}
}

func TestInt4ByHand(t *testing.T) {
	// Range [-1, 3]: s = 4/15, z = round(3.75) = 4.
	xs := make([]float32, 32)
	xs[0], xs[1], xs[2], xs[3] = -1, 3, 0.5, 0.7
	p := column(t, Int4, xs)
	s, z := p.GroupParams(0, 0)
	if s != float32(4.0/15) || z != 4 {
		t.Fatalf("params (s, z) = (%v, %v), want (%v, 4)", s, z, float32(4.0/15))
	}
	// -1/s = -3.75 -> -4 + 4 = 0; 3/s = 11.25 -> 11 + 4 = 15; 0.5/s = 1.875
	// -> 2 + 4 = 6; 0.7/s = 2.625 -> 3 + 4 = 7.
	for i, q := range []uint8{0, 15, 6, 7, 4} {
		if got := p.Code(i, 0); got != q {
			t.Errorf("x = %v: code %d, want %d", xs[i], got, q)
		}
		if got, want := p.At(i, 0), (float32(q)-4)*s; got != want {
			t.Errorf("x = %v: dequantized %v, want %v", xs[i], got, want)
		}
	}
}

func TestZeroIsExact(t *testing.T) {
	const K, N = 256, 7
	w := normal(1, K*N, 0.02)
	r := rand.New(rand.NewSource(2))
	for i := 0; i < len(w)/10; i++ {
		w[r.Intn(len(w))] = 0
	}
	for _, f := range []Format{E0M4, Int4} {
		p, err := Quantize(w, K, N, Options{Format: f})
		if err != nil {
			t.Fatal(err)
		}
		back := Dequantize(p)
		for i, x := range w {
			if x == 0 && back[i] != 0 {
				t.Fatalf("%s: weight %d is 0, dequantized to %v", f, i, back[i])
			}
		}
	}
}

func TestConstantGroups(t *testing.T) {
	xs := make([]float32, 64)
	for i := range xs {
		xs[i] = 0.7
	}
	if got := column(t, E0M4, xs).At(5, 0); got != 0.7 {
		t.Fatalf("E0M4 constant group dequantized to %v, want 0.7", got)
	}
	if got := column(t, Int4, xs).At(5, 0); math.Abs(float64(got)-0.7) > 1e-6 {
		t.Fatalf("INT4 constant group dequantized to %v, want 0.7", got)
	}
	zs := make([]float32, 32)
	for _, f := range []Format{E0M4, Int4} {
		if got := column(t, f, zs).At(3, 0); got != 0 {
			t.Fatalf("%s all-zero group dequantized to %v", f, got)
		}
	}
}

// TestErrorBound checks every weight against its group's worst case: one
// E0M4 step d/16 (saturation at the top, half a step of rounding plus half
// a step of bias shift elsewhere), one INT4 step s (half a step of rounding
// plus up to half a step lost to the rounded zero point at an end).
func TestErrorBound(t *testing.T) {
	const K, N = 384, 5
	w := normal(3, K*N, 1)
	for _, f := range []Format{E0M4, Int4} {
		p, err := Quantize(w, K, N, Options{Format: f, Group: 64})
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < K; k++ {
			for n := 0; n < N; n++ {
				a, _ := p.GroupParams(k, n)
				bound := float64(a) / 16
				if f == Int4 {
					bound = float64(a)
				}
				if e := math.Abs(float64(p.At(k, n) - w[k*N+n])); e > bound*(1+1e-5) {
					t.Fatalf("%s (%d, %d): error %g exceeds %g", f, k, n, e, bound)
				}
			}
		}
	}
}

func TestLayoutAndPrefix(t *testing.T) {
	const K, N = 384, 9
	w := normal(4, K*N, 0.05)
	for _, f := range []Format{E0M4, Int4} {
		kn, err := Quantize(w, K, N, Options{Format: f})
		if err != nil {
			t.Fatal(err)
		}
		nk, err := Quantize(transpose(w, K, N), N, K, Options{Format: f, Layout: LayoutNK})
		if err != nil {
			t.Fatal(err)
		}
		if !equalPacked(kn, nk) {
			t.Fatalf("%s: quantizing the [N, K] transpose gave a different packing", f)
		}
		// The top-left [K', N'] corner quantized alone is the prefix of
		// every column of the full packing.
		const K2, N2 = 256, 4
		corner := make([]float32, K2*N2)
		for k := 0; k < K2; k++ {
			copy(corner[k*N2:(k+1)*N2], w[k*N:k*N+N2])
		}
		small, err := Quantize(corner, K2, N2, Options{Format: f})
		if err != nil {
			t.Fatal(err)
		}
		for n := 0; n < N2; n++ {
			for i := 0; i < K2/8; i++ {
				if small.Words[n*K2/8+i] != kn.Words[n*kn.WordsPerColumn()+i] {
					t.Fatalf("%s: column %d word %d differs from the full packing's", f, n, i)
				}
			}
			for i := 0; i < small.ParamsPerColumn(); i++ {
				if small.Params[n*small.ParamsPerColumn()+i] != kn.Params[n*kn.ParamsPerColumn()+i] {
					t.Fatalf("%s: column %d parameter %d differs from the full packing's", f, n, i)
				}
			}
		}
	}
}

// TestNibbleOrder checks the documented placement: word i of a group holds
// in bits 4t..4t+3 the code of k = g*G + t*G/8 + i.
func TestNibbleOrder(t *testing.T) {
	const G, K = 64, 128
	// Codes chosen to be k mod 16 under INT4 with range [0, 15]: x = k%16
	// gives s = 1, z = 0, q = x.
	w := make([]float32, K)
	for k := range w {
		w[k] = float32(k % 16)
	}
	w[0], w[G] = 15, 15 // make sure each group spans [0, 15]
	w[1], w[G+1] = 0, 0
	p, err := QuantizeInt4(w, K, 1, G)
	if err != nil {
		t.Fatal(err)
	}
	for g := 0; g < K/G; g++ {
		for i := 0; i < G/8; i++ {
			word := p.Words[g*G/8+i]
			for tt := 0; tt < 8; tt++ {
				k := g*G + tt*G/8 + i
				if got := (word >> (4 * tt)) & 15; got != uint32(w[k]) {
					t.Fatalf("group %d word %d nibble %d = %d, want the code of k=%d (%v)", g, i, tt, got, k, w[k])
				}
			}
		}
	}
}

func equalPacked(a, b *Packed) bool {
	if a.Format != b.Format || a.Group != b.Group || a.K != b.K || a.N != b.N ||
		len(a.Words) != len(b.Words) || len(a.Params) != len(b.Params) {
		return false
	}
	for i := range a.Words {
		if a.Words[i] != b.Words[i] {
			return false
		}
	}
	for i := range a.Params {
		if math.Float32bits(a.Params[i]) != math.Float32bits(b.Params[i]) {
			return false
		}
	}
	return true
}

func TestQuantizeErrors(t *testing.T) {
	w := normal(5, 200*3, 1)
	for _, c := range []struct {
		name       string
		w          []float32
		rows, cols int
		o          Options
		want       string
	}{
		{"K not a multiple of G", w, 200, 3, Options{Format: E0M4}, "not a multiple of the group size"},
		{"NK: K is cols", w[:96*3], 3, 96, Options{Format: Int4, Group: 64, Layout: LayoutNK}, "K = 96 is not a multiple"},
		{"group not multiple of 32", w[:96*3], 96, 3, Options{Format: E0M4, Group: 48}, "multiple of 32"},
		{"length", w[:10], 96, 3, Options{Format: E0M4, Group: 32}, "needs 288 values"},
		{"format", w[:96*3], 96, 3, Options{Group: 32}, "unknown format"},
		{"NaN", append([]float32{float32(math.NaN())}, w[1:96]...), 96, 1, Options{Format: E0M4, Group: 32}, "element 0"},
	} {
		_, err := Quantize(c.w, c.rows, c.cols, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestMAERatioNormal: on Gaussian weights E0M4's finer step (range/16
// against INT4's range/15) outweighs its saturated top sixteenth, the
// effect behind Transformer-Lite's Table 2 (ratio about 0.955 on LLMs).
func TestMAERatioNormal(t *testing.T) {
	const K, N = 1024, 64
	var r Report
	if err := r.Add("normal", normal(6, K*N, 0.02), K, N, LayoutKN); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("normal.T", normal(7, K*N, 0.02), N, K, LayoutNK); err != nil {
		t.Fatal(err)
	}
	e, i, ratio := r.Totals()
	t.Logf("MAE e0m4 %.4g, int4 %.4g, ratio %.4f", e, i, ratio)
	if !(ratio > 0.85 && ratio < 1) {
		t.Fatalf("E0M4/INT4 MAE ratio %.4f on normal weights, want in (0.85, 1)", ratio)
	}
	var b bytes.Buffer
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"normal.T", "total", "ratio"} {
		if !strings.Contains(b.String(), s) {
			t.Fatalf("report lacks %q:\n%s", s, b.String())
		}
	}
	if r.Matrices[1].K != K || r.Matrices[1].N != N {
		t.Fatalf("NK matrix reported as [%d, %d], want K=%d N=%d", r.Matrices[1].K, r.Matrices[1].N, K, N)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	const K, N = 320, 3
	p, err := Quantize(normal(8, K*N, 1), K, N, Options{Format: E0M4, Group: 64})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseHeader(b[:HeaderSize], int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if h.WordsOffset%64 != 0 || h.ParamsOffset%64 != 0 || h.ParamsOffset < h.WordsOffset+4*int64(len(p.Words)) {
		t.Fatalf("bad array offsets %+v", h)
	}
	q, err := UnmarshalPacked(b)
	if err != nil {
		t.Fatal(err)
	}
	if !equalPacked(p, q) {
		t.Fatal("round trip changed the packed weight")
	}
	bad := append([]byte(nil), b...)
	bad[16]++ // K
	if _, err := UnmarshalPacked(bad); err == nil {
		t.Fatal("a header with a changed K was accepted")
	}
	if _, err := UnmarshalPacked(b[:len(b)-64]); err == nil {
		t.Fatal("a truncated encoding was accepted")
	}
	bad = append([]byte(nil), b...)
	bad[0] = 'X'
	if _, err := UnmarshalPacked(bad); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Fatalf("bad magic: %v", err)
	}
}

// TestConcat checks that joining packed weights along N is the same as
// quantizing the joined float matrix (each column is quantized on its
// own), that HeaderOf describes the joined encoding, and that weights of
// another format, group or K are refused.
func TestConcat(t *testing.T) {
	const k, group = 64, 32
	ns := []int{8, 4, 12}
	var parts []*Packed
	ntot := 0
	for _, n := range ns {
		ntot += n
	}
	all := make([]float32, k*ntot)
	col := 0
	for i, n := range ns {
		w := make([]float32, k*n)
		for j := range w {
			w[j] = float32(math.Sin(float64(i*1000+j))) * float32(i+1)
		}
		for kk := 0; kk < k; kk++ {
			copy(all[kk*ntot+col:kk*ntot+col+n], w[kk*n:(kk+1)*n])
		}
		col += n
		p, err := QuantizeE0M4(w, k, n, group)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	got, err := Concat(parts...)
	if err != nil {
		t.Fatal(err)
	}
	want, err := QuantizeE0M4(all, k, ntot, group)
	if err != nil {
		t.Fatal(err)
	}
	if got.N != ntot || !slices.Equal(got.Words, want.Words) || !slices.Equal(got.Params, want.Params) {
		t.Fatalf("joined weight differs from the joined matrix quantized (N %d, want %d)", got.N, ntot)
	}
	b, err := got.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	h, err := HeaderOf(E0M4, group, k, ntot)
	if err != nil || h.Size != int64(len(b)) {
		t.Fatalf("HeaderOf: %+v, %v; the encoding has %d bytes", h, err, len(b))
	}
	encs := make([][]byte, len(parts))
	for i, p := range parts {
		if encs[i], err = p.MarshalBinary(); err != nil {
			t.Fatal(err)
		}
	}
	direct := make([]byte, len(b))
	for i := range direct {
		direct[i] = 0xff // ConcatEncoded must write every byte
	}
	if err := ConcatEncoded(direct, encs...); err != nil || !bytes.Equal(direct, b) {
		t.Fatalf("ConcatEncoded differs from Concat's encoding (err %v)", err)
	}
	if err := ConcatEncoded(direct[:len(direct)-64], encs...); err == nil {
		t.Error("ConcatEncoded wrote into a short buffer")
	}
	if _, err := HeaderOf(E0M4, group, 48, 4); err == nil {
		t.Error("HeaderOf accepted K = 48 with groups of 32")
	}
	other, err := QuantizeInt4(make([]float32, k*4), k, 4, group)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Concat(parts[0], other); err == nil {
		t.Error("Concat joined E0M4 with INT4")
	}
	otherEnc, err := other.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := ConcatEncoded(make([]byte, len(b)), encs[0], otherEnc); err == nil {
		t.Error("ConcatEncoded joined E0M4 with INT4")
	}
	if _, err := Concat(); err == nil {
		t.Error("Concat of nothing succeeded")
	}
}
