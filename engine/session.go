// Package engine compiles an ONNX model once and runs it: shape inference,
// optional graph rewrites, lowering of every tensor node to a kernel step, a
// memory plan over the steps' outputs, and then Run, which binds the
// symbols from the input shapes, enqueues every step and reads the outputs
// once at the end.
//
// Steps talk to one seam, kernels.Device, which has two implementations:
// OpenCL (*kernels.Lib) and the host device (*kernels.HostDevice) running
// the same kernel families' pure-Go references, so every model can be
// checked on both.
package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine/fuse"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/memplan"
	"github.com/tlite/tlite/opencl"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// Precision is how floating-point activations are stored on the device.
// Arithmetic is fp32 either way.
type Precision int

const (
	// FP32 stores activations and weights as float32.
	FP32 Precision = iota
	// FP16 stores float activations, and float32 weights converted at Open,
	// as IEEE binary16.
	FP16
)

// String returns "fp32" or "fp16".
func (p Precision) String() string {
	if p == FP16 {
		return "fp16"
	}
	return "fp32"
}

// Default maxima for symbols Options.Max does not declare. They size the
// memory plan, which is allocated once at Open.
const (
	// DefaultMaxBatch is the maximum of symbols whose name contains "batch".
	DefaultMaxBatch = 4
	// DefaultMax is the maximum of every other symbol of an input dim
	// (sequence lengths, past lengths, image sizes).
	DefaultMax = 1024
)

// Rewrite is a graph transformation run after shape inference and before
// lowering (fusion, for instance). It receives inference's result, whose
// classes say which nodes run on the device. It must keep the graph valid
// and give every value it creates a Shape and a Type.
type Rewrite func(g *graph.Graph, res *infer.Result) error

// Options configure Open.
type Options struct {
	// Device selects the backend: "" = OpenCL, first GPU else first device;
	// "go" = the pure-Go CPU backend; anything else = an opencl.Options
	// Select string ("cpu", "0:1", part of a device name).
	Device string
	// Precision is the activation storage (the pure-Go backend: FP32 only).
	Precision Precision
	// AttentionPrecision is the arithmetic of the session's fused
	// attention on a GPU (kernels.AttnPrecision). The zero value,
	// kernels.AttnAuto, keeps the kernel library's default: half
	// arithmetic where the device has cl_khr_fp16 and Precision is FP16
	// (unless the library's SetAttentionHalf turned it off), fp32
	// elsewhere. kernels.AttnFP32 computes in fp32 from the fp16 storage;
	// kernels.AttnFP16 asks for half arithmetic, and Open fails where the
	// session cannot have it: Precision not FP16, a device without
	// cl_khr_fp16, a CPU device (its attention kernels have no half
	// path) or the pure-Go backend. The setting is the session's own:
	// sessions sharing a library through Kernels may each choose theirs
	// (each precision is its own compiled program).
	AttentionPrecision kernels.AttnPrecision
	// Max declares the largest value of input symbols ("batch", "seq", ...):
	// the memory plan is sized for them and Run refuses larger inputs.
	// Undeclared symbols get their value in the shapes InputShapes
	// returns, else DefaultMaxBatch or DefaultMax. A maximum derived from
	// the model (see Session.Limits) caps all of them.
	Max map[string]int64
	// InputShapes, when set, is called once the inputs' symbolic shapes
	// are known and returns the concrete shapes (by input name; some may
	// be left out) the session will be run with: symbols Max does not
	// declare are bounded by them, so the plan is sized for what is run
	// instead of for the defaults. Inputs beyond a derived limit are
	// refused here.
	InputShapes func(inputs []Port) (map[string][]int, error)
	// MemoryLimit caps the bytes the plan and constants may take; 0 means
	// the device's memory (the available memory for the pure-Go device).
	// A plan beyond it is refused at Open (a *MemoryError).
	MemoryLimit int64
	// FoldBytes is the load-time constant-folding budget
	// (infer.Options.FoldBytes; 0: infer.DefaultFoldBytes).
	FoldBytes int64
	// Profile records per-kernel device time; see Session.Profile.
	Profile bool
	// Priority is the OpenCL queue priority hint (opencl.Options.Priority:
	// on Qualcomm a low priority also asks for the HIGH perf hint).
	Priority opencl.Priority
	// FlushEvery is opencl.Options.FlushEvery: submit queued kernels every
	// FlushEvery launches while a step is enqueued (0 = the default 64,
	// negative = only at the step's end).
	FlushEvery int
	// Labels names every launch after its node (opencl SetLabel) even
	// without Profile, for external profilers.
	Labels bool
	// Kernels, when set, runs the session on this kernel library's device
	// instead of opening one, so sessions share compiled programs. The
	// session does not close it; Device, Priority and FlushEvery are then
	// ignored.
	// Sessions sharing a library share its queue: do not Run them
	// concurrently.
	Kernels *kernels.Lib
	// Rewrites run after shape inference; nil means DefaultRewrites.
	Rewrites []Rewrite
	// Known gives the contents of graph inputs fixed ahead of time: they
	// become constants and are not inputs of Run.
	Known map[string]*graph.Tensor
	// KVCache, when set, gives an exported decoder an in-place KV cache
	// owned by the session (see lower_kv.go and package engine/kv): its
	// past inputs and present outputs are rewritten away after Rewrites.
	KVCache *KVConfig
	// LastLogits makes a decoder compute its logits for the last position
	// of each run only (see fuse.LastRow): the logits output becomes
	// [batch, 1, vocab], and the LM head and final norm skip the prompt's
	// other rows. For generation; perplexity needs every row. A graph the
	// rewrite does not recognise opens unchanged (Session.LastLogits says).
	LastLogits bool
	// Weights says how the model's constants are put on the device (see
	// WeightPlacement); the zero value decides per device.
	Weights WeightPlacement
	// NoReplay turns off the replay of recorded launches (see
	// Session.runDevice): every device step goes through its lowering at
	// every run. For comparisons and checks.
	NoReplay bool
	// CommandBuffers joins runs of replayed device steps into command
	// buffers (cl_khr_command_buffer) enqueued with one call each, on
	// devices that have them (see cmdbuf.go); TLITE_CMDBUF=1 in the
	// environment asks for it too, TLITE_CMDBUF=0 forbids it. Off by
	// default: on PoCL 3.1 it measured no faster (its command buffers
	// enqueue each command as a launch would), so it is there for drivers
	// whose buffers are cheaper. Ignored with NoReplay or Profile.
	CommandBuffers bool
	// NoJoin keeps apart the products that read one activation with
	// constant weights (a decoder's q/k/v and gate/up projections), which
	// the default pipeline otherwise joins into one launch each
	// (fuse.JoinMatMuls, lower_join.go); TLITE_JOIN=0 in the environment
	// does the same. The join runs only with the default Rewrites. For
	// comparisons, and for callers that find products by their weights
	// after Open (BindElastic).
	NoJoin bool
	// LastRowOutputs names outputs of which a caller reads only the last
	// row (the last index of the second-to-last axis): each becomes one
	// row, and the nodes computing it row by row (products with constant
	// weights, norms over the last axis, element-wise ops with
	// broadcasting constants) run on that row only (fuse.LastRowOf). An
	// output whose producer is not row-wise keeps every row
	// (Session.LastRowOutputs lists those rewritten).
	LastRowOutputs []string
}

