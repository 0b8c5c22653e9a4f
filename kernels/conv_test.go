package kernels

import (
	"fmt"
	"testing"
)

func TestConvRefByHand(t *testing.T) {
	// 3x3 input 1..9, 2x2 kernel of ones: each output sums a 2x2 block.
	x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	w := []float32{1, 1, 1, 1}
	y := make([]float32, 4)
	p := ConvParams{N: 1, C: 1, H: 3, W: 3, OutC: 1, KH: 2, KW: 2}
	if err := Conv2DRef(x, w, []float32{0.5}, y, p); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "valid", y, []float32{12.5, 16.5, 24.5, 28.5}, 0, 0)
	// Stride 2, pad 1 all round: windows at rows/cols -1 and 1 of the input.
	p = ConvParams{N: 1, C: 1, H: 3, W: 3, OutC: 1, KH: 2, KW: 2, StrideH: 2, StrideW: 2, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}
	if oh, ow := p.OutSize(); oh != 2 || ow != 2 {
		t.Fatalf("OutSize %dx%d, want 2x2", oh, ow)
	}
	if err := Conv2DRef(x, w, nil, y, p); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "stride+pad", y, []float32{1, 2 + 3, 4 + 7, 5 + 6 + 8 + 9}, 0, 0)
}

// convRun runs p on random data through Conv2D with scratch elements of
// scratch (0: none) and returns output and reference.
func convRun(t *testing.T, s Storage, p ConvParams, withBias bool, scratch int) (got, want []float32) {
	t.Helper()
	pn, err := p.norm()
	if err != nil {
		t.Fatal(err)
	}
	oh, ow := pn.OutSize()
	x := laRand(11, p.N*p.C*p.H*p.W, s)
	w := laRand(12, p.OutC*p.C/pn.Groups*p.KH*p.KW, p.Weight)
	ny := p.N * p.OutC * oh * ow
	y0 := laRand(13, ny, s)
	var bias []float32
	if withBias {
		bias = laRand(14, p.OutC, p.Weight)
		p.Bias = upload(t, p.Weight, bias)
	}
	var sb Buf
	if scratch > 0 {
		sb = alloc(t, s, scratch)
	}
	yb := upload(t, s, y0)
	if err := testLib.Conv2D(s, upload(t, s, x), upload(t, p.Weight, w), yb, sb, p); err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), y0...)
	if err := Conv2DRef(x, w, bias, want, p); err != nil {
		t.Fatal(err)
	}
	return download(t, s, yb, ny), want
}

