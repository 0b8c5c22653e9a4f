package kernels

import (
	"fmt"
	"testing"
)

func TestConvTransposeRefByHand(t *testing.T) {
	// 1-D: x = [1, 2], kernel [1, 10, 100], stride 2: each input scatters a
	// scaled copy of the kernel two columns after the previous one.
	p := ConvTransposeParams{N: 1, C: 1, H: 1, W: 2, OutC: 1, KH: 1, KW: 3, StrideW: 2}
	if oh, ow := p.OutSize(); oh != 1 || ow != 5 {
		t.Fatalf("OutSize %dx%d, want 1x5", oh, ow)
	}
	y := make([]float32, 5)
	if err := ConvTranspose2DRef([]float32{1, 2}, []float32{1, 10, 100}, []float32{0.5}, y, p); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "stride 2", y, []float32{1.5, 10.5, 102.5, 20.5, 200.5}, 0, 0)
	// Pads crop the full result; output padding appends a bias-only column.
	p.PadLeft, p.PadRight, p.OutPadW = 1, 2, 1
	y = y[:3]
	if err := ConvTranspose2DRef([]float32{1, 2}, []float32{1, 10, 100}, []float32{0.5}, y, p); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "pads", y, []float32{10.5, 102.5, 20.5}, 0, 0)
}

// convTransposeFromNode resolves an ONNX ConvTranspose node's attributes for
// a 1-D or 2-D input the way an engine lowering must.
func convTransposeFromNode(c onnxCase) (ConvTransposeParams, bool, error) {
	x, _ := c.input(0)
	w, _ := c.input(1)
	if len(x.Shape) > 4 {
		return ConvTransposeParams{}, false, nil
	}
	xs, ws := x.Shape, w.Shape
	r := len(xs) - 2
	if r == 1 { // 1-D as H = 1
		xs, ws = []int{xs[0], xs[1], 1, xs[2]}, []int{ws[0], ws[1], 1, ws[2]}
	}
	group := int(c.attrFloat("group", 1))
	get := func(name string, def int) []int {
		v := c.attrInts(name)
		if v == nil {
			v = make([]int, 2*r)
			for i := range v {
				v[i] = def
			}
		}
		if r == 1 {
			if len(v) == 2 { // pads: begin, end
				return []int{0, v[0], 0, v[1]}
			}
			return []int{def, v[0]}
		}
		return v
	}
	strides, dil, outPad, pads := get("strides", 1), get("dilations", 1), get("output_padding", 0), get("pads", 0)
	outShape := []int{-1, -1}
	if os := c.attrInts("output_shape"); os != nil {
		copy(outShape[2-len(os[len(os)-r:]):], os[len(os)-r:])
	}
	p := ConvTransposeParams{N: xs[0], C: xs[1], H: xs[2], W: xs[3], OutC: ws[1] * group, KH: ws[2], KW: ws[3],
		StrideH: strides[0], StrideW: strides[1], DilationH: dil[0], DilationW: dil[1],
		OutPadH: outPad[0], OutPadW: outPad[1], Groups: group}
	auto := c.attrString("auto_pad", "NOTSET")
	var err error
	if p.PadTop, p.PadBottom, _, err = ConvTransposeAxis(p.H, p.KH, p.StrideH, p.DilationH, p.OutPadH, pads[0], pads[2], auto, outShape[0]); err != nil {
		return p, true, err
	}
	if p.PadLeft, p.PadRight, _, err = ConvTransposeAxis(p.W, p.KW, p.StrideW, p.DilationW, p.OutPadW, pads[1], pads[3], auto, outShape[1]); err != nil {
		return p, true, err
	}
	return p, true, nil
}

