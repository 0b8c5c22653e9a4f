package kv

import (
	"slices"
	"testing"
	"time"

	"github.com/tlite/tlite/engine"
)

// BenchmarkAttentionStatsCost times a 128-token prefill and a decode step
// at depth 128 of the default model with and without attention
// statistics, and with statistics turned off by SetAttentionStats (what a
// sampled decode step costs), the sessions open together and timed
// alternately (3 rounds of 10), and reports the medians and the ratio
// ranges.
func BenchmarkAttentionStatsCost(b *testing.B) {
	const n, rounds, reps = 128, 3, 10
	var sts [3]*State
	for i, on := range []bool{false, true, true} {
		st, err := Open("../../testdata/default/model.onnx", engine.Options{Kernels: testLib}, Config{MaxContext: n + 1, AttentionStats: on})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Session().Close()
		if i == 2 {
			if err := st.SetAttentionStats(false); err != nil {
				b.Fatal(err)
			}
		}
		sts[i] = st
	}
	toks, pos := make([]int, n), make([]int, n)
	for i := range toks {
		toks[i], pos[i] = (i*5+1)%sts[0].Vocab(), i
	}
	run := func(st *State) (time.Duration, time.Duration) {
		st.Reset()
		t0 := time.Now()
		if _, err := st.Forward(toks, pos, pos); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := st.Forward([]int{7}, []int{n}, []int{n}); err != nil {
			b.Fatal(err)
		}
		return t1.Sub(t0), time.Since(t1)
	}
	for _, st := range sts {
		run(st)
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		var pre, dec [3][]float64
		var rp, rd, ro []float64
		for r := 0; r < rounds; r++ {
			var tp, td [3]time.Duration
			for k := 0; k < reps; k++ {
				for i := range sts {
					p, d := run(sts[i])
					tp[i] += p
					td[i] += d
				}
			}
			for i := range sts {
				pre[i] = append(pre[i], tp[i].Seconds()*1e3/reps)
				dec[i] = append(dec[i], td[i].Seconds()*1e3/reps)
			}
			rp, rd = append(rp, float64(tp[1])/float64(tp[0])), append(rd, float64(td[1])/float64(td[0]))
			ro = append(ro, float64(td[2])/float64(td[0]))
		}
		for _, v := range [][]float64{pre[0], pre[1], dec[0], dec[1], dec[2], rp, rd, ro} {
			slices.Sort(v)
		}
		b.ReportMetric(pre[0][1], "prefill-ms")
		b.ReportMetric(pre[1][1], "prefill+stats-ms")
		b.ReportMetric(dec[0][1], "decode-ms")
		b.ReportMetric(dec[1][1], "decode+stats-ms")
		b.ReportMetric(rp[0], "prefill-ratio-min")
		b.ReportMetric(rp[2], "prefill-ratio-max")
		b.ReportMetric(rd[0], "decode-ratio-min")
		b.ReportMetric(rd[2], "decode-ratio-max")
		b.ReportMetric(dec[2][1], "decode+stats-off-ms")
		b.ReportMetric(ro[0], "decode-off-ratio-min")
		b.ReportMetric(ro[2], "decode-off-ratio-max")
	}
}
