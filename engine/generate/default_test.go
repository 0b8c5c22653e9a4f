package generate

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/engine/tokenizer"
)

// defaultDir holds the shipped default model and what PyTorch computed
// with it (models/train/export_default.py).
const defaultDir = "../../testdata/default"

// trainedDirs are the directories of models trained by models/train, each
// with the same reference data; the tests below check every one present.
var trainedDirs = []string{defaultDir, "../../testdata/longctx"}

// forEachTrained runs f as a subtest for each trained model present.
func forEachTrained(t *testing.T, f func(t *testing.T, dir string)) {
	forEachTrainedWith(t, "model.onnx", f)
}

// forEachTrainedWith runs f for each trained model whose directory holds
// file, and fails when none does.
func forEachTrainedWith(t *testing.T, file string, f func(t *testing.T, dir string)) {
	n := 0
	for _, dir := range trainedDirs {
		if _, err := os.Stat(filepath.Join(dir, file)); err != nil {
			continue
		}
		n++
		t.Run(filepath.Base(dir), func(t *testing.T) { f(t, dir) })
	}
	if n == 0 {
		t.Fatalf("no trained model with %s found", file)
	}
}

type defaultConfig struct {
	MaxContext int `json:"max_context"`
	BOS        int `json:"bos_token_id"`
	EOS        int `json:"eos_token_id"`
}

type defaultReference struct {
	Prompt     string `json:"prompt"`
	PromptIDs  []int  `json:"prompt_ids"`
	AddBOS     bool   `json:"add_bos"`
	GreedyIDs  []int  `json:"greedy_ids"`
	GreedyText string `json:"greedy_text"`
	LongIDs    []int  `json:"long_ids"`
}

type defaultPerplexity struct {
	Predicted   int     `json:"predicted_tokens"`
	Loss        float64 `json:"loss"`
	Perplexity  float64 `json:"perplexity"`
	PerDocument []struct {
		Tokens int     `json:"tokens"`
		NLL    float64 `json:"nll_sum"`
	} `json:"per_document"`
}

func readJSON(t testing.TB, name string, v any) { t.Helper(); readDirJSON(t, defaultDir, name, v) }

