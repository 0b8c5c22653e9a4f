package kernels

import "testing"

// BenchmarkAttentionDecode: one new token over a 1024-token cache, 32 heads
// of 128; SetBytes counts the K and V read, so MB/s is cache bandwidth.
func BenchmarkAttentionDecode(b *testing.B) {
	const H, D, S = 32, 128, 1024
	for _, s := range storages {
		b.Run(s.String(), func(b *testing.B) {
			p := AttentionParams{Batch: 1, Heads: H, KVHeads: H, SeqQ: 1, SeqKV: S, HeadDim: D, Causal: true, Past: S - 1}
			q := upload(b, s, laRand(1, H*D, s))
			k := upload(b, s, laRand(2, H*S*D, s))
			v := upload(b, s, laRand(3, H*S*D, s))
			o := alloc(b, s, H*D)
			run := func() {
				if err := testLib.Attention(s, q, k, v, o, p); err != nil {
					b.Fatal(err)
				}
			}
			run()
			if err := testLib.Device().Finish(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(2 * H * S * D * s.Size()))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				run()
			}
			if err := testLib.Device().Finish(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
