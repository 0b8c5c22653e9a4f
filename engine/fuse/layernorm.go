package fuse

import (
	"encoding/binary"
	"math"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// LayerNorm replaces layer normalisation over the last axis written out op
// by op (exporters before opset 17, and hand-written norms):
//
//	d = x - mean(x, -1)
//	y = d / sqrt(mean(d^2, -1) + eps) [* gamma] [+ beta]
//
// (d^2 as Pow(d, 2) or d*d; the division also as d * 1/s or
// d * Reciprocal(s)) by a standard LayerNormalization(x, gamma, beta) with
// axis -1. Without gamma the scale is an initializer of ones.
func LayerNorm(g *graph.Graph, res *infer.Result) error {
	r := newRewriter(g, res)
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Graph() != g {
			continue
		}
		if err := r.layerNorm(n); err != nil {
			return err
		}
	}
	return r.finish()
}

func (r *rewriter) layerNorm(red *graph.Node) error {
	g := r.g
	if !r.dev(red, "ReduceMean") || !lastAxisReduce(red) {
		return nil
	}
	x, mu := red.Inputs[0], out0(red)
	if !isFloat(x.Type) {
		return nil
	}
	sub := soleConsumer(g, mu)
	if !r.dev(sub, "Sub") || in(sub, 1) != mu || !sameTensor(in(sub, 0), x) {
		return nil
	}
	d := out0(sub)
	if isOutput(g, d) || len(d.Consumers) != 2 || !shapeEqual(d.Shape, x.Shape) {
		return nil
	}
	// One reader of d squares it for the variance, the other divides it.
	var stat []*graph.Node
	var root *graph.Value
	var eps float64
	found := false
	for _, c := range d.Consumers {
		if squareOf(c) != d {
			continue
		}
		red2 := soleConsumer(g, out0(c))
		var ok bool
		if stat, _, root, eps, ok = r.normStat(red2); ok {
			found = true
			break
		}
	}
	if !found {
		return nil
	}
	norm, y, ok := r.normalized(root, func(v *graph.Value) bool { return v == d })
	if !ok || !shapeEqual(y.Shape, x.Shape) {
		return nil
	}
	// The division must be d's other reader.
	divReader := norm[len(norm)-1]
	if divReader == stat[0] || (d.Consumers[0] != divReader && d.Consumers[1] != divReader) {
		return nil
	}
	var tail []*graph.Node
	out := y
	sn, gamma, so := r.rowScale(out, "Mul")
	if gamma != nil {
		tail, out = append(tail, sn...), so
	}
	bn, beta, bo := r.rowScale(out, "Add")
	if beta != nil {
		tail, out = append(tail, bn...), bo
	}
	if !used(g, out) {
		return nil
	}
	if gamma == nil {
		var ok bool
		if gamma, ok = r.ones(nameNear(red, "LayerNorm_scale"), x.Type, x.Shape[len(x.Shape)-1]); !ok {
			return nil
		}
	}
	ins := []*graph.Value{uncast(x), gamma}
	if beta != nil {
		ins = append(ins, beta)
	}
	n := &graph.Node{Name: r.uniqueName(nameNear(red, "LayerNormalization")), OpType: "LayerNormalization",
		Inputs: ins, Outputs: []*graph.Value{out}, Attrs: map[string]*graph.Attr{}}
	setInt(n, "axis", -1)
	setFloat(n, "epsilon", eps)
	body := append([]*graph.Node{red, sub}, stat...)
	body = append(append(body, norm...), tail...)
	return r.replace(body, n, castChain(x))
}

// ones adds an initializer of d ones of type t (float32 or float16), the
// scale of a LayerNormalization whose decomposed form had none.
func (r *rewriter) ones(name string, t dtype.Type, d symshape.Expr) (*graph.Value, bool) {
	k, ok := d.Const()
	if !ok || k <= 0 {
		return nil, false
	}
	var data []byte
	switch t {
	case dtype.Float32:
		data = make([]byte, 4*k)
		for i := int64(0); i < k; i++ {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(1))
		}
	case dtype.Float16:
		data = make([]byte, 2*k)
		for i := int64(0); i < k; i++ {
			binary.LittleEndian.PutUint16(data[2*i:], dtype.Float32ToHalf(1))
		}
	default:
		return nil, false
	}
	v := r.g.NewValue(name)
	tn, err := graph.NewTensor(v.Name, t, []int64{k}, data)
	if err != nil {
		return nil, false
	}
	v.Type, v.Const = t, tn
	v.Shape = []symshape.Expr{symshape.Const(k)}
	v.Declared = []graph.Dim{{Value: k}}
	r.g.Initializers = append(r.g.Initializers, v)
	return v, true
}
