package fuse

import (
	"fmt"
	"strings"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// JoinMatMuls joins the products that read one activation with constant
// weights of one kind into one ("tlite", "MatMulJoin") node, so that a
// decoder's q/k/v projections (which read the same normed hidden state)
// and its gate/up projections each run as one launch. Members are
//
//	MatMul(x, W)                  W an fp32 or fp16 initializer [K, N]
//	tlite.MatMulBias(x, W, bias?) the same, bias a constant [N]
//	tlite.MatMulQ(x, Wq, bias?)   a 4-bit packed weight, N a multiple of 4
//
// each the only reader of its weight (and bias). A group is the members
// reading one x that agree on everything but N: the op, W's element type,
// K, the 4-bit format and group, alpha and beta, and whether a bias is
// present. Each group of two or more becomes
//
//	MatMulJoin(x, W_1..W_S, [bias_1..bias_S]) -> y_1..y_S
//
// with attributes ns (N of each member, in order), K, alpha, beta and, for
// 4-bit members, format and group. The outputs are the members' own
// values, so their readers are untouched; the engine concatenates the
// weights once at Open and decides how the outputs lie in memory.
// Members whose output is a graph output are left alone. Run it after
// MatMulBias (whose nodes it joins) and after the rewrites that walk from
// products (KV cache, last-row logits).
func JoinMatMuls(g *graph.Graph, res *infer.Result) error {
	r := newRewriter(g, res)
	type group struct {
		key     string
		members []*graph.Node
	}
	pos := map[*graph.Node]int{}
	for i, n := range g.Nodes {
		pos[n] = i
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, n := range g.Nodes {
		key, ok := r.joinKey(n)
		if !ok {
			continue
		}
		// The activation's identity is part of the key: only products of
		// one x join.
		key = fmt.Sprintf("%p|%s", n.Inputs[0], key)
		gr := byKey[key]
		if gr == nil {
			gr = &group{key: key}
			byKey[key] = gr
			groups = append(groups, gr)
		}
		gr.members = append(gr.members, n)
	}
	for _, gr := range groups {
		if len(gr.members) < 2 {
			continue
		}
		sortByPos(gr.members, pos)
		if err := r.join(gr.members); err != nil {
			return err
		}
	}
	return r.finish()
}

// joinKey returns what n must share with the other members of its group
// (besides x), or ok = false when n cannot join.
func (r *rewriter) joinKey(n *graph.Node) (key string, ok bool) {
	if n == nil || n.Graph() != r.g || !r.device(n) || len(n.Outputs) != 1 || out0(n) == nil || isOutput(r.g, out0(n)) {
		return "", false
	}
	x, w := in(n, 0), in(n, 1)
	if x == nil || w == nil || !isFloat(x.Type) || len(x.Shape) < 2 || !soleReader(r.g, w, n) {
		return "", false
	}
	k, kok := x.Shape[len(x.Shape)-1].Const()
	if !kok || k <= 0 {
		return "", false
	}
	var bias *graph.Value
	var op string
	switch {
	case is(n, "MatMul") && len(n.Inputs) == 2:
		op = "MatMul"
	case n.Domain == tlite.Domain && n.OpType == tlite.MatMulBias && len(n.Inputs) <= 3:
		op, bias = "MatMulBias", in(n, 2)
	case n.Domain == tlite.Domain && n.OpType == tlite.MatMulQ && len(n.Inputs) <= 3:
		op, bias = "MatMulQ", in(n, 2)
	default:
		return "", false
	}
	var nn int64
	var sb strings.Builder
	if op == "MatMulQ" {
		if w.Type != dtype.Uint8 {
			return "", false
		}
		f, g := n.AttrString("format", ""), n.AttrInt("group", 0)
		nn = n.AttrInt("N", 0)
		// Four-column tiles (the GPU layout of 4-bit weights) must not
		// straddle two members, so that each member's columns can be
		// addressed on their own.
		if f == "" || g <= 0 || n.AttrInt("K", 0) != k || nn <= 0 || nn%4 != 0 {
			return "", false
		}
		fmt.Fprintf(&sb, "q|%s|%d", f, g)
	} else {
		if !isFloat(w.Type) || len(w.Shape) != 2 {
			return "", false
		}
		kw, ok1 := w.Shape[0].Const()
		n1, ok2 := w.Shape[1].Const()
		if !ok1 || !ok2 || kw != k || n1 <= 0 {
			return "", false
		}
		nn = n1
		alpha, beta := n.AttrFloat("alpha", 1), n.AttrFloat("beta", 1)
		fmt.Fprintf(&sb, "f|%v|%v|%v", w.Type, alpha, beta)
	}
	if bias != nil {
		if !soleReader(r.g, bias, n) || !isFloat(bias.Type) || !bias.IsInitializer() {
			return "", false
		}
		if len(bias.Shape) == 0 {
			return "", false
		}
		if b, ok := bias.Shape[len(bias.Shape)-1].Const(); !ok || b != nn || !allOnesBut(bias.Shape, 1) {
			return "", false
		}
		fmt.Fprintf(&sb, "|bias %v", bias.Type)
	}
	y := out0(n)
	if len(y.Shape) != len(x.Shape) || !shapeEqual(y.Shape[:len(y.Shape)-1], x.Shape[:len(x.Shape)-1]) {
		return "", false // a broadcast batch of its own: not a plain [.., K] x [K, N]
	}
	if d, ok := y.Shape[len(y.Shape)-1].Const(); !ok || d != nn {
		return "", false
	}
	return fmt.Sprintf("%s|K%d|%s", op, k, sb.String()), true
}

// soleReader reports whether v is an initializer (not a graph output)
// that n alone reads, once.
func soleReader(g *graph.Graph, v *graph.Value, n *graph.Node) bool {
	if !v.IsInitializer() || len(v.Consumers) != 1 || v.Consumers[0] != n || isOutput(g, v) {
		return false
	}
	seen := 0
	for _, u := range n.Inputs {
		if u == v {
			seen++
		}
	}
	return seen == 1
}

// allOnesBut reports whether every axis of s but the last `last` is 1.
func allOnesBut(s []symshape.Expr, last int) bool {
	for _, d := range s[:len(s)-last] {
		if c, ok := d.Const(); !ok || c != 1 {
			return false
		}
	}
	return true
}

// join replaces members (in graph order, one group) by one MatMulJoin.
func (r *rewriter) join(members []*graph.Node) error {
	first := members[0]
	x := in(first, 0)
	ins := []*graph.Value{x}
	outs := make([]*graph.Value, len(members))
	ns := make([]int64, len(members))
	var biases []*graph.Value
	for i, m := range members {
		ins = append(ins, in(m, 1))
		if b := in(m, 2); b != nil {
			biases = append(biases, b)
		}
		outs[i] = out0(m)
		d, _ := outs[i].Shape[len(outs[i].Shape)-1].Const()
		ns[i] = d
	}
	ins = append(ins, biases...)
	n := r.newNode(tlite.MatMulJoin, nameNear(first, tlite.MatMulJoin), ins, outs)
	setInts(n, "ns", ns)
	k, _ := x.Shape[len(x.Shape)-1].Const()
	setInt(n, "K", k)
	if first.OpType == tlite.MatMulQ {
		n.SetAttr(&graph.Attr{Name: "format", Kind: graph.KindString, S: first.AttrString("format", "")})
		setInt(n, "group", first.AttrInt("group", 0))
	} else {
		setFloat(n, "alpha", float64(first.AttrFloat("alpha", 1)))
		setFloat(n, "beta", float64(first.AttrFloat("beta", 1)))
	}
	return r.replace(members, n, nil)
}
