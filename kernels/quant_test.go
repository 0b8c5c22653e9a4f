package kernels

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/quant"
)

var qFormats = []quant.Format{quant.E0M4, quant.Int4}

// qWeight returns a [K, N] Gaussian weight (sigma 0.05, like a trained
// Linear) with about 5% exact zeros, and its packing in format f.
func qWeight(t testing.TB, seed int64, f quant.Format, k, n, group int) ([]float32, *quant.Packed) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	w := make([]float32, k*n)
	for i := range w {
		if r.Intn(20) != 0 {
			w[i] = float32(r.NormFloat64() * 0.05)
		}
	}
	p, err := quant.Quantize(w, k, n, quant.Options{Format: f, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	return w, p
}

// qRun runs MatMulQ on random activations (and bias) stored in s and
// returns the whole output buffer with its reference. C starts out random,
// so elements past LDC's row end are checked to survive.
func qRun(t *testing.T, s Storage, wq QBuf, wp *quant.Packed, p QMatMulParams, withBias bool) (got, want []float32) {
	t.Helper()
	lda, ldc := max(p.LDA, p.K), max(p.LDC, p.N)
	a := laRand(11, max(1, p.M*lda), s)
	c0 := laRand(12, max(1, p.M*ldc), s)
	var bias []float32
	if withBias {
		bias = laRand(13, max(p.N, 1), p.BiasStorage)
		p.Bias = upload(t, p.BiasStorage, bias)
	}
	cb := upload(t, s, c0)
	if err := testLib.MatMulQ(s, upload(t, s, a), wq, cb, p); err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), c0...)
	if err := MatMulQRef(a, wp, bias, want, p); err != nil {
		t.Fatal(err)
	}
	return download(t, s, cb, len(c0)), want
}

func uploadQ(t testing.TB, p *quant.Packed) QBuf {
	t.Helper()
	w, err := testLib.UploadQ(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Release)
	return w
}

// TestMatMulQ covers both formats, both activation storages, decode and
// prefill row counts, odd N, K an odd number of groups, and every vector
// width the kernel picks (groups of 32, 64 and 128 weights use 4-, 8- and
// 16-lane vectors). Each (format, group, storage) is a program to build (a
// second or more cold), and the format's decode is one macro shared by all
// widths, so the narrower widths run for E0M4 only.
func TestMatMulQ(t *testing.T) {
	shapes := []struct{ group, k, n int }{
		{128, 3 * 128, 37},
		{64, 5 * 64, 9},
		{32, 3 * 32, 5},
	}
	for _, f := range qFormats {
		for _, sh := range shapes {
			if f == quant.Int4 && sh.group != 128 {
				continue
			}
			_, wp := qWeight(t, int64(sh.k+sh.n), f, sh.k, sh.n, sh.group)
			wq := uploadQ(t, wp)
			for _, s := range storages {
				for _, m := range []int{1, 3, 17, 64} {
					name := fmt.Sprintf("%s/G%d/%s/M%dK%dN%d", f, sh.group, s, m, sh.k, sh.n)
					p := QMatMulParams{M: m, N: sh.n, K: sh.k}
					withBias := m == 3 || m == 17
					if m == 17 { // padded strides
						p.LDA, p.LDC = sh.k+5, sh.n+2
					}
					got, want := qRun(t, s, wq, wp, p, withBias)
					laClose(t, name, s, got, want)
				}
			}
		}
	}
}

// TestMatMulQVariants forces every kernel variant, the GPU ones included,
// on shapes whose rows and columns do not divide the variant's block.
func TestMatMulQVariants(t *testing.T) {
	defer func() { qForce = "" }()
	for _, f := range qFormats {
		_, wp := qWeight(t, 21, f, 256, 11, 128)
		wq := uploadQ(t, wp)
		for _, v := range []string{"qmm_1x4", "qmm_4x2", "qmv_wg"} {
			for _, m := range []int{1, 5} {
				qForce = v
				p := QMatMulParams{M: m, N: 11, K: 256, BiasStorage: F16}
				got, want := qRun(t, F32, wq, wp, p, true)
				laClose(t, fmt.Sprintf("%s/%s/M%d", f, v, m), F32, got, want)
			}
		}
	}
}

// TestMatMulQDequantExact multiplies by the identity, so the output is the
// device's dequantized weight itself, and checks it bit for bit against
// quant's reference decoding (two bit operations and an fma for E0M4), and
// that every weight that was exactly 0 comes back exactly 0.
func TestMatMulQDequantExact(t *testing.T) {
	const K, N = 256, 9
	for _, f := range qFormats {
		w, wp := qWeight(t, 31, f, K, N, 128)
		wq := uploadQ(t, wp)
		eye := make([]float32, K*K)
		for i := 0; i < K; i++ {
			eye[i*K+i] = 1
		}
		for _, v := range []string{"", "qmv_wg"} {
			qForce = v
			c := alloc(t, F32, K*N)
			err := testLib.MatMulQ(F32, upload(t, F32, eye), wq, c, QMatMulParams{M: K, N: N, K: K})
			qForce = ""
			if err != nil {
				t.Fatal(err)
			}
			got := download(t, F32, c, K*N)
			zeros := 0
			for k := 0; k < K; k++ {
				for n := 0; n < N; n++ {
					g, want := got[k*N+n], wp.At(k, n)
					if math.Float32bits(g) != math.Float32bits(want) && !(g == 0 && want == 0) {
						t.Fatalf("%s %q: weight (%d, %d) dequantized to %v on the device, %v on the host", f, v, k, n, g, want)
					}
					if w[k*N+n] == 0 {
						zeros++
						if g != 0 {
							t.Fatalf("%s: weight (%d, %d) is 0 but dequantized to %v", f, k, n, g)
						}
					}
				}
			}
			if zeros == 0 {
				t.Fatal("the test weight has no exact zeros")
			}
		}
	}
}

