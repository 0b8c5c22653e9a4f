package fuse

import (
	"fmt"
	"math"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// Attention replaces scaled-dot-product attention written out op by op:
//
//	S = MatMul(Q, K^T)                   K^T a Transpose of K, or K stored
//	                                     transposed by its own Transpose
//	S = S * c or S / c                   any number of scalar scalings, also
//	                                     on Q or K before the product
//	S = S + mask                         an additive mask broadcast to S
//	S = Where(causal, S, m)              a slice of a lower-triangular
//	                                     constant (GPT-2's "bias" buffer), m <= -1e4
//	O = MatMul(Softmax(S, axis=-1), V)   [Transpose(O, [0, 2, 1, 3])]
//
// by one ("tlite", "Attention")(q, k, v, mask?) node. Q, K, V and O are
// [batch, heads, seq, head_dim] logically; the node reads each input
// through a permutation instead of materialising Transposes:
//
//	q_perm, k_perm, v_perm  INTS  input axis holding batch, heads, seq, head_dim
//	o_perm                  INTS  output axis holding batch, heads, seq, head_dim
//	scale                   FLOAT the product of the scalings
//	causal                  INT   1: key j is visible to query i iff
//	                              j <= i + (seq_kv - seq_q)
//	kv_heads                INT   K/V heads, when constant (informational)
//
// head_dim is always the last axis of every input (contiguous). K and V
// repeated for grouped-query attention (Unsqueeze at axis 2, Expand,
// Reshape to [batch, kv_heads*group, seq, head_dim]) are read unrepeated:
// the kernel maps query head h to K/V head h / group.
func Attention(g *graph.Graph, res *infer.Result) error {
	if err := dropNoOpCasts(g); err != nil {
		return err
	}
	r := newRewriter(g, res)
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Graph() != g {
			continue
		}
		if err := r.attention(n); err != nil {
			return err
		}
	}
	return r.finish()
}

// dropNoOpCasts removes Casts to the type their input already has: the
// exporter writes them around softmax (Hugging Face's
// softmax(..., dtype=float32).to(query.dtype)), and they would hide the
// product the softmax feeds.
func dropNoOpCasts(g *graph.Graph) error {
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if !is(n, "Cast") || len(n.Inputs) != 1 || len(n.Outputs) != 1 || n.Inputs[0] == nil || n.Outputs[0] == nil {
			continue
		}
		x, y := n.Inputs[0], n.Outputs[0]
		if x.Type != y.Type || !shapeEqual(x.Shape, y.Shape) || isOutput(g, y) {
			continue
		}
		if err := g.ReplaceAllUses(y, x); err != nil {
			return err
		}
		if err := g.RemoveNode(n); err != nil {
			return err
		}
	}
	return nil
}

// shapeScalar evaluates a scalar that an export computes at run time from
// sizes and constants, as GPT-2 computes its score scale:
// Add(ConstantOfShape([]), Pow(Cast(Squeeze(Slice(Shape(v)))), 0.5)).
func shapeScalar(v *graph.Value, depth int) (float64, bool) {
	if v == nil || depth > 8 || len(v.Shape) > 1 || (len(v.Shape) == 1 && !isOne(v.Shape[0])) {
		return 0, false
	}
	if v.Const != nil || len(v.Elems) == 1 {
		if v.Const != nil && v.Const.NumElements() != 1 {
			return 0, false
		}
		return scalar(v)
	}
	p := v.Producer
	if p == nil || p.Domain != "" {
		return 0, false
	}
	arg := func(i int) (float64, bool) { return shapeScalar(in(p, i), depth+1) }
	switch p.OpType {
	case "Identity", "Squeeze", "Unsqueeze", "Reshape":
		return arg(0)
	case "Cast":
		a, ok := arg(0)
		if !isFloat(v.Type) {
			a = math.Trunc(a) // ONNX Cast from float to int rounds toward zero
		}
		return a, ok
	case "ConstantOfShape":
		if len(v.Shape) != 0 {
			return 0, false
		}
		t := p.AttrTensor("value")
		if t == nil {
			return 0, true
		}
		f, err := t.Float32s()
		if err != nil || len(f) != 1 {
			return 0, false
		}
		return float64(f[0]), true
	case "Sqrt":
		a, ok := arg(0)
		return math.Sqrt(a), ok && a >= 0
	case "Add", "Sub", "Mul", "Div", "Pow":
		a, ok1 := arg(0)
		b, ok2 := arg(1)
		if !ok1 || !ok2 {
			return 0, false
		}
		switch p.OpType {
		case "Add":
			return a + b, true
		case "Sub":
			return a - b, true
		case "Mul":
			return a * b, true
		case "Div":
			return a / b, b != 0 && isFloat(v.Type)
		default:
			return math.Pow(a, b), isFloat(v.Type) && a > 0
		}
	}
	return 0, false
}

