package kernels

import (
	"fmt"
	"math"
	"testing"
)

// bothStyles runs f with the CPU style (one item per row) and the GPU style
// (one work-group per row) forced in turn, so both are checked on any device.
func bothStyles(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, st := range []int{1, 2} {
		name := map[int]string{1: "rows", 2: "groups"}[st]
		t.Run(name, func(t *testing.T) {
			old := styleOverride
			styleOverride = st
			defer func() { styleOverride = old }()
			f(t)
		})
	}
}

// stored is xs as storage s holds them: references must start from what the
// device actually reads.
func stored(s Storage, xs []float32) []float32 {
	out := make([]float32, len(xs))
	for i, x := range xs {
		out[i] = roundTrip(s, x)
	}
	return out
}

// normTol is the tolerance of normalised outputs (magnitude ~1): fp32
// rounding, or one f16 step either side when the device and the reference
// round a value near a tie differently.
func normTol(s Storage) (atol, rtol float64) {
	if s == F16 {
		return 2e-3, 2e-3
	}
	return 2e-5, 2e-5
}

func TestNormRefHand(t *testing.T) {
	// LayerNorm([1, 2, 3]): mean 2, variance 2/3, so (x-2)/sqrt(2/3).
	p := NormParams{Rows: 1, Cols: 3, Eps: 0}
	out := make([]float32, 3)
	LayerNormRef(p, []float32{1, 2, 3}, []float32{1, 1, 1}, nil, out)
	k := float32(1 / math.Sqrt(2.0/3))
	assertClose(t, "LayerNorm [1,2,3]", out, []float32{-k, 0, k}, 1e-6, 1e-6)
	LayerNormRef(p, []float32{1, 2, 3}, []float32{2, 2, 2}, []float32{1, -1, 0.5}, out)
	assertClose(t, "LayerNorm affine", out, []float32{-2*k + 1, -1, 2*k + 0.5}, 1e-6, 1e-6)
	// RMSNorm([1, 2, 3]): mean square 14/3.
	r := float32(1 / math.Sqrt(14.0/3))
	RMSNormRef(p, []float32{1, 2, 3}, nil, out)
	assertClose(t, "RMSNorm [1,2,3]", out, []float32{r, 2 * r, 3 * r}, 1e-6, 1e-6)
	// Residual: x + r = [1, 2, 3] again, and the sum is stored.
	sum := make([]float32, 3)
	AddRMSNormRef(p, []float32{0, 1, 2}, []float32{1, 1, 1}, sum, []float32{1, 1, 1}, out)
	assertClose(t, "AddRMSNorm sum", sum, []float32{1, 2, 3}, 0, 0)
	assertClose(t, "AddRMSNorm", out, []float32{r, 2 * r, 3 * r}, 1e-6, 1e-6)
	// InstanceNorm of one channel [1, 3]: mean 2, variance 1.
	out2 := make([]float32, 4)
	// The second channel is constant: eps keeps it finite, giving the bias.
	if err := InstanceNormRef(GroupNormParams{N: 1, C: 2, Spatial: 2, Eps: 1e-6}, []float32{1, 3, 5, 5}, []float32{1, 2}, []float32{0, 7}, out2); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "InstanceNorm", out2, []float32{-1, 1, 7, 7}, 1e-5, 1e-6)
}

// normCase runs one row-norm configuration on the device against the
// reference.
type normCase struct {
	rows, cols     int
	rms, res, sum  bool
	bias, noScale  bool
	ws             Storage
	sumInX, outInX bool // aliasing: sum is x's buffer; out is x's buffer
}

func (c normCase) String() string {
	return fmt.Sprintf("%dx%d rms=%v res=%v sum=%v bias=%v noscale=%v w=%v sumInX=%v outInX=%v",
		c.rows, c.cols, c.rms, c.res, c.sum, c.bias, c.noScale, c.ws, c.sumInX, c.outInX)
}

