package generate

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/tokenizer"
)

// Generator produces text from a prompt with a stepper and a tokenizer.
// It runs one generation at a time (the stepper holds one sequence).
type Generator struct {
	st  Stepper
	tok *tokenizer.Tokenizer
}

// New returns a generator over st, encoding and decoding with tok.
func New(st Stepper, tok *tokenizer.Tokenizer) *Generator {
	return &Generator{st: st, tok: tok}
}

// Stepper is the stepper the generator runs.
func (g *Generator) Stepper() Stepper { return g.st }

// Request is one generation.
type Request struct {
	// Prompt is encoded with the tokenizer, after its BOS token when it
	// has one (unless NoBOS).
	Prompt string
	// Tokens, when not nil, is the prompt as token ids, used as given
	// (Prompt and NoBOS are then ignored).
	Tokens []int
	// NoBOS leaves the BOS token out of an encoded Prompt.
	NoBOS bool
	// MaxNewTokens caps the tokens generated; 0 means until a stop or a
	// full context.
	MaxNewTokens int
	// Stop lists token ids that end generation; nil means the tokenizer's
	// EOS token.
	Stop []int
	// IgnoreEOS leaves EOS out of the default stop list (benchmarks and
	// reference comparisons run a fixed number of tokens).
	IgnoreEOS bool
	// StopStrings end generation when the text contains one of them; the
	// text is cut before it.
	StopStrings []string
	// Special keeps special tokens (e.g. "<|eos|>") in the text.
	Special bool
	// Sampling chooses the tokens; the zero value is greedy.
	Sampling Sampling
}

// Stats are the timings of one generation.
type Stats struct {
	// PromptTokens is the prompt length, BOS included.
	PromptTokens int
	// NewTokens is the number of tokens generated, a stop token included.
	NewTokens int
	// DecodeSteps is the number of single-token steps (NewTokens - 1 unless
	// generation failed or was cancelled).
	DecodeSteps int
	// PrefillTime is the prompt's step.
	PrefillTime time.Duration
	// FirstTokenTime (time to first token) runs from the start of the
	// prefill to the first token's sampling.
	FirstTokenTime time.Duration
	// DecodeTime is the time of the decode steps and their sampling.
	DecodeTime time.Duration
	// PrefillTokPerSec is PromptTokens / PrefillTime.
	PrefillTokPerSec float64
	// DecodeTokPerSec is DecodeSteps / DecodeTime.
	DecodeTokPerSec float64
}

// StopReason says why generation ended.
type StopReason string

// The reasons generation ends.
const (
	StopToken   StopReason = "stop token"
	StopString  StopReason = "stop string"
	StopLength  StopReason = "length"
	StopContext StopReason = "context full"
	StopCancel  StopReason = "cancelled"
)

// Result is what a generation produced.
type Result struct {
	Stats
	// Tokens are the generated ids, a final stop token included.
	Tokens []int
	// Text is everything passed to the onToken callback.
	Text string
	// Reason is why generation ended.
	Reason StopReason
}

// Prompt returns the token ids req's prompt stands for.
func (g *Generator) Prompt(req Request) ([]int, error) {
	if req.Tokens != nil {
		return append([]int(nil), req.Tokens...), nil
	}
	bos := !req.NoBOS && g.tok.Special().BOS >= 0
	ids, err := g.tok.Encode(req.Prompt, tokenizer.EncodeOptions{AddBOS: bos})
	if err != nil {
		return nil, fmt.Errorf("generate: encoding the prompt: %w", err)
	}
	return ids, nil
}

