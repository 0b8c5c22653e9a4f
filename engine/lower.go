package engine

import (
	"fmt"
	"sort"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
)

// vkind says where a value's contents come from.
type vkind int

const (
	vkConst  vkind = iota // known at Open: initializers, Constant, constant-folded nodes
	vkFolded              // known symbolically (graph.Value.Elems), evaluated per Run
	vkInput               // a graph input, given to Run
	vkDevice              // written by a device step
	vkHost                // computed on the CPU at run time
)

// vinfo is the engine's record of one tensor: a graph value, or a constant
// the lowering made (BatchNormalization's folded scale and shift).
type vinfo struct {
	id    int
	v     *graph.Value // nil for synthetic constants
	name  string
	dt    dtype.Type
	shape []symshape.Expr
	kind  vkind
	konst *hostTensor // vkConst contents
	// derive, for a constant made from another at Open (a transposed
	// weight, a repacked 4-bit one), computes its contents into dst (len =
	// the host bytes of konst's shape) at upload time, so that the derived
	// copy is written straight into the device buffer and never held on
	// the Go heap; konst.data stays nil until something on the host asks
	// for it (materialize). derivedFrom is the source's bytes.
	derive      func(dst []byte) error
	derivedFrom []byte
	// derivedParts are further sources of a derived constant made from
	// several (a joined product's weights), dropped like derivedFrom.
	derivedParts [][]byte
	elems        []symshape.Expr // vkFolded contents
	// root is the value whose storage this one shares (Reshape and the other
	// views alias their input); a value is its own root otherwise.
	root *vinfo
	// viewOf is the input a view (alias) was made of, and viewNode its
	// node: at run time the view must hold as many elements as it.
	viewOf   *vinfo
	viewNode *graph.Node
	// segOff, when set, is where this value starts inside its root, in
	// elements, as a function of the input symbols: the outputs of a
	// joined product (lower_join.go) are consecutive ranges of one buffer
	// whose starts depend on the number of rows. Views of such a value
	// carry it on. exec.ref adds it to the root's reference.
	segOff *symshape.Expr

	// Device residence, for roots.
	req      int  // memory-plan request, -1 for none
	needSlot bool // lives in a memory-plan slot (device-resident, not constant)
	devUse   bool // a device step reads it (or an alias of it)
	uploaded bool // vkFolded/vkHost roots copied to the device per Run
	def      int  // program index that writes it (0: before the program)
	lastUse  int  // last program index reading the root (device or host)
	output   bool // some alias of the root is a graph output
	early    bool // contents are known before any device step runs
}

// isFloat reports whether the value holds a floating-point type.
func (v *vinfo) isFloat() bool { return v.dt == dtype.Float32 || v.dt == dtype.Float16 }

// storeFor returns the element type a value of type dt is stored as, with
// floats in storage fs. Integer types without a chain type (int16, uint16,
// uint32, uint64) get ok = true and et = -1: movement kernels handle them as
// raw bytes, element-wise chains refuse them.
func storeFor(dt dtype.Type, fs kernels.Storage) (et kernels.ElemType, size int, err error) {
	switch dt {
	case dtype.Float32, dtype.Float16:
		if fs == kernels.F16 {
			return kernels.EF16, 2, nil
		}
		return kernels.EF32, 4, nil
	case dtype.Int64:
		return kernels.EI64, 8, nil
	case dtype.Int32:
		return kernels.EI32, 4, nil
	case dtype.Int8:
		return kernels.EI8, 1, nil
	case dtype.Uint8:
		return kernels.EU8, 1, nil
	case dtype.Bool:
		return kernels.EBool, 1, nil
	case dtype.Int16, dtype.Uint16, dtype.Uint32, dtype.Uint64:
		return -1, dt.Size(), nil
	}
	return -1, 0, fmt.Errorf("element type %v is not supported", dt)
}

