// Package fuse rewrites an inferred graph so that common subgraphs run as
// one kernel: RMSNorm and LayerNorm written out op by op, a residual Add in
// front of a norm, a MatMul with its bias (and a scalar scale) as the
// product's epilogue, a convolution's activation, residual Add and
// squeeze-excite input scale as its epilogue and prologue,
// scaled-dot-product attention with its mask and
// grouped-query K/V expansion, rotary position embeddings, and maximal
// chains of element-wise ops.
//
// Every pass runs after shape inference: it reads Value.Shape, gives every
// value it creates a Type and a Shape, and keeps the graph valid and
// topologically sorted. A pass only replaces nodes that run on the device
// (by symshape/infer's classification, which each pass receives) and whose intermediate values nothing outside the pattern
// reads; a graph output is never made to disappear. Patterns that do not
// match exactly are left alone: a pass never fails because a model is
// written some other way.
//
// The fused nodes are in the tlite domain (package graph/tlite has their
// schemas):
//
//	RMSNorm(x, scale?)                  -> y          epsilon; normalises the last axis
//	AddRMSNorm(a, b, scale?)            -> sum?, y    y = RMSNorm(a + b)
//	AddLayerNorm(a, b, scale, bias?)    -> sum?, y    axis, epsilon
//	MatMulBias(a, b, bias?)             -> y          y = alpha*(a@b) + beta*bias
//	ConvAct(x, w, bias?, r?, s?)        -> y          Conv with its activation,
//	                                                  residual r, input scale s
//	Attention(q, k, v, mask?)           -> o          see attention.go
//	FusedElementwise(inputs...)         -> outputs    GRAPH attribute "body"
//	Rotary(x, cos, sin, x2?)            -> y, y2?     rotary_dim; see rotary.go
//	MatMulJoin(x, W_1.., bias_1..?)     -> y_1..y_S   products of one x; see matmuljoin.go
//
// JoinMatMuls is not in Passes: the engine runs it after its own
// rewrites (KV cache, last-row logits), which look for the separate
// products, and only when its Options allow it.
//
// A decomposed LayerNorm becomes a standard LayerNormalization node.
package fuse

