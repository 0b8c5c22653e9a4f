package infer

import (
	"fmt"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Data movement: transposes, concatenation, slicing, gathers and scatters,
// padding and tiling. Contents of small tensors move with them.

func init() {
	register("", transposeRule, "Transpose")
	register("", concatRule, "Concat")
	register("", splitRule, "Split")
	register("", sliceRule, "Slice")
	register("", gatherRule, "Gather")
	register("", gatherElementsRule, "GatherElements")
	register("", gatherNDRule, "GatherND")
	register("", sameAsDataRule, "ScatterND", "Scatter", "ScatterElements")
	register("", tileRule, "Tile")
	register("", padRule, "Pad")
	register("", depthToSpaceRule, "DepthToSpace")
	register("", spaceToDepthRule, "SpaceToDepth")
	register("", oneHotRule, "OneHot")
	register("", nonZeroRule, "NonZero")
	register("", compressRule, "Compress")
	register("", uniqueRule, "Unique")
}

// transposeRule permutes dims (reversed when perm is absent).
func transposeRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	r := len(in)
	perm, ok := n.AttrInts("perm")
	if !ok {
		perm = make([]int64, r)
		for i := range perm {
			perm[i] = int64(r - 1 - i)
		}
	}
	if len(perm) != r {
		return fmt.Errorf("perm %v has %d entries for input %s", perm, len(perm), symshape.FormatShape(in))
	}
	p, err := normAxes(perm, r)
	if err != nil {
		return fmt.Errorf("perm %v: %v", perm, err)
	}
	out := make([]symshape.Expr, r)
	for i, a := range p {
		out[i] = in[a]
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	if s, ok := c.smallIn(n, 0); ok {
		od, _ := constDims(out)
		idx := make([]int64, r)
		src := make([]int64, r)
		st := strides(s.dims)
		cnt, _ := constCount(out)
		e := make([]symshape.Expr, cnt)
		for k := range e {
			unravel(int64(k), od, idx)
			flat := int64(0)
			for i, a := range p {
				src[a] = idx[i]
			}
			for i := range src {
				flat += src[i] * st[i]
			}
			e[k] = s.e[flat]
		}
		c.setElems(n, 0, e)
	}
	return nil
}

// concatRule sums the axis dims and unifies the others.
func concatRule(c *ctx, n *graph.Node) error {
	var shapes [][]symshape.Expr
	var idx []int
	for i, v := range n.Inputs {
		if v == nil {
			continue
		}
		s, err := c.shapeOf(n, i)
		if err != nil {
			return err
		}
		shapes = append(shapes, s)
		idx = append(idx, i)
	}
	if len(shapes) == 0 {
		return fmt.Errorf("no inputs")
	}
	r := len(shapes[0])
	ax, ok := n.Attrs["axis"]
	if !ok && c.opset() >= 4 {
		return fmt.Errorf("attribute axis is missing")
	}
	a := int64(1) // opset 1 default
	if ok {
		a = ax.I
	}
	axis, err := normAxis(a, r)
	if err != nil {
		return err
	}
	out := copyShape(shapes[0])
	sum := shapes[0][axis]
	for j, s := range shapes[1:] {
		if len(s) != r {
			return fmt.Errorf("input %d has shape %s, rank %d, but input %d has %s", idx[j+1], symshape.FormatShape(s), len(s), idx[0], symshape.FormatShape(shapes[0]))
		}
		for d := 0; d < r; d++ {
			if d == axis {
				continue
			}
			u, err := c.unify(out[d], s[d], func() string {
				return fmt.Sprintf("inputs %s and %s do not agree on dim %d", symshape.FormatShape(shapes[0]), symshape.FormatShape(s), d)
			})
			if err != nil {
				return err
			}
			out[d] = u
		}
		sum = symshape.Add(sum, s[axis])
	}
	out[axis] = sum
	c.setOut(n, 0, out, typeOf(n, idx[0]))
	// Contents: concatenate along axis.
	parts := make([]small, len(idx))
	for j, i := range idx {
		s, ok := c.smallIn(n, i)
		if !ok {
			return nil
		}
		parts[j] = s
	}
	od, ok := constDims(out)
	if !ok {
		return nil
	}
	cnt, _ := constCount(out)
	if cnt > MaxElems {
		return nil
	}
	e := make([]symshape.Expr, 0, cnt)
	outer := int64(1)
	for _, d := range od[:axis] {
		outer *= d
	}
	for o := int64(0); o < outer; o++ {
		for _, p := range parts {
			inner := int64(1)
			for _, d := range p.dims[axis:] {
				inner *= d
			}
			e = append(e, p.e[o*inner:(o+1)*inner]...)
		}
	}
	c.setElems(n, 0, e)
	return nil
}

// splitRule: explicit sizes (attribute before opset 13, input from 13),
// equal parts, or num_outputs (opset 18: ceil-sized parts, last smaller).
func splitRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	axis, err := normAxis(n.AttrInt("axis", 0), len(in))
	if err != nil {
		return err
	}
	d := in[axis]
	k := len(n.Outputs)
	var sizes []symshape.Expr
	var explicit []symshape.Expr
	if c.opset() < 13 {
		if s, ok := n.AttrInts("split"); ok && len(s) > 0 {
			explicit = consts(s...)
		} else if c.opset() < 2 && input(n, 1) != nil {
			e, ok := c.elems(n, 1)
			if !ok {
				return fmt.Errorf("input 1 (split) is not known ahead of run time")
			}
			explicit = e
		}
	} else if input(n, 1) != nil {
		e, ok := c.elems(n, 1)
		if !ok {
			return fmt.Errorf("input 1 (split) %q is not known ahead of run time", input(n, 1).Name)
		}
		explicit = e
	}
	switch {
	case explicit != nil:
		if len(explicit) != k {
			return fmt.Errorf("split %s has %d entries for %d outputs", symshape.FormatShape(explicit), len(explicit), k)
		}
		if _, err := c.unify(symshape.Sum(explicit...), d, func() string {
			return fmt.Sprintf("split sizes %s must add up to dim %d of %s", symshape.FormatShape(explicit), axis, symshape.FormatShape(in))
		}); err != nil {
			return err
		}
		sizes = explicit
	case n.Attrs["num_outputs"] != nil:
		no := n.AttrInt("num_outputs", 0)
		if no <= 0 || int(no) != k {
			return fmt.Errorf("num_outputs %d does not match the %d outputs", no, k)
		}
		part := symshape.CeilDiv(d, symshape.Const(no))
		sizes = make([]symshape.Expr, k)
		for i := range sizes {
			sizes[i] = part
		}
		sizes[k-1] = symshape.Sub(d, symshape.Mul(part, symshape.Const(no-1)))
	default:
		part, err := exactDiv(d, symshape.Const(int64(k)))
		if err != nil {
			return fmt.Errorf("dim %d of %s does not split into %d equal parts: %v", axis, symshape.FormatShape(in), k, err)
		}
		sizes = make([]symshape.Expr, k)
		for i := range sizes {
			sizes[i] = part
		}
	}
	s, haveSmall := c.smallIn(n, 0)
	off := int64(0)
	for i := range sizes {
		out := copyShape(in)
		out[axis] = sizes[i]
		c.setOut(n, i, out, typeOf(n, 0))
		if haveSmall {
			sz, ok := sizes[i].Const()
			if !ok {
				haveSmall = false
				continue
			}
			c.setElems(n, i, sliceSmall(s, axis, off, sz))
			off += sz
		}
	}
	return nil
}