// OpTime is one row of a profile: a node's kernel launches.
type OpTime struct {
	OpType string
	Node   string
	Kernel string
	Calls  int
	Ms     float64
}

// Session is a compiled model ready to run.
//
// Concurrency: a Session's methods may be called from several goroutines;
// its runs are serialised by a lock, so one session runs one model at a
// time. Sessions that each opened their own device (Options.Kernels nil)
// may run in parallel. Sessions sharing a kernel library through
// Options.Kernels share its command queue and kernel objects and must not
// Run at the same time: serialise them yourself.
type Session struct {
	mu       sync.Mutex
	model    *graph.Model
	ownModel bool
	dev      kernels.Device
	// cl is the OpenCL device behind dev (nil on the host device): its
	// profile is the session's, and the session closes it when ownCL.
	// lib is dev when dev is the OpenCL kernel library (nil otherwise):
	// recording and replaying launches need its fault counter.
	cl    *opencl.Device
	lib   *kernels.Lib
	ownCL bool
	// labels names each step's launches (Options.Profile or Labels).
	labels  bool
	c       *compiler
	inputs  []Port
	outputs []Port
	inVals  []*vinfo
	outVals []*vinfo
	max     map[string]int64
	maxFrom map[string]Maximum
	res     *infer.Result
	plan    *memplan.Plan
	reqs    []memplan.Request // the plan's requests, for messages
	reqRoot []*vinfo
	slots   []*buffer
	consts  []*buffer
	constB  int64
	x       *exec
	profile bool
	goTimes map[string]*OpTime // pure-Go backend profile, by label
	nodeOps map[string]string  // node name -> op type, for profiles
	closed  bool
	// lastLogits: Options.LastLogits rewrote the logits to the last row.
	lastLogits bool
	// lastRows: the outputs rewritten to their last row.
	lastRows []string
	// kvStats asks cache-reading attention for statistics
	// (KVConfig.AttentionStats); attnStats are their buffers.
	kvStats  bool
	statsOff bool // SetAttentionStats(false): Runs skip the statistics
	// statsAcc holds the device totals of AccumulateAttentionStats;
	// statsW is its weight, 0 while the statistics are per run.
	statsAcc *statsTotals
	statsW   float32
	// recMode is the statistics mode the instructions' current
	// recordings belong to (statsMode), the other mode's kept in alt.
	recMode    int
	kvCacheSet map[*vinfo]bool
	kvCap      int
	attnStats  []*attnStat
	// attnPrec is Options.AttentionPrecision, set on every attention
	// launch.
	attnPrec kernels.AttnPrecision
	// attnHook is SetAttentionHook's callback (attnhook.go); attnLayers
	// counts the attentions it is called at.
	attnHook   AttentionHook
	attnShadow bool
	attnLayers int
	// loraBufs are the uploaded LoRA adapter sets and loraTmp their
	// side branches' scratch (lora.go).
	loraBufs []*buffer
	loraTmp  *buffer
	// layerGate is SetLayerGate's callback (layergate.go).
	layerGate LayerGate
	// wstats says where the constants were put (weights.go).
	wstats WeightStats
	// cacheWriter starts the background write of the program cache once.
	cacheWriter sync.Once
	// noReplay is Options.NoReplay; replayGen numbers the (binding,
	// configuration) the device steps' recordings are valid for.
	noReplay  bool
	replayGen uint64
	// replayed counts the device steps run from a recording (Replayed).
	replayed int64
	// cmdbuf is Options.CommandBuffers; cb the command buffers made for
	// it (cmdbuf.go).
	cmdbuf bool
	cb     cmdbufState
	// lastShapes and lastBind are the input shapes of the last Run that
	// bound and checked them, and the binding they gave (checkInputs).
	lastShapes map[string][]int
	lastBind   symshape.Binding
}

