package infer

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"github.com/owulveryck/onnx-go/backend/testbackend"
	_ "github.com/owulveryck/onnx-go/backend/testbackend/onnx"
	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// toGraphTensor converts a test input to a graph.Tensor; ok is false for
// element types the corpus never uses as shape data.
func toGraphTensor(name string, t tensor.Tensor) (*graph.Tensor, bool) {
	dims := make([]int64, len(t.Shape()))
	for i, d := range t.Shape() {
		dims[i] = int64(d)
	}
	var typ dtype.Type
	var raw []byte
	switch d := t.Data().(type) {
	case []int64:
		typ = dtype.Int64
		for _, v := range d {
			raw = binary.LittleEndian.AppendUint64(raw, uint64(v))
		}
	case []int32:
		typ = dtype.Int32
		for _, v := range d {
			raw = binary.LittleEndian.AppendUint32(raw, uint32(v))
		}
	case []bool:
		typ = dtype.Bool
		for _, v := range d {
			if v {
				raw = append(raw, 1)
			} else {
				raw = append(raw, 0)
			}
		}
	case []float32:
		typ = dtype.Float32
		for _, v := range d {
			raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
		}
	default:
		return nil, false
	}
	gt, err := graph.NewTensor(name, typ, dims, raw)
	if err != nil {
		return nil, false
	}
	return gt, true
}

// corpusResult is the outcome of one backend test case.
type corpusResult struct {
	op, title string
	status    string // "pass", "data-dependent", "fail", "no rule"
	detail    string
}

