package infer

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
)

// sweep binds one symbol to each of vals (and any fixed others).
func sweep(sym string, vals []int64, others map[string]int64) []map[string]int64 {
	var out []map[string]int64
	for _, v := range vals {
		b := map[string]int64{sym: v}
		for k, x := range others {
			b[k] = x
		}
		out = append(out, b)
	}
	return out
}

func span(lo, hi int64) []int64 {
	var out []int64
	for v := lo; v <= hi; v++ {
		out = append(out, v)
	}
	return out
}

// floorDiv and ceilDiv for expected values, written independently of the
// algebra (Go's / truncates).
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

func TestElementwiseContents(t *testing.T) {
	runCases(t, []ruleCase{
		{
			name: "torch expand(-1) pattern folds to a shape",
			build: func() *gb {
				return newGB(13).in("x", f32, "batch", 1, "seq").out("y").
					initI64("t", []int64{3}, -1, 4, -1).initI64("m1", nil, -1).initI64("three", []int64{1}, 3).
					node("Equal", []string{"t", "m1"}, []string{"eq"}).
					node("ConstantOfShape", []string{"three"}, []string{"ones"}, aTensor("value", tensorI64("v", []int64{1}, 1))).
					node("Where", []string{"eq", "ones", "t"}, []string{"w"}).
					node("Expand", []string{"x", "w"}, []string{"y"})
			},
			shape: map[string]string{"eq": "[3]", "w": "[3]", "y": "[batch, 4, seq]"},
			elems: map[string]string{"eq": "[1, 0, 1]", "ones": "[1, 1, 1]", "w": "[1, 4, 1]"},
			class: map[string]Class{"eq": Folded, "ones": Folded, "w": Folded, "y": Device},
		},
		{
			name: "comparisons of symbols: decided folds, undecided runs on the host",
			build: func() *gb {
				return newGB(13).in("x", f32, "n", "m").out("y").
					initI64("i0", []int64{1}, 0).initI64("i1", []int64{1}, 1).initI64("m1", []int64{1}, -1).
					node("Shape", []string{"x"}, []string{"s"}).
					node("Gather", []string{"s", "i0"}, []string{"n1"}).
					node("Gather", []string{"s", "i1"}, []string{"m1v"}).
					node("Equal", []string{"n1", "m1"}, []string{"isneg"}).
					node("Equal", []string{"n1", "m1v"}, []string{"same"}).
					node("Add", []string{"n1", "i1"}, []string{"np1"}).
					node("Less", []string{"n1", "np1"}, []string{"lt"}).
					node("Where", []string{"same", "n1", "m1v"}, []string{"sel"}).
					node("Relu", []string{"x"}, []string{"y"})
			},
			elems: map[string]string{"isneg": "[0]", "same": "<none>", "lt": "[1]", "sel": "<none>"},
			class: map[string]Class{"isneg": Folded, "same": HostRuntime, "lt": Folded, "sel": HostRuntime, "y": Device},
			check: func(t *testing.T, m *graph.Model, r *Result) {
				rem := r.Remaining()
				if len(rem) != 2 || rem[0].OpType != "Equal" || rem[1].OpType != "Where" {
					t.Errorf("Remaining = %v, want the undecided Equal and the Where reading it", rem)
				}
			},
		},
		{
			name: "integer division truncates toward zero",
			build: func() *gb {
				return newGB(13).in("x", f32, "seq").out("y").
					initI64("a", []int64{4}, -7, 7, -7, 7).initI64("b", []int64{4}, 2, 2, -2, -2).
					initI64("two", []int64{1}, 2).initI64("zero", []int64{1}, 0).
					node("Div", []string{"a", "b"}, []string{"q"}).
					node("Shape", []string{"x"}, []string{"s"}).
					node("Div", []string{"s", "two"}, []string{"half"}).
					node("Sub", []string{"zero", "s"}, []string{"negs"}).
					node("Div", []string{"negs", "two"}, []string{"neghalf"}).
					node("Mod", []string{"a", "b"}, []string{"r"}).
					node("Relu", []string{"x"}, []string{"y"})
			},
			elems: map[string]string{"q": "[-3, 3, 3, -3]", "half": "[seq/2]", "r": "[1, 1, -1, -1]"},
			check: func(t *testing.T, m *graph.Model, r *Result) {
				v := m.Graph.Value("neghalf")
				if v.Elems == nil {
					t.Fatalf("neghalf not folded")
				}
				for seq := int64(0); seq < 9; seq++ {
					got, err := v.Elems[0].Eval(map[string]int64{"seq": seq})
					if err != nil || got != -seq/2 {
						t.Errorf("(-seq)/2 at seq=%d = %d (%v), want %d", seq, got, err, -seq/2)
					}
				}
			},
		},
		{
			name: "shape arithmetic through float casts",
			build: func() *gb {
				return newGB(13).in("x", f32, "batch", "seq").out("y").
					initI64("i1", []int64{1}, 1).initI64("two", []int64{1}, 2).initF32("twof", []int64{1}, 2).
					node("Shape", []string{"x"}, []string{"s"}).
					node("Gather", []string{"s", "i1"}, []string{"seqv"}).
					node("Mul", []string{"seqv", "two"}, []string{"dbl"}).
					node("Cast", []string{"dbl"}, []string{"dblf"}, aInt("to", int64(dtype.Float32))).
					node("Div", []string{"dblf", "twof"}, []string{"back"}).
					node("Floor", []string{"back"}, []string{"fl"}).
					node("Cast", []string{"fl"}, []string{"seq2"}, aInt("to", int64(dtype.Int64))).
					node("Cast", []string{"seqv"}, []string{"seqf"}, aInt("to", int64(dtype.Float32))).
					node("Div", []string{"seqf", "twof"}, []string{"notint"}).
					node("Relu", []string{"x"}, []string{"y"})
			},
			elems: map[string]string{"dblf": "[2*seq]", "back": "[seq]", "seq2": "[seq]", "notint": "<none>"},
			class: map[string]Class{"seq2": Folded, "notint": HostRuntime},
		},
		{
			name: "range with symbolic limit and constant range contents",
			build: func() *gb {
				return newGB(13).in("x", f32, "seq").out("y").
					initI64("zero", nil, 0).initI64("two", nil, 2).initI64("one", nil, 1).initI64("three", nil, 3).
					initI64("five", nil, 5).initI64("m2", nil, -2).
					node("Shape", []string{"x"}, []string{"s"}).
					node("Squeeze", []string{"s"}, []string{"seqv"}).
					node("Range", []string{"zero", "seqv", "one"}, []string{"r1"}).
					node("Range", []string{"two", "seqv", "three"}, []string{"r2"}).
					node("Range", []string{"zero", "five", "two"}, []string{"r3"}).
					node("Range", []string{"five", "zero", "m2"}, []string{"r4"}).
					node("Relu", []string{"x"}, []string{"y"})
			},
			shape: map[string]string{"seqv": "[]", "r1": "[seq]", "r3": "[3]", "r4": "[3]"},
			elems: map[string]string{"seqv": "[seq]", "r3": "[0, 2, 4]", "r4": "[5, 3, 1]", "r1": "<none>"},
			class: map[string]Class{"r1": Device, "r3": Folded},
			at: map[string]func(map[string]int64) []int64{
				"r2": func(b map[string]int64) []int64 { return []int64{max(ceilDiv(b["seq"]-2, 3), 0)} },
			},
			bindings: sweep("seq", span(0, 10), nil),
		},
		{
			name: "cast to bool and logic",
			build: func() *gb {
				return newGB(13).in("x", f32, "n").out("y").
					initI64("v", []int64{3}, 0, 5, -1).initI64("one", []int64{1}, 1).
					node("Cast", []string{"v"}, []string{"b"}, aInt("to", int64(dtype.Bool))).
					node("Not", []string{"b"}, []string{"nb"}).
					node("Cast", []string{"one"}, []string{"tb"}, aInt("to", int64(dtype.Bool))).
					node("And", []string{"b", "tb"}, []string{"and"}).
					node("Or", []string{"nb", "b"}, []string{"or"}).
					node("Relu", []string{"x"}, []string{"y"})
			},
			elems: map[string]string{"b": "[0, 1, 1]", "nb": "[1, 0, 0]", "and": "[0, 1, 1]", "or": "[1, 1, 1]"},
		},
	})
}

