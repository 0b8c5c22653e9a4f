package infer

import (
	"fmt"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Reductions, arg-reductions and TopK.

func init() {
	// ReduceSum took its axes as an input from opset 13, the others from 18.
	register("", reduceRule(13, func(a []symshape.Expr) symshape.Expr { return symshape.Sum(a...) }), "ReduceSum")
	register("", reduceRule(18, func(a []symshape.Expr) symshape.Expr { return symshape.Product(a...) }), "ReduceProd")
	register("", reduceRule(18, func(a []symshape.Expr) symshape.Expr { return symshape.MaxOf(a...) }), "ReduceMax")
	register("", reduceRule(18, func(a []symshape.Expr) symshape.Expr { return symshape.MinOf(a...) }), "ReduceMin")
	register("", reduceRule(18, nil), "ReduceMean", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
	register("", argRule, "ArgMax", "ArgMin")
	register("", topKRule, "TopK")
}

// reduceRule builds the rule of a reduction whose axes became an input at
// opset axesInput; f, when set, folds small contents.
func reduceRule(axesInput int64, f func([]symshape.Expr) symshape.Expr) rule {
	return func(c *ctx, n *graph.Node) error {
		in, err := c.shapeOf(n, 0)
		if err != nil {
			return err
		}
		axes, _, err := c.axesOf(n, axesInput, 1)
		if err != nil {
			return err
		}
		keep := n.AttrInt("keepdims", 1) != 0
		t := typeOf(n, 0)
		if len(axes) == 0 {
			// No axes: reduce everything, unless noop_with_empty_axes asks
			// for the identity.
			if n.AttrInt("noop_with_empty_axes", 0) != 0 {
				c.setOut(n, 0, in, t)
				if e, ok := c.elems(n, 0); ok {
					c.setElems(n, 0, e)
				}
				return nil
			}
			axes = make([]int64, len(in))
			for i := range axes {
				axes[i] = int64(i)
			}
		}
		ax, err := normAxes(axes, len(in))
		if err != nil {
			return err
		}
		red := make([]bool, len(in))
		for _, a := range ax {
			red[a] = true
		}
		var out []symshape.Expr
		for i, d := range in {
			switch {
			case !red[i]:
				out = append(out, d)
			case keep:
				out = append(out, symshape.Const(1))
			}
		}
		c.setOut(n, 0, out, t)
		if f == nil {
			return nil
		}
		s, ok := c.smallIn(n, 0)
		if !ok {
			return nil
		}
		// Group input elements by their output position.
		od := make([]int64, len(s.dims))
		for i, d := range s.dims {
			od[i] = d
			if red[i] {
				od[i] = 1
			}
		}
		groups := make([][]symshape.Expr, productInt(od))
		idx := make([]int64, len(s.dims))
		ost := strides(od)
		for k, e := range s.e {
			unravel(int64(k), s.dims, idx)
			flat := int64(0)
			for i := range idx {
				if !red[i] {
					flat += idx[i] * ost[i]
				}
			}
			groups[flat] = append(groups[flat], e)
		}
		res := make([]symshape.Expr, len(groups))
		for i, g := range groups {
			if len(g) == 0 {
				// A reduction over an empty axis: only sums and products
				// have an identity worth folding.
				return nil
			}
			res[i] = f(g)
		}
		c.setElems(n, 0, res)
		return nil
	}
}

func productInt(d []int64) int64 {
	p := int64(1)
	for _, x := range d {
		p *= x
	}
	return p
}

// argRule: the axis removed or kept as 1, int64 indices.
func argRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	axis, err := normAxis(n.AttrInt("axis", 0), len(in))
	if err != nil {
		return err
	}
	out := copyShape(in[:axis])
	if n.AttrInt("keepdims", 1) != 0 {
		out = append(out, symshape.Const(1))
	}
	out = append(out, in[axis+1:]...)
	c.setOut(n, 0, out, dtype.Int64)
	return nil
}

// topKRule: the axis becomes K (attribute before opset 10, input after).
func topKRule(c *ctx, n *graph.Node) error {
	in, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	axis, err := normAxis(n.AttrInt("axis", -1), len(in))
	if err != nil {
		return err
	}
	var k symshape.Expr
	if c.opset() < 10 {
		a, ok := n.Attrs["k"]
		if !ok {
			return fmt.Errorf("attribute k is missing")
		}
		k = symshape.Const(a.I)
	} else if e, ok := c.elems(n, 1); ok && len(e) == 1 {
		k = e[0]
	} else {
		k = c.fresh(output(n, 0), axis, "TopK's K is only known at run time")
	}
	if c.cmp(k, in[axis]) == symshape.Greater {
		return fmt.Errorf("K=%s exceeds axis %d of %s", k, axis, symshape.FormatShape(in))
	}
	out := copyShape(in)
	out[axis] = k
	c.setOut(n, 0, out, typeOf(n, 0))
	c.setOut(n, 1, out, dtype.Int64)
	return nil
}
