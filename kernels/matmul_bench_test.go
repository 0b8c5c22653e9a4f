package kernels

import (
	"flag"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"
)

// mmVariant forces one kernel variant in BenchmarkMatMulViT, for comparing
// them: go test -bench ViT -mmvariant mm_dot_4x4.
var mmVariant = flag.String("mmvariant", "", "force this matmul kernel variant in BenchmarkMatMulViT")

// mmLayout limits BenchmarkMatMulViT to one weight layout: "nk" (transB) or
// "kn"; the mm_dot variants take only "nk".
var mmLayout = flag.String("mmlayout", "both", "weight layout in BenchmarkMatMulViT: both, nk (transB) or kn")

// mmBench times p on random operands: launches are queued back to back and
// finished once, as a session's step does. The weight stays in cache from one
// launch to the next; mmBenchCold is the model's situation.
func mmBench(b *testing.B, s Storage, p MatMulParams, aLen, bLen int) {
	mmBenchCopies(b, s, p, aLen, bLen, 1)
}

// mmBenchCold is mmBench with the launches rotating over enough copies of
// the weight (128 MiB in all, beyond the last-level cache) that each launch
// reads its weight from memory, as a model's layers do: a run reads each
// weight once.
func mmBenchCold(b *testing.B, s Storage, p MatMulParams, aLen, bLen int) {
	mmBenchCopies(b, s, p, aLen, bLen, min(64, (128<<20)/(bLen*p.Weight.Size())+1))
}

