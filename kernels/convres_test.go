package kernels

import (
	"fmt"
	"testing"
)

// convResRun runs p through Conv2D on random data with a bias, a random
// residual (withRes) and a random input scale (withScale), scratch
// elements of scratch, and returns the output, the reference and the
// reference before the activation.
func convResRun(t *testing.T, s Storage, p ConvParams, withRes, withScale bool, scratch int) (got, want, pre []float32) {
	t.Helper()
	pn, err := p.norm()
	if err != nil {
		t.Fatal(err)
	}
	oh, ow := pn.OutSize()
	ny := p.N * p.OutC * oh * ow
	x := laRand(21, p.N*p.C*p.H*p.W, s)
	w := laRand(22, p.OutC*p.C/pn.Groups*p.KH*p.KW, p.Weight)
	bias := laRand(24, p.OutC, p.Weight)
	y0 := laRand(23, ny, s)
	p.Bias = upload(t, p.Weight, bias)
	var res, scale []float32
	if withRes {
		res = laRand(25, ny, s)
		p.Res = upload(t, s, res)
	}
	if withScale {
		scale = laRand(26, p.N*p.C, s)
		p.Scale = upload(t, s, scale)
	}
	var sb Buf
	if scratch > 0 {
		sb = alloc(t, s, scratch)
	}
	yb := upload(t, s, y0)
	if err := testLib.Conv2D(s, upload(t, s, x), upload(t, p.Weight, w), yb, sb, p); err != nil {
		t.Fatal(err)
	}
	want, pre = make([]float32, ny), make([]float32, ny)
	if err := Conv2DResRef(x, w, bias, res, scale, want, p); err != nil {
		t.Fatal(err)
	}
	p.Act = ConvActNone
	if err := Conv2DResRef(x, w, bias, res, scale, pre, p); err != nil {
		t.Fatal(err)
	}
	return download(t, s, yb, ny), want, pre
}

// TestConvResidual adds a residual in every route's epilogue (conv_tile,
// conv_flat, conv_dw, conv_dw_reg, conv_dwf, conv_pw, conv_pwdot,
// conv_direct, conv_wino_out, and conv_res after the GEMM routes), at
// every strip width a route has, both storages, with ReLU after the sum
// or no activation, on odd shapes: strips shifted back over a
// neighbour's outputs, grid rows wider than the output, channel counts
// off the work-items' blocks, batch 2.
func TestConvResidual(t *testing.T) {
	defer func() { mmForce, convKMajor, convForce, convPXForce = "", false, "", 0 }()
	type rt struct {
		route string
		px    int
		flat  bool // scratch for conv_flat's or conv_dwf's copy
		k     bool // k-major gather
	}
	for _, c := range []struct {
		name   string
		p      ConvParams
		routes []rt
	}{
		{"3x3 pad1 b2", convCases["3x3 pad1"], []rt{{"tile", 16, false, false}, {"tile", 4, false, false},
			{"flat", 16, true, false}, {"flat", 4, true, false}, {"direct", 0, false, false},
			{"im2col", 0, false, false}, {"im2col", 0, false, true}}},
		{"7x7 s2 p3", convCases["7x7 s2 p3"], []rt{{"flat", 16, true, false}, {"flat", 8, true, false}, {"tile", 8, false, false}}},
		{"wide s2", convCases["wide s2"], []rt{{"flat", 16, true, false}, {"tile", 16, false, false}}},
		{"wide 1x1 odd", convCases["wide 1x1 odd"], []rt{{"pw", 16, false, false}, {"pw", 8, false, false},
			{"pw", 4, false, false}, {"gemm1x1", 0, false, false}, {"tile", 16, false, false}}},
		{"se 1x1 odd", ConvParams{N: 2, C: 37, H: 1, W: 1, OutC: 11, KH: 1, KW: 1}, []rt{{"pw", 16, false, false}, {"pw", 4, false, false}}},
		{"pw2 b2 odd", ConvParams{N: 2, C: 19, H: 7, W: 9, OutC: 13, KH: 1, KW: 1}, []rt{{"pw", 16, false, false}, {"pw", 8, false, false}}},
		{"wide dw s2", convCases["wide dw s2"], []rt{{"dw", 16, false, false}, {"dwgen", 4, false, false},
			{"dwf", 16, true, false}, {"dwfgen", 4, true, false}, {"dwf", 8, true, false}}},
		{"dw 3x3 b2", dwCases[0].p, []rt{{"dw", 8, false, false}, {"dwf", 16, true, false}}},
		{"wino 7x9 b2", winoCases[0].p, []rt{{"wino", 0, false, false}, {"wino", 4, false, false}}},
		{"wino c24 k20", winoCases[5].p, []rt{{"wino", 0, false, false}}},
	} {
		for ri, r := range c.routes {
			convForce, convPXForce, convKMajor = r.route, r.px, r.k
			for si, s := range storages {
				p := c.p
				p.Weight = s
				if (ri+si)%2 == 0 {
					p.Act = ConvActRelu
				}
				pn, _ := p.norm()
				scratch := 0
				switch {
				case r.flat:
					scratch = pn.flatElems()
				case r.route == "wino":
					scratch = pn.winoElems()
				case r.route == "im2col":
					oh, ow := pn.OutSize()
					scratch = pn.C * pn.KH * pn.KW * oh * ow // one image at a time
				}
				got, want, pre := convResRun(t, s, p, true, false, scratch)
				what := fmt.Sprintf("%s/%s px%d k%v/%s/act%d", c.name, r.route, r.px, r.k, s, p.Act)
				if r.route == "wino" {
					winoClose(t, what, s, got, want, pre)
				} else {
					laClose(t, what, s, got, want)
				}
			}
		}
	}
}

