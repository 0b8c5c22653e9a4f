package generate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/kv"
)

// The decoder test bed (models/export/hf_*.py): decoders exported the way
// Hugging Face modeling code is written, each with PyTorch's 32 greedy
// tokens (reference.json).
type testBedRef struct {
	PromptIDs []int `json:"prompt_ids"`
	GreedyIDs []int `json:"greedy_ids"`
}

func readTestBed(t *testing.T, name string) (string, testBedRef) {
	t.Helper()
	dir := filepath.Join(modelsDir, name)
	var ref testBedRef
	raw, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.PromptIDs) == 0 || len(ref.GreedyIDs) != 32 {
		t.Fatalf("%s/reference.json: %d prompt ids, %d greedy ids; want a prompt and 32", name, len(ref.PromptIDs), len(ref.GreedyIDs))
	}
	return filepath.Join(dir, "model.onnx"), ref
}

// testBedInPlace are the families the in-place cache serves; each asks
// the rewrite for something our own recipes do not: Shape reads of the
// cache and repeat_kv by expand (LLaMA), QKV biases and one KV head
// (Qwen2), K transposed before the scores and positions from the past
// length (GPT-2), baddbmm-shaped scores and partial rotary read by
// GatherElements from a table cut to past+seq (GPT-NeoX), one combined
// key_value cache per layer read by multi-query attention with the query
// heads folded into the rows (GPTBigCode).
var testBedInPlace = []string{"hf_llama", "hf_qwen2", "hf_gpt2", "hf_neox", "hf_bigcode_mqa"}

// testBedCtx is the context the test sessions are opened for.
const testBedCtx = 64

// greedySteps runs the prompt and then one token per step, feeding back the
// argmax, and returns the 32 tokens. after, when set, is called after every
// decode step but the first (the first run at seq 1 may still set
// things up), before before it.
func greedySteps(t *testing.T, st Stepper, ref testBedRef, before, after func(step int)) []int {
	t.Helper()
	if err := st.Reset(); err != nil {
		t.Fatal(err)
	}
	pos := make([]int, len(ref.PromptIDs))
	for i := range pos {
		pos[i] = i
	}
	logits, err := st.Step(ref.PromptIDs, pos)
	if err != nil {
		t.Fatal(err)
	}
	v := st.Vocab()
	next := argmaxF(logits[len(logits)-v:])
	out := []int{next}
	for i := 1; i < len(ref.GreedyIDs); i++ {
		p := len(ref.PromptIDs) + i - 1
		if before != nil && i > 1 {
			before(i)
		}
		logits, err := st.Step([]int{next}, []int{p})
		if err != nil {
			t.Fatalf("decode step %d: %v", i, err)
		}
		if after != nil && i > 1 {
			after(i)
		}
		next = argmaxF(logits[len(logits)-v:])
		out = append(out, next)
	}
	return out
}

func argmaxF(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

func sameTokens(t *testing.T, what string, got, want []int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tokens, PyTorch gives %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: token %d is %d, PyTorch gives %d\n tlite:   %v\n PyTorch: %v", what, i, got[i], want[i], got, want)
		}
	}
}