func TestMovementRules(t *testing.T) {
	runCases(t, []ruleCase{
		{
			name: "gather contents with negative indices",
			build: func() *gb {
				return newGB(13).in("x", f32, "a", "b", "c").out("y").
					initI64("idx", []int64{2}, -1, 0).
					node("Shape", []string{"x"}, []string{"s"}).
					node("Gather", []string{"s", "idx"}, []string{"g"}).
					node("Relu", []string{"x"}, []string{"y"})
			},
			elems: map[string]string{"g": "[c, a]"},
		},
		{
			name: "gather of an embedding table",
			build: func() *gb {
				return newGB(13).in("ids", i64, "batch", "seq").out("y").
					initF32("emb", []int64{10, 4}, zeros(40)...).
					node("Gather", []string{"emb", "ids"}, []string{"y"})
			},
			shape: map[string]string{"y": "[batch, seq, 4]"},
		},
		{
			name: "concat unifies non-axis dims",
			build: func() *gb {
				return newGB(13).in("a", f32, "n", 4).in("b", f32, "m", 4).out("y").
					node("Concat", []string{"a", "b"}, []string{"y"}, aInt("axis", 1))
			},
			shape: map[string]string{"y": "[n, 8]", "b": "[n, 4]"},
			eqs:   []string{"m = n"},
		},
		{
			name: "split: equal, explicit input, num_outputs",
			build: func() *gb {
				return newGB(18).in("x", f32, "batch", "seq", 192).in("z", f32, 10).out("y").
					initI64("sp", []int64{2}, 3, 7).
					node("Split", []string{"x"}, []string{"q", "k", "v"}, aInt("axis", -1), aInt("num_outputs", 3)).
					node("Split", []string{"z", "sp"}, []string{"z1", "z2"}).
					node("Split", []string{"z"}, []string{"w1", "w2", "w3"}, aInt("num_outputs", 3)).
					node("Relu", []string{"q"}, []string{"y"})
			},
			shape: map[string]string{"q": "[batch, seq, 64]", "v": "[batch, seq, 64]", "z1": "[3]", "z2": "[7]", "w1": "[4]", "w2": "[4]", "w3": "[2]"},
		},
		{
			name: "split of a shape vector keeps contents (opset 11 attribute)",
			build: func() *gb {
				return newGB(11).in("x", f32, "a", "b", "c").out("y").
					node("Shape", []string{"x"}, []string{"s"}).
					node("Split", []string{"s"}, []string{"s1", "s2"}, aInts("split", 1, 2)).
					node("Relu", []string{"x"}, []string{"y"})
			},
			elems: map[string]string{"s1": "[a]", "s2": "[b, c]"},
		},
		{
			name: "transpose, tile, pad",
			build: func() *gb {
				return newGB(13).in("x", f32, "n", 3, "m").out("y").
					initI64("rep", []int64{3}, 1, 2, 3).initI64("pads", []int64{6}, 0, 1, 2, 0, 3, 4).
					node("Transpose", []string{"x"}, []string{"t"}, aInts("perm", 2, 0, 1)).
					node("Transpose", []string{"x"}, []string{"tr"}).
					node("Tile", []string{"x", "rep"}, []string{"ti"}).
					node("Pad", []string{"x", "pads"}, []string{"y"})
			},
			shape: map[string]string{"t": "[m, n, 3]", "tr": "[m, 3, n]", "ti": "[n, 6, 3*m]", "y": "[n, 7, m + 6]"},
		},
		{
			name: "pad with attribute (opset 2)",
			build: func() *gb {
				return newGB(2).in("x", f32, 2, 3).out("y").
					node("Pad", []string{"x"}, []string{"y"}, aInts("pads", 1, 0, 1, 2))
			},
			shape: map[string]string{"y": "[4, 5]"},
		},
		{
			name: "gather elements, gather nd, scatter nd",
			build: func() *gb {
				return newGB(13).in("d", f32, "a", "b", "c").in("i", i64, "a", "k", "c").in("ind", i64, "n", 2).
					in("upd", f32, "n", "c").out("y").
					node("GatherElements", []string{"d", "i"}, []string{"ge"}, aInt("axis", 1)).
					node("GatherND", []string{"d", "ind"}, []string{"gn"}).
					node("ScatterND", []string{"d", "ind", "upd"}, []string{"y"})
			},
			shape: map[string]string{"ge": "[a, k, c]", "gn": "[n, c]", "y": "[a, b, c]"},
		},
		{
			name: "nonzero and runtime topk make recorded fresh symbols",
			build: func() *gb {
				return newGB(13).in("x", f32, "n", 5).in("k", i64, 1).out("y").
					initI64("three", []int64{1}, 3).
					node("NonZero", []string{"x"}, []string{"nz"}).
					node("TopK", []string{"x", "three"}, []string{"tv", "ti"}).
					node("TopK", []string{"x", "k"}, []string{"y", "yi"})
			},
			shape: map[string]string{"nz": "[2, nz_1]", "tv": "[n, 3]", "ti": "[n, 3]", "y": "[n, y_1]"},
			check: func(t *testing.T, m *graph.Model, r *Result) {
				if len(r.Fresh) != 2 || r.Fresh[0].Node != "NonZero_1" || r.Fresh[1].Node != "TopK_3" {
					t.Errorf("Fresh = %+v, want nz_1 from NonZero_1 and y_1 from TopK_3", r.Fresh)
				}
				if m.Graph.Value("ti").Type != dtype.Int64 {
					t.Errorf("TopK indices type = %v", m.Graph.Value("ti").Type)
				}
			},
		},
		{
			name: "depth to space and one hot",
			build: func() *gb {
				return newGB(13).in("x", f32, "n", 8, "h", "w").in("ind", i64, "n", 3).out("y").
					initI64("depth", nil, 10).initF32("vals", []int64{2}, 0, 1).
					node("DepthToSpace", []string{"x"}, []string{"d2s"}, aInt("blocksize", 2)).
					node("OneHot", []string{"ind", "depth", "vals"}, []string{"y"}, aInt("axis", 1))
			},
			shape: map[string]string{"d2s": "[n, 2, 2*h, 2*w]", "y": "[n, 10, 3]"},
		},
	})
}

