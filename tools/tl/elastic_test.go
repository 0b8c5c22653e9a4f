package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const elasticLlama = "../../testdata/elastic/llama"

func captureStdout(t *testing.T, f func() error) (string, error) {
	t.Helper()
	var out bytes.Buffer
	old := stdout
	stdout = &out
	defer func() { stdout = old }()
	err := f()
	return out.String(), err
}

func TestElasticShow(t *testing.T) {
	out, err := captureStdout(t, func() error { return runElastic([]string{"show", elasticLlama}) })
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"3 layers, 4/2 heads of 16", "anchors", " 20%", "100%"} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	if _, err := captureStdout(t, func() error { return runElastic(nil) }); err == nil {
		t.Error("tl elastic without a subcommand succeeded")
	}
	if _, err := captureStdout(t, func() error { return runElastic([]string{"show", t.TempDir()}) }); err == nil ||
		!strings.Contains(err.Error(), "elastic.json") {
		t.Errorf("show of a folder without elastic.json: %v", err)
	}
}

// TestBenchLevels: bench --model --level runs every level asked for, in
// one process, and labels each test with its level.
func TestBenchLevels(t *testing.T) {
	args := []string{"--model", elasticLlama + "/model.onnx", "-p", "6", "-n", "2", "-r", "1", "-w", "0", "--device", "go", "--json"}
	out, err := captureStdout(t, func() error { return runLLMBench(append(args, "--level", "20,100")) })
	if err != nil {
		t.Fatal(err)
	}
	var res llmBenchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]int{}
	for _, tt := range res.Tests {
		got[tt.Name] = tt.Level
	}
	for name, lv := range map[string]int{"pp6 L20": 20, "tg2 @ d6 L20": 20, "pp6 L100": 100, "tg2 @ d6 L100": 100} {
		if l, ok := got[name]; !ok || l != lv {
			t.Errorf("test %q: level %d, present %v (tests %v)", name, l, ok, got)
		}
	}
	for _, bad := range []string{"0", "20,x", "55"} {
		if _, err := captureStdout(t, func() error { return runLLMBench(append(args, "--level", bad)) }); err == nil {
			t.Errorf("--level %s accepted", bad)
		}
	}
}
