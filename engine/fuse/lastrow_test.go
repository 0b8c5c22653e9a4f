package fuse

import (
	"path/filepath"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/symshape/infer"
)

// TestLastRowModels: after the fusion passes, the last-row rewrite finds
// the LM head of each decoder export (and moves the final norm behind the
// slice where the norm feeds only the head), makes the logits
// [batch, 1, vocab], and leaves an encoder alone. Numerical equality with
// the full run is checked in engine/generate (TestLastLogits).
func TestLastRowModels(t *testing.T) {
	for _, tc := range []struct {
		dir      string
		wantHead bool
		wantNorm bool
	}{
		{"models/llama", true, true},
		{"default", true, true},
		{"models/hf_llama", true, true},
		{"models/hf_qwen2", true, true},
		{"models/hf_gpt2", true, true},
		{"models/hf_neox", true, true},
		{"models/hf_bigcode_mqa", true, true},
		{"models/bert", false, false},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			m, err := graph.Load(filepath.Join("..", "..", "testdata", tc.dir, "model.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			res, err := infer.Run(m, infer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range Passes(Options{Elementwise: ew}) {
				if err := p(m.Graph, res); err != nil {
					t.Fatal(err)
				}
			}
			r, err := LastRow(m.Graph, res)
			if err != nil {
				t.Fatal(err)
			}
			if (r.Output != "") != tc.wantHead || (r.Norm != "") != tc.wantNorm {
				t.Fatalf("LastRow = %+v; want a head %v, a norm moved %v", r, tc.wantHead, tc.wantNorm)
			}
			if err := m.Graph.Validate(); err != nil {
				t.Fatal(err)
			}
			if !tc.wantHead {
				return
			}
			out := m.Graph.Value(r.Output)
			if k, ok := out.Shape[1].Const(); !ok || k != 1 {
				t.Fatalf("logits %s after the rewrite; want one row", out.Shape)
			}
			// A second application finds nothing left to do.
			if r2, err := LastRow(m.Graph, res); err != nil || r2.Output != "" {
				t.Fatalf("second LastRow = %+v, %v; want nothing done", r2, err)
			}
		})
	}
}
