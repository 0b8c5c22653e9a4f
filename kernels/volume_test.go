package kernels

import (
	"fmt"
	"math"
	"testing"
)

func arr3(v []int) [3]int { return [3]int{v[0], v[1], v[2]} }

// TestVolumeTorch checks Conv3DRef and Pool3DRef against PyTorch's conv3d,
// max_pool3d and avg_pool3d, and the device against the same outputs.
func TestVolumeTorch(t *testing.T) {
	seen := map[string]int{}
	for i, c := range loadFixtures[torchCase](t, "torch_cases.json") {
		x := c.Inputs["x"]
		want := c.Output.f32()
		got := make([]float32, len(want))
		dev := alloc(t, F32, len(want))
		var err, derr error
		switch c.Kind {
		case "conv3d":
			w, b := c.Inputs["w"], c.Inputs["b"]
			pads := pInts(c.Params, "pads")
			p := Conv3DParams{N: x.Shape[0], C: x.Shape[1], D: x.Shape[2], H: x.Shape[3], W: x.Shape[4], OutC: w.Shape[0],
				Kernel: arr3(pInts(c.Params, "kernel")), Stride: arr3(pInts(c.Params, "strides")),
				Dilation: arr3(pInts(c.Params, "dilations")), PadBegin: arr3(pads), PadEnd: arr3(pads),
				Groups: int(c.Params["group"].(float64))}
			err = Conv3DRef(x.f32(), w.f32(), b.f32(), got, p)
			p.Bias = upload(t, F32, b.f32())
			derr = testLib.Conv3D(F32, upload(t, F32, x.f32()), upload(t, F32, w.f32()), dev, alloc(t, F32, max(1, p.ScratchElems())), p)
		case "max_pool3d", "avg_pool3d":
			pads := pInts(c.Params, "pads")
			p := Pool3DParams{N: x.Shape[0], C: x.Shape[1], D: x.Shape[2], H: x.Shape[3], W: x.Shape[4],
				Kernel: arr3(pInts(c.Params, "kernel")), Stride: arr3(pInts(c.Params, "strides")),
				Dilation: arr3(pInts(c.Params, "dilations")), PadBegin: arr3(pads), PadEnd: arr3(pads),
				CeilMode: pBool(c.Params, "ceil_mode"), CountIncludePad: pBool(c.Params, "count_include_pad")}
			if o := p.OutSize(); fmt.Sprint(o[:]) != fmt.Sprint(c.Output.Shape[2:]) {
				t.Fatalf("case %d %s: OutSize %v, torch %v", i, c.Kind, o, c.Output.Shape)
			}
			avg := c.Kind == "avg_pool3d"
			err = Pool3DRef(x.f32(), got, p, avg)
			if avg {
				derr = testLib.AvgPool3D(F32, upload(t, F32, x.f32()), dev, p)
			} else {
				derr = testLib.MaxPool3D(F32, upload(t, F32, x.f32()), dev, p)
			}
		default:
			continue
		}
		if err != nil || derr != nil {
			t.Fatalf("case %d %s: %v / %v", i, c.Kind, err, derr)
		}
		seen[c.Kind]++
		name := fmt.Sprintf("torch case %d %s %v", i, c.Kind, c.Params)
		assertClose(t, name+" reference", got, want, 1e-5, 1e-5)
		assertClose(t, name+" device", download(t, F32, dev, len(want)), want, 1e-5, 1e-5)
	}
	if seen["conv3d"] == 0 || seen["max_pool3d"] == 0 || seen["avg_pool3d"] == 0 {
		t.Fatalf("fixtures cover only %v", seen)
	}
}

var conv3DCases = map[string]Conv3DParams{
	"3x3x3 p1":     {N: 2, C: 3, D: 5, H: 6, W: 7, OutC: 5, Kernel: [3]int{3, 3, 3}, PadBegin: [3]int{1, 1, 1}, PadEnd: [3]int{1, 1, 1}},
	"strided asym": {N: 1, C: 4, D: 7, H: 5, W: 9, OutC: 8, Kernel: [3]int{2, 3, 2}, Stride: [3]int{2, 1, 3}, PadBegin: [3]int{1, 0, 2}, PadEnd: [3]int{0, 2, 1}, Dilation: [3]int{1, 2, 2}, Groups: 2},
	"depthwise":    {N: 1, C: 4, D: 3, H: 5, W: 5, OutC: 4, Kernel: [3]int{3, 3, 3}, PadBegin: [3]int{1, 1, 1}, PadEnd: [3]int{1, 1, 1}, Groups: 4},
	"1x1x1":        {N: 2, C: 7, D: 2, H: 3, W: 5, OutC: 3, Kernel: [3]int{1, 1, 1}},
	"(1,7,7) stem": {N: 1, C: 3, D: 4, H: 13, W: 11, OutC: 8, Kernel: [3]int{1, 7, 7}, Stride: [3]int{1, 2, 2}, PadBegin: [3]int{0, 3, 3}, PadEnd: [3]int{0, 3, 3}},
}

