// Package infer derives a symbolic shape for every value of an ONNX model,
// once, ahead of time.
//
// Graph inputs contribute symbols (their dim_params, or a fresh symbol per
// unnamed axis); every node then gets its output shapes from a per-op rule
// (one table keyed by domain and op type, one small function per op, grouped
// by family in elementwise.go, shape_ops.go, movement.go, matmul.go, conv.go,
// reduce.go, nn.go and control.go). Small integer tensors, the values that
// compute shapes (Shape -> Gather -> Unsqueeze -> Concat -> Reshape), also get
// their contents as symbolic expressions (graph.Value.Elems), so those chains
// fold away: the node that consumes them sees a symbolic shape, not a tensor
// it must wait for.
//
// # Unification
//
// When two dimensions must be equal (a broadcast of two non-1 dims, a MatMul
// K, the non-axis dims of a Concat) and the algebra cannot prove them equal,
// the difference a - b is solved for a symbol that occurs in it with
// coefficient +1 or -1 (so "total" against "past + seq", and also "past"
// against "total - seq", are solvable). The solved symbol is substituted
// everywhere (in every value derived so far and in the graph inputs' shapes)
// and recorded as an Equality. When several symbols could be solved for, the
// one eliminated is, in order of preference:
//
//  1. a symbol named only by declared graph outputs,
//  2. a data-dependent symbol (NonZero count, TopK with a runtime K, ...),
//  3. a fresh symbol minted for an unnamed input axis,
//  4. among named input symbols, the one that fewer graph inputs mention
//     (an attention mask's "total" is mentioned once, "past" by every cache
//     input and "seq" by input_ids and position_ids), and on a tie the one
//     first mentioned later in input order.
//
// So the LLaMA export's present length derives as "past + seq" whichever of
// "total - seq = past" or "past + seq = total" the graph happens to assert.
// When no symbol can be solved for (two compound expressions) the dims are
// assumed equal, the simpler one is kept and an Assumption is recorded.
//
// # Contents, fresh symbols and classes
//
// Value.Elems holds the row-major contents of tensors of constant shape with
// at most MaxElems elements: integers and bools, and floats while they hold
// integers (a shape cast to float, scaled and floored). Integer Div
// truncates toward zero as ONNX says, so it folds to a floor division only
// where the operands' signs are proven; a comparison the algebra cannot
// decide is not folded, never guessed.
//
// Symbols must be identifiers: a dim_param that is not one is an expression
// when it parses as one ("past_sequence_length + 1") and is otherwise
// sanitised ("batch size" -> batch_size, see Result.SymbolNames). An input
// axis with neither dim_value nor dim_param gets "<input>_<axis>"; a
// data-dependent size gets "<output>_<axis>"; both are listed in
// Result.Fresh with their reason.
//
// Every main-graph node is classified (see Class): Folded when all its
// outputs have contents, ConstFold when all its inputs are constants,
// HostRuntime when it reads only host values and makes small tensors, and
// Device otherwise.
//
// # Limits and pins
//
// Some derivation steps hold only for some sizes: a clamp assumed not to
// bind (rows past..past+seq of a 256-row mask derive as
// min(past + seq, 256) - min(past, 256) and are unified with seq), an index
// into a fixed table (arange(past, past + seq) into 256 learned positions,
// input_ids into the embedding). Each becomes a Limit in Result.Limits, a
// maximum of an expression of symbols or of a graph input's values, with
// the node that relies on it; Result.Check refuses sizes beyond them and
// Result.ExprMax and InputLimit give the maxima to size a context from. An
// equality that fixes a dynamic input axis to a constant (a size traced as
// a constant at export) is reported as a Pin with what it means. Equalities
// with no integer solution (4*batch == 15) are errors, not assumptions.
//
// Constant folding at load is budgeted (Options.FoldBytes): a node whose
// inputs are all constants stays a Device node once the folded bytes would
// exceed the budget. Any value whose constant shape exceeds MaxTensorBytes,
// or whose size overflows, is refused with the node named.
//
// # Broadcasting and symbols that could be 1
//
// ONNX broadcasting makes a dim of 1 stretch. A symbolic dim that is not
// provably 1 is taken to be non-1, the numpy reading of a shape whose size is
// not known to be 1, and nothing is recorded about that choice: [seq] with
// [5] unifies seq with 5 rather than deriving max(seq, 5). The same reading
// applies to Squeeze without axes (only dims that are the constant 1 go).
package infer

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// MaxElems bounds the element count of tensors whose contents are tracked
// symbolically (graph.Value.Elems): shape vectors, masks of a few elements,
// small integer initializers.
const MaxElems = 1024

