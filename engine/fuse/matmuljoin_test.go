package fuse

import (
	"fmt"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
)

// joinCase builds x [batch, seq, 4] read by products with [4, N]
// weights; each product's output goes through a Neg so that it is not a
// graph output unless the case says so.
type joinCase struct {
	b *builder
	x *graph.Value
	k int
}

func newJoinCase(t *testing.T) *joinCase {
	b := newBuilder(t)
	return &joinCase{b: b, x: b.input("x", dtype.Float32, "batch", "seq", 4)}
}

func (c *joinCase) weight(n int64) *graph.Value {
	c.k++
	vals := make([]float32, 4*n)
	for i := range vals {
		vals[i] = float32(c.k*100 + i)
	}
	return c.b.floats(fmt.Sprintf("w%d", c.k), []int64{4, n}, vals...)
}

// product adds MatMul(x, w) and a Neg reading it, which is an output.
func (c *joinCase) product(w *graph.Value) *graph.Value {
	y := c.b.op("MatMul", vs(c.x, w))
	c.b.output(c.b.op("Neg", vs(y)))
	return y
}

func TestJoinMatMuls(t *testing.T) {
	t.Run("qkv", func(t *testing.T) {
		c := newJoinCase(t)
		w0, w1, w2 := c.weight(5), c.weight(3), c.weight(3)
		y0, y1, y2 := c.product(w0), c.product(w1), c.product(w2)
		g := c.b.run(JoinMatMuls)
		n := only(t, g, tlite.Key(tlite.MatMulJoin))
		// Members come in graph order (which inference may have changed);
		// member i's weight is input 1+i, its output output i.
		of := map[*graph.Value]*graph.Value{y0: w0, y1: w1, y2: w2}
		width := map[*graph.Value]int64{w0: 5, w1: 3, w2: 3}
		ns, _ := n.AttrInts("ns")
		if len(n.Inputs) != 4 || n.Inputs[0] != c.x || len(n.Outputs) != 3 || len(ns) != 3 || n.AttrInt("K", 0) != 4 {
			t.Fatalf("inputs %v outputs %v ns %v K %d", n.Inputs, n.Outputs, ns, n.AttrInt("K", 0))
		}
		for i, y := range n.Outputs {
			if w := n.Inputs[1+i]; of[y] != w || ns[i] != width[w] {
				t.Errorf("member %d: output %v, weight %v, N %d", i, y, w, ns[i])
			}
		}
		if got := countOps(g)["MatMul"]; got != 0 {
			t.Errorf("%d MatMuls left: %v", got, ops(g))
		}
	})
	t.Run("with-biases", func(t *testing.T) {
		c := newJoinCase(t)
		var outs []*graph.Value
		for i, n := range []int64{4, 2} {
			y := c.b.op("MatMul", vs(c.x, c.weight(n)))
			bias := c.b.floats(fmt.Sprintf("b%d", i), []int64{n}, make([]float32, n)...)
			outs = append(outs, c.b.op("Add", vs(y, bias)))
			c.b.output(c.b.op("Neg", vs(outs[i])))
		}
		g := c.b.run(MatMulBias)
		if err := JoinMatMuls(g, c.b.res); err != nil {
			t.Fatal(err)
		}
		checkGraph(t, g)
		n := only(t, g, tlite.Key(tlite.MatMulJoin))
		if len(n.Inputs) != 5 || n.Inputs[3].Name != "b0" || n.Inputs[4].Name != "b1" {
			t.Errorf("inputs %v; want x, two weights, two biases", n.Inputs)
		}
	})
	// Each case leaves the products apart.
	for _, tc := range []struct {
		name  string
		build func(c *joinCase)
	}{
		{"one-product", func(c *joinCase) { c.product(c.weight(3)) }},
		{"shared-weight", func(c *joinCase) {
			// Tied weights: another node reads w as well.
			w := c.weight(3)
			c.product(w)
			c.product(c.weight(3))
			c.b.output(c.b.op("Neg", vs(w)))
		}},
		{"graph-output", func(c *joinCase) {
			c.b.output(c.b.op("MatMul", vs(c.x, c.weight(3))))
			c.product(c.weight(3))
		}},
		{"activation-weight", func(c *joinCase) {
			w := c.b.input("w", dtype.Float32, 4, 3)
			c.product(w)
			c.product(c.weight(3))
		}},
		{"other-input", func(c *joinCase) {
			c.product(c.weight(3))
			z := c.b.input("z", dtype.Float32, "batch", "seq", 4)
			c.b.output(c.b.op("Neg", vs(c.b.op("MatMul", vs(z, c.weight(3))))))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newJoinCase(t)
			tc.build(c)
			g := c.b.run(JoinMatMuls)
			if got := countOps(g)[tlite.Key(tlite.MatMulJoin)]; got != 0 {
				t.Errorf("joined: %v", ops(g))
			}
		})
	}
}