func TestContractionRules(t *testing.T) {
	runCases(t, []ruleCase{
		{
			name: "gemm with transposes and bias",
			build: func() *gb {
				return newGB(13).in("a", f32, "k", "m").in("b", f32, "n", "k").in("c", f32, "n").out("y").
					node("Gemm", []string{"a", "b", "c"}, []string{"y"}, aInt("transA", 1), aInt("transB", 1))
			},
			shape: map[string]string{"y": "[m, n]"},
		},
		{
			name: "einsum explicit, implicit and ellipsis",
			build: func() *gb {
				return newGB(13).in("q", f32, "b", "h", "s", 16).in("k", f32, "b", "h", "t", 16).
					in("x", f32, 3, 5).in("w", f32, 5, 7).in("e", f32, "b", 2, 3).out("y").
					node("Einsum", []string{"q", "k"}, []string{"qk"}, aString("equation", "bhqd,bhkd->bhqk")).
					node("Einsum", []string{"x", "w"}, []string{"xw"}, aString("equation", "ij,jk")).
					node("Einsum", []string{"e", "x"}, []string{"y"}, aString("equation", "...ij,jk->...ik"))
			},
			shape: map[string]string{"qk": "[b, h, s, t]", "xw": "[3, 7]", "y": "[b, 2, 5]"},
		},
		{
			name: "einsum letter mismatch",
			build: func() *gb {
				return newGB(13).in("x", f32, 3, 5).in("w", f32, 4, 7).out("y").
					node("Einsum", []string{"x", "w"}, []string{"y"}, aString("equation", "ij,jk->ik"))
			},
			err: "letter j: 5 vs 4",
		},
	})
}

