package qonnx

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/tlite"
)

// Hand-built test models come from graph/graphtest, serialized by
// graph.Marshal, so that they go through graph.Parse like files do.

// pb is a graph input or output of a test model.
type pb = *graph.Value

func attrI(name string, v int64) *graph.Attr   { return graphtest.Int(name, v) }
func attrF(name string, v float32) *graph.Attr { return graphtest.Float(name, v) }
func vi(name string, dims ...any) pb           { return viT(name, dtype.Float32, dims...) }
func weights(k, n int, seed float64) []float32 { return wave(k*n, seed) }

func viT(name string, t dtype.Type, dims ...any) pb { return graphtest.Value(name, t, dims...) }

func wave(n int, seed float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(math.Sin(float64(i)*0.731+seed)) * 0.05
	}
	return out
}

type modelB struct {
	nodes     []*graph.Node
	inits     []*graph.Value
	ins, outs []pb
}

func (m *modelB) node(op, name string, ins, outs []string, attrs ...*graph.Attr) *modelB {
	m.nodes = append(m.nodes, graphtest.Node(op, name, ins, outs, attrs...))
	return m
}

func (m *modelB) init(name string, dims []int64, v []float32) *modelB {
	m.inits = append(m.inits, graphtest.Init(graphtest.Float32s(name, dims, v...)))
	return m
}

