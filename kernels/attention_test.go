package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/tlite/tlite/graph/dtype"
)

func TestAttentionRefByHand(t *testing.T) {
	// One query, two keys, D = 1, scale 1: scores 0 and ln 3 give weights
	// 1/4 and 3/4, so the output is 4/4 + 3*8/4 = 7.
	o := make([]float32, 1)
	p := AttentionParams{Batch: 1, Heads: 1, KVHeads: 1, SeqQ: 1, SeqKV: 2, HeadDim: 1, Scale: 1}
	if err := AttentionRef([]float32{1}, []float32{0, float32(math.Log(3))}, []float32{4, 8}, nil, o, p); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "softmax", o, []float32{7}, 1e-6, 0)
	// Causal with past 0: the first query sees only the first key.
	p.SeqQ, p.Causal = 2, true
	o = make([]float32, 2)
	if err := AttentionRef([]float32{1, 1}, []float32{0, float32(math.Log(3))}, []float32{4, 8}, nil, o, p); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "causal", o, []float32{4, 7}, 1e-6, 0)
	// A mask of -inf on the second key leaves the first alone.
	p.Causal = false
	inf := float32(math.Inf(-1))
	p.MaskStrides = [4]int{0, 0, 2, 1}
	if err := AttentionRef([]float32{1, 1}, []float32{0, float32(math.Log(3))}, []float32{4, 8}, []float32{0, inf, inf, inf}, o, p); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "mask", o, []float32{4, 0}, 1e-6, 0)
}

// attnCase is one attention test: params, the KV cache capacity (0: packed
// K/V of SeqKV rows), the mask shape (nil: none) and whether O is written as
// [B, Sq, H, D].
type attnCase struct {
	p         AttentionParams
	capacity  int
	maskShape []int // [mb, mh, Sq, Skv] with mb in {1, B}, mh in {1, H}
	bshd      bool
}

func attnRun(t *testing.T, s Storage, c attnCase) (got, want []float32) {
	t.Helper()
	p := c.p
	d := p.HeadDim
	capacity := c.capacity
	if capacity == 0 {
		capacity = p.SeqKV
	} else {
		p.K = AttnLayout{Batch: p.KVHeads * capacity * d, Head: capacity * d, Seq: d}
		p.V = p.K
	}
	if c.bshd {
		p.O = AttnLayout{Batch: p.SeqQ * p.Heads * d, Head: d, Seq: p.Heads * d}
	}
	q := laRand(31, p.Batch*p.Heads*p.SeqQ*d, s)
	k := laRand(32, p.Batch*p.KVHeads*capacity*d, s)
	v := laRand(33, p.Batch*p.KVHeads*capacity*d, s)
	// Spread the scores so the softmax is far from uniform.
	for i := range q {
		q[i] = roundTrip(s, 3*q[i])
	}
	no := p.Batch * p.Heads * p.SeqQ * d
	o0 := laRand(34, no, s)
	var mask []float32
	if c.maskShape != nil {
		ms := c.maskShape
		mask = laRand(35, ms[0]*ms[1]*ms[2]*ms[3], s)
		for i := range mask {
			if i%5 == 3 {
				mask[i] = float32(math.Inf(-1))
			}
		}
		st := [4]int{ms[1] * ms[2] * ms[3], ms[2] * ms[3], ms[3], 1}
		for i := 0; i < 2; i++ {
			if ms[i] == 1 {
				st[i] = 0
			}
		}
		p.MaskStrides = st
		p.Mask = upload(t, s, mask)
	}
	ob := upload(t, s, o0)
	if err := testLib.Attention(s, upload(t, s, q), upload(t, s, k), upload(t, s, v), ob, p); err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), o0...)
	if err := AttentionRef(q, k, v, mask, want, p); err != nil {
		t.Fatal(err)
	}
	return download(t, s, ob, no), want
}

