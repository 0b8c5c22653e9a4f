package engine

import (
	"bytes"
	"fmt"
	"math"
	"sort"

	"github.com/tlite/tlite/graph/dtype"
)

// Ops whose output size depends on the data (NonZero, Compress, Unique,
// NonMaxSuppression): computed on the CPU, which binds the output's fresh
// size symbol when it runs.

func init() {
	registerHost(hostNonZero, "NonZero")
	registerHost(hostCompress, "Compress")
	registerHost(hostUnique, "Unique")
	registerHost(hostNMS, "NonMaxSuppression")
}

// hostNonZero lists the coordinates of the non-zero elements, [rank, count].
func hostNonZero(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	x := ins[0]
	v, err := x.floats()
	if err != nil {
		return nil, err
	}
	var hits []int
	for i, e := range v {
		if e != 0 {
			hits = append(hits, i)
		}
	}
	r := len(x.shape)
	st := strides(x.shape)
	out := make([]int64, r*len(hits))
	for k, i := range hits {
		for a := 0; a < r; a++ {
			out[a*len(hits)+k] = int64(i / st[a] % x.shape[a])
		}
	}
	return []*hostTensor{hostFromInts(dtype.Int64, []int{r, len(hits)}, out)}, nil
}

// hostCompress keeps the slices along axis (of the flattened input without
// one) whose condition entry is true.
func hostCompress(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	x := ins[0]
	cond, err := ins[1].ints()
	if err != nil {
		return nil, err
	}
	shape := x.shape
	axis := 0
	if a := hc.n.Attr("axis"); a != nil {
		if axis, err = normAxis(a.I, len(shape)); err != nil {
			return nil, err
		}
	} else {
		shape = []int{numel(shape)}
	}
	if len(cond) > shape[axis] {
		return nil, fmt.Errorf("condition of %d entries for an axis of %d", len(cond), shape[axis])
	}
	outer, n, inner := split3(shape, axis)
	esz := hostSize(x.dt)
	var keep []int
	for i, c := range cond {
		if c != 0 {
			keep = append(keep, i)
		}
	}
	oshape := append([]int(nil), shape...)
	oshape[axis] = len(keep)
	y := newHostTensor(x.dt, oshape)
	for o := 0; o < outer; o++ {
		for k, i := range keep {
			src := (o*n + i) * inner * esz
			dst := (o*len(keep) + k) * inner * esz
			copy(y.data[dst:dst+inner*esz], x.data[src:src+inner*esz])
		}
	}
	return []*hostTensor{y}, nil
}

// hostUnique finds the distinct elements (or slices along axis), sorted or
// in order of first occurrence, with first indices, inverse indices and
// counts.
func hostUnique(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	x := ins[0]
	shape := x.shape
	axis := 0
	var err error
	if a := hc.n.Attr("axis"); a != nil {
		if axis, err = normAxis(a.I, len(shape)); err != nil {
			return nil, err
		}
	} else {
		shape = []int{numel(shape)}
	}
	outer, n, inner := split3(shape, axis)
	v, err := x.floats()
	if err != nil {
		return nil, err
	}
	esz := hostSize(x.dt)
	// slice j's elements, for comparing and ordering.
	slice := func(j int) []float64 {
		s := make([]float64, 0, outer*inner)
		for o := 0; o < outer; o++ {
			s = append(s, v[(o*n+j)*inner:(o*n+j+1)*inner]...)
		}
		return s
	}
	raw := func(j int) []byte {
		var b []byte
		for o := 0; o < outer; o++ {
			b = append(b, x.data[(o*n+j)*inner*esz:(o*n+j+1)*inner*esz]...)
		}
		return b
	}
	var firsts []int
	inverse := make([]int64, n)
	counts := map[int]int64{}
	for j := 0; j < n; j++ {
		found := -1
		for u, f := range firsts {
			if bytes.Equal(raw(f), raw(j)) {
				found = u
				break
			}
		}
		if found < 0 {
			found = len(firsts)
			firsts = append(firsts, j)
		}
		inverse[j] = int64(found)
		counts[found]++
	}
	order := make([]int, len(firsts))
	for i := range order {
		order[i] = i
	}
	if hc.n.AttrInt("sorted", 1) != 0 {
		sort.SliceStable(order, func(a, b int) bool {
			sa, sb := slice(firsts[order[a]]), slice(firsts[order[b]])
			for i := range sa {
				if sa[i] != sb[i] {
					return sa[i] < sb[i]
				}
			}
			return false
		})
	}
	rank := make([]int64, len(order))
	for newPos, u := range order {
		rank[u] = int64(newPos)
	}
	k := len(order)
	oshape := append([]int(nil), shape...)
	oshape[axis] = k
	y := newHostTensor(x.dt, oshape)
	idx := make([]int64, k)
	cnt := make([]int64, k)
	for p, u := range order {
		j := firsts[u]
		idx[p], cnt[p] = int64(j), counts[u]
		for o := 0; o < outer; o++ {
			copy(y.data[(o*k+p)*inner*esz:(o*k+p+1)*inner*esz], x.data[(o*n+j)*inner*esz:(o*n+j+1)*inner*esz])
		}
	}
	inv := make([]int64, n)
	for j := range inv {
		inv[j] = rank[inverse[j]]
	}
	return []*hostTensor{y, hostFromInts(dtype.Int64, []int{k}, idx), hostFromInts(dtype.Int64, []int{n}, inv),
		hostFromInts(dtype.Int64, []int{k}, cnt)}, nil
}

