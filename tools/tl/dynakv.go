package main

// tl generate --kv dynakv and tl perplexity --kv dynakv: decoding with the
// KV cache on flash through engine/dynakv (systems-spec §2), statistics
// at the end (--json too).

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/dynakv"
	"github.com/tlite/tlite/engine/flash"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/tokenizer"
)

// wantsDynaKV reports whether args choose --kv dynakv.
func wantsDynaKV(args []string) bool {
	for i, a := range args {
		if a == "--kv=dynakv" || a == "-kv=dynakv" || (a == "--kv" || a == "-kv") && i+1 < len(args) && args[i+1] == "dynakv" {
			return true
		}
	}
	return false
}

// dynakvResult is what the dynakv commands print; --json writes it.
type dynakvResult struct {
	Command   string         `json:"command"`
	Model     string         `json:"model"`
	Text      string         `json:"text,omitempty"`
	Budget    float64        `json:"budget"`
	Lambda    float64        `json:"lambda"`
	Eval      dynakv.Eval    `json:"eval"`
	Stats     dynakv.Report  `json:"stats"`
	ProcRead  int64          `json:"proc_read_bytes"`
	FlashRead flash.Snapshot `json:"flash"`
	Generated string         `json:"generated,omitempty"`
	Seconds   float64        `json:"seconds"`
	// DeviceSlots is the DynaKV session's in-place cache (slots per
	// layer); Device its device memory and FullDevice the full-attention
	// state's (a cache of --ctx slots; absent with --no-full).
	DeviceSlots int                  `json:"device_slots"`
	Device      engine.DeviceMemory  `json:"device_memory"`
	FullDevice  *engine.DeviceMemory `json:"full_device_memory,omitempty"`
}

