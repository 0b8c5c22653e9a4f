package main

import (
	"context"
	"encoding/json"
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
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/models/tokenizer"
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
	sf               *sessionFlags
}

func addLLMFlags(fs *flag.FlagSet) *llmFlags {
	return &llmFlags{
		model:     fs.String("model", "", "the decoder's ONNX file (or give it as the first argument)"),
		tokenizer: fs.String("tokenizer", "", "tokenizer.json (default: the one next to the model)"),
		ctx:       fs.Int("ctx", 0, "context length the memory plan is sized for (default: config.json's max_context next to the model, else 1024)"),
		kv:        kvFlag(fs),
		sf:        addSessionFlags(fs),
	}
}

// kvFlag is the choice of KV cache shared by the language-model commands.
func kvFlag(fs *flag.FlagSet) *string {
	return fs.String("kv", "inplace", `KV cache: "inplace" (session-owned cache, new K/V written in place, no copies) or "explicit" (past inputs fed from present outputs, as exported)`)
}

// llmValued lists the flags of addLLMFlags that take a value.
func llmValued(more ...string) map[string]bool {
	v := map[string]bool{"model": true, "tokenizer": true, "ctx": true, "kv": true}
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

// contextFor is the context length for model: --ctx, else config.json's,
// else the engine's default maximum.
func contextFor(model string, flagCtx int) int {
	if flagCtx > 0 {
		return flagCtx
	}
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(model), "config.json")); err == nil {
		var c modelConfig
		if json.Unmarshal(b, &c) == nil {
			for _, v := range []int{c.MaxContext, c.MaxPos, c.NPositions} {
				if v > 0 {
					return v
				}
			}
		}
	}
	return engine.DefaultMax
}

// open loads the tokenizer and opens the model as a stepper.
func (f *llmFlags) open(model string, cfg generate.Config) (llmStepper, *tokenizer.Tokenizer, error) {
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
	return st, tok, nil
}

// openStepper opens the model with the plan sized for the context (and at
// most maxSeq tokens per step when maxSeq > 0).
func (f *llmFlags) openStepper(model string, maxSeq int, cfg generate.Config) (llmStepper, error) {
	opts, err := f.sf.options()
	if err != nil {
		return nil, err
	}
	ctx := contextFor(model, *f.ctx)
	if maxSeq > 0 {
		if opts.Max == nil {
			opts.Max = map[string]int64{}
		}
		if _, ok := opts.Max["seq"]; !ok {
			opts.Max["seq"] = int64(maxSeq)
		}
	}
	return openLLM(model, opts, ctx, *f.kv, cfg)
}

// llmStepper is a decoder stepper with its session, whichever KV mode.
type llmStepper interface {
	generate.Stepper
	Session() *engine.Session
	Close() error
}

// inPlace is engine/kv's stepper with the session it owns.
type inPlace struct {
	*kv.Stepper
	s *engine.Session
}

func (p inPlace) Session() *engine.Session { return p.s }
func (p inPlace) Close() error             { return p.s.Close() }

// openLLM opens a decoder with the plan sized for ctx tokens of context and
// the KV cache mode asked for.
func openLLM(model string, opts engine.Options, ctx int, mode string, cfg generate.Config) (llmStepper, error) {
	switch mode {
	case "explicit":
		return generate.OpenExplicit(model, opts, ctx, cfg)
	case "inplace", "":
	default:
		return nil, fmt.Errorf("--kv %q: want inplace or explicit", mode)
	}
	m, err := graph.Load(model)
	if err != nil {
		return nil, err
	}
	maxima, err := generate.ContextMaxima(m, ctx, opts.Max)
	m.Close()
	if err != nil {
		return nil, err
	}
	opts.Max = maxima
	opts.KVCache = &engine.KVConfig{MaxContext: ctx}
	s, err := engine.Open(model, opts)
	if err != nil {
		return nil, err
	}
	p, err := kv.NewStepper(s)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("%w (use --kv explicit for this model)", err)
	}
	p.LastOnly = cfg.LastOnly
	return inPlace{p, s}, nil
}

