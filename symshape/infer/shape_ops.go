package infer

import (
	"fmt"
	"math"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Ops that compute or rearrange shapes: their outputs are small integer
// tensors whose contents are tracked, or tensors whose shape is read from
// such contents.

func init() {
	register("", shapeRule, "Shape")
	register("", sizeRule, "Size")
	register("", constantRule, "Constant")
	register("", constantOfShapeRule, "ConstantOfShape")
	register("", rangeRule, "Range")
	register("", reshapeRule, "Reshape")
	register("", expandRule, "Expand")
	register("", squeezeRule, "Squeeze")
	register("", unsqueezeRule, "Unsqueeze")
	register("", flattenRule, "Flatten")
}

// shapeRule: a 1-D int64 tensor of the input's dims (start/end of opset 15).
func shapeRule(c *ctx, n *graph.Node) error {
	s, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	r := int64(len(s))
	clampIdx := func(x int64) int64 {
		if x < 0 {
			x += r
		}
		return min(max(x, 0), r)
	}
	start := clampIdx(n.AttrInt("start", 0))
	end := clampIdx(n.AttrInt("end", r))
	if end < start {
		end = start
	}
	e := s[start:end]
	c.setOut(n, 0, consts(int64(len(e))), dtype.Int64)
	c.setElems(n, 0, e)
	return nil
}

// sizeRule: a scalar int64, the product of the dims.
func sizeRule(c *ctx, n *graph.Node) error {
	s, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	c.setOut(n, 0, nil, dtype.Int64)
	c.setElems(n, 0, []symshape.Expr{product(s)})
	return nil
}

// constantRule: the value attribute's shape and, when small, contents.
func constantRule(c *ctx, n *graph.Node) error {
	out := output(n, 0)
	if out == nil {
		return nil
	}
	t := out.Const
	if t == nil {
		t = n.AttrTensor("value")
	}
	if t == nil {
		return fmt.Errorf("no numeric value (sparse_value and value_string(s) are not supported)")
	}
	c.setOut(n, 0, consts(t.Dims...), t.Type)
	if e, ok := tensorElems(t); ok {
		c.setElems(n, 0, e)
	}
	return nil
}

// constantOfShapeRule: the shape is input 0's contents; the fill value's
// type (float32 0 by default) is the output type.
func constantOfShapeRule(c *ctx, n *graph.Node) error {
	out := output(n, 0)
	t, fill := dtype.Float32, symshape.Const(0)
	haveFill := true
	if v := n.AttrTensor("value"); v != nil {
		t = v.Type
		e, ok := tensorElems(v)
		if ok && len(e) == 1 {
			fill = e[0]
		} else {
			haveFill = false
		}
	}
	shape, err := c.shapeVector(n, 0, out)
	if err != nil {
		return err
	}
	c.setOut(n, 0, shape, t)
	if cnt, ok := constCount(shape); ok && haveFill && cnt <= MaxElems {
		e := make([]symshape.Expr, cnt)
		for i := range e {
			e[i] = fill
		}
		c.setElems(n, 0, e)
	}
	return nil
}

// maxShapeRank bounds the rank a shape tensor of unknown contents may give
// (its length): a shape of 2^29 elements is a hostile file, not a tensor.
const maxShapeRank = 64

// shapeVector reads input i as a shape: its contents when known, otherwise
// fresh symbols, one per element (the count must be constant).
func (c *ctx) shapeVector(n *graph.Node, i int, out *graph.Value) ([]symshape.Expr, error) {
	in := input(n, i)
	if in == nil {
		return nil, fmt.Errorf("input %d (shape) is missing", i)
	}
	if len(in.Shape) > 1 {
		return nil, fmt.Errorf("input %d (shape) must be 1-D, has shape %s", i, symshape.FormatShape(in.Shape))
	}
	if e, ok := c.elems(n, i); ok {
		for j, d := range e {
			if c.sign(d) == -1 {
				return nil, fmt.Errorf("input %d (shape) %s has a negative dim at %d", i, symshape.FormatShape(e), j)
			}
		}
		return e, nil
	}
	r := int64(1)
	if len(in.Shape) == 1 {
		k, ok := in.Shape[0].Const()
		if !ok {
			return nil, fmt.Errorf("input %d (shape) has unknown length %s: the output rank is unknown", i, in.Shape[0])
		}
		r = k
	}
	if r > maxShapeRank {
		return nil, fmt.Errorf("input %d (shape) has %d elements: an output of that rank is not a tensor tlite runs (at most %d dims)", i, r, maxShapeRank)
	}
	s := make([]symshape.Expr, r)
	for j := range s {
		s[j] = c.fresh(out, j, fmt.Sprintf("dim %d comes from the run-time contents of %q", j, in.Name))
	}
	return s, nil
}

// rangeRule: max(ceil((limit - start) / delta), 0) elements.
func rangeRule(c *ctx, n *graph.Node) error {
	out := output(n, 0)
	t := typeOf(n, 0)
	var args [3]symshape.Expr
	known := true
	for i := range args {
		e, ok := c.elems(n, i)
		if !ok || len(e) != 1 {
			known = false
			break
		}
		args[i] = e[0]
	}
	if known {
		start, limit, delta := args[0], args[1], args[2]
		var cnt symshape.Expr
		switch c.sign(delta) {
		case 1:
			if k, ok := delta.Const(); ok && k == 0 {
				return fmt.Errorf("delta is 0")
			}
			cnt = symshape.CeilDiv(symshape.Sub(limit, start), delta)
		case -1:
			cnt = symshape.CeilDiv(symshape.Sub(start, limit), symshape.Neg(delta))
		default:
			return fmt.Errorf("delta %s is 0 or of unknown sign", delta)
		}
		cnt = symshape.Max(cnt, symshape.Const(0))
		c.setOut(n, 0, []symshape.Expr{cnt}, t)
		if c.sign(delta) == 1 {
			c.setValueMax(out, symshape.Sub(limit, symshape.Const(1)))
		} else {
			c.setValueMax(out, start)
		}
		if k, ok := cnt.Const(); ok && k <= MaxElems {
			e := make([]symshape.Expr, k)
			for i := range e {
				e[i] = symshape.Add(start, symshape.Mul(symshape.Const(int64(i)), delta))
			}
			c.setElems(n, 0, e)
		}
		return nil
	}
	// Non-integer constants (a float arange with step 0.5): count directly.
	var f [3]float64
	for i := range f {
		v, ok := c.floats(n, i)
		if !ok || len(v) != 1 {
			c.setOut(n, 0, []symshape.Expr{c.fresh(out, 0, "Range with run-time start, limit or delta")}, t)
			return nil
		}
		f[i] = v[0]
	}
	if f[2] == 0 {
		return fmt.Errorf("delta is 0")
	}
	cnt := int64(max(math.Ceil((f[1]-f[0])/f[2]), 0))
	c.setOut(n, 0, consts(cnt), t)
	return nil
}

// reshapeRule: 0 copies the input dim (unless allowzero), -1 is solved by
// exact division of the total size by the known dims. Symbolic entries are
// taken as sizes: they come from shapes, which are never 0 or -1 in a run.
func reshapeRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	out := output(n, 0)
	var target []symshape.Expr
	if c.opset() < 5 {
		s, ok := n.AttrInts("shape")
		if !ok {
			return fmt.Errorf("attribute shape is missing (opset %d)", c.opset())
		}
		target = consts(s...)
	} else {
		sv := input(n, 1)
		if sv == nil {
			return fmt.Errorf("input 1 (shape) is missing")
		}
		e, ok := c.elems(n, 1)
		if !ok {
			s, err := c.shapeVector(n, 1, out)
			if err != nil {
				return err
			}
			c.setOut(n, 0, s, typeOf(n, 0))
			return nil
		}
		target = e
	}
	allowZero := n.AttrInt("allowzero", 0) != 0
	res := make([]symshape.Expr, len(target))
	infer := -1
	for i, d := range target {
		k, isConst := d.Const()
		switch {
		case isConst && k == -1:
			if infer >= 0 {
				return fmt.Errorf("shape %s has more than one -1", symshape.FormatShape(target))
			}
			infer = i
		case isConst && k == 0 && !allowZero:
			if i >= len(in) {
				return fmt.Errorf("shape %s copies dim %d (0) but the input %s has rank %d", symshape.FormatShape(target), i, symshape.FormatShape(in), len(in))
			}
			res[i] = in[i]
		case isConst && k < -1:
			return fmt.Errorf("shape %s has invalid entry %d", symshape.FormatShape(target), k)
		default:
			res[i] = d
		}
	}
	total := product(in)
	if infer >= 0 {
		rest := make([]symshape.Expr, 0, len(res))
		for i, d := range res {
			if i != infer {
				rest = append(rest, d)
			}
		}
		known := product(rest)
		q, err := exactDiv(total, known)
		if err != nil {
			return fmt.Errorf("cannot reshape %s to %s: %v", symshape.FormatShape(in), symshape.FormatShape(target), err)
		}
		res[infer] = q
	} else if !product(res).Equal(total) {
		// Element counts must agree: unify them when a symbol can absorb it.
		if _, err := c.unify(product(res), total, func() string {
			return fmt.Sprintf("reshape %s to %s changes the element count", symshape.FormatShape(in), symshape.FormatShape(res))
		}); err != nil {
			return err
		}
	}
	c.setOut(n, 0, res, typeOf(n, 0))
	if e, ok := c.elems(n, 0); ok {
		c.setElems(n, 0, e)
	}
	return nil
}

