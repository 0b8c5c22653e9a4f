// Package conformance runs the ONNX backend test corpus (as packaged by
// onnx-go; see Corpus) through the engine and reports, per operator, which
// cases pass on the device, pass without reaching it (host-only), fail or
// are unsupported. It is a package of its own so that only the
// binaries asking for it (the tests, the CLI) link the corpus.
package conformance

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/owulveryck/onnx-go/backend/testbackend"
	_ "github.com/owulveryck/onnx-go/backend/testbackend/onnx" // registers the corpus
	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
)

// Status is a case's outcome.
type Status int

const (
	// Passed: every output matched the expected one.
	Passed Status = iota
	// Failed: an output differed, or the engine failed on an operator use
	// it claims to support.
	Failed
	// Unsupported: Open refused the model as using an unsupported
	// operator, attribute or element type.
	Unsupported
	// HostOnly: every output matched, but no step reached a device kernel
	// (the model was constant-folded at Open or computed on the host), so
	// the case says nothing about the device's kernels.
	HostOnly
)

// Corpus names the test cases Run runs.
const Corpus = "onnx-go's packaged ONNX backend node tests (ONNX opsets 9 and 10)"

// String returns "pass", "FAIL", "unsupported" or "host-only".
func (s Status) String() string {
	return [...]string{"pass", "FAIL", "unsupported", "host-only"}[s]
}

// Case is the outcome of one corpus test case.
type Case struct {
	Op, Title string
	Status    Status
	Detail    string
}

// Report is the outcome of a whole run.
type Report struct {
	Cases []Case
}

// Tolerance of float comparisons: |got - want| <= Atol + Rtol*|want|, the
// ONNX backend tests' relative tolerance with an absolute floor for fp32
// kernels that approximate exp, erf and friends.
const (
	Rtol = 1e-3
	Atol = 1e-5
)

// Run runs every registered corpus case through sessions opened with opts
// (opts.Kernels lets the cases share compiled programs). Integer graph
// inputs are given to the session as known constants (opts.Known), since the
// corpus feeds shape tensors, axes and indices as inputs.
func Run(opts engine.Options) *Report {
	var ctors []func() *testbackend.TestCase
	ctors = append(ctors, testbackend.GetAllRegisteredTests()...)
	tcs := make([]*testbackend.TestCase, len(ctors))
	for i, c := range ctors {
		tcs[i] = c()
	}
	sort.Slice(tcs, func(i, j int) bool { return tcs[i].Title < tcs[j].Title })
	r := &Report{}
	for _, tc := range tcs {
		st, detail := runCase(tc, opts)
		r.Cases = append(r.Cases, Case{Op: tc.OpType, Title: tc.Title, Status: st, Detail: detail})
	}
	return r
}

