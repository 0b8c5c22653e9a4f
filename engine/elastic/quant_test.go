package elastic

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/quant/qonnx"
)

func prefill(t *testing.T, s *engine.Session, ids []int64) []float32 {
	t.Helper()
	n := len(ids)
	in := map[string]engine.Tensor{}
	for _, p := range s.Inputs() {
		switch p.Name {
		case "input_ids":
			in[p.Name] = engine.NewTensor([]int{1, n}, ids)
		case "attention_mask", "position_ids":
			v := make([]int64, n)
			for i := range v {
				if p.Name == "attention_mask" {
					v[i] = 1
				} else {
					v[i] = int64(i)
				}
			}
			in[p.Name] = engine.NewTensor([]int{1, n}, v)
		default:
			dims := make([]int, len(p.Shape))
			for i, e := range p.Shape {
				if c, ok := e.Const(); ok {
					dims[i] = int(c)
				} else if i == 0 {
					dims[i] = 1
				}
			}
			in[p.Name] = engine.NewTensor(dims, []float32{})
		}
	}
	out, err := s.RunTensors(in)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := out["logits"].Float32s()
	return v
}

func dist(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// TestQuantizedLevels: with E0M4 weights (group 32) the binding drives the
// 4-bit product's active N and K, and each level's output stays near the
// fp32 sub-model of the same level, much nearer than to the full model
// (levels far enough from 100% that the gap exceeds the 4-bit error).
func TestQuantizedLevels(t *testing.T) {
	path := filepath.Join(llamaDir, "model.onnx")
	spec, err := Load(llamaDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := graph.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := qonnx.Quantize(m, qonnx.Options{Format: quant.E0M4, Group: 32})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Weights) < 3*spec.NLayers {
		t.Fatalf("only %d weights quantized", len(res.Weights))
	}
	qs, err := engine.OpenModel(m, engine.Options{Device: "go", NoJoin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer qs.Close()
	fs, err := engine.Open(path, engine.Options{Device: "go", NoJoin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	qm, err := Bind(qs, spec)
	if err != nil {
		t.Fatal(err)
	}
	fm, err := Bind(fs, spec)
	if err != nil {
		t.Fatal(err)
	}
	ids := []int64{5, 17, 200, 3, 99, 42, 7, 150, 8}
	full := prefill(t, fs, ids)
	for _, lv := range []int{20, 40, 60} {
		if err := qm.SetLevel(lv); err != nil {
			t.Fatal(err)
		}
		if err := fm.SetLevel(lv); err != nil {
			t.Fatal(err)
		}
		q, f := prefill(t, qs, ids), prefill(t, fs, ids)
		near, far := dist(q, f), dist(f, full)
		t.Logf("level %d%%: 4-bit vs fp32 sub-model %.4f, fp32 sub-model vs full %.4f", lv, near, far)
		if !(near < far/2) {
			t.Errorf("level %d%%: 4-bit vs fp32 sub-model %.4f, fp32 sub-model vs full %.4f: the 4-bit sub-model is not the level's", lv, near, far)
		}
	}
}
