package graph

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/tlite/tlite/graph/dtype"
)

// Half-precision bit patterns with their exact values, written out by hand so
// the expectations do not come from the converters under use.
var halfBits = []uint16{0x3800, 0xC000, 0x3D00, 0x7BFF, 0x8000, 0x0400}
var halfVals = []float32{0.5, -2, 1.25, 65504, float32(math.Copysign(0, -1)), 1.0 / 16384}

func subgraphThen() pb {
	// The nested If reads "b" (root initializer) explicitly and its branches
	// read "k" (root Constant output): two levels of outer references.
	inner := func(name string) pb {
		return graphMsg{
			name:    name,
			nodes:   []pb{node("", "Identity", []string{"k"}, []string{name + "_out"})},
			outputs: []pb{vinfoNoShape(name+"_out", dtype.Int64)},
		}.enc()
	}
	return graphMsg{
		name: "then",
		nodes: []pb{
			node("", "Identity", []string{"c"}, []string{"t_out"}),
			node("", "If", []string{"b"}, []string{"t_nested"},
				attrGraph("then_branch", inner("inner_then")), attrGraph("else_branch", inner("inner_else"))),
		},
		outputs: []pb{vinfoNoShape("t_out", dtype.Float16)},
	}.enc()
}

func featureModel() pb {
	tinyGraph := func(name string) pb {
		return graphMsg{
			name:    name,
			nodes:   []pb{node("", "Identity", []string{name + "_in"}, []string{name + "_out"})},
			inputs:  []pb{vinfo(name+"_in", dtype.Float32, 1)},
			outputs: []pb{vinfo(name+"_out", dtype.Float32, 1)},
		}.enc()
	}
	t1 := tensorRaw("t1", dtype.Float32, []int64{2}, le32f(1, 2))
	t2 := tensorRaw("t2", dtype.Float16, []int64{1}, le16s(0x3C00))
	custom := node("custom", "MyOp", []string{"a", "", "w_in"}, []string{"c", ""},
		attrFloat("f", 0.25), attrInt("i", -3), attrString("s", "hello"), attrTensor("t", t1),
		attrGraph("g", tinyGraph("g0")), attrFloats("fs", 1.5, -2), attrInts("is", -1, 0, 1<<40),
		attrStrings("ss", "a", "bc"), attrTensors("ts", t1, t2), attrGraphs("gs", tinyGraph("g1"), tinyGraph("g2")))
	custom = custom.s(7, "com.example")
	elseG := graphMsg{
		name:    "else",
		nodes:   []pb{node("", "Neg", []string{"a"}, []string{"e_out"})},
		outputs: []pb{vinfoNoShape("e_out", dtype.Float16)},
	}.enc()

	halfTyped := dimsField(nil, []int64{2, 3}).v(2, int64(dtype.Float16)).s(8, "h_typed")
	var hb []int64
	for _, h := range halfBits {
		hb = append(hb, int64(h))
	}
	halfTyped = halfTyped.packed(5, hb...)
	typed := func(name string, dt dtype.Type, dims []int64) pb {
		return dimsField(nil, dims).v(2, int64(dt)).s(8, name)
	}
	inits := []pb{
		tensorRaw("h_raw", dtype.Float16, []int64{2, 3}, le16s(halfBits...)),
		halfTyped,
		typed("bf", dtype.BFloat16, []int64{3}).packed(5, 0x3F80, 0xC040, 0x4049),
		typed("i8", dtype.Int8, []int64{3}).packed(5, -128, 127, -1),
		typed("u8", dtype.Uint8, []int64{2}).packed(5, 0, 255),
		typed("i16", dtype.Int16, []int64{2}).packed(5, -32768, 32767),
		typed("u16", dtype.Uint16, []int64{1}).packed(5, 65535),
		typed("b", dtype.Bool, []int64{3}).packed(5, 1, 0, 1),
		typed("i32", dtype.Int32, []int64{2}).v(5, -5).v(5, math.MaxInt32),
		typed("i64u", dtype.Int64, []int64{2}).v(7, -7).v(7, 1<<40),
		typed("i64p", dtype.Int64, []int64{3}).packed(7, math.MinInt64, 0, math.MaxInt64),
		typed("f_unpacked", dtype.Float32, []int64{2}).f32(4, 1.5).f32(4, -0.25),
		typed("f_packed", dtype.Float32, []int64{1, 2}).b(4, le32f(3, -4)),
		typed("d", dtype.Float64, []int64{2}).f64(10, 3.5).f64(10, -0.125),
		typed("u32", dtype.Uint32, []int64{1}).v(11, math.MaxUint32),
		typed("u64", dtype.Uint64, []int64{1}).v(11, -1), // 2^64-1 as a varint
		tensorRaw("w_in", dtype.Float32, []int64{2}, le32f(1, 2)),
		tensorRaw("scalar", dtype.Float32, nil, le32f(7)),
		typed("empty", dtype.Float32, []int64{0, 5}),
	}
	g := graphMsg{
		name: "features",
		nodes: []pb{
			node("", "Add", []string{"x", "h_raw"}, []string{"a"}),
			custom,
			node("", "Constant", nil, []string{"k"}, attrInts("value_ints", 1, 2, 3)),
			node("", "If", []string{"b"}, []string{"r"}, attrGraph("then_branch", subgraphThen()), attrGraph("else_branch", elseG)),
		},
		inits:   inits,
		inputs:  []pb{vinfo("x", dtype.Float16, "batch", 4, nil), vinfo("w_in", dtype.Float32, 2)},
		outputs: []pb{vinfo("r", dtype.Float16, "batch", 4, nil), vinfo("k", dtype.Int64, 3)},
		infos:   []pb{vinfo("a", dtype.Float16, "batch", 4, nil)},
	}
	return model(g.enc(), map[string]int64{"ai.onnx": 17, "com.example": 1})
}

