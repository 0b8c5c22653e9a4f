package generate_test

import (
	"context"
	"fmt"
	"log"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/tokenizer"
	"github.com/tlite/tlite/graph"
)

// Generate text with the in-place KV cache: the session owns one cache
// buffer per layer sized for the context, and each step writes only the
// new keys and values into it.
func Example() {
	const model = "../../testdata/default/model.onnx"
	const ctx = 128 // tokens of context the cache and the memory plan hold
	tok, err := tokenizer.Load("../../testdata/default/tokenizer.json")
	if err != nil {
		log.Fatal(err)
	}
	m, err := graph.Load(model)
	if err != nil {
		log.Fatal(err)
	}
	maxima, err := generate.ContextMaxima(m, ctx, nil) // seq, past and total sized for ctx
	m.Close()
	if err != nil {
		log.Fatal(err)
	}
	s, err := engine.Open(model, engine.Options{Device: "go", Max: maxima, KVCache: &engine.KVConfig{MaxContext: ctx}})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	st, err := kv.NewStepper(s)
	if err != nil {
		log.Fatal(err)
	}
	st.LastOnly = true // only the last position's logits are read back
	res, err := generate.New(st, tok).Generate(context.Background(), generate.Request{
		Prompt:       "The secret of life is",
		MaxNewTokens: 8,
		// The zero Sampling is greedy; set Temperature (and a Seed) to sample.
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q (%d tokens, %s)\n", res.Text, res.NewTokens, res.Reason)
	// Output:
	// " a man.\n\t\t-- P." (8 tokens, length)
}

// Open a decoder the default way: the in-place KV cache when the export
// allows it, else the cache fed back as exported (Decoder.Fallback says
// why). Both give the same tokens.
func ExampleOpen() {
	tok, err := tokenizer.Load("../../testdata/default/tokenizer.json")
	if err != nil {
		log.Fatal(err)
	}
	d, err := generate.Open("../../testdata/default/model.onnx", engine.Options{Device: "go"}, 128, generate.Config{LastOnly: true})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	res, err := generate.New(d, tok).Generate(context.Background(), generate.Request{
		Prompt:       "The secret of life is",
		MaxNewTokens: 8,
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %q\n", d.Mode, res.Text)
	// Output:
	// inplace: " a man.\n\t\t-- P."
}