// stepDef is a lowered node: what to enqueue, with shapes and other
// run-time parameters read from the exec when it runs.
type stepDef struct {
	// kernel names the family for profiles ("matmul", "chain", ...).
	kernel string
	run    func(x *exec) error
	// inPlace lists (output, input) pairs where the output may take over
	// the input's buffer: the kernel reads and writes each element at the
	// same index.
	inPlace [][2]int
	// scratch holds the byte sizes of temporary buffers the step uses;
	// x.scratch has them when run executes.
	scratch []symshape.Expr
	// joint, when set, is a device value the lowering made (not a graph
	// value) that the step writes and its outputs are ranges of
	// (vinfo.segOff): it gets a slot of the memory plan of its own.
	joint *vinfo
}

// lowerFn lowers one node for the backend lc describes.
type lowerFn func(lc *lowerCtx) (*stepDef, error)

// hostFn computes a node on the CPU from its inputs' contents.
type hostFn func(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error)

var (
	lowerings = map[string]lowerFn{}
	hostOps   = map[string]hostFn{}
	// aliasOps are views: the output is the input's buffer with another
	// shape; no step runs.
	aliasOps = map[string]bool{
		"Reshape": true, "Squeeze": true, "Unsqueeze": true, "Flatten": true,
		"Identity": true, "Dropout": true,
	}
)

// opKey names an op for the registries: the op type for the default domain,
// "domain.Op" for others.
func opKey(domain, op string) string {
	if domain == "" || domain == "ai.onnx" {
		return op
	}
	return domain + "." + op
}

func registerLowering(fn lowerFn, ops ...string) {
	for _, op := range ops {
		if _, dup := lowerings[op]; dup {
			panic("engine: duplicate lowering for " + op)
		}
		lowerings[op] = fn
	}
}

func registerHost(fn hostFn, ops ...string) {
	for _, op := range ops {
		if _, dup := hostOps[op]; dup {
			panic("engine: duplicate host op " + op)
		}
		hostOps[op] = fn
	}
}

// SupportedOps lists the operators the engine runs (default domain by op
// type, others as "domain.Op"), sorted: device lowerings, views, and the
// small ops computed on the CPU (Range, Trilu, ...). Shape computations that
// shape inference folds away (Shape, Gather on shapes, ...) need no entry.
func SupportedOps() []string {
	set := map[string]bool{}
	for op := range lowerings {
		set[op] = true
	}
	for op := range hostOps {
		set[op] = true
	}
	for op := range aliasOps {
		set[op] = true
	}
	out := make([]string, 0, len(set))
	for op := range set {
		out = append(out, op)
	}
	sort.Strings(out)
	return out
}

// UnsupportedError is an operator, or a use of one, that the engine cannot
// run; Open returns it naming the node.
type UnsupportedError struct {
	Node    string
	Op      string
	Domain  string
	Opset   int64
	Backend string
	// Reason says what is missing; empty when the operator itself is.
	Reason string
}

