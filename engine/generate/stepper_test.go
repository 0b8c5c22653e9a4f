package generate

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// testLib is the OpenCL kernel library every test session shares, so that
// each program compiles once per test binary.
var testLib *kernels.Lib

func TestMain(m *testing.M) {
	dev, err := opencl.Open(opencl.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate tests need an OpenCL device (install pocl-opencl-icd):", err)
		os.Exit(1)
	}
	testLib = kernels.New(dev)
	code := m.Run()
	dev.Close()
	os.Exit(code)
}

const modelsDir = "../../testdata/models"

// openTest opens a test model on OpenCL (or the pure-Go backend) with the
// plan sized for ctx tokens and at most seq per step.
func openTest(t *testing.T, path string, ctx, seq int, goBackend bool, cfg Config) *Explicit {
	t.Helper()
	opts := engine.Options{Kernels: testLib, Max: map[string]int64{"seq": int64(seq)}}
	if goBackend {
		opts = engine.Options{Device: "go", Max: opts.Max}
	}
	st, err := OpenExplicit(path, opts, ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// row0 reads a reference .npy and returns the first batch row's values.
func row0[T int64 | float32](t *testing.T, path string) []T {
	t.Helper()
	d, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := d.Data().([]T)
	if !ok {
		t.Fatalf("%s holds %v, not the expected type", path, d.Dtype())
	}
	return v[:len(v)/d.Shape()[0]]
}

func ints(v []int64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

func count(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// maxRelErr is the largest absolute difference relative to the
// reference's largest magnitude (at least 1).
func maxRelErr(got, want []float32) float64 {
	var m, e float64
	for i := range want {
		m = math.Max(m, math.Abs(float64(want[i])))
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		e = math.Max(e, d)
	}
	return e / math.Max(1, m)
}

// TestStepMatchesReference feeds the first batch row of each decoder's
// PyTorch prefill and decode cases through Step and compares the logits.
// The decode case's past is the prefill's present, so the decode logits
// check the KV the stepper carried over.
func TestStepMatchesReference(t *testing.T) {
	for _, model := range []string{"llama", "gpt2"} {
		for _, goBackend := range []bool{false, true} {
			name := model + "/opencl"
			if goBackend {
				name = model + "/go"
			}
			t.Run(name, func(t *testing.T) {
				dir := filepath.Join(modelsDir, model)
				st := openTest(t, filepath.Join(dir, "model.onnx"), 32, 32, goBackend, Config{})
				for _, c := range []string{"prefill", "decode"} {
					cd := filepath.Join(dir, "ref", c)
					ids := ints(row0[int64](t, filepath.Join(cd, "input.input_ids.npy")))
					pos := count(st.Len(), len(ids))
					if _, err := os.Stat(filepath.Join(cd, "input.position_ids.npy")); err == nil {
						pos = ints(row0[int64](t, filepath.Join(cd, "input.position_ids.npy")))
					}
					want := row0[float32](t, filepath.Join(cd, "output.logits.npy"))
					got, err := st.Step(ids, pos)
					if err != nil {
						t.Fatalf("%s: %v", c, err)
					}
					if len(got) != len(want) {
						t.Fatalf("%s: %d logits, want %d", c, len(got), len(want))
					}
					if e := maxRelErr(got, want); !(e <= 1e-4) {
						t.Errorf("%s: logits differ from PyTorch by %.3g of their scale", c, e)
					}
				}
				if st.Len() != 8 {
					t.Errorf("after prefill of 7 and one decode step the sequence holds %d tokens, want 8", st.Len())
				}
			})
		}
	}
}

// greedyNoCache generates n tokens by re-running the whole sequence from an
// empty cache every step: no KV is carried between steps.
func greedyNoCache(t *testing.T, st Stepper, prompt []int, n int) []int {
	t.Helper()
	seq := append([]int(nil), prompt...)
	var out []int
	s, _ := NewSampler(Sampling{})
	for range n {
		if err := st.Reset(); err != nil {
			t.Fatal(err)
		}
		logits, err := st.Step(seq, count(0, len(seq)))
		if err != nil {
			t.Fatal(err)
		}
		id := s.Sample(logits[len(logits)-st.Vocab():], seq)
		out = append(out, id)
		seq = append(seq, id)
	}
	return out
}

// greedyCached generates n tokens with a prefill and single-token steps.
func greedyCached(t *testing.T, st Stepper, prompt []int, n int) []int {
	t.Helper()
	if err := st.Reset(); err != nil {
		t.Fatal(err)
	}
	s, _ := NewSampler(Sampling{})
	seq := append([]int(nil), prompt...)
	logits, err := st.Step(prompt, count(0, len(prompt)))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for i := 0; i < n; i++ {
		id := s.Sample(logits[len(logits)-st.Vocab():], seq)
		out = append(out, id)
		seq = append(seq, id)
		if i+1 < n {
			if logits, err = st.Step([]int{id}, []int{len(seq) - 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// TestCachedEqualsUncached: 16 greedy tokens through the explicit KV cache
// equal 16 tokens computed by full re-runs without a cache.
func TestCachedEqualsUncached(t *testing.T) {
	for _, model := range []string{"llama", "gpt2"} {
		t.Run(model, func(t *testing.T) {
			st := openTest(t, filepath.Join(modelsDir, model, "model.onnx"), 32, 32, false, Config{})
			prompt := []int{5, 77, 200, 13, 42}
			a := greedyCached(t, st, prompt, 16)
			b := greedyNoCache(t, st, prompt, 16)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("greedy with KV cache %v\n  without cache %v", a, b)
			}
			distinct := map[int]bool{}
			for _, id := range a {
				distinct[id] = true
			}
			t.Logf("%v (%d distinct)", a, len(distinct))
		})
	}
}

// TestChunkedPrefill: a prompt longer than the plan's maximum step length
// runs in pieces, with the same logits as one piece.
func TestChunkedPrefill(t *testing.T) {
	path := filepath.Join(modelsDir, "llama", "model.onnx")
	whole := openTest(t, path, 16, 16, false, Config{})
	pieces := openTest(t, path, 16, 3, false, Config{})
	prompt := []int{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}
	a, err := whole.Step(prompt, count(0, len(prompt)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := pieces.Step(prompt, count(0, len(prompt)))
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("%d logits in pieces, %d whole", len(b), len(a))
	}
	if e := maxRelErr(b, a); !(e <= 1e-5) {
		t.Errorf("chunked prefill differs from one step by %.3g", e)
	}
	last := openTest(t, path, 16, 3, false, Config{LastOnly: true})
	c, err := last.Step(prompt, count(0, len(prompt)))
	if err != nil {
		t.Fatal(err)
	}
	if len(c) != last.Vocab() || maxRelErr(c, a[len(a)-last.Vocab():]) > 1e-5 {
		t.Errorf("LastOnly returned %d values that are not the last row", len(c))
	}
}

// TestStepErrors: bad calls fail with context and leave the sequence as it
// was.
func TestStepErrors(t *testing.T) {
	st := openTest(t, filepath.Join(modelsDir, "llama", "model.onnx"), 8, 8, false, Config{})
	if st.MaxContext() != 8 || st.Vocab() != 256 {
		t.Fatalf("MaxContext %d, Vocab %d; want 8 and 256", st.MaxContext(), st.Vocab())
	}
	if _, err := st.Step([]int{1, 2, 3, 4, 5, 6}, count(0, 6)); err != nil {
		t.Fatal(err)
	}
	_, err := st.Step([]int{1, 2, 3}, count(6, 3))
	if !errors.Is(err, engine.ErrContextFull) {
		t.Errorf("9 tokens in a context of 8: err = %v, want engine.ErrContextFull", err)
	}
	if _, err := st.Step([]int{300}, []int{6}); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Errorf("token 300 of a 256-token vocabulary: err = %v", err)
	}
	if _, err := st.Step([]int{1}, nil); err == nil {
		t.Error("Step with no positions succeeded")
	}
	if st.Len() != 6 {
		t.Errorf("after failed steps the sequence holds %d tokens, want 6", st.Len())
	}
	if _, err := st.Step([]int{1, 2}, count(6, 2)); err != nil {
		t.Errorf("the stepper is unusable after errors: %v", err)
	}

	g2 := openTest(t, filepath.Join(modelsDir, "gpt2", "model.onnx"), 8, 8, false, Config{})
	if _, err := g2.Step([]int{1, 2}, []int{3, 4}); err == nil || !strings.Contains(err.Error(), "position_ids") {
		t.Errorf("positions a GPT-2 graph cannot take: err = %v", err)
	}
}

// TestNewExplicitRejects: a model without a KV cache is refused, naming
// what is missing.
func TestNewExplicitRejects(t *testing.T) {
	s, err := engine.Open(filepath.Join(modelsDir, "bert", "model.onnx"), engine.Options{Kernels: testLib, Max: map[string]int64{"batch": 1, "seq": 8}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := NewExplicit(s, Config{}); err == nil || !strings.Contains(err.Error(), "token_type_ids") && !strings.Contains(err.Error(), "past_key_values") {
		t.Errorf("BERT as a decoder: err = %v", err)
	}
}

// TestEmptyPastTensor: the empty past tensors Reset builds have the past
// axis 0 and the model's other dims.
func TestEmptyPastTensor(t *testing.T) {
	st := openTest(t, filepath.Join(modelsDir, "gpt2", "model.onnx"), 8, 8, false, Config{})
	p := st.past["past_key_values.0"]
	if fmt.Sprint([]int(p.Shape())) != "[2 1 4 0 16]" || p.Dtype() != tensor.Float32 {
		t.Errorf("empty past %v %v, want float32 [2 1 4 0 16]", p.Dtype(), p.Shape())
	}
}
