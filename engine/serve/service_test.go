package serve

import (
	"context"
	"slices"
	"testing"

	"github.com/tlite/tlite/engine/generate"
)

// TestCallMatchesOneShotGeneration: a context built by calls holds the
// same tokens, and produces the same greedy continuation, as generating
// from the whole text at once; the service adds nothing and loses nothing.
func TestCallMatchesOneShotGeneration(t *testing.T) {
	s := newTestService(t, "", Config{})
	ctx := context.Background()
	id, err := s.NewContext("a", "Fortune:")
	if err != nil {
		t.Fatal(err)
	}
	r1, err := s.Call(ctx, id, " The cat", CallOptions{MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Tokens == 0 || r1.Tokens > 8 {
		t.Fatalf("first call generated %d tokens", r1.Tokens)
	}
	r2, err := s.Call(ctx, id, " and the dog", CallOptions{MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	hist, _ := s.History(id)
	if r2.ContextTokens != len(hist) {
		t.Errorf("reply says %d context tokens, history has %d", r2.ContextTokens, len(hist))
	}
	// The reference: greedy generation over the history before the second
	// call's output, from an empty cache.
	gen := len(hist) - r2.Tokens
	st, tok := testModel(t)
	st.Reset()
	g := generate.New(&offsetStepper{st: st}, tok)
	res, err := g.Generate(ctx, generate.Request{Tokens: hist[:gen], MaxNewTokens: 8}, nil)
	st.Reset()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, hist[gen:]) {
		t.Errorf("second call generated %v; one-shot generation over the same tokens gives %v", hist[gen:], res.Tokens)
	}
	if res.Text != r2.Text {
		t.Errorf("text %q, one-shot %q", r2.Text, res.Text)
	}
}
