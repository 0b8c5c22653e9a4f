package engine

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// gpt2Feeds are hf_gpt2's inputs for seq new tokens after past ones.
func gpt2Feeds(past, seq int, id int64) map[string]*tensor.Dense {
	m := map[string]*tensor.Dense{
		"input_ids":      i64([]int{1, seq}, id),
		"attention_mask": i64([]int{1, past + seq}, 1),
	}
	for _, n := range []string{"past_key_values.0.key", "past_key_values.0.value", "past_key_values.1.key", "past_key_values.1.value"} {
		m[n] = tensor.New(tensor.WithShape(1, 4, past, 16), tensor.WithBacking(make([]float32, 4*past*16)))
	}
	return m
}

// TestDerivedLimits opens hf_gpt2 (256 learned positions, 320 token ids):
// the derived limit past + seq <= 256 caps the default maxima, Run refuses
// past = 250, seq = 10 naming the limit and the node, and refuses token
// ids past the embedding table on both devices; inside the limits it runs.
func TestDerivedLimits(t *testing.T) {
	for _, dev := range []string{"go", "opencl"} {
		t.Run(dev, func(t *testing.T) {
			opts := Options{Device: "go"}
			if dev == "opencl" {
				opts = Options{Kernels: testLib}
			}
			s, err := Open(filepath.Join(modelsDir, "hf_gpt2", "model.onnx"), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			mf := s.MaximaFrom()
			for _, sym := range []string{"past", "seq"} {
				if m := mf[sym]; m.Value != 256 || m.From != FromLimit || !strings.Contains(m.Limit.Node, "wpe") {
					t.Errorf("maximum of %s = %v, want 256 from the wpe Gather limit", sym, m)
				}
			}
			if m := mf["batch"]; m.Value != DefaultMaxBatch || m.From != FromDefault {
				t.Errorf("maximum of batch = %v", m)
			}
			if v, l, ok := s.ExprLimit(s.Inputs()[1].Shape[1]); !ok || v != 256 || l.Node == "" {
				t.Errorf("ExprLimit(past + seq) = %d, %v, %v", v, l, ok)
			}
			if _, err := s.Run(gpt2Feeds(240, 16, 5)); err != nil {
				t.Fatalf("past + seq = 256: %v", err)
			}
			_, err = s.Run(gpt2Feeds(250, 10, 5))
			var le *LimitError
			if !errors.As(err, &le) || le.Value != 260 || le.Limit.Max != 256 ||
				!strings.Contains(err.Error(), "past + seq") || !strings.Contains(err.Error(), "/wpe/Gather") {
				t.Errorf("past + seq = 260: err = %v, want a LimitError naming past + seq, 256 and the node", err)
			}
			// Token ids past the table, and negative ones (ONNX's Gather
			// would read a row from the table's end; PyTorch refuses
			// them): the input, the element, its value and the range.
			for _, id := range []int64{320, 100000, -5, -321} {
				feeds := gpt2Feeds(0, 3, 7)
				feeds["input_ids"].Data().([]int64)[1] = id
				_, err = s.Run(feeds)
				if !errors.As(err, &le) || le.Input != "input_ids" || le.Value != id || len(le.Index) != 2 || le.Index[1] != 1 ||
					!strings.Contains(err.Error(), "/wte/Gather") || !strings.Contains(err.Error(), "outside 0..319") ||
					!strings.Contains(err.Error(), "element [0 1]") {
					t.Errorf("token id %d: err = %v, want a LimitError on input_ids naming element [0 1], the range 0..319 and /wte/Gather", id, err)
				}
			}
		})
	}
}

// TestInputShapesPlan opens hf_gpt2 with the shapes it will be run with:
// the maxima come from them (not the 1024 default), a declared maximum
// wins over them, and shapes beyond a derived limit are refused at Open.
func TestInputShapesPlan(t *testing.T) {
	path := filepath.Join(modelsDir, "hf_gpt2", "model.onnx")
	shapes := func(past, seq int) func([]Port) (map[string][]int, error) {
		return func(ports []Port) (map[string][]int, error) {
			out := map[string][]int{}
			for n, v := range gpt2Feeds(past, seq, 1) {
				out[n] = v.Shape()
			}
			return out, nil
		}
	}
	s, err := Open(path, Options{Device: "go", InputShapes: shapes(0, 7), Max: map[string]int64{"past": 100}})
	if err != nil {
		t.Fatal(err)
	}
	mf := s.MaximaFrom()
	if mf["seq"].Value != 7 || mf["seq"].From != FromInputs || mf["batch"].Value != 1 || mf["past"].Value != 100 || mf["past"].From != FromDeclared {
		t.Errorf("maxima %v", mf)
	}
	if _, err := s.Run(gpt2Feeds(0, 7, 1)); err != nil {
		t.Error(err)
	}
	if _, err := s.Run(gpt2Feeds(0, 8, 1)); err == nil || !strings.Contains(err.Error(), "seq = 8") {
		t.Errorf("seq 8 after planning for 7: %v", err)
	}
	s.Close()
	_, err = Open(path, Options{Device: "go", InputShapes: shapes(200, 100)})
	var le *LimitError
	if !errors.As(err, &le) || le.Value != 300 {
		t.Errorf("planning for past + seq = 300: %v", err)
	}
}
