package graph

import (
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/dtype"
)

// rewriteModel: r = Relu(x); n = Neg(r); o = If(c){then: n + r, else: r};
// y = Add(n, o); outputs y and n.
func rewriteModel(t *testing.T) (*Model, *Graph) {
	then := graphMsg{name: "then", nodes: []pb{node("", "Add", []string{"n", "r"}, []string{"t_out"})},
		outputs: []pb{vinfoNoShape("t_out", dtype.Float32)}}.enc()
	els := graphMsg{name: "else", nodes: []pb{node("", "Identity", []string{"r"}, []string{"e_out"})},
		outputs: []pb{vinfoNoShape("e_out", dtype.Float32)}}.enc()
	g := graphMsg{
		name: "rw",
		nodes: []pb{
			node("relu", "Relu", []string{"x"}, []string{"r"}),
			node("neg", "Neg", []string{"r"}, []string{"n"}),
			node("iff", "If", []string{"c"}, []string{"o"}, attrGraph("then_branch", then), attrGraph("else_branch", els)),
			node("add", "Add", []string{"n", "o"}, []string{"y"}),
		},
		inputs:  []pb{vinfo("x", dtype.Float32, 2), vinfo("c", dtype.Bool)},
		outputs: []pb{vinfo("y", dtype.Float32, 2), vinfo("n", dtype.Float32, 2)},
	}
	m := mustParse(t, model(g.enc(), defaultOpset()), "")
	return m, m.Graph
}

func nodeByName(g *Graph, name string) *Node {
	for _, n := range g.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func nodeNames(ns []*Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Name
	}
	return out
}

