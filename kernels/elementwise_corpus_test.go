package kernels

import (
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/owulveryck/onnx-go/backend/testbackend"
	_ "github.com/owulveryck/onnx-go/backend/testbackend/onnx" // registers the ONNX node-test corpus
	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
)

// The ONNX node-test corpus (inputs and outputs computed by ONNX's numpy
// reference) is an oracle for RunChainRef that tlite did not write.
// Device-against-reference is covered by the other chain tests; running
// every corpus case on the device would cost a program build each.

// ewPBAttr is an ONNX attribute reduced to what element-wise ops use.
type ewPBAttr struct {
	f float32
	i int64
	s string
}

// ewCorpusAttrs gives a corpus node's attributes to ElemNodeONNX and
// records which it read.
type ewCorpusAttrs struct {
	attrs map[string]ewPBAttr
	read  map[string]bool
}

func (a ewCorpusAttrs) get(name string) (ewPBAttr, bool) {
	a.read[name] = true
	v, ok := a.attrs[name]
	return v, ok
}

func (a ewCorpusAttrs) AttrInt(name string, def int64) int64 {
	if v, ok := a.get(name); ok {
		return v.i
	}
	return def
}

func (a ewCorpusAttrs) AttrFloat(name string, def float32) float32 {
	if v, ok := a.get(name); ok {
		return v.f
	}
	return def
}

func (a ewCorpusAttrs) AttrString(name string, def string) string {
	if v, ok := a.get(name); ok {
		return v.s
	}
	return def
}

// ewCorpusNode reads the single node of a corpus model with graph.Parse:
// its op type, input count and attributes.
func ewCorpusNode(model []byte) (op string, inputs int, attrs map[string]ewPBAttr, err error) {
	m, err := graph.Parse(model, "")
	if err != nil {
		return "", 0, nil, err
	}
	defer m.Close()
	if len(m.Graph.Nodes) != 1 {
		return "", 0, nil, fmt.Errorf("%d nodes", len(m.Graph.Nodes))
	}
	n := m.Graph.Nodes[0]
	attrs = map[string]ewPBAttr{}
	for name, a := range n.Attrs {
		attrs[name] = ewPBAttr{f: a.F, i: a.I, s: a.S}
	}
	return n.OpType, len(n.Inputs), attrs, nil
}

// ewCorpusTensor converts a corpus tensor, or says why it cannot.
func ewCorpusTensor(x tensor.Tensor) (HostTensor, error) {
	h := HostTensor{Shape: append([]int{}, x.Shape()...)}
	if x.IsScalar() {
		h.Shape = nil
	}
	switch d := x.Data().(type) {
	case []float32:
		h.Type, h.F = EF32, d
	case float32:
		h.Type, h.F = EF32, []float32{d}
	case []int64:
		h.Type, h.I = EI64, d
	case []int32:
		h.Type, h.I = EI32, make([]int64, len(d))
		for i, v := range d {
			h.I[i] = int64(v)
		}
	default:
		return h, fmt.Errorf("element type %T", x.Data())
	}
	return h, nil
}

func ewCorpusBroadcast(ins []HostTensor) []int {
	var out []int
	for _, in := range ins {
		for len(out) < len(in.Shape) {
			out = append([]int{1}, out...)
		}
		for j, d := range in.Shape {
			o := &out[j+len(out)-len(in.Shape)]
			if *o == 1 {
				*o = d
			}
		}
	}
	return out
}

func TestChainRefONNXCorpus(t *testing.T) {
	ran := map[string]int{}
	var skipped []string
	for _, mk := range testbackend.GetAllRegisteredTests() {
		tc := mk()
		if !IsElemOp(tc.OpType) {
			continue
		}
		op, nin, attrs, err := ewCorpusNode(tc.ModelB)
		if err != nil {
			t.Fatalf("%s: decoding the model: %v", tc.Title, err)
		}
		var ins []HostTensor
		for _, x := range tc.Input {
			h, err := ewCorpusTensor(x)
			if err != nil {
				skipped = append(skipped, tc.Title+" ("+err.Error()+")")
				ins = nil
				break
			}
			ins = append(ins, h)
		}
		if ins == nil || len(tc.ExpectedOutput) != 1 || nin != len(ins) {
			if ins != nil {
				skipped = append(skipped, tc.Title)
			}
			continue
		}
		for k := 1; k < len(ins); k++ {
			// onnx-go's generator wrote TestModBroadcast's one-element int32
			// divisor as float32; give integral ones back their type.
			h := &ins[k]
			if ins[0].Type.IsInt() && h.Type == EF32 && h.Len() == 1 && h.F[0] == float32(math.Trunc(float64(h.F[0]))) {
				*h = HostTensor{Type: ins[0].Type, Shape: h.Shape, I: []int64{int64(h.F[0])}}
			}
		}
		want, err := ewCorpusTensor(tc.ExpectedOutput[0])
		if err != nil {
			skipped = append(skipped, tc.Title+" (output "+err.Error()+")")
			continue
		}
		c := &Chain{}
		args := make([]int, len(ins))
		for k, h := range ins {
			args[k] = c.Input(h.Type)
		}
		// The table's own ONNX attribute handling reads the attributes; one
		// it does not read is an attribute tlite would silently ignore.
		read := ewCorpusAttrs{attrs: attrs, read: map[string]bool{}}
		n, err := ElemNodeONNX(ElemOp(op), read, args)
		if err != nil {
			t.Fatalf("%s: %v", tc.Title, err)
		}
		for name := range attrs {
			if !read.read[name] && !(op == "Clip" && (name == "min" || name == "max")) {
				t.Fatalf("%s: attribute %q not mapped", tc.Title, name)
			}
		}
		if op == "Clip" {
			// Clip-6 bounds are attributes; chains take them as inputs.
			if a, ok := attrs["min"]; ok {
				n.Args[1] = c.Const(EF32, float64(a.f))
			}
			if a, ok := attrs["max"]; ok {
				n.Args[2] = c.Const(EF32, float64(a.f))
			}
		}
		c.Output(c.Node(n))
		outShape := ewCorpusBroadcast(ins)
		got, err := RunChainRef(c, outShape, ins)
		if err != nil {
			t.Errorf("%s: %v", tc.Title, err)
			continue
		}
		if fmt.Sprint(got[0].Shape) != fmt.Sprint(want.Shape) && want.Len() != got[0].Len() {
			t.Errorf("%s: shape %v, want %v", tc.Title, got[0].Shape, want.Shape)
			continue
		}
		if got[0].Type.IsFloat() {
			want.Type = got[0].Type
		}
		ewCompare(t, tc.Title, got[0], want, ewTol{1e-6, 2e-6})
		ran[op]++
	}
	ops := make([]string, 0, len(ran))
	for op := range ran {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	t.Logf("checked %d ops against the corpus: %v; skipped %v", len(ops), ops, skipped)
	if len(ops) < 30 {
		t.Errorf("only %d element-wise ops found in the corpus, want at least 30", len(ops))
	}
}
