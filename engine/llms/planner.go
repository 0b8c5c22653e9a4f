package llms

import (
	"math"
	"sort"
	"time"
)

// CostModel holds the fitted linear models of the swap–recompute planner
// (spec §1a.9): T_re(x) = ReA·x + ReB for x chunks recomputed in one
// forward, and T_IO = IOC·bytes + IOE·reads. The paper fits T_IO(m) =
// c·m + d on bytes alone; the per-read term is our addition, because
// storage here is IOPS-bound below ~64 KB. Seconds throughout.
type CostModel struct {
	ReA float64 `json:"re_a"`
	ReB float64 `json:"re_b"`
	IOC float64 `json:"io_c"`
	IOE float64 `json:"io_e"`
}

// Recompute is T_re(x); 0 for x = 0.
func (c CostModel) Recompute(x int) time.Duration {
	if x == 0 {
		return 0
	}
	return secs(c.ReA*float64(x) + c.ReB)
}

// IO is T_IO of bytes in reads operations.
func (c CostModel) IO(bytes int64, reads int) time.Duration {
	if reads == 0 {
		return 0
	}
	return secs(c.IOC*float64(bytes) + c.IOE*float64(reads))
}

// secs converts seconds to a Duration, clamped to [0, ~292 years] so a
// huge model coefficient cannot overflow into a negative cost.
func secs(s float64) time.Duration {
	ns := math.Max(s, 0) * 1e9
	if ns >= math.MaxInt64/2 {
		return time.Duration(math.MaxInt64 / 2)
	}
	return time.Duration(ns)
}

// fitLine fits y = a·x + b by least squares.
func fitLine(x, y []float64) (a, b float64) {
	n := float64(len(x))
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0, sy / n
	}
	a = (n*sxy - sx*sy) / den
	return a, (sy - a*sx) / n
}

// fitIO fits y = c·bytes + e·reads (no intercept) by least squares on two
// regressors.
func fitIO(bytes, reads, y []float64) (c, e float64) {
	var s11, s12, s22, s1y, s2y float64
	for i := range y {
		s11 += bytes[i] * bytes[i]
		s12 += bytes[i] * reads[i]
		s22 += reads[i] * reads[i]
		s1y += bytes[i] * y[i]
		s2y += reads[i] * y[i]
	}
	det := s11*s22 - s12*s12
	if det == 0 {
		return 0, 0
	}
	c = (s1y*s22 - s2y*s12) / det
	e = (s11*s2y - s12*s1y) / det
	if c < 0 { // noise: fall back to per-read cost alone
		c, e = 0, s2y/s22
	}
	if e < 0 {
		c, e = s1y/s11, 0
	}
	return c, e
}

// missingChunk is a chunk to restore from flash or by recompute.
type missingChunk struct {
	idx   int
	level Level
	n     int
}

// plan is the planner's decision.
type plan struct {
	recompute []int // chunk indices, ascending
	load      []int // chunk indices, ascending
	// pre are loaded chunks before the last recomputed one: they must be
	// installed before the recompute forward runs; post may overlap it.
	pre, post []int
	// Predicted is the model's switch-time estimate for the chosen X:
	// IO(pre) + max(T_re(X), IO(post)); PaperMax is the paper's
	// max(T_re(X), T_IO(all loaded)).
	Predicted, PaperMax time.Duration
	X                   int
}

// planRestore chooses which missing chunks to recompute: candidates are
// taken heaviest level first (recompute saves the most I/O per chunk
// there), earliest position first within a level (so that later loaded
// chunks can overlap the forward), and every prefix length X is costed.
// Chunks with no flash copy are always recomputed. gated: the restore
// runs through the per-layer gate (gate.go), whose reads all overlap the
// forward, so a plan is costed by the paper's max(T_re, T_IO) instead of
// the cheaper variant's IO(pre) + max(T_re, IO(post)).
func (lay *layout) planRestore(miss []missingChunk, forced []int, cost CostModel, gated bool) plan {
	cand := append([]missingChunk(nil), miss...)
	sort.SliceStable(cand, func(a, b int) bool {
		if cand[a].level != cand[b].level {
			return cand[a].level > cand[b].level
		}
		return cand[a].idx < cand[b].idx
	})
	info := map[int]missingChunk{}
	for _, c := range miss {
		info[c.idx] = c
	}
	levelOf := func(i int) (Level, int) { return info[i].level, info[i].n }
	ioOf := func(idx []int) (int64, int) {
		var b int64
		reads := 0
		rs := runsOf(idx)
		for g := 0; g < lay.groups; g++ {
			for _, r := range rs {
				b += lay.readSpan(g, r, levelOf)
			}
			reads += len(rs)
		}
		return b, reads
	}
	best := plan{Predicted: time.Duration(math.MaxInt64)}
	for X := 0; X <= len(cand); X++ {
		rec := map[int]bool{}
		last := -1
		for _, i := range forced {
			rec[i] = true
			last = max(last, i)
		}
		for _, c := range cand[:X] {
			rec[c.idx] = true
			last = max(last, c.idx)
		}
		var p plan
		p.X = X
		for _, c := range miss {
			switch {
			case rec[c.idx]:
			case c.idx < last:
				p.pre = append(p.pre, c.idx)
			default:
				p.post = append(p.post, c.idx)
			}
		}
		sort.Ints(p.pre)
		sort.Ints(p.post)
		tre := cost.Recompute(len(rec))
		bPre, rPre := ioOf(p.pre)
		bPost, rPost := ioOf(p.post)
		p.Predicted = cost.IO(bPre, rPre) + max(tre, cost.IO(bPost, rPost))
		all := append(append([]int(nil), p.pre...), p.post...)
		sort.Ints(all)
		bAll, rAll := ioOf(all)
		p.PaperMax = max(tre, cost.IO(bAll, rAll))
		if gated && len(rec) > 0 && len(all) > 0 {
			p.Predicted = p.PaperMax
		}
		if p.Predicted < best.Predicted {
			for i := range rec {
				p.recompute = append(p.recompute, i)
			}
			sort.Ints(p.recompute)
			p.load = all
			best = p
		}
	}
	return best
}