// TestConvTransposeONNXCases: ONNX's own ConvTranspose node tests (1-D and
// 2-D; the 3-D one is out of scope), reference and device.
func TestConvTransposeONNXCases(t *testing.T) {
	n := 0
	for _, c := range loadFixtures[onnxCase](t, "onnx_cases.json") {
		if c.Op != "ConvTranspose" {
			continue
		}
		p, ok, err := convTransposeFromNode(c)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if !ok {
			continue
		}
		n++
		oh, ow := p.OutSize()
		if got := p.N * p.OutC * oh * ow; got != len(c.Output.Data) {
			t.Fatalf("%s: output %dx%d (%d elements), want shape %v", c.Name, oh, ow, got, c.Output.Shape)
		}
		x, _ := c.input(0)
		w, _ := c.input(1)
		want := c.Output.f32()
		ref := make([]float32, len(want))
		if err := ConvTranspose2DRef(x.f32(), w.f32(), nil, ref, p); err != nil {
			t.Fatal(err)
		}
		assertClose(t, c.Name+" reference", ref, want, 1e-5, 1e-5)
		for _, scratch := range []int{0, p.ScratchElems()} {
			yb := alloc(t, F32, len(want))
			var sb Buf
			if scratch > 0 {
				sb = alloc(t, F32, scratch)
			}
			if err := testLib.ConvTranspose2D(F32, upload(t, F32, x.f32()), upload(t, F32, w.f32()), yb, sb, p); err != nil {
				t.Fatal(err)
			}
			assertClose(t, fmt.Sprintf("%s device (scratch %d)", c.Name, scratch), download(t, F32, yb, len(want)), want, 1e-5, 1e-5)
		}
	}
	if n < 8 {
		t.Fatalf("only %d ConvTranspose cases", n)
	}
}

// TestConvTransposeTorch: the reference against torch's conv_transpose2d on
// groups, dilations, asymmetric pads and output padding.
func TestConvTransposeTorch(t *testing.T) {
	n := 0
	for i, c := range loadFixtures[torchCase](t, "torch_cases.json") {
		if c.Kind != "conv_transpose2d" {
			continue
		}
		n++
		x, w, b := c.Inputs["x"], c.Inputs["w"], c.Inputs["b"]
		s, d, pads, op := pInts(c.Params, "strides"), pInts(c.Params, "dilations"), pInts(c.Params, "pads"), pInts(c.Params, "output_padding")
		g := int(c.Params["group"].(float64))
		p := ConvTransposeParams{N: x.Shape[0], C: x.Shape[1], H: x.Shape[2], W: x.Shape[3], OutC: w.Shape[1] * g,
			KH: w.Shape[2], KW: w.Shape[3], StrideH: s[0], StrideW: s[1], DilationH: d[0], DilationW: d[1],
			PadTop: pads[0], PadLeft: pads[1], PadBottom: pads[2], PadRight: pads[3], OutPadH: op[0], OutPadW: op[1], Groups: g}
		want := c.Output.f32()
		ref := make([]float32, len(want))
		if err := ConvTranspose2DRef(x.f32(), w.f32(), b.f32(), ref, p); err != nil {
			t.Fatal(err)
		}
		assertClose(t, fmt.Sprintf("torch case %d %+v", i, p), ref, want, 1e-5, 1e-5)
	}
	if n == 0 {
		t.Fatal("no conv_transpose2d cases")
	}
}

func TestConvTransposeAxis(t *testing.T) {
	for _, c := range []struct {
		in, k, s, d, op, pb, pe int
		auto                    string
		outShape                int
		wb, we, out             int
	}{
		{3, 3, 2, 1, 0, 0, 0, "", -1, 0, 0, 7},
		{3, 3, 2, 1, 1, 1, 1, "NOTSET", -1, 1, 1, 6},
		{3, 3, 2, 1, 0, 5, 5, "VALID", -1, 0, 0, 7},
		// SAME: out = in*s = 6, total padding 1: at the end for UPPER.
		{3, 3, 2, 1, 0, 0, 0, "SAME_UPPER", -1, 0, 1, 6},
		{3, 3, 2, 1, 0, 0, 0, "SAME_LOWER", -1, 1, 0, 6},
		{4, 4, 2, 1, 0, 0, 0, "SAME_UPPER", -1, 1, 1, 8},
		// output_shape 10 from full 3*2+3 = 9 with op 1: total 0.
		{3, 3, 3, 1, 1, 0, 0, "", 10, 0, 0, 10},
		// output_shape larger than the full 7: a bias-only margin at the end.
		{3, 3, 2, 1, 0, 0, 0, "", 9, 0, -2, 9},
		// full 3*2-2+2*2+1 = 7, output_shape 5: total 2.
		{3, 2, 2, 2, 0, 0, 0, "", 5, 1, 1, 5},
		// full 6, output_shape 5: the odd padding at the start unless SAME_UPPER.
		{3, 2, 2, 1, 0, 0, 0, "", 5, 1, 0, 5},
		{3, 2, 2, 1, 0, 0, 0, "SAME_UPPER", 5, 0, 1, 5},
	} {
		b, e, out, err := ConvTransposeAxis(c.in, c.k, c.s, c.d, c.op, c.pb, c.pe, c.auto, c.outShape)
		if err != nil || b != c.wb || e != c.we || out != c.out {
			t.Errorf("ConvTransposeAxis(%+v) = %d, %d, %d, %v", c, b, e, out, err)
		}
	}
	if _, _, _, err := ConvTransposeAxis(3, 3, 1, 1, 0, 5, 5, "", -1); err == nil {
		t.Error("negative output: no error")
	}
	if _, _, _, err := ConvTransposeAxis(3, 3, 1, 1, 0, 0, 0, "SAME", -1); err == nil {
		t.Error("bad auto_pad: no error")
	}
}