var attnCases = map[string]attnCase{
	"plain":            {p: AttentionParams{Batch: 2, Heads: 2, KVHeads: 2, SeqQ: 5, SeqKV: 7, HeadDim: 24}},
	"gqa 4:1":          {p: AttentionParams{Batch: 1, Heads: 8, KVHeads: 2, SeqQ: 3, SeqKV: 17, HeadDim: 64}},
	"decode cache":     {p: AttentionParams{Batch: 2, Heads: 4, KVHeads: 2, SeqQ: 1, SeqKV: 33, HeadDim: 64, Causal: true, Past: 32}, capacity: 40},
	"prefill causal":   {p: AttentionParams{Batch: 1, Heads: 2, KVHeads: 1, SeqQ: 9, SeqKV: 9, HeadDim: 12, Causal: true}},
	"chunk with past":  {p: AttentionParams{Batch: 1, Heads: 3, KVHeads: 3, SeqQ: 4, SeqKV: 10, HeadDim: 3, Causal: true, Past: 6}, capacity: 12},
	"skv 1":            {p: AttentionParams{Batch: 2, Heads: 2, KVHeads: 1, SeqQ: 3, SeqKV: 1, HeadDim: 64}},
	"mask broadcast":   {p: AttentionParams{Batch: 2, Heads: 4, KVHeads: 4, SeqQ: 6, SeqKV: 11, HeadDim: 64}, maskShape: []int{1, 1, 6, 11}},
	"mask full + bshd": {p: AttentionParams{Batch: 2, Heads: 2, KVHeads: 1, SeqQ: 4, SeqKV: 70, HeadDim: 3, Scale: 0.3}, maskShape: []int{2, 2, 4, 70}, bshd: true},
	"mask per batch":   {p: AttentionParams{Batch: 2, Heads: 2, KVHeads: 2, SeqQ: 1, SeqKV: 130, HeadDim: 64, Causal: true, Past: 129}, maskShape: []int{2, 1, 1, 130}, capacity: 131},
	"bshd decode":      {p: AttentionParams{Batch: 1, Heads: 4, KVHeads: 1, SeqQ: 1, SeqKV: 65, HeadDim: 64}, bshd: true},
	// 74 rows per kv head: attn_lanes spreads them over five work-items,
	// the last one partial, each with its own causal limit and mask rows.
	"long chunk gqa mask": {p: AttentionParams{Batch: 1, Heads: 4, KVHeads: 2, SeqQ: 37, SeqKV: 45, HeadDim: 64, Causal: true, Past: 8}, maskShape: []int{1, 4, 37, 45}, capacity: 50, bshd: true},
}

func TestAttention(t *testing.T) {
	defer func() { attnForce = "" }()
	for _, variant := range []string{"attn_row", "attn_lanes", "attn_wg"} {
		attnForce = variant
		for name, c := range attnCases {
			for _, s := range storages {
				// Each head size is a program per storage and variant: the
				// vector widths 16 and 1 in every combination, 8 and 4 (HD 24,
				// 12) in the CPU kernel at fp32, which keeps a cold run's
				// builds to ten.
				if d := c.p.HeadDim; (d == 24 || d == 12) && (s == F16 || variant == "attn_wg") {
					continue
				}
				got, want := attnRun(t, s, c)
				laClose(t, fmt.Sprintf("%s/%s/%s", variant, name, s), s, got, want)
			}
		}
	}
}

// TestAttentionMaskedRow: a query row whose every key is masked to -inf
// yields zeros, the others are unaffected.
func TestAttentionMaskedRow(t *testing.T) {
	defer func() { attnForce = "" }()
	inf := float32(math.Inf(-1))
	p := AttentionParams{Batch: 1, Heads: 1, KVHeads: 1, SeqQ: 2, SeqKV: 3, HeadDim: 3, MaskStrides: [4]int{0, 0, 3, 1}}
	mask := []float32{inf, inf, inf, 0, inf, 0}
	q, k, v := laRand(1, 6, F32), laRand(2, 9, F32), laRand(3, 9, F32)
	want := make([]float32, 6)
	if err := AttentionRef(q, k, v, mask, want, p); err != nil {
		t.Fatal(err)
	}
	for _, variant := range []string{"attn_row", "attn_lanes", "attn_wg"} {
		attnForce = variant
		p.Mask = upload(t, F32, mask)
		ob := upload(t, F32, []float32{9, 9, 9, 9, 9, 9})
		if err := testLib.Attention(F32, upload(t, F32, q), upload(t, F32, k), upload(t, F32, v), ob, p); err != nil {
			t.Fatal(err)
		}
		got := download(t, F32, ob, 6)
		assertClose(t, variant+" masked row", got[:3], []float32{0, 0, 0}, 0, 0)
		laClose(t, variant, F32, got, want)
	}
}

