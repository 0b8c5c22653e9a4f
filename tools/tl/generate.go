package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/elastic"
	"github.com/tlite/tlite/engine/elastic/slo"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/tokenizer"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/symshape/infer"
)

// statsOut receives generation statistics, so that stdout is only the
// text; tests replace it.
var statsOut io.Writer = os.Stderr

func init() {
	register(command{"generate", "generate text with a decoder model, streaming tokens", runGenerate})
	register(command{"perplexity", "score a text file with a decoder model (perplexity)", runPerplexity})
}

// llmFlags are the flags of the commands that open a decoder with a
// tokenizer.
type llmFlags struct {
	model, tokenizer *string
	ctx              *int
	kv               *string
	level            *int
	lora             *string
	sf               *sessionFlags
	// ctxFrom says where the context length came from, once opened.
	ctxFrom string
}

func addLLMFlags(fs *flag.FlagSet) *llmFlags {
	return &llmFlags{
		model:     fs.String("model", "", "the decoder's ONNX file (or give it as the first argument)"),
		tokenizer: fs.String("tokenizer", "", "tokenizer.json (default: the one next to the model)"),
		ctx:       fs.Int("ctx", 0, "context length the memory plan is sized for (default: config.json's max_context next to the model, else the model's own limit such as a learned position table, else 1024)"),
		kv:        kvFlag(fs),
		level:     levelFlag(fs),
		lora:      loraFlag(fs),
		sf:        addSessionFlags(fs),
	}
}

// kvFlag is the choice of KV cache shared by the language-model commands.
func kvFlag(fs *flag.FlagSet) *string {
	return fs.String("kv", "inplace", `KV cache: "inplace" (session-owned cache, new K/V written in place, no copies) or "explicit" (past inputs fed from present outputs, as exported) or "dynakv" (cache on flash, clusters retrieved per query: see tl perplexity --kv dynakv -h)`)
}

// llmValued lists the flags of addLLMFlags that take a value.
func llmValued(more ...string) map[string]bool {
	v := map[string]bool{"model": true, "tokenizer": true, "ctx": true, "kv": true, "level": true, "lora": true}
	for k := range sessionValued {
		v[k] = true
	}
	for _, k := range more {
		v[k] = true
	}
	return v
}

// modelPath takes the model from --model or the one positional argument.
func (f *llmFlags) modelPath(pos []string) (string, error) {
	switch {
	case *f.model != "" && len(pos) == 0:
		return *f.model, nil
	case *f.model == "" && len(pos) == 1:
		return pos[0], nil
	}
	return "", fmt.Errorf("want the model as --model m.onnx or one argument (got --model %q and %d arguments)", *f.model, len(pos))
}

// modelConfig is what tl reads from a config.json next to a model (the
// default model's, or a Hugging Face config).
type modelConfig struct {
	MaxContext int `json:"max_context"`
	MaxPos     int `json:"max_position_embeddings"`
	NPositions int `json:"n_positions"`
}

// contextFor is the context length for model and where it comes from:
// --ctx, else config.json's, else the limit derived from the model (a
// learned position table), else the engine's default maximum. A --ctx
// beyond the derived limit is refused; a config.json beyond it is capped.
func contextFor(model string, flagCtx int) (int, string, error) {
	lim, from, limited := derivedContext(model)
	limit := ""
	if limited {
		limit = fmt.Sprintf("derived from the model: %s <= %d at node %s", from.Expr, lim, from.Node)
		if from.Input != "" {
			// Positions 0..context-1 index a table of lim rows.
			limit = fmt.Sprintf("derived from the model: %s <= %d at node %s", from.Input, from.Max, from.Node)
		}
	}
	if flagCtx > 0 {
		if limited && int64(flagCtx) > lim {
			return 0, "", fmt.Errorf("--ctx %d is beyond this model's context limit of %d (node %s: %s)", flagCtx, lim, from.Node, from.Why)
		}
		return flagCtx, "--ctx", nil
	}
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(model), "config.json")); err == nil {
		var c modelConfig
		if json.Unmarshal(b, &c) == nil {
			for _, v := range []int{c.MaxContext, c.MaxPos, c.NPositions} {
				if v > 0 {
					if limited && int64(v) > lim {
						return int(lim), fmt.Sprintf("config.json says %d; %s", v, limit), nil
					}
					return v, "config.json", nil
				}
			}
		}
	}
	if limited {
		return int(lim), limit, nil
	}
	return engine.DefaultMax, "the default, no config.json and no limit derived from the model", nil
}

