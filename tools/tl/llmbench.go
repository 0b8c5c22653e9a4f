package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/memplan"
)

// isLLMBench reports whether bench's arguments ask for the language-model
// mode (a --model flag instead of a positional model and --shape).
func isLLMBench(args []string) bool {
	for _, a := range args {
		name := strings.TrimLeft(a, "-")
		if strings.HasPrefix(a, "-") && (name == "model" || strings.HasPrefix(name, "model=")) {
			return true
		}
	}
	return false
}

// startCPUProfile starts Go's CPU profiler writing to path; stop ends it
// and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// spread summarises repeated measurements.
type spread struct {
	Median float64 `json:"median"`
	Mean   float64 `json:"mean"`
	Stddev float64 `json:"stddev"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spreadOf(v []float64) spread {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	var sum, sq float64
	for _, x := range s {
		sum += x
	}
	mean := sum / float64(len(s))
	for _, x := range s {
		sq += (x - mean) * (x - mean)
	}
	sd := 0.0
	if len(s) > 1 {
		sd = math.Sqrt(sq / float64(len(s)-1))
	}
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Median: med, Mean: mean, Stddev: sd, Min: s[0], Max: s[len(s)-1]}
}

// llmTest is one row of the LLM benchmark: a prefill of Prompt tokens
// ("pp128"), or Gen decode steps after a prefill of Depth ("tg64 @ d128").
type llmTest struct {
	Name      string  `json:"name"`
	Prompt    int     `json:"prompt_tokens,omitempty"`
	Gen       int     `json:"gen_tokens,omitempty"`
	Depth     int     `json:"depth,omitempty"`
	Level     int     `json:"elastic_level,omitempty"`
	LoRA      bool    `json:"lora,omitempty"`
	TokPerSec spread  `json:"tok_per_sec"`
	Ms        spread  `json:"ms"`
	TTFTMs    *spread `json:"ttft_ms,omitempty"`
}

// llmBenchResult is what LLM bench prints; --json writes it as is.
type llmBenchResult struct {
	Model      string     `json:"model"`
	Path       string     `json:"path"`
	SizeBytes  int64      `json:"size_bytes"`
	Params     int64      `json:"params"`
	Device     deviceJSON `json:"device"`
	Precision  string     `json:"precision"`
	KV         string     `json:"kv"`
	Context    int        `json:"context"`
	Runs       int        `json:"runs"`
	Warmup     int        `json:"warmup"`
	Startup    startup    `json:"startup"`
	Tests      []llmTest  `json:"tests"`
	ActBytes   int64      `json:"activation_bytes_allocated"`
	PeakRSSMiB float64    `json:"peak_rss_mib"`
}

// runLLMBench is bench's language-model mode, in the manner of llama-bench:
// for each prompt length p, r repetitions of a prefill of p synthetic
// tokens and n decode steps after it.
func runLLMBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	model := fs.String("model", "", "the decoder's ONNX file")
	prompts := fs.String("p", "128", "prompt lengths to prefill, comma-separated")
	gen := fs.Int("n", 64, "decode steps after each prefill (0: prefill only)")
	runs := fs.Int("r", 5, "timed repetitions")
	warm := fs.Int("w", 1, "warm-up repetitions")
	ctxFlag := fs.Int("ctx", 0, "context the plan is sized for (default: the longest prompt plus -n)")
	seed := fs.Int64("seed", 1, "seed of the synthetic tokens")
	asJSON := fs.Bool("json", false, "write the result as JSON")
	cpuProf := fs.String("cpuprofile", "", "write a Go CPU profile of the timed repetitions to this file (go tool pprof reads it)")
	kvMode := kvFlag(fs)
	levelList := fs.String("level", "", "elastic model: levels (percent) to run, comma-separated, e.g. 20,50,100, and N+lora for level N with its adapters (needs --lora); repetitions interleave the levels (needs elastic.json beside the model)")
	loraList := loraFlag(fs)
	sf := addSessionFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tl bench --model m.onnx [-p 128,512] [-n 64] [-r 5] [-w 1] [--ctx N] [--kv inplace|explicit] [--device d] [--precision fp32|fp16] [--max sym=N] [--level 20,20+lora,100] [--lora DIR|auto] [--profile] [--cpuprofile FILE] [--json]")
		fs.PrintDefaults()
	}
	valued := map[string]bool{"model": true, "p": true, "n": true, "r": true, "w": true, "ctx": true, "seed": true, "kv": true, "level": true, "lora": true, "cpuprofile": true}
	for k := range sessionValued {
		valued[k] = true
	}
	flags, pos := splitArgs(args, valued)
	if err := fs.Parse(flags); err != nil {
		return err
	}
	if len(pos) > 0 {
		fs.Usage()
		return fmt.Errorf("give the model with --model only (got arguments %q)", pos)
	}
	var ps []int
	for _, f := range strings.Split(*prompts, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p < 1 {
			return fmt.Errorf("-p %q: want positive prompt lengths, comma-separated", *prompts)
		}
		ps = append(ps, p)
	}
	if *ctxFlag < 0 {
		return fmt.Errorf("--ctx %d: want a positive context length", *ctxFlag)
	}
	if *runs < 1 || *warm < 0 || *gen < 0 {
		return fmt.Errorf("-r %d, -w %d, -n %d: want at least one run and no negative counts", *runs, *warm, *gen)
	}
	maxP := 0
	for _, p := range ps {
		maxP = max(maxP, p)
	}
	ctx := *ctxFlag
	if ctx <= 0 {
		ctx = maxP + *gen
	}
	if maxP+*gen > ctx {
		return fmt.Errorf("-p %d with -n %d needs a context of %d, more than --ctx %d", maxP, *gen, maxP+*gen, ctx)
	}
	if lim, from, ok := derivedContext(*model); ok && int64(ctx) > lim {
		return fmt.Errorf("a context of %d (-p %d, -n %d, --ctx %d) is beyond this model's limit of %d tokens (node %s: %s)", ctx, maxP, *gen, *ctxFlag, lim, from.Node, from.Why)
	}
	opts, err := sf.options()
	if err != nil {
		return err
	}
	if opts.Max == nil {
		opts.Max = map[string]int64{}
	}
	if _, ok := opts.Max["seq"]; !ok {
		opts.Max["seq"] = int64(maxP)
	}
	res := llmBenchResult{Model: modelName(*model), Path: *model,
		Precision: opts.Precision.String(), Context: ctx, Runs: *runs, Warmup: *warm}
	if err := checkModel(*model, opts.Max, "seq"); err != nil {
		return err
	}
	if res.SizeBytes, res.Params, err = weightStats(*model); err != nil {
		return err
	}
	t0 := time.Now()
	st, err := openLLM(*model, opts, ctx, *kvMode, generate.Config{LastOnly: true})
	if err != nil {
		return err
	}
	defer st.Close()
	loadMs := ms(time.Since(t0))
	levels, em, err := benchLevels(st, *model, *levelList, loraDir(*model, *loraList))
	if err != nil {
		return err
	}
	res.Device = deviceOf(st.Session())
	res.KV = kvModeOf(st)
	rng := rand.New(rand.NewSource(*seed))
	ids := make([]int, maxP)
	for i := range ids {
		ids[i] = rng.Intn(st.Vocab())
	}
	// The first warm-up builds the kernels; a second one, timed, tells
	// that cost apart.
	first, built, cached, err := firstUse(st.Session(), func() error { _, _, _, err := llmRun(st, ids[:ps[0]], min(*gen, 1)); return err })
	if err != nil {
		return err
	}
	tw := time.Now()
	if _, _, _, err := llmRun(st, ids[:ps[0]], min(*gen, 1)); err != nil {
		return err
	}
	res.Startup = startupOf(st.Session(), loadMs, first, ms(time.Since(tw)), built, cached)
	for _, p := range ps {
		for _, lv := range levels {
			if err := setBenchLevel(em, lv); err != nil {
				return err
			}
			for i := 0; i < *warm; i++ {
				if _, _, _, err := llmRun(st, ids[:p], *gen); err != nil {
					return err
				}
			}
		}
	}
	if opts.Profile {
		st.Session().Profile() // drop the warm-up's records
	}
	if *cpuProf != "" {
		stop, err := startCPUProfile(*cpuProf)
		if err != nil {
			return err
		}
		defer stop()
	}
	for _, p := range ps {
		pre := make([][]time.Duration, len(levels))
		first := make([][]time.Duration, len(levels))
		dec := make([][]time.Duration, len(levels))
		// Levels interleave within each repetition, so that a change of
		// machine load falls on all of them alike.
		for i := 0; i < *runs; i++ {
			for li, lv := range levels {
				if err := setBenchLevel(em, lv); err != nil {
					return err
				}
				a, b, c, err := llmRun(st, ids[:p], *gen)
				if err != nil {
					return err
				}
				pre[li], first[li], dec[li] = append(pre[li], a), append(first[li], b), append(dec[li], c)
			}
		}
		for li, lv := range levels {
			suffix := ""
			if lv.pct > 0 {
				suffix = " L" + lv.String()
			}
			ttft := spreadOf(msList(first[li]))
			res.Tests = append(res.Tests, llmTest{Name: fmt.Sprintf("pp%d%s", p, suffix), Prompt: p, Level: lv.pct, LoRA: lv.lora,
				TokPerSec: spreadOf(rates(p, pre[li])), Ms: spreadOf(msList(pre[li])), TTFTMs: &ttft})
			if *gen > 0 {
				res.Tests = append(res.Tests, llmTest{Name: fmt.Sprintf("tg%d @ d%d%s", *gen, p, suffix), Gen: *gen, Depth: p, Level: lv.pct, LoRA: lv.lora,
					TokPerSec: spreadOf(rates(*gen, dec[li])), Ms: spreadOf(msList(dec[li]))})
			}
		}
	}
	if pl := st.Session().Plan(); pl != nil {
		res.ActBytes = pl.Allocated()
	}
	res.PeakRSSMiB = peakRSSMiB()
	if *asJSON {
		return writeJSON(stdout, res)
	}
	t := newTable("model", "size", "params", "backend", "test", "t/s", "ms/run").alignRight(1, 2, 5, 6)
	for _, tt := range res.Tests {
		t.add(res.Model, memplan.Bytes(res.SizeBytes), humanCount(res.Params), res.Device.Backend+" "+res.Precision, tt.Name,
			fmt.Sprintf("%.2f ± %.2f", tt.TokPerSec.Median, tt.TokPerSec.Stddev), fmt.Sprintf("%.2f", tt.Ms.Median))
	}
	t.write(stdout)
	fmt.Fprintf(stdout, "\nt/s: median ± standard deviation of %d runs after %d warm-up; tg runs from a prefilled context of d tokens\n", *runs, *warm)
	for _, tt := range res.Tests {
		if tt.TTFTMs != nil {
			fmt.Fprintf(stdout, "%s: time to first token %.2f ms (min %.2f, max %.2f)\n", tt.Name, tt.TTFTMs.Median, tt.TTFTMs.Min, tt.TTFTMs.Max)
		}
	}
	fmt.Fprintf(stdout, "memory: peak RSS %.0f MiB, activations %s (plan for %d tokens of context); KV cache: %s\n",
		res.PeakRSSMiB, memplan.Bytes(res.ActBytes), res.Context, res.KV)
	fmt.Fprintf(stdout, "device: %s; startup: %s\n", st.Session().Device(), res.Startup.line())
	if opts.Profile {
		rows, err := st.Session().Profile()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		printProfile(rows, *runs*len(ps))
	}
	return nil
}

// llmRun is one repetition: a prefill of ids, the first token (argmax),
// then gen decode steps each feeding back the argmax.
func llmRun(st llmStepper, ids []int, gen int) (prefill, firstToken, decode time.Duration, err error) {
	if err = st.Reset(); err != nil {
		return
	}
	t0 := time.Now()
	logits, err := st.Step(ids, countUp(0, len(ids)))
	prefill = time.Since(t0)
	if err != nil {
		return
	}
	tok := argmaxF32(logits)
	firstToken = time.Since(t0)
	t1 := time.Now()
	for i := 0; i < gen; i++ {
		if logits, err = st.Step([]int{tok}, []int{len(ids) + i}); err != nil {
			return
		}
		tok = argmaxF32(logits)
	}
	decode = time.Since(t1)
	return
}

func countUp(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func argmaxF32(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

func rates(tokens int, ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(tokens) / d.Seconds()
	}
	return out
}

func msList(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}

// modelName names a model after its file, or its directory when the file
// is the conventional model.onnx.
func modelName(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), ".onnx")
	if base == "model" {
		if dir := filepath.Base(filepath.Dir(path)); dir != "." && dir != "/" {
			return dir
		}
	}
	return base
}

// weightStats counts the model's initializer bytes and elements.
func weightStats(path string) (bytes, params int64, err error) {
	m, err := graph.Load(path)
	if err != nil {
		return 0, 0, err
	}
	defer m.Close()
	for _, v := range m.Graph.Initializers {
		if v.Const == nil {
			continue
		}
		bytes += int64(len(v.Const.Data))
	}
	return bytes, paramCount(m), nil
}

// humanCount prints 1250432 as 1.25 M.
func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f B", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f M", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.2f K", float64(n)/1e3)
	}
	return strconv.FormatInt(n, 10)
}