func TestConvPoolRules(t *testing.T) {
	hw := []map[string]int64{}
	for h := int64(5); h <= 12; h++ {
		hw = append(hw, map[string]int64{"N": 2, "H": h, "W": h + 3})
	}
	runCases(t, []ruleCase{
		{
			name: "conv strides, pads, dilations, auto_pad",
			build: func() *gb {
				return newGB(13).in("x", f32, "N", 3, "H", "W").out("y").
					initF32("w", []int64{8, 3, 3, 3}, zeros(8*27)...).
					node("Conv", []string{"x", "w"}, []string{"c1"}, aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1)).
					node("Conv", []string{"x", "w"}, []string{"c2"}, aString("auto_pad", "SAME_UPPER"), aInts("strides", 2, 3)).
					node("Conv", []string{"x", "w"}, []string{"c3"}, aInts("dilations", 2, 1)).
					node("Conv", []string{"x", "w"}, []string{"y"}, aString("auto_pad", "VALID"), aInts("strides", 2, 2))
			},
			at: map[string]func(map[string]int64) []int64{
				"c1": func(b map[string]int64) []int64 {
					return []int64{b["N"], 8, floorDiv(b["H"]+2-3, 2) + 1, floorDiv(b["W"]+2-3, 2) + 1}
				},
				"c2": func(b map[string]int64) []int64 { return []int64{b["N"], 8, ceilDiv(b["H"], 2), ceilDiv(b["W"], 3)} },
				"c3": func(b map[string]int64) []int64 { return []int64{b["N"], 8, b["H"] - 4, b["W"] - 2} },
				"y": func(b map[string]int64) []int64 {
					return []int64{b["N"], 8, ceilDiv(b["H"]-2, 2), ceilDiv(b["W"]-2, 2)}
				},
			},
			bindings: hw,
		},
		{
			name: "grouped conv and channel mismatch",
			build: func() *gb {
				return newGB(13).in("x", f32, 1, 8, 5, 5).out("y").
					initF32("w", []int64{8, 1, 3, 3}, zeros(72)...).
					node("Conv", []string{"x", "w"}, []string{"y"}, aInt("group", 4))
			},
			err: "channels against weight [8, 1, 3, 3] with group 4: 8 vs 4",
		},
		{
			name: "max pool ceil mode drops a window starting in the padding",
			build: func() *gb {
				return newGB(13).in("x", f32, 1, 1, 5, 6).out("y").
					node("MaxPool", []string{"x"}, []string{"p1"}, aInts("kernel_shape", 2, 3), aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1), aInt("ceil_mode", 1)).
					node("MaxPool", []string{"x"}, []string{"p2", "idx"}, aInts("kernel_shape", 2, 2), aInts("strides", 2, 2)).
					node("AveragePool", []string{"x"}, []string{"y"}, aInts("kernel_shape", 3, 3), aString("auto_pad", "SAME_LOWER"), aInts("strides", 2, 2))
			},
			// H: ceil((5+2-2)/2)+1 = 4, last start 6 >= 5+1: 3. W: ceil((6+2-3)/2)+1 = 4, 6 >= 7 no: 4.
			shape: map[string]string{"p1": "[1, 1, 3, 4]", "p2": "[1, 1, 2, 3]", "idx": "[1, 1, 2, 3]", "y": "[1, 1, 3, 3]"},
		},
		{
			name: "global pool, batch norm, layer norm stats",
			build: func() *gb {
				return newGB(17).in("x", f32, "N", 4, "H", "W").in("s", f32, "b", "t", 64).out("y").
					initF32("g", []int64{4}, zeros(4)...).initF32("ln", []int64{64}, zeros(64)...).
					node("BatchNormalization", []string{"x", "g", "g", "g", "g"}, []string{"bn"}).
					node("GlobalAveragePool", []string{"bn"}, []string{"gp"}).
					node("LayerNormalization", []string{"s", "ln", "ln"}, []string{"y", "mean", "inv"}, aInt("axis", -1))
			},
			shape: map[string]string{"bn": "[N, 4, H, W]", "gp": "[N, 4, 1, 1]", "y": "[b, t, 64]", "mean": "[b, t, 1]", "inv": "[b, t, 1]"},
		},
		{
			name: "conv transpose",
			build: func() *gb {
				return newGB(13).in("x", f32, 1, 4, "H", 3).out("y").
					initF32("w", []int64{4, 2, 3, 3}, zeros(72)...).
					node("ConvTranspose", []string{"x", "w"}, []string{"y"}, aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1), aInts("output_padding", 1, 0))
			},
			at: map[string]func(map[string]int64) []int64{
				// s*(d-1) + output_padding + k - pads
				"y": func(b map[string]int64) []int64 { return []int64{1, 2, 2*(b["H"]-1) + 1 + 3 - 2, 2*2 + 0 + 3 - 2} },
			},
			bindings: sweep("H", span(1, 6), nil),
		},
	})
}

