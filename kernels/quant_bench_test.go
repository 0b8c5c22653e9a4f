package kernels

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/tlite/tlite/graph/quant"
)

// qBenchShapes are Transformer-Lite's Table 1 GEMV shapes (K x N): a
// 7B-class model's attention projection, MLP up/gate and MLP down.
var qBenchShapes = [][2]int{{4096, 4096}, {4096, 11008}, {11008, 4096}}

// qCPUTime is the CPU time this process has used, all threads (PoCL's
// worker threads included).
func qCPUTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchLaunches times launch on the queue: launches go back to back and
// are finished once, as a session's step does (PoCL's per-launch overhead
// is 4-7 µs batched, under 1% of these kernels). Besides wall time it
// reports cpu-ms/op, the CPU time the device's threads spent per launch:
// on a shared machine wall time includes waiting for a core, CPU time
// does not (divide by the device's compute units for an unloaded wall time).
func benchLaunches(b *testing.B, launch func() error) {
	if err := launch(); err != nil { // compile outside the timing
		b.Fatal(err)
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	// The host weights just quantized are garbage now; collect them here so
	// that the collector's threads do not run (and count) during the timing.
	runtime.GC()
	b.ResetTimer()
	cpu0 := qCPUTime(b)
	for i := 0; i < b.N; i++ {
		if err := launch(); err != nil {
			b.Fatal(err)
		}
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(qCPUTime(b)-cpu0)/1e6/float64(b.N), "cpu-ms/op")
}

// BenchmarkMatMulQ: decode GEMV, activation [1, K] in fp32, against E0M4,
// INT4 (group 128) and fp16 weights (the float matmul family, Linear layout
// [N, K]). SetBytes counts the weight bytes read (codes + group parameters
// for 4-bit), so the MB/s column is effective weight bandwidth.
func BenchmarkMatMulQ(b *testing.B) {
	for _, sh := range qBenchShapes {
		K, N := sh[0], sh[1]
		w := laRand(61, K*N, F16)
		a := upload(b, F32, laRand(62, K, F32))
		c := alloc(b, F32, N)
		for _, f := range qFormats {
			p, err := quant.Quantize(w, K, N, quant.Options{Format: f})
			if err != nil {
				b.Fatal(err)
			}
			wq := uploadQ(b, p)
			b.Run(fmt.Sprintf("%dx%d/%s", K, N, f), func(b *testing.B) {
				b.SetBytes(int64(p.Bytes()))
				benchLaunches(b, func() error {
					return testLib.MatMulQ(F32, a, wq, c, QMatMulParams{M: 1, N: N, K: K})
				})
			})
		}
		wh := upload(b, F16, w) // read as [N, K]: same bytes, Linear layout
		b.Run(fmt.Sprintf("%dx%d/f16", K, N), func(b *testing.B) {
			b.SetBytes(int64(2 * K * N))
			benchLaunches(b, func() error {
				return testLib.MatMul(F32, a, wh, c, MatMulParams{M: 1, N: N, K: K, TransB: true, Weight: F16})
			})
		})
	}
}

// BenchmarkMatMulQPrefill: 64 tokens through a 4096x4096 weight, the
// register-blocked path that dequantizes each weight vector once per block
// of rows.
func BenchmarkMatMulQPrefill(b *testing.B) {
	const M, K, N = 64, 4096, 4096
	w := laRand(71, K*N, F16)
	a := upload(b, F32, laRand(72, M*K, F32))
	c := alloc(b, F32, M*N)
	for _, f := range qFormats {
		p, err := quant.Quantize(w, K, N, quant.Options{Format: f})
		if err != nil {
			b.Fatal(err)
		}
		wq := uploadQ(b, p)
		b.Run(f.String(), func(b *testing.B) {
			benchLaunches(b, func() error {
				return testLib.MatMulQ(F32, a, wq, c, QMatMulParams{M: M, N: N, K: K})
			})
			b.ReportMetric(2*M*N*K*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
	wh := upload(b, F16, w)
	b.Run("f16", func(b *testing.B) {
		benchLaunches(b, func() error {
			return testLib.MatMul(F32, a, wh, c, MatMulParams{M: M, N: N, K: K, TransB: true, Weight: F16})
		})
		b.ReportMetric(2*M*N*K*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}
