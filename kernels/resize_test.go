package kernels

import (
	"fmt"
	"math"
	"testing"
)

// resizeFromNode maps an ONNX Resize (opset 11+) or Upsample node to
// ResizeParams the way an engine lowering must.
func resizeFromNode(c onnxCase) (ResizeParams, error) {
	x, _ := c.input(0)
	p := ResizeParams{In: x.Shape, CubicA: float32(c.attrFloat("cubic_coeff_a", -0.75)),
		ExcludeOutside: c.attrFloat("exclude_outside", 0) != 0, Extrapolation: float32(c.attrFloat("extrapolation_value", 0)),
		Antialias: c.attrFloat("antialias", 0) != 0}
	var err error
	if p.Mode, err = ParseResizeMode(c.attrString("mode", "nearest")); err != nil {
		return p, err
	}
	var scales []float64
	var sizes []int
	if c.Op == "Upsample" {
		s, _ := c.input(1)
		scales = s.Data
		p.Coord, p.Nearest = CoordAsymmetric, NearestFloor
	} else {
		if p.Coord, err = ParseResizeCoord(c.attrString("coordinate_transformation_mode", "half_pixel")); err != nil {
			return p, err
		}
		if p.Nearest, err = ParseNearestMode(c.attrString("nearest_mode", "round_prefer_floor")); err != nil {
			return p, err
		}
		if s, ok := c.input(2); ok && len(s.Data) > 0 {
			scales = s.Data
		}
		if s, ok := c.input(3); ok {
			sizes = s.ints()
		}
		if roi, ok := c.input(1); ok && p.Coord == CoordTFCropAndResize {
			r := len(x.Shape)
			p.RoiStart, p.RoiEnd = roi.Data[:r], roi.Data[r:]
		}
	}
	p.Out, p.Scales, err = ResizeShape(x.Shape, scales, sizes, c.attrInts("axes"), c.attrString("keep_aspect_ratio_policy", "stretch"))
	return p, err
}

// resizeDevice runs p on x through the device in storage s.
func resizeDevice(t *testing.T, s Storage, x []float32, p ResizeParams) []float32 {
	t.Helper()
	n := prod(p.Out)
	yb := alloc(t, s, n)
	var sb Buf
	if k := p.ScratchElems(); k > 0 {
		sb = alloc(t, s, k)
	}
	if err := testLib.Resize(s, upload(t, s, x), yb, sb, p); err != nil {
		t.Fatal(err)
	}
	return download(t, s, yb, n)
}

// TestResizeONNXCases checks the reference and the kernel against every
// Resize and Upsample case of ONNX's node tests.
func TestResizeONNXCases(t *testing.T) {
	n := 0
	for _, c := range loadFixtures[onnxCase](t, "onnx_cases.json") {
		if c.Op != "Resize" && c.Op != "Upsample" {
			continue
		}
		n++
		p, err := resizeFromNode(c)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if fmt.Sprint(p.Out) != fmt.Sprint(c.Output.Shape) {
			t.Fatalf("%s: output shape %v, want %v", c.Name, p.Out, c.Output.Shape)
		}
		x, _ := c.input(0)
		want := c.Output.f32()
		ref := make([]float32, len(want))
		if err := ResizeRef(x.f32(), ref, p); err != nil {
			t.Fatal(err)
		}
		assertClose(t, c.Name+" reference", ref, want, 1e-5, 1e-5)
		assertClose(t, c.Name+" device", resizeDevice(t, F32, x.f32(), p), want, 1e-5, 1e-5)
	}
	if n < 20 {
		t.Fatalf("only %d Resize cases in the fixtures", n)
	}
}