// Generate runs req: a prefill of the prompt in one step, then one step per
// token until a stop token, a stop string, MaxNewTokens or a full context.
// onToken (which may be nil) receives the text as it completes; pieces are
// held back while they could be the start of a stop string or of a
// multi-byte character. An error from onToken, or ctx ending, ends
// generation and is returned with what was produced so far.
func (g *Generator) Generate(ctx context.Context, req Request, onToken func(text string) error) (Result, error) {
	var res Result
	sampler, err := NewSampler(req.Sampling)
	if err != nil {
		return res, err
	}
	if req.MaxNewTokens < 0 {
		return res, fmt.Errorf("generate: MaxNewTokens %d: want 0 (no cap) or more", req.MaxNewTokens)
	}
	prompt, err := g.Prompt(req)
	if err != nil {
		return res, err
	}
	if len(prompt) == 0 {
		return res, fmt.Errorf("generate: empty prompt (no tokens; give a prompt or let the tokenizer add BOS)")
	}
	maxCtx := g.st.MaxContext()
	if len(prompt) > maxCtx {
		return res, fmt.Errorf("generate: the prompt has %d tokens, more than the context of %d: %w", len(prompt), maxCtx, engine.ErrContextFull)
	}
	stop := map[int]bool{}
	if req.Stop != nil {
		for _, id := range req.Stop {
			stop[id] = true
		}
	} else if eos := g.tok.Special().EOS; eos >= 0 && !req.IgnoreEOS {
		stop[eos] = true
	}
	sink := &textSink{stops: req.StopStrings, fn: onToken}
	for _, s := range req.StopStrings {
		if s == "" {
			return res, fmt.Errorf("generate: empty stop string")
		}
	}
	if err := g.st.Reset(); err != nil {
		return res, fmt.Errorf("generate: resetting the stepper: %w", err)
	}
	res.PromptTokens = len(prompt)
	history := append(make([]int, 0, len(prompt)+max(req.MaxNewTokens, 16)), prompt...)
	positions := make([]int, len(prompt))
	for i := range positions {
		positions[i] = i
	}
	if err := ctx.Err(); err != nil {
		res.Reason = StopCancel
		return res, err
	}
	t0 := time.Now()
	logits, err := g.st.Step(prompt, positions)
	res.PrefillTime = time.Since(t0)
	if err != nil {
		return res, fmt.Errorf("generate: prefill of %d tokens: %w", len(prompt), err)
	}
	res.PrefillTokPerSec = float64(len(prompt)) / res.PrefillTime.Seconds()
	vocab := g.st.Vocab()
	dec := g.tok.DecodeStreamWith(tokenizer.DecodeOptions{SkipSpecial: !req.Special})
	// finish fills in what is derived from the loop, on every way out.
	finish := func() {
		res.Text = sink.out.String()
		if res.DecodeTime > 0 {
			res.DecodeTokPerSec = float64(res.DecodeSteps) / res.DecodeTime.Seconds()
		}
	}
	tStep := t0
	for {
		if len(logits) < vocab {
			return res, fmt.Errorf("generate: the stepper returned %d logits, want at least a row of %d", len(logits), vocab)
		}
		id := sampler.Sample(logits[len(logits)-vocab:], history)
		if res.NewTokens == 0 {
			res.FirstTokenTime = time.Since(t0)
		} else {
			res.DecodeTime += time.Since(tStep)
			res.DecodeSteps++
		}
		res.Tokens = append(res.Tokens, id)
		res.NewTokens++
		history = append(history, id)
		if stop[id] {
			res.Reason = StopToken
			break
		}
		if piece := dec.Add(id); piece != "" {
			hit, err := sink.add(piece)
			if err != nil {
				finish()
				return res, err
			}
			if hit {
				res.Reason = StopString
				finish()
				return res, nil
			}
		}
		if req.MaxNewTokens > 0 && res.NewTokens >= req.MaxNewTokens {
			res.Reason = StopLength
			break
		}
		// The next step stores the token just sampled at position
		// len(history)-1; the context has room while that is inside it.
		// (The last token is sampled from the full context's logits and
		// needs no room of its own.)
		if len(history) > maxCtx {
			res.Reason = StopContext
			break
		}
		if err := ctx.Err(); err != nil {
			res.Reason = StopCancel
			finish()
			return res, err
		}
		tStep = time.Now()
		logits, err = g.st.Step([]int{id}, []int{len(history) - 1})
		if err != nil {
			finish()
			return res, fmt.Errorf("generate: decode step %d (position %d): %w", res.DecodeSteps+1, len(history)-1, err)
		}
	}
	if piece := dec.Flush(); piece != "" {
		hit, err := sink.add(piece)
		if err != nil {
			finish()
			return res, err
		}
		if hit {
			res.Reason = StopString
			finish()
			return res, nil
		}
	}
	err = sink.flush()
	finish()
	return res, err
}

// textSink passes text on, holding back any tail that could begin a stop
// string, and cuts the text at the first stop string.
type textSink struct {
	stops   []string
	fn      func(string) error
	pending string
	out     strings.Builder
}

// add takes a piece of text and reports whether a stop string appeared.
func (t *textSink) add(piece string) (bool, error) {
	t.pending += piece
	// Every stop string that could start in text already passed on would
	// have been held back, so searching pending alone is enough.
	cut := -1
	for _, s := range t.stops {
		if i := strings.Index(t.pending, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		err := t.emit(t.pending[:cut])
		t.pending = ""
		return true, err
	}
	hold := 0
	for _, s := range t.stops {
		for n := min(len(s)-1, len(t.pending)); n > hold; n-- {
			if strings.HasSuffix(t.pending, s[:n]) {
				hold = n
				break
			}
		}
	}
	keep := t.pending[len(t.pending)-hold:]
	err := t.emit(t.pending[:len(t.pending)-hold])
	t.pending = keep
	return false, err
}

// flush passes on whatever is held back.
func (t *textSink) flush() error {
	err := t.emit(t.pending)
	t.pending = ""
	return err
}

func (t *textSink) emit(s string) error {
	if s == "" {
		return nil
	}
	t.out.WriteString(s)
	if t.fn != nil {
		return t.fn(s)
	}
	return nil
}