func runDynaKV(cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	model := fs.String("model", "", "the decoder (ONNX) with tokenizer.json beside it")
	tokPath := fs.String("tokenizer", "", "tokenizer.json (default: beside the model)")
	fs.String("kv", "dynakv", "dynakv")
	dir := fs.String("kv-dir", "", "directory for the pool files (a file system with O_DIRECT; required)")
	budget := fs.Float64("kv-budget", 0.10, "ρ: retrieve clusters until this fraction of the entries")
	lambda := fs.Float64("kv-lambda", 1, "τ_h = λ·p90 of the initial cluster variances (inf: never split on variance)")
	smax := fs.Int("kv-smax", 64, "S_max, the largest cluster (a multiple of 16 for head size 32)")
	bmax := fs.Int("kv-bmax", 16, "B_max, the delayed-split buffer cap per head")
	cacheRatio := fs.Float64("kv-cache", 0, "cluster cache size as a fraction of the full KV bytes of the run (0: none)")
	policy := fs.String("kv-cache-policy", "gds", "gds (small clusters first, 25% reserved for recent updates) or lru")
	noPair := fs.Bool("kv-no-pairing", false, "lay pools out in cluster order instead of by co-retrieval (ablation)")
	recent := fs.Int("kv-recent", 0, "always attend the last N entries of each head from a DRAM window (option; the paper names none)")
	noDelay := fs.Bool("kv-no-delay", false, "split a non-resident over-threshold cluster at once (loading it) instead of buffering (ablation)")
	allBuf := fs.Bool("kv-attend-buffers", false, "attend every delayed-split buffer each step (default: only those of selected clusters)")
	depth := fs.Int("kv-qd", 4, "reader queue depth")
	prefetch := fs.Bool("kv-prefetch", false, "Pipeline 2: read the next layer's likely clusters ahead while the device computes")
	pfFactor := fs.Float64("kv-prefetch-factor", 1.25, "bound a layer's prefetch at this multiple of its retrieval budget in bytes")
	pfQuery := fs.Bool("kv-prefetch-query", false, "rank prefetch candidates by the previous layer's query instead of the next layer's last selection")
	repsFlash := fs.Bool("kv-reps-flash", false, "Pipeline 1: representatives in a per-layer file, read one layer ahead (default: DRAM)")
	baseline := fs.String("kv-baseline", "", "run a comparison system instead: nocluster (exact token top-k), static (never split, sequence order) or local (recluster new entries every --kv-window)")
	window := fs.Int("kv-window", 64, "W of --kv-baseline local")
	prefill := fs.Int("prefill", 256, "perplexity: prompt tokens (the rest is teacher-forced decoding)")
	maxTok := fs.Int("max-tokens", 0, "perplexity: score at most this many tokens of the text (default: the context)")
	textPath := fs.String("text", "", "perplexity: the held-out text")
	prompt := fs.String("prompt", "", "generate: the prompt")
	n := fs.Int("n", 128, "generate: tokens to generate")
	ctx := fs.Int("ctx", 2048, "the context: cache slots of the full-attention state, and the most tokens scored")
	devSlots := fs.Int("kv-device-slots", 0, "device cache slots of the DynaKV session (0: the prompt rounded up to the pad, the least it needs, as the hook owns decode attention; --ctx gives the old full-size cache)")
	device := fs.String("device", "", "device (as elsewhere in tl)")
	noFull := fs.Bool("no-full", false, "skip the full-attention shadow run (no KL, top-1 or recall)")
	noRecall := fs.Bool("kv-no-recall", false, "keep the full-attention run but not the attention-recall shadow, whose host work would count in the DynaKV step time (for latency)")
	seed := fs.Int64("seed", 1, "k-means seed")
	asJSON := fs.Bool("json", false, "write the result as JSON")
	recallPath := fs.String("recall", "", "perplexity: instead of --text, score a key->value recall file (JSON lines with context, candidates, answer): the context but its last --recall-decode tokens is the prompt; those tokens and each candidate are teacher-forced through DynaKV")
	recallN := fs.Int("recall-n", 0, "score at most this many recall examples (0: all)")
	recallTail := fs.Int("recall-decode", 24, "recall: decode the context's last N tokens through DynaKV, so that the question (about 20 tokens in the shipped sets) attends through retrieval; 0 scores each candidate's first token from the full-attention prompt")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: tl %s --kv dynakv --model m.onnx --kv-dir DIR [--kv-budget 0.1] [--text heldout.txt --prefill 256 | --prompt \"...\" -n 128] [--json]\n", cmd)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *budget <= 0 || *budget > 1 {
		return fmt.Errorf("--kv-budget %v: want a fraction in (0, 1]", *budget)
	}
	if *model == "" && fs.NArg() > 0 {
		*model = fs.Arg(0)
	}
	if *model == "" || *dir == "" {
		fs.Usage()
		return fmt.Errorf("--kv dynakv needs --model and --kv-dir")
	}
	if *tokPath == "" {
		*tokPath = filepath.Join(filepath.Dir(*model), "tokenizer.json")
	}
	tok, err := tokenizer.Load(*tokPath)
	if err != nil {
		return err
	}
	var doc []int
	gen := 0
	switch cmd {
	case "perplexity":
		if *recallPath != "" {
			break
		}
		if *textPath == "" {
			return fmt.Errorf("perplexity --kv dynakv needs --text")
		}
		raw, err := os.ReadFile(*textPath)
		if err != nil {
			return err
		}
		if doc, err = tok.Encode(string(raw), tokenizer.EncodeOptions{AddBOS: tok.Special().BOS >= 0}); err != nil {
			return err
		}
		lim := *ctx
		if *maxTok > 0 {
			lim = min(lim, *maxTok)
		}
		doc = doc[:min(len(doc), lim)]
	default:
		if *prompt == "" {
			return fmt.Errorf("generate --kv dynakv needs --prompt")
		}
		if doc, err = tok.Encode(*prompt, tokenizer.EncodeOptions{AddBOS: tok.Special().BOS >= 0}); err != nil {
			return err
		}
		*prefill, gen = len(doc), *n
		if len(doc)+gen > *ctx {
			return fmt.Errorf("a prompt of %d tokens and %d generated is beyond the context of %d (--ctx)", len(doc), gen, *ctx)
		}
	}
	if *devSlots < 0 {
		return fmt.Errorf("--kv-device-slots %d: want 0 (sized for the prompt) or a slot count", *devSlots)
	}
	if *devSlots == 0 {
		prompt := *prefill
		if *recallPath != "" {
			if prompt, err = recallLongest(*recallPath, *recallN, tok); err != nil {
				return err
			}
			prompt = max(2, prompt-*recallTail)
		}
		if *devSlots, err = dynakv.DeviceSlots(min(prompt, *ctx), 0); err != nil {
			return err
		}
		*devSlots = min(*devSlots, *ctx)
	}
	opts := engine.Options{Device: *device}
	dyn, err := kv.Open(*model, opts, kv.Config{MaxContext: *devSlots})
	if err != nil {
		return cliError(err)
	}
	defer dyn.Session().Close()
	var full *kv.State
	if !*noFull {
		if full, err = kv.Open(*model, opts, kv.Config{MaxContext: *ctx}); err != nil {
			return cliError(err)
		}
		defer full.Session().Close()
	}
	info := dyn.Info()
	if len(info.Layers) == 0 {
		return fmt.Errorf("%s: no KV cache layers", *model)
	}
	kvh, dim := info.Layers[0].KVHeads, info.Layers[0].HeadDim
	layers := dyn.Session().CacheAttentionLayers()
	heads, err := queryHeads(*model, kvh)
	if err != nil {
		return err
	}
	total := int64(len(doc)+gen) * int64(layers*kvh) * int64(2*dim*4)
	cfg := dynakv.Config{Dir: *dir, Budget: *budget, Lambda: *lambda, SMax: *smax, BMax: *bmax, QueueDepth: *depth,
		CacheBytes: int64(*cacheRatio * float64(total)), CachePolicy: *policy, NoPairing: *noPair, NoDelay: *noDelay, Recent: *recent,
		Prefetch: *prefetch, PrefetchFactor: *pfFactor, PrefetchByQuery: *pfQuery, CentroidsOnFlash: *repsFlash,
		AttendAllBuffers: *allBuf, Shadow: !*noFull && !*noRecall, Seed: *seed}
	var sys kvSystem
	if *baseline != "" {
		sys, err = dynakv.NewBaseline(dynakv.BaselineConfig{Mode: *baseline, Dir: *dir, Budget: *budget, MaxContext: *ctx, Window: *window,
			QueueDepth: *depth, Shadow: !*noFull && !*noRecall, Seed: *seed}, layers, heads, kvh, dim)
	} else {
		sys, err = dynakv.New(cfg, layers, heads, kvh, dim)
	}
	if err != nil {
		return err
	}
	defer sys.Close()
	if *recallPath != "" {
		sys.Close()
		mk := func() (kvSystem, error) {
			if *baseline != "" {
				return dynakv.NewBaseline(dynakv.BaselineConfig{Mode: *baseline, Dir: *dir, Budget: *budget, MaxContext: *ctx, Window: *window,
					QueueDepth: *depth, Seed: *seed}, layers, heads, kvh, dim)
			}
			c := cfg
			c.Shadow = false
			return dynakv.New(c, layers, heads, kvh, dim)
		}
		if *recallTail < 0 {
			return fmt.Errorf("--recall-decode %d: want a token count ≥ 0", *recallTail)
		}
		return runRecall(*recallPath, *recallN, *recallTail, tok, dyn, full, mk, *asJSON, *budget, *baseline)
	}
	dyn.Session().SetAttentionHook(sys.Hook(), false)
	before, perr := flash.ReadProcIO()
	t0 := time.Now()
	ev, err := dynakv.Evaluate(dyn, full, doc, *prefill, gen, nil)
	if err != nil {
		return err
	}
	res := dynakvResult{Command: cmd, Model: *model, Text: *textPath, Budget: *budget, Lambda: *lambda, Eval: ev, Stats: sys.Report(),
		FlashRead: sys.ReadSnapshot(), Seconds: time.Since(t0).Seconds(), DeviceSlots: *devSlots, Device: dyn.Session().DeviceMemory()}
	if full != nil {
		m := full.Session().DeviceMemory()
		res.FullDevice = &m
	}
	if after, err := flash.ReadProcIO(); err == nil && perr == nil {
		res.ProcRead = after.ReadBytes - before.ReadBytes
	}
	if gen > 0 {
		res.Generated = tok.DecodeWith(ev.Tokens[len(doc):], tokenizer.DecodeOptions{SkipSpecial: true})
	}
	if math.IsInf(res.Lambda, 0) {
		res.Lambda = -1 // JSON has no infinity: -1 stands for "never"
	}
	if *asJSON {
		return writeJSON(stdout, res)
	}
	printDynaKV(res)
	return nil
}

