package llms

import (
	"fmt"
	"math"
	"sort"

	"github.com/tlite/tlite/engine"
)

// Density accumulates LLMS's information density per token (spec §1a.5,
// with the erratum's reading of Eq. 1): d(col) is the column's attention
// probability summed over layers, query heads and every unmasked row seen
// so far, divided by L·H·count(col), i.e. the mean of the column over its
// unmasked rows, averaged over layers and heads. Sums and counts run
// across forwards and calls.
type Density struct {
	// Sum[t] is Σ over observed rows, layers and query heads of A[row,t].
	Sum []float64 `json:"sum"`
	// Count[t] is the number of observed rows that could attend t (the same
	// for every head and layer under kv_bias).
	Count []float64 `json:"count"`
	// LH is L·H, the number of (layer, query head) pairs summed into Sum.
	LH int `json:"lh"`
	// Peak[t] is the largest probability any observed row, layer and query
	// head gave t (the statistic of TolerancePeak; ours, not the
	// paper's). A table written before peaks were kept has none: Grow pads
	// it with zeros.
	Peak []float64 `json:"peak,omitempty"`
}

// Grow extends the running sums to n tokens.
func (d *Density) Grow(n int) {
	for len(d.Sum) < n {
		d.Sum = append(d.Sum, 0)
		d.Count = append(d.Count, 0)
	}
	for len(d.Peak) < len(d.Sum) {
		d.Peak = append(d.Peak, 0)
	}
}

// Truncate drops tokens from n on.
func (d *Density) Truncate(n int) {
	if n < len(d.Sum) {
		d.Sum, d.Count = d.Sum[:n], d.Count[:n]
	}
	if n < len(d.Peak) {
		d.Peak = d.Peak[:n]
	}
}

// Add accumulates one forward's statistics, where slot j holds token
// slotToken(j) (-1: not this context's).
func (d *Density) Add(stats []engine.AttnStats, slotToken func(int) int) error {
	return d.AddWeighted(stats, slotToken, 1)
}

// AddWeighted is Add with the forward's rows counted w times, sums and
// counts alike: a decode step sampled one in w (Config.StatsEvery) stands
// for the w steps of its stride, so that decode rows keep their weight
// against the prefill's in each column's mean.
func (d *Density) AddWeighted(stats []engine.AttnStats, slotToken func(int) int, w float64) error {
	if !(w > 0) || math.IsInf(w, 0) {
		return fmt.Errorf("llms: density rows weighted %g", w)
	}
	if len(stats) == 0 {
		return fmt.Errorf("llms: density from no attention statistics")
	}
	lh := 0
	for _, a := range stats {
		lh += a.Heads
	}
	if d.LH != 0 && d.LH != lh {
		return fmt.Errorf("llms: attention statistics over %d layer-heads; the context's density has %d", lh, d.LH)
	}
	d.LH = lh
	for _, a := range stats {
		if len(a.Sum) != a.Heads*a.Slots || len(a.Count) != a.Heads*a.Slots || (a.Peak != nil && len(a.Peak) != len(a.Sum)) {
			return fmt.Errorf("llms: attention statistics of %s have %d sums, %d counts and %d peaks for %d heads x %d slots", a.Node, len(a.Sum), len(a.Count), len(a.Peak), a.Heads, a.Slots)
		}
	}
	first := true
	for _, a := range stats {
		for j := 0; j < a.Slots; j++ {
			t := slotToken(j)
			if t < 0 {
				continue
			}
			d.Grow(t + 1)
			for h := 0; h < a.Heads; h++ {
				d.Sum[t] += w * float64(a.Sum[h*a.Slots+j])
				if a.Peak != nil {
					d.Peak[t] = math.Max(d.Peak[t], float64(a.Peak[h*a.Slots+j]))
				}
			}
			if first {
				// The count is per row, shared by heads and layers.
				d.Count[t] += w * float64(a.Count[j])
			}
		}
		first = false
	}
	return nil
}

