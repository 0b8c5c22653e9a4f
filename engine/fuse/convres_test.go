package fuse

import (
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
)

func TestConvResidual(t *testing.T) {
	// resBlock is x -> Conv(w, bias, pads 1) + r, r = x (the identity
	// skip: 6 channels in and out).
	resBlock := func(t *testing.T) (*builder, *graph.Value, *graph.Value, *graph.Value, *graph.Value) {
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, "batch", 6, 5, 7)
		w := b.floats("w", []int64{6, 6, 3, 3}, make([]float32, 6*6*9)...)
		bias := b.floats("bias", []int64{6}, make([]float32, 6)...)
		return b, x, w, bias, b.op("Conv", vs(x, w, bias), aInts("pads", 1, 1, 1, 1))
	}
	for _, c := range []struct {
		name  string
		build func(b *builder, y, x *graph.Value) *graph.Value
		act   string
		swap  bool
	}{
		{"add-relu", func(b *builder, y, x *graph.Value) *graph.Value { return b.op("Relu", vs(b.op("Add", vs(y, x)))) }, "Relu", false},
		{"skip-first-add", func(b *builder, y, x *graph.Value) *graph.Value { return b.op("Add", vs(x, y)) }, "", true},
		{"add-silu", func(b *builder, y, x *graph.Value) *graph.Value {
			s := b.op("Add", vs(y, x))
			return b.op("Mul", vs(s, b.op("Sigmoid", vs(s))))
		}, "SiLU", false},
		{"add-relu6", func(b *builder, y, x *graph.Value) *graph.Value {
			return b.op("Clip", vs(b.op("Add", vs(y, x)), b.scalar("lo", 0), b.scalar("hi", 6)))
		}, "Clip", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, x, w, bias, y := resBlock(t)
			out := c.build(b, y, x)
			b.output(out)
			g := b.run(both(ConvAct, ConvResidual))
			n := only(t, g, tlite.Key(tlite.ConvAct))
			wantInputs(t, n, x, w, bias, x)
			if len(g.Nodes) != 1 || n.Outputs[0] != out {
				t.Fatalf("graph %v", ops(g))
			}
			if got := n.AttrString("activation", "?"); got != c.act {
				t.Errorf("activation %q, want %q", got, c.act)
			}
			if p, _ := n.AttrInts("pads"); len(p) != 4 || p[0] != 1 {
				t.Errorf("the Conv's attributes were not kept: pads %v", p)
			}
		})
	}
	t.Run("no-bias-downsample", func(t *testing.T) {
		// ResNet's downsampling block: both operands are Convs; the first
		// takes the second's output as its residual, and a Conv without a
		// bias keeps its bias slot empty.
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, 1, 4, 8, 8)
		main := b.op("Conv", vs(x, b.floats("w1", []int64{6, 4, 3, 3}, make([]float32, 6*4*9)...)), aInts("pads", 1, 1, 1, 1), aInts("strides", 2, 2))
		skip := b.op("Conv", vs(x, b.floats("w2", []int64{6, 4, 1, 1}, make([]float32, 24)...)), aInts("strides", 2, 2))
		out := b.op("Relu", vs(b.op("Add", vs(main, skip))))
		b.output(out)
		g := b.run(both(ConvAct, ConvResidual))
		if got := countOps(g); got["Conv"] != 1 || got[tlite.Key(tlite.ConvAct)] != 1 || len(g.Nodes) != 2 {
			t.Fatalf("graph %v", ops(g))
		}
		n := only(t, g, tlite.Key(tlite.ConvAct))
		if len(n.Inputs) != 4 || n.Inputs[2] != nil || n.Inputs[3] != skip || n.AttrString("activation", "") != "Relu" {
			t.Errorf("%v: inputs %v, activation %q", n, n.Inputs, n.AttrString("activation", ""))
		}
	})
	for _, c := range []struct {
		name  string
		build func(b *builder, y, x *graph.Value)
	}{
		{"broadcast-residual", func(b *builder, y, x *graph.Value) {
			b.output(b.op("Add", vs(y, b.floats("row", []int64{1, 6, 1, 1}, make([]float32, 6)...))))
		}},
		{"conv-read-twice", func(b *builder, y, x *graph.Value) { b.output(b.op("Add", vs(y, x)), b.op("Neg", vs(y))) }},
		{"conv-is-output", func(b *builder, y, x *graph.Value) { b.output(y, b.op("Add", vs(y, x))) }},
		{"add-of-itself", func(b *builder, y, x *graph.Value) { b.output(b.op("Add", vs(y, y))) }},
		{"activation-before-add", func(b *builder, y, x *graph.Value) { b.output(b.op("Add", vs(b.op("Relu", vs(y)), x))) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, x, _, _, y := resBlock(t)
			c.build(b, y, x)
			g := b.run(both(ConvAct, ConvResidual))
			for _, n := range g.Nodes {
				if n.OpType == tlite.ConvAct && len(n.Inputs) > 3 {
					t.Fatalf("fused a residual: %v", ops(g))
				}
			}
			if !has(g, "Add") {
				t.Errorf("the Add is gone: %v", ops(g))
			}
		})
	}
}