func mmBenchCopies(b *testing.B, s Storage, p MatMulParams, aLen, bLen, copies int) {
	a := uploadAligned(b, s, laRand(1, aLen, s))
	ws := make([]Buf, copies)
	for i := range ws {
		ws[i] = uploadAligned(b, p.Weight, laRand(int64(2+i), bLen, p.Weight))
	}
	c := uploadAligned(b, s, make([]float32, p.M*p.N))
	if err := testLib.MatMul(s, a, ws[0], c, p); err != nil { // compile outside the timing
		b.Fatal(err)
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if err := testLib.MatMul(s, a, ws[i%copies], c, p); err != nil {
			b.Fatal(err)
		}
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	// On a shared machine wall time counts other processes' time slices;
	// GFLOP per second of this process's CPU time (all its threads) mostly
	// does not, and shows how many cores the launches kept busy.
	b.ReportMetric(2*float64(p.M*p.N*p.K)*float64(b.N)/(cpuTime()-cpu0).Seconds()/1e9, "GFLOP/cpu-s")
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

// BenchmarkMatMulViT: the Linear layers of a ViT-B/32 image encoder (50
// tokens; q/k/v/out 768x768, MLP 768x3072 and back; names are MxNxK) and
// of a CLIP text encoder (77 tokens, 512 wide), at decode (M = 1) and a
// long prefill (M = 512), with weights read from memory, in both weight
// layouts: [K, N] (MatMul) and [N, K] (transB, a Linear weight). One core:
// POCL_MAX_PTHREAD_COUNT=1 POCL_CPU_MAX_CU_COUNT=1.
func BenchmarkMatMulViT(b *testing.B) {
	for _, sh := range [][3]int{
		{50, 768, 768}, {50, 3072, 768}, {50, 768, 3072}, {50, 2304, 768},
		{77, 512, 512}, {77, 2048, 512}, {77, 512, 2048},
		{1, 768, 768}, {1, 3072, 768}, {1, 768, 3072},
		{512, 768, 768}, {512, 3072, 768}, {512, 768, 3072},
	} {
		m, n, k := sh[0], sh[1], sh[2]
		for _, transB := range []bool{true, false} {
			b.Run(fmt.Sprintf("%dx%dx%d/transB=%v", m, n, k, transB), func(b *testing.B) {
				if *mmLayout == "nk" && !transB || *mmLayout == "kn" && transB {
					b.Skip()
				}
				mmForce = *mmVariant
				defer func() { mmForce = "" }()
				mmBenchCold(b, F32, MatMulParams{M: m, N: n, K: k, TransB: transB}, m*k, k*n)
				b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// uploadAligned is upload with the tensor at the start of its buffer, as a
// session's weights and memory-plan slots are (64-byte aligned): upload's
// odd offset would make every vector load in the timing straddle two cache
// lines.
func uploadAligned(b *testing.B, s Storage, xs []float32) Buf {
	b.Helper()
	raw := make([]byte, len(xs)*s.Size())
	for i, x := range xs {
		putElem(raw, s, i, x)
	}
	mem, err := testLib.Device().Alloc(max(len(raw), 64))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(mem.Release)
	if err := testLib.Device().Write(mem, 0, raw); err != nil {
		b.Fatal(err)
	}
	return Buf{Mem: mem}
}

// BenchmarkMatMulDecodeStep: the 43 Linear products of one decode step of
// the default model (testdata/longctx: 6 layers of q 256, k and v 128, o
// 256, gate and up 768, down back to 256, all over K = 256 but down's 768,
// then a 4096-word LM head), queued back to back and finished once, as a
// session's step is. It splits a step's GEMV cost three ways:
//
//   - model: each product with its own weight (23 MiB read per step, as
//     the model does);
//   - shared: the same 43 launches all over one 256x768 weight, which stays
//     in L2 (the kernels' arithmetic and launch cost without the memory);
//   - tiny: 43 launches of an 8x16 product (the launch cost alone: the
//     host's enqueue and the driver's dispatch);
//   - fused: the model's weights with q, k and v stacked into one 512-row
//     product and gate and up into one 1536-row product, 25 launches in
//     all (what an engine that joins the products sharing an input would
//     run: the same bytes, 18 launches fewer).
//
// cpu-us/step is the process's CPU time (host and, on a CPU device, the
// kernels' threads) per step, which a loaded machine disturbs less than
// the wall time. -mmvariant forces a kernel.
func BenchmarkMatMulDecodeStep(b *testing.B) {
	type lin struct{ n, k int }
	var model []lin
	for range 6 {
		model = append(model, lin{256, 256}, lin{128, 256}, lin{128, 256}, lin{256, 256},
			lin{768, 256}, lin{768, 256}, lin{256, 768})
	}
	model = append(model, lin{4096, 256})
	var fused []lin
	for range 6 {
		fused = append(fused, lin{512, 256}, lin{256, 256}, lin{1536, 256}, lin{256, 768})
	}
	fused = append(fused, lin{4096, 256})
	for _, mode := range []string{"model", "shared", "tiny", "fused"} {
		b.Run(mode, func(b *testing.B) {
			step := slices.Clone(model)
			if mode == "fused" {
				step = fused
			}
			for i := range step {
				switch mode {
				case "shared":
					step[i] = lin{256, 768}
				case "tiny":
					step[i] = lin{8, 16}
				}
			}
			mmForce = *mmVariant
			defer func() { mmForce = "" }()
			a := uploadAligned(b, F32, laRand(1, 768, F32))
			c := uploadAligned(b, F32, make([]float32, 4096))
			ws := make([]Buf, len(step))
			bytes := 0
			for i, l := range step {
				if mode == "model" || mode == "fused" || i == 0 {
					ws[i] = uploadAligned(b, F32, laRand(int64(2+i), l.n*l.k, F32))
				} else {
					ws[i] = ws[0]
				}
				bytes += 4 * l.n * l.k
			}
			run := func() {
				for i, l := range step {
					if err := testLib.MatMul(F32, a, ws[i], c, MatMulParams{M: 1, N: l.n, K: l.k, TransB: true}); err != nil {
						b.Fatal(err)
					}
				}
				if err := testLib.Device().Finish(); err != nil {
					b.Fatal(err)
				}
			}
			run() // compile outside the timing
			b.SetBytes(int64(bytes))
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				run()
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/step")
		})
	}
}
