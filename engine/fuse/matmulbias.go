package fuse

import (
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/symshape/infer"
)

// MatMulBias moves what follows a MatMul into the product's epilogue:
//
//	MatMul(a, b) [* c1 or / c1] [+ bias] [* c2 or / c2]
//
// with bias holding one number per output column (a Linear layer's bias:
// shape [N], [1, N], ..., or one element) and c1, c2 one-element
// constants (CLIP scales q_proj's output so), becomes ("tlite",
// "MatMulBias")(a, b, bias?) computing alpha*(a@b) + beta*bias with
// alpha = c1*c2 and beta = c2. A lone MatMul is left alone.
func MatMulBias(g *graph.Graph, res *infer.Result) error {
	r := newRewriter(g, res)
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Graph() != g {
			continue
		}
		if err := r.matMulBias(n); err != nil {
			return err
		}
	}
	return r.finish()
}

func (r *rewriter) matMulBias(mm *graph.Node) error {
	g := r.g
	if !r.dev(mm, "MatMul") || len(mm.Inputs) != 2 || mm.Inputs[0] == nil || mm.Inputs[1] == nil {
		return nil
	}
	a, b, y := mm.Inputs[0], mm.Inputs[1], out0(mm)
	if len(b.Shape) < 2 || len(y.Shape) == 0 || !isFloat(a.Type) || !isFloat(b.Type) {
		return nil
	}
	body := []*graph.Node{mm}
	cur := y
	alpha, beta := 1.0, 1.0
	scale := func() (float64, bool) {
		c := soleConsumer(g, cur)
		if !r.dev(c, "Mul", "Div") {
			return 0, false
		}
		f, ok := scalarFactor(c, cur)
		if !ok || !shapeEqual(out0(c).Shape, y.Shape) {
			return 0, false
		}
		body, cur = append(body, c), out0(c)
		return f, true
	}
	if f, ok := scale(); ok {
		alpha *= f
	}
	var bias *graph.Value
	if c := soleConsumer(g, cur); r.dev(c, "Add") {
		o, _ := otherInput(c, cur)
		if o != nil && o != cur && isFloat(o.Type) && (isRowVector(o, y.Shape) || allOnes(o.Shape) && len(o.Shape) <= len(y.Shape)) &&
			shapeEqual(out0(c).Shape, y.Shape) {
			bias = o
			body, cur = append(body, c), out0(c)
		}
	}
	if bias != nil {
		if f, ok := scale(); ok {
			alpha *= f
			beta *= f
		}
	}
	if len(body) == 1 || !used(g, cur) {
		return nil
	}
	ins := []*graph.Value{a, b}
	if bias != nil {
		ins = append(ins, bias)
	}
	n := r.newNode("MatMulBias", nameNear(mm, "MatMulBias"), ins, []*graph.Value{cur})
	setFloat(n, "alpha", alpha)
	setFloat(n, "beta", beta)
	return r.replace(body, n, nil)
}
