package infer

import (
	"fmt"
	"math"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Accessors shared by the rules. Shapes handed to rules are copies: rules
// build output shapes by editing them, and a value's own Shape must not
// change under it.

// input returns input i of n, nil when absent or omitted.
func input(n *graph.Node, i int) *graph.Value {
	if i < len(n.Inputs) {
		return n.Inputs[i]
	}
	return nil
}

// output returns output i of n, nil when absent or omitted.
func output(n *graph.Node, i int) *graph.Value {
	if i < len(n.Outputs) {
		return n.Outputs[i]
	}
	return nil
}

// shapeOf returns a copy of input i's shape, failing when the input is missing.
func (c *ctx) shapeOf(n *graph.Node, i int) ([]symshape.Expr, error) {
	v := input(n, i)
	if v == nil {
		return nil, fmt.Errorf("input %d is missing", i)
	}
	out := make([]symshape.Expr, len(v.Shape))
	for j, d := range v.Shape {
		out[j] = c.resolve(d)
	}
	return out, nil
}

// typeOf returns input i's element type (Undefined when missing).
func typeOf(n *graph.Node, i int) dtype.Type {
	if v := input(n, i); v != nil {
		return v.Type
	}
	return dtype.Undefined
}

// setOut stores output i's shape and, where the file left it undefined, its
// type. Absent outputs are skipped.
func (c *ctx) setOut(n *graph.Node, i int, shape []symshape.Expr, t dtype.Type) {
	v := output(n, i)
	if v == nil {
		return
	}
	s := make([]symshape.Expr, len(shape))
	for j, d := range shape {
		s[j] = c.resolve(d)
	}
	if v.Type == dtype.Undefined {
		v.Type = t
	}
	c.setShape(v, s)
}

// setElems stores output i's contents when its shape is constant, small and
// matches len(e), and the values are representable in its type (every
// element of a float tensor is an integer here by construction).
func (c *ctx) setElems(n *graph.Node, i int, e []symshape.Expr) {
	v := output(n, i)
	if v == nil || e == nil {
		return
	}
	cnt, ok := constCount(v.Shape)
	if !ok || cnt != int64(len(e)) || cnt > MaxElems {
		return
	}
	for _, x := range e {
		if !x.IsValid() {
			return
		}
	}
	if !elemsType(v.Type) {
		return
	}
	out := make([]symshape.Expr, len(e))
	for j, x := range e {
		out[j] = c.resolve(x)
	}
	if v.Type == dtype.Bool {
		for _, x := range out {
			k, ok := x.Const()
			if !ok || (k != 0 && k != 1) {
				return
			}
		}
	}
	v.Elems = out
}

// elemsType reports whether contents of type t can be tracked: integers,
// bools, and floats holding integer values.
func elemsType(t dtype.Type) bool {
	return t.IsInt() || t == dtype.Bool || t.IsFloat()
}

// constCount returns the element count of a shape whose dims are all constant.
func constCount(shape []symshape.Expr) (int64, bool) {
	n := int64(1)
	for _, d := range shape {
		k, ok := d.Const()
		if !ok || k < 0 {
			return 0, false
		}
		if k != 0 && n > math.MaxInt64/k {
			return 0, false
		}
		n *= k
	}
	return n, true
}

// constDims converts a shape whose dims are all constant.
func constDims(shape []symshape.Expr) ([]int64, bool) {
	out := make([]int64, len(shape))
	for i, d := range shape {
		k, ok := d.Const()
		if !ok {
			return nil, false
		}
		out[i] = k
	}
	return out, true
}

// elems returns input i's symbolic contents.
func (c *ctx) elems(n *graph.Node, i int) ([]symshape.Expr, bool) {
	v := input(n, i)
	if v == nil || v.Elems == nil {
		return nil, false
	}
	out := make([]symshape.Expr, len(v.Elems))
	for j, e := range v.Elems {
		out[j] = c.resolve(e)
	}
	return out, true
}

// ints returns input i's contents when they are all constants.
func (c *ctx) ints(n *graph.Node, i int) ([]int64, bool) {
	e, ok := c.elems(n, i)
	if !ok {
		return nil, false
	}
	return constInts(e)
}

func constInts(e []symshape.Expr) ([]int64, bool) {
	out := make([]int64, len(e))
	for j, x := range e {
		k, ok := x.Const()
		if !ok {
			return nil, false
		}
		out[j] = k
	}
	return out, true
}

// floats returns input i's contents as float64 when known: from Elems, or
// from a constant tensor's data (scales of Resize are not integers).
func (c *ctx) floats(n *graph.Node, i int) ([]float64, bool) {
	if k, ok := c.ints(n, i); ok {
		out := make([]float64, len(k))
		for j, x := range k {
			out[j] = float64(x)
		}
		return out, true
	}
	v := input(n, i)
	if v == nil {
		return nil, false
	}
	t := c.data[v]
	if t == nil {
		t = v.Const
	}
	if t == nil || t.Data == nil {
		return nil, false
	}
	if t.Type == dtype.Float64 {
		d := t.Data
		out := make([]float64, len(d)/8)
		for j := range out {
			var u uint64
			for b := 7; b >= 0; b-- {
				u = u<<8 | uint64(d[8*j+b])
			}
			out[j] = math.Float64frombits(u)
		}
		return out, true
	}
	f, err := t.Float32s()
	if err != nil {
		return nil, false
	}
	out := make([]float64, len(f))
	for j, x := range f {
		out[j] = float64(x)
	}
	return out, true
}

// tensorElems returns a small tensor's contents as constants: integers and
// bools always, floats when every element is an integer of magnitude below
// 2^53 (so that shape arithmetic done in float stays exact).
func tensorElems(t *graph.Tensor) ([]symshape.Expr, bool) {
	if t == nil || t.Data == nil {
		return nil, false
	}
	n := t.NumElements()
	if n < 0 || n > MaxElems {
		return nil, false
	}
	var vals []int64
	switch {
	case t.Type.IsInt() || t.Type == dtype.Bool:
		v, err := t.Int64s()
		if err != nil {
			return nil, false
		}
		vals = v
	case t.Type.IsFloat():
		f, err := t.Float32s()
		if err != nil {
			return nil, false
		}
		vals = make([]int64, len(f))
		for i, x := range f {
			if x != float32(math.Trunc(float64(x))) || math.Abs(float64(x)) >= 1<<53 {
				return nil, false
			}
			vals[i] = int64(x)
		}
	default:
		return nil, false
	}
	out := make([]symshape.Expr, len(vals))
	for i, v := range vals {
		out[i] = symshape.Const(v)
	}
	return out, true
}

// attrInts returns an INTS attribute or def.
func attrInts(n *graph.Node, name string, def []int64) []int64 {
	if v, ok := n.AttrInts(name); ok {
		return v
	}
	return def
}

// normAxis maps a possibly negative axis into [0, rank).
func normAxis(a int64, rank int) (int, error) {
	if a < -int64(rank) || a >= int64(rank) {
		return 0, fmt.Errorf("axis %d is out of range for rank %d", a, rank)
	}
	if a < 0 {
		a += int64(rank)
	}
	return int(a), nil
}

// normAxes normalises a list of axes and rejects duplicates.
func normAxes(axes []int64, rank int) ([]int, error) {
	out := make([]int, len(axes))
	seen := map[int]bool{}
	for i, a := range axes {
		x, err := normAxis(a, rank)
		if err != nil {
			return nil, err
		}
		if seen[x] {
			return nil, fmt.Errorf("axis %d is repeated in %v", a, axes)
		}
		seen[x] = true
		out[i] = x
	}
	return out, nil
}

// consts builds a shape from integers.
func consts(v ...int64) []symshape.Expr {
	out := make([]symshape.Expr, len(v))
	for i, x := range v {
		out[i] = symshape.Const(x)
	}
	return out
}

// product multiplies dims.
func product(s []symshape.Expr) symshape.Expr {
	return symshape.Product(s...)
}

// copyShape copies a shape. The copy is never nil: nil means "unknown",
// and a scalar's shape is known and empty.
func copyShape(s []symshape.Expr) []symshape.Expr {
	return append(make([]symshape.Expr, 0, len(s)), s...)
}

// strides returns row-major strides of constant dims.
func strides(dims []int64) []int64 {
	st := make([]int64, len(dims))
	acc := int64(1)
	for i := len(dims) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= dims[i]
	}
	return st
}

