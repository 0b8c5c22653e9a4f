package llms

import (
	"slices"
	"testing"
	"time"

	"github.com/tlite/tlite/engine"
)

func testLayout(t *testing.T) *layout {
	t.Helper()
	info := engine.KVInfo{KVConfig: engine.KVConfig{MaxContext: 256}}
	for i := 0; i < 4; i++ {
		info.Layers = append(info.Layers, engine.KVLayer{Name: "b", KVHeads: 2, HeadDim: 32, RowBytes: 256})
	}
	lay, err := newLayout(info, 16, Level8)
	if err != nil {
		t.Fatal(err)
	}
	return lay
}

// TestPlanner: the greedy plan recomputes heaviest chunks first, picks X
// = 0 when recompute is dear and all when it is free, and its predicted
// time is the model's IO(pre) + max(T_re, IO(post)).
func TestPlanner(t *testing.T) {
	lay := testLayout(t)
	miss := []missingChunk{{0, Level2, 16}, {1, Level8, 16}, {2, Level4, 16}, {3, Level8, 16}, {4, Level2, 16}, {5, Level8, 7}}
	for _, tc := range []struct {
		name string
		cost CostModel
		want []int
	}{
		{"recompute dear", CostModel{ReA: 1, ReB: 1, IOC: 1e-9, IOE: 1e-4}, nil},
		{"recompute free", CostModel{ReA: 0, ReB: 0, IOC: 1e-9, IOE: 1e-4}, []int{0, 1, 2, 3, 4, 5}},
		// 1 ms per chunk recomputed and per read: the six chunks are one
		// run, two reads (two layers), so loading them all wins.
		{"middle", CostModel{ReA: 1e-3, ReB: 0, IOC: 0, IOE: 1e-3}, nil},
	} {
		p := lay.planRestore(miss, nil, tc.cost, false)
		if tc.want != nil && !slices.Equal(p.recompute, tc.want) {
			t.Errorf("%s: recompute %v, want %v", tc.name, p.recompute, tc.want)
		}
		if tc.name == "recompute dear" && len(p.recompute) != 0 {
			t.Errorf("%s: recompute %v", tc.name, p.recompute)
		}
		// Heaviest first: any recomputed chunk's level is at least every
		// loaded chunk's level.
		minRec := LevelFP
		for _, i := range p.recompute {
			minRec = min(minRec, miss[i].level)
		}
		for _, i := range p.load {
			if miss[i].level > minRec {
				t.Errorf("%s: loads %s chunk %d while recomputing a %s one", tc.name, miss[i].level, i, minRec)
			}
		}
		// The prediction equals the model's formula.
		last := -1
		for _, i := range p.recompute {
			last = max(last, i)
		}
		var pre, post []int
		for _, i := range p.load {
			if i < last {
				pre = append(pre, i)
			} else {
				post = append(post, i)
			}
		}
		want := tc.cost.IO(ioBytes(lay, pre, miss)) + max(tc.cost.Recompute(len(p.recompute)), tc.cost.IO(ioBytes(lay, post, miss)))
		if d := p.Predicted - want; d > time.Microsecond || d < -time.Microsecond {
			t.Errorf("%s: predicted %v, formula %v", tc.name, p.Predicted, want)
		}
		t.Logf("%s: recompute %v load %v predicted %v (paper's max %v)", tc.name, p.recompute, p.load, p.Predicted, p.PaperMax)
	}
	// Forced chunks (no flash copy) are always recomputed.
	p := lay.planRestore(miss[1:], []int{0}, CostModel{ReA: 1, ReB: 1, IOE: 1e-4}, false)
	if len(p.recompute) != 1 || p.recompute[0] != 0 {
		t.Errorf("forced chunk: recompute %v", p.recompute)
	}
}

// TestFit: the least-squares fits recover known lines.
func TestFit(t *testing.T) {
	a, b := fitLine([]float64{1, 2, 4, 8}, []float64{3, 5, 9, 17})
	if abs(a-2) > 1e-9 || abs(b-1) > 1e-9 {
		t.Errorf("fitLine: %g x + %g", a, b)
	}
	bs := []float64{512, 1024, 4096, 8192, 512}
	rs := []float64{1, 1, 1, 1, 2}
	y := make([]float64, len(bs))
	for i := range y {
		y[i] = 2e-9*bs[i] + 5e-5*rs[i]
	}
	c, e := fitIO(bs, rs, y)
	if abs(c-2e-9) > 1e-15 || abs(e-5e-5) > 1e-12 {
		t.Errorf("fitIO: c %g e %g", c, e)
	}
}

// TestProfile: profiling on this machine gives a usable model (positive
// per-chunk recompute and positive I/O cost).
func TestProfile(t *testing.T) {
	st := openDefault(t, 64) // profiles forwards of 1, 2 and 4 chunks
	m, err := NewManager(st, t.TempDir(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c := m.Cost()
	if c.ReA <= 0 || c.IOC < 0 || c.IOE < 0 || c.IOC+c.IOE == 0 {
		t.Errorf("profiled model %+v", c)
	}
	if st.Len() != 0 {
		t.Errorf("profiling left %d slots filled", st.Len())
	}
	t.Logf("profiled: T_re = %.3g ms/chunk + %.3g ms; T_IO = %.3g ns/B + %.3g us/read", c.ReA*1e3, c.ReB*1e3, c.IOC*1e9, c.IOE*1e6)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestPlannerGated: costed for the per-layer gate, a plan that both loads
// and recomputes is predicted at the paper's max(T_re, T_IO), never above
// the cheaper variant's prediction; when recomputing a chunk costs half
// of reading an 8-bit one, the gated plan recomputes some chunks and loads
// the others.
func TestPlannerGated(t *testing.T) {
	lay := testLayout(t)
	miss := []missingChunk{{0, Level2, 16}, {1, Level8, 16}, {2, Level4, 16}, {3, Level8, 16}, {4, Level2, 16}, {5, Level8, 16}}
	// Reading an 8-bit chunk costs 1 ms, recomputing a chunk 0.5 ms.
	cost := CostModel{ReA: 0.5e-3, IOC: 1e-3 / float64(lay.chunkSize(Level8, 16))}
	g := lay.planRestore(miss, nil, cost, true)
	u := lay.planRestore(miss, nil, cost, false)
	if len(g.recompute) == 0 || len(g.load) == 0 {
		t.Fatalf("gated plan recomputes %v and loads %v; want both", g.recompute, g.load)
	}
	if g.Predicted != g.PaperMax {
		t.Errorf("gated plan predicted %v; want the paper's max %v", g.Predicted, g.PaperMax)
	}
	if g.Predicted > u.Predicted {
		t.Errorf("gated prediction %v above the ungated %v", g.Predicted, u.Predicted)
	}
}
