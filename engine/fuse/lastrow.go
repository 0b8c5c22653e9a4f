package fuse

import (
	"fmt"
	"math"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// LastRowResult says what LastRow changed.
type LastRowResult struct {
	// Output is the logits output now of one row per sequence; "" when the
	// pass found nothing to do (a graph it does not recognise, or a
	// sequence axis that is already 1).
	Output string
	// Head is the product (the LM head) that now runs on the last row.
	Head string
	// Norm is the row-wise norm in front of the head that was moved behind
	// the slice too; "" when the head's input was sliced directly.
	Norm string
}

// LastRow rewrites a decoder so that its LM head runs on the last position
// only: a generator reads nothing else of a prompt's logits, and over a
// long prompt the head (dim x vocab per row) is a large share of prefill.
//
// The logits output is the output called "logits", or the only output
// whose name does not start with "present". It must be produced, through
// Casts and Identities, by a MatMul, MatMulBias or MatMulQ whose data input
// is [batch, seq, dim]; a Slice of the last row of that input is put in
// front of the product, or in front of a row-wise norm (RMSNorm,
// AddRMSNorm, AddLayerNorm, LayerNormalization over the last axis) that
// feeds only the head, so the norm runs on one row as well. The logits
// become [batch, 1, vocab]. Any other graph is left unchanged (Output "").
func LastRow(g *graph.Graph, res *infer.Result) (LastRowResult, error) {
	out := logitsOutput(g)
	if out == nil || len(out.Shape) != 3 {
		return LastRowResult{}, nil
	}
	if k, ok := out.Shape[1].Const(); ok && k == 1 {
		return LastRowResult{}, nil
	}
	// Walk back to the head through storage-only ops.
	chain := []*graph.Value{out}
	head := out.Producer
	for head != nil && (is(head, "Identity") || floatCastInput(head) != nil) {
		v := in(head, 0)
		if v == nil || soleConsumer(g, v) != head {
			return LastRowResult{}, nil
		}
		chain = append(chain, v)
		head = v.Producer
	}
	if head == nil || !(is(head, "MatMul") || isTlite(head, tlite.MatMulBias) || isTlite(head, tlite.MatMulQ)) {
		return LastRowResult{}, nil
	}
	if res != nil && res.Class != nil {
		if c, ok := res.Class[head]; ok && c != infer.Device {
			return LastRowResult{}, nil
		}
	}
	a := in(head, 0)
	if a == nil || len(a.Shape) != 3 || !a.Shape[1].Equal(out.Shape[1]) {
		return LastRowResult{}, nil
	}
	for _, v := range chain {
		if len(v.Shape) != 3 {
			return LastRowResult{}, nil
		}
	}
	r := LastRowResult{Output: out.Name, Head: head.Name}
	// The node whose rank-3 [batch, seq, dim] inputs get sliced.
	target, targetIns := head, []int{0}
	if norm := a.Producer; norm != nil && soleConsumer(g, a) == head && rowWise(g, norm, a) {
		target, targetIns = norm, nil
		for i, v := range norm.Inputs {
			if v != nil && len(v.Shape) == 3 && sameShape(v.Shape, a.Shape) {
				targetIns = append(targetIns, i)
			}
		}
		r.Norm = norm.Name
	}
	starts, err := constInt64(g, "last_row_start", -1)
	if err != nil {
		return LastRowResult{}, err
	}
	ends, err := constInt64(g, "last_row_end", math.MaxInt64)
	if err != nil {
		return LastRowResult{}, err
	}
	axes, err := constInt64(g, "last_row_axis", 1)
	if err != nil {
		return LastRowResult{}, err
	}
	one := symshape.Const(1)
	for _, i := range targetIns {
		x := target.Inputs[i]
		sv := g.NewValue(x.Name + "_last")
		sv.Type = x.Type
		sv.Shape = []symshape.Expr{x.Shape[0], one, x.Shape[2]}
		sl := &graph.Node{OpType: "Slice", Inputs: []*graph.Value{x, starts, ends, axes}, Outputs: []*graph.Value{sv}}
		if err := g.AddNode(sl); err != nil {
			return LastRowResult{}, fmt.Errorf("last-row slice of %q: %w", x.Name, err)
		}
		if res != nil && res.Class != nil {
			res.Class[sl] = infer.Device
		}
		// Rewire only the target's read: other readers keep every row.
		target.Inputs[i] = sv
		x.Consumers = without(x.Consumers, target)
		sv.Consumers = append(sv.Consumers, target)
	}
	if target != head {
		for _, o := range target.Outputs {
			if o != nil && len(o.Shape) == 3 {
				o.Shape = []symshape.Expr{o.Shape[0], one, o.Shape[2]}
			}
		}
	}
	for _, v := range chain {
		v.Shape = []symshape.Expr{v.Shape[0], one, v.Shape[2]}
	}
	// AddNode put each slice right after its input's producer, so before
	// the node it now feeds: the order stays topological.
	return r, nil
}

// logitsOutput is the output called "logits", else the only output that
// is not a "present" cache tensor.
func logitsOutput(g *graph.Graph) *graph.Value {
	var only *graph.Value
	n := 0
	for _, o := range g.Outputs {
		if o.Name == "logits" {
			return o
		}
		if len(o.Name) >= 7 && o.Name[:7] == "present" {
			continue
		}
		only, n = o, n+1
	}
	if n == 1 {
		return only
	}
	return nil
}

// isTlite reports whether n is the tlite-domain op.
func isTlite(n *graph.Node, op string) bool {
	return n != nil && n.Domain == tlite.Domain && n.OpType == op
}

// rowWise reports whether norm computes each row of y (its output a) from
// the same row of its inputs alone, with no other output in use, so it
// may run on the last row only.
func rowWise(g *graph.Graph, norm *graph.Node, y *graph.Value) bool {
	switch {
	case isTlite(norm, tlite.RMSNorm):
	case isTlite(norm, tlite.AddRMSNorm), isTlite(norm, tlite.AddLayerNorm), is(norm, "LayerNormalization"):
		if ax := norm.AttrInt("axis", -1); ax != -1 && ax != int64(len(y.Shape)-1) {
			return false
		}
	default:
		return false
	}
	for _, o := range norm.Outputs {
		if o != nil && o != y && used(g, o) {
			return false
		}
	}
	// Every data input must be a full [batch, seq, dim] tensor (parameters
	// are rank 1); a broadcast input would need its own handling.
	for _, v := range norm.Inputs {
		if v != nil && len(v.Shape) > 1 && !sameShape(v.Shape, y.Shape) {
			return false
		}
	}
	return true
}

func without(ns []*graph.Node, n *graph.Node) []*graph.Node {
	out := ns[:0]
	for _, m := range ns {
		if m != n {
			out = append(out, m)
		}
	}
	return out
}

// sameShape reports whether two shapes are equal dim by dim.
func sameShape(a, b []symshape.Expr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}