// Options tune Run.
type Options struct {
	// Fixed pins symbols to constants: a graph input axis whose dim_param (or
	// fresh "<input>_<axis>" name) is a key derives as that constant.
	Fixed map[string]int64
	// Inputs gives the contents of graph inputs known ahead of time; they are
	// treated like initializers (tests feed the shape tensors of ONNX's
	// backend test cases this way).
	Inputs map[string]*graph.Tensor
	// Bounds gives symbols inclusive ranges (symbols are >= 0 otherwise).
	// Rules use them to drop clamps that cannot bite: with seq <= 64,
	// slicing a 64-row position table to seq rows gives seq rows, not
	// min(seq, 64). Derived shapes are then valid only within the bounds.
	Bounds symshape.Bounds
	// FoldBytes is the load-time folding budget: nodes whose inputs are all
	// constants are classified ConstFold only while the bytes of all folded
	// outputs together stay within it; past it they stay Device nodes. 0
	// means DefaultFoldBytes.
	FoldBytes int64
}

// Class says how a node is executed once shapes are known.
type Class int

// Node classes, from "nothing to run" to "a tensor op for the GPU".
const (
	// Folded nodes have every output's contents known symbolically
	// (Value.Elems): binding the symbols computes them, nothing runs.
	Folded Class = iota
	// ConstFold nodes read only constants: the engine computes them once at load.
	ConstFold
	// HostRuntime nodes are small shape computations the algebra could not
	// decide (a comparison of two unrelated symbols, say); they run on the
	// CPU at run time.
	HostRuntime
	// Device nodes are tensor ops for the accelerator.
	Device
)

var classNames = [...]string{"Folded", "ConstFold", "HostRuntime", "Device"}