func TestReduceAndResizeRules(t *testing.T) {
	runCases(t, []ruleCase{
		{
			name: "reductions: axes input (13), attribute (17), contents",
			build: func() *gb {
				return newGB(17).in("x", f32, "a", "b", "c").out("y").
					initI64("ax", []int64{1}, 1).
					node("ReduceSum", []string{"x", "ax"}, []string{"rs"}, aInt("keepdims", 0)).
					node("ReduceMean", []string{"x"}, []string{"rm"}, aInts("axes", -1)).
					node("ReduceMax", []string{"x"}, []string{"all"}, aInt("keepdims", 0)).
					node("ReduceSum", []string{"x"}, []string{"noop"}, aInt("noop_with_empty_axes", 1)).
					node("Shape", []string{"x"}, []string{"s"}).
					node("ReduceProd", []string{"s"}, []string{"numel"}, aInt("keepdims", 0)).
					node("ArgMax", []string{"x"}, []string{"y"}, aInt("axis", 1), aInt("keepdims", 0))
			},
			shape: map[string]string{"rs": "[a, c]", "rm": "[a, b, 1]", "all": "[]", "noop": "[a, b, c]", "numel": "[]", "y": "[a, c]"},
			elems: map[string]string{"numel": "[a*b*c]"},
		},
		{
			name: "resize by scales and sizes, upsample",
			build: func() *gb {
				return newGB(13).in("x", f32, "N", 3, "H", "W").out("y").
					initF32("sc", []int64{4}, 1, 1, 2, 0.5).initI64("sz", []int64{4}, 1, 3, 7, 9).
					node("Resize", []string{"x", "", "sc"}, []string{"r1"}).
					node("Resize", []string{"x", "", "", "sz"}, []string{"y"})
			},
			shape: map[string]string{"y": "[1, 3, 7, 9]"},
			at: map[string]func(map[string]int64) []int64{
				"r1": func(b map[string]int64) []int64 { return []int64{b["N"], 3, 2 * b["H"], b["W"] / 2} },
			},
			bindings: sweep("W", span(1, 9), map[string]int64{"N": 2, "H": 5}),
		},
	})
}