// AddTotal accumulates statistics the session added up on the device
// over one or more forwards (kv.State.TakeAttentionStats: weights already
// applied, sums over layers and heads), where slot j holds token
// slotToken(j) (-1: not this context's).
func (d *Density) AddTotal(t engine.AttnStatsTotal, slotToken func(int) int) error {
	if t.LH <= 0 {
		return fmt.Errorf("llms: density from no attention statistics")
	}
	if d.LH != 0 && d.LH != t.LH {
		return fmt.Errorf("llms: attention statistics over %d layer-heads; the context's density has %d", t.LH, d.LH)
	}
	if len(t.Sum) != t.Slots || len(t.Count) != t.Slots || (t.Peak != nil && len(t.Peak) != t.Slots) {
		return fmt.Errorf("llms: accumulated attention statistics have %d sums, %d counts and %d peaks for %d slots", len(t.Sum), len(t.Count), len(t.Peak), t.Slots)
	}
	d.LH = t.LH
	for j := 0; j < t.Slots; j++ {
		tk := slotToken(j)
		if tk < 0 {
			continue
		}
		d.Grow(tk + 1)
		d.Sum[tk] += float64(t.Sum[j])
		d.Count[tk] += float64(t.Count[j])
		if t.Peak != nil {
			d.Peak[tk] = math.Max(d.Peak[tk], float64(t.Peak[j]))
		}
	}
	return nil
}

// Token is d(t): 0 for a token no row has attended yet.
func (d *Density) Token(t int) float64 {
	if t >= len(d.Sum) || d.Count[t] == 0 || d.LH == 0 {
		return 0
	}
	return d.Sum[t] / (float64(d.LH) * d.Count[t])
}

// Chunk is D_i: the mean of d over tokens [p, q).
func (d *Density) Chunk(p, q int) float64 {
	if q <= p {
		return 0
	}
	s := 0.0
	for t := p; t < q; t++ {
		s += d.Token(t)
	}
	return s / float64(q-p)
}

// TokenPeaks is each token's peak attention over one forward's statistics:
// the largest probability any layer, query head and row gave it
// (engine.AttnStats.Peak), for tokens 0..n-1 where slot j holds token
// slotToken(j) (-1: not this context's). It is the statistic of the
// peak-placement policies (PolicyPeak): a fact that one later question
// attends sharply, and the many rows before it ignore, has a low mean
// (Density) and a high peak. Deviation from the paper, which ranks by the
// mean only (spec §1a.5); see doc.go.
func TokenPeaks(stats []engine.AttnStats, n int, slotToken func(int) int) ([]float64, error) {
	if len(stats) == 0 {
		return nil, fmt.Errorf("llms: peaks from no attention statistics")
	}
	out := make([]float64, n)
	for _, a := range stats {
		if len(a.Peak) != a.Heads*a.Slots {
			return nil, fmt.Errorf("llms: attention statistics of %s have %d peaks for %d heads x %d slots", a.Node, len(a.Peak), a.Heads, a.Slots)
		}
		for j := 0; j < a.Slots; j++ {
			t := slotToken(j)
			if t < 0 || t >= n {
				continue
			}
			for h := 0; h < a.Heads; h++ {
				out[t] = math.Max(out[t], float64(a.Peak[h*a.Slots+j]))
			}
		}
	}
	return out, nil
}

// ChunkPeak is the mean of Peak over tokens [p, q) (0 for tokens with
// none).
func (d *Density) ChunkPeak(p, q int) float64 {
	if q <= p {
		return 0
	}
	s := 0.0
	for t := p; t < q && t < len(d.Peak); t++ {
		s += d.Peak[t]
	}
	return s / float64(q-p)
}

// Weight is the per-level weight of ctxInfo (Eq. 3).
type Weight func(Level) float64

