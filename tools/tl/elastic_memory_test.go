package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestElasticMemory: the elastic fixture with its two adapter sets and the
// TLM, in one process on the pure-Go backend: every level runs, the
// adapters' bytes are the files' f32 values, and the totals add up.
func TestElasticMemory(t *testing.T) {
	out, err := captureStdout(t, func() error {
		return runElastic([]string{"memory", "--model", elasticLlama + "/model.onnx", "--lora", "auto", "--tlm", "../../testdata/elastic/tlm",
			"--device", "go", "--prompt", "6", "--ctx", "64", "--json"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var r memoryResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(r.Sessions) != 2 || len(r.ModelLevels) != 9 || r.AdapterFiles != 2 || r.Context != 64 {
		t.Fatalf("result %+v", r)
	}
	if r.Device != "go" {
		t.Errorf("device %q; the sessions ran on the pure-Go backend", r.Device)
	}
	// 3 layers × (q 64→64, k 64→32, v 64→32, o 64→64, up 64→172, down
	// 172→64) adapters of rank 8: A in×8 plus B 8×out values each.
	per := 0
	for _, io := range [][2]int{{64, 64}, {64, 32}, {64, 32}, {64, 64}, {64, 172}, {172, 64}} {
		per += 8 * (io[0] + io[1])
	}
	if want := int64(2 * 3 * per * 4); r.Sessions[0].Adapters != want {
		t.Errorf("adapter bytes %d; want %d", r.Sessions[0].Adapters, want)
	}
	if r.Sessions[0].AdapterScratch <= 0 || r.Sessions[1].AdapterScratch != 0 {
		t.Errorf("adapter scratch %d (elastic) and %d (TLM); want > 0 and 0", r.Sessions[0].AdapterScratch, r.Sessions[1].AdapterScratch)
	}
	var sum int64
	for _, s := range r.Sessions {
		sum += s.WeightsInPlace + s.WeightsCopied + s.KVCache + s.Activations + s.Adapters + s.AdapterScratch
		if s.WeightsInPlace+s.WeightsCopied <= 0 || s.Activations <= 0 {
			t.Errorf("session %+v holds no weights or activations", s)
		}
	}
	if sum != r.TotalDevice || r.PeakRSSMiB <= 0 {
		t.Errorf("total %d, sessions sum %d, peak RSS %v", r.TotalDevice, sum, r.PeakRSSMiB)
	}
	// The elastic model given as its folder.
	out, err = captureStdout(t, func() error {
		return runElastic([]string{"memory", "--model", elasticLlama, "--device", "go", "--prompt", "4", "--ctx", "32"})
	})
	if err != nil || !strings.Contains(out, "1 sessions") {
		t.Errorf("--model FOLDER: %v\n%s", err, out)
	}
	// Two plain models side by side.
	out, err = captureStdout(t, func() error {
		return runElastic([]string{"memory", "--models", elasticLlama + "/original.onnx," + elasticLlama, "--device", "go", "--prompt", "4", "--ctx", "32"})
	})
	if err != nil || !strings.Contains(out, "2 sessions") {
		t.Errorf("--models: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{},
		{"--model", elasticLlama, "--models", elasticLlama},
		{"--models", elasticLlama, "--tlm", "x"},
		{"--model", elasticLlama, "--prompt", "0"},
		{"--models", elasticLlama + ",", "--device", "go"},
	} {
		if _, err := captureStdout(t, func() error { return runElastic(append([]string{"memory"}, args...)) }); err == nil {
			t.Errorf("memory %v succeeded", args)
		}
	}
}
