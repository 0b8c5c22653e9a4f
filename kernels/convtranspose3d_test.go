package kernels

import (
	"fmt"
	"testing"
)

// TestConvTranspose3DFixtures: ONNX's 3-D ConvTranspose node test and
// PyTorch's conv_transpose3d (groups, dilations, asymmetric pads, output
// padding), reference and device on both routes.
func TestConvTranspose3DFixtures(t *testing.T) {
	type fx struct {
		name       string
		x, w, want []float32
		bias       []float32
		p          ConvTranspose3DParams
	}
	var cases []fx
	for _, c := range loadFixtures[onnxCase](t, "onnx_cases.json") {
		x, _ := c.input(0)
		if c.Op != "ConvTranspose" || len(x.Shape) != 5 {
			continue
		}
		w, _ := c.input(1)
		if len(c.Attrs) != 0 {
			t.Fatalf("%s: attributes %v not mapped here", c.Name, c.Attrs)
		}
		cases = append(cases, fx{c.Name, x.f32(), w.f32(), c.Output.f32(), nil, ConvTranspose3DParams{
			N: x.Shape[0], C: x.Shape[1], D: x.Shape[2], H: x.Shape[3], W: x.Shape[4], OutC: w.Shape[1],
			Kernel: arr3(w.Shape[2:])}})
	}
	for i, c := range loadFixtures[torchCase](t, "torch_cases.json") {
		if c.Kind != "conv_transpose3d" {
			continue
		}
		x, w, b := c.Inputs["x"], c.Inputs["w"], c.Inputs["b"]
		pads := pInts(c.Params, "pads")
		g := int(c.Params["group"].(float64))
		cases = append(cases, fx{fmt.Sprintf("torch case %d", i), x.f32(), w.f32(), c.Output.f32(), b.f32(), ConvTranspose3DParams{
			N: x.Shape[0], C: x.Shape[1], D: x.Shape[2], H: x.Shape[3], W: x.Shape[4], OutC: w.Shape[1] * g,
			Kernel: arr3(w.Shape[2:]), Stride: arr3(pInts(c.Params, "strides")), Dilation: arr3(pInts(c.Params, "dilations")),
			PadBegin: arr3(pads[:3]), PadEnd: arr3(pads[3:]), OutPad: arr3(pInts(c.Params, "output_padding")), Groups: g}})
	}
	if len(cases) < 3 {
		t.Fatalf("only %d 3-D ConvTranspose cases", len(cases))
	}
	for _, c := range cases {
		ref := make([]float32, len(c.want))
		if err := ConvTranspose3DRef(c.x, c.w, c.bias, ref, c.p); err != nil {
			t.Fatal(err)
		}
		assertClose(t, c.name+" reference", ref, c.want, 1e-5, 1e-5)
		for _, scratch := range []int{0, c.p.ScratchElems()} {
			q := c.p
			if c.bias != nil {
				q.Bias = upload(t, F32, c.bias)
			}
			var sb Buf
			if scratch > 0 {
				sb = alloc(t, F32, scratch)
			}
			yb := alloc(t, F32, len(c.want))
			if err := testLib.ConvTranspose3D(F32, upload(t, F32, c.x), upload(t, F32, c.w), yb, sb, q); err != nil {
				t.Fatal(err)
			}
			assertClose(t, fmt.Sprintf("%s device (scratch %d)", c.name, scratch), download(t, F32, yb, len(c.want)), c.want, 1e-5, 1e-5)
		}
	}
}

func TestConvTranspose3DShapes(t *testing.T) {
	cases := map[string]ConvTranspose3DParams{
		"2x2x2 s2":     {N: 2, C: 16, D: 3, H: 4, W: 5, OutC: 8, Kernel: [3]int{2, 2, 2}, Stride: [3]int{2, 2, 2}},
		"3x3x3 p1 op1": {N: 1, C: 9, D: 3, H: 5, W: 4, OutC: 5, Kernel: [3]int{3, 3, 3}, Stride: [3]int{2, 2, 2}, PadBegin: [3]int{1, 1, 1}, PadEnd: [3]int{1, 1, 1}, OutPad: [3]int{1, 0, 1}},
		"groups dil":   {N: 1, C: 16, D: 4, H: 3, W: 5, OutC: 6, Kernel: [3]int{2, 3, 2}, Stride: [3]int{1, 2, 3}, Dilation: [3]int{2, 1, 2}, PadBegin: [3]int{0, 2, 1}, PadEnd: [3]int{1, -1, 0}, Groups: 2},
		"thin":         {N: 2, C: 3, D: 2, H: 3, W: 3, OutC: 2, Kernel: [3]int{3, 1, 2}, Stride: [3]int{2, 1, 2}},
	}
	defer func() { mmForce = "" }()
	for name, p := range cases {
		for _, st := range [][2]Storage{{F32, F32}, {F16, F16}, {F32, F16}} {
			s := st[0]
			p.Weight = st[1]
			pn, err := p.norm()
			if err != nil {
				t.Fatal(err)
			}
			o := pn.OutSize()
			kvol := p.Kernel[0] * p.Kernel[1] * p.Kernel[2]
			x := laRand(81, p.N*p.C*p.D*p.H*p.W, s)
			w := laRand(82, p.C*p.OutC/pn.Groups*kvol, p.Weight)
			bias := laRand(83, p.OutC, p.Weight)
			ny := p.N * p.OutC * o[0] * o[1] * o[2]
			want := make([]float32, ny)
			if err := ConvTranspose3DRef(x, w, bias, want, p); err != nil {
				t.Fatal(err)
			}
			full := p.ScratchElems()
			for _, r := range []struct {
				scratch int
				force   string
			}{{0, ""}, {full, ""}, {full / p.N, ""}, {full, "mm_tiled"}} {
				mmForce = r.force
				q := p
				q.Bias = upload(t, p.Weight, bias)
				var sb Buf
				if r.scratch > 0 {
					sb = alloc(t, F32, r.scratch) // float32 whatever s
				}
				yb := alloc(t, s, ny)
				if err := testLib.ConvTranspose3D(s, upload(t, s, x), upload(t, p.Weight, w), yb, sb, q); err != nil {
					t.Fatal(err)
				}
				laClose(t, fmt.Sprintf("%s/%s/w%s/scratch %d of %d/%s", name, s, p.Weight, r.scratch, full, r.force), s, download(t, s, yb, ny), want)
			}
			mmForce = ""
		}
	}
	x, w, y := alloc(t, F32, 64), alloc(t, F32, 64), alloc(t, F32, 64)
	for name, p := range map[string]ConvTranspose3DParams{
		"groups":         {N: 1, C: 3, D: 1, H: 2, W: 2, OutC: 2, Kernel: [3]int{1, 1, 1}, Groups: 2},
		"no kernel":      {N: 1, C: 1, D: 1, H: 2, W: 2, OutC: 1},
		"output too big": {N: 1, C: 1, D: 2, H: 2, W: 2, OutC: 1, Kernel: [3]int{3, 3, 3}, Stride: [3]int{2, 2, 2}},
	} {
		if err := testLib.ConvTranspose3D(F32, x, w, y, Buf{}, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
