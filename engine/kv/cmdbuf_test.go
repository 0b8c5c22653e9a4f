package kv

import (
	"math"
	"testing"

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
	baked, low := open(engine.Options{CommandBuffers: true}), open(engine.Options{NoReplay: true})
	const prompt = 10
	var bakesAt []int64 // the bake count after each step
	for step := 0; step < 80; step++ {
		toks, pos := []int{(step*37 + 5) % 256}, []int{prompt + step - 1}
		if step == 0 {
			toks, pos = make([]int, prompt), seq(0, prompt)
			for i := range toks {
				toks[i] = (i*11 + 3) % 256
			}
		}
		a, err := baked.Forward(toks, pos, pos)
		if err != nil {
			t.Fatal(err)
		}
		b, err := low.Forward(toks, pos, pos)
		if err != nil {
			t.Fatal(err)
		}
		if len(a) != len(b) {
			t.Fatalf("step %d: %d logits baked, %d lowered", step, len(a), len(b))
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("step %d: logit %d is %v baked, %v lowered", step, i, a[i], b[i])
			}
		}
		bakesAt = append(bakesAt, baked.Session().CommandBuffers().Bakes)
	}
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
}