var convTransposeCases = map[string]ConvTransposeParams{
	"3x3 s2 p1 op1": {N: 2, C: 5, H: 7, W: 6, OutC: 3, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, OutPadH: 1, OutPadW: 1},
	"4x4 s2 p1":     {N: 1, C: 6, H: 5, W: 9, OutC: 4, KH: 4, KW: 4, StrideH: 2, StrideW: 2, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1},
	"2x2 s2 unet":   {N: 2, C: 16, H: 6, W: 5, OutC: 8, KH: 2, KW: 2, StrideH: 2, StrideW: 2},
	"groups dil":    {N: 2, C: 24, H: 5, W: 7, OutC: 9, KH: 3, KW: 2, StrideH: 3, StrideW: 2, DilationH: 2, DilationW: 3, PadTop: 2, PadLeft: 0, PadBottom: 1, PadRight: 3, OutPadH: 2, OutPadW: 1, Groups: 3},
	"depthwise":     {N: 1, C: 4, H: 6, W: 6, OutC: 4, KH: 3, KW: 3, StrideH: 2, StrideW: 1, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 4},
	"negative pads": {N: 1, C: 3, H: 4, W: 3, OutC: 2, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadTop: -1, PadLeft: 0, PadBottom: -2, PadRight: -1},
	"1d":            {N: 2, C: 3, H: 1, W: 11, OutC: 5, KH: 1, KW: 5, StrideW: 3, PadLeft: 2, PadRight: 1, OutPadW: 2},
	"1x1":           {N: 1, C: 7, H: 3, W: 4, OutC: 5, KH: 1, KW: 1},
}

// TestConvTransposeShapes runs every case through each route: direct (no
// scratch), GEMM for the whole batch, and GEMM one image at a time.
func TestConvTransposeShapes(t *testing.T) {
	for name, p := range convTransposeCases {
		for _, st := range [][2]Storage{{F32, F32}, {F16, F16}, {F32, F16}} {
			p.Weight = st[1]
			full := p.ScratchElems()
			for _, scratch := range []int{0, full, full / max(1, p.N)} {
				for _, withBias := range []bool{false, true} {
					s := st[0]
					pn, err := p.norm()
					if err != nil {
						t.Fatal(err)
					}
					oh, ow := pn.OutSize()
					x := laRand(41, p.N*p.C*p.H*p.W, s)
					w := laRand(42, p.C*p.OutC/pn.Groups*p.KH*p.KW, p.Weight)
					ny := p.N * p.OutC * oh * ow
					var bias []float32
					q := p
					if withBias {
						bias = laRand(43, p.OutC, p.Weight)
						q.Bias = upload(t, p.Weight, bias)
					}
					var sb Buf
					if scratch > 0 {
						sb = alloc(t, F32, scratch) // float32 whatever s
					}
					y0 := laRand(44, ny, s)
					yb := upload(t, s, y0)
					if err := testLib.ConvTranspose2D(s, upload(t, s, x), upload(t, p.Weight, w), yb, sb, q); err != nil {
						t.Fatal(err)
					}
					want := make([]float32, ny)
					if err := ConvTranspose2DRef(x, w, bias, want, p); err != nil {
						t.Fatal(err)
					}
					laClose(t, fmt.Sprintf("%s/%s/w%s/bias=%v/scratch %d of %d", name, s, p.Weight, withBias, scratch, full), s, download(t, s, yb, ny), want)
				}
			}
		}
	}
}