// TestResizeTorch checks the reference against torch.nn.functional.interpolate
// under the ONNX attributes PyTorch's exporter (or its documented
// semantics) corresponds to.
func TestResizeTorch(t *testing.T) {
	for i, c := range loadFixtures[torchCase](t, "torch_cases.json") {
		if c.Kind != "interpolate" {
			continue
		}
		x := c.Inputs["x"]
		r := len(x.Shape)
		p := ResizeParams{In: x.Shape, CubicA: -0.75}
		mode := c.Params["mode"].(string)
		ac, aa := pBool(c.Params, "align_corners"), pBool(c.Params, "antialias")
		var scales []float64
		var sizes []int
		if s, ok := c.Params["scale"].([]any); ok {
			scales = []float64{1, 1}
			for _, v := range s {
				scales = append(scales, v.(float64))
			}
		} else {
			sizes = append([]int{x.Shape[0], x.Shape[1]}, pInts(c.Params, "size")...)
		}
		switch mode {
		case "nearest":
			p.Mode, p.Coord, p.Nearest = ResizeNearest, CoordAsymmetric, NearestFloor
		case "nearest-exact":
			p.Mode, p.Coord, p.Nearest = ResizeNearest, CoordHalfPixel, NearestRoundPreferCeil
		case "linear", "bilinear", "trilinear", "bicubic":
			p.Mode, p.Coord = ResizeLinear, CoordPytorchHalfPixel
			if mode == "bicubic" {
				p.Mode = ResizeCubic
			}
			if ac {
				p.Coord = CoordAlignCorners
			} else if c.Output.Shape[2] == 1 {
				// ONNX defines pytorch_half_pixel to sample -0.5 for a
				// one-element axis; PyTorch 1.13 itself samples the centre,
				// which is half_pixel.
				p.Coord = CoordHalfPixel
			}
			if aa {
				// PyTorch's antialiased filters drop taps outside the input
				// and its bicubic uses a = -0.5.
				p.Antialias, p.ExcludeOutside, p.Coord = true, true, CoordHalfPixel
				if mode == "bicubic" {
					p.CubicA = -0.5
				}
			}
		}
		var err error
		if p.Out, p.Scales, err = ResizeShape(x.Shape, scales, sizes, nil, ""); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("torch case %d: %s %v -> %v (align_corners=%v antialias=%v)", i, mode, x.Shape, p.Out, ac, aa)
		if fmt.Sprint(p.Out) != fmt.Sprint(c.Output.Shape) || len(p.Out) != r {
			t.Fatalf("%s: torch gives %v", name, c.Output.Shape)
		}
		want := c.Output.f32()
		ref := make([]float32, len(want))
		if err := ResizeRef(x.f32(), ref, p); err != nil {
			t.Fatal(err)
		}
		assertClose(t, name, ref, want, 2e-6, 2e-5)
	}
}

// TestResizeRefByHand: values checked on paper.
func TestResizeRefByHand(t *testing.T) {
	x := []float32{0, 1, 2}
	run := func(p ResizeParams) []float32 {
		y := make([]float32, prod(p.Out))
		if err := ResizeRef(x, y, p); err != nil {
			t.Fatal(err)
		}
		return y
	}
	// half_pixel_symmetric with a scale whose product is not whole
	// (3*1.5 = 4.5 -> 4): the sampling grid is centred, so both ends land on
	// the input's ends.
	p := ResizeParams{In: []int{3}, Out: []int{4}, Scales: []float64{1.5}, Mode: ResizeLinear, Coord: CoordHalfPixelSymmetric}
	assertClose(t, "half_pixel_symmetric", run(p), []float32{0, 2.0 / 3, 4.0 / 3, 2}, 1e-6, 0)
	p.Coord = CoordHalfPixel
	// (x+0.5)/1.5-0.5 = -1/6, 1/2, 7/6, 11/6; the first clamps to 0.
	assertClose(t, "half_pixel", run(p), []float32{0, 0.5, 7.0 / 6, 11.0 / 6}, 1e-6, 0)
	// Nearest at exact ties: asymmetric 3 -> 6 samples 0, .5, 1, 1.5, 2, 2.5.
	p = ResizeParams{In: []int{3}, Out: []int{6}, Scales: []float64{2}, Mode: ResizeNearest, Coord: CoordAsymmetric}
	for mode, want := range map[NearestMode][]float32{
		NearestRoundPreferFloor: {0, 0, 1, 1, 2, 2},
		NearestRoundPreferCeil:  {0, 1, 1, 2, 2, 2},
		NearestFloor:            {0, 0, 1, 1, 2, 2},
		NearestCeil:             {0, 1, 1, 2, 2, 2},
	} {
		p.Nearest = mode
		assertClose(t, fmt.Sprint("nearest mode ", mode), run(p), want, 0, 0)
	}
	// tf_half_pixel_for_nn, 3 -> 2: (x+0.5)*1.5 = 0.75, 2.25 round to 1, 2.
	p = ResizeParams{In: []int{3}, Out: []int{2}, Scales: []float64{2.0 / 3}, Mode: ResizeNearest, Coord: CoordTFHalfPixelForNN}
	assertClose(t, "tf_half_pixel_for_nn", run(p), []float32{1, 2}, 0, 0)
	// tf_crop_and_resize over [-0.5, 1] of 3 -> 4: coordinates -1, 0, 1, 2;
	// the first lies outside and takes the extrapolation value.
	p = ResizeParams{In: []int{3}, Out: []int{4}, Scales: []float64{4.0 / 3}, Mode: ResizeLinear, Coord: CoordTFCropAndResize,
		RoiStart: []float64{-0.5}, RoiEnd: []float64{1}, Extrapolation: 7}
	assertClose(t, "tf_crop_and_resize", run(p), []float32{7, 0, 1, 2}, 1e-6, 0)
}

