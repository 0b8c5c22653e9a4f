// Package hostattn is exact softmax attention computed on the host over an
// arbitrary set of cached entries (systems-spec §0.3, hook H7): the
// attention a retrieval system such as DynaKV returns from its layer hook
// in place of the fused kernel's, which attends a prefix of slots.
//
// Grouped-query attention is explicit: one call attends the query heads of
// one KV head's group over that KV head's entries, so each KV head may
// attend a different set (DynaKV retrieves clusters per KV head).
package hostattn

import (
	"fmt"
	"math"
)

// Group computes, for each of the group's len(q)/dim query heads,
// softmax(scale·q·kᵀ)·v over the n entries in keys and vals ([n][dim]
// each) into dst ([group][dim]), in float64, and returns each head's
// log-sum-exp of the scaled scores in lse (len group; nil for none). The
// log-sum-exp lets a caller compare the probability mass of a subset with
// that of the full set: exp(lseSubset − lseFull).
func Group(dst, q []float32, dim int, keys, vals []float32, scale float32, lse []float64) error {
	if dim <= 0 || len(q)%dim != 0 || len(dst) != len(q) {
		return fmt.Errorf("hostattn: %d query floats, %d output floats for head size %d", len(q), len(dst), dim)
	}
	if len(keys) != len(vals) || len(keys)%dim != 0 {
		return fmt.Errorf("hostattn: %d key floats and %d value floats for head size %d", len(keys), len(vals), dim)
	}
	group, n := len(q)/dim, len(keys)/dim
	if lse != nil && len(lse) != group {
		return fmt.Errorf("hostattn: %d log-sum-exp slots for %d heads", len(lse), group)
	}
	if n == 0 {
		return fmt.Errorf("hostattn: attention over no entries")
	}
	scores := make([]float64, n)
	acc := make([]float64, dim)
	for h := 0; h < group; h++ {
		qh := q[h*dim : (h+1)*dim]
		mx := math.Inf(-1)
		for j := 0; j < n; j++ {
			kj := keys[j*dim : (j+1)*dim]
			var dot float64
			for d, x := range qh {
				dot += float64(x) * float64(kj[d])
			}
			scores[j] = dot * float64(scale)
			mx = math.Max(mx, scores[j])
		}
		for d := range acc {
			acc[d] = 0
		}
		var sum float64
		for j := 0; j < n; j++ {
			w := math.Exp(scores[j] - mx)
			sum += w
			vj := vals[j*dim : (j+1)*dim]
			for d := range acc {
				acc[d] += w * float64(vj[d])
			}
		}
		for d := range acc {
			dst[h*dim+d] = float32(acc[d] / sum)
		}
		if lse != nil {
			lse[h] = mx + math.Log(sum)
		}
	}
	return nil
}

// Scores writes scale·q·k for one query head q ([dim]) against n keys
// ([n][dim]) into dst (len n).
func Scores(dst, q, keys []float32, scale float32) {
	dim := len(q)
	for j := range dst {
		kj := keys[j*dim : (j+1)*dim]
		var dot float32
		for d, x := range q {
			dot += x * kj[d]
		}
		dst[j] = dot * scale
	}
}