// exactDiv divides sizes that must divide: constants are checked; symbolic
// quotients rely on the algebra's cancellation ((batch*seq*64)/(4*seq) =
// 16*batch).
func exactDiv(a, b symshape.Expr) (symshape.Expr, error) {
	ca, okA := a.Const()
	cb, okB := b.Const()
	if okB && cb == 0 {
		if okA && ca == 0 {
			return symshape.Const(0), nil
		}
		return symshape.Expr{}, fmt.Errorf("the other dims multiply to 0")
	}
	if okA && okB {
		if ca%cb != 0 {
			return symshape.Expr{}, fmt.Errorf("%d elements do not divide by %d", ca, cb)
		}
		return symshape.Const(ca / cb), nil
	}
	if num, den, ok := symshape.Ratio(a, b); ok {
		if den != 1 {
			return symshape.Expr{}, fmt.Errorf("%s elements are %d/%d times %s, not a multiple", a, num, den, b)
		}
		return symshape.Const(num), nil
	}
	q := symshape.FloorDiv(a, b)
	if !q.IsValid() {
		return symshape.Expr{}, q.Err()
	}
	return q, nil
}

// expandRule broadcasts the input against the shape input's contents.
func expandRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	target, err := c.shapeVector(n, 1, output(n, 0))
	if err != nil {
		return err
	}
	out, err := c.broadcast("input and shape", in, target)
	if err != nil {
		return err
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	c.mapElems(n, out, unaryIdentity, 0)
	return nil
}