// operand is how the fused node reads one of Q, K^T or V.
type operand struct {
	src   *graph.Value
	perm  [4]int // src axis of each logical axis (of the MatMul operand)
	scale float64
	nodes []*graph.Node // walked through; removed when nothing else reads them
}

var identity4 = [4]int{0, 1, 2, 3}

// walkOperand follows a MatMul operand back through Transposes and, when
// scaled, Mul/Div by scalar constants: both commute with the product, so
// the fused node can read the tensor before them and apply the scale
// itself. The walk does not need v to be single-use: nodes that others
// still read simply stay.
func walkOperand(v *graph.Value, scaled bool) operand {
	op := operand{src: v, perm: identity4, scale: 1}
	if len(v.Shape) != 4 {
		return op
	}
	for steps := 0; steps < 8; steps++ {
		p := v.Producer
		switch {
		case scaled && is(p, "Mul", "Div"):
			x, f, moved := scalarStep(p, v)
			if !moved {
				return finishOperand(op, v)
			}
			op.scale *= f
			op.nodes = append(op.nodes, p)
			v = x
		case is(p, "Transpose") && len(p.Inputs) == 1 && len(p.Inputs[0].Shape) == 4:
			tp, ok := p.AttrInts("perm")
			if !ok {
				tp = []int64{3, 2, 1, 0}
			}
			if len(tp) != 4 {
				return finishOperand(op, v)
			}
			// Axis i of the Transpose output is axis tp[i] of its input.
			var np [4]int
			for l := range np {
				np[l] = int(tp[op.perm[l]])
			}
			op.perm = np
			op.nodes = append(op.nodes, p)
			v = p.Inputs[0]
		default:
			return finishOperand(op, v)
		}
	}
	return finishOperand(op, v)
}

func finishOperand(op operand, v *graph.Value) operand {
	op.src = v
	return op
}

// dim is the size of logical axis l of the operand.
func (o operand) dim(l int) symshape.Expr { return o.src.Shape[o.perm[l]] }

// gqa recognises K or V repeated for grouped-query attention:
// Reshape(Expand(Unsqueeze(x, 2)), [B, KV*G, T, D]) read in natural order.
// It returns x, the nodes in between, and KV.
func gqa(o operand) (*graph.Value, []*graph.Node, symshape.Expr, bool) {
	fail := func() (*graph.Value, []*graph.Node, symshape.Expr, bool) { return nil, nil, symshape.Expr{}, false }
	if o.perm != identity4 {
		return fail()
	}
	rs := o.src.Producer
	if !is(rs, "Reshape", "Flatten") || len(rs.Inputs) == 0 {
		return fail()
	}
	e := rs.Inputs[0]
	ex := e.Producer
	if !is(ex, "Expand") || len(e.Shape) != 5 {
		return fail()
	}
	u := ex.Inputs[0]
	us := u.Producer
	if !is(us, "Unsqueeze", "Reshape") || len(u.Shape) != 5 || !isOne(u.Shape[2]) || len(us.Inputs) == 0 {
		return fail()
	}
	x := us.Inputs[0]
	r, es, ush := o.src.Shape, e.Shape, u.Shape
	if len(x.Shape) != 4 || !shapeEqual(x.Shape, []symshape.Expr{ush[0], ush[1], ush[3], ush[4]}) {
		return fail()
	}
	for _, i := range []int{0, 1, 3, 4} {
		if !es[i].Equal(ush[i]) {
			return fail()
		}
	}
	if !shapeEqual(r, []symshape.Expr{es[0], symshape.Mul(es[1], es[2]), es[3], es[4]}) {
		return fail()
	}
	return x, []*graph.Node{rs, ex, us}, es[1], true
}

// isZeros reports whether v is all zeros: a ConstantOfShape of 0, or
// such a value times a scalar.
func isZeros(v *graph.Value, depth int) bool {
	if v == nil || depth > 2 {
		return false
	}
	p := v.Producer
	switch {
	case is(p, "ConstantOfShape"):
		t := p.AttrTensor("value")
		if t == nil {
			return true
		}
		f, err := t.Float32s()
		return err == nil && len(f) == 1 && f[0] == 0
	case is(p, "Mul") && len(p.Inputs) == 2:
		for i, x := range p.Inputs {
			if isZeros(x, depth+1) {
				if _, ok := scalar(p.Inputs[1-i]); ok && shapeEqual(x.Shape, v.Shape) {
					return true
				}
			}
		}
	}
	return false
}