import (
	"fmt"
	"math"
	"sort"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// Options configure the passes.
type Options struct {
	// Elementwise reports whether a node can join a FusedElementwise body:
	// the engine answers with the ops (and element types) its element-wise
	// lowering accepts. Nil disables the element-wise pass.
	Elementwise func(n *graph.Node) bool
}

// Pass is one rewrite of an inferred graph. res is shape inference's
// result for g: its classes say which nodes run on the device (only those
// are fusion candidates); nodes made after inference count as device
// nodes. A pass may update res where it changes what res describes.
type Pass func(g *graph.Graph, res *infer.Result) error

// Passes returns the rewrites in the order they must run. LayerNorm comes
// before RMSNorm, whose pattern also matches the variance half of a
// decomposed LayerNorm (it would fuse correctly but leave the mean and the
// subtraction unfused); the residual pass follows the norms it extends and
// MatMulBias, whose output is often the residual branch; ConvResidual
// follows ConvAct (a Conv read by its activation directly is ConvAct's)
// and ConvScale both (it adds its scale to the Convs they made); the
// element-wise
// pass comes last so that it does not swallow the ops the others match
// (Rotary's Neg, Muls and Add among them).
func Passes(opts Options) []Pass {
	ps := []Pass{LayerNorm, RMSNorm, Attention, MatMulBias, AddNorm, ConvAct, ConvResidual, ConvScale, Rotary}
	if opts.Elementwise != nil {
		ew := opts.Elementwise
		ps = append(ps, func(g *graph.Graph, res *infer.Result) error { return Elementwise(g, res, ew) })
	}
	return ps
}

func constElems(es []symshape.Expr) bool {
	for _, e := range es {
		if _, ok := e.Const(); !ok {
			return false
		}
	}
	return true
}

// isOutput reports whether v is an output of g.
func isOutput(g *graph.Graph, v *graph.Value) bool {
	for _, o := range g.Outputs {
		if o == v {
			return true
		}
	}
	return false
}

// onlyUse reports whether n is the single reader of v and v is not a
// graph output: v can then vanish inside a fused node.
func onlyUse(g *graph.Graph, v *graph.Value, n *graph.Node) bool {
	return v != nil && len(v.Consumers) == 1 && v.Consumers[0] == n && !isOutput(g, v)
}

// soleConsumer returns the single node reading v when v is not a graph
// output, else nil.
func soleConsumer(g *graph.Graph, v *graph.Value) *graph.Node {
	if v == nil || len(v.Consumers) != 1 || isOutput(g, v) {
		return nil
	}
	return v.Consumers[0]
}

// used reports whether something reads v.
func used(g *graph.Graph, v *graph.Value) bool {
	return v != nil && (len(v.Consumers) > 0 || isOutput(g, v))
}

// is reports whether n is a default-domain op of one of the given types.
func is(n *graph.Node, ops ...string) bool {
	if n == nil || n.Domain != "" {
		return false
	}
	for _, op := range ops {
		if n.OpType == op {
			return true
		}
	}
	return false
}

// out0 is n's first output.
func out0(n *graph.Node) *graph.Value {
	if n == nil || len(n.Outputs) == 0 {
		return nil
	}
	return n.Outputs[0]
}

// in returns input i of n, nil when absent.
func in(n *graph.Node, i int) *graph.Value {
	if n == nil || i >= len(n.Inputs) {
		return nil
	}
	return n.Inputs[i]
}

// scalar returns the value of a one-element constant: an initializer, a
// Constant's output or folded contents.
func scalar(v *graph.Value) (float64, bool) {
	// Exporters share constants between layers through Identity nodes.
	for v != nil && v.Const == nil && is(v.Producer, "Identity") && len(v.Producer.Inputs) == 1 {
		v = v.Producer.Inputs[0]
	}
	if v == nil {
		return 0, false
	}
	if v.Const != nil {
		if v.Const.NumElements() != 1 {
			return 0, false
		}
		f, err := v.Const.Float32s()
		if err != nil || len(f) != 1 {
			return 0, false
		}
		return float64(f[0]), true
	}
	if len(v.Elems) == 1 {
		if k, ok := v.Elems[0].Const(); ok {
			return float64(k), true
		}
	}
	return shapeScalar(v, 0)
}

// isScalarConst reports whether v is a one-element constant equal to want.
func isScalarConst(v *graph.Value, want float64) bool {
	f, ok := scalar(v)
	return ok && f == want
}

// otherInput returns the input of binary n that is not v, and whether v is
// one of its two inputs.
func otherInput(n *graph.Node, v *graph.Value) (*graph.Value, bool) {
	if n == nil || len(n.Inputs) != 2 {
		return nil, false
	}
	switch v {
	case n.Inputs[0]:
		return n.Inputs[1], true
	case n.Inputs[1]:
		return n.Inputs[0], true
	}
	return nil, false
}

// isFloat reports whether t is a float type the engine stores (float32 or
// float16, both kept in the session's one float storage); other float
// types are left to the engine to refuse.
func isFloat(t dtype.Type) bool {
	return t == dtype.Float32 || t == dtype.Float16
}

// floatCastInput returns the input of a Cast between float types (a
// storage no-op for the engine, which keeps every float in one storage), or
// nil when n is no such Cast.
func floatCastInput(n *graph.Node) *graph.Value {
	if !is(n, "Cast") || len(n.Inputs) != 1 || n.Inputs[0] == nil {
		return nil
	}
	to := dtype.Type(n.AttrInt("to", 0))
	if !isFloat(to) || !isFloat(n.Inputs[0].Type) {
		return nil
	}
	return n.Inputs[0]
}

// uncast strips float-to-float Casts off v.
func uncast(v *graph.Value) *graph.Value {
	for v != nil {
		src := floatCastInput(v.Producer)
		if src == nil {
			return v
		}
		v = src
	}
	return v
}

// sameTensor reports whether a and b hold the same numbers up to float
// Casts.
func sameTensor(a, b *graph.Value) bool {
	return a != nil && uncast(a) == uncast(b)
}

// shapeEqual reports whether two symbolic shapes are provably identical.
func shapeEqual(a, b []symshape.Expr) bool {
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

// isOne reports whether d is the constant 1.
func isOne(d symshape.Expr) bool {
	k, ok := d.Const()
	return ok && k == 1
}

// broadcastsTo reports whether shape a provably broadcasts to s without
// changing s: right-aligned, each dim of a is 1 or equal to s's.
func broadcastsTo(a, s []symshape.Expr) bool {
	if a == nil && s != nil || len(a) > len(s) {
		return false
	}
	off := len(s) - len(a)
	for i, d := range a {
		if !isOne(d) && !d.Equal(s[off+i]) {
			return false
		}
	}
	return true
}

// isRowVector reports whether w holds one number per element of x's last
// axis (shape [D], [1, D], ...), the weight shape of a norm or a bias.
func isRowVector(w *graph.Value, x []symshape.Expr) bool {
	if w == nil || len(x) == 0 || len(w.Shape) == 0 || len(w.Shape) > len(x) {
		return false
	}
	last := len(w.Shape) - 1
	for _, d := range w.Shape[:last] {
		if !isOne(d) {
			return false
		}
	}
	return w.Shape[last].Equal(x[len(x)-1])
}

// lastAxisReduce reports whether r (ReduceMean) averages only the last axis
// of its input and keeps the reduced dim, the form whose result broadcasts
// back over the row. Axes come from the attribute (opset < 18) or from a
// constant second input (opset 18).
func lastAxisReduce(r *graph.Node) bool {
	if !is(r, "ReduceMean") || len(r.Inputs) == 0 || r.Inputs[0] == nil || r.AttrInt("keepdims", 1) != 1 {
		return false
	}
	rank := len(r.Inputs[0].Shape)
	if rank == 0 {
		return false
	}
	var axes []int64
	if a := in(r, 1); a != nil {
		if a.Const != nil {
			v, err := a.Const.Int64s()
			if err != nil {
				return false
			}
			axes = v
		} else if constElems(a.Elems) && a.Elems != nil {
			for _, e := range a.Elems {
				k, _ := e.Const()
				axes = append(axes, k)
			}
		} else {
			return false
		}
	} else {
		v, ok := r.AttrInts("axes")
		if !ok {
			return false
		}
		axes = v
	}
	return len(axes) == 1 && (axes[0] == -1 || axes[0] == int64(rank-1))
}

// squareOf returns x when v = Pow(x, 2) or Mul(x, x) computed by n.
func squareOf(n *graph.Node) *graph.Value {
	switch {
	case is(n, "Pow") && len(n.Inputs) == 2 && isScalarConst(n.Inputs[1], 2):
		return n.Inputs[0]
	case is(n, "Mul") && len(n.Inputs) == 2 && n.Inputs[0] == n.Inputs[1]:
		return n.Inputs[0]
	}
	return nil
}

// scalarFactor returns the factor a Mul or Div by a one-element constant
// applies to its other operand v (Div(v, c) is 1/c; Div(c, v) is not a
// scaling and is refused).
func scalarFactor(n *graph.Node, v *graph.Value) (float64, bool) {
	o, ok := otherInput(n, v)
	if !ok || o == v {
		return 0, false
	}
	c, ok := scalar(o)
	if !ok || len(o.Shape) > len(v.Shape) || !allOnes(o.Shape) {
		return 0, false
	}
	switch {
	case is(n, "Mul"):
		return c, true
	case is(n, "Div") && n.Inputs[0] == v && c != 0:
		return 1 / c, true
	}
	return 0, false
}

func allOnes(s []symshape.Expr) bool {
	for _, d := range s {
		if !isOne(d) {
			return false
		}
	}
	return true
}

// rewriter applies one pass's replacements to g.
type rewriter struct {
	g       *graph.Graph
	res     *infer.Result
	changed bool
	names   map[string]bool // node names in use, built on first need
}

func newRewriter(g *graph.Graph, res *infer.Result) *rewriter { return &rewriter{g: g, res: res} }

// device reports whether n runs on the device by shape inference's
// classification; nodes made after it (fused nodes) do.
func (r *rewriter) device(n *graph.Node) bool {
	if n == nil {
		return false
	}
	c, ok := r.res.Class[n]
	return !ok || c == infer.Device
}

// dev reports whether n is a device node of the default domain of one of
// ops (any op when none are given).
func (r *rewriter) dev(n *graph.Node, ops ...string) bool {
	if n == nil || n.Graph() != r.g || !r.device(n) {
		return false
	}
	return len(ops) == 0 || is(n, ops...)
}

// replace removes the nodes of remove (which must include every producer
// of n's outputs) and inserts n; outputs of n that are values of the
// removed nodes are reused, so their readers and graph outputs keep their
// names. Then the nodes of maybeDead that nothing reads any more go too.
func (r *rewriter) replace(remove []*graph.Node, n *graph.Node, maybeDead []*graph.Node) error {
	left := map[*graph.Node]bool{}
	for _, m := range remove {
		if m != nil {
			left[m] = true
		}
	}
	// Readers before producers, so that every removed node's values lose
	// their last reader and leave the graph's scope with it.
	for len(left) > 0 {
		progress := false
		for _, m := range remove {
			if !left[m] || readByLeft(m, left) {
				continue
			}
			if err := r.g.RemoveNode(m); err != nil {
				return fmt.Errorf("fuse: %s: %w", n.OpType, err)
			}
			delete(left, m)
			progress = true
		}
		if !progress {
			return fmt.Errorf("fuse: %s: the nodes to replace form a cycle", n.OpType)
		}
	}
	if err := r.g.AddNode(n); err != nil {
		return fmt.Errorf("fuse: %s: %w", n.OpType, err)
	}
	r.changed = true
	return r.removeDead(maybeDead)
}

// readByLeft reports whether a node of left reads an output of m.
func readByLeft(m *graph.Node, left map[*graph.Node]bool) bool {
	for _, v := range m.Outputs {
		if v == nil {
			continue
		}
		for _, c := range v.Consumers {
			if c != m && left[c] {
				return true
			}
		}
	}
	return false
}

// uniqueName returns base, or base with a suffix, unused by the graph's
// nodes, and reserves it.
func (r *rewriter) uniqueName(base string) string {
	if r.names == nil {
		r.names = make(map[string]bool, len(r.g.Nodes))
		for _, n := range r.g.Nodes {
			r.names[n.Name] = true
		}
	}
	name := base
	for k := 1; r.names[name]; k++ {
		name = fmt.Sprintf("%s_%d", base, k)
	}
	r.names[name] = true
	return name
}

// removeDead removes the nodes of cands (and, transitively, those of cands
// feeding them) whose outputs nothing reads.
func (r *rewriter) removeDead(cands []*graph.Node) error {
	for again := true; again; {
		again = false
		for _, m := range cands {
			if m == nil || m.Graph() != r.g {
				continue
			}
			dead := true
			for _, v := range m.Outputs {
				if used(r.g, v) {
					dead = false
					break
				}
			}
			if dead {
				if err := r.g.RemoveNode(m); err != nil {
					return fmt.Errorf("fuse: %w", err)
				}
				again = true
			}
		}
	}
	return nil
}

// finish restores topological order after replacements that merged nodes
// from different places, and checks the result: a pass that broke the
// graph says so here rather than in the engine's lowering.
func (r *rewriter) finish() error {
	if !r.changed {
		return nil
	}
	if err := r.g.Sort(); err != nil {
		return fmt.Errorf("fuse: %w", err)
	}
	if err := r.g.Validate(); err != nil {
		return fmt.Errorf("fuse: the rewritten graph is invalid: %w", err)
	}
	return nil
}

// sortByPos orders ns by their positions in pos.
func sortByPos(ns []*graph.Node, pos map[*graph.Node]int) {
	sort.Slice(ns, func(i, j int) bool { return pos[ns[i]] < pos[ns[j]] })
}

// newNode makes a fused node of the tlite domain named name (with a
// suffix when a node has that name).
func (r *rewriter) newNode(op, name string, ins, outs []*graph.Value) *graph.Node {
	return &graph.Node{Name: r.uniqueName(name), OpType: op, Domain: tlite.Domain, Inputs: ins, Outputs: outs, Attrs: map[string]*graph.Attr{}}
}

func setFloat(n *graph.Node, name string, f float64) {
	n.SetAttr(&graph.Attr{Name: name, Kind: graph.KindFloat, F: float32(f)})
}

func setInt(n *graph.Node, name string, v int64) {
	n.SetAttr(&graph.Attr{Name: name, Kind: graph.KindInt, I: v})
}

func setInts(n *graph.Node, name string, v []int64) {
	n.SetAttr(&graph.Attr{Name: name, Kind: graph.KindInts, Ints: v})
}

// epsOK bounds the epsilon of a matched norm: a negative or huge constant
// in the Add means the subgraph is something else.
func epsOK(eps float64) bool { return eps >= 0 && eps < 1 && !math.IsNaN(eps) }
