package kernels

import (
	"flag"
	"fmt"
	"strings"
	"testing"
)

// mmVariants lists the kernel variants BenchmarkMatMulTransformer compares,
// comma-separated: a kernel name, "pick" (or "") for the launcher's own
// choice, "pick-kn" for its choice with the weight stored [K, N], "pick16"
// for what it would choose on a device with 16-wide vectors.
var mmVariants = flag.String("mmvariants", "", "comma-separated matmul variants to alternate in BenchmarkMatMulTransformer (\"\" or \"pick\": the launcher's choice)")

// mmRounds is how many times BenchmarkMatMulTransformer runs every
// (shape, variant) pair, alternating the variants within each round.
var mmRounds = flag.Int("mmrounds", 1, "rounds of BenchmarkMatMulTransformer, variants alternated within each")

// mmShapes limits BenchmarkMatMulTransformer to shapes whose MxNxK name
// contains this text.
var mmShapes = flag.String("mmshapes", "", "only the BenchmarkMatMulTransformer shapes whose MxNxK name contains this")

// transformerShapes are the Linear layers (MxNxK, weights [N, K]) of the
// transformer targets of issue 13: BERT-small (512 wide, FFN 2048) at 2x64
// and 8x128 tokens, the CLIP text tower (512, FFN 2048) at 1x77 and 2x77,
// and ViT-B/32 (768, FFN 3072) at batch 1, 2 and 8 (50 tokens each).
var transformerShapes = [][3]int{
	{128, 512, 512}, {128, 2048, 512}, {128, 512, 2048},
	{1024, 512, 512}, {1024, 2048, 512}, {1024, 512, 2048},
	{77, 512, 512}, {77, 2048, 512}, {77, 512, 2048},
	{154, 512, 512}, {154, 2048, 512}, {154, 512, 2048},
	{50, 768, 768}, {50, 3072, 768}, {50, 768, 3072},
	{100, 768, 768}, {100, 3072, 768}, {100, 768, 3072},
	{400, 768, 768}, {400, 3072, 768}, {400, 768, 3072},
	{1, 768, 768}, {1, 3072, 768}, // one token (decode), for the M = 1 kernels
}

// BenchmarkMatMulTransformer times the transformer targets' products with
// the weight read from memory (as a model's layers read it), all compute
// units, in the variants -mmvariants names, alternated within each of
// -mmrounds rounds. Compare GFLOP/s with BenchmarkDevicePeakFMA's, the
// device's fp32 multiply-add peak measured the same way.
//
//	go test ./kernels -run XXX -bench MatMulTransformer -benchtime 3x \
//	    -mmvariants pick,mm_dot8_4x3 -mmrounds 3 -mmshapes 128x
func BenchmarkMatMulTransformer(b *testing.B) {
	variants := strings.Split(*mmVariants, ",")
	for round := 1; round <= *mmRounds; round++ {
		for _, sh := range transformerShapes {
			m, n, k := sh[0], sh[1], sh[2]
			name := fmt.Sprintf("%dx%dx%d", m, n, k)
			if !strings.Contains(name, *mmShapes) {
				continue
			}
			for _, v := range variants {
				if v == "" {
					v = "pick"
				}
				b.Run(fmt.Sprintf("%s/%s/r%d", name, v, round), func(b *testing.B) {
					// The mm_axpy variants and "pick-kn" take the weight
					// stored [K, N], everything else [N, K].
					transB := !strings.HasPrefix(v, "mm_axpy") && v != "pick-kn"
					p := MatMulParams{M: m, N: n, K: k, TransB: transB}
					switch {
					case v == "pick16":
						// What the launcher picks on a device with
						// 16-wide vectors (AVX-512), here.
						inf := testLib.info()
						inf.NativeFloatWidth = 16
						g, err := p.resolve(F32, Buf{}, Buf{}, Buf{}, false)
						if err != nil {
							b.Fatal(err)
						}
						_, mmForce = (&Lib{dev: testLib.dev, as: &inf}).pick(g, inf.Type == "GPU")
					case !strings.HasPrefix(v, "pick"):
						mmForce = v
					}
					defer func() { mmForce = "" }()
					mmBenchCold(b, F32, p, m*k, k*n)
					b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// peakFMASrc keeps 10 independent chains of float8 multiply-adds per
// work-item, enough to fill two pipelined FMA units of 8 lanes, with
// nothing read from memory: its rate is the device's fp32 arithmetic peak.
const peakFMASrc = `
__kernel void peak_fma(__global float *out, int n, float m, float c) {
	float8 a0 = (float8)(get_global_id(0)), a1 = a0 + 1.0f, a2 = a0 + 2.0f,
	       a3 = a0 + 3.0f, a4 = a0 + 4.0f, a5 = a0 + 5.0f, a6 = a0 + 6.0f,
	       a7 = a0 + 7.0f, a8 = a0 + 8.0f, a9 = a0 + 9.0f;
	for (int i = 0; i < n; i++) {
		a0 = fma(a0, m, c); a1 = fma(a1, m, c); a2 = fma(a2, m, c);
		a3 = fma(a3, m, c); a4 = fma(a4, m, c); a5 = fma(a5, m, c);
		a6 = fma(a6, m, c); a7 = fma(a7, m, c); a8 = fma(a8, m, c);
		a9 = fma(a9, m, c);
	}
	const float8 s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9;
	out[get_global_id(0)] = s.s0 + s.s1 + s.s2 + s.s3 + s.s4 + s.s5 + s.s6 + s.s7;
}
`

// BenchmarkDevicePeakFMA measures the device's fp32 multiply-add rate (all
// compute units; GFLOP/cpu-s is the rate per busy core), the roofline that
// the GEMM benchmarks' GFLOP/s are read against.
func BenchmarkDevicePeakFMA(b *testing.B) {
	k, err := testLib.kernel("peakfma", peakFMASrc, "", "peak_fma")
	if err != nil {
		b.Fatal(err)
	}
	items := 4 * cpuGroup * max(1, testLib.info().ComputeUnits)
	out := uploadAligned(b, F32, make([]float32, items))
	const n = 1 << 16
	launch := func() {
		global, local := testLib.cpuGroups([]int{items})
		if err := testLib.Device().Launch(k, global, local, out.Mem, int32(n), float32(0.999), float32(0.001)); err != nil {
			b.Fatal(err)
		}
	}
	launch()
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		launch()
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	flop := float64(items) * n * 10 * 8 * 2 * float64(b.N)
	b.ReportMetric(flop/(cpuTime()-cpu0).Seconds()/1e9, "GFLOP/cpu-s")
	b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
