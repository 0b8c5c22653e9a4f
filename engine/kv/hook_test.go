package kv

import (
	"math"
	"slices"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/hostattn"
)

// allRetrieval is an attention hook that replaces every single-row
// (decode) attention with host attention over every slot up to the row's
// own, read back from the cache: the output must equal the fused kernel's.
// With drop > 0 it leaves out the first drop slots, which must change it.
func allRetrieval(calls *int, drop int) engine.AttentionHook {
	return func(c *engine.AttentionCall) error {
		*calls++
		if c.Rows != 1 {
			return nil
		}
		n := c.Slots[0] + 1 - drop
		slots := make([]int, n)
		for i := range slots {
			slots[i] = drop + i
		}
		row := c.KVHeads * c.HeadDim
		k, v := make([]float32, n*row), make([]float32, n*row)
		if err := c.ReadK(slots, k); err != nil {
			return err
		}
		if err := c.ReadV(slots, v); err != nil {
			return err
		}
		group := c.Heads / c.KVHeads
		c.Out = make([]float32, c.Heads*c.HeadDim)
		kg, vg := make([]float32, n*c.HeadDim), make([]float32, n*c.HeadDim)
		for g := 0; g < c.KVHeads; g++ {
			for j := 0; j < n; j++ {
				copy(kg[j*c.HeadDim:], k[j*row+g*c.HeadDim:j*row+(g+1)*c.HeadDim])
				copy(vg[j*c.HeadDim:], v[j*row+g*c.HeadDim:j*row+(g+1)*c.HeadDim])
			}
			lo, hi := g*group*c.HeadDim, (g+1)*group*c.HeadDim
			if err := hostattn.Group(c.Out[lo:hi], c.Q[lo:hi], c.HeadDim, kg, vg, c.Scale, nil); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestAttentionHookAllRetrieval runs a prompt and decode steps with and
// without a hook that retrieves every entry: the logits must agree within
// 1e-4 on the long-context model and on HF exports whose attention and
// head layout were shaped by others (GQA, MQA, NeoX); a hook that
// drops the oldest entries must change them (the replacement is used).
func TestAttentionHookAllRetrieval(t *testing.T) {
	paths := map[string]string{
		"longctx":        "../../testdata/longctx/model.onnx",
		"hf_llama":       modelPath("hf_llama"),
		"hf_qwen2":       modelPath("hf_qwen2"),
		"hf_bigcode_mqa": modelPath("hf_bigcode_mqa"),
		"hf_neox":        modelPath("hf_neox"),
	}
	for _, name := range []string{"longctx", "hf_llama", "hf_qwen2", "hf_bigcode_mqa", "hf_neox"} {
		t.Run(name, func(t *testing.T) {
			st, err := Open(paths[name], engine.Options{Kernels: testLib}, Config{MaxContext: 64, Pad: 8})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Session().Close()
			layers := st.Session().CacheAttentionLayers()
			if layers == 0 {
				t.Fatal("no cache-reading attention to hook")
			}
			prompt := []int{5, 17, 42, 3, 99, 7, 11, 60, 23, 8, 31, 2}
			decode := []int{13, 40, 6, 77, 19}
			run := func(h engine.AttentionHook) [][]float32 {
				st.Reset()
				st.Session().SetAttentionHook(h, false)
				defer st.Session().SetAttentionHook(nil, false)
				var out [][]float32
				if _, err := st.Forward(prompt, seq(0, len(prompt)), seq(0, len(prompt))); err != nil {
					t.Fatal(err)
				}
				for i, tok := range decode {
					p := len(prompt) + i
					l, err := st.Forward([]int{tok}, []int{p}, []int{p})
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, append([]float32(nil), l[len(l)-st.Vocab():]...))
				}
				return out
			}
			want := run(nil)
			calls := 0
			got := run(allRetrieval(&calls, 0))
			if wantCalls := layers * (1 + len(decode)); calls != wantCalls {
				t.Fatalf("hook called %d times; want %d layers x %d runs", calls, layers, 1+len(decode))
			}
			var worst float64
			for i := range want {
				for j := range want[i] {
					worst = math.Max(worst, math.Abs(float64(got[i][j]-want[i][j])))
				}
			}
			if worst > 1e-4 {
				t.Fatalf("all-retrieval hook: max logit difference %g > 1e-4", worst)
			}
			dropped := run(allRetrieval(&calls, 4))
			var moved float64
			for i := range want {
				for j := range want[i] {
					moved = math.Max(moved, math.Abs(float64(dropped[i][j]-want[i][j])))
				}
			}
			if moved < 1e-3 {
				t.Fatalf("a hook leaving out 4 entries changed the logits by only %g: its output is not used", moved)
			}
			t.Logf("%d layers, max diff %.2g (all entries), %.2g (first 4 left out)", layers, worst, moved)
		})
	}
}

// TestAttentionHookPositions checks that a hook is told the rows'
// positions, not only their slots: a caller that reuses slots as a ring
// (DynaKV's bounded device cache) writes positions beyond the cache.
func TestAttentionHookPositions(t *testing.T) {
	st, err := Open("../../testdata/longctx/model.onnx", engine.Options{Kernels: testLib}, Config{MaxContext: 16, Pad: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Session().Close()
	type seen struct{ slots, positions []int }
	var calls []seen
	st.Session().SetAttentionHook(func(c *engine.AttentionCall) error {
		if c.Layer == 0 {
			calls = append(calls, seen{append([]int(nil), c.Slots...), append([]int(nil), c.Positions...)})
		}
		return nil
	}, false)
	defer st.Session().SetAttentionHook(nil, false)
	if _, err := st.Forward([]int{5, 17, 42, 3}, seq(0, 4), []int{9, 2, 7, 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Forward([]int{13}, []int{40}, []int{3}); err != nil {
		t.Fatal(err)
	}
	want := []seen{{[]int{9, 2, 7, 0}, []int{0, 1, 2, 3}}, {[]int{3}, []int{40}}}
	if len(calls) != len(want) {
		t.Fatalf("layer 0's hook called %d times; want %d", len(calls), len(want))
	}
	for i, w := range want {
		if !slices.Equal(calls[i].slots, w.slots) || !slices.Equal(calls[i].positions, w.positions) {
			t.Errorf("run %d: hook saw slots %v positions %v; want %v and %v", i, calls[i].slots, calls[i].positions, w.slots, w.positions)
		}
	}
}
