package kernels

import (
	_ "embed"
	"fmt"
	"math"

	"github.com/tlite/tlite/graph/dtype"
)

//go:embed reduce.cl
var reduceSrc string

// ReduceOp is one of ONNX's Reduce* operators.
type ReduceOp int

// The reductions Reduce computes. Over zero elements each gives its identity
// (Sum 0, Prod 1, Max -Inf, Min +Inf, LogSumExp -Inf) and Mean gives NaN.
const (
	ReduceSum ReduceOp = iota
	ReduceMean
	ReduceMax
	ReduceMin
	ReduceProd
	ReduceL1
	ReduceL2
	ReduceSumSquare
	ReduceLogSumExp
)

// String is the ONNX operator name.
func (op ReduceOp) String() string {
	names := [...]string{"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
		"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"}
	if op < 0 || int(op) >= len(names) {
		return fmt.Sprintf("ReduceOp(%d)", int(op))
	}
	return names[op]
}

// ReducePlan is a reduction over a contiguous input in canonical form: the
// input seen as at most three kept and three reduced dimensions, each with
// its stride in elements (size-1 dimensions dropped, neighbours of the same
// kind merged). The output is the kept dimensions in order, contiguous, so
// keepdims is only a matter of the caller's output shape.
type ReducePlan struct {
	Out         int // output elements: product of the kept dims
	Count       int // elements reduced into each output
	Kept        [3]int
	KeptStrides [3]int
	Red         [3]int
	RedStrides  [3]int
}

// Rows reports whether each output reduces one contiguous run of Count
// elements starting at output*Count: the last-axis case.
func (p ReducePlan) Rows() bool {
	return p.Red[0] == 1 && p.Red[1] == 1 && p.RedStrides[2] == 1 &&
		p.Kept[0] == 1 && p.Kept[1] == 1 && (p.Kept[2] == 1 || p.KeptStrides[2] == p.Count)
}

// PlanReduce canonicalises reducing shape over axes (negative axes count
// from the end; empty axes means all axes, ONNX's default; a caller honouring
// noop_with_empty_axes copies instead). It fails on a repeated or
// out-of-range axis, or when the pattern needs more than three kept or three
// reduced groups (possible only above rank 6).
func PlanReduce(shape, axes []int) (ReducePlan, error) {
	rank := len(shape)
	red := make([]bool, rank)
	for _, a := range axes {
		if a < -rank || a >= rank {
			return ReducePlan{}, fmt.Errorf("kernels: reduce: axis %d out of range for rank %d", a, rank)
		}
		if a < 0 {
			a += rank
		}
		if red[a] {
			return ReducePlan{}, fmt.Errorf("kernels: reduce: axis %d repeated in %v", a, axes)
		}
		red[a] = true
	}
	if len(axes) == 0 {
		for i := range red {
			red[i] = true
		}
	}
	type group struct {
		size, stride int
		red          bool
	}
	var gs []group
	stride := 1
	for i := rank - 1; i >= 0; i-- {
		d := shape[i]
		if d < 0 {
			return ReducePlan{}, fmt.Errorf("kernels: reduce: negative dimension in %v", shape)
		}
		if d != 1 {
			if n := len(gs); n > 0 && gs[n-1].red == red[i] {
				gs[n-1].size *= d
			} else {
				gs = append(gs, group{d, stride, red[i]})
			}
		}
		stride *= d
	}
	p := ReducePlan{Out: 1, Count: 1, Kept: [3]int{1, 1, 1}, Red: [3]int{1, 1, 1}}
	nk, nr := 0, 0
	for _, g := range gs { // innermost first
		if g.red {
			if nr == 3 {
				return ReducePlan{}, fmt.Errorf("kernels: reduce: axes %v of %v form more than three separate groups", axes, shape)
			}
			p.Red[2-nr], p.RedStrides[2-nr] = g.size, g.stride
			p.Count *= g.size
			nr++
		} else {
			if nk == 3 {
				return ReducePlan{}, fmt.Errorf("kernels: reduce: kept axes of %v (reducing %v) form more than three separate groups", shape, axes)
			}
			p.Kept[2-nk], p.KeptStrides[2-nk] = g.size, g.stride
			p.Out *= g.size
			nk++
		}
	}
	return p, nil
}

