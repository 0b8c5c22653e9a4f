package fuse

import (
	"math"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape/infer"
)

// rmsGraph builds LlamaRMSNorm as torch 1.13 exports it, with knobs for
// the variants and near misses.
type rmsGraph struct {
	axis      int64 // ReduceMean axis (-1: the last)
	keepdims  int64 // ReduceMean keepdims
	power     float32
	inv       string // "div1", "recip" or "divx" (x / sqrt)
	square    string // "pow" or "mul"
	weight    string // "row", "none", "full" or "left"
	casts     bool   // Cast x to float32 before and the result after
	axesInput bool   // opset-18 style axes input
}

func defaultRMS() rmsGraph {
	return rmsGraph{axis: -1, keepdims: 1, power: 2, inv: "div1", square: "pow", weight: "row"}
}

// build returns the builder, x and the final value (a graph output).
func (c rmsGraph) build(t *testing.T) (*builder, *graph.Value, *graph.Value, *graph.Value) {
	b := newBuilder(t)
	x := b.input("x", dtype.Float32, "batch", "seq", 8)
	xin := x
	if c.casts {
		xin = b.op("Cast", vs(x), aInt("to", int64(dtype.Float32)))
	}
	var sq *graph.Value
	if c.square == "mul" {
		sq = b.op("Mul", vs(xin, xin))
	} else {
		sq = b.op("Pow", vs(xin, b.scalar("two", c.power)))
	}
	var mean *graph.Value
	if c.axesInput {
		mean = b.op("ReduceMean", vs(sq, b.ints("axes", c.axis)), aInt("keepdims", c.keepdims))
	} else {
		mean = b.op("ReduceMean", vs(sq), aInts("axes", c.axis), aInt("keepdims", c.keepdims))
	}
	s := b.op("Sqrt", vs(b.op("Add", vs(mean, b.scalar("eps", 1e-5)))))
	var y *graph.Value
	switch c.inv {
	case "recip":
		y = b.op("Mul", vs(xin, b.op("Reciprocal", vs(s))))
	case "divx":
		y = b.op("Div", vs(xin, s))
	default:
		y = b.op("Mul", vs(xin, b.op("Div", vs(b.scalar("one", 1), s))))
	}
	if c.casts {
		y = b.op("Cast", vs(y), aInt("to", int64(dtype.Float32)))
	}
	var w *graph.Value
	out := y
	switch c.weight {
	case "row":
		w = b.floats("w", []int64{8}, 1, 2, 3, 4, 5, 6, 7, 8)
		out = b.op("Mul", vs(y, w))
	case "left":
		w = b.floats("w", []int64{1, 8}, 1, 2, 3, 4, 5, 6, 7, 8)
		out = b.op("Mul", vs(w, y))
	case "full":
		w = b.input("wfull", dtype.Float32, "batch", "seq", 8)
		out = b.op("Mul", vs(y, w))
	}
	b.output(out)
	return b, x, w, out
}

func TestRMSNorm(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*rmsGraph)
	}{
		{"llama", func(*rmsGraph) {}},
		{"reciprocal", func(c *rmsGraph) { c.inv = "recip" }},
		{"div-x", func(c *rmsGraph) { c.inv = "divx" }},
		{"x-times-x", func(c *rmsGraph) { c.square = "mul" }},
		{"casts", func(c *rmsGraph) { c.casts = true }},
		{"no-weight", func(c *rmsGraph) { c.weight = "none" }},
		{"weight-left", func(c *rmsGraph) { c.weight = "left" }},
		{"axis-2", func(c *rmsGraph) { c.axis = 2 }},
		{"axes-input", func(c *rmsGraph) { c.axesInput = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultRMS()
			tc.edit(&c)
			b, x, w, out := c.build(t)
			g := b.run(RMSNorm)
			n := only(t, g, tlite.Key(tlite.RMSNorm))
			if len(g.Nodes) != 1 {
				t.Errorf("graph keeps %v besides the norm", ops(g))
			}
			if w != nil {
				wantInputs(t, n, x, w)
			} else {
				wantInputs(t, n, x)
			}
			if n.Outputs[0] != out || g.Outputs[0] != out || out.Name == "" {
				t.Errorf("the norm writes %v; the graph output %v must keep its value", n.Outputs[0], out)
			}
			if eps := n.AttrFloat("epsilon", 0); eps != 1e-5 {
				t.Errorf("epsilon %v", eps)
			}
		})
	}
}