// Open loads the ONNX model at path and compiles it.
func Open(path string, opts Options) (*Session, error) {
	m, err := graph.Load(path)
	if err != nil {
		return nil, err
	}
	s, err := OpenModel(m, opts)
	if err != nil {
		m.Close()
		return nil, err
	}
	s.ownModel = true
	return s, nil
}

// OpenModel compiles m, which must stay open (and unmodified) until the
// session is closed. Shape inference and rewrites annotate m in place.
func OpenModel(m *graph.Model, opts Options) (*Session, error) {
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("engine: no model")
	}
	s := &Session{model: m, profile: opts.Profile, labels: opts.Profile || opts.Labels, nodeOps: map[string]string{}, noReplay: opts.NoReplay,
		cmdbuf: wantCommandBuffers(opts.CommandBuffers)}
	fs := kernels.F32
	if opts.Precision == FP16 {
		fs = kernels.F16
	}
	switch {
	case opts.Kernels != nil:
		s.dev, s.lib, s.cl = opts.Kernels, opts.Kernels, opts.Kernels.Device()
	case opts.Device == "go":
		if fs != kernels.F32 {
			return nil, fmt.Errorf("engine: the pure-Go backend stores floats as float32 only; open it with Precision FP32")
		}
		hd := &kernels.HostDevice{}
		if opts.Profile {
			s.goTimes = map[string]*OpTime{}
			hd.Timing = s.recordGo
		}
		s.dev = hd
	default:
		// Program binaries are cached after the first run (see
		// writeCacheAfterFirstRun), not as each program is built.
		dev, err := opencl.Open(opencl.Options{Select: opts.Device, Priority: opts.Priority, Profile: opts.Profile, FlushEvery: opts.FlushEvery, DeferCacheWrites: true})
		if err != nil {
			return nil, errNoDevice(err)
		}
		s.lib = kernels.New(dev)
		s.dev, s.cl, s.ownCL = s.lib, dev, true
	}
	if err := s.checkAttentionPrecision(opts.AttentionPrecision, fs); err != nil {
		s.release()
		return nil, err
	}
	s.attnPrec = opts.AttentionPrecision
	wp, err := s.weightPlacement(opts.Weights)
	if err != nil {
		s.release()
		return nil, err
	}
	s.wstats.Placement = wp
	if err := s.compile(m, opts, fs); err != nil {
		s.release()
		return nil, err
	}
	return s, nil
}

// checkAttentionPrecision refuses an Options.AttentionPrecision the
// session's device cannot honour in activation storage fs.
func (s *Session) checkAttentionPrecision(p kernels.AttnPrecision, fs kernels.Storage) error {
	if err := s.dev.CheckAttentionPrecision(fs, p); err != nil {
		return fmt.Errorf("engine: Options.AttentionPrecision %v: %w", p, err)
	}
	return nil
}

// compile runs the pipeline: infer, rewrites, lowering, plan, allocation.
func (s *Session) compile(m *graph.Model, opts Options, fs kernels.Storage) error {
	// An operator nothing knows is reported as unsupported, naming the
	// node, before shape inference trips over it.
	for _, n := range m.Graph.Nodes {
		key := opKey(n.Domain, n.OpType)
		if !infer.HasRule(n.Domain, n.OpType) && lowerings[key] == nil && hostOps[key] == nil && !aliasOps[key] {
			return &UnsupportedError{Node: n.Name, Op: n.OpType, Domain: n.Domain, Opset: m.Opset(n.Domain), Backend: s.dev.Name()}
		}
	}
	res, err := infer.Run(m, infer.Options{Inputs: opts.Known, FoldBytes: opts.FoldBytes})
	if err != nil {
		return fmt.Errorf("engine: shape inference: %w", err)
	}
	rw := opts.Rewrites
	if rw == nil {
		rw = DefaultRewrites()
	}
	for i, r := range rw {
		if err := r(m.Graph, res); err != nil {
			return fmt.Errorf("engine: rewrite %d: %w", i, err)
		}
	}
	if opts.KVCache != nil {
		// The cache never holds more tokens than the model can position.
		if lim, _, ok := decoderContext(m.Graph, res); ok && int64(opts.KVCache.MaxContext) > lim {
			kc := *opts.KVCache
			kc.MaxContext = int(lim)
			opts.KVCache = &kc
		}
		if err := s.applyKVCache(m.Graph, res, &opts); err != nil {
			return err
		}
	}
	if opts.LastLogits {
		r, err := fuse.LastRow(m.Graph, res)
		if err != nil {
			return fmt.Errorf("engine: last-row logits: %w", err)
		}
		s.lastLogits = r.Output != ""
		if s.lastLogits {
			s.lastRows = append(s.lastRows, r.Output)
		}
	}
	for _, name := range opts.LastRowOutputs {
		r, err := fuse.LastRowOf(m.Graph, res, name)
		if err != nil {
			return fmt.Errorf("engine: Options.LastRowOutputs: %w", err)
		}
		if r.Output != "" {
			s.lastRows = append(s.lastRows, r.Output)
		}
	}
	if opts.Rewrites == nil && joinProducts(opts.NoJoin) {
		if err := fuse.JoinMatMuls(m.Graph, res); err != nil {
			return fmt.Errorf("engine: joining products: %w", err)
		}
	}
	c := newCompiler(s, m, res, fs)
	c.memLimit = opts.MemoryLimit
	s.c = c
	if err := c.build(opts.Known); err != nil {
		return err
	}
	for _, n := range m.Graph.Nodes {
		s.nodeOps[n.Name] = n.OpType
	}
	// Ports and maxima.
	for _, v := range m.Graph.Inputs {
		if _, known := opts.Known[v.Name]; known {
			continue
		}
		vi := c.info(v)
		s.inputs = append(s.inputs, Port{Name: v.Name, Type: v.Type.String(), Shape: v.Shape})
		s.inVals = append(s.inVals, vi)
	}
	for _, v := range m.Graph.Outputs {
		s.outputs = append(s.outputs, Port{Name: v.Name, Type: v.Type.String(), Shape: v.Shape})
		s.outVals = append(s.outVals, c.info(v))
	}
	s.res = res
	if err := s.setMaxima(res, &opts); err != nil {
		return err
	}
	if err := s.planMemory(); err != nil {
		return err
	}
	if err := s.checkFit(opts.MemoryLimit); err != nil {
		return err
	}
	return s.allocate()
}

