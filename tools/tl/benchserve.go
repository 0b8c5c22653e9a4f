package main

// tl bench serve: LLMS against its four baselines on one engine and one
// flash I/O layer (engine/llms.RunExperiment over engine/trace).

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
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
// With --rounds above 1, "systems" holds the medians over the rounds
// (switch figures only) and "rounds" every round's full report.
type benchServeResult struct {
	Model          string                             `json:"model"`
	MaxContext     int                                `json:"max_context"`
	Pattern        string                             `json:"pattern"`
	Calls          int                                `json:"calls"`
	BudgetContexts float64                            `json:"budget_contexts"`
	BudgetBytes    int64                              `json:"budget_bytes"`
	ChunkSizes     []int                              `json:"chunk_sizes"`
	Systems        map[string]map[int]trace.Summary   `json:"systems"`
	Rounds         []map[string]map[int]trace.Summary `json:"rounds,omitempty"`
	// Anchors are the install times the relative limits are stated
	// against (spec §1c); absent when no --limits-rel was asked for.
	Anchors    *llms.LatencyAnchors      `json:"anchors,omitempty"`
	Held       []heldRow                 `json:"max_contexts_under_limit"`
	CostModels map[string]llms.CostModel `json:"cost_models"`
	// LoadAverage is /proc/loadavg before the first round and after the
	// last.
	LoadAverage [2]string `json:"load_average"`
}

// heldRow is the contexts each system held under one latency limit.
type heldRow struct {
	LimitMs float64 `json:"limit_ms"`
	// Rel is the limit's place between the anchors (0: pool install, 1:
	// full swap-in); absent for an absolute --limits-ms limit.
	Rel  *float64              `json:"rel,omitempty"`
	Held map[string]trace.Held `json:"held"`
}

// procLoadavg is /proc/loadavg's line ("" where it cannot be read).
func procLoadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// parseList parses a comma-separated list with parse, naming the flag in
// errors; an empty string is an empty list.
func parseList[T any](flagName, list string, parse func(string) (T, bool)) ([]T, error) {
	var out []T
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	for _, f := range strings.Split(list, ",") {
		v, ok := parse(strings.TrimSpace(f))
		if !ok {
			return nil, fmt.Errorf("--%s: %q", flagName, f)
		}
		out = append(out, v)
	}
	return out, nil
}

func positiveInt(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 1
}

