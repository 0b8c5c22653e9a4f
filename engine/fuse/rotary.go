package fuse

import (
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape/infer"
)

// Rotary replaces the rotary position embedding as Hugging Face modeling
// code writes it and PyTorch exports it,
//
//	x*cos + rotate_half(x)*sin,
//	rotate_half(x) = Concat(Neg(Slice(x, h:, -1)), Slice(x, 0:h, -1), -1)
//
// with h half of x's last dim (either factor order in each Mul and the
// Add), by one ("tlite", "Rotary")(x, cos, sin) node with attribute
// rotary_dim = 2h. The partial form of GPT-NeoX and Phi, which rotates
// the first rd elements of each row and passes the rest through,
//
//	Concat(rotary(Slice(X, 0:rd, -1)), Slice(X, rd:, -1), -1)
//
// becomes Rotary(X, cos, sin) with rotary_dim rd. cos and sin must
// broadcast to the rotated part's shape without enlarging it, and every
// value inside the pattern must be read by the pattern alone; anything
// else (the sign on the other half, the halves swapped, a slice of
// another axis or with unknown bounds, a split off the middle, the
// attribute-bound Slice of opsets before 10) is left as written. Two
// rotations with the same tables (a layer's queries and keys) then merge
// into one Rotary(x, cos, sin, x2) -> y, y2.
func Rotary(g *graph.Graph, res *infer.Result) error {
	r := newRewriter(g, res)
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Graph() != g {
			continue
		}
		if err := r.rotary(n); err != nil {
			return err
		}
	}
	if err := r.pairRotary(); err != nil {
		return err
	}
	return r.finish()
}

// pairRotary merges two Rotary nodes with the same tables and rotary_dim,
// neither feeding the other, into one Rotary(x, cos, sin, x2) -> y, y2: a
// layer's queries and keys rotate in one launch. Each node pairs with the
// next such node in graph order, the pair a layer's Q and K are in the
// exports.
func (r *rewriter) pairRotary() error {
	var single []*graph.Node
	for _, n := range r.g.Nodes {
		if n.Domain == tlite.Domain && n.OpType == tlite.Rotary && len(n.Inputs) == 3 && len(n.Outputs) == 1 {
			single = append(single, n)
		}
	}
	paired := map[*graph.Node]bool{}
	for i, a := range single {
		if paired[a] {
			continue
		}
		for _, b := range single[i+1:] {
			if paired[b] || b.Inputs[1] != a.Inputs[1] || b.Inputs[2] != a.Inputs[2] ||
				b.AttrInt("rotary_dim", 0) != a.AttrInt("rotary_dim", 0) || feeds(a, b) || feeds(b, a) {
				continue
			}
			paired[a], paired[b] = true, true
			n := r.newNode(tlite.Rotary, nameNear(a, tlite.Rotary), []*graph.Value{a.Inputs[0], a.Inputs[1], a.Inputs[2], b.Inputs[0]},
				[]*graph.Value{a.Outputs[0], b.Outputs[0]})
			setInt(n, "rotary_dim", a.AttrInt("rotary_dim", 0))
			if err := r.replace([]*graph.Node{a, b}, n, nil); err != nil {
				return err
			}
			break
		}
	}
	return nil
}

// feeds reports whether an output of a reaches an input of b.
func feeds(a, b *graph.Node) bool {
	seen := map[*graph.Node]bool{}
	stack := []*graph.Node{a}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, v := range n.Outputs {
			if v == nil {
				continue
			}
			for _, c := range v.Consumers {
				if c == b {
					return true
				}
				if !seen[c] {
					seen[c] = true
					stack = append(stack, c)
				}
			}
		}
	}
	return false
}

// rotaryMatch is a matched rotary embedding.
type rotaryMatch struct {
	x, cos, sin, out *graph.Value
	rd               int64
	nodes            []*graph.Node
}

func (r *rewriter) rotary(neg *graph.Node) error {
	m, ok := r.matchRotary(neg)
	if !ok {
		return nil
	}
	r.widenPartial(&m)
	n := r.newNode(tlite.Rotary, nameNear(neg, tlite.Rotary), []*graph.Value{m.x, m.cos, m.sin}, []*graph.Value{m.out})
	setInt(n, "rotary_dim", m.rd)
	return r.replace(m.nodes, n, nil)
}