// DeviceSteps is the number of kernel steps the program enqueues on the
// session's device per Run: zero when the whole model was folded at Open
// or runs on the host (then no device kernel is exercised).
func (s *Session) DeviceSteps() int {
	n := 0
	for _, in := range s.c.prog {
		if in.kind == iDevice {
			n++
		}
	}
	return n
}

// LastLogits reports whether the session computes logits for the last
// position only (Options.LastLogits applied to a graph it recognised).
func (s *Session) LastLogits() bool { return s.lastLogits }

// LastRowOutputs lists the outputs that hold their last row only
// (Options.LastLogits and Options.LastRowOutputs, where the rewrite
// applied).
func (s *Session) LastRowOutputs() []string { return append([]string(nil), s.lastRows...) }

// Inputs describes the inputs Run takes.
func (s *Session) Inputs() []Port { return append([]Port(nil), s.inputs...) }

// Outputs describes the outputs Run returns.
func (s *Session) Outputs() []Port { return append([]Port(nil), s.outputs...) }

// Maxima returns the maximum of every input symbol the plan is sized for
// (MaximaFrom says where each came from).
func (s *Session) Maxima() map[string]int64 {
	out := make(map[string]int64, len(s.max))
	for k, v := range s.max {
		out[k] = v
	}
	return out
}

// Plan is the memory plan of the session's intermediate tensors.
func (s *Session) Plan() *memplan.Plan { return s.plan }

// MemoryReport describes the memory plan at binding b (symbol values, as
// Run would bind them) and the constants uploaded at Open.
func (s *Session) MemoryReport(b symshape.Binding) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "constants: %d buffers, %s\n", len(s.consts), memplan.Bytes(s.constB))
	sb.WriteString(s.plan.Report(b))
	return sb.String()
}

// bounds are the symbol ranges the plan is proven for.
func (s *Session) bounds() symshape.Bounds {
	b := symshape.Bounds{}
	for k, v := range s.max {
		b[k] = [2]int64{0, v}
	}
	return b
}

// planMemory builds the memory plan over the program's device tensors.
func (s *Session) planMemory() error {
	c := s.c
	var reqs []memplan.Request
	for _, r := range c.vals {
		if r.root != r || !r.needSlot {
			continue
		}
		_, esz, err := storeFor(r.dt, c.fs)
		if err != nil {
			return fmt.Errorf("engine: %s: %w", r.name, err)
		}
		last := r.lastUse
		if r.output {
			last = memplan.Forever
		}
		def := c.defOf(r)
		if last < def {
			last = def
		}
		r.req = len(reqs)
		reqs = append(reqs, memplan.Request{Name: r.name, Bytes: symshape.Mul(numelExpr(r.shape), symshape.Const(int64(esz))), Def: def, LastUse: last})
		s.reqRoot = append(s.reqRoot, r)
	}
	for i, in := range c.prog {
		idx := i + 1
		for _, b := range in.scratchBytes {
			in.scratchReq = append(in.scratchReq, len(reqs))
			reqs = append(reqs, memplan.Request{Name: fmt.Sprintf("%s scratch", in.node.Name), Bytes: b, Def: idx, LastUse: idx})
			s.reqRoot = append(s.reqRoot, nil)
		}
		if in.kind != iDevice {
			continue
		}
		for _, p := range in.step.inPlace {
			o, inp := in.node.Outputs[p[0]], in.node.Inputs[p[1]]
			if o == nil || inp == nil {
				continue
			}
			if c.info(o).segOff != nil || c.info(inp).segOff != nil {
				// A range of a joined product's buffer starts elsewhere
				// than its root: index i of one is not index i of the
				// other.
				continue
			}
			ro, ri := c.info(o).root, c.info(inp).root
			if ro.req >= 0 && ri.req >= 0 {
				reqs[ro.req].InPlace = append(reqs[ro.req].InPlace, ri.req)
			}
		}
	}
	if err := s.checkBounded(reqs); err != nil {
		return err
	}
	plan, err := memplan.Build(reqs, memplan.Options{Bounds: s.bounds(), Align: 64})
	if err != nil {
		return fmt.Errorf("engine: memory plan: %w", err)
	}
	s.plan, s.reqs = plan, reqs
	return nil
}