// runCase runs one case, turning panics into failures.
func runCase(tc *testbackend.TestCase, opts engine.Options) (st Status, detail string) {
	defer func() {
		if p := recover(); p != nil {
			st, detail = Failed, fmt.Sprintf("panic: %v", p)
		}
	}()
	m, err := graph.Parse(tc.ModelB, "")
	if err != nil {
		return Unsupported, "parse: " + err.Error()
	}
	defer m.Close()
	if len(m.Graph.Inputs) != len(tc.Input) {
		return Failed, fmt.Sprintf("model has %d inputs, the case gives %d", len(m.Graph.Inputs), len(tc.Input))
	}
	known := map[string]*graph.Tensor{}
	inputs := map[string]*tensor.Dense{}
	for i, v := range m.Graph.Inputs {
		d, ok := tc.Input[i].(*tensor.Dense)
		if !ok {
			return Unsupported, fmt.Sprintf("input %q is a %T", v.Name, tc.Input[i])
		}
		// The packaged corpus sometimes stores a tensor in another element
		// type than the model declares, or a scalar as [1]: give the model
		// what it declares.
		d, err = conform(d, v)
		if err != nil {
			return Unsupported, fmt.Sprintf("input %q: %v", v.Name, err)
		}
		if isInt(d.Dtype()) {
			t, err := graphTensor(v.Name, d)
			if err != nil {
				return Unsupported, err.Error()
			}
			known[v.Name] = t
			continue
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
		if !claimed(tc.OpType) {
			return Unsupported, err.Error()
		}
		return Failed, "open: " + err.Error()
	}
	defer s.Close()
	out, err := s.Run(inputs)
	if err != nil {
		return Failed, "run: " + err.Error()
	}
	if len(m.Graph.Outputs) != len(tc.ExpectedOutput) {
		return Failed, fmt.Sprintf("model has %d outputs, the case expects %d", len(m.Graph.Outputs), len(tc.ExpectedOutput))
	}
	for i, v := range m.Graph.Outputs {
		if msg := compare(out[v.Name], tc.ExpectedOutput[i], v.Type); msg != "" {
			return Failed, fmt.Sprintf("output %q: %s", v.Name, msg)
		}
	}
	if s.DeviceSteps() == 0 {
		return HostOnly, "correct, but no step reached a device kernel (folded at Open or computed on the host)"
	}
	return Passed, ""
}

func claimed(op string) bool {
	for _, s := range engine.SupportedOps() {
		if s == op {
			return true
		}
	}
	return false
}

func isInt(t tensor.Dtype) bool {
	switch t {
	case tensor.Int64, tensor.Int32, tensor.Int16, tensor.Int8, tensor.Uint8, tensor.Uint16, tensor.Uint32, tensor.Uint64:
		return true
	}
	return false
}

// graphTensor converts an integer gorgonia tensor into a graph constant.
func graphTensor(name string, d *tensor.Dense) (*graph.Tensor, error) {
	dims := make([]int64, 0, len(d.Shape()))
	if !d.Shape().IsScalar() {
		for _, x := range d.Shape() {
			dims = append(dims, int64(x))
		}
	}
	n := 1
	for _, x := range dims {
		n *= int(x)
	}
	var raw []byte
	var t dtype.Type
	le := binary.LittleEndian
	if n > 0 {
		switch v := d.Data().(type) {
		case []int64:
			t = dtype.Int64
			for _, x := range v {
				raw = le.AppendUint64(raw, uint64(x))
			}
		case int64:
			t, raw = dtype.Int64, le.AppendUint64(raw, uint64(v))
		case []int32:
			t = dtype.Int32
			for _, x := range v {
				raw = le.AppendUint32(raw, uint32(x))
			}
		case int32:
			t, raw = dtype.Int32, le.AppendUint32(raw, uint32(v))
		case []uint8:
			t, raw = dtype.Uint8, append(raw, v...)
		case []int8:
			t = dtype.Int8
			for _, x := range v {
				raw = append(raw, byte(x))
			}
		default:
			return nil, fmt.Errorf("input %q: integer data of type %T", name, d.Data())
		}
	} else {
		t = map[tensor.Dtype]dtype.Type{tensor.Int64: dtype.Int64, tensor.Int32: dtype.Int32}[d.Dtype()]
		raw = []byte{}
	}
	return graph.NewTensor(name, t, dims, raw)
}

// values flattens a tensor's data to float64 for comparison.
func values(t tensor.Tensor) ([]float64, string, error) {
	switch v := t.Data().(type) {
	case []float32:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, "float", nil
	case float32:
		return []float64{float64(v)}, "float", nil
	case []float64:
		return v, "float", nil
	case float64:
		return []float64{v}, "float", nil
	case []int64:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, "int", nil
	case int64:
		return []float64{float64(v)}, "int", nil
	case []int32:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, "int", nil
	case []uint8:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, "int", nil
	case []int8:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, "int", nil
	case []bool:
		out := make([]float64, len(v))
		for i, x := range v {
			if x {
				out[i] = 1
			}
		}
		return out, "bool", nil
	case bool:
		if v {
			return []float64{1}, "bool", nil
		}
		return []float64{0}, "bool", nil
	}
	return nil, "", fmt.Errorf("data of type %T", t.Data())
}

// denseTypes maps ONNX element types onto gorgonia's.
var denseTypes = map[dtype.Type]tensor.Dtype{
	dtype.Float32: tensor.Float32, dtype.Float64: tensor.Float64, dtype.Int64: tensor.Int64,
	dtype.Int32: tensor.Int32, dtype.Int8: tensor.Int8, dtype.Uint8: tensor.Uint8, dtype.Bool: tensor.Bool,
}

// conform converts d to v's declared element type and, when the element
// counts agree, its declared shape.
func conform(d *tensor.Dense, v *graph.Value) (*tensor.Dense, error) {
	want, ok := denseTypes[v.Type]
	if ok && want != d.Dtype() {
		vals, _, err := values(d)
		if err != nil {
			return nil, err
		}
		var backing any
		switch want {
		case tensor.Float32:
			b := make([]float32, len(vals))
			for i, x := range vals {
				b[i] = float32(x)
			}
			backing = b
		case tensor.Float64:
			backing = vals
		case tensor.Int64:
			b := make([]int64, len(vals))
			for i, x := range vals {
				b[i] = int64(x)
			}
			backing = b
		case tensor.Int32:
			b := make([]int32, len(vals))
			for i, x := range vals {
				b[i] = int32(x)
			}
			backing = b
		default:
			return nil, fmt.Errorf("given as %v, declared %v", d.Dtype(), v.Type)
		}
		d = tensor.New(tensor.WithShape(d.Shape()...), tensor.WithBacking(backing))
	}
	if v.Declared != nil {
		shape := make([]int, len(v.Declared))
		for i, dim := range v.Declared {
			if !dim.Known() {
				return d, nil
			}
			shape[i] = int(dim.Value)
		}
		if !exactDims(shape, d.Shape()) && numel(shape) == d.Shape().TotalSize() {
			c := d.Clone().(*tensor.Dense)
			if err := c.Reshape(shape...); err != nil {
				return nil, err
			}
			d = c
		}
	}
	return d, nil
}

// compare checks an output against the expected tensor: shape and values
// (floats within tolerance, others exactly). The element type checked is
// the model's declared one: the packaged corpus's expected tensors do not
// always carry it.
func compare(got *tensor.Dense, want tensor.Tensor, declared dtype.Type) string {
	if got == nil {
		return "missing"
	}
	gs, ws := []int(got.Shape()), []int(want.Shape())
	if numel(gs) != numel(ws) || !sameDims(gs, ws) {
		return fmt.Sprintf("shape %v, want %v", gs, ws)
	}
	if numel(ws) == 0 {
		return ""
	}
	g, _, err := values(got)
	if err != nil {
		return err.Error()
	}
	w, _, err := values(want)
	if err != nil {
		return err.Error()
	}
	if dt, ok := denseTypes[declared]; ok && got.Dtype() != dt {
		return fmt.Sprintf("element type %v, the model declares %v", got.Dtype(), declared)
	}
	wk := "int"
	if declared.IsFloat() {
		wk = "float"
	}
	for i := range w {
		a, b := g[i], w[i]
		if math.IsNaN(a) && math.IsNaN(b) || a == b {
			continue
		}
		if wk != "float" || math.IsNaN(a) || math.IsNaN(b) || math.Abs(a-b) > Atol+Rtol*math.Abs(b) {
			return fmt.Sprintf("element %d is %v, want %v", i, a, b)
		}
	}
	return ""
}

func numel(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

func exactDims(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// sameDims compares shapes, treating a scalar and a one-element vector
// alike (the corpus is not consistent about them).
func sameDims(a, b []int) bool {
	if len(a) != len(b) {
		return numel(a) == 1 && numel(b) == 1
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// OpStats are one operator's counts.
type OpStats struct {
	Op                                      string
	Cases, Passed, Failed, Unsupp, HostOnly int
	// Claimed: the engine has a lowering or host op for Op.
	Claimed bool
	// Supported: claimed, and every case passes, at least one of them on
	// the device (no case fails or is refused).
	Supported                      bool
	FirstFailure, FirstUnsupported string
}

// ByOp groups the cases by operator, sorted by name.
func (r *Report) ByOp() []OpStats {
	idx := map[string]int{}
	var out []OpStats
	for _, c := range r.Cases {
		i, ok := idx[c.Op]
		if !ok {
			i = len(out)
			idx[c.Op] = i
			out = append(out, OpStats{Op: c.Op, Claimed: claimed(c.Op)})
		}
		s := &out[i]
		s.Cases++
		switch c.Status {
		case Passed:
			s.Passed++
		case Failed:
			s.Failed++
			if s.FirstFailure == "" {
				s.FirstFailure = c.Title + ": " + c.Detail
			}
		case Unsupported:
			s.Unsupp++
			if s.FirstUnsupported == "" {
				s.FirstUnsupported = c.Title + ": " + c.Detail
			}
		case HostOnly:
			s.HostOnly++
		}
	}
	for i := range out {
		s := &out[i]
		s.Supported = s.Claimed && s.Passed > 0 && s.Passed+s.HostOnly == s.Cases
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Op < out[j].Op })
	return out
}

// Table formats the per-operator counts, one line per operator, with the
// first failure (or unsupported reason) of each.
func (r *Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "corpus: %s, %d cases\n", Corpus, len(r.Cases))
	fmt.Fprintf(&b, "%-26s %5s %5s %5s %5s %5s  %s\n", "op", "cases", "pass", "host", "fail", "unsup", "first problem")
	for _, s := range r.ByOp() {
		note := s.FirstFailure
		if note == "" {
			note = s.FirstUnsupported
		}
		if len(note) > 160 {
			note = note[:160] + "..."
		}
		name := s.Op
		if s.Supported {
			name += " *"
		}
		fmt.Fprintf(&b, "%-26s %5d %5d %5d %5d %5d  %s\n", name, s.Cases, s.Passed, s.HostOnly, s.Failed, s.Unsupp, note)
	}
	b.WriteString("(* = supported: every case passes, at least one on the device; host = correct without reaching a device kernel)\n")
	return b.String()
}

// Summary is the one-line total.
func (r *Report) Summary() string {
	var p, f, u, h int
	for _, c := range r.Cases {
		switch c.Status {
		case Passed:
			p++
		case Failed:
			f++
		case Unsupported:
			u++
		case HostOnly:
			h++
		}
	}
	return fmt.Sprintf("conformance: %d passed on the device, %d correct host-only, %d failed, %d unsupported of %d cases", p, h, f, u, len(r.Cases))
}

// Passing lists the titles of the cases that passed on the device, sorted:
// the list the conformance test's ratchet keeps.
func (r *Report) Passing() []string {
	var out []string
	for _, c := range r.Cases {
		if c.Status == Passed {
			out = append(out, c.Title)
		}
	}
	sort.Strings(out)
	return out
}
