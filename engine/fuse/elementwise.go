package fuse

import (
	"fmt"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// Elementwise groups connected element-wise device nodes (those ok accepts)
// into ("tlite", "FusedElementwise") nodes whose GRAPH attribute "body"
// holds them: one kernel computes the whole group. A group is grown greedily
// in graph order, merging a node with the groups of its producers while
//
//   - every value the group writes for readers outside it (or as a graph
//     output) has one shape S, and every value it reads or computes
//     provably broadcasts to S: the kernel runs over S and recomputes
//     smaller values per element, which is exact for element-wise ops;
//   - no path leaves the group and comes back into it, which would make
//     the fused node depend on itself.
//
// Groups of one node stay as they are. Run this pass last, so that the
// patterns of the other passes match first.
func Elementwise(g *graph.Graph, res *infer.Result, ok func(*graph.Node) bool) error {
	r := newRewriter(g, res)
	pos := make(map[*graph.Node]int, len(g.Nodes))
	for i, n := range g.Nodes {
		pos[n] = i
	}
	cand := map[*graph.Node]bool{}
	for _, n := range g.Nodes {
		if r.dev(n) && len(n.Outputs) == 1 && len(n.Subgraphs()) == 0 && out0(n) != nil && out0(n).Shape != nil &&
			used(g, out0(n)) && ok(n) {
			cand[n] = true
		}
	}
	e := &ewGrouper{g: g, pos: pos, group: map[*graph.Node]*ewGroup{}}
	var groups []*ewGroup
	for _, n := range g.Nodes {
		if !cand[n] {
			continue
		}
		grp := &ewGroup{set: map[*graph.Node]bool{n: true}, members: []*graph.Node{n}}
		e.group[n] = grp
		groups = append(groups, grp)
		for _, v := range n.Inputs {
			if v == nil || !cand[v.Producer] {
				continue
			}
			if pg := e.group[v.Producer]; pg != e.group[n] {
				e.tryMerge(pg, e.group[n])
			}
		}
	}
	k := 0
	for _, grp := range groups {
		if grp.dead || len(grp.members) < 2 {
			continue
		}
		if err := r.fuseGroup(grp, k, e.pos); err != nil {
			return err
		}
		k++
	}
	return r.finish()
}

// Limits of one fused kernel. Each input costs a buffer, an offset and
// strides in the kernel's arguments, and OpenCL guarantees 1 KiB of them
// (CL_DEVICE_MAX_PARAMETER_SIZE); the chain kernels broadcast over at most
// six dimensions.
const (
	maxGroupInputs  = 16
	maxGroupOutputs = 8
	maxGroupRank    = 6
)

// ewGroup is a set of element-wise nodes being grown into one kernel.
type ewGroup struct {
	set     map[*graph.Node]bool
	members []*graph.Node
	dead    bool // merged into another group
}

type ewGrouper struct {
	g     *graph.Graph
	pos   map[*graph.Node]int
	group map[*graph.Node]*ewGroup
}

// tryMerge merges b into a when the union is a valid group.
func (e *ewGrouper) tryMerge(a, b *ewGroup) {
	set := make(map[*graph.Node]bool, len(a.set)+len(b.set))
	for n := range a.set {
		set[n] = true
	}
	for n := range b.set {
		set[n] = true
	}
	if _, _, ok := groupIO(e.g, set); !ok || e.cyclic(set) {
		return
	}
	for n := range b.set {
		a.set[n] = true
		e.group[n] = a
	}
	a.members = append(a.members, b.members...)
	b.dead = true
}

// groupIO returns the values a group reads from outside and the values it
// writes for readers outside it, and whether their shapes fit one kernel.
func groupIO(g *graph.Graph, set map[*graph.Node]bool) (ins, outs []*graph.Value, ok bool) {
	seen := map[*graph.Value]bool{}
	var vals []*graph.Value
	for n := range set {
		for _, v := range n.Inputs {
			if v == nil {
				continue
			}
			vals = append(vals, v)
			if !set[v.Producer] && !seen[v] {
				seen[v] = true
				ins = append(ins, v)
			}
		}
		for _, v := range n.Outputs {
			vals = append(vals, v)
			ext := isOutput(g, v)
			for _, c := range v.Consumers {
				ext = ext || !set[c]
			}
			if ext {
				outs = append(outs, v)
			}
		}
	}
	if len(outs) == 0 || len(ins) > maxGroupInputs || len(outs) > maxGroupOutputs {
		return nil, nil, false
	}
	s := outs[0].Shape
	if len(s) > maxGroupRank {
		return nil, nil, false
	}
	for _, o := range outs[1:] {
		if !shapeEqual(o.Shape, s) {
			return nil, nil, false
		}
	}
	for _, v := range vals {
		if !broadcastsTo(v.Shape, s) {
			return nil, nil, false
		}
	}
	for n := range set {
		if costlyElementwise[n.OpType] && recomputed(n.Outputs[0].Shape, s) {
			return nil, nil, false
		}
	}
	return ins, outs, true
}

// costlyElementwise are the element-wise ops whose per-element cost is a
// transcendental function, many times an add's.
var costlyElementwise = map[string]bool{
	"Sigmoid": true, "Tanh": true, "Exp": true, "Log": true, "Erf": true, "Pow": true,
	"Softplus": true, "Gelu": true, "Mish": true, "Elu": true, "Selu": true, "Celu": true,
	"Sin": true, "Cos": true,
}

// recomputed reports whether a value of shape v, broadcast to the group's
// shape s, is smaller than s, so the fused kernel would compute it again
// for every element of s. A costly op is then left out of the group: the
// squeeze-excite gate sigmoid(fc(x)) of shape [N, C, 1, 1] times x of
// [N, C, H, W] computed H*W sigmoids per channel in one kernel, where its
// own launch computes one.
func recomputed(v, s []symshape.Expr) bool {
	off := len(s) - len(v)
	if off < 0 {
		return false
	}
	for i := 0; i < off; i++ {
		if !isOne(s[i]) {
			return true
		}
	}
	for i, d := range v {
		if isOne(d) && !isOne(s[off+i]) {
			return true
		}
	}
	return false
}

// cyclic reports whether some path leaves set and re-enters it. Nodes
// after the last member cannot lead back, which bounds the search.
func (e *ewGrouper) cyclic(set map[*graph.Node]bool) bool {
	last := 0
	for n := range set {
		last = max(last, e.pos[n])
	}
	seen := map[*graph.Node]bool{}
	var stack []*graph.Node
	push := func(from *graph.Node, inside bool) {
		for _, v := range from.Outputs {
			if v == nil {
				continue
			}
			for _, c := range v.Consumers {
				if set[c] {
					if !inside {
						stack = append(stack, nil) // marks re-entry
					}
					continue
				}
				if !seen[c] && e.pos[c] < last {
					seen[c] = true
					stack = append(stack, c)
				}
			}
		}
	}
	for n := range set {
		push(n, true)
	}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n == nil {
			return true
		}
		push(n, false)
	}
	return false
}