// finiteAtLeast returns a parser of finite floats ≥ lo (> lo if strict).
func finiteAtLeast(lo float64, strict bool) func(string) (float64, bool) {
	return func(s string) (float64, bool) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < lo || (strict && v == lo) {
			return 0, false
		}
		return v, true
	}
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
	limitsRel := fs.String("limits-rel", "0,0.1,0.25,0.5,1,2", "latency limits for the contexts-held count, relative to two measured install times of a full-length context (spec §1c): 0 is its install from the memory pool, 1 its install from a whole-context swap file, values between interpolate and above 1 extrapolate; empty: measure no anchors")
	limits := fs.String("limits-ms", "", "absolute latency limits in ms for the contexts-held count, besides --limits-rel")
	anchorRounds := fs.Int("anchor-rounds", 3, "installs per anchor (their median is the anchor)")
	stateDir := fs.String("state-dir", "", "where the swap files go (default a temporary directory on disk; must support O_DIRECT)")
	seed := fs.Int64("seed", 7, "trace seed")
	chunkSizes := fs.String("chunk-sizes", "16", "chunk sizes in tokens to run every system at (the chunk-size curve, e.g. 4,8,16,32,64,128); systems at a size other than 16 are reported as system@size")
	costDir := fs.String("cost-dir", "", "a folder holding a planner cost model (cost-model.json, as tl serve keeps in STATE-DIR/kv) that every system and chunk size then uses instead of profiling the machine (the default profiles each size afresh)")
	rounds := fs.Int("rounds", 1, "repeat the whole comparison this many times, the chunk sizes in reverse order every other round (so load drift does not fall on one size); switch figures are then medians over the rounds")
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
	counts, err := parseList("contexts", *contexts, positiveInt)
	if err != nil || len(counts) == 0 {
		return fmt.Errorf("--contexts %q: want positive counts (%v)", *contexts, err)
	}
	var modes []llms.Mode
	for _, f := range strings.Split(*systems, ",") {
		modes = append(modes, llms.Mode(strings.TrimSpace(f)))
	}
	sizes, err := parseList("chunk-sizes", *chunkSizes, positiveInt)
	if err != nil || len(sizes) == 0 {
		return fmt.Errorf("--chunk-sizes %q: want positive counts (%v)", *chunkSizes, err)
	}
	rels, err := parseList("limits-rel", *limitsRel, finiteAtLeast(0, false))
	if err != nil {
		return err
	}
	lims, err := parseList("limits-ms", *limits, finiteAtLeast(0, true))
	if err != nil {
		return err
	}
	if *budget <= 0 || *calls < 1 || *maxCtx < 16 || *rounds < 1 || *anchorRounds < 1 {
		return fmt.Errorf("--budget-contexts %g, --calls %d, --ctx %d, --rounds %d, --anchor-rounds %d: want positive values (ctx ≥ 16)",
			*budget, *calls, *maxCtx, *rounds, *anchorRounds)
	}
	var cost *llms.CostModel
	if *costDir != "" {
		if cost, err = loadCost(*costDir); err != nil {
			return fmt.Errorf("--cost-dir: %w", err)
		}
		if cost == nil {
			return fmt.Errorf("--cost-dir %s: no %s there", *costDir, costFile)
		}
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
	unit, _ := llms.ContextBytesINT8(st, 16)
	res := benchServeResult{Model: *model, MaxContext: *maxCtx, Pattern: string(pat), Calls: *calls, BudgetContexts: *budget,
		BudgetBytes: int64(*budget * float64(unit)), ChunkSizes: sizes, Held: []heldRow{}}
	res.LoadAverage[0] = procLoadavg()
	var reps []*trace.Report
	for r := 0; r < *rounds; r++ {
		rep, costs, err := llms.RunExperiment(st, corpus, sd, llms.ExperimentConfig{Modes: modes, Contexts: counts, Calls: *calls, Pattern: pat, BudgetContexts: *budget, Seed: *seed, ChunkTokens: roundOrder(sizes, r), Cost: cost})
		if err != nil {
			return err
		}
		reps = append(reps, rep)
		if r == 0 {
			res.CostModels = costs
		}
	}
	rep := reps[0]
	if len(reps) > 1 {
		if rep, err = trace.MedianReport(reps); err != nil {
			return err
		}
		for _, r := range reps {
			res.Rounds = append(res.Rounds, r.Systems)
		}
	}
	res.Systems = rep.Systems
	if len(rels) > 0 {
		// The 16-token profile when one was made (nil profiles afresh).
		for _, m := range modes {
			if c, ok := res.CostModels[string(m)]; ok && cost == nil {
				cost = &c
			}
		}
		a, err := llms.MeasureAnchors(st, corpus, sd, 16, *anchorRounds, cost)
		if err != nil {
			return err
		}
		res.Anchors = &a
		for _, rel := range rels {
			l, err := a.Limit(rel)
			if err != nil {
				return err
			}
			res.Held = append(res.Held, heldRow{LimitMs: float64(l) / 1e6, Rel: &rel, Held: rep.HeldUnder(l, false)})
		}
	}
	for _, l := range lims {
		res.Held = append(res.Held, heldRow{LimitMs: l, Held: rep.HeldUnder(time.Duration(l*float64(time.Millisecond)), false)})
	}
	res.LoadAverage[1] = procLoadavg()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "model %s, max context %d, pattern %s, %d calls, budget %.2f INT8 contexts (%d bytes), %d round(s), load %s → %s\n",
		*model, *maxCtx, pat, *calls, *budget, res.BudgetBytes, *rounds, res.LoadAverage[0], res.LoadAverage[1])
	for k, r := range reps {
		if len(reps) > 1 {
			fmt.Fprintf(stdout, "round %d (chunk sizes in order %v):\n", k+1, roundOrder(sizes, k))
		}
		if err := r.WriteTable(stdout); err != nil {
			return err
		}
	}
	if len(sizes) > 1 {
		writeChunkCurve(stdout, reps, modes, counts, sizes)
	}
	if a := res.Anchors; a != nil {
		fmt.Fprintf(stdout, "anchors (full %d-token context, median of %d): pool install %.3f ms %v, swap-in %.3f ms %v (%d bytes read)\n",
			a.Tokens, *anchorRounds, float64(a.Pool)/1e6, a.PoolAll, float64(a.Swap)/1e6, a.SwapAll, a.SwapBytes)
	}
	writeHeld(stdout, res.Held, rep)
	for sys, c := range res.CostModels {
		fmt.Fprintf(stdout, "%s cost model: T_re = %.3g ms/chunk %+.3g ms; T_IO = %.3g ns/B + %.3g us/read\n", sys, c.ReA*1e3, c.ReB*1e3, c.IOC*1e9, c.IOE*1e6)
		break // one profile, shared
	}
	return nil
}