// Error formats the node, op, opset and backend, then the reason.
func (e *UnsupportedError) Error() string {
	op := e.Op
	if e.Domain != "" {
		op = e.Domain + "." + e.Op
	}
	msg := fmt.Sprintf("node %q (%s, opset %d): operator not supported on the %s backend", e.Node, op, e.Opset, e.Backend)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// lowerCtx is what a lowering sees: the node, its values, and the storage
// of the backend it lowers for (the session's, or the CPU executor's).
type lowerCtx struct {
	c     *compiler
	n     *graph.Node
	opset int64
	host  bool            // lowering for the CPU executor (go backend, fp32)
	fs    kernels.Storage // float storage
}

// in returns the vinfo of input i, nil when absent.
func (lc *lowerCtx) in(i int) *vinfo {
	if i < len(lc.n.Inputs) && lc.n.Inputs[i] != nil {
		return lc.c.info(lc.n.Inputs[i])
	}
	return nil
}

// out returns the vinfo of output i, nil when absent.
func (lc *lowerCtx) out(i int) *vinfo {
	if i < len(lc.n.Outputs) && lc.n.Outputs[i] != nil {
		return lc.c.info(lc.n.Outputs[i])
	}
	return nil
}

// used reports whether output i exists and something reads it.
func (lc *lowerCtx) used(i int) bool {
	if i >= len(lc.n.Outputs) || lc.n.Outputs[i] == nil {
		return false
	}
	v := lc.n.Outputs[i]
	if len(v.Consumers) > 0 {
		return true
	}
	for _, o := range lc.c.g.Outputs {
		if o == v {
			return true
		}
	}
	return false
}

// unsupported builds the error for a feature of this node the engine lacks.
func (lc *lowerCtx) unsupported(format string, args ...any) error {
	return &UnsupportedError{Node: lc.n.Name, Op: lc.n.OpType, Domain: lc.n.Domain, Opset: lc.opset,
		Backend: lc.c.backendName(lc.host), Reason: fmt.Sprintf(format, args...)}
}

// et is v's element type in this backend's storage.
func (lc *lowerCtx) et(v *vinfo) (kernels.ElemType, error) {
	et, _, err := storeFor(v.dt, lc.fs)
	if err != nil {
		return 0, lc.unsupported("%s: %v", v.name, err)
	}
	return et, nil
}

// chainType is v's element type for an element-wise chain.
func (lc *lowerCtx) chainType(v *vinfo) (kernels.ElemType, error) {
	et, err := lc.et(v)
	if err == nil && et < 0 {
		err = lc.unsupported("%s: element-wise kernels do not handle %v", v.name, v.dt)
	}
	return et, err
}

// esize is the bytes per element of v in this backend's storage.
func (lc *lowerCtx) esize(v *vinfo) (int, error) {
	_, sz, err := storeFor(v.dt, lc.fs)
	if err != nil {
		return 0, lc.unsupported("%s: %v", v.name, err)
	}
	return sz, nil
}

// floatStorage is the storage of float value v; other types are refused.
func (lc *lowerCtx) floatStorage(v *vinfo) (kernels.Storage, error) {
	if v == nil {
		return 0, lc.unsupported("a required input is missing")
	}
	if !v.isFloat() {
		return 0, lc.unsupported("%s is %v; this kernel computes on float tensors only", v.name, v.dt)
	}
	return lc.fs, nil
}

// ints returns v's contents as expressions when they are known at Open,
// symbolically or as a constant: axes, pads, slice bounds.
func (lc *lowerCtx) ints(v *vinfo) ([]symshape.Expr, bool) {
	if v == nil {
		return nil, false
	}
	if v.kind == vkConst && v.konst != nil {
		vals, err := v.konst.ints()
		if err != nil {
			return nil, false
		}
		out := make([]symshape.Expr, len(vals))
		for i, x := range vals {
			out[i] = symshape.Const(x)
		}
		return out, true
	}
	if v.v != nil && v.v.Elems != nil {
		return v.v.Elems, true
	}
	return nil, false
}

// constInts returns v's contents when they are constant integers.
func (lc *lowerCtx) constInts(v *vinfo) ([]int64, bool) {
	e, ok := lc.ints(v)
	if !ok {
		return nil, false
	}
	out := make([]int64, len(e))
	for i, x := range e {
		k, ok := x.Const()
		if !ok {
			return nil, false
		}
		out[i] = k
	}
	return out, true
}

// newConst registers a constant made by the lowering.
func (lc *lowerCtx) newConst(name string, h *hostTensor) *vinfo {
	return lc.c.newConst(name, h)
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

// constShape returns a shape whose dims are all constant.
func constShape(s []symshape.Expr) ([]int, bool) {
	out := make([]int, len(s))
	for i, d := range s {
		k, ok := d.Const()
		if !ok {
			return nil, false
		}
		out[i] = int(k)
	}
	return out, true
}

// exec is the state steps run against: the device, the binding of the
// symbols, and every value's buffer and concrete shape.
type exec struct {
	dev     kernels.Device
	c       *compiler
	bind    symshape.Binding
	dims    [][]int
	refs    []tref
	host    []*hostTensor // contents known on the host this run (inputs, host results)
	scratch []tref
	err     error
	// lazy is set for the CPU executor, whose constants are copied into
	// host buffers on first use rather than uploaded at Open.
	lazy bool
	// lim is the running instruction's elastic override (nil: full size).
	lim *unitLimit
	// shapesBind is the binding dims were evaluated under (nil: none
	// kept); Session.run keeps dims across runs with an equal binding.
	shapesBind symshape.Binding
	// dataRead is set when a step reads the host contents of a value that
	// is not fixed by the binding (an input, a host result): its launches
	// may depend on them, so they are not replayed.
	dataRead bool
}

// sameBinding reports whether a and b bind the same symbols to the same
// sizes.
func sameBinding(a, b symshape.Binding) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// shape returns v's concrete shape under the binding.
func (x *exec) shape(v *vinfo) []int {
	if d := x.dims[v.id]; d != nil {
		return d
	}
	d := make([]int, len(v.shape))
	for i, e := range v.shape {
		k, err := e.Eval(x.bind)
		if err != nil {
			if x.err == nil {
				x.err = fmt.Errorf("shape of %s: %w", v.name, err)
			}
			k = 0
		}
		if k < 0 && x.err == nil {
			x.err = fmt.Errorf("shape of %s: dim %d (%s) is %d", v.name, i, e, k)
			k = 0
		}
		d[i] = int(k)
	}
	x.dims[v.id] = d
	if v.viewOf != nil && x.err == nil {
		// A view whose symbols the inputs bound to sizes the derivation
		// assumed away (a Reshape of n elements to [2, 3] at n = 5).
		if src := x.shape(v.viewOf); x.err == nil && numel(src) != numel(d) {
			x.err = fmt.Errorf("node %q (%s): a view of %s %v (%d elements) as %v (%d elements)",
				v.viewNode.Name, v.viewNode.OpType, v.viewOf.name, src, numel(src), d, numel(d))
		}
	}
	return d
}

// ref returns v's buffer.
func (x *exec) ref(v *vinfo) tref {
	r := x.refs[v.id]
	if r.b != nil || !x.lazy {
		if v.segOff != nil {
			off, err := v.segOff.Eval(x.bind)
			if err != nil && x.err == nil {
				x.err = fmt.Errorf("%s: its offset in %s: %w", v.name, v.root.name, err)
			}
			r.off += int(off)
		}
		return r
	}
	h, err := x.hostOf(v)
	if err != nil {
		if x.err == nil {
			x.err = err
		}
		h = newHostTensor(v.dt, x.shape(v))
	}
	b, _ := allocBuffer(x.dev, max(len(h.data), 8))
	copy(b.host(), h.data)
	x.refs[v.id] = tref{b: b}
	return x.refs[v.id]
}

// eval evaluates a list of expressions under the binding.
func (x *exec) eval(es []symshape.Expr) ([]int64, error) {
	out := make([]int64, len(es))
	for i, e := range es {
		k, err := e.Eval(x.bind)
		if err != nil {
			return nil, err
		}
		out[i] = k
	}
	return out, nil
}

// numelExpr is the symbolic element count of a shape.
func numelExpr(s []symshape.Expr) symshape.Expr {
	if len(s) == 0 {
		return symshape.Const(1)
	}
	return symshape.Product(s...)
}

// normAxis maps a possibly negative axis into [0, rank).
func normAxis(a int64, rank int) (int, error) {
	if a < -int64(rank) || a >= int64(rank) {
		return 0, fmt.Errorf("axis %d is out of range for rank %d", a, rank)
	}
	if a < 0 {
		a += int64(rank)
	}
	return int(a), nil
}

// prod multiplies dims[lo:hi].
func prod(dims []int, lo, hi int) int {
	n := 1
	for _, d := range dims[lo:hi] {
		n *= d
	}
	return n
}