// allocate creates every slot and uploads the constants: after this, Run
// allocates no device memory.
func (s *Session) allocate() error {
	c := s.c
	x := &exec{dev: s.dev, c: c, dims: make([][]int, len(c.vals)), refs: make([]tref, len(c.vals)), host: make([]*hostTensor, len(c.vals))}
	for _, sl := range s.plan.Slots {
		b, err := allocBuffer(s.dev, int(max(sl.Max, 64)))
		if err != nil {
			return fmt.Errorf("engine: allocating a %s slot for %s: %w", memplan.Bytes(sl.Max), s.reqName(sl.Tenants), err)
		}
		s.slots = append(s.slots, b)
	}
	for i, r := range s.reqRoot {
		if r != nil {
			x.refs[r.id] = tref{b: s.slots[s.plan.Assign[i]]}
		}
	}
	for _, in := range c.prog {
		for _, q := range in.scratchReq {
			in.scratchRefs = append(in.scratchRefs, tref{b: s.slots[s.plan.Assign[q]]})
		}
	}
	for _, r := range c.vals {
		if r.root != r || r.kind != vkConst || !r.devUse {
			continue
		}
		et, _, err := storeFor(r.dt, c.fs)
		if err != nil {
			return fmt.Errorf("engine: constant %s: %w", r.name, err)
		}
		b, size, err := s.uploadConst(r, et)
		if err != nil {
			return fmt.Errorf("engine: uploading constant %s (%s): %w", r.name, memplan.Bytes(int64(size)), err)
		}
		s.consts = append(s.consts, b)
		s.constB += int64(size)
		x.refs[r.id] = tref{b: b}
	}
	for _, v := range c.vals {
		if v.root != v {
			x.refs[v.id] = x.refs[v.root.id]
		}
	}
	s.x = x
	return nil
}

func (s *Session) reqName(tenants []int) string {
	if len(tenants) == 0 {
		return "nothing"
	}
	r := s.reqRoot[tenants[0]]
	if r == nil {
		return "scratch"
	}
	return r.name
}

// Run computes the outputs for inputs (by input name). A bad input is an
// *InputError naming it, its expected symbolic shape and what was given;
// the session stays usable after any error.
func (s *Session) Run(inputs map[string]*tensor.Dense) (map[string]*tensor.Dense, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("engine: Run on a closed session")
	}
	hosts, bind, err := s.checkInputs(inputs)
	if err != nil {
		return nil, err
	}
	out, err := s.run(hosts, bind)
	if err != nil {
		// Drain whatever was enqueued so the next run starts clean.
		s.dev.Finish()
		return nil, err
	}
	s.writeCacheAfterFirstRun()
	return out, nil
}