// WeightInverse is the paper's literal weight 1/ratio_w (the default; see
// the spec's erratum note: it rewards compressing and gives an interior
// optimum under the band order of Eq. 2).
func WeightInverse(l Level) float64 { return 1 / l.Ratio() }

// WeightRatio is the "natural" weight ratio_w (lands on a corner).
func WeightRatio(l Level) float64 { return l.Ratio() }

// Assignment is the outcome of level assignment.
type Assignment struct {
	// Levels[i] is chunk i's level.
	Levels []Level
	// MeanRatio is the achieved mean ratio_w.
	MeanRatio float64
	// Info is ctxInfo at the chosen thresholds.
	Info float64
}

// Assign chooses each chunk's level by density (spec §1a.6): chunks sorted
// by density descending fill the bands of levels (heaviest first), and the
// band sizes maximise ctxInfo = Σ_w weight(w)·Σ_{i∈band w} D_i subject to
// the mean ratio. For the paper's ladder {8,4,2} at 50% the exact
// discrete scan over n8 (n4 = n−3·n8, n2 = 2·n8, mean exactly 50%) is
// used; for any other ladder or global ratio every split of the sorted
// chunks into bands is enumerated, keeping those whose mean ratio is at
// most global and within one chunk's step of it (the literal weight would
// otherwise compress everything to the lowest level).
func Assign(dens []float64, levels []Level, global float64, w Weight) (Assignment, error) {
	n := len(dens)
	if len(levels) == 0 {
		return Assignment{}, fmt.Errorf("llms: level assignment over no levels")
	}
	lv := append([]Level(nil), levels...)
	sort.Slice(lv, func(i, j int) bool { return lv[i].Ratio() > lv[j].Ratio() })
	if w == nil {
		w = WeightInverse
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return dens[order[a]] > dens[order[b]] })
	prefix := make([]float64, n+1)
	for i, k := range order {
		prefix[i+1] = prefix[i] + dens[k]
	}
	out := Assignment{Levels: make([]Level, n)}
	if n == 0 {
		return out, nil
	}
	// counts[k] chunks in band k (heaviest first).
	best, bestInfo := []int(nil), math.Inf(-1)
	eval := func(counts []int) float64 {
		info, at := 0.0, 0
		for k, c := range counts {
			info += w(lv[k]) * (prefix[at+c] - prefix[at])
			at += c
		}
		return info
	}
	if len(lv) == 3 && lv[0] == Level8 && lv[1] == Level4 && lv[2] == Level2 && global == 0.5 {
		for n8 := 0; 3*n8 <= n; n8++ {
			c := []int{n8, n - 3*n8, 2 * n8}
			if v := eval(c); v > bestInfo {
				best, bestInfo = c, v
			}
		}
	} else {
		step := (lv[0].Ratio() - lv[len(lv)-1].Ratio()) / float64(n)
		counts := make([]int, len(lv))
		var rec func(k, left int)
		rec = func(k, left int) {
			if k == len(lv)-1 {
				counts[k] = left
				mean := 0.0
				for i, c := range counts {
					mean += float64(c) * lv[i].Ratio()
				}
				mean /= float64(n)
				if mean <= global+1e-12 && mean >= global-step-1e-12 {
					if v := eval(counts); v > bestInfo {
						best, bestInfo = append([]int(nil), counts...), v
					}
				}
				return
			}
			for c := 0; c <= left; c++ {
				counts[k] = c
				rec(k+1, left-c)
			}
		}
		rec(0, n)
	}
	if best == nil {
		return Assignment{}, fmt.Errorf("llms: no split of %d chunks over levels %v reaches mean ratio %.3f", n, lv, global)
	}
	at := 0
	sum := 0.0
	for k, c := range best {
		for _, i := range order[at : at+c] {
			out.Levels[i] = lv[k]
			sum += lv[k].Ratio()
		}
		at += c
	}
	out.MeanRatio = sum / float64(n)
	out.Info = bestInfo
	return out, nil
}
