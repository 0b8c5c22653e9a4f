package graph

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/dtype"
)

// Fixtures made by testdata/gen.py with PyTorch's exporter and the onnx
// package: an encoder other than this package's test encoder. Expected weights
// are the generator's closed formulas, recomputed here.

func TestTorchExport(t *testing.T) {
	m, err := Load(filepath.Join("testdata", "mlp_dynamic.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g := m.Graph
	if m.Producer != "pytorch" || m.Opset("") != 17 {
		t.Errorf("producer %q opset %d", m.Producer, m.Opset(""))
	}
	var ops []string
	for _, n := range g.Nodes {
		ops = append(ops, n.OpType)
	}
	want := "Shape Constant Gather Constant Unsqueeze Constant Concat Reshape Gemm Relu Gemm"
	if strings.Join(ops, " ") != want {
		t.Errorf("ops %v, want %s", ops, want)
	}
	if len(g.Inputs) != 1 || g.Inputs[0].Name != "x" || fmt.Sprint(g.Inputs[0].Declared) != "[batch 2 2]" {
		t.Errorf("inputs %v declared %v", valueNames(g.Inputs), g.Inputs[0].Declared)
	}
	if len(g.Outputs) != 1 || g.Outputs[0].Declared[0].Param != "batch" || g.Outputs[0].Type != dtype.Float32 {
		t.Errorf("output %v %v", g.Outputs[0].Type, g.Outputs[0].Declared)
	}
	formulas := map[string]func(i int) float32{
		"fc1.weight": func(i int) float32 { return float32(i)/16 - 1 },
		"fc1.bias":   func(i int) float32 { return float32(i) / 8 },
		"fc2.weight": func(i int) float32 { return float32(i) / 32 },
		"fc2.bias":   func(i int) float32 { return []float32{0.5, -0.5}[i] },
	}
	sizes := map[string]int{"fc1.weight": 32, "fc1.bias": 8, "fc2.weight": 16, "fc2.bias": 2}
	for name, f := range formulas {
		v := g.Value(name)
		if v == nil || !v.IsInitializer() {
			t.Fatalf("initializer %q missing", name)
		}
		vals, err := v.Const.Float32s()
		if err != nil || len(vals) != sizes[name] {
			t.Fatalf("%s: %d values, %v", name, len(vals), err)
		}
		for i, x := range vals {
			if x != f(i) {
				t.Errorf("%s[%d] = %v, want %v", name, i, x, f(i))
				break
			}
		}
	}
	// The Constants feeding the shape computation carry their values.
	for _, n := range g.Nodes {
		if n.OpType == "Constant" && n.Outputs[0].Const == nil {
			t.Errorf("Constant %v has no Const", n)
		}
	}
	if gemm := g.Nodes[8]; gemm.AttrInt("transB", 0) != 1 || gemm.AttrFloat("alpha", 0) != 1 {
		t.Errorf("Gemm attrs %v", gemm.Attrs)
	}
}

func TestOnnxExternalFP16(t *testing.T) {
	m, err := Load(filepath.Join("testdata", "fp16_ext.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	g := m.Graph
	w := g.Value("W").Const
	if w.Type != dtype.Float16 || !w.External || fmt.Sprint(w.Dims) != "[3 4]" {
		t.Fatalf("W: %v external %v dims %v", w.Type, w.External, w.Dims)
	}
	vals, _ := w.Float32s()
	for i, x := range vals {
		if want := float32(i)*0.25 - 1; x != want {
			t.Errorf("W[%d] = %v, want %v", i, x, want)
		}
	}
	if b, _ := g.Value("bias").Const.Float32s(); fmt.Sprint(b) != "[1 2 3 4]" {
		t.Errorf("bias %v", b)
	}
	if fmt.Sprint(g.Inputs[0].Declared) != "[n 3]" || g.Inputs[1].Declared == nil || len(g.Inputs[1].Declared) != 0 {
		t.Errorf("declared %v / %v", g.Inputs[0].Declared, g.Inputs[1].Declared)
	}
	iff := g.Nodes[1]
	if imp := valueNames(iff.ImplicitInputs()); fmt.Sprint(imp) != "[m bias]" {
		t.Errorf("If implicit inputs %v, want [m bias] (then reads m and bias, else reads m)", imp)
	}
}
