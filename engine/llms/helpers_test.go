package llms

import (
	"os"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/tokenizer"
)

// The unit tests run the small default model (4 layers, 2 KV heads of 32,
// context 128) on the pure-Go device: real weights, so real KV and real
// attention, without an OpenCL build.
const defaultModel = "../../testdata/default"

func TestMain(m *testing.M) {
	os.Exit(m.Run())
}

// openDefault opens the default model with the in-place cache and
// attention statistics.
func openDefault(t testing.TB, maxCtx int) *kv.State {
	t.Helper()
	st, err := kv.Open(defaultModel+"/model.onnx", engine.Options{Device: "go"}, kv.Config{MaxContext: maxCtx, AttentionStats: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Session().Close() })
	return st
}

// heldoutTokens is the first n tokens of the default model's held-out
// text: real text, so density and KV are what the model makes of language.
func heldoutTokens(t testing.TB, n int) []int {
	t.Helper()
	tok, err := tokenizer.Load(defaultModel + "/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(defaultModel + "/heldout.txt")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(string(text[:min(len(text), 8*n+64)]), tokenizer.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) < n {
		t.Fatalf("held-out text gives %d tokens; want %d", len(ids), n)
	}
	return ids[:n]
}

// prefill runs tokens at positions/slots 0..n-1 from an empty cache.
func prefill(t testing.TB, st *kv.State, tokens []int) []float32 {
	t.Helper()
	st.Reset()
	logits, err := st.Forward(tokens, seq(len(tokens)), seq(len(tokens)))
	if err != nil {
		t.Fatal(err)
	}
	return logits
}