func runNormCase(t *testing.T, s Storage, c normCase, seed int64) {
	t.Helper()
	n := c.rows * c.cols
	x := stored(s, randVec(seed, n))
	for i := range x { // an offset mean, so the two-pass variance matters
		x[i] = roundTrip(s, x[i]*2+3)
	}
	r := stored(s, randVec(seed+1, n))
	w := stored(c.ws, randVec(seed+2, c.cols))
	b := stored(c.ws, randVec(seed+3, c.cols))
	p := NormParams{Storage: s, Weights: c.ws, Rows: c.rows, Cols: c.cols, Eps: 1e-5}

	var res, sum, bias, scale []float32
	if c.res {
		res = r
		if c.sum {
			sum = make([]float32, n)
		}
	}
	if c.bias {
		bias = b
	}
	if !c.noScale || !c.rms {
		scale = w
	}
	want := make([]float32, n)
	if c.rms {
		AddRMSNormRef(p, x, res, sum, scale, want)
	} else {
		AddLayerNormRef(p, x, res, sum, scale, bias, want)
	}

	xb := upload(t, s, x)
	var rb, sb, wb, bb Buf
	if res != nil {
		rb = upload(t, s, r)
		if sum != nil {
			sb = alloc(t, s, n)
			if c.sumInX {
				sb = xb
			}
		}
	}
	if scale != nil {
		wb = upload(t, c.ws, w)
	}
	if bias != nil {
		bb = upload(t, c.ws, b)
	}
	ob := alloc(t, s, n)
	if c.outInX {
		ob = xb
	}
	var err error
	if c.rms {
		err = testLib.AddRMSNorm(p, xb, rb, sb, wb, ob)
	} else {
		err = testLib.AddLayerNorm(p, xb, rb, sb, wb, bb, ob)
	}
	if err != nil {
		t.Fatal(err)
	}
	atol, rtol := normTol(s)
	assertClose(t, c.String()+" out", download(t, s, ob, n), want, atol, rtol)
	if sum != nil && !c.outInX {
		assertClose(t, c.String()+" sum", download(t, s, sb, n), sum, 0, 0)
	}
}

func TestLayerNorm(t *testing.T) {
	shapes := [][2]int{{1, 1}, {3, 5}, {7, 16}, {5, 33}, {2, 771}, {1, 4096}, {130, 24}}
	bothStyles(t, func(t *testing.T) {
		for _, s := range storages {
			for i, sh := range shapes {
				runNormCase(t, s, normCase{rows: sh[0], cols: sh[1], bias: i%2 == 0, ws: s}, int64(i))
			}
			// Weights stored differently from activations.
			runNormCase(t, s, normCase{rows: 3, cols: 40, bias: true, ws: F16}, 9)
			runNormCase(t, s, normCase{rows: 3, cols: 40, bias: true, ws: F32}, 10)
			// In place.
			runNormCase(t, s, normCase{rows: 4, cols: 37, bias: true, ws: s, outInX: true}, 11)
		}
	})
}

func TestRMSNorm(t *testing.T) {
	shapes := [][2]int{{1, 1}, {3, 5}, {7, 16}, {5, 33}, {1, 4096}, {70, 64}}
	bothStyles(t, func(t *testing.T) {
		for _, s := range storages {
			for i, sh := range shapes {
				runNormCase(t, s, normCase{rows: sh[0], cols: sh[1], rms: true, ws: s, noScale: i == 2}, int64(20+i))
			}
		}
	})
}

func TestAddNorm(t *testing.T) {
	bothStyles(t, func(t *testing.T) {
		for _, s := range storages {
			for i, rms := range []bool{false, true} {
				seed := int64(40 + 10*i)
				runNormCase(t, s, normCase{rows: 5, cols: 67, rms: rms, res: true, ws: s}, seed)
				runNormCase(t, s, normCase{rows: 5, cols: 67, rms: rms, res: true, sum: true, bias: true, ws: s}, seed+1)
				// The residual stream updated in place: sum aliases x.
				runNormCase(t, s, normCase{rows: 3, cols: 48, rms: rms, res: true, sum: true, ws: s, sumInX: true}, seed+2)
				// Everything in x: sum and out both alias it.
				runNormCase(t, s, normCase{rows: 3, cols: 19, rms: rms, res: true, sum: true, ws: s, sumInX: true, outInX: true}, seed+3)
			}
		}
	})
}

