package kernels

import (
	"fmt"
	"testing"

	"github.com/tlite/tlite/graph/quant"
)

// BenchmarkPhoneGEMV compares the phone decode GEMVs with the kernels they
// replace on the GPU path, on whatever device the tests run on (PoCL here:
// the local-memory reduction and fp32 arithmetic, as a GPU without
// subgroups or fp16 would run them): "old" is qmv_wg on graph/quant's
// columns layout (E0M4) or mm_gemv_wg (fp16 weights [N, K]), "new" is
// qmt_r1 on the four-column tiled layout or mm_gemv_c4. Run the variants
// alternately (tools/phonebench.sh) on a shared machine.
func BenchmarkPhoneGEMV(b *testing.B) {
	defer func() { qForce, mmForce = "", "" }()
	for _, sh := range [][2]int{{4096, 4096}, {11008, 4096}} {
		K, N := sh[0], sh[1]
		// Setup inside the shape's sub-benchmark: a filtered-out shape
		// quantizes nothing.
		b.Run(fmt.Sprintf("%dx%d", K, N), func(b *testing.B) {
			w := laRand(61, K*N, F16)
			a := upload(b, F32, laRand(62, K, F32))
			c := alloc(b, F32, N)
			b.Run("e0m4", func(b *testing.B) {
				p, err := quant.Quantize(w, K, N, quant.Options{Format: quant.E0M4})
				if err != nil {
					b.Fatal(err)
				}
				cols, tiled := uploadQ(b, p), uploadQTile4(b, p)
				if cols.Layout != QLayoutColumns {
					b.Fatalf("the bench device's own layout is %v; run it on a CPU device", cols.Layout)
				}
				b.Run("old", func(b *testing.B) {
					qForce = "qmv_wg"
					b.SetBytes(int64(p.Bytes()))
					benchLaunches(b, func() error { return testLib.MatMulQ(F32, a, cols, c, QMatMulParams{M: 1, N: N, K: K}) })
					qForce = ""
				})
				b.Run("new", func(b *testing.B) {
					b.SetBytes(int64(p.Bytes()))
					benchLaunches(b, func() error { return testLib.MatMulQ(F32, a, tiled, c, QMatMulParams{M: 1, N: N, K: K}) })
				})
			})
			b.Run("f16", func(b *testing.B) {
				wh := upload(b, F16, w)
				for _, v := range []struct{ name, kern string }{{"old", "mm_gemv_wg"}, {"new", "mm_gemv_c4"}} {
					b.Run(v.name, func(b *testing.B) {
						mmForce = v.kern
						b.SetBytes(int64(2 * K * N))
						benchLaunches(b, func() error {
							return testLib.MatMul(F32, a, wh, c, MatMulParams{M: 1, N: N, K: K, TransB: true, Weight: F16})
						})
						mmForce = ""
					})
				}
			})
		})
	}
}

// BenchmarkAttentionSplitDecode: a decode step over a 4096-token cache,
// 32 query heads over 8 kv heads of 128, attn_wg against split-K.
func BenchmarkAttentionSplitDecode(b *testing.B) {
	defer func() { attnForce = "" }()
	const H, Hkv, D, S = 32, 8, 128, 4096
	p := AttentionParams{Batch: 1, Heads: H, KVHeads: Hkv, SeqQ: 1, SeqKV: S, HeadDim: D, Causal: true, Past: S - 1}
	for _, v := range []struct{ name, kern string }{{"old", "attn_wg"}, {"new", "attn_split"}} {
		b.Run(v.name, func(b *testing.B) {
			attnForce = v.kern
			benchAttention(b, F32, p, int64(2*Hkv*S*D*4))
			attnForce = ""
		})
	}
}

// BenchmarkPhoneGEMM compares the phone prefill GEMMs with the GPU paths
// they replace, on whatever device the tests run on (PoCL here, where the
// half arithmetic of the new kernels does not exist and their fp32 path
// runs): "old" is qmt_r1 on the tiled 4-bit layout (a work-group per row
// and block of four columns, so the weight is read once per row) or
// mm_tiled (local-memory tiles) for fp16 weights [N, K]; "new" is qmt_mm
// or mm_reg. Activations are fp16, M = 64 rows. These are CPU timings of
// GPU-shaped kernels, not phone speed; run the variants alternately
// (tools/phonebench.sh).
func BenchmarkPhoneGEMM(b *testing.B) {
	defer func() { qForce, mmForce = "", "" }()
	const M = 64
	for _, sh := range [][2]int{{2048, 2048}} {
		K, N := sh[0], sh[1]
		b.Run(fmt.Sprintf("%dx%dx%d", M, K, N), func(b *testing.B) {
			w := laRand(71, K*N, F16)
			a := upload(b, F16, laRand(72, M*K, F16))
			c := alloc(b, F16, M*N)
			flops := int64(2 * M * K * N)
			b.Run("e0m4", func(b *testing.B) {
				p, err := quant.Quantize(w, K, N, quant.Options{Format: quant.E0M4})
				if err != nil {
					b.Fatal(err)
				}
				tiled := uploadQTile4(b, p)
				for _, v := range []struct{ name, kern string }{{"old", "qmt_r1"}, {"new", "qmt_mm"}} {
					b.Run(v.name, func(b *testing.B) {
						qForce = v.kern
						b.SetBytes(flops) // MB/s reads as MFLOP/s
						benchLaunches(b, func() error { return testLib.MatMulQ(F16, a, tiled, c, QMatMulParams{M: M, N: N, K: K}) })
						qForce = ""
					})
				}
			})
			b.Run("f16", func(b *testing.B) {
				wh := upload(b, F16, w)
				for _, v := range []struct{ name, kern string }{{"old", "mm_tiled"}, {"new", "mm_reg"}} {
					b.Run(v.name, func(b *testing.B) {
						mmForce = v.kern
						b.SetBytes(flops)
						benchLaunches(b, func() error {
							return testLib.MatMul(F16, a, wh, c, MatMulParams{M: M, N: N, K: K, TransB: true, Weight: F16})
						})
						mmForce = ""
					})
				}
			})
		})
	}
}
