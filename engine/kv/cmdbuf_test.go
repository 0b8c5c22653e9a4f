package kv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tlite/tlite/engine"
)

// TestCommandBuffersMatchLowering: with Options.CommandBuffers, the
// replayed device steps run as command buffers, and the logits are the
// same, bit for bit, as running every step through its lowering, over a
// prefill and 80 decode steps. The attended length crosses a padding
// boundary (Pad 32) twice: the binding, and so the sizes and arguments the
// buffers baked in, change there, so the buffers must be baked again (a
// stale one would give other logits or fail the count checks below).
func TestCommandBuffersMatchLowering(t *testing.T) {
	if !testLib.Device().HasCommandBuffers() {
		t.Skipf("%s offers no cl_khr_command_buffer", testLib.Device())
	}
	path := benchModels()["llama"]
	open := func(opts engine.Options) *State {
		opts.Kernels = testLib
		st, err := Open(path, opts, Config{MaxContext: 128, Pad: 32})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Session().Close() })
		return st
	}
	dev := testLib.Device()
	buffers0, kernels0 := dev.BakedObjects()
	baked, low := open(engine.Options{CommandBuffers: true}), open(engine.Options{NoReplay: true})
	const prompt = 10
	var bakesAt []int64 // the bake count after each step
	var liveAt []int    // the command buffers live after each step
	for step := 0; step < 80; step++ {
		sameDecodeStep(t, step, prompt, baked, low, "baked", "lowered")
		bakesAt = append(bakesAt, baked.Session().CommandBuffers().Bakes)
		b, _ := dev.BakedObjects()
		liveAt = append(liveAt, b-buffers0)
	}
	t.Logf("bakes %v, live command buffers %v", bakesAt, liveAt)
	cb := baked.Session().CommandBuffers()
	if cb.LastError != nil {
		t.Fatalf("a bake failed: %v", cb.LastError)
	}
	if cb.BakedRuns == 0 {
		t.Fatal("no device step ran in a command buffer")
	}
	// Context 10+k crosses 32 at step 22 and 64 at step 54: the buffers
	// baked before each boundary cannot serve after it.
	for _, s := range []int{22, 54} {
		if bakesAt[s+3] <= bakesAt[s-1] {
			t.Fatalf("no command buffer was baked again after the padding boundary near step %d (bakes %v)", s, bakesAt)
		}
	}
	if low.Session().CommandBuffers().BakedRuns != 0 {
		t.Fatal("a NoReplay session ran command buffers")
	}
	// A re-bake replaces the buffers of the generation before: as many
	// are live after the last boundary as before the first, never the
	// old ones besides the new.
	if liveAt[21] == 0 || liveAt[79] != liveAt[21] {
		t.Fatalf("%d command buffers live before the first padding boundary, %d after the last; want the same, not 0", liveAt[21], liveAt[79])
	}
	// Close releases every command buffer and kernel copy.
	if err := baked.Session().Close(); err != nil {
		t.Fatal(err)
	}
	if b, k := dev.BakedObjects(); b != buffers0 || k != kernels0 {
		t.Fatalf("after Close: %d command buffers and %d kernel copies live, want %d and %d", b, k, buffers0, kernels0)
	}
}

// BenchmarkDecodeCommandBuffers times a decode step at 128 tokens of
// context (slot 128 rewritten each step, so the binding holds) three ways:
// every step through its lowering (NoReplay), replayed launch by launch
// (the default), and replayed as command buffers (CommandBuffers). Besides
// the time it reports launches/op, buffers/op (command buffers enqueued)
// and cpu-ns/op, the process's CPU time per step (host work and the
// driver's, plus the kernels' on a CPU device), which a loaded machine
// disturbs less than the wall time. TLITE_BENCH_DECODE_MODEL=path adds
// a model of one's own as "extra" (a 4-bit export, say); with
// TLITE_JOIN=0 and 1 alternated it compares the products apart and joined.
func BenchmarkDecodeCommandBuffers(b *testing.B) {
	models := benchModels()
	if p := filepath.Join(modelsDir, "..", "longctx", "model.onnx"); fileExists(p) {
		models["longctx"] = p
	}
	if p := os.Getenv("TLITE_BENCH_DECODE_MODEL"); p != "" {
		models["extra"] = p
	}
	dev := testLib.Device()
	for name, path := range models {
		for _, mode := range []string{"lowered", "replay", "baked"} {
			b.Run(name+"/"+mode, func(b *testing.B) {
				if mode == "baked" && !dev.HasCommandBuffers() {
					b.Skipf("%s offers no cl_khr_command_buffer", dev)
				}
				opts := engine.Options{Kernels: testLib, NoReplay: mode == "lowered", CommandBuffers: mode == "baked"}
				st, err := Open(path, opts, Config{MaxContext: 256})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Session().Close()
				const ctx = 128
				if _, err := st.Forward(prompt(ctx), seq(0, ctx), seq(0, ctx)); err != nil {
					b.Fatal(err)
				}
				step := func() error {
					_, err := st.Forward([]int{7}, []int{ctx}, []int{ctx})
					return err
				}
				// Record, then bake.
				for i := 0; i < 3; i++ {
					if err := step(); err != nil {
						b.Fatal(err)
					}
				}
				before, cb0, cpu0 := dev.Stats(), st.Session().CommandBuffers(), cpuTime()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := step(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				after, cb1, cpu1 := dev.Stats(), st.Session().CommandBuffers(), cpuTime()
				n := float64(b.N)
				b.ReportMetric(float64(after.Launches-before.Launches)/n, "launches/op")
				b.ReportMetric(float64(after.BakedReplays-before.BakedReplays)/n, "buffers/op")
				b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/n, "cpu-ns/op")
				if mode == "baked" && (cb1.BakedRuns == cb0.BakedRuns || cb1.LastError != nil) {
					b.Fatalf("no step ran in a command buffer (last bake error: %v)", cb1.LastError)
				}
			})
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