var convCases = map[string]ConvParams{
	"3x3 pad1":         {N: 2, C: 5, H: 9, W: 11, OutC: 7, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1},
	"7x7 s2 p3":        {N: 1, C: 3, H: 23, W: 17, OutC: 9, KH: 7, KW: 7, StrideH: 2, StrideW: 2, PadTop: 3, PadLeft: 3, PadBottom: 3, PadRight: 3},
	"1x1":              {N: 2, C: 19, H: 5, W: 7, OutC: 13, KH: 1, KW: 1},
	"1x1 s2":           {N: 1, C: 17, H: 9, W: 9, OutC: 6, KH: 1, KW: 1, StrideH: 2, StrideW: 2},
	"patch 8/8":        {N: 1, C: 3, H: 24, W: 32, OutC: 20, KH: 8, KW: 8, StrideH: 8, StrideW: 8},
	"asym pads dil":    {N: 1, C: 4, H: 10, W: 13, OutC: 5, KH: 3, KW: 2, StrideH: 2, StrideW: 3, PadTop: 2, PadLeft: 0, PadBottom: 1, PadRight: 3, DilationH: 2, DilationW: 3},
	"groups 2":         {N: 2, C: 6, H: 7, W: 5, OutC: 10, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 2},
	"groups 3 1x1":     {N: 1, C: 24, H: 3, W: 5, OutC: 12, KH: 1, KW: 1, Groups: 3},
	"depthwise":        {N: 2, C: 8, H: 9, W: 7, OutC: 8, KH: 3, KW: 3, StrideH: 2, StrideW: 1, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 8},
	"depthwise x2":     {N: 1, C: 4, H: 6, W: 6, OutC: 8, KH: 5, KW: 5, PadTop: 2, PadLeft: 2, PadBottom: 2, PadRight: 2, Groups: 4},
	"conv1d":           {N: 2, C: 6, H: 1, W: 33, OutC: 7, KH: 1, KW: 5, StrideW: 2, PadLeft: 2, PadRight: 1},
	"conv1d depthwise": {N: 1, C: 5, H: 1, W: 17, OutC: 5, KH: 1, KW: 4, PadLeft: 3, Groups: 5},
	// Rows wider than a strip (16 lanes): interior strips take the vector
	// loads, the first and the shifted last one the padding path.
	"wide 3x3 odd":   {N: 2, C: 3, H: 5, W: 37, OutC: 11, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1},
	"wide s2":        {N: 1, C: 5, H: 7, W: 75, OutC: 9, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1},
	"wide s3 dil2":   {N: 1, C: 3, H: 9, W: 70, OutC: 5, KH: 3, KW: 3, StrideH: 1, StrideW: 3, PadTop: 2, PadLeft: 2, PadBottom: 2, PadRight: 2, DilationH: 2, DilationW: 2},
	"wide groups 3":  {N: 1, C: 9, H: 4, W: 41, OutC: 15, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 3},
	"wide dw s2":     {N: 2, C: 7, H: 6, W: 67, OutC: 7, KH: 5, KW: 5, StrideH: 2, StrideW: 2, PadTop: 2, PadLeft: 2, PadBottom: 2, PadRight: 2, Groups: 7},
	"wide 1x1 s2":    {N: 1, C: 17, H: 3, W: 66, OutC: 10, KH: 1, KW: 1, StrideH: 2, StrideW: 2},
	"wide 1x1 odd":   {N: 2, C: 23, H: 3, W: 19, OutC: 13, KH: 1, KW: 1},
	"dw dil tall":    {N: 1, C: 3, H: 13, W: 19, OutC: 3, KH: 3, KW: 3, StrideH: 3, PadTop: 2, PadLeft: 1, PadBottom: 3, PadRight: 1, DilationH: 2, Groups: 3},
	"dw multiplier3": {N: 1, C: 3, H: 5, W: 21, OutC: 9, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 3},
}

func TestConvShapes(t *testing.T) {
	for name, p := range convCases {
		for _, st := range [][2]Storage{{F32, F32}, {F16, F16}, {F32, F16}} {
			p.Weight = st[1]
			for _, withBias := range []bool{false, true} {
				got, want := convRun(t, st[0], p, withBias, p.ScratchElems())
				laClose(t, fmt.Sprintf("%s/%s/w%s/bias=%v (route %s)", name, st[0], st[1], withBias, p.route(false)), st[0], got, want)
			}
		}
	}
}

// TestConvRoutes drives the same convolutions through every route and
// strip width: the implicit GEMM (conv_tile) at 4, 8 and 16 lanes, the
// depthwise kernel (conv_dw; other shapes take conv_tile there), direct,
// the gather in both layouts, the GPU's tiled GEMM, and scratch for fewer
// images than the batch.
func TestConvRoutes(t *testing.T) {
	defer func() { mmForce, convKMajor, convForce, convPXForce = "", false, "", 0 }()
	for _, name := range []string{"3x3 pad1", "7x7 s2 p3", "asym pads dil", "groups 2", "1x1", "groups 3 1x1", "wide s2", "wide dw s2", "dw multiplier3", "depthwise", "depthwise x2", "conv1d depthwise", "dw dil tall"} {
		p := convCases[name]
		convForce = "im2col"
		full := p.ScratchElems()
		pn, _ := p.norm()
		flat := pn.flatElems()
		for _, r := range []struct {
			name    string
			route   string
			px      int
			scratch int
			kMajor  bool
			force   string
		}{
			{"tile16", "tile", 16, 0, false, ""},
			{"tile8", "tile", 8, 0, false, ""},
			{"tile4", "tile", 4, 0, false, ""},
			{"flat16", "flat", 16, flat, false, ""},
			{"flat4", "flat", 4, flat, false, ""},
			{"flat short scratch", "flat", 16, flat - 1, false, ""},
			{"dw16", "dw", 16, 0, false, ""},
			{"dw8", "dw", 8, 0, false, ""},
			{"dw4", "dw", 4, 0, false, ""},
			{"pw16", "pw", 16, 0, false, ""},
			{"pw8", "pw", 8, 0, false, ""},
			{"pw4", "pw", 4, 0, false, ""},
			{"dwgen16", "dwgen", 16, 0, false, ""},
			{"dwgen4", "dwgen", 4, 0, false, ""},
			{"direct", "direct", 0, 0, false, ""},
			{"one image", "im2col", 0, full / p.N, false, ""},
			{"k-major", "im2col", 0, full, true, ""},
			{"tiled", "im2col", 0, full, true, "mm_tiled"},
			{"naive", "im2col", 0, full, false, "mm_naive"},
		} {
			mmForce, convKMajor, convForce, convPXForce = r.force, r.kMajor, r.route, r.px
			for _, s := range storages {
				p.Weight = s
				got, want := convRun(t, s, p, true, r.scratch)
				laClose(t, fmt.Sprintf("%s/%s/%s", name, r.name, s), s, got, want)
			}
		}
	}
}

