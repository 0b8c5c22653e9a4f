package engine

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/quant/qonnx"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// quantizeModel writes src quantized as o says into a fresh folder, with
// every tensor of 1 KiB or more in a page-aligned external data file (as
// `tl quantize` writes it), and returns the new model's path.
func quantizeModel(t *testing.T, src string, o qonnx.Options) (string, *qonnx.Result) {
	t.Helper()
	m, err := graph.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := qonnx.Quantize(m, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Graph.Validate(); err != nil {
		t.Fatalf("rewritten graph: %v", err)
	}
	out := filepath.Join(t.TempDir(), "model.onnx")
	if err := graph.Write(m, out, graph.WriteOptions{ExternalThreshold: 1024, Align: 4096}); err != nil {
		t.Fatal(err)
	}
	return out, res
}

// runCases runs every reference case of a model through one session and
// returns the logits' cosine similarity to PyTorch's per case, and the
// logits themselves.
func runQuantCases(t *testing.T, path string, cases []refCase, opts Options) (cos []float64, logits [][]float32) {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, rc := range cases {
		got, err := s.Run(rc.inputs)
		if err != nil {
			t.Fatalf("case %s: %v", rc.name, err)
		}
		g, want := got["logits"], rc.outputs["logits"]
		if g == nil || !sameShape(g.Shape(), want.Shape()) {
			t.Fatalf("case %s: logits %v, want shape %v", rc.name, g, want.Shape())
		}
		_, c, _ := compare(floats(t, g), floats(t, want))
		cos = append(cos, c)
		logits = append(logits, append([]float32(nil), floats(t, g)...))
	}
	return cos, logits
}

// dequantizedModel writes src with every weight that res packed replaced
// by the float32 values its packed form decodes to (read back from the
// quantized model at qpath), so that the engine's plain MatMul path on it
// computes what MatMulQ should, up to summation order.
func dequantizedModel(t *testing.T, src, qpath string, res *qonnx.Result) string {
	t.Helper()
	qm, err := graph.Load(qpath)
	if err != nil {
		t.Fatal(err)
	}
	defer qm.Close()
	m, err := graph.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, w := range res.Weights {
		qv := qm.Graph.Value(w.Stored)
		if qv == nil || qv.Const == nil {
			t.Fatalf("quantized model has no initializer %q", w.Stored)
		}
		if !qv.Const.External {
			t.Errorf("packed weight %q is inline; want it in the external data file", w.Stored)
		}
		p, err := quant.UnmarshalPacked(qv.Const.Data)
		if err != nil {
			t.Fatal(err)
		}
		if w.Layout != "KN" {
			t.Fatalf("weight %s: layout %s; the llama exports store MatMul weights as KN", w.Name, w.Layout)
		}
		ft, err := graph.Float32Tensor(w.Name, []int64{int64(p.K), int64(p.N)}, quant.Dequantize(p))
		if err != nil {
			t.Fatal(err)
		}
		m.Graph.Value(w.Name).Const = ft
	}
	out := filepath.Join(t.TempDir(), "dequantized.onnx")
	if err := graph.Write(m, out, graph.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return out
}

func minOf(xs []float64) float64 {
	m := math.Inf(1)
	for _, x := range xs {
		m = math.Min(m, x)
	}
	return m
}

// maxRel is the largest difference between two runs' logits relative to
// the larger's scale.
func maxRel(a, b [][]float32) float64 {
	var worst float64
	for i := range a {
		r, _, _ := compare(a[i], b[i])
		worst = math.Max(worst, r)
	}
	return worst
}

// TestQuantLlama quantizes the test LLaMA (random weights) with both 4-bit
// formats and checks: the file reloads with its packed weights as views of
// the external data, shape inference classifies every MatMulQ as a device
// op and derives the logits' shape, OpenCL (fp32 and fp16 storage) and the
// pure-Go backend agree with the dequantized float model run through the
// ordinary MatMul path, and the logits stay close to PyTorch's.
func TestQuantLlama(t *testing.T) {
	src := filepath.Join(modelsDir, "llama", "model.onnx")
	cases := loadCases(t, "llama")
	for _, f := range []quant.Format{quant.E0M4, quant.Int4} {
		t.Run(f.String(), func(t *testing.T) {
			path, res := quantizeModel(t, src, qonnx.Options{Format: f, Group: 32})
			// q/o (64x64), k/v (64x32), gate/up (64x172) per layer and
			// lm_head; down_proj has K = 172, not a multiple of 32.
			if len(res.Weights) != 13 || len(res.Skipped) != 2 || res.Activations != 4 {
				t.Fatalf("%d weights converted, %d skipped, %d activation products; want 13, 2, 4 (skipped: %v)",
					len(res.Weights), len(res.Skipped), res.Activations, res.Skipped)
			}
			for _, s := range res.Skipped {
				if !strings.Contains(s.Node, "down_proj") || !strings.Contains(s.Reason, "group size 32") {
					t.Errorf("unexpected skip: %+v", s)
				}
			}
			if len(res.Embeddings) != 1 || res.Embeddings[0] != "embed_tokens.weight" {
				t.Errorf("embeddings kept float: %v, want [embed_tokens.weight]", res.Embeddings)
			}

			m, err := graph.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			ir, err := infer.Run(m, infer.Options{})
			if err != nil {
				m.Close()
				t.Fatalf("shape inference on the quantized model: %v", err)
			}
			nq := 0
			for _, n := range m.Graph.Nodes {
				if n.Domain == tlite.Domain && n.OpType == tlite.MatMulQ {
					nq++
					if ir.Class[n] != infer.Device {
						t.Errorf("node %s classified %v, want Device", n.Name, ir.Class[n])
					}
				}
				if n.OpType == "MatMul" && n.Inputs[1].IsInitializer() && !strings.Contains(n.Name, "down_proj") {
					t.Errorf("node %s still reads a float weight", n.Name)
				}
			}
			if got := symshape.FormatShape(m.Graph.Outputs[0].Shape); nq != 13 || got != "[batch, seq, 256]" {
				t.Errorf("%d MatMulQ nodes, logits %s; want 13 and [batch, seq, 256]", nq, got)
			}
			if m.Opset(tlite.Domain) != tlite.Version {
				t.Errorf("opset of %q: %d, want %d", tlite.Domain, m.Opset(tlite.Domain), tlite.Version)
			}
			m.Close()

			deq := dequantizedModel(t, src, path, res)
			for _, bc := range backends() {
				cos, got := runQuantCases(t, path, cases, bc.opts)
				_, want := runQuantCases(t, deq, cases, bc.opts)
				rel := maxRel(got, want)
				t.Logf("%s %-12s logits cosine vs PyTorch fp32: prefill %.5f decode %.5f; max rel diff vs dequantized float model %.2e",
					f, bc.name, cos[0], cos[1], rel)
				// In fp16 storage the dequantized float model's weights are
				// rounded to half at Open, while MatMulQ decodes exactly.
				limit := 1e-4
				if bc.fp16 {
					limit = 1e-2
				}
				if !(rel <= limit) {
					t.Errorf("%s: logits differ from the dequantized float model by %.3e of their scale (limit %.0e)", bc.name, rel, limit)
				}
				if c := minOf(cos); !(c >= 0.99) {
					t.Errorf("%s: logits cosine similarity %.5f < 0.99", bc.name, c)
				}
			}
		})
	}
}

// TestQuantDefault runs the trained default model quantized with the
// default group size (its K = 128 fits; the MLP's down projection, K = 344,
// stays float) and reports how close its logits stay to PyTorch's.
func TestQuantDefault(t *testing.T) {
	src := filepath.Join(modelsDir, "..", "default", "model.onnx")
	if !fileExists(src) {
		t.Skip("no default model at", src)
	}
	cases := loadCases(t, filepath.Join("..", "default"))
	for _, f := range []quant.Format{quant.E0M4, quant.Int4} {
		t.Run(f.String(), func(t *testing.T) {
			path, res := quantizeModel(t, src, qonnx.Options{Format: f, MinSize: qonnx.DefaultMinSize})
			if len(res.Weights) == 0 {
				t.Fatal("nothing quantized")
			}
			for _, bc := range []backendCase{backends()[0], backends()[1]} {
				cos, _ := runQuantCases(t, path, cases, bc.opts)
				t.Logf("%s %-12s %d weights: logits cosine vs PyTorch fp32: prefill %.5f decode %.5f", f, bc.name, len(res.Weights), cos[0], cos[1])
				if c := minOf(cos); !(c >= 0.99) {
					t.Errorf("%s: logits cosine similarity %.5f < 0.99", bc.name, c)
				}
			}
		})
	}
}

// TestQuantFP16Weights converts the test LLaMA's weights to float16
// initializers and runs the model in FP32 and FP16 sessions on OpenCL and
// in the pure-Go backend (which widens them to float32 at Open).
func TestQuantFP16Weights(t *testing.T) {
	src := filepath.Join(modelsDir, "llama", "model.onnx")
	cases := loadCases(t, "llama")
	path, res := quantizeModel(t, src, qonnx.Options{Format: quant.FP16, MinSize: qonnx.DefaultMinSize})
	// Everything but k_proj and v_proj (64x32 = 2048 < 4096).
	if len(res.Weights) != 11 {
		t.Fatalf("%d weights converted, want 11: %+v", len(res.Weights), res.Weights)
	}
	m, err := graph.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Weights {
		if v := m.Graph.Value(w.Name); v == nil || v.Const == nil || v.Const.Type != dtype.Float16 {
			t.Errorf("weight %s is not a float16 initializer in the written model", w.Name)
		}
	}
	m.Close()
	for _, bc := range backends() {
		cos, _ := runQuantCases(t, path, cases, bc.opts)
		t.Logf("fp16 weights %-12s logits cosine vs PyTorch fp32: prefill %.6f decode %.6f", bc.name, cos[0], cos[1])
		if c := minOf(cos); !(c >= 0.999) {
			t.Errorf("%s: logits cosine similarity %.6f < 0.999", bc.name, c)
		}
	}
}

// TestQuantMismatch checks that Open refuses a MatMulQ whose attributes
// disagree with its packed weight's header (shapes were derived from the
// attributes), naming the node.
func TestQuantMismatch(t *testing.T) {
	src := filepath.Join(modelsDir, "llama", "model.onnx")
	path, _ := quantizeModel(t, src, qonnx.Options{Format: quant.E0M4, Group: 32, MinSize: 8192})
	m, err := graph.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var target *graph.Node
	for _, n := range m.Graph.Nodes {
		if n.OpType == tlite.MatMulQ {
			target = n
			break
		}
	}
	if target == nil {
		t.Fatal("no MatMulQ node")
	}
	target.SetAttr(&graph.Attr{Name: "format", Kind: graph.KindString, S: "int4"})
	_, err = OpenModel(m, Options{Device: "go", Max: testMax})
	if err == nil || !strings.Contains(err.Error(), target.Name) || !strings.Contains(err.Error(), "header says e0m4") {
		t.Fatalf("Open with a mismatched format attribute: %v; want an error naming %s and the header's format", err, target.Name)
	}
}

// TestQuantMatMulQBias checks the bias input and a rank-3 A on both
// backends against a product computed here from the dequantized weight.
func TestQuantMatMulQBias(t *testing.T) {
	const k, n, group = 64, 40, 32
	w := make([]float32, k*n)
	bias := make([]float32, n)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)*0.37)) * 0.1
	}
	for i := range bias {
		bias[i] = float32(i) * 0.01
	}
	m := buildLinear(t, w, bias, k, n)
	res, err := qonnx.Quantize(m, qonnx.Options{Format: quant.E0M4, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Weights) != 1 || len(m.Graph.Nodes) != 1 || m.Graph.Nodes[0].OpType != tlite.MatMulQ || len(m.Graph.Nodes[0].Inputs) != 3 {
		t.Fatalf("want one MatMulQ with the Add's bias folded in; nodes %v, result %+v", m.Graph.Nodes, res)
	}
	path := filepath.Join(t.TempDir(), "linear.onnx")
	if err := graph.Write(m, path, graph.WriteOptions{ExternalThreshold: 64, Align: 64}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	p, err := quant.Quantize(w, k, n, quant.Options{Format: quant.E0M4, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	dq := quant.Dequantize(p)
	const b0, b1 = 2, 3
	x := make([]float32, b0*b1*k)
	for i := range x {
		x[i] = float32(math.Cos(float64(i) * 0.11))
	}
	want := make([]float32, b0*b1*n)
	for r := 0; r < b0*b1; r++ {
		for j := 0; j < n; j++ {
			acc := float64(bias[j])
			for kk := 0; kk < k; kk++ {
				acc += float64(x[r*k+kk]) * float64(dq[kk*n+j])
			}
			want[r*n+j] = float32(acc)
		}
	}
	in := tensor.New(tensor.WithShape(b0, b1, k), tensor.WithBacking(x))
	for _, bc := range backends() {
		s, err := Open(path, bc.opts)
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.Run(map[string]*tensor.Dense{"x": in})
		s.Close()
		if err != nil {
			t.Fatalf("%s: %v", bc.name, err)
		}
		y := out["y"]
		if !sameShape(y.Shape(), tensor.Shape{b0, b1, n}) {
			t.Fatalf("%s: y has shape %v, want [%d %d %d]", bc.name, y.Shape(), b0, b1, n)
		}
		rel, _, worst := compare(floats(t, y), want)
		limit := 1e-5
		if bc.fp16 {
			limit = 2e-3
		}
		if !(rel <= limit) {
			t.Errorf("%s: max error %.3e of the scale at %d (got %v, want %v)", bc.name, rel, worst, floats(t, y)[worst], want[worst])
		}
	}
}

// buildLinear makes y = x @ w + bias with x [a, b, k] (symbolic a, b), the
// MatMul-then-Add pattern torch exports for a Linear with a bias.
func buildLinear(t *testing.T, w, bias []float32, k, n int) *graph.Model {
	t.Helper()
	g := graphPB("linear",
		[]pb{nodePB("MatMul", "linear/MatMul", []string{"x", "w"}, []string{"xw"}), nodePB("Add", "linear/Add", []string{"xw", "b"}, []string{"y"})},
		[]pb{tensorPB("w", dtype.Float32, []int64{int64(k), int64(n)}, f32Raw(w...)), tensorPB("b", dtype.Float32, []int64{int64(n)}, f32Raw(bias...))},
		[]pb{tvi("x", dtype.Float32, "a", "b", k)},
		[]pb{tvi("y", dtype.Float32, "a", "b", n)})
	m, err := graph.Parse(modelPB(17, g), "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// BenchmarkQuantDecode times one decode step (the reference decode case) of
// the default model, or the test LLaMA when it is absent, with float32
// weights and with each 4-bit format, on the OpenCL device in fp32 storage.
func BenchmarkQuantDecode(b *testing.B) {
	dir, group := filepath.Join("..", "default"), 0
	if !fileExists(filepath.Join(modelsDir, dir, "model.onnx")) {
		dir, group = "llama", 32
	}
	src := filepath.Join(modelsDir, dir, "model.onnx")
	var decode *refCase
	cases := loadCases(b, dir)
	for i := range cases {
		if cases[i].name == "decode" {
			decode = &cases[i]
		}
	}
	if decode == nil {
		b.Fatal("no decode case")
	}
	// Format 0 is no quantization: the float32 model as exported.
	for _, f := range []quant.Format{0, quant.E0M4, quant.Int4} {
		name := f.String()
		if f == 0 {
			name = "fp32"
		}
		b.Run(name, func(b *testing.B) {
			path := src
			if f != 0 {
				m, err := graph.Load(src)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := qonnx.Quantize(m, qonnx.Options{Format: f, Group: group, MinSize: qonnx.DefaultMinSize}); err != nil {
					b.Fatal(err)
				}
				path = filepath.Join(b.TempDir(), "model.onnx")
				if err := graph.Write(m, path, graph.WriteOptions{ExternalThreshold: 1024, Align: 4096}); err != nil {
					b.Fatal(err)
				}
				m.Close()
			}
			s, err := Open(path, Options{Kernels: testLib, Max: testMax})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Run(decode.inputs); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.Run(decode.inputs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