// String returns the class's name.
func (c Class) String() string {
	if c >= 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Equality records a symbol eliminated by unification: Sym = Expr holds in
// every valid run, and Sym no longer appears in any derived shape.
type Equality struct {
	Sym  string
	Expr symshape.Expr
	Node string // the node whose rule forced it ("" for a declared graph output)
}

// String prints "total = past + seq (node /model/Add)".
func (e Equality) String() string {
	if e.Node == "" {
		return fmt.Sprintf("%s = %s (declared graph output)", e.Sym, e.Expr)
	}
	return fmt.Sprintf("%s = %s (node %s)", e.Sym, e.Expr, e.Node)
}

// FreshSym is a symbol that no graph input names: a data-dependent size
// (NonZero's count, TopK with a runtime K) or an input axis without a
// dim_param.
type FreshSym struct {
	Sym    string
	Node   string // creating node; "" for a graph input axis
	Reason string
}

// Assumption records two dims that had to be equal but could neither be
// proven equal nor unified (no symbol to solve for), or a declared output dim
// that disagrees with the derived one. The derivation goes on with Kept.
type Assumption struct {
	A, B symshape.Expr
	Kept symshape.Expr
	Node string
	What string
	// Limited is true when A == B holds exactly while clamps in them do not
	// bind; the clamps are then recorded in Result.Limits.
	Limited bool
}

// String prints the assumption for logs.
func (a Assumption) String() string {
	return fmt.Sprintf("node %s: %s: assumed %s == %s (kept %s)", a.Node, a.What, a.A, a.B, a.Kept)
}

// Result is what Run derived besides the shapes stored on the values.
type Result struct {
	// Symbols are the symbols left in the model's shapes and contents after
	// unification, sorted.
	Symbols []string
	// Equalities are the symbols eliminated by unification, in the order
	// found; each Expr is already expressed in the remaining symbols.
	Equalities []Equality
	// Fresh are symbols minted by Run, with the node (or input) that made them.
	Fresh []FreshSym
	// Assumptions are equalities that could not be proven nor solved.
	Assumptions []Assumption
	// Limits are the maxima the derivation relies on (see Limit), symbol
	// limits first; an engine must refuse sizes beyond them.
	Limits []Limit
	// Pins are proofs that fix a dynamic input axis (see Pin).
	Pins []Pin
	// Class holds every node of the main graph (subgraph nodes are not
	// classified: their owner is).
	Class map[*graph.Node]Class
	// Counts are the number of main-graph nodes per class.
	Counts map[Class]int
	// SymbolNames maps each symbol minted from a name that is not a valid
	// symbol identifier (dim_param "batch size", input "past.0") to the
	// original text.
	SymbolNames map[string]string

	order []*graph.Node // main graph nodes, for Remaining
}

// Remaining returns the HostRuntime nodes in graph order: the shape
// computations the engine still has to run on the CPU at run time.
func (r *Result) Remaining() []*graph.Node {
	var out []*graph.Node
	for _, n := range r.order {
		if r.Class[n] == HostRuntime {
			out = append(out, n)
		}
	}
	return out
}

// Summary prints the class counts, e.g. "Folded 120, ConstFold 3, HostRuntime 0, Device 410".
func (r *Result) Summary() string {
	parts := make([]string, 0, len(classNames))
	for c := Folded; c <= Device; c++ {
		parts = append(parts, fmt.Sprintf("%v %d", c, r.Counts[c]))
	}
	return strings.Join(parts, ", ")
}

// symKind orders symbols for elimination: a higher kind is eliminated first.
type symKind int

const (
	symInput     symKind = iota // named by a graph input's dim_param
	symAxis                     // fresh, for an unnamed graph input axis
	symData                     // fresh, data-dependent
	symOutput                   // named only by a declared graph output
	symUnplanned                // anything else (Fixed keys, subgraph declarations)
)

// symInfo is what the elimination rule knows about a symbol.
type symInfo struct {
	kind  symKind
	uses  int // graph inputs mentioning it
	first int // position of its first mention among all input axes
}

// ctx is the state of one Run.
type ctx struct {
	m      *graph.Model
	opts   Options
	res    *Result
	node   *graph.Node    // node whose rule is running, for records
	vals   []*graph.Value // every value given a shape, for substitution
	seen   map[*graph.Value]bool
	syms   map[string]*symInfo
	subst  map[string]symshape.Expr       // eliminated symbols, already resolved
	known  map[*graph.Value]bool          // values whose contents are known constants (not only Elems)
	host   map[*graph.Value]bool          // values computed on the host (Folded, ConstFold, HostRuntime outputs)
	data   map[*graph.Value]*graph.Tensor // contents of initializers, Constants and Options.Inputs
	vbound map[*graph.Value]valBound      // bounds of integer tensors' values (see limits.go)
	folded int64                          // bytes of ConstFold outputs so far
	nfresh int
}

// rule derives the outputs of one node.
type rule func(c *ctx, n *graph.Node) error

type opKey struct{ domain, op string }

// rules is the table of shape rules; each family file adds its ops in init.
var rules = map[opKey]rule{}

func register(domain string, r rule, ops ...string) {
	for _, op := range ops {
		k := opKey{domain, op}
		if _, dup := rules[k]; dup {
			panic("infer: duplicate rule for " + op)
		}
		rules[k] = r
	}
}

// HasRule reports whether Run has a shape rule for the op in domain ("" for
// the default domain).
func HasRule(domain, op string) bool {
	if domain == "ai.onnx" {
		domain = ""
	}
	_, ok := rules[opKey{domain, op}]
	return ok
}

// Ops returns the ops of the default domain that have a shape rule, sorted.
func Ops() []string {
	var out []string
	for k := range rules {
		if k.domain == "" {
			out = append(out, k.op)
		}
	}
	sort.Strings(out)
	return out
}

// Run derives the shape (and, for small integer tensors, the contents) of
// every value of m's main graph, storing them in graph.Value.Shape and
// graph.Value.Elems, fills graph.Value.Type where the file left it
// undefined, and classifies every node. The error names the node, its op and
// the shapes that disagree.
func Run(m *graph.Model, opts Options) (*Result, error) {
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("infer: model has no graph")
	}
	c := &ctx{
		m:    m,
		opts: opts,
		res: &Result{
			Class:       map[*graph.Node]Class{},
			Counts:      map[Class]int{},
			SymbolNames: map[string]string{},
		},
		seen:   map[*graph.Value]bool{},
		syms:   map[string]*symInfo{},
		subst:  map[string]symshape.Expr{},
		known:  map[*graph.Value]bool{},
		host:   map[*graph.Value]bool{},
		data:   map[*graph.Value]*graph.Tensor{},
		vbound: map[*graph.Value]valBound{},
	}
	g := m.Graph
	clearDerived(g)
	if err := c.setupInputs(g); err != nil {
		return nil, err
	}
	if err := c.runGraph(g, true); err != nil {
		return nil, err
	}
	if err := c.checkDeclaredOutputs(g); err != nil {
		return nil, err
	}
	c.res.order = append([]*graph.Node(nil), g.Nodes...)
	for _, n := range g.Nodes {
		c.res.Counts[c.res.Class[n]]++
	}
	c.res.Symbols = c.collectSymbols()
	if err := c.finishLimits(); err != nil {
		return nil, err
	}
	sortLimits(c.res.Limits)
	return c.res, nil
}

