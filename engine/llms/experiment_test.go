package llms

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/tokenizer"
	"github.com/tlite/tlite/engine/trace"
)

// TestExperimentSmoke replays a short trace against LLMS, LMK and VLLM-S
// on the default model (TestModes covers every mode's restore): each
// completes every call and LMK reads nothing.
func TestExperimentSmoke(t *testing.T) {
	st := openDefault(t, 128)
	corpus := heldoutTokens(t, 400)
	rep, _, err := RunExperiment(st, corpus, t.TempDir(), ExperimentConfig{
		Modes: []Mode{ModeLLMS, ModeLMK, ModeVLLMS}, Contexts: []int{3}, Calls: 4,
		Pattern: trace.Random, BudgetContexts: 0.5, Seed: 1, Cost: fixedCost})
	if err != nil {
		t.Fatal(err)
	}
	for sys, byN := range rep.Systems {
		s := byN[3]
		if s.Calls != 4 {
			t.Errorf("%s: %d calls", sys, s.Calls)
		}
		if sys == "lmk" && s.BytesRead != 0 {
			t.Errorf("lmk read %d bytes", s.BytesRead)
		}
	}
	var b strings.Builder
	rep.WriteTable(&b)
	t.Log("\n" + b.String())
}

// BenchmarkSwitchModes is the switch-latency comparison on the long-context
// model (OpenCL device): LLMS against the four baselines under one budget.
// Environment: LLMS_CONTEXTS (default "2,4,8"), LLMS_CALLS (40),
// LLMS_BUDGET (budget in INT8 contexts, 1), LLMS_PATTERN (markov),
// LLMS_MAXCTX (1024).
func BenchmarkSwitchModes(b *testing.B) {
	env := func(k, d string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return d
	}
	var counts []int
	for _, f := range strings.Split(env("LLMS_CONTEXTS", "2,4,8"), ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			b.Fatal(err)
		}
		counts = append(counts, n)
	}
	calls, _ := strconv.Atoi(env("LLMS_CALLS", "40"))
	budget, _ := strconv.ParseFloat(env("LLMS_BUDGET", "1"), 64)
	maxCtx, _ := strconv.Atoi(env("LLMS_MAXCTX", "1024"))
	pat, err := trace.ParsePattern(env("LLMS_PATTERN", "markov"))
	if err != nil {
		b.Fatal(err)
	}
	st, err := kv.Open("../../testdata/longctx/model.onnx", engine.Options{LastLogits: true}, kv.Config{MaxContext: maxCtx, AttentionStats: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Session().Close()
	corpus := longctxCorpus(b)
	for i := 0; i < b.N; i++ {
		rep, costs, err := RunExperiment(st, corpus, b.TempDir(), ExperimentConfig{
			Modes: []Mode{ModeLLMS, ModeLMK, ModeSwap, ModeVLLMS, ModeVLLMSQ}, Contexts: counts, Calls: calls,
			Pattern: pat, BudgetContexts: budget, Seed: 7})
		if err != nil {
			b.Fatal(err)
		}
		var sb strings.Builder
		rep.WriteTable(&sb)
		b.Logf("budget %.2f INT8 contexts, max context %d, pattern %s, cost model %+v\n%s", budget, maxCtx, pat, costs["llms"], sb.String())
		for sys, byN := range rep.Systems {
			for n, s := range byN {
				b.ReportMetric(s.SwitchMsMean, sys+"-"+strconv.Itoa(n)+"-switch-ms")
			}
		}
	}
}

// longctxCorpus is the long-context model's held-out split, tokenized.
func longctxCorpus(b testing.TB) []int {
	tok, err := tokenizer.Load("../../testdata/longctx/tokenizer.json")
	if err != nil {
		b.Fatal(err)
	}
	text, err := os.ReadFile("../../testdata/longctx/heldout_split.txt")
	if err != nil {
		b.Fatal(err)
	}
	ids, err := tok.Encode(string(text), tokenizer.EncodeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return ids
}

// TestExperimentChunkSizes: ExperimentConfig.ChunkTokens runs LLMS at
// each chunk size under its own label with its own cost model, every call
// completes, and a size larger than the cache is refused.
func TestExperimentChunkSizes(t *testing.T) {
	st := openDefault(t, 128)
	corpus := heldoutTokens(t, 400)
	rep, costs, err := RunExperiment(st, corpus, t.TempDir(), ExperimentConfig{
		Modes: []Mode{ModeLLMS}, Contexts: []int{2}, Calls: 3,
		Pattern: trace.Random, BudgetContexts: 0.5, Seed: 1, Cost: fixedCost, ChunkTokens: []int{8, 16}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sys := range []string{"llms@8", "llms"} {
		if s, ok := rep.Systems[sys][2]; !ok || s.Calls != 3 {
			t.Errorf("%s: %+v (systems %v)", sys, s, rep.Systems)
		}
		if _, ok := costs[sys]; !ok {
			t.Errorf("no cost model reported for %s", sys)
		}
	}
	if len(rep.Systems) != 2 {
		t.Errorf("systems %v; want llms@8 and llms", rep.Systems)
	}
	if _, _, err := RunExperiment(st, corpus, t.TempDir(), ExperimentConfig{Modes: []Mode{ModeLLMS}, Contexts: []int{2}, Calls: 1,
		Pattern: trace.Random, BudgetContexts: 0.5, Cost: fixedCost, ChunkTokens: []int{129}}); err == nil {
		t.Error("chunks larger than the cache accepted")
	}
}
