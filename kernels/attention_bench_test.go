package kernels

import (
	"fmt"
	"testing"
)

// benchAttention times Attention on random inputs in storage s; bytes is
// what SetBytes reports per launch.
func benchAttention(b *testing.B, s Storage, p AttentionParams, bytes int64) {
	nq := p.Batch * p.Heads * p.SeqQ * p.HeadDim
	nkv := p.Batch * p.KVHeads * p.SeqKV * p.HeadDim
	// At offset 0, as the engine's 64-byte aligned slots are: upload's odd
	// offset makes every vector load straddle two cache lines, which halves
	// the speed of a memory-bound decode step on PoCL.
	aligned := func(x Buf) Buf { x.Off = 0; return x }
	q := aligned(upload(b, s, laRand(1, nq, s)))
	k := aligned(upload(b, s, laRand(2, nkv, s)))
	v := aligned(upload(b, s, laRand(3, nkv, s)))
	o := aligned(alloc(b, s, nq))
	run := func() {
		if err := testLib.Attention(s, q, k, v, o, p); err != nil {
			b.Fatal(err)
		}
	}
	run()
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(bytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAttentionDecode: one new token over a 1024-token cache, 32 heads
// of 128; SetBytes counts the K and V read, so MB/s is cache bandwidth.
func BenchmarkAttentionDecode(b *testing.B) {
	const H, D, S = 32, 128, 1024
	for _, s := range storages {
		b.Run(s.String(), func(b *testing.B) {
			p := AttentionParams{Batch: 1, Heads: H, KVHeads: H, SeqQ: 1, SeqKV: S, HeadDim: D, Causal: true, Past: S - 1}
			benchAttention(b, s, p, int64(2*H*S*D*s.Size()))
		})
	}
}

// BenchmarkAttentionPrefillCLIP: self-attention over a whole CLIP sequence,
// the shapes of the full-size models (12 heads of 64; 50 patches for the
// vision tower, 77 causal tokens for the text tower) and of the small test
// models (4 heads of 16). SetBytes counts Q, K, V and O once each.
func BenchmarkAttentionPrefillCLIP(b *testing.B) {
	for _, c := range []struct {
		h, s, d int
		causal  bool
	}{
		{12, 50, 64, false}, {12, 77, 64, true},
		{4, 50, 16, false}, {4, 77, 16, true},
	} {
		for _, s := range storages {
			b.Run(fmt.Sprintf("H%d_S%d_D%d/%s", c.h, c.s, c.d, s), func(b *testing.B) {
				p := AttentionParams{Batch: 1, Heads: c.h, KVHeads: c.h, SeqQ: c.s, SeqKV: c.s, HeadDim: c.d, Causal: c.causal}
				benchAttention(b, s, p, int64(4*c.h*c.s*c.d*s.Size()))
			})
		}
	}
}