func TestAttentionEmptyAndErrors(t *testing.T) {
	q := alloc(t, F32, 64)
	before := testLib.Device().Stats().Launches
	if err := testLib.Attention(F32, q, q, q, q, AttentionParams{Batch: 1, Heads: 2, KVHeads: 1, SeqQ: 0, SeqKV: 4, HeadDim: 8}); err != nil {
		t.Fatal(err)
	}
	if n := testLib.Device().Stats().Launches - before; n != 0 {
		t.Errorf("empty attention launched %d kernels", n)
	}
	for name, p := range map[string]AttentionParams{
		"heads":       {Batch: 1, Heads: 3, KVHeads: 2, SeqQ: 1, SeqKV: 1, HeadDim: 4},
		"q too small": {Batch: 1, Heads: 2, KVHeads: 2, SeqQ: 5, SeqKV: 1, HeadDim: 8},
		"kv too long": {Batch: 1, Heads: 1, KVHeads: 1, SeqQ: 1, SeqKV: 80, HeadDim: 1},
	} {
		if err := testLib.Attention(F32, q, q, q, q, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestAttentionSaturatedMask: PyTorch masks with the most negative float,
// -3.4e38, which fp16 storage saturates to -65504. A query row whose keys
// are all masked must still be the uniform average of V that the fp32 model
// computes (not a softmax of the scores shifted by -65504), and partially
// masked rows must match the fp32 reference, in both storages and every
// variant.
func TestAttentionSaturatedMask(t *testing.T) {
	defer func() { attnForce = "" }()
	const lowest = -math.MaxFloat32
	// Rows: all masked; two keys masked; none masked (small additive terms).
	p := AttentionParams{Batch: 1, Heads: 2, KVHeads: 1, SeqQ: 3, SeqKV: 5, HeadDim: 3, MaskStrides: [4]int{0, 0, 5, 1}}
	mask := []float32{
		lowest, lowest, lowest, lowest, lowest,
		0, lowest, 0.5, lowest, -1,
		0.25, 0, -0.5, 1, 0,
	}
	for _, s := range storages {
		q, k, v := laRand(41, 18, s), laRand(42, 15, s), laRand(43, 15, s)
		for i := range q {
			q[i] = roundTrip(s, 4*q[i]) // scores far from uniform
		}
		want := make([]float32, 18)
		if err := AttentionRef(q, k, v, mask, want, p); err != nil {
			t.Fatal(err)
		}
		// The fully masked row, by hand: the mean of V's rows.
		var mean [3]float32
		for j := 0; j < 5; j++ {
			for d := range mean {
				mean[d] += v[j*3+d] / 5
			}
		}
		for h := 0; h < 2; h++ {
			assertClose(t, fmt.Sprintf("%s reference head %d masked row", s, h), want[h*9:h*9+3], mean[:], 1e-6, 0)
		}
		// What the storage holds: -65504 in fp16 (as the engine's constant
		// conversion saturates it), the exact value in fp32.
		stored := append([]float32(nil), mask...)
		for i, m := range stored {
			if s == F16 && m < MaskedF16 {
				stored[i] = MaskedF16
			}
		}
		for _, variant := range []string{"attn_row", "attn_lanes", "attn_wg"} {
			attnForce = variant
			p.Mask = upload(t, s, stored)
			ob := alloc(t, s, 18)
			if err := testLib.Attention(s, upload(t, s, q), upload(t, s, k), upload(t, s, v), ob, p); err != nil {
				t.Fatal(err)
			}
			laClose(t, fmt.Sprintf("%s/%s", variant, s), s, download(t, s, ob, 18), want)
		}
	}
}

// TestAttentionHalfRounding: attn_lanes rounds its fp16 output with its own
// vector conversion; it must give dtype.Float32ToHalf's bits for ties,
// subnormals, overflow, infinities and arbitrary values.
func TestAttentionHalfRounding(t *testing.T) {
	xs := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65519.99, 65520, -65520, 65536, 1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), 1e-8, 2.9e-8, 3e-8, -5.96e-8, 6e-5, 6.1e-5, 6.104e-5,
		1.4e-45, 1e-40, 3.0e-5}
	// Exact ties between neighbouring fp16 values, odd and even below.
	for _, h := range []uint16{0x0001, 0x0002, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0x7bfe, 0x8401, 0xfbfe} {
		lo := dtype.HalfToFloat32(h)
		hi := dtype.HalfToFloat32(h + 1)
		xs = append(xs, (lo+hi)/2)
	}
	r := rand.New(rand.NewSource(7))
	for len(xs)%16 != 0 || len(xs) < 4096 {
		xs = append(xs, math.Float32frombits(r.Uint32()))
	}
	xs = append(xs, float32(math.NaN()))
	for len(xs)%16 != 0 {
		xs = append(xs, 0)
	}
	opts := fmt.Sprintf("%s -DHD=16 -DMASKED_AT=%ef", F16.define(), float32(MaskedF16))
	kern, err := testLib.kernel("attention", attentionProgSrc, opts, "attn_half_bits")
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	in := uploadBytes(t, 4, raw)
	out := allocBytes(t, 2, len(xs))
	if err := testLib.Device().Launch(kern, []int{len(xs) / 16}, nil, in.Mem, int32(in.Off), out.Mem, int32(out.Off)); err != nil {
		t.Fatal(err)
	}
	got := downloadBytes(t, 2, out, len(xs))
	for i, x := range xs {
		g := binary.LittleEndian.Uint16(got[2*i:])
		w := dtype.Float32ToHalf(x)
		if x != x {
			if g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Errorf("NaN -> %#04x, want a NaN", g)
			}
			continue
		}
		if g != w {
			t.Errorf("%g (%#08x) -> %#04x, want %#04x", x, math.Float32bits(x), g, w)
		}
	}
}
