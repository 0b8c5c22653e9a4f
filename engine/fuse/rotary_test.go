package fuse

import (
	"math"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
)

// rotarySpec says how to write one rotary embedding; the zero value is
// Hugging Face's export of x*cos + rotate_half(x)*sin over [1, 4, s, 8].
type rotarySpec struct {
	xDims      []any // x's shape; [1, 4, "s", 8] when nil
	cosDims    []any // cos and sin; [1, 1, "s", 8] when nil
	hiLo, hiHi int64 // Slice bounds of the negated half; [4, MaxInt64) when both 0
	loLo, loHi int64 // of the other half; [0, 4) when both 0
	axis       int64 // slice and concat axis; -1 when 0
	swapOrder  bool  // Mul(cos, x), Mul(sin, rot), Add(sin term, cos term)
	negSecond  bool  // Concat(Slice(h:), Neg(Slice(:h))): the sign on the wrong half
	cosX       bool  // the cos term multiplies another tensor than x
	dynStart   bool  // the negated half's start is a graph input
	partial    int64 // rotate only this many leading elements of a 12-wide row
	passLo     int64 // the pass-through Slice's start (partial; rd when 0)
	outputs    func(b *builder, r rotaryVals) []*graph.Value
}

// rotaryVals are the values of a built rotary graph.
type rotaryVals struct {
	x, rotIn, cos, sin, neg, cat, out *graph.Value
}

func buildRotary(t *testing.T, s rotarySpec) (*builder, rotaryVals) {
	b := newBuilder(t)
	xd := s.xDims
	if xd == nil {
		xd = []any{1, 4, "s", 8}
	}
	if s.partial > 0 {
		xd = []any{1, 4, "s", 12}
	}
	cd := s.cosDims
	if cd == nil {
		cd = []any{1, 1, "s", 8}
		if s.partial > 0 {
			cd = []any{1, 1, "s", int(s.partial)}
		}
	}
	axis := s.axis
	if axis == 0 {
		axis = -1
	}
	var v rotaryVals
	v.x = b.input("x", dtype.Float32, xd...)
	v.cos = b.input("cos", dtype.Float32, cd...)
	v.sin = b.input("sin", dtype.Float32, cd...)
	slice := func(x *graph.Value, lo, hi int64) *graph.Value {
		return b.op("Slice", vs(x, b.ints("lo", lo), b.ints("hi", hi), b.ints("ax", axis)))
	}
	x := v.x
	if s.partial > 0 {
		x = slice(v.x, 0, s.partial)
	}
	v.rotIn = x
	hiLo, hiHi, loLo, loHi := s.hiLo, s.hiHi, s.loLo, s.loHi
	if hiLo == 0 && hiHi == 0 {
		hiLo, hiHi = 4, math.MaxInt64
	}
	if loLo == 0 && loHi == 0 {
		loLo, loHi = 0, 4
	}
	var hi, lo *graph.Value
	if s.dynStart {
		k := b.input("k", dtype.Int64, 1)
		hi = b.op("Slice", vs(x, k, b.ints("hi", hiHi), b.ints("ax", axis)))
	} else {
		hi = slice(x, hiLo, hiHi)
	}
	lo = slice(x, loLo, loHi)
	if s.negSecond {
		v.neg = b.op("Neg", vs(lo))
		v.cat = b.op("Concat", vs(hi, v.neg), aInt("axis", axis))
	} else {
		v.neg = b.op("Neg", vs(hi))
		v.cat = b.op("Concat", vs(v.neg, lo), aInt("axis", axis))
	}
	xc := x
	if s.cosX {
		xc = b.op("Relu", vs(x))
	}
	var cterm, sterm *graph.Value
	if s.swapOrder {
		cterm = b.op("Mul", vs(v.cos, xc))
		sterm = b.op("Mul", vs(v.sin, v.cat))
		v.out = b.op("Add", vs(sterm, cterm))
	} else {
		cterm = b.op("Mul", vs(xc, v.cos))
		sterm = b.op("Mul", vs(v.cat, v.sin))
		v.out = b.op("Add", vs(cterm, sterm))
	}
	if s.partial > 0 {
		plo := s.passLo
		if plo == 0 {
			plo = s.partial
		}
		v.out = b.op("Concat", vs(v.out, slice(v.x, plo, math.MaxInt64)), aInt("axis", axis))
	}
	if s.outputs != nil {
		b.output(s.outputs(b, v)...)
	} else {
		b.output(v.out)
	}
	return b, v
}