func wantErr(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one mentioning %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

func TestRewriteReplace(t *testing.T) {
	_, g := rewriteModel(t)
	x, n, r := g.Value("x"), g.Value("n"), g.Value("r")
	iff, add, neg := nodeByName(g, "iff"), nodeByName(g, "add"), nodeByName(g, "neg")
	if !containsNode(n.Consumers, iff) || !containsNode(r.Consumers, iff) {
		t.Fatalf("If should consume n and r through its branches: %v / %v", n.Consumers, r.Consumers)
	}

	f := g.NewValue("n")
	if f.Name != "n_1" || g.Value("n_1") != f {
		t.Fatalf("NewValue(n) = %q, want n_1", f.Name)
	}
	fused := &Node{OpType: "NegRelu", Inputs: []*Value{x}, Outputs: []*Value{f}}
	if err := g.AddNode(fused); err != nil {
		t.Fatal(err)
	}
	if g.Nodes[0] != fused || fused.Name == "" || f.Producer != fused || !containsNode(x.Consumers, fused) {
		t.Fatalf("AddNode: order %v, name %q, producer %v", nodeNames(g.Nodes), fused.Name, f.Producer)
	}
	if err := g.ReplaceAllUses(n, f); err != nil {
		t.Fatal(err)
	}
	if add.Inputs[0] != f || g.Outputs[1] != f || len(n.Consumers) != 0 {
		t.Errorf("uses not replaced: add inputs %v, outputs %v, n consumers %v", add.Inputs, g.Outputs, n.Consumers)
	}
	then := iff.AttrGraph("then_branch")
	if then.Value("n") != nil || then.Value("n_1") == nil || !then.Value("n_1").Outer {
		t.Errorf("then_branch outer reference not renamed: %v", valueNames(then.OuterValues()))
	}
	if !containsValue(iff.ImplicitInputs(), f) || !containsNode(f.Consumers, iff) {
		t.Errorf("If does not read the replacement implicitly: %v", valueNames(iff.ImplicitInputs()))
	}
	if err := g.RemoveNode(neg); err != nil {
		t.Fatal(err)
	}
	if g.Value("n") != nil {
		t.Errorf("unused output n of a removed node still registered")
	}
	if err := g.Validate(); err != nil {
		t.Fatalf("after fusion: %v", err)
	}
	// relu's r is still read by both branches and was read by neg.
	if k := g.RemoveDeadNodes(); k != 0 {
		t.Errorf("RemoveDeadNodes removed %d live nodes", k)
	}
	dead := &Node{OpType: "Abs", Inputs: []*Value{x}, Outputs: []*Value{{Name: "dead"}}}
	if err := g.AddNode(dead); err != nil {
		t.Fatal(err)
	}
	if k := g.RemoveDeadNodes(); k != 1 || dead.Graph() != nil {
		t.Errorf("RemoveDeadNodes removed %d, want the dead Abs", k)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestRewriteMergeOuter(t *testing.T) {
	_, g := rewriteModel(t)
	n, r := g.Value("n"), g.Value("r")
	iff := nodeByName(g, "iff")
	then := iff.AttrGraph("then_branch")
	if err := g.ReplaceAllUses(n, r); err != nil {
		t.Fatal(err)
	}
	inner := then.Nodes[0]
	if then.Value("n") != nil || inner.Inputs[0] != then.Value("r") || inner.Inputs[1] != then.Value("r") {
		t.Errorf("outer n not merged into outer r: inputs %v", inner.Inputs)
	}
	if g.Outputs[1] != r {
		t.Errorf("graph output not replaced")
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	// neg is now dead except for being... nothing reads n: remove it.
	if k := g.RemoveDeadNodes(); k != 1 || nodeByName(g, "neg") != nil {
		t.Errorf("RemoveDeadNodes removed %d, want neg", k)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestRewriteSortAndCycle(t *testing.T) {
	_, g := rewriteModel(t)
	for i, j := 0, len(g.Nodes)-1; i < j; i, j = i+1, j-1 {
		g.Nodes[i], g.Nodes[j] = g.Nodes[j], g.Nodes[i]
	}
	wantErr(t, g.Validate(), "topological", "call Sort")
	if err := g.Sort(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(nodeNames(g.Nodes), " "); got != "relu neg iff add" {
		t.Errorf("sorted order %q, want relu neg iff add", got)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}

	// relu reading neg's output closes a cycle relu -> neg -> relu.
	relu := nodeByName(g, "relu")
	relu.Inputs[0] = g.Value("n")
	wantErr(t, g.Validate(), "Relink")
	g.Relink()
	wantErr(t, g.Validate(), "cycle", `"relu"`, `"neg"`)
	wantErr(t, g.Sort(), "cycle", `"relu"`, `"neg"`)
}

func TestRewriteErrors(t *testing.T) {
	_, g := rewriteModel(t)
	r, x := g.Value("r"), g.Value("x")
	then := nodeByName(g, "iff").AttrGraph("then_branch")

	wantErr(t, g.AddNode(&Node{OpType: "Abs", Inputs: []*Value{x}, Outputs: []*Value{r}}), `"r"`, "already produced")
	wantErr(t, g.AddNode(&Node{OpType: "Abs", Inputs: []*Value{then.Value("t_out")}, Outputs: []*Value{g.NewValue("z")}}), `"t_out"`, "not a value of this graph")
	wantErr(t, g.AddNode(&Node{OpType: "Abs", Inputs: []*Value{x}, Outputs: []*Value{{Name: "x"}}}), `"x"`, "already used")
	wantErr(t, g.AddNode(&Node{OpType: "Abs", Inputs: []*Value{x}, Outputs: []*Value{x}}), `"x"`, "graph input")
	wantErr(t, g.AddNode(&Node{Inputs: []*Value{x}}), "op type")
	wantErr(t, g.ReplaceAllUses(r, then.Value("t_out")), "must belong to this graph")
	wantErr(t, g.RemoveNode(&Node{Name: "ghost", OpType: "Abs"}), `"ghost"`, "not in this graph")

	// Names minted anywhere avoid every scope's names.
	if v := then.NewValue("x"); v.Name == "x" || then.Value(v.Name) != v {
		t.Errorf("subgraph NewValue(x) = %q, collides with the main graph's x", v.Name)
	}
	if v := g.NewValue("t_out"); v.Name == "t_out" {
		t.Errorf("NewValue(t_out) reused a subgraph name")
	}
	a, b := g.NewValue("tmp"), g.NewValue("tmp")
	if a.Name == b.Name {
		t.Errorf("two NewValue(tmp) calls gave %q twice", a.Name)
	}

	// Removing relu while neg still reads r leaves r dangling.
	if err := g.RemoveNode(nodeByName(g, "relu")); err != nil {
		t.Fatal(err)
	}
	wantErr(t, g.Validate(), `"neg"`, `"r"`, "dangling")
}
