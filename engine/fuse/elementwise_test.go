package fuse

import (
	"fmt"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape/infer"
)

// testElementwise stands in for the engine's element-wise op list.
var testElementwise = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true, "Sqrt": true, "Erf": true, "Tanh": true,
	"Sigmoid": true, "Where": true, "Cast": true, "Neg": true, "Exp": true, "Relu": true, "Equal": true,
	"And": true, "LessOrEqual": true, "Cos": true, "Sin": true, "Reciprocal": true,
}

func ew(n *graph.Node) bool { return n.Domain == "" && testElementwise[n.OpType] }

func elementwise(g *graph.Graph, res *infer.Result) error { return Elementwise(g, res, ew) }

// bodyOps lists a fused node's body op types.
func bodyOps(t *testing.T, n *graph.Node) []string {
	t.Helper()
	body := n.AttrGraph("body")
	if body == nil {
		t.Fatalf("%v has no body", n)
	}
	if err := body.Validate(); err != nil {
		t.Fatalf("body: %v", err)
	}
	if len(body.Inputs) != len(n.Inputs) || len(body.Outputs) != len(n.Outputs) {
		t.Fatalf("body has %d inputs and %d outputs, the node %d and %d", len(body.Inputs), len(body.Outputs), len(n.Inputs), len(n.Outputs))
	}
	for i, v := range body.Inputs {
		if v.Type != n.Inputs[i].Type {
			t.Errorf("body input %d has type %v, node input %v", i, v.Type, n.Inputs[i].Type)
		}
	}
	return ops(body)
}

func TestElementwiseGELU(t *testing.T) {
	b := newBuilder(t)
	x := b.input("x", dtype.Float32, "batch", 8)
	half := b.op("Mul", vs(x, b.scalar("half", 0.5)))
	e := b.op("Erf", vs(b.op("Div", vs(x, b.scalar("sqrt2", 1.4142135)))))
	out := b.op("Mul", vs(half, b.op("Add", vs(e, b.scalar("one", 1)))))
	b.output(out)
	g := b.run(elementwise)
	n := only(t, g, tlite.Key(tlite.FusedElementwise))
	if len(g.Nodes) != 1 || n.Outputs[0] != out {
		t.Fatalf("graph %v writes %v", ops(g), n.Outputs)
	}
	if got := bodyOps(t, n); len(got) != 5 {
		t.Errorf("body %v; want the five GELU ops", got)
	}
	if n.Inputs[0] != x || len(n.Inputs) != 4 {
		t.Errorf("inputs %v; want x and the three constants", n.Inputs)
	}
}

func TestElementwiseTwoOutputs(t *testing.T) {
	b := newBuilder(t)
	x := b.input("x", dtype.Float32, "batch", 3)
	y := b.input("y", dtype.Float32, 3)
	t1 := b.op("Add", vs(x, y))
	out := b.op("Sigmoid", vs(b.op("Mul", vs(t1, x))))
	b.output(out, t1)
	g := b.run(elementwise)
	n := only(t, g, tlite.Key(tlite.FusedElementwise))
	if len(n.Outputs) != 2 || n.Outputs[0] != t1 || n.Outputs[1] != out || g.Outputs[0] != out || g.Outputs[1] != t1 {
		t.Errorf("outputs %v, graph outputs %v", n.Outputs, g.Outputs)
	}
	wantInputs(t, n, x, y)
}

