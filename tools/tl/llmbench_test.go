package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIsLLMBench(t *testing.T) {
	for args, want := range map[string]bool{
		"m.onnx --shape x=1x3":    false,
		"--model m.onnx -p 8":     true,
		"-model=m.onnx":           true,
		"m.onnx --models-dir x":   false,
		"--shape model=1x2 a.onx": false,
	} {
		if got := isLLMBench(strings.Fields(args)); got != want {
			t.Errorf("isLLMBench(%q) = %v", args, got)
		}
	}
}

func TestSpreadOf(t *testing.T) {
	s := spreadOf([]float64{4, 1, 3, 2})
	// mean 2.5; squared deviations 2.25+0.25+0.25+2.25 = 5 over n-1 = 3.
	want := spread{Median: 2.5, Mean: 2.5, Stddev: math.Sqrt(5.0 / 3), Min: 1, Max: 4}
	if s != want {
		t.Errorf("spreadOf = %+v, want %+v", s, want)
	}
	if s := spreadOf([]float64{7}); s != (spread{Median: 7, Mean: 7, Min: 7, Max: 7}) {
		t.Errorf("one value: %+v", s)
	}
}

// TestLLMBenchJSON runs bench's language-model mode on the default model.
func TestLLMBenchJSON(t *testing.T) {
	model := filepath.Join(defaultModelDir, "model.onnx")
	out, _, err := capture(t, runBench, "--model", model, "-p", "8,16", "-n", "4", "-r", "3", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res llmBenchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	var cfg struct {
		Parameters int64 `json:"parameters"`
	}
	readDefaultJSON(t, "config.json", &cfg)
	// The count includes small constants (RoPE frequencies) that the
	// training script does not count as parameters.
	if res.Model != "default" || res.Params < cfg.Parameters || res.Params > cfg.Parameters+cfg.Parameters/1000 ||
		res.SizeBytes != 4*res.Params || res.Context != 20 || res.Runs != 3 {
		t.Errorf("model %q, %d params, %d bytes, context %d, %d runs; want default, about %d fp32 params, context 16+4, 3 runs",
			res.Model, res.Params, res.SizeBytes, res.Context, res.Runs, cfg.Parameters)
	}
	var names []string
	for _, tt := range res.Tests {
		names = append(names, tt.Name)
		r, m := tt.TokPerSec, tt.Ms
		if !(r.Min > 0 && r.Min <= r.Median && r.Median <= r.Max && m.Min <= m.Median && m.Median <= m.Max) {
			t.Errorf("%s: tok/s %+v, ms %+v", tt.Name, r, m)
		}
		// tok/s and ms describe the same runs.
		tokens := tt.Prompt + tt.Gen
		if math.Abs(float64(tokens)/(m.Min/1000)-r.Max) > 1e-6*r.Max {
			t.Errorf("%s: fastest run %.3f ms for %d tokens, but max %.3f tok/s", tt.Name, m.Min, tokens, r.Max)
		}
		if strings.HasPrefix(tt.Name, "pp") && (tt.TTFTMs == nil || tt.TTFTMs.Min < m.Min) {
			t.Errorf("%s: time to first token %+v shorter than the prefill %+v", tt.Name, tt.TTFTMs, m)
		}
	}
	if fmt.Sprint(names) != "[pp8 tg4 @ d8 pp16 tg4 @ d16]" {
		t.Errorf("tests %v", names)
	}
	if res.PeakRSSMiB <= 0 || res.ActBytes <= 0 {
		t.Errorf("memory: peak RSS %.1f MiB, activations %d bytes", res.PeakRSSMiB, res.ActBytes)
	}
}

func TestLLMBenchTable(t *testing.T) {
	model := filepath.Join(defaultModelDir, "model.onnx")
	out, _, err := capture(t, runBench, "--model="+model, "-p", "5", "-n", "2", "-r", "1", "-w", "0")
	if err != nil {
		t.Fatal(err)
	}
	// The parameter count is the one config.json records for the model.
	var cfg struct {
		Parameters int `json:"parameters"`
	}
	readDefaultJSON(t, "config.json", &cfg)
	params := fmt.Sprintf("%.2f M", float64(cfg.Parameters)/1e6)
	for _, want := range []string{"test", "t/s", "pp5", "tg2 @ d5", params, "time to first token", "peak RSS"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, args := range [][]string{
		{"--model", model, "-p", "0"},
		{"--model", model, "-p", "8", "-n", "8", "--ctx", "10"},
		{"--model", model, "extra.onnx"},
	} {
		if _, _, err := capture(t, runBench, args...); err == nil {
			t.Errorf("bench %q succeeded", args)
		}
	}
}

// TestLLMBenchCPUProfile: --cpuprofile writes a Go CPU profile (gzip
// framed, as runtime/pprof writes it) of the timed repetitions, and a path
// that cannot be created is an error naming the flag.
func TestLLMBenchCPUProfile(t *testing.T) {
	model := filepath.Join(defaultModelDir, "model.onnx")
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	if _, _, err := capture(t, runBench, "--model", model, "-p", "8", "-n", "2", "-r", "1", "--cpuprofile", prof); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < 2 || raw[0] != 0x1f || raw[1] != 0x8b {
		t.Fatalf("profile of %d bytes starting %x; want gzip", len(raw), raw[:min(len(raw), 2)])
	}
	bad := filepath.Join(t.TempDir(), "missing", "cpu.prof")
	if _, _, err := capture(t, runBench, "--model", model, "-p", "8", "-n", "2", "-r", "1", "--cpuprofile", bad); err == nil || !strings.Contains(err.Error(), "--cpuprofile") {
		t.Fatalf("--cpuprofile %s: %v; want an error naming the flag", bad, err)
	}
}