func (m *modelB) parse(t *testing.T) *graph.Model {
	t.Helper()
	md := graphtest.Model(17, graphtest.Graph("test", m.nodes, m.inits, m.ins, m.outs))
	md.Opsets = map[string]int64{"": 17}
	out, err := graph.Parse(graphtest.Bytes(md), "")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func nodesByOp(g *graph.Graph) map[string]int {
	c := map[string]int{}
	for _, n := range g.Nodes {
		c[n.OpType]++
	}
	return c
}

func packedOf(t *testing.T, v *graph.Value) *quant.Packed {
	t.Helper()
	if v == nil || v.Const == nil || v.Const.Type != dtype.Uint8 || len(v.Const.Dims) != 1 {
		t.Fatalf("%v is not a 1-D uint8 initializer", v)
	}
	p, err := quant.UnmarshalPacked(v.Const.Data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func samePacked(a, b *quant.Packed) bool {
	if a.Format != b.Format || a.Group != b.Group || a.K != b.K || a.N != b.N || len(a.Words) != len(b.Words) || len(a.Params) != len(b.Params) {
		return false
	}
	for i := range a.Words {
		if a.Words[i] != b.Words[i] {
			return false
		}
	}
	for i := range a.Params {
		if math.Float32bits(a.Params[i]) != math.Float32bits(b.Params[i]) {
			return false
		}
	}
	return true
}

// TestProducts covers each weight-product pattern: MatMul, MatMul + bias
// Add, Gemm with transB and a [1, N] C, a weight shared by two products
// and tied to a Gather, and the ones left float with their reasons.
func TestProducts(t *testing.T) {
	const k, n = 64, 48
	wMM, wAdd, wGemm, wShared := weights(k, n, 0), weights(k, n, 1), weights(n, k, 2), weights(k, n, 3)
	bias := wave(n, 4)
	nonFinite := weights(k, n, 5)
	nonFinite[7] = float32(math.Inf(1))
	mb := &modelB{ins: []pb{vi("x", "batch", k), vi("ids", "batch"), vi("x2", "batch", k)}}
	mb.ins[1] = viT("ids", dtype.Int64, "batch")
	mb.init("w_mm", []int64{k, n}, wMM).init("w_add", []int64{k, n}, wAdd).init("b", []int64{n}, bias).
		init("w_gemm", []int64{n, k}, wGemm).init("c", []int64{1, n}, bias).init("w_shared", []int64{k, n}, wShared).
		init("w_alpha", []int64{k, n}, wMM).init("w_small", []int64{k, 4}, wave(k*4, 6)).init("w_odd", []int64{48, n}, wave(48*n, 7)).
		init("w_inf", []int64{k, n}, nonFinite)
	mb.node("MatMul", "mm", []string{"x", "w_mm"}, []string{"y_mm"}).
		node("MatMul", "mm_add", []string{"x", "w_add"}, []string{"xw"}).
		node("Add", "add", []string{"b", "xw"}, []string{"y_add"}).
		node("Gemm", "gemm", []string{"x", "w_gemm", "c"}, []string{"y_gemm"}, attrI("transB", 1)).
		node("MatMul", "shared1", []string{"x", "w_shared"}, []string{"y_s1"}).
		node("MatMul", "shared2", []string{"x2", "w_shared"}, []string{"y_s2"}).
		node("Gather", "embed", []string{"w_shared", "ids"}, []string{"y_emb"}).
		node("Gemm", "alpha", []string{"x", "w_alpha"}, []string{"y_alpha"}, attrF("alpha", 0.5)).
		node("MatMul", "small", []string{"x", "w_small"}, []string{"y_small"}).
		node("MatMul", "odd", []string{"y_odd_in", "w_odd"}, []string{"y_odd"}).
		node("MatMul", "inf", []string{"x", "w_inf"}, []string{"y_inf"}).
		node("MatMul", "act", []string{"y_mm", "y_s1"}, []string{"y_act"})
	mb.ins = append(mb.ins, vi("y_odd_in", "batch", 48))
	for _, o := range []string{"y_mm", "y_add", "y_gemm", "y_s2", "y_emb", "y_alpha", "y_small", "y_odd", "y_inf", "y_act"} {
		mb.outs = append(mb.outs, vi(o))
	}
	m := mb.parse(t)
	res, err := Quantize(m, Options{Format: quant.E0M4, Group: 32, MinSize: 1024, Report: true})
	if err != nil {
		t.Fatal(err)
	}
	g := m.Graph
	if err := g.Validate(); err != nil {
		t.Fatalf("rewritten graph: %v", err)
	}
	if c := nodesByOp(g); c[tlite.MatMulQ] != 5 || c["Add"] != 0 || c["MatMul"] != 4 || c["Gemm"] != 1 || c["Gather"] != 1 {
		t.Errorf("node counts %v; want 5 MatMulQ (mm, mm_add with its Add, gemm, shared1, shared2), MatMul small/odd/inf/act, Gemm alpha", c)
	}
	if m.Opset(tlite.Domain) != tlite.Version {
		t.Errorf("tlite opset %d", m.Opset(tlite.Domain))
	}
	want := map[string]string{
		"alpha": "alpha = 0.5", "small": "below the minimum size 1024", "odd": "K = 48 is not a multiple of the group size 32",
		"inf": "only finite weights",
	}
	for _, s := range res.Skipped {
		if w, ok := want[s.Node]; !ok || !strings.Contains(s.Reason, w) {
			t.Errorf("skipped %s: %q; want a reason containing %q", s.Node, s.Reason, w)
		}
		delete(want, s.Node)
	}
	if len(want) > 0 || res.Activations != 1 {
		t.Errorf("not skipped: %v; activation products %d, want 1", want, res.Activations)
	}
	if len(res.Embeddings) != 1 || res.Embeddings[0] != "w_shared" {
		t.Errorf("embeddings %v, want [w_shared]", res.Embeddings)
	}
	byName := map[string]*graph.Node{}
	for _, nd := range g.Nodes {
		byName[nd.Name] = nd
	}
	check := func(node string, w []float32, rows, cols int, layout quant.Layout, bias string) {
		t.Helper()
		nd := byName[node]
		if nd == nil || nd.OpType != tlite.MatMulQ || nd.Domain != tlite.Domain {
			t.Fatalf("node %s: %v, want a tlite.MatMulQ", node, nd)
		}
		got := packedOf(t, nd.Inputs[1])
		exp, err := quant.Quantize(w, rows, cols, quant.Options{Format: quant.E0M4, Group: 32, Layout: layout})
		if err != nil {
			t.Fatal(err)
		}
		if !samePacked(got, exp) {
			t.Errorf("node %s: packed weight differs from quant.Quantize of the float weight (%s layout)", node, layout)
		}
		if nd.AttrString("format", "") != "e0m4" || nd.AttrInt("group", 0) != 32 || nd.AttrInt("K", 0) != int64(exp.K) || nd.AttrInt("N", 0) != int64(exp.N) {
			t.Errorf("node %s: attributes %v", node, nd.Attrs)
		}
		gotBias := ""
		if len(nd.Inputs) > 2 {
			b := nd.Inputs[2]
			gotBias = b.Name
			if len(b.Const.Dims) != 1 || b.Const.Dims[0] != int64(exp.N) {
				t.Errorf("node %s: bias %s has dims %v, want [%d]", node, b.Name, b.Const.Dims, exp.N)
			}
		}
		if (bias == "") != (gotBias == "") || (bias != "" && !strings.HasPrefix(gotBias, bias)) {
			t.Errorf("node %s: bias %q, want %q", node, gotBias, bias)
		}
	}
	check("mm", wMM, k, n, quant.LayoutKN, "")
	check("mm_add", wAdd, k, n, quant.LayoutKN, "b")
	if byName["mm_add"].Outputs[0].Name != "y_add" {
		t.Errorf("mm_add writes %s, want the Add's output y_add", byName["mm_add"].Outputs[0].Name)
	}
	check("gemm", wGemm, n, k, quant.LayoutNK, "c")
	check("shared1", wShared, k, n, quant.LayoutKN, "")
	check("shared2", wShared, k, n, quant.LayoutKN, "")
	if byName["shared1"].Inputs[1] != byName["shared2"].Inputs[1] {
		t.Error("a weight read by two MatMuls was packed twice")
	}
	inits := map[string]bool{}
	for _, v := range g.Initializers {
		inits[v.Name] = true
	}
	for name, keep := range map[string]bool{"w_mm": false, "w_add": false, "b": true, "w_gemm": false, "c": false,
		"w_shared": true, "w_alpha": true, "w_small": true, "w_inf": true} {
		if inits[name] != keep {
			t.Errorf("initializer %s present = %v, want %v", name, inits[name], keep)
		}
	}
	if len(res.Weights) != 4 || len(res.Report.Matrices) != 4 {
		t.Errorf("%d weights, %d report rows; want 4 and 4", len(res.Weights), len(res.Report.Matrices))
	}
	if res.BytesAfter >= res.BytesBefore {
		t.Errorf("initializers grew: %d -> %d bytes", res.BytesBefore, res.BytesAfter)
	}
}

// TestWriteMapsPacked writes a quantized model with aligned external data
// and checks that, loaded again, each packed weight is a view of the data
// file at an aligned address holding the same bytes.
func TestWriteMapsPacked(t *testing.T) {
	const k, n = 128, 96
	w := weights(k, n, 0)
	mb := &modelB{ins: []pb{vi("x", "batch", k)}, outs: []pb{vi("y")}}
	m := mb.init("w", []int64{k, n}, w).node("MatMul", "mm", []string{"x", "w"}, []string{"y"}).parse(t)
	if _, err := Quantize(m, Options{Format: quant.Int4}); err != nil {
		t.Fatal(err)
	}
	blob := append([]byte(nil), m.Graph.Nodes[0].Inputs[1].Const.Data...)
	path := filepath.Join(t.TempDir(), "q.onnx")
	if err := graph.Write(m, path, graph.WriteOptions{ExternalThreshold: 1024, Align: 4096}); err != nil {
		t.Fatal(err)
	}
	back, err := graph.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	nd := back.Graph.Nodes[0]
	if nd.OpType != tlite.MatMulQ || back.Opset(tlite.Domain) != 1 {
		t.Fatalf("reloaded node %v, tlite opset %d", nd, back.Opset(tlite.Domain))
	}
	tq := nd.Inputs[1].Const
	if !tq.External || !bytes.Equal(tq.Data, blob) {
		t.Fatalf("packed weight: external %v, same bytes %v", tq.External, bytes.Equal(tq.Data, blob))
	}
	if a := uintptr(unsafe.Pointer(&tq.Data[0])) % 4096; a != 0 {
		t.Errorf("packed weight mapped at an address %d bytes past a page boundary", a)
	}
	p := packedOf(t, nd.Inputs[1])
	exp, _ := quant.QuantizeInt4(w, k, n, 128)
	if !samePacked(p, exp) {
		t.Error("reloaded packed weight differs")
	}
}

// TestFP16 converts weights to float16 initializers; a weight also read by
// an element-wise op keeps float32.
func TestFP16(t *testing.T) {
	const k, n = 64, 64
	w1, w2 := weights(k, n, 0), weights(k, n, 1)
	w1[3] = 1e6 // beyond fp16: saturates
	mb := &modelB{ins: []pb{vi("x", "batch", k)}, outs: []pb{vi("y1"), vi("y2"), vi("y3")}}
	m := mb.init("w1", []int64{k, n}, w1).init("w2", []int64{k, n}, w2).
		node("MatMul", "mm1", []string{"x", "w1"}, []string{"y1"}).
		node("MatMul", "mm2", []string{"x", "w2"}, []string{"y2"}).
		node("Mul", "mul", []string{"w2", "w2"}, []string{"y3"}).parse(t)
	res, err := Quantize(m, Options{Format: quant.FP16, MinSize: DefaultMinSize})
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := m.Graph.Value("w1"), m.Graph.Value("w2")
	if v1.Type != dtype.Float16 || v1.Const.Type != dtype.Float16 || v2.Const.Type != dtype.Float32 {
		t.Fatalf("w1 %v/%v, w2 %v: want w1 float16 and w2 float32", v1.Type, v1.Const.Type, v2.Const.Type)
	}
	if len(res.Weights) != 1 || res.Weights[0].Saturated != 1 || len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0].Reason, "stays float32") {
		t.Fatalf("weights %+v skipped %+v", res.Weights, res.Skipped)
	}
	got, _ := v1.Const.Float32s()
	for i := range got {
		want := dtype.HalfToFloat32(dtype.Float32ToHalf(w1[i]))
		if i == 3 {
			want = 65504
		}
		if got[i] != want {
			t.Fatalf("element %d: %v, want %v", i, got[i], want)
		}
	}
	if c := nodesByOp(m.Graph); c["MatMul"] != 2 || c[tlite.MatMulQ] != 0 || m.Opset(tlite.Domain) != 0 {
		t.Errorf("fp16 must only retype weights: nodes %v, tlite opset %d", c, m.Opset(tlite.Domain))
	}
}

func TestOptionErrors(t *testing.T) {
	m := (&modelB{ins: []pb{vi("x", 1, 64)}, outs: []pb{vi("y")}}).
		init("w", []int64{64, 64}, weights(64, 64, 0)).node("MatMul", "mm", []string{"x", "w"}, []string{"y"}).parse(t)
	for _, o := range []Options{{Format: quant.Format(99)}, {Format: quant.E0M4, Group: 48}, {Format: quant.E0M4, MinSize: -1}} {
		if _, err := Quantize(m, o); err == nil {
			t.Errorf("Quantize with %+v: no error", o)
		}
	}
}