// axesOf reads the axes of Squeeze/Unsqueeze/Reduce*: an attribute before
// opset attrUntil, input idx from then on. ok is false when none are given.
func (c *ctx) axesOf(n *graph.Node, attrUntil int64, idx int) (axes []int64, ok bool, err error) {
	if c.opset() < attrUntil {
		a, ok := n.AttrInts("axes")
		return a, ok, nil
	}
	if input(n, idx) == nil {
		return nil, false, nil
	}
	a, known := c.ints(n, idx)
	if !known {
		return nil, false, fmt.Errorf("input %d (axes) %q is not known ahead of run time", idx, input(n, idx).Name)
	}
	return a, true, nil
}

// squeezeRule removes the given axes (which must be 1), or every dim that is
// the constant 1 when no axes are given (a symbolic dim is taken as non-1).
func squeezeRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	axes, ok, err := c.axesOf(n, 13, 1)
	if err != nil {
		return err
	}
	drop := map[int]bool{}
	if ok {
		ax, err := normAxes(axes, len(in))
		if err != nil {
			return err
		}
		for _, a := range ax {
			if k, isConst := in[a].Const(); isConst && k != 1 {
				return fmt.Errorf("cannot squeeze axis %d of %s: size %d", a, symshape.FormatShape(in), k)
			}
			if _, isConst := in[a].Const(); !isConst {
				if _, err := c.unify(in[a], symshape.Const(1), func() string { return fmt.Sprintf("squeezed axis %d of %s", a, symshape.FormatShape(in)) }); err != nil {
					return err
				}
			}
			drop[a] = true
		}
	} else {
		for i, d := range in {
			if isOne(d) {
				drop[i] = true
			}
		}
	}
	var out []symshape.Expr
	for i, d := range in {
		if !drop[i] {
			out = append(out, d)
		}
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	if e, ok := c.elems(n, 0); ok {
		c.setElems(n, 0, e)
	}
	return nil
}

// unsqueezeRule inserts 1s at the given axes of the output.
func unsqueezeRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	axes, ok, err := c.axesOf(n, 13, 1)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("axes are missing")
	}
	r := len(in) + len(axes)
	ax, err := normAxes(axes, r)
	if err != nil {
		return err
	}
	ins := map[int]bool{}
	for _, a := range ax {
		ins[a] = true
	}
	out := make([]symshape.Expr, 0, r)
	j := 0
	for i := 0; i < r; i++ {
		if ins[i] {
			out = append(out, symshape.Const(1))
			continue
		}
		out = append(out, in[j])
		j++
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	if e, ok := c.elems(n, 0); ok {
		c.setElems(n, 0, e)
	}
	return nil
}

// flattenRule: [prod(dims before axis), prod(dims from axis)].
func flattenRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	a := n.AttrInt("axis", 1)
	if a < 0 {
		a += int64(len(in))
	}
	if a < 0 || a > int64(len(in)) {
		return fmt.Errorf("axis %d is out of range for %s", n.AttrInt("axis", 1), symshape.FormatShape(in))
	}
	out := []symshape.Expr{product(in[:a]), product(in[a:])}
	c.setOut(n, 0, out, typeOf(n, 0))
	if e, ok := c.elems(n, 0); ok {
		c.setElems(n, 0, e)
	}
	return nil
}
