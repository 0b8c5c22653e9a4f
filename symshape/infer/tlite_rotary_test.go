package infer

import (
	"testing"

	"github.com/tlite/tlite/graph/tlite"
)

// rotary adds a tlite.Rotary node.
func (g *gb) rotary(ins, outs []string, rd int64) *gb {
	g.node(tlite.Rotary, ins, outs, aInt("rotary_dim", rd))
	g.nodes[len(g.nodes)-1].Domain = tlite.Domain
	return g
}

func TestRotaryRule(t *testing.T) {
	runCases(t, []ruleCase{
		{
			name: "outputs shaped like their inputs; keys beside queries",
			build: func() *gb {
				return newGB(17).in("q", f32, "b", 4, "s", 8).in("k", f32, "b", 2, "s", 8).
					in("cos", f32, "b", 1, "s", 8).in("sin", f32, "s", 8).out("yq").out("yk").
					rotary([]string{"q", "cos", "sin", "k"}, []string{"yq", "yk"}, 8)
			},
			shape: map[string]string{"yq": "[b, 4, s, 8]", "yk": "[b, 2, s, 8]"},
			class: map[string]Class{"yq": Device},
		},
		{
			name: "partial rotary: tables as wide as the rotated part",
			build: func() *gb {
				return newGB(17).in("x", f32, 1, 3, "s", 12).in("cos", f32, "s", 8).in("sin", f32, "s", 8).out("y").
					rotary([]string{"x", "cos", "sin"}, []string{"y"}, 8)
			},
			shape: map[string]string{"y": "[1, 3, s, 12]"},
		},
		{
			name: "odd rotary_dim",
			build: func() *gb {
				return newGB(17).in("x", f32, 2, 6).in("cos", f32, 2, 3).in("sin", f32, 2, 3).out("y").
					rotary([]string{"x", "cos", "sin"}, []string{"y"}, 3)
			},
			err: "rotary_dim 3",
		},
		{
			name: "tables of the whole row under partial rotary",
			build: func() *gb {
				return newGB(17).in("x", f32, 2, 12).in("cos", f32, 2, 12).in("sin", f32, 2, 8).out("y").
					rotary([]string{"x", "cos", "sin"}, []string{"y"}, 8)
			},
			err: "does not broadcast",
		},
		{
			name: "rank 5",
			build: func() *gb {
				return newGB(17).in("x", f32, 1, 1, 1, 2, 4).in("cos", f32, 4).in("sin", f32, 4).out("y").
					rotary([]string{"x", "cos", "sin"}, []string{"y"}, 4)
			},
			err: "rank 5",
		},
		{
			name: "a second input without a second output",
			build: func() *gb {
				return newGB(17).in("x", f32, 2, 4).in("x2", f32, 2, 4).in("cos", f32, 4).in("sin", f32, 4).out("y").
					rotary([]string{"x", "cos", "sin", "x2"}, []string{"y"}, 4)
			},
			err: "have 4 inputs and 1 outputs",
		},
	})
}
