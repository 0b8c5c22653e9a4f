package symshape

import "testing"

// llamaAttention derives the shapes of one LLaMA-7B attention block the
// way symbolic shape inference would: Reshape with an inferred -1
// dimension, Transpose, Concat with the KV cache, MatMul, Softmax and the
// reshape back, returning the expressions a later stage consumes.
func llamaAttention() (inferred, scoresBytes, back, kvLen, ropeLen Expr) {
	batch, seq, past := Sym("batch"), Sym("seq"), Sym("past")
	hidden, heads := Const(4096), Const(32)
	// q = x @ Wq : [batch, seq, 4096] -> Reshape [batch, seq, 32, -1]
	numel := Product(batch, seq, hidden)
	inferred = FloorDiv(numel, Product(batch, seq, heads))
	// Transpose -> [batch, 32, seq, 128]; K after Concat(past_k, k) on axis 2.
	kvLen = Add(past, seq)
	// Rotary tables sliced [past : past + seq] of a 2048 cache.
	ropeLen = Sub(Min(Add(past, seq), Const(2048)), Min(past, Const(2048)))
	// scores = q @ k^T : [batch, 32, seq, past + seq], fp32 bytes.
	scoresBytes = Product(batch, heads, seq, kvLen, Const(4))
	// out = softmax(scores) @ v : [batch, 32, seq, 128] -> Transpose ->
	// Reshape [batch, seq, -1]
	outNumel := Product(batch, heads, seq, inferred)
	back = FloorDiv(outNumel, Mul(batch, seq))
	return
}

func TestLlamaAttentionChain(t *testing.T) {
	inferred, scores, back, kvLen, rope := llamaAttention()
	if inferred.String() != "128" || back.String() != "4096" {
		t.Fatalf("inferred %q, back %q; want 128 and 4096", inferred, back)
	}
	if scores.String() != "128*batch*past*seq + 128*batch*seq*seq" {
		t.Fatalf("scores bytes %q", scores)
	}
	if Compare(kvLen, Sym("seq")) != GreaterEq {
		t.Fatalf("past + seq >= seq not proven")
	}
	bounds := Bounds{"batch": {1, 1}, "seq": {1, 2048}, "past": {0, 2047}}
	if v, ok := scores.MaxValue(bounds); !ok || v != 128*2048*(2047+2048) {
		t.Fatalf("max scores bytes %d %v", v, ok)
	}
	if v, err := rope.Eval(Binding{"past": 2040, "seq": 20}); err != nil || v != 8 {
		t.Fatalf("rope slice length %d, %v; want 8", v, err)
	}
}

func BenchmarkLlamaAttentionShapes(b *testing.B) {
	for b.Loop() {
		llamaAttention()
	}
}

func BenchmarkEval(b *testing.B) {
	_, scores, _, _, rope := llamaAttention()
	bind := Binding{"batch": 1, "seq": 17, "past": 300}
	for b.Loop() {
		if _, err := scores.Eval(bind); err != nil {
			b.Fatal(err)
		}
		if _, err := rope.Eval(bind); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompareIn(b *testing.B) {
	_, scores, _, _, _ := llamaAttention()
	other := MustParse("4*batch*seq*4096")
	bounds := Bounds{"seq": {1, 2048}, "past": {0, 2047}}
	for b.Loop() {
		CompareIn(scores, other, bounds)
	}
}

func BenchmarkParseString(b *testing.B) {
	e := MustParse("min(past + seq, 2048)*128 + (seq + 15)/16 - seq%heads")
	s := e.String()
	for b.Loop() {
		if _, err := Parse(s); err != nil {
			b.Fatal(err)
		}
	}
}