// sliceSmall takes [off, off+size) along axis of a small tensor (step 1).
func sliceSmall(s small, axis int, off, size int64) []symshape.Expr {
	outer := int64(1)
	for _, d := range s.dims[:axis] {
		outer *= d
	}
	inner := int64(1)
	for _, d := range s.dims[axis+1:] {
		inner *= d
	}
	var e []symshape.Expr
	for o := int64(0); o < outer; o++ {
		base := o * s.dims[axis] * inner
		e = append(e, s.e[base+off*inner:base+(off+size)*inner]...)
	}
	return e
}

// bigIndex marks starts/ends that mean "to the end": exporters write
// INT64_MAX (and INT64_MIN for reversed slices). No tensor dim reaches 2^40.
const bigIndex = int64(1) << 40

// sliceRule: attributes before opset 10, inputs from then on.
func sliceRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	r := len(in)
	var starts, ends, axes, steps []symshape.Expr
	if c.opset() < 10 {
		s, ok1 := n.AttrInts("starts")
		e, ok2 := n.AttrInts("ends")
		if !ok1 || !ok2 {
			return fmt.Errorf("attributes starts and ends are required (opset %d)", c.opset())
		}
		starts, ends = consts(s...), consts(e...)
		if a, ok := n.AttrInts("axes"); ok {
			axes = consts(a...)
		}
	} else {
		var ok bool
		if starts, ok = c.elems(n, 1); !ok {
			return c.sliceUnknown(n, in, 1)
		}
		if ends, ok = c.elems(n, 2); !ok {
			return c.sliceUnknown(n, in, 2)
		}
		if input(n, 3) != nil {
			if axes, ok = c.elems(n, 3); !ok {
				return fmt.Errorf("input 3 (axes) %q is not known ahead of run time", input(n, 3).Name)
			}
		}
		if input(n, 4) != nil {
			if steps, ok = c.elems(n, 4); !ok {
				return fmt.Errorf("input 4 (steps) %q is not known ahead of run time", input(n, 4).Name)
			}
		}
	}
	if len(starts) != len(ends) {
		return fmt.Errorf("starts %s and ends %s differ in length", symshape.FormatShape(starts), symshape.FormatShape(ends))
	}
	ax := make([]int, len(starts))
	if axes == nil {
		for i := range ax {
			ax[i] = i
		}
	} else {
		ai, ok := constInts(axes)
		if !ok || len(ai) != len(starts) {
			return fmt.Errorf("axes %s must be %d constants", symshape.FormatShape(axes), len(starts))
		}
		if ax, err = normAxes(ai, r); err != nil {
			return err
		}
	}
	out := copyShape(in)
	type cut struct{ start, step, size int64 }
	cuts := make([]cut, r)
	for i := range cuts {
		k, _ := in[i].Const()
		cuts[i] = cut{0, 1, k}
	}
	for j, a := range ax {
		step := int64(1)
		if steps != nil {
			k, ok := steps[j].Const()
			if !ok {
				return fmt.Errorf("step %s of axis %d is not a constant", steps[j], a)
			}
			step = k
		}
		if step == 0 {
			return fmt.Errorf("step of axis %d is 0", a)
		}
		s, size, err := c.sliceDim(in[a], starts[j], ends[j], step)
		if err != nil {
			return fmt.Errorf("axis %d of %s, start %s, end %s, step %d: %v", a, symshape.FormatShape(in), starts[j], ends[j], step, err)
		}
		out[a] = size
		ks, ok1 := s.Const()
		kz, ok2 := size.Const()
		if ok1 && ok2 {
			cuts[a] = cut{ks, step, kz}
		} else {
			cuts[a] = cut{-1, step, -1}
		}
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	if sm, ok := c.smallIn(n, 0); ok {
		od, ok := constDims(out)
		if !ok {
			return nil
		}
		for _, ct := range cuts {
			if ct.start < 0 {
				return nil
			}
		}
		cnt, _ := constCount(out)
		st := strides(sm.dims)
		idx := make([]int64, r)
		e := make([]symshape.Expr, cnt)
		for k := range e {
			unravel(int64(k), od, idx)
			flat := int64(0)
			for i := range idx {
				flat += (cuts[i].start + idx[i]*cuts[i].step) * st[i]
			}
			e[k] = sm.e[flat]
		}
		c.setElems(n, 0, e)
	}
	return nil
}