// derivedContext is the context limit engine.ContextLimit derives for the
// model at path (false if none, or if the model does not load: opening it
// reports that).
func derivedContext(path string) (int64, infer.Limit, bool) {
	m, err := graph.Load(path)
	if err != nil {
		return 0, infer.Limit{}, false
	}
	defer m.Close()
	v, l, ok, err := engine.ContextLimit(m)
	if err != nil {
		return 0, infer.Limit{}, false
	}
	return v, l, ok
}

// precision is the --precision flag as the engine names it.
func (f *llmFlags) precision() string {
	if o, err := f.sf.options(); err == nil {
		return o.Precision.String()
	}
	return *f.sf.precision
}

// open loads the tokenizer and opens the model as a stepper.
func (f *llmFlags) open(model string, cfg generate.Config) (llmStepper, *tokenizer.Tokenizer, error) {
	if _, err := os.Stat(model); err != nil {
		return nil, nil, fmt.Errorf("model: %w", err)
	}
	tp := *f.tokenizer
	if tp == "" {
		tp = filepath.Join(filepath.Dir(model), "tokenizer.json")
	}
	tok, err := tokenizer.Load(tp)
	if err != nil {
		if *f.tokenizer == "" {
			return nil, nil, fmt.Errorf("%w (give --tokenizer)", err)
		}
		return nil, nil, err
	}
	st, err := f.openStepper(model, 0, cfg)
	if err != nil {
		return nil, nil, err
	}
	if *f.level != 0 {
		if _, err := applyLevel(st, model, *f.level, loraDir(model, *f.lora)); err != nil {
			st.Close()
			return nil, nil, err
		}
	} else if *f.lora != "" {
		st.Close()
		return nil, nil, fmt.Errorf("--lora needs --level")
	}
	return st, tok, nil
}

// openStepper opens the model with the plan sized for the context (and at
// most maxSeq tokens per step when maxSeq > 0).
func (f *llmFlags) openStepper(model string, maxSeq int, cfg generate.Config) (llmStepper, error) {
	opts, err := f.sf.options()
	if err != nil {
		return nil, err
	}
	if *f.ctx < 0 {
		return nil, fmt.Errorf("--ctx %d: want a positive context length (or leave it out for config.json's)", *f.ctx)
	}
	if err := checkModel(model, opts.Max); err != nil {
		return nil, err
	}
	ctx, from, err := contextFor(model, *f.ctx)
	if err != nil {
		return nil, err
	}
	f.ctxFrom = from
	if maxSeq > 0 {
		if opts.Max == nil {
			opts.Max = map[string]int64{}
		}
		if _, ok := opts.Max["seq"]; !ok {
			opts.Max["seq"] = int64(maxSeq)
		}
	}
	st, err := openLLM(model, opts, ctx, *f.kv, cfg)
	var me *engine.MemoryError
	if errors.As(err, &me) {
		return nil, fmt.Errorf("%w\n(the plan is sized for a context of %d tokens, from %s: give a smaller --ctx)", err, ctx, from)
	}
	return st, err
}

// llmStepper is a decoder stepper with its session, whichever KV mode.
type llmStepper interface {
	generate.Stepper
	Session() *engine.Session
	Close() error
}

