package infer

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Limit is a maximum that a derivation step relies on.
type Limit struct {
	// Expr is the bounded quantity, in the remaining symbols (e.g.
	// past + seq). It is the zero Expr when Input is set.
	Expr symshape.Expr
	// Input names a graph input whose element values are bounded instead
	// (the indices a Gather reads straight from input_ids or position_ids).
	Input string
	// Max is the inclusive maximum.
	Max int64
	// Node is the node whose derivation relies on the limit.
	Node string
	// Why says what would go wrong past it.
	Why string
	// NonNegative, on a limit of an input's values, says the values
	// index a constant table (token or position embeddings): Gather would
	// read a negative index from the table's end, but the framework that
	// exported the table (nn.Embedding) refuses one, so they must be >= 0.
	NonNegative bool
}

// String prints "past + seq <= 256 (node /h.0/attn/Where: ...)".
func (l Limit) String() string {
	what := l.Expr.String()
	if l.Input != "" {
		what = "values of " + l.Input
	}
	return fmt.Sprintf("%s <= %d (node %s: %s)", what, l.Max, l.Node, l.Why)
}

// Pin is an equality the derivation proved that fixes a size the graph
// inputs declare dynamic: Sym = Expr, where Expr is a constant or a
// constant minus other symbols, so Sym can never exceed Max. A well-formed
// export never pins a dynamic axis; a pin is the mark of a size recorded as
// a constant at export time.
type Pin struct {
	Sym     string
	Expr    symshape.Expr
	Max     int64
	Node    string
	Meaning string
}

// String prints the pin and what it means.
func (p Pin) String() string {
	return fmt.Sprintf("%s = %s (node %s): %s", p.Sym, p.Expr, p.Node, p.Meaning)
}

// DefaultFoldBytes is the load-time folding budget when Options.FoldBytes
// is 0: the bytes of all ConstFold outputs together.
const DefaultFoldBytes = 1 << 30

// MaxTensorBytes is the largest tensor Run accepts anywhere in a graph
// (1 TiB): a constant shape beyond it is a hostile or broken file, and
// refusing it at derivation keeps later stages from computing sizes that
// overflow.
const MaxTensorBytes = 1 << 40

// valBound is what is known about the values (not the shape) of an integer
// tensor: every element is <= max, or the elements are those of a graph
// input (bounded only by what the caller feeds).
type valBound struct {
	max   symshape.Expr
	input string
}

// valuePassThrough are ops whose output values are a subset (or
// rearrangement) of input 0's.
var valuePassThrough = map[string]bool{
	"Identity": true, "Unsqueeze": true, "Squeeze": true, "Reshape": true, "Expand": true,
	"Flatten": true, "Transpose": true, "Tile": true, "Slice": true, "Cast": true, "Gather": true,
	"GatherElements": true, "Split": true,
}

// trackValues propagates value bounds through n (after its rule ran).
func (c *ctx) trackValues(n *graph.Node) {
	if n.Domain != "" || len(n.Inputs) == 0 || n.Inputs[0] == nil {
		return
	}
	in := n.Inputs[0]
	b, ok := c.valueBound(in)
	if !ok {
		return
	}
	switch {
	case valuePassThrough[n.OpType]:
	case n.OpType == "Add" || n.OpType == "Sub":
		// x + k or x - k for a constant scalar k.
		if b.input != "" || len(n.Inputs) < 2 || n.Inputs[1] == nil {
			return
		}
		k, ok := constInts(n.Inputs[1].Elems)
		if !ok || len(k) != 1 {
			return
		}
		if n.OpType == "Sub" {
			k[0] = -k[0]
		}
		b = valBound{max: symshape.Add(b.max, symshape.Const(k[0]))}
	default:
		return
	}
	for _, o := range n.Outputs {
		if o != nil && o.Type.IsInt() && o.Elems == nil {
			c.vbound[o] = b
		}
	}
}

