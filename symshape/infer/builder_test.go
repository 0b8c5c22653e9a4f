package infer

import (
	"fmt"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
)

// Test graphs are built with graph/graphtest and go through graph.Marshal
// and graph.Parse like real files do, so they exercise the same IR.

// attr is an attribute of a test node.
type attr = *graph.Attr

func aInt(name string, v int64) attr            { return graphtest.Int(name, v) }
func aFloat(name string, v float32) attr        { return graphtest.Float(name, v) }
func aString(name, v string) attr               { return graphtest.String(name, v) }
func aInts(name string, v ...int64) attr        { return graphtest.Ints(name, v...) }
func aFloats(name string, v ...float32) attr    { return graphtest.Floats(name, v...) }
func aTensor(name string, t *graph.Tensor) attr { return graphtest.TensorAttr(name, t) }
func aGraph(name string, g *graph.Graph) attr   { return graphtest.GraphAttr(name, g) }
func tensorI64(name string, dims []int64, vals ...int64) *graph.Tensor {
	return graphtest.Int64s(name, dims, vals...)
}
func tensorF32(name string, dims []int64, vals ...float32) *graph.Tensor {
	return graphtest.Float32s(name, dims, vals...)
}

// valueInfo is a graph input or output; dims are ints (dim_value), strings
// (dim_param) or nil (unknown). noShape leaves the shape out.
func valueInfo(name string, t dtype.Type, noShape bool, dims ...any) *graph.Value {
	if noShape {
		return graphtest.Unshaped(name, t)
	}
	return graphtest.Value(name, t, dims...)
}

// gb builds a graph.
type gb struct {
	name                   string
	nodes                  []*graph.Node
	inits, inputs, outputs []*graph.Value
	opset                  int64
	count                  int
}

func newGB(opset int64) *gb { return &gb{name: "test", opset: opset} }

func (g *gb) in(name string, t dtype.Type, dims ...any) *gb {
	g.inputs = append(g.inputs, valueInfo(name, t, false, dims...))
	return g
}

func (g *gb) out(name string, dims ...any) *gb {
	g.outputs = append(g.outputs, valueInfo(name, dtype.Float32, len(dims) == 0, dims...))
	return g
}

// outT declares an output with a type and no shape.
func (g *gb) outT(name string, t dtype.Type) *gb {
	g.outputs = append(g.outputs, valueInfo(name, t, true))
	return g
}

func (g *gb) initI64(name string, dims []int64, vals ...int64) *gb {
	g.inits = append(g.inits, graphtest.Init(tensorI64(name, dims, vals...)))
	return g
}

func (g *gb) initF32(name string, dims []int64, vals ...float32) *gb {
	g.inits = append(g.inits, graphtest.Init(tensorF32(name, dims, vals...)))
	return g
}

// zeros returns n float32 zeros, for weights whose values do not matter.
func zeros(n int) []float32 { return make([]float32, n) }

// node adds a node named "<op>_<k>".
func (g *gb) node(op string, ins, outs []string, attrs ...attr) *gb {
	g.count++
	g.nodes = append(g.nodes, graphtest.Node(op, fmt.Sprintf("%s_%d", op, g.count), ins, outs, attrs...))
	return g
}

// build assembles the graph (once: it resolves the nodes' names in place).
func (g *gb) build() *graph.Graph {
	return graphtest.Graph(g.name, g.nodes, g.inits, g.inputs, g.outputs)
}

// bytes is the model as a file holds it, importing the default domain only.
func (g *gb) bytes() []byte {
	m := graphtest.Model(g.opset, g.build())
	m.Producer, m.Opsets = "infer-test", map[string]int64{"": g.opset}
	return graphtest.Bytes(m)
}

func (g *gb) model(t *testing.T) *graph.Model {
	t.Helper()
	m, err := graph.Parse(g.bytes(), "")
	if err != nil {
		t.Fatalf("parse test model: %v", err)
	}
	return m
}

// run parses and infers, failing the test on an error.
func (g *gb) run(t *testing.T, opts Options) (*graph.Model, *Result) {
	t.Helper()
	m := g.model(t)
	r, err := Run(m, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return m, r
}
