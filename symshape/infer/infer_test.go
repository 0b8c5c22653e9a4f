package infer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

const f32, i64 = dtype.Float32, dtype.Int64

// ruleCase is one hand-built graph with the shapes (and optionally the
// contents) some of its values must derive to, or the error it must fail with.
type ruleCase struct {
	name  string
	build func() *gb
	shape map[string]string // value -> fmtShape of its derived shape
	elems map[string]string // value -> fmtShape of its Elems
	class map[string]Class  // producing node of value -> class
	eqs   []string          // Equality strings that must be recorded (without the node)
	err   string            // substring of the expected error
	opts  Options
	// at checks shapes numerically: value -> expected dims as a function of
	// the symbols, evaluated at each binding in bindings.
	at       map[string]func(b map[string]int64) []int64
	bindings []map[string]int64
	check    func(t *testing.T, m *graph.Model, r *Result)
}

func runCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.build().model(t)
			r, err := Run(m, tc.opts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkAllShaped(t, m)
			for name, want := range tc.shape {
				v := m.Graph.Value(name)
				if v == nil {
					t.Fatalf("no value %q", name)
				}
				if got := symshape.FormatShape(v.Shape); got != want {
					t.Errorf("shape of %s = %s, want %s", name, got, want)
				}
			}
			for name, want := range tc.elems {
				v := m.Graph.Value(name)
				got := "<none>"
				if v.Elems != nil {
					got = symshape.FormatShape(v.Elems)
				}
				if got != want {
					t.Errorf("elems of %s = %s, want %s", name, got, want)
				}
			}
			for name, want := range tc.class {
				v := m.Graph.Value(name)
				if got := r.Class[v.Producer]; got != want {
					t.Errorf("class of %s's producer %s = %v, want %v", name, v.Producer.Name, got, want)
				}
			}
			for name, f := range tc.at {
				v := m.Graph.Value(name)
				if v == nil {
					t.Fatalf("no value %q", name)
				}
				if len(tc.bindings) == 0 {
					t.Fatalf("case has at-checks but no bindings")
				}
				for _, b := range tc.bindings {
					got, err := evalShape(v.Shape, b)
					if err != nil {
						t.Errorf("%s = %s at %v: %v", name, symshape.FormatShape(v.Shape), b, err)
						continue
					}
					if want := f(b); fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("%s = %s at %v is %v, want %v", name, symshape.FormatShape(v.Shape), b, got, want)
					}
				}
			}
			if tc.check != nil {
				tc.check(t, m, r)
			}
			for _, want := range tc.eqs {
				found := false
				for _, e := range r.Equalities {
					if e.Sym+" = "+e.Expr.String() == want {
						found = true
					}
				}
				if !found {
					t.Errorf("equality %q not recorded; have %v", want, r.Equalities)
				}
			}
		})
	}
}

// checkAllShaped asserts every value of the main graph has a shape.
func checkAllShaped(t *testing.T, m *graph.Model) {
	t.Helper()
	g := m.Graph
	for _, v := range append(append([]*graph.Value(nil), g.Inputs...), g.Initializers...) {
		if v.Shape == nil {
			t.Errorf("value %q has no shape", v.Name)
		}
	}
	for _, n := range g.Nodes {
		for _, v := range n.Outputs {
			if v != nil && v.Shape == nil {
				t.Errorf("output %q of %s has no shape", v.Name, n.Name)
			}
		}
	}
}

func TestShapeChainFoldsReshape(t *testing.T) {
	runCases(t, []ruleCase{{
		name: "Shape-Gather-Unsqueeze-Concat-Reshape",
		build: func() *gb {
			return newGB(13).in("x", f32, "batch", "seq", 64).out("y").
				initI64("i0", nil, 0).initI64("i1", nil, 1).initI64("ax", []int64{1}, 0).
				initI64("four", []int64{1}, 4).initI64("m1", []int64{1}, -1).
				node("Shape", []string{"x"}, []string{"s"}).
				node("Gather", []string{"s", "i0"}, []string{"b"}, aInt("axis", 0)).
				node("Gather", []string{"s", "i1"}, []string{"q"}, aInt("axis", 0)).
				node("Unsqueeze", []string{"b", "ax"}, []string{"ub"}).
				node("Unsqueeze", []string{"q", "ax"}, []string{"uq"}).
				node("Concat", []string{"ub", "uq", "four", "m1"}, []string{"shp"}, aInt("axis", 0)).
				node("Reshape", []string{"x", "shp"}, []string{"y"})
		},
		shape: map[string]string{"s": "[3]", "b": "[]", "ub": "[1]", "shp": "[4]", "y": "[batch, seq, 4, 16]"},
		elems: map[string]string{"s": "[batch, seq, 64]", "b": "[batch]", "shp": "[batch, seq, 4, -1]"},
		class: map[string]Class{"s": Folded, "b": Folded, "ub": Folded, "shp": Folded, "y": Device},
	}})
}