// TestConv3DShapes runs every case through the direct kernel, the GEMM
// route for the whole batch, one image at a time, and the GPU layout.
func TestConv3DShapes(t *testing.T) {
	defer func() { convKMajor = false }()
	for name, p := range conv3DCases {
		for _, st := range [][2]Storage{{F32, F32}, {F16, F16}, {F32, F16}} {
			s := st[0]
			p.Weight = st[1]
			pn, err := p.norm()
			if err != nil {
				t.Fatal(err)
			}
			full := p.ScratchElems()
			for _, r := range []struct {
				scratch int
				kMajor  bool
			}{{0, false}, {full, false}, {full / p.N, false}, {full, true}} {
				convKMajor = r.kMajor
				o := pn.OutSize()
				kvol := p.Kernel[0] * p.Kernel[1] * p.Kernel[2]
				x := laRand(51, p.N*p.C*p.D*p.H*p.W, s)
				w := laRand(52, p.OutC*p.C/pn.Groups*kvol, p.Weight)
				bias := laRand(53, p.OutC, p.Weight)
				ny := p.N * p.OutC * o[0] * o[1] * o[2]
				q := p
				q.Bias = upload(t, p.Weight, bias)
				var sb Buf
				if r.scratch > 0 {
					sb = alloc(t, s, r.scratch)
				}
				yb := alloc(t, s, ny)
				if err := testLib.Conv3D(s, upload(t, s, x), upload(t, p.Weight, w), yb, sb, q); err != nil {
					t.Fatal(err)
				}
				want := make([]float32, ny)
				if err := Conv3DRef(x, w, bias, want, p); err != nil {
					t.Fatal(err)
				}
				laClose(t, fmt.Sprintf("%s/%s/w%s/scratch %d of %d/kmajor=%v", name, s, p.Weight, r.scratch, full, r.kMajor), s, download(t, s, yb, ny), want)
			}
		}
	}
}

func TestPool3DShapes(t *testing.T) {
	cases := map[string]Pool3DParams{
		"2x2x2 s2":     {N: 2, C: 3, D: 6, H: 7, W: 5, Kernel: [3]int{2, 2, 2}, Stride: [3]int{2, 2, 2}},
		"3x3x3 s2 p1":  {N: 1, C: 2, D: 5, H: 9, W: 8, Kernel: [3]int{3, 3, 3}, Stride: [3]int{2, 2, 2}, PadBegin: [3]int{1, 1, 1}, PadEnd: [3]int{1, 1, 1}},
		"ceil asym":    {N: 1, C: 3, D: 7, H: 6, W: 9, Kernel: [3]int{3, 2, 3}, Stride: [3]int{2, 3, 2}, PadBegin: [3]int{1, 0, 1}, PadEnd: [3]int{0, 1, 1}, CeilMode: true},
		"dilated ceil": {N: 2, C: 2, D: 8, H: 7, W: 6, Kernel: [3]int{2, 3, 2}, Stride: [3]int{1, 2, 2}, Dilation: [3]int{2, 1, 3}, PadBegin: [3]int{1, 1, 0}, PadEnd: [3]int{1, 0, 1}, CeilMode: true},
		"(1,3,3)":      {N: 1, C: 4, D: 3, H: 11, W: 10, Kernel: [3]int{1, 3, 3}, Stride: [3]int{1, 2, 2}, PadBegin: [3]int{0, 1, 1}, PadEnd: [3]int{0, 1, 1}},
	}
	for name, p := range cases {
		o := p.OutSize()
		ny := p.N * p.C * o[0] * o[1] * o[2]
		for _, s := range storages {
			x := laRand(54, p.N*p.C*p.D*p.H*p.W, s)
			for _, mode := range []string{"max", "avg", "avg cip"} {
				q := p
				q.CountIncludePad = mode == "avg cip"
				avg := mode != "max"
				yb := alloc(t, s, ny)
				var err error
				if avg {
					err = testLib.AvgPool3D(s, upload(t, s, x), yb, q)
				} else {
					err = testLib.MaxPool3D(s, upload(t, s, x), yb, q)
				}
				if err != nil {
					t.Fatal(err)
				}
				want := make([]float32, ny)
				if err := Pool3DRef(x, want, q, avg); err != nil {
					t.Fatal(err)
				}
				laClose(t, fmt.Sprintf("%s/%s/%s", name, mode, s), s, download(t, s, yb, ny), want)
			}
		}
	}
}

