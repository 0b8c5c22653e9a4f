package llms

import (
	"math"
	"testing"
)

// BenchmarkDecode: host-side dequantization of one 16-token chunk of one
// cache buffer of the long-context model (4 KV heads of 32) per level.
func BenchmarkDecode(b *testing.B) {
	s := Shape{Heads: 4, Dim: 32, ElemSize: 4}
	n := 16
	raw := make([]byte, n*128*4)
	for i := 0; i < n*128; i++ {
		putF32(raw, i, float32(math.Sin(float64(i)*0.37)))
	}
	for _, l := range []Level{LevelFP, Level8, Level4, Level2} {
		enc, _ := EncodeChunk(nil, raw, n, s, l)
		dst := make([]byte, len(raw))
		b.Run(l.String(), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			for i := 0; i < b.N; i++ {
				if _, err := DecodeChunk(dst[:0], enc, n, s, l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