func TestReshapeRules(t *testing.T) {
	runCases(t, []ruleCase{
		{
			name: "minus one solved symbolically",
			build: func() *gb {
				return newGB(13).in("x", f32, "batch", "seq", 64).out("y").
					initI64("shp", []int64{3}, 0, -1, 16).
					node("Reshape", []string{"x", "shp"}, []string{"y"})
			},
			shape: map[string]string{"y": "[batch, 4*seq, 16]"},
		},
		{
			name: "minus one over symbolic leading dims",
			build: func() *gb {
				return newGB(13).in("x", f32, "batch", "seq", 4, 16).out("y").
					initI64("shp", []int64{2}, -1, 64).
					node("Reshape", []string{"x", "shp"}, []string{"y"})
			},
			shape: map[string]string{"y": "[batch*seq, 64]"},
		},
		{
			name: "constant mismatch",
			build: func() *gb {
				return newGB(13).in("x", f32, 2, 3).out("y").
					initI64("shp", []int64{2}, 4, -1).
					node("Reshape", []string{"x", "shp"}, []string{"y"})
			},
			err: "6 elements do not divide by 4",
		},
		{
			name: "flatten",
			build: func() *gb {
				return newGB(13).in("x", f32, "n", 3, 4, 5).out("y").
					node("Flatten", []string{"x"}, []string{"y"}, aInt("axis", 2))
			},
			shape: map[string]string{"y": "[3*n, 20]"},
		},
		{
			name: "squeeze and unsqueeze with axes inputs (opset 13)",
			build: func() *gb {
				return newGB(13).in("x", f32, "n", 1, 4).out("z").
					initI64("a1", []int64{1}, 1).initI64("a2", []int64{2}, 0, -1).
					node("Squeeze", []string{"x", "a1"}, []string{"y"}).
					node("Unsqueeze", []string{"y", "a2"}, []string{"z"})
			},
			shape: map[string]string{"y": "[n, 4]", "z": "[1, n, 4, 1]"},
		},
		{
			name: "squeeze and unsqueeze with axes attributes (opset 11)",
			build: func() *gb {
				return newGB(11).in("x", f32, "n", 1, 4).out("z").
					node("Squeeze", []string{"x"}, []string{"y"}, aInts("axes", 1)).
					node("Unsqueeze", []string{"y"}, []string{"z"}, aInts("axes", 0))
			},
			shape: map[string]string{"y": "[n, 4]", "z": "[1, n, 4]"},
		},
	})
}

func TestSliceRules(t *testing.T) {
	runCases(t, []ruleCase{
		{
			name: "symbolic end clamps with min",
			build: func() *gb {
				return newGB(13).in("x", f32, "batch", "seq").out("y").
					initF32("table", []int64{2048, 64}, zeros(2048*64)...).
					initI64("zero", []int64{1}, 0).initI64("one", []int64{1}, 1).initI64("two", []int64{1}, 2).
					node("Shape", []string{"x"}, []string{"s"}).
					node("Slice", []string{"s", "one", "two"}, []string{"seqv"}).
					node("Slice", []string{"table", "zero", "seqv", "zero"}, []string{"y"})
			},
			shape: map[string]string{"seqv": "[1]", "y": "[min(seq, 2048), 64]"},
			elems: map[string]string{"seqv": "[seq]"},
			class: map[string]Class{"seqv": Folded, "y": Device},
		},
		{
			name: "negative start and INT64_MAX end on a symbolic dim",
			build: func() *gb {
				return newGB(13).in("x", f32, "batch", "seq", 64).out("y").
					initI64("st", []int64{2}, -1, 32).initI64("en", []int64{2}, 9223372036854775807, 9223372036854775807).initI64("ax", []int64{2}, 1, 2).
					node("Slice", []string{"x", "st", "en", "ax"}, []string{"y"})
			},
			shape: map[string]string{"y": "[batch, min(seq, 1), 32]"},
		},
		{
			name: "steps and reverse",
			build: func() *gb {
				return newGB(13).in("x", f32, 10, 7).out("y").
					initI64("st", []int64{2}, 1, -1).initI64("en", []int64{2}, 8, -9223372036854775807).
					initI64("ax", []int64{2}, 0, 1).initI64("sp", []int64{2}, 3, -2).
					node("Slice", []string{"x", "st", "en", "ax", "sp"}, []string{"y"})
			},
			// rows 1,4,7 -> 3; cols 6,4,2,0 -> 4
			shape: map[string]string{"y": "[3, 4]"},
		},
		{
			name: "attribute form (opset 9) on a small tensor folds contents",
			build: func() *gb {
				return newGB(9).in("x", f32, "a", "b", "c", "d").out("y").
					node("Shape", []string{"x"}, []string{"s"}).
					node("Slice", []string{"s"}, []string{"y"}, aInts("starts", 1), aInts("ends", -1))
			},
			shape: map[string]string{"y": "[2]"},
			elems: map[string]string{"y": "[b, c]"},
		},
	})
}