func TestConvScale(t *testing.T) {
	// seBlock is squeeze-excite on x [batch, 8, 5, 7]: s = HardSigmoid(
	// Conv1x1(GlobalAveragePool(x))), then Mul(x, s) read by a 1x1
	// projection (or by conv, when given).
	seBlock := func(t *testing.T, swap bool, proj func(b *builder, m *graph.Value) *graph.Value) (*builder, *graph.Value, *graph.Value, *graph.Value) {
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, "batch", 8, 5, 7)
		pool := b.op("GlobalAveragePool", vs(x))
		s := b.op("HardSigmoid", vs(b.op("Conv", vs(pool, b.floats("wse", []int64{8, 8, 1, 1}, make([]float32, 64)...)))))
		ins := vs(x, s)
		if swap {
			ins = vs(s, x)
		}
		m := b.op("Mul", ins)
		out := proj(b, m)
		b.output(out)
		return b, x, s, out
	}
	passes := both(ConvAct, ConvResidual, ConvScale)
	project := func(b *builder, m *graph.Value) *graph.Value {
		return b.op("Conv", vs(m, b.floats("wp", []int64{4, 8, 1, 1}, make([]float32, 32)...), b.floats("bp", []int64{4}, 0, 0, 0, 0)))
	}
	for _, swap := range []bool{false, true} {
		b, x, s, out := seBlock(t, swap, project)
		g := b.run(passes)
		// The SE's own conv takes its HardSigmoid (ConvAct); the
		// projection takes the Mul.
		if c := countOps(g); c["Mul"] != 0 || c[tlite.Key(tlite.ConvAct)] != 2 || c["GlobalAveragePool"] != 1 {
			t.Fatalf("swap %v: graph %v", swap, ops(g))
		}
		var proj *graph.Node
		for _, n := range g.Nodes {
			if n.OpType == tlite.ConvAct && n.Outputs[0] == out {
				proj = n
			}
		}
		if proj == nil || len(proj.Inputs) != 5 || proj.Inputs[0] != x || proj.Inputs[4] != s || proj.Inputs[3] != nil ||
			proj.AttrString("activation", "?") != "" {
			t.Fatalf("swap %v: projection %v reads %v", swap, proj, proj.Inputs)
		}
	}
	t.Run("with-skip", func(t *testing.T) {
		// MobileNet's block: the scaled projection's output is added to
		// the block's input: both folds meet in one node.
		b, x, s, out := seBlock(t, false, func(b *builder, m *graph.Value) *graph.Value {
			y := b.op("Conv", vs(m, b.floats("wp", []int64{8, 8, 1, 1}, make([]float32, 64)...)))
			return b.op("Add", vs(y, b.input("skip", dtype.Float32, "batch", 8, 5, 7)))
		})
		g := b.run(passes)
		var proj *graph.Node
		for _, n := range g.Nodes {
			if n.Outputs[0] == out {
				proj = n
			}
		}
		if proj == nil || proj.OpType != tlite.ConvAct || len(proj.Inputs) != 5 || proj.Inputs[0] != x || proj.Inputs[4] != s ||
			proj.Inputs[3] == nil || proj.Inputs[3].Name != "skip" {
			t.Fatalf("graph %v; projection %v", ops(g), proj)
		}
	})
	for _, c := range []struct {
		name string
		proj func(b *builder, m *graph.Value) *graph.Value
	}{
		{"3x3-projection", func(b *builder, m *graph.Value) *graph.Value {
			return b.op("Conv", vs(m, b.floats("wp", []int64{4, 8, 3, 3}, make([]float32, 4*8*9)...)), aInts("pads", 1, 1, 1, 1))
		}},
		{"strided-1x1", func(b *builder, m *graph.Value) *graph.Value {
			return b.op("Conv", vs(m, b.floats("wp", []int64{4, 8, 1, 1}, make([]float32, 32)...)), aInts("strides", 2, 2))
		}},
		{"mul-read-twice", func(b *builder, m *graph.Value) *graph.Value {
			return b.op("Add", vs(project(b, m), b.op("ReduceMean", vs(m), aInts("axes", 1))))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, _, _, _ := seBlock(t, false, c.proj)
			if g := b.run(passes); !has(g, "Mul") {
				t.Errorf("folded the Mul: %v", ops(g))
			}
		})
	}
	t.Run("per-channel-constant", func(t *testing.T) {
		// A scale that is the same for every image ([1, C, 1, 1] with a
		// batch of 2) is not the kernels' [N, C] scale.
		b := newBuilder(t)
		x := b.input("x", dtype.Float32, 2, 8, 5, 7)
		m := b.op("Mul", vs(x, b.floats("k", []int64{1, 8, 1, 1}, make([]float32, 8)...)))
		b.output(b.op("Conv", vs(m, b.floats("wp", []int64{4, 8, 1, 1}, make([]float32, 32)...))))
		if g := b.run(passes); !has(g, "Mul") {
			t.Errorf("folded the Mul: %v", ops(g))
		}
	})
}