// walkOperand3 follows an operand of a 3-D score product ([batch*heads,
// ., .]) back through 3-D Transposes and scalar scalings to the Reshape
// that merged batch and heads of a 4-D tensor, which it returns as the
// operand (read through the lifted permutation).
func walkOperand3(v *graph.Value, scaled bool) (operand, bool) {
	op := operand{perm: identity4, scale: 1}
	perm := [3]int{0, 1, 2}
	for steps := 0; steps < 8 && len(v.Shape) == 3; steps++ {
		p := v.Producer
		switch {
		case scaled && is(p, "Mul", "Div"):
			x, f, moved := scalarStep(p, v)
			if !moved {
				return op, false
			}
			op.scale *= f
			op.nodes = append(op.nodes, p)
			v = x
		case is(p, "Transpose") && len(p.Inputs) == 1 && len(p.Inputs[0].Shape) == 3:
			tp, ok := p.AttrInts("perm")
			if !ok {
				tp = []int64{2, 1, 0}
			}
			if len(tp) != 3 {
				return op, false
			}
			var np [3]int
			for l := range np {
				np[l] = int(tp[perm[l]])
			}
			perm = np
			op.nodes = append(op.nodes, p)
			v = p.Inputs[0]
		case is(p, "Reshape") && len(p.Inputs) == 2 && len(p.Inputs[0].Shape) == 4:
			x := p.Inputs[0]
			xs := x.Shape
			if perm[0] != 0 || !shapeEqual(v.Shape, []symshape.Expr{symshape.Mul(xs[0], xs[1]), xs[2], xs[3]}) {
				return op, false
			}
			op.src = x
			op.perm = [4]int{0, 1, perm[1] + 1, perm[2] + 1}
			op.nodes = append(op.nodes, p)
			return op, true
		default:
			return op, false
		}
	}
	return op, false
}

// scores is the chain from the score MatMul to the Softmax.
type scores struct {
	mm     *graph.Node
	scale  float64
	mask   *graph.Value
	causal bool
	nodes  []*graph.Node // single-use nodes between the MatMul and the Softmax
	dead   []*graph.Node // the causal condition's producers
	scaled bool          // a scaling was seen (walking back): no mask may come before it
	merged bool          // the product is 3-D, [batch*heads, seq_q, seq_kv] (baddbmm)
}

// walkScores follows the Softmax input v (read by consumer) back to the
// score MatMul.
func (r *rewriter) walkScores(v *graph.Value, consumer *graph.Node, sc scores) (scores, bool) {
	g := r.g
	full := v.Shape
	for steps := 0; steps < 16; steps++ {
		if !onlyUse(g, v, consumer) || !shapeEqual(v.Shape, full) {
			return sc, false
		}
		p := v.Producer
		switch {
		case r.dev(p, "MatMul"):
			sc.mm = p
			return sc, true
		case r.dev(p, "Mul", "Div"):
			moved := false
			for _, x := range p.Inputs {
				if f, ok := scalarFactor(p, x); ok && shapeEqual(x.Shape, full) {
					sc.scale *= f
					sc.scaled = true
					sc.nodes = append(sc.nodes, p)
					consumer, v, moved = p, x, true
					break
				}
			}
			if !moved {
				return sc, false
			}
		case r.dev(p, "Reshape") && !sc.merged && len(p.Inputs) == 2 && len(full) == 4 && len(p.Inputs[0].Shape) == 3 &&
			shapeEqual(p.Inputs[0].Shape, []symshape.Expr{symshape.Mul(full[0], full[1]), full[2], full[3]}):
			// GPT-NeoX's baddbmm: the scores are computed per (batch,
			// head) pair and viewed as [batch, heads, seq_q, seq_kv].
			sc.merged = true
			sc.nodes = append(sc.nodes, p)
			consumer, v = p, p.Inputs[0]
			full = v.Shape
		case r.dev(p, "Add") && len(p.Inputs) == 2 && (isZeros(p.Inputs[0], 0) || isZeros(p.Inputs[1], 0)):
			// baddbmm's beta*input with an all-zero input.
			x, z := p.Inputs[0], p.Inputs[1]
			if isZeros(x, 0) {
				x, z = z, x
			}
			if !shapeEqual(x.Shape, full) || !broadcastsTo(z.Shape, full) {
				return sc, false
			}
			sc.nodes = append(sc.nodes, p)
			if z.Producer != nil {
				sc.dead = append(sc.dead, z.Producer)
				if zp := z.Producer; is(zp, "Mul") {
					for _, zi := range zp.Inputs {
						if zi != nil && zi.Producer != nil {
							sc.dead = append(sc.dead, zi.Producer)
						}
					}
				}
			}
			consumer, v = p, x
		case r.dev(p, "Add") && sc.mask == nil && !sc.scaled && len(p.Inputs) == 2:
			// Either operand may be the scores; try both.
			for i := 0; i < 2; i++ {
				x, m := p.Inputs[i], p.Inputs[1-i]
				if x == m || !shapeEqual(x.Shape, full) || !isFloat(m.Type) || !broadcastsTo(m.Shape, full) {
					continue
				}
				next := sc
				next.mask = m
				next.nodes = append(append([]*graph.Node(nil), sc.nodes...), p)
				if res, ok := r.walkScores(x, p, next); ok {
					return res, true
				}
			}
			return sc, false
		case r.dev(p, "Where") && !sc.causal && !sc.scaled && len(p.Inputs) == 3:
			m, ok := scalar(p.Inputs[2])
			if !ok || m > -1e4 || !shapeEqual(p.Inputs[1].Shape, full) {
				return sc, false
			}
			dead, ok := causalCond(p.Inputs[0], full)
			if !ok {
				return sc, false
			}
			sc.causal = true
			sc.nodes = append(sc.nodes, p)
			sc.dead = append(sc.dead, dead...)
			consumer, v = p, p.Inputs[1]
		default:
			return sc, false
		}
	}
	return sc, false
}

