package main

import (
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine/npy"
)

// TestElasticImportance: tl elastic importance on the fixture's original
// export (pure Go) writes the proxy scores PyTorch computes for the same
// windows (testdata/elastic/llama/proxy_ref.json), labelled as the proxy.
func TestElasticImportance(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(elasticLlama, "proxy_ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Removal []float64 `json:"layer_removal_loss_increase"`
		Windows [][]int64 `json:"windows"`
		Layers  []struct {
			QHeads  []float64 `json:"q_heads"`
			Neurons []float64 `json:"neurons"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var flat []int64
	for _, w := range ref.Windows {
		flat = append(flat, w...)
	}
	toks := filepath.Join(dir, "calib.npy")
	if err := npy.WriteFile(toks, tensor.New(tensor.WithShape(len(ref.Windows), len(ref.Windows[0])), tensor.WithBacking(flat))); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "imp.json")
	model := filepath.Join(elasticLlama, "original.onnx")
	msg, err := captureStdout(t, func() error {
		return runElastic([]string{"importance", "--model", model, "--tokens", toks, "--out", out, "--head-dim", "16", "--batch", "2", "--device", "go", "--layers"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "forward only") || !strings.Contains(msg, "72 tokens") {
		t.Errorf("summary: %s", msg)
	}
	raw, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Format, Method, Backend string
		Removal                 []float64 `json:"layer_removal_loss_increase"`
		Layers                  []struct {
			QHeads  []float64 `json:"q_heads"`
			Neurons []float64 `json:"neurons"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.Format != "tlite.importance/1" || !strings.Contains(got.Method, "forward only") || got.Backend != "go" || len(got.Layers) != 3 || len(got.Removal) != 3 {
		t.Fatalf("scores file: %s", raw)
	}
	for l := range ref.Layers {
		if math.Abs(got.Removal[l]-ref.Removal[l]) > 2e-5 {
			t.Errorf("layer %d removal: %g; PyTorch %g", l, got.Removal[l], ref.Removal[l])
		}
		for h, w := range ref.Layers[l].QHeads {
			if g := got.Layers[l].QHeads[h]; math.Abs(g-w) > 1e-4*math.Max(1, w) {
				t.Errorf("layer %d head %d: %g; PyTorch %g", l, h, g, w)
			}
		}
		for i, w := range ref.Layers[l].Neurons {
			if g := got.Layers[l].Neurons[i]; math.Abs(g-w) > 1e-4*math.Max(1, w) {
				t.Errorf("layer %d neuron %d: %g; PyTorch %g", l, i, g, w)
			}
		}
	}
}

// TestElasticImportanceErrors: -h is help (exit 0 through dispatch), bad
// command lines and inputs are refused with a reason.
func TestElasticImportanceErrors(t *testing.T) {
	if err := runElastic([]string{"importance", "-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v; want flag.ErrHelp", err)
	}
	dir := t.TempDir()
	stream := filepath.Join(dir, "s.npy")
	if err := npy.WriteFile(stream, tensor.New(tensor.WithShape(5), tensor.WithBacking([]int64{1, 2, 3, 4, 5}))); err != nil {
		t.Fatal(err)
	}
	floats := filepath.Join(dir, "f.npy")
	if err := npy.WriteFile(floats, tensor.New(tensor.WithShape(4), tensor.WithBacking([]float32{1, 2, 3, 4}))); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(elasticLlama, "original.onnx")
	out := filepath.Join(dir, "o.json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", model, "--out", out}, "one of --text or --tokens"},
		{[]string{"--model", model, "--out", out, "--text", "a", "--tokens", "b"}, "one of --text or --tokens"},
		{[]string{"--model", model, "--out", out, "--tokens", stream, "--seq", "8", "--head-dim", "16"}, "fewer than one window"},
		{[]string{"--model", model, "--out", out, "--tokens", floats, "--seq", "2", "--head-dim", "16"}, "integer"},
		{[]string{"--model", model, "--out", out, "--tokens", stream, "--seq", "2", "--head-dim", "24", "--device", "go"}, "head_dim"},
		{[]string{"--model", filepath.Join(elasticLlama, "..", "gpt2", "original.onnx"), "--out", out, "--tokens", stream, "--seq", "2", "--head-dim", "16", "--device", "go"}, "llama-style"},
		{[]string{"--model", model, "--out", out, "--text", stream, "--head-dim", "16"}, "tokenizer"},
		{[]string{"--model", model, "--out", out, "--tokens", stream, "--batch", "0"}, "--batch"},
	} {
		_, err := captureStdout(t, func() error { return runElastic(append([]string{"importance"}, c.args...)) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want an error with %q", c.args, err, c.want)
		}
	}
	if _, err := headDimOf(dir); err == nil || !strings.Contains(err.Error(), "--head-dim") {
		t.Errorf("a folder without config.json or elastic.json: %v", err)
	}
	if hd, err := headDimOf(elasticLlama); err != nil || hd != 16 {
		t.Errorf("head size from elastic.json: %d, %v", hd, err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed run left a scores file")
	}
}

// TestElasticImportanceText: --text is tokenized with the model's own
// tokenizer.json and cut into --seq windows (the shipped model, two short
// windows on the pure-Go backend).
func TestElasticImportanceText(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "calib.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "imp.json")
	msg, err := captureStdout(t, func() error {
		return runElastic([]string{"importance", "--model", "../../testdata/longctx", "--text", text, "--out", out,
			"--seq", "12", "--windows", "2", "--batch", "2", "--device", "go"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "2 windows x 12 = 24 tokens") {
		t.Errorf("summary: %s", msg)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		NHeads   int `json:"n_heads"`
		NKVHeads int `json:"n_kv_heads"`
		HeadDim  int `json:"head_dim"`
		FFN      int `json:"ffn"`
		Layers   []struct {
			QHeads []float64 `json:"q_heads"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	// config.json: 6 layers, 8/4 heads of 32, FFN 768.
	if got.NHeads != 8 || got.NKVHeads != 4 || got.HeadDim != 32 || got.FFN != 768 || len(got.Layers) != 6 {
		t.Fatalf("scores header %s", raw[:200])
	}
	for l, ly := range got.Layers {
		for h, v := range ly.QHeads {
			if !(v > 0) {
				t.Errorf("layer %d head %d scores %v; a trained head's output is not zero", l, h, v)
			}
		}
	}
}