// TestRMSNormNearMisses: graphs that look like RMSNorm but are not, or
// whose intermediate values are needed elsewhere, stay as they are.
func TestRMSNormNearMisses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*rmsGraph)
	}{
		{"mean-over-axis-1", func(c *rmsGraph) { c.axis = 1 }},
		{"no-keepdims", func(c *rmsGraph) { c.keepdims = 0 }},
		{"cube", func(c *rmsGraph) { c.power = 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaultRMS()
			tc.edit(&c)
			b, _, _, _ := c.build(t)
			before := len(b.g.Nodes)
			g := b.run(RMSNorm)
			if has(g, tlite.Key(tlite.RMSNorm)) || len(g.Nodes) != before {
				t.Errorf("near miss was rewritten: %v", ops(g))
			}
		})
	}
	t.Run("full-shape-weight", func(t *testing.T) {
		// A Mul by a full-shape tensor is not a per-column weight: the norm
		// fuses without it and the Mul stays.
		c := defaultRMS()
		c.weight = "full"
		b, x, _, out := c.build(t)
		g := b.run(RMSNorm)
		n := only(t, g, tlite.Key(tlite.RMSNorm))
		wantInputs(t, n, x)
		mul := out.Producer
		if mul == nil || mul.OpType != "Mul" || mul.Inputs[0] != n.Outputs[0] {
			t.Errorf("the full-shape Mul should read the norm: %v", ops(g))
		}
	})
	t.Run("statistic-used-elsewhere", func(t *testing.T) {
		// The mean of squares is also a graph output: it must not vanish.
		c := defaultRMS()
		b, _, _, _ := c.build(t)
		var mean *graph.Value
		for _, n := range b.g.Nodes {
			if n.OpType == "ReduceMean" {
				mean = n.Outputs[0]
			}
		}
		b.output(mean)
		g := b.run(RMSNorm)
		if has(g, tlite.Key(tlite.RMSNorm)) || mean.Producer == nil || mean.Producer.Graph() != g {
			t.Errorf("a graph output inside the pattern was fused away: %v", ops(g))
		}
	})
	t.Run("root-read-twice", func(t *testing.T) {
		c := defaultRMS()
		b, _, _, _ := c.build(t)
		var root *graph.Value
		for _, n := range b.g.Nodes {
			if n.OpType == "Sqrt" {
				root = n.Outputs[0]
			}
		}
		b.output(b.op("Neg", vs(root)))
		g := b.run(RMSNorm)
		if has(g, tlite.Key(tlite.RMSNorm)) {
			t.Errorf("fused although the square root has another reader: %v", ops(g))
		}
	})
	t.Run("shape-arithmetic", func(t *testing.T) {
		// The same ops on a shape tensor are folded on the host, never
		// device work to fuse.
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, "batch", 2)
		sh := b.op("Cast", vs(b.op("Shape", vs(x))), aInt("to", int64(dtype.Float32)))
		sq := b.op("Pow", vs(sh, b.scalar("two", 2)))
		mean := b.op("ReduceMean", vs(sq), aInts("axes", -1), aInt("keepdims", 1))
		s := b.op("Sqrt", vs(b.op("Add", vs(mean, b.scalar("eps", 1e-5)))))
		y := b.op("Mul", vs(sh, b.op("Div", vs(b.scalar("one", 1), s))))
		b.output(b.op("Add", vs(x, b.op("Cast", vs(y), aInt("to", int64(dtype.Float32))))))
		g := b.run(RMSNorm)
		if has(g, tlite.Key(tlite.RMSNorm)) {
			t.Errorf("host arithmetic was fused: %v", ops(g))
		}
	})
}

// lnGraph builds the decomposed LayerNorm.
func lnGraph(t *testing.T, gamma, beta bool, recip bool) (*builder, *graph.Value, *graph.Value, *graph.Value, *graph.Value) {
	b := newBuilder(t)
	x := b.input("x", dtype.Float32, "batch", "seq", 6)
	mu := b.op("ReduceMean", vs(x), aInts("axes", -1))
	d := b.op("Sub", vs(x, mu))
	v := b.op("ReduceMean", vs(b.op("Pow", vs(d, b.scalar("two", 2)))), aInts("axes", -1))
	s := b.op("Sqrt", vs(b.op("Add", vs(v, b.scalar("eps", 1e-6)))))
	var y *graph.Value
	if recip {
		y = b.op("Mul", vs(d, b.op("Reciprocal", vs(s))))
	} else {
		y = b.op("Div", vs(d, s))
	}
	var gv, bv *graph.Value
	if gamma {
		gv = b.floats("gamma", []int64{6}, 1, 2, 3, 4, 5, 6)
		y = b.op("Mul", vs(y, gv))
	}
	if beta {
		bv = b.floats("beta", []int64{6}, 6, 5, 4, 3, 2, 1)
		y = b.op("Add", vs(bv, y))
	}
	b.output(y)
	return b, x, gv, bv, y
}