// TestPool3DMatches2D: a 3-D pool with a depth-1 window over depth 1 is the
// 2-D pool, an independent check of the reference's counting rules.
func TestPool3DMatches2D(t *testing.T) {
	p2 := PoolParams{N: 2, C: 3, H: 7, W: 10, KH: 3, KW: 2, StrideH: 2, StrideW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 0, CeilMode: true}
	p3 := Pool3DParams{N: 2, C: 3, D: 1, H: 7, W: 10, Kernel: [3]int{1, 3, 2}, Stride: [3]int{1, 2, 3}, PadBegin: [3]int{0, 1, 1}, PadEnd: [3]int{0, 1, 0}, CeilMode: true}
	x := laRand(55, 2*3*7*10, F32)
	x[17] = float32(math.NaN())
	oh, ow := p2.OutSize()
	for _, cip := range []bool{false, true} {
		p2.CountIncludePad, p3.CountIncludePad = cip, cip
		for _, avg := range []bool{false, true} {
			a, b := make([]float32, 6*oh*ow), make([]float32, 6*oh*ow)
			if err := PoolRef(x, a, p2, avg); err != nil {
				t.Fatal(err)
			}
			if err := Pool3DRef(x, b, p3, avg); err != nil {
				t.Fatal(err)
			}
			assertClose(t, fmt.Sprintf("cip=%v avg=%v", cip, avg), b, a, 0, 0)
		}
	}
}

