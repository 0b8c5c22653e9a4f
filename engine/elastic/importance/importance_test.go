package importance

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/opencl"
)

const llamaDir = "../../../testdata/elastic/llama"

// ref is testdata/elastic/llama/proxy_ref.json (make_testdata.py --only
// proxy): windows and the proxy computed in PyTorch (fp64) by hooks.
type ref struct {
	HeadDim int           `json:"head_dim"`
	Windows [][]int       `json:"windows"`
	Layers  []LayerScores `json:"layers"`
	Loss    float64       `json:"loss"`
	Removal []float64     `json:"layer_removal_loss_increase"`
}

func loadRef(t *testing.T) ref {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(llamaDir, "proxy_ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r ref
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func backends(t *testing.T) map[string]engine.Options {
	t.Helper()
	out := map[string]engine.Options{"go": {Device: "go"}}
	if dev, err := opencl.Open(opencl.Options{}); err == nil {
		dev.Close()
		out["opencl"] = engine.Options{}
	} else {
		t.Logf("no OpenCL device (%v): the pure-Go backend only", err)
	}
	return out
}

// score runs windows through m (two windows per run, so runs of 2 and 1
// rows both occur) and returns the scores.
func score(t *testing.T, m *graph.Model, opts engine.Options, windows [][]int, headDim int) *Scores {
	t.Helper()
	c, err := New(m, Options{Engine: opts, HeadDim: headDim, Batch: 2, Seq: len(windows[0])})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < len(windows); i += 2 {
		if err := c.Add(windows[i:min(i+2, len(windows))]); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.Scores()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func closeTo(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d scores; want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(got[i] - want[i]); d > tol*math.Max(1, math.Abs(want[i])) {
			t.Errorf("%s[%d] = %.7g; PyTorch %.7g", what, i, got[i], want[i])
		}
	}
}

// TestProxyMatchesPyTorch: the scores tlite computes on original.onnx (no
// elastic.json, exported weight names) equal the PyTorch reference.
func TestProxyMatchesPyTorch(t *testing.T) {
	r := loadRef(t)
	for name, opts := range backends(t) {
		t.Run(name, func(t *testing.T) {
			m, err := graph.Load(filepath.Join(llamaDir, "original.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			s := score(t, m, opts, r.Windows, r.HeadDim)
			if s.Tokens != 3*24 || s.Windows != 3 || s.NLayers != 3 || s.NHeads != 4 || s.NKVHeads != 2 || s.FFN != 172 || s.Method != Method || s.Backend != name {
				t.Fatalf("header %+v", s)
			}
			if s.Loss < 4 || s.Loss > 7 {
				t.Errorf("calibration loss %v; a random 256-token model gives about ln 256 = 5.5", s.Loss)
			}
			for l, want := range r.Layers {
				got := s.Layers[l]
				closeTo(t, "q_heads", got.QHeads, want.QHeads, 1e-4)
				closeTo(t, "kv_groups", got.KVGroups, want.KVGroups, 1e-4)
				closeTo(t, "neurons", got.Neurons, want.Neurons, 1e-4)
			}
		})
	}
}

// TestLayerRemovalMatchesPyTorch: the loss through tlite and each layer's
// removal loss increase (its block zeroed to the residual passthrough)
// equal elastic.layer_removal's in PyTorch (fp64).
func TestLayerRemovalMatchesPyTorch(t *testing.T) {
	r := loadRef(t)
	open := func() (*graph.Model, error) { return graph.Load(filepath.Join(llamaDir, "original.onnx")) }
	m, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := score(t, m, engine.Options{Device: "go"}, r.Windows, r.HeadDim)
	if math.Abs(s.Loss-r.Loss) > 1e-5 {
		t.Errorf("loss %.7f; PyTorch %.7f", s.Loss, r.Loss)
	}
	opts := Options{Engine: engine.Options{Device: "go"}, HeadDim: r.HeadDim, Batch: 2, Seq: len(r.Windows[0])}
	got, err := LayerRemoval(open, opts, s.NLayers, r.Windows, s.Loss)
	if err != nil {
		t.Fatal(err)
	}
	closeTo(t, "removal", got, r.Removal, 2e-5)
	// A removal pass reads back only the logits, and an intact loss-only
	// pass gives the loss of the full collector.
	lm, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	o := opts
	o.lossOnly = true
	lc, err := New(lm, o)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if outs := lc.s.Outputs(); len(outs) != 1 || outs[0].Name != lc.logits {
		t.Errorf("loss-only outputs %v; want the logits alone", outs)
	}
	for i := 0; i < len(r.Windows); i += 2 {
		if err := lc.Add(r.Windows[i:min(i+2, len(r.Windows))]); err != nil {
			t.Fatal(err)
		}
	}
	if loss, err := lc.Loss(); err != nil || loss != s.Loss {
		t.Errorf("loss-only loss %v (%v); the full collector's %v", loss, err, s.Loss)
	}
	if _, err := lc.Scores(); err == nil {
		t.Error("a loss-only collector gave unit scores")
	}
	fresh, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if _, err := New(fresh, Options{HeadDim: 16, Batch: 1, Seq: 4, Remove: []int{3}}); err == nil || !strings.Contains(err.Error(), "remove layer 3") {
		t.Errorf("removing layer 3 of 3: %v", err)
	}
}

// zeroInit replaces initializer name's constant by a copy with the given
// elements zeroed (the loaded one is a read-only view into the file).
func zeroInit(t *testing.T, g *graph.Graph, name string, zero func(r, c int) bool) {
	t.Helper()
	v := g.Value(name)
	x, err := v.Const.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	cols := int(v.Const.Dims[1])
	data := make([]byte, 4*len(x))
	for i, f := range x {
		if zero(i/cols, i%cols) {
			f = 0
		}
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(f))
	}
	v.Const = &graph.Tensor{Name: v.Const.Name, Type: v.Const.Type, Dims: v.Const.Dims, Data: data}
}

// ranksLast checks that the units in dead score exactly 0 and every other
// unit more, so that a descending order puts them last.
func ranksLast(t *testing.T, what string, scores []float64, dead ...int) {
	t.Helper()
	isDead := map[int]bool{}
	for _, d := range dead {
		isDead[d] = true
	}
	order := make([]int, len(scores))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return scores[order[a]] > scores[order[b]] })
	for k, i := range order {
		if last := k >= len(scores)-len(dead); last != isDead[i] {
			t.Errorf("%s: unit %d (score %.4g) at rank %d of %d; the units %v were zeroed", what, i, scores[i], k, len(scores), dead)
		}
		if isDead[i] && scores[i] != 0 {
			t.Errorf("%s: zeroed unit %d scores %g; want 0", what, i, scores[i])
		}
	}
}

// TestZeroedUnitsRankLast: a unit whose weights are zeroed — on the
// weight side (O rows, down rows) or on the activation side (V columns of a
// KV head, an up column) — scores 0 and ranks last.
func TestZeroedUnitsRankLast(t *testing.T) {
	r := loadRef(t)
	m, err := graph.Load(filepath.Join(llamaDir, "original.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	layers, err := Locate(m.Graph)
	if err != nil {
		t.Fatal(err)
	}
	hd := r.HeadDim
	g := m.Graph
	// Layer 0: query head 3's O rows (weight side). Layer 1: KV head 0's V
	// columns, so query heads 0 and 1 attend to zeros (activation side).
	// Layer 2: neuron 5's down row and neuron 9's up column.
	zeroInit(t, g, layers[0].O, func(r, _ int) bool { return r/hd == 3 })
	zeroInit(t, g, layers[1].V, func(_, c int) bool { return c/hd == 0 })
	zeroInit(t, g, layers[2].Down, func(r, _ int) bool { return r == 5 })
	zeroInit(t, g, layers[2].Up, func(_, c int) bool { return c == 9 })
	// The located names are the engine's elastic binding's (a second copy:
	// opening a session annotates the model it is given).
	bm, err := graph.Load(filepath.Join(llamaDir, "original.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	defer bm.Close()
	sess, err := engine.OpenModel(bm, engine.Options{Device: "go", NoJoin: true})
	if err != nil {
		t.Fatal(err)
	}
	var el []engine.ElasticLayer
	for _, ly := range layers {
		el = append(el, ly.ElasticLayer)
	}
	_, err = sess.BindElastic(el, hd)
	sess.Close()
	if err != nil {
		t.Errorf("binding the located layers: %v", err)
	}
	s := score(t, m, engine.Options{Device: "go"}, r.Windows, hd)
	ranksLast(t, "layer 0 heads", s.Layers[0].QHeads, 3)
	ranksLast(t, "layer 1 heads", s.Layers[1].QHeads, 0, 1)
	ranksLast(t, "layer 1 KV groups", s.Layers[1].KVGroups, 0)
	ranksLast(t, "layer 2 neurons", s.Layers[2].Neurons, 5, 9)
	ranksLast(t, "layer 0 neurons", s.Layers[0].Neurons)
}

func TestLocateAndOptionErrors(t *testing.T) {
	m, err := graph.Load("../../../testdata/elastic/gpt2/original.onnx")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := Locate(m.Graph); err == nil || !strings.Contains(err.Error(), "llama-style") {
		t.Errorf("GPT-2 located as a llama decoder: %v", err)
	}
	if _, err := New(m, Options{HeadDim: 16, Batch: 1, Seq: 8}); err == nil {
		t.Error("New on GPT-2 succeeded")
	}
	l, err := graph.Load(filepath.Join(llamaDir, "original.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{HeadDim: 0, Batch: 1, Seq: 8}, "head_dim"},
		{Options{HeadDim: 24, Batch: 1, Seq: 8}, "multiple of head_dim"},
		{Options{HeadDim: 16, Batch: 0, Seq: 8}, "window shape"},
	} {
		if _, err := New(l, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error with %q", c.opts, err, c.want)
		}
	}
	c, err := New(l, Options{Engine: engine.Options{Device: "go"}, HeadDim: 16, Batch: 1, Seq: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Scores(); err == nil {
		t.Error("scores without tokens")
	}
	for _, w := range [][][]int{nil, {{1, 2}, {3, 4}}, {make([]int, 9)}, {{1}}, {{1, 2, 3}, {1, 2}}} {
		if err := c.Add(w); err == nil {
			t.Errorf("Add(%v) succeeded", w)
		}
	}
	if err := c.Add([][]int{{1, 2, 300}}); err == nil {
		t.Error("a token outside the vocabulary was accepted")
	}
}

func TestWindowsAndWrite(t *testing.T) {
	w, err := Windows([]int{1, 2, 3, 4, 5, 6, 7}, 3, 0)
	if err != nil || len(w) != 2 || w[1][0] != 4 {
		t.Errorf("Windows: %v %v", w, err)
	}
	if w, _ := Windows(make([]int, 30), 3, 4); len(w) != 4 {
		t.Errorf("max 4 gave %d windows", len(w))
	}
	if _, err := Windows([]int{1, 2}, 3, 0); err == nil {
		t.Error("fewer tokens than a window accepted")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "imp.json")
	if err := Write(p, &Scores{Format: FormatName, Method: Method}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(p)
	if !strings.Contains(string(raw), "forward only") {
		t.Errorf("written file: %s", raw)
	}
	if err := Write(filepath.Join(dir, "missing", "x.json"), &Scores{}); err == nil {
		t.Error("write into a missing folder succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files left in the folder; want only imp.json", len(ents))
	}
}
