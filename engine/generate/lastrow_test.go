package generate

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/quant/qonnx"
	"github.com/tlite/tlite/graph/tlite"
)

// TestLastLogits: a decoder opened with engine.Options.LastLogits computes
// one row of logits for a prompt, equal to the last row of the full run,
// on both devices and in both cache modes, for our LLaMA export, the
// default model and every decoder of the test bed; the stepper keeps the
// rows it steps in between consistent too (the next decode step's logits
// agree as well).
func TestLastLogits(t *testing.T) {
	models := map[string]string{
		"llama":   filepath.Join(modelsDir, "llama", "model.onnx"),
		"default": filepath.Join(defaultDir, "model.onnx"),
	}
	// hf_bloom runs explicitly only (TestTestBedBloom) and
	// hf_gqa_interleave's export is wrong (see TestTestBedFallback).
	for _, n := range testBedInPlace {
		models[n] = filepath.Join(modelsDir, n, "model.onnx")
	}
	// The default model at 4 bits: its LM head is a MatMulQ.
	models["default-e0m4"] = quantized(t, filepath.Join(defaultDir, "model.onnx"))
	prompt := []int{1, 5, 9, 2, 7, 3, 11, 4, 6, 8, 10, 12, 13}
	for _, dev := range []string{"opencl", "opencl-fp16", "go"} {
		for name, path := range models {
			for _, mode := range []string{KVInPlace, KVExplicit} {
				t.Run(dev+"/"+name+"/"+mode, func(t *testing.T) {
					opts := engine.Options{Kernels: testLib}
					tol := 1e-4
					switch dev {
					case "go":
						opts = engine.Options{Device: "go"}
					case "opencl-fp16":
						// Both runs round activations to fp16; products of one
						// row and of many may round differently by an ulp.
						opts.Precision, tol = engine.FP16, 4e-3
					}
					open := func(last bool) Stepper {
						var st Stepper
						var s *engine.Session
						if mode == KVInPlace {
							d, err := Open(path, opts, testBedCtx, Config{LastOnly: last})
							if err != nil {
								t.Fatal(err)
							}
							if d.Mode != KVInPlace {
								t.Skipf("%s has no in-place cache: %s", name, d.Fallback)
							}
							st, s = d, d.Session()
						} else {
							e, err := OpenExplicit(path, opts, testBedCtx, Config{LastOnly: last})
							if err != nil {
								t.Fatal(err)
							}
							st, s = e, e.Session()
						}
						t.Cleanup(func() { s.Close() })
						if s.LastLogits() != last {
							t.Fatalf("LastLogits() = %v, want %v", s.LastLogits(), last)
						}
						return st
					}
					full, last := open(false), open(true)
					v := full.Vocab()
					p := prompt
					for i := range p {
						p[i] %= v
					}
					pos := make([]int, len(p))
					for i := range pos {
						pos[i] = i
					}
					a, err := full.Step(p, pos)
					if err != nil {
						t.Fatal(err)
					}
					b, err := last.Step(p, pos)
					if err != nil {
						t.Fatal(err)
					}
					if len(a) != len(p)*v || len(b) != v {
						t.Fatalf("full run %d logits, last-row run %d; want %d and %d", len(a), len(b), len(p)*v, v)
					}
					closeRows(t, "prompt", a[len(a)-v:], b, tol)
					next := argmaxF(b)
					a, err = full.Step([]int{next}, []int{len(p)})
					if err != nil {
						t.Fatal(err)
					}
					b, err = last.Step([]int{next}, []int{len(p)})
					if err != nil {
						t.Fatal(err)
					}
					closeRows(t, "decode step", a, b, tol)
				})
			}
		}
	}
}

// quantized writes path's model with every weight in E0M4 (groups of 32)
// into a temporary folder and returns the new path.
func quantized(t *testing.T, path string) string {
	t.Helper()
	m, err := graph.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := qonnx.Quantize(m, qonnx.Options{Format: quant.E0M4, Group: 32})
	if err != nil {
		t.Fatal(err)
	}
	head := false
	for _, n := range m.Graph.Nodes {
		for _, o := range n.Outputs {
			if o != nil && o.Name == "logits" && n.OpType == tlite.MatMulQ {
				head = true
			}
		}
	}
	if !head || len(res.Weights) == 0 {
		t.Fatalf("the quantized model's logits are not a MatMulQ (%d weights converted)", len(res.Weights))
	}
	out := filepath.Join(t.TempDir(), "model.onnx")
	if err := graph.Write(m, out, graph.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return out
}

func closeRows(t *testing.T, what string, want, got []float32, tol float64) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d logits, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range want {
		d := math.Abs(float64(want[i]-got[i])) / (1 + math.Abs(float64(want[i])))
		worst = max(worst, d)
	}
	if worst > tol || math.IsNaN(worst) {
		t.Fatalf("%s: last-row logits differ from the full run's last row by %.3g (relative)", what, worst)
	}
	if argmaxF(want) != argmaxF(got) {
		t.Fatalf("%s: argmax %d, full run %d", what, argmaxF(got), argmaxF(want))
	}
}
