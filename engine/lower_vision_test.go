package engine

import (
	"math"
	"math/rand"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
	"github.com/tlite/tlite/kernels"
)

// The vision lowerings on odd shapes, a symbolic batch, on OpenCL (fp32 and
// fp16) and the pure-Go device, against the kernels' references called with
// the parameters the ONNX attributes mean: a wrong attribute reading in a
// lowering shows up as a difference.

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// visionCase is one single-node model with its input and the reference's
// expected output.
type visionCase struct {
	name   string
	node   pb
	inits  []pb
	xShape []int
	yShape []int
	x      []float32
	want   []float32
	// idx, when set, is MaxPool's expected Indices.
	idx []int64
	// opset of the model; 0 means 13.
	opset int64
}

func visionCases(t *testing.T) []visionCase {
	r := rand.New(rand.NewSource(9))
	var cases []visionCase
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Resize, linear, half_pixel, scales on the two inner axes (opset 13).
	{
		in := []int{2, 3, 5, 7}
		p := kernels.ResizeParams{In: in, Out: []int{2, 3, 8, 10}, Scales: []float64{1, 1, 1.7, 1.5},
			Mode: kernels.ResizeLinear, Coord: kernels.CoordHalfPixel, CubicA: -0.75}
		x := randF32(r, numel(in))
		y := make([]float32, numel(p.Out))
		must(kernels.ResizeRef(x, y, p))
		cases = append(cases, visionCase{name: "resize-linear",
			node:   nodePB("Resize", "rs", []string{"x", "", "scales"}, []string{"y"}, graphtest.String("mode", "linear")),
			inits:  []pb{tensorPB("scales", dtype.Float32, []int64{4}, f32Raw(1, 1, 1.7, 1.5))},
			xShape: in, yShape: p.Out, x: x, want: y})
	}
	// Resize, cubic, align_corners, sizes, on three axes (scratch between
	// passes).
	{
		in := []int{2, 4, 5, 3}
		out := []int{2, 6, 3, 7}
		p := kernels.ResizeParams{In: in, Out: out, Scales: []float64{1, 6.0 / 4, 3.0 / 5, 7.0 / 3},
			Mode: kernels.ResizeCubic, Coord: kernels.CoordAlignCorners, CubicA: -0.5}
		x := randF32(r, numel(in))
		y := make([]float32, numel(out))
		must(kernels.ResizeRef(x, y, p))
		cases = append(cases, visionCase{name: "resize-cubic-sizes",
			node: nodePB("Resize", "rs", []string{"x", "", "", "sizes"}, []string{"y"}, graphtest.String("mode", "cubic"),
				graphtest.String("coordinate_transformation_mode", "align_corners"), aFloat("cubic_coeff_a", -0.5)),
			inits:  []pb{tensorPB("sizes", dtype.Int64, []int64{4}, i64Raw(2, 6, 3, 7))},
			xShape: in, yShape: out, x: x, want: y})
	}
	// Resize-10 shrinking with nearest: ONNX's own opset-10 example, where
	// x / scale rounds up (1.67 -> 2).
	cases = append(cases, visionCase{name: "resize10-nearest-down", opset: 10,
		node:   nodePB("Resize", "rs", []string{"x", "scales"}, []string{"y"}, graphtest.String("mode", "nearest")),
		inits:  []pb{tensorPB("scales", dtype.Float32, []int64{4}, f32Raw(1, 1, 0.6, 0.6))},
		xShape: []int{1, 1, 2, 4}, yShape: []int{1, 1, 1, 2}, x: []float32{1, 2, 3, 4, 5, 6, 7, 8}, want: []float32{1, 3}})
	// Upsample-9, nearest growing: x / scale truncated.
	{
		in := []int{2, 3, 3, 2}
		p := kernels.ResizeParams{In: in, Out: []int{2, 3, 6, 5}, Scales: []float64{1, 1, 2, 2.5},
			Mode: kernels.ResizeNearest, Coord: kernels.CoordAsymmetric, Nearest: kernels.NearestFloor}
		x := randF32(r, numel(in))
		y := make([]float32, numel(p.Out))
		must(kernels.ResizeRef(x, y, p))
		cases = append(cases, visionCase{name: "upsample9-nearest", opset: 9,
			node:   nodePB("Upsample", "up", []string{"x", "scales"}, []string{"y"}),
			inits:  []pb{tensorPB("scales", dtype.Float32, []int64{4}, f32Raw(1, 1, 2, 2.5))},
			xShape: in, yShape: p.Out, x: x, want: y})
	}
	// Resize-18: axes, sizes with keep_aspect_ratio_policy not_larger, and
	// an antialiased linear downscale.
	{
		in := []int{2, 3, 9, 13}
		out, sc, err := kernels.ResizeShape(in, nil, []int{5, 6}, []int{2, 3}, "not_larger")
		must(err)
		p := kernels.ResizeParams{In: in, Out: out, Scales: sc, Mode: kernels.ResizeLinear, Coord: kernels.CoordHalfPixel,
			CubicA: -0.75, Antialias: true}
		x := randF32(r, numel(in))
		y := make([]float32, numel(out))
		must(kernels.ResizeRef(x, y, p))
		cases = append(cases, visionCase{name: "resize18-axes-aspect-antialias", opset: 18,
			node: nodePB("Resize", "rs", []string{"x", "", "", "sizes"}, []string{"y"}, graphtest.String("mode", "linear"),
				graphtest.Ints("axes", 2, 3), graphtest.String("keep_aspect_ratio_policy", "not_larger"), aInt("antialias", 1)),
			inits:  []pb{tensorPB("sizes", dtype.Int64, []int64{2}, i64Raw(5, 6))},
			xShape: in, yShape: out, x: x, want: y})
	}
	// ConvTranspose 2-D: groups, dilations, strides, pads, output_padding.
	{
		p := kernels.ConvTransposeParams{N: 2, C: 4, H: 5, W: 3, OutC: 6, KH: 3, KW: 2, StrideH: 2, StrideW: 3,
			DilationH: 2, DilationW: 1, PadTop: 1, PadLeft: 0, PadBottom: 2, PadRight: 1, OutPadH: 1, OutPadW: 2, Groups: 2}
		w := randF32(r, 4*3*3*2)
		b := randF32(r, 6)
		x := randF32(r, 2*4*5*3)
		oh, ow := p.OutSize()
		y := make([]float32, 2*6*oh*ow)
		must(kernels.ConvTranspose2DRef(x, w, b, y, p))
		cases = append(cases, visionCase{name: "convtranspose2d",
			node: nodePB("ConvTranspose", "ct", []string{"x", "w", "b"}, []string{"y"}, aInt("group", 2),
				graphtest.Ints("strides", 2, 3), graphtest.Ints("dilations", 2, 1), graphtest.Ints("pads", 1, 0, 2, 1),
				graphtest.Ints("output_padding", 1, 2)),
			inits:  []pb{tensorPB("w", dtype.Float32, []int64{4, 3, 3, 2}, f32Raw(w...)), tensorPB("b", dtype.Float32, []int64{6}, f32Raw(b...))},
			xShape: []int{2, 4, 5, 3}, yShape: []int{2, 6, oh, ow}, x: x, want: y})
	}
	// Conv 3-D with SAME_UPPER padding and strides, wide enough for the
	// GEMM route.
	{
		p := kernels.Conv3DParams{N: 2, C: 5, D: 4, H: 5, W: 3, OutC: 6, Kernel: [3]int{3, 2, 3},
			Stride: [3]int{2, 1, 2}, Dilation: [3]int{1, 1, 1}}
		// SAME_UPPER: out = ceil(in/stride); total pad = (out-1)*s + k - in.
		in := [3]int{4, 5, 3}
		for i := range in {
			o := (in[i] + p.Stride[i] - 1) / p.Stride[i]
			tot := max(0, (o-1)*p.Stride[i]+p.Kernel[i]-in[i])
			p.PadBegin[i], p.PadEnd[i] = tot/2, tot-tot/2
		}
		w := randF32(r, 6*5*3*2*3)
		x := randF32(r, 2*5*4*5*3)
		o := p.OutSize()
		y := make([]float32, 2*6*o[0]*o[1]*o[2])
		must(kernels.Conv3DRef(x, w, nil, y, p))
		cases = append(cases, visionCase{name: "conv3d-same",
			node: nodePB("Conv", "c3", []string{"x", "w"}, []string{"y"}, graphtest.String("auto_pad", "SAME_UPPER"),
				graphtest.Ints("strides", 2, 1, 2)),
			inits:  []pb{tensorPB("w", dtype.Float32, []int64{6, 5, 3, 2, 3}, f32Raw(w...))},
			xShape: []int{2, 5, 4, 5, 3}, yShape: []int{2, 6, o[0], o[1], o[2]}, x: x, want: y})
	}
	// AveragePool 3-D, pads, count_include_pad=0, ceil_mode.
	{
		p := kernels.Pool3DParams{N: 2, C: 3, D: 5, H: 4, W: 7, Kernel: [3]int{2, 3, 2}, Stride: [3]int{2, 2, 3},
			PadBegin: [3]int{1, 1, 0}, PadEnd: [3]int{0, 1, 1}, CeilMode: true}
		x := randF32(r, 2*3*5*4*7)
		o := p.OutSize()
		y := make([]float32, 2*3*o[0]*o[1]*o[2])
		must(kernels.Pool3DRef(x, y, p, true))
		cases = append(cases, visionCase{name: "avgpool3d",
			node: nodePB("AveragePool", "ap", []string{"x"}, []string{"y"}, graphtest.Ints("kernel_shape", 2, 3, 2),
				graphtest.Ints("strides", 2, 2, 3), graphtest.Ints("pads", 1, 1, 0, 0, 1, 1), aInt("ceil_mode", 1)),
			xShape: []int{2, 3, 5, 4, 7}, yShape: []int{2, 3, o[0], o[1], o[2]}, x: x, want: y})
	}
	// MaxPool 2-D with Indices, dilations.
	{
		p := kernels.Pool3DParams{N: 2, C: 3, D: 1, H: 7, W: 6, Kernel: [3]int{1, 2, 3}, Stride: [3]int{1, 2, 1},
			Dilation: [3]int{1, 2, 1}, PadBegin: [3]int{0, 1, 1}, PadEnd: [3]int{0, 0, 1}}
		x := randF32(r, 2*3*7*6)
		o := p.OutSize()
		y := make([]float32, 2*3*o[1]*o[2])
		idx := make([]int64, len(y))
		must(kernels.MaxPoolIndicesRef(x, y, idx, false, p))
		cases = append(cases, visionCase{name: "maxpool-indices",
			node: nodePB("MaxPool", "mp", []string{"x"}, []string{"y", "i"}, graphtest.Ints("kernel_shape", 2, 3),
				graphtest.Ints("strides", 2, 1), graphtest.Ints("dilations", 2, 1), graphtest.Ints("pads", 1, 1, 0, 1)),
			xShape: []int{2, 3, 7, 6}, yShape: []int{2, 3, o[1], o[2]}, x: x, want: y, idx: idx})
	}
	return cases
}

