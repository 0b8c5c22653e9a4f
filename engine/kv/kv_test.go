package kv

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
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// testLib is the OpenCL kernel library every test session shares.
var testLib *kernels.Lib

func TestMain(m *testing.M) {
	// PoCL otherwise compiles each kernel again for every local size.
	if os.Getenv("POCL_WORK_GROUP_SPECIALIZATION") == "" {
		os.Setenv("POCL_WORK_GROUP_SPECIALIZATION", "0")
	}
	dev, err := opencl.Open(opencl.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kv tests need an OpenCL device (install pocl-opencl-icd):", err)
		os.Exit(1)
	}
	testLib = kernels.New(dev)
	code := m.Run()
	dev.Close()
	os.Exit(code)
}

const modelsDir = "../../testdata/models"

var models = []string{"llama", "gpt2"}

func modelPath(name string) string { return filepath.Join(modelsDir, name, "model.onnx") }

func openState(t testing.TB, model string, cfg Config) *State {
	t.Helper()
	st, err := Open(modelPath(model), engine.Options{Kernels: testLib}, cfg)
	if err != nil {
		t.Fatalf("%s: %v", model, err)
	}
	t.Cleanup(func() { st.Session().Close() })
	return st
}

// relErr is the max abs difference relative to the scale of want.
func relErr(got, want []float32) float64 {
	var e, scale float64
	for i := range want {
		e = math.Max(e, math.Abs(float64(got[i]-want[i])))
		scale = math.Max(scale, math.Abs(float64(want[i])))
	}
	return e / math.Max(scale, 1)
}

func seq(lo, hi int) []int {
	out := make([]int, 0, hi-lo)
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// TestChunksShuffled writes tokens 0..9 in order in one forward, and again
// as two chunks (positions 0..4, then 5..9), each chunk's tokens in a
// shuffled order and in scattered slots that are not their positions:
// every token's logits and the next token's must be the same.
func TestChunksShuffled(t *testing.T) {
	toks := []int{3, 141, 59, 26, 53, 58, 97, 93, 238, 46}
	for _, model := range models {
		t.Run(model, func(t *testing.T) {
			st := openState(t, model, Config{MaxContext: 40, Pad: 8})
			v := st.Vocab()
			inOrder, err := st.Forward(toks, seq(0, 10), seq(0, 10))
			if err != nil {
				t.Fatal(err)
			}
			nextA, err := st.Forward([]int{77}, []int{10}, []int{10})
			if err != nil {
				t.Fatal(err)
			}
			st.Reset()
			chunks := []struct{ order, slots []int }{
				{[]int{3, 0, 4, 1, 2}, []int{33, 5, 20, 11, 2}},
				{[]int{8, 5, 9, 7, 6}, []int{0, 38, 17, 9, 26}},
			}
			for _, c := range chunks {
				tk := make([]int, len(c.order))
				for i, p := range c.order {
					tk[i] = toks[p]
				}
				got, err := st.Forward(tk, c.order, c.slots)
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range c.order {
					if e := relErr(got[i*v:(i+1)*v], inOrder[p*v:(p+1)*v]); !(e <= 1e-5) {
						t.Errorf("token at position %d (slot %d): logits differ by %.3e of the scale from the in-order run", p, c.slots[i], e)
					}
				}
			}
			if st.Len() != 10 {
				t.Errorf("Len %d after 10 tokens", st.Len())
			}
			nextB, err := st.Forward([]int{77}, []int{10}, []int{13})
			if err != nil {
				t.Fatal(err)
			}
			if e := relErr(nextB, nextA); !(e <= 1e-5) {
				t.Errorf("next token: logits differ by %.3e of the scale", e)
			}
		})
	}
}

// TestStateBookkeeping checks Len, Reset, Free, Position, the padded
// attended length, and that refused forwards change nothing.
func TestStateBookkeeping(t *testing.T) {
	st := openState(t, "llama", Config{MaxContext: 20, Pad: 8})
	if st.MaxContext() != 20 || st.Vocab() != 256 || st.Len() != 0 {
		t.Fatalf("MaxContext %d, Vocab %d, Len %d", st.MaxContext(), st.Vocab(), st.Len())
	}
	if _, err := st.Forward([]int{1, 2, 3, 4, 5}, seq(0, 5), seq(0, 5)); err != nil {
		t.Fatal(err)
	}
	if st.Len() != 5 || st.AttendedLen() != 8 {
		t.Errorf("after 5 tokens: Len %d, attended %d; want 5, 8", st.Len(), st.AttendedLen())
	}
	lens := []int{}
	for p := 5; p < 20; p++ {
		if _, err := st.Forward([]int{p}, []int{p}, []int{p}); err != nil {
			t.Fatal(err)
		}
		lens = append(lens, st.AttendedLen())
	}
	// Rounded up to 8, capped at the 20 slots.
	want := "[8 8 8 16 16 16 16 16 16 16 16 20 20 20 20]"
	if fmt.Sprint(lens) != want {
		t.Errorf("attended lengths %v; want %s", lens, want)
	}
	if p, ok := st.Position(7); !ok || p != 7 {
		t.Errorf("slot 7 holds %d, %v", p, ok)
	}
	bad := []struct {
		name             string
		toks, pos, slots []int
		want             string
	}{
		{"no tokens", nil, nil, nil, "no tokens"},
		{"lengths", []int{1, 2}, []int{0}, []int{0, 1}, "positions"},
		{"slot beyond", []int{1}, []int{3}, []int{20}, "outside the cache"},
		{"negative slot", []int{1}, []int{3}, []int{-1}, "outside the cache"},
		{"same slot", []int{1, 2}, []int{3, 4}, []int{6, 6}, "both go to slot 6"},
		{"token", []int{256}, []int{3}, []int{3}, "vocabulary"},
		{"position", []int{1}, []int{-2}, []int{3}, "position -2"},
	}
	for _, b := range bad {
		if _, err := st.Forward(b.toks, b.pos, b.slots); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v; want an error about %q", b.name, err, b.want)
		}
		if st.Len() != 20 {
			t.Errorf("%s: Len %d after a refused forward", b.name, st.Len())
		}
	}
	if _, err := st.Forward([]int{1}, []int{3}, []int{20}); !errors.Is(err, engine.ErrContextFull) {
		t.Errorf("slot beyond the cache: %v does not wrap engine.ErrContextFull", err)
	}
	if err := st.Free(3, 4, 4); err != nil {
		t.Fatal(err)
	}
	if st.Len() != 18 {
		t.Errorf("Len %d after freeing 2 of 20", st.Len())
	}
	if _, ok := st.Position(4); ok {
		t.Error("slot 4 still holds a position after Free")
	}
	if err := st.Free(20); err == nil {
		t.Error("Free(20) of 20 slots succeeded")
	}
	st.Reset()
	if st.Len() != 0 {
		t.Errorf("Len %d after Reset", st.Len())
	}
	if _, err := New(openPlain(t, "llama")); err == nil {
		t.Error("New over a session without a cache succeeded")
	}
}