// dwCases are depthwise convolutions at MobileNet/EfficientNet's kernels
// on odd shapes: odd sizes, channel counts off multiples of 4 and 8, maps
// narrower than a strip and wider than two, asymmetric pads, batch 2.
// reg says whether conv_dw_reg takes them (the rest are conv_dw's).
var dwCases = []struct {
	name string
	reg  bool
	p    ConvParams
}{
	{"3x3 s2 odd b2", true, ConvParams{N: 2, C: 13, H: 15, W: 29, OutC: 13, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 13}},
	{"3x3 s1 wide", true, ConvParams{N: 1, C: 5, H: 6, W: 41, OutC: 5, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 5}},
	{"5x5 s1 wide", true, ConvParams{N: 1, C: 11, H: 9, W: 37, OutC: 11, KH: 5, KW: 5, PadTop: 2, PadLeft: 2, PadBottom: 2, PadRight: 2, Groups: 11}},
	{"5x5 s2 small b2", true, ConvParams{N: 2, C: 6, H: 7, W: 7, OutC: 6, KH: 5, KW: 5, StrideH: 2, StrideW: 2, PadTop: 2, PadLeft: 2, PadBottom: 2, PadRight: 2, Groups: 6}},
	{"5x5 s2 wide", true, ConvParams{N: 1, C: 3, H: 11, W: 71, OutC: 3, KH: 5, KW: 5, StrideH: 2, StrideW: 2, PadTop: 2, PadLeft: 2, PadBottom: 2, PadRight: 2, Groups: 3}},
	{"3x3 asym pads", true, ConvParams{N: 1, C: 9, H: 8, W: 21, OutC: 9, KH: 3, KW: 3, StrideH: 1, StrideW: 2, PadTop: 0, PadLeft: 2, PadBottom: 1, PadRight: 0, Groups: 9}},
	{"1x5 valid", true, ConvParams{N: 1, C: 7, H: 3, W: 23, OutC: 7, KH: 1, KW: 5, Groups: 7}},
	{"3x3 dil rows", true, ConvParams{N: 1, C: 4, H: 12, W: 18, OutC: 4, KH: 3, KW: 3, StrideH: 2, PadTop: 2, PadLeft: 1, PadBottom: 2, PadRight: 1, DilationH: 2, Groups: 4}},
	{"7x7", false, ConvParams{N: 1, C: 3, H: 9, W: 20, OutC: 3, KH: 7, KW: 7, PadTop: 3, PadLeft: 3, PadBottom: 3, PadRight: 3, Groups: 3}},
	{"3x3 dil cols", false, ConvParams{N: 1, C: 3, H: 7, W: 20, OutC: 3, KH: 3, KW: 3, PadTop: 1, PadLeft: 2, PadBottom: 1, PadRight: 2, DilationW: 2, Groups: 3}},
	{"3x3 s3", false, ConvParams{N: 1, C: 2, H: 7, W: 25, OutC: 2, KH: 3, KW: 3, StrideW: 3, PadLeft: 1, PadRight: 1, Groups: 2}},
}