// roundOrder is the chunk-size order of round k (0-based).
func roundOrder(sizes []int, k int) []int {
	order := slices.Clone(sizes)
	if k%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// sizeLabel is RunExperiment's name for mode at chunks of C tokens.
func sizeLabel(mode llms.Mode, C int) string {
	if C == 16 {
		return string(mode)
	}
	return fmt.Sprintf("%s@%d", mode, C)
}

// writeChunkCurve prints the chunk-size curve: per mode and context count,
// the mean switch latency at each size, the median over the rounds with
// the smallest and largest round's value.
func writeChunkCurve(w io.Writer, reps []*trace.Report, modes []llms.Mode, counts, sizes []int) {
	fmt.Fprintf(w, "chunk-size curve: mean switch ms, median over %d round(s) [min–max]\n", len(reps))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"system", "ctx"}
	for _, C := range sizes {
		head = append(head, fmt.Sprintf("C=%d", C))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, mode := range modes {
		for _, n := range counts {
			row := []string{string(mode), fmt.Sprint(n)}
			for _, C := range sizes {
				var v []float64
				for _, r := range reps {
					v = append(v, r.Systems[sizeLabel(mode, C)][n].SwitchMsMean)
				}
				cell := fmt.Sprintf("%.2f", trace.Median(v))
				if len(v) > 1 {
					cell += fmt.Sprintf(" [%.2f–%.2f]", slices.Min(v), slices.Max(v))
				}
				row = append(row, cell)
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	}
	tw.Flush()
}

// writeHeld prints the contexts-held table: one row per limit, one column
// per system ("≥n": the largest count measured stayed within the limit).
func writeHeld(w io.Writer, rows []heldRow, rep *trace.Report) {
	if len(rows) == 0 {
		return
	}
	var systems []string
	for sys := range rep.Systems {
		systems = append(systems, sys)
	}
	slices.Sort(systems)
	fmt.Fprintln(w, "contexts held under a latency limit (mean switch; ≥n: the largest count measured was within it):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "limit ms\trel\t"+strings.Join(systems, "\t"))
	for _, r := range rows {
		rel := "-"
		if r.Rel != nil {
			rel = strconv.FormatFloat(*r.Rel, 'g', -1, 64)
		}
		row := []string{fmt.Sprintf("%.3f", r.LimitMs), rel}
		for _, sys := range systems {
			row = append(row, r.Held[sys].String())
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}