// Reduce computes op over axes of the contiguous tensor x of the given shape
// into out (the kept dims, contiguous; p.Out elements). An empty output
// launches nothing.
func (l *Lib) Reduce(s Storage, op ReduceOp, x Buf, shape, axes []int, out Buf) error {
	p, err := PlanReduce(shape, axes)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return l.reducePlanned(s, op, x, p, out, preferGroups(l))
}

func (l *Lib) reducePlanned(s Storage, op ReduceOp, x Buf, p ReducePlan, out Buf, groups bool) error {
	if op < ReduceSum || op > ReduceLogSumExp {
		return fmt.Errorf("kernels: reduce: unknown op %d", int(op))
	}
	if p.Out == 0 {
		return nil
	}
	what := op.String()
	if err := checkSpan(what, "x", x, planSpan(p), s.Size()); err != nil {
		return err
	}
	if err := checkSpan(what, "out", out, p.Out, s.Size()); err != nil {
		return err
	}
	g := groupSize(l)
	opts := reduceOpts(l, s)
	code := int32(op)
	if p.Rows() && op != ReduceLogSumExp {
		if groups {
			k, err := l.kernel("reduce", reduceSrc, opts, "reduce_grp")
			if err != nil {
				return err
			}
			return l.dev.Launch(k, []int{p.Out * g}, []int{g}, x.Mem, int32(x.Off), out.Mem, int32(out.Off), int32(p.Out), int32(p.Count), code)
		}
		k, err := l.kernel("reduce", reduceSrc, opts, "reduce_rows")
		if err != nil {
			return err
		}
		loc := rowLocal(l, p.Out)
		return l.dev.Launch(k, []int{roundUp(p.Out, loc)}, []int{loc}, x.Mem, int32(x.Off), out.Mem, int32(out.Off), int32(p.Out), int32(p.Count), code)
	}
	k, err := l.kernel("reduce", reduceSrc, opts, "reduce_nd")
	if err != nil {
		return err
	}
	const loc = 64
	return l.dev.Launch(k, []int{roundUp(p.Out, loc)}, []int{loc}, x.Mem, int32(x.Off), out.Mem, int32(out.Off), int32(p.Out),
		int32(p.Kept[0]), int32(p.Kept[1]), int32(p.Kept[2]), int32(p.KeptStrides[0]), int32(p.KeptStrides[1]), int32(p.KeptStrides[2]),
		int32(p.Red[0]), int32(p.Red[1]), int32(p.Red[2]), int32(p.RedStrides[0]), int32(p.RedStrides[1]), int32(p.RedStrides[2]), code)
}

// reduceOpts are the build options of reduce.cl for storage s; GROUP is
// defined for every kernel so that all of them share one program.
func reduceOpts(l *Lib, s Storage) string {
	return fmt.Sprintf("%s -DGROUP=%d", s.define(), groupSize(l))
}

// planSpan is the number of input elements p addresses (1 + the largest
// offset), for bounds checks.
func planSpan(p ReducePlan) int {
	last := 0
	for i := 0; i < 3; i++ {
		if p.Kept[i] == 0 || p.Red[i] == 0 {
			return 0
		}
		last += (p.Kept[i]-1)*p.KeptStrides[i] + (p.Red[i]-1)*p.RedStrides[i]
	}
	return last + 1
}

