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
	peak := alloc(b, F32, 8*1024)
	p.LSE = lse
	if err := testLib.Attention(F32, q, k, v, o, p); err != nil {
		b.Fatal(err)
	}
	run := func(one bool, n int) time.Duration {
		statsOneItem = one
		defer func() { statsOneItem = false }()
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if err := testLib.AttentionStats(F32, q, k, lse, sum, count, peak, p); err != nil {
				b.Fatal(err)
			}
		}
		if err := testLib.Finish(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	benchAlternated(b, func(n int) time.Duration { return run(true, n) }, func(n int) time.Duration { return run(false, n) },
		"one-item-ms", "grouped-ms", "grouped/one")
}

// benchAlternated warms both launch forms up, then per b.N iteration runs
// 5 rounds of 20 launches of each, alternating which goes first, and
// reports their median ms per launch (as aMetric, bMetric) and the min,
// median and max of b's time over a's (ratio-min, -median, -max).
func benchAlternated(b *testing.B, runA, runB func(n int) time.Duration, aMetric, bMetric, ratio string) {
	runA(3)
	runB(3)
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		var ta, tb, r []float64
		for round := 0; round < 5; round++ {
			var d [2]time.Duration
			for k := 0; k < 2; k++ {
				if (k+round)%2 == 0 {
					d[0] = runA(20)
				} else {
					d[1] = runB(20)
				}
			}
			ta = append(ta, d[0].Seconds()*1e3/20)
			tb = append(tb, d[1].Seconds()*1e3/20)
			r = append(r, float64(d[1])/float64(d[0]))
		}
		for _, s := range [][]float64{ta, tb, r} {
			slices.Sort(s)
		}
		b.ReportMetric(ta[2], aMetric)
		b.ReportMetric(tb[2], bMetric)
		b.ReportMetric(r[0], ratio+"-min")
		b.ReportMetric(r[2], ratio+"-median")
		b.ReportMetric(r[4], ratio+"-max")
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
	peak := alloc(b, F32, 8*1024)
	p.LSE = lse
	if err := testLib.Attention(F32, q, k, v, o, p); err != nil {
		b.Fatal(err)
	}
	run := func(acc bool, n int) time.Duration {
		t0 := time.Now()
		for i := 0; i < n; i++ {
			var err error
			if acc {
				err = testLib.AttentionStatsAcc(F32, q, k, lse, sum, count, peak, p, 8, i == 0)
			} else {
				err = testLib.AttentionStats(F32, q, k, lse, sum, count, peak, p)
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
	benchAlternated(b, func(n int) time.Duration { return run(false, n) }, func(n int) time.Duration { return run(true, n) },
		"per-head-ms", "acc-ms", "acc/per-head")
}