// sliceUnknown gives a slice with run-time bounds fresh dims on every axis
// it may cut (all of them, since the axes may be run-time too).
func (c *ctx) sliceUnknown(n *graph.Node, in []symshape.Expr, which int) error {
	out := make([]symshape.Expr, len(in))
	for i := range out {
		out[i] = c.fresh(output(n, 0), i, fmt.Sprintf("Slice bounds (input %d %q) are only known at run time", which, input(n, which).Name))
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	return nil
}

// sliceDim returns the effective start and the length of a slice of a dim
// of size d, following ONNX: negative indices add d, then starts clamp to
// [0, d] ([0, d-1] for negative steps) and ends to [0, d] ([-1, d-1]).
func (c *ctx) sliceDim(d, start, end symshape.Expr, step int64) (symshape.Expr, symshape.Expr, error) {
	var lo, hiS, hiE symshape.Expr // clamp ranges
	if step > 0 {
		lo, hiS, hiE = symshape.Const(0), d, d
	} else {
		lo, hiS, hiE = symshape.Const(-1), symshape.Sub(d, symshape.Const(1)), symshape.Sub(d, symshape.Const(1))
	}
	norm := func(x symshape.Expr, isStart bool) (symshape.Expr, error) {
		hi := hiE
		low := lo
		if isStart {
			hi, low = hiS, symshape.Const(0)
		}
		if k, ok := x.Const(); ok {
			switch {
			case k >= bigIndex:
				return hi, nil
			case k <= -bigIndex:
				return low, nil
			}
		}
		if k, ok := x.Const(); ok && k < 0 {
			// max(d + k, 0) written as d - min(-k, d), so that a length
			// end - start cancels d: x[-1:] has length min(1, d).
			return c.clamp(symshape.Sub(d, symshape.Min(symshape.Const(-k), d)), low, hi), nil
		}
		switch c.sign(x) {
		case -1:
			x = symshape.Add(x, d)
		case 0, 1:
		default:
			return symshape.Expr{}, fmt.Errorf("the sign of %s is not known, so it cannot be told whether it counts from the end", x)
		}
		return c.clamp(x, low, hi), nil
	}
	s, err := norm(start, true)
	if err != nil {
		return s, symshape.Expr{}, err
	}
	e, err := norm(end, false)
	if err != nil {
		return s, symshape.Expr{}, err
	}
	var size symshape.Expr
	if step > 0 {
		size = symshape.CeilDiv(symshape.Sub(e, s), symshape.Const(step))
	} else {
		size = symshape.CeilDiv(symshape.Sub(s, e), symshape.Const(-step))
	}
	if c.sign(size) == 2 || c.sign(size) == -1 {
		size = symshape.Max(size, symshape.Const(0))
	}
	return s, size, nil
}

// clamp bounds x to [lo, hi], dropping a bound the algebra proves inactive.
func (c *ctx) clamp(x, lo, hi symshape.Expr) symshape.Expr {
	switch c.cmp(x, hi) {
	case symshape.Greater, symshape.GreaterEq, symshape.Equal:
		return hi
	case symshape.Less, symshape.LessEq:
	default:
		x = symshape.Min(x, hi)
	}
	switch c.cmp(x, lo) {
	case symshape.Less, symshape.LessEq, symshape.Equal:
		return lo
	case symshape.Greater, symshape.GreaterEq:
		return x
	}
	return symshape.Max(x, lo)
}

// gatherRule: data[:axis] + indices + data[axis+1:].
func gatherRule(c *ctx, n *graph.Node) error {
	data, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	ind, err := c.shapeOf(n, 1)
	if err != nil {
		return err
	}
	axis, err := normAxis(n.AttrInt("axis", 0), len(data))
	if err != nil {
		return err
	}
	out := append(append(copyShape(data[:axis]), ind...), data[axis+1:]...)
	c.setOut(n, 0, out, typeOf(n, 0))
	c.indexLimit(n, input(n, 1), data[axis], axis)
	ds, ok1 := c.smallIn(n, 0)
	is, ok2 := c.smallIn(n, 1)
	if !ok1 || !ok2 {
		return nil
	}
	ix, ok := constInts(is.e)
	if !ok {
		return nil
	}
	od, ok := constDims(out)
	if !ok {
		return nil
	}
	cnt, _ := constCount(out)
	if cnt > MaxElems {
		return nil
	}
	st := strides(ds.dims)
	idx := make([]int64, len(od))
	e := make([]symshape.Expr, cnt)
	ir := len(is.dims)
	for k := range e {
		unravel(int64(k), od, idx)
		// The indices' multi-index sits at [axis, axis+ir).
		flatI := int64(0)
		for j := 0; j < ir; j++ {
			flatI = flatI*is.dims[j] + idx[axis+j]
		}
		g := ix[flatI]
		if g < 0 {
			g += ds.dims[axis]
		}
		if g < 0 || g >= ds.dims[axis] {
			return fmt.Errorf("index %d is out of range for dim %d of size %d", ix[flatI], axis, ds.dims[axis])
		}
		flat := int64(0)
		for j := 0; j < axis; j++ {
			flat += idx[j] * st[j]
		}
		flat += g * st[axis]
		for j := axis + 1; j < len(ds.dims); j++ {
			flat += idx[j-1+ir] * st[j]
		}
		e[k] = ds.e[flat]
	}
	c.setElems(n, 0, e)
	return nil
}

// gatherElementsRule: the indices' shape.
func gatherElementsRule(c *ctx, n *graph.Node) error {
	data, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	ind, err := c.shapeOf(n, 1)
	if err != nil {
		return err
	}
	if len(ind) != len(data) {
		return fmt.Errorf("data %s and indices %s differ in rank", symshape.FormatShape(data), symshape.FormatShape(ind))
	}
	c.setOut(n, 0, ind, typeOf(n, 0))
	if axis, err := normAxis(n.AttrInt("axis", 0), len(data)); err == nil {
		c.indexLimit(n, input(n, 1), data[axis], axis)
	}
	return nil
}

// gatherNDRule: indices[:-1] + data[batch_dims + k:], k = indices[-1].
func gatherNDRule(c *ctx, n *graph.Node) error {
	data, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	ind, err := c.shapeOf(n, 1)
	if err != nil {
		return err
	}
	b := int(n.AttrInt("batch_dims", 0))
	if len(ind) == 0 {
		return fmt.Errorf("indices must have rank >= 1")
	}
	k64, ok := ind[len(ind)-1].Const()
	if !ok {
		return fmt.Errorf("last dim of indices %s must be a constant", symshape.FormatShape(ind))
	}
	k := int(k64)
	if b+k > len(data) {
		return fmt.Errorf("indices %s index %d dims past %d batch dims of data %s", symshape.FormatShape(ind), k, b, symshape.FormatShape(data))
	}
	out := append(copyShape(ind[:len(ind)-1]), data[b+k:]...)
	c.setOut(n, 0, out, typeOf(n, 0))
	return nil
}

// sameAsDataRule: output 0 has input 0's shape and type.
func sameAsDataRule(c *ctx, n *graph.Node) error {
	s, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	c.setOut(n, 0, s, typeOf(n, 0))
	return nil
}

// tileRule multiplies each dim by its repeat count.
func tileRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	rep, ok := c.elems(n, 1)
	if !ok {
		out := make([]symshape.Expr, len(in))
		for i := range out {
			out[i] = c.fresh(output(n, 0), i, "Tile repeats are only known at run time")
		}
		c.setOut(n, 0, out, typeOf(n, 0))
		return nil
	}
	if len(rep) != len(in) {
		return fmt.Errorf("repeats %s has %d entries for input %s", symshape.FormatShape(rep), len(rep), symshape.FormatShape(in))
	}
	out := make([]symshape.Expr, len(in))
	for i := range in {
		out[i] = symshape.Mul(in[i], rep[i])
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	if s, ok := c.smallIn(n, 0); ok {
		od, ok := constDims(out)
		if !ok {
			return nil
		}
		cnt, _ := constCount(out)
		if cnt > MaxElems {
			return nil
		}
		idx := make([]int64, len(od))
		st := strides(s.dims)
		e := make([]symshape.Expr, cnt)
		for k := range e {
			unravel(int64(k), od, idx)
			flat := int64(0)
			for i := range idx {
				flat += (idx[i] % s.dims[i]) * st[i]
			}
			e[k] = s.e[flat]
		}
		c.setElems(n, 0, e)
	}
	return nil
}

// padRule adds begin and end pads (attribute before opset 11, input after;
// opset 18's axes input selects the padded axes).
func padRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	r := len(in)
	var pads []symshape.Expr
	if c.opset() < 11 {
		p, ok := n.AttrInts("pads")
		if !ok {
			p, ok = n.AttrInts("paddings") // opset 1
		}
		if !ok {
			return fmt.Errorf("attribute pads is missing")
		}
		pads = consts(p...)
	} else {
		var ok bool
		pads, ok = c.elems(n, 1)
		if !ok {
			out := make([]symshape.Expr, r)
			for i := range out {
				out[i] = c.fresh(output(n, 0), i, "Pad amounts are only known at run time")
			}
			c.setOut(n, 0, out, typeOf(n, 0))
			return nil
		}
	}
	axes := make([]int, r)
	for i := range axes {
		axes[i] = i
	}
	if input(n, 3) != nil && c.opset() >= 18 {
		a, ok := c.ints(n, 3)
		if !ok {
			return fmt.Errorf("input 3 (axes) is not known ahead of run time")
		}
		if axes, err = normAxes(a, r); err != nil {
			return err
		}
	}
	if len(pads) != 2*len(axes) {
		return fmt.Errorf("pads %s needs %d entries for input %s", symshape.FormatShape(pads), 2*len(axes), symshape.FormatShape(in))
	}
	out := copyShape(in)
	for j, a := range axes {
		out[a] = symshape.Sum(in[a], pads[j], pads[j+len(axes)])
		if c.sign(out[a]) == -1 {
			return fmt.Errorf("pads %s make axis %d of %s negative", symshape.FormatShape(pads), a, symshape.FormatShape(in))
		}
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	return nil
}

// depthToSpaceRule: [N, C/b², H*b, W*b].
func depthToSpaceRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(in) != 4 {
		return fmt.Errorf("input %s must be 4-D", symshape.FormatShape(in))
	}
	b := n.AttrInt("blocksize", 0)
	if b <= 0 {
		return fmt.Errorf("blocksize %d must be positive", b)
	}
	bb := symshape.Const(b)
	ch, err := exactDiv(in[1], symshape.Const(b*b))
	if err != nil {
		return fmt.Errorf("channels of %s do not divide by blocksize² %d: %v", symshape.FormatShape(in), b*b, err)
	}
	c.setOut(n, 0, []symshape.Expr{in[0], ch, symshape.Mul(in[2], bb), symshape.Mul(in[3], bb)}, typeOf(n, 0))
	return nil
}