func TestRotaryFuses(t *testing.T) {
	for _, c := range []struct {
		name string
		spec rotarySpec
		rd   int64
		// onRot: the fused node reads the rotated slice, not x, and
		// writes the inner sum (the partial form was not widened).
		onRot bool
	}{
		{"hf-export", rotarySpec{}, 8, false},
		{"operands-swapped", rotarySpec{swapOrder: true}, 8, false},
		{"negative-start-exact-end", rotarySpec{hiLo: -4, hiHi: 8, loLo: 0, loHi: -4}, 8, false},
		{"tables-[s,d]", rotarySpec{cosDims: []any{"s", 8}}, 8, false},
		{"tables-one-row", rotarySpec{cosDims: []any{8}}, 8, false},
		{"batch-seq-heads-layout", rotarySpec{xDims: []any{2, "s", 3, 8}, cosDims: []any{2, "s", 1, 8}}, 8, false},
		{"rank-2", rotarySpec{xDims: []any{"s", 8}, cosDims: []any{"s", 8}}, 8, false},
		{"partial-neox", rotarySpec{partial: 8}, 8, false},
		{"partial-tables-[s,rd]", rotarySpec{partial: 8, cosDims: []any{"s", 8}}, 8, false},
		// The pass-through slice does not start where the rotated part
		// ends: the rotation alone fuses.
		{"partial-pass-gap", rotarySpec{partial: 8, passLo: 9}, 8, true},
		// Shape(rotated slice), as exports compute h, is folded at Open:
		// the form still widens, the slice staying for the Shape alone.
		{"partial-rot-shape-read", rotarySpec{partial: 8, outputs: func(b *builder, v rotaryVals) []*graph.Value {
			return vs(v.out, b.op("Shape", vs(v.rotIn)))
		}}, 8, false},
		// The rotated slice is read elsewhere too: it stays, and so does
		// the rest of the partial form around the fused rotation.
		{"partial-rot-read-elsewhere", rotarySpec{partial: 8, outputs: func(b *builder, v rotaryVals) []*graph.Value {
			return vs(v.out, b.op("Relu", vs(v.rotIn)))
		}}, 8, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, v := buildRotary(t, c.spec)
			g := b.run(Rotary)
			n := only(t, g, tlite.Key(tlite.Rotary))
			if got := n.AttrInt("rotary_dim", 0); got != c.rd {
				t.Errorf("rotary_dim %d; want %d", got, c.rd)
			}
			if c.onRot {
				wantInputs(t, n, v.rotIn, v.cos, v.sin)
				if !has(g, "Concat") {
					t.Errorf("the partial form's join went: %v", ops(g))
				}
			} else {
				wantInputs(t, n, v.x, v.cos, v.sin)
				if n.Outputs[0] != v.out {
					t.Errorf("writes %v; want the graph's %v", n.Outputs[0], v.out)
				}
				for _, op := range []string{"Neg", "Concat", "Mul", "Add", "Slice"} {
					if has(g, op) && !(op == "Slice" && c.name == "partial-rot-shape-read") {
						t.Errorf("%s left behind: %v", op, ops(g))
					}
				}
			}
			if has(g, "Neg") {
				t.Errorf("Neg left behind: %v", ops(g))
			}
			if c.name == "partial-rot-shape-read" && countOps(g)["Slice"] != 1 {
				t.Errorf("want the rotated slice kept for its Shape alone: %v", ops(g))
			}
		})
	}
}

func TestRotaryRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		spec rotarySpec
	}{
		{"sign-on-the-wrong-half", rotarySpec{negSecond: true}},
		{"halves-swapped", rotarySpec{hiLo: 0, hiHi: 4, loLo: 4, loHi: 8}},
		{"slice-not-on-last-axis", rotarySpec{xDims: []any{1, 8, "s", 8}, axis: 1}},
		{"split-off-the-middle", rotarySpec{hiLo: 3, hiHi: 8, loLo: 0, loHi: 3}},
		{"start-not-constant", rotarySpec{dynStart: true}},
		{"tables-enlarge-x", rotarySpec{xDims: []any{1, 1, "s", 8}, cosDims: []any{1, 4, "s", 8}}},
		{"cos-term-of-another-tensor", rotarySpec{cosX: true}},
		{"rotate-half-read-elsewhere", rotarySpec{outputs: func(b *builder, v rotaryVals) []*graph.Value {
			return vs(v.out, b.op("Relu", vs(v.cat)))
		}}},
		{"negated-half-is-an-output", rotarySpec{outputs: func(b *builder, v rotaryVals) []*graph.Value {
			return vs(v.out, v.neg)
		}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, _ := buildRotary(t, c.spec)
			before := len(b.g.Nodes)
			g := b.run(Rotary)
			if has(g, tlite.Key(tlite.Rotary)) || len(g.Nodes) != before {
				t.Errorf("rewrote it: %v", ops(g))
			}
		})
	}
}

// hfRotary writes x*cos + rotate_half(x)*sin over x's last axis of size d
// as the exports do.
func hfRotary(b *builder, x, cos, sin *graph.Value, d int64) *graph.Value {
	slice := func(lo, hi int64) *graph.Value {
		return b.op("Slice", vs(x, b.ints("lo", lo), b.ints("hi", hi), b.ints("ax", -1)))
	}
	rot := b.op("Concat", vs(b.op("Neg", vs(slice(d/2, math.MaxInt64))), slice(0, d/2)), aInt("axis", -1))
	return b.op("Add", vs(b.op("Mul", vs(x, cos)), b.op("Mul", vs(rot, sin))))
}

func TestRotaryPairs(t *testing.T) {
	for _, c := range []struct {
		name string
		// build returns the two rotations' inputs and outputs.
		build func(b *builder, cos, sin *graph.Value) (xq, yq, xk, yk *graph.Value)
		pair  bool
	}{
		{"queries-and-keys", func(b *builder, cos, sin *graph.Value) (*graph.Value, *graph.Value, *graph.Value, *graph.Value) {
			q, k := b.input("q", dtype.Float32, 1, 4, "s", 8), b.input("k", dtype.Float32, 1, 2, "s", 8)
			return q, hfRotary(b, q, cos, sin, 8), k, hfRotary(b, k, cos, sin, 8)
		}, true},
		{"second-reads-the-first", func(b *builder, cos, sin *graph.Value) (*graph.Value, *graph.Value, *graph.Value, *graph.Value) {
			q := b.input("q", dtype.Float32, 1, 4, "s", 8)
			yq := hfRotary(b, q, cos, sin, 8)
			k := b.op("Relu", vs(yq))
			return q, yq, k, hfRotary(b, k, cos, sin, 8)
		}, false},
		{"other-tables", func(b *builder, cos, sin *graph.Value) (*graph.Value, *graph.Value, *graph.Value, *graph.Value) {
			q, k := b.input("q", dtype.Float32, 1, 4, "s", 8), b.input("k", dtype.Float32, 1, 2, "s", 8)
			sin2 := b.input("sin2", dtype.Float32, 1, 1, "s", 8)
			return q, hfRotary(b, q, cos, sin, 8), k, hfRotary(b, k, cos, sin2, 8)
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder(t)
			cos, sin := b.input("cos", dtype.Float32, 1, 1, "s", 8), b.input("sin", dtype.Float32, 1, 1, "s", 8)
			xq, yq, xk, yk := c.build(b, cos, sin)
			b.output(yq, yk)
			g := b.run(Rotary)
			if !c.pair {
				if n := countOps(g)[tlite.Key(tlite.Rotary)]; n != 2 {
					t.Fatalf("%d Rotary nodes; want the two rotations apart: %v", n, ops(g))
				}
				return
			}
			n := only(t, g, tlite.Key(tlite.Rotary))
			wantInputs(t, n, xq, cos, sin, xk)
			if len(n.Outputs) != 2 || n.Outputs[0] != yq || n.Outputs[1] != yk || n.AttrInt("rotary_dim", 0) != 8 {
				t.Errorf("%v writes %v, rotary_dim %d", n, n.Outputs, n.AttrInt("rotary_dim", 0))
			}
		})
	}
}