func TestResizeShape(t *testing.T) {
	for _, c := range []struct {
		in      []int
		scales  []float64
		sizes   []int
		axes    []int
		policy  string
		out     []int
		sc      []float64
		wantErr bool
	}{
		{in: []int{1, 3, 5, 7}, scales: []float64{1, 1, 2, 0.5}, out: []int{1, 3, 10, 3}, sc: []float64{1, 1, 2, 0.5}},
		{in: []int{1, 3, 5, 7}, sizes: []int{1, 3, 4, 14}, out: []int{1, 3, 4, 14}, sc: []float64{1, 1, 0.8, 2}},
		{in: []int{1, 3, 5, 7}, sizes: []int{8, 3}, axes: []int{-2, -1}, out: []int{1, 3, 8, 3}, sc: []float64{1, 1, 1.6, 3.0 / 7}},
		{in: []int{1, 3, 5, 7}, scales: []float64{1.5}, axes: []int{2}, out: []int{1, 3, 7, 7}, sc: []float64{1, 1, 1.5, 1}},
		// not_larger: min(10/5, 21/7) = 2 -> 10 x 14; not_smaller: 3 -> 15 x 21.
		{in: []int{1, 3, 5, 7}, sizes: []int{10, 21}, axes: []int{2, 3}, policy: "not_larger", out: []int{1, 3, 10, 14}, sc: []float64{1, 1, 2, 2}},
		{in: []int{1, 3, 5, 7}, sizes: []int{10, 21}, axes: []int{2, 3}, policy: "not_smaller", out: []int{1, 3, 15, 21}, sc: []float64{1, 1, 3, 3}},
		// 0.5*5 = 2.5 rounds half up to 3 under a kept aspect ratio.
		{in: []int{1, 1, 5, 8}, sizes: []int{4, 4}, axes: []int{2, 3}, policy: "not_larger", out: []int{1, 1, 3, 4}, sc: []float64{1, 1, 0.5, 0.5}},
		{in: []int{2, 3}, scales: []float64{1, 2}, sizes: []int{2, 6}, wantErr: true},
		{in: []int{2, 3}, scales: []float64{1}, wantErr: true},
		{in: []int{2, 3}, scales: []float64{1, -2}, wantErr: true},
		{in: []int{2, 3}, sizes: []int{2, 6}, axes: []int{1, 1}, wantErr: true},
		{in: []int{2, 3}, sizes: []int{2}, axes: []int{2}, wantErr: true},
		{in: []int{2, 3}, sizes: []int{2, 6}, policy: "bogus", wantErr: true},
	} {
		out, sc, err := ResizeShape(c.in, c.scales, c.sizes, c.axes, c.policy)
		if c.wantErr {
			if err == nil {
				t.Errorf("ResizeShape(%+v): no error", c)
			}
			continue
		}
		if err != nil {
			t.Errorf("ResizeShape(%+v): %v", c, err)
			continue
		}
		if fmt.Sprint(out) != fmt.Sprint(c.out) {
			t.Errorf("ResizeShape(%+v) = %v, want %v", c, out, c.out)
		}
		for i := range sc {
			if math.Abs(sc[i]-c.sc[i]) > 1e-12 {
				t.Errorf("ResizeShape(%+v) scales %v, want %v", c, sc, c.sc)
				break
			}
		}
	}
}

