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
}

func TestConvShapes(t *testing.T) {
	for name, p := range convCases {
		for _, st := range [][2]Storage{{F32, F32}, {F16, F16}, {F32, F16}} {
			p.Weight = st[1]
			for _, withBias := range []bool{false, true} {
				got, want := convRun(t, st[0], p, withBias, p.ScratchElems())
				laClose(t, fmt.Sprintf("%s/%s/w%s/bias=%v (route %s)", name, st[0], st[1], withBias, p.route()), st[0], got, want)
			}
		}
	}
}

// TestConvRoutes drives the same convolutions through every route: direct
// (no scratch), the gather in both layouts, the GPU's tiled GEMM, and
// scratch for fewer images than the batch.
func TestConvRoutes(t *testing.T) {
	defer func() { mmForce, convKMajor = "", false }()
	for _, name := range []string{"3x3 pad1", "7x7 s2 p3", "asym pads dil", "groups 2", "1x1", "groups 3 1x1"} {
		p := convCases[name]
		full := p.ScratchElems()
		for _, r := range []struct {
			name    string
			scratch int
			kMajor  bool
			force   string
		}{
			{"direct", 0, false, ""},
			{"one image", full / p.N, false, ""},
			{"k-major", full, true, ""},
			{"tiled", full, true, "mm_tiled"},
			{"naive", full, false, "mm_naive"},
		} {
			mmForce, convKMajor = r.force, r.kMajor
			for _, s := range storages {
				p.Weight = s
				got, want := convRun(t, s, p, true, r.scratch)
				laClose(t, fmt.Sprintf("%s/%s/%s", name, r.name, s), s, got, want)
			}
		}
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
	} {
		if err := testLib.Conv2D(F32, x, w, y, Buf{}, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