// openLLM opens a decoder with the plan sized for ctx tokens of context and
// the KV cache mode asked for.
func openLLM(model string, opts engine.Options, ctx int, mode string, cfg generate.Config) (llmStepper, error) {
	if elastic.Exists(model) {
		// --level binds each product by its weight (elastic.Bind), which
		// needs the products apart.
		opts.NoJoin = true
	}
	switch mode {
	case "explicit":
		st, err := generate.OpenExplicit(model, opts, ctx, cfg)
		return st, cliError(err)
	case "inplace", "":
	default:
		return nil, fmt.Errorf("--kv %q: want inplace or explicit", mode)
	}
	m, err := graph.Load(model)
	if err != nil {
		return nil, err
	}
	if !hasInput(m, "input_ids") {
		m.Close()
		return nil, fmt.Errorf("%s has no input_ids input, so it is not a decoder tl can step: for other models use tl bench %s --shape name=1x3x224x224 (or tl run); to export a decoder see models/README.md", model, model)
	}
	past := hasPast(m)
	m.Close()
	d, err := generate.Open(model, opts, ctx, cfg)
	if err != nil {
		if !past && !engine.IsNoDevice(err) {
			return nil, fmt.Errorf("%w\n%s takes no input named like past_key_values: was it exported without a KV cache? tl steps a decoder token by token and needs past key/value inputs and present outputs (see \"Exporting your own model for tlite\" in models/README.md and models/export/llama.py)", err, model)
		}
		return nil, cliError(err)
	}
	if d.Mode != generate.KVInPlace {
		fmt.Fprintf(statsOut, "tl: in-place KV cache not possible, using --kv explicit: %s\n", d.Fallback)
	}
	for _, line := range d.LayerFallbacks {
		fmt.Fprintf(statsOut, "tl: %s\n", line)
	}
	return d, nil
}

// kvModeOf is the KV cache mode st runs in.
func kvModeOf(st llmStepper) string {
	if d, ok := st.(*generate.Decoder); ok {
		return d.Mode
	}
	return generate.KVExplicit
}

// generateResult is what generate --json writes: the prompt, the text and
// the statistics.
type generateResult struct {
	Model        string            `json:"model"`
	Device       deviceJSON        `json:"device"`
	Precision    string            `json:"precision"`
	KV           string            `json:"kv"`
	Context      int               `json:"context"`
	ContextFrom  string            `json:"context_from"`
	Prompt       string            `json:"prompt,omitempty"`
	PromptIDs    []int             `json:"prompt_ids"`
	Text         string            `json:"text"`
	TokenIDs     []int             `json:"token_ids"`
	StopReason   string            `json:"stop_reason"`
	SamplingJSON samplingJSON      `json:"sampling"`
	Startup      startup           `json:"startup"`
	Stats        generateStatsJSON `json:"stats"`
	Warnings     []string          `json:"warnings,omitempty"`
	SLO          *sloJSON          `json:"slo,omitempty"`
}

type samplingJSON struct {
	Temperature       float64 `json:"temperature"`
	TopK              int     `json:"top_k"`
	TopP              float64 `json:"top_p"`
	RepetitionPenalty float64 `json:"repetition_penalty"`
	Seed              int64   `json:"seed"`
	Greedy            bool    `json:"greedy"`
}

type generateStatsJSON struct {
	PromptTokens     int     `json:"prompt_tokens"`
	PrefillMs        float64 `json:"prefill_ms"`
	PrefillTokPerSec float64 `json:"prefill_tok_per_sec"`
	TTFTMs           float64 `json:"ttft_ms"`
	NewTokens        int     `json:"new_tokens"`
	DecodeSteps      int     `json:"decode_steps"`
	DecodeMs         float64 `json:"decode_ms"`
	DecodeTokPerSec  float64 `json:"decode_tok_per_sec"`
}

// parseTokens reads "1,2,3".
func parseTokens(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("--tokens %q: want token ids (non-negative integers) separated by commas", s)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--tokens %q: no token ids", s)
	}
	return out, nil
}

// samplingWarnings says when sampling flags were given that greedy
// decoding ignores, and what to add.
func samplingWarnings(set map[string]bool, temp float64) []string {
	if temp != 0 {
		return nil
	}
	var given []string
	for _, f := range []string{"top-k", "top-p", "seed"} {
		if set[f] {
			given = append(given, "--"+f)
		}
	}
	if len(given) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s given, but --temperature is 0 (greedy), which ignores them: add --temperature 0.8 (for example) to sample", strings.Join(given, ", "))}
}