// TestConvDepthwise runs dwCases on the kernel dwKernel picks and on
// conv_dw, at every strip width, both storages and with an epilogue,
// against the reference.
func TestConvDepthwise(t *testing.T) {
	defer func() { convForce, convPXForce = "", 0 }()
	for _, c := range dwCases {
		pn, err := c.p.norm()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		convForce = ""
		if got := dwKernel(pn, false) == "conv_dw_reg"; got != c.reg {
			t.Errorf("%s: dwKernel picks conv_dw_reg %v on a CPU, want %v", c.name, got, c.reg)
		}
		if got := dwKernel(pn, true); got != "conv_dw" {
			t.Errorf("%s: dwKernel picks %s on a GPU, want conv_dw", c.name, got)
		}
		for _, force := range []string{"", "dwgen"} {
			for _, px := range []int{4, 8, 16} {
				convForce, convPXForce = force, px
				for _, s := range storages {
					p := c.p
					p.Weight = s
					if s == F32 {
						p.Act = ConvActHardSwish
					}
					got, want := convRun(t, s, p, true, 0)
					laClose(t, fmt.Sprintf("%s/%q/px %d/%s", c.name, force, px, s), s, got, want)
				}
			}
		}
	}
}

// TestConvDepthwiseFlat runs dwCases and a multiplier-2 case through
// conv_dwf over conv_pad's copy: the fixed-size kernels (3x3 and 5x5 at
// stride 1 and 2) and the generic one ("dwfgen"), at every strip width
// (4 is the GPU build), both storages, with and without bias and
// epilogue, against the reference. Scratch is exactly ScratchElems, so a
// kernel reading past its slack or a launcher sizing it short fails here;
// the multiplier case must fall back to conv_dw_reg or conv_dw.
func TestConvDepthwiseFlat(t *testing.T) {
	defer func() { convForce, convPXForce = "", 0 }()
	cases := append([]struct {
		name string
		reg  bool
		p    ConvParams
	}{{"multiplier 2", false, ConvParams{N: 1, C: 3, H: 6, W: 9, OutC: 6, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 3}},
		{"3x3 s1 1x1 map", false, ConvParams{N: 2, C: 5, H: 1, W: 1, OutC: 5, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 5}},
	}, dwCases...)
	for ci, c := range cases {
		pn, err := c.p.norm()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		convForce = ""
		want := 0
		if pn.dwFlat() {
			want = pn.flatElems()
		}
		if got := c.p.ScratchElems(); got != want {
			t.Errorf("%s: ScratchElems %d, want %d", c.name, got, want)
		}
		for _, force := range []string{"dwf", "dwfgen"} {
			for _, px := range []int{4, 8, 16} {
				convForce, convPXForce = force, px
				for _, s := range storages {
					p := c.p
					p.Weight = s
					if (ci+px)%2 == 0 {
						p.Act = ConvActSiLU
					}
					got, want := convRun(t, s, p, ci%3 != 1, max(1, p.ScratchElems()))
					laClose(t, fmt.Sprintf("%s/%q/px %d/%s", c.name, force, px, s), s, got, want)
				}
			}
		}
	}
}

// TestConvPointwise runs 1x1 convolutions through conv_pw at every strip
// width, both storages and with an epilogue: 1x1 planes (squeeze-excite's,
// conv_pwdot, with channels off multiples of the strip and fewer than 4
// outputs a group), planes narrower than a strip, sizes off multiples of the strip, channel counts
// off multiples of 8 and 4 (the shifted last block), groups, batch 2.
func TestConvPointwise(t *testing.T) {
	defer func() { convForce, convPXForce = "", 0 }()
	for _, c := range []struct {
		name string
		p    ConvParams
	}{
		{"se 1x1 map", ConvParams{N: 2, C: 24, H: 1, W: 1, OutC: 6, KH: 1, KW: 1}},
		{"se 1x1 odd", ConvParams{N: 2, C: 37, H: 1, W: 1, OutC: 11, KH: 1, KW: 1}},
		{"se 1x1 3 out groups", ConvParams{N: 1, C: 42, H: 1, W: 1, OutC: 6, KH: 1, KW: 1, Groups: 2}},
		{"odd map 13 out", ConvParams{N: 1, C: 19, H: 7, W: 9, OutC: 13, KH: 1, KW: 1}},
		{"wide 5 out b2", ConvParams{N: 2, C: 8, H: 3, W: 37, OutC: 5, KH: 1, KW: 1}},
		{"3 out", ConvParams{N: 1, C: 6, H: 5, W: 5, OutC: 3, KH: 1, KW: 1}},
		{"groups 3 x 9", ConvParams{N: 1, C: 12, H: 6, W: 11, OutC: 27, KH: 1, KW: 1, Groups: 3}},
		{"16 out 17 px", ConvParams{N: 1, C: 33, H: 1, W: 17, OutC: 16, KH: 1, KW: 1}},
	} {
		for _, px := range []int{4, 8, 16} {
			convForce, convPXForce = "pw", px
			for _, s := range storages {
				p := c.p
				p.Weight = s
				if s == F32 {
					p.Act = ConvActHardSwish
				}
				got, want := convRun(t, s, p, true, 0)
				laClose(t, fmt.Sprintf("%s/px %d/%s", c.name, px, s), s, got, want)
			}
		}
	}
}