// fuseGroup replaces a group by one FusedElementwise node.
// pos is the graph order before the pass: replacements keep the relative
// order of the nodes they leave.
func (r *rewriter) fuseGroup(grp *ewGroup, k int, pos map[*graph.Node]int) error {
	g := r.g
	members := append([]*graph.Node(nil), grp.members...)
	sortByPos(members, pos)
	ins, outs, ok := groupIO(g, grp.set)
	if !ok {
		return nil
	}
	// Inputs and outputs in graph order, for readable bodies.
	ins = orderValues(ins, members)
	outs = orderValues(outs, members)
	name := r.uniqueName(nameNear(members[len(members)-1], fmt.Sprintf("FusedElementwise_%d", k)))
	body, err := buildBody(name, members, ins, outs)
	if err != nil {
		return err
	}
	n := &graph.Node{Name: name, OpType: "FusedElementwise", Domain: tlite.Domain, Inputs: ins, Outputs: outs, Attrs: map[string]*graph.Attr{}}
	n.SetAttr(&graph.Attr{Name: "body", Kind: graph.KindGraph, G: body})
	return r.replace(members, n, nil)
}

// orderValues sorts vs by where the members first read or write them.
func orderValues(vs []*graph.Value, members []*graph.Node) []*graph.Value {
	rank := map[*graph.Value]int{}
	i := 0
	for _, n := range members {
		for _, v := range append(append([]*graph.Value(nil), n.Inputs...), n.Outputs...) {
			if _, ok := rank[v]; v != nil && !ok {
				rank[v] = i
				i++
			}
		}
	}
	out := append([]*graph.Value(nil), vs...)
	for a := 1; a < len(out); a++ {
		for b := a; b > 0 && rank[out[b-1]] > rank[out[b]]; b-- {
			out[b-1], out[b] = out[b], out[b-1]
		}
	}
	return out
}