// TestVisionLowerings runs each case with the batch as a symbol "n".
func TestVisionLowerings(t *testing.T) {
	for _, c := range visionCases(t) {
		t.Run(c.name, func(t *testing.T) {
			dims := func(s []int) []any {
				out := []any{"n"}
				for _, d := range s[1:] {
					out = append(out, d)
				}
				return out
			}
			outs := []pb{tvi("y", dtype.Float32, dims(c.yShape)...)}
			if c.idx != nil {
				outs = append(outs, tvi("i", dtype.Int64, dims(c.yShape)...))
			}
			g := graphPB("g", []pb{c.node}, c.inits, []pb{tvi("x", dtype.Float32, dims(c.xShape)...)}, outs)
			opset := c.opset
			if opset == 0 {
				opset = 13
			}
			model := modelPB(opset, g)
			x := tensor.New(tensor.WithShape(c.xShape...), tensor.WithBacking(c.x))
			for _, d := range []struct {
				name string
				opts Options
				tol  float64
			}{{"opencl", Options{Kernels: testLib}, 1e-5}, {"opencl-fp16", Options{Kernels: testLib, Precision: FP16}, 1e-2},
				{"go", Options{Device: "go"}, 1e-5}} {
				m, err := graph.Parse(model, "")
				if err != nil {
					t.Fatal(err)
				}
				s, err := OpenModel(m, d.opts)
				if err != nil {
					t.Fatalf("%s: %v", d.name, err)
				}
				out, err := s.Run(map[string]*tensor.Dense{"x": x})
				s.Close()
				if err != nil {
					t.Fatalf("%s: %v", d.name, err)
				}
				if !sameShape(out["y"].Shape(), tensor.Shape(c.yShape)) {
					t.Fatalf("%s: output shape %v, want %v", d.name, out["y"].Shape(), c.yShape)
				}
				got := floats(t, out["y"])
				scale := 0.0
				for _, v := range c.want {
					scale = math.Max(scale, math.Abs(float64(v)))
				}
				for i := range c.want {
					if e := math.Abs(float64(got[i] - c.want[i])); !(e <= d.tol*math.Max(1, scale)) {
						t.Fatalf("%s: element %d is %v, want %v", d.name, i, got[i], c.want[i])
					}
				}
				if c.idx != nil && d.name != "opencl-fp16" {
					gi, ok := out["i"].Data().([]int64)
					if !ok {
						t.Fatalf("%s: Indices of type %T", d.name, out["i"].Data())
					}
					for i := range c.idx {
						if gi[i] != c.idx[i] {
							t.Fatalf("%s: index %d is %d, want %d", d.name, i, gi[i], c.idx[i])
						}
					}
				}
			}
		})
	}
}
