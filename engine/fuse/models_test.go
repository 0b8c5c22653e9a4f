package fuse

import (
	"path/filepath"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape/infer"
)

// TestExportedModels runs every pass on the PyTorch exports in testdata and
// checks what each model must turn into. The numbers follow from the
// architectures (two layers each): per layer llama has two RMSNorms and
// one attention, GPT-2/BERT/CLIP two LayerNorms, one attention and four
// Linear layers with bias. Numerical equality with the unfused graph is
// checked by the engine's tests (fuse_models_test.go).
func TestExportedModels(t *testing.T) {
	for _, tc := range []struct {
		model string
		want  map[string]int
		gone  []string // op types none of which may remain
	}{
		{"llama", map[string]int{tlite.Key(tlite.Attention): 2, tlite.Key(tlite.RMSNorm): 1, tlite.Key(tlite.AddRMSNorm): 4, tlite.Key(tlite.Rotary): 2},
			[]string{"Softmax", "ReduceMean", "Sqrt", "Pow", "Expand", "Sigmoid", "Neg"}},
		{"gpt2", map[string]int{tlite.Key(tlite.Attention): 2, tlite.Key(tlite.AddLayerNorm): 4, "LayerNormalization": 1, tlite.Key(tlite.MatMulBias): 8},
			[]string{"Softmax", "Where", "Slice", "Tanh", "Pow"}},
		{"bert", map[string]int{tlite.Key(tlite.Attention): 2, tlite.Key(tlite.AddLayerNorm): 4, tlite.Key(tlite.MatMulBias): 12},
			[]string{"Softmax", "Erf", "Transpose", "MatMul"}},
		{"clip_text", map[string]int{tlite.Key(tlite.Attention): 2, tlite.Key(tlite.AddLayerNorm): 4, tlite.Key(tlite.MatMulBias): 12},
			[]string{"Softmax", "Sigmoid", "Transpose"}},
		{"clip_vision", map[string]int{tlite.Key(tlite.Attention): 2, tlite.Key(tlite.AddLayerNorm): 3, tlite.Key(tlite.MatMulBias): 12},
			[]string{"Softmax", "Sigmoid"}},
		// The decoder test bed: attention written the ways Hugging Face
		// modeling code writes it (see engine/fuse/attention.go).
		// Rotary: Q and K of each layer in one node; hf_neox rotates part
		// of each head.
		{"hf_llama", map[string]int{tlite.Key(tlite.Attention): 2, tlite.Key(tlite.Rotary): 2}, []string{"Softmax", "Neg"}},
		{"hf_qwen2", map[string]int{tlite.Key(tlite.Attention): 2, tlite.Key(tlite.Rotary): 2}, []string{"Softmax", "Neg"}},
		{"hf_gqa_interleave", map[string]int{tlite.Key(tlite.Rotary): 2}, []string{"Neg"}},
		{"hf_gpt2", map[string]int{tlite.Key(tlite.Attention): 2}, []string{"Softmax", "Where"}},
		{"hf_neox", map[string]int{tlite.Key(tlite.Attention): 2, tlite.Key(tlite.Rotary): 2}, []string{"Softmax", "Where", "Neg"}},
		{"hf_bigcode_mqa", map[string]int{tlite.Key(tlite.Attention): 2}, []string{"Softmax", "Where"}},
		// Each block's Add and ReLU in a convolution's epilogue
		// (ConvResidual): 4 of them, beside 5 Conv+ReLU.
		{"resnet", map[string]int{tlite.Key(tlite.ConvAct): 9, tlite.Key(tlite.FusedElementwise): 0}, []string{"Add", "Relu"}},
		{"resnet_bn", map[string]int{tlite.Key(tlite.FusedElementwise): 4}, []string{"Add"}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			m, err := graph.Load(filepath.Join("..", "..", "testdata", "models", tc.model, "model.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			res, err := infer.Run(m, infer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			g := m.Graph
			before := countOps(g)
			outs := append([]*graph.Value(nil), g.Outputs...)
			for _, p := range Passes(Options{Elementwise: ew}) {
				if err := p(g, res); err != nil {
					t.Fatal(err)
				}
			}
			checkGraph(t, g)
			after := countOps(g)
			t.Logf("before: %s", opsString(before))
			t.Logf("after:  %s", opsString(after))
			for op, n := range tc.want {
				if after[op] != n {
					t.Errorf("%d %s nodes; want %d", after[op], op, n)
				}
			}
			for _, op := range tc.gone {
				if after[op] != 0 {
					t.Errorf("%d %s nodes remain", after[op], op)
				}
			}
			for i, v := range g.Outputs {
				if v != outs[i] || v.Producer == nil && !v.IsInitializer() {
					t.Errorf("graph output %d changed or lost its producer: %v", i, v)
				}
			}
			for _, n := range g.Nodes {
				if n.OpType == "FusedElementwise" {
					bodyOps(t, n)
				}
			}
			if len(g.Nodes) >= sum(before) {
				t.Errorf("nothing fused: %d nodes", len(g.Nodes))
			}
			for _, n := range g.Nodes {
				if n.OpType == tlite.Rotary {
					// Q and K together; each rotation covers the whole head:
					// for hf_neox the partial form's pass-through joined it.
					if len(n.Inputs) != 4 || len(n.Outputs) != 2 {
						t.Errorf("%v has %d inputs and %d outputs; want Q and K in one node", n, len(n.Inputs), len(n.Outputs))
						continue
					}
					for i, x := range []*graph.Value{n.Inputs[0], n.Inputs[3]} {
						y := n.Outputs[i]
						hd, _ := x.Shape[len(x.Shape)-1].Const()
						rd := n.AttrInt("rotary_dim", 0)
						if !shapeEqual(x.Shape, y.Shape) || (tc.model == "hf_neox") != (rd < hd) {
							t.Errorf("%v: x %v, y %v, rotary_dim %d of %d", n, x.Shape, y.Shape, rd, hd)
						}
					}
				}
				if n.OpType != "Attention" {
					continue
				}
				switch tc.model {
				case "llama":
					// GQA: K and V are the caches before repetition.
					k, v := n.Inputs[1], n.Inputs[2]
					if n.AttrInt("kv_heads", 0) != 2 || k.Shape[1].String() != "2" || !isOutput(g, k) || !isOutput(g, v) {
						t.Errorf("%v reads k %v %v, v %v (kv_heads %d); want the present caches with 2 heads", n, k, k.Shape, v, n.AttrInt("kv_heads", 0))
					}
				case "gpt2":
					if n.AttrInt("causal", 0) != 1 || len(n.Inputs) != 3 {
						t.Errorf("%v: causal %d, %d inputs", n, n.AttrInt("causal", 0), len(n.Inputs))
					}
				case "bert", "clip_text", "clip_vision":
					if p, _ := n.AttrInts("o_perm"); !eqInts(p, 0, 2, 1, 3) {
						t.Errorf("%v writes through %v; want [B, S, H, D]", n, p)
					}
				}
			}
		})
	}
}

func sum(c map[string]int) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}
