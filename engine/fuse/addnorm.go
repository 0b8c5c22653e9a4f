package fuse

import (
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape/infer"
)

// AddNorm merges a residual Add into the norm it feeds: a LayerNormalization
// or ("tlite", "RMSNorm") whose input is Add(a, b) of two tensors of the
// norm's shape becomes ("tlite", "AddLayerNorm")(a, b, scale, bias?) or
// ("tlite", "AddRMSNorm")(a, b, scale?), with two outputs: the sum (which
// a decoder carries on as its residual stream; omitted when only the norm
// read it) and the normalised tensor. Run it after RMSNorm and LayerNorm.
func AddNorm(g *graph.Graph, res *infer.Result) error {
	r := newRewriter(g, res)
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Graph() != g {
			continue
		}
		if err := r.addNorm(n); err != nil {
			return err
		}
	}
	return r.finish()
}

func (r *rewriter) addNorm(norm *graph.Node) error {
	g := r.g
	var op string
	switch {
	case norm.Domain == tlite.Domain && norm.OpType == "RMSNorm":
		op = "AddRMSNorm"
	case is(norm, "LayerNormalization"):
		for i := 1; i < len(norm.Outputs); i++ {
			if used(g, norm.Outputs[i]) {
				return nil // Mean and InvStdDev have no place in the fused node
			}
		}
		op = "AddLayerNorm"
	default:
		return nil
	}
	x := in(norm, 0)
	if !r.device(norm) || x == nil || len(norm.Outputs) == 0 {
		return nil
	}
	add := x.Producer
	if !r.dev(add, "Add") || len(add.Inputs) != 2 || !isFloat(x.Type) {
		return nil
	}
	a, b := add.Inputs[0], add.Inputs[1]
	if a == nil || b == nil || !shapeEqual(a.Shape, x.Shape) || !shapeEqual(b.Shape, x.Shape) || !isFloat(a.Type) || !isFloat(b.Type) {
		return nil
	}
	// The sum stays an output when anything else reads it.
	var sum *graph.Value
	if isOutput(g, x) || len(x.Consumers) > 1 {
		sum = x
	}
	ins := append([]*graph.Value{a, b}, norm.Inputs[1:]...)
	for len(ins) > 2 && ins[len(ins)-1] == nil {
		ins = ins[:len(ins)-1]
	}
	outs := []*graph.Value{sum, norm.Outputs[0]}
	// Another reader of the sum could lead into the norm's scale or bias;
	// one node producing the sum and reading them would be a cycle.
	group := map[*graph.Node]bool{add: true, norm: true}
	if sum != nil && r.createsCycle(group, ins, outs) {
		return nil
	}
	n := r.newNode(op, nameNear(norm, op), ins, outs)
	setFloat(n, "epsilon", float64(norm.AttrFloat("epsilon", 1e-5)))
	setInt(n, "axis", norm.AttrInt("axis", -1))
	return r.replace([]*graph.Node{norm, add}, n, nil)
}

// createsCycle reports whether one node reading ins and writing outs, in
// place of the nodes of group, would close a cycle: a value it writes
// reaching, through nodes outside group, a node that computes a value it
// reads.
func (r *rewriter) createsCycle(group map[*graph.Node]bool, ins, outs []*graph.Value) bool {
	targets := map[*graph.Node]bool{}
	for _, v := range ins {
		if v != nil && v.Producer != nil && !group[v.Producer] {
			targets[v.Producer] = true
		}
	}
	if len(targets) == 0 {
		return false
	}
	seen := map[*graph.Node]bool{}
	var stack []*graph.Node
	push := func(v *graph.Value) {
		if v == nil {
			return
		}
		for _, c := range v.Consumers {
			if !group[c] && !seen[c] {
				seen[c] = true
				stack = append(stack, c)
			}
		}
	}
	for _, v := range outs {
		push(v)
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if targets[n] {
			return true
		}
		for _, v := range n.Outputs {
			push(v)
		}
	}
	return false
}
