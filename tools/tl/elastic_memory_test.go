package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/elastic"
)

// TestAdapterBytes: the adapters count at the engine's storage size,
// 4 bytes a value at fp32 and 2 at fp16.
func TestAdapterBytes(t *testing.T) {
	m := func(a, b int) elastic.LoRAMatrix {
		return elastic.LoRAMatrix{A: make([]float32, a), B: make([]float32, b)}
	}
	sets := []*elastic.LoRA{
		{Layers: [][]elastic.LoRAMatrix{{m(64*8, 8*32), m(8, 8)}}},
		{Layers: [][]elastic.LoRAMatrix{{m(10, 20)}, {m(1, 2)}}},
	}
	n := int64(64*8 + 8*32 + 16 + 30 + 3)
	if got := adapterBytes(sets, engine.FP32); got != 4*n {
		t.Errorf("fp32: %d bytes; want %d", got, 4*n)
	}
	if got := adapterBytes(sets, engine.FP16); got != 2*n {
		t.Errorf("fp16: %d bytes; want %d", got, 2*n)
	}
	if got := adapterBytes(nil, engine.FP32); got != 0 {
		t.Errorf("no sets: %d bytes", got)
	}
}

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
	var sum int64
	for _, s := range r.Sessions {
		sum += s.WeightsInPlace + s.WeightsCopied + s.KVCache + s.Activations + s.Adapters
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
