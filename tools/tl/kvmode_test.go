package main

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/tokenizer"
)

// Both KV modes the commands offer must reproduce PyTorch's greedy
// continuation of the shipped model token for token.
func TestKVModesMatchPyTorchGreedy(t *testing.T) {
	var ref struct {
		PromptIDs []int `json:"prompt_ids"`
		GreedyIDs []int `json:"greedy_ids"`
	}
	raw, err := os.ReadFile("../../testdata/default/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load("../../testdata/default/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"inplace", "explicit"} {
		st, err := openLLM("../../testdata/default/model.onnx", engine.Options{}, 128, mode, generate.Config{LastOnly: true})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		res, err := generate.New(st, tok).Generate(context.Background(), generate.Request{
			Tokens: ref.PromptIDs, MaxNewTokens: len(ref.GreedyIDs), IgnoreEOS: true,
		}, func(string) error { return nil })
		st.Close()
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if len(res.Tokens) != len(ref.GreedyIDs) {
			t.Fatalf("%s: %d tokens, want %d", mode, len(res.Tokens), len(ref.GreedyIDs))
		}
		for i := range res.Tokens {
			if res.Tokens[i] != ref.GreedyIDs[i] {
				t.Fatalf("%s: token %d is %d, PyTorch gives %d", mode, i, res.Tokens[i], ref.GreedyIDs[i])
			}
		}
	}
	if _, err := openLLM("../../testdata/default/model.onnx", engine.Options{}, 128, "bogus", generate.Config{}); err == nil {
		t.Errorf("--kv bogus must be refused")
	}
}
