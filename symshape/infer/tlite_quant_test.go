package infer

import (
	"fmt"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
	"github.com/tlite/tlite/graph/tlite"
)

// initU8 adds a uint8 initializer of n zero bytes (a packed weight's size;
// the rule reads only the size).
func (g *gb) initU8(name string, n int) *gb {
	g.inits = append(g.inits, graphtest.Init(graphtest.Tensor(name, dtype.Uint8, []int64{int64(n)}, make([]byte, n))))
	return g
}

// matMulQ adds a tlite.MatMulQ node with the given attributes.
func (g *gb) matMulQ(ins []string, out string, format string, group, k, n int64) *gb {
	g.node("MatMulQ", ins, []string{out}, aString("format", format), aInt("group", group), aInt("K", k), aInt("N", n))
	last := len(g.nodes) - 1
	g.nodes[last].Domain = tlite.Domain
	return g
}

// packedSize is a packed [k, n] weight's encoded size (quant.Header).
func packedSize(k, n, group int) int {
	a := func(x int) int { return (x + 63) &^ 63 }
	return a(a(64+k*n/2) + 8*n*(k/group))
}

func TestMatMulQRule(t *testing.T) {
	wq := packedSize(64, 40, 32)
	runCases(t, []ruleCase{
		{
			name: "batch dims pass through, the last becomes N",
			build: func() *gb {
				return newGB(17).in("x", f32, "batch", "seq", 64).out("y").
					initU8("w", wq).initF32("b", []int64{40}, zeros(40)...).
					matMulQ([]string{"x", "w", "b"}, "y", "e0m4", 32, 64, 40)
			},
			shape: map[string]string{"y": "[batch, seq, 40]"},
			class: map[string]Class{"y": Device},
			at: map[string]func(b map[string]int64) []int64{
				"y": func(b map[string]int64) []int64 { return []int64{b["batch"], b["seq"], 40} },
			},
			bindings: []map[string]int64{{"batch": 1, "seq": 1}, {"batch": 3, "seq": 17}},
			check: func(t *testing.T, m *graph.Model, r *Result) {
				if y := m.Graph.Value("y"); y.Type != dtype.Float32 {
					t.Errorf("y is %v, want A's float32", y.Type)
				}
			},
		},
		{
			name: "a 1-D A and a symbolic K unified with the attribute",
			build: func() *gb {
				return newGB(17).in("x", f32, "k").out("y").initU8("w", wq).
					matMulQ([]string{"x", "w"}, "y", "int4", 32, 64, 40)
			},
			shape: map[string]string{"y": "[40]"},
			eqs:   []string{"k = 64"},
		},
		{
			name: "A's K disagrees",
			build: func() *gb {
				return newGB(17).in("x", f32, 2, 48).out("y").initU8("w", wq).
					matMulQ([]string{"x", "w"}, "y", "e0m4", 32, 64, 40)
			},
			err: "does not end in K = 64",
		},
		{
			name: "the weight is not uint8",
			build: func() *gb {
				return newGB(17).in("x", f32, 2, 64).out("y").initF32("w", []int64{64, 40}, zeros(64*40)...).
					matMulQ([]string{"x", "w"}, "y", "e0m4", 32, 64, 40)
			},
			err: "want uint8",
		},
		{
			name: "the weight is too small for [K, N]",
			build: func() *gb {
				return newGB(17).in("x", f32, 2, 64).out("y").initU8("w", 100).
					matMulQ([]string{"x", "w"}, "y", "e0m4", 32, 64, 40)
			},
			err: "too few",
		},
		{
			name: "a bias of the wrong length",
			build: func() *gb {
				return newGB(17).in("x", f32, 2, 64).out("y").initU8("w", wq).initF32("b", []int64{41}, zeros(41)...).
					matMulQ([]string{"x", "w", "b"}, "y", "e0m4", 32, 64, 40)
			},
			err: "want [40]",
		},
		{
			name: "a group that does not divide K",
			build: func() *gb {
				return newGB(17).in("x", f32, 2, 64).out("y").initU8("w", wq).
					matMulQ([]string{"x", "w"}, "y", "e0m4", 128, 64, 40)
			},
			err: "divides K = 64",
		},
		{
			name: "an unknown format",
			build: func() *gb {
				return newGB(17).in("x", f32, 2, 64).out("y").initU8("w", wq).
					matMulQ([]string{"x", "w"}, "y", "nf4", 32, 64, 40)
			},
			err: fmt.Sprintf("format = %q", "nf4"),
		},
	})
}