// causalCond reports whether cond, broadcast against scores [.., Sq, Skv],
// keeps exactly the keys j <= i + (Skv - Sq): a slice of a lower-triangular
// constant starting at row Skv - Sq and column 0, as GPT-2 slices its
// "bias" buffer. It returns the nodes computing cond.
func causalCond(cond *graph.Value, full []symshape.Expr) ([]*graph.Node, bool) {
	if len(cond.Shape) < 2 || len(cond.Shape) > len(full) {
		return nil, false
	}
	rank := len(full)
	// The condition must not broadcast over the query or key axis, and it
	// covers every batch and head.
	cs := cond.Shape
	for _, d := range cs[:len(cs)-2] {
		if !isOne(d) {
			return nil, false
		}
	}
	for k := 1; k <= 2; k++ {
		d, f := cs[len(cs)-k], full[rank-k]
		if !d.Equal(f) && isOne(d) {
			return nil, false
		}
	}
	rowOff, colOff := symshape.Const(0), symshape.Const(0)
	var nodes []*graph.Node
	v := cond
	for steps := 0; steps < 8 && v.Const == nil; steps++ {
		p := v.Producer
		switch {
		case is(p, "Cast", "Identity") && len(p.Inputs) == 1:
		case is(p, "Unsqueeze", "Reshape") && len(p.Inputs) > 0 && len(p.Inputs[0].Shape) >= 2 &&
			len(v.Shape) >= len(p.Inputs[0].Shape) && allOnes(v.Shape[:len(v.Shape)-len(p.Inputs[0].Shape)]) &&
			shapeEqual(v.Shape[len(v.Shape)-len(p.Inputs[0].Shape):], p.Inputs[0].Shape):
		case is(p, "Slice") && len(p.Inputs) >= 3:
			dr, dc, ok := sliceOffsets(p)
			if !ok {
				return nil, false
			}
			rowOff, colOff = symshape.Add(rowOff, dr), symshape.Add(colOff, dc)
		default:
			return nil, false
		}
		nodes = append(nodes, p)
		v = p.Inputs[0]
	}
	if v.Const == nil || !lowerTriangular(v.Const) {
		return nil, false
	}
	want := symshape.Sub(full[rank-1], full[rank-2])
	if !colOff.Equal(symshape.Const(0)) || !rowOff.Equal(want) {
		return nil, false
	}
	return nodes, true
}

// sliceOffsets returns how far a unit-step Slice moves the start of the
// last two axes of its data: the row and column offsets. Starts must be
// known (constants or symbolic contents) and non-negative.
func sliceOffsets(p *graph.Node) (row, col symshape.Expr, ok bool) {
	data := p.Inputs[0]
	rank := len(data.Shape)
	if rank < 2 {
		return row, col, false
	}
	starts, ok := knownInts(in(p, 1))
	if !ok {
		return row, col, false
	}
	axes := make([]symshape.Expr, len(starts))
	if a := in(p, 3); a != nil {
		if axes, ok = knownInts(a); !ok || len(axes) != len(starts) {
			return row, col, false
		}
	} else {
		for i := range axes {
			axes[i] = symshape.Const(int64(i))
		}
	}
	if s := in(p, 4); s != nil {
		steps, ok := knownInts(s)
		if !ok || len(steps) != len(starts) {
			return row, col, false
		}
		for _, st := range steps {
			if k, ok := st.Const(); !ok || k != 1 {
				return row, col, false
			}
		}
	}
	row, col = symshape.Const(0), symshape.Const(0)
	for i, a := range axes {
		k, ok := a.Const()
		if !ok {
			return row, col, false
		}
		if k < 0 {
			k += int64(rank)
		}
		// An end of the range may be unbounded; only the low end matters.
		lo, _, _ := starts[i].Range(nil)
		if !starts[i].IsValid() || lo < 0 {
			return row, col, false
		}
		switch int(k) {
		case rank - 2:
			row = starts[i]
		case rank - 1:
			col = starts[i]
		default:
			if !starts[i].Equal(symshape.Const(0)) {
				return row, col, false
			}
		}
	}
	return row, col, true
}

