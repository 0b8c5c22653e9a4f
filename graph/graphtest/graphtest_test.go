package graphtest

import (
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
)

// TestRoundTrip builds a model with an initializer, a tlite node, an
// omitted optional input and a subgraph reading an outer value, and checks
// that graph.Parse reads back what was built.
func TestRoundTrip(t *testing.T) {
	body := Graph("body",
		[]*graph.Node{Node("Add", "add", []string{"a", "x"}, []string{"o"})}, nil,
		[]*graph.Value{Value("a", dtype.Float32)}, []*graph.Value{Value("o", dtype.Float32)})
	g := Graph("g",
		[]*graph.Node{
			Node("Clip", "clip", []string{"x", "", "hi"}, []string{"c"}),
			InDomain(Node("RMSNorm", "norm", []string{"c"}, []string{"y"}, Float("epsilon", 1e-6)), tlite.Domain),
			Node("Carrier", "carrier", []string{"y"}, []string{"z"}, GraphAttr("body", body), Ints("axes", 0, 1)),
		},
		[]*graph.Value{Init(Float32s("hi", nil, 6))},
		[]*graph.Value{Value("x", dtype.Float32, "batch", 3)},
		[]*graph.Value{Value("y", dtype.Float32, "batch", 3), Unshaped("z", dtype.Float32)})
	m, err := graph.Parse(Bytes(Model(17, g)), "")
	if err != nil {
		t.Fatal(err)
	}
	if m.Opset("") != 17 || m.Opset(tlite.Domain) != tlite.Version {
		t.Errorf("opsets %v", m.Opsets)
	}
	pg := m.Graph
	if len(pg.Nodes) != 3 || len(pg.Inputs) != 1 || len(pg.Initializers) != 1 || len(pg.Outputs) != 2 {
		t.Fatalf("parsed %d nodes, %d inputs, %d initializers, %d outputs", len(pg.Nodes), len(pg.Inputs), len(pg.Initializers), len(pg.Outputs))
	}
	clip, norm, carrier := pg.Nodes[0], pg.Nodes[1], pg.Nodes[2]
	if len(clip.Inputs) != 3 || clip.Inputs[1] != nil || clip.Inputs[2] != pg.Initializers[0] || clip.Inputs[0] != pg.Inputs[0] {
		t.Errorf("clip inputs %v", clip.Inputs)
	}
	if norm.Domain != tlite.Domain || norm.AttrFloat("epsilon", 0) != 1e-6 || norm.Inputs[0] != clip.Outputs[0] {
		t.Errorf("norm %v: domain %q, epsilon %v", norm, norm.Domain, norm.AttrFloat("epsilon", 0))
	}
	if y := pg.Outputs[0]; y != norm.Outputs[0] || len(y.Declared) != 2 || y.Declared[0].Param != "batch" || y.Declared[1].Value != 3 {
		t.Errorf("output y %+v", y)
	}
	if z := pg.Outputs[1]; z.Declared != nil || z.Type != dtype.Float32 {
		t.Errorf("output z: declared %v, type %v; want no shape, float", z.Declared, z.Type)
	}
	sub := carrier.AttrGraph("body")
	if sub == nil || len(sub.Nodes) != 1 || !sub.Nodes[0].Inputs[1].Outer {
		t.Fatalf("body %v: want one node reading x from the outer scope", sub)
	}
	if ax, _ := carrier.AttrInts("axes"); len(ax) != 2 || ax[1] != 1 {
		t.Errorf("axes %v", ax)
	}
}
