package main

// tl bench serve: LLMS against its four baselines on one engine and one
// flash I/O layer (engine/llms.RunExperiment over engine/trace).

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/llms"
	"github.com/tlite/tlite/engine/tokenizer"
	"github.com/tlite/tlite/engine/trace"
)

// init routes "tl bench serve ..." to runBenchServe by wrapping the bench
// command registered in bench.go (files initialise in name order, so it is
// registered by now), leaving bench.go untouched.
func init() {
	for i := range commands {
		if commands[i].name != "bench" {
			continue
		}
		inner := commands[i].run
		commands[i].run = func(args []string) error {
			if len(args) > 0 && args[0] == "serve" {
				return runBenchServe(args[1:])
			}
			return inner(args)
		}
	}
}

// benchServeResult is --json's output: the trace report ({"systems":
// {"llms": {"4": {switch_ms_mean, switch_ms_p95, ...}}}}) with the setup.
type benchServeResult struct {
	Model          string                           `json:"model"`
	MaxContext     int                              `json:"max_context"`
	Pattern        string                           `json:"pattern"`
	Calls          int                              `json:"calls"`
	BudgetContexts float64                          `json:"budget_contexts"`
	BudgetBytes    int64                            `json:"budget_bytes"`
	Systems        map[string]map[int]trace.Summary `json:"systems"`
	MaxContexts    map[string]map[string]int        `json:"max_contexts_under_limit_ms"`
	CostModels     map[string]llms.CostModel        `json:"cost_models"`
	LoadAverage    string                           `json:"load_average"`
}

func runBenchServe(args []string) error {
	fs := flag.NewFlagSet("bench serve", flag.ContinueOnError)
	model := fs.String("model", "", "decoder model (ONNX, tokenizer.json beside it)")
	contexts := fs.String("contexts", "2,4,8,16", "context counts to replay")
	budget := fs.Float64("budget-contexts", 1, "memory budget in full-length INT8 contexts")
	pattern := fs.String("pattern", "markov", "random, markov or gaussian")
	calls := fs.Int("calls", 40, "calls per trace")
	maxCtx := fs.Int("ctx", 1024, "maximum context (cache slots)")
	text := fs.String("text", "", "corpus the calls' tokens come from (default heldout.txt beside the model)")
	systems := fs.String("systems", "llms,lmk,swap,vllm_s,vllm_sq", "systems to compare (also the ablations llms_nolife, llms_notol, llms_nopipe)")
	limits := fs.String("limits-ms", "10,25,50,100,250", "latency limits for the contexts-held count")
	stateDir := fs.String("state-dir", "", "where the swap files go (default a temporary directory on disk; must support O_DIRECT)")
	seed := fs.Int64("seed", 7, "trace seed")
	chunkSizes := fs.String("chunk-sizes", "16", "chunk sizes in tokens to run every system at (the chunk-size curve, e.g. 4,8,16,32,64); systems at a size other than 16 are reported as system@size")
	asJSON := fs.Bool("json", false, "write JSON")
	sf := addSessionFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" {
		return fmt.Errorf("--model is required")
	}
	pat, err := trace.ParsePattern(*pattern)
	if err != nil {
		return err
	}
	var counts []int
	for _, f := range strings.Split(*contexts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("--contexts: %q is not a positive count", f)
		}
		counts = append(counts, n)
	}
	var modes []llms.Mode
	for _, f := range strings.Split(*systems, ",") {
		modes = append(modes, llms.Mode(strings.TrimSpace(f)))
	}
	var sizes []int
	for _, f := range strings.Split(*chunkSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("--chunk-sizes: %q is not a positive count", f)
		}
		sizes = append(sizes, n)
	}
	var lims []float64
	for _, f := range strings.Split(*limits, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("--limits-ms: %q", f)
		}
		lims = append(lims, v)
	}
	if *budget <= 0 || *calls < 1 || *maxCtx < 16 {
		return fmt.Errorf("--budget-contexts %g, --calls %d, --ctx %d: want positive values (ctx ≥ 16)", *budget, *calls, *maxCtx)
	}
	opts, err := sf.options()
	if err != nil {
		return err
	}
	opts.LastLogits = true
	dir := filepath.Dir(*model)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return err
	}
	if *text == "" {
		*text = filepath.Join(dir, "heldout.txt")
	}
	raw, err := os.ReadFile(*text)
	if err != nil {
		return err
	}
	corpus, err := tok.Encode(string(raw), tokenizer.EncodeOptions{})
	if err != nil {
		return err
	}
	st, err := kv.Open(*model, opts, kv.Config{MaxContext: *maxCtx, AttentionStats: true})
	if err != nil {
		return err
	}
	defer st.Session().Close()
	sd := *stateDir
	if sd == "" {
		// Beside the model, not /tmp: O_DIRECT needs a disk file system.
		if sd, err = os.MkdirTemp(".", ".tl-bench-serve-"); err != nil {
			return err
		}
		defer os.RemoveAll(sd)
	}
	rep, costs, err := llms.RunExperiment(st, corpus, sd, llms.ExperimentConfig{Modes: modes, Contexts: counts, Calls: *calls, Pattern: pat, BudgetContexts: *budget, Seed: *seed, ChunkTokens: sizes})
	if err != nil {
		return err
	}
	unit, _ := llms.ContextBytesINT8(st, 16)
	res := benchServeResult{Model: *model, MaxContext: *maxCtx, Pattern: string(pat), Calls: *calls, BudgetContexts: *budget,
		BudgetBytes: int64(*budget * float64(unit)), Systems: rep.Systems, MaxContexts: map[string]map[string]int{}, CostModels: costs}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.LoadAverage = strings.TrimSpace(string(b))
	}
	for _, l := range lims {
		res.MaxContexts[strconv.FormatFloat(l, 'g', -1, 64)] = rep.MaxContexts(time.Duration(l*float64(time.Millisecond)), false)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Printf("model %s, max context %d, pattern %s, %d calls, budget %.2f INT8 contexts (%d bytes), load %s\n", *model, *maxCtx, pat, *calls, *budget, res.BudgetBytes, res.LoadAverage)
	if err := rep.WriteTable(os.Stdout); err != nil {
		return err
	}
	for _, l := range lims {
		fmt.Printf("contexts held under %g ms (mean switch): %v\n", l, res.MaxContexts[strconv.FormatFloat(l, 'g', -1, 64)])
	}
	for sys, c := range costs {
		fmt.Printf("%s cost model: T_re = %.3g ms/chunk %+.3g ms; T_IO = %.3g ns/B + %.3g us/read\n", sys, c.ReA*1e3, c.ReB*1e3, c.IOC*1e9, c.IOE*1e6)
		break // one profile, shared
	}
	return nil
}
