package engine

import (
	"math"
	"path/filepath"
	"testing"
)

// testMax keeps the test plans small: the reference cases use batch <= 3
// and at most 16 tokens of context.
var testMax = map[string]int64{"batch": 4, "seq": 16, "past": 16}

// backendCase is one way of running a model.
type backendCase struct {
	name string
	opts Options
	fp16 bool
}

func backends() []backendCase {
	return []backendCase{
		{name: "opencl-fp32", opts: Options{Kernels: testLib, Max: testMax}},
		{name: "opencl-fp16", opts: Options{Kernels: testLib, Max: testMax, Precision: FP16}, fp16: true},
		{name: "go-fp32", opts: Options{Device: "go", Max: testMax}},
	}
}

// rotaryModels maps the models that use rotary position embeddings to the
// number of fused Rotary nodes they have: one per layer (Q and K together)
// in each of two layers.
var rotaryModels = map[string]int{"llama": 2, "hf_llama": 2, "hf_qwen2": 2, "hf_neox": 2}

// TestModels runs every exported model's reference cases through one
// session per backend (all cases of a model share the session: BERT's two
// sequence lengths, the decoders' prefill and decode) and compares with the
// PyTorch outputs.
func TestModels(t *testing.T) {
	for _, model := range []string{"resnet", "resnet_bn", "bert", "gpt2", "llama", "clip_text", "clip_vision",
		// The decoder test bed (models/export/hf_*.py) models that run today.
		"hf_llama", "hf_qwen2", "hf_gpt2", "hf_bigcode_mqa", "hf_neox"} {
		cases := loadCases(t, model)
		for _, bc := range backends() {
			t.Run(model+"/"+bc.name, func(t *testing.T) {
				s, err := Open(filepath.Join(modelsDir, model, "model.onnx"), bc.opts)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				// The decoders' Q and K rotations run as one fused Rotary
				// node per layer.
				if want, ok := rotaryModels[model]; ok {
					n := 0
					for _, op := range s.nodeOps {
						if op == "Rotary" {
							n++
						}
					}
					if n != want {
						t.Errorf("%d fused Rotary nodes; want %d", n, want)
					}
				}
				for _, rc := range cases {
					got, err := s.Run(rc.inputs)
					if err != nil {
						t.Fatalf("case %s: %v", rc.name, err)
					}
					for _, name := range rc.order {
						want := rc.outputs[name]
						g := got[name]
						if g == nil {
							t.Errorf("case %s: no output %q", rc.name, name)
							continue
						}
						if !sameShape(g.Shape(), want.Shape()) {
							t.Errorf("case %s: %s has shape %v, want %v", rc.name, name, g.Shape(), want.Shape())
							continue
						}
						rel, cos, worst := compare(floats(t, g), floats(t, want))
						t.Logf("case %-8s %-24s rel max err %.2e  cosine %.7f", rc.name, name, rel, cos)
						if bc.fp16 {
							if !(cos >= 0.999) {
								t.Errorf("case %s: %s: cosine similarity %.6f < 0.999", rc.name, name, cos)
							}
						} else if !(rel <= 1e-4) || math.IsNaN(rel) {
							t.Errorf("case %s: %s: max abs error %.3e of the output's scale at element %d (got %v, want %v)",
								rc.name, name, rel, worst, floats(t, g)[worst], floats(t, want)[worst])
						}
					}
				}
			})
		}
	}
}