// knownInts returns a small integer tensor's contents, constant or
// symbolic.
func knownInts(v *graph.Value) ([]symshape.Expr, bool) {
	if v == nil {
		return nil, false
	}
	if v.Elems != nil {
		return v.Elems, true
	}
	if v.Const != nil {
		ints, err := v.Const.Int64s()
		if err != nil {
			return nil, false
		}
		out := make([]symshape.Expr, len(ints))
		for i, k := range ints {
			out[i] = symshape.Const(k)
		}
		return out, true
	}
	return nil, false
}

// lowerTriangular reports whether t is [.., R, C] with leading dims of 1
// and t[r][c] nonzero exactly when c <= r.
func lowerTriangular(t *graph.Tensor) bool {
	if len(t.Dims) < 2 {
		return false
	}
	for _, d := range t.Dims[:len(t.Dims)-2] {
		if d != 1 {
			return false
		}
	}
	rows, cols := int(t.Dims[len(t.Dims)-2]), int(t.Dims[len(t.Dims)-1])
	vals, err := t.Float32s()
	if err != nil || len(vals) != rows*cols {
		return false
	}
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			if (vals[r*cols+c] != 0) != (c <= r) {
				return false
			}
		}
	}
	return true
}

func (r *rewriter) attention(sm *graph.Node) error {
	g := r.g
	if !r.dev(sm, "Softmax") || len(sm.Inputs) != 1 {
		return nil
	}
	if done, err := r.attentionFolded(sm); done || err != nil {
		return err
	}
	s := sm.Inputs[0]
	full := s.Shape
	if len(full) != 4 || !isFloat(s.Type) {
		return nil
	}
	// Opsets before 13 default to axis 1 (and flatten from it): only an
	// explicit last axis is unambiguous without knowing the opset.
	ax := sm.Attr("axis")
	if ax == nil || (ax.I != -1 && ax.I != 3) {
		return nil
	}
	probs := out0(sm)
	mm2 := soleConsumer(g, probs)
	if !r.dev(mm2, "MatMul") || in(mm2, 0) != probs || in(mm2, 1) == nil {
		return nil
	}
	sc, ok := r.walkScores(s, sm, scores{scale: 1})
	if !ok {
		return nil
	}
	mm := sc.mm
	if len(mm.Inputs) != 2 || mm.Inputs[0] == nil || mm.Inputs[1] == nil {
		return nil
	}
	var q, kt operand
	if sc.merged {
		var ok1, ok2 bool
		q, ok1 = walkOperand3(mm.Inputs[0], true)
		kt, ok2 = walkOperand3(mm.Inputs[1], true)
		if !ok1 || !ok2 {
			return nil
		}
	} else {
		q = walkOperand(mm.Inputs[0], true)
		kt = walkOperand(mm.Inputs[1], true)
	}
	v := walkOperand(mm2.Inputs[1], false)
	// K is K^T with its last two logical axes swapped.
	k := kt
	k.perm = [4]int{kt.perm[0], kt.perm[1], kt.perm[3], kt.perm[2]}
	for _, o := range []operand{q, k, v} {
		if len(o.src.Shape) != 4 || o.perm[3] != 3 || !isFloat(o.src.Type) {
			return nil
		}
	}
	var dead []*graph.Node
	dead = append(append(append(append(dead, q.nodes...), k.nodes...), v.nodes...), sc.dead...)
	// Grouped-query attention: read K and V before their repetition, both
	// or neither.
	if k0, kn, kvh, ok := gqa(k); ok {
		if v0, vn, vvh, ok := gqa(v); ok && kvh.Equal(vvh) {
			k.src, v.src = k0, v0
			dead = append(append(dead, kn...), vn...)
		}
	}
	B, H, Sq, Skv := full[0], full[1], full[2], full[3]
	same := func(d, want symshape.Expr, broadcast bool) bool { return d.Equal(want) || broadcast && isOne(d) }
	if !same(q.dim(0), B, false) || !same(q.dim(1), H, false) || !q.dim(2).Equal(Sq) ||
		!same(k.dim(0), B, true) || !same(v.dim(0), B, true) ||
		!k.dim(2).Equal(Skv) || !v.dim(2).Equal(Skv) || !k.dim(1).Equal(v.dim(1)) ||
		!k.dim(3).Equal(q.dim(3)) || !v.dim(3).Equal(q.dim(3)) {
		return nil
	}
	// K/V heads: all of H, or a divisor (checked by the kernel at run time).
	if kh, ok := k.dim(1).Const(); ok {
		if hh, ok := H.Const(); ok && (kh <= 0 || hh%kh != 0) {
			return nil
		}
	} else if !k.dim(1).Equal(H) {
		return nil
	}
	body := append(append([]*graph.Node{mm}, sc.nodes...), sm, mm2)
	o := out0(mm2)
	oPerm := identity4
	if t := soleConsumer(g, o); r.dev(t, "Transpose") {
		if tp, ok := t.AttrInts("perm"); ok && len(tp) == 4 && tp[3] == 3 {
			for i, l := range tp {
				oPerm[l] = i
			}
			body = append(body, t)
			o = out0(t)
		}
	}
	if !used(g, o) {
		return nil
	}
	ins := []*graph.Value{q.src, k.src, v.src}
	if sc.mask != nil {
		ins = append(ins, sc.mask)
	}
	n := r.newNode("Attention", nameNear(sm, "Attention"), ins, []*graph.Value{o})
	setFloat(n, "scale", q.scale*k.scale*sc.scale)
	setInts(n, "q_perm", perm64(q.perm))
	setInts(n, "k_perm", perm64(k.perm))
	setInts(n, "v_perm", perm64(v.perm))
	setInts(n, "o_perm", perm64(oPerm))
	if sc.causal {
		setInt(n, "causal", 1)
	}
	if kh, ok := k.dim(1).Const(); ok {
		setInt(n, "kv_heads", kh)
	}
	return r.replace(body, n, dead)
}