// buildBody makes the body graph of a fused node: formal inputs standing
// for ins (by position), copies of the member nodes, and outputs standing
// for outs. Body values are named "<fused node>|<original name>" so that
// no body name shadows a value of the enclosing graph.
func buildBody(name string, members []*graph.Node, ins, outs []*graph.Value) (*graph.Graph, error) {
	body, err := emptyGraph(name + "/body")
	if err != nil {
		return nil, err
	}
	local := map[*graph.Value]*graph.Value{}
	mk := func(v *graph.Value) *graph.Value {
		bv := body.NewValue(name + "|" + v.Name)
		bv.Type, bv.Shape = v.Type, append([]symshape.Expr(nil), v.Shape...)
		local[v] = bv
		return bv
	}
	for _, v := range ins {
		body.Inputs = append(body.Inputs, mk(v))
	}
	for _, n := range members {
		bn := &graph.Node{Name: n.Name, OpType: n.OpType, Domain: n.Domain, Doc: n.Doc, Attrs: map[string]*graph.Attr{}}
		for k, a := range n.Attrs {
			bn.Attrs[k] = a
		}
		for _, v := range n.Inputs {
			if v == nil {
				bn.Inputs = append(bn.Inputs, nil)
				continue
			}
			bv := local[v]
			if bv == nil {
				return nil, fmt.Errorf("fuse: body of %s: %v reads %q, which is neither an input nor computed before", name, n, v.Name)
			}
			bn.Inputs = append(bn.Inputs, bv)
		}
		for _, v := range n.Outputs {
			bn.Outputs = append(bn.Outputs, mk(v))
		}
		if err := body.AddNode(bn); err != nil {
			return nil, fmt.Errorf("fuse: body of %s: %w", name, err)
		}
	}
	for _, v := range outs {
		body.Outputs = append(body.Outputs, local[v])
	}
	if err := body.Validate(); err != nil {
		return nil, fmt.Errorf("fuse: body of %s: %w", name, err)
	}
	return body, nil
}

// emptyGraph returns a new graph with no nodes. The graph package builds
// graphs only from ONNX bytes, so this parses a ModelProto holding just a
// GraphProto with a name; the graph is then filled with NewValue and
// AddNode, and attached to a node, which links it to the enclosing graph.
func emptyGraph(name string) (*graph.Graph, error) {
	if len(name) > 100 {
		name = name[len(name)-100:]
	}
	gp := append([]byte{0x12, byte(len(name))}, name...) // GraphProto.name (field 2)
	mp := append([]byte{0x3a, byte(len(gp))}, gp...)     // ModelProto.graph (field 7)
	m, err := graph.Parse(mp, "")
	if err != nil {
		return nil, fmt.Errorf("fuse: making an empty graph: %w", err)
	}
	return m.Graph, nil
}
