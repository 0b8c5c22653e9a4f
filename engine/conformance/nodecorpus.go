package conformance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
)

// NodeCorpus names the corpus RunDir runs.
const NodeCorpus = "ONNX 1.12's own backend node and simple test cases (tools/onnx_node_corpus.py)"

// DefaultNodeCorpusDir is where tools/onnx_node_corpus.py writes the corpus
// by default: $TLITE_CACHE/onnx-node-tests, else
// ~/.cache/tlite/onnx-node-tests.
func DefaultNodeCorpusDir() string {
	base := os.Getenv("TLITE_CACHE")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache", "tlite")
	}
	return filepath.Join(base, "onnx-node-tests")
}

// NodeCases lists the case directories of a generated corpus (DIR/node/*
// and DIR/simple/* with a model.onnx), sorted; the "real" cases, which
// name a download and hold no data, are not among them.
func NodeCases(dir string) ([]string, error) {
	var out []string
	for _, kind := range []string{"node", "simple"} {
		ents, err := os.ReadDir(filepath.Join(dir, kind))
		if err != nil {
			return nil, fmt.Errorf("conformance: corpus %s: %w (generate it with /usr/bin/python3 tools/onnx_node_corpus.py --out %s)", dir, err, dir)
		}
		for _, e := range ents {
			p := filepath.Join(dir, kind, e.Name())
			if _, err := os.Stat(filepath.Join(p, "model.onnx")); err == nil {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// NodeConfig tunes RunDir.
type NodeConfig struct {
	// Progress, when set, is called before each case.
	Progress func(i, n int, title string)
	// InputsAtRun gives every input to Run, as tl run does, instead of
	// fixing integer inputs (and Resize's scales) at Open: shapes that
	// depend on them are then unknown when the plan is made.
	InputsAtRun bool
}

// RunDir runs every case of the generated node corpus in dir through
// sessions opened with opts and returns the report.
func RunDir(dir string, opts engine.Options, cfg NodeConfig) (*Report, error) {
	cases, err := NodeCases(dir)
	if err != nil {
		return nil, err
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("conformance: corpus %s holds no cases", dir)
	}
	r := &Report{Corpus: NodeCorpus}
	for i, c := range cases {
		title := filepath.Base(c)
		if cfg.Progress != nil {
			cfg.Progress(i, len(cases), title)
		}
		st, op, detail := runNodeCase(c, opts, cfg.InputsAtRun)
		r.Cases = append(r.Cases, Case{Op: op, Title: title, Status: st, Detail: detail})
	}
	return r, nil
}

// runNodeCase runs one case directory: every test_data_set_* in it, each
// through its own session (integer inputs are given as known constants,
// which fixes them at Open, unless atRun).
func runNodeCase(dir string, opts engine.Options, atRun bool) (st Status, op, detail string) {
	title := filepath.Base(dir)
	op = caseOp(title, nil)
	defer func() {
		if p := recover(); p != nil {
			st, detail = Failed, fmt.Sprintf("panic: %v", p)
		}
	}()
	raw, err := os.ReadFile(filepath.Join(dir, "model.onnx"))
	if err != nil {
		return Failed, op, err.Error()
	}
	m, err := graph.Parse(raw, dir)
	if err != nil {
		if why := outOfScopeParse(err); why != "" {
			return OutOfScope, op, why
		}
		return Unsupported, op, "parse: " + err.Error()
	}
	defer m.Close()
	op = caseOp(title, m)
	sets, _ := filepath.Glob(filepath.Join(dir, "test_data_set_*"))
	sort.Strings(sets)
	if len(sets) == 0 {
		return Failed, op, "no test_data_set_* directory"
	}
	st, detail = Passed, ""
	for _, set := range sets {
		s, d := runDataSet(m, set, opts, atRun)
		if s != Passed && s != HostOnly {
			st, detail = s, filepath.Base(set)+": "+d
			break
		}
		if s == HostOnly {
			st, detail = HostOnly, d
		}
	}
	if st != Passed && st != HostOnly {
		if why := outOfScope(m, title); why != "" {
			return OutOfScope, op, why + " (" + st.String() + ": " + detail + ")"
		}
	}
	return st, op, detail
}

// paramInputs are the float inputs of ops whose values the plan needs at
// Open (they set output shapes): the runner gives them as known constants,
// like integer inputs.
var paramInputs = map[string][]int{"Resize": {1, 2}, "Upsample": {1}}

// runDataSet runs one test_data_set_* directory.
func runDataSet(m *graph.Model, set string, opts engine.Options, atRun bool) (Status, string) {
	known := map[string]*graph.Tensor{}
	inputs := map[string]*tensor.Dense{}
	param := map[*graph.Value]bool{}
	for _, n := range m.Graph.Nodes {
		for _, i := range paramInputs[n.OpType] {
			if i < len(n.Inputs) && n.Inputs[i] != nil {
				param[n.Inputs[i]] = true
			}
		}
	}
	for j, v := range m.Graph.Inputs {
		raw, err := os.ReadFile(filepath.Join(set, fmt.Sprintf("input_%d.pb", j)))
		if err != nil {
			return Failed, fmt.Sprintf("input %q: %v", v.Name, err)
		}
		t, err := graph.ParseTensor(raw)
		if err != nil {
			return Unsupported, fmt.Sprintf("input %q: %v", v.Name, err)
		}
		if v.Type != dtype.Undefined && t.Type != v.Type {
			// onnx 1.12 stores bfloat16 data as uint16 bits, for one.
			return Unsupported, fmt.Sprintf("input %q is declared %v; the case stores %v", v.Name, v.Type, t.Type)
		}
		if !atRun && (isIntType(t.Type) || param[v]) {
			t.Name = v.Name
			known[v.Name] = t
			continue
		}
		d, err := denseOf(t)
		if err != nil {
			return Unsupported, fmt.Sprintf("input %q: %v", v.Name, err)
		}
		inputs[v.Name] = d
	}
	o := opts
	o.Known = known
	s, err := engine.OpenModel(m, o)
	if err != nil {
		var ue *engine.UnsupportedError
		if errors.As(err, &ue) {
			return Unsupported, err.Error()
		}
		return Failed, "open: " + err.Error()
	}
	defer s.Close()
	out, err := s.Run(inputs)
	if err != nil {
		return Failed, "run: " + err.Error()
	}
	for j, v := range m.Graph.Outputs {
		raw, err := os.ReadFile(filepath.Join(set, fmt.Sprintf("output_%d.pb", j)))
		if err != nil {
			return Failed, fmt.Sprintf("output %q: %v", v.Name, err)
		}
		t, err := graph.ParseTensor(raw)
		if err != nil {
			return Unsupported, fmt.Sprintf("expected output %q: %v", v.Name, err)
		}
		want, err := denseOf(t)
		if err != nil {
			return Unsupported, fmt.Sprintf("expected output %q: %v", v.Name, err)
		}
		decl := v.Type
		if decl == dtype.Undefined {
			decl = t.Type
		}
		if msg := compare(out[v.Name], want, decl); msg != "" {
			return Failed, fmt.Sprintf("output %q: %s", v.Name, msg)
		}
	}
	if s.DeviceSteps() == 0 {
		return HostOnly, "correct, but no step reached a device kernel (folded at Open or computed on the host)"
	}
	return Passed, ""
}

func isIntType(t dtype.Type) bool {
	switch t {
	case dtype.Int64, dtype.Int32, dtype.Int16, dtype.Int8, dtype.Uint8, dtype.Uint16, dtype.Uint32, dtype.Uint64:
		return true
	}
	return false
}

// denseOf converts a decoded TensorProto into a gorgonia tensor (float16
// widened to float32, as Session.Run takes and returns it).
func denseOf(t *graph.Tensor) (*tensor.Dense, error) {
	shape := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		shape[i] = int(d)
	}
	switch t.Type {
	case dtype.Float32, dtype.Float16, dtype.Float64, dtype.Int64, dtype.Int32, dtype.Int16, dtype.Int8,
		dtype.Uint8, dtype.Uint16, dtype.Uint32, dtype.Uint64, dtype.Bool:
	default:
		return nil, fmt.Errorf("element type %v", t.Type)
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	if n == 0 {
		et := t.Type
		if et == dtype.Float16 {
			et = dtype.Float32
		}
		dt, ok := denseTypes[et]
		if !ok {
			return nil, fmt.Errorf("empty tensor of type %v", t.Type)
		}
		return tensor.New(tensor.Of(dt), tensor.WithShape(shape...)), nil
	}
	return npy.FromBytes(t.Type, shape, t.Data)
}

// Out-of-scope classes: what the engine does not set out to run. A case is
// put in one only when it does not pass.
var (
	trainingOps = map[string]bool{"SoftmaxCrossEntropyLoss": true, "NegativeLogLikelihoodLoss": true,
		"Adagrad": true, "Adam": true, "Momentum": true, "Gradient": true}
	randomOps = map[string]bool{"RandomNormal": true, "RandomUniform": true, "RandomNormalLike": true,
		"RandomUniformLike": true, "Bernoulli": true, "Multinomial": true}
	stringOps = map[string]bool{"StringNormalizer": true, "RegexFullMatch": true, "StringConcat": true,
		"StringSplit": true}
)

// outOfScopeParse classifies a model the loader refuses for a value that
// is not a tensor.
func outOfScopeParse(err error) string {
	msg := err.Error()
	for _, k := range []string{"sequence types", "map types", "optional types", "sparse tensor types"} {
		if strings.Contains(msg, k) {
			return "sequences, maps and optionals: a graph value is not a tensor (" + k + ")"
		}
	}
	return ""
}

// outOfScope says why a case that did not pass is outside what the engine
// sets out to run, or "" when it is not: then the case counts as
// unsupported or failed.
func outOfScope(m *graph.Model, title string) string {
	var ops []*graph.Node
	var walk func(g *graph.Graph)
	walk = func(g *graph.Graph) {
		for _, n := range g.Nodes {
			ops = append(ops, n)
			for _, a := range n.Attrs {
				if a.G != nil {
					walk(a.G)
				}
				for _, sg := range a.Graphs {
					walk(sg)
				}
			}
		}
	}
	walk(m.Graph)
	for _, n := range ops {
		switch {
		case trainingOps[n.OpType]:
			return "training: " + n.OpType + " is a loss or optimizer step"
		case randomOps[n.OpType]:
			return "random: " + n.OpType + " draws random numbers"
		case n.OpType == "BatchNormalization" && n.AttrInt("training_mode", 0) != 0:
			return "training: BatchNormalization in training mode updates running statistics"
		case n.OpType == "Dropout" && len(n.Inputs) > 2 && n.Inputs[2] != nil:
			return "random: Dropout with training_mode draws a random mask"
		case strings.HasPrefix(n.OpType, "Sequence") || strings.HasPrefix(n.OpType, "Optional") ||
			n.OpType == "SplitToSequence" || n.OpType == "ConcatFromSequence":
			return "sequences, maps and optionals: " + n.OpType
		case stringOps[n.OpType]:
			return "strings: " + n.OpType + " works on string tensors"
		}
	}
	if strings.Contains(title, "_sce_") || strings.Contains(title, "nllloss") {
		return "training: a loss function (expanded into its body)"
	}
	var vals []*graph.Value
	vals = append(vals, m.Graph.Inputs...)
	vals = append(vals, m.Graph.Outputs...)
	for _, n := range ops {
		vals = append(vals, n.Outputs...)
	}
	for _, v := range vals {
		if v == nil {
			continue
		}
		switch v.Type {
		case dtype.String:
			return "strings: " + v.Name + " is a string tensor"
		case dtype.Float64:
			return "float64: " + v.Name + " is float64, which the devices do not compute in"
		}
	}
	return ""
}

// caseOp names the operator a case tests: the op of a one-node graph, else
// the op whose snake-case name begins the title (expanded functions and
// simple models), else the title's first word.
func caseOp(title string, m *graph.Model) string {
	name := strings.TrimPrefix(title, "test_")
	if m != nil && len(m.Graph.Nodes) == 1 {
		return opKey(m.Graph.Nodes[0])
	}
	best := ""
	for op := range knownOps {
		s := snake(op)
		if (name == s || strings.HasPrefix(name, s+"_")) && len(s) > len(snake(best)) {
			best = op
		}
	}
	if best != "" {
		return best
	}
	if i := strings.IndexByte(name, '_'); i > 0 {
		return name[:i]
	}
	return name
}

func opKey(n *graph.Node) string {
	if n.Domain == "" || n.Domain == "ai.onnx" {
		return n.OpType
	}
	return n.Domain + "." + n.OpType
}

// knownOps are ONNX operators whose cases come expanded into several
// nodes, for caseOp.
var knownOps = map[string]bool{}

func init() {
	for _, op := range []string{"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "LayerNormalization",
		"Softmax", "LogSoftmax", "Celu", "Elu", "HardSigmoid", "HardSwish", "Shrink", "ThresholdedRelu",
		"Selu", "LeakyRelu", "Relu", "PRelu", "Mish", "Softplus", "Softsign", "Clip", "Range",
		"MeanVarianceNormalization", "DynamicQuantizeLinear", "Bernoulli", "GroupNormalization",
		"CastLike", "Expand", "Reshape", "Loop", "If", "Scan", "Gemm", "Gelu", "BlackmanWindow",
		"HannWindow", "HammingWindow", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"} {
		knownOps[op] = true
	}
}

// snake turns an op name into the snake case of ONNX's test names
// ("LogSoftmax" -> "log_softmax").
func snake(op string) string {
	var b strings.Builder
	for i, r := range op {
		if unicode.IsUpper(r) && i > 0 && !unicode.IsUpper(rune(op[i-1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
