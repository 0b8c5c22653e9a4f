package kernels

import "testing"

// TestPReluPerChannel: PRelu with a [C, 1, 1] slope (how PyTorch exports
// nn.PReLU(C)) broadcast over [N, C, H, W], against torch's prelu, through
// the element-wise chain on the device and its reference.
func TestPReluPerChannel(t *testing.T) {
	n := 0
	for _, c := range loadFixtures[torchCase](t, "torch_cases.json") {
		if c.Kind != "prelu" {
			continue
		}
		n++
		x, slope := c.Inputs["x"], c.Inputs["slope"]
		ins := []HostTensor{{Type: EF32, Shape: x.Shape, F: x.f32()}, {Type: EF32, Shape: slope.Shape, F: slope.f32()}}
		got, ref := ewRun(t, BinaryChain(ElemPRelu, EF32, EF32), x.Shape, ins)
		want := c.Output.f32()
		assertClose(t, "PRelu reference vs torch", ref[0].F, want, 0, 0)
		assertClose(t, "PRelu device vs torch", got[0].F, want, 0, 0)
	}
	if n == 0 {
		t.Fatal("no prelu case")
	}
}

// TestHardActivationsDefinition: HardSigmoid(alpha, beta) and HardSwish
// through the chain against their ONNX definitions, max(0, min(1, alpha*x +
// beta)) and x*HardSigmoid(x; 1/6, 1/2), on points that hit both clamps.
func TestHardActivationsDefinition(t *testing.T) {
	xs := []float32{-7, -3.5, -3, -2.9, -1, -0.25, 0, 0.5, 1, 2.9, 3, 3.1, 8}
	shape := []int{len(xs)}
	hs := UnaryChain(ElemHardSigmoid, EF32)
	hs.Nodes[len(hs.Nodes)-1].Alpha, hs.Nodes[len(hs.Nodes)-1].Beta = 0.3, 0.4
	got, _ := ewRun(t, hs, shape, []HostTensor{{Type: EF32, Shape: shape, F: xs}})
	hsw, _ := ewRun(t, UnaryChain(ElemHardSwish, EF32), shape, []HostTensor{{Type: EF32, Shape: shape, F: xs}})
	for i, x := range xs {
		v := float64(x)
		sig := func(a, b float64) float64 { return max(0, min(1, a*v+b)) }
		if d := float64(got[0].F[i]) - sig(0.3, 0.4); d > 1e-6 || d < -1e-6 {
			t.Errorf("HardSigmoid(%g; 0.3, 0.4) = %g, want %g", x, got[0].F[i], sig(0.3, 0.4))
		}
		if d := float64(hsw[0].F[i]) - v*sig(1.0/6, 0.5); d > 1e-6 || d < -1e-6 {
			t.Errorf("HardSwish(%g) = %g, want %g", x, hsw[0].F[i], v*sig(1.0/6, 0.5))
		}
	}
}