// clearDerived forgets what an earlier Run derived, so that a second Run
// (with other Options) starts from the file's declarations alone.
func clearDerived(g *graph.Graph) {
	for _, v := range g.Inputs {
		v.Shape, v.Elems = nil, nil
	}
	for _, v := range g.Initializers {
		v.Shape, v.Elems = nil, nil
	}
	for _, n := range g.Nodes {
		for _, v := range n.Outputs {
			if v != nil {
				v.Shape, v.Elems = nil, nil
			}
		}
		for _, s := range n.Subgraphs() {
			for _, v := range s.OuterValues() {
				v.Shape, v.Elems = nil, nil
			}
			clearDerived(s)
		}
	}
}

// runGraph applies the rules to g's nodes in order; main says whether g is
// the main graph (whose nodes are classified).
func (c *ctx) runGraph(g *graph.Graph, main bool) error {
	for _, n := range g.Nodes {
		if err := c.runNode(n); err != nil {
			return err
		}
		if main {
			c.classify(n)
		}
	}
	for _, v := range g.Outputs {
		if v.Shape == nil {
			return fmt.Errorf("graph %q output %q has no derived shape", g.Name, v.Name)
		}
	}
	return nil
}

// runNode looks up and applies n's rule, wrapping errors with the node.
func (c *ctx) runNode(n *graph.Node) error {
	dom := n.Domain
	if dom == "ai.onnx" {
		dom = ""
	}
	r, ok := rules[opKey{dom, n.OpType}]
	if !ok {
		if dom != "" {
			return fmt.Errorf("no shape rule for op %s.%s (node %s)", dom, n.OpType, n.Name)
		}
		return fmt.Errorf("no shape rule for op %s (node %s)", n.OpType, n.Name)
	}
	for i, v := range n.Inputs {
		if v != nil && v.Shape == nil {
			return fmt.Errorf("node %s (%s): input %d %q has no shape (graph not in topological order?)", n.Name, n.OpType, i, v.Name)
		}
	}
	c.node = n
	if err := c.apply(r, n); err != nil {
		return fmt.Errorf("node %s (%s): %w", n.Name, n.OpType, err)
	}
	if err := c.checkOutputs(n); err != nil {
		return fmt.Errorf("node %s (%s): %w", n.Name, n.OpType, err)
	}
	c.trackValues(n)
	c.node = nil
	for i, v := range n.Outputs {
		if v != nil && v.Shape == nil {
			return fmt.Errorf("node %s (%s): rule derived no shape for output %d %q", n.Name, n.OpType, i, v.Name)
		}
	}
	return nil
}

// apply runs a rule, turning a panic (a rule meeting a graph malformed in a
// way it does not check) into an error that names the node, so that a
// hostile file cannot crash the loader.
func (c *ctx) apply(r rule, n *graph.Node) (err error) {
	defer func() {
		if x := recover(); x != nil {
			err = fmt.Errorf("internal error in the shape rule (malformed node?): %v", x)
		}
	}()
	return r(c, n)
}

// opset returns the default-domain opset, the version the rules key their
// attribute-vs-input differences on.
func (c *ctx) opset() int64 {
	v := c.m.Opset("")
	if v == 0 {
		// Files without an opset import are old; the rules' pre-change
		// branches are the right reading for them.
		return 1
	}
	return v
}

// nodeName is the current node's name for records.
func (c *ctx) nodeName() string {
	if c.node == nil {
		return ""
	}
	return c.node.Name
}