func readDirJSON(t testing.TB, dir, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// openDefault opens the default model (fp32 on OpenCL, or as opts says)
// with the plan sized for its trained context.
func openDefault(t testing.TB, opts engine.Options, cfg Config) (*Explicit, *tokenizer.Tokenizer, defaultConfig) {
	t.Helper()
	return openTrained(t, defaultDir, opts, cfg)
}

// openTrained opens the trained model in dir, as openDefault.
func openTrained(t testing.TB, defaultDir string, opts engine.Options, cfg Config) (*Explicit, *tokenizer.Tokenizer, defaultConfig) {
	t.Helper()
	var dc defaultConfig
	readDirJSON(t, defaultDir, "config.json", &dc)
	if opts.Kernels == nil && opts.Device == "" {
		opts.Kernels = testLib
	}
	st, err := OpenExplicit(filepath.Join(defaultDir, "model.onnx"), opts, dc.MaxContext, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tok, err := tokenizer.Load(filepath.Join(defaultDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if sp := tok.Special(); sp.BOS != dc.BOS || sp.EOS != dc.EOS {
		t.Fatalf("tokenizer BOS/EOS %d/%d, config.json says %d/%d", sp.BOS, sp.EOS, dc.BOS, dc.EOS)
	}
	return st, tok, dc
}

// TestDefaultGreedyMatchesPyTorch: 64 greedy tokens of the shipped model
// equal PyTorch's, token for token, and the streamed text is the
// tokenizer's decoding of them.
func TestDefaultGreedyMatchesPyTorch(t *testing.T) {
	forEachTrained(t, func(t *testing.T, defaultDir string) {
		st, tok, _ := openTrained(t, defaultDir, engine.Options{}, Config{LastOnly: true})
		var ref defaultReference
		readDirJSON(t, defaultDir, "reference.json", &ref)
		g := New(st, tok)
		req := Request{Prompt: ref.Prompt, NoBOS: !ref.AddBOS, MaxNewTokens: len(ref.GreedyIDs), IgnoreEOS: true, Special: true}
		prompt, err := g.Prompt(req)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(prompt) != fmt.Sprint(ref.PromptIDs) {
			t.Fatalf("prompt ids %v, PyTorch's %v", prompt, ref.PromptIDs)
		}
		var sb strings.Builder
		res, err := g.Generate(context.Background(), req, func(s string) error { sb.WriteString(s); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tokens) != len(ref.GreedyIDs) {
			t.Fatalf("generated %d tokens, want %d", len(res.Tokens), len(ref.GreedyIDs))
		}
		for i := range ref.GreedyIDs {
			if res.Tokens[i] != ref.GreedyIDs[i] {
				t.Fatalf("token %d is %d, PyTorch's is %d\n tlite:   %v\n PyTorch: %v", i, res.Tokens[i], ref.GreedyIDs[i], res.Tokens, ref.GreedyIDs)
			}
		}
		if dec := tok.Decode(res.Tokens); sb.String() != dec || res.Text != dec {
			t.Errorf("streamed %q, Decode gives %q", sb.String(), dec)
		}
		if res.Text != ref.GreedyText {
			t.Errorf("text %q, PyTorch's tokenizer decoded %q", res.Text, ref.GreedyText)
		}
		t.Logf("prefill %d tokens %.1f tok/s, decode %d steps %.1f tok/s, first token %v",
			res.PromptTokens, res.PrefillTokPerSec, res.DecodeSteps, res.DecodeTokPerSec, res.FirstTokenTime)
	})
}

// TestDefaultPromptLogits: the prefill logits of every prompt position
// equal PyTorch's.
func TestDefaultPromptLogits(t *testing.T) {
	forEachTrained(t, func(t *testing.T, defaultDir string) {
		st, _, _ := openTrained(t, defaultDir, engine.Options{}, Config{})
		var ref defaultReference
		readDirJSON(t, defaultDir, "reference.json", &ref)
		want, err := npy.ReadFile(filepath.Join(defaultDir, "prompt_logits.npy"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.Step(ref.PromptIDs, count(0, len(ref.PromptIDs)))
		if err != nil {
			t.Fatal(err)
		}
		w := want.Data().([]float32)
		if len(got) != len(w) {
			t.Fatalf("%d logits, PyTorch has %d (%v)", len(got), len(w), want.Shape())
		}
		if e := maxRelErr(got, w); !(e <= 1e-4) {
			t.Errorf("prompt logits differ from PyTorch by %.3g of their scale", e)
		} else {
			t.Logf("%d prompt positions: max error %.3g of scale", len(ref.PromptIDs), e)
		}
	})
}

// TestDefaultLongLogits: the last rows of a prefill near the full context
// (positions the short prompt never reaches) equal PyTorch's.
func TestDefaultLongLogits(t *testing.T) {
	// The 128-token model of the past has no long reference.
	forEachTrainedWith(t, "long_logits.npy", func(t *testing.T, defaultDir string) {
		st, _, dc := openTrained(t, defaultDir, engine.Options{}, Config{})
		var ref defaultReference
		readDirJSON(t, defaultDir, "reference.json", &ref)
		if len(ref.LongIDs) < dc.MaxContext/2 || len(ref.LongIDs) > dc.MaxContext {
			t.Fatalf("reference.json's long prompt has %d tokens; want between %d and the context %d", len(ref.LongIDs), dc.MaxContext/2, dc.MaxContext)
		}
		want, err := npy.ReadFile(filepath.Join(defaultDir, "long_logits.npy"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := st.Step(ref.LongIDs, count(0, len(ref.LongIDs)))
		if err != nil {
			t.Fatal(err)
		}
		w := want.Data().([]float32)
		if len(w)%st.Vocab() != 0 || len(w) > len(got) {
			t.Fatalf("long_logits.npy has shape %v", want.Shape())
		}
		if e := maxRelErr(got[len(got)-len(w):], w); !(e <= 1e-4) {
			t.Errorf("logits of the last %d of %d positions differ from PyTorch by %.3g of their scale", len(w)/st.Vocab(), len(ref.LongIDs), e)
		} else {
			t.Logf("last %d of %d positions: max error %.3g of scale", len(w)/st.Vocab(), len(ref.LongIDs), e)
		}
	})
}

// TestDefaultPerplexity reproduces perplexity.json's protocol: each
// held-out document alone as [BOS] + tokens + [EOS], scored from a single
// forward pass.
func TestDefaultPerplexity(t *testing.T) {
	forEachTrained(t, func(t *testing.T, defaultDir string) {
		st, tok, dc := openTrained(t, defaultDir, engine.Options{}, Config{})
		var ref defaultPerplexity
		readDirJSON(t, defaultDir, "perplexity.json", &ref)
		text, err := os.ReadFile(filepath.Join(defaultDir, "heldout.txt"))
		if err != nil {
			t.Fatal(err)
		}
		docs := strings.Split(string(text), "\n%\n")
		if len(docs) != len(ref.PerDocument) {
			t.Fatalf("%d documents, perplexity.json has %d", len(docs), len(ref.PerDocument))
		}
		var total Eval
		worst := 0.0
		for i, d := range docs {
			ids, err := tok.Encode(d, tokenizer.EncodeOptions{AddBOS: true})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, dc.EOS)
			ev, err := Perplexity(st, ids, 0)
			if err != nil {
				t.Fatalf("document %d: %v", i, err)
			}
			if ev.Predicted+1 != ref.PerDocument[i].Tokens { // PyTorch counts the tokens, BOS and EOS included
				t.Errorf("document %d: %d tokens, PyTorch %d", i, ev.Predicted+1, ref.PerDocument[i].Tokens)
			}
			worst = math.Max(worst, math.Abs(ev.NLL-ref.PerDocument[i].NLL)/ref.PerDocument[i].NLL)
			total = total.Add(ev)
		}
		rel := math.Abs(total.Perplexity()-ref.Perplexity) / ref.Perplexity
		t.Logf("perplexity %.4f over %d tokens, PyTorch %.4f (relative difference %.2g; worst document NLL %.2g)",
			total.Perplexity(), total.Predicted, ref.Perplexity, rel, worst)
		if total.Predicted != ref.Predicted || !(rel <= 0.01) {
			t.Errorf("perplexity %.4f over %d tokens, PyTorch %.4f over %d", total.Perplexity(), total.Predicted, ref.Perplexity, ref.Predicted)
		}
	})
}

// TestPerplexityWindows: scoring in windows predicts every token but the
// first of each window, and a window holding the whole text equals one
// pass.
func TestPerplexityWindows(t *testing.T) {
	st, tok, _ := openDefault(t, engine.Options{}, Config{})
	ids, err := tok.Encode("Any sufficiently advanced technology is indistinguishable from magic.", tokenizer.EncodeOptions{AddBOS: true})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := Perplexity(st, ids, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The reference: per-token log-probabilities from stepping one token
	// at a time through the cache.
	if err := st.Reset(); err != nil {
		t.Fatal(err)
	}
	var nll float64
	for i := 0; i+1 < len(ids); i++ {
		logits, err := st.Step(ids[i:i+1], []int{i})
		if err != nil {
			t.Fatal(err)
		}
		nll -= LogProb(logits, ids[i+1])
	}
	if whole.Predicted != len(ids)-1 || math.Abs(whole.NLL-nll) > 1e-3*nll {
		t.Errorf("one window: NLL %.5f over %d, stepwise %.5f over %d", whole.NLL, whole.Predicted, nll, len(ids)-1)
	}
	win, err := Perplexity(st, ids, 4)
	if err != nil {
		t.Fatal(err)
	}
	// Every window predicts all its tokens but its first.
	wantPred := len(ids) - (len(ids)+3)/4
	if win.Predicted != wantPred {
		t.Errorf("windows of 4 over %d tokens predicted %d, want %d", len(ids), win.Predicted, wantPred)
	}
	if _, err := Perplexity(st, ids, 1); err == nil {
		t.Error("a window of 1 accepted")
	}
	last, _, _ := openDefault(t, engine.Options{}, Config{LastOnly: true})
	if _, err := Perplexity(last, ids, 0); err == nil {
		t.Error("a LastOnly stepper accepted")
	}
}

// TestPerplexityBuckets: the buckets partition the predictions by
// position, each holding the log-likelihoods a stepwise run gives its
// positions, and their sum is the total.
func TestPerplexityBuckets(t *testing.T) {
	st, tok, _ := openDefault(t, engine.Options{}, Config{})
	ids, err := tok.Encode("The quick brown fox jumps over the lazy dog, and the dog does not mind at all.", tokenizer.EncodeOptions{AddBOS: true})
	if err != nil {
		t.Fatal(err)
	}
	edges := []int{0, 3, 7, len(ids) + 5}
	b, err := NewBuckets(edges...)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := PerplexityBuckets(st, ids, 0, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Reset(); err != nil {
		t.Fatal(err)
	}
	want := make([]Eval, len(edges)-1)
	for i := 0; i+1 < len(ids); i++ {
		logits, err := st.Step(ids[i:i+1], []int{i})
		if err != nil {
			t.Fatal(err)
		}
		for k := range want {
			if i+1 >= edges[k] && i+1 < edges[k+1] {
				want[k].NLL -= LogProb(logits, ids[i+1])
				want[k].Predicted++
			}
		}
	}
	var sum Eval
	for k, got := range b.Evals {
		sum = sum.Add(got)
		if got.Predicted != want[k].Predicted || math.Abs(got.NLL-want[k].NLL) > 1e-3*math.Max(1, want[k].NLL) {
			t.Errorf("bucket [%d, %d): NLL %.5f over %d, stepwise %.5f over %d", edges[k], edges[k+1],
				got.NLL, got.Predicted, want[k].NLL, want[k].Predicted)
		}
	}
	if sum.Predicted != whole.Predicted || math.Abs(sum.NLL-whole.NLL) > 1e-9*whole.NLL {
		t.Errorf("buckets sum to %.6f over %d, total %.6f over %d", sum.NLL, sum.Predicted, whole.NLL, whole.Predicted)
	}
	// Positions past the last edge count only in the total.
	short, _ := NewBuckets(0, 4)
	tot, err := PerplexityBuckets(st, ids, 0, short)
	if err != nil {
		t.Fatal(err)
	}
	if short.Evals[0].Predicted != 3 || tot.Predicted != len(ids)-1 {
		t.Errorf("bucket [0, 4) holds %d predictions (want 3), total %d (want %d)", short.Evals[0].Predicted, tot.Predicted, len(ids)-1)
	}
	for _, bad := range [][]int{{5}, {0, 0}, {3, 2}, {-1, 4}} {
		if _, err := NewBuckets(bad...); err == nil {
			t.Errorf("NewBuckets(%v) accepted", bad)
		}
	}
}

func TestBitsPerByte(t *testing.T) {
	ev := Eval{NLL: 8 * math.Ln2, Predicted: 3}
	if got := ev.BitsPerByte(4); math.Abs(got-2) > 1e-12 {
		t.Errorf("8 bits over 4 bytes: %v, want 2", got)
	}
	if got := ev.BitsPerByte(0); !math.IsNaN(got) {
		t.Errorf("no bytes: %v, want NaN", got)
	}
}

// BenchmarkDefaultPrefill is one prefill of 64 tokens of the default model
// (fp32, OpenCL).
func BenchmarkDefaultPrefill(b *testing.B) {
	st, _, _ := openDefault(b, engine.Options{}, Config{LastOnly: true})
	ids := make([]int, 64)
	for i := range ids {
		ids[i] = (i*37 + 11) % st.Vocab()
	}
	for b.Loop() {
		st.Reset()
		if _, err := st.Step(ids, count(0, len(ids))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(ids))/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkDefaultDecode is one decode step of the default model after 64
// tokens of context.
func BenchmarkDefaultDecode(b *testing.B) {
	st, _, _ := openDefault(b, engine.Options{}, Config{LastOnly: true})
	ids := count(100, 64)
	for b.Loop() {
		b.StopTimer()
		st.Reset()
		if _, err := st.Step(ids, count(0, len(ids))); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := st.Step([]int{7}, []int{len(ids)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}
