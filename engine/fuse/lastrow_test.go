package fuse

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape/infer"
)

// TestLastRowModels: after the fusion passes, the last-row rewrite finds
// the LM head of each decoder export (and moves the final norm behind the
// slice where the norm feeds only the head), makes the logits
// [batch, 1, vocab], and leaves an encoder alone. Numerical equality with
// the full run is checked in engine/generate (TestLastLogits).
func TestLastRowModels(t *testing.T) {
	for _, tc := range []struct {
		dir      string
		wantHead bool
		wantNorm bool
	}{
		{"models/llama", true, true},
		{"default", true, true},
		{"models/hf_llama", true, true},
		{"models/hf_qwen2", true, true},
		{"models/hf_gpt2", true, true},
		{"models/hf_neox", true, true},
		{"models/hf_bigcode_mqa", true, true},
		{"models/bert", false, false},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			m, err := graph.Load(filepath.Join("..", "..", "testdata", tc.dir, "model.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			res, err := infer.Run(m, infer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range Passes(Options{Elementwise: ew}) {
				if err := p(m.Graph, res); err != nil {
					t.Fatal(err)
				}
			}
			r, err := LastRow(m.Graph, res)
			if err != nil {
				t.Fatal(err)
			}
			if (r.Output != "") != tc.wantHead || (r.Norm != "") != tc.wantNorm {
				t.Fatalf("LastRow = %+v; want a head %v, a norm moved %v", r, tc.wantHead, tc.wantNorm)
			}
			if err := m.Graph.Validate(); err != nil {
				t.Fatal(err)
			}
			if !tc.wantHead {
				return
			}
			t.Logf("on one row: %v; sliced: %v", r.Nodes, r.Sliced)
			out := m.Graph.Value(r.Output)
			if k, ok := out.Shape[1].Const(); !ok || k != 1 {
				t.Fatalf("logits %s after the rewrite; want one row", out.Shape)
			}
			// A second application finds nothing left to do.
			if r2, err := LastRow(m.Graph, res); err != nil || r2.Output != "" {
				t.Fatalf("second LastRow = %+v, %v; want nothing done", r2, err)
			}
		})
	}
}

// TestLastRowOfRegion: the last row is pushed back through every node
// whose outputs only row-wise nodes read, and a value that something
// else reads in full is sliced rather than shrunk.
func TestLastRowOfRegion(t *testing.T) {
	b := newBuilder(t)
	x := b.input("x", dtype.Float32, "batch", "seq", 8)
	x2 := b.input("x2", dtype.Float32, "batch", "seq", 4)
	w1 := b.floats("w1", []int64{8, 8}, make([]float32, 64)...)
	w2 := b.floats("w2", []int64{8, 4}, make([]float32, 32)...)
	bias := b.floats("bias", []int64{8}, make([]float32, 8)...)
	h := b.op("MatMul", vs(x, w1))
	side := b.op("Sigmoid", vs(h)) // reads h in full: h stays full
	a := b.op("Add", vs(h, bias))  // a broadcast constant
	r := b.op("Relu", vs(a))
	p := b.op("MatMul", vs(r, w2))
	y := b.op("Add", vs(p, x2)) // a second input with rows, from outside
	b.output(y, side)
	g := b.infer()
	rr, err := LastRowOf(g, b.res, y.Name)
	if err != nil {
		t.Fatal(err)
	}
	checkGraph(t, g)
	want := []string{"/blk/Add_3", "/blk/Relu_4", "/blk/MatMul_5", "/blk/Add_6"}
	if rr.Output != y.Name || !slices.Equal(rr.Nodes, want) || rr.Head != "/blk/MatMul_5" {
		t.Fatalf("LastRowOf = %+v; want nodes %v, head /blk/MatMul_5", rr, want)
	}
	if !slices.Equal(rr.Sliced, []string{"matmul_1", "x2"}) {
		t.Fatalf("sliced %v; want [matmul_1 x2]", rr.Sliced)
	}
	for name, rows := range map[string]string{"add_6": "1", "relu_4": "1", "matmul_1": "seq", "sigmoid_2": "seq"} {
		v := g.Value(name)
		if got := v.Shape[1].String(); got != rows {
			t.Errorf("%s has shape %s; want %s rows", name, v.Shape, rows)
		}
	}
}

// TestLastRowOfFallback: an output whose producer does not compute row by
// row keeps every row, and the graph is left as it was.
func TestLastRowOfFallback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *builder, x *graph.Value) *graph.Value
		ok    bool // the control: a row-wise producer
	}{
		{"control: relu", func(b *builder, x *graph.Value) *graph.Value {
			return b.op("Relu", vs(x))
		}, true},
		{"transpose", func(b *builder, x *graph.Value) *graph.Value {
			return b.op("Transpose", vs(x), aInts("perm", 0, 2, 1))
		}, false},
		{"softmax over the rows", func(b *builder, x *graph.Value) *graph.Value {
			return b.op("Softmax", vs(x), aInt("axis", 1))
		}, false},
		{"product with an activation", func(b *builder, x *graph.Value) *graph.Value {
			xt := b.op("Transpose", vs(x), aInts("perm", 0, 2, 1))
			return b.op("MatMul", vs(x, xt))
		}, false},
		{"cumulative sum over the rows", func(b *builder, x *graph.Value) *graph.Value {
			return b.op("CumSum", vs(x, b.ints("axis", 1)))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder(t)
			x := b.input("x", dtype.Float32, "batch", "seq", 8)
			w := b.floats("w", []int64{8, 8}, make([]float32, 64)...)
			y := tc.build(b, b.op("MatMul", vs(x, w)))
			b.output(y)
			g := b.infer()
			before := ops(g)
			shape := fmt.Sprint(y.Shape)
			rr, err := LastRowOf(g, b.res, y.Name)
			if err != nil {
				t.Fatal(err)
			}
			if tc.ok {
				if rr.Output != y.Name || len(rr.Nodes) != 2 {
					t.Fatalf("LastRowOf = %+v; want the relu and the product on one row", rr)
				}
				return
			}
			if rr.Output != "" || !slices.Equal(ops(g), before) || fmt.Sprint(y.Shape) != shape {
				t.Fatalf("LastRowOf = %+v, ops %v, shape %v; want nothing done (ops %v, shape %s)", rr, ops(g), y.Shape, before, shape)
			}
		})
	}
	// Not an output at all: a clear error.
	b := newBuilder(t)
	x := b.input("x", dtype.Float32, "batch", "seq", 8)
	b.output(b.op("Relu", vs(x)))
	g := b.infer()
	if _, err := LastRowOf(g, b.res, "nope"); err == nil || !strings.Contains(err.Error(), `"nope" is not an output`) {
		t.Fatalf("LastRowOf(nope) = %v; want an error naming it", err)
	}
}
