package kernels

import (
	"fmt"
	"math"
	"testing"
)

// TestAttentionSplit runs split-K decode (attn_split + attn_combine)
// against the reference, output and log-sum-exp, with ranges of 64 keys so
// that small contexts still split: head sizes 32, 64 and 80 (80 leaves
// the second pass over the head dimensions partial), kv lengths that do
// not divide into ranges (and one shorter than a range), GQA groups 1, 2
// and 4, a cache read in place with a causal limit that empties the last
// ranges, a per-head mask with -inf and most-negative-float entries, and
// both storages.
func TestAttentionSplit(t *testing.T) {
	defer func(n int) { attnForce, attnSplitLen = "", n }(attnSplitLen)
	attnSplitLen = 64
	cases := []struct {
		name      string
		p         AttentionParams
		capacity  int
		maskHeads bool
	}{
		{"d32 g1", AttentionParams{Batch: 2, Heads: 3, KVHeads: 3, SeqQ: 1, SeqKV: 150, HeadDim: 32}, 0, false},
		{"d64 g2 mask", AttentionParams{Batch: 1, Heads: 4, KVHeads: 2, SeqQ: 1, SeqKV: 201, HeadDim: 64}, 0, true},
		{"d80 g4 causal cache", AttentionParams{Batch: 2, Heads: 8, KVHeads: 2, SeqQ: 1, SeqKV: 300, HeadDim: 80, Causal: true, Past: 130}, 310, false},
		{"d64 g4 short", AttentionParams{Batch: 1, Heads: 4, KVHeads: 1, SeqQ: 1, SeqKV: 37, HeadDim: 64}, 0, true},
	}
	for _, c := range cases {
		for _, s := range storages {
			if s == F16 && c.p.HeadDim == 32 {
				continue // one program per (head size, group, storage): keep builds few
			}
			p := c.p
			d, capacity := p.HeadDim, c.capacity
			if capacity == 0 {
				capacity = p.SeqKV
			} else {
				p.K = AttnLayout{Batch: p.KVHeads * capacity * d, Head: capacity * d, Seq: d}
				p.V = p.K
			}
			q := laRand(71, p.Batch*p.Heads*d, s)
			for i := range q {
				q[i] = roundTrip(s, 3*q[i])
			}
			k := laRand(72, p.Batch*p.KVHeads*capacity*d, s)
			v := laRand(73, p.Batch*p.KVHeads*capacity*d, s)
			var mask []float32
			if c.maskHeads {
				mask = laRand(74, p.Batch*p.Heads*p.SeqKV, s)
				for i := range mask {
					switch {
					case i%5 == 3:
						mask[i] = float32(math.Inf(-1))
					case i%7 == 2:
						mask[i] = -math.MaxFloat32
					}
				}
				p.MaskStrides = [4]int{p.Heads * p.SeqKV, p.SeqKV, p.SeqKV, 1}
				p.Mask = upload(t, s, mask)
			}
			attnForce = "attn_split"
			if ok, ns := attnSplits("CPU", p); !ok || ns != (p.SeqKV+63)/64 {
				t.Fatalf("%s: split-K not selected (%d ranges)", c.name, ns)
			}
			no := p.Batch * p.Heads * d
			ob := upload(t, s, laRand(75, no, s))
			lb := alloc(t, F32, p.Batch*p.Heads)
			p.LSE = lb
			err := testLib.Attention(s, upload(t, s, q), upload(t, s, k), upload(t, s, v), ob, p)
			attnForce = ""
			if err != nil {
				t.Fatal(err)
			}
			want, wantLSE := make([]float32, no), make([]float32, p.Batch*p.Heads)
			if err := AttentionLSERef(q, k, v, mask, want, wantLSE, p); err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("%s/%s", c.name, s)
			laClose(t, what, s, download(t, s, ob, no), want)
			assertClose(t, what+" lse", download(t, F32, lb, p.Batch*p.Heads), wantLSE, 2e-4, 2e-5)
		}
	}
}

// TestAttentionSplitSelection: split-K is a GPU decode path for long
// contexts and groups it can hold; everything else keeps attn_wg.
func TestAttentionSplitSelection(t *testing.T) {
	for _, tc := range []struct {
		dev  string
		p    AttentionParams
		want bool
	}{
		{"GPU", AttentionParams{Heads: 32, KVHeads: 8, SeqQ: 1, SeqKV: 4096, HeadDim: 128}, true},
		{"GPU", AttentionParams{Heads: 32, KVHeads: 8, SeqQ: 1, SeqKV: 4096, HeadDim: 256}, false},
		{"GPU", AttentionParams{Heads: 32, KVHeads: 8, SeqQ: 1, SeqKV: 300}, false},
		{"GPU", AttentionParams{Heads: 32, KVHeads: 8, SeqQ: 7, SeqKV: 4096}, false},
		{"GPU", AttentionParams{Heads: 32, KVHeads: 4, SeqQ: 1, SeqKV: 4096}, false}, // 8 heads per group
		{"CPU", AttentionParams{Heads: 32, KVHeads: 8, SeqQ: 1, SeqKV: 4096}, false},
	} {
		if got, ns := attnSplits(tc.dev, tc.p); got != tc.want || (got && ns != (tc.p.SeqKV+attnSplitLen-1)/attnSplitLen) {
			t.Errorf("%s %+v: split %v (%d ranges), want %v", tc.dev, tc.p, got, ns, tc.want)
		}
	}
}