// checkInputs validates the inputs and binds the symbols.
func (s *Session) checkInputs(inputs map[string]*tensor.Dense) ([]*hostTensor, symshape.Binding, error) {
	byName := map[string]int{}
	for i, p := range s.inputs {
		byName[p.Name] = i
	}
	var unknown []string
	for name := range inputs {
		if _, ok := byName[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		names := make([]string, len(s.inputs))
		for i, p := range s.inputs {
			names[i] = p.Name
		}
		return nil, nil, &InputError{Input: unknown[0], Problem: fmt.Sprintf("the model has no such input (its inputs: %s)", strings.Join(names, ", "))}
	}
	hosts := make([]*hostTensor, len(s.inputs))
	shapes := map[string][]int{}
	for i, p := range s.inputs {
		t, ok := inputs[p.Name]
		if !ok || t == nil {
			return nil, nil, &InputError{Input: p.Name, Problem: "missing", Expected: p.Type + " " + symshape.FormatShape(p.Shape), Got: "nothing"}
		}
		want := s.inVals[i].dt
		got := dtypeOfDense(t.Dtype())
		if got != want && !(want == dtype.Float16 && got == dtype.Float32) {
			return nil, nil, &InputError{Input: p.Name, Problem: "wrong element type", Expected: p.Type + " " + symshape.FormatShape(p.Shape), Got: fmt.Sprintf("%v %v", t.Dtype(), []int(t.Shape()))}
		}
		h, err := hostFromDense(t)
		if err != nil {
			return nil, nil, &InputError{Input: p.Name, Problem: err.Error()}
		}
		h.dt = want
		hosts[i] = h
		shapes[p.Name] = h.shape
	}
	if s.lastShapes != nil && sameShapes(shapes, s.lastShapes) {
		// The same shapes as the last good run (a decode step after
		// another): the same binding, which passed the same checks.
		// run adds data-dependent symbols to its binding: a copy.
		if err := s.checkValueLimits(inputs); err != nil {
			return nil, nil, err
		}
		return hosts, maps.Clone(s.lastBind), nil
	}
	// Derived limits first: past one, the model itself cannot compute,
	// whatever maximum the plan was sized for.
	bind, err := bindShapes(s.inputs, shapes, nil)
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkLimits(bind, shapes); err != nil {
		return nil, nil, err
	}
	if bind, err = bindShapes(s.inputs, shapes, s.max); err != nil {
		return nil, nil, err
	}
	if err := s.checkValueLimits(inputs); err != nil {
		return nil, nil, err
	}
	s.lastShapes, s.lastBind = map[string][]int{}, maps.Clone(bind)
	for k, v := range shapes {
		s.lastShapes[k] = slices.Clone(v)
	}
	return hosts, bind, nil
}

// sameShapes reports whether a and b give every input the same shape.
func sameShapes(a, b map[string][]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}

// run executes the program under bind.
func (s *Session) run(hosts []*hostTensor, bind symshape.Binding) (map[string]*tensor.Dense, error) {
	c, x := s.c, s.x
	// A run under the same binding as the last one (every decode step
	// between two paddings of the attended length) keeps the shapes the
	// last run evaluated, unless that run bound a symbol from data (a
	// size computed on the host may differ this time).
	keep := x.shapesBind != nil && sameBinding(bind, x.shapesBind)
	if !keep {
		x.shapesBind = maps.Clone(bind)
	}
	mode := s.statsMode()
	if mode != s.recMode {
		// A run accumulating statistics launches more kernels than one
		// without: each mode replays its own recordings.
		for _, in := range c.prog {
			cur := recording{in.rec, in.recGen, in.recOK}
			in.rec, in.recGen, in.recOK = in.alt.rec, in.alt.gen, in.alt.ok
			in.alt = cur
		}
		s.recMode = mode
	}
	replay := s.replayAllowed()
	if !keep || !replay {
		// Recordings hold for one binding and one configuration.
		s.replayGen++
	}
	nbound := len(bind)
	x.bind = bind
	x.err = nil
	for i := range x.dims {
		if !keep {
			x.dims[i] = nil
		}
		x.host[i] = nil
	}
	for i, v := range s.inVals {
		x.host[v.id] = hosts[i]
		x.dims[v.id] = hosts[i].shape
		if v.req >= 0 {
			et, _, _ := storeFor(v.dt, c.fs)
			if err := s.dev.Write(x.refs[v.id].b.m, 0, toStorage(hosts[i], et)); err != nil {
				return nil, fmt.Errorf("engine: uploading input %q: %w", v.name, err)
			}
		}
	}
	// Host work that needs nothing from the device runs first, so its
	// uploads (blocking writes) do not stall the queue between kernels.
	for _, in := range c.prog {
		if in.early {
			if err := s.exec(in); err != nil {
				x.shapesBind = nil
				return nil, err
			}
		}
	}
	baking := s.commandBuffersOn(replay)
	for i := 0; i < len(c.prog); i++ {
		in := c.prog[i]
		if in.early {
			continue
		}
		var err error
		switch {
		case baking && s.bakeable(in):
			var next int
			if next, err = s.runSegment(c.prog, i); err == nil && next > i {
				i = next - 1
				continue
			}
			if err == nil {
				// Not baked: the step runs on its own.
				err = s.runDevice(in)
			}
		case replay && in.replayable():
			err = s.runDevice(in)
		default:
			err = s.exec(in)
		}
		if err != nil {
			x.shapesBind = nil
			s.replayGen++
			return nil, err
		}
	}
	if len(bind) != nbound {
		// The run bound a symbol from data: its shapes hold for this
		// run's data only.
		x.shapesBind = nil
	}
	s.statsRan()
	if err := s.dev.Finish(); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	out := make(map[string]*tensor.Dense, len(s.outVals))
	var given map[*vinfo]bool // device results already handed out in place
	for i, v := range s.outVals {
		fresh := v.root.kind == vkDevice && x.host[v.root.id] == nil && !given[v.root]
		h, err := x.hostOf(v)
		if err != nil {
			return nil, fmt.Errorf("engine: output %q: %w", v.name, err)
		}
		var d *tensor.Dense
		if fresh {
			// Read from the device just now and nothing else holds it:
			// no conversion copy.
			if given == nil {
				given = map[*vinfo]bool{}
			}
			given[v.root] = true
			d, err = h.denseOwned()
		} else {
			d, err = h.dense()
		}
		if err != nil {
			return nil, fmt.Errorf("engine: output %q: %w", v.name, err)
		}
		out[s.outputs[i].Name] = d
	}
	return out, nil
}

// Replayed counts the device steps run again from their recorded launches
// since Open (see Options.NoReplay).
func (s *Session) Replayed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replayed
}

// replayAllowed reports whether device steps may be replayed from their
// recordings this run: on OpenCL, unless Options.NoReplay, and not while
// a callback runs between steps (attention hook, layer gate) or attention
// statistics are gathered per run (accumulated ones replay: statsMode).
func (s *Session) replayAllowed() bool {
	// Runs with statistics switched off replay, and so do runs that
	// accumulate them (statsMode 1): each mode replays recordings made in
	// it (run swaps them when the mode changes), and the statistics'
	// host-side bookkeeping is made per run (statsRan). A run gathering
	// per-run statistics starts a new recording generation (run).
	return s.lib != nil && !s.noReplay && s.attnHook == nil && s.layerGate == nil && (!s.kvStats || s.statsOff || s.statsMode() == 1)
}

