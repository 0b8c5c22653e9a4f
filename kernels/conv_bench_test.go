package kernels

import "testing"

// BenchmarkConvPatch32 is ViT-B/32's patch embedding: 1x3x224x224 through a
// 32x32 stride-32 convolution to 768 channels (a 49x3072 by 3072x768 GEMM
// after the gather).
func BenchmarkConvPatch32(b *testing.B) {
	p := ConvParams{N: 1, C: 3, H: 224, W: 224, OutC: 768, KH: 32, KW: 32, StrideH: 32, StrideW: 32}
	for _, w := range []Storage{F32, F16} {
		b.Run("w"+w.String(), func(b *testing.B) {
			p.Weight = w
			x := upload(b, F32, laRand(1, 3*224*224, F32))
			wt := upload(b, w, laRand(2, 768*3*32*32, w))
			y := alloc(b, F32, 768*49)
			scratch := alloc(b, F32, p.ScratchElems())
			run := func() {
				if err := testLib.Conv2D(F32, x, wt, y, scratch, p); err != nil {
					b.Fatal(err)
				}
			}
			run()
			if err := testLib.Device().Finish(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run()
			}
			if err := testLib.Device().Finish(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(2*768*49*3072*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
