package fuse

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
	"github.com/tlite/tlite/symshape/infer"
)

// builder makes test graphs through the graph package's rewrite API, then
// runs shape inference on them as the engine would before the passes.
type builder struct {
	t   *testing.T
	m   *graph.Model
	g   *graph.Graph
	res *infer.Result
	k   int
}

// newBuilder starts an empty opset-17 model.
func newBuilder(t *testing.T) *builder {
	t.Helper()
	md := graphtest.Model(17, &graph.Graph{Name: "test"})
	md.Opsets = map[string]int64{"": 17}
	m, err := graph.Parse(graphtest.Bytes(md), "")
	if err != nil {
		t.Fatal(err)
	}
	return &builder{t: t, m: m, g: m.Graph}
}

func dimsOf(dims []any) []graph.Dim {
	out := make([]graph.Dim, len(dims))
	for i, d := range dims {
		switch d := d.(type) {
		case int:
			out[i] = graph.Dim{Value: int64(d)}
		case string:
			out[i] = graph.Dim{Value: -1, Param: d}
		default:
			panic(fmt.Sprintf("dim %v", d))
		}
	}
	return out
}

// input adds a graph input; dims are ints or symbol names.
func (b *builder) input(name string, t dtype.Type, dims ...any) *graph.Value {
	v := b.g.NewValue(name)
	v.Type, v.Declared = t, dimsOf(dims)
	b.g.Inputs = append(b.g.Inputs, v)
	return v
}

// floats adds a float32 initializer.
func (b *builder) floats(name string, dims []int64, vals ...float32) *graph.Value {
	b.t.Helper()
	v := b.g.NewValue(name)
	tn, err := graph.Float32Tensor(v.Name, dims, vals)
	if err != nil {
		b.t.Fatal(err)
	}
	v.Type, v.Const = dtype.Float32, tn
	for _, d := range dims {
		v.Declared = append(v.Declared, graph.Dim{Value: d})
	}
	b.g.Initializers = append(b.g.Initializers, v)
	return v
}

// scalar adds a one-element float32 constant.
func (b *builder) scalar(name string, f float32) *graph.Value {
	return b.floats(name, nil, f)
}

// ints adds an int64 initializer.
func (b *builder) ints(name string, vals ...int64) *graph.Value {
	b.t.Helper()
	v := b.g.NewValue(name)
	tn, err := graph.Int64Tensor(v.Name, []int64{int64(len(vals))}, vals)
	if err != nil {
		b.t.Fatal(err)
	}
	v.Type, v.Const = dtype.Int64, tn
	v.Declared = []graph.Dim{{Value: int64(len(vals))}}
	b.g.Initializers = append(b.g.Initializers, v)
	return v
}

// op adds a node with one output and returns it.
func (b *builder) op(op string, ins []*graph.Value, attrs ...*graph.Attr) *graph.Value {
	b.t.Helper()
	b.k++
	out := b.g.NewValue(fmt.Sprintf("%s_%d", strings.ToLower(op), b.k))
	n := &graph.Node{Name: fmt.Sprintf("/blk/%s_%d", op, b.k), OpType: op, Inputs: ins, Outputs: []*graph.Value{out}}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	if err := b.g.AddNode(n); err != nil {
		b.t.Fatal(err)
	}
	return out
}

func vs(v ...*graph.Value) []*graph.Value { return v }

func aInts(name string, v ...int64) *graph.Attr {
	return &graph.Attr{Name: name, Kind: graph.KindInts, Ints: v}
}

func aInt(name string, v int64) *graph.Attr {
	return &graph.Attr{Name: name, Kind: graph.KindInt, I: v}
}

// output marks graph outputs.
func (b *builder) output(v ...*graph.Value) { b.g.Outputs = append(b.g.Outputs, v...) }

// infer derives shapes, as the engine does before rewriting, and keeps
// the result for the passes.
func (b *builder) infer() *graph.Graph {
	b.t.Helper()
	res, err := infer.Run(b.m, infer.Options{})
	if err != nil {
		b.t.Fatal(err)
	}
	b.res = res
	return b.g
}

// run infers shapes and applies pass, then checks the graph is valid and
// every value has a shape and a type.
func (b *builder) run(pass Pass) *graph.Graph {
	b.t.Helper()
	g := b.infer()
	if err := pass(g, b.res); err != nil {
		b.t.Fatal(err)
	}
	checkGraph(b.t, g)
	return g
}

// checkGraph validates g and checks that every value read or written has
// a shape and an element type.
func checkGraph(t *testing.T, g *graph.Graph) {
	t.Helper()
	if err := g.Validate(); err != nil {
		t.Fatalf("graph is invalid after the pass: %v", err)
	}
	for _, n := range g.Nodes {
		for _, v := range append(append([]*graph.Value(nil), n.Inputs...), n.Outputs...) {
			if v != nil && (v.Shape == nil && len(v.Declared) > 0 || v.Type == dtype.Undefined) {
				t.Errorf("node %v: value %q has shape %v and type %v", n, v.Name, v.Shape, v.Type)
			}
		}
	}
}

// ops lists g's node op types (domain-qualified for tlite) in order.
func ops(g *graph.Graph) []string {
	var out []string
	for _, n := range g.Nodes {
		op := n.OpType
		if n.Domain != "" {
			op = n.Domain + "." + op
		}
		out = append(out, op)
	}
	return out
}

// countOps counts device-relevant op types of g.
func countOps(g *graph.Graph) map[string]int {
	c := map[string]int{}
	for _, op := range ops(g) {
		c[op]++
	}
	return c
}

func opsString(c map[string]int) string {
	var ks []string
	for k, v := range c {
		ks = append(ks, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(ks)
	return strings.Join(ks, " ")
}

// only returns the single node of op type op (domain-qualified), failing
// when there is not exactly one.
func only(t *testing.T, g *graph.Graph, op string) *graph.Node {
	t.Helper()
	var found []*graph.Node
	for _, n := range g.Nodes {
		q := n.OpType
		if n.Domain != "" {
			q = n.Domain + "." + q
		}
		if q == op {
			found = append(found, n)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s node, have %d; graph: %v", op, len(found), ops(g))
	}
	return found[0]
}

// has reports whether g still holds a node of op type op.
func has(g *graph.Graph, op string) bool {
	for _, o := range ops(g) {
		if o == op {
			return true
		}
	}
	return false
}

// wantInputs checks a node's inputs by identity.
func wantInputs(t *testing.T, n *graph.Node, want ...*graph.Value) {
	t.Helper()
	if len(n.Inputs) != len(want) {
		t.Fatalf("%v has inputs %v; want %v", n, n.Inputs, want)
	}
	for i := range want {
		if n.Inputs[i] != want[i] {
			t.Fatalf("%v input %d is %v; want %v", n, i, n.Inputs[i], want[i])
		}
	}
}
