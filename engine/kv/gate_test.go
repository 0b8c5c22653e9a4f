package kv

import (
	"fmt"
	"math"
	"testing"

	"github.com/tlite/tlite/engine"
)

// TestLayerGate: a forward of tokens 4..7 whose slots 0..3 hold garbage,
// with a layer gate that writes each layer's rows of slots 0..3 just
// before that layer's attention, gives the logits of the whole prefill
// (on OpenCL, where the kernels run asynchronously, and on the pure-Go
// device); without the gate the garbage changes them, so the gate's
// writes are what the attention read. The gate is called once per
// cache-reading attention, in order, with that layer's K and V buffers;
// odd layers write both in one GateCall.WriteLayerSlots, even layers
// buffer by buffer.
func TestLayerGate(t *testing.T) {
	for _, d := range []string{"opencl", "go"} {
		t.Run(d, func(t *testing.T) {
			opts := engine.Options{Kernels: testLib}
			if d == "go" {
				opts = engine.Options{Device: "go"}
			}
			st, err := Open("../../testdata/default/model.onnx", opts, Config{MaxContext: 16})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Session().Close()
			toks := []int{5, 9, 2, 7, 11, 3, 8, 1}
			pos := []int{0, 1, 2, 3, 4, 5, 6, 7}
			want, err := st.Forward(toks, pos, pos)
			if err != nil {
				t.Fatal(err)
			}
			want = want[len(want)-st.Vocab():]
			bufs := len(st.Info().Layers)
			saved := make([][]byte, bufs)
			for b := range saved {
				saved[b] = make([]byte, 4*st.RowBytes(b))
				if err := st.ReadSlots(b, pos[:4], saved[b]); err != nil {
					t.Fatal(err)
				}
			}
			run := func(gate engine.LayerGate) []float32 {
				t.Helper()
				st.Reset()
				for b := range saved {
					junk := make([]byte, len(saved[b]))
					for i := range junk {
						junk[i] = byte(i*7 + b)
					}
					if err := st.WriteSlots(b, pos[:4], junk); err != nil {
						t.Fatal(err)
					}
				}
				if err := st.SetPositions(pos[:4], pos[:4]); err != nil {
					t.Fatal(err)
				}
				st.Session().SetLayerGate(gate)
				defer st.Session().SetLayerGate(nil)
				got, err := st.Forward(toks[4:], pos[4:], pos[4:])
				if err != nil {
					t.Fatal(err)
				}
				return got[len(got)-st.Vocab():]
			}
			var layers []int
			seen := map[int]bool{}
			got := run(func(g *engine.GateCall) error {
				layers = append(layers, g.Layer)
				for _, b := range []int{g.KBuf, g.VBuf} {
					if b < 0 || b >= bufs || seen[b] {
						return fmt.Errorf("layer %d: buffer %d (of %d) out of range or given twice", g.Layer, b, bufs)
					}
					seen[b] = true
				}
				if g.Layer%2 == 1 {
					// Both buffers in one copy, lower-numbered first.
					lo, hi := min(g.KBuf, g.VBuf), max(g.KBuf, g.VBuf)
					return g.WriteLayerSlots(pos[:4], append(append([]byte(nil), saved[lo]...), saved[hi]...))
				}
				for _, b := range []int{g.KBuf, g.VBuf} {
					if err := g.WriteKVSlots(b, pos[:4], saved[b]); err != nil {
						return err
					}
				}
				return nil
			})
			if len(layers) != st.Session().CacheAttentionLayers() || len(seen) != bufs {
				t.Fatalf("gate called for layers %v over %d buffers; the model has %d attentions and %d buffers", layers, len(seen), st.Session().CacheAttentionLayers(), bufs)
			}
			for i, l := range layers {
				if l != i {
					t.Fatalf("gate called for layers %v; want 0, 1, ... in order", layers)
				}
			}
			if d := maxDiff(got, want); d > 1e-4 {
				t.Errorf("gated forward differs from the prefill by %g", d)
			}
			if d := maxDiff(run(nil), want); d <= 1e-4 {
				t.Errorf("without the gate the garbage rows changed nothing (%g): the check is blind", d)
			}
		})
	}
}

func maxDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}