// valueBound returns what is known about v's values.
func (c *ctx) valueBound(v *graph.Value) (valBound, bool) {
	if b, ok := c.vbound[v]; ok {
		if b.input == "" {
			b.max = c.resolve(b.max)
		}
		return b, true
	}
	if v.Type.IsInt() && c.isGraphInput(v) {
		return valBound{input: v.Name}, true
	}
	return valBound{}, false
}

func (c *ctx) isGraphInput(v *graph.Value) bool {
	if c.data[v] != nil {
		return false
	}
	for _, in := range c.m.Graph.Inputs {
		if in == v {
			return true
		}
	}
	return false
}

// setValueMax records that every element of v is <= max.
func (c *ctx) setValueMax(v *graph.Value, max symshape.Expr) {
	if v != nil && max.IsValid() {
		c.vbound[v] = valBound{max: max}
	}
}

// indexLimit records the limit that indices idx must respect to index an
// axis of the given size (Gather, GatherElements): a derived maximum when
// their values are bounded by an expression, a limit on a graph input's
// values when they come from one. Indices with known contents were checked
// by the rule itself.
func (c *ctx) indexLimit(n *graph.Node, idx *graph.Value, size symshape.Expr, axis int) {
	if idx == nil || idx.Elems != nil {
		return
	}
	size = c.resolve(size)
	top, ok := size.MaxValue(nil)
	if !ok || top <= 0 {
		return
	}
	b, ok := c.valueBound(idx)
	if !ok {
		return
	}
	table := "its data"
	if d := input(n, 0); d != nil {
		table = fmt.Sprintf("%q", d.Name)
	}
	why := fmt.Sprintf("%s indexes axis %d of %s (size %s); a larger index is out of range", idx.Name, axis, table, size)
	if b.input != "" {
		d := input(n, 0)
		// An embedding: a constant float table of rows.
		table := d != nil && (d.Const != nil || c.data[d] != nil) && d.Type.IsFloat() && len(d.Shape) == 2
		c.addLimit(Limit{Input: b.input, Max: top - 1, Node: n.Name, Why: why, NonNegative: table})
		return
	}
	switch c.cmp(b.max, symshape.Sub(size, symshape.Const(1))) {
	case symshape.Less, symshape.LessEq, symshape.Equal:
		return // provably in range
	}
	c.addLimit(Limit{Expr: symshape.Add(b.max, symshape.Const(1)), Max: top, Node: n.Name, Why: why})
}

// clampLimits turns an assumption a == b that holds exactly when the clamps
// in a and b do not bind into limits, and reports whether it did.
func (c *ctx) clampLimits(a, b symshape.Expr, what string) bool {
	ua, ca := a.Unclamp()
	ub, cb := b.Unclamp()
	clamps := append(ca, cb...)
	if len(clamps) == 0 || !ua.IsValid() || !ub.IsValid() {
		return false
	}
	if !ua.Equal(ub) && c.cmp(ua, ub) != symshape.Equal {
		return false
	}
	for _, cl := range clamps {
		switch c.cmp(cl.Arg, symshape.Const(cl.Bound)) {
		case symshape.Less, symshape.LessEq, symshape.Equal:
			continue // cannot bind
		}
		c.addLimit(Limit{Expr: cl.Arg, Max: cl.Bound, Node: c.nodeName(),
			Why: fmt.Sprintf("assumed min(%s, %d) = %s, as %s", cl.Arg, cl.Bound, cl.Arg, what)})
	}
	return true
}

func (c *ctx) addLimit(l Limit) {
	c.res.Limits = append(c.res.Limits, l)
}

