package hostattn

import (
	"math"
	"math/rand"
	"testing"

	"github.com/tlite/tlite/kernels"
)

// TestGroupMatchesReference checks the GQA aggregation against the kernels'
// brute-force reference: every query head h of H attends KV head
// h/(H/KVH), for several head shapes, including MQA (one KV head) and
// MHA (no grouping).
func TestGroupMatchesReference(t *testing.T) {
	for _, tc := range []struct{ H, KVH, n, dim int }{{8, 4, 13, 32}, {4, 1, 7, 8}, {4, 4, 5, 16}, {6, 2, 1, 4}} {
		rng := rand.New(rand.NewSource(int64(tc.H*100 + tc.n)))
		q := rnd(rng, tc.H*tc.dim)
		k := rnd(rng, tc.n*tc.KVH*tc.dim)
		v := rnd(rng, tc.n*tc.KVH*tc.dim)
		scale := float32(1 / math.Sqrt(float64(tc.dim)))
		want := make([]float32, tc.H*tc.dim)
		p := kernels.AttentionParams{Batch: 1, Heads: tc.H, KVHeads: tc.KVH, SeqQ: 1, SeqKV: tc.n, HeadDim: tc.dim, Scale: scale,
			Q: kernels.AttnLayout{Head: tc.dim, Seq: tc.H * tc.dim},
			K: kernels.AttnLayout{Head: tc.dim, Seq: tc.KVH * tc.dim},
			V: kernels.AttnLayout{Head: tc.dim, Seq: tc.KVH * tc.dim},
			O: kernels.AttnLayout{Head: tc.dim, Seq: tc.H * tc.dim}}
		if err := kernels.AttentionRef(q, k, v, nil, want, p); err != nil {
			t.Fatal(err)
		}
		group := tc.H / tc.KVH
		got := make([]float32, tc.H*tc.dim)
		for g := 0; g < tc.KVH; g++ {
			kg, vg := make([]float32, tc.n*tc.dim), make([]float32, tc.n*tc.dim)
			for j := 0; j < tc.n; j++ {
				copy(kg[j*tc.dim:], k[(j*tc.KVH+g)*tc.dim:(j*tc.KVH+g+1)*tc.dim])
				copy(vg[j*tc.dim:], v[(j*tc.KVH+g)*tc.dim:(j*tc.KVH+g+1)*tc.dim])
			}
			lo, hi := g*group*tc.dim, (g+1)*group*tc.dim
			if err := Group(got[lo:hi], q[lo:hi], tc.dim, kg, vg, scale, nil); err != nil {
				t.Fatal(err)
			}
		}
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-5 {
				t.Fatalf("%+v: element %d: got %v want %v", tc, i, got[i], want[i])
			}
		}
	}
}

// TestGroupSubsetMass checks that the log-sum-exp of a subset gives the
// subset's share of the full softmax mass.
func TestGroupSubsetMass(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	dim, n := 8, 20
	q, k, v := rnd(rng, dim), rnd(rng, n*dim), rnd(rng, n*dim)
	out := make([]float32, dim)
	full, sub := make([]float64, 1), make([]float64, 1)
	if err := Group(out, q, dim, k, v, 0.5, full); err != nil {
		t.Fatal(err)
	}
	if err := Group(out, q, dim, k[:5*dim], v[:5*dim], 0.5, sub); err != nil {
		t.Fatal(err)
	}
	sc := make([]float32, n)
	Scores(sc, q, k, 0.5)
	var all, part float64
	for j, s := range sc {
		all += math.Exp(float64(s))
		if j < 5 {
			part += math.Exp(float64(s))
		}
	}
	if got, want := math.Exp(sub[0]-full[0]), part/all; math.Abs(got-want) > 1e-6 {
		t.Fatalf("mass %v, want %v", got, want)
	}
	if err := Group(out, q, dim, nil, nil, 1, nil); err == nil {
		t.Fatal("attention over no entries: no error")
	}
}

func rnd(rng *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return out
}
