package kernels

import (
	"fmt"
	"testing"
)

// mmBench times p on random operands: launches are queued back to back and
// finished once, as a session's step does.
func mmBench(b *testing.B, s Storage, p MatMulParams, aLen, bLen int) {
	a := upload(b, s, laRand(1, aLen, s))
	w := upload(b, p.Weight, laRand(2, bLen, p.Weight))
	c := alloc(b, s, p.M*p.N)
	if err := testLib.MatMul(s, a, w, c, p); err != nil { // compile outside the timing
		b.Fatal(err)
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := testLib.MatMul(s, a, w, c, p); err != nil {
			b.Fatal(err)
		}
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMatMulDecode: one token through a 4096x4096 Linear, bandwidth
// bound; SetBytes counts the weight so the MB/s column is weight bandwidth.
func BenchmarkMatMulDecode(b *testing.B) {
	const K, N = 4096, 4096
	for _, w := range []Storage{F32, F16} {
		for _, transB := range []bool{true, false} {
			b.Run(fmt.Sprintf("w%s/transB=%v", w, transB), func(b *testing.B) {
				b.SetBytes(int64(K * N * w.Size()))
				mmBench(b, F32, MatMulParams{M: 1, N: N, K: K, TransB: transB, Weight: w}, K, K*N)
			})
		}
	}
}

// BenchmarkMatMulPrefill: 128 tokens through a 512x512 Linear, compute bound.
func BenchmarkMatMulPrefill(b *testing.B) {
	const M, K, N = 128, 512, 512
	for _, transB := range []bool{true, false} {
		b.Run(fmt.Sprintf("transB=%v", transB), func(b *testing.B) {
			mmBench(b, F32, MatMulParams{M: M, N: N, K: K, TransB: transB}, M*K, K*N)
			b.ReportMetric(2*M*N*K*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