// recallLongest returns the longest context, in tokens, of the first
// limit examples (0: all) of a recall file.
func recallLongest(path string, limit int, tok *tokenizer.Tokenizer) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	longest := 0
	for ln, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if limit > 0 && ln >= limit {
			break
		}
		var ex struct {
			Context string `json:"context"`
		}
		if err := json.Unmarshal([]byte(line), &ex); err != nil {
			return 0, fmt.Errorf("%s:%d: %w", path, ln+1, err)
		}
		ctx, err := tok.Encode(ex.Context, tokenizer.EncodeOptions{AddBOS: tok.Special().BOS >= 0})
		if err != nil {
			return 0, err
		}
		longest = max(longest, len(ctx))
	}
	if longest == 0 {
		return 0, fmt.Errorf("%s: no examples", path)
	}
	return longest, nil
}

// kvSystem is DynaKV or one of its baselines.
type kvSystem interface {
	Hook() engine.AttentionHook
	Report() dynakv.Report
	ReadSnapshot() flash.Snapshot
	Close() error
}

// queryHeads reads the query heads from config.json or model.json beside
// the model, else assumes multi-head attention.
func queryHeads(model string, kvh int) (int, error) {
	for _, name := range []string{"config.json", "model.json"} {
		raw, err := os.ReadFile(filepath.Join(filepath.Dir(model), name))
		if err != nil {
			continue
		}
		if i := strings.Index(string(raw), `"num_heads"`); i >= 0 {
			var h int
			if _, err := fmt.Sscanf(strings.TrimLeft(string(raw[i+len(`"num_heads"`):]), ": "), "%d", &h); err == nil && h > 0 {
				return h, nil
			}
		}
	}
	return 0, fmt.Errorf("%s: no num_heads in config.json or model.json beside it: DynaKV needs the query heads", model)
}

