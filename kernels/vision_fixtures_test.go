package kernels

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The vision fixtures are written by testdata/vision/gen.py: ONNX's own node
// test cases (onnx_cases.json) and PyTorch outputs (torch_cases.json).

type fixArray struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

func (a fixArray) f32() []float32 {
	out := make([]float32, len(a.Data))
	for i, v := range a.Data {
		out[i] = float32(v)
	}
	return out
}

func (a fixArray) ints() []int {
	out := make([]int, len(a.Data))
	for i, v := range a.Data {
		out[i] = int(v)
	}
	return out
}

type onnxCase struct {
	Name   string              `json:"name"`
	Op     string              `json:"op"`
	Inputs []string            `json:"inputs"`
	Values map[string]fixArray `json:"values"`
	Attrs  map[string]any      `json:"attrs"`
	Output fixArray            `json:"output"`
	// Outputs are all the node's outputs, Output first.
	Outputs []fixArray `json:"outputs"`
}

// input is the value in input slot i, if the node fills it.
func (c onnxCase) input(i int) (fixArray, bool) {
	if i >= len(c.Inputs) || c.Inputs[i] == "" {
		return fixArray{}, false
	}
	v, ok := c.Values[c.Inputs[i]]
	return v, ok
}

func (c onnxCase) attrString(name, def string) string {
	if v, ok := c.Attrs[name].(string); ok {
		return v
	}
	return def
}

func (c onnxCase) attrFloat(name string, def float64) float64 {
	if v, ok := c.Attrs[name].(float64); ok {
		return v
	}
	return def
}

func (c onnxCase) attrInts(name string) []int {
	v, ok := c.Attrs[name].([]any)
	if !ok {
		return nil
	}
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x.(float64))
	}
	return out
}

type torchCase struct {
	Kind   string              `json:"kind"`
	Params map[string]any      `json:"params"`
	Inputs map[string]fixArray `json:"inputs"`
	Output fixArray            `json:"output"`
}

func loadFixtures[T any](t *testing.T, name string) []T {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "vision", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no cases", name)
	}
	return out
}

func pInts(m map[string]any, k string) []int {
	v, _ := m[k].([]any)
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x.(float64))
	}
	return out
}

func pBool(m map[string]any, k string) bool {
	v, _ := m[k].(bool)
	return v
}
