package dynakv

import (
	"math"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/hostattn"
)

// fullAttention is exact attention of one step over every entry of sy's
// layer up to pos.
func fullAttention(sy *synth, layer, pos int, q []float32, scale float32) []float32 {
	D, G := sy.dim, sy.heads/sy.kvh
	out := make([]float32, sy.heads*D)
	for h := 0; h < sy.kvh; h++ {
		var keys, vals []float32
		for p := 0; p <= pos; p++ {
			e := sy.kv[[3]int{layer, h, p}]
			keys = append(keys, e[:D]...)
			vals = append(vals, e[D:]...)
		}
		hostattn.Group(out[h*G*D:(h+1)*G*D], q[h*G*D:(h+1)*G*D], D, keys, vals, scale, nil)
	}
	return out
}

// TestBaselines runs each baseline through its hook on synthetic data: at
// ρ = 1 it must equal full attention; at ρ = 0.1 it must not, and it must
// read less than everything (except no-cluster, which reads every key).
func TestBaselines(t *testing.T) {
	const L, H, KVH, D, L0, steps = 1, 4, 2, 32, 48, 40
	for _, mode := range []string{NoCluster, Static, Local} {
		for _, budget := range []float64{1, 0.1} {
			b, err := NewBaseline(BaselineConfig{Mode: mode, Dir: t.TempDir(), Budget: budget, MaxContext: 256, Window: 16, Shadow: true}, L, H, KVH, D)
			if err != nil {
				t.Fatal(err)
			}
			sy := newSynth(5, L, H, KVH, D)
			hook := b.Hook()
			q, k, v := sy.rows(0, 0, L0, 1)
			if err := hook(&engine.AttentionCall{Layer: 0, Rows: L0, Heads: H, KVHeads: KVH, HeadDim: D, Scale: 0.2, Q: q, KNew: k, VNew: v, Slots: seqInts(0, L0)}); err != nil {
				t.Fatal(err)
			}
			var worst float64
			for st := 0; st < steps; st++ {
				p := L0 + st
				q, k, v := sy.rows(0, p, 1, 1)
				// The slots are a ring (as over a bounded device cache):
				// the baseline must go by the positions.
				c := &engine.AttentionCall{Layer: 0, Rows: 1, Heads: H, KVHeads: KVH, HeadDim: D, Scale: 0.2, Q: q, KNew: k, VNew: v, Slots: []int{p % L0}, Positions: []int{p}}
				if st == 0 {
					bad := *c
					bad.Positions = []int{p, p + 1}
					if err := hook(&bad); err == nil {
						t.Fatalf("%s: a call of 1 row with 2 positions accepted", mode)
					}
				}
				if err := hook(c); err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				want := fullAttention(sy, 0, p, q, 0.2)
				for i := range want {
					worst = math.Max(worst, math.Abs(float64(c.Out[i]-want[i])))
				}
			}
			r := b.Report()
			if budget == 1 && worst > 1e-5 {
				t.Fatalf("%s at ρ = 1: differs from full attention by %g", mode, worst)
			}
			if budget < 1 && (worst < 1e-3 || r.Recall >= 1) {
				t.Fatalf("%s at ρ = %v: within %g of full attention, recall %v", mode, budget, worst, r.Recall)
			}
			if got := b.ReadSnapshot().Read.Bytes; got != b.st.plannedRead || got == 0 {
				t.Fatalf("%s: read %d bytes, planned %d", mode, got, b.st.plannedRead)
			}
			b.Close()
		}
	}
}

// TestSystemFullBudgetSynthetic is the same exactness check for DynaKV
// itself, with splits happening and a recent window that must add nothing
// twice (at ρ = 1 every recent entry is already retrieved).
func TestSystemFullBudgetSynthetic(t *testing.T) {
	const L, H, KVH, D, L0, steps = 1, 4, 2, 32, 48, 60
	sys, err := New(Config{Dir: t.TempDir(), Budget: 1, SMax: 16, BMax: 4, Lambda: 0.5, InitDiv: 10, Recent: 8}, L, H, KVH, D)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	sy := newSynth(9, L, H, KVH, D)
	q, k, v := sy.rows(0, 0, L0, 1)
	if err := sys.Prefill(0, seqInts(0, L0), q, k, v); err != nil {
		t.Fatal(err)
	}
	for st := 0; st < steps; st++ {
		p := L0 + st
		q, k, v := sy.rows(0, p, 1, 1)
		out, err := sys.Step(0, p, q, k, v, 0.2)
		if err != nil {
			t.Fatal(err)
		}
		want := fullAttention(sy, 0, p, q, 0.2)
		for i := range want {
			if d := math.Abs(float64(out[i] - want[i])); d > 1e-5 {
				t.Fatalf("step %d: differs from full attention by %g", st, d)
			}
		}
	}
	if r := sys.Report(); r.SplitsVariance+r.SplitsForced == 0 || r.RecentPerToken != 0 {
		t.Fatalf("no split happened: %+v", r)
	}
}

// TestRecentWindow checks that a recent window adds the last entries the
// retrieval missed, each once: with ρ tiny, outputs move toward full
// attention and recall rises.
func TestRecentWindow(t *testing.T) {
	const L, H, KVH, D, L0, steps = 1, 4, 2, 32, 64, 60
	var recall [2]float64
	for i, recent := range []int{0, 32} {
		sys, err := New(Config{Dir: t.TempDir(), Budget: 0.05, Recent: recent, Shadow: true, Debug: true}, L, H, KVH, D)
		if err != nil {
			t.Fatal(err)
		}
		sy := newSynth(11, L, H, KVH, D)
		q, k, v := sy.rows(0, 0, L0, 1)
		if err := sys.Prefill(0, seqInts(0, L0), q, k, v); err != nil {
			t.Fatal(err)
		}
		for st := 0; st < steps; st++ {
			q, k, v := sy.rows(0, L0+st, 1, 1)
			if _, err := sys.Step(0, L0+st, q, k, v, 0.2); err != nil {
				t.Fatal(err)
			}
			if err := sys.CheckInvariant(); err != nil {
				t.Fatal(err)
			}
		}
		r := sys.Report()
		if recent > 0 && (r.RecentPerToken <= 0 || r.RecentPerToken > float64(KVH*recent)) {
			t.Fatalf("recent window of %d added %v entries per token", recent, r.RecentPerToken)
		}
		recall[i] = r.Recall
		sys.Close()
	}
	if recall[1] <= recall[0] {
		t.Fatalf("recall %v with a recent window, %v without", recall[1], recall[0])
	}
}