func TestControlFlow(t *testing.T) {
	branch := func(name, out string, dims ...any) *graph.Graph {
		g := newGB(13)
		g.name = name
		g.node("Constant", nil, []string{out}, aTensor("value", tensorF32("c", toInt64s(dims), zeros(int(prodAny(dims)))...)))
		g.outputs = append(g.outputs, valueInfo(out, dtype.Float32, true))
		return g.build()
	}
	runCases(t, []ruleCase{
		{
			name: "if with a constant condition takes its branch",
			build: func() *gb {
				return newGB(13).in("x", f32, "n").out("y").
					initI64("cond", nil, 0).
					node("If", []string{"cond"}, []string{"y"}, aGraph("then_branch", branch("t", "a", 2, 3)), aGraph("else_branch", branch("e", "b", 4)))
			},
			shape: map[string]string{"y": "[4]"},
		},
		{
			name: "if with a runtime condition merges branches",
			build: func() *gb {
				return newGB(13).in("x", f32, "n").in("cond", dtype.Bool).out("y").out("z").
					node("If", []string{"cond"}, []string{"y"}, aGraph("then_branch", branch("t", "a", 2, 3)), aGraph("else_branch", branch("e", "b", 2, 3))).
					node("If", []string{"cond"}, []string{"z"}, aGraph("then_branch", branch("t2", "c", 2, 3)), aGraph("else_branch", branch("e2", "d", 2, 5)))
			},
			shape: map[string]string{"y": "[2, 3]", "z": "[2, z_1]"},
			check: func(t *testing.T, m *graph.Model, r *Result) {
				if len(r.Fresh) != 1 || !strings.Contains(r.Fresh[0].Reason, "3 vs 5") {
					t.Errorf("Fresh = %+v, want one record of the differing branch dims", r.Fresh)
				}
			},
		},
		{
			name: "loop with a constant trip count stacks scan outputs",
			build: func() *gb {
				body := newGB(13)
				body.name = "body"
				body.in("i", i64).in("c", dtype.Bool).in("acc", f32, "n", 4).
					node("Identity", []string{"c"}, []string{"c_out"}).
					node("Add", []string{"acc", "acc"}, []string{"acc_out"}).
					node("ReduceSum", []string{"acc"}, []string{"row"}, aInt("keepdims", 0))
				body.outputs = append(body.outputs, valueInfo("c_out", dtype.Bool, true), valueInfo("acc_out", dtype.Float32, true), valueInfo("row", dtype.Float32, true))
				return newGB(13).in("x", f32, "n", 4).out("fin").out("rows").
					initI64("M", nil, 6).
					node("Loop", []string{"M", "", "x"}, []string{"fin", "rows"}, aGraph("body", body.build()))
			},
			shape: map[string]string{"fin": "[n, 4]", "rows": "[6]"},
		},
	})
}

