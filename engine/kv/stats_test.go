package kv

import (
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/tlite/tlite/engine"
)

// TestAttentionStats: with Config.AttentionStats every layer of the
// model reports, after a prefill and after an interleaved forward, sums
// whose rows add up to one per query row and per head, counts equal to the
// number of the forward's tokens at or after each slot's position (kv_bias
// semantics), and the same statistics on OpenCL as on the pure-Go device.
// The kernels' statistics are checked against a full probability dump in
// package kernels; this checks the wiring.
func TestAttentionStats(t *testing.T) {
	for name, path := range slotModels {
		t.Run(name, func(t *testing.T) {
			var per [2][][]engine.AttnStats
			for di, d := range []string{"opencl", "go"} {
				opts := engine.Options{Kernels: testLib}
				if d == "go" {
					opts = engine.Options{Device: "go"}
				}
				st, err := Open(path, opts, Config{MaxContext: 64, AttentionStats: true})
				if err != nil {
					t.Fatal(err)
				}
				defer st.Session().Close()
				layers := len(st.Info().Layers) / 2
				rng := rand.New(rand.NewSource(5))
				n := 20
				toks, pos := make([]int, n), make([]int, n)
				for i := range toks {
					toks[i], pos[i] = rng.Intn(st.Vocab()), i
				}
				// A prefill, then two tokens written at gaps: position 25
				// in slot 40, and position 22 (before it) in slot 30.
				steps := []struct{ toks, pos, slots []int }{
					{toks, pos, pos},
					{[]int{3, 4}, []int{25, 22}, []int{40, 30}},
				}
				slotPos := map[int]int{}
				for _, s := range steps {
					if _, err := st.Forward(s.toks, s.pos, s.slots); err != nil {
						t.Fatal(err)
					}
					for i, sl := range s.slots {
						slotPos[sl] = s.pos[i]
					}
					stats, err := st.AttentionStats()
					if err != nil {
						t.Fatal(err)
					}
					if len(stats) != layers {
						t.Fatalf("%s: statistics of %d attentions; the model has %d layers", d, len(stats), layers)
					}
					for _, a := range stats {
						if a.Slots != st.AttendedLen() {
							t.Fatalf("%s %s: %d slots, the forward attended %d", d, a.Node, a.Slots, st.AttendedLen())
						}
						for h := 0; h < a.Heads; h++ {
							var total float64
							for j := 0; j < a.Slots; j++ {
								want := 0
								if p, ok := slotPos[j]; ok {
									for _, tp := range s.pos {
										if p <= tp {
											want++
										}
									}
								}
								got := a.Count[h*a.Slots+j]
								if got != float32(want) {
									t.Fatalf("%s %s head %d slot %d: count %g, want %d", d, a.Node, h, j, got, want)
								}
								if want == 0 && a.Sum[h*a.Slots+j] != 0 {
									t.Fatalf("%s %s head %d slot %d: no row attends it, sum %g", d, a.Node, h, j, a.Sum[h*a.Slots+j])
								}
								// The peak is one row's probability: at most
								// the sum of all of them, at least their mean,
								// 0 with no row.
								pk, sm := a.Peak[h*a.Slots+j], a.Sum[h*a.Slots+j]
								if pk > sm*(1+1e-5) || (want > 0 && pk < sm/float32(want)*(1-1e-5)) || (want == 0 && pk != 0) {
									t.Fatalf("%s %s head %d slot %d: peak %g with sum %g over %d rows", d, a.Node, h, j, pk, sm, want)
								}
								total += float64(a.Sum[h*a.Slots+j])
							}
							if math.Abs(total-float64(len(s.pos))) > 1e-3 {
								t.Fatalf("%s %s head %d: probabilities add up to %g over %d rows", d, a.Node, h, total, len(s.pos))
							}
						}
					}
					per[di] = append(per[di], stats)
				}
			}
			for k := range per[0] {
				for l := range per[0][k] {
					if e := relErr(per[0][k][l].Sum, per[1][k][l].Sum); e > 1e-4 {
						t.Errorf("forward %d layer %d: OpenCL and Go sums differ by %.3g", k, l, e)
					}
					if e := relErr(per[0][k][l].Peak, per[1][k][l].Peak); e > 1e-4 {
						t.Errorf("forward %d layer %d: OpenCL and Go peaks differ by %.3g", k, l, e)
					}
				}
			}
		})
	}
	// Without the option there are none.
	st := openState(t, "llama", Config{MaxContext: 16})
	if _, err := st.AttentionStats(); err == nil {
		t.Error("a session without attention statistics returned some")
	}
}

