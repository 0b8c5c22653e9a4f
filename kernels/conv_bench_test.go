package kernels

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

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

// convBenchShapes are the convolutions of ResNet-18 (batch 2, 224x224),
// one of each geometry, and MobileNetV3/EfficientNet's depthwise and
// pointwise layers.
var convBenchShapes = []struct {
	name string
	p    ConvParams
}{
	{"r18-stem-7x7s2", ConvParams{N: 2, C: 3, H: 224, W: 224, OutC: 64, KH: 7, KW: 7, StrideH: 2, StrideW: 2, PadTop: 3, PadLeft: 3, PadBottom: 3, PadRight: 3}},
	{"r18-l1-3x3-56", ConvParams{N: 2, C: 64, H: 56, W: 56, OutC: 64, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"r18-l2-3x3s2", ConvParams{N: 2, C: 64, H: 56, W: 56, OutC: 128, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"r18-l2-3x3-28", ConvParams{N: 2, C: 128, H: 28, W: 28, OutC: 128, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"r18-l3-3x3-14", ConvParams{N: 2, C: 256, H: 14, W: 14, OutC: 256, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"r18-l4-3x3-7", ConvParams{N: 2, C: 512, H: 7, W: 7, OutC: 512, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}},
	{"r18-l2-1x1s2", ConvParams{N: 2, C: 64, H: 56, W: 56, OutC: 128, KH: 1, KW: 1, StrideH: 2, StrideW: 2}},
	{"mb-dw3x3-112", ConvParams{N: 1, C: 64, H: 112, W: 112, OutC: 64, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 64}},
	{"mb-dw5x5-28", ConvParams{N: 1, C: 120, H: 28, W: 28, OutC: 120, KH: 5, KW: 5, PadTop: 2, PadLeft: 2, PadBottom: 2, PadRight: 2, Groups: 120}},
	{"mb-pw1x1-28", ConvParams{N: 1, C: 40, H: 28, W: 28, OutC: 120, KH: 1, KW: 1}},
	{"mb-pw1x1-112-hs", ConvParams{N: 1, C: 16, H: 112, W: 112, OutC: 64, KH: 1, KW: 1, Act: ConvActHardSwish}},
	{"mb-pw1x1-56-hs", ConvParams{N: 1, C: 24, H: 56, W: 56, OutC: 72, KH: 1, KW: 1, Act: ConvActHardSwish}},
	{"mb-pw1x1-14-hs", ConvParams{N: 1, C: 80, H: 14, W: 14, OutC: 480, KH: 1, KW: 1, Act: ConvActHardSwish}},
	{"mb-pw1x1-14", ConvParams{N: 1, C: 480, H: 14, W: 14, OutC: 112, KH: 1, KW: 1}},
	{"mb-pw1x1-7-hs", ConvParams{N: 1, C: 160, H: 7, W: 7, OutC: 960, KH: 1, KW: 1, Act: ConvActHardSwish}},
	{"en-dw3x3-112", ConvParams{N: 1, C: 32, H: 112, W: 112, OutC: 32, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 32, Act: ConvActSiLU}},
	{"en-dw5x5s2-28", ConvParams{N: 1, C: 240, H: 28, W: 28, OutC: 240, KH: 5, KW: 5, StrideH: 2, StrideW: 2, PadTop: 2, PadLeft: 2, PadBottom: 2, PadRight: 2, Groups: 240, Act: ConvActSiLU}},
	{"en-dw3x3-14", ConvParams{N: 1, C: 480, H: 14, W: 14, OutC: 480, KH: 3, KW: 3, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, Groups: 480, Act: ConvActSiLU}},
}

// BenchmarkConvRoutes times each shape on each route that can run it,
// reporting GFLOP/s (2 per multiply-add) against the machine's fp32 peak,
// ~442 GFLOP/s on 2 cores (../shared/machine-facts.md), and the share of
// that peak, and the CPU time per convolution. TLITE_CONV_ROUTES picks
// routes (default all of them; "dw" is the depthwise kernel dwKernel
// picks, "dwgen" conv_dw, "dw1" the picked one with one block of rows per
// work-item, "dwf" conv_dwf over conv_pad's copy (the pad included), "pw"
// conv_pw with pwKernel's tile); TLITE_CONV_PX sets the
// strip width (4, 8 or 16; default the device's).
func BenchmarkConvRoutes(b *testing.B) {
	routes := []string{"flat", "tile", "dw", "dwgen", "dw1", "dwf", "im2col", "direct", "gemm1x1", "pw"}
	if r := os.Getenv("TLITE_CONV_ROUTES"); r != "" {
		routes = strings.Split(r, ",")
	}
	if px := os.Getenv("TLITE_CONV_PX"); px != "" {
		v, err := strconv.Atoi(px)
		if err != nil || v != 4 && v != 8 && v != 16 {
			b.Fatalf("TLITE_CONV_PX=%q: want 4, 8 or 16", px)
		}
		convPXForce = v
	}
	defer func() { convForce, convPXForce = "", 0 }()
	const peak = 442.0
	for _, sh := range convBenchShapes {
		p := sh.p
		p.Weight = F32
		pn, _ := p.norm()
		oh, ow := pn.OutSize()
		flops := 2 * float64(p.N*p.OutC*oh*ow*(p.C/pn.Groups)*p.KH*p.KW)
		for _, route := range routes {
			dw := p.C/pn.Groups == 1 && p.OutC == pn.Groups
			noEpilogue := route == "gemm1x1" || route == "im2col" || route == "direct"
			if noEpilogue && p.Act != ConvActNone ||
				route == "gemm1x1" && (p.KH != 1 || pn.StrideH != 1) || route == "im2col" && p.C/pn.Groups == 1 ||
				(route == "dw" || route == "dwgen" || route == "dw1" || route == "dwf") && !dw ||
				route == "pw" && !pn.plain1x1() {
				continue
			}
			b.Run(sh.name+"/"+route, func(b *testing.B) {
				convForce, convDWOneBlock = route, false
				if route == "dw1" {
					convForce, convDWOneBlock = "dw", true
				}
				defer func() { convDWOneBlock = false }()
				x := upload(b, F32, laRand(1, p.N*p.C*p.H*p.W, F32))
				wt := upload(b, F32, laRand(2, p.OutC*p.C/pn.Groups*p.KH*p.KW, F32))
				y := alloc(b, F32, p.N*p.OutC*oh*ow)
				var scratch Buf
				if n := p.ScratchElems(); n > 0 {
					scratch = alloc(b, F32, n)
				}
				run := func() {
					if err := testLib.Conv2D(F32, x, wt, y, scratch, p); err != nil {
						b.Fatal(err)
					}
				}
				gf := timeLaunches(b, flops, run)
				b.ReportMetric(100*gf/peak, "%peak")
			})
		}
	}
}

// timeLaunches runs run once to build and warm up, then b.N times between
// device syncs, and reports GFLOP/s (flops a run) and the CPU time a run
// of all the process's threads: on the shared machine wall time counts
// other processes' slices too. It returns the GFLOP/s.
func timeLaunches(b *testing.B, flops float64, run func()) float64 {
	b.Helper()
	run()
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		run()
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	gf := flops * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(gf, "GFLOP/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	return gf
}
