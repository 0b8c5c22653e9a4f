package kv

import (
	"math"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine"
)

// TestReplayMatchesLowering: decoding with device steps replayed from
// their recorded launches (the default) gives the same logits, bit for
// bit, as running every step through its lowering (Options.NoReplay), over
// a prefill and 80 decode steps of changing tokens that cross a padding
// boundary of the attended length (where the recordings are made again).
// Replays must have happened in the one session and not in the other, and
// the embedding's index check still runs on a replaying session.
func TestReplayMatchesLowering(t *testing.T) {
	for name, path := range benchModels() {
		t.Run(name, func(t *testing.T) {
			open := func(noReplay bool) *State {
				st, err := Open(path, engine.Options{Kernels: testLib, NoReplay: noReplay}, Config{MaxContext: 128})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Session().Close() })
				return st
			}
			rep, low := open(false), open(true)
			const prompt = 10
			for step := 0; step < 80; step++ {
				sameDecodeStep(t, step, prompt, rep, low, "replayed", "lowered")
			}
			if n := rep.Session().Replayed(); n == 0 {
				t.Fatalf("no device step was replayed in 80 decode steps")
			}
			if n := low.Session().Replayed(); n != 0 {
				t.Fatalf("%d steps replayed with NoReplay", n)
			}
			// A token id outside the embedding is still refused by the
			// device's index check (its step is never replayed).
			n := prompt + 80
			_, err := rep.Session().Run(map[string]*tensor.Dense{
				"input_ids":             tensor.New(tensor.WithShape(1, 1), tensor.WithBacking([]int64{1 << 20})),
				engine.KVPositionsInput: tensor.New(tensor.WithShape(1, 1), tensor.WithBacking([]int64{int64(n)})),
				engine.KVSlotsInput:     tensor.New(tensor.WithShape(1, 1), tensor.WithBacking([]int64{int64(n)})),
				engine.KVBiasInput:      tensor.New(tensor.WithShape(1, 1, 1, 128), tensor.WithBacking(make([]float32, 128))),
			})
			if err == nil || !strings.Contains(err.Error(), "1048576") {
				t.Fatalf("Run with token 1048576 = %v; want the index error", err)
			}
		})
	}
}

// sameDecodeStep runs decode step step (step 0: a prompt of prompt
// tokens; then one token at a time, of changing ids) on a and b, and fails
// unless their logits are the same bit for bit.
func sameDecodeStep(t *testing.T, step, prompt int, a, b *State, aName, bName string) {
	t.Helper()
	toks, pos := []int{(step*37 + 5) % 256}, []int{prompt + step - 1}
	if step == 0 {
		toks, pos = make([]int, prompt), seq(0, prompt)
		for i := range toks {
			toks[i] = (i*11 + 3) % 256
		}
	}
	x, err := a.Forward(toks, pos, pos)
	if err != nil {
		t.Fatal(err)
	}
	y, err := b.Forward(toks, pos, pos)
	if err != nil {
		t.Fatal(err)
	}
	if len(x) != len(y) {
		t.Fatalf("step %d: %d logits %s, %d %s", step, len(x), aName, len(y), bName)
	}
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			t.Fatalf("step %d: logit %d is %v %s, %v %s", step, i, x[i], aName, y[i], bName)
		}
	}
}

// TestDecodeStepAllocs: a decode step in steady state (the same binding as
// the step before) allocates a bounded, small number of objects on the
// host: the inputs' tensors, maps and copies of Run's map-based API. It
// was 2,474 objects (1.2 MB) per step of the default model before the
// shapes, binding and launches were kept across steps. Steps replayed as
// command buffers (Options.CommandBuffers) are held to the same bound.
func TestDecodeStepAllocs(t *testing.T) {
	path := benchModels()["llama"]
	for _, c := range []struct {
		name string
		opts engine.Options
	}{
		{"replayed", engine.Options{Kernels: testLib}},
		{"baked", engine.Options{Kernels: testLib, CommandBuffers: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.opts.CommandBuffers && !testLib.Device().HasCommandBuffers() {
				t.Skipf("%s offers no cl_khr_command_buffer", testLib.Device())
			}
			st, err := Open(path, c.opts, Config{MaxContext: 64})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Session().Close()
			if _, err := st.Forward(seq(1, 11), seq(0, 10), seq(0, 10)); err != nil {
				t.Fatal(err)
			}
			var ferr error
			step := func() {
				// Rewriting slot 10 keeps the context, and so the binding, fixed.
				if _, err := st.Forward([]int{7}, []int{10}, []int{10}); err != nil {
					ferr = err
				}
			}
			// Records; AllocsPerRun's warm-up run replays (and bakes).
			step()
			before := st.Session().CommandBuffers().BakedRuns
			n := testing.AllocsPerRun(20, step)
			if ferr != nil {
				t.Fatal(ferr)
			}
			t.Logf("%.0f allocations per decode step", n)
			if n > 100 {
				t.Fatalf("%.0f allocations per decode step; want at most 100", n)
			}
			if ran := st.Session().CommandBuffers().BakedRuns > before; ran != c.opts.CommandBuffers {
				t.Fatalf("steps ran in command buffers: %v; want %v", ran, c.opts.CommandBuffers)
			}
		})
	}
}