func TestGroupNorm(t *testing.T) {
	cases := []GroupNormParams{
		{N: 2, C: 6, Groups: 3, Spatial: 5},
		{N: 1, C: 4, Groups: 2, Spatial: 40, ScalePerGroup: true},
		{N: 3, C: 3, Groups: 3, Spatial: 17}, // instance norm shape
		{N: 1, C: 8, Groups: 1, Spatial: 1},
		{N: 2, C: 2, Groups: 2, Spatial: 1}, // a single element per row: output = bias
	}
	bothStyles(t, func(t *testing.T) {
		for _, s := range storages {
			for i, p := range cases {
				p.Storage, p.Weights, p.Eps = s, s, 1e-5
				n := p.N * p.C * p.Spatial
				nw := p.C
				if p.ScalePerGroup {
					nw = p.Groups
				}
				x := stored(s, randVec(int64(60+i), n))
				w := stored(s, randVec(int64(70+i), nw))
				b := stored(s, randVec(int64(80+i), nw))
				want := make([]float32, n)
				if err := GroupNormRef(p, x, w, b, want); err != nil {
					t.Fatal(err)
				}
				ob := alloc(t, s, n)
				if err := testLib.GroupNorm(p, upload(t, s, x), upload(t, s, w), upload(t, s, b), ob); err != nil {
					t.Fatal(err)
				}
				atol, rtol := normTol(s)
				assertClose(t, fmt.Sprintf("GroupNorm %+v", p), download(t, s, ob, n), want, atol, rtol)
			}
		}
	})
}

func TestInstanceNorm(t *testing.T) {
	p := GroupNormParams{Storage: F32, Weights: F32, N: 2, C: 3, Spatial: 21, Eps: 1e-5}
	n := p.N * p.C * p.Spatial
	x, w, b := randVec(90, n), randVec(91, p.C), randVec(92, p.C)
	want := make([]float32, n)
	if err := InstanceNormRef(p, x, w, b, want); err != nil {
		t.Fatal(err)
	}
	// Independent check: every (n, c) row has mean b[c] and std |w[c]|.
	for r := 0; r < p.N*p.C; r++ {
		m, v := 0.0, 0.0
		for j := 0; j < p.Spatial; j++ {
			m += float64(want[r*p.Spatial+j])
		}
		m /= float64(p.Spatial)
		for j := 0; j < p.Spatial; j++ {
			d := float64(want[r*p.Spatial+j]) - m
			v += d * d
		}
		c := r % p.C
		if math.Abs(m-float64(b[c])) > 1e-5 || math.Abs(math.Sqrt(v/float64(p.Spatial))-math.Abs(float64(w[c]))) > 1e-4 {
			t.Fatalf("InstanceNormRef row %d: mean %v std %v, want %v and %v", r, m, math.Sqrt(v/float64(p.Spatial)), b[c], w[c])
		}
	}
	ob := alloc(t, F32, n)
	if err := testLib.InstanceNorm(p, upload(t, F32, x), upload(t, F32, w), upload(t, F32, b), ob); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "InstanceNorm", download(t, F32, ob, n), want, 2e-5, 2e-5)
}

func TestNormErrors(t *testing.T) {
	x := alloc(t, F32, 10)
	p := NormParams{Storage: F32, Weights: F32, Rows: 2, Cols: 6, Eps: 1e-5}
	if err := testLib.LayerNorm(p, x, x, Buf{}, x); err == nil {
		t.Fatal("LayerNorm over 12 elements of a 10-element buffer succeeded")
	}
	if err := testLib.GroupNorm(GroupNormParams{N: 1, C: 5, Groups: 2, Spatial: 1}, x, x, x, x); err == nil {
		t.Fatal("GroupNorm with 5 channels in 2 groups succeeded")
	}
	// Empty input: nothing to do, no error.
	if err := testLib.LayerNorm(NormParams{Rows: 0, Cols: 8}, Buf{}, Buf{}, Buf{}, Buf{}); err != nil {
		t.Fatal(err)
	}
}

func benchNorm(b *testing.B, rows, cols int) {
	s := F32
	n := rows * cols
	x := upload(b, s, randVec(1, n))
	w := upload(b, s, randVec(2, cols))
	bias := upload(b, s, randVec(3, cols))
	out := alloc(b, s, n)
	p := NormParams{Storage: s, Weights: s, Rows: rows, Cols: cols, Eps: 1e-5}
	if err := testLib.LayerNorm(p, x, w, bias, out); err != nil {
		b.Fatal(err)
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(2 * n * s.Size()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := testLib.LayerNorm(p, x, w, bias, out); err != nil {
			b.Fatal(err)
		}
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLayerNorm measures a ViT-base-like block (50 tokens of 768) and a
// single decode token of a 4096-wide model; launches are queued and finished
// once, as a session step does.
func BenchmarkLayerNorm(b *testing.B) {
	b.Run("50x768", func(b *testing.B) { benchNorm(b, 50, 768) })
	b.Run("1x4096", func(b *testing.B) { benchNorm(b, 1, 4096) })
}
