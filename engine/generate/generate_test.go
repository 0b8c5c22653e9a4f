package generate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/tokenizer"
)

// scripted is a fake stepper whose logits make greedy decoding produce a
// fixed script after the prompt, and which records every call.
type scripted struct {
	vocab, maxCtx int
	script        []int
	n, promptLen  int
	calls         [][2][]int // tokens and positions of each Step
}

func (s *scripted) Step(tokens, positions []int) ([]float32, error) {
	if s.n+len(tokens) > s.maxCtx {
		return nil, engine.ErrContextFull
	}
	if s.n == 0 {
		s.promptLen = len(tokens)
	}
	s.calls = append(s.calls, [2][]int{append([]int(nil), tokens...), append([]int(nil), positions...)})
	s.n += len(tokens)
	row := make([]float32, s.vocab)
	if k := s.n - s.promptLen; k < len(s.script) {
		row[s.script[k]] = 1
	}
	return row, nil
}

func (s *scripted) Reset() error    { s.n, s.calls = 0, nil; return nil }
func (s *scripted) MaxContext() int { return s.maxCtx }
func (s *scripted) Vocab() int      { return s.vocab }

func defaultTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load(defaultDir + "/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func encode(t *testing.T, tok *tokenizer.Tokenizer, s string) []int {
	t.Helper()
	ids, err := tok.Encode(s, tokenizer.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// collect returns an onToken callback that appends to pieces.
func collect(pieces *[]string) func(string) error {
	return func(s string) error { *pieces = append(*pieces, s); return nil }
}

func TestGenerateLoop(t *testing.T) {
	tok := defaultTokenizer(t)
	text := " the cat sat on the mat"
	st := &scripted{vocab: tok.VocabSize(), maxCtx: 64, script: encode(t, tok, text)}
	g := New(st, tok)
	var pieces []string
	res, err := g.Generate(context.Background(), Request{Prompt: "Once", MaxNewTokens: len(st.script)}, collect(&pieces))
	if err != nil {
		t.Fatal(err)
	}
	prompt := append([]int{tok.Special().BOS}, encode(t, tok, "Once")...)
	if fmt.Sprint(res.Tokens) != fmt.Sprint(st.script) || res.Text != text || strings.Join(pieces, "") != text {
		t.Errorf("generated %v %q (streamed %q), want %v %q", res.Tokens, res.Text, pieces, st.script, text)
	}
	if res.Reason != StopLength || res.PromptTokens != len(prompt) || res.NewTokens != len(st.script) || res.DecodeSteps != len(st.script)-1 {
		t.Errorf("reason %q, prompt %d, new %d, decode steps %d", res.Reason, res.PromptTokens, res.NewTokens, res.DecodeSteps)
	}
	// One prefill with the whole prompt at 0..n-1, then one token per step
	// at the next position, each the token sampled before.
	if len(st.calls) != len(st.script) {
		t.Fatalf("%d steps, want %d", len(st.calls), len(st.script))
	}
	if fmt.Sprint(st.calls[0]) != fmt.Sprint([2][]int{prompt, count(0, len(prompt))}) {
		t.Errorf("prefill step %v, want tokens %v at 0..", st.calls[0], prompt)
	}
	for i, c := range st.calls[1:] {
		want := [2][]int{{st.script[i]}, {len(prompt) + i}}
		if fmt.Sprint(c) != fmt.Sprint(want) {
			t.Errorf("decode step %d: %v, want %v", i+1, c, want)
		}
	}
	if res.FirstTokenTime < res.PrefillTime || res.PrefillTokPerSec <= 0 || res.DecodeTokPerSec <= 0 {
		t.Errorf("timings %+v", res.Stats)
	}
}

func TestGenerateStops(t *testing.T) {
	tok := defaultTokenizer(t)
	eos := tok.Special().EOS
	words := encode(t, tok, " one two three")
	script := append(append(append([]int(nil), words...), eos), encode(t, tok, " four")...)
	st := &scripted{vocab: tok.VocabSize(), maxCtx: 64, script: script}
	g := New(st, tok)
	ctx := context.Background()

	res, err := g.Generate(ctx, Request{Prompt: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != StopToken || res.Text != " one two three" || res.Tokens[len(res.Tokens)-1] != eos {
		t.Errorf("default stop at EOS: %q %q %v", res.Reason, res.Text, res.Tokens)
	}

	res, err = g.Generate(ctx, Request{Prompt: "x", IgnoreEOS: true, MaxNewTokens: len(script)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != StopLength || res.Text != " one two three four" {
		t.Errorf("IgnoreEOS: %q %q", res.Reason, res.Text)
	}
	res, err = g.Generate(ctx, Request{Prompt: "x", IgnoreEOS: true, Special: true, MaxNewTokens: len(script)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != " one two three<|eos|> four" {
		t.Errorf("Special keeps special tokens: %q", res.Text)
	}

	res, err = g.Generate(ctx, Request{Prompt: "x", Stop: []int{words[1]}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != StopToken || len(res.Tokens) != 2 {
		t.Errorf("explicit stop list: %q %v", res.Reason, res.Tokens)
	}

	// A stop string is cut out of the text, and nothing that could be its
	// start is streamed before it is ruled out.
	var pieces []string
	res, err = g.Generate(ctx, Request{Prompt: "x", StopStrings: []string{"thr", "wo t"}}, collect(&pieces))
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != StopString || res.Text != " one t" || strings.Join(pieces, "") != " one t" {
		t.Errorf("stop strings: %q %q, streamed %q", res.Reason, res.Text, pieces)
	}
	// A stop string that never completes is passed on at the end.
	res, err = g.Generate(ctx, Request{Prompt: "x", StopStrings: []string{"three!"}}, collect(&pieces))
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != StopToken || res.Text != " one two three" {
		t.Errorf("unfinished stop string: %q %q", res.Reason, res.Text)
	}

	// The context fills.
	small := &scripted{vocab: tok.VocabSize(), maxCtx: 6, script: script}
	res, err = New(small, tok).Generate(ctx, Request{Prompt: "x", IgnoreEOS: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Six positions hold six tokens, and the logits of the sixth give a
	// seventh.
	if res.Reason != StopContext || res.PromptTokens+res.NewTokens != 7 {
		t.Errorf("context of 6: %q after %d + %d tokens", res.Reason, res.PromptTokens, res.NewTokens)
	}
	if _, err := New(small, tok).Generate(ctx, Request{Tokens: count(1, 7)}, nil); !errors.Is(err, engine.ErrContextFull) {
		t.Errorf("a 7-token prompt in a context of 6: %v", err)
	}
}

func TestGenerateCallbackErrorsAndCancel(t *testing.T) {
	tok := defaultTokenizer(t)
	st := &scripted{vocab: tok.VocabSize(), maxCtx: 64, script: encode(t, tok, " a b c d e f")}
	g := New(st, tok)
	boom := errors.New("reader went away")
	n := 0
	res, err := g.Generate(context.Background(), Request{Prompt: "x"}, func(string) error {
		n++
		if n == 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || len(res.Tokens) != 2 {
		t.Errorf("callback error: %v after %v", err, res.Tokens)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res, err = g.Generate(ctx, Request{Prompt: "x"}, func(string) error { cancel(); return nil })
	if !errors.Is(err, context.Canceled) || res.Reason != StopCancel || len(res.Tokens) != 1 {
		t.Errorf("cancel: %v, %q after %v", err, res.Reason, res.Tokens)
	}
	if _, err := g.Generate(context.Background(), Request{Prompt: "x", Sampling: Sampling{TopP: 2}}, nil); err == nil {
		t.Error("top-p 2 accepted")
	}
	if _, err := g.Generate(context.Background(), Request{Tokens: []int{}}, nil); err == nil {
		t.Error("empty prompt accepted")
	}
}

// TestStreamingMultibyte: characters split over several byte-level tokens
// are streamed whole.
func TestStreamingMultibyte(t *testing.T) {
	tok := defaultTokenizer(t)
	text := " naïve café ☃ 日本語"
	st := &scripted{vocab: tok.VocabSize(), maxCtx: 64, script: encode(t, tok, text)}
	if len(st.script) <= utf8.RuneCountInString(text)/2 {
		t.Logf("the text is only %d tokens", len(st.script))
	}
	var pieces []string
	res, err := New(st, tok).Generate(context.Background(), Request{Prompt: "x", MaxNewTokens: len(st.script)}, collect(&pieces))
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != text {
		t.Errorf("text %q, want %q", res.Text, text)
	}
	for _, p := range pieces {
		if !utf8.ValidString(p) {
			t.Errorf("streamed an incomplete character: %q", p)
		}
	}
}