// TestCorpus derives the output shapes of every ONNX backend test case that
// onnx-go carries and compares them with the expected outputs' shapes.
// Integer and bool inputs, and small float vectors (Resize/Upsample scales),
// are given to Run as known contents, the way a shape computation upstream
// would provide them.
func TestCorpus(t *testing.T) {
	var results []corpusResult
	for _, mk := range testbackend.GetAllRegisteredTests() {
		tc := mk()
		results = append(results, runCorpusCase(tc))
	}
	sort.Slice(results, func(i, j int) bool {
		if results[i].op != results[j].op {
			return results[i].op < results[j].op
		}
		return results[i].title < results[j].title
	})
	type tally struct{ pass, dd, fail, norule int }
	byOp := map[string]*tally{}
	var ops []string
	for _, r := range results {
		tl := byOp[r.op]
		if tl == nil {
			tl = &tally{}
			byOp[r.op] = tl
			ops = append(ops, r.op)
		}
		switch r.status {
		case "pass":
			tl.pass++
		case "data-dependent":
			tl.dd++
		case "no rule":
			tl.norule++
		default:
			tl.fail++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %5s %5s %5s %7s\n", "op", "pass", "data", "fail", "no-rule")
	var noRule []string
	for _, op := range ops {
		tl := byOp[op]
		fmt.Fprintf(&b, "%-28s %5d %5d %5d %7d\n", op, tl.pass, tl.dd, tl.fail, tl.norule)
		if tl.norule > 0 {
			noRule = append(noRule, op)
		}
	}
	t.Logf("onnx-go corpus, %d cases:\n%s", len(results), b.String())
	t.Logf("ops without a shape rule: %v", noRule)
	t.Logf("%d default-domain ops have shape rules: %v", len(Ops()), Ops())
	for _, r := range results {
		switch r.status {
		case "fail":
			t.Errorf("%s (%s): %s", r.title, r.op, r.detail)
		case "no rule":
			if HasRule("", r.op) {
				t.Errorf("%s (%s): op has a rule but a node lacks one: %s", r.title, r.op, r.detail)
			}
			if !strings.Contains(r.detail, "no shape rule for op") {
				t.Errorf("%s (%s): unclear error for a missing rule: %s", r.title, r.op, r.detail)
			}
		case "data-dependent":
			t.Logf("%s (%s): %s", r.title, r.op, r.detail)
		}
	}
}

func runCorpusCase(tc *testbackend.TestCase) corpusResult {
	res := corpusResult{op: tc.OpType, title: tc.Title}
	m, err := graph.Parse(tc.ModelB, "")
	if err != nil {
		res.status, res.detail = "fail", "parse: "+err.Error()
		return res
	}
	// Declared output shapes would unify with what is derived and hide a
	// wrong rule: drop them so the comparison checks the rules alone.
	for _, v := range m.Graph.Outputs {
		v.Declared = nil
	}
	opts := Options{Inputs: map[string]*graph.Tensor{}}
	if len(m.Graph.Inputs) != len(tc.Input) {
		res.status, res.detail = "fail", fmt.Sprintf("graph has %d inputs, test case %d", len(m.Graph.Inputs), len(tc.Input))
		return res
	}
	for i, v := range m.Graph.Inputs {
		in := tc.Input[i]
		gt, ok := toGraphTensor(v.Name, in)
		if !ok {
			continue
		}
		small := gt.NumElements() <= 8 && len(gt.Dims) <= 1
		if gt.Type != dtype.Float32 || small {
			opts.Inputs[v.Name] = gt
		}
	}
	r, err := Run(m, opts)
	if err != nil {
		if strings.Contains(err.Error(), "no shape rule") {
			res.status, res.detail = "no rule", err.Error()
		} else {
			res.status, res.detail = "fail", err.Error()
		}
		return res
	}
	if len(tc.ExpectedOutput) != len(m.Graph.Outputs) {
		res.status, res.detail = "fail", fmt.Sprintf("%d expected outputs for %d graph outputs", len(tc.ExpectedOutput), len(m.Graph.Outputs))
		return res
	}
	dataDep := false
	for i, v := range m.Graph.Outputs {
		want := tc.ExpectedOutput[i].Shape()
		got := v.Shape
		if len(got) == 0 && len(want) == 1 && want[0] == 1 {
			continue // gorgonia writes scalars as [1]
		}
		if len(got) != len(want) {
			res.status, res.detail = "fail", fmt.Sprintf("output %q: derived %s, expected %v", v.Name, symshape.FormatShape(got), want)
			return res
		}
		for j, d := range got {
			k, ok := d.Const()
			if !ok {
				if isFresh(r, d.String()) {
					dataDep = true
					continue
				}
				res.status, res.detail = "fail", fmt.Sprintf("output %q: derived %s has symbols, expected %v", v.Name, symshape.FormatShape(got), want)
				return res
			}
			if k != int64(want[j]) {
				res.status, res.detail = "fail", fmt.Sprintf("output %q: derived %s, expected %v", v.Name, symshape.FormatShape(got), want)
				return res
			}
		}
	}
	res.status = "pass"
	if dataDep {
		res.status = "data-dependent"
		res.detail = "data-dependent dims (fresh symbols) left; rank and constant dims agree"
	}
	return res
}

func isFresh(r *Result, s string) bool {
	for _, f := range r.Fresh {
		if f.Sym == s {
			return true
		}
	}
	return false
}

// TestCorpusSymbolicInputs reruns every corpus model with each input dim
// made a symbol and no input contents known: rules may decline with an
// error (a shape that becomes data-dependent is fine too) but must never
// hit an internal error.
func TestCorpusSymbolicInputs(t *testing.T) {
	failed, ok := 0, 0
	for _, mk := range testbackend.GetAllRegisteredTests() {
		tc := mk()
		m, err := graph.Parse(tc.ModelB, "")
		if err != nil {
			t.Fatalf("%s: %v", tc.Title, err)
		}
		for i, v := range m.Graph.Inputs {
			for j := range v.Declared {
				v.Declared[j] = graph.Dim{Value: -1, Param: fmt.Sprintf("d%d_%d", i, j)}
			}
		}
		_, err = Run(m, Options{})
		switch {
		case err == nil:
			ok++
		case strings.Contains(err.Error(), "internal error"):
			t.Errorf("%s (%s): %v", tc.Title, tc.OpType, err)
		default:
			failed++
			t.Logf("declined: %s (%s): %v", tc.Title, tc.OpType, err)
		}
	}
	t.Logf("symbolic inputs: %d derived, %d declined with an error", ok, failed)
}
