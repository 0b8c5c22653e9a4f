package generate

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
)

// timesOne puts Mul(v, 1) between v and every node of g that reads it
// (graph outputs keep v): a reader the cache rewrite does not know, with
// the model's results unchanged. It returns the Mul's name.
func timesOne(t *testing.T, g *graph.Graph, v *graph.Value) string {
	t.Helper()
	one := g.NewValue(v.Name + "_one")
	c, err := graph.Float32Tensor(one.Name, []int64{}, []float32{1})
	if err != nil {
		t.Fatal(err)
	}
	one.Const, one.Type = c, dtype.Float32
	g.Initializers = append(g.Initializers, one)
	readers := append([]*graph.Node(nil), v.Consumers...)
	out := g.NewValue(v.Name + "_times_one")
	mul := &graph.Node{Name: v.Name + "/odd_reader/Mul", OpType: "Mul", Inputs: []*graph.Value{v, one}, Outputs: []*graph.Value{out}}
	if err := g.AddNode(mul); err != nil {
		t.Fatal(err)
	}
	for _, n := range readers {
		for i, x := range n.Inputs {
			if x == v {
				n.Inputs[i] = out
			}
		}
	}
	g.Relink()
	return mul.Name
}

// TestTestBedLayerFallback: hf_llama with layer 1 changed, in a way that
// does not change its results, so that the cache rewrite cannot serve it
// in place: "reader", a node between its present K/V and attention (the
// attention still fuses); "unfused", a node between the softmax and the
// value MatMul (the attention does not fuse, so its layer masks with the
// model's own mask). Open stays in place, layer 0's buffers are read in
// place, layer 1's fall back with one line naming the node, and the 32
// greedy tokens equal PyTorch's in place and explicitly (OpenCL; the
// unfused variant also on the pure-Go device).
func TestTestBedLayerFallback(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	src, ref := readTestBed(t, "hf_llama")
	for _, c := range []struct{ variant, dev string }{{"reader", "opencl"}, {"unfused", "opencl"}, {"unfused", "go"}} {
		variant := c.variant
		opts := engine.Options{Kernels: testLib}
		if c.dev == "go" {
			opts = engine.Options{Device: "go"}
		}
		t.Run(variant+"/"+c.dev, func(t *testing.T) {
			m, err := graph.Load(src)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			g := m.Graph
			var node string
			switch variant {
			case "reader":
				for _, o := range g.Outputs {
					if o.Name == "present.1.key" || o.Name == "present.1.value" {
						node = timesOne(t, g, o)
					}
				}
			case "unfused":
				for _, n := range g.Nodes {
					if n.OpType == "Softmax" && strings.HasPrefix(n.Name, "/layers.1/") {
						node = timesOne(t, g, n.Outputs[0])
					}
				}
			}
			if node == "" {
				t.Fatal("found nothing to change in layer 1")
			}
			path := filepath.Join(t.TempDir(), "model.onnx")
			if err := graph.Write(m, path, graph.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			d, err := Open(path, opts, testBedCtx, Config{LastOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if d.Mode != KVInPlace {
				t.Fatalf("mode %q (%s); want %q with layer 1 falling back", d.Mode, d.Fallback, KVInPlace)
			}
			info, _ := d.Session().KVInfo()
			if !info.Ordered || info.Pad != 1 {
				t.Errorf("KVInfo: ordered %v, pad %d; a fallback needs ordered slots, no padding", info.Ordered, info.Pad)
			}
			for _, l := range info.Layers {
				layer1 := strings.Contains(l.Name, ".1.")
				if layer1 != (l.Fallback != "") {
					t.Errorf("buffer %s: fallback %q; want one for layer 1 only", l.Name, l.Fallback)
				}
			}
			if len(d.LayerFallbacks) != 2 {
				t.Fatalf("LayerFallbacks %q; want one line per layer-1 cache tensor", d.LayerFallbacks)
			}
			for _, line := range d.LayerFallbacks {
				if strings.Contains(line, "\n") || !strings.Contains(line, "/odd_reader/Mul") && !strings.Contains(line, "/layers.1/") {
					t.Errorf("fallback line %q; want one line naming the layer-1 node", line)
				}
			}
			sameTokens(t, "in place, layer 1 falling back", greedySteps(t, d, ref, nil, nil), ref.GreedyIDs)
			// Out of order slots would break the model's own mask: refused.
			if err := d.Stepper.Reset(); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Stepper.Step(ref.PromptIDs[:3], []int{0, 2, 1}); err == nil || !strings.Contains(err.Error(), "in order") {
				t.Errorf("positions out of order: %v; want a refusal", err)
			}

			e, err := OpenExplicit(path, opts, testBedCtx, Config{LastOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			sameTokens(t, "explicit", greedySteps(t, e, ref, nil, nil), ref.GreedyIDs)
		})
	}
}
