package dynakv

import (
	"testing"
)

// TestPrefetchChangesNothingButReads runs the same drifting workload
// twice, without and with Pipeline 2, and checks that every attention
// output is bit-identical (a prefetched copy is used only when current),
// that the prefetcher served clusters (hits, accuracy in (0, 1]), that
// the flash statistics account for every byte (on-demand plus prefetch
// plans), that the prefetch stays within its byte bound per layer, and
// that the invariant holds after every step with it on.
func TestPrefetchChangesNothingButReads(t *testing.T) {
	const L, H, KVH, D, L0, steps = 2, 4, 2, 32, 64, 32
	for _, tc := range []struct {
		name  string
		cache int64
		reps  bool
		byQ   bool
	}{{"nocache", 0, false, false}, {"gds+reps-on-flash", 32 << 10, true, false}, {"by-query", 0, false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var outs [2][][]float32
			var reps [2]Report
			for run, pf := range []bool{false, true} {
				sys, err := New(Config{Dir: t.TempDir(), Budget: 0.15, SMax: 32, BMax: 8, InitDiv: 12, Lambda: 0.7,
					HotSteps: 8, MaxHot: 6, CacheBytes: tc.cache, Prefetch: pf, CentroidsOnFlash: tc.reps, PrefetchByQuery: tc.byQ, Debug: true}, L, H, KVH, D)
				if err != nil {
					t.Fatal(err)
				}
				sy := newSynth(3, L, H, KVH, D)
				for l := 0; l < L; l++ {
					q, k, v := sy.rows(l, 0, L0, 1)
					if err := sys.Prefill(l, seqInts(0, L0), q, k, v); err != nil {
						t.Fatal(err)
					}
				}
				for st := 0; st < steps; st++ {
					for l := 0; l < L; l++ {
						q, k, v := sy.rows(l, L0+st, 1, 1)
						out, err := sys.Step(l, L0+st, q, k, v, 0.2)
						if err != nil {
							t.Fatalf("prefetch %v step %d layer %d: %v", pf, st, l, err)
						}
						outs[run] = append(outs[run], out)
						if pf {
							if p := sys.layers[(l+1)%L].pf; p != nil {
								var b int64
								for _, n := range p.bytes {
									b += n
								}
								var budget int64
								for _, hs := range sys.layers[(l+1)%L].hs {
									budget += int64(float64(hs.total)*sys.cfg.Budget+1) * int64(sys.layers[0].store.entry)
								}
								if float64(b) > sys.cfg.PrefetchFactor*float64(budget) {
									t.Fatalf("step %d: prefetch of %d bytes over its bound (%v × %d)", st, b, sys.cfg.PrefetchFactor, budget)
								}
							}
						}
					}
					if err := sys.CheckInvariant(); err != nil {
						t.Fatalf("prefetch %v after step %d: %v", pf, st, err)
					}
				}
				reps[run] = sys.Report()
				snap := sys.ReadSnapshot().Read
				if want := sys.PlannedReadBytes() + sys.st.pfPlanned + sys.st.repsRead; snap.Bytes != want {
					t.Fatalf("prefetch %v: read %d bytes, planned %d on demand + %d ahead + %d representatives", pf, snap.Bytes, sys.PlannedReadBytes(), sys.st.pfPlanned, sys.st.repsRead)
				}
				if err := sys.VerifyData(func(l, h, p int) []float32 { return sy.kv[[3]int{l, h, p}] }); err != nil {
					t.Fatal(err)
				}
				sys.Close()
			}
			for i := range outs[0] {
				for j := range outs[0][i] {
					if outs[0][i][j] != outs[1][i][j] {
						t.Fatalf("call %d element %d: %v without prefetch, %v with", i, j, outs[0][i][j], outs[1][i][j])
					}
				}
			}
			off, on := reps[0], reps[1]
			if on.PrefetchHitsPerToken == 0 || on.PrefetchAccuracy <= 0 || on.PrefetchAccuracy > 1 {
				t.Fatalf("prefetch: %v hits per token, accuracy %v", on.PrefetchHitsPerToken, on.PrefetchAccuracy)
			}
			if off.PrefetchBytesPerToken != 0 || off.PrefetchHitsPerToken != 0 {
				t.Fatalf("prefetch off read %v bytes ahead per token", off.PrefetchBytesPerToken)
			}
			if tc.reps {
				// Representatives from flash: read every step, at most two
				// layers' arrays resident, fewer than all layers' in DRAM.
				all := int64(on.FinalClusters) * D * 4
				if on.RepsReadPerToken == 0 || on.RepsDRAMBytes == 0 || on.RepsDRAMBytes >= all {
					t.Fatalf("representatives on flash: %v bytes read per token, %d resident at most, %d for all layers", on.RepsReadPerToken, on.RepsDRAMBytes, all)
				}
			}
			// What the hooks read on demand must shrink by what the prefetch served.
			if on.ReadBytesPerToken-on.PrefetchBytesPerToken-on.RepsReadPerToken >= off.ReadBytesPerToken-off.RepsReadPerToken {
				t.Fatalf("on-demand bytes per token %v with prefetch, %v without", on.ReadBytesPerToken-on.PrefetchBytesPerToken-on.RepsReadPerToken, off.ReadBytesPerToken-off.RepsReadPerToken)
			}
			t.Logf("accuracy %.3f, bytes/token %.0f → %.0f (%.0f ahead)", on.PrefetchAccuracy, off.ReadBytesPerToken, on.ReadBytesPerToken, on.PrefetchBytesPerToken)
		})
	}
}
