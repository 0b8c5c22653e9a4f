package engine

import (
	"errors"
	"fmt"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// instrKind is what a program instruction does.
type instrKind int

const (
	iDevice instrKind = iota // enqueue a lowered node on the session's backend
	iHost                    // compute a node on the CPU
	iUpload                  // copy a host-computed value to its device slot
)

// instr is one entry of the program Run executes in order.
type instr struct {
	kind  instrKind
	node  *graph.Node
	step  *stepDef // iDevice
	val   *vinfo   // iUpload
	early bool     // needs nothing computed on the device: runs before the kernels
	// lim, when set, is the step's elastic active-size override (elastic.go).
	lim *unitLimit
	// lora, when set, is the product's LoRA side branch (lora.go).
	lora *loraSlot

	scratchBytes []symshape.Expr
	scratchReq   []int
	scratchRefs  []tref

	// rec holds the launches this device step made the last time it ran
	// under Session.replayGen recGen; recOK says they may be replayed
	// (see Session.runDevice).
	rec    *opencl.Recording
	recGen uint64
	recOK  bool
	// alt is the recording of the other statistics mode (Session.recMode),
	// swapped with rec when the mode changes.
	alt recording
}

// recording is a device step's recording kept aside (instr.alt).
type recording struct {
	rec *opencl.Recording
	gen uint64
	ok  bool
}

// compiler turns the inferred graph into a program.
type compiler struct {
	s     *Session
	m     *graph.Model
	g     *graph.Graph
	res   *infer.Result
	fs    kernels.Storage
	vals  []*vinfo
	byVal map[*graph.Value]*vinfo
	prog  []*instr

	hostDev *kernels.HostDevice
	// memLimit is Options.MemoryLimit: it bounds what the host computes
	// at run time too (0: the memory available).
	memLimit  int64
	hostSteps map[*graph.Node]*stepDef
}

func newCompiler(s *Session, m *graph.Model, res *infer.Result, fs kernels.Storage) *compiler {
	return &compiler{s: s, m: m, g: m.Graph, res: res, fs: fs, byVal: map[*graph.Value]*vinfo{},
		hostDev: &kernels.HostDevice{}, hostSteps: map[*graph.Node]*stepDef{}}
}

// backendName names the backend a lowering targets, for errors.
func (c *compiler) backendName(host bool) string {
	if host {
		return "CPU (pure-Go, for constant folding and host-side shape computations)"
	}
	return c.s.dev.Name()
}

// info returns (creating on first use) the record of a graph value.
func (c *compiler) info(v *graph.Value) *vinfo {
	if vi := c.byVal[v]; vi != nil {
		return vi
	}
	vi := &vinfo{id: len(c.vals), v: v, name: v.Name, dt: v.Type, shape: v.Shape, req: -1}
	vi.root = vi
	c.vals = append(c.vals, vi)
	c.byVal[v] = vi
	return vi
}

// newConst registers a constant made during lowering.
func (c *compiler) newConst(name string, h *hostTensor) *vinfo {
	shape := make([]symshape.Expr, len(h.shape))
	for i, d := range h.shape {
		shape[i] = symshape.Const(int64(d))
	}
	vi := &vinfo{id: len(c.vals), name: name, dt: h.dt, shape: shape, kind: vkConst, konst: h, req: -1, early: true}
	vi.root = vi
	c.vals = append(c.vals, vi)
	return vi
}

// newDevice registers a device value made during lowering (stepDef.joint).
func (c *compiler) newDevice(name string, dt dtype.Type, shape []symshape.Expr) *vinfo {
	vi := &vinfo{id: len(c.vals), name: name, dt: dt, shape: shape, req: -1}
	vi.root = vi
	c.vals = append(c.vals, vi)
	return vi
}

// emit appends an instruction and returns its program index (1-based: 0
// stands for "before the program", where inputs are written).
func (c *compiler) emit(in *instr) int {
	c.prog = append(c.prog, in)
	return len(c.prog)
}

func (c *compiler) defOf(r *vinfo) int { return r.def }

// build compiles every node of the main graph.
func (c *compiler) build(known map[string]*graph.Tensor) error {
	for name := range known {
		found := false
		for _, v := range c.g.Inputs {
			found = found || v.Name == name
		}
		if !found {
			return fmt.Errorf("engine: Options.Known names %q, which is not an input of the model", name)
		}
	}
	for _, v := range c.g.Inputs {
		vi := c.info(v)
		if t := known[v.Name]; t != nil {
			h, err := hostFromGraph(t)
			if err != nil {
				return fmt.Errorf("engine: known input %q: %w", v.Name, err)
			}
			vi.kind, vi.konst, vi.early = vkConst, h, true
			continue
		}
		vi.kind, vi.early = vkInput, true
	}
	for _, v := range c.g.Initializers {
		vi := c.info(v)
		vi.kind, vi.early = vkConst, true
		if v.Const != nil {
			if deferWiden(vi, v.Const) {
				continue
			}
			// An unsupported type only matters if something reads it.
			vi.konst, _ = hostFromGraph(v.Const)
		}
	}
	for _, n := range c.g.Nodes {
		if err := c.node(n); err != nil {
			return err
		}
	}
	for _, v := range c.g.Outputs {
		c.info(v).root.output = true
	}
	return nil
}

// node compiles one node according to its class.
func (c *compiler) node(n *graph.Node) error {
	cls, ok := c.res.Class[n]
	if !ok {
		cls = infer.Device // made by a rewrite
	}
	key := opKey(n.Domain, n.OpType)
	opset := c.m.Opset(n.Domain)
	lc := &lowerCtx{c: c, n: n, opset: opset, fs: c.fs}
	for _, o := range n.Outputs {
		if o != nil {
			c.info(o)
		}
	}
	if len(n.Subgraphs()) > 0 && key != fusedOp {
		return lc.unsupported("control flow and other subgraph-holding operators are not supported")
	}
	switch cls {
	case infer.Folded:
		for _, o := range n.Outputs {
			if o == nil {
				continue
			}
			vi := c.info(o)
			vi.kind, vi.elems, vi.early = vkFolded, o.Elems, true
			if shape, ok := constShape(o.Shape); ok {
				vals := make([]int64, len(o.Elems))
				all := true
				for i, e := range o.Elems {
					if vals[i], all = e.Const(); !all {
						break
					}
				}
				if all && hostSize(o.Type) > 0 && numel(shape) == len(vals) {
					vi.kind, vi.konst = vkConst, hostFromInts(o.Type, shape, vals)
				}
			}
		}
		return nil
	case infer.ConstFold:
		ins := make([]*hostTensor, len(n.Inputs))
		for i, v := range n.Inputs {
			if v == nil {
				continue
			}
			h, err := c.constHost(c.info(v))
			if err != nil {
				return fmt.Errorf("engine: node %q (%s): constant folding: input %q: %w", n.Name, n.OpType, v.Name, err)
			}
			ins[i] = h
		}
		outs, err := c.runHost(n, ins, symshape.Binding{})
		if err != nil {
			return fmt.Errorf("engine: node %q (%s): constant folding: %w", n.Name, n.OpType, err)
		}
		for k, o := range n.Outputs {
			if o == nil || k >= len(outs) {
				continue
			}
			vi := c.info(o)
			vi.kind, vi.konst, vi.early = vkConst, outs[k], true
		}
		return nil
	}
	// Folded nodes never read constants' contents; everything else might.
	for i, v := range n.Inputs {
		if v != nil && c.info(v).root.kind == vkConst && c.info(v).root.konst == nil {
			return lc.unsupported("input %d (%s): constant of element type %v", i, v.Name, v.Type)
		}
	}
	if cls == infer.HostRuntime {
		return c.hostInstr(n)
	}
	if aliasOps[key] {
		// A view whose shape is only known from data at run time (a
		// Reshape to a shape read from an input) runs on the host, which
		// computes the shape and binds its fresh symbols.
		if c.mintsSymbols(n) {
			return c.hostInstr(n)
		}
		return c.alias(lc)
	}
	if fn := lowerings[key]; fn != nil {
		sd, err := fn(lc)
		var ue *UnsupportedError
		if err != nil && hostOps[key] != nil && errors.As(err, &ue) {
			// A use the device kernel refuses (LayerNormalization's
			// statistics outputs) that the host op computes.
			return c.hostInstr(n)
		}
		if err != nil {
			return err
		}
		return c.deviceInstr(n, sd)
	}
	if hostOps[key] != nil {
		return c.hostInstr(n)
	}
	return lc.unsupported("")
}

// constHost returns a constant's contents in its own (alias) shape.
func (c *compiler) constHost(v *vinfo) (*hostTensor, error) {
	r := v.root
	if r.kind != vkConst || r.konst == nil {
		return nil, fmt.Errorf("not a constant")
	}
	if err := r.materialize(); err != nil {
		return nil, err
	}
	if v == r {
		return r.konst, nil
	}
	shape, ok := constShape(v.shape)
	if !ok {
		return nil, fmt.Errorf("shape %s is not constant", symshape.FormatShape(v.shape))
	}
	return &hostTensor{dt: v.dt, shape: shape, data: r.konst.data}, nil
}

// alias makes a view node's output share its input's storage.
func (c *compiler) alias(lc *lowerCtx) error {
	n := lc.n
	if len(n.Inputs) == 0 || n.Inputs[0] == nil || len(n.Outputs) == 0 || n.Outputs[0] == nil {
		return lc.unsupported("a view needs an input and an output")
	}
	if n.OpType == "Dropout" && lc.in(2) != nil {
		// Training mode drops at random: only a training_mode known to be
		// false at Open makes Dropout the identity.
		if tm, ok := lc.constInts(lc.in(2)); !ok || len(tm) != 1 || tm[0] != 0 {
			return lc.unsupported("training_mode is not a constant false (training mode draws a random mask)")
		}
	}
	if n.OpType == "Dropout" && lc.used(1) {
		// The mask (all true at inference) is computed on the host.
		return c.hostInstr(n)
	}
	in, out := c.info(n.Inputs[0]), c.info(n.Outputs[0])
	if in.dt != out.dt {
		return lc.unsupported("view from %v to %v", in.dt, out.dt)
	}
	out.root, out.kind = in.root, in.root.kind
	out.viewOf, out.viewNode = in, n
	out.segOff = in.segOff
	return nil
}

// use records that program index idx reads v.
func (c *compiler) use(v *vinfo, idx int) {
	r := v.root
	if idx > r.lastUse {
		r.lastUse = idx
	}
}

// hostInstr emits a node computed on the CPU at run time.
func (c *compiler) hostInstr(n *graph.Node) error {
	in := &instr{kind: iHost, node: n, early: true}
	for _, v := range n.Inputs {
		if v != nil && !c.info(v).root.early {
			in.early = false
		}
	}
	idx := c.emit(in)
	for _, v := range n.Inputs {
		if v != nil {
			c.use(c.info(v), idx)
		}
	}
	for _, o := range n.Outputs {
		if o != nil {
			vi := c.info(o)
			vi.kind, vi.early, vi.def = vkHost, in.early, idx
		}
	}
	return nil
}

// deviceInstr emits a lowered node, with uploads of the host values it
// reads.
func (c *compiler) deviceInstr(n *graph.Node, sd *stepDef) error {
	for _, v := range n.Inputs {
		if v == nil {
			continue
		}
		c.needOnDevice(c.info(v))
	}
	idx := c.emit(&instr{kind: iDevice, node: n, step: sd, scratchBytes: sd.scratch})
	for _, v := range n.Inputs {
		if v != nil {
			c.use(c.info(v), idx)
		}
	}
	for _, o := range n.Outputs {
		if o != nil {
			vi := c.info(o)
			vi.kind, vi.needSlot, vi.def = vkDevice, true, idx
		}
	}
	if j := sd.joint; j != nil {
		j.kind, j.needSlot, j.def = vkDevice, true, idx
	}
	return nil
}

// needOnDevice makes v's root available to device steps from now on.
func (c *compiler) needOnDevice(v *vinfo) {
	r := v.root
	r.devUse = true
	switch r.kind {
	case vkInput:
		r.needSlot = true
	case vkFolded, vkHost:
		if r.uploaded {
			return
		}
		r.uploaded, r.needSlot = true, true
		idx := c.emit(&instr{kind: iUpload, val: r, early: r.early})
		// An early upload happens before every kernel, so its slot must be
		// reserved from the start of the program.
		r.def = idx
		if r.early {
			r.def = 0
		}
		c.use(r, idx)
	}
}

// runHost computes node n on the CPU from its inputs' contents.
func (c *compiler) runHost(n *graph.Node, ins []*hostTensor, bind symshape.Binding) ([]*hostTensor, error) {
	key := opKey(n.Domain, n.OpType)
	opset := c.m.Opset(n.Domain)
	if aliasOps[key] && !(hostOps[key] != nil && len(n.Outputs) > 1 && n.Outputs[1] != nil) {
		if len(ins) == 0 || ins[0] == nil || len(n.Outputs) == 0 || n.Outputs[0] == nil {
			return nil, fmt.Errorf("a view needs an input and an output")
		}
		out := n.Outputs[0]
		dims, err := evalShape(out.Shape, bind)
		if err != nil && n.OpType == "Reshape" && len(ins) > 1 && ins[1] != nil {
			dims, err = reshapeDims(ins[0].shape, ins[1], n.AttrInt("allowzero", 0) != 0)
		}
		if err != nil {
			return nil, err
		}
		if numel(dims) != numel(ins[0].shape) {
			return nil, fmt.Errorf("a view of %v (%d elements) as %v (%d elements)", ins[0].shape, numel(ins[0].shape), dims, numel(dims))
		}
		return []*hostTensor{{dt: ins[0].dt, shape: dims, data: ins[0].data}}, nil
	}
	// An op with both a lowering and a host op runs the lowering on the CPU
	// executor, and the host op for the uses the lowering refuses.
	hostFn := hostOps[key]
	sd := c.hostSteps[n]
	if sd == nil {
		fn := lowerings[key]
		if fn == nil {
			if hostFn != nil {
				return hostFn(&hostCtx{c: c, n: n, opset: opset, bind: bind}, ins)
			}
			return nil, &UnsupportedError{Node: n.Name, Op: n.OpType, Domain: n.Domain, Opset: opset, Backend: c.backendName(true)}
		}
		var err error
		sd, err = fn(&lowerCtx{c: c, n: n, opset: opset, host: true, fs: kernels.F32})
		var ue *UnsupportedError
		if err != nil && hostFn != nil && errors.As(err, &ue) {
			return hostFn(&hostCtx{c: c, n: n, opset: opset, bind: bind}, ins)
		}
		if err != nil {
			return nil, err
		}
		c.hostSteps[n] = sd
	}
	dev := c.hostDev
	x := &exec{dev: dev, c: c, bind: bind, dims: make([][]int, len(c.vals)), refs: make([]tref, len(c.vals)),
		host: make([]*hostTensor, len(c.vals)), lazy: true}
	for i, v := range n.Inputs {
		if v == nil || ins[i] == nil {
			continue
		}
		vi := c.info(v)
		x.dims[vi.id] = ins[i].shape
		x.host[vi.id] = ins[i]
		b, _ := allocBuffer(dev, len(ins[i].data))
		copy(b.host(), ins[i].data)
		x.refs[vi.id] = tref{b: b}
	}
	outs := make([]*hostTensor, len(n.Outputs))
	for k, o := range n.Outputs {
		if o == nil {
			continue
		}
		vi := c.info(o)
		dims := x.shape(vi)
		if x.err != nil {
			return nil, x.err
		}
		sz := hostSize(vi.dt)
		if sz == 0 {
			return nil, fmt.Errorf("output %q: element type %v is not supported", o.Name, vi.dt)
		}
		if err := c.checkHostBytes(fmt.Sprintf("output %q", o.Name), dims, sz); err != nil {
			return nil, err
		}
		b, err := allocBuffer(dev, numel(dims)*sz)
		if err != nil {
			return nil, err
		}
		x.refs[vi.id] = tref{b: b}
		outs[k] = &hostTensor{dt: vi.dt, shape: dims, data: b.host()}
	}
	for _, e := range sd.scratch {
		sz, err := e.Eval(bind)
		if err != nil {
			return nil, err
		}
		if err := c.checkHostBytes("scratch", []int{int(sz)}, 1); err != nil {
			return nil, err
		}
		b, err := allocBuffer(dev, int(sz))
		if err != nil {
			return nil, err
		}
		x.scratch = append(x.scratch, tref{b: b})
	}
	if err := sd.run(x); err != nil {
		return nil, err
	}
	if x.err != nil {
		return nil, x.err
	}
	return outs, nil
}

// evalShape evaluates a symbolic shape.
func evalShape(s []symshape.Expr, b symshape.Binding) ([]int, error) {
	out := make([]int, len(s))
	for i, e := range s {
		k, err := e.Eval(b)
		if err != nil {
			return nil, err
		}
		out[i] = int(k)
	}
	return out, nil
}

// hostCtx is what a host op sees.
type hostCtx struct {
	c     *compiler
	n     *graph.Node
	opset int64
	bind  symshape.Binding
}

// mintsSymbols reports whether shape inference minted a fresh symbol at
// node n (a size only known from data at run time).
func (c *compiler) mintsSymbols(n *graph.Node) bool {
	for _, f := range c.res.Fresh {
		if f.Node == n.Name && n.Name != "" {
			return true
		}
	}
	return false
}

// reshapeDims is ONNX Reshape's output shape for data of shape in and the
// target shape tensor (0 copies the input dim unless allowzero, one -1 is
// inferred), or an error when the element counts cannot match.
func reshapeDims(in []int, shape *hostTensor, allowzero bool) ([]int, error) {
	want, err := shape.ints()
	if err != nil {
		return nil, fmt.Errorf("the target shape: %w", err)
	}
	total := numel(in)
	dims := make([]int, len(want))
	infer, known := -1, 1
	for i, d := range want {
		switch {
		case d == -1 && infer < 0:
			infer = i
			continue
		case d == 0 && !allowzero:
			if i >= len(in) {
				return nil, fmt.Errorf("target shape %v copies dim %d of the input %v, which has rank %d", want, i, in, len(in))
			}
			dims[i] = in[i]
		case d < 0 || d > int64(total)+1:
			return nil, fmt.Errorf("target shape %v has dim %d = %d for an input of %d elements", want, i, d, total)
		default:
			dims[i] = int(d)
		}
		known *= max(dims[i], 1)
		if dims[i] == 0 {
			known = 0
		}
	}
	if infer >= 0 {
		if known == 0 || total%known != 0 {
			return nil, fmt.Errorf("cannot reshape %v (%d elements) to %v", in, total, want)
		}
		dims[infer] = total / known
	}
	if numel(dims) != total {
		return nil, fmt.Errorf("cannot reshape %v (%d elements) to %v (%d elements)", in, total, want, numel(dims))
	}
	return dims, nil
}