func toInt64s(d []any) []int64 {
	out := make([]int64, len(d))
	for i, x := range d {
		out[i] = int64(x.(int))
	}
	return out
}

func prodAny(d []any) int64 {
	p := int64(1)
	for _, x := range d {
		p *= int64(x.(int))
	}
	return p
}

func TestInputsAndErrors(t *testing.T) {
	runCases(t, []ruleCase{
		{
			name: "unnamed input axes get fresh symbols",
			build: func() *gb {
				return newGB(13).in("x", f32, nil, 4).out("y").
					node("Relu", []string{"x"}, []string{"y"})
			},
			shape: map[string]string{"y": "[x_0, 4]"},
			check: func(t *testing.T, m *graph.Model, r *Result) {
				if len(r.Fresh) != 1 || r.Fresh[0].Sym != "x_0" || r.Fresh[0].Node != "" {
					t.Errorf("Fresh = %+v", r.Fresh)
				}
			},
		},
		{
			name: "fixed symbols and names that are not identifiers",
			build: func() *gb {
				return newGB(13).in("x", f32, nil, "batch size", "seq").out("y").
					node("Relu", []string{"x"}, []string{"y"})
			},
			opts:  Options{Fixed: map[string]int64{"x_0": 5, "seq": 3}},
			shape: map[string]string{"y": "[5, batch_size, 3]"},
			check: func(t *testing.T, m *graph.Model, r *Result) {
				if r.SymbolNames["batch_size"] != "batch size" || len(r.Fresh) != 0 {
					t.Errorf("SymbolNames = %v, Fresh = %v", r.SymbolNames, r.Fresh)
				}
			},
		},
		{
			name: "dim_param written as an expression",
			build: func() *gb {
				return newGB(13).in("a", f32, "past + 1").in("b", f32, "past").out("y").
					initI64("one", []int64{1}, 1).
					node("Concat", []string{"b", "one"}, []string{"bc"}, aInt("axis", 0)).
					node("Cast", []string{"bc"}, []string{"bcf"}, aInt("to", int64(dtype.Float32))).
					node("Add", []string{"a", "bcf"}, []string{"y"})
			},
			shape: map[string]string{"a": "[past + 1]", "y": "[past + 1]"},
		},
		{
			name: "declared output-only names are eliminated",
			build: func() *gb {
				return newGB(13).in("x", f32, "n", 4).out("y", "n", "width").
					node("Relu", []string{"x"}, []string{"y"})
			},
			eqs: []string{"width = 4"},
			check: func(t *testing.T, m *graph.Model, r *Result) {
				if len(r.Symbols) != 1 || r.Symbols[0] != "n" {
					t.Errorf("Symbols = %v, want [n]", r.Symbols)
				}
			},
		},
		{
			name: "an op without a rule names itself and the node",
			build: func() *gb {
				return newGB(13).in("x", f32, 2).out("y").
					node("FrobnicateTensor", []string{"x"}, []string{"y"})
			},
			err: "no shape rule for op FrobnicateTensor (node FrobnicateTensor_1)",
		},
	})
}