// spaceToDepthRule: [N, C*b², H/b, W/b].
func spaceToDepthRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(in) != 4 {
		return fmt.Errorf("input %s must be 4-D", symshape.FormatShape(in))
	}
	b := n.AttrInt("blocksize", 0)
	if b <= 0 {
		return fmt.Errorf("blocksize %d must be positive", b)
	}
	h, err1 := exactDiv(in[2], symshape.Const(b))
	w, err2 := exactDiv(in[3], symshape.Const(b))
	if err1 != nil || err2 != nil {
		return fmt.Errorf("spatial dims of %s do not divide by blocksize %d", symshape.FormatShape(in), b)
	}
	c.setOut(n, 0, []symshape.Expr{in[0], symshape.Mul(in[1], symshape.Const(b*b)), h, w}, typeOf(n, 0))
	return nil
}

// oneHotRule inserts depth at axis of the indices' shape; values give the type.
func oneHotRule(c *ctx, n *graph.Node) error {
	ind, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	depth, ok := c.elems(n, 1)
	var d symshape.Expr
	if ok && len(depth) == 1 {
		d = depth[0]
	} else {
		d = c.fresh(output(n, 0), 0, "OneHot depth is only known at run time")
	}
	a := n.AttrInt("axis", -1)
	axis, err := normAxis(a, len(ind)+1)
	if err != nil {
		return err
	}
	out := append(append(copyShape(ind[:axis]), d), ind[axis:]...)
	c.setOut(n, 0, out, typeOf(n, 2))
	return nil
}