func TestLayerNorm(t *testing.T) {
	for _, tc := range []struct {
		name               string
		gamma, beta, recip bool
	}{{"affine", true, true, false}, {"reciprocal", true, true, true}, {"scale-only", true, false, false}, {"bias-only", false, true, false}, {"plain", false, false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			b, x, gv, bv, out := lnGraph(t, tc.gamma, tc.beta, tc.recip)
			g := b.run(LayerNorm)
			n := only(t, g, "LayerNormalization")
			if len(g.Nodes) != 1 {
				t.Errorf("graph keeps %v besides the norm", ops(g))
			}
			if n.Inputs[0] != x || n.Outputs[0] != out {
				t.Errorf("LayerNormalization reads %v and writes %v", n.Inputs, n.Outputs)
			}
			if gv != nil && n.Inputs[1] != gv {
				t.Errorf("scale is %v; want %v", n.Inputs[1], gv)
			}
			if gv == nil {
				// The decomposed form had no scale: it must be ones.
				c := n.Inputs[1].Const
				if c == nil {
					t.Fatalf("scale %v is not a constant", n.Inputs[1])
				}
				f, _ := c.Float32s()
				if len(f) != 6 || f[0] != 1 || f[5] != 1 {
					t.Errorf("scale %v; want six ones", f)
				}
			}
			if (bv != nil) != (len(n.Inputs) == 3) || bv != nil && n.Inputs[2] != bv {
				t.Errorf("bias inputs %v; want %v", n.Inputs, bv)
			}
			if eps := n.AttrFloat("epsilon", 0); math.Abs(float64(eps)-1e-6) > 1e-12 || n.AttrInt("axis", 0) != -1 {
				t.Errorf("epsilon %v axis %d", eps, n.AttrInt("axis", 0))
			}
		})
	}
	t.Run("rms-pass-leaves-it", func(t *testing.T) {
		// Passes runs LayerNorm first; the RMSNorm pass alone would take
		// the variance half, which must still be correct: the normalised
		// value is RMSNorm(x - mean).
		b, _, _, _, _ := lnGraph(t, true, true, false)
		g := b.run(RMSNorm)
		n := only(t, g, tlite.Key(tlite.RMSNorm))
		if n.Inputs[0].Producer == nil || n.Inputs[0].Producer.OpType != "Sub" {
			t.Errorf("RMSNorm of the centred x expected, reads %v", n.Inputs[0])
		}
	})
	t.Run("centred-value-read-elsewhere", func(t *testing.T) {
		b, _, _, _, _ := lnGraph(t, true, true, false)
		for _, n := range b.g.Nodes {
			if n.OpType == "Sub" {
				b.output(n.Outputs[0])
			}
		}
		g := b.run(LayerNorm)
		if has(g, "LayerNormalization") {
			t.Errorf("fused although x - mean is a graph output: %v", ops(g))
		}
	})
	t.Run("different-tensor-centred", func(t *testing.T) {
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, 2, 6)
		z := b.input("z", dtype.Float32, 2, 6)
		d := b.op("Sub", vs(z, b.op("ReduceMean", vs(x), aInts("axes", -1))))
		v := b.op("ReduceMean", vs(b.op("Pow", vs(d, b.scalar("two", 2)))), aInts("axes", -1))
		b.output(b.op("Div", vs(d, b.op("Sqrt", vs(b.op("Add", vs(v, b.scalar("eps", 1e-6))))))))
		g := b.run(LayerNorm)
		if has(g, "LayerNormalization") {
			t.Errorf("x - mean(z) was taken for a LayerNorm: %v", ops(g))
		}
	})
}

// residualRMS builds h2 = h + a; y = RMSNorm(h2) * w in exported form, with
// h2 also read by a later Add when keepSum.
func residualRMS(t *testing.T, keepSum bool) (*builder, *graph.Value, *graph.Value, *graph.Value, *graph.Value) {
	b := newBuilder(t)
	h := b.input("h", dtype.Float32, "batch", 8)
	a := b.input("a", dtype.Float32, "batch", 8)
	x := b.op("Add", vs(h, a))
	sq := b.op("Pow", vs(x, b.scalar("two", 2)))
	mean := b.op("ReduceMean", vs(sq), aInts("axes", -1))
	s := b.op("Sqrt", vs(b.op("Add", vs(mean, b.scalar("eps", 1e-5)))))
	y := b.op("Mul", vs(b.op("Mul", vs(x, b.op("Div", vs(b.scalar("one", 1), s)))), b.floats("w", []int64{8}, 1, 2, 3, 4, 5, 6, 7, 8)))
	b.output(y)
	if keepSum {
		b.output(b.op("Add", vs(x, y)))
	}
	return b, h, a, x, y
}