// TestPropertyRuleGraphs: for the symbolic hand-built graphs, the derived
// shapes evaluated at random bindings equal what the rules derive when the
// same bindings are fixed up front.
func TestPropertyRuleGraphs(t *testing.T) {
	graphs := map[string]func() *gb{
		"chain": func() *gb {
			return newGB(13).in("x", f32, "batch", "seq", 64).out("y").
				initI64("i0", nil, 0).initI64("i1", nil, 1).initI64("ax", []int64{1}, 0).
				initI64("four", []int64{1}, 4).initI64("m1", []int64{1}, -1).initI64("st", []int64{2}, -3, 1).
				initI64("en", []int64{2}, 9223372036854775807, -1).initI64("sax", []int64{2}, 1, 2).
				node("Shape", []string{"x"}, []string{"s"}).
				node("Gather", []string{"s", "i0"}, []string{"b"}).
				node("Gather", []string{"s", "i1"}, []string{"q"}).
				node("Unsqueeze", []string{"b", "ax"}, []string{"ub"}).
				node("Unsqueeze", []string{"q", "ax"}, []string{"uq"}).
				node("Concat", []string{"ub", "uq", "four", "m1"}, []string{"shp"}, aInt("axis", 0)).
				node("Reshape", []string{"x", "shp"}, []string{"r"}).
				node("Slice", []string{"x", "st", "en", "sax"}, []string{"sl"}).
				node("Transpose", []string{"r"}, []string{"y"}, aInts("perm", 0, 2, 1, 3))
		},
		"attention": func() *gb {
			return newGB(13).in("k_past", f32, "batch", 4, "past", 16).in("k_new", f32, "batch", 4, "seq", 16).
				in("q", f32, "batch", 4, "seq", 16).in("mask", f32, "batch", 1, 1, "total").out("scores").
				initI64("zero", []int64{1}, 0).initI64("two", []int64{1}, 2).initI64("three", []int64{1}, 3).
				node("Concat", []string{"k_past", "k_new"}, []string{"k"}, aInt("axis", 2)).
				node("Transpose", []string{"k"}, []string{"kt"}, aInts("perm", 0, 1, 3, 2)).
				node("MatMul", []string{"q", "kt"}, []string{"qk"}).
				node("Add", []string{"qk", "mask"}, []string{"sc"}).
				node("Shape", []string{"k"}, []string{"ks"}).
				node("Slice", []string{"ks", "two", "three"}, []string{"kl"}).
				node("Range", []string{"zero", "kl", "two"}, []string{"pos"}).
				node("Softmax", []string{"sc"}, []string{"scores"}, aInt("axis", -1))
		},
	}
	for name, build := range graphs {
		t.Run(name, func(t *testing.T) {
			b := build()
			load := func() *graph.Model { return b.model(t) }
			checkAgainstFixed(t, load, nil, newRand(7), 20)
		})
	}
}

func newRand(seed int64) *rand.Rand { return rand.New(rand.NewSource(seed)) }