func mustParse(t testing.TB, data []byte, dir string) *Model {
	t.Helper()
	m, err := Parse(data, dir)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestParseFeatures(t *testing.T) {
	data := featureModel()
	m := mustParse(t, data, "")
	g := m.Graph
	if m.IRVersion != 8 || m.Producer != "pb_test" || m.ProducerVersion != "0.1" || m.Metadata["author"] != "tests" {
		t.Errorf("model fields: ir %d producer %q %q metadata %v", m.IRVersion, m.Producer, m.ProducerVersion, m.Metadata)
	}
	if m.Opset("") != 17 || m.Opset("ai.onnx") != 17 || m.Opset("com.example") != 1 || m.Opset("nope") != 0 {
		t.Errorf("opsets %v", m.Opsets)
	}
	if got := valueNames(g.Inputs); !equalStrings(got, []string{"x"}) {
		t.Errorf("runtime inputs %q, want [x] (w_in is an initializer)", got)
	}
	x := g.Inputs[0]
	wantDims := []Dim{{Value: -1, Param: "batch"}, {Value: 4}, {Value: -1}}
	if x.Type != dtype.Float16 || fmt.Sprint(x.Declared) != fmt.Sprint(wantDims) {
		t.Errorf("x: %v %v, want float16 %v", x.Type, x.Declared, wantDims)
	}
	if x.Declared[2].Known() || !x.Declared[1].Known() || x.Declared[0].String() != "batch" || x.Declared[2].String() != "?" {
		t.Errorf("Dim helpers wrong on %v", x.Declared)
	}
	if a := g.Value("a"); fmt.Sprint(a.Declared) != fmt.Sprint(wantDims) || a.Type != dtype.Float16 {
		t.Errorf("value_info not applied to a: %v %v", a.Type, a.Declared)
	}
	if len(g.Initializers) != 19 {
		t.Errorf("%d initializers, want 19", len(g.Initializers))
	}

	floats := map[string][]float32{
		"h_raw": halfVals, "h_typed": halfVals, "bf": {1, -3, 3.140625},
		"f_unpacked": {1.5, -0.25}, "f_packed": {3, -4}, "d": {3.5, -0.125},
		"w_in": {1, 2}, "scalar": {7}, "empty": {}, "u64": {float32(math.MaxUint64)},
	}
	for name, want := range floats {
		v := g.Value(name)
		got, err := v.Const.Float32s()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || len(got) != len(want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
		for i := range got {
			if math.Signbit(float64(got[i])) != math.Signbit(float64(want[i])) {
				t.Errorf("%s[%d] sign lost", name, i)
			}
		}
	}
	ints := map[string][]int64{
		"i8": {-128, 127, -1}, "u8": {0, 255}, "i16": {-32768, 32767}, "u16": {65535},
		"b": {1, 0, 1}, "i32": {-5, math.MaxInt32}, "i64u": {-7, 1 << 40},
		"i64p": {math.MinInt64, 0, math.MaxInt64}, "u32": {math.MaxUint32}, "u64": {-1},
	}
	for name, want := range ints {
		got, err := g.Value(name).Const.Int64s()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if _, err := g.Value("h_raw").Const.Int64s(); err == nil {
		t.Errorf("Int64s of a float16 tensor should fail")
	}
	if s := g.Value("scalar"); s.Declared == nil || len(s.Declared) != 0 || s.Const.NumElements() != 1 {
		t.Errorf("scalar initializer: declared %v, %d elements", s.Declared, s.Const.NumElements())
	}

	// raw_data must be a view into the parsed bytes, not a copy.
	raw := g.Value("h_raw").Const.Data
	if !within(raw, data) {
		t.Errorf("raw_data of h_raw is a copy, want a view into the model bytes")
	}

	wantNames := []string{"Add_0", "custom", "Constant_2", "If_3"}
	for i, n := range g.Nodes {
		if n.Name != wantNames[i] {
			t.Errorf("node %d named %q, want %q", i, n.Name, wantNames[i])
		}
	}
	c := g.Nodes[1]
	if c.Domain != "com.example" || c.Inputs[1] != nil || c.Outputs[1] != nil || len(c.Inputs) != 3 || len(c.Outputs) != 2 {
		t.Errorf("custom node: domain %q inputs %v outputs %v", c.Domain, c.Inputs, c.Outputs)
	}
	checkAllAttrs(t, c)

	k := g.Value("k")
	if kv, err := k.Const.Int64s(); err != nil || fmt.Sprint(kv) != "[1 2 3]" || k.Type != dtype.Int64 {
		t.Errorf("Constant output k: %v %v %v", kv, err, k.Type)
	}

	ifNode := g.Nodes[3]
	imp := valueNames(ifNode.ImplicitInputs())
	for _, want := range []string{"c", "k", "a", "b"} {
		if !containsString(imp, want) {
			t.Errorf("If implicit inputs %q lack %q", imp, want)
		}
	}
	if !containsNode(g.Value("c").Consumers, ifNode) {
		t.Errorf("c's consumers %v lack the If whose branch reads it", g.Value("c").Consumers)
	}
	then := ifNode.AttrGraph("then_branch")
	if then.Parent != g || then.Owner != ifNode {
		t.Errorf("then_branch parent/owner links wrong")
	}
	for _, name := range []string{"c", "b", "k"} {
		if v := then.Value(name); v == nil || !v.Outer || v.Type != g.Value(name).Type {
			t.Errorf("then_branch outer %q: %+v", name, v)
		}
	}
	nested := then.Nodes[1].AttrGraph("then_branch")
	if v := nested.Value("k"); v == nil || !v.Outer || nested.Lookup("k") != v || nested.Parent.Parent.Lookup("k") != k {
		t.Errorf("doubly nested outer reference to k not kept")
	}
	if r := g.Value("r"); r.Type != dtype.Float16 || r.Producer != ifNode || len(g.Outputs) != 2 {
		t.Errorf("output r: %v produced by %v", r.Type, r.Producer)
	}
}

func checkAllAttrs(t *testing.T, n *Node) {
	t.Helper()
	if n.AttrFloat("f", 0) != 0.25 || n.AttrInt("i", 0) != -3 || n.AttrString("s", "") != "hello" {
		t.Errorf("scalar attrs: %v %v %q", n.AttrFloat("f", 0), n.AttrInt("i", 0), n.AttrString("s", ""))
	}
	if n.AttrInt("f", 99) != 99 || n.AttrInt("missing", 5) != 5 {
		t.Errorf("AttrInt should return the default for other kinds and missing names")
	}
	if tv, err := n.AttrTensor("t").Float32s(); err != nil || fmt.Sprint(tv) != "[1 2]" {
		t.Errorf("tensor attr: %v %v", tv, err)
	}
	if g := n.AttrGraph("g"); g == nil || g.Name != "g0" || len(g.Nodes) != 1 || g.Inputs[0].Name != "g0_in" {
		t.Errorf("graph attr: %+v", g)
	}
	if fs, ok := n.AttrFloats("fs"); !ok || fmt.Sprint(fs) != "[1.5 -2]" {
		t.Errorf("floats attr: %v", fs)
	}
	if is, ok := n.AttrInts("is"); !ok || fmt.Sprint(is) != fmt.Sprint([]int64{-1, 0, 1 << 40}) {
		t.Errorf("ints attr: %v", is)
	}
	if ss, ok := n.AttrStrings("ss"); !ok || !equalStrings(ss, []string{"a", "bc"}) {
		t.Errorf("strings attr: %q", ss)
	}
	if ts := n.Attr("ts"); ts.Kind != KindTensors || len(ts.Tensors) != 2 || ts.Tensors[1].Type != dtype.Float16 {
		t.Errorf("tensors attr: %+v", ts)
	} else if v, _ := ts.Tensors[1].Float32s(); fmt.Sprint(v) != "[1]" {
		t.Errorf("tensors attr second value %v", v)
	}
	if gs := n.Attr("gs"); gs.Kind != KindGraphs || len(gs.Graphs) != 2 || gs.Graphs[1].Name != "g2" || gs.Graphs[1].Parent != n.Graph() {
		t.Errorf("graphs attr: %+v", gs)
	}
	if len(n.Subgraphs()) != 3 {
		t.Errorf("%d subgraphs, want 3", len(n.Subgraphs()))
	}
}

// within reports whether b lies inside the memory of buf.
func within(b, buf []byte) bool {
	if len(b) == 0 || len(buf) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	lo := uintptr(unsafe.Pointer(&buf[0]))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(buf))
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// extModel has three tensors in external files: two in one file (which must
// be mapped once) and one in a subfolder.
func extModel(loc1, off1, len1 string) pb {
	g := graphMsg{
		name: "ext",
		nodes: []pb{
			node("", "Add", []string{"w1", "w2"}, []string{"s"}),
			node("", "Add", []string{"s", "w3"}, []string{"y"}),
		},
		inits: []pb{
			tensorExt("w1", dtype.Float32, []int64{2, 2}, loc1, off1, len1),
			tensorExt("w2", dtype.Float16, []int64{2, 2}, "weights.bin", "64", ""),
			tensorExt("w3", dtype.Float32, []int64{4}, "sub/more.bin", "", "16"),
		},
		outputs: []pb{vinfo("y", dtype.Float32, 2, 2)},
	}
	return model(g.enc(), defaultOpset())
}

func writeExtFiles(t testing.TB, dir string) {
	t.Helper()
	w := make([]byte, 128)
	copy(w[16:], le32f(1, -2, 3.5, 4))
	copy(w[64:], le16s(0x3C00, 0xC000, 0x3800, 0x0000))
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), w, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "more.bin"), le32f(10, 20, 30, 40), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestExternalData(t *testing.T) {
	dir := t.TempDir()
	writeExtFiles(t, dir)
	data := extModel("weights.bin", "16", "16")
	path := filepath.Join(dir, "model.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	g := m.Graph
	want := map[string]string{"w1": "[1 -2 3.5 4]", "w2": "[1 -2 0.5 0]", "w3": "[10 20 30 40]"}
	for name, w := range want {
		c := g.Value(name).Const
		got, err := c.Float32s()
		if err != nil || fmt.Sprint(got) != w || !c.External {
			t.Errorf("%s = %v (%v), external %v; want %s", name, got, err, c.External, w)
		}
	}
	// w1 (offset 16) and w2 (offset 64) are views into one mapping of weights.bin.
	p1 := uintptr(unsafe.Pointer(&g.Value("w1").Const.Data[0]))
	p2 := uintptr(unsafe.Pointer(&g.Value("w2").Const.Data[0]))
	if p2-p1 != 48 {
		t.Errorf("w1 and w2 are %d bytes apart, want 48 (one mapping of weights.bin)", p2-p1)
	}
	if len(m.maps) != 3 {
		t.Errorf("%d mappings, want 3 (model, weights.bin, sub/more.bin)", len(m.maps))
	}
	w1 := g.Value("w1").Const
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if w1.Data != nil {
		t.Errorf("Close left a view into unmapped memory")
	}
	if _, err := w1.Float32s(); err == nil {
		t.Errorf("Float32s after Close should fail")
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// In memory with a folder: same result; without one: rejected.
	m2 := mustParse(t, data, dir)
	if got, _ := m2.Graph.Value("w3").Const.Float32s(); fmt.Sprint(got) != want["w3"] {
		t.Errorf("Parse with dir: w3 = %v", got)
	}
	if _, err := Parse(data, ""); err == nil || !strings.Contains(err.Error(), "without a folder") {
		t.Errorf("Parse without a folder: %v", err)
	}

	// A symlink that stays inside the folder is fine.
	if err := os.Symlink("weights.bin", filepath.Join(dir, "alias.bin")); err != nil {
		t.Fatal(err)
	}
	m3 := mustParse(t, extModel("alias.bin", "16", ""), dir)
	if got, _ := m3.Graph.Value("w1").Const.Float32s(); fmt.Sprint(got) != want["w1"] {
		t.Errorf("through an inside symlink: w1 = %v", got)
	}
}

func TestLoadMissingAndEmpty(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "nope.onnx")); err == nil {
		t.Errorf("Load of a missing file succeeded")
	}
	empty := filepath.Join(dir, "empty.onnx")
	os.WriteFile(empty, nil, 0o644)
	if _, err := Load(empty); err == nil || !strings.Contains(err.Error(), "no graph") {
		t.Errorf("Load of an empty file: %v", err)
	}
	if _, err := Load(dir); err == nil {
		t.Errorf("Load of a folder succeeded")
	}
	ok := filepath.Join(dir, "ok.onnx")
	os.WriteFile(ok, simpleModel(), 0o644)
	m, err := Load(ok)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Dir != dir || len(m.Graph.Nodes) != 1 || m.Graph.Nodes[0].Name != "Relu_0" {
		t.Errorf("simple model: dir %q nodes %v", m.Dir, m.Graph.Nodes)
	}
}

// errorCase is a model that must be rejected with an error mentioning every
// string in want.
type errorCase struct {
	name string
	data []byte
	want []string
}

func TestValidationErrors(t *testing.T) {
	mk := func(g graphMsg) []byte { return model(g.enc(), defaultOpset()) }
	in := []pb{vinfo("x", dtype.Float32, 2)}
	out := []pb{vinfo("y", dtype.Float32, 2)}
	cases := []errorCase{
		{"dangling input", mk(graphMsg{name: "g", inputs: in, outputs: out,
			nodes: []pb{node("n1", "Add", []string{"x", "ghost"}, []string{"y"})}}),
			[]string{`"n1"`, `"ghost"`, "dangling"}},
		{"duplicate producer", mk(graphMsg{name: "g", inputs: in, outputs: out,
			nodes: []pb{node("p1", "Relu", []string{"x"}, []string{"y"}), node("p2", "Neg", []string{"x"}, []string{"y"})}}),
			[]string{`"y"`, `"p1"`, `"p2"`, "produced by both"}},
		{"output redefines input", mk(graphMsg{name: "g", inputs: in, outputs: out,
			nodes: []pb{node("p1", "Relu", []string{"x"}, []string{"x"})}}),
			[]string{`"p1"`, `"x"`, "redefines"}},
		{"cycle", mk(graphMsg{name: "g", inputs: in, outputs: out,
			nodes: []pb{
				node("c1", "Add", []string{"x", "b"}, []string{"a"}),
				node("c2", "Relu", []string{"a"}, []string{"b"}),
				node("c3", "Relu", []string{"a"}, []string{"y"}),
			}}),
			[]string{"cycle", `"c1"`, `"c2"`}},
		{"self loop", mk(graphMsg{name: "g", inputs: in, outputs: out,
			nodes: []pb{node("s1", "Add", []string{"x", "y"}, []string{"y"})}}),
			[]string{"cycle", `"s1"`}},
		{"output never produced", mk(graphMsg{name: "g", inputs: in, outputs: []pb{vinfo("nowhere", dtype.Float32)},
			nodes: []pb{node("", "Relu", []string{"x"}, []string{"y"})}}),
			[]string{`"nowhere"`, "never produced"}},
		{"unknown elem type in value info", mk(graphMsg{name: "g", inputs: []pb{vinfo("x", dtype.Type(99), 2)}, outputs: []pb{vinfo("x", dtype.Float32)}}),
			[]string{`"x"`, "unknown element type 99"}},
		{"unknown elem type in tensor", mk(graphMsg{name: "g", outputs: []pb{vinfo("w", dtype.Float32)},
			inits: []pb{tensorRaw("w", dtype.Type(77), []int64{1}, []byte{0})}}),
			[]string{`"w"`, "unknown element type 77"}},
		{"initializer size mismatch", mk(graphMsg{name: "g", outputs: []pb{vinfo("w", dtype.Float32)},
			inits: []pb{tensorRaw("w", dtype.Float32, []int64{2, 3}, make([]byte, 20))}}),
			[]string{`"w"`, "20 bytes", "need 24"}},
		{"typed count mismatch", mk(graphMsg{name: "g", outputs: []pb{vinfo("w", dtype.Float32)},
			inits: []pb{dimsField(nil, []int64{3}).v(2, 1).s(8, "w").f32(4, 1)}}),
			[]string{`"w"`, "float_data has 1 values", "need 3"}},
		{"typed field of wrong type", mk(graphMsg{name: "g", outputs: []pb{vinfo("w", dtype.Float32)},
			inits: []pb{dimsField(nil, []int64{1}).v(2, 1).s(8, "w").v(7, 1)}}),
			[]string{`"w"`, "int64_data"}},
		{"no data", mk(graphMsg{name: "g", outputs: []pb{vinfo("w", dtype.Float32)},
			inits: []pb{dimsField(nil, []int64{4}).v(2, 1).s(8, "w")}}),
			[]string{`"w"`, "no data"}},
		{"string tensor", mk(graphMsg{name: "g", outputs: []pb{vinfo("w", dtype.String)},
			inits: []pb{dimsField(nil, []int64{1}).v(2, int64(dtype.String)).s(8, "w").s(6, "hi")}}),
			[]string{`"w"`, "string tensors are not supported"}},
		{"sparse initializer", pb(mk(graphMsg{name: "g"})).m(7, pb(nil).m(15, pb{})),
			[]string{"sparse initializers are not supported"}},
		{"sparse attribute", mk(graphMsg{name: "g", inputs: in, outputs: out,
			nodes: []pb{node("sp", "Relu", []string{"x"}, []string{"y"}, pb(nil).s(1, "sv").v(20, 11).m(22, pb{}))}}),
			[]string{`"sp"`, `"sv"`, "sparse"}},
		{"segment", mk(graphMsg{name: "g", outputs: []pb{vinfo("w", dtype.Float32)},
			inits: []pb{tensorRaw("w", dtype.Float32, []int64{1}, le32f(1)).m(3, pb(nil).v(1, 0).v(2, 1))}}),
			[]string{`"w"`, "segment"}},
		{"duplicate attribute", mk(graphMsg{name: "g", inputs: in, outputs: out,
			nodes: []pb{node("da", "Relu", []string{"x"}, []string{"y"}, attrInt("z", 1), attrInt("z", 2))}}),
			[]string{`"da"`, `"z"`, "twice"}},
		{"sequence input", mk(graphMsg{name: "g",
			inputs: []pb{pb(nil).s(1, "seq").m(2, pb(nil).m(4, pb{}))}}),
			[]string{`"seq"`, "sequence"}},
		{"no op type", mk(graphMsg{name: "g", inputs: in, outputs: in,
			nodes: []pb{pb(nil).s(1, "x").s(2, "y")}}),
			[]string{"node 0", "op_type"}},
		{"dangling in subgraph", mk(graphMsg{name: "g", inputs: in, outputs: out,
			nodes: []pb{node("iff", "If", []string{"x"}, []string{"y"}, attrGraph("then_branch", graphMsg{name: "sub",
				nodes: []pb{node("inner", "Relu", []string{"nothere"}, []string{"o"})}, outputs: []pb{vinfo("o", dtype.Float32)}}.enc()))}}),
			[]string{`"iff"`, `"sub"`, `"inner"`, `"nothere"`, "dangling"}},
		{"no graph", pb(nil).v(1, 8), []string{"no graph"}},
		{"groups", pb(nil).tag(7, 3), []string{"wire type 3"}},
		{"wrong wire type", pb(nil).v(2, 5), []string{"producer_name", "wire type 0"}},
		{"conflicting opsets", pb(nil).m(8, pb(nil).v(2, 13)).m(8, pb(nil).s(1, "ai.onnx").v(2, 17)), []string{"opset_import", "twice"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Parse(c.data, "")
			if err == nil {
				m.Close()
				t.Fatalf("accepted, want an error mentioning %q", c.want)
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestValueInfoOnlyAnnotates(t *testing.T) {
	// value_info of unknown names is ignored; of non-tensor types leaves the
	// value untyped; an initializer's own dims win over a declaration.
	g := graphMsg{
		name:    "g",
		nodes:   []pb{node("", "Add", []string{"x", "w"}, []string{"y"})},
		inits:   []pb{tensorRaw("w", dtype.Float32, []int64{2}, le32f(1, 2))},
		inputs:  []pb{vinfo("x", dtype.Float32, 2), vinfo("w", dtype.Float32, 7)},
		outputs: []pb{vinfo("y", dtype.Float32, 2)},
		infos:   []pb{vinfo("gone", dtype.Float32, 1), pb(nil).s(1, "y").m(2, pb(nil).m(4, pb{}))},
	}
	m := mustParse(t, model(g.enc(), defaultOpset()), "")
	if w := m.Graph.Value("w"); fmt.Sprint(w.Declared) != "[2]" || !w.IsInitializer() {
		t.Errorf("initializer w declared %v", w.Declared)
	}
	if m.Graph.Value("gone") != nil {
		t.Errorf("value_info created a value nobody produces")
	}
	if !bytes.Equal(m.Graph.Value("w").Const.Data, le32f(1, 2)) {
		t.Errorf("w data wrong")
	}
}

func containsNode(ns []*Node, n *Node) bool {
	for _, m := range ns {
		if m == n {
			return true
		}
	}
	return false
}