// TestAttentionStatsToggle: SetAttentionStats(false) makes the following
// forwards skip the statistics (AttentionStats reports
// engine.ErrNoAttentionStats, and the logits are those of a state opened
// without statistics); turned on again, the next forward's statistics
// count exactly its own rows. A state opened without statistics refuses
// the toggle.
func TestAttentionStatsToggle(t *testing.T) {
	path := "../../testdata/default/model.onnx"
	var sts [2]*State
	for i, on := range []bool{true, false} {
		st, err := Open(path, engine.Options{Device: "go"}, Config{MaxContext: 48, AttentionStats: on})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Session().Close()
		sts[i] = st
	}
	if err := sts[1].SetAttentionStats(true); err == nil {
		t.Fatal("a state opened without statistics accepted SetAttentionStats")
	}
	toks := []int{5, 9, 2, 7, 11, 3, 8, 1}
	pos := []int{0, 1, 2, 3, 4, 5, 6, 7}
	steps := []struct {
		on        bool
		toks, pos []int
	}{{true, toks, pos}, {false, []int{4}, []int{8}}, {false, []int{6}, []int{9}}, {true, []int{12}, []int{10}}}
	for k, s := range steps {
		if err := sts[0].SetAttentionStats(s.on); err != nil {
			t.Fatal(err)
		}
		var logits [2][]float32
		for i, st := range sts {
			l, err := st.Forward(s.toks, s.pos, s.pos)
			if err != nil {
				t.Fatal(err)
			}
			logits[i] = l
		}
		for j := range logits[0] {
			if d := math.Abs(float64(logits[0][j] - logits[1][j])); d > 1e-5 {
				t.Fatalf("step %d (statistics %v): logit %d differs by %g from a state without statistics", k, s.on, j, d)
			}
		}
		stats, err := sts[0].AttentionStats()
		if !s.on {
			if !errors.Is(err, engine.ErrNoAttentionStats) {
				t.Fatalf("step %d, statistics off: AttentionStats gave %v; want ErrNoAttentionStats", k, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		last := s.pos[len(s.pos)-1]
		for _, a := range stats {
			for j := 0; j <= last; j++ {
				want := 0
				for _, p := range s.pos {
					if j <= p {
						want++
					}
				}
				if got := a.Count[j]; got != float32(want) {
					t.Fatalf("step %d %s slot %d: count %g; want %d (this forward's rows only)", k, a.Node, j, got, want)
				}
			}
		}
	}
}

// TestAttentionStatsReplay: with statistics gathered one step in several
// (as LLMS samples them), the steps run with statistics off are replayed
// from their recordings, and nothing differs from a state that never
// replays: the logits bit for bit at every step and the statistics of the
// steps that gather them.
func TestAttentionStatsReplay(t *testing.T) {
	path := benchModels()["llama"]
	var sts [2]*State
	for i, noReplay := range []bool{false, true} {
		st, err := Open(path, engine.Options{Kernels: testLib, NoReplay: noReplay}, Config{MaxContext: 64, AttentionStats: true})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Session().Close()
		sts[i] = st
	}
	for step := 0; step < 24; step++ {
		on := step%8 == 0
		toks, pos := []int{(step*37 + 5) % 256}, []int{9 + step}
		if step == 0 {
			toks, pos = seq(1, 11), seq(0, 10)
		}
		var logits [2][]float32
		var stats [2][]engine.AttnStats
		for i, st := range sts {
			if err := st.SetAttentionStats(on); err != nil {
				t.Fatal(err)
			}
			l, err := st.Forward(toks, pos, pos)
			if err != nil {
				t.Fatal(err)
			}
			logits[i] = l
			if on {
				if stats[i], err = st.AttentionStats(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			} else if _, err := st.AttentionStats(); !errors.Is(err, engine.ErrNoAttentionStats) {
				t.Fatalf("step %d, statistics off: AttentionStats gave %v; want ErrNoAttentionStats", step, err)
			}
		}
		for j := range logits[0] {
			if math.Float32bits(logits[0][j]) != math.Float32bits(logits[1][j]) {
				t.Fatalf("step %d: logit %d is %v replaying, %v lowered", step, j, logits[0][j], logits[1][j])
			}
		}
		for l := range stats[0] {
			for j := range stats[0][l].Sum {
				if stats[0][l].Sum[j] != stats[1][l].Sum[j] || stats[0][l].Count[j] != stats[1][l].Count[j] {
					t.Fatalf("step %d %s entry %d: statistics differ between the replaying and the lowered state", step, stats[0][l].Node, j)
				}
			}
		}
	}
	if sts[0].Session().Replayed() == 0 {
		t.Fatal("no step with statistics off was replayed")
	}
}