// ReduceRef is the reference for Reduce: out gets PlanReduce(shape, axes).Out
// values, rounded to storage s.
func ReduceRef(s Storage, op ReduceOp, x []float32, shape, axes []int, out []float32) error {
	p, err := PlanReduce(shape, axes)
	if err != nil {
		return err
	}
	for o := 0; o < p.Out; o++ {
		i2, t := o%p.Kept[2], o/p.Kept[2]
		i1, i0 := t%p.Kept[1], t/p.Kept[1]
		base := i0*p.KeptStrides[0] + i1*p.KeptStrides[1] + i2*p.KeptStrides[2]
		var vals []float64
		for a0 := 0; a0 < p.Red[0]; a0++ {
			for a1 := 0; a1 < p.Red[1]; a1++ {
				for a2 := 0; a2 < p.Red[2]; a2++ {
					vals = append(vals, float64(x[base+a0*p.RedStrides[0]+a1*p.RedStrides[1]+a2*p.RedStrides[2]]))
				}
			}
		}
		out[o] = storeAs(s, float32(reduceValues(op, vals)))
	}
	return nil
}

// reduceValues applies op to vals in float64.
func reduceValues(op ReduceOp, vals []float64) float64 {
	switch op {
	case ReduceMax, ReduceMin, ReduceLogSumExp:
		m := math.Inf(-1)
		if op == ReduceMin {
			m = math.Inf(1)
		}
		for _, v := range vals {
			if op == ReduceMin {
				m = math.Min(m, v)
			} else {
				m = math.Max(m, v)
			}
		}
		if op != ReduceLogSumExp || math.IsInf(m, 0) {
			return m
		}
		s := 0.0
		for _, v := range vals {
			s += math.Exp(v - m)
		}
		return m + math.Log(s)
	case ReduceProd:
		a := 1.0
		for _, v := range vals {
			a *= v
		}
		return a
	}
	a := 0.0
	for _, v := range vals {
		switch op {
		case ReduceL1:
			a += math.Abs(v)
		case ReduceL2, ReduceSumSquare:
			a += v * v
		default:
			a += v
		}
	}
	switch op {
	case ReduceMean:
		return a / float64(len(vals))
	case ReduceL2:
		return math.Sqrt(a)
	}
	return a
}

// ArgReduce computes ArgMax (isMin false) or ArgMin over the middle axis of the
// contiguous [outer, r, inner] tensor x into out, int64 indices with
// select_last_index semantics when last is set (keepdims is the caller's
// shape). r must be positive. NaN never counts as larger or smaller.
func (l *Lib) ArgReduce(s Storage, isMin, last bool, x Buf, outer, r, inner int, out Buf) error {
	what := "ArgMax"
	if isMin {
		what = "ArgMin"
	}
	if outer < 0 || inner < 0 || r < 0 {
		return fmt.Errorf("kernels: %s: negative size [%d, %d, %d]", what, outer, r, inner)
	}
	n := outer * inner
	if n == 0 {
		return nil
	}
	if r == 0 {
		return fmt.Errorf("kernels: %s: reduced axis is empty", what)
	}
	if err := checkSpan(what, "x", x, outer*r*inner, s.Size()); err != nil {
		return err
	}
	if err := checkSpan(what, "out", out, n, 8); err != nil {
		return err
	}
	k, err := l.kernel("reduce", reduceSrc, reduceOpts(l, s), "argreduce")
	if err != nil {
		return err
	}
	var flags int32
	if isMin {
		flags |= 1
	}
	if last {
		flags |= 2
	}
	const loc = 64
	return l.dev.Launch(k, []int{roundUp(n, loc)}, []int{loc}, x.Mem, int32(x.Off), out.Mem, int32(out.Off),
		int32(outer), int32(r), int32(inner), flags)
}

// ArgReduceRef is the reference for ArgReduce.
func ArgReduceRef(isMin, last bool, x []float32, outer, r, inner int, out []int64) {
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			best, bi := x[o*r*inner+i], 0
			for k := 1; k < r; k++ {
				v := x[(o*r+k)*inner+i]
				var better bool
				switch {
				case isMin && last:
					better = v <= best
				case isMin:
					better = v < best
				case last:
					better = v >= best
				default:
					better = v > best
				}
				if better {
					best, bi = v, k
				}
			}
			out[o*inner+i] = int64(bi)
		}
	}
}