func printDynaKV(r dynakvResult) {
	e, s := r.Eval, r.Stats
	w := stdout
	if r.Generated != "" {
		fmt.Fprintf(w, "%s\n\n", r.Generated)
	}
	fmt.Fprintf(w, "%s on %s: prefill %d, %d decode steps, ρ = %.3f (retrieved %.3f of the entries), λ = %v\n", s.Mode, r.Model, e.Prefill, s.Steps, r.Budget, s.RetrievedShare, r.Lambda)
	fmt.Fprintf(w, "  quality: perplexity %.3f (full attention %.3f), logit KL %.4f, top-1 agreement %.3f, attention recall %.3f\n", e.Perplexity, e.FullPerplexity, e.KL, e.Top1, s.Recall)
	fmt.Fprintf(w, "  flash (%s): %.0f bytes and %.1f read ops per token (%.0f useful), mean contiguous run %.1f entries (max %.0f), effective bandwidth %.1f MB/s; /proc read_bytes %d\n",
		s.Label, s.ReadBytesPerToken, s.ReadOpsPerToken, s.UsefulBytesPerTok, s.MeanRunEntries, s.MaxRunEntries, s.EffectiveBandwidth, r.ProcRead)
	fmt.Fprintf(w, "  cache: %s, %d bytes, hit rate %.3f\n", s.CachePolicy, s.CacheBytes, s.HitRate)
	fmt.Fprintf(w, "  clusters %d -> %d; splits per 1K tokens %.1f (variance %d, delayed %d, buffer cap %d, forced %d), %d entries buffered; write amplification %.2f\n",
		s.InitialClusters, s.FinalClusters, s.SplitsPer1K, s.SplitsVariance, s.SplitsDelayed, s.SplitsBMax, s.SplitsForced, s.Buffered, s.WriteAmplification)
	if s.PrefetchBytesPerToken > 0 || s.RepsOnFlash {
		fmt.Fprintf(w, "  pipelines: prefetch %.0f bytes per token ahead, accuracy %.3f, %.1f clusters served per token, wait %.3f ms per token; representatives on flash %v, %d bytes in DRAM, %.0f read and %.0f written per token\n",
			s.PrefetchBytesPerToken, s.PrefetchAccuracy, s.PrefetchHitsPerToken, s.PrefetchWaitMs, s.RepsOnFlash, s.RepsDRAMBytes, s.RepsReadPerToken, s.RepsWrittenPerToken)
	}
	fmt.Fprintf(w, "  layout counterfactuals: sequence order %.1f ops and %.0f bytes per token, mean run %.2f entries; per split dual-head wrote %.0f (moved %.0f) bytes, packed cluster-by-cluster rewrote %.0f and shifted %.0f; per append packed shifted %.0f\n",
		s.SeqOpsPerToken, s.SeqBytesPerToken, s.SeqMeanRunEntries, s.DualSplitWritten, s.DualSplitMoved, s.PackedSplitWritten, s.PackedSplitMoved, s.PackedAppendMoved)
	fmt.Fprintf(w, "  drift (mean distance of new keys to the nearest P0 centroid, per 128 steps): %s\n", floats(s.Drift))
	fmt.Fprintf(w, "  device memory: %d cache slots per layer, KV cache %d bytes, constants %d, activations %d, live %d", r.DeviceSlots, r.Device.KVCache, r.Device.Constants, r.Device.Activations, r.Device.Live)
	if f := r.FullDevice; f != nil {
		fmt.Fprintf(w, " (full-attention state: KV cache %d, constants %d, activations %d, live %d)", f.KVCache, f.Constants, f.Activations, f.Live)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  per token: %.2f ms DynaKV step (%.2f full); host: score %.3f, I/O %.3f, attention %.3f, update %.3f ms; %.1f s in all\n",
		e.StepMs, e.FullStepMs, s.ScoreMs, s.IOMs, s.AttnMs, s.UpdateMs, r.Seconds)
}