func perm64(p [4]int) []int64 {
	return []int64{int64(p[0]), int64(p[1]), int64(p[2]), int64(p[3])}
}

// attentionFolded fuses multi-query attention written with the query heads
// folded into the rows of a 3-D product, as GPTBigCode writes it:
//
//	Q3 = Reshape(q [B, S, H*D] or [B, S, H, D], [B, S*H, D])
//	S  = Reshape(MatMul(Q3, Transpose(K3 [B, T, D], [0, 2, 1])) * c, [B, S, H, T])
//	S  = Where(Transpose(causal, [0, 2, 1, 3]), S, m) + mask [B, 1, 1, T]
//	O3 = MatMul(Reshape(Softmax(S), [B, S*H, T]), V3 [B, T, D])   -> [B, S*H, D]
//
// It reads q as [B, S, H, D], K and V as [B, T, 1, D] (one K/V head) and
// writes O as [B, S, H, D], viewed back as O3. It reports whether it fused.
func (r *rewriter) attentionFolded(sm *graph.Node) (bool, error) {
	g := r.g
	s := sm.Inputs[0]
	full := s.Shape // [B, S, H, T]
	if len(full) != 4 || !isFloat(s.Type) {
		return false, nil
	}
	if ax := sm.Attr("axis"); ax == nil || (ax.I != -1 && ax.I != 3) {
		return false, nil
	}
	B, S, H, T := full[0], full[1], full[2], full[3]
	rows := symshape.Mul(S, H)
	p3n := soleConsumer(g, out0(sm))
	if !r.dev(p3n, "Reshape") || !shapeEqual(out0(p3n).Shape, []symshape.Expr{B, rows, T}) {
		return false, nil
	}
	mm2 := soleConsumer(g, out0(p3n))
	if !r.dev(mm2, "MatMul") || in(mm2, 0) != out0(p3n) || in(mm2, 1) == nil {
		return false, nil
	}
	v3, o3 := in(mm2, 1), out0(mm2)
	if len(v3.Shape) != 3 || !v3.Shape[1].Equal(T) || len(o3.Shape) != 3 || !shapeEqual(o3.Shape, []symshape.Expr{B, rows, v3.Shape[2]}) {
		return false, nil
	}
	D := v3.Shape[2]
	// The scores, back to the 3-D product.
	full4 := []symshape.Expr{B, H, S, T}
	var mask *graph.Value
	var nodes, dead []*graph.Node
	causal, scaled, merged := false, false, false
	scale := 1.0
	var mm *graph.Node
	v, consumer := s, sm
	for steps := 0; steps < 16 && mm == nil; steps++ {
		if !onlyUse(g, v, consumer) {
			return false, nil
		}
		p := v.Producer
		switch {
		case merged && r.dev(p, "MatMul"):
			mm = p
		case r.dev(p, "Mul", "Div"):
			x, f, moved := scalarStep(p, v)
			if !moved {
				return false, nil
			}
			scale *= f
			scaled = true
			nodes = append(nodes, p)
			consumer, v = p, x
		case !merged && r.dev(p, "Reshape") && shapeEqual(p.Inputs[0].Shape, []symshape.Expr{B, rows, T}):
			merged = true
			nodes = append(nodes, p)
			consumer, v = p, p.Inputs[0]
		case !merged && r.dev(p, "Add") && mask == nil && !scaled && len(p.Inputs) == 2:
			i := 0
			if !shapeEqual(p.Inputs[0].Shape, full) {
				i = 1
			}
			x, m := p.Inputs[i], p.Inputs[1-i]
			// A mask the same for every query and head reads the same in
			// either layout.
			ms := m.Shape
			if x == m || !shapeEqual(x.Shape, full) || !isFloat(m.Type) || !broadcastsTo(ms, full) ||
				(len(ms) >= 2 && !isOne(ms[len(ms)-2])) || (len(ms) >= 3 && !isOne(ms[len(ms)-3])) {
				return false, nil
			}
			mask = m
			nodes = append(nodes, p)
			consumer, v = p, x
		case !merged && r.dev(p, "Where") && !causal && !scaled && len(p.Inputs) == 3:
			m, ok := scalar(p.Inputs[2])
			if !ok || m > -1e4 || !shapeEqual(p.Inputs[1].Shape, full) {
				return false, nil
			}
			t := p.Inputs[0].Producer
			tp, ok := t.AttrInts("perm")
			if !is(t, "Transpose") || !ok || len(tp) != 4 || tp[0] != 0 || tp[1] != 2 || tp[2] != 1 || tp[3] != 3 {
				return false, nil
			}
			cn, ok := causalCond(t.Inputs[0], full4)
			if !ok {
				return false, nil
			}
			causal = true
			nodes = append(nodes, p)
			dead = append(append(dead, t), cn...)
			consumer, v = p, p.Inputs[1]
		default:
			return false, nil
		}
	}
	if mm == nil || len(mm.Inputs) != 2 {
		return false, nil
	}
	// Q3 is a Reshape of q (not a merge of batch and heads): walk by hand.
	qv, qscale, qnodes := peelScalars(mm.Inputs[0])
	qr := qv.Producer
	if !is(qr, "Reshape") || !shapeEqual(qv.Shape, []symshape.Expr{B, rows, D}) {
		return false, nil
	}
	xq := qr.Inputs[0]
	switch {
	case len(xq.Shape) == 3 && shapeEqual(xq.Shape, []symshape.Expr{B, S, symshape.Mul(H, D)}):
	case len(xq.Shape) == 4 && shapeEqual(xq.Shape, []symshape.Expr{B, S, H, D}):
	default:
		return false, nil
	}
	kv, kscale, knodes := peelScalars(mm.Inputs[1])
	ktn := kv.Producer
	tp, ok := ktn.AttrInts("perm")
	if !is(ktn, "Transpose") || !ok || len(tp) != 3 || tp[0] != 0 || tp[1] != 2 || tp[2] != 1 {
		return false, nil
	}
	k3 := ktn.Inputs[0]
	if len(k3.Shape) != 3 || !k3.Shape[1].Equal(T) || !k3.Shape[2].Equal(D) || !shapeEqual(k3.Shape[:1], v3.Shape[:1]) ||
		!(k3.Shape[0].Equal(B) || isOne(k3.Shape[0])) || !isFloat(k3.Type) || !isFloat(v3.Type) {
		return false, nil
	}
	// Views: q as [B, S, H, D], K and V as [B, T, 1, D], O as [B, S, H, D].
	q4, qn, err := r.reshapeTo(xq, []symshape.Expr{B, S, H, D}, qr.Name+"_heads")
	if err != nil {
		return false, err
	}
	k4, kn, err := r.reshapeTo(k3, []symshape.Expr{k3.Shape[0], T, symshape.Const(1), D}, ktn.Name+"_head")
	if err != nil {
		return false, err
	}
	v4, vn, err := r.reshapeTo(v3, []symshape.Expr{v3.Shape[0], T, symshape.Const(1), D}, mm2.Name+"_v_head")
	if err != nil {
		return false, err
	}
	o4 := g.NewValue(o3.Name + "_heads")
	o4.Type, o4.Shape = o3.Type, []symshape.Expr{B, S, H, D}
	seqHeads := []int64{0, 2, 1, 3}
	n := r.newNode("Attention", nameNear(sm, "Attention"), []*graph.Value{q4, k4, v4}, []*graph.Value{o4})
	if mask != nil {
		n.Inputs = append(n.Inputs, mask)
	}
	setFloat(n, "scale", scale*qscale*kscale)
	setInts(n, "q_perm", seqHeads)
	setInts(n, "k_perm", seqHeads)
	setInts(n, "v_perm", seqHeads)
	setInts(n, "o_perm", seqHeads)
	if causal {
		setInt(n, "causal", 1)
	}
	setInt(n, "kv_heads", 1)
	for _, m := range []*graph.Node{qn, kn, vn} {
		if err := g.AddNode(m); err != nil {
			return false, err
		}
	}
	body := append(append([]*graph.Node{mm}, nodes...), sm, p3n, mm2)
	dead = append(append(append(dead, qnodes...), knodes...), qr, ktn)
	if err := r.replace(body, n, nil); err != nil {
		return false, err
	}
	// O3 becomes a view of O.
	shape, err := r.shapeConst(o4, o3.Shape, mm2.Name+"_rows")
	if err != nil {
		return false, err
	}
	back := &graph.Node{Name: r.uniqueName(mm2.Name + "_rows"), OpType: "Reshape", Inputs: []*graph.Value{o4, shape}, Outputs: []*graph.Value{o3}}
	if err := g.AddNode(back); err != nil {
		return false, err
	}
	return true, r.removeDead(dead)
}

