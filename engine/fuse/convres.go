package fuse

import (
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape/infer"
)

// ConvResidual moves a residual Add that reads a 1-D or 2-D Conv's output
// into the convolution's epilogue, with the activation that is the Add's
// only reader, so the sum is never written on its own:
//
//	Conv -> Add(conv, r) [-> Relu | Clip | HardSwish | ... | SiLU]
//
// (ResNet's conv-bn-add-relu once the norm is folded, and the skip of
// MobileNet's and EfficientNet's projections) becomes ("tlite",
// "ConvAct") with inputs x, w, bias (absent when the Conv has none) and
// r, the Conv's attributes, and activation "" (none) or the activation's
// attributes as ConvAct sets them. r must have the Add's shape and type
// (no broadcasting), and the Conv's output must be read by the Add alone.
// When both of the Add's inputs are such Convs, the first one takes the
// other's output as its residual. It runs after ConvAct, which takes a
// Conv whose activation reads it directly.
func ConvResidual(g *graph.Graph, res *infer.Result) error {
	r := newRewriter(g, res)
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Graph() != g {
			continue
		}
		if err := r.convResidual(n); err != nil {
			return err
		}
	}
	return r.finish()
}

func (r *rewriter) convResidual(add *graph.Node) error {
	g := r.g
	if !r.dev(add, "Add") || len(add.Inputs) != 2 {
		return nil
	}
	sum := out0(add)
	if sum == nil || len(sum.Shape) < 3 || len(sum.Shape) > 4 || !isFloat(sum.Type) {
		return nil
	}
	for i, y := range add.Inputs {
		if y == nil {
			continue
		}
		c := y.Producer
		rv := add.Inputs[1-i]
		if !r.dev(c, "Conv") || len(c.Inputs) < 2 || in(c, 0) == nil || in(c, 1) == nil || !onlyUse(g, y, add) ||
			rv == nil || rv == y || rv.Type != sum.Type || y.Type != sum.Type ||
			!shapeEqual(rv.Shape, sum.Shape) || !shapeEqual(y.Shape, sum.Shape) {
			continue
		}
		body := []*graph.Node{c, add}
		out := sum
		var (
			act        string
			alpha, bet float64
		)
		if a, al, be, tail, o, ok := r.activation(sum); ok {
			act, alpha, bet, out = a, al, be, o
			body = append(body, tail...)
		}
		name := nameNear(c, tlite.ConvAct)
		if c.Name != "" {
			name = c.Name + "+Add"
			if act != "" {
				name += "+" + body[len(body)-1].OpType
			}
		}
		ins := []*graph.Value{c.Inputs[0], c.Inputs[1], in(c, 2), rv}
		n := r.convActNode(c, name, ins, []*graph.Value{out})
		setActivation(n, act, alpha, bet)
		return r.replace(body, n, nil)
	}
	return nil
}
