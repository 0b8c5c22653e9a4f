package fuse

import (
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
)

// convNet is x -> Conv(w, bias, pads 1, group 2), the Conv's output.
func convNet(t *testing.T) (*builder, *graph.Value, *graph.Value, *graph.Value, *graph.Value) {
	b := newBuilder(t)
	x := b.input("x", dtype.Float32, "batch", 4, 5, 6)
	w := b.floats("w", []int64{6, 2, 3, 3}, make([]float32, 6*2*9)...)
	bias := b.floats("bias", []int64{6}, make([]float32, 6)...)
	return b, x, w, bias, b.op("Conv", vs(x, w, bias), aInts("pads", 1, 1, 1, 1), aInt("group", 2))
}

func TestConvAct(t *testing.T) {
	fl := func(name string, f float32) *graph.Attr { return &graph.Attr{Name: name, Kind: graph.KindFloat, F: f} }
	for _, c := range []struct {
		name       string
		build      func(b *builder, y *graph.Value) *graph.Value
		act        string
		alpha, bet float32
	}{
		{"relu", func(b *builder, y *graph.Value) *graph.Value { return b.op("Relu", vs(y)) }, "Relu", 0, 0},
		{"relu6", func(b *builder, y *graph.Value) *graph.Value {
			return b.op("Clip", vs(y, b.scalar("lo", 0), b.scalar("hi", 6)))
		}, "Clip", 0, 6},
		{"hardswish", func(b *builder, y *graph.Value) *graph.Value { return b.op("HardSwish", vs(y)) }, "HardSwish", 0, 0},
		{"hardsigmoid", func(b *builder, y *graph.Value) *graph.Value {
			return b.op("HardSigmoid", vs(y), fl("alpha", 0.25))
		}, "HardSigmoid", 0.25, 0.5},
		{"leaky", func(b *builder, y *graph.Value) *graph.Value { return b.op("LeakyRelu", vs(y)) }, "LeakyRelu", 0.01, 0},
		{"silu", func(b *builder, y *graph.Value) *graph.Value { return b.op("Mul", vs(y, b.op("Sigmoid", vs(y)))) }, "SiLU", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, x, w, bias, y := convNet(t)
			out := c.build(b, y)
			b.output(out)
			g := b.run(ConvAct)
			n := only(t, g, tlite.Key(tlite.ConvAct))
			wantInputs(t, n, x, w, bias)
			if len(g.Nodes) != 1 || n.Outputs[0] != out {
				t.Fatalf("graph %v", ops(g))
			}
			if n.AttrString("activation", "") != c.act || n.AttrFloat("act_alpha", -1) != c.alpha || n.AttrFloat("act_beta", -1) != c.bet {
				t.Errorf("activation %q alpha %v beta %v, want %q %v %v", n.AttrString("activation", ""),
					n.AttrFloat("act_alpha", -1), n.AttrFloat("act_beta", -1), c.act, c.alpha, c.bet)
			}
			if p, _ := n.AttrInts("pads"); len(p) != 4 || n.AttrInt("group", 0) != 2 {
				t.Errorf("the Conv's attributes were not kept: pads %v group %d", p, n.AttrInt("group", 0))
			}
		})
	}
	t.Run("conv-output-read-twice", func(t *testing.T) {
		b, _, _, _, y := convNet(t)
		b.output(b.op("Relu", vs(y)), b.op("Neg", vs(y)))
		if g := b.run(ConvAct); has(g, tlite.Key(tlite.ConvAct)) {
			t.Errorf("fused a Conv whose output another node reads: %v", ops(g))
		}
	})
	t.Run("conv-output-is-graph-output", func(t *testing.T) {
		b, _, _, _, y := convNet(t)
		b.output(y, b.op("Relu", vs(y)))
		if g := b.run(ConvAct); has(g, tlite.Key(tlite.ConvAct)) {
			t.Errorf("fused away a graph output: %v", ops(g))
		}
	})
	t.Run("clip-with-runtime-bound", func(t *testing.T) {
		b, _, _, _, y := convNet(t)
		hi := b.input("hi", dtype.Float32)
		b.output(b.op("Clip", vs(y, b.scalar("lo", 0), hi)))
		if g := b.run(ConvAct); has(g, tlite.Key(tlite.ConvAct)) {
			t.Errorf("fused a Clip whose bound is an input: %v", ops(g))
		}
	})
	t.Run("mul-by-other-sigmoid", func(t *testing.T) {
		// y * sigmoid(z) is not SiLU.
		b, _, _, _, y := convNet(t)
		z := b.op("Neg", vs(y))
		b.output(b.op("Mul", vs(y, b.op("Sigmoid", vs(z)))))
		if g := b.run(ConvAct); has(g, tlite.Key(tlite.ConvAct)) {
			t.Errorf("fused: %v", ops(g))
		}
	})
}