// TestResizeShapes drives every mode, coordinate mode and nearest mode
// through the kernel on odd shapes, in both storages, against the reference.
func TestResizeShapes(t *testing.T) {
	type geo struct {
		in, out []int
		scales  []float64 // nil: Out/In
	}
	geos := map[string]geo{
		"2-D up":          {in: []int{2, 3, 5, 7}, out: []int{2, 3, 11, 13}},
		"2-D down":        {in: []int{1, 2, 9, 13}, out: []int{1, 2, 4, 6}},
		"2-D mixed scale": {in: []int{1, 3, 6, 5}, out: []int{1, 3, 9, 3}, scales: []float64{1, 1, 1.6, 0.7}},
		"2-D rows shrink": {in: []int{2, 2, 9, 4}, out: []int{2, 2, 5, 7}},
		"1-D":             {in: []int{3, 2, 17}, out: []int{3, 2, 6}},
		"3-D":             {in: []int{1, 2, 3, 4, 5}, out: []int{1, 2, 5, 3, 8}},
		"every axis":      {in: []int{2, 3, 4}, out: []int{3, 5, 2}},
		"one output":      {in: []int{1, 1, 4, 6}, out: []int{1, 1, 1, 1}},
		"identity":        {in: []int{1, 2, 3, 5}, out: []int{1, 2, 3, 5}},
	}
	type variant struct {
		name string
		set  func(*ResizeParams)
	}
	var variants []variant
	for _, coord := range []ResizeCoord{CoordHalfPixel, CoordHalfPixelSymmetric, CoordPytorchHalfPixel, CoordAlignCorners, CoordAsymmetric, CoordTFCropAndResize, CoordTFHalfPixelForNN} {
		for _, nm := range []NearestMode{NearestRoundPreferFloor, NearestRoundPreferCeil, NearestFloor, NearestCeil} {
			coord, nm := coord, nm
			variants = append(variants, variant{fmt.Sprintf("nearest/%d/coord%d", nm, coord), func(p *ResizeParams) {
				p.Mode, p.Coord, p.Nearest = ResizeNearest, coord, nm
			}})
		}
		for _, m := range []ResizeMode{ResizeLinear, ResizeCubic} {
			for _, opt := range []string{"", "excl", "aa", "aa+excl", "A-0.5"} {
				coord, m, opt := coord, m, opt
				variants = append(variants, variant{fmt.Sprintf("mode%d/coord%d/%s", m, coord, opt), func(p *ResizeParams) {
					p.Mode, p.Coord, p.CubicA = m, coord, -0.75
					switch opt {
					case "excl":
						p.ExcludeOutside = true
					case "aa":
						p.Antialias = true
					case "aa+excl":
						p.Antialias, p.ExcludeOutside = true, true
					case "A-0.5":
						p.CubicA = -0.5
					}
				}})
			}
		}
	}
	for gname, g := range geos {
		r := len(g.in)
		x := laRand(31, prod(g.in), F32)
		for _, v := range variants {
			p := ResizeParams{In: g.in, Out: g.out, Scales: g.scales, Extrapolation: -3}
			if p.Scales == nil {
				p.Scales = make([]float64, r)
				for i := range p.Scales {
					p.Scales[i] = float64(g.out[i]) / float64(g.in[i])
				}
			}
			v.set(&p)
			if p.Coord == CoordTFCropAndResize {
				// A region reaching past both ends on the last axis, inside
				// elsewhere.
				p.RoiStart, p.RoiEnd = make([]float64, r), make([]float64, r)
				for i := range p.RoiStart {
					p.RoiStart[i], p.RoiEnd[i] = 0.1, 0.8
				}
				p.RoiStart[r-1], p.RoiEnd[r-1] = -0.2, 1.3
			}
			want := make([]float32, prod(g.out))
			if err := ResizeRef(x, want, p); err != nil {
				t.Fatal(err)
			}
			for _, route := range []bool{false, true} {
				resizeSeparable = route
				for _, s := range storages {
					xs := x
					if s == F16 {
						xs = laRand(31, prod(g.in), F16)
					}
					if err := ResizeRef(xs, want, p); err != nil {
						t.Fatal(err)
					}
					got := resizeDevice(t, s, xs, p)
					name := fmt.Sprintf("%s/%s/%s/separable=%v", gname, v.name, s, route)
					if s == F16 && len(p.plan()) > 1 && (route || !p.fusedHW(p.plan())) {
						// The intermediate between passes is stored in fp16 too.
						assertClose(t, name, got, want, 4e-3, 4e-3)
						continue
					}
					laClose(t, name, s, got, want)
				}
			}
			resizeSeparable = false
		}
	}
}