// reshapeTo makes (without adding it) a Reshape of x to shape, with its
// shape as a constant: 0 copies a dim of x, -1 stands for one dim that is
// neither constant nor x's.
func (r *rewriter) reshapeTo(x *graph.Value, shape []symshape.Expr, name string) (*graph.Value, *graph.Node, error) {
	out := r.g.NewValue(name)
	out.Type, out.Shape = x.Type, shape
	sv, err := r.shapeConst(x, shape, name)
	if err != nil {
		return nil, nil, err
	}
	return out, &graph.Node{Name: r.uniqueName(name), OpType: "Reshape", Inputs: []*graph.Value{x, sv}, Outputs: []*graph.Value{out}}, nil
}

// shapeConst is the constant shape input of a Reshape of x to shape.
func (r *rewriter) shapeConst(x *graph.Value, shape []symshape.Expr, name string) (*graph.Value, error) {
	vals := make([]int64, len(shape))
	free := false
	for i, d := range shape {
		if k, ok := d.Const(); ok {
			vals[i] = k
			continue
		}
		if i < len(x.Shape) && x.Shape[i].Equal(d) {
			vals[i] = 0
			continue
		}
		if free {
			return nil, fmt.Errorf("fuse: reshape of %q %s to %s: two free dims", x.Name, symshape.FormatShape(x.Shape), symshape.FormatShape(shape))
		}
		free = true
		vals[i] = -1
	}
	v := r.g.NewValue(name + "_shape")
	t, err := graph.Int64Tensor(v.Name, []int64{int64(len(vals))}, vals)
	if err != nil {
		return nil, err
	}
	v.Const, v.Type = t, dtype.Int64
	v.Shape = []symshape.Expr{symshape.Const(int64(len(vals)))}
	v.Elems = append([]symshape.Expr(nil), shape...)
	r.g.Initializers = append(r.g.Initializers, v)
	return v, nil
}

// scalarStep says whether p (a Mul or Div) scales v's shape-preserving
// input x by a scalar, returning x and the factor.
func scalarStep(p *graph.Node, v *graph.Value) (*graph.Value, float64, bool) {
	for _, x := range p.Inputs {
		if f, ok := scalarFactor(p, x); ok && shapeEqual(x.Shape, v.Shape) {
			return x, f, true
		}
	}
	return nil, 0, false
}

// peelScalars walks back from v through up to four shape-preserving scalar
// Mul/Div nodes, returning the value under them, the product of their
// factors and the nodes passed.
func peelScalars(v *graph.Value) (*graph.Value, float64, []*graph.Node) {
	scale := 1.0
	var nodes []*graph.Node
	for steps := 0; steps < 4 && is(v.Producer, "Mul", "Div"); steps++ {
		x, f, ok := scalarStep(v.Producer, v)
		if !ok {
			break
		}
		scale *= f
		nodes = append(nodes, v.Producer)
		v = x
	}
	return v, scale, nodes
}
