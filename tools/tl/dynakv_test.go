package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine/dynakv"
)

// TestDynaKVCommands runs tl perplexity and tl generate with --kv dynakv on
// the long-context model (short, for speed) and checks that the
// statistics report flash reads the kernel saw.
func TestDynaKVCommands(t *testing.T) {
	model := "../../testdata/longctx/model.onnx"
	dir := t.TempDir()
	out, _, err := capture(t, runPerplexity, "--kv", "dynakv", "--model", model, "--text", "../../testdata/longctx/heldout_split.txt",
		"--kv-dir", dir, "--kv-budget", "0.05", "--prefill", "128", "--max-tokens", "180", "--ctx", "256", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r dynakvResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Stats.Steps != 180-128-1 || r.Eval.Predicted != r.Stats.Steps {
		t.Fatalf("%d steps, %d predictions; want %d", r.Stats.Steps, r.Eval.Predicted, 180-128-1)
	}
	if r.FlashRead.Read.Bytes == 0 || r.ProcRead < r.FlashRead.Read.DeviceBytes {
		t.Fatalf("flash read %d bytes (%d on the device), /proc read_bytes grew by %d", r.FlashRead.Read.Bytes, r.FlashRead.Read.DeviceBytes, r.ProcRead)
	}
	if r.Eval.Perplexity <= 1 || r.Eval.FullPerplexity <= 1 || r.Stats.Recall <= 0 || r.Stats.Recall >= 1 {
		t.Fatalf("perplexity %v (full %v), recall %v", r.Eval.Perplexity, r.Eval.FullPerplexity, r.Stats.Recall)
	}
	// The DynaKV session's cache holds the prompt only (128 slots, against
	// the full-attention state's 256): the device memory figures differ by
	// the 128 slots left out of every layer's keys and values.
	if r.DeviceSlots != 128 || r.FullDevice == nil {
		t.Fatalf("device slots %d, full-attention memory %v; want 128 and a figure", r.DeviceSlots, r.FullDevice)
	}
	if r.Device.KVCache*2 != r.FullDevice.KVCache || r.FullDevice.Constants-r.Device.Constants != r.Device.KVCache {
		t.Fatalf("device memory %+v against the full cache's %+v: want half the KV cache, the rest of the constants equal", r.Device, *r.FullDevice)
	}
	// --kv-no-recall keeps the full-attention comparison but drops the
	// recall shadow.
	out, _, err = capture(t, runPerplexity, "--kv", "dynakv", "--model", model, "--text", "../../testdata/longctx/heldout_split.txt",
		"--kv-dir", dir, "--kv-budget", "0.05", "--prefill", "128", "--max-tokens", "140", "--ctx", "256", "--kv-no-recall", "--json")
	if err != nil {
		t.Fatal(err)
	}
	r = dynakvResult{}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Stats.Recall != 0 || r.Eval.FullPerplexity <= 1 || r.Eval.FullStepMs <= 0 {
		t.Fatalf("--kv-no-recall: recall %v, full perplexity %v, full step %v ms; want 0 and a full-attention run", r.Stats.Recall, r.Eval.FullPerplexity, r.Eval.FullStepMs)
	}
	out, _, err = capture(t, runGenerate, "--kv", "dynakv", "--model", model, "--prompt", "The code for Maple is 8477. The code for",
		"-n", "6", "--kv-dir", dir, "--ctx", "128", "--no-full", "--kv-prefetch", "--kv-reps-flash")
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("generate printed nothing")
	}
	if !strings.Contains(out, "representatives on flash true") {
		t.Fatalf("generate with --kv-prefetch --kv-reps-flash did not report the pipelines:\n%s", out)
	}
	if _, _, err := capture(t, runGenerate, "--kv", "dynakv", "--model", model, "--prompt", "The code", "-n", "200", "--kv-dir", dir, "--ctx", "128", "--no-full"); err == nil {
		t.Fatal("generating beyond --ctx accepted")
	}
	if _, _, err := capture(t, runPerplexity, "--kv", "dynakv", "--model", model, "--text", "x", "--kv-dir", dir, "--kv-budget", "2"); err == nil {
		t.Fatal("--kv-budget 2 accepted")
	}
}

// TestDynaKVRecallTail scores one recall example with the question decoded
// through DynaKV and checks the per-example record, then refuses a
// negative tail.
func TestDynaKVRecallTail(t *testing.T) {
	model := "../../testdata/longctx/model.onnx"
	dir := t.TempDir()
	out, _, err := capture(t, runPerplexity, "--kv", "dynakv", "--model", model, "--kv-dir", dir, "--kv-budget", "0.1",
		"--recall", "../../testdata/longctx/evals/recall_256.jsonl", "--recall-n", "1", "--recall-decode", "20", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r recallResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Tail != 20 || r.Examples != 1 || len(r.Choices) != 1 || len(r.FullChoices) != 1 || len(r.Answers) != 1 {
		t.Fatalf("tail %d, %d examples, choices %v / %v, answers %v; want 20, 1 and one of each", r.Tail, r.Examples, r.Choices, r.FullChoices, r.Answers)
	}
	// The device cache holds the prompt only: the context less the tail.
	if want, err := dynakv.DeviceSlots(int(r.ContextToks)-20, 0); err != nil || r.DeviceSlots != want {
		t.Fatalf("device slots %d for %v context tokens less 20 decoded: want %d (%v)", r.DeviceSlots, r.ContextToks, want, err)
	}
	if r.TailShort != 0 {
		t.Fatalf("%d contexts shortened the tail of 20 in recall_256", r.TailShort)
	}
	if _, _, err := capture(t, runPerplexity, "--kv", "dynakv", "--model", model, "--kv-dir", dir,
		"--recall", "../../testdata/longctx/evals/recall_256.jsonl", "--recall-n", "1", "--recall-decode", "-1"); err == nil {
		t.Fatal("--recall-decode -1 accepted")
	}
	// A context shorter than the tail decodes what it has, and says so.
	short := filepath.Join(dir, "short.jsonl")
	if err := os.WriteFile(short, []byte(`{"context": "The code for Ash is 1234. Ash:", "candidates": [" 1234.", " 5678."], "answer": 0}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = capture(t, runPerplexity, "--kv", "dynakv", "--model", model, "--kv-dir", dir, "--kv-budget", "0.1",
		"--recall", short, "--recall-decode", "24", "--json")
	if err != nil {
		t.Fatal(err)
	}
	r = recallResult{}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.TailShort != 1 || r.Examples != 1 {
		t.Fatalf("short context: %d of %d examples shortened; want 1 of 1", r.TailShort, r.Examples)
	}
}
