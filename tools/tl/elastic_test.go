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

// TestBenchLoRALevels: N+lora entries run level N with its adapters
// (--lora auto: the lora folder beside the model), interleaved with plain
// N; asking for adapters a level lacks, or for N+lora without --lora, is
// refused.
func TestBenchLoRALevels(t *testing.T) {
	args := []string{"--model", elasticLlama + "/model.onnx", "-p", "6", "-n", "1", "-r", "1", "-w", "0", "--device", "go", "--json"}
	out, err := captureStdout(t, func() error {
		return runLLMBench(append(args, "--level", "20,20+lora,60+lora", "--lora", "auto"))
	})
	if err != nil {
		t.Fatal(err)
	}
	var res llmBenchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	type lv struct {
		level int
		lora  bool
	}
	got := map[string]lv{}
	for _, tt := range res.Tests {
		got[tt.Name] = lv{tt.Level, tt.LoRA}
	}
	for name, want := range map[string]lv{"pp6 L20": {20, false}, "pp6 L20+lora": {20, true}, "tg1 @ d6 L60+lora": {60, true}} {
		if g, ok := got[name]; !ok || g != want {
			t.Errorf("test %q: %+v, present %v (tests %v)", name, g, ok, got)
		}
	}
	for _, c := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--level", "40+lora", "--lora", "auto"}, "no adapters for level 40"},
		{[]string{"--level", "20+lora"}, "give --lora"},
		{[]string{"--level", "20", "--lora", t.TempDir()}, "no level-XX.bin"},
		{[]string{"--lora", "auto"}, "--lora needs --level"},
	} {
		_, err := captureStdout(t, func() error { return runLLMBench(append(append([]string(nil), args...), c.extra...)) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want an error with %q", c.extra, err, c.want)
		}
	}
}

func TestTakeFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
		rest string
	}{
		{[]string{"--model", "m", "--importance", "proxy", "--out", "o"}, "proxy", "--model m --out o"},
		{[]string{"--importance=taylor", "--model", "m"}, "taylor", "--model m"},
		{[]string{"-importance", "proxy"}, "proxy", ""},
		{[]string{"--importance-from", "f", "--model", "m"}, "", "--importance-from f --model m"},
		{[]string{"--model", "m"}, "", "--model m"},
	} {
		v, rest, err := takeFlag(c.args, "importance")
		if err != nil || v != c.want || strings.Join(rest, " ") != c.rest {
			t.Errorf("takeFlag(%v) = %q, %v, %v; want %q, %s", c.args, v, rest, err, c.want, c.rest)
		}
	}
	if _, _, err := takeFlag([]string{"--importance"}, "importance"); err == nil {
		t.Error("--importance without a value accepted")
	}
}

// TestElasticBuildErrors: bad --importance choices are refused before
// any Python runs.
func TestElasticBuildErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--importance", "magic", "--model", "m"}, "want taylor"},
		{[]string{"--importance", "proxy", "--model", "m", "--out", t.TempDir()}, "--calib"},
		{[]string{"--device", "go", "--model", "m"}, "--device goes with --importance proxy"},
	} {
		if err := runElastic(append([]string{"build"}, c.args...)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("build %v: %v; want an error with %q", c.args, err, c.want)
		}
	}
}