// both applies passes in order.
func both(ps ...Pass) Pass {
	return func(g *graph.Graph, res *infer.Result) error {
		for _, p := range ps {
			if err := p(g, res); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestAddNorm(t *testing.T) {
	t.Run("rms-sum-kept", func(t *testing.T) {
		b, h, a, x, y := residualRMS(t, true)
		g := b.run(both(RMSNorm, AddNorm))
		n := only(t, g, tlite.Key(tlite.AddRMSNorm))
		if len(n.Inputs) != 3 || n.Inputs[0] != h || n.Inputs[1] != a || n.Inputs[2].Name != "w" {
			t.Errorf("AddRMSNorm reads %v", n.Inputs)
		}
		if len(n.Outputs) != 2 || n.Outputs[0] != x || n.Outputs[1] != y {
			t.Errorf("AddRMSNorm writes %v; want [%v %v]", n.Outputs, x, y)
		}
		if x.Producer != n || len(x.Consumers) != 1 {
			t.Errorf("the sum must stay for its other reader, produced by the fused node")
		}
		if len(g.Nodes) != 2 {
			t.Errorf("graph: %v", ops(g))
		}
	})
	t.Run("rms-sum-dropped", func(t *testing.T) {
		b, _, _, _, y := residualRMS(t, false)
		g := b.run(both(RMSNorm, AddNorm))
		n := only(t, g, tlite.Key(tlite.AddRMSNorm))
		if n.Outputs[0] != nil || n.Outputs[1] != y {
			t.Errorf("AddRMSNorm writes %v; want [<omitted> %v]", n.Outputs, y)
		}
		if len(g.Nodes) != 1 {
			t.Errorf("graph: %v", ops(g))
		}
	})
	t.Run("layernorm", func(t *testing.T) {
		b := newBuilder(t)
		h := b.input("h", dtype.Float32, 3, 6)
		a := b.input("a", dtype.Float32, 3, 6)
		gm := b.floats("gamma", []int64{6}, 1, 2, 3, 4, 5, 6)
		bt := b.floats("beta", []int64{6}, 1, 2, 3, 4, 5, 6)
		x := b.op("Add", vs(h, a))
		y := b.op("LayerNormalization", vs(x, gm, bt), aInt("axis", -1))
		b.output(y, x)
		g := b.run(AddNorm)
		n := only(t, g, tlite.Key(tlite.AddLayerNorm))
		wantInputs(t, n, h, a, gm, bt)
		if n.Outputs[0] != x || n.Outputs[1] != y || n.AttrInt("axis", 0) != -1 {
			t.Errorf("AddLayerNorm writes %v (axis %d)", n.Outputs, n.AttrInt("axis", 0))
		}
	})
	t.Run("broadcast-add-stays", func(t *testing.T) {
		// Adding a bias vector is not a residual: the shapes differ.
		b := newBuilder(t)
		h := b.input("h", dtype.Float32, 3, 6)
		gm := b.floats("gamma", []int64{6}, 1, 2, 3, 4, 5, 6)
		x := b.op("Add", vs(h, gm))
		b.output(b.op("LayerNormalization", vs(x, gm)))
		g := b.run(AddNorm)
		if has(g, tlite.Key(tlite.AddLayerNorm)) {
			t.Errorf("broadcast Add fused: %v", ops(g))
		}
	})
	t.Run("mean-output-read", func(t *testing.T) {
		b := newBuilder(t)
		h := b.input("h", dtype.Float32, 3, 6)
		a := b.input("a", dtype.Float32, 3, 6)
		gm := b.floats("gamma", []int64{6}, 1, 2, 3, 4, 5, 6)
		x := b.op("Add", vs(h, a))
		y := b.g.NewValue("y")
		mean := b.g.NewValue("mean")
		ln := &graph.Node{Name: "ln", OpType: "LayerNormalization", Inputs: vs(x, gm), Outputs: vs(y, mean)}
		if err := b.g.AddNode(ln); err != nil {
			t.Fatal(err)
		}
		b.output(y, mean)
		g := b.run(AddNorm)
		if has(g, tlite.Key(tlite.AddLayerNorm)) {
			t.Errorf("fused although the Mean output is read: %v", ops(g))
		}
	})
	t.Run("sum-feeds-scale", func(t *testing.T) {
		// The sum also computes the norm's scale: one node making the sum
		// and reading the scale would depend on itself.
		b := newBuilder(t)
		h := b.input("h", dtype.Float32, 6)
		a := b.input("a", dtype.Float32, 6)
		x := b.op("Add", vs(h, a))
		scale := b.op("Neg", vs(x))
		b.output(b.op("LayerNormalization", vs(x, scale)))
		g := b.run(AddNorm)
		if has(g, tlite.Key(tlite.AddLayerNorm)) {
			t.Errorf("cycle created: %v", ops(g))
		}
	})
}
