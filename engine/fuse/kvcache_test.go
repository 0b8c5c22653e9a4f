package fuse

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape/infer"
)

// TestKVCacheTestBed rewrites the decoder test bed's exports for an
// in-place cache: every cache tensor becomes a KVWrite read by fused
// attention, and no past input, present output or use of the past length
// is left. The numbers: two layers, a key and a value cache each (GPTBigCode's
// combined key_value cache is split into the two).
func TestKVCacheTestBed(t *testing.T) {
	for _, model := range []string{"hf_llama", "hf_qwen2", "hf_gpt2", "hf_neox", "hf_bigcode_mqa"} {
		t.Run(model, func(t *testing.T) {
			m, err := graph.Load(filepath.Join("..", "..", "testdata", "models", model, "model.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			res, err := infer.Run(m, infer.Options{})
			if err != nil {
				t.Fatal(err)
			}
			g := m.Graph
			for _, p := range Passes(Options{Elementwise: ew}) {
				if err := p(g, res); err != nil {
					t.Fatal(err)
				}
			}
			rw, err := KVCache(g, res, 64, 8)
			if err != nil {
				t.Fatal(err)
			}
			if rw.Past != "past" || rw.Seq != "seq" || rw.Batch != "batch" {
				t.Errorf("symbols %+v", rw)
			}
			checkGraph(t, g)
			ops := countOps(g)
			if n := ops[tlite.Key(tlite.KVWrite)]; n != 4 {
				t.Errorf("%d KVWrite nodes; want 4", n)
			}
			if n := ops[tlite.Key(tlite.Attention)]; n != 2 {
				t.Errorf("%d Attention nodes; want 2", n)
			}
			for _, n := range g.Nodes {
				if n.OpType != "Attention" {
					continue
				}
				if m := n.Inputs[3]; m == nil || m.Name != KVBiasInput {
					t.Errorf("%v: mask %v; want %s", n, m, KVBiasInput)
				}
				for _, i := range []int{1, 2} {
					if p := n.Inputs[i].Producer; p == nil || p.OpType != "KVWrite" {
						t.Errorf("%v reads input %d from %v; want a KVWrite view", n, i, p)
					}
				}
			}
			var names []string
			for _, v := range g.Inputs {
				names = append(names, v.Name)
				if strings.HasPrefix(v.Name, "past") || v.Name == "attention_mask" {
					t.Errorf("input %q is left", v.Name)
				}
			}
			sort.Strings(names)
			if got := strings.Join(names, ","); got != "input_ids,kv_bias,kv_slots,position_ids" {
				t.Errorf("inputs %s", got)
			}
			for _, v := range g.Outputs {
				if strings.HasPrefix(v.Name, "present") {
					t.Errorf("output %q is left", v.Name)
				}
			}
			for _, sym := range res.Symbols {
				if sym == "past" {
					t.Errorf("symbols %v still list past", res.Symbols)
				}
			}
		})
	}
}