func runGenerate(args []string) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	lf := addLLMFlags(fs)
	prompt := fs.String("prompt", "", `the prompt ("-": read it from stdin)`)
	n := fs.Int("n", 128, "tokens to generate at most (0: until a stop or the context is full)")
	temp := fs.Float64("temperature", 0, "sampling temperature; 0 is greedy")
	topK := fs.Int("top-k", 0, "keep the k most likely tokens (0: all)")
	topP := fs.Float64("top-p", 0, "keep the most likely tokens up to this probability (0 or 1: all)")
	rep := fs.Float64("repeat-penalty", 1, "repetition penalty (1: off)")
	seed := fs.Int64("seed", 0, "sampling seed")
	var stops multiFlag
	fs.Var(&stops, "stop", "stop when the text contains this string (repeat for several)")
	ignoreEOS := fs.Bool("ignore-eos", false, "do not stop at the end-of-sequence token")
	noBOS := fs.Bool("no-bos", false, "do not put the BOS token before the prompt")
	special := fs.Bool("special", false, "print special tokens")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: tl generate --model m.onnx [--tokenizer tokenizer.json] --prompt "..." [-n 128] [--temperature 0] [--top-k 0] [--top-p 0] [--repeat-penalty 1] [--seed 0] [--stop STR] [--ctx N] [--device d] [--precision fp32|fp16] [--max sym=N] [--profile]`)
		fmt.Fprintln(fs.Output(), "The text streams to stdout; timings go to stderr.")
		fs.PrintDefaults()
	}
	flags, pos := splitArgs(args, llmValued("prompt", "n", "temperature", "top-k", "top-p", "repeat-penalty", "seed", "stop"))
	if err := fs.Parse(flags); err != nil {
		return err
	}
	model, err := lf.modelPath(pos)
	if err != nil {
		fs.Usage()
		return err
	}
	text := *prompt
	if text == "-" {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return fmt.Errorf("reading the prompt from stdin: %w", err)
		}
		text = string(b)
	}
	t0 := time.Now()
	st, tok, err := lf.open(model, generate.Config{LastOnly: true})
	if err != nil {
		return err
	}
	defer st.Close()
	openTime := time.Since(t0)
	// One small step compiles the kernels the prefill and decode use, so
	// that first-use compilation does not count as time to first token.
	if err := warmUp(st); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	req := generate.Request{Prompt: text, NoBOS: *noBOS, MaxNewTokens: *n, IgnoreEOS: *ignoreEOS, StopStrings: stops, Special: *special,
		Sampling: generate.Sampling{Temperature: *temp, TopK: *topK, TopP: *topP, RepetitionPenalty: *rep, Seed: *seed}}
	res, err := generate.New(st, tok).Generate(ctx, req, func(s string) error {
		_, err := io.WriteString(stdout, s)
		return err
	})
	fmt.Fprintln(stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(statsOut, "\nprompt %d tokens: prefill %.1f ms (%.1f tok/s), time to first token %.1f ms\n",
		res.PromptTokens, ms(res.PrefillTime), res.PrefillTokPerSec, ms(res.FirstTokenTime))
	fmt.Fprintf(statsOut, "generated %d tokens (%s): decode %.1f ms for %d steps (%.1f tok/s); model opened in %.0f ms\n",
		res.NewTokens, res.Reason, ms(res.DecodeTime), res.DecodeSteps, res.DecodeTokPerSec, ms(openTime))
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
	Model      string  `json:"model"`
	Text       string  `json:"text"`
	Documents  int     `json:"documents"`
	Predicted  int     `json:"predicted_tokens"`
	Loss       float64 `json:"loss"`
	Perplexity float64 `json:"perplexity"`
	// Bytes is the UTF-8 length of the documents scored (separators not
	// counted); BitsPerByte is the summed NLL in bits over it.
	Bytes       int              `json:"bytes"`
	BitsPerByte float64          `json:"bits_per_byte"`
	Window      int              `json:"window"`
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
	fs := flag.NewFlagSet("perplexity", flag.ContinueOnError)
	lf := addLLMFlags(fs)
	textPath := fs.String("text", "", "the text file to score")
	sep := fs.String("sep", "", `document separator, with Go escapes (e.g. "\n%\n"); each document is scored alone (default: the whole file is one document)`)
	window := fs.Int("window", 0, "score in windows of this many tokens, each from an empty context (default: the context length)")
	bos := fs.Bool("bos", true, "put the BOS token before each document")
	eos := fs.Bool("eos", false, "put the EOS token after each document (and score it)")
	buckets := fs.String("buckets", "", `also report the loss by position in the window, in buckets with these edges (e.g. "0,128,512,2048")`)
	asJSON := fs.Bool("json", false, "write the result as JSON")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: tl perplexity --model m.onnx --text file.txt [--sep "\n%\n"] [--window N] [--bos] [--eos] [--buckets 0,128,512,2048] [--ctx N] [--device d] [--precision fp32|fp16] [--json]`)
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
	raw, err := os.ReadFile(*textPath)
	if err != nil {
		return err
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
	res := perplexityResult{Model: model, Text: *textPath, Documents: len(docs), Predicted: total.Predicted,
		Loss: total.Loss(), Perplexity: total.Perplexity(), Bytes: nBytes, BitsPerByte: total.BitsPerByte(nBytes),
		Window: w, Seconds: time.Since(t0).Seconds()}
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
	fmt.Fprintf(stdout, "%s on %s: %d documents, %d predicted tokens, loss %.4f, perplexity %.4f, %.4f bits per byte over %d bytes (window %d, %.1f s)\n",
		res.Model, res.Text, res.Documents, res.Predicted, res.Loss, res.Perplexity, res.BitsPerByte, res.Bytes, res.Window, res.Seconds)
	if len(res.Buckets) > 0 {
		tb := newTable("positions", "predicted", "loss", "perplexity").alignRight(1, 2, 3)
		for _, b := range res.Buckets {
			tb.add(fmt.Sprintf("%d-%d", b.From, b.To), b.Predicted, fmt.Sprintf("%.4f", b.Loss), fmt.Sprintf("%.2f", math.Exp(b.Loss)))
		}
		tb.write(stdout)
	}
	return nil
}