// setupInputs gives graph inputs their declared shapes (symbols for
// dim_params, fresh symbols for unnamed axes) and initializers theirs.
func (c *ctx) setupInputs(g *graph.Graph) error {
	pos := 0
	// First pass: who mentions which symbol, for the elimination rule.
	for _, v := range g.Inputs {
		if c.opts.Inputs[v.Name] != nil {
			continue
		}
		mentioned := map[string]bool{}
		for _, d := range v.Declared {
			if d.Param == "" {
				pos++
				continue
			}
			e, _ := c.paramExpr(d.Param, symInput)
			for _, s := range e.Symbols() {
				info := c.info(s)
				info.first = min(info.first, pos)
				if !mentioned[s] {
					info.uses++
					mentioned[s] = true
				}
			}
			pos++
		}
	}
	for _, v := range g.Inputs {
		if t := c.opts.Inputs[v.Name]; t != nil {
			if err := c.setConstValue(v, t); err != nil {
				return fmt.Errorf("graph input %q: %w", v.Name, err)
			}
			continue
		}
		if v.Declared == nil {
			return fmt.Errorf("graph input %q has no declared rank; cannot derive shapes", v.Name)
		}
		shape := make([]symshape.Expr, len(v.Declared))
		for i, d := range v.Declared {
			switch {
			case d.Param != "":
				e, err := c.paramExpr(d.Param, symInput)
				if err != nil {
					return fmt.Errorf("graph input %q axis %d: %w", v.Name, i, err)
				}
				shape[i] = e
			case d.Value >= 0:
				shape[i] = symshape.Const(d.Value)
			default:
				name := fmt.Sprintf("%s_%d", v.Name, i)
				s := c.symbol(name, symAxis)
				if f, ok := c.fixed(name); ok {
					shape[i] = f
					continue
				}
				c.res.Fresh = append(c.res.Fresh, FreshSym{Sym: s, Reason: fmt.Sprintf("graph input %q axis %d has neither dim_value nor dim_param", v.Name, i)})
				shape[i] = symshape.Sym(s)
			}
		}
		c.setShape(v, shape)
	}
	for _, v := range g.Initializers {
		if err := c.setConstValue(v, v.Const); err != nil {
			return fmt.Errorf("initializer %q: %w", v.Name, err)
		}
	}
	return nil
}

// setConstValue gives a value with known contents its shape, type and, when
// small, Elems.
func (c *ctx) setConstValue(v *graph.Value, t *graph.Tensor) error {
	if t == nil {
		return fmt.Errorf("no tensor")
	}
	shape := make([]symshape.Expr, len(t.Dims))
	for i, d := range t.Dims {
		shape[i] = symshape.Const(d)
	}
	if v.Type == dtype.Undefined {
		v.Type = t.Type
	}
	c.setShape(v, shape)
	c.known[v] = true
	c.host[v] = true
	c.data[v] = t
	if e, ok := tensorElems(t); ok {
		v.Elems = e
	}
	return nil
}

// paramExpr turns a dim_param into an expression: a valid identifier is a
// symbol; text that parses as an expression over identifiers
// ("past_sequence_length + 1") is that expression; anything else becomes a
// symbol with the invalid characters replaced, remembered in SymbolNames.
func (c *ctx) paramExpr(param string, kind symKind) (symshape.Expr, error) {
	if f, ok := c.fixed(param); ok {
		return f, nil
	}
	if e := symshape.Sym(param); e.IsValid() {
		c.symbol(param, kind)
		return c.resolve(e), nil
	}
	if e, err := symshape.Parse(param); err == nil && e.IsValid() {
		for _, s := range e.Symbols() {
			c.symbol(s, kind)
		}
		return c.resolve(c.fixAll(e)), nil
	}
	s := c.symbol(param, kind)
	if f, ok := c.fixed(s); ok {
		return f, nil
	}
	return c.resolve(symshape.Sym(s)), nil
}

// fixAll substitutes Options.Fixed into e.
func (c *ctx) fixAll(e symshape.Expr) symshape.Expr {
	if len(c.opts.Fixed) == 0 {
		return e
	}
	m := map[string]symshape.Expr{}
	for _, s := range e.Symbols() {
		if v, ok := c.opts.Fixed[s]; ok {
			m[s] = symshape.Const(v)
		}
	}
	if len(m) == 0 {
		return e
	}
	return e.Substitute(m)
}

// fixed returns the constant Options.Fixed pins name to.
func (c *ctx) fixed(name string) (symshape.Expr, bool) {
	if v, ok := c.opts.Fixed[name]; ok {
		return symshape.Const(v), true
	}
	if v, ok := c.opts.Fixed[sanitize(name)]; ok {
		return symshape.Const(v), true
	}
	return symshape.Expr{}, false
}

