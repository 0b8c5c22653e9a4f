package llms

import (
	"math"
	"testing"
	"time"
)

// TestMeasureAnchors on the default model (64-token cache, 4 chunks):
// both anchors are measured over every round, the swap install read at
// least the context's INT8 bytes (MeasureAnchors itself refuses an install
// that read or recomputed what its setup rules out), and bad arguments are
// refused.
func TestMeasureAnchors(t *testing.T) {
	st := openDefault(t, 64)
	corpus := heldoutTokens(t, 100)
	a, err := MeasureAnchors(st, corpus, t.TempDir(), 16, 2, fixedCost)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.PoolAll) != 2 || len(a.SwapAll) != 2 || a.Tokens != 64 {
		t.Fatalf("anchors %+v", a)
	}
	if a.Pool <= 0 || a.Swap <= 0 {
		t.Errorf("anchor times %v and %v", a.Pool, a.Swap)
	}
	unit, err := ContextBytesINT8(st, 16)
	if err != nil {
		t.Fatal(err)
	}
	// The INT8 data of 4 chunks; the unit also counts per-chunk metadata,
	// which the swap file keeps beside the data (layer-major slots).
	if a.SwapBytes < unit/2 {
		t.Errorf("swap install read %d bytes; one INT8 context is %d", a.SwapBytes, unit)
	}
	t.Logf("pool %v %v, swap %v %v, %d bytes", a.Pool, a.PoolAll, a.Swap, a.SwapAll, a.SwapBytes)
	for _, bad := range []struct {
		C, rounds int
		corpus    []int
	}{{16, 0, corpus}, {0, 1, corpus}, {33, 1, corpus}, {16, 1, nil}} {
		if _, err := MeasureAnchors(st, bad.corpus, t.TempDir(), bad.C, bad.rounds, fixedCost); err == nil {
			t.Errorf("C %d, %d rounds, %d corpus tokens accepted", bad.C, bad.rounds, len(bad.corpus))
		}
	}
}

// TestAnchorLimit: 0 is the pool install, 1 the swap install, between
// them linear; negative and non-finite positions are refused.
func TestAnchorLimit(t *testing.T) {
	a := LatencyAnchors{Pool: 4 * time.Millisecond, Swap: 24 * time.Millisecond}
	for _, c := range []struct {
		rel  float64
		want time.Duration
	}{{0, 4 * time.Millisecond}, {0.25, 9 * time.Millisecond}, {1, 24 * time.Millisecond}, {2, 44 * time.Millisecond}} {
		got, err := a.Limit(c.rel)
		if err != nil || got != c.want {
			t.Errorf("Limit(%g) = %v, %v; want %v", c.rel, got, err, c.want)
		}
	}
	for _, rel := range []float64{-0.5, math.NaN(), math.Inf(1)} {
		if _, err := a.Limit(rel); err == nil {
			t.Errorf("Limit(%g) accepted", rel)
		}
	}
}
