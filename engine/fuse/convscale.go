package fuse

import (
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape/infer"
)

// ConvScale folds squeeze-excite's channel Mul into the 1x1 convolution
// that reads its product, so the scaled activation is never written:
//
//	Mul(x, s) -> Conv | ConvAct (1x1, stride 1, no padding)
//
// with x [N, C, H, W] and s [N, C, 1, 1] (either operand order) becomes
// ("tlite", "ConvAct") reading x, with s as input 4 (the input scale) and
// the convolution's other inputs and attributes kept (a plain Conv gets
// activation ""). The Mul's product must be read by the convolution alone,
// as its input. It runs after ConvAct and ConvResidual, whose Convs it
// takes as they left them.
func ConvScale(g *graph.Graph, res *infer.Result) error {
	r := newRewriter(g, res)
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Graph() != g {
			continue
		}
		if err := r.convScale(n); err != nil {
			return err
		}
	}
	return r.finish()
}

func (r *rewriter) convScale(m *graph.Node) error {
	if !r.dev(m, "Mul") || len(m.Inputs) != 2 {
		return nil
	}
	xs := out0(m)
	c := soleConsumer(r.g, xs)
	if c == nil || c.Graph() != r.g || !r.device(c) || in(c, 0) != xs || in(c, 1) == nil || in(c, 4) != nil {
		return nil
	}
	if !is(c, "Conv") && !(c.Domain == tlite.Domain && c.OpType == tlite.ConvAct) {
		return nil
	}
	for i := 1; i < len(c.Inputs); i++ {
		if c.Inputs[i] == xs {
			return nil
		}
	}
	if !plain1x1(c) {
		return nil
	}
	for i, x := range m.Inputs {
		s := m.Inputs[1-i]
		if x == nil || s == nil || x == s || len(x.Shape) != 4 || len(s.Shape) != 4 || x.Type != xs.Type || s.Type != xs.Type ||
			!shapeEqual(x.Shape, xs.Shape) || !x.Shape[0].Equal(s.Shape[0]) || !x.Shape[1].Equal(s.Shape[1]) ||
			!isOne(s.Shape[2]) || !isOne(s.Shape[3]) {
			continue
		}
		ins := make([]*graph.Value, 5)
		copy(ins, c.Inputs)
		ins[0], ins[4] = x, s
		name := c.Name
		if name == "" {
			name = nameNear(c, tlite.ConvAct)
		}
		n := r.convActNode(c, "Mul+"+name, ins, append([]*graph.Value(nil), c.Outputs...))
		return r.replace([]*graph.Node{m, c}, n, nil)
	}
	return nil
}

// plain1x1 reports whether convolution c has a constant [OC, C/G, 1, 1]
// weight, strides and dilations of 1 and no padding: a product on each
// image's [C, H*W] planes, the geometry the kernels fold an input scale
// into.
func plain1x1(c *graph.Node) bool {
	w := in(c, 1)
	if w == nil || len(w.Shape) != 4 || !isOne(w.Shape[2]) || !isOne(w.Shape[3]) {
		return false
	}
	for _, name := range []string{"strides", "dilations"} {
		if v, ok := c.AttrInts(name); ok {
			for _, k := range v {
				if k != 1 {
					return false
				}
			}
		}
	}
	if v, ok := c.AttrInts("pads"); ok {
		for _, k := range v {
			if k != 0 {
				return false
			}
		}
	}
	switch c.AttrString("auto_pad", "NOTSET") {
	case "NOTSET", "VALID":
		return true
	}
	return false
}