// replayable reports whether in is a device step that a replaying run
// sends through runDevice. Steps with an elastic limit or a LoRA branch
// are not: their active sizes and adapters are set between runs, under
// one binding.
func (in *instr) replayable() bool {
	return in.kind == iDevice && in.lim == nil && in.lora == nil
}

// recorded reports whether in's recording was made in this replay
// generation and may be replayed (runDevice replays it).
func (s *Session) recorded(in *instr) bool {
	return in.recOK && in.recGen == s.replayGen
}

// runDevice runs device step in: again from its recording when it was
// recorded under the same binding (replayGen) and may be replayed, else
// through its lowering while recording its launches.
//
// A decode step runs under one binding for many steps (the attended
// length is padded), and its launches are then the same kernels, sizes
// and buffers each time; only the buffers' contents differ. Replaying them
// skips the lowering's shape evaluation, variant choice and argument
// packing. A step is not replayed when it did anything but launch
// kernels (a read, write, copy or allocation), read data contents on the
// host (its arguments may depend on them) or took a fault slot (its
// bookkeeping is made at launch).
func (s *Session) runDevice(in *instr) error {
	if s.recorded(in) {
		if err := s.cl.Replay(in.rec); err != nil {
			return fmt.Errorf("engine: node %q (%s): %w", in.node.Name, in.node.OpType, err)
		}
		s.replayed++
		return nil
	}
	lib := s.lib
	if in.rec == nil {
		in.rec = &opencl.Recording{}
	}
	before, faults := s.cl.Stats(), lib.FaultLaunches()
	s.x.dataRead = false
	s.cl.StartRecording(in.rec)
	err := s.exec(in)
	s.cl.StopRecording()
	after := s.cl.Stats()
	in.recGen = s.replayGen
	in.recOK = err == nil && !s.x.dataRead && lib.FaultLaunches() == faults &&
		after.BytesWritten == before.BytesWritten && after.BytesRead == before.BytesRead &&
		after.BytesCopied == before.BytesCopied && after.Allocs == before.Allocs
	return err
}

// exec runs one program instruction.
func (s *Session) exec(in *instr) error {
	x := s.x
	switch in.kind {
	case iDevice:
		// Gathers are always labelled: a device-side index fault is
		// reported by Finish under the label of the launch.
		if s.labels || in.node.OpType == "Gather" || in.node.OpType == "GatherElements" {
			s.dev.SetLabel(in.node.Name)
		}
		x.scratch = in.scratchRefs
		// Every shape the step reads must evaluate (no negative dim, every
		// symbol bound) before a kernel sizes its work by it.
		for _, vs := range [][]*graph.Value{in.node.Inputs, in.node.Outputs} {
			for _, v := range vs {
				if v != nil {
					x.shape(s.c.info(v))
				}
			}
		}
		if x.err != nil {
			return fmt.Errorf("engine: node %q (%s): %w", in.node.Name, in.node.OpType, x.err)
		}
		x.lim = in.lim
		err := in.step.run(x)
		x.lim = nil
		if err == nil {
			err = x.err
		}
		if err == nil && in.lora != nil && in.lora.cur.rank > 0 {
			err = s.runLoRA(in.lora)
		}
		if err != nil {
			return fmt.Errorf("engine: node %q (%s): %w", in.node.Name, in.node.OpType, err)
		}
	case iUpload:
		h, err := x.hostOf(in.val)
		if err == nil {
			et, _, _ := storeFor(in.val.dt, s.c.fs)
			r := x.refs[in.val.id]
			err = s.dev.Write(r.b.m, 0, toStorage(h, et))
		}
		if err != nil {
			return fmt.Errorf("engine: uploading %s: %w", in.val.name, err)
		}
	case iHost:
		ins := make([]*hostTensor, len(in.node.Inputs))
		for i, v := range in.node.Inputs {
			if v == nil {
				continue
			}
			h, err := x.hostOf(s.c.info(v))
			if err != nil {
				return fmt.Errorf("engine: node %q (%s): input %q: %w", in.node.Name, in.node.OpType, v.Name, err)
			}
			ins[i] = h
		}
		outs, err := s.c.runHost(in.node, ins, x.bind)
		if err != nil {
			return fmt.Errorf("engine: node %q (%s) on the host: %w", in.node.Name, in.node.OpType, err)
		}
		for k, v := range in.node.Outputs {
			if v == nil || k >= len(outs) || outs[k] == nil {
				continue
			}
			vi := s.c.info(v)
			x.host[vi.id] = outs[k]
			x.dims[vi.id] = outs[k].shape
			// A data-dependent dim (a fresh symbol) is bound by what the
			// host computed.
			for a, d := range vi.shape {
				if name, ok := d.SymName(); ok && a < len(outs[k].shape) {
					if _, bound := x.bind[name]; !bound {
						d := int64(outs[k].shape[a])
						if m, ok := s.max[name]; ok && d > m {
							return fmt.Errorf("engine: node %q (%s) on the host: axis %d of %q is %d, more than the maximum of %s the plan was sized for (%s): bound it with Options.Max (tl: --max %s=%d)",
								in.node.Name, in.node.OpType, a, v.Name, d, name, s.maxFrom[name], name, d)
						}
						x.bind[name] = d
					}
				}
			}
		}
	}
	return nil
}