// TestConvInputScale folds a per-channel input scale (squeeze-excite's
// Mul) into 1x1 convolutions: conv_pw at each strip width and conv_pwdot
// (a 1x1 map), conv_tile (the route a GPU takes, and where a forced GEMM
// route goes), with and without a residual, both storages.
func TestConvInputScale(t *testing.T) {
	defer func() { convForce, convPXForce = "", 0 }()
	for _, c := range []struct {
		name string
		p    ConvParams
	}{
		{"odd map 13 out b2", ConvParams{N: 2, C: 19, H: 7, W: 9, OutC: 13, KH: 1, KW: 1}},
		{"wide 5 out", ConvParams{N: 1, C: 8, H: 3, W: 37, OutC: 5, KH: 1, KW: 1}},
		{"1x1 map b2", ConvParams{N: 2, C: 37, H: 1, W: 1, OutC: 11, KH: 1, KW: 1}},
		{"groups 3 x 9", ConvParams{N: 1, C: 12, H: 6, W: 11, OutC: 27, KH: 1, KW: 1, Groups: 3}},
	} {
		for ri, r := range []struct {
			route string
			px    int
		}{{"pw", 16}, {"pw", 8}, {"pw", 4}, {"tile", 16}, {"tile", 4}, {"gemm1x1", 0}, {"", 0}} {
			convForce, convPXForce = r.route, r.px
			for si, s := range storages {
				p := c.p
				p.Weight = s
				if (ri+si)%2 == 1 {
					p.Act = ConvActHardSwish
				}
				withRes := (ri+si)%3 != 0
				got, want, _ := convResRun(t, s, p, withRes, true, 0)
				laClose(t, fmt.Sprintf("%s/%q px%d/%s/res %v", c.name, r.route, r.px, s, withRes), s, got, want)
			}
		}
	}
}

// TestConvResidualErrors: a residual or scale that overlaps the output,
// is short, or (a scale) meets a convolution other than a plain 1x1 is
// refused with an error, and nothing is launched.
func TestConvResidualErrors(t *testing.T) {
	x, w, y := alloc(t, F32, 64), alloc(t, F32, 64), alloc(t, F32, 64)
	short := alloc(t, F32, 2)
	p1 := ConvParams{N: 1, C: 2, H: 3, W: 3, OutC: 2, KH: 1, KW: 1} // 18 outputs
	p3 := ConvParams{N: 1, C: 2, H: 3, W: 3, OutC: 2, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}
	for name, p := range map[string]ConvParams{
		"residual is the output":    func() ConvParams { q := p1; q.Res = y; return q }(),
		"residual overlaps output":  func() ConvParams { q := p1; q.Res = Buf{Mem: y.Mem, Off: 10}; return q }(),
		"residual short":            func() ConvParams { q := p1; q.Res = short; return q }(),
		"scale overlaps output":     func() ConvParams { q := p1; q.Scale = Buf{Mem: y.Mem, Off: 17}; return q }(),
		"scale on a 3x3":            func() ConvParams { q := p3; q.Scale = x; return q }(),
		"scale short":               func() ConvParams { q := p1; q.N = 2; q.Scale = short; return q }(),
		"residual negative offset":  func() ConvParams { q := p1; q.Res = Buf{Mem: x.Mem, Off: -1}; return q }(),
		"scale on a 1x1 with pads":  func() ConvParams { q := p1; q.PadTop, q.Scale = 1, x; return q }(),
		"residual on an empty conv": func() ConvParams { q := p1; q.C = 0; q.Res = short; return q }(),
	} {
		before := testLib.Device().Stats().Launches
		if err := testLib.Conv2D(F32, x, w, y, Buf{}, p); err == nil {
			t.Errorf("%s: no error", name)
		}
		if n := testLib.Device().Stats().Launches - before; n != 0 {
			t.Errorf("%s: %d launches before the error", name, n)
		}
	}
}