func TestElementwiseNearMisses(t *testing.T) {
	t.Run("output-shapes-differ", func(t *testing.T) {
		// m = y*2 is [3] and read outside, x + m is [batch, 3]: one kernel
		// cannot write both.
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, "batch", 3)
		y := b.input("y", dtype.Float32, 3)
		m := b.op("Mul", vs(y, b.scalar("two", 2)))
		b.output(b.op("Add", vs(x, m)), m)
		g := b.run(elementwise)
		if has(g, tlite.Key(tlite.FusedElementwise)) {
			t.Errorf("fused outputs of different shapes: %v", ops(g))
		}
	})
	t.Run("smaller-interior-value", func(t *testing.T) {
		// The same m read only inside is recomputed per element: fine.
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, "batch", 3)
		y := b.input("y", dtype.Float32, 3)
		m := b.op("Mul", vs(y, b.scalar("two", 2)))
		b.output(b.op("Add", vs(x, m)))
		g := b.run(elementwise)
		only(t, g, tlite.Key(tlite.FusedElementwise))
		if len(g.Nodes) != 1 {
			t.Errorf("graph %v", ops(g))
		}
	})
	t.Run("costly-broadcast-value", func(t *testing.T) {
		// A squeeze-excite gate: x * sigmoid(s + b), s [N, C, 1, 1]. The
		// sigmoid stays its own kernel (one per channel, not one per
		// pixel); the Add before it (cheap, same shape) joins it, and
		// the product with x is left as a single Mul.
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, "batch", 5, 7, 9)
		sq := b.input("s", dtype.Float32, "batch", 5, 1, 1)
		bias := b.input("b", dtype.Float32, "batch", 5, 1, 1)
		gate := b.op("Sigmoid", vs(b.op("Add", vs(sq, bias))))
		b.output(b.op("Mul", vs(x, gate)))
		g := b.run(elementwise)
		n := only(t, g, tlite.Key(tlite.FusedElementwise))
		if got := bodyOps(t, n); len(got) != 2 || got[0] != "Add" || got[1] != "Sigmoid" {
			t.Errorf("fused body %v; want [Add Sigmoid]", got)
		}
		if c := countOps(g); c["Mul"] != 1 || len(g.Nodes) != 2 {
			t.Errorf("graph %v; want the gate's group and one Mul", ops(g))
		}
	})
	t.Run("cheap-broadcast-value", func(t *testing.T) {
		// The same gate with a cheap op (Relu) is recomputed per element:
		// one kernel.
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, "batch", 5, 7, 9)
		sq := b.input("s", dtype.Float32, "batch", 5, 1, 1)
		b.output(b.op("Mul", vs(x, b.op("Relu", vs(sq)))))
		g := b.run(elementwise)
		only(t, g, tlite.Key(tlite.FusedElementwise))
		if len(g.Nodes) != 1 {
			t.Errorf("graph %v", ops(g))
		}
	})
	t.Run("path-through-other-op", func(t *testing.T) {
		// e feeds the Add directly and through a Softmax: fusing Exp and
		// Add would make the fused node wait for itself.
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, 2, 3)
		e := b.op("Exp", vs(x))
		s := b.op("Softmax", vs(e), aInt("axis", -1))
		b.output(b.op("Add", vs(e, s)))
		g := b.run(elementwise)
		if has(g, tlite.Key(tlite.FusedElementwise)) {
			t.Errorf("fused across a path leaving the group: %v", ops(g))
		}
	})
	t.Run("op-refused", func(t *testing.T) {
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, 2, 3)
		b.output(b.op("Relu", vs(b.op("Floor", vs(x)))))
		g := b.run(elementwise)
		if has(g, tlite.Key(tlite.FusedElementwise)) {
			t.Errorf("fused an op the predicate refuses: %v", ops(g))
		}
	})
	t.Run("shape-arithmetic", func(t *testing.T) {
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, "batch", 3)
		n := b.op("Cast", vs(b.op("Shape", vs(x))), aInt("to", int64(dtype.Float32)))
		m := b.op("Mul", vs(b.op("Add", vs(n, b.scalar("zero", 0))), b.scalar("one", 1)))
		b.output(b.op("Reshape", vs(x, b.op("Cast", vs(m), aInt("to", int64(dtype.Int64))))))
		g := b.run(elementwise)
		if has(g, tlite.Key(tlite.FusedElementwise)) {
			t.Errorf("host arithmetic fused: %v", ops(g))
		}
	})
}

func TestElementwiseSeparateGroups(t *testing.T) {
	// Two chains joined only through a MatMul become two fused nodes, and
	// the graph stays sorted.
	b := newBuilder(t)
	x := b.input("x", dtype.Float32, 2, 4)
	w := b.floats("w", []int64{4, 4}, make([]float32, 16)...)
	a := b.op("Tanh", vs(b.op("Neg", vs(x))))
	m := b.op("MatMul", vs(a, w))
	b.output(b.op("Sigmoid", vs(b.op("Add", vs(m, a)))))
	g := b.run(elementwise)
	c := countOps(g)
	if c[tlite.Key(tlite.FusedElementwise)] != 2 || c["MatMul"] != 1 || len(g.Nodes) != 3 {
		t.Errorf("graph %s", opsString(c))
	}
}

func TestElementwiseInputLimit(t *testing.T) {
	// A sum of 20 inputs is cut into kernels of at most maxGroupInputs
	// inputs each.
	b := newBuilder(t)
	acc := b.input("x0", dtype.Float32, 4)
	for i := 1; i < 20; i++ {
		acc = b.op("Add", vs(acc, b.input(fmt.Sprintf("x%d", i), dtype.Float32, 4)))
	}
	b.output(acc)
	g := b.run(elementwise)
	if len(g.Nodes) < 2 {
		t.Fatalf("graph %v", ops(g))
	}
	for _, n := range g.Nodes {
		if len(n.Inputs) > maxGroupInputs {
			t.Errorf("%v has %d inputs", n, len(n.Inputs))
		}
	}
}