// finishLimits expresses the limits in the remaining symbols, drops those
// implied by others and collects the pins.
func (c *ctx) finishLimits() error {
	var keep []Limit
	for _, l := range c.res.Limits {
		if l.Input == "" {
			l.Expr = c.resolve(l.Expr)
			if !l.Expr.IsValid() {
				continue
			}
			if k, ok := l.Expr.Const(); ok {
				if k > l.Max {
					return fmt.Errorf("node %s: %s is %d, but %s", l.Node, l.Expr, k, l.Why)
				}
				continue
			}
		}
		keep = append(keep, l)
	}
	// A limit is implied by another of the same or smaller maximum on a
	// quantity at least as large (past <= 256 by past + seq <= 256).
	var out []Limit
	for i, l := range keep {
		implied := false
		for j, o := range keep {
			if i == j || o.Max > l.Max {
				continue
			}
			if l.Input != "" || o.Input != "" {
				if l.Input == o.Input && (o.Max < l.Max || j < i) {
					implied = true
				}
				continue
			}
			rel := c.cmp(l.Expr, o.Expr)
			if rel == symshape.Less || rel == symshape.LessEq || (rel == symshape.Equal && (o.Max < l.Max || j < i)) {
				implied = true
			}
			if implied {
				break
			}
		}
		if !implied {
			out = append(out, l)
		}
	}
	c.res.Limits = out
	for _, e := range c.res.Equalities {
		info := c.info(e.Sym)
		if info.kind != symInput && info.kind != symAxis {
			continue
		}
		top, ok := e.Expr.MaxValue(nil)
		if !ok {
			continue
		}
		c.res.Pins = append(c.res.Pins, Pin{Sym: e.Sym, Expr: e.Expr, Max: top, Node: e.Node, Meaning: pinMeaning(e, top)})
	}
	return nil
}

func pinMeaning(e Equality, top int64) string {
	fixed := fmt.Sprintf("the graph only runs with %s = %s", e.Sym, e.Expr)
	if _, ok := e.Expr.Const(); !ok {
		fixed += fmt.Sprintf(", so %s <= %d", e.Sym, top)
	}
	return fixed + ", although the graph inputs declare it a dynamic axis: a size was recorded as a " +
		"constant when the model was exported (torch.onnx traces Python ints read from tensor sizes as " +
		"constants, and torch 1.13 exports repeat_interleave along a fixed-size axis with constant shape " +
		"vectors that cannot follow the other, dynamic axes). " +
		"Re-export with that size computed from the tensor (for grouped-query attention, repeat K/V by " +
		"unsqueeze + expand + reshape as Hugging Face's repeat_kv does, not by repeat_interleave), or " +
		"export with an example input of the size you will run"
}

// ExprMax returns the tightest maximum the limits imply for e (for a
// decoder's context, e = past + seq) and the limit it comes from. Limits
// on input values are not used: what they imply depends on how the caller
// fills the input (position_ids 0..n-1 imply n <= Max + 1).
func (r *Result) ExprMax(e symshape.Expr) (int64, Limit, bool) {
	best, found := int64(math.MaxInt64), false
	var from Limit
	for _, l := range r.Limits {
		if l.Input != "" {
			continue
		}
		switch symshape.Compare(e, l.Expr) {
		case symshape.Less, symshape.LessEq, symshape.Equal:
			if l.Max < best {
				best, from, found = l.Max, l, true
			}
		}
	}
	for _, p := range r.Pins {
		if symshape.Sym(p.Sym).Equal(e) && p.Max < best {
			best, found = p.Max, true
			from = Limit{Expr: e, Max: p.Max, Node: p.Node, Why: p.Meaning}
		}
	}
	return best, from, found
}

// InputLimit returns the maximum the limits put on the values of graph
// input name (e.g. the largest token id of input_ids, the largest
// position of position_ids).
func (r *Result) InputLimit(name string) (int64, Limit, bool) {
	best, found := int64(math.MaxInt64), false
	var from Limit
	for _, l := range r.Limits {
		if l.Input == name && l.Max < best {
			best, from, found = l.Max, l, true
		}
	}
	return best, from, found
}

