package kernels

import (
	"testing"
)

// conv3x3Shapes are ResNet-18's stride-1 3x3 convolutions at batch 1,
// then the UNet's (bench13's vision/unet) narrow ones at large sizes.
var conv3x3Shapes = []struct {
	name string
	p    ConvParams
}{
	{"c64-56", ConvParams{N: 1, C: 64, H: 56, W: 56, OutC: 64, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"c128-28", ConvParams{N: 1, C: 128, H: 28, W: 28, OutC: 128, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"c256-14", ConvParams{N: 1, C: 256, H: 14, W: 14, OutC: 256, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"c512-7", ConvParams{N: 1, C: 512, H: 7, W: 7, OutC: 512, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"c16-224", ConvParams{N: 1, C: 16, H: 224, W: 224, OutC: 16, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"c32-112", ConvParams{N: 1, C: 32, H: 112, W: 112, OutC: 32, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"c32-224-k16", ConvParams{N: 1, C: 32, H: 224, W: 224, OutC: 16, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
}

// BenchmarkConv3x3 compares, on ResNet-18's 3x3 layers, the ways to run a
// stride-1 3x3 convolution: "flat" (conv_pad + conv_flat), "im2col" (the
// gather into scratch, then the GEMM), "wino" (Winograd F(2x2,3x3), the
// weight transformed on every call), "winopre" (the weight transformed
// once, ConvParams.WinogradWeight, as the engine runs it), and two bare products for
// reference: "gemm", the im2col product (M = OH*OW, N = OutC, K = C*9) on
// the CPU's best GEMM without the gather, and "wgemm", Winograd's 16
// batched products (M = tiles, N = OutC, K = C) without the transforms.
// GFLOP/s counts the direct convolution's 2*OH*OW*OutC*C*9 for every
// entry, so the columns compare time; cpu-us/op is CPU time per call.
func BenchmarkConv3x3(b *testing.B) {
	defer func() { convForce = "" }()
	for _, sh := range conv3x3Shapes {
		p := sh.p
		p.Weight = F32
		oh, ow := p.OutSize()
		flops := 2 * float64(p.N*p.OutC*oh*ow*p.C*9)
		for _, route := range []string{"flat", "im2col", "wino", "winopre"} {
			if route == "winopre" && !p.WinogradRoute() {
				continue // a transformed weight is refused off the route
			}
			b.Run(sh.name+"/"+route, func(b *testing.B) {
				pr := p
				x := uploadAligned(b, F32, laRand(1, p.N*p.C*p.H*p.W, F32))
				w := laRand(2, p.OutC*p.C*9, F32)
				convForce = route
				defer func() { convForce = "" }()
				if route == "winopre" {
					// The weight transformed once, as an engine does at
					// Open: the route's own time without conv_wino_w.
					u, err := WinogradWeights(w, p.OutC, p.C)
					if err != nil {
						b.Fatal(err)
					}
					w, pr.WinogradWeight, convForce = u, true, "wino"
				}
				wt := uploadAligned(b, F32, w)
				y := uploadAligned(b, F32, make([]float32, p.N*p.OutC*oh*ow))
				scratch := uploadAligned(b, F32, make([]float32, max(1, pr.ScratchElems())))
				timeLaunches(b, flops, func() {
					if err := testLib.Conv2D(F32, x, wt, y, scratch, pr); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
		gemmRun := func(b *testing.B, mp MatMulParams, aLen, bLen int) {
			mp.TransB, mp.Weight = true, F32
			a := uploadAligned(b, F32, laRand(1, aLen, F32))
			w := uploadAligned(b, F32, laRand(2, bLen, F32))
			bc, _ := mp.Batch.counts()
			c := uploadAligned(b, F32, make([]float32, bc*mp.M*mp.N))
			timeLaunches(b, flops, func() {
				if err := testLib.MatMul(F32, a, w, c, mp); err != nil {
					b.Fatal(err)
				}
			})
		}
		b.Run(sh.name+"/gemm", func(b *testing.B) {
			m, k := oh*ow, p.C*9
			gemmRun(b, MatMulParams{M: m, N: p.OutC, K: k}, m*k, p.OutC*k)
		})
		b.Run(sh.name+"/wgemm", func(b *testing.B) {
			t := ((oh + 1) / 2) * ((ow + 1) / 2)
			mp := MatMulParams{M: t, N: p.OutC, K: p.C, Batch: MatMulBatch{Count: [2]int{16, 1},
				A: [2]int{t * p.C, 0}, B: [2]int{p.OutC * p.C, 0}, C: [2]int{t * p.OutC, 0}}}
			gemmRun(b, mp, 16*t*p.C, 16*p.OutC*p.C)
		})
	}
}
