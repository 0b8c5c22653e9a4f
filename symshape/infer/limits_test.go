package infer

import (
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// positionsGraph is GPT-2's learned positions: arange(past, past + seq)
// gathered from a 256-row table, and the token embedding gathered by
// input_ids from a 10-row table.
func positionsGraph() *gb {
	return newGB(17).
		in("input_ids", dtype.Int64, "batch", "seq").
		in("past_key", dtype.Float32, "batch", 2, "past", 4).
		initI64("one", nil, 1).initI64("i1", nil, 1).initI64("i2", nil, 2).initI64("ax0", []int64{1}, 0).
		initF32("wpe", []int64{256, 4}, zeros(1024)...).
		initF32("wte", []int64{10, 4}, zeros(40)...).
		node("Shape", []string{"past_key"}, []string{"ps"}).
		node("Gather", []string{"ps", "i2"}, []string{"past_len"}).
		node("Shape", []string{"input_ids"}, []string{"is"}).
		node("Gather", []string{"is", "i1"}, []string{"seq_len"}).
		node("Add", []string{"past_len", "seq_len"}, []string{"end"}).
		node("Range", []string{"past_len", "end", "one"}, []string{"pos"}).
		node("Unsqueeze", []string{"pos", "ax0"}, []string{"pos2"}).
		node("Gather", []string{"wpe", "pos2"}, []string{"pe"}).
		node("Gather", []string{"wte", "input_ids"}, []string{"te"}).
		node("Add", []string{"te", "pe"}, []string{"y"}).
		out("y")
}

func TestLimitFromGatherIntoPositionTable(t *testing.T) {
	_, r := positionsGraph().run(t, Options{})
	var got []string
	for _, l := range r.Limits {
		got = append(got, l.String())
	}
	if len(r.Limits) != 2 {
		t.Fatalf("limits %q, want past + seq <= 256 and input_ids <= 9", got)
	}
	if l := r.Limits[0]; l.Expr.String() != "past + seq" || l.Max != 256 || l.Input != "" || !strings.HasPrefix(l.Node, "Gather") {
		t.Errorf("first limit %v, want past + seq <= 256 from the wpe Gather", l)
	}
	if l := r.Limits[1]; l.Input != "input_ids" || l.Max != 9 {
		t.Errorf("second limit %v, want values of input_ids <= 9", l)
	}
	max, from, ok := r.ExprMax(symshape.MustParse("past + seq"))
	if !ok || max != 256 || from.Max != 256 {
		t.Errorf("ExprMax(past + seq) = %d, %v, %v; want 256", max, from, ok)
	}
	if max, _, ok := r.ExprMax(symshape.Sym("past")); !ok || max != 256 {
		t.Errorf("ExprMax(past) = %d, %v; want 256 (past <= past + seq)", max, ok)
	}
	if _, _, ok := r.ExprMax(symshape.Sym("batch")); ok {
		t.Errorf("batch has no limit")
	}
	if max, _, ok := r.InputLimit("input_ids"); !ok || max != 9 {
		t.Errorf("InputLimit(input_ids) = %d, %v; want 9", max, ok)
	}
	if err := r.Check(symshape.Binding{"batch": 1, "past": 249, "seq": 7}); err != nil {
		t.Errorf("past 249 + seq 7 = 256 is within the limit: %v", err)
	}
	err := r.Check(symshape.Binding{"batch": 1, "past": 250, "seq": 7})
	if err == nil || !strings.Contains(err.Error(), "257") || !strings.Contains(err.Error(), "256") {
		t.Errorf("past 250 + seq 7: error %v, want one naming 257 and the limit 256", err)
	}
	if err := r.Check(symshape.Binding{"batch": 1}); err != nil {
		t.Errorf("unbound symbols are skipped: %v", err)
	}
}

// A clamp that the derivation assumes does not bind becomes a limit: rows
// past..past+seq of a 256-row table added to a [seq, 4] tensor.
func TestLimitFromClampAssumption(t *testing.T) {
	g := newGB(17).
		in("x", dtype.Float32, "seq", 4).
		in("past_key", dtype.Float32, "past", 4).
		initF32("table", []int64{256, 4}, zeros(1024)...).
		initI64("i0", nil, 0).initI64("ax0", []int64{1}, 0).
		node("Shape", []string{"past_key"}, []string{"ps"}).
		node("Gather", []string{"ps", "i0"}, []string{"p"}).
		node("Shape", []string{"x"}, []string{"xs"}).
		node("Gather", []string{"xs", "i0"}, []string{"s"}).
		node("Add", []string{"p", "s"}, []string{"e"}).
		node("Unsqueeze", []string{"p", "ax0"}, []string{"starts"}).
		node("Unsqueeze", []string{"e", "ax0"}, []string{"ends"}).
		node("Slice", []string{"table", "starts", "ends", "ax0"}, []string{"rows"}).
		node("Add", []string{"rows", "x"}, []string{"y"}).
		out("y")
	_, r := g.run(t, Options{})
	if len(r.Assumptions) != 1 || !r.Assumptions[0].Limited {
		t.Fatalf("assumptions %v, want one, explained by its clamps", r.Assumptions)
	}
	if len(r.Limits) != 1 || r.Limits[0].Expr.String() != "past + seq" || r.Limits[0].Max != 256 {
		t.Fatalf("limits %v, want only past + seq <= 256 (past <= 256 is implied)", r.Limits)
	}
	if err := r.Check(symshape.Binding{"past": 300, "seq": 1}); err == nil {
		t.Errorf("past 300 passed the check")
	}
	// Within declared bounds the clamp cannot bind: nothing to assume.
	_, rb := g.run(t, Options{Bounds: symshape.Bounds{"past": {0, 100}, "seq": {1, 100}}})
	if len(rb.Limits) != 0 || len(rb.Assumptions) != 0 {
		t.Errorf("with bounds: limits %v, assumptions %v; want none", rb.Limits, rb.Assumptions)
	}
}

// A dynamic axis proved equal to a constant is a pin, reported with what it
// means, and checked.
func TestPinnedSymbol(t *testing.T) {
	g := newGB(17).
		in("x", dtype.Float32, "n").
		initF32("c", []int64{2}, 1, 2).
		node("Add", []string{"x", "c"}, []string{"y"}).
		out("y")
	_, r := g.run(t, Options{})
	if len(r.Pins) != 1 {
		t.Fatalf("pins %v, want n = 2", r.Pins)
	}
	p := r.Pins[0]
	if p.Sym != "n" || p.Max != 2 || p.Expr.String() != "2" || !strings.Contains(p.Meaning, "constant when the model was exported") ||
		!strings.Contains(p.Meaning, "repeat_interleave") {
		t.Errorf("pin %v", p)
	}
	if max, _, ok := r.ExprMax(symshape.Sym("n")); !ok || max != 2 {
		t.Errorf("ExprMax(n) = %d, %v; want 2", max, ok)
	}
	if err := r.Check(symshape.Binding{"n": 3}); err == nil || !strings.Contains(err.Error(), "must equal 2") {
		t.Errorf("n = 3: error %v, want the pin", err)
	}
	if err := r.Check(symshape.Binding{"n": 2}); err != nil {
		t.Errorf("n = 2: %v", err)
	}
}

// Hostile item 2: a Reshape whose element count cannot match is refused at
// derivation, not assumed; one that can match only at some sizes is an
// assumption Check enforces.
func TestReshapeElementCount(t *testing.T) {
	reshape := func(n int) *gb {
		return newGB(17).
			in("x", dtype.Float32, n).
			in("z", dtype.Float32, "batch").
			initI64("four", []int64{1}, 4).
			node("Shape", []string{"z"}, []string{"zs"}).
			node("Concat", []string{"four", "zs"}, []string{"shp"}, aInt("axis", 0)).
			node("Reshape", []string{"x", "shp"}, []string{"y"}).
			out("y")
	}
	_, err := Run(reshape(15).model(t), Options{})
	if err == nil || !strings.Contains(err.Error(), "no solution") {
		t.Errorf("15 elements into [4, batch]: error %v, want no solution", err)
	}
	_, r := reshape(12).run(t, Options{})
	if len(r.Assumptions) != 1 || r.Assumptions[0].Limited {
		t.Fatalf("12 elements into [4, batch]: assumptions %v, want 4*batch == 12", r.Assumptions)
	}
	if err := r.Check(symshape.Binding{"batch": 3}); err != nil {
		t.Errorf("batch 3: %v", err)
	}
	if err := r.Check(symshape.Binding{"batch": 2}); err == nil {
		t.Errorf("batch 2 gives 8 elements from 12 and passed the check")
	}
	// Shape(start=10) of a rank-2 tensor is empty: Reshape to a scalar
	// from 16 elements is an error, not a scalar.
	g := newGB(17).in("x", dtype.Float32, 4, 4).
		node("Shape", []string{"x"}, []string{"s"}, aInt("start", 10)).
		node("Reshape", []string{"x", "s"}, []string{"y"}).
		out("y")
	if _, err := Run(g.model(t), Options{}); err == nil || !strings.Contains(err.Error(), "element count") {
		t.Errorf("Shape(start=10) into Reshape: error %v", err)
	}
}

// Hostile item 1: sizes no device holds are refused with the node named;
// constants over the folding budget are not folded at load.
func TestHugeConstants(t *testing.T) {
	refused := []struct {
		name string
		g    *gb
	}{
		{"ConstantOfShape [2^62] (unused)", newGB(17).in("x", dtype.Float32, "n").
			initI64("s", []int64{1}, 1<<62).
			node("ConstantOfShape", []string{"s"}, []string{"big"}).
			node("Identity", []string{"x"}, []string{"y"}).out("y")},
		{"Range 0..2^40", newGB(17).in("x", dtype.Float32, "n").
			initI64("a", nil, 0).initI64("b", nil, 1<<40).initI64("d", nil, 1).
			node("Range", []string{"a", "b", "d"}, []string{"r"}).
			node("Identity", []string{"x"}, []string{"y"}).out("y")},
		{"Tile by 2^62", newGB(17).in("x", dtype.Float32, 3).
			initI64("reps", []int64{1}, 1<<62).
			node("Tile", []string{"x", "reps"}, []string{"y"}).out("y")},
		{"Expand [3] to [2, 4]", newGB(17).in("x", dtype.Float32, 3).
			initI64("shp", []int64{2}, 2, 4).
			node("Expand", []string{"x", "shp"}, []string{"y"}).out("y")},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(tc.g.model(t), Options{})
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "node ") {
				t.Errorf("error %q does not name the node", err)
			}
		})
	}
	cos := func(n int64) *gb {
		return newGB(17).in("x", dtype.Float32, "n").
			initI64("s", []int64{1}, n).
			node("ConstantOfShape", []string{"s"}, []string{"c"}).
			node("Add", []string{"c", "x"}, []string{"y"}).out("y")
	}
	for _, tc := range []struct {
		n      int64
		budget int64
		want   Class
	}{
		{1 << 33, 0, Device},    // 32 GiB of float32 zeros: over the default budget
		{2000, 0, ConstFold},    // 8000 bytes: folded
		{2000, 7999, Device},    // over an explicit budget
		{2000, 8000, ConstFold}, // exactly the budget
		{MaxElems, 0, Folded},   // small enough to track symbolically
		{MaxElems + 1, 0, ConstFold},
	} {
		m, r := cos(tc.n).run(t, Options{FoldBytes: tc.budget})
		n := m.Graph.Nodes[0]
		if got := r.Class[n]; got != tc.want {
			t.Errorf("ConstantOfShape [%d] with budget %d: class %v, want %v", tc.n, tc.budget, got, tc.want)
		}
	}
}
