package kernels

import (
	"math/rand"
	"slices"
	"testing"
	"time"
)

// BenchmarkAttentionStatsLocal times a decode step's attention statistics
// (8 query heads over 4 KV heads of 32, one query row over 1,024 keys) on
// the OpenCL device launched with one work-item per work-group and with
// groups of up to 64 keys (the default), alternating (5 rounds of 20 launches each, after
// a warm-up), and reports the medians and the per-round ratio range.
func BenchmarkAttentionStatsLocal(b *testing.B) {
	p := AttentionParams{Batch: 1, Heads: 8, KVHeads: 4, SeqQ: 1, SeqKV: 1024, HeadDim: 32, Scale: 0.17, Past: 1023}
	rng := rand.New(rand.NewSource(1))
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}
	q, k, v := upload(b, F32, vec(8*32)), upload(b, F32, vec(4*1024*32)), upload(b, F32, vec(4*1024*32))
	lse, sum, count, o := alloc(b, F32, 8), alloc(b, F32, 8*1024), alloc(b, F32, 8*1024), alloc(b, F32, 8*32)
	p.LSE = lse
	if err := testLib.Attention(F32, q, k, v, o, p); err != nil {
		b.Fatal(err)
	}
	run := func(one bool, n int) time.Duration {
		statsOneItem = one
		defer func() { statsOneItem = false }()
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if err := testLib.AttentionStats(F32, q, k, lse, sum, count, p); err != nil {
				b.Fatal(err)
			}
		}
		if err := testLib.Finish(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	run(true, 3)
	run(false, 3)
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		var one, grouped, ratio []float64
		for r := 0; r < 5; r++ {
			var d [2]time.Duration
			for k := 0; k < 2; k++ {
				u := (k + r) % 2
				d[u] = run(u == 0, 20)
			}
			one = append(one, d[0].Seconds()*1e3/20)
			grouped = append(grouped, d[1].Seconds()*1e3/20)
			ratio = append(ratio, float64(d[1])/float64(d[0]))
		}
		for _, s := range [][]float64{one, grouped, ratio} {
			slices.Sort(s)
		}
		b.ReportMetric(one[2], "one-item-ms")
		b.ReportMetric(grouped[2], "grouped-ms")
		b.ReportMetric(ratio[0], "grouped/one-min")
		b.ReportMetric(ratio[2], "grouped/one-median")
		b.ReportMetric(ratio[4], "grouped/one-max")
	}
}

// BenchmarkAttentionStatsAccDecode times a decode step's statistics on
// the OpenCL device (8 query heads over 4 KV heads of 32, one row over
// 1,024 keys): AttentionStats (per head) against AttentionStatsAcc (summed
// over heads into totals), alternating, 5 rounds of 20 launches each after
// a warm-up, and reports the medians and the per-round ratio range.
func BenchmarkAttentionStatsAccDecode(b *testing.B) {
	p := AttentionParams{Batch: 1, Heads: 8, KVHeads: 4, SeqQ: 1, SeqKV: 1024, HeadDim: 32, Scale: 0.17, Past: 1023, Causal: true}
	rng := rand.New(rand.NewSource(1))
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}
	q, k, v := upload(b, F32, vec(8*32)), upload(b, F32, vec(4*1024*32)), upload(b, F32, vec(4*1024*32))
	lse, sum, count, o := alloc(b, F32, 8), alloc(b, F32, 8*1024), alloc(b, F32, 8*1024), alloc(b, F32, 8*32)
	p.LSE = lse
	if err := testLib.Attention(F32, q, k, v, o, p); err != nil {
		b.Fatal(err)
	}
	run := func(acc bool, n int) time.Duration {
		t0 := time.Now()
		for i := 0; i < n; i++ {
			var err error
			if acc {
				err = testLib.AttentionStatsAcc(F32, q, k, lse, sum, count, p, 8, i == 0)
			} else {
				err = testLib.AttentionStats(F32, q, k, lse, sum, count, p)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if err := testLib.Finish(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	run(true, 3)
	run(false, 3)
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		var per, acc, ratio []float64
		for r := 0; r < 5; r++ {
			var d [2]time.Duration
			for k := 0; k < 2; k++ {
				u := (k + r) % 2
				d[u] = run(u == 1, 20)
			}
			per = append(per, d[0].Seconds()*1e3/20)
			acc = append(acc, d[1].Seconds()*1e3/20)
			ratio = append(ratio, float64(d[1])/float64(d[0]))
		}
		for _, s := range [][]float64{per, acc, ratio} {
			slices.Sort(s)
		}
		b.ReportMetric(per[2], "per-head-ms")
		b.ReportMetric(acc[2], "acc-ms")
		b.ReportMetric(ratio[0], "acc/per-head-min")
		b.ReportMetric(ratio[2], "acc/per-head-median")
		b.ReportMetric(ratio[4], "acc/per-head-max")
	}
}
