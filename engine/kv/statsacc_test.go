package kv

import (
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/tlite/tlite/engine"
)

// TestAccumulatedStatsMatchHost: a state accumulating its attention
// statistics on the device (AccumulateAttentionStats) over a prefill of 37
// tokens, decode steps sampled at weight 8 with the others switched off,
// and a two-token forward into slots out of order, holds the totals a
// second state computes on the host from each forward's per-head
// statistics (AttentionStats): per slot, the weighted sums over layers
// and heads and the weighted counts, on every slot device and model, at
// attended lengths that are not multiples of 16 (Pad 1). A take zeroes
// the totals; bad weights and per-forward reads in accumulating mode are
// errors.
func TestAccumulatedStatsMatchHost(t *testing.T) {
	for _, d := range slotDevices {
		for name, path := range slotModels {
			t.Run(d.name+"/"+name, func(t *testing.T) {
				var sts [2]*State
				for i := range sts {
					st, err := Open(path, d.opts(), Config{MaxContext: 64, Pad: 1, AttentionStats: true})
					if err != nil {
						t.Fatal(err)
					}
					defer st.Session().Close()
					sts[i] = st
				}
				dev, host := sts[0], sts[1]
				if _, err := dev.TakeAttentionStats(); err == nil {
					t.Error("TakeAttentionStats before AccumulateAttentionStats: no error")
				}
				for _, w := range []float64{-1, math.NaN(), math.Inf(1), 1e-60} {
					if err := dev.AccumulateAttentionStats(w); err == nil {
						t.Errorf("weight %g: no error", w)
					}
				}
				rng := rand.New(rand.NewSource(9))
				n := 37
				toks, pos := make([]int, n), make([]int, n)
				for i := range toks {
					toks[i], pos[i] = rng.Intn(dev.Vocab()), i
				}
				type fwd struct {
					toks, pos, slots []int
					w                float64 // 0: statistics off
				}
				steps := []fwd{{toks, pos, pos, 1}}
				for k := 0; k < 6; k++ {
					w := 0.0
					if k%3 == 0 {
						w = 8
					}
					steps = append(steps, fwd{[]int{rng.Intn(dev.Vocab())}, []int{n + k}, []int{n + k}, w})
				}
				steps = append(steps, fwd{[]int{3, 4}, []int{50, 47}, []int{55, 49}, 1})
				var wantSum, wantCnt, wantPeak []float64
				lh, runs := 0, 0
				for _, s := range steps {
					for _, st := range sts {
						if err := st.SetAttentionStats(s.w > 0); err != nil {
							t.Fatal(err)
						}
					}
					if s.w > 0 {
						if err := dev.AccumulateAttentionStats(s.w); err != nil {
							t.Fatal(err)
						}
					}
					for _, st := range sts {
						if _, err := st.Forward(s.toks, s.pos, s.slots); err != nil {
							t.Fatal(err)
						}
					}
					if s.w == 0 {
						continue
					}
					runs++
					stats, err := host.AttentionStats()
					if err != nil {
						t.Fatal(err)
					}
					lh = 0
					for li, a := range stats {
						lh += a.Heads
						for len(wantSum) < a.Slots {
							wantSum, wantCnt, wantPeak = append(wantSum, 0), append(wantCnt, 0), append(wantPeak, 0)
						}
						for j := 0; j < a.Slots; j++ {
							for h := 0; h < a.Heads; h++ {
								wantSum[j] += s.w * float64(a.Sum[h*a.Slots+j])
								wantPeak[j] = math.Max(wantPeak[j], float64(a.Peak[h*a.Slots+j]))
							}
							if li == 0 {
								wantCnt[j] += s.w * float64(a.Count[j])
							}
						}
					}
				}
				if _, err := dev.AttentionStats(); err == nil {
					t.Error("AttentionStats while accumulating: no error")
				}
				got, err := dev.TakeAttentionStats()
				if err != nil {
					t.Fatal(err)
				}
				if got.Slots != len(wantSum) || got.LH != lh || got.Runs != runs {
					t.Fatalf("totals over %d slots, %d layer-heads, %d runs; want %d, %d, %d", got.Slots, got.LH, got.Runs, len(wantSum), lh, runs)
				}
				tol := 1e-4
				if d.name == "opencl-fp16" {
					tol = 1e-3 // both states store fp16; the sums differ in order only
				}
				for j := range wantSum {
					if math.Abs(float64(got.Sum[j])-wantSum[j]) > tol*(1+math.Abs(wantSum[j])) {
						t.Errorf("slot %d: sum %g, host %g", j, got.Sum[j], wantSum[j])
					}
					if float64(got.Count[j]) != wantCnt[j] {
						t.Errorf("slot %d: count %g, host %g", j, got.Count[j], wantCnt[j])
					}
					// The peak is unweighted: the largest over the runs.
					if math.Abs(float64(got.Peak[j])-wantPeak[j]) > tol*(1+wantPeak[j]) {
						t.Errorf("slot %d: peak %g, host %g", j, got.Peak[j], wantPeak[j])
					}
				}
				// The take zeroed the totals: one more forward is all
				// the next take holds.
				if _, err := dev.Forward([]int{5}, []int{56}, []int{56}); err != nil {
					t.Fatal(err)
				}
				again, err := dev.TakeAttentionStats()
				if err != nil {
					t.Fatal(err)
				}
				var total float64
				for _, x := range again.Sum {
					total += float64(x)
				}
				if again.Runs != 1 || math.Abs(total-float64(lh)) > 1e-3*float64(lh) || again.Count[0] != 1 {
					t.Errorf("after a take and one forward: %d runs, sums adding to %g (want %d: one row per layer-head), count %g", again.Runs, total, lh, again.Count[0])
				}
				if err := dev.AccumulateAttentionStats(0); err != nil {
					t.Fatal(err)
				}
				if _, err := dev.TakeAttentionStats(); err == nil {
					t.Error("TakeAttentionStats after weight 0: no error")
				}
			})
		}
	}
}

