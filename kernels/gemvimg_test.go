package kernels

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestGemvC4Images runs mm_gemv_c4 with its weight read through an image,
// forced on PoCL (which has images), and checks every output bit for bit
// against the buffer build: fp32 and fp16 weights under fp32 and fp16
// activations, a K % 4 tail with a row stride past K, 7 columns (not a
// multiple of the four a work-group takes), alpha, beta and a bias, and
// the gpu-fp16 profile's half path where the device has cl_khr_fp16 (PoCL
// compiles its fp32 fallback). The buffer build is checked against the
// reference too, so both are right, not only equal.
func TestGemvC4Images(t *testing.T) {
	if !testLib.Device().Info().Images {
		t.Skip("the device has no images")
	}
	defer func() { imgForce, mmForce = 0, "" }()
	mmForce = "mm_gemv_c4"
	const n = 7
	for _, tc := range []struct {
		s, w   Storage
		k, ldb int
	}{
		{F32, F32, 151, 152},
		{F32, F16, 256, 256},
		{F16, F16, 535, 540},
	} {
		name := fmt.Sprintf("activations %s weights %s K %d", tc.s, tc.w, tc.k)
		p := MatMulParams{M: 1, N: n, K: tc.k, TransB: true, LDB: tc.ldb, Weight: tc.w,
			Scaled: true, Alpha: 0.75, Beta: -1.5, BiasColStride: 1}
		a := laRand(31, tc.k, tc.s)
		// Whole texels: the last row's tail texel lies inside the buffer.
		b := laRand(32, roundUp((n-1)*tc.ldb+tc.k, 4), tc.w)
		bias := laRand(33, n, tc.w)
		run := func(force int) []float32 {
			imgForce = force
			c := upload(t, tc.s, make([]float32, n))
			q := p
			q.Bias = upload(t, tc.w, bias)
			if err := testLib.MatMul(tc.s, upload(t, tc.s, a), uploadTexels(t, tc.w, b), c, q); err != nil {
				t.Fatal(err)
			}
			return download(t, tc.s, c, n)
		}
		img, buf := run(1), run(-1)
		want := make([]float32, n)
		if err := MatMulRef(a, b, bias, want, p); err != nil {
			t.Fatal(err)
		}
		laClose(t, name, tc.s, buf, want)
		for i := range buf {
			if math.Float32bits(img[i]) != math.Float32bits(buf[i]) {
				t.Fatalf("%s: output %d: image %g, buffer %g", name, i, img[i], buf[i])
			}
		}
	}
	built := false
	for key := range testLib.progs {
		built = built || strings.HasPrefix(key, "matmul\x00") && strings.HasSuffix(key, " -DMM_IMG")
	}
	if !built {
		t.Error("no image build of mm_gemv_c4: the image path did not run")
	}
	// A row stride that is not a whole number of texels reads buffers.
	imgForce = 1
	g := gemm{b: uploadTexels(t, F32, make([]float32, 64)), bk: 1, bn: 6, n: 2, k: 6, nb0: 1, nb1: 1}
	if _, ok := testLib.mmImages(g); ok {
		t.Error("rows 6 elements apart read through an image")
	}
	g.bn = 8
	if _, ok := testLib.mmImages(g); !ok {
		t.Error("rows 8 elements apart do not read through an image")
	}
	g.n = 9 // the last row's texels would pass the buffer's end
	if _, ok := testLib.mmImages(g); ok {
		t.Error("rows past the buffer's end read through an image")
	}
}

// uploadTexels is upload with the data starting on a four-element texel
// (upload's offset of 3 keeps every image read away).
func uploadTexels(t testing.TB, s Storage, xs []float32) Buf {
	t.Helper()
	b := upload(t, s, append(make([]float32, 1), xs...))
	b.Off++
	return b
}
