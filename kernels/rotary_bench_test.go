package kernels

import (
	"fmt"
	"testing"
)

// BenchmarkRotary times one Rotary launch of a layer's queries and keys
// (grouped-query: half as many key heads) with [1, 1, seq, head_dim]
// tables: the default model's decode step and prefill (8/4 heads of 32) and
// a 7B-class prefill (32/8 heads of 128). SetBytes counts x read, out
// written and the tables read once, so MB/s is against this machine's
// ~75 GB/s of read bandwidth on two threads (../shared/machine-facts.md);
// the small shapes measure the launch, not memory.
func BenchmarkRotary(b *testing.B) {
	for _, c := range []struct {
		name            string
		heads, kv, s, d int
	}{
		{"decode-8x32", 8, 4, 1, 32},
		{"prefill128-8x32", 8, 4, 128, 32},
		{"prefill512-32x128", 32, 8, 512, 128},
	} {
		for _, s := range storages {
			b.Run(fmt.Sprintf("%s/%v", c.name, s), func(b *testing.B) {
				rc := func(h int) rotaryCase {
					return rotaryCase{x: []int{1, h, c.s, c.d}, cos: []int{1, 1, c.s, c.d}, sin: []int{1, 1, c.s, c.d}, rd: c.d}
				}
				qc, kc := rc(c.heads), rc(c.kv)
				nq, nk, nt := c.heads*c.s*c.d, c.kv*c.s*c.d, c.s*c.d
				aligned := func(x Buf) Buf { x.Off = 0; return x }
				q, k := aligned(upload(b, s, randVec(1, nq))), aligned(upload(b, s, randVec(2, nk)))
				cos, sin := aligned(upload(b, s, randVec(3, nt))), aligned(upload(b, s, randVec(4, nt)))
				lq, err := NewRotaryLayout(qc.x, qc.cos, qc.sin, qc.rd)
				if err != nil {
					b.Fatal(err)
				}
				lk, err := NewRotaryLayout(kc.x, kc.cos, kc.sin, kc.rd)
				if err != nil {
					b.Fatal(err)
				}
				p := RotaryParams{Storage: s, RotaryDim: c.d}
				ta, tb := RotaryTensor{RotaryLayout: lq, X: q, Out: q}, RotaryTensor{RotaryLayout: lk, X: k, Out: k}
				run := func() {
					if err := testLib.Rotary(p, cos, sin, ta, tb); err != nil {
						b.Fatal(err)
					}
				}
				run()
				if err := testLib.Device().Finish(); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64((2*(nq+nk) + 2*nt) * s.Size()))
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
}