// Check evaluates, at the given symbol values, every limit on symbols, every
// pin and every assumption that limits do not explain, and returns an error
// naming the first that fails: the sizes are outside what the derived
// shapes are valid for. Symbols left unbound are skipped.
func (r *Result) Check(b symshape.Binding) error {
	bound := func(e symshape.Expr) bool {
		for _, s := range e.Symbols() {
			if _, ok := b[s]; !ok {
				return false
			}
		}
		return true
	}
	at := func(e symshape.Expr) string {
		var parts []string
		for _, s := range e.Symbols() {
			parts = append(parts, fmt.Sprintf("%s=%d", s, b[s]))
		}
		return strings.Join(parts, ", ")
	}
	for _, l := range r.Limits {
		if l.Input != "" || !bound(l.Expr) {
			continue
		}
		v, err := l.Expr.Eval(b)
		if err != nil {
			return fmt.Errorf("limit %s: %w", l, err)
		}
		if v > l.Max {
			return fmt.Errorf("%s = %d at %s exceeds %d, the limit of this model: node %s: %s",
				l.Expr, v, at(l.Expr), l.Max, l.Node, l.Why)
		}
	}
	for _, p := range r.Pins {
		e := symshape.Sub(symshape.Sym(p.Sym), p.Expr)
		if !bound(e) {
			continue
		}
		if v, err := e.Eval(b); err == nil && v != 0 {
			return fmt.Errorf("%s must equal %s in this model, not at %s: %s", p.Sym, p.Expr, at(e), p.Meaning)
		}
	}
	for _, a := range r.Assumptions {
		if a.Limited || !a.A.IsValid() || !a.B.IsValid() {
			continue
		}
		d := symshape.Sub(a.A, a.B)
		if !bound(d) {
			continue
		}
		if v, err := d.Eval(b); err == nil && v != 0 {
			return fmt.Errorf("node %s: %s: %s == %s does not hold at %s", a.Node, a.What, a.A, a.B, at(d))
		}
	}
	return nil
}

// neverEqual reports whether a == b has no solution in integers: a - b is
// a constant other than 0, or a sum of terms whose coefficients share a
// factor that does not divide the constant (4*batch == 15).
func neverEqual(a, b symshape.Expr) bool {
	g, k, ok := symshape.Sub(a, b).CoefficientGCD()
	if !ok {
		return false
	}
	if g == 0 {
		return k != 0
	}
	return k%g != 0
}

// checkOutputs refuses outputs whose shape is invalid (an overflow in the
// algebra), negative or larger than MaxTensorBytes.
func (c *ctx) checkOutputs(n *graph.Node) error {
	for i, v := range n.Outputs {
		if v == nil {
			continue
		}
		for j, d := range v.Shape {
			if !d.IsValid() {
				return fmt.Errorf("output %d %q: dim %d: %v", i, v.Name, j, d.Err())
			}
			if k, ok := d.Const(); ok && k < 0 {
				return fmt.Errorf("output %d %q: dim %d is %d", i, v.Name, j, k)
			}
		}
		if _, ok := c.outputBytes(v); !ok {
			if _, all := constDims(v.Shape); all {
				return fmt.Errorf("output %d %q of shape %s is larger than %d bytes", i, v.Name, symshape.FormatShape(v.Shape), int64(MaxTensorBytes))
			}
		}
	}
	return nil
}

// outputBytes is the byte size of a value of constant shape, false when
// the shape is not constant or the size exceeds MaxTensorBytes.
func (c *ctx) outputBytes(v *graph.Value) (int64, bool) {
	cnt, ok := constCount(v.Shape)
	if !ok {
		return 0, false
	}
	sz := int64(v.Type.Size())
	if sz <= 0 {
		sz = 8 // unknown or sub-byte types: count conservatively
	}
	if v.Type == dtype.String {
		sz = 16
	}
	if cnt > MaxTensorBytes/sz {
		return 0, false
	}
	return cnt * sz, true
}

// foldBudget returns the load-time folding budget in bytes.
func (c *ctx) foldBudget() int64 {
	if c.opts.FoldBytes != 0 {
		return c.opts.FoldBytes
	}
	return DefaultFoldBytes
}

// sortLimits orders limits for printing: symbol limits first, by expression.
func sortLimits(ls []Limit) {
	sort.SliceStable(ls, func(i, j int) bool {
		if (ls[i].Input == "") != (ls[j].Input == "") {
			return ls[i].Input == ""
		}
		return false
	})
}