// TestTestBedInPlace: every family of the test bed that the in-place cache
// serves opens in place by default (Open), reproduces PyTorch's 32 greedy
// tokens there and with the cache fed back as exported, and its decode
// steps copy no cache bytes: no copy step reads the cache, the device
// copies nothing and allocates nothing, and the cache writes write one row
// per cache tensor.
func TestTestBedInPlace(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dev := testLib.Device()
	for _, name := range testBedInPlace {
		t.Run(name, func(t *testing.T) {
			path, ref := readTestBed(t, name)
			d, err := Open(path, engine.Options{Kernels: testLib}, testBedCtx, Config{LastOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if d.Mode != KVInPlace || d.Fallback != "" {
				t.Fatalf("Open runs %s in mode %q (%s); want %q", name, d.Mode, d.Fallback, KVInPlace)
			}
			info, ok := d.Session().KVInfo()
			if !ok || len(info.Layers) == 0 {
				t.Fatalf("the session reports no in-place cache (%v, %d layers)", ok, len(info.Layers))
			}
			if _, isKV := d.Stepper.(*kv.Stepper); !isKV {
				t.Fatalf("the in-place decoder steps with %T", d.Stepper)
			}
			var row int64
			for _, l := range info.Layers {
				row += int64(l.KVHeads * l.HeadDim * 4)
			}
			var stats0 struct{ copied, allocs int64 }
			before := func(int) {
				s := dev.Stats()
				stats0.copied, stats0.allocs = s.BytesCopied, s.Allocs
			}
			after := func(step int) {
				s := dev.Stats()
				if dc := s.BytesCopied - stats0.copied; dc != 0 {
					t.Errorf("decode step %d: %d bytes copied on the device", step, dc)
				}
				if da := s.Allocs - stats0.allocs; da != 0 {
					t.Errorf("decode step %d: %d device allocations", step, da)
				}
				cs := d.Session().LastRunCopies()
				if cs.KVSteps != 0 || cs.KVBytes != 0 {
					t.Errorf("decode step %d: %d copy steps moved %d bytes of cache", step, cs.KVSteps, cs.KVBytes)
				}
				if cs.KVWritten != row {
					t.Errorf("decode step %d: the cache writes wrote %d bytes; one row per cache tensor is %d", step, cs.KVWritten, row)
				}
			}
			sameTokens(t, "in place", greedySteps(t, d, ref, before, after), ref.GreedyIDs)

			e, err := OpenExplicit(path, engine.Options{Kernels: testLib}, testBedCtx, Config{LastOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			sameTokens(t, "explicit", greedySteps(t, e, ref, nil, nil), ref.GreedyIDs)
			// Explicitly, the Concats copy the whole cache every step,
			// which the counter sees: the in-place zero is not a blind
			// counter.
			if cs := e.Session().LastRunCopies(); cs.KVBytes == 0 {
				t.Errorf("explicit decode: the counter saw no cache bytes copied")
			}
		})
	}
}

// TestTestBedFallback: a decoder whose cache the rewrite cannot serve
// (hf_gqa_interleave: PyTorch 1.13 exports repeat_interleave of the cache
// as a Split with the traced sizes baked in) still opens by default, with
// its cache fed back as exported and the reason, naming the node, said.
// (Its tokens cannot match PyTorch's in either mode: the export is wrong.)
func TestTestBedFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	path := filepath.Join(modelsDir, "hf_gqa_interleave", "model.onnx")
	_, err := engine.Open(path, engine.Options{Kernels: testLib, Max: map[string]int64{"seq": testBedCtx, "past": testBedCtx, "total": testBedCtx, "batch": 1},
		KVCache: &engine.KVConfig{MaxContext: testBedCtx}})
	var kerr *engine.KVCacheError
	if !errors.As(err, &kerr) {
		t.Fatalf("engine.Open with KVCache: %v; want a *engine.KVCacheError", err)
	}
	d, err := Open(path, engine.Options{Kernels: testLib}, testBedCtx, Config{LastOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const node = `"/layers.0/self_attn/Split_1" (Split)`
	if d.Mode != KVExplicit || !strings.Contains(d.Fallback, node) {
		t.Fatalf("mode %q, fallback %q; want %q and the node %s", d.Mode, d.Fallback, KVExplicit, node)
	}
	if _, ok := d.Session().KVInfo(); ok {
		t.Fatal("the fallback session reports an in-place cache")
	}
	if _, ok := d.Stepper.(*Explicit); !ok {
		t.Fatalf("the fallback steps with %T", d.Stepper)
	}
}

// TestTestBedBloom: hf_bloom (ALiBi, the key cache stored transposed as
// [batch * heads, head_dim, past] beside [batch * heads, past, head_dim]
// values) reproduces PyTorch's 32 greedy tokens with its cache fed back as
// exported, on both devices; the default Open, which the in-place rewrite
// cannot serve (rank-3 caches that are not one combined key_value), falls
// back to it and says why.
func TestTestBedBloom(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	path, ref := readTestBed(t, "hf_bloom")
	for _, dev := range []string{"opencl", "go"} {
		t.Run(dev, func(t *testing.T) {
			opts := engine.Options{Kernels: testLib}
			if dev == "go" {
				opts = engine.Options{Device: "go"}
			}
			d, err := Open(path, opts, testBedCtx, Config{LastOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if d.Mode != KVExplicit || !strings.Contains(d.Fallback, "present.0.") {
				t.Fatalf("mode %q, fallback %q; want %q naming the cache tensor", d.Mode, d.Fallback, KVExplicit)
			}
			sameTokens(t, "explicit", greedySteps(t, d, ref, nil, nil), ref.GreedyIDs)
		})
	}
}