// hostNMS is greedy non-maximum suppression per batch and class: boxes in
// descending score above score_threshold, each kept unless its IoU with a
// kept one exceeds iou_threshold, at most max_output_boxes_per_class.
func hostNMS(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	boxes, scores := ins[0], ins[1]
	if len(boxes.shape) != 3 || boxes.shape[2] != 4 || len(scores.shape) != 3 ||
		scores.shape[0] != boxes.shape[0] || scores.shape[2] != boxes.shape[1] {
		return nil, fmt.Errorf("boxes %v and scores %v: want [B, S, 4] and [B, C, S]", boxes.shape, scores.shape)
	}
	bv, err := boxes.floats()
	if err != nil {
		return nil, err
	}
	sv, err := scores.floats()
	if err != nil {
		return nil, err
	}
	maxOut := int64(0)
	if len(ins) > 2 && ins[2] != nil {
		m, err := scalar(ins[2])
		if err != nil {
			return nil, fmt.Errorf("max_output_boxes_per_class: %w", err)
		}
		maxOut = int64(m)
	}
	iouT, scoreT := 0.0, math.Inf(-1)
	if len(ins) > 3 && ins[3] != nil {
		if iouT, err = scalar(ins[3]); err != nil {
			return nil, fmt.Errorf("iou_threshold: %w", err)
		}
	}
	if len(ins) > 4 && ins[4] != nil {
		if scoreT, err = scalar(ins[4]); err != nil {
			return nil, fmt.Errorf("score_threshold: %w", err)
		}
	}
	center := hc.n.AttrInt("center_point_box", 0) != 0
	nb, nc, ns := scores.shape[0], scores.shape[1], scores.shape[2]
	corners := func(b, i int) (y1, x1, y2, x2 float64) {
		p := bv[(b*ns+i)*4 : (b*ns+i)*4+4]
		if center {
			return p[1] - p[3]/2, p[0] - p[2]/2, p[1] + p[3]/2, p[0] + p[2]/2
		}
		return math.Min(p[0], p[2]), math.Min(p[1], p[3]), math.Max(p[0], p[2]), math.Max(p[1], p[3])
	}
	iou := func(b, i, j int) float64 {
		ay1, ax1, ay2, ax2 := corners(b, i)
		by1, bx1, by2, bx2 := corners(b, j)
		ih := math.Max(0, math.Min(ay2, by2)-math.Max(ay1, by1))
		iw := math.Max(0, math.Min(ax2, bx2)-math.Max(ax1, bx1))
		inter := ih * iw
		union := (ay2-ay1)*(ax2-ax1) + (by2-by1)*(bx2-bx1) - inter
		if union <= 0 {
			return 0
		}
		return inter / union
	}
	var out []int64
	for b := 0; b < nb; b++ {
		for c := 0; c < nc; c++ {
			s := sv[(b*nc+c)*ns : (b*nc+c+1)*ns]
			var cand []int
			for i, e := range s {
				if e > scoreT {
					cand = append(cand, i)
				}
			}
			sort.SliceStable(cand, func(i, j int) bool { return s[cand[i]] > s[cand[j]] })
			var kept []int
			for _, i := range cand {
				if int64(len(kept)) >= maxOut {
					break
				}
				ok := true
				for _, k := range kept {
					if iou(b, i, k) > iouT {
						ok = false
						break
					}
				}
				if ok {
					kept = append(kept, i)
					out = append(out, int64(b), int64(c), int64(i))
				}
			}
		}
	}
	return []*hostTensor{hostFromInts(dtype.Int64, []int{len(out) / 3, 3}, out)}, nil
}
