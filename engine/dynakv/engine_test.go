package dynakv

import (
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
	if os.Getenv("POCL_WORK_GROUP_SPECIALIZATION") == "" {
		os.Setenv("POCL_WORK_GROUP_SPECIALIZATION", "0")
	}
	var err error
	dyn, err = kv.Open(longctx+"/model.onnx", engine.Options{}, kv.Config{MaxContext: ctx})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dyn.Session().Close() })
	full, err = kv.Open(longctx+"/model.onnx", engine.Options{}, kv.Config{MaxContext: ctx})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { full.Session().Close() })
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
	return dyn, full, ids[:n]
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
