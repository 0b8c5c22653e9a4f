package engine

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape/infer"
)

// plainChainModel computes t1 = x + y, out = sigmoid((t1 * x) * 0.5) with
// both out and t1 as outputs; x is [batch, 3], y is [3] (broadcast).
func plainChainModel() []byte {
	nodes := []pb{
		nodePB("Add", "add", []string{"x", "y"}, []string{"t1"}),
		nodePB("Mul", "mul", []string{"t1", "x"}, []string{"t2"}),
		nodePB("Constant", "half", nil, []string{"c"}, aTensor("value", tensorPB("c", dtype.Float32, nil, f32Raw(0.5)))),
		nodePB("Mul", "scale", []string{"t2", "c"}, []string{"t3"}),
		nodePB("Sigmoid", "sig", []string{"t3"}, []string{"out"}),
	}
	g := graphPB("plain", nodes, nil,
		[]pb{tvi("x", dtype.Float32, "batch", 3), tvi("y", dtype.Float32, 3)},
		[]pb{tvi("out", dtype.Float32, "batch", 3), tvi("t1", dtype.Float32, "batch", 3)})
	return modelPB(17, g)
}

// fusedBody is the FusedElementwise body for plainChainModel's nodes: formal
// inputs a, b; outputs o (the sigmoid) and s (the sum).
func fusedBody() pb {
	nodes := []pb{
		nodePB("Add", "add", []string{"a", "b"}, []string{"s"}),
		nodePB("Mul", "mul", []string{"s", "a"}, []string{"p"}),
		nodePB("Constant", "half", nil, []string{"h"}, aTensor("value", tensorPB("h", dtype.Float32, nil, f32Raw(0.5)))),
		nodePB("Mul", "scale", []string{"p", "h"}, []string{"q"}),
		nodePB("Sigmoid", "sig", []string{"q"}, []string{"o"}),
	}
	return graphPB("body", nodes, nil,
		[]pb{tvi("a", dtype.Float32), tvi("b", dtype.Float32)},
		[]pb{tvi("o", dtype.Float32), tvi("s", dtype.Float32)})
}

// fuseRewrite replaces plainChainModel's element-wise nodes by one
// FusedElementwise node, taking the body graph from a parsed carrier model
// (the graph package builds subgraphs only when reading files).
func fuseRewrite(t *testing.T) Rewrite {
	carrier := modelPB(17, graphPB("carrier",
		[]pb{withDomain(nodePB("FusedElementwise", "fused", []string{"x", "y"}, []string{"out", "t1"}, aGraph("body", fusedBody())), "tlite")},
		nil, []pb{tvi("x", dtype.Float32, 2, 3), tvi("y", dtype.Float32, 3)},
		[]pb{tvi("out", dtype.Float32, 2, 3), tvi("t1", dtype.Float32, 2, 3)}))
	cm, err := graph.Parse(carrier, "")
	if err != nil {
		t.Fatal(err)
	}
	body := cm.Graph.Nodes[0].AttrGraph("body")
	if body == nil {
		t.Fatal("carrier has no body")
	}
	return func(g *graph.Graph, _ *infer.Result) error {
		var x, y, out, t1 *graph.Value
		for _, v := range g.Inputs {
			switch v.Name {
			case "x":
				x = v
			case "y":
				y = v
			}
		}
		out, t1 = g.Outputs[0], g.Outputs[1]
		for i := len(g.Nodes) - 1; i >= 0; i-- {
			n := g.Nodes[i]
			if n.OpType == "Constant" {
				continue
			}
			if err := g.RemoveNode(n); err != nil {
				return err
			}
		}
		fused := &graph.Node{Name: "fused", OpType: "FusedElementwise", Domain: "tlite",
			Inputs: []*graph.Value{x, y}, Outputs: []*graph.Value{out, t1},
			Attrs: map[string]*graph.Attr{"body": {Name: "body", Kind: graph.KindGraph, G: body}}}
		if err := g.AddNode(fused); err != nil {
			return err
		}
		g.RemoveDeadNodes()
		return nil
	}
}

// TestFusedElementwise builds a FusedElementwise node by hand and checks
// that it lowers to a single chain launch computing what the separate
// nodes compute, on both backends and in both precisions.
func TestFusedElementwise(t *testing.T) {
	x := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{1, -2, 3, 0.5, 4, -1}))
	y := tensor.New(tensor.WithShape(3), tensor.WithBacking([]float32{0.25, 1, -3}))
	in := map[string]*tensor.Dense{"x": x, "y": y}
	for _, opts := range []Options{{Kernels: testLib}, {Device: "go"}, {Kernels: testLib, Precision: FP16}} {
		name := fmt.Sprintf("%s/%v", map[bool]string{true: "go", false: "opencl"}[opts.Device == "go"], opts.Precision)
		t.Run(name, func(t *testing.T) {
			open := func(rw []Rewrite) *Session {
				m, err := graph.Parse(plainChainModel(), "")
				if err != nil {
					t.Fatal(err)
				}
				o := opts
				o.Rewrites = rw
				s, err := OpenModel(m, o)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			plain := open([]Rewrite{})
			defer plain.Close()
			fused := open([]Rewrite{fuseRewrite(t)})
			defer fused.Close()
			var launches, chains int
			for _, in := range fused.c.prog {
				if in.kind == iDevice {
					launches++
					if in.node.OpType == "FusedElementwise" {
						chains++
					}
				}
			}
			if launches != 1 || chains != 1 {
				t.Fatalf("fused program has %d device steps (%d fused); want exactly the fused one", launches, chains)
			}
			want, err := plain.Run(in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fused.Run(in)
			if err != nil {
				t.Fatal(err)
			}
			// The reference is computed here independently too.
			xs, ys := x.Data().([]float32), y.Data().([]float32)
			for _, name := range []string{"out", "t1"} {
				g, w := floats(t, got[name]), floats(t, want[name])
				for i := range g {
					sum := xs[i] + ys[i%3]
					ref := sum
					if name == "out" {
						ref = float32(1 / (1 + math.Exp(-float64(sum*xs[i]*0.5))))
					}
					tol := float32(1e-6)
					if opts.Precision == FP16 {
						tol = 2e-3 * max(1, abs32(ref))
					}
					if abs32(g[i]-w[i]) > tol || abs32(g[i]-ref) > tol {
						t.Errorf("%s[%d]: fused %v, unfused %v, reference %v", name, i, g[i], w[i], ref)
					}
				}
			}
		})
	}
}

// TestFusedBodyErrors: a body with a non-element-wise node is refused at
// Open, naming the node.
func TestFusedBodyErrors(t *testing.T) {
	m, err := graph.Parse(plainChainModel(), "")
	if err != nil {
		t.Fatal(err)
	}
	rw := fuseRewrite(t)
	bad := func(g *graph.Graph, res *infer.Result) error {
		if err := rw(g, res); err != nil {
			return err
		}
		for _, n := range g.Nodes {
			if n.OpType == "FusedElementwise" {
				n.AttrGraph("body").Nodes[4].OpType = "Softmax"
			}
		}
		return nil
	}
	_, err = OpenModel(m, Options{Device: "go", Rewrites: []Rewrite{bad}})
	if err == nil || !strings.Contains(err.Error(), `"fused" (tlite.FusedElementwise`) || !strings.Contains(err.Error(), "not element-wise") {
		t.Fatalf("want an error naming the fused node and the Softmax body node, got %v", err)
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}