func TestBroadcastUnification(t *testing.T) {
	runCases(t, []ruleCase{
		{
			name: "mask total unifies with past + seq",
			build: func() *gb {
				return newGB(13).in("k_past", f32, "batch", 4, "past", 16).in("k_new", f32, "batch", 4, "seq", 16).
					in("q", f32, "batch", 4, "seq", 16).in("mask", f32, "batch", 1, 1, "total").out("scores").
					node("Concat", []string{"k_past", "k_new"}, []string{"k"}, aInt("axis", 2)).
					node("Transpose", []string{"k"}, []string{"kt"}, aInts("perm", 0, 1, 3, 2)).
					node("MatMul", []string{"q", "kt"}, []string{"qk"}).
					node("Add", []string{"qk", "mask"}, []string{"scores"})
			},
			shape: map[string]string{"k": "[batch, 4, past + seq, 16]", "scores": "[batch, 4, seq, past + seq]", "mask": "[batch, 1, 1, past + seq]"},
			eqs:   []string{"total = past + seq"},
		},
		{
			name: "past solved the other way round still yields past + seq",
			build: func() *gb {
				// The graph asserts past = total - seq; "total" is eliminated
				// (named by one input, like seq, but mentioned later).
				return newGB(13).in("ids", i64, "batch", "seq").in("mask", i64, "batch", "total").
					in("pk", f32, "batch", 4, "past", 16).in("pv", f32, "batch", 4, "past", 16).out("y").
					initI64("zero", []int64{1}, 0).initI64("one", []int64{1}, 1).initI64("two", []int64{1}, 2).
					initI64("sixteen", []int64{1}, 16).
					node("Shape", []string{"mask"}, []string{"ms"}).
					node("Shape", []string{"ids"}, []string{"is"}).
					node("Sub", []string{"ms", "is"}, []string{"d"}).
					node("Slice", []string{"d", "one", "two"}, []string{"plen"}).
					node("Shape", []string{"pk"}, []string{"ks"}).
					node("Slice", []string{"ks", "zero", "two"}, []string{"bk"}).
					node("Concat", []string{"bk", "plen", "sixteen"}, []string{"zshape"}, aInt("axis", 0)).
					node("ConstantOfShape", []string{"zshape"}, []string{"z"}).
					node("Add", []string{"z", "pk"}, []string{"y"})
			},
			shape: map[string]string{"plen": "[1]", "z": "[batch, 4, past, 16]", "y": "[batch, 4, past, 16]", "mask": "[batch, past + seq]"},
			elems: map[string]string{"plen": "[past]", "d": "[0, past]"},
			eqs:   []string{"total = past + seq"},
		},
		{
			name: "constant mismatch names the dims",
			build: func() *gb {
				return newGB(13).in("a", f32, "n", 3).in("b", f32, "n", 4).out("y").
					node("Add", []string{"a", "b"}, []string{"y"})
			},
			err: "do not broadcast at axis 1: 3 vs 4",
		},
		{
			name: "matmul K mismatch",
			build: func() *gb {
				return newGB(13).in("a", f32, "batch", "seq", 64).out("y").
					initF32("w", []int64{32, 64}, zeros(32*64)...).
					node("MatMul", []string{"a", "w"}, []string{"y"})
			},
			err: "inputs [batch, seq, 64] and [32, 64] do not agree on K: 64 vs 32",
		},
		{
			name: "matmul batch broadcast and vectors",
			build: func() *gb {
				return newGB(13).in("a", f32, "b", 1, "m", "k").in("c", f32, 7, "k", "n").in("v", f32, "k").out("y").
					node("MatMul", []string{"a", "c"}, []string{"y"}).
					node("MatMul", []string{"a", "v"}, []string{"av"}).
					node("MatMul", []string{"v", "c"}, []string{"vc"})
			},
			shape: map[string]string{"y": "[b, 7, m, n]", "av": "[b, 1, m]", "vc": "[7, n]"},
		},
	})
}
