package fuse

import (
	"math"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
)

func linear(t *testing.T) (*builder, *graph.Value, *graph.Value, *graph.Value, *graph.Value) {
	b := newBuilder(t)
	a := b.input("a", dtype.Float32, "batch", "seq", 4)
	w := b.floats("w", []int64{4, 3}, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
	bias := b.floats("bias", []int64{3}, 1, -1, 2)
	return b, a, w, bias, b.op("MatMul", vs(a, w))
}

func TestMatMulBias(t *testing.T) {
	t.Run("linear", func(t *testing.T) {
		b, a, w, bias, y := linear(t)
		out := b.op("Add", vs(bias, y)) // torch puts the bias first
		b.output(out)
		g := b.run(MatMulBias)
		n := only(t, g, tlite.Key(tlite.MatMulBias))
		wantInputs(t, n, a, w, bias)
		if len(g.Nodes) != 1 || n.Outputs[0] != out || n.AttrFloat("alpha", 0) != 1 || n.AttrFloat("beta", 0) != 1 {
			t.Errorf("graph %v, alpha %v beta %v", ops(g), n.AttrFloat("alpha", 0), n.AttrFloat("beta", 0))
		}
	})
	t.Run("scaled-after-bias", func(t *testing.T) {
		// CLIP's q_proj: (x W + b) * scale.
		b, _, _, _, y := linear(t)
		out := b.op("Mul", vs(b.op("Add", vs(y, b.g.Value("bias"))), b.scalar("s", 0.25)))
		b.output(out)
		g := b.run(MatMulBias)
		n := only(t, g, tlite.Key(tlite.MatMulBias))
		if n.AttrFloat("alpha", 0) != 0.25 || n.AttrFloat("beta", 0) != 0.25 || len(g.Nodes) != 1 {
			t.Errorf("alpha %v beta %v, graph %v", n.AttrFloat("alpha", 0), n.AttrFloat("beta", 0), ops(g))
		}
	})
	t.Run("divided-before-bias", func(t *testing.T) {
		b, _, _, _, y := linear(t)
		out := b.op("Add", vs(b.op("Div", vs(y, b.scalar("s", 4))), b.g.Value("bias")))
		b.output(out)
		g := b.run(MatMulBias)
		n := only(t, g, tlite.Key(tlite.MatMulBias))
		if n.AttrFloat("alpha", 0) != 0.25 || n.AttrFloat("beta", 0) != 1 {
			t.Errorf("alpha %v beta %v", n.AttrFloat("alpha", 0), n.AttrFloat("beta", 0))
		}
	})
	t.Run("scale-only", func(t *testing.T) {
		b, a, w, _, y := linear(t)
		b.output(b.op("Mul", vs(b.scalar("s", 3), y)))
		g := b.run(MatMulBias)
		n := only(t, g, tlite.Key(tlite.MatMulBias))
		wantInputs(t, n, a, w)
		if n.AttrFloat("alpha", 0) != 3 {
			t.Errorf("alpha %v", n.AttrFloat("alpha", 0))
		}
	})
	t.Run("dividend-is-not-a-scale", func(t *testing.T) {
		// 4 / y is not a scaling of y.
		b, _, _, _, y := linear(t)
		b.output(b.op("Div", vs(b.scalar("s", 4), y)))
		g := b.run(MatMulBias)
		if has(g, tlite.Key(tlite.MatMulBias)) {
			t.Errorf("fused: %v", ops(g))
		}
	})
	t.Run("matrix-bias-stays", func(t *testing.T) {
		b := newBuilder(t)
		a := b.input("a", dtype.Float32, 2, 4)
		w := b.floats("w", []int64{4, 3}, make([]float32, 12)...)
		c := b.floats("c", []int64{2, 3}, make([]float32, 6)...)
		b.output(b.op("Add", vs(b.op("MatMul", vs(a, w)), c)))
		g := b.run(MatMulBias)
		if has(g, tlite.Key(tlite.MatMulBias)) {
			t.Errorf("a full-matrix addend is not a bias: %v", ops(g))
		}
	})
	t.Run("product-read-elsewhere", func(t *testing.T) {
		b, _, _, bias, y := linear(t)
		b.output(b.op("Add", vs(y, bias)), y)
		g := b.run(MatMulBias)
		if has(g, tlite.Key(tlite.MatMulBias)) || !has(g, "MatMul") {
			t.Errorf("the product is a graph output and must stay: %v", ops(g))
		}
	})
	t.Run("lone-matmul", func(t *testing.T) {
		b, _, _, _, y := linear(t)
		b.output(b.op("Relu", vs(y)))
		g := b.run(MatMulBias)
		if has(g, tlite.Key(tlite.MatMulBias)) {
			t.Errorf("fused a lone MatMul: %v", ops(g))
		}
	})
}

// attnInputs are Q, K, V as [B, S, H, D] graph inputs (the layout of a
// projection reshaped into heads) and an additive mask.
func attnInputs(b *builder) (q, k, v, mask *graph.Value) {
	q = b.input("q", dtype.Float32, "batch", "seq", 2, 8)
	k = b.input("k", dtype.Float32, "batch", "seq", 2, 8)
	v = b.input("v", dtype.Float32, "batch", "seq", 2, 8)
	mask = b.input("mask", dtype.Float32, "batch", 1, 1, "seq")
	return
}

// bertAttention is BERT's attention: K^T by one Transpose of [B, S, H, D],
// scale after the product, then the mask; the output goes back to
// [B, S, H, D].
func bertAttention(b *builder, maskAfterScale bool) (*graph.Value, *graph.Value) {
	q, k, v, mask := attnInputs(b)
	qt := b.op("Transpose", vs(q), aInts("perm", 0, 2, 1, 3))
	kt := b.op("Transpose", vs(k), aInts("perm", 0, 2, 3, 1))
	vt := b.op("Transpose", vs(v), aInts("perm", 0, 2, 1, 3))
	s := b.op("MatMul", vs(qt, kt))
	if maskAfterScale {
		s = b.op("Add", vs(b.op("Div", vs(s, b.scalar("c", float32(math.Sqrt(8))))), mask))
	} else {
		s = b.op("Div", vs(b.op("Add", vs(s, mask)), b.scalar("c", float32(math.Sqrt(8)))))
	}
	p := b.op("Softmax", vs(s), aInt("axis", -1))
	o := b.op("MatMul", vs(p, vt))
	out := b.op("Transpose", vs(o), aInts("perm", 0, 2, 1, 3))
	b.output(out)
	return s, out
}

func intsAttr(n *graph.Node, name string) []int64 {
	v, _ := n.AttrInts(name)
	return v
}

func eqInts(a []int64, b ...int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAttentionBERT(t *testing.T) {
	b := newBuilder(t)
	_, out := bertAttention(b, true)
	g := b.run(Attention)
	n := only(t, g, tlite.Key(tlite.Attention))
	wantInputs(t, n, g.Value("q"), g.Value("k"), g.Value("v"), g.Value("mask"))
	if len(g.Nodes) != 1 || n.Outputs[0] != out {
		t.Errorf("graph %v, output %v", ops(g), n.Outputs)
	}
	for name, want := range map[string][]int64{"q_perm": {0, 2, 1, 3}, "k_perm": {0, 2, 1, 3}, "v_perm": {0, 2, 1, 3}, "o_perm": {0, 2, 1, 3}} {
		if got := intsAttr(n, name); !eqInts(got, want...) {
			t.Errorf("%s %v; want %v", name, got, want)
		}
	}
	if s := n.AttrFloat("scale", 0); math.Abs(float64(s)-1/math.Sqrt(8)) > 1e-7 || n.AttrInt("causal", 0) != 0 {
		t.Errorf("scale %v causal %d", s, n.AttrInt("causal", 0))
	}
}

func TestAttentionNearMisses(t *testing.T) {
	t.Run("mask-scaled", func(t *testing.T) {
		// (S + mask) / c scales the mask too: not an additive mask.
		b := newBuilder(t)
		bertAttention(b, false)
		g := b.run(Attention)
		if has(g, tlite.Key(tlite.Attention)) {
			t.Errorf("fused: %v", ops(g))
		}
	})
	t.Run("softmax-axis-2", func(t *testing.T) {
		b := newBuilder(t)
		bertAttention(b, true)
		for _, n := range b.g.Nodes {
			if n.OpType == "Softmax" {
				n.SetAttr(aInt("axis", 2))
			}
		}
		g := b.run(Attention)
		if has(g, tlite.Key(tlite.Attention)) {
			t.Errorf("fused: %v", ops(g))
		}
	})
	t.Run("probabilities-read-elsewhere", func(t *testing.T) {
		b := newBuilder(t)
		bertAttention(b, true)
		for _, n := range b.g.Nodes {
			if n.OpType == "Softmax" {
				b.output(n.Outputs[0])
			}
		}
		g := b.run(Attention)
		if has(g, tlite.Key(tlite.Attention)) || !has(g, "Softmax") {
			t.Errorf("output_attentions-style graph fused: %v", ops(g))
		}
	})
	t.Run("head-dim-not-last", func(t *testing.T) {
		// Q read as [B, H, D, S] transposed: head_dim would not be
		// contiguous.
		b := newBuilder(t)
		q := b.input("q", dtype.Float32, 1, 2, 8, 5)
		k := b.input("k", dtype.Float32, 1, 2, 5, 8)
		qt := b.op("Transpose", vs(q), aInts("perm", 0, 1, 3, 2))
		s := b.op("MatMul", vs(qt, b.op("Transpose", vs(k), aInts("perm", 0, 1, 3, 2))))
		p := b.op("Softmax", vs(s), aInt("axis", -1))
		b.output(b.op("MatMul", vs(p, k)))
		g := b.run(Attention)
		if has(g, tlite.Key(tlite.Attention)) {
			t.Errorf("fused: %v", ops(g))
		}
	})
}

// gqaKV repeats a [1, 2, 5, 8] K or V to 4 heads the way the llama export
// does: Unsqueeze at axis, Expand, Reshape.
func gqaKV(b *builder, x *graph.Value, axis int64) *graph.Value {
	u := b.op("Unsqueeze", vs(x, b.ints("ax", axis)))
	// [1, 2, 1, 5, 8] or [1, 1, 2, 5, 8] both expand to this.
	e := b.op("Expand", vs(u, b.ints("eshape", 1, 2, 2, 5, 8)))
	return b.op("Reshape", vs(e, b.ints("rshape", 1, 4, 5, 8)))
}

func llamaAttention(b *builder, axis int64) (q, k, v, out *graph.Value) {
	q = b.input("q", dtype.Float32, 1, 4, 3, 8)
	k = b.input("k", dtype.Float32, 1, 2, 5, 8)
	v = b.input("v", dtype.Float32, 1, 2, 5, 8)
	mask := b.input("mask", dtype.Float32, 1, 1, 3, 5)
	kr, vr := gqaKV(b, k, axis), gqaKV(b, v, axis)
	s := b.op("MatMul", vs(q, b.op("Transpose", vs(kr), aInts("perm", 0, 1, 3, 2))))
	s = b.op("Add", vs(b.op("Div", vs(s, b.scalar("c", 4))), mask))
	p := b.op("Softmax", vs(s), aInt("axis", 3))
	out = b.op("MatMul", vs(p, vr))
	b.output(out)
	return
}

func TestAttentionGQA(t *testing.T) {
	b := newBuilder(t)
	q, k, v, out := llamaAttention(b, 2)
	g := b.run(Attention)
	n := only(t, g, tlite.Key(tlite.Attention))
	wantInputs(t, n, q, k, v, g.Value("mask"))
	if len(g.Nodes) != 1 || n.Outputs[0] != out || n.AttrInt("kv_heads", 0) != 2 || n.AttrFloat("scale", 0) != 0.25 {
		t.Errorf("graph %v, kv_heads %d, scale %v", ops(g), n.AttrInt("kv_heads", 0), n.AttrFloat("scale", 0))
	}
	for _, name := range []string{"q_perm", "k_perm", "v_perm", "o_perm"} {
		if got := intsAttr(n, name); !eqInts(got, 0, 1, 2, 3) {
			t.Errorf("%s %v", name, got)
		}
	}
	t.Run("heads-outer", func(t *testing.T) {
		// Unsqueeze at axis 1 repeats the whole head block (head h reads
		// K/V head h % 2): the kernel's h / group would be wrong, so the
		// repeated K/V are read as they are.
		b := newBuilder(t)
		q, k, _, _ := llamaAttention(b, 1)
		g := b.run(Attention)
		n := only(t, g, tlite.Key(tlite.Attention))
		if n.Inputs[0] != q || n.Inputs[1] == k || n.AttrInt("kv_heads", 0) != 4 {
			t.Errorf("inputs %v kv_heads %d", n.Inputs, n.AttrInt("kv_heads", 0))
		}
	})
}

// gpt2Attention builds GPT-2's causal attention over a KV cache: the
// condition is a slice [past:past+seq, :past+seq] of a lower-triangular
// constant, the masked score -FLT_MAX.
func gpt2Attention(b *builder, tri func(r, c int) bool, masked float32) *graph.Value {
	q := b.input("q", dtype.Float32, 1, 2, "seq", 8)
	kp := b.input("kpast", dtype.Float32, 1, 2, "past", 8)
	kn := b.input("knew", dtype.Float32, 1, 2, "seq", 8)
	k := b.op("Concat", vs(kp, kn), aInt("axis", 2))
	v := b.op("Concat", vs(kp, kn), aInt("axis", 2))
	kt := b.op("Transpose", vs(k), aInts("perm", 0, 1, 3, 2))
	s := b.op("Div", vs(b.op("MatMul", vs(q, kt)), b.scalar("c", 4)))
	const n = 16
	vals := make([]float32, n*n)
	for r := 0; r < n; r++ {
		for c := 0; c < n; c++ {
			if tri(r, c) {
				vals[r*n+c] = 1
			}
		}
	}
	bias := b.floats("bias", []int64{n, n}, vals...)
	gather := func(x *graph.Value, i int64) *graph.Value {
		return b.op("Gather", vs(b.op("Shape", vs(x)), b.ints("i", i)))
	}
	kl, ql := gather(k, 2), gather(q, 2)
	start := b.op("Sub", vs(kl, ql))
	rows := b.op("Slice", vs(bias, start, kl, b.ints("ax0", 0), b.ints("st", 1)))
	cond := b.op("Cast", vs(b.op("Slice", vs(rows, b.ints("zero", 0), kl, b.ints("ax1", 1), b.ints("st", 1)))), aInt("to", int64(dtype.Bool)))
	s = b.op("Where", vs(cond, s, b.scalar("m", masked)))
	p := b.op("Softmax", vs(s), aInt("axis", -1))
	out := b.op("MatMul", vs(p, v))
	b.output(out)
	return out
}

func TestAttentionCausal(t *testing.T) {
	lower := func(r, c int) bool { return c <= r }
	b := newBuilder(t)
	out := gpt2Attention(b, lower, -math.MaxFloat32)
	g := b.run(Attention)
	n := only(t, g, tlite.Key(tlite.Attention))
	if n.AttrInt("causal", 0) != 1 || len(n.Inputs) != 3 || n.Outputs[0] != out || n.AttrFloat("scale", 0) != 0.25 {
		t.Errorf("causal %d inputs %v scale %v", n.AttrInt("causal", 0), n.Inputs, n.AttrFloat("scale", 0))
	}
	if has(g, "Slice") || has(g, "Where") || has(g, "Softmax") {
		t.Errorf("the condition should be gone: %v", ops(g))
	}
	for _, tc := range []struct {
		name   string
		tri    func(r, c int) bool
		masked float32
	}{
		{"upper-triangular", func(r, c int) bool { return c >= r }, -math.MaxFloat32},
		{"band", func(r, c int) bool { return c <= r && c > r-4 }, -math.MaxFloat32},
		{"soft-mask-value", lower, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder(t)
			gpt2Attention(b, tc.tri, tc.masked)
			g := b.run(Attention)
			if has(g, tlite.Key(tlite.Attention)) {
				t.Errorf("fused: %v", ops(g))
			}
		})
	}
}