// TestConvActivations checks each epilogue activation against the
// reference on shapes that reach both the vector and the padding path, on
// every route with an epilogue (conv_tile, conv_flat, conv_dw), at two
// strip widths.
func TestConvActivations(t *testing.T) {
	defer func() { convPXForce = 0 }()
	acts := []struct {
		act  ConvAct
		a, b float32
	}{
		{ConvActRelu, 0, 0}, {ConvActClip, -0.25, 0.5}, {ConvActHardSwish, 0, 0},
		{ConvActHardSigmoid, 0.2, 0.5}, {ConvActSiLU, 0, 0}, {ConvActLeakyRelu, 0.1, 0},
	}
	for _, name := range []string{"wide 3x3 odd", "wide dw s2", "wide 1x1 odd", "groups 3 1x1", "3x3 pad1", "wide s2"} {
		for _, a := range acts {
			for _, px := range []int{4, 16} {
				convPXForce = px
				p := convCases[name]
				p.Act, p.ActA, p.ActB, p.Weight = a.act, a.a, a.b, F32
				got, want := convRun(t, F32, p, true, p.ScratchElems())
				laClose(t, fmt.Sprintf("%s/act %d/px %d (route %s)", name, a.act, px, p.route(false)), F32, got, want)
			}
		}
	}
	// The activation must change something, or the test above proves
	// nothing: relu of the reference differs from the plain output.
	p := convCases["wide 3x3 odd"]
	p.Weight = F32
	plain, _ := convRun(t, F32, p, true, 0)
	p.Act = ConvActRelu
	relu, _ := convRun(t, F32, p, true, 0)
	same := true
	for i := range plain {
		if plain[i] != relu[i] {
			same = false
		}
	}
	if same {
		t.Error("relu epilogue left every output as it was")
	}
}

func TestConvEmptyAndErrors(t *testing.T) {
	x, w, y := alloc(t, F32, 64), alloc(t, F32, 64), upload(t, F32, []float32{3, 3})
	before := testLib.Device().Stats().Launches
	if err := testLib.Conv2D(F32, x, w, y, Buf{}, ConvParams{N: 0, C: 2, H: 3, W: 3, OutC: 2, KH: 1, KW: 1}); err != nil {
		t.Fatal(err)
	}
	if n := testLib.Device().Stats().Launches - before; n != 0 {
		t.Errorf("empty batch launched %d kernels", n)
	}
	for name, p := range map[string]ConvParams{
		"groups":         {N: 1, C: 3, H: 3, W: 3, OutC: 2, KH: 1, KW: 1, Groups: 2},
		"kernel too big": {N: 1, C: 1, H: 2, W: 2, OutC: 1, KH: 3, KW: 3},
		"input too big":  {N: 1, C: 8, H: 4, W: 4, OutC: 1, KH: 1, KW: 1},
		"no kernel":      {N: 1, C: 1, H: 2, W: 2, OutC: 1},
		"bad act":        {N: 1, C: 1, H: 2, W: 2, OutC: 1, KH: 1, KW: 1, Act: convActCount},
	} {
		if err := testLib.Conv2D(F32, x, w, y, Buf{}, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