// TestFreeMasks checks that a freed slot is no longer attended: freeing
// the last token's slot and writing another token at its position (in
// another slot) gives the logits of the sequence without the freed token.
// (Freeing an earlier token would not: the later tokens' keys and values
// were computed with it.)
func TestFreeMasks(t *testing.T) {
	st := openState(t, "gpt2", Config{MaxContext: 16, Pad: 4})
	if _, err := st.Forward([]int{10, 20, 30, 40}, seq(0, 4), seq(0, 4)); err != nil {
		t.Fatal(err)
	}
	if err := st.Free(3); err != nil {
		t.Fatal(err)
	}
	a, err := st.Forward([]int{50}, []int{3}, []int{9})
	if err != nil {
		t.Fatal(err)
	}
	st.Reset()
	if _, err := st.Forward([]int{10, 20, 30}, seq(0, 3), seq(0, 3)); err != nil {
		t.Fatal(err)
	}
	b, err := st.Forward([]int{50}, []int{3}, []int{3})
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr(a, b); !(e <= 1e-5) {
		t.Errorf("after Free: logits differ by %.3e of the scale from the sequence without the token", e)
	}
	// Without the Free, the same step attends token 40 too.
	st.Reset()
	if _, err := st.Forward([]int{10, 20, 30, 40}, seq(0, 4), seq(0, 4)); err != nil {
		t.Fatal(err)
	}
	c, err := st.Forward([]int{50}, []int{3}, []int{9})
	if err != nil {
		t.Fatal(err)
	}
	if e := relErr(c, b); e <= 1e-5 {
		t.Errorf("a filled slot at the same position made no difference (%.3e): the mask is not doing anything", e)
	}
}