// nonZeroRule: [rank, count], the count data-dependent.
func nonZeroRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	out := output(n, 0)
	if s, ok := c.smallIn(n, 0); ok {
		if v, ok := constInts(s.e); ok {
			cnt := int64(0)
			for _, x := range v {
				if x != 0 {
					cnt++
				}
			}
			c.setOut(n, 0, consts(int64(len(in)), cnt), dtype.Int64)
			return nil
		}
	}
	c.setOut(n, 0, []symshape.Expr{symshape.Const(int64(len(in))), c.fresh(out, 1, "NonZero count depends on the data")}, dtype.Int64)
	return nil
}

// compressRule: data-dependent length along axis (flattened when absent).
func compressRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	out := output(n, 0)
	f := c.fresh(out, 0, "Compress keeps a data-dependent number of slices")
	if a, ok := n.Attrs["axis"]; ok {
		axis, err := normAxis(a.I, len(in))
		if err != nil {
			return err
		}
		s := copyShape(in)
		s[axis] = f
		c.setOut(n, 0, s, typeOf(n, 0))
		return nil
	}
	c.setOut(n, 0, []symshape.Expr{f}, typeOf(n, 0))
	return nil
}

// uniqueRule: a data-dependent number of unique elements (or slices along
// axis); inverse_indices follow the input.
func uniqueRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	u := c.fresh(output(n, 0), 0, "Unique keeps a data-dependent number of elements")
	y := []symshape.Expr{u}
	inv := []symshape.Expr{product(in)}
	if a, ok := n.Attrs["axis"]; ok {
		axis, err := normAxis(a.I, len(in))
		if err != nil {
			return err
		}
		y = copyShape(in)
		y[axis] = u
		inv = []symshape.Expr{in[axis]}
	}
	c.setOut(n, 0, y, typeOf(n, 0))
	c.setOut(n, 1, []symshape.Expr{u}, dtype.Int64)
	c.setOut(n, 2, inv, dtype.Int64)
	c.setOut(n, 3, []symshape.Expr{u}, dtype.Int64)
	return nil
}
