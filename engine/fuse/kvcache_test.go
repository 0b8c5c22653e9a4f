package fuse

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
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

// TestKVCacheMaskPerHead: kv_bias replaces the model's mask, so a mask
// that is the same for every head is taken over, and a bias that differs
// per head (ALiBi) is kept rather than dropped: that attention's caches
// fall back to copies in the export's layout, one line each.
func TestKVCacheMaskPerHead(t *testing.T) {
	for _, tc := range []struct {
		heads int
		ok    bool
	}{{1, true}, {2, false}} {
		t.Run(fmt.Sprintf("mask_heads=%d", tc.heads), func(t *testing.T) {
			b := newBuilder(t)
			b.input("input_ids", dtype.Int64, "batch", "seq")
			q := b.input("q", dtype.Float32, "batch", 2, "seq", 4)
			kn := b.input("k_new", dtype.Float32, "batch", 2, "seq", 4)
			vn := b.input("v_new", dtype.Float32, "batch", 2, "seq", 4)
			pk := b.input("past_key_values.0.key", dtype.Float32, "batch", 2, "past", 4)
			pv := b.input("past_key_values.0.value", dtype.Float32, "batch", 2, "past", 4)
			mask := b.input("bias", dtype.Float32, "batch", tc.heads, 1, "total")
			k := b.op("Concat", vs(pk, kn), aInt("axis", 2))
			v := b.op("Concat", vs(pv, vn), aInt("axis", 2))
			s := b.op("MatMul", vs(q, b.op("Transpose", vs(k), aInts("perm", 0, 1, 3, 2))))
			s = b.op("Add", vs(s, mask))
			o := b.op("MatMul", vs(b.op("Softmax", vs(s), aInt("axis", -1)), v))
			b.output(o, k, v)
			g := b.run(Attention)
			only(t, g, "tlite.Attention")
			rw, err := KVCache(g, b.res, 16, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.ok {
				if len(rw.Fallbacks) != 2 {
					t.Fatalf("fallbacks %q; want K and V", rw.Fallbacks)
				}
				for _, l := range rw.Fallbacks {
					if !strings.Contains(l, "differs per head") || strings.Contains(l, "\n") {
						t.Errorf("fallback %q; want one line naming the per-head bias", l)
					}
				}
				checkGraph(t, g)
				a := only(t, g, "tlite.Attention")
				if a.Inputs[3] != mask {
					t.Errorf("attention masks with %v; want the model's own bias", a.Inputs[3])
				}
				for _, i := range []int{1, 2} {
					p := a.Inputs[i].Producer
					if p == nil || p.OpType != "Transpose" || p.Inputs[0].Producer == nil || p.Inputs[0].Producer.OpType != "KVWrite" {
						t.Errorf("attention reads input %d from %v; want a copy of a KVWrite view", i, p)
					}
				}
			}
			if tc.ok {
				checkGraph(t, g)
				a := only(t, g, "tlite.Attention")
				if a.Inputs[0] != q || a.Inputs[3] != g.Value(KVBiasInput) || a.Inputs[1].Producer.OpType != "KVWrite" || a.Inputs[2].Producer.OpType != "KVWrite" {
					t.Fatalf("attention reads %v", a.Inputs)
				}
			}
		})
	}
}
