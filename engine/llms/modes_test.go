package llms

import (
	"math"
	"testing"
)

type modeCase struct {
	mode  Mode
	exact bool
}

// TestBaselineModes and TestLLMSModes cycle two contexts through a
// one-byte budget (every switch restores everything) under every mode:
// each restore fills every chunk by the mode's own path (LMK recompute
// only, the others I/O only once evicted), lossless modes restore
// exactly, INT8 ones closely.
func TestBaselineModes(t *testing.T) {
	testModes(t, []modeCase{{ModeLMK, true}, {ModeVLLMS, true}, {ModeVLLMSQ, false}, {ModeSwap, false}})
}

// TestLLMSModes is TestBaselineModes for LLMS and its ablations.
func TestLLMSModes(t *testing.T) {
	testModes(t, []modeCase{{ModeLLMS, false}, {ModeNoLifecycle, false}, {ModeNoTolerance, false}, {ModeNoPipeline, false}})
}

func testModes(t *testing.T, cases []modeCase) {
	st := openDefault(t, 64)
	toks := heldoutTokens(t, 120)
	hist := map[string][]int{"a": toks[:36], "b": toks[20:56]}
	for _, tc := range cases {
		t.Run(string(tc.mode), func(t *testing.T) {
			m := newManager(t, st, t.TempDir(), Config{Mode: tc.mode, BudgetBytes: 1})
			want := map[string][]float32{}
			for _, id := range []string{"a", "b"} {
				if _, err := m.Install(id, hist[id]); err != nil {
					t.Fatal(err)
				}
				if err := m.Commit(id, hist[id]); err != nil {
					t.Fatal(err)
				}
				want[id] = readKV(t, st, 36)
			}
			for _, id := range []string{"a", "b"} {
				clobber(t, st)
				tm, err := m.Install(id, hist[id])
				if err != nil {
					t.Fatal(err)
				}
				if tm.Resident+tm.Loaded+tm.Recomputed != 3 {
					t.Fatalf("%s: %+v", id, tm)
				}
				switch tc.mode {
				case ModeLMK:
					if tm.Recomputed != 3 {
						t.Errorf("%s: LMK restored by %+v", id, tm)
					}
				case ModeLLMS, ModeNoLifecycle, ModeNoTolerance:
				default:
					if tm.Recomputed != 0 || tm.Loaded != 3 {
						t.Errorf("%s: %s restored by %+v", id, tc.mode, tm)
					}
				}
				d := maxAbs(readKV(t, st, 36), want[id])
				if tc.exact && d > 1e-5 || !tc.exact && (d == 0 && tc.mode != ModeLLMS || math.IsNaN(d) || d > 2) {
					t.Errorf("%s: restored KV differs by %g", id, d)
				}
				if err := m.Commit(id, hist[id]); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %+v max diff %.3g", id, tm, d)
			}
		})
	}
}