// TestResizeRoutes: which resizes take one launch and no scratch.
func TestResizeRoutes(t *testing.T) {
	for _, c := range []struct {
		in, out []int
		fused   bool
		scratch int
	}{
		{[]int{1, 3, 8, 8}, []int{1, 3, 16, 16}, true, 0},
		{[]int{1, 3, 9, 4}, []int{1, 3, 5, 7}, true, 0},   // rows first (they shrink): still one launch
		{[]int{1, 3, 8, 8}, []int{1, 3, 8, 16}, false, 0}, // one axis: one pass
		{[]int{2, 3, 4}, []int{2, 6, 8}, true, 0},
		{[]int{2, 3, 4}, []int{4, 3, 8}, false, 2 * 3 * 8},               // axes 0 and 2: W first (bigger ratio last)
		{[]int{2, 3, 4, 5}, []int{1, 6, 8, 5}, false, 2 * 1 * 6 * 4 * 5}, // N shrinks first; three passes
		{[]int{2, 3, 4}, []int{3, 6, 8}, false, 2 * 3 * 6 * 4},           // three passes: two intermediates
	} {
		p := ResizeParams{In: c.in, Out: c.out, Scales: make([]float64, len(c.in)), Mode: ResizeLinear}
		for i := range p.Scales {
			p.Scales[i] = float64(c.out[i]) / float64(c.in[i])
		}
		if got := p.fusedHW(p.plan()); got != c.fused {
			t.Errorf("%v -> %v: fused %v, want %v", c.in, c.out, got, c.fused)
		}
		if got := p.ScratchElems(); got != c.scratch {
			t.Errorf("%v -> %v: scratch %d, want %d", c.in, c.out, got, c.scratch)
		}
	}
}

func TestResizeErrors(t *testing.T) {
	x, y := alloc(t, F32, 64), alloc(t, F32, 64)
	ok := ResizeParams{In: []int{2, 4}, Out: []int{2, 8}, Scales: []float64{1, 2}, Mode: ResizeLinear}
	if err := testLib.Resize(F32, x, y, Buf{}, ok); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*ResizeParams){
		"rank":              func(p *ResizeParams) { p.Out = []int{16} },
		"scale":             func(p *ResizeParams) { p.Scales = []float64{1, 0} },
		"nan scale":         func(p *ResizeParams) { p.Scales = []float64{1, math.NaN()} },
		"output too big":    func(p *ResizeParams) { p.Out = []int{2, 40} },
		"antialias nearest": func(p *ResizeParams) { p.Mode, p.Antialias = ResizeNearest, true },
		"mode":              func(p *ResizeParams) { p.Mode = 7 },
		"roi":               func(p *ResizeParams) { p.RoiStart = []float64{0} },
		"grow empty":        func(p *ResizeParams) { p.In = []int{0, 4} },
		"scratch missing": func(p *ResizeParams) {
			p.In, p.Out, p.Scales = []int{2, 2, 4}, []int{3, 2, 8}, []float64{1.5, 1, 2}
		},
	} {
		p := ok
		mod(&p)
		if err := testLib.Resize(F32, x, y, Buf{}, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	before := testLib.Device().Stats().Launches
	if err := testLib.Resize(F32, x, y, Buf{}, ResizeParams{In: []int{2, 4}, Out: []int{0, 8}, Scales: []float64{0.1, 2}}); err != nil {
		t.Fatal(err)
	}
	if n := testLib.Device().Stats().Launches - before; n != 0 {
		t.Errorf("empty output launched %d kernels", n)
	}
}
