package llms

import (
	"math"
	"math/rand"
	"testing"
)

// TestEncodedSize: the byte counts of encoded chunks equal the formula
// (metadata included) and the effective bits are the spec's numbers for
// 16 tokens of 32-dim heads: 9 bits at INT8, 6 at 4-bit, 4 at 2-bit.
func TestEncodedSize(t *testing.T) {
	s := Shape{Heads: 2, Dim: 32, ElemSize: 4}
	for _, tc := range []struct {
		l    Level
		n    int
		want int
		bits float64
	}{
		{LevelFP, 16, 16 * 64 * 4, 32},
		{Level8, 16, 16 * 2 * 36, 9},
		{Level4, 16, 64 * (4 + 8), 6},
		{Level2, 16, 64 * (4 + 4), 4},
		{Level8, 5, 5 * 2 * 36, 9},
		{Level4, 5, 64 * (4 + 3), 64 * 7 * 8 / (5 * 64.0)},
		{Level2, 5, 64 * (4 + 2), 64 * 6 * 8 / (5 * 64.0)},
	} {
		if got := EncodedSize(tc.l, tc.n, s); got != tc.want {
			t.Errorf("%s n=%d: EncodedSize %d, want %d", tc.l, tc.n, got, tc.want)
		}
		if got := EffectiveBits(tc.l, tc.n, s); math.Abs(got-tc.bits) > 1e-9 {
			t.Errorf("%s n=%d: %.3f effective bits, want %.3f", tc.l, tc.n, got, tc.bits)
		}
		raw := make([]byte, tc.n*64*4)
		rand.New(rand.NewSource(1)).Read(raw[:0])
		for i := 0; i < tc.n*64; i++ {
			putF32(raw, i, float32(math.Sin(float64(i))))
		}
		enc, err := EncodeChunk(nil, raw, tc.n, s, tc.l)
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) != tc.want {
			t.Errorf("%s n=%d: encoded %d bytes, formula %d", tc.l, tc.n, len(enc), tc.want)
		}
	}
}

// TestCodecRealKV encodes real KV (the default model's keys and values of
// held-out text, read from the device) at every level: lossless round-trips
// bit for bit, the error is bounded by the step of each code, and it is
// ordered 2-bit > 4-bit > 8-bit in every buffer. fp16 storage round-trips
// through the same path.
func TestCodecRealKV(t *testing.T) {
	st := openDefault(t, 64)
	toks := heldoutTokens(t, 48)
	prefill(t, st, toks)
	lay, err := newLayout(st.Info(), 16, Level8)
	if err != nil {
		t.Fatal(err)
	}
	n := 16
	slots := seq(48)[16:32] // the second chunk
	dump := make([]byte, len(slots)*st.SlotBytes())
	if err := st.ReadAllSlots(slots, dump); err != nil {
		t.Fatal(err)
	}
	off := 0
	for b, s := range lay.bufs {
		rb := lay.rowBytes(b)
		raw := dump[off : off+n*rb]
		off += n * rb
		orig := make([]float32, n*s.rowElems())
		if err := readRows(raw, n, s, orig); err != nil {
			t.Fatal(err)
		}
		rms := map[Level]float64{}
		for _, l := range []Level{LevelFP, Level8, Level4, Level2} {
			enc, err := EncodeChunk(nil, raw, n, s, l)
			if err != nil {
				t.Fatal(err)
			}
			if len(enc) != EncodedSize(l, n, s) {
				t.Fatalf("buffer %d %s: %d bytes, formula %d", b, l, len(enc), EncodedSize(l, n, s))
			}
			dec, err := DecodeChunk(nil, enc, n, s, l)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]float32, len(orig))
			if err := readRows(dec, n, s, got); err != nil {
				t.Fatal(err)
			}
			var se float64
			for i := range orig {
				d := float64(got[i] - orig[i])
				se += d * d
			}
			rms[l] = math.Sqrt(se / float64(len(orig)))
		}
		if rms[LevelFP] != 0 {
			t.Errorf("buffer %d: lossless round trip has error %g", b, rms[LevelFP])
		}
		if !(rms[Level2] > rms[Level4] && rms[Level4] > rms[Level8] && rms[Level8] > 0) {
			t.Errorf("buffer %d: RMS error 2-bit %.4g, 4-bit %.4g, 8-bit %.4g; want strictly decreasing", b, rms[Level2], rms[Level4], rms[Level8])
		}
		if b == 0 {
			t.Logf("buffer 0 RMS error: int8 %.4g int4 %.4g int2 %.4g", rms[Level8], rms[Level4], rms[Level2])
		}
	}
}

// TestCodecBounds: on random data the INT8 error is at most half a step
// per token and head, constant rows decode exactly, and bad sizes are
// refused.
func TestCodecBounds(t *testing.T) {
	s := Shape{Heads: 3, Dim: 8, ElemSize: 4}
	rng := rand.New(rand.NewSource(3))
	n := 7
	raw := make([]byte, n*24*4)
	vals := make([]float32, n*24)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64() * 3)
		putF32(raw, i, vals[i])
	}
	for _, l := range []Level{Level8, Level4, Level2} {
		enc, _ := EncodeChunk(nil, raw, n, s, l)
		dec, err := DecodeChunk(nil, enc, n, s, l)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(vals))
		readRows(dec, n, s, got)
		// Bound: the widest range over the level's groups / (2^bits-1),
		// plus the base INT8 error for sub-byte levels, plus fp16 slack.
		lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
		for _, v := range vals {
			lo, hi = min(lo, v), max(hi, v)
		}
		bound := float64(hi-lo)/float64(int(1)<<int(l)-1)*0.5 + float64(hi-lo)/255*0.5 + 0.01
		for i := range vals {
			if d := math.Abs(float64(got[i] - vals[i])); d > bound {
				t.Fatalf("%s value %d: error %g above bound %g", l, i, d, bound)
			}
		}
	}
	// Constant rows: scale 0, exact.
	for i := range vals {
		putF32(raw, i, 1.5)
	}
	for _, l := range []Level{Level8, Level4, Level2} {
		enc, _ := EncodeChunk(nil, raw, n, s, l)
		dec, _ := DecodeChunk(nil, enc, n, s, l)
		got := make([]float32, len(vals))
		readRows(dec, n, s, got)
		for i := range got {
			if got[i] != 1.5 {
				t.Fatalf("%s: constant 1.5 decodes to %g", l, got[i])
			}
		}
	}
	for _, bad := range []func() error{
		func() error { _, err := EncodeChunk(nil, raw[:10], n, s, Level8); return err },
		func() error { _, err := DecodeChunk(nil, make([]byte, 3), n, s, Level4); return err },
		func() error { _, err := EncodeChunk(nil, raw, n, s, Level(3)); return err },
	} {
		if bad() == nil {
			t.Error("a malformed encode/decode was accepted")
		}
	}
}

func putF32(b []byte, i int, v float32) {
	u := math.Float32bits(v)
	b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}