// TestMatMulQPrefix runs an elastic sub-model: the top-left [K', N'] corner
// of a packed weight, addressed in place by the active sizes, must give
// exactly what the separately quantized corner gives.
func TestMatMulQPrefix(t *testing.T) {
	const K, N, K2, N2, M = 512, 40, 256, 23, 3
	for _, f := range qFormats {
		w, big := qWeight(t, 41, f, K, N, 128)
		corner := make([]float32, K2*N2)
		for k := 0; k < K2; k++ {
			copy(corner[k*N2:(k+1)*N2], w[k*N:k*N+N2])
		}
		small, err := quant.Quantize(corner, K2, N2, quant.Options{Format: f})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range storages {
			a := upload(t, s, laRand(42, M*K2, s))
			out := func(wq QBuf) []float32 {
				c := alloc(t, s, M*N2)
				if err := testLib.MatMulQ(s, a, wq, c, QMatMulParams{M: M, N: N2, K: K2}); err != nil {
					t.Fatal(err)
				}
				return download(t, s, c, M*N2)
			}
			viaBig, viaSmall := out(uploadQ(t, big)), out(uploadQ(t, small))
			for i := range viaBig {
				if math.Float32bits(viaBig[i]) != math.Float32bits(viaSmall[i]) {
					t.Fatalf("%s/%s: prefix output %d = %v, separately quantized corner gives %v", f, s, i, viaBig[i], viaSmall[i])
				}
			}
			want := make([]float32, M*N2)
			if err := MatMulQRef(laRand(42, M*K2, s), big, nil, want, QMatMulParams{M: M, N: N2, K: K2}); err != nil {
				t.Fatal(err)
			}
			laClose(t, fmt.Sprintf("%s/%s prefix", f, s), s, viaBig, want)
		}
	}
}

func TestMatMulQErrors(t *testing.T) {
	_, wp := qWeight(t, 51, quant.E0M4, 256, 8, 128)
	wq := uploadQ(t, wp)
	a := alloc(t, F32, 4*256)
	c := alloc(t, F32, 4*8)
	for _, tc := range []struct {
		name string
		p    QMatMulParams
		w    QBuf
		want string
	}{
		{"K not whole groups", QMatMulParams{M: 1, N: 8, K: 200}, wq, "K = 200 is not a multiple of the weight's group size 128"},
		{"K past the weight", QMatMulParams{M: 1, N: 8, K: 384}, wq, "exceed the stored weight"},
		{"N past the weight", QMatMulParams{M: 1, N: 9, K: 256}, wq, "exceed the stored weight"},
		{"C too small", QMatMulParams{M: 4, N: 8, K: 256, LDC: 9}, wq, "C: needs"},
		{"LDA", QMatMulParams{M: 1, N: 8, K: 256, LDA: 100}, wq, "LDA 100 < K 256"},
		{"codes short", QMatMulParams{M: 1, N: 8, K: 256}, QBuf{Format: wq.Format, Group: 128, K: 256, N: 8,
			Q: Buf{Mem: wq.Q.Mem, Off: 100}, P: wq.P}, "Q (codes): needs"},
		{"bad group", QMatMulParams{M: 1, N: 8, K: 256}, QBuf{Format: wq.Format, Group: 48, K: 256, N: 8, Q: wq.Q, P: wq.P}, "multiple of 32"},
	} {
		err := testLib.MatMulQ(F32, a, tc.w, c, tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	// The reference refuses the same partial group.
	if err := MatMulQRef(make([]float32, 200), wp, nil, make([]float32, 8), QMatMulParams{M: 1, N: 8, K: 200}); err == nil ||
		!strings.Contains(err.Error(), "not a multiple") {
		t.Errorf("MatMulQRef with K=200: error %v", err)
	}
	// Empty products launch nothing and succeed.
	if err := testLib.MatMulQ(F32, a, wq, c, QMatMulParams{M: 0, N: 8, K: 256}); err != nil {
		t.Errorf("M = 0: %v", err)
	}
}

// TestMatMulQRefByHand checks the reference itself on a product small
// enough to compute by hand: one E0M4 group of 32 with range [-1, 3]
// (d = 4, m = -5, see graph/quant), so codes decode to (1+q/16)*4 - 5.
func TestMatMulQRefByHand(t *testing.T) {
	w := make([]float32, 32) // [K=32, N=1]
	w[0], w[1], w[2], w[3] = -1, 3, 1, 0.125
	p, err := quant.QuantizeE0M4(w, 32, 1, 32)
	if err != nil {
		t.Fatal(err)
	}
	// Dequantized: -1, 2.75, 1, 0.25, then zeros. a = [1, 2, 3, 4, 0...]:
	// -1 + 5.5 + 3 + 1 = 8.5, plus bias 0.5.
	a := make([]float32, 32)
	a[0], a[1], a[2], a[3] = 1, 2, 3, 4
	c := []float32{0}
	if err := MatMulQRef(a, p, []float32{0.5}, c, QMatMulParams{M: 1, N: 1, K: 32}); err != nil {
		t.Fatal(err)
	}
	if c[0] != 9 {
		t.Fatalf("reference gives %v, want 9", c[0])
	}
}
