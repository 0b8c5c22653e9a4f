package dynakv

import (
	"math"
	"math/rand"
)

// kmeans clusters the n points of pts ([n][dim]) into at most m groups with
// k-means++ seeding and iters Lloyd iterations; it returns each point's
// group. Empty groups are dropped (the labels are renumbered densely), so
// the result is robust to duplicate points, as §7 asks.
func kmeans(pts [][]float32, m, iters int, rng *rand.Rand) []int {
	n := len(pts)
	labels := make([]int, n)
	if n == 0 {
		return labels
	}
	if m > n {
		m = n
	}
	if m <= 1 {
		return labels
	}
	dim := len(pts[0])
	cent := make([][]float64, 0, m)
	first := rng.Intn(n)
	cent = append(cent, toF64(pts[first]))
	d2 := make([]float64, n)
	for i := range d2 {
		d2[i] = dist2(pts[i], cent[0])
	}
	for len(cent) < m {
		var sum float64
		for _, d := range d2 {
			sum += d
		}
		if sum == 0 {
			break
		}
		r := rng.Float64() * sum
		pick := n - 1
		for i, d := range d2 {
			r -= d
			if r <= 0 {
				pick = i
				break
			}
		}
		c := toF64(pts[pick])
		cent = append(cent, c)
		for i := range d2 {
			d2[i] = math.Min(d2[i], dist2(pts[i], c))
		}
	}
	k := len(cent)
	counts := make([]int, k)
	for it := 0; it <= iters; it++ {
		for i, p := range pts {
			best, bd := 0, math.Inf(1)
			for j, c := range cent {
				if d := dist2(p, c); d < bd {
					best, bd = j, d
				}
			}
			labels[i] = best
		}
		if it == iters {
			break
		}
		for j := range cent {
			counts[j] = 0
			for d := range cent[j] {
				cent[j][d] = 0
			}
		}
		for i, p := range pts {
			counts[labels[i]]++
			for d := 0; d < dim; d++ {
				cent[labels[i]][d] += float64(p[d])
			}
		}
		for j := range cent {
			if counts[j] == 0 {
				// An empty group keeps no centroid: park it on the point
				// farthest from its centroid, the usual repair.
				far, fd := 0, -1.0
				for i, p := range pts {
					if d := dist2(p, cent[labels[i]]); d > fd {
						far, fd = i, d
					}
				}
				cent[j] = toF64(pts[far])
				continue
			}
			for d := range cent[j] {
				cent[j][d] /= float64(counts[j])
			}
		}
	}
	// Renumber densely.
	remap := map[int]int{}
	for i, l := range labels {
		r, ok := remap[l]
		if !ok {
			r = len(remap)
			remap[l] = r
		}
		labels[i] = r
	}
	return labels
}

// split2 divides pts in two with 2-means (iters iterations, seeded by the
// point farthest from the mean and the point farthest from that one). Both
// halves are non-empty when there are at least two points: identical
// points are halved by index.
func split2(pts [][]float32, iters int) []int {
	n := len(pts)
	labels := make([]int, n)
	if n < 2 {
		return labels
	}
	mean := meanOf(pts)
	a := farthest(pts, mean)
	b := farthest(pts, toF64(pts[a]))
	c := [2][]float64{toF64(pts[a]), toF64(pts[b])}
	for it := 0; it <= iters; it++ {
		for i, p := range pts {
			if dist2(p, c[1]) < dist2(p, c[0]) {
				labels[i] = 1
			} else {
				labels[i] = 0
			}
		}
		if it == iters {
			break
		}
		var groups [2][][]float32
		for i, p := range pts {
			groups[labels[i]] = append(groups[labels[i]], p)
		}
		for g := range groups {
			if len(groups[g]) > 0 {
				c[g] = meanOf(groups[g])
			}
		}
	}
	ones := 0
	for _, l := range labels {
		ones += l
	}
	if ones == 0 || ones == n {
		for i := range labels {
			labels[i] = 0
			if i >= n/2 {
				labels[i] = 1
			}
		}
	}
	return labels
}

func farthest(pts [][]float32, c []float64) int {
	best, bd := 0, -1.0
	for i, p := range pts {
		if d := dist2(p, c); d > bd {
			best, bd = i, d
		}
	}
	return best
}

func meanOf(pts [][]float32) []float64 {
	m := make([]float64, len(pts[0]))
	for _, p := range pts {
		for d, x := range p {
			m[d] += float64(x)
		}
	}
	for d := range m {
		m[d] /= float64(len(pts))
	}
	return m
}

func toF64(p []float32) []float64 {
	out := make([]float64, len(p))
	for i, x := range p {
		out[i] = float64(x)
	}
	return out
}

func dist2(p []float32, c []float64) float64 {
	var s float64
	for d, x := range p {
		e := float64(x) - c[d]
		s += e * e
	}
	return s
}

// welford holds a cluster's running statistics: count, mean and the sum
// of squared L2 distances to the mean (σ² = m2/n).
type welford struct {
	n    int
	mean []float64
	m2   float64
}

// add returns the statistics with x included (the tentative update of
// Alg. 1), leaving w unchanged.
func (w welford) add(x []float32) welford {
	n := w.n + 1
	mean := make([]float64, len(x))
	var m2 float64
	for d, v := range x {
		old := 0.0
		if w.n > 0 {
			old = w.mean[d]
		}
		mean[d] = old + (float64(v)-old)/float64(n)
		m2 += (float64(v) - old) * (float64(v) - mean[d])
	}
	return welford{n: n, mean: mean, m2: w.m2 + m2}
}

// variance is the mean squared L2 distance to the centroid.
func (w welford) variance() float64 {
	if w.n == 0 {
		return 0
	}
	return w.m2 / float64(w.n)
}

// statsOf computes the statistics of pts exactly.
func statsOf(pts [][]float32) welford {
	w := welford{}
	for _, p := range pts {
		w = w.add(p)
	}
	return w
}