func TestConvTransposeErrors(t *testing.T) {
	x, w, y := alloc(t, F32, 64), alloc(t, F32, 64), alloc(t, F32, 64)
	for name, p := range map[string]ConvTransposeParams{
		"groups":          {N: 1, C: 3, H: 3, W: 3, OutC: 2, KH: 1, KW: 1, Groups: 2},
		"no kernel":       {N: 1, C: 1, H: 2, W: 2, OutC: 1},
		"output too big":  {N: 1, C: 1, H: 4, W: 4, OutC: 1, KH: 3, KW: 3, StrideH: 2, StrideW: 2},
		"negative output": {N: 1, C: 1, H: 2, W: 2, OutC: 1, KH: 1, KW: 1, PadTop: 3},
		"negative stride": {N: 1, C: 1, H: 2, W: 2, OutC: 1, KH: 1, KW: 1, StrideH: -1},
	} {
		if err := testLib.ConvTranspose2D(F32, x, w, y, Buf{}, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	before := testLib.Device().Stats().Launches
	if err := testLib.ConvTranspose2D(F32, x, w, y, Buf{}, ConvTransposeParams{N: 0, C: 1, H: 2, W: 2, OutC: 1, KH: 1, KW: 1}); err != nil {
		t.Fatal(err)
	}
	if n := testLib.Device().Stats().Launches - before; n != 0 {
		t.Errorf("empty batch launched %d kernels", n)
	}
}

// TestVisionGEMMRoutes runs the GEMM routes of ConvTranspose2D and Conv3D
// on the product kernels a GPU would pick (tiled, naive, and the K-major
// gather), here on the CPU device.
func TestVisionGEMMRoutes(t *testing.T) {
	defer func() { mmForce, convKMajor = "", false }()
	for _, force := range []string{"mm_tiled", "mm_naive"} {
		mmForce, convKMajor = force, true
		for _, name := range []string{"2x2 s2 unet", "groups dil"} {
			p := convTransposeCases[name]
			if p.ScratchElems() == 0 {
				t.Fatalf("%s does not take the GEMM route", name)
			}
			x := laRand(61, p.N*p.C*p.H*p.W, F32)
			w := laRand(62, p.C*p.OutC/max(1, p.Groups)*p.KH*p.KW, F32)
			bias := laRand(63, p.OutC, F32)
			oh, ow := p.OutSize()
			ny := p.N * p.OutC * oh * ow
			q := p
			q.Bias = upload(t, F32, bias)
			yb := alloc(t, F32, ny)
			if err := testLib.ConvTranspose2D(F32, upload(t, F32, x), upload(t, F32, w), yb, alloc(t, F32, p.ScratchElems()), q); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, ny)
			if err := ConvTranspose2DRef(x, w, bias, want, p); err != nil {
				t.Fatal(err)
			}
			laClose(t, fmt.Sprintf("ConvTranspose %s/%s", name, force), F32, download(t, F32, yb, ny), want)
		}
		for _, name := range []string{"3x3x3 p1", "strided asym"} {
			p := conv3DCases[name]
			if p.ScratchElems() == 0 {
				t.Fatalf("%s does not take the GEMM route", name)
			}
			pn, _ := p.norm()
			o := pn.OutSize()
			kvol := p.Kernel[0] * p.Kernel[1] * p.Kernel[2]
			x := laRand(64, p.N*p.C*p.D*p.H*p.W, F32)
			w := laRand(65, p.OutC*p.C/pn.Groups*kvol, F32)
			bias := laRand(66, p.OutC, F32)
			ny := p.N * p.OutC * o[0] * o[1] * o[2]
			q := p
			q.Bias = upload(t, F32, bias)
			yb := alloc(t, F32, ny)
			if err := testLib.Conv3D(F32, upload(t, F32, x), upload(t, F32, w), yb, alloc(t, F32, p.ScratchElems()), q); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, ny)
			if err := Conv3DRef(x, w, bias, want, p); err != nil {
				t.Fatal(err)
			}
			laClose(t, fmt.Sprintf("Conv3D %s/%s", name, force), F32, download(t, F32, yb, ny), want)
		}
	}
}
