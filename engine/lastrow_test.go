package engine

import (
	"math"
	"path/filepath"
	"slices"
	"testing"
)

// TestLastRowOutputs: an output named in Options.LastRowOutputs comes back
// as its last row, equal to the last row of PyTorch's full output, on two
// exports shaped like Hugging Face code (prefill and decode), while the
// other outputs stay whole; an output whose producer is not row-wise (a
// cache Concat), or that another node reads (BERT's hidden states, read
// by the pooler), keeps every row and its values.
func TestLastRowOutputs(t *testing.T) {
	for _, tc := range []struct {
		model, output string
		rewritten     bool
	}{
		{"hf_llama", "logits", true},
		{"hf_gpt2", "logits", true},
		{"hf_llama", "present.0.key", false},
		{"bert", "last_hidden_state", false},
	} {
		cases := loadCases(t, tc.model)
		for _, bc := range backends() {
			if bc.fp16 {
				continue
			}
			t.Run(tc.model+"/"+tc.output+"/"+bc.name, func(t *testing.T) {
				opts := bc.opts
				opts.LastRowOutputs = []string{tc.output}
				s, err := Open(filepath.Join(modelsDir, tc.model, "model.onnx"), opts)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if got := s.LastRowOutputs(); slices.Equal(got, []string{tc.output}) != tc.rewritten {
					t.Fatalf("LastRowOutputs() = %v; want %q rewritten: %v", got, tc.output, tc.rewritten)
				}
				for _, rc := range cases {
					got, err := s.Run(rc.inputs)
					if err != nil {
						t.Fatalf("case %s: %v", rc.name, err)
					}
					for _, name := range rc.order {
						want := rc.outputs[name]
						wantShape := []int(want.Shape())
						w := floats(t, want)
						if name == tc.output && tc.rewritten {
							w, wantShape = lastRows(w, wantShape), lastShape(wantShape)
						}
						g := got[name]
						if g == nil || !slices.Equal([]int(g.Shape()), wantShape) {
							t.Fatalf("case %s: %s is %v; want shape %v", rc.name, name, g, wantShape)
						}
						rel, _, worst := compare(floats(t, g), w)
						if !(rel <= 1e-4) || math.IsNaN(rel) {
							t.Errorf("case %s: %s: max abs error %.3e of the output's scale at element %d", rc.name, name, rel, worst)
						}
					}
				}
			})
		}
	}
}

// lastShape is shape with its second-to-last axis 1.
func lastShape(shape []int) []int {
	out := slices.Clone(shape)
	out[len(out)-2] = 1
	return out
}

// lastRows takes the last index of the second-to-last axis of a
// row-major tensor.
func lastRows(v []float32, shape []int) []float32 {
	r := len(shape)
	rows, cols := shape[r-2], shape[r-1]
	var out []float32
	for off := 0; off < len(v); off += rows * cols {
		out = append(out, v[off+(rows-1)*cols:off+rows*cols]...)
	}
	return out
}
