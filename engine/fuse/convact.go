package fuse

import (
	"math"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape/infer"
)

// ConvAct moves the activation that is a 1-D or 2-D Conv's only reader
// into the convolution's epilogue, so the output is written once:
//
//	Conv -> Relu | Clip | HardSwish | HardSigmoid | LeakyRelu
//	Conv -> Sigmoid, Mul(conv, sigmoid)          (SiLU)
//
// becomes ("tlite", "ConvAct") with the Conv's inputs and attributes plus
// activation, act_alpha and act_beta (graph/tlite documents them). A Clip
// fuses only when its bounds are constants.
func ConvAct(g *graph.Graph, res *infer.Result) error {
	r := newRewriter(g, res)
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Graph() != g {
			continue
		}
		if err := r.convAct(n); err != nil {
			return err
		}
	}
	return r.finish()
}

func (r *rewriter) convAct(c *graph.Node) error {
	g := r.g
	if !r.dev(c, "Conv") || len(c.Inputs) < 2 || in(c, 0) == nil || in(c, 1) == nil {
		return nil
	}
	y := out0(c)
	if y == nil || len(y.Shape) < 3 || len(y.Shape) > 4 || !isFloat(y.Type) || isOutput(g, y) {
		return nil
	}
	act, alpha, bet, tail, out, ok := r.activation(y)
	if !ok {
		return nil
	}
	body := append([]*graph.Node{c}, tail...)
	// Named after the user's Conv and activation, so plan and error
	// messages still point at the nodes the model's author wrote.
	name := nameNear(c, tlite.ConvAct)
	if c.Name != "" {
		name = c.Name + "+" + body[len(body)-1].OpType
	}
	n := r.convActNode(c, name, append([]*graph.Value(nil), c.Inputs...), []*graph.Value{out})
	setActivation(n, act, alpha, bet)
	return r.replace(body, n, nil)
}

// convActNode makes the ConvAct that replaces c (a Conv or a ConvAct,
// whose attributes it takes, activation included) with the given inputs
// and outputs. ConvAct, ConvResidual and ConvScale all build theirs here.
func (r *rewriter) convActNode(c *graph.Node, name string, ins, outs []*graph.Value) *graph.Node {
	n := r.newNode(tlite.ConvAct, name, ins, outs)
	for k, v := range c.Attrs {
		n.Attrs[k] = v
	}
	if n.Attr("activation") == nil {
		setActivation(n, "", 0, 0)
	}
	return n
}

// setActivation sets a ConvAct's activation attributes.
func setActivation(n *graph.Node, act string, alpha, bet float64) {
	n.SetAttr(&graph.Attr{Name: "activation", Kind: graph.KindString, S: act})
	setFloat(n, "act_alpha", alpha)
	setFloat(n, "act_beta", bet)
}

// activation matches the activation that is y's only reader (Relu,
// HardSwish, HardSigmoid, LeakyRelu, Clip with constant bounds, or SiLU
// written as Mul(y, Sigmoid(y))): its name and parameters as ConvAct's
// attributes, its nodes, and its output, of y's shape and type.
func (r *rewriter) activation(y *graph.Value) (act string, alpha, bet float64, body []*graph.Node, out *graph.Value, ok bool) {
	if a := soleConsumer(r.g, y); r.dev(a, "Relu", "HardSwish", "HardSigmoid", "LeakyRelu", "Clip") {
		act, out = a.OpType, out0(a)
		switch act {
		case "HardSigmoid":
			alpha, bet = float64(a.AttrFloat("alpha", 0.2)), float64(a.AttrFloat("beta", 0.5))
		case "LeakyRelu":
			alpha = float64(a.AttrFloat("alpha", 0.01))
		case "Clip":
			if alpha, bet, ok = clipBounds(a); !ok {
				return "", 0, 0, nil, nil, false
			}
		}
		body = []*graph.Node{a}
	} else if s, m, isSiLU := r.silu(y); isSiLU {
		act, out = "SiLU", out0(m)
		body = []*graph.Node{s, m}
	} else {
		return "", 0, 0, nil, nil, false
	}
	if out == nil || !shapeEqual(out.Shape, y.Shape) || out.Type != y.Type {
		return "", 0, 0, nil, nil, false
	}
	return act, alpha, bet, body, out, true
}

// silu matches y's two readers Sigmoid(y) and Mul(y, Sigmoid(y)), the
// sigmoid read by the Mul alone.
func (r *rewriter) silu(y *graph.Value) (sig, mul *graph.Node, ok bool) {
	if len(y.Consumers) != 2 {
		return nil, nil, false
	}
	for _, s := range y.Consumers {
		if !r.dev(s, "Sigmoid") {
			continue
		}
		m := soleConsumer(r.g, out0(s))
		if !r.dev(m, "Mul") {
			return nil, nil, false
		}
		if o, isIn := otherInput(m, out0(s)); !isIn || o != y {
			return nil, nil, false
		}
		for _, c := range y.Consumers {
			if c != s && c != m {
				return nil, nil, false
			}
		}
		return s, m, true
	}
	return nil, nil, false
}

// clipBounds reads Clip's bounds: attributes min and max (opset < 11) or
// constant inputs 1 and 2 (later), an absent bound unbounded.
func clipBounds(n *graph.Node) (lo, hi float64, ok bool) {
	lo, hi = -math.MaxFloat32, math.MaxFloat32
	if a := n.Attr("min"); a != nil {
		lo = float64(a.F)
	}
	if a := n.Attr("max"); a != nil {
		hi = float64(a.F)
	}
	if v := in(n, 1); v != nil {
		if lo, ok = scalar(v); !ok {
			return 0, 0, false
		}
	}
	if v := in(n, 2); v != nil {
		if hi, ok = scalar(v); !ok {
			return 0, 0, false
		}
	}
	return lo, hi, true
}