func floats(x []float64) string {
	var b strings.Builder
	for i, v := range x {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.2f", v)
	}
	return b.String()
}

// recallResult is the key->value recall accuracy under DynaKV and full
// attention.
type recallResult struct {
	File     string  `json:"file"`
	Mode     string  `json:"mode"`
	Budget   float64 `json:"budget"`
	Examples int     `json:"examples"`
	// Tail is how many of each context's last tokens were decoded
	// through DynaKV rather than prefilled.
	Tail int `json:"decoded_tail"`
	// TailShort counts the examples whose context was too short for Tail
	// (a context of n tokens decodes at most n-2): those decoded n-2.
	TailShort    int     `json:"tail_shortened"`
	ContextToks  float64 `json:"mean_context_tokens"`
	Accuracy     float64 `json:"accuracy"`
	FullAccuracy float64 `json:"full_accuracy"`
	Agreement    float64 `json:"choice_agreement"`
	// Choices, FullChoices and Answers are per example, in file order,
	// so two runs over the same file can be paired item by item.
	Choices     []int   `json:"choices"`
	FullChoices []int   `json:"full_choices,omitempty"`
	Answers     []int   `json:"answers"`
	ReadBytes   int64   `json:"read_bytes"`
	Seconds     float64 `json:"seconds"`
	// DeviceSlots and Device are the DynaKV session's cache slots and
	// device memory (as in dynakvResult).
	DeviceSlots int                 `json:"device_slots"`
	Device      engine.DeviceMemory `json:"device_memory"`
}

