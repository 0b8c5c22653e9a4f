package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const defaultModelDir = "../../testdata/default"

// capture runs a command with stdout and the statistics writer redirected.
func capture(t *testing.T, run func([]string) error, args ...string) (out, stats string, err error) {
	t.Helper()
	var o, s bytes.Buffer
	oldOut, oldStats := stdout, statsOut
	stdout, statsOut = &o, &s
	defer func() { stdout, statsOut = oldOut, oldStats }()
	err = run(args)
	return o.String(), s.String(), err
}

func readDefaultJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(defaultModelDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestGenerateCommandGreedy: tl generate prints PyTorch's greedy
// continuation of the reference prompt, then the timings on the other
// stream.
func TestGenerateCommandGreedy(t *testing.T) {
	var ref struct {
		Prompt     string `json:"prompt"`
		GreedyIDs  []int  `json:"greedy_ids"`
		GreedyText string `json:"greedy_text"`
	}
	readDefaultJSON(t, "reference.json", &ref)
	out, stats, err := capture(t, runGenerate, "--model", filepath.Join(defaultModelDir, "model.onnx"),
		"--prompt", ref.Prompt, "-n", strconv.Itoa(len(ref.GreedyIDs)), "--ignore-eos")
	if err != nil {
		t.Fatal(err)
	}
	if out != ref.GreedyText+"\n" {
		t.Errorf("tl generate printed\n%q\nPyTorch's greedy text is\n%q", out, ref.GreedyText)
	}
	for _, want := range []string{"prompt 7 tokens", "tok/s", "time to first token", "generated 64 tokens (length)", "63 steps"} {
		if !strings.Contains(stats, want) {
			t.Errorf("statistics %q lack %q", stats, want)
		}
	}
	t.Log(strings.TrimSpace(stats))
}

func TestGenerateCommandErrors(t *testing.T) {
	model := filepath.Join(defaultModelDir, "model.onnx")
	for _, args := range [][]string{
		{"--prompt", "x"},                                                  // no model
		{model, "--model", model, "--prompt", "x"},                         // two models
		{model, "--tokenizer", "/nonexistent/tokenizer.json"},              // no tokenizer
		{model, "--prompt", "x", "--top-p", "3"},                           // bad sampling
		{model, "--prompt", "x", "--ctx", "4", "--ignore-eos", "-n", "99"}, // -n cannot fit in --ctx: say so, do not stop silently
		{model, "--prompt", "x", "--ctx", "-1"},                            // a negative context
		{"/nonexistent/model.onnx", "--prompt", "x"},                       // no model (not reported as a missing tokenizer)
		{model, "--prompt", "x", "--tokens", "1,2"},                        // two prompts
		{model, "--tokens", "1,x"},                                         // bad ids
		{model, "--tokens", "99999"},                                       // an id outside the vocabulary
		{model, "--prompt", "x", "--max", "bogus=4"},                       // a symbol the model lacks
		{model, "--prompt", "x", "--ctx", "4", "--ignore-eos", "-n", "0"},  // fine: stops when the context is full
	} {
		_, stats, err := capture(t, runGenerate, args...)
		last := args[len(args)-1] == "0"
		if args[0] == "/nonexistent/model.onnx" && (err == nil || strings.Contains(err.Error(), "tokenizer")) {
			t.Errorf("a missing model gave %v; want an error naming the model", err)
		}
		if last {
			// The prompt is BOS + "x": 2 tokens; 4 positions hold 2 + 2
			// generated, and the logits of the 4th give one more.
			if err != nil || !strings.Contains(stats, "context full") || !strings.Contains(stats, "generated 3 tokens") {
				t.Errorf("%q: err %v, stats %q; want a generation ended by the context", args, err, stats)
			}
		} else if err == nil {
			t.Errorf("%q succeeded", args)
		}
	}
}

// TestPerplexityCommand reproduces perplexity.json's protocol from the
// command line.
func TestPerplexityCommand(t *testing.T) {
	var ref struct {
		Predicted   int     `json:"predicted_tokens"`
		Perplexity  float64 `json:"perplexity"`
		BitsPerByte float64 `json:"bits_per_byte"`
	}
	readDefaultJSON(t, "perplexity.json", &ref)
	out, _, err := capture(t, runPerplexity, "--model", filepath.Join(defaultModelDir, "model.onnx"),
		"--text", filepath.Join(defaultModelDir, "heldout.txt"), "--sep", `\n%\n`, "--eos", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got perplexityResult
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	if got.Predicted != ref.Predicted || math.Abs(got.Perplexity-ref.Perplexity) > 0.01*ref.Perplexity {
		t.Errorf("perplexity %.4f over %d tokens, PyTorch %.4f over %d", got.Perplexity, got.Predicted, ref.Perplexity, ref.Predicted)
	}
	// Bits per byte: the summed NLL in bits over the documents' bytes (the
	// file less its separators).
	raw, err := os.ReadFile(filepath.Join(defaultModelDir, "heldout.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wantBytes := len(raw) - 3*strings.Count(string(raw), "\n%\n")
	wantBPB := got.Loss * float64(got.Predicted) / math.Ln2 / float64(wantBytes)
	if got.Bytes != wantBytes || math.Abs(got.BitsPerByte-wantBPB) > 1e-9 {
		t.Errorf("%d bytes, %.6f bits per byte; want %d bytes, %.6f", got.Bytes, got.BitsPerByte, wantBytes, wantBPB)
	}
	// perplexity.json files written before bits per byte existed lack it.
	if ref.BitsPerByte != 0 && math.Abs(got.BitsPerByte-ref.BitsPerByte) > 0.01*ref.BitsPerByte {
		t.Errorf("%.4f bits per byte, PyTorch %.4f", got.BitsPerByte, ref.BitsPerByte)
	}
	// Buckets partition the predictions; the text output has a row each.
	out, _, err = capture(t, runPerplexity, "--model", filepath.Join(defaultModelDir, "model.onnx"),
		"--text", filepath.Join(defaultModelDir, "heldout.txt"), "--sep", `\n%\n`, "--eos", "--buckets", "0,16,100000", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var bk perplexityResult
	if err := json.Unmarshal([]byte(out), &bk); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	if len(bk.Buckets) != 2 || bk.Buckets[0].Predicted+bk.Buckets[1].Predicted != got.Predicted ||
		math.Abs((bk.Buckets[0].Loss*float64(bk.Buckets[0].Predicted)+bk.Buckets[1].Loss*float64(bk.Buckets[1].Predicted))-
			got.Loss*float64(got.Predicted)) > 1e-6*got.Loss*float64(got.Predicted) {
		t.Errorf("buckets %+v do not add up to %d predictions, loss %.4f", bk.Buckets, got.Predicted, got.Loss)
	}
	for _, bad := range []string{"16", "0,x", "10,5"} {
		if _, _, err := capture(t, runPerplexity, "--model", filepath.Join(defaultModelDir, "model.onnx"),
			"--text", filepath.Join(defaultModelDir, "heldout.txt"), "--buckets", bad); err == nil {
			t.Errorf("--buckets %q accepted", bad)
		}
	}
	// Without the separator the file is one document, scored in windows.
	out, _, err = capture(t, runPerplexity, filepath.Join(defaultModelDir, "model.onnx"),
		"--text", filepath.Join(defaultModelDir, "heldout.txt"), "--window", "64")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "1 document,") || !strings.Contains(out, "window 64") {
		t.Errorf("one-document output %q", out)
	}
}
