package fuse

import (
	"path"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/symshape/infer"
)

// RMSNorm replaces RMS normalisation written out op by op, as PyTorch
// exports LlamaRMSNorm:
//
//	x * 1/sqrt(mean(x^2, -1) + eps) [* w]     (x^2 as Pow(x, 2) or x*x;
//	                                           1/s as Div(1, s) or Reciprocal;
//	                                           or x / sqrt(...))
//
// with float Casts around x and the product allowed (a half-precision
// model averages in float32), by one ("tlite", "RMSNorm")(x, w) node with
// attribute epsilon. w must hold one weight per element of the last axis.
func RMSNorm(g *graph.Graph, res *infer.Result) error {
	r := newRewriter(g, res)
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Graph() != g {
			continue
		}
		if err := r.rmsNorm(n); err != nil {
			return err
		}
	}
	return r.finish()
}

// rmsNormCore matches the statistic: from the squaring node sq through
// the mean, + eps and the square root. It returns the nodes, x (the
// squared tensor), eps and the root's output.
func (r *rewriter) normStat(red *graph.Node) (nodes []*graph.Node, x, root *graph.Value, eps float64, ok bool) {
	g := r.g
	if !r.dev(red, "ReduceMean") || !lastAxisReduce(red) {
		return nil, nil, nil, 0, false
	}
	sq := red.Inputs[0].Producer
	if !r.dev(sq) || !onlyUse(g, red.Inputs[0], red) {
		return nil, nil, nil, 0, false
	}
	if x = squareOf(sq); x == nil {
		return nil, nil, nil, 0, false
	}
	mean := out0(red)
	add := soleConsumer(g, mean)
	if !r.dev(add, "Add") {
		return nil, nil, nil, 0, false
	}
	ev, _ := otherInput(add, mean)
	if eps, ok = scalar(ev); !ok || ev == mean || !epsOK(eps) || !shapeEqual(out0(add).Shape, mean.Shape) {
		return nil, nil, nil, 0, false
	}
	sqrt := soleConsumer(g, out0(add))
	if !r.dev(sqrt, "Sqrt") {
		return nil, nil, nil, 0, false
	}
	return []*graph.Node{sq, red, add, sqrt}, x, out0(sqrt), eps, true
}

// normalized matches d / root, written as Div(d, root), Mul(d, 1/root)
// or Mul(d, Reciprocal(root)), where same(d) says which tensor is d. It
// returns the nodes and the normalised value.
func (r *rewriter) normalized(root *graph.Value, same func(*graph.Value) bool) ([]*graph.Node, *graph.Value, bool) {
	g := r.g
	next := soleConsumer(g, root)
	switch {
	case r.dev(next, "Div") && in(next, 1) == root && same(in(next, 0)):
		return []*graph.Node{next}, out0(next), true
	case r.dev(next, "Reciprocal"), r.dev(next, "Div") && in(next, 1) == root && isScalarConst(in(next, 0), 1):
		inv := out0(next)
		mul := soleConsumer(g, inv)
		if !r.dev(mul, "Mul") {
			return nil, nil, false
		}
		o, _ := otherInput(mul, inv)
		if o == inv || !same(o) {
			return nil, nil, false
		}
		return []*graph.Node{next, mul}, out0(mul), true
	}
	return nil, nil, false
}

// rowScale matches op (Mul or Add) of v and a per-column weight w that
// keeps v's shape, after an optional float Cast of v. It returns w = nil
// when there is no such op.
func (r *rewriter) rowScale(v *graph.Value, op string) (nodes []*graph.Node, w, out *graph.Value) {
	g := r.g
	cur := v
	if c := soleConsumer(g, v); r.dev(c, "Cast") && floatCastInput(c) == v {
		nodes, cur = append(nodes, c), out0(c)
	}
	c := soleConsumer(g, cur)
	if !r.dev(c, op) {
		return nil, nil, v
	}
	o, _ := otherInput(c, cur)
	if o == cur || !isFloat(o.Type) || !isRowVector(o, cur.Shape) || !shapeEqual(out0(c).Shape, cur.Shape) {
		return nil, nil, v
	}
	return append(nodes, c), o, out0(c)
}

// castChain lists the float Casts between uncast(v) and v.
func castChain(v *graph.Value) []*graph.Node {
	var out []*graph.Node
	for v != nil && floatCastInput(v.Producer) != nil {
		out = append(out, v.Producer)
		v = v.Producer.Inputs[0]
	}
	return out
}

func (r *rewriter) rmsNorm(red *graph.Node) error {
	g := r.g
	stat, x, root, eps, ok := r.normStat(red)
	if !ok || !isFloat(x.Type) || len(x.Shape) == 0 {
		return nil
	}
	norm, y, ok := r.normalized(root, func(v *graph.Value) bool { return sameTensor(v, x) })
	if !ok || !shapeEqual(y.Shape, x.Shape) {
		return nil
	}
	tail, w, out := r.rowScale(y, "Mul")
	if !used(g, out) {
		return nil
	}
	src := uncast(x)
	ins := []*graph.Value{src}
	if w != nil {
		ins = append(ins, w)
	}
	n := r.newNode("RMSNorm", nameNear(red, "RMSNorm"), ins, []*graph.Value{out})
	setFloat(n, "epsilon", eps)
	setInt(n, "axis", -1)
	body := append(append(stat, norm...), tail...)
	return r.replace(body, n, castChain(x))
}

// nameNear names a fused node after the scope of an anchor node:
// "/layers.0/norm/ReduceMean" gives "/layers.0/norm/RMSNorm".
func nameNear(anchor *graph.Node, op string) string {
	if dir := path.Dir(anchor.Name); dir != "." && dir != "/" && dir != "" {
		return dir + "/" + op
	}
	return op
}
