package fuse

import (
	"fmt"
	"math"
	"slices"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// LastRowResult says what LastRow or LastRowOf changed.
type LastRowResult struct {
	// Output is the output now of one row; "" when the pass did nothing
	// (its producer is not row-wise, or its row axis is already 1).
	Output string
	// Head is the last matrix product (the LM head of a decoder) that now
	// runs on one row; "" when none moved.
	Head string
	// Norm is the last row-wise norm that now runs on one row; "" when
	// none moved.
	Norm string
	// Nodes are every node that now runs on one row, in graph order.
	Nodes []string
	// Sliced are the values whose last row is taken in front of those
	// nodes.
	Sliced []string
}

// LastRow rewrites a decoder so that its logits are computed for the last
// position only (LastRowOf on the logits output): a generator reads
// nothing else of a prompt's logits, and over a long prompt the LM head
// (dim x vocab per row) is a large share of prefill. The logits output is
// the output called "logits", or else the only output whose name does not
// start with "present". A graph without one is left unchanged.
func LastRow(g *graph.Graph, res *infer.Result) (LastRowResult, error) {
	out := logitsOutput(g)
	if out == nil {
		return LastRowResult{}, nil
	}
	return LastRowOf(g, res, out.Name)
}

// LastRowOf rewrites g so that output name holds only the last row of what
// it held: the last index of its second-to-last axis (for [batch, seq,
// vocab] logits, the last position of each sequence).
//
// The row is pushed back through the nodes that compute each row of their
// outputs from the same row of their inputs alone, so those nodes run on
// one row:
//   - a matrix product (MatMul, MatMulBias, MatMulQ) whose B is a constant;
//   - a norm over the last axis (RMSNorm, AddRMSNorm, AddLayerNorm,
//     LayerNormalization);
//   - Softmax and LogSoftmax over the last axis;
//   - element-wise ops and fused element-wise chains whose other inputs
//     broadcast along the row axis (size 1 there, or of lower rank);
//   - Casts and Identities.
//
// A node joins only when everything that reads its outputs has joined (or
// it is the output), so a value someone else still reads in full is never
// shrunk: a Slice of its last row is put in front of the joined nodes
// instead. An output whose producer is not row-wise is left unchanged
// (Output ""): the full computation stands.
func LastRowOf(g *graph.Graph, res *infer.Result, name string) (LastRowResult, error) {
	out := g.Value(name)
	if out == nil || !isOutput(g, out) {
		return LastRowResult{}, fmt.Errorf("last row: %q is not an output of the graph", name)
	}
	r := len(out.Shape)
	if r < 2 {
		return LastRowResult{}, nil
	}
	if k, ok := out.Shape[r-2].Const(); ok && k == 1 {
		return LastRowResult{}, nil
	}
	if len(out.Consumers) > 0 || out.Producer == nil {
		// Another node reads every row of it, or it is an input.
		return LastRowResult{}, nil
	}
	// The region: nodes that will run on one row. Walk the graph backward
	// so that every reader of a node's outputs is decided before it.
	region := map[*graph.Node]bool{}
	nodes := g.Nodes
	for i := len(nodes) - 1; i >= 0; i-- {
		n := nodes[i]
		if !rowWiseNode(g, res, n, out) {
			continue
		}
		feeds := false
		ok := true
		for _, o := range n.Outputs {
			if o == nil || !used(g, o) {
				continue
			}
			if o == out {
				feeds = true
				continue
			}
			if isOutput(g, o) {
				ok = false
				break
			}
			for _, c := range o.Consumers {
				if !region[c] {
					ok = false
					break
				}
			}
			feeds = true
		}
		if ok && feeds {
			region[n] = true
		}
	}
	if !region[out.Producer] {
		return LastRowResult{}, nil
	}
	starts, err := constInt64(g, "last_row_start", -1)
	if err != nil {
		return LastRowResult{}, err
	}
	ends, err := constInt64(g, "last_row_end", math.MaxInt64)
	if err != nil {
		return LastRowResult{}, err
	}
	res2 := LastRowResult{Output: out.Name}
	one := symshape.Const(1)
	slices_ := map[*graph.Value]*graph.Value{}
	var order []*graph.Node
	for _, n := range nodes {
		if region[n] {
			order = append(order, n)
		}
	}
	for _, n := range order {
		res2.Nodes = append(res2.Nodes, n.Name)
		switch {
		case is(n, "MatMul") || isTlite(n, tlite.MatMulBias) || isTlite(n, tlite.MatMulQ):
			res2.Head = n.Name
		case isNorm(n):
			res2.Norm = n.Name
		}
		for i, x := range n.Inputs {
			if !rowInput(n, i) || !carriesRows(x) || (x.Producer != nil && region[x.Producer]) {
				continue
			}
			sv := slices_[x]
			if sv == nil {
				rk := len(x.Shape)
				axes, err := constInt64(g, "last_row_axis", int64(rk-2))
				if err != nil {
					return LastRowResult{}, err
				}
				sv = g.NewValue(x.Name + "_last")
				sv.Type = x.Type
				sv.Shape = slices.Clone(x.Shape)
				sv.Shape[rk-2] = one
				sl := &graph.Node{OpType: "Slice", Inputs: []*graph.Value{x, starts, ends, axes}, Outputs: []*graph.Value{sv}}
				if err := g.AddNode(sl); err != nil {
					return LastRowResult{}, fmt.Errorf("last-row slice of %q: %w", x.Name, err)
				}
				if res != nil && res.Class != nil {
					res.Class[sl] = infer.Device
				}
				slices_[x] = sv
				res2.Sliced = append(res2.Sliced, x.Name)
			}
			// Rewire only this read: readers outside the region keep
			// every row.
			n.Inputs[i] = sv
			x.Consumers = without(x.Consumers, n)
			if !slices.Contains(sv.Consumers, n) {
				sv.Consumers = append(sv.Consumers, n)
			}
		}
		for _, o := range n.Outputs {
			if o != nil && len(o.Shape) >= 2 {
				o.Shape = slices.Clone(o.Shape)
				o.Shape[len(o.Shape)-2] = one
			}
		}
	}
	// AddNode put each slice right after its input's producer, so before
	// the node it now feeds: the order stays topological.
	return res2, nil
}

// rowInput reports whether input i of a row-wise node is read row by row
// (a matrix product's B and bias are not: they are the same for every
// row).
func rowInput(n *graph.Node, i int) bool {
	if is(n, "MatMul") || isTlite(n, tlite.MatMulBias) || isTlite(n, tlite.MatMulQ) {
		return i == 0
	}
	return true
}

// carriesRows reports whether x varies along its row axis (the
// second-to-last): a value of rank >= 2 whose row dim is not the constant 1.
func carriesRows(x *graph.Value) bool {
	if x == nil || len(x.Shape) < 2 {
		return false
	}
	k, ok := x.Shape[len(x.Shape)-2].Const()
	return !ok || k != 1
}

// isConst reports whether v is fixed ahead of the run: an initializer, a
// Constant's output, or computed from constants alone (a transposed tied
// embedding, say), which the engine folds at load.
func isConst(g *graph.Graph, res *infer.Result, v *graph.Value) bool {
	if v == nil {
		return false
	}
	if v.Const != nil {
		return true
	}
	if v.Outer {
		return false
	}
	if v.Producer != nil {
		if res == nil || res.Class == nil {
			return false
		}
		c, ok := res.Class[v.Producer]
		return ok && (c == infer.Folded || c == infer.ConstFold)
	}
	for _, in := range g.Inputs {
		if in == v {
			return false
		}
	}
	return true
}

// isNorm reports whether n is a norm over its input's last axis.
func isNorm(n *graph.Node) bool {
	switch {
	case isTlite(n, tlite.RMSNorm):
		return true
	case isTlite(n, tlite.AddRMSNorm), isTlite(n, tlite.AddLayerNorm), is(n, "LayerNormalization"):
		x := in(n, 0)
		if x == nil || len(x.Shape) == 0 {
			return false
		}
		ax := n.AttrInt("axis", -1)
		return ax == -1 || ax == int64(len(x.Shape)-1)
	}
	return false
}

// rowWiseOps are the default-domain ops that compute each element from
// the same element of their (broadcast) inputs.
var rowWiseOps = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true,
	"Neg": true, "Abs": true, "Sqrt": true, "Reciprocal": true, "Exp": true, "Log": true,
	"Relu": true, "LeakyRelu": true, "Elu": true, "Selu": true, "Sigmoid": true, "HardSigmoid": true,
	"HardSwish": true, "Tanh": true, "Erf": true, "Gelu": true, "Softplus": true, "Softsign": true,
	"Clip": true, "Min": true, "Max": true, "Where": true, "Cast": true, "Identity": true,
	"Sin": true, "Cos": true, "Floor": true, "Ceil": true, "Round": true, "Sign": true,
}

