package kernels

import (
	"fmt"
	"math"
	"testing"
)

// winoCases are 3x3 convolutions the Winograd route takes (when forced):
// odd output sizes (a tile overhanging the edge), a 1x1 input whose whole
// output is padding's, channel counts off multiples of 4 and 8, batch 2,
// asymmetric and zero padding.
var winoCases = []struct {
	name string
	p    ConvParams
}{
	{"7x9 c3 k5 b2", ConvParams{N: 2, C: 3, H: 7, W: 9, OutC: 5, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"1x1 pad1 c17", ConvParams{N: 1, C: 17, H: 1, W: 1, OutC: 3, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"13x5 c5 k17", ConvParams{N: 1, C: 5, H: 13, W: 5, OutC: 17, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"asym pads b2", ConvParams{N: 2, C: 17, H: 8, W: 11, OutC: 5, KH: 3, KW: 3, PadTop: 0, PadLeft: 2, PadBottom: 2, PadRight: 0}},
	{"valid 6x7", ConvParams{N: 1, C: 5, H: 6, W: 7, OutC: 3, KH: 3, KW: 3}},
	{"c24 k20 10x10", ConvParams{N: 1, C: 24, H: 10, W: 10, OutC: 20, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
}

// winoTol is the Winograd route's error bound against the float64
// reference, relative to the output's scale (its largest magnitude). The
// transforms form sums of up to 4 inputs (V), 9 halved weights (U) and 9
// products (the output), whose magnitudes exceed the output's by a small
// factor when they cancel, and the rounding then lands on those sums: in
// fp32 that is well inside the 1e-4 of the scale every route is held to.
// With fp16 storage V, U and the products are stored in half (unit
// roundoff 2^-11 = 4.9e-4); the output sums 9 of them with coefficients
// of magnitude 1, so up to ~9 roundings of terms about the output's size:
// 9 * 4.9e-4 = 4.4e-3 of the scale, plus the fp16 store of the output.
func winoTol(s Storage) float64 {
	if s == F16 {
		return 5e-3
	}
	return 1e-4
}

// TestConvWinograd checks the Winograd route against the reference on odd
// shapes, with and without bias, every activation, in fp32 and fp16
// storage, and that it ran (the scratch it was given was all it needs, no
// more: with one element less Conv2D must fall back and still be right).
func TestConvWinograd(t *testing.T) {
	defer func() { convForce, convPXForce = "", 0 }()
	acts := []struct {
		act  ConvAct
		a, b float32
	}{{ConvActNone, 0, 0}, {ConvActRelu, 0, 0}, {ConvActClip, -0.5, 0.75}, {ConvActHardSwish, 0, 0},
		{ConvActHardSigmoid, 0.2, 0.5}, {ConvActSiLU, 0, 0}, {ConvActLeakyRelu, 0.1, 0}}
	for ci, c := range winoCases {
		for _, s := range storages {
			for _, bias := range []bool{false, true} {
				// One activation per case and bias setting, every one
				// across the cases, so that the test stays short.
				for ai, a := range acts {
					if ai != (2*ci+btoi(bias))%len(acts) {
						continue
					}
					p := c.p
					p.Weight, p.Act, p.ActA, p.ActB = s, a.act, a.a, a.b
					pn, _ := p.norm()
					if !pn.Winograd() {
						t.Fatalf("%s: not a Winograd convolution", c.name)
					}
					// The GPU build (one channel per transform work-item)
					// on every other run.
					convForce, convPXForce = "wino", 0
					if bias {
						convPXForce = 4
					}
					got, want := convRun(t, s, p, bias, p.ScratchElems())
					// The bound is relative to the convolution's own scale,
					// before the activation (Clip to 0.75 leaves a scale
					// of 0.75 on sums of ~7).
					pre := p
					pre.Act = ConvActNone
					var pw []float32
					if bias {
						pw = laRand(14, p.OutC, p.Weight)
					}
					_, ref := convRunRef(t, s, pre, pw)
					what := fmt.Sprintf("%s/%s/bias=%v/act%d/px%d", c.name, s, bias, a.act, convPXForce)
					winoClose(t, what, s, got, want, ref)
				}
			}
		}
		// Scratch one element short of the Winograd route's: conv_flat.
		p := c.p
		p.Weight = F32
		convForce, convPXForce = "wino", 0
		pn, _ := p.norm()
		// alloc's buffers hold one element past the n asked for.
		got, want := convRun(t, F32, p, true, pn.winoElems()-2)
		laClose(t, c.name+"/short scratch", F32, got, want)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// convRunRef is convRun's reference alone (the same inputs, bias given).
func convRunRef(t *testing.T, s Storage, p ConvParams, bias []float32) (x, want []float32) {
	t.Helper()
	pn, err := p.norm()
	if err != nil {
		t.Fatal(err)
	}
	oh, ow := pn.OutSize()
	x = laRand(11, p.N*p.C*p.H*p.W, s)
	w := laRand(12, p.OutC*p.C/pn.Groups*p.KH*p.KW, p.Weight)
	want = make([]float32, p.N*p.OutC*oh*ow)
	if err := Conv2DRef(x, w, bias, want, p); err != nil {
		t.Fatal(err)
	}
	return x, want
}

// winoClose asserts |got - want| <= winoTol(s) * max|pre| (plus fp16's
// rounding of the stored output), pre being the output before the
// activation, and logs the largest error seen.
func winoClose(t *testing.T, what string, s Storage, got, want, pre []float32) {
	t.Helper()
	scale := 0.0
	for _, w := range pre {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	worst := 0.0
	for i := range want {
		w := want[i]
		if s == F16 {
			w = roundTrip(F16, w)
		}
		worst = math.Max(worst, math.Abs(float64(got[i])-float64(w)))
	}
	if worst > winoTol(s)*scale+1e-6 || math.IsNaN(worst) {
		t.Fatalf("%s: largest error %g, over %g of the output scale %g", what, worst, winoTol(s), scale)
	}
	t.Logf("%s: largest error %.2g of the scale %.3g", what, worst/scale, scale)
}

// TestConvWinogradRoute checks which 3x3 convolutions take the Winograd
// route, on CPU and GPU strip widths alike, and that their scratch covers
// both the Winograd and conv_flat layouts.
func TestConvWinogradRoute(t *testing.T) {
	base := ConvParams{N: 1, C: 64, H: 56, W: 56, OutC: 64, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}
	for _, c := range []struct {
		name string
		edit func(*ConvParams)
		want string
	}{
		{"resnet 3x3", func(*ConvParams) {}, "wino"},
		{"asym pads", func(p *ConvParams) { p.PadTop, p.PadRight = 0, 2 }, "wino"},
		{"few in", func(p *ConvParams) { p.C = winoMinChannels - 1 }, "flat"},
		{"few out", func(p *ConvParams) { p.OutC = winoMinChannels - 1 }, "flat"},
		{"stride 2", func(p *ConvParams) { p.StrideH, p.StrideW = 2, 2 }, "flat"},
		{"stride 2 along w", func(p *ConvParams) { p.StrideW = 2 }, "flat"},
		{"dilation 2", func(p *ConvParams) { p.DilationH, p.DilationW = 2, 2 }, "flat"},
		{"groups 2", func(p *ConvParams) { p.Groups = 2 }, "flat"},
		{"depthwise", func(p *ConvParams) { p.Groups = 64 }, "depthwise"},
		{"5x5", func(p *ConvParams) { p.KH, p.KW = 5, 5 }, "flat"},
		{"3x1", func(p *ConvParams) { p.KW = 1 }, "flat"},
	} {
		p := base
		c.edit(&p)
		pn, err := p.norm()
		if err != nil {
			t.Fatal(err)
		}
		// pw is true on CPUs with 8- or 16-lane strips, false on GPUs;
		// neither changes a 3x3 convolution's route.
		for _, pw := range []bool{false, true} {
			if got := pn.route(pw); got != c.want {
				t.Errorf("%s (pw %v): route %q, want %q", c.name, pw, got, c.want)
			}
		}
		if c.want == "wino" {
			if got, want := p.ScratchElems(), max(pn.winoElems(), pn.flatElems()); got != want {
				t.Errorf("%s: ScratchElems %d, want %d", c.name, got, want)
			}
		}
	}
}

// TestConvWinogradWeight runs the Winograd route on weights transformed
// on the host (WinogradWeights, as an engine does at Open), fp32 and fp16,
// GPU and CPU transform widths, and checks the refusals: a transformed
// weight for a convolution off the route, and scratch short of the
// route's (there is no other route to fall back to).
func TestConvWinogradWeight(t *testing.T) {
	defer func() { convForce, convPXForce = "", 0 }()
	cases := []ConvParams{
		{N: 2, C: 33, H: 7, W: 9, OutC: 35, KH: 3, KW: 3, PadTop: 1, PadLeft: 0, PadBottom: 2, PadRight: 1, Act: ConvActRelu},
		{N: 1, C: 40, H: 10, W: 10, OutC: 32, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Act: ConvActSiLU},
	}
	for ci, p := range cases {
		for _, s := range storages {
			convPXForce = 4 * (1 + ci) // 4: the GPU build; 8: the CPU one
			p.Weight, p.WinogradWeight = s, true
			pn, err := p.norm()
			if err != nil {
				t.Fatal(err)
			}
			oh, ow := pn.OutSize()
			x := laRand(11, p.N*p.C*p.H*p.W, s)
			w := laRand(12, p.OutC*p.C*9, s)
			bias := laRand(14, p.OutC, s)
			u, err := WinogradWeights(w, p.OutC, p.C)
			if err != nil {
				t.Fatal(err)
			}
			p.Bias = upload(t, s, bias)
			ny := p.N * p.OutC * oh * ow
			yb := alloc(t, s, ny)
			xb, ub := upload(t, s, x), upload(t, s, u)
			if err := testLib.Conv2D(s, xb, ub, yb, alloc(t, s, p.ScratchElems()), p); err != nil {
				t.Fatal(err)
			}
			got := download(t, s, yb, ny)
			ref := p
			ref.WinogradWeight, ref.Act = false, ConvActNone
			pre := make([]float32, ny)
			if err := Conv2DRef(x, w, bias, pre, ref); err != nil {
				t.Fatal(err)
			}
			ref.Act = p.Act
			want := make([]float32, ny)
			if err := Conv2DRef(x, w, bias, want, ref); err != nil {
				t.Fatal(err)
			}
			winoClose(t, fmt.Sprintf("case %d/%s/px%d", ci, s, convPXForce), s, got, want, pre)
			// alloc's buffers hold one element past the n asked for.
			if err := testLib.Conv2D(s, xb, ub, yb, alloc(t, s, p.ScratchElems()-2), p); err == nil {
				t.Errorf("case %d/%s: scratch one element short: no error", ci, s)
			}
		}
	}
	p := cases[0]
	p.WinogradWeight, p.StrideW = true, 2
	if err := testLib.Conv2D(F32, alloc(t, F32, 1), alloc(t, F32, 1), alloc(t, F32, 1), Buf{}, p); err == nil {
		t.Error("a transformed weight on a stride-2 convolution: no error")
	}
	if _, err := WinogradWeights(make([]float32, 10), 1, 1); err == nil {
		t.Error("WinogradWeights of 10 values for 1x1x3x3: no error")
	}
}

// TestWinogradWeightsMatchKernel checks that the host transform an engine
// stores at Open (WinogradWeights) is the one conv_wino_w writes into the
// scratch on every call (its first 16*OutC*C elements), on the CPU and
// GPU transform widths: the two are written separately, and a drift
// between them would make a pre-transformed weight compute a different
// convolution from the same weight transformed on the device.
func TestWinogradWeightsMatchKernel(t *testing.T) {
	defer func() { convForce, convPXForce = "", 0 }()
	p := ConvParams{N: 1, C: 33, H: 4, W: 5, OutC: 34, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Weight: F32}
	w := laRand(12, p.OutC*p.C*9, F32)
	want, err := WinogradWeights(w, p.OutC, p.C)
	if err != nil {
		t.Fatal(err)
	}
	for _, px := range []int{4, 8} {
		convForce, convPXForce = "wino", px
		scratch := alloc(t, F32, p.ScratchElems())
		if err := testLib.Conv2D(F32, upload(t, F32, laRand(11, p.N*p.C*p.H*p.W, F32)), upload(t, F32, w),
			alloc(t, F32, p.N*p.OutC*p.H*p.W), scratch, p); err != nil {
			t.Fatal(err)
		}
		got := download(t, F32, scratch, len(want))
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-6*math.Max(1, math.Abs(float64(want[i]))) {
				t.Fatalf("px %d: U[%d] is %v on the device, %v on the host", px, i, got[i], want[i])
			}
		}
	}
}