// matchRotary matches the full-row form around rotate_half's Neg.
func (r *rewriter) matchRotary(neg *graph.Node) (rotaryMatch, bool) {
	g := r.g
	var m rotaryMatch
	if !r.dev(neg, "Neg") || len(neg.Inputs) != 1 || neg.Inputs[0] == nil {
		return m, false
	}
	hiPart := neg.Inputs[0]
	hiSlice := hiPart.Producer
	if !r.dev(hiSlice, "Slice") || !onlyUse(g, hiPart, neg) {
		return m, false
	}
	x := in(hiSlice, 0)
	if x == nil || !isFloat(x.Type) || len(x.Shape) == 0 || len(x.Shape) > 4 {
		return m, false
	}
	rank := len(x.Shape)
	d, ok := x.Shape[rank-1].Const()
	if !ok || d < 2 || d%2 != 0 {
		return m, false
	}
	h := d / 2
	if lo, hi, ok := lastAxisSlice(hiSlice, d); !ok || lo != h || hi != d {
		return m, false
	}
	cat := soleConsumer(g, out0(neg))
	if !r.dev(cat, "Concat") || len(cat.Inputs) != 2 || cat.Inputs[0] != out0(neg) || !isLastAxis(cat.AttrInt("axis", 0), rank) {
		return m, false
	}
	loPart := cat.Inputs[1]
	loSlice := loPart.Producer
	if !r.dev(loSlice, "Slice") || in(loSlice, 0) != x || !onlyUse(g, loPart, cat) {
		return m, false
	}
	if lo, hi, ok := lastAxisSlice(loSlice, d); !ok || lo != 0 || hi != h {
		return m, false
	}
	rot := out0(cat)
	if !shapeEqual(rot.Shape, x.Shape) {
		return m, false
	}
	mulSin := soleConsumer(g, rot)
	sin, ok := r.table(mulSin, rot, x)
	if !ok {
		return m, false
	}
	add := soleConsumer(g, out0(mulSin))
	if !r.dev(add, "Add") {
		return m, false
	}
	xc, _ := otherInput(add, out0(mulSin))
	if xc == nil || xc == out0(mulSin) || !onlyUse(g, xc, add) {
		return m, false
	}
	mulCos := xc.Producer
	if !r.dev(mulCos, "Mul") {
		return m, false
	}
	if other, isIn := otherInput(mulCos, x); !isIn || other == x {
		return m, false
	}
	cos, ok := r.table(mulCos, x, x)
	if !ok || !shapeEqual(out0(add).Shape, x.Shape) || out0(add).Type != x.Type || !used(g, out0(add)) {
		return m, false
	}
	return rotaryMatch{x: x, cos: cos, sin: sin, out: out0(add), rd: d,
		nodes: []*graph.Node{hiSlice, neg, loSlice, cat, mulSin, mulCos, add}}, true
}

// table matches mul = Mul(v, t) (either order) keeping x's shape and type,
// and returns t, which must broadcast to x.
func (r *rewriter) table(mul *graph.Node, v, x *graph.Value) (*graph.Value, bool) {
	if !r.dev(mul, "Mul") {
		return nil, false
	}
	t, isIn := otherInput(mul, v)
	if !isIn || t == nil || t == v || t.Type != x.Type || !broadcastsTo(t.Shape, x.Shape) {
		return nil, false
	}
	if !shapeEqual(out0(mul).Shape, x.Shape) || out0(mul).Type != x.Type {
		return nil, false
	}
	return t, true
}

// widenPartial extends m to the partial form when its x is the first rd
// elements of a longer row whose rest is concatenated back after it.
func (r *rewriter) widenPartial(m *rotaryMatch) {
	g := r.g
	x := m.x
	cut := x.Producer
	if !r.dev(cut, "Slice") || isOutput(g, x) {
		return
	}
	// Exports compute h from Shape(x): such readers are folded at Open and
	// never read x at run time, but the graph must keep x for them.
	keepCut := false
	for _, c := range x.Consumers {
		switch {
		case c == m.nodes[0] || c == m.nodes[2] || c == m.nodes[5]:
		case r.res.Class[c] == infer.Folded:
			keepCut = true
		default:
			return
		}
	}
	full := in(cut, 0)
	if full == nil || len(full.Shape) != len(x.Shape) || full.Type != x.Type {
		return
	}
	rank := len(full.Shape)
	d, ok := full.Shape[rank-1].Const()
	if !ok || d <= m.rd || !shapeEqual(full.Shape[:rank-1], x.Shape[:rank-1]) {
		return
	}
	if lo, hi, ok := lastAxisSlice(cut, d); !ok || lo != 0 || hi != m.rd {
		return
	}
	join := soleConsumer(g, m.out)
	if !r.dev(join, "Concat") || len(join.Inputs) != 2 || join.Inputs[0] != m.out || !isLastAxis(join.AttrInt("axis", 0), rank) {
		return
	}
	pass := join.Inputs[1]
	rest := pass.Producer
	if !r.dev(rest, "Slice") || in(rest, 0) != full || !onlyUse(g, pass, join) {
		return
	}
	if lo, hi, ok := lastAxisSlice(rest, d); !ok || lo != m.rd || hi != d {
		return
	}
	if !shapeEqual(out0(join).Shape, full.Shape) || !used(g, out0(join)) {
		return
	}
	m.x, m.out = full, out0(join)
	m.nodes = append(m.nodes, rest, join)
	if !keepCut {
		m.nodes = append(m.nodes, cut)
	}
}

// isLastAxis reports whether axis names the last of rank axes.
func isLastAxis(axis int64, rank int) bool {
	return axis == -1 || axis == int64(rank-1)
}

// lastAxisSlice returns the range [lo, hi) a Slice with known constant
// bounds takes of the last axis (of length d) of its data, clamped as
// ONNX clamps it, when it slices that axis alone with step 1.
func lastAxisSlice(s *graph.Node, d int64) (lo, hi int64, ok bool) {
	data := in(s, 0)
	if data == nil || len(data.Shape) == 0 || len(s.Inputs) < 3 {
		return 0, 0, false
	}
	rank := len(data.Shape)
	one := func(v *graph.Value) (int64, bool) {
		es, ok := knownInts(v)
		if !ok || len(es) != 1 {
			return 0, false
		}
		return es[0].Const()
	}
	start, ok1 := one(in(s, 1))
	end, ok2 := one(in(s, 2))
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	axis := int64(0)
	if a := in(s, 3); a != nil {
		var ok bool
		if axis, ok = one(a); !ok {
			return 0, 0, false
		}
	}
	if !isLastAxis(axis, rank) {
		return 0, 0, false
	}
	if st := in(s, 4); st != nil {
		if step, ok := one(st); !ok || step != 1 {
			return 0, 0, false
		}
	}
	clamp := func(k int64) int64 {
		if k < 0 {
			k += d
		}
		return min(max(k, 0), d)
	}
	return clamp(start), clamp(end), true
}