// unravel converts a flat index into a multi-index over dims.
func unravel(flat int64, dims []int64, idx []int64) {
	for i := len(dims) - 1; i >= 0; i-- {
		if dims[i] == 0 {
			idx[i] = 0
			continue
		}
		idx[i] = flat % dims[i]
		flat /= dims[i]
	}
}

// small is a tensor of known constant shape and symbolic contents.
type small struct {
	dims []int64
	e    []symshape.Expr
}

// smallIn returns input i as a small tensor when its shape is constant and
// its contents are known.
func (c *ctx) smallIn(n *graph.Node, i int) (small, bool) {
	v := input(n, i)
	if v == nil || v.Elems == nil {
		return small{}, false
	}
	dims, ok := constDims(v.Shape)
	if !ok {
		return small{}, false
	}
	e, _ := c.elems(n, i)
	return small{dims, e}, true
}

// at reads the element at a multi-index, broadcasting dims of size 1 and
// aligning ranks to the right against a target rank.
func (s small) at(idx []int64) symshape.Expr {
	off := len(idx) - len(s.dims)
	flat := int64(0)
	for i, d := range s.dims {
		x := idx[i+off]
		if d == 1 {
			x = 0
		}
		flat = flat*d + x
	}
	return s.e[flat]
}

// mapBroadcast applies f elementwise over inputs broadcast to out; it fails
// (ok false) when f does.
func mapBroadcast(out []int64, ins []small, f func(args []symshape.Expr) (symshape.Expr, bool)) ([]symshape.Expr, bool) {
	cnt := int64(1)
	for _, d := range out {
		cnt *= d
	}
	if cnt > MaxElems {
		return nil, false
	}
	res := make([]symshape.Expr, cnt)
	idx := make([]int64, len(out))
	args := make([]symshape.Expr, len(ins))
	for k := int64(0); k < cnt; k++ {
		unravel(k, out, idx)
		for j, in := range ins {
			args[j] = in.at(idx)
		}
		r, ok := f(args)
		if !ok || !r.IsValid() {
			return nil, false
		}
		res[k] = r
	}
	return res, true
}