// symbol registers a symbol for name (sanitised to an identifier) and
// returns the identifier. A name registered before keeps its first kind.
func (c *ctx) symbol(name string, kind symKind) string {
	s := sanitize(name)
	if s != name {
		c.res.SymbolNames[s] = name
	}
	if c.syms[s] == nil {
		c.syms[s] = &symInfo{kind: kind, first: 1 << 30}
	}
	return s
}

// sanitize maps arbitrary text onto a symbol identifier.
func sanitize(name string) string {
	var b strings.Builder
	for i, r := range name {
		switch {
		case r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
			b.WriteRune(r)
		case r >= '0' && r <= '9':
			if i == 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" || s == "min" || s == "max" {
		s = "_" + s
	}
	return s
}

// fresh mints a data-dependent symbol for output out, axis axis of the
// current node and records why.
func (c *ctx) fresh(out *graph.Value, axis int, why string) symshape.Expr {
	base := "v"
	if out != nil {
		base = out.Name
	}
	name := sanitize(fmt.Sprintf("%s_%d", base, axis))
	for c.syms[name] != nil {
		c.nfresh++
		name = sanitize(fmt.Sprintf("%s_%d_%d", base, axis, c.nfresh))
	}
	if f, ok := c.fixed(name); ok {
		return f
	}
	c.syms[name] = &symInfo{kind: symData, first: 1 << 30}
	c.res.Fresh = append(c.res.Fresh, FreshSym{Sym: name, Node: c.nodeName(), Reason: why})
	return symshape.Sym(name)
}

// resolve applies the eliminations found so far to e.
func (c *ctx) resolve(e symshape.Expr) symshape.Expr {
	if len(c.subst) == 0 {
		return e
	}
	// The printed form is cached by symshape: a cheap filter before the
	// allocation of Symbols.
	str := e.String()
	hit := false
	for s := range c.subst {
		if strings.Contains(str, s) {
			hit = true
			break
		}
	}
	if !hit {
		return e
	}
	for _, s := range e.Symbols() {
		if _, ok := c.subst[s]; ok {
			return e.Substitute(c.subst)
		}
	}
	return e
}

// setShape stores a value's shape and remembers the value for substitution.
func (c *ctx) setShape(v *graph.Value, shape []symshape.Expr) {
	v.Shape = shape
	if !c.seen[v] {
		c.seen[v] = true
		c.vals = append(c.vals, v)
	}
}

// collectSymbols lists the symbols left in any value's shape or contents.
func (c *ctx) collectSymbols() []string {
	set := map[string]bool{}
	for _, v := range c.vals {
		for _, e := range v.Shape {
			for _, s := range e.Symbols() {
				set[s] = true
			}
		}
		for _, e := range v.Elems {
			for _, s := range e.Symbols() {
				set[s] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// checkDeclaredOutputs compares the declared shapes of graph outputs with
// the derived ones: a dim_param that is not yet the derived expression is
// unified like any other pair of dims (an output-only name is simply
// eliminated); fixed sizes that disagree are recorded as assumptions, never
// overriding what was derived.
func (c *ctx) checkDeclaredOutputs(g *graph.Graph) error {
	c.node = nil
	for _, v := range g.Outputs {
		if v.Declared == nil {
			continue
		}
		if len(v.Declared) != len(v.Shape) {
			c.res.Assumptions = append(c.res.Assumptions, Assumption{
				Kept: symshape.Const(int64(len(v.Shape))),
				What: fmt.Sprintf("graph output %q is declared with rank %d but derives as %s", v.Name, len(v.Declared), symshape.FormatShape(v.Shape)),
			})
			continue
		}
		for i, d := range v.Declared {
			var want symshape.Expr
			switch {
			case d.Param != "":
				e, err := c.paramExpr(d.Param, symOutput)
				if err != nil {
					return fmt.Errorf("graph output %q axis %d: %w", v.Name, i, err)
				}
				want = e
			case d.Value >= 0:
				want = symshape.Const(d.Value)
			default:
				continue
			}
			got := c.resolve(v.Shape[i])
			if got.Equal(want) {
				continue
			}
			if _, err := c.unify(want, got, func() string { return fmt.Sprintf("declared dim %d of graph output %q", i, v.Name) }); err != nil {
				c.res.Assumptions = append(c.res.Assumptions, Assumption{
					A: want, B: got, Kept: got,
					What: fmt.Sprintf("graph output %q axis %d is declared %s but derives as %s", v.Name, i, want, got),
				})
			}
		}
	}
	return nil
}
