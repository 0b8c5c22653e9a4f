package infer

import (
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
)

// kvWrite adds a tlite.KVWrite node.
func (g *gb) kvWrite(ins []string, out string, attrs ...attr) *gb {
	g.node("KVWrite", ins, []string{out}, attrs...)
	last := len(g.nodes) - 1
	g.nodes[last].Domain = tlite.Domain
	return g
}

func TestKVWriteRule(t *testing.T) {
	kvAttrs := func(extra ...attr) []attr {
		return append([]attr{aInt("capacity", 64), aString("length", "kv_len")}, extra...)
	}
	runCases(t, []ruleCase{
		{
			name: "rows in [1, heads, seq, dim] give a [1, kv_len, heads, dim] view",
			build: func() *gb {
				return newGB(17).in("k", f32, 1, 2, "seq", 16).in("slots", i64, 1, "seq").out("view").
					kvWrite([]string{"k", "slots"}, "view", kvAttrs()...)
			},
			shape: map[string]string{"view": "[1, kv_len, 2, 16]"},
			class: map[string]Class{"view": Device},
			at: map[string]func(b map[string]int64) []int64{
				"view": func(b map[string]int64) []int64 { return []int64{1, b["kv_len"], 2, 16} },
			},
			bindings: []map[string]int64{{"seq": 1, "kv_len": 64}, {"seq": 7, "kv_len": 8}},
			check: func(t *testing.T, m *graph.Model, r *Result) {
				if v := m.Graph.Value("view"); v.Type != dtype.Float32 {
					t.Errorf("view is %v, want the rows' float32", v.Type)
				}
			},
		},
		{
			name: "rows read through new_perm; a symbolic batch unified with 1",
			build: func() *gb {
				return newGB(17).in("v", f32, "batch", "seq", 4, 32).in("slots", i64, "n").out("view").
					kvWrite([]string{"v", "slots"}, "view", kvAttrs(aInts("new_perm", 0, 2, 1, 3))...)
			},
			shape: map[string]string{"view": "[1, kv_len, 4, 32]"},
			eqs:   []string{"batch = 1"},
		},
		{
			name: "the slots count the rows",
			build: func() *gb {
				return newGB(17).in("k", f32, 1, 2, 5, 16).in("slots", i64, 1, "n").out("view").
					kvWrite([]string{"k", "slots"}, "view", kvAttrs()...)
			},
			shape: map[string]string{"view": "[1, kv_len, 2, 16]"},
			eqs:   []string{"n = 5"},
		},
		{
			name: "a batch of 2",
			build: func() *gb {
				return newGB(17).in("k", f32, 2, 2, "seq", 16).in("slots", i64, 1, "seq").out("view").
					kvWrite([]string{"k", "slots"}, "view", kvAttrs()...)
			},
			err: "batch other than 1",
		},
		{
			name: "too few slots",
			build: func() *gb {
				return newGB(17).in("k", f32, 1, 2, 3, 16).in("slots", i64, 2).out("view").
					kvWrite([]string{"k", "slots"}, "view", kvAttrs()...)
			},
			err: "against 3 new rows",
		},
		{
			name: "float slots",
			build: func() *gb {
				return newGB(17).in("k", f32, 1, 2, "seq", 16).in("slots", f32, 1, "seq").out("view").
					kvWrite([]string{"k", "slots"}, "view", kvAttrs()...)
			},
			err: "want int32 or int64",
		},
		{
			name: "rank 3 rows",
			build: func() *gb {
				return newGB(17).in("k", f32, 2, "seq", 16).in("slots", i64, "seq").out("view").
					kvWrite([]string{"k", "slots"}, "view", kvAttrs()...)
			},
			err: "want rank 4",
		},
		{
			name: "a new_perm that is no permutation",
			build: func() *gb {
				return newGB(17).in("k", f32, 1, 2, "seq", 16).in("slots", i64, "seq").out("view").
					kvWrite([]string{"k", "slots"}, "view", kvAttrs(aInts("new_perm", 0, 1, 1, 3))...)
			},
			err: "not a permutation",
		},
		{
			name: "no capacity",
			build: func() *gb {
				return newGB(17).in("k", f32, 1, 2, "seq", 16).in("slots", i64, "seq").out("view").
					kvWrite([]string{"k", "slots"}, "view", aString("length", "kv_len"))
			},
			err: "capacity",
		},
		{
			name: "no length symbol",
			build: func() *gb {
				return newGB(17).in("k", f32, 1, 2, "seq", 16).in("slots", i64, "seq").out("view").
					kvWrite([]string{"k", "slots"}, "view", aInt("capacity", 8))
			},
			err: "length",
		},
		{
			name: "a fixed length beyond the capacity",
			build: func() *gb {
				return newGB(17).in("k", f32, 1, 2, "seq", 16).in("slots", i64, "seq").out("view").
					kvWrite([]string{"k", "slots"}, "view", kvAttrs()...)
			},
			opts: Options{Fixed: map[string]int64{"kv_len": 65}},
			err:  "outside a cache of 64 slots",
		},
	})
}