// rowWiseNode reports whether n computes row i of each output from row i
// of its inputs alone, so it may run on the last row only: see LastRowOf
// for the ops. Every input that varies along the row axis must have the
// output's rank and row dim; the rest must broadcast along it.
func rowWiseNode(g *graph.Graph, res *infer.Result, n *graph.Node, target *graph.Value) bool {
	if res != nil && res.Class != nil {
		if c, ok := res.Class[n]; ok && c != infer.Device {
			return false
		}
	}
	// (No op below has a subgraph but FusedElementwise, whose body is
	// element-wise by construction.)
	// Rows are those of the target's row axis (the same symbol, "seq"
	// say), whatever the rank. y is the first output in use (AddRMSNorm's
	// optional sum may be absent).
	var y *graph.Value
	for _, o := range n.Outputs {
		if o != nil && used(g, o) {
			y = o
			break
		}
	}
	if !carriesRows(y) || !y.Shape[len(y.Shape)-2].Equal(target.Shape[len(target.Shape)-2]) {
		return false
	}
	r := len(y.Shape)
	rowDim := y.Shape[r-2]
	for _, o := range n.Outputs {
		if o != nil && used(g, o) && (len(o.Shape) != r || !o.Shape[r-2].Equal(rowDim)) {
			return false
		}
	}
	switch {
	case is(n, "MatMul") || isTlite(n, tlite.MatMulBias) || isTlite(n, tlite.MatMulQ):
		a, b := in(n, 0), in(n, 1)
		if a == nil || len(a.Shape) != r || !a.Shape[r-2].Equal(rowDim) || !isConst(g, res, b) {
			return false
		}
		if !isTlite(n, tlite.MatMulQ) && len(b.Shape) > 2 {
			return false // a batched B is not one matrix for every row
		}
		if bias := in(n, 2); bias != nil && carriesRows(bias) {
			return false
		}
		return true
	case isNorm(n), (is(n, "Softmax", "LogSoftmax") && lastAxis(n)):
	case isTlite(n, tlite.FusedElementwise):
	case n.Domain == "" && rowWiseOps[n.OpType]:
	default:
		return false
	}
	for _, x := range n.Inputs {
		if x == nil || !carriesRows(x) {
			continue
		}
		if len(x.Shape) != r || !x.Shape[r-2].Equal(rowDim) {
			return false
		}
	}
	return true
}

// lastAxis reports whether a Softmax-like node works on its last axis.
func lastAxis(n *graph.Node) bool {
	x := in(n, 0)
	if x == nil {
		return false
	}
	ax := n.AttrInt("axis", -1)
	return ax == -1 || ax == int64(len(x.Shape)-1)
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