// hostOf returns v's contents on the host, reading device values back.
func (x *exec) hostOf(v *vinfo) (*hostTensor, error) {
	r := v.root
	if r.kind != vkConst && r.kind != vkFolded {
		x.dataRead = true
	}
	h := x.host[r.id]
	if h == nil {
		switch r.kind {
		case vkConst:
			if err := r.materialize(); err != nil {
				return nil, err
			}
			h = r.konst
		case vkFolded:
			var err error
			h, err = hostFromElems(r.dt, x.shape(r), r.elems, x.bind)
			if err != nil {
				return nil, err
			}
		case vkDevice:
			et, esz, err := storeFor(r.dt, x.c.fs)
			if err != nil {
				return nil, err
			}
			dims := x.shape(r)
			if x.err != nil {
				return nil, x.err
			}
			raw := make([]byte, numel(dims)*esz)
			ref := x.refs[r.id]
			if err := x.dev.Read(ref.b.m, ref.off*esz, raw); err != nil {
				return nil, err
			}
			h = fromStorage(raw, et, r.dt, dims)
		default:
			return nil, fmt.Errorf("%s has not been computed", r.name)
		}
		x.host[r.id] = h
	}
	if v == r {
		return h, nil
	}
	dims := x.shape(v)
	if x.err != nil {
		return nil, x.err
	}
	data := h.data
	if v.segOff != nil {
		// A range of a joined product's buffer (lower_join.go).
		off, err := v.segOff.Eval(x.bind)
		if err != nil {
			return nil, fmt.Errorf("%s: its offset in %s: %w", v.name, r.name, err)
		}
		esz := hostSize(v.dt)
		lo, hi := int(off)*esz, (int(off)+numel(dims))*esz
		if off < 0 || hi > len(data) {
			return nil, fmt.Errorf("%s: elements %d to %d of %s, which holds %d", v.name, off, hi/esz, r.name, len(data)/max(esz, 1))
		}
		data = data[lo:hi]
	}
	return &hostTensor{dt: v.dt, shape: dims, data: data}, nil
}

// errNoDevice wraps an OpenCL open failure with the fallback.
func errNoDevice(err error) error {
	return &NoDeviceError{Err: err}
}

// Profile returns the time spent per node and kernel since Open (or the
// last Profile call, which resets it), in program order of first launch.
// It needs Options.Profile.
func (s *Session) Profile() ([]OpTime, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.profile {
		return nil, fmt.Errorf("engine: profiling is off; open the session with Options.Profile")
	}
	if s.goTimes != nil {
		var out []OpTime
		for _, t := range s.goTimes {
			out = append(out, *t)
		}
		s.goTimes = map[string]*OpTime{}
		sort.Slice(out, func(i, j int) bool { return out[i].Ms > out[j].Ms })
		return out, nil
	}
	if s.cl == nil {
		return nil, fmt.Errorf("engine: no profile for the %s device", s.dev.Name())
	}
	recs, err := s.cl.Profile()
	if err != nil {
		return nil, err
	}
	type key struct{ node, kernel string }
	idx := map[key]int{}
	var out []OpTime
	for _, r := range recs {
		k := key{r.Label, r.Kernel}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, OpTime{OpType: s.nodeOps[r.Label], Node: r.Label, Kernel: r.Kernel})
		}
		out[i].Calls++
		out[i].Ms += float64(r.Duration()) / float64(time.Millisecond)
	}
	return out, nil
}

// recordGo accumulates the pure-Go backend's step times.
func (s *Session) recordGo(label string, d time.Duration) {
	t := s.goTimes[label]
	if t == nil {
		t = &OpTime{OpType: s.nodeOps[label], Node: label, Kernel: "go"}
		s.goTimes[label] = t
	}
	t.Calls++
	t.Ms += float64(d) / float64(time.Millisecond)
}

// Close releases the device memory (and the device and model when the
// session opened them). It is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.release()
}

// writeCacheAfterFirstRun starts writing the binaries of the programs the
// first run built to the program cache, in the background, on a device the
// session opened itself (with opencl.Options.DeferCacheWrites). On PoCL,
// asking for a binary compiles every kernel of the program, launched or
// not, which doubled the time to the first result when it happened at
// build time; Close waits for the write.
func (s *Session) writeCacheAfterFirstRun() {
	if !s.ownCL || s.cl == nil {
		return
	}
	s.cacheWriter.Do(func() { go s.cl.WriteCache() })
}

func (s *Session) release() error {
	if s.wstats.Views > 0 {
		// Kernels still queued may read weights in the model's mapping,
		// which the model's Close below (or the caller's, after this)
		// unmaps: let them finish first.
		s.dev.Finish()
	}
	// Command buffers hold the buffers below.
	s.dropSegments()
	for _, b := range s.slots {
		s.dev.Release(b.m)
	}
	for _, b := range s.consts {
		s.dev.Release(b.m)
	}
	for _, b := range s.loraBufs {
		s.dev.Release(b.m)
	}
	if s.loraTmp != nil {
		s.dev.Release(s.loraTmp.m)
	}
	s.slots, s.consts, s.loraBufs, s.loraTmp = nil, nil, nil, nil
	var first error
	if s.ownCL {
		first = s.cl.Close()
	}
	if s.ownModel {
		if err := s.model.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