// TestAttentionLongDecode is a decode step over 600 keys with no variant
// forced: split-K where the device (or profile) is a GPU, attn_row on a
// CPU; either must match the reference.
func TestAttentionLongDecode(t *testing.T) {
	c := attnCase{p: AttentionParams{Batch: 1, Heads: 4, KVHeads: 2, SeqQ: 1, SeqKV: 600, HeadDim: 64, Causal: true, Past: 599}, capacity: 640}
	got, want := attnRun(t, F32, c)
	laClose(t, "long decode", F32, got, want)
}

// TestAttentionQTile runs the query-tiled prefill against the reference,
// output and log-sum-exp: head sizes 32, 64 and 80, GQA groups 1, 2 and 4
// (tiles of 4, 2 and 1 positions), query counts that leave the last tile
// partial, key counts past one 64-key block, a causal chunk after a past
// read from a cache in place, per-head masks with -inf and
// most-negative-float entries, and both storages.
func TestAttentionQTile(t *testing.T) {
	defer func() { attnForce = "" }()
	cases := []struct {
		name     string
		p        AttentionParams
		capacity int
		mask     bool
	}{
		{"d32 g1", AttentionParams{Batch: 2, Heads: 2, KVHeads: 2, SeqQ: 11, SeqKV: 70, HeadDim: 32}, 0, false},
		{"d64 g2 causal mask", AttentionParams{Batch: 1, Heads: 4, KVHeads: 2, SeqQ: 9, SeqKV: 9, HeadDim: 64, Causal: true}, 0, true},
		{"d80 g4 chunk past", AttentionParams{Batch: 1, Heads: 8, KVHeads: 2, SeqQ: 5, SeqKV: 135, HeadDim: 80, Causal: true, Past: 130}, 140, false},
	}
	for _, c := range cases {
		for _, s := range storages {
			if s == F16 && c.p.HeadDim == 32 {
				continue
			}
			p := c.p
			d, capacity := p.HeadDim, c.capacity
			if capacity == 0 {
				capacity = p.SeqKV
			} else {
				p.K = AttnLayout{Batch: p.KVHeads * capacity * d, Head: capacity * d, Seq: d}
				p.V = p.K
			}
			q := laRand(81, p.Batch*p.Heads*p.SeqQ*d, s)
			for i := range q {
				q[i] = roundTrip(s, 3*q[i])
			}
			k := laRand(82, p.Batch*p.KVHeads*capacity*d, s)
			v := laRand(83, p.Batch*p.KVHeads*capacity*d, s)
			var mask []float32
			if c.mask {
				mask = laRand(84, p.Batch*p.Heads*p.SeqQ*p.SeqKV, s)
				for i := range mask {
					switch {
					case i%5 == 3:
						mask[i] = float32(math.Inf(-1))
					case i%7 == 2:
						mask[i] = -math.MaxFloat32
					}
				}
				p.MaskStrides = [4]int{p.Heads * p.SeqQ * p.SeqKV, p.SeqQ * p.SeqKV, p.SeqKV, 1}
				p.Mask = upload(t, s, mask)
			}
			attnForce = "attn_qtile"
			if !attnQTiled("CPU", p) {
				t.Fatalf("%s: attn_qtile not selected", c.name)
			}
			no := p.Batch * p.Heads * p.SeqQ * d
			ob := upload(t, s, laRand(85, no, s))
			lb := alloc(t, F32, p.Batch*p.Heads*p.SeqQ)
			p.LSE = lb
			err := testLib.Attention(s, upload(t, s, q), upload(t, s, k), upload(t, s, v), ob, p)
			attnForce = ""
			if err != nil {
				t.Fatal(err)
			}
			want, wantLSE := make([]float32, no), make([]float32, p.Batch*p.Heads*p.SeqQ)
			if err := AttentionLSERef(q, k, v, mask, want, wantLSE, p); err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("%s/%s", c.name, s)
			laClose(t, what, s, download(t, s, ob, no), want)
			assertClose(t, what+" lse", download(t, F32, lb, p.Batch*p.Heads*p.SeqQ), wantLSE, 2e-4, 2e-5)
		}
	}
	if attnQTiled("GPU", AttentionParams{Heads: 32, KVHeads: 4, SeqQ: 64}) || !attnQTiled("GPU", AttentionParams{Heads: 32, KVHeads: 8, SeqQ: 64, HeadDim: 128}) ||
		attnQTiled("CPU", AttentionParams{Heads: 32, KVHeads: 8, SeqQ: 64}) || attnQTiled("GPU", AttentionParams{Heads: 32, KVHeads: 8, SeqQ: 1}) {
		t.Error("attn_qtile selection: want GPU prefill with groups of at most 4 only")
	}
}
