package llms

import (
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/trace"
)

// LatencyAnchors are the two install times spec §1c asks latency limits
// to be stated against, since an absolute "10 ms" means nothing on
// another machine and model: the switch to a full-length context whose
// chunks are all in the memory pool (dequantize and upload only), and the
// switch to the same context swapped out whole (read back from its swap
// file, then dequantized and uploaded). Both are measured on the
// whole-context swapping baseline (ModeSwap, base INT8), so the pool and
// the flash install the same bytes and differ only in where they are.
type LatencyAnchors struct {
	// Pool and Swap are the median install times over the rounds.
	Pool time.Duration `json:"pool_ns"`
	Swap time.Duration `json:"swap_ns"`
	// PoolAll and SwapAll are every round's install time.
	PoolAll []time.Duration `json:"pool_all_ns"`
	SwapAll []time.Duration `json:"swap_all_ns"`
	// Tokens is the context's length; SwapBytes what one swap-in read.
	Tokens    int   `json:"tokens"`
	SwapBytes int64 `json:"swap_bytes"`
}

// Limit is the latency limit at rel between the anchors: Pool at 0, Swap
// at 1, and beyond 1 further multiples of the gap. rel must be finite and
// at least 0.
func (a LatencyAnchors) Limit(rel float64) (time.Duration, error) {
	if rel < 0 || math.IsNaN(rel) || math.IsInf(rel, 0) {
		return 0, fmt.Errorf("llms: latency limit at %g between the anchors: want a finite value ≥ 0", rel)
	}
	return a.Pool + time.Duration(rel*float64(a.Swap-a.Pool)), nil
}

// MeasureAnchors measures LatencyAnchors on st at chunks of C tokens: a
// full-length context (st.MaxContext() tokens of corpus) and a one-chunk
// one are built, then the full one is installed rounds times with the
// short one installed in between, once with an unbounded pool (every
// install is from memory) and once with a pool too small for anything (the
// full context is swapped out whole at every switch away). Each install
// is checked to be what it claims: from memory with nothing read or
// recomputed, from flash with every chunk loaded and nothing recomputed.
// Swap files go in a fresh folder under dir, removed afterwards.
func MeasureAnchors(st *kv.State, corpus []int, dir string, C, rounds int, cost *CostModel) (LatencyAnchors, error) {
	var a LatencyAnchors
	if rounds < 1 {
		return a, fmt.Errorf("llms: anchors over %d rounds", rounds)
	}
	if len(corpus) == 0 {
		return a, fmt.Errorf("llms: anchors without a corpus")
	}
	if C < 1 || 2*C > st.MaxContext() {
		return a, fmt.Errorf("llms: anchors at chunks of %d tokens in a cache of %d", C, st.MaxContext())
	}
	full := st.MaxContext() / C * C
	a.Tokens = full
	for _, pooled := range []bool{true, false} {
		budget := int64(0) // unbounded: everything stays in the pool
		if !pooled {
			budget = 1 // nothing fits: a context switched away from is evicted whole
		}
		times, read, err := anchorRun(st, corpus, dir, C, rounds, full, budget, cost)
		if err != nil {
			return a, err
		}
		if pooled {
			a.PoolAll = times
		} else {
			a.SwapAll, a.SwapBytes = times, read
		}
	}
	a.Pool, a.Swap = medianDuration(a.PoolAll), medianDuration(a.SwapAll)
	return a, nil
}

// anchorRun is one of MeasureAnchors' two setups: the install times of the
// full context and the bytes the last one read.
func anchorRun(st *kv.State, corpus []int, dir string, C, rounds, full int, budget int64, cost *CostModel) ([]time.Duration, int64, error) {
	d, err := os.MkdirTemp(dir, "anchors-")
	if err != nil {
		return nil, 0, err
	}
	defer os.RemoveAll(d)
	st.Reset()
	m, err := NewManager(st, d, Config{Mode: ModeSwap, BudgetBytes: budget, Cost: cost, ChunkTokens: C})
	if err != nil {
		return nil, 0, err
	}
	defer m.Close()
	sys := &TraceSystem{M: m, St: st, Corpus: corpus}
	// Context 0 is the full one, context 1 one chunk long.
	for i, n := range []int{full, C} {
		arr := trace.Arrival{Ctx: i, Tokens: n}
		if _, err := sys.Switch(arr); err != nil {
			return nil, 0, err
		}
		if _, err := sys.Call(arr); err != nil {
			return nil, 0, err
		}
	}
	chunks := full / C
	var times []time.Duration
	var read int64
	for r := 0; r < rounds; r++ {
		if err := m.Wait(); err != nil {
			return nil, 0, err
		}
		tm, err := m.Install(ctxName(0), sys.hist[0])
		if err != nil {
			return nil, 0, err
		}
		if tm.Recomputed != 0 || tm.Noop {
			return nil, 0, fmt.Errorf("llms: anchor install recomputed %d chunks (no-op %v)", tm.Recomputed, tm.Noop)
		}
		if budget == 0 && (tm.Resident != chunks || tm.BytesRead != 0) {
			return nil, 0, fmt.Errorf("llms: pool anchor: %d of %d chunks resident, %d bytes read", tm.Resident, chunks, tm.BytesRead)
		}
		if budget != 0 && (tm.Loaded != chunks || tm.BytesRead == 0) {
			return nil, 0, fmt.Errorf("llms: swap anchor: %d of %d chunks loaded, %d bytes read", tm.Loaded, chunks, tm.BytesRead)
		}
		times, read = append(times, tm.Total), tm.BytesRead
		if _, err := m.Install(ctxName(1), sys.hist[1]); err != nil {
			return nil, 0, err
		}
	}
	return times, read, nil
}

// medianDuration is the median of ds (the lower middle for an even count).
func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
