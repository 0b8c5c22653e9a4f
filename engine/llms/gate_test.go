package llms

import (
	"sort"
	"testing"
	"time"

	"github.com/tlite/tlite/engine/flash"
)

// interleaved is a test plan: chunks in rec are recomputed, the other
// missing ones loaded (pre: before the last recomputed chunk).
func interleaved(rec map[int]bool) func(miss []missingChunk, forced []int) plan {
	return func(miss []missingChunk, forced []int) plan {
		var p plan
		last := -1
		for _, c := range miss {
			if rec[c.idx] {
				p.recompute = append(p.recompute, c.idx)
				last = max(last, c.idx)
			}
		}
		for _, c := range miss {
			if !rec[c.idx] {
				p.load = append(p.load, c.idx)
				if c.idx < last {
					p.pre = append(p.pre, c.idx)
				} else {
					p.post = append(p.post, c.idx)
				}
			}
		}
		p.recompute = append(p.recompute, forced...)
		sort.Ints(p.recompute)
		return p
	}
}

// TestGatedRestoreBitIdentical: a restore through the per-layer gate
// leaves the device cache byte for byte as the ungated restore of the
// same plan does, and gives the same next-step logits, for compressed
// chunks (levels 8/4/2 decoded region by region) and interleaved
// recompute sets; the gated restore did run (a timeline of every layer).
func TestGatedRestoreBitIdentical(t *testing.T) {
	st := openDefault(t, 128)
	m := newManager(t, st, t.TempDir(), Config{})
	toks := heldoutTokens(t, 121)
	hist, next, other := toks[:100], toks[100], toks[20:120]
	for _, id := range []string{"a", "b"} {
		h := hist
		if id == "b" {
			h = other
		}
		if _, err := m.Install(id, h); err != nil {
			t.Fatal(err)
		}
		if err := m.Commit(id, h); err != nil {
			t.Fatal(err)
		}
	}
	layers := st.Session().CacheAttentionLayers()
	for trial, rec := range []map[int]bool{{1: true, 4: true}, {0: true, 2: true, 5: true}} {
		var kv [2][]float32
		var logits [2][]float32
		for k, ungated := range []bool{false, true} {
			if _, err := m.Install("b", other); err != nil {
				t.Fatal(err)
			}
			evictAll(t, m, "a")
			m.cfg.Ungated = ungated
			m.choose = interleaved(rec)
			clobber(t, st)
			tm, err := m.Install("a", hist)
			if err != nil {
				t.Fatal(err)
			}
			if tm.Recomputed != len(rec) || tm.Loaded == 0 {
				t.Fatalf("trial %d: plan not executed: %+v", trial, tm)
			}
			if gated := len(tm.Layers) == layers; gated == ungated {
				t.Fatalf("trial %d (ungated %v): %d layers in the gate's timeline; the model has %d", trial, ungated, len(tm.Layers), layers)
			}
			kv[k] = readKV(t, st, 100)
			logits[k] = nextLogits(t, st, next, 100)
			if err := m.Commit("a", hist); err != nil {
				t.Fatal(err)
			}
		}
		for j := range kv[0] {
			if kv[0][j] != kv[1][j] {
				t.Fatalf("trial %d: cache value %d is %g gated, %g ungated", trial, j, kv[0][j], kv[1][j])
			}
		}
		for j := range logits[0] {
			if logits[0][j] != logits[1][j] {
				t.Fatalf("trial %d: next-step logit %d is %g gated, %g ungated", trial, j, logits[0][j], logits[1][j])
			}
		}
	}
	m.cfg.Ungated = false
}

