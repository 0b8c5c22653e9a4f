package engine

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
)

func withInputs(base map[string]*tensor.Dense, edit func(m map[string]*tensor.Dense)) map[string]*tensor.Dense {
	m := map[string]*tensor.Dense{}
	for k, v := range base {
		m[k] = v
	}
	edit(m)
	return m
}

func i64(shape []int, fill int64) *tensor.Dense {
	v := make([]int64, numel(shape))
	for i := range v {
		v[i] = fill
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// TestBadInputs feeds the LLaMA session every kind of bad input: each is an
// InputError naming the input, the expected symbolic shape and what was
// given, and a good run right after it still matches the reference.
func TestBadInputs(t *testing.T) {
	s, err := Open(filepath.Join(modelsDir, "llama", "model.onnx"), Options{Kernels: testLib, Max: testMax})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var good refCase
	for _, rc := range loadCases(t, "llama") {
		if rc.name == "decode" {
			good = rc
		}
	}
	in := good.inputs
	cases := []struct {
		name   string
		inputs map[string]*tensor.Dense
		input  string
		want   []string
	}{
		{"missing", withInputs(in, func(m map[string]*tensor.Dense) { delete(m, "position_ids") }),
			"position_ids", []string{"missing", "[batch, seq]"}},
		{"unknown", withInputs(in, func(m map[string]*tensor.Dense) { m["token_ids"] = i64([]int{2, 1}, 0) }),
			"token_ids", []string{"no such input", "input_ids"}},
		{"type", withInputs(in, func(m map[string]*tensor.Dense) {
			m["input_ids"] = tensor.New(tensor.WithShape(2, 1), tensor.WithBacking([]float32{1, 2}))
		}), "input_ids", []string{"element type", "int64 [batch, seq]", "float32 [2 1]"}},
		{"rank", withInputs(in, func(m map[string]*tensor.Dense) { m["input_ids"] = i64([]int{2, 1, 1}, 1) }),
			"input_ids", []string{"rank 3", "[batch, seq]", "[2 1 1]"}},
		{"constant dim", withInputs(in, func(m map[string]*tensor.Dense) {
			m["past_key_values.1.value"] = tensor.New(tensor.WithShape(2, 3, 7, 16), tensor.WithBacking(make([]float32, 2*3*7*16)))
		}), "past_key_values.1.value", []string{"axis 1 is 3, the model requires 2", "[batch, 2, past, 16]", "[2 3 7 16]"}},
		{"two values", withInputs(in, func(m map[string]*tensor.Dense) { m["position_ids"] = i64([]int{2, 2}, 1) }),
			"", []string{"seq", "[batch, seq]"}},
		{"above max", withInputs(in, func(m map[string]*tensor.Dense) {
			m["input_ids"] = i64([]int{2, 17}, 1)
			m["position_ids"] = i64([]int{2, 17}, 1)
			m["attention_mask"] = i64([]int{2, 24}, 1)
		}), "input_ids", []string{"maximum 16", "[batch, seq]", "[2 17]"}},
	}
	for _, c := range cases {
		_, err := s.Run(c.inputs)
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Errorf("%s: want an InputError, got %v", c.name, err)
			continue
		}
		if c.input != "" && ie.Input != c.input {
			t.Errorf("%s: error names input %q, want %q (%v)", c.name, ie.Input, c.input, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.name, err, w)
			}
		}
		t.Logf("%s: %v", c.name, err)
		got, err := s.Run(good.inputs)
		if err != nil {
			t.Fatalf("good run after %s: %v", c.name, err)
		}
		rel, _, _ := compare(floats(t, got["logits"]), floats(t, good.outputs["logits"]))
		if rel > 1e-4 {
			t.Fatalf("good run after %s: logits off by %.2e", c.name, rel)
		}
	}
}

// TestUnsupportedOp: an operator without lowering fails at Open with the
// node, op type and opset.
func TestUnsupportedOp(t *testing.T) {
	g := graphPB("g", []pb{nodePB("LpPool", "/x/LpPool", []string{"x"}, []string{"y"}, graphtest.Ints("kernel_shape", 2, 2))}, nil,
		[]pb{tvi("x", dtype.Float32, 1, 1, 3, 3)}, []pb{tvi("y", dtype.Float32)})
	m, err := graph.Parse(modelPB(17, g), "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenModel(m, Options{Kernels: testLib, Rewrites: []Rewrite{}})
	want := `node "/x/LpPool" (LpPool, opset 17): operator not supported on the OpenCL backend`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error containing %q", err, want)
	}
}