// TestAccumulatedStatsReplay: decode steps that accumulate statistics on
// the device replay their recorded launches (their own recordings, apart
// from those of the steps without statistics), and a replaying state
// gives bit for bit the logits and totals of a state that lowers every
// step: over 40 steps sampled 1 in 4 at weight 4, a weight change midway
// (a new recording), takes every 8 steps and a binding change (kv_len
// padded to 16 crosses 32 and 48). The per-run bookkeeping holds on
// replayed steps: AttentionStats reports ErrNoAttentionStats after a step
// without statistics and refuses after one that accumulated.
func TestAccumulatedStatsReplay(t *testing.T) {
	path := benchModels()["llama"]
	var sts [2]*State
	for i, noReplay := range []bool{false, true} {
		st, err := Open(path, engine.Options{Kernels: testLib, NoReplay: noReplay}, Config{MaxContext: 64, Pad: 16, AttentionStats: true})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Session().Close()
		if err := st.AccumulateAttentionStats(1); err != nil {
			t.Fatal(err)
		}
		sts[i] = st
	}
	onReplays := int64(0)
	for step := 0; step < 40; step++ {
		on, w := step%4 == 0, 4.0
		if step >= 20 {
			w = 2
		}
		toks, pos := []int{(step*37 + 5) % 256}, []int{9 + step}
		if step == 0 {
			toks, pos, w = seq(1, 11), seq(0, 10), 1
		}
		var logits [2][]float32
		for i, st := range sts {
			if err := st.SetAttentionStats(on); err != nil {
				t.Fatal(err)
			}
			if err := st.AccumulateAttentionStats(w); err != nil {
				t.Fatal(err)
			}
			before := st.Session().Replayed()
			l, err := st.Forward(toks, pos, pos)
			if err != nil {
				t.Fatal(err)
			}
			if on && i == 0 {
				onReplays += st.Session().Replayed() - before
			}
			logits[i] = l
			_, err = st.AttentionStats()
			if errors.Is(err, engine.ErrNoAttentionStats) == on || err == nil {
				t.Fatalf("step %d (statistics on %v), state %d: AttentionStats gave %v", step, on, i, err)
			}
		}
		for j := range logits[0] {
			if math.Float32bits(logits[0][j]) != math.Float32bits(logits[1][j]) {
				t.Fatalf("step %d: logit %d is %v replaying, %v lowered", step, j, logits[0][j], logits[1][j])
			}
		}
		if step%8 == 7 {
			var tot [2]engine.AttnStatsTotal
			for i, st := range sts {
				var err error
				if tot[i], err = st.TakeAttentionStats(); err != nil {
					t.Fatal(err)
				}
			}
			if tot[0].Runs != tot[1].Runs || tot[0].Slots != tot[1].Slots || tot[0].Runs == 0 {
				t.Fatalf("step %d: replaying state took %d runs over %d slots, lowered %d over %d", step, tot[0].Runs, tot[0].Slots, tot[1].Runs, tot[1].Slots)
			}
			for j := range tot[0].Sum {
				if math.Float32bits(tot[0].Sum[j]) != math.Float32bits(tot[1].Sum[j]) || tot[0].Count[j] != tot[1].Count[j] {
					t.Fatalf("step %d slot %d: totals %v/%v replaying, %v/%v lowered", step, j, tot[0].Sum[j], tot[0].Count[j], tot[1].Sum[j], tot[1].Count[j])
				}
			}
		}
	}
	if onReplays == 0 {
		t.Fatal("no step accumulating statistics was replayed")
	}
}
