package kernels

import "testing"

func benchLoop(b *testing.B, flops float64, run func() error) {
	b.Helper()
	if err := run(); err != nil {
		b.Fatal(err)
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := run(); err != nil {
			b.Fatal(err)
		}
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	if flops > 0 {
		b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	}
}

// BenchmarkConvTransposeUNet is a UNet decoder's up-convolution: 1x256x32x32
// through a 2x2 stride-2 transposed convolution to 128 channels.
func BenchmarkConvTransposeUNet(b *testing.B) {
	p := ConvTransposeParams{N: 1, C: 256, H: 32, W: 32, OutC: 128, KH: 2, KW: 2, StrideH: 2, StrideW: 2}
	x := upload(b, F32, laRand(1, 256*32*32, F32))
	w := upload(b, F32, laRand(2, 256*128*4, F32))
	y := alloc(b, F32, 128*64*64)
	for _, route := range []string{"gemm", "direct"} {
		b.Run(route, func(b *testing.B) {
			var scratch Buf
			if route == "gemm" {
				scratch = alloc(b, F32, p.ScratchElems())
			}
			benchLoop(b, 2*256*128*4*32*32, func() error { return testLib.ConvTranspose2D(F32, x, w, y, scratch, p) })
		})
	}
}

// BenchmarkResizeBilinear2x is a segmentation head's 2x bilinear upsampling
// of 1x128x64x64, in one launch (fused) and as two passes through scratch
// (separable).
func BenchmarkResizeBilinear2x(b *testing.B) {
	p := ResizeParams{In: []int{1, 128, 64, 64}, Out: []int{1, 128, 128, 128}, Scales: []float64{1, 1, 2, 2},
		Mode: ResizeLinear, Coord: CoordHalfPixel}
	x := upload(b, F32, laRand(1, 128*64*64, F32))
	y := alloc(b, F32, 128*128*128)
	defer func() { resizeSeparable = false }()
	for _, sep := range []bool{false, true} {
		name := "fused"
		if sep {
			name = "separable"
		}
		b.Run(name, func(b *testing.B) {
			resizeSeparable = sep
			scratch := alloc(b, F32, max(1, p.ScratchElems()))
			benchLoop(b, 0, func() error { return testLib.Resize(F32, x, y, scratch, p) })
			b.ReportMetric(float64(128*128*128)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Moutputs/s")
		})
	}
}

// BenchmarkConv3D is a video network's 3x3x3 convolution: 1x64x8x28x28 to 64
// channels, through the GEMM route and the direct kernel.
func BenchmarkConv3D(b *testing.B) {
	p := Conv3DParams{N: 1, C: 64, D: 8, H: 28, W: 28, OutC: 64, Kernel: [3]int{3, 3, 3},
		PadBegin: [3]int{1, 1, 1}, PadEnd: [3]int{1, 1, 1}}
	x := upload(b, F32, laRand(1, 64*8*28*28, F32))
	w := upload(b, F32, laRand(2, 64*64*27, F32))
	y := alloc(b, F32, 64*8*28*28)
	for _, route := range []string{"gemm", "direct"} {
		b.Run(route, func(b *testing.B) {
			var scratch Buf
			if route == "gemm" {
				scratch = alloc(b, F32, p.ScratchElems())
			}
			benchLoop(b, 2*64*64*27*8*28*28, func() error { return testLib.Conv3D(F32, x, w, y, scratch, p) })
		})
	}
}

// BenchmarkConv2DSameWork is a 2-D convolution of the same FLOPs as
// BenchmarkConv3D through Conv2D's GEMM route, for comparison.
func BenchmarkConv2DSameWork(b *testing.B) {
	p := ConvParams{N: 8, C: 64, H: 28, W: 28, OutC: 64, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}
	x := upload(b, F32, laRand(1, 8*64*28*28, F32))
	w := upload(b, F32, laRand(2, 64*64*9, F32))
	y := alloc(b, F32, 8*64*28*28)
	scratch := alloc(b, F32, p.ScratchElems())
	benchLoop(b, 3*2*64*64*9*8*28*28, func() error {
		for i := 0; i < 3; i++ {
			if err := testLib.Conv2D(F32, x, w, y, scratch, p); err != nil {
				return err
			}
		}
		return nil
	})
}
