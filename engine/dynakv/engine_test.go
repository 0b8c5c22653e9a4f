package dynakv

import (
	"errors"
	"os"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/tokenizer"
)

const longctx = "../../testdata/longctx"

// openPair opens the long-context model twice (DynaKV and full attention)
// and the held-out text's first tokens.
func openPair(t *testing.T, ctx, n int) (dyn, full *kv.State, doc []int) {
	t.Helper()
	return openState(t, ctx), openState(t, ctx), heldout(t, n)
}

// openState opens the long-context model with a cache of ctx slots.
func openState(t *testing.T, ctx int) *kv.State {
	t.Helper()
	if os.Getenv("POCL_WORK_GROUP_SPECIALIZATION") == "" {
		os.Setenv("POCL_WORK_GROUP_SPECIALIZATION", "0")
	}
	st, err := kv.Open(longctx+"/model.onnx", engine.Options{}, kv.Config{MaxContext: ctx})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Session().Close() })
	return st
}

// heldout returns the first n tokens of the held-out text.
func heldout(t *testing.T, n int) []int {
	t.Helper()
	tok, err := tokenizer.Load(longctx + "/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(longctx + "/heldout.txt")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(string(text[:min(len(text), 8*n)]), tokenizer.EncodeOptions{AddBOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) < n {
		t.Fatalf("held-out text gives %d tokens; want %d", len(ids), n)
	}
	return ids[:n]
}

func newFor(t *testing.T, st *kv.State, cfg Config) *System {
	t.Helper()
	info := st.Info()
	cfg.Dir = t.TempDir()
	sys, err := New(cfg, st.Session().CacheAttentionLayers(), 8, info.Layers[0].KVHeads, info.Layers[0].HeadDim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Close() })
	st.Session().SetAttentionHook(sys.Hook(), false)
	return sys
}