// CumSum computes ONNX CumSum over the middle axis of the contiguous
// [outer, r, inner] tensor x into out (which may alias x).
func (l *Lib) CumSum(s Storage, x, out Buf, outer, r, inner int, exclusive, reverse bool) error {
	if outer < 0 || inner < 0 || r < 0 {
		return fmt.Errorf("kernels: CumSum: negative size [%d, %d, %d]", outer, r, inner)
	}
	n := outer * r * inner
	if n == 0 {
		return nil
	}
	if err := checkSpan("CumSum", "x", x, n, s.Size()); err != nil {
		return err
	}
	if err := checkSpan("CumSum", "out", out, n, s.Size()); err != nil {
		return err
	}
	k, err := l.kernel("reduce", reduceSrc, reduceOpts(l, s), "cumsum")
	if err != nil {
		return err
	}
	const loc = 64
	return l.dev.Launch(k, []int{roundUp(outer*inner, loc)}, []int{loc}, x.Mem, int32(x.Off), out.Mem, int32(out.Off),
		int32(outer), int32(r), int32(inner), boolArg(exclusive), boolArg(reverse))
}

// CumSumRef is the reference for CumSum, rounding outputs to storage s.
func CumSumRef(s Storage, x, out []float32, outer, r, inner int, exclusive, reverse bool) {
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			var acc float32
			for k := 0; k < r; k++ {
				kk := k
				if reverse {
					kk = r - 1 - k
				}
				p := (o*r+kk)*inner + i
				v := x[p]
				if exclusive {
					out[p] = storeAs(s, acc)
					acc += v
				} else {
					acc += v
					out[p] = storeAs(s, acc)
				}
			}
		}
	}
}

// Launch helpers shared by the norm, softmax, reduce and move families.

// boolArg is a bool as the int32 flag kernels take.
func boolArg(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// checkSpan verifies that b holds n elements of esize bytes from b.Off.
func checkSpan(op, what string, b Buf, n, esize int) error {
	if b.Mem == nil {
		return fmt.Errorf("kernels: %s: %s: no buffer", op, what)
	}
	if b.Off < 0 {
		return fmt.Errorf("kernels: %s: %s: negative offset %d", op, what, b.Off)
	}
	if need := (b.Off + n) * esize; need > b.Mem.Size() {
		return fmt.Errorf("kernels: %s: %s needs %d elements of %d bytes from element %d, buffer holds %d bytes", op, what, n, esize, b.Off, b.Mem.Size())
	}
	if b.Off+n > math.MaxInt32 {
		return fmt.Errorf("kernels: %s: %s: element range up to %d does not fit int32 kernel indices", op, what, b.Off+n)
	}
	return nil
}

// storeAs is x after a trip through storage s.
func storeAs(s Storage, x float32) float32 {
	if s == F16 {
		return dtype.HalfToFloat32(dtype.Float32ToHalf(x))
	}
	return x
}

// preferGroups reports whether row kernels should run one work-group per
// row (GPUs) rather than one work-item per row with vector loads (CPU
// devices, where barriers cost far more than they save).
// Tests set styleOverride to run both styles on whatever device they have:
// 1 forces the CPU style, 2 the GPU style.
func preferGroups(l *Lib) bool {
	switch styleOverride {
	case 1:
		return false
	case 2:
		return true
	}
	return l.info().Type == "GPU"
}

var styleOverride int

// groupSize is the work-group size of the per-row group kernels: a power of
// two no larger than 128 or the device's limit.
func groupSize(l *Lib) int {
	g, lim := 128, l.info().MaxWorkGroup
	for g > 1 && lim > 0 && g > lim {
		g /= 2
	}
	return g
}

// rowLocal is the local size for one-item-per-row kernels: 1 when rows are
// few, so that every compute unit gets a work-group, else 16 to amortise
// per-group overhead. Only two values, because PoCL compiles a kernel afresh
// for each local size it meets.
func rowLocal(l *Lib, rows int) int {
	if rows >= 16*max(l.info().ComputeUnits, 1) {
		return 16
	}
	return 1
}
