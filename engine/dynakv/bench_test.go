package dynakv

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/tokenizer"
)

// BenchmarkPrefetchAB measures Pipeline 2 on the long-context model: in
// one process, runs without and with the prefetcher alternate for three
// rounds (off/on, on/off, off/on) over the same teacher-forced text
// (prefill 256, then DYNAKV_AB_TOKENS-256 decode steps; default 768
// tokens), each with a fresh System and pool files. It logs, per run, the
// I/O wait inside the hooks, the prefetch wait, bytes and operations read,
// prefetch accuracy and the layout counterfactuals, and per round the
// on/off ratios. The losses of the two arms must be equal (prefetch moves
// reads, not results). Run with -bench PrefetchAB -benchtime 1x.
func BenchmarkPrefetchAB(b *testing.B) {
	n := 768
	if v := os.Getenv("DYNAKV_AB_TOKENS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 300 {
			b.Fatalf("DYNAKV_AB_TOKENS=%q: want an integer ≥ 300", v)
		}
	}
	// DYNAKV_AB_ARM=reps compares representatives in DRAM (off) with
	// representatives on flash (on), both with the prefetcher;
	// DYNAKV_AB_FACTOR sets Config.PrefetchFactor.
	reps := os.Getenv("DYNAKV_AB_ARM") == "reps"
	extra := Config{PrefetchByQuery: os.Getenv("DYNAKV_AB_BYQUERY") == "1"}
	if v := os.Getenv("DYNAKV_AB_FACTOR"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			b.Fatalf("DYNAKV_AB_FACTOR=%q: want a positive number", v)
		}
		extra.PrefetchFactor = f
	}
	if os.Getenv("POCL_WORK_GROUP_SPECIALIZATION") == "" {
		os.Setenv("POCL_WORK_GROUP_SPECIALIZATION", "0")
	}
	st, err := kv.Open(longctx+"/model.onnx", engine.Options{}, kv.Config{MaxContext: n})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Session().Close()
	tok, err := tokenizer.Load(longctx + "/tokenizer.json")
	if err != nil {
		b.Fatal(err)
	}
	text, err := os.ReadFile(longctx + "/heldout_split.txt")
	if err != nil {
		b.Fatal(err)
	}
	doc, err := tok.Encode(string(text), tokenizer.EncodeOptions{AddBOS: true})
	if err != nil || len(doc) < n {
		b.Fatalf("held-out text: %d tokens, %v", len(doc), err)
	}
	doc = doc[:n]
	info := st.Info()
	run := func(pf bool) (Eval, Report) {
		cfg := extra
		cfg.Dir, cfg.Budget, cfg.Prefetch = b.TempDir(), 0.10, pf
		if reps {
			cfg.Prefetch, cfg.CentroidsOnFlash = true, pf
		}
		sys, err := New(cfg, st.Session().CacheAttentionLayers(), 8, info.Layers[0].KVHeads, info.Layers[0].HeadDim)
		if err != nil {
			b.Fatal(err)
		}
		defer sys.Close()
		st.Session().SetAttentionHook(sys.Hook(), false)
		ev, err := Evaluate(st, nil, doc, 256, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		return ev, sys.Report()
	}
	for i := 0; i < b.N; i++ {
		var loss []float64
		for round := 0; round < 3; round++ {
			order := []bool{false, true}
			if round == 1 {
				order = []bool{true, false}
			}
			var io, step [2]float64
			for _, pf := range order {
				ev, r := run(pf)
				loss = append(loss, ev.Loss)
				k := 0
				if pf {
					k = 1
				}
				io[k], step[k] = r.IOMs, ev.StepMs
				b.Logf("round %d arm on=%v: step %.2f ms, hook I/O wait %.3f ms/token (prefetch wait %.3f), read %.0f B/token (%.0f ahead), %.1f ops/token, run %.1f entries, accuracy %.3f coverage %.3f, %.1f prefetched clusters used/token, ppl %.2f, score %.3f attn %.3f update %.3f ms/token | seq-order %.1f ops/token %.0f B/token run %.2f | split: dual wrote %.0f moved %.0f B, packed rewrote %.0f shifted %.0f B; append: packed shifted %.0f B | per token: packed shifted %.0f B, dual moved %.0f B",
					round+1, pf, ev.StepMs, r.IOMs, r.PrefetchWaitMs, r.ReadBytesPerToken, r.PrefetchBytesPerToken, r.ReadOpsPerToken, r.MeanRunEntries,
					r.PrefetchAccuracy, r.PrefetchCoverage, r.PrefetchHitsPerToken, ev.Perplexity, r.ScoreMs, r.AttnMs, r.UpdateMs,
					r.SeqOpsPerToken, r.SeqBytesPerToken, r.SeqMeanRunEntries, r.DualSplitWritten, r.DualSplitMoved, r.PackedSplitWritten, r.PackedSplitMoved, r.PackedAppendMoved, r.PackedMovedPerToken, r.DualMovedPerToken)
				if reps {
					b.Logf("round %d reps on flash=%v: reps DRAM %d B, read %.0f B/token, written %.0f B/token, wait %.3f ms/token", round+1, pf, r.RepsDRAMBytes, r.RepsReadPerToken, r.RepsWrittenPerToken, r.RepsWaitMs)
				}
			}
			b.Logf("round %d: on/off hook I/O wait %.3f, step time %.3f", round+1, io[1]/io[0], step[1]/step[0])
		}
		for _, l := range loss[1:] {
			if l != loss[0] && !reps {
				b.Fatalf("losses differ between runs: %v", loss)
			}
		}
		fmt.Fprintln(os.Stderr, "losses", loss)
	}
}
