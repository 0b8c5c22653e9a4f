package kv

import (
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