func TestVolumeErrors(t *testing.T) {
	x, w, y := alloc(t, F32, 256), alloc(t, F32, 256), alloc(t, F32, 256)
	for name, p := range map[string]Conv3DParams{
		"groups":         {N: 1, C: 3, D: 2, H: 2, W: 2, OutC: 2, Kernel: [3]int{1, 1, 1}, Groups: 2},
		"no kernel":      {N: 1, C: 1, D: 2, H: 2, W: 2, OutC: 1, Kernel: [3]int{1, 0, 1}},
		"kernel too big": {N: 1, C: 1, D: 2, H: 2, W: 2, OutC: 1, Kernel: [3]int{3, 1, 1}},
		"input too big":  {N: 1, C: 8, D: 4, H: 4, W: 4, OutC: 1, Kernel: [3]int{1, 1, 1}},
		"negative pad":   {N: 1, C: 1, D: 2, H: 2, W: 2, OutC: 1, Kernel: [3]int{1, 1, 1}, PadBegin: [3]int{-1, 0, 0}},
	} {
		if err := testLib.Conv3D(F32, x, w, y, Buf{}, p); err == nil {
			t.Errorf("Conv3D %s: no error", name)
		}
	}
	for name, p := range map[string]Pool3DParams{
		"pad > half window": {N: 1, C: 1, D: 4, H: 4, W: 4, Kernel: [3]int{2, 2, 2}, PadBegin: [3]int{0, 2, 0}},
		"no window":         {N: 1, C: 1, D: 4, H: 4, W: 4},
		"input too big":     {N: 1, C: 8, D: 4, H: 4, W: 4, Kernel: [3]int{1, 1, 1}},
	} {
		if err := testLib.MaxPool3D(F32, x, y, p); err == nil {
			t.Errorf("MaxPool3D %s: no error", name)
		}
	}
	before := testLib.Device().Stats().Launches
	if err := testLib.AvgPool3D(F32, x, y, Pool3DParams{N: 0, C: 1, D: 2, H: 2, W: 2, Kernel: [3]int{1, 1, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := testLib.Conv3D(F32, x, w, y, Buf{}, Conv3DParams{N: 1, C: 1, D: 2, H: 2, W: 2, OutC: 0, Kernel: [3]int{1, 1, 1}}); err != nil {
		t.Fatal(err)
	}
	if n := testLib.Device().Stats().Launches - before; n != 0 {
		t.Errorf("empty outputs launched %d kernels", n)
	}
}

// TestMaxPoolIndicesONNXCases: ONNX's MaxPool node tests with the Indices
// output (row- and column-major), reference and device.
func TestMaxPoolIndicesONNXCases(t *testing.T) {
	n := 0
	for _, c := range loadFixtures[onnxCase](t, "onnx_cases.json") {
		if c.Op != "MaxPool" {
			continue
		}
		n++
		x, _ := c.input(0)
		if len(x.Shape) != 4 || len(c.Outputs) != 2 {
			t.Fatalf("%s: input %v, %d outputs", c.Name, x.Shape, len(c.Outputs))
		}
		k, st, pads := c.attrInts("kernel_shape"), c.attrInts("strides"), c.attrInts("pads")
		if st == nil {
			st = []int{1, 1}
		}
		if pads == nil {
			pads = []int{0, 0, 0, 0}
		}
		p := Pool3DParams{N: x.Shape[0], C: x.Shape[1], D: 1, H: x.Shape[2], W: x.Shape[3],
			Kernel: [3]int{1, k[0], k[1]}, Stride: [3]int{1, st[0], st[1]},
			PadBegin: [3]int{0, pads[0], pads[1]}, PadEnd: [3]int{0, pads[2], pads[3]}}
		colMajor := c.attrFloat("storage_order", 0) != 0
		want, wantIdx := c.Outputs[0].f32(), c.Outputs[1].ints()
		y, idx := make([]float32, len(want)), make([]int64, len(want))
		if err := MaxPoolIndicesRef(x.f32(), y, idx, colMajor, p); err != nil {
			t.Fatal(err)
		}
		assertClose(t, c.Name+" values", y, want, 0, 0)
		for i := range idx {
			if idx[i] != int64(wantIdx[i]) {
				t.Fatalf("%s: reference index %d = %d, want %d", c.Name, i, idx[i], wantIdx[i])
			}
		}
		yb, ib := alloc(t, F32, len(want)), alloc(t, F32, 2*len(want)+2)
		if err := testLib.MaxPoolWithIndices(F32, upload(t, F32, x.f32()), yb, Buf{Mem: ib.Mem, Off: 2}, colMajor, p); err != nil {
			t.Fatal(err)
		}
		assertClose(t, c.Name+" device values", download(t, F32, yb, len(want)), want, 0, 0)
		got := downloadInt64(t, Buf{Mem: ib.Mem, Off: 2}, len(want))
		for i := range got {
			if got[i] != int64(wantIdx[i]) {
				t.Fatalf("%s: device index %d = %d, want %d", c.Name, i, got[i], wantIdx[i])
			}
		}
	}
	if n < 2 {
		t.Fatalf("only %d MaxPool cases with indices", n)
	}
}

// TestMaxPoolIndicesShapes: device against reference on odd 2-D and 3-D
// shapes with NaNs and ties, both index orders.
func TestMaxPoolIndicesShapes(t *testing.T) {
	cases := map[string]Pool3DParams{
		"2-D 3x3 s2 p1": {N: 2, C: 3, D: 1, H: 7, W: 9, Kernel: [3]int{1, 3, 3}, Stride: [3]int{1, 2, 2}, PadBegin: [3]int{0, 1, 1}, PadEnd: [3]int{0, 1, 1}},
		"3-D ceil dil":  {N: 1, C: 2, D: 5, H: 6, W: 7, Kernel: [3]int{2, 2, 3}, Stride: [3]int{2, 2, 1}, Dilation: [3]int{1, 2, 1}, PadBegin: [3]int{1, 0, 1}, PadEnd: [3]int{0, 1, 1}, CeilMode: true},
	}
	for name, p := range cases {
		o := p.OutSize()
		ny := p.N * p.C * o[0] * o[1] * o[2]
		x := laRand(71, p.N*p.C*p.D*p.H*p.W, F32)
		for i := range x {
			if i%5 == 0 {
				x[i] = float32(math.Round(float64(x[i]))) // ties
			}
		}
		x[11] = float32(math.NaN())
		for _, cm := range []bool{false, true} {
			yb, ib := alloc(t, F32, ny), alloc(t, F32, 2*ny)
			if err := testLib.MaxPoolWithIndices(F32, upload(t, F32, x), yb, Buf{Mem: ib.Mem, Off: 0}, cm, p); err != nil {
				t.Fatal(err)
			}
			want, wantIdx := make([]float32, ny), make([]int64, ny)
			if err := MaxPoolIndicesRef(x, want, wantIdx, cm, p); err != nil {
				t.Fatal(err)
			}
			assertClose(t, fmt.Sprintf("%s/colMajor=%v values", name, cm), download(t, F32, yb, ny), want, 0, 0)
			got := downloadInt64(t, Buf{Mem: ib.Mem}, ny)
			for i := range got {
				if got[i] != wantIdx[i] {
					t.Fatalf("%s/colMajor=%v: index %d = %d, want %d", name, cm, i, got[i], wantIdx[i])
				}
			}
			plain := make([]float32, ny)
			if err := Pool3DRef(x, plain, p, false); err != nil {
				t.Fatal(err)
			}
			assertClose(t, name+" values match MaxPool3D's", want, plain, 0, 0)
		}
	}
	x, y := alloc(t, F32, 64), alloc(t, F32, 64)
	if err := testLib.MaxPoolWithIndices(F32, x, y, alloc(t, F32, 3), false, Pool3DParams{N: 1, C: 1, D: 1, H: 4, W: 4, Kernel: [3]int{1, 1, 1}}); err == nil {
		t.Error("short index buffer: no error")
	}
}