func runGenerate(args []string) error {
	if wantsDynaKV(args) {
		return runDynaKV("generate", args)
	}
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	lf := addLLMFlags(fs)
	prompt := fs.String("prompt", "", `the prompt ("-": read it from stdin)`)
	tokens := fs.String("tokens", "", "the prompt as token ids, e.g. 1,2,3 (used as given: no BOS is added)")
	n := fs.Int("n", 128, "tokens to generate at most (0: until a stop or the context is full)")
	temp := fs.Float64("temperature", 0, "sampling temperature; 0 is greedy (argmax), and then --top-k, --top-p and --seed do nothing")
	topK := fs.Int("top-k", 0, "keep the k most likely tokens (0: all)")
	topP := fs.Float64("top-p", 0, "keep the most likely tokens up to this probability (0 or 1: all)")
	rep := fs.Float64("repeat-penalty", 1, "repetition penalty (1: off)")
	seed := fs.Int64("seed", 0, "sampling seed (default: a random one, printed with the statistics so the run can be repeated)")
	var stops multiFlag
	fs.Var(&stops, "stop", "stop when the text contains this string (repeat for several)")
	ignoreEOS := fs.Bool("ignore-eos", false, "do not stop at the end-of-sequence token")
	noBOS := fs.Bool("no-bos", false, "do not put the BOS token before the prompt")
	special := fs.Bool("special", false, "print special tokens")
	asJSON := fs.Bool("json", false, "write the prompt, the text and the statistics as one JSON object instead of streaming")
	sf := addSLOFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: tl generate --model m.onnx [--tokenizer tokenizer.json] --prompt "..." | --tokens 1,2,3 [-n 128] [--temperature 0] [--top-k 0] [--top-p 0] [--repeat-penalty 1] [--seed N] [--stop STR] [--ctx N] [--json] [--device d] [--precision fp32|fp16] [--max sym=N] [--profile] [--level P | --slo-ttft F --slo-tpot F [--tlm DIR] [--slo-profile FILE]]`)
		fmt.Fprintln(fs.Output(), "The text streams to stdout; timings go to stderr. Sampling: give --temperature (e.g. 0.8) with --top-k/--top-p.")
		fs.PrintDefaults()
	}
	flags, pos := splitArgs(args, llmValued("prompt", "tokens", "n", "temperature", "top-k", "top-p", "repeat-penalty", "seed", "stop",
		"slo-ttft", "slo-tpot", "tlm", "slo-profile", "slo-keep-tail"))
	if err := fs.Parse(flags); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if sf.set() && set["level"] {
		return fmt.Errorf("give --level or --slo-ttft/--slo-tpot, not both: under an SLO the TLM picks the level")
	}
	if sf.set() && (*sf.ttft == 0 || *sf.tpot == 0) {
		return fmt.Errorf("give both --slo-ttft and --slo-tpot")
	}
	model, err := lf.modelPath(pos)
	if err != nil {
		fs.Usage()
		return err
	}
	if *lf.ctx < 0 {
		return fmt.Errorf("--ctx %d: want a positive context length (or leave it out for config.json's)", *lf.ctx)
	}
	if *n < 0 {
		return fmt.Errorf("-n %d: want 0 (until a stop or a full context) or more", *n)
	}
	text := *prompt
	if text == "-" {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return fmt.Errorf("reading the prompt from stdin: %w", err)
		}
		text = string(b)
	}
	var ids []int
	if *tokens != "" {
		if set["prompt"] {
			return fmt.Errorf("give the prompt as --prompt or as --tokens, not both")
		}
		if ids, err = parseTokens(*tokens); err != nil {
			return err
		}
	}
	warnings := samplingWarnings(set, *temp)
	if *temp > 0 && !set["seed"] {
		*seed = time.Now().UnixNano() & (1<<31 - 1) // printed below so the run can be repeated
	}
	sampling := generate.Sampling{Temperature: *temp, TopK: *topK, TopP: *topP, RepetitionPenalty: *rep, Seed: *seed}
	if err := sampling.Validate(); err != nil {
		return err
	}
	if !*asJSON {
		for _, w := range warnings {
			fmt.Fprintf(statsOut, "tl generate: warning: %s\n", w)
		}
	}
	t0 := time.Now()
	st, tok, err := lf.open(model, generate.Config{LastOnly: true})
	if err != nil {
		return err
	}
	defer st.Close()
	loadMs := ms(time.Since(t0))
	g := generate.New(st, tok)
	req := generate.Request{Prompt: text, Tokens: ids, NoBOS: *noBOS, MaxNewTokens: *n, IgnoreEOS: *ignoreEOS, StopStrings: stops, Special: *special,
		Sampling: sampling}
	promptIDs, err := g.Prompt(req)
	if err != nil {
		return err
	}
	for _, id := range promptIDs {
		if id >= st.Vocab() {
			return fmt.Errorf("--tokens: id %d is outside the vocabulary of %d", id, st.Vocab())
		}
	}
	// The context holds the prompt and every generated token but the last.
	ctxLen := st.MaxContext()
	if room := ctxLen + 1 - len(promptIDs); room < 1 {
		return fmt.Errorf("the prompt is %d tokens, more than the context of %d: raise --ctx to at least %d", len(promptIDs), ctxLen, len(promptIDs))
	} else if *n > room {
		msg := fmt.Sprintf("the prompt is %d tokens and the context %d, so at most %d of -n %d tokens fit", len(promptIDs), ctxLen, room, *n)
		if strings.Contains(lf.ctxFrom, "derived from the model") {
			msg += fmt.Sprintf(" (the context is this model's own limit, %s)", lf.ctxFrom)
			if set["n"] {
				return fmt.Errorf("%s: lower -n", msg)
			}
		} else if set["ctx"] || set["n"] {
			return fmt.Errorf("%s: raise --ctx to %d or lower -n", msg, len(promptIDs)+*n-1)
		}
		warnings = append(warnings, msg)
		if !*asJSON {
			fmt.Fprintf(statsOut, "tl generate: warning: %s (raise --ctx)\n", msg)
		}
	}
	// Warm-up: a small step, twice, builds (or loads from the cache) the
	// kernels prefill and decode use, so that compilation is reported as
	// such and not hidden in the time to first token.
	var sess *engine.Session
	if p, ok := st.(interface{ Session() *engine.Session }); ok {
		sess = p.Session()
	}
	var first, second float64
	var built, cached int64
	if sess != nil {
		first, built, cached, err = firstUse(sess, func() error { return warmUp(st) })
	} else {
		tw := time.Now()
		err = warmUp(st)
		first = ms(time.Since(tw))
	}
	if err != nil {
		return err
	}
	tw := time.Now()
	if err := warmUp(st); err != nil {
		return err
	}
	second = ms(time.Since(tw))
	var sloOut *sloJSON
	if sf.set() {
		opts, err := lf.sf.options()
		if err != nil {
			return err
		}
		srv, err := sf.open(st, model, opts)
		if err != nil {
			return err
		}
		defer srv.t.Close()
		if *sf.tail >= len(promptIDs) {
			return fmt.Errorf("--slo-keep-tail %d: the prompt is only %d tokens", *sf.tail, len(promptIDs))
		}
		o := slo.SLO{TTFT: *sf.ttft, TPOT: *sf.tpot}
		run, err := srv.decide(promptIDs, *sf.tail, o, "tlm", nil)
		if err != nil {
			return err
		}
		bt, bp, err := srv.prof.Budget(slo.Request{N: len(promptIDs), Tail: *sf.tail, SLO: o})
		if err != nil {
			return err
		}
		sloOut = &sloJSON{TTFT: o.TTFT, TPOT: o.TPOT, HeadModel: run.HeadModel, HeadPrompt: run.HeadPrmpt, Model: run.Decision.Model,
			Prompt: run.Decision.Prompt, FellBack: run.FellBack, PromptTokens: len(promptIDs), KeptTokens: len(run.Prompt),
			TLMMs: run.TLMMs, SwitchMs: run.SwitchMs, PredictedTTFTMs: run.Decision.TTFTMs, PredictedTPOTMs: run.Decision.TPOTMs,
			BudgetTTFTMs: bt, BudgetTPOTMs: bp}
		req.Tokens, req.NoBOS, req.Prompt = run.Prompt, true, ""
		promptIDs = run.Prompt
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	onToken := func(s string) error {
		_, err := io.WriteString(stdout, s)
		return err
	}
	if *asJSON {
		onToken = nil
	}
	res, err := g.Generate(ctx, req, onToken)
	if !*asJSON {
		fmt.Fprintln(stdout)
	}
	if err != nil {
		return err
	}
	out := generateResult{Model: model, Precision: lf.precision(), KV: kvModeOf(st), Context: ctxLen, ContextFrom: lf.ctxFrom, Prompt: text, PromptIDs: promptIDs,
		Text: res.Text, TokenIDs: res.Tokens, StopReason: string(res.Reason), Warnings: warnings,
		SamplingJSON: samplingJSON{Temperature: *temp, TopK: *topK, TopP: *topP, RepetitionPenalty: *rep, Seed: *seed, Greedy: *temp == 0},
		Stats: generateStatsJSON{PromptTokens: res.PromptTokens, PrefillMs: ms(res.PrefillTime), PrefillTokPerSec: res.PrefillTokPerSec,
			TTFTMs: ms(res.FirstTokenTime), NewTokens: res.NewTokens, DecodeSteps: res.DecodeSteps, DecodeMs: ms(res.DecodeTime), DecodeTokPerSec: res.DecodeTokPerSec}}
	if ids != nil {
		out.Prompt = ""
	}
	if sloOut != nil {
		sloOut.PrefillMs = ms(res.PrefillTime)
		sloOut.TTFTMs = sloOut.TLMMs + sloOut.SwitchMs + ms(res.FirstTokenTime)
		if res.DecodeSteps > 0 {
			sloOut.TPOTMs = ms(res.DecodeTime) / float64(res.DecodeSteps)
		}
		out.SLO = sloOut
	}
	if sess != nil {
		out.Device = deviceOf(sess)
		out.Startup = startupOf(sess, loadMs, first, second, built, cached)
	} else {
		out.Startup = startup{LoadMs: loadMs, FirstRunMs: first}
	}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(statsOut, "\nstartup: %s; warm-up step after it %.1f ms\n", out.Startup.line(), second)
	fmt.Fprintf(statsOut, "context: %d tokens (%s)\n", ctxLen, lf.ctxFrom)
	fmt.Fprintf(statsOut, "prompt %d tokens: prefill %.1f ms (%.1f tok/s), time to first token %.1f ms\n",
		res.PromptTokens, ms(res.PrefillTime), res.PrefillTokPerSec, ms(res.FirstTokenTime))
	if sloOut != nil {
		sloOut.print()
	}
	fmt.Fprintf(statsOut, "generated %d tokens (%s): decode %.1f ms for %d steps (%.1f tok/s), KV cache %s\n",
		res.NewTokens, res.Reason, ms(res.DecodeTime), res.DecodeSteps, res.DecodeTokPerSec, out.KV)
	if *temp > 0 {
		fmt.Fprintf(statsOut, "sampling: temperature %g, top-k %d, top-p %g, seed %d (--seed %d repeats this run)\n", *temp, *topK, *topP, *seed, *seed)
	} else {
		fmt.Fprintln(statsOut, "sampling: greedy (--temperature 0)")
	}
	if *lf.sf.profile {
		rows, err := st.Session().Profile()
		if err != nil {
			return err
		}
		fmt.Fprintln(statsOut)
		printProfile(rows, 1)
	}
	return nil
}

// warmUp runs a two-token prefill and a decode step, then empties the
// sequence.
func warmUp(st generate.Stepper) error {
	if st.MaxContext() < 3 {
		return st.Reset()
	}
	if _, err := st.Step([]int{0, 0}, []int{0, 1}); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if _, err := st.Step([]int{0}, []int{2}); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if p, ok := st.(interface {
		Session() *engine.Session
	}); ok {
		if s := p.Session(); s != nil {
			s.Profile() // drop the warm-up's records (an error: profiling is off)
		}
	}
	return st.Reset()
}

// perplexityResult is what perplexity prints; --json writes it as is.
type perplexityResult struct {
	Model      string     `json:"model"`
	Device     deviceJSON `json:"device"`
	KV         string     `json:"kv"`
	Text       string     `json:"text"`
	Documents  int        `json:"documents"`
	Predicted  int        `json:"predicted_tokens"`
	Loss       float64    `json:"loss"`
	Perplexity float64    `json:"perplexity"`
	// Bytes is the UTF-8 length of the documents scored (separators not
	// counted); BitsPerByte is the summed NLL in bits over it.
	Bytes       int     `json:"bytes"`
	BitsPerByte float64 `json:"bits_per_byte"`
	Window      int     `json:"window"`
	Context     int     `json:"context"`
	// ContextFrom says where the context length came from.
	ContextFrom string           `json:"context_from"`
	Buckets     []positionBucket `json:"buckets,omitempty"`
	Seconds     float64          `json:"seconds"`
}

// positionBucket is the loss of the predictions at positions [From, To)
// of their window.
type positionBucket struct {
	From      int     `json:"from"`
	To        int     `json:"to"`
	Predicted int     `json:"predicted_tokens"`
	Loss      float64 `json:"loss"`
}

// parseEdges reads --buckets: ascending positions separated by commas.
func parseEdges(s string) (*generate.Buckets, error) {
	var edges []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--buckets %q: %q is not an integer", s, f)
		}
		edges = append(edges, v)
	}
	b, err := generate.NewBuckets(edges...)
	if err != nil {
		return nil, fmt.Errorf("--buckets %q: %w", s, err)
	}
	return b, nil
}

func runPerplexity(args []string) error {
	if wantsDynaKV(args) {
		return runDynaKV("perplexity", args)
	}
	fs := flag.NewFlagSet("perplexity", flag.ContinueOnError)
	lf := addLLMFlags(fs)
	textPath := fs.String("text", "", "the text file to score")
	sep := fs.String("sep", "", `document separator, with Go escapes (e.g. "\n%\n"); each document is scored alone (default: the whole file is one document)`)
	window := fs.Int("window", 0, "score in windows of this many tokens, each from an empty context (default: the context length)")
	bos := fs.Bool("bos", true, "put the BOS token before each document")
	noBOS := fs.Bool("no-bos", false, "do not put the BOS token before each document (as generate's --no-bos; same as --bos=false)")
	eos := fs.Bool("eos", false, "put the EOS token after each document (and score it)")
	buckets := fs.String("buckets", "", `also report the loss by position in the window, in buckets with these edges (e.g. "0,128,512,2048")`)
	asJSON := fs.Bool("json", false, "write the result as JSON")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: tl perplexity --model m.onnx --text file.txt [--sep "\n%\n"] [--window N] [--no-bos] [--eos] [--buckets 0,128,512,2048] [--ctx N] [--device d] [--precision fp32|fp16] [--json]`)
		fmt.Fprintln(fs.Output(), "Bits per byte are the summed NLL in bits over the UTF-8 bytes of the documents scored.")
		fs.PrintDefaults()
	}
	flags, pos := splitArgs(args, llmValued("text", "sep", "window", "buckets"))
	if err := fs.Parse(flags); err != nil {
		return err
	}
	model, err := lf.modelPath(pos)
	if err != nil {
		fs.Usage()
		return err
	}
	if *textPath == "" {
		fs.Usage()
		return fmt.Errorf("give the text to score with --text")
	}
	if *noBOS {
		*bos = false
	}
	raw, err := os.ReadFile(*textPath)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(raw)) == "" {
		return fmt.Errorf("%s has no text to score: give a file with at least two tokens of text", *textPath)
	}
	docs := []string{string(raw)}
	if *sep != "" {
		s, err := strconv.Unquote(`"` + strings.ReplaceAll(*sep, `"`, `\"`) + `"`)
		if err != nil {
			return fmt.Errorf("--sep %q: %w", *sep, err)
		}
		docs = strings.Split(string(raw), s)
	}
	var bk *generate.Buckets
	if *buckets != "" {
		if bk, err = parseEdges(*buckets); err != nil {
			return err
		}
	}
	st, tok, err := lf.open(model, generate.Config{})
	if err != nil {
		return err
	}
	defer st.Close()
	eosID := tok.Special().EOS
	if *eos && eosID < 0 {
		return fmt.Errorf("--eos: the tokenizer has no EOS token")
	}
	addBOS := *bos && tok.Special().BOS >= 0
	t0 := time.Now()
	var total generate.Eval
	nBytes := 0
	for i, d := range docs {
		nBytes += len(d)
		ids, err := tok.Encode(d, tokenizer.EncodeOptions{AddBOS: addBOS})
		if err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		if *eos {
			ids = append(ids, eosID)
		}
		ev, err := generate.PerplexityBuckets(st, ids, *window, bk)
		if err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		total = total.Add(ev)
	}
	w := *window
	if w <= 0 || w > st.MaxContext() {
		w = st.MaxContext()
	}
	if total.Predicted == 0 {
		return fmt.Errorf("%s: no token was predicted (each document needs at least two tokens); perplexity is undefined", *textPath)
	}
	res := perplexityResult{Model: model, Device: deviceOf(st.Session()), KV: kvModeOf(st), Text: *textPath, Documents: len(docs), Predicted: total.Predicted,
		Loss: total.Loss(), Perplexity: total.Perplexity(), Bytes: nBytes, BitsPerByte: total.BitsPerByte(nBytes),
		Window: w, Context: st.MaxContext(), ContextFrom: lf.ctxFrom, Seconds: time.Since(t0).Seconds()}
	if bk != nil {
		for i, ev := range bk.Evals {
			res.Buckets = append(res.Buckets, positionBucket{From: bk.Edges[i], To: bk.Edges[i+1], Predicted: ev.Predicted, Loss: ev.Loss()})
		}
	}
	if *asJSON {
		if bk != nil {
			// JSON has no NaN: an empty bucket's loss is written as 0
			// beside its zero count.
			for i := range res.Buckets {
				if res.Buckets[i].Predicted == 0 {
					res.Buckets[i].Loss = 0
				}
			}
		}
		return writeJSON(stdout, res)
	}
	fmt.Fprintf(stdout, "%s on %s: %s, %d predicted tokens, loss %.4f, perplexity %.4f, %.4f bits per byte over %d bytes (window %d, KV %s, %.1f s; context %d: %s)\n",
		res.Model, res.Text, plural(res.Documents, "document"), res.Predicted, res.Loss, res.Perplexity, res.BitsPerByte, res.Bytes, res.Window, res.KV, res.Seconds, res.Context, res.ContextFrom)
	if len(res.Buckets) > 0 {
		tb := newTable("positions", "predicted", "loss", "perplexity").alignRight(1, 2, 3)
		for _, b := range res.Buckets {
			tb.add(fmt.Sprintf("%d-%d", b.From, b.To), b.Predicted, fmt.Sprintf("%.4f", b.Loss), fmt.Sprintf("%.2f", math.Exp(b.Loss)))
		}
		tb.write(stdout)
	}
	return nil
}

func hasInput(m *graph.Model, name string) bool {
	for _, v := range m.Graph.Inputs {
		if v.Name == name {
			return true
		}
	}
	return false
}

// plural writes "1 document", "2 documents".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// hasPast reports whether the model takes past key/values (an input
// named like past_key_values).
func hasPast(m *graph.Model) bool {
	for _, v := range m.Graph.Inputs {
		if strings.Contains(strings.ToLower(v.Name), "past") {
			return true
		}
	}
	return false
}