// TestGateWaitsPerLayer: an instrumented loader holds back the reads of
// layer k until the recompute forward has reached layer k's attention
// (so layers 0..k-1 must have computed without them), then 50 ms more.
// Each layer's attention is let through only after its own reads
// completed, and layers before k ran before layer k's reads completed. A
// restore that waited for every layer's reads before computing would
// never reach layer k: the loader then gives up after 10 s and the
// timeline shows it.
func TestGateWaitsPerLayer(t *testing.T) {
	st := openDefault(t, 128)
	m := newManager(t, st, t.TempDir(), Config{})
	toks := heldoutTokens(t, 121)
	hist, other := toks[:96], toks[20:120]
	for _, c := range []struct {
		id string
		h  []int
	}{{"a", hist}, {"b", other}} {
		if _, err := m.Install(c.id, c.h); err != nil {
			t.Fatal(err)
		}
		if err := m.Commit(c.id, c.h); err != nil {
			t.Fatal(err)
		}
	}
	evictAll(t, m, "a")
	layers := st.Session().CacheAttentionLayers()
	k := layers / 2
	reached := make(chan struct{})
	gaveUp := false
	m.onGate = func(l int) {
		if l == k {
			close(reached)
		}
	}
	m.ioDelay = func(g int) {
		if g != k {
			return
		}
		select {
		case <-reached:
			time.Sleep(50 * time.Millisecond)
		case <-time.After(10 * time.Second):
			gaveUp = true
		}
	}
	m.choose = interleaved(map[int]bool{0: true, 1: true})
	tm, err := m.Install("a", hist)
	if err != nil {
		t.Fatal(err)
	}
	if gaveUp {
		t.Errorf("the forward did not reach layer %d in 10 s while its reads were held", k)
	}
	if len(tm.Layers) != layers {
		t.Fatalf("%d layers in the gate's timeline; want %d: %+v", len(tm.Layers), layers, tm)
	}
	for _, l := range tm.Layers {
		t.Logf("layer %d: enter %v, loaded %v, exit %v", l.Layer, l.Enter, l.Loaded, l.Exit)
		if l.Exit < l.Loaded {
			t.Errorf("layer %d's attention ran at %v, before its reads completed at %v", l.Layer, l.Exit, l.Loaded)
		}
	}
	lk := tm.Layers[k]
	if lk.Layer != k {
		t.Fatalf("timeline out of order: %+v", tm.Layers)
	}
	if lk.Enter >= lk.Loaded {
		t.Errorf("the forward reached layer %d at %v, after its held reads completed at %v", k, lk.Enter, lk.Loaded)
	}
	for _, l := range tm.Layers[:k] {
		if l.Exit >= lk.Loaded {
			t.Errorf("layer %d's attention waited until %v, after layer %d's reads (%v): the gate waits for more than its layer", l.Layer, l.Exit, k, lk.Loaded)
		}
	}
}

// TestGatedRestoreTornChunk: a loaded chunk whose first region is torn on
// flash fails its checksum after the gated forward; it is recomputed with
// the recomputed chunks after it (they attended its bad rows), so the
// lossless restore still equals the original cache.
func TestGatedRestoreTornChunk(t *testing.T) {
	st := openDefault(t, 128)
	dir := t.TempDir()
	m := newManager(t, st, dir, Config{Lossless: true})
	toks := heldoutTokens(t, 121)
	hist, other := toks[:96], toks[20:120]
	for _, c := range []struct {
		id string
		h  []int
	}{{"a", hist}, {"b", other}} {
		if _, err := m.Install(c.id, c.h); err != nil {
			t.Fatal(err)
		}
		if err := m.Commit(c.id, c.h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Install("a", hist); err != nil {
		t.Fatal(err)
	}
	want := readKV(t, st, 96)
	if _, err := m.Install("b", other); err != nil {
		t.Fatal(err)
	}
	evictAll(t, m, "a")
	f, err := flash.OpenRW(swapPath(dir, "a"), flash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteAt(flash.AlignedBuf(512), m.lay.slotOff(0, 2)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	m.choose = interleaved(map[int]bool{1: true, 4: true})
	clobber(t, st)
	tm, err := m.Install("a", hist)
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Layers) == 0 || tm.Faults != 1 {
		t.Fatalf("gated restore with a torn chunk: %+v", tm)
	}
	if d := maxAbs(readKV(t, st, 96), want); d > 1e-5 {
		t.Errorf("restored cache differs by %g", d)
	}
}