func runRecall(path string, limit, tail int, tok *tokenizer.Tokenizer, dyn, full *kv.State, mk func() (kvSystem, error), asJSON bool, budget float64, mode string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if mode == "" {
		mode = "dynakv"
	}
	res := recallResult{File: path, Mode: mode, Budget: budget, Tail: tail, DeviceSlots: dyn.MaxContext(), Device: dyn.Session().DeviceMemory()}
	t0 := time.Now()
	var right, fullRight, agree, ctxToks int
	for ln, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if limit > 0 && res.Examples >= limit {
			break
		}
		var ex struct {
			Context    string   `json:"context"`
			Candidates []string `json:"candidates"`
			Answer     int      `json:"answer"`
		}
		if err := json.Unmarshal([]byte(line), &ex); err != nil {
			return fmt.Errorf("%s:%d: %w", path, ln+1, err)
		}
		if ex.Answer < 0 || ex.Answer >= len(ex.Candidates) {
			return fmt.Errorf("%s:%d: answer %d of %d candidates", path, ln+1, ex.Answer, len(ex.Candidates))
		}
		ctx, err := tok.Encode(ex.Context, tokenizer.EncodeOptions{AddBOS: tok.Special().BOS >= 0})
		if err != nil {
			return err
		}
		ctxToks += len(ctx)
		if tail > len(ctx)-2 {
			res.TailShort++
		}
		best, fbest := -1, -1
		var bl, fbl float64
		for i, c := range ex.Candidates {
			cand, err := tok.Encode(c, tokenizer.EncodeOptions{})
			if err != nil {
				return err
			}
			sys, err := mk()
			if err != nil {
				return err
			}
			dyn.Session().SetAttentionHook(sys.Hook(), false)
			dl, fl, err := dynakv.Continuation(dyn, full, ctx, cand, min(tail, max(0, len(ctx)-2)))
			dyn.Session().SetAttentionHook(nil, false)
			res.ReadBytes += sys.ReadSnapshot().Read.Bytes
			sys.Close()
			if err != nil {
				return fmt.Errorf("%s:%d candidate %d: %w", path, ln+1, i, err)
			}
			if best < 0 || dl > bl {
				best, bl = i, dl
			}
			if fbest < 0 || fl > fbl {
				fbest, fbl = i, fl
			}
		}
		res.Examples++
		res.Choices, res.Answers = append(res.Choices, best), append(res.Answers, ex.Answer)
		if full != nil {
			res.FullChoices = append(res.FullChoices, fbest)
		}
		if best == ex.Answer {
			right++
		}
		if fbest == ex.Answer {
			fullRight++
		}
		if best == fbest {
			agree++
		}
	}
	if res.Examples == 0 {
		return fmt.Errorf("%s: no examples", path)
	}
	n := float64(res.Examples)
	res.Accuracy, res.FullAccuracy, res.Agreement = float64(right)/n, float64(fullRight)/n, float64(agree)/n
	res.ContextToks = float64(ctxToks) / n
	res.Seconds = time.Since(t0).Seconds()
	if full == nil {
		res.FullAccuracy, res.Agreement = 0, 0
	}
	if asJSON {
		return writeJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "%s recall on %s (ρ = %.3f, last %d context tokens decoded): %d examples of %.0f context tokens, accuracy %.3f (full attention %.3f), same choice %.3f; %d bytes read; %.1f s\n",
		res.Mode, res.File, res.Budget, res.Tail, res.Examples, res.ContextToks, res.Accuracy, res.FullAccuracy, res.Agreement, res.ReadBytes, res.Seconds)
	if res.TailShort > 0 {
		fmt.Fprintf(stdout, "  %d of %d contexts were shorter than %d+2 tokens: each decoded all but its first 2\n", res.TailShort, res.Examples, res.Tail)
	}
	return nil
}