// TestEngine runs DynaKV inside the engine on the long-context model.
// At ρ = 1 every cluster is retrieved, so the host attention over the
// flash-resident entries must reproduce full attention (the fused kernel)
// to 1e-4 in the logits. At ρ = 5% (§2d.1) the outputs must differ from
// full attention, recall must be below 1 and the bytes read must be the
// planned extents of the retrieved clusters. The invariant is checked
// after every step of both.
func TestEngine(t *testing.T) {
	dyn, full, doc := openPair(t, 96, 76)
	check := func(sys *System) func(int) {
		return func(int) {
			if err := sys.CheckInvariant(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("full-budget", func(t *testing.T) {
		sys := newFor(t, dyn, Config{Budget: 1, Debug: true})
		ev, err := Evaluate(dyn, full, doc, 64, 0, check(sys))
		if err != nil {
			t.Fatal(err)
		}
		if ev.MaxLogitDiff > 1e-4 || ev.Top1 != 1 {
			t.Fatalf("ρ = 1: max logit difference %g, top-1 agreement %v; want ≤ 1e-4 and 1", ev.MaxLogitDiff, ev.Top1)
		}
	})
	t.Run("small-budget", func(t *testing.T) {
		sys := newFor(t, dyn, Config{Budget: 0.05, Shadow: true, Debug: true})
		ev, err := Evaluate(dyn, full, doc, 64, 0, check(sys))
		if err != nil {
			t.Fatal(err)
		}
		r := sys.Report()
		if ev.MaxLogitDiff < 1e-3 {
			t.Fatalf("ρ = 5%%: logits within %g of full attention: retrieval is not used", ev.MaxLogitDiff)
		}
		if r.Recall <= 0 || r.Recall >= 1 {
			t.Fatalf("recall %v; want in (0, 1)", r.Recall)
		}
		if got := sys.ReadSnapshot().Read.Bytes; got != sys.PlannedReadBytes() || got == 0 {
			t.Fatalf("read %d bytes, planned %d", got, sys.PlannedReadBytes())
		}
	})
}

// TestBoundedDeviceCache runs the same DynaKV decoding twice: once over a
// device cache of the whole context (slot = position) and once over the
// bounded cache DeviceSlots gives for the prompt, whose slots are reused
// as a ring after it. The hook owns every decode step's attention, so the
// logits must be bit-identical, as must the flash reads; and the bounded
// session must hold less device memory than the full one by exactly the
// slots it leaves out (the KV cache buffers, counted by the engine and by
// the OpenCL device's live allocations).
func TestBoundedDeviceCache(t *testing.T) {
	const prompt, steps, ctx = 64, 16, 96
	ring, err := DeviceSlots(prompt, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ring != prompt {
		t.Fatalf("DeviceSlots(%d, 0) = %d; want %d", prompt, ring, prompt)
	}
	if _, err := DeviceSlots(0, 0); err == nil {
		t.Fatal("DeviceSlots of an empty prompt: no error")
	}
	full, bounded, doc := openState(t, ctx), openState(t, ring), heldout(t, prompt+steps)

	mf, mb := full.Session().DeviceMemory(), bounded.Session().DeviceMemory()
	saved := int64(ctx-ring) * int64(full.SlotBytes())
	if d := mf.KVCache - mb.KVCache; d != saved || mb.KVCache != int64(ring*bounded.SlotBytes()) {
		t.Fatalf("KV cache %d bytes (full %d): %d saved; want %d slots of %d = %d", mb.KVCache, mf.KVCache, d, ctx-ring, full.SlotBytes(), saved)
	}
	if d := mf.Constants - mb.Constants; d != saved {
		t.Fatalf("constants %d (full %d): %d less; want the %d cache bytes", mb.Constants, mf.Constants, d, saved)
	}
	if mb.Activations > mf.Activations {
		t.Fatalf("activations %d with the bounded cache; %d with the full one", mb.Activations, mf.Activations)
	}
	if mf.Live >= 0 && mb.Live >= 0 && mf.Live-mb.Live < saved {
		t.Fatalf("the device holds %d bytes (full cache: %d): %d less; want at least %d", mb.Live, mf.Live, mf.Live-mb.Live, saved)
	}
	t.Logf("device memory: full cache %+v, bounded %+v", mf, mb)

	run := func(st *kv.State) ([][]float32, int64) {
		sys := newFor(t, st, Config{Budget: 0.05, Recent: 8, Debug: true})
		defer st.Session().SetAttentionHook(nil, false)
		st.Reset()
		if _, err := st.Forward(doc[:prompt], seqInts(0, prompt), seqInts(0, prompt)); err != nil {
			t.Fatal(err)
		}
		var out [][]float32
		for p := prompt; p < len(doc); p++ {
			l, err := st.Forward(doc[p:p+1], []int{p}, []int{p % st.MaxContext()})
			if err != nil {
				t.Fatal(err)
			}
			if err := sys.CheckInvariant(); err != nil {
				t.Fatal(err)
			}
			out = append(out, append([]float32(nil), l[len(l)-st.Vocab():]...))
		}
		return out, sys.ReadSnapshot().Read.Bytes
	}
	want, wantRead := run(full)
	got, gotRead := run(bounded)
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("step %d logit %d: %v with the bounded cache, %v with the full one", i, j, got[i][j], want[i][j])
			}
		}
	}
	if gotRead != wantRead || gotRead == 0 {
		t.Fatalf("flash reads %d bytes with the bounded cache, %d with the full one", gotRead, wantRead)
	}
	// The evaluation loop takes the bounded cache too, and refuses a
	// prompt it cannot hold.
	if _, err := Evaluate(bounded, nil, doc, ring+1, 0, nil); !errors.Is(err, engine.ErrContextFull) {
		t.Fatalf("Evaluate with a %d-token prompt over %d slots: %v; want ErrContextFull", ring+1, ring, err)
	}
}

// TestDeviceMemory2048 compares, on the long-context model at its full
// context of 2048, the device memory of a session with the whole cache
// and the one DynaKV needs for a 256-token prompt. Both are planned for
// the same runs (prompts of at most 256 tokens, then single tokens): the
// bounded one must hold the 1792 left-out slots' keys and values less,
// and no activation more. The figures are logged (RESULTS.md quotes
// them: go test -run TestDeviceMemory2048 -v).
func TestDeviceMemory2048(t *testing.T) {
	const ctx, prompt = 2048, 256
	ring, err := DeviceSlots(prompt, 0)
	if err != nil {
		t.Fatal(err)
	}
	open := func(slots int) engine.DeviceMemory {
		st, err := kv.Open(longctx+"/model.onnx", engine.Options{Max: map[string]int64{"seq": prompt}}, kv.Config{MaxContext: slots})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Session().Close()
		if got := st.Session().Maxima()["seq"]; got != prompt {
			t.Fatalf("the plan is sized for runs of %d tokens; want %d", got, prompt)
		}
		return st.Session().DeviceMemory()
	}
	full, bounded := open(ctx), open(ring)
	const slot = 6 * 2 * 4 * 32 * 4 // layers x (K, V) x KV heads x head size x float32
	saved := int64(ctx-ring) * slot
	if full.KVCache != ctx*slot || bounded.KVCache != int64(ring)*slot {
		t.Fatalf("KV cache %d (full) and %d (bounded); want %d and %d", full.KVCache, bounded.KVCache, ctx*slot, int64(ring)*slot)
	}
	if full.Constants-bounded.Constants != saved || bounded.Activations > full.Activations {
		t.Fatalf("bounded %+v against full %+v: want constants lower by %d, activations no higher", bounded, full, saved)
	}
	if full.Live >= 0 && full.Live-bounded.Live < saved {
		t.Fatalf("the device holds %d bytes (full cache %d): want at least %d less", bounded.Live, full.Live, saved)
	}
	t.Logf("full cache (%d slots): %+v", ctx, full)
	t.Logf("bounded (%d slots): %+v", ring, bounded)
	t.Logf("saved: %d bytes live, %d of them the KV cache, %d activations", full.Live-bounded.Live, saved, full.Activations-bounded.Activations)
}

// TestContinuationTail scores a continuation with its context's last
// tokens decoded through the hook. At ρ = 1 the hook reproduces full
// attention, so every tail gives the full-attention log-likelihood. At
// ρ = 5% a tail of 0 scores the first token from the prompt's logits
// (the device's attention), so its log-likelihood of one token must be
// exactly full attention's; with a tail the hook decides that token too
// and the two must differ.
func TestContinuationTail(t *testing.T) {
	dyn, full, doc := openPair(t, 96, 80)
	ctx, cand := doc[:72], doc[72:73]
	for _, tail := range []int{0, 1, 9} {
		newFor(t, dyn, Config{Budget: 1})
		d, f, err := Continuation(dyn, full, ctx, doc[72:76], tail)
		if err != nil {
			t.Fatal(err)
		}
		if diff := d - f; diff > 1e-3 || diff < -1e-3 {
			t.Fatalf("ρ = 1, tail %d: log-likelihood %v against full attention's %v", tail, d, f)
		}
	}
	newFor(t, dyn, Config{Budget: 0.05})
	d0, f0, err := Continuation(dyn, full, ctx, cand, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := d0 - f0; diff > 1e-4 || diff < -1e-4 {
		t.Fatalf("ρ = 5%%, tail 0: first token scored at %v, full attention %v; want the prompt's logits", d0, f0)
	}
	newFor(t, dyn, Config{Budget: 0.05})
	d9, f9, err := Continuation(dyn, full, ctx, cand, 9)
	if err != nil {
		t.Fatal(err)
	}
	if f9 != f0 {
		t.Fatalf("full attention's score moved with the tail: %v, %v", f0, f9)
	}
	if diff := d9 - f9; diff < 1e-4 && diff > -1e-4 {
		t.Fatalf("ρ = 5%%, tail 9: %v within 1e-4 of full attention's %v: the hook did not score the token", d9, f9)
	}
	for _, bad := range []int{-1, len(ctx) - 1} {
		if _, _, err := Continuation(dyn, full, ctx, cand, bad); err == nil {
			t.Fatalf("tail %d of %d tokens: no error", bad, len(ctx))
		}
	}
}