func openPlain(t testing.TB, model string) *engine.Session {
	t.Helper()
	s, err := engine.Open(modelPath(model), engine.Options{Kernels: testLib, Max: map[string]int64{"batch": 1, "seq": 64, "past": 64}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// generator is engine/generate's Stepper interface, spelled out here (kv
// must not import generate, which builds on it).
type generator interface {
	Step(tokens []int, positions []int) ([]float32, error)
	Reset() error
	MaxContext() int
	Vocab() int
}

var _ generator = (*Stepper)(nil)

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// TestStepperGreedy generates 16 tokens greedily with the stepper and with
// the explicit model (past in, present out): same ids, same logits.
func TestStepperGreedy(t *testing.T) {
	for _, model := range models {
		t.Run(model, func(t *testing.T) {
			st := openState(t, model, Config{MaxContext: 32, Pad: 8})
			p := &Stepper{st: st, LastOnly: true}
			e := newExplicit(t, openPlain(t, model))
			prompt := []int{11, 200, 42, 7, 133, 90}
			a, err := p.Step(prompt, seq(0, len(prompt)))
			if err != nil {
				t.Fatal(err)
			}
			if len(a) != p.Vocab() {
				t.Fatalf("LastOnly step returned %d logits, want %d", len(a), p.Vocab())
			}
			b, err := e.step(prompt)
			if err != nil {
				t.Fatal(err)
			}
			b = b[len(b)-p.Vocab():]
			var got, want []int
			for i := 0; i < 16; i++ {
				if e := relErr(a, b); !(e <= 1e-4) {
					t.Errorf("step %d: logits differ by %.3e of the scale", i, e)
				}
				got, want = append(got, argmax(a)), append(want, argmax(b))
				pos := len(prompt) + i
				if a, err = p.Step([]int{got[i]}, []int{pos}); err != nil {
					t.Fatal(err)
				}
				if b, err = e.step([]int{want[i]}); err != nil {
					t.Fatal(err)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("stepper generated %v, explicit %v", got, want)
			}
			if _, err := p.Step([]int{1}, []int{32}); !errors.Is(err, engine.ErrContextFull) {
				t.Errorf("position 32 of 32: %v", err)
			}
			if err := p.Reset(); err != nil || st.Len() != 0 {
				t.Errorf("Reset: %v, Len %d", err, st.Len())
			}
		})
	}
}

// explicit runs an exported decoder as exported, batch 1: each step feeds
// the last step's present outputs back as past inputs.
type explicit struct {
	t    testing.TB
	s    *engine.Session
	n    int
	past map[string]*tensor.Dense
	ins  map[string]bool
}

func newExplicit(t testing.TB, s *engine.Session) *explicit {
	e := &explicit{t: t, s: s, past: map[string]*tensor.Dense{}, ins: map[string]bool{}}
	for _, p := range s.Inputs() {
		e.ins[p.Name] = true
		if !strings.HasPrefix(p.Name, "past_key_values") {
			continue
		}
		dims := make([]int, len(p.Shape))
		for i, d := range p.Shape {
			if k, ok := d.Const(); ok {
				dims[i] = int(k)
			} else if name, _ := d.SymName(); strings.Contains(name, "batch") {
				dims[i] = 1
			}
		}
		e.past[p.Name] = tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(dims...))
	}
	return e
}

// step appends tokens at the next positions and returns their logits.
func (e *explicit) step(tokens []int) ([]float32, error) {
	n := len(tokens)
	ids, pos, mask := make([]int64, n), make([]int64, n), make([]int64, e.n+n)
	for i, tok := range tokens {
		ids[i], pos[i] = int64(tok), int64(e.n+i)
	}
	for i := range mask {
		mask[i] = 1
	}
	in := map[string]*tensor.Dense{"input_ids": tensor.New(tensor.WithShape(1, n), tensor.WithBacking(ids))}
	if e.ins["position_ids"] {
		in["position_ids"] = tensor.New(tensor.WithShape(1, n), tensor.WithBacking(pos))
	}
	if e.ins["attention_mask"] {
		in["attention_mask"] = tensor.New(tensor.WithShape(1, e.n+n), tensor.WithBacking(mask))
	}
	for name, d := range e.past {
		in[name] = d
	}
	out, err := e.s.Run(in)
	if err != nil {
		return nil, err
	}
	for name := range e.past {
		e.past[name] = out[strings.Replace(name, "past_key_values", "present", 1)]
	}
	e.n += n
	return out["logits"].Data().([]float32), nil
}
