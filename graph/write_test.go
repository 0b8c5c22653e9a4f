package graph

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/owulveryck/onnx-go/backend/testbackend"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// The reader is the oracle for the writer: a model parsed from an
// independent encoder (PyTorch's exporter, onnx-go's corpus, the pb test
// encoder) must come back structurally identical after Marshal/Write and a
// second parse, and Debian's onnx package must accept what is written.

// sameModel reports every structural difference between want and got.
func sameModel(t testing.TB, want, got *Model) {
	t.Helper()
	type field struct {
		name string
		w, g any
	}
	for _, f := range []field{
		{"ir_version", want.IRVersion, got.IRVersion},
		{"producer", want.Producer, got.Producer},
		{"producer_version", want.ProducerVersion, got.ProducerVersion},
		{"domain", want.Domain, got.Domain},
		{"model_version", want.ModelVersion, got.ModelVersion},
		{"doc", want.Doc, got.Doc},
		{"opsets", want.Opsets, got.Opsets},
		{"metadata", want.Metadata, got.Metadata},
	} {
		if !reflect.DeepEqual(f.w, f.g) {
			t.Errorf("model %s: %v, want %v", f.name, f.g, f.w)
		}
	}
	sameGraph(t, "graph", want.Graph, got.Graph)
}

// sameGraph compares two graphs, subgraphs recursively; path names the graph
// in messages.
func sameGraph(t testing.TB, path string, want, got *Graph) {
	t.Helper()
	path += fmt.Sprintf("(%q)", want.Name)
	if want.Name != got.Name || want.Doc != got.Doc {
		t.Errorf("%s: name/doc %q/%q, want %q/%q", path, got.Name, got.Doc, want.Name, want.Doc)
	}
	sameValues(t, path+" inputs", want.Inputs, got.Inputs)
	sameValues(t, path+" outputs", want.Outputs, got.Outputs)
	sameValues(t, path+" initializers", want.Initializers, got.Initializers)
	for i := range min(len(want.Initializers), len(got.Initializers)) {
		w, g := want.Initializers[i], got.Initializers[i]
		sameTensor(t, path+" initializer "+w.Name, w.Const, g.Const)
		if !g.IsInitializer() {
			t.Errorf("%s: %q is not an initializer after the round trip", path, g.Name)
		}
	}
	if w, g := valueNames(want.OuterValues()), valueNames(got.OuterValues()); !equalStrings(w, g) {
		t.Errorf("%s: outer values %q, want %q", path, g, w)
	}
	if len(want.Nodes) != len(got.Nodes) {
		t.Errorf("%s: %d nodes, want %d", path, len(got.Nodes), len(want.Nodes))
		return
	}
	for i, wn := range want.Nodes {
		gn := got.Nodes[i]
		np := fmt.Sprintf("%s node %d %v", path, i, wn)
		if wn.Name != gn.Name || wn.OpType != gn.OpType || wn.Domain != gn.Domain || wn.Doc != gn.Doc {
			t.Errorf("%s: got %v domain %q doc %q, want domain %q doc %q", np, gn, gn.Domain, gn.Doc, wn.Domain, wn.Doc)
		}
		if w, g := valueNames(wn.Inputs), valueNames(gn.Inputs); !equalStrings(w, g) {
			t.Errorf("%s: inputs %q, want %q", np, g, w)
		}
		// Node outputs carry what value_info said about them.
		sameValues(t, np+" outputs", wn.Outputs, gn.Outputs)
		if w, g := sortedAttrNames(wn.Attrs), sortedAttrNames(gn.Attrs); !equalStrings(w, g) {
			t.Errorf("%s: attributes %q, want %q", np, g, w)
			continue
		}
		for name, wa := range wn.Attrs {
			sameAttr(t, np+" attribute "+name, wa, gn.Attrs[name])
		}
	}
}

// sameValues compares value lists by name, element type, declared dims and
// doc; nil entries (omitted optional outputs) must line up.
func sameValues(t testing.TB, what string, want, got []*Value) {
	t.Helper()
	if w, g := valueNames(want), valueNames(got); !equalStrings(w, g) {
		t.Errorf("%s: %q, want %q", what, g, w)
		return
	}
	for i, w := range want {
		g := got[i]
		if w == nil || g == nil {
			if w != g {
				t.Errorf("%s %d: %v, want %v", what, i, g, w)
			}
			continue
		}
		if w.Type != g.Type || !sameDims(w.Declared, g.Declared) || w.Doc != g.Doc {
			t.Errorf("%s %q: %v %s doc %q, want %v %s doc %q", what, w.Name, g.Type, fmtDims(g.Declared), g.Doc, w.Type, fmtDims(w.Declared), w.Doc)
		}
	}
}

// sameDims tells a nil shape (rank unknown) from an empty one (scalar).
func sameDims(a, b []Dim) bool {
	return (a == nil) == (b == nil) && reflect.DeepEqual(append([]Dim{}, a...), append([]Dim{}, b...))
}

func fmtDims(d []Dim) string {
	if d == nil {
		return "<no shape>"
	}
	return fmt.Sprint(d)
}

func sameAttr(t testing.TB, what string, want, got *Attr) {
	t.Helper()
	if want.Kind != got.Kind || want.Name != got.Name || want.Doc != got.Doc {
		t.Errorf("%s: %q %v doc %q, want %q %v doc %q", what, got.Name, got.Kind, got.Doc, want.Name, want.Kind, want.Doc)
		return
	}
	bad := false
	switch want.Kind {
	case KindFloat:
		bad = math.Float32bits(want.F) != math.Float32bits(got.F)
	case KindInt:
		bad = want.I != got.I
	case KindString:
		bad = want.S != got.S
	case KindFloats:
		bad = len(want.Floats) != len(got.Floats)
		for i := range min(len(want.Floats), len(got.Floats)) {
			bad = bad || math.Float32bits(want.Floats[i]) != math.Float32bits(got.Floats[i])
		}
	case KindInts:
		bad = fmt.Sprint(want.Ints) != fmt.Sprint(got.Ints) || len(want.Ints) != len(got.Ints)
	case KindStrings:
		bad = !equalStrings(want.Strings, got.Strings) || len(want.Strings) != len(got.Strings)
	case KindTensor:
		sameTensor(t, what, want.T, got.T)
	case KindTensors:
		if len(want.Tensors) != len(got.Tensors) {
			bad = true
			break
		}
		for i := range want.Tensors {
			sameTensor(t, fmt.Sprintf("%s[%d]", what, i), want.Tensors[i], got.Tensors[i])
		}
	case KindGraph:
		sameGraph(t, what, want.G, got.G)
	case KindGraphs:
		if len(want.Graphs) != len(got.Graphs) {
			bad = true
			break
		}
		for i := range want.Graphs {
			sameGraph(t, fmt.Sprintf("%s[%d]", what, i), want.Graphs[i], got.Graphs[i])
		}
	}
	if bad {
		t.Errorf("%s: %+v, want %+v", what, *got, *want)
	}
}

func sameTensor(t testing.TB, what string, want, got *Tensor) {
	t.Helper()
	if want == nil || got == nil {
		if want != got {
			t.Errorf("%s: tensor %v, want %v", what, got, want)
		}
		return
	}
	if want.Name != got.Name || want.Type != got.Type || fmt.Sprint(want.Dims) != fmt.Sprint(got.Dims) {
		t.Errorf("%s: tensor %q %v %v, want %q %v %v", what, got.Name, got.Type, got.Dims, want.Name, want.Type, want.Dims)
	}
	if !bytes.Equal(want.Data, got.Data) {
		t.Errorf("%s: tensor data differ (%d vs %d bytes)", what, len(got.Data), len(want.Data))
	}
}

// modelFiles lists the exported models in the repository's testdata and in
// this package's testdata. Full-size models (the *_full folders) are left
// out: they are generated on demand, hundreds of megabytes each (beyond a
// unit test's time budget here), and may be mid-export while tests run;
// BenchmarkWriteFull uses one when present.
func modelFiles(t testing.TB) []string {
	var files []string
	for _, pat := range []string{"../testdata/models/*/model.onnx", "../testdata/models/*/model_ext.onnx", "testdata/*.onnx"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if !strings.HasSuffix(filepath.Base(filepath.Dir(f)), "_full") {
				files = append(files, f)
			}
		}
	}
	if len(files) < 8 {
		t.Fatalf("found only %d test models: %q", len(files), files)
	}
	return files
}

func TestWriteRoundTripModels(t *testing.T) {
	for _, path := range modelFiles(t) {
		t.Run(strings.TrimPrefix(path, "../"), func(t *testing.T) {
			orig, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			defer orig.Close()

			b, err := Marshal(orig)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse(b, "")
			if err != nil {
				t.Fatalf("parsing the marshalled model: %v", err)
			}
			sameModel(t, orig, back)
			forEachTensor(t, back.Graph, func(x *Tensor) {
				if x.External {
					t.Errorf("Marshal left tensor %q external", x.Name)
				}
			})
			back.Close()

			// Write with external data, then load through the files.
			dir := t.TempDir()
			out := filepath.Join(dir, "m.onnx")
			if err := Write(orig, out, WriteOptions{ExternalThreshold: 100, Align: 4096}); err != nil {
				t.Fatal(err)
			}
			w, err := Load(out)
			if err != nil {
				t.Fatalf("loading the written model: %v", err)
			}
			defer w.Close()
			sameModel(t, orig, w)
			checkExternal(t, w, 100, 4096)
		})
	}
}

// forEachTensor visits every tensor of g and its subgraphs.
func forEachTensor(t testing.TB, g *Graph, fn func(*Tensor)) {
	if err := walkTensors(g, 0, func(x *Tensor) error { fn(x); return nil }); err != nil {
		t.Fatal(err)
	}
}

// checkExternal checks that exactly the tensors of at least threshold bytes
// are external, and that each is a view whose address is a multiple of
// align (mappings start on a page boundary, so this checks the offset in
// the data file for align <= the page size).
func checkExternal(t testing.TB, m *Model, threshold, align int) {
	t.Helper()
	n := 0
	forEachTensor(t, m.Graph, func(x *Tensor) {
		big := len(x.Data) >= threshold
		if x.External != big {
			t.Errorf("tensor %q of %d bytes: External %v with threshold %d", x.Name, len(x.Data), x.External, threshold)
		}
		if big {
			n++
			if p := uintptr(unsafe.Pointer(unsafe.SliceData(x.Data))); p%uintptr(align) != 0 {
				t.Errorf("tensor %q: view at %#x is not %d-aligned", x.Name, p, align)
			}
		}
	})
	t.Logf("%d external tensors", n)
}

// TestWriteCorpus round-trips every case of onnx-go's backend corpus.
func TestWriteCorpus(t *testing.T) {
	cases := testbackend.GetAllRegisteredTests()
	sort.Slice(cases, func(i, j int) bool { return cases[i]().Title < cases[j]().Title })
	done := 0
	for _, mk := range cases {
		tc := mk()
		orig, err := Parse(tc.ModelB, "")
		if err != nil {
			t.Errorf("%s: Parse: %v", tc.Title, err) // TestCorpus says more
			continue
		}
		b, err := Marshal(orig)
		if err != nil {
			t.Errorf("%s: Marshal: %v", tc.Title, err)
			continue
		}
		back, err := Parse(b, "")
		if err != nil {
			t.Errorf("%s: parsing the marshalled model: %v", tc.Title, err)
			continue
		}
		t.Run(tc.Title, func(t *testing.T) { sameModel(t, orig, back) })
		done++
	}
	if done < 300 {
		t.Errorf("round-tripped %d corpus cases, expected about 348", done)
	}
	t.Logf("%d of %d corpus cases round-tripped", done, len(cases))
}

// TestWriteFeatures round-trips the reader's feature model (every attribute
// kind, subgraphs with outer references and their own initializers,
// omitted optional inputs) plus docs and metadata set here.
func TestWriteFeatures(t *testing.T) {
	m := mustParse(t, featureModel(), "")
	m.Doc, m.Domain, m.ModelVersion, m.ProducerVersion = "model doc", "org.test", 7, "9.9"
	m.Metadata["k"] = "v"
	m.Opsets["com.microsoft"] = 1
	g := m.Graph
	g.Doc = "graph doc"
	g.Inputs[0].Doc = "input doc"
	for _, n := range g.Nodes {
		n.Doc = "doc of " + n.Name
		for _, a := range n.Attrs {
			a.Doc = "attr doc"
		}
	}
	b, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back := mustParse(t, b, "")
	sameModel(t, m, back)
	checkAllAttrs(t, nodeByName(back.Graph, "custom")) // the reader's own expectations of this node
	subs := 0
	for _, n := range back.Graph.Nodes {
		subs += len(n.Subgraphs())
	}
	if subs == 0 {
		t.Fatal("the feature model lost its subgraphs")
	}
}

// TestWriteShapes checks that inferred shapes reach the file: constants as
// dim_value, expressions as dim_param text that parses back to the same
// expression, invalid axes falling back to the declaration.
func TestWriteShapes(t *testing.T) {
	g := graphMsg{
		name: "shapes",
		nodes: []pb{
			node("n1", "Relu", []string{"x"}, []string{"h"}),
			node("n2", "Relu", []string{"h"}, []string{"y"}),
		},
		inputs:  []pb{vinfo("x", dtype.Float32, "batch", nil, 8)},
		outputs: []pb{vinfo("y", dtype.Float32, nil, nil, nil)},
		infos:   []pb{vinfoNoShape("h", dtype.Float32)},
	}
	m := mustParse(t, model(g.enc(), defaultOpset()), "")
	x, h, y := m.Graph.Value("x"), m.Graph.Value("h"), m.Graph.Value("y")
	if h.Declared != nil {
		t.Fatalf("h declared %v, want no shape", h.Declared)
	}
	pastSeq := symshape.Add(symshape.Sym("past"), symshape.Sym("seq"))
	twice := symshape.Mul(symshape.Const(2), symshape.Sym("seq"))
	h.Shape = []symshape.Expr{symshape.Sym("batch"), pastSeq, symshape.Const(8)}
	y.Shape = []symshape.Expr{twice, symshape.Expr{}, symshape.Const(0)} // the zero Expr is invalid
	b, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back := mustParse(t, b, "")
	if got := fmt.Sprint(back.Graph.Value("x").Declared); got != "[batch ? 8]" {
		t.Errorf("x declared %s, want [batch ? 8] (no Shape: Declared is written)", got)
	}
	bh, by := back.Graph.Value("h"), back.Graph.Value("y")
	if len(bh.Declared) != 3 || bh.Declared[0].Param != "batch" || bh.Declared[2] != (Dim{Value: 8}) {
		t.Fatalf("h declared %v", bh.Declared)
	}
	for _, c := range []struct {
		d    Dim
		want symshape.Expr
	}{{bh.Declared[1], pastSeq}, {by.Declared[0], twice}} {
		e, err := symshape.Parse(c.d.Param)
		if err != nil || !e.Equal(c.want) {
			t.Errorf("dim_param %q parses to %v (%v), want %v", c.d.Param, e, err, c.want)
		}
	}
	if bh.Declared[1].Param != "past + seq" {
		t.Errorf("dim_param %q, want %q", bh.Declared[1].Param, "past + seq")
	}
	if by.Declared[1] != (Dim{Value: -1}) || by.Declared[2] != (Dim{Value: 0}) {
		t.Errorf("y declared %v, want [2*seq ? 0]", by.Declared)
	}
	if bh.Type != dtype.Float32 || x.Type != dtype.Float32 {
		t.Errorf("types %v %v", bh.Type, x.Type)
	}

	// A scalar (empty shape) stays a scalar and an unknown rank stays unknown.
	h.Shape, y.Shape = []symshape.Expr{}, nil
	y.Declared = nil
	back = mustParse(t, mustMarshal(t, m), "")
	if d := back.Graph.Value("h").Declared; d == nil || len(d) != 0 {
		t.Errorf("scalar h declared %v", fmtDims(d))
	}
	if d := back.Graph.Value("y").Declared; d != nil {
		t.Errorf("y declared %v, want no shape", d)
	}
}

func mustMarshal(t testing.TB, m *Model) []byte {
	t.Helper()
	b, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// protoFields returns the bodies of every length-delimited occurrence of
// field in msg, read with the package's decoder.
func protoFields(t testing.TB, msg []byte, field int) [][]byte {
	t.Helper()
	var out [][]byte
	d := newDecoder(msg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			t.Fatal(err)
		}
		if f == field && wt == wireBytes {
			b, err := d.bytes()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
			continue
		}
		if err := d.skip(wt); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// externalEntries reads the external_data key/value pairs of a written
// model's main graph: per initializer name, and for the tensor attributes
// of its nodes (Constant values) as a list.
func externalEntries(t testing.TB, modelBytes []byte) (inits map[string]map[string]string, attrs []map[string]string) {
	t.Helper()
	entriesOf := func(tensor []byte) map[string]string {
		entries := protoFields(t, tensor, tpExternalData)
		if len(entries) == 0 {
			return nil
		}
		kv := map[string]string{}
		for _, e := range entries {
			k, v, err := decodeStringPair(e)
			if err != nil {
				t.Fatal(err)
			}
			kv[k] = v
		}
		return kv
	}
	inits = map[string]map[string]string{}
	graphs := protoFields(t, modelBytes, mpGraph)
	if len(graphs) != 1 {
		t.Fatalf("%d graph fields", len(graphs))
	}
	for _, init := range protoFields(t, graphs[0], gpInitializer) {
		names := protoFields(t, init, tpName)
		if len(names) != 1 {
			t.Fatalf("initializer with %d names", len(names))
		}
		if kv := entriesOf(init); kv != nil {
			inits[string(names[0])] = kv
		}
	}
	for _, n := range protoFields(t, graphs[0], gpNode) {
		for _, a := range protoFields(t, n, npAttribute) {
			for _, tensor := range protoFields(t, a, apT) {
				if kv := entriesOf(tensor); kv != nil {
					attrs = append(attrs, kv)
				}
			}
		}
	}
	return inits, attrs
}

func TestWriteExternalLayout(t *testing.T) {
	src := "../testdata/models/llama/model.onnx"
	m, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		threshold, align int
		dataFile         string
	}{{1, 0, ""}, {256, 4096, "weights.bin"}, {4000, 100, ""}} {
		t.Run(fmt.Sprintf("threshold%d_align%d", c.threshold, c.align), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "llama.onnx")
			if err := Write(m, out, WriteOptions{ExternalThreshold: c.threshold, Align: c.align, DataFile: c.dataFile}); err != nil {
				t.Fatal(err)
			}
			align := c.align
			if align == 0 {
				align = 64
			}
			dataFile := c.dataFile
			if dataFile == "" {
				dataFile = "llama.onnx.data"
			}
			st, err := os.Stat(filepath.Join(dir, dataFile))
			if err != nil {
				t.Fatalf("data file: %v", err)
			}
			raw, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			entries, attrEntries := externalEntries(t, raw)
			if len(entries) == 0 {
				t.Fatal("no external initializers")
			}
			sizes := map[string]int{}
			for _, v := range m.Graph.Initializers {
				sizes[v.Name] = len(v.Const.Data)
			}
			type span struct{ off, n int64 }
			var spans []span
			extent := func(what string, kv map[string]string) span {
				off, err1 := strconv.ParseInt(kv["offset"], 10, 64)
				n, err2 := strconv.ParseInt(kv["length"], 10, 64)
				if err1 != nil || err2 != nil || kv["location"] != dataFile {
					t.Fatalf("%s: entries %v", what, kv)
				}
				if off%int64(align) != 0 {
					t.Errorf("%s: offset %d is not a multiple of %d", what, off, align)
				}
				if n < int64(c.threshold) {
					t.Errorf("%s: %d bytes external, threshold %d", what, n, c.threshold)
				}
				spans = append(spans, span{off, n})
				return span{off, n}
			}
			for name, kv := range entries {
				if s := extent(name, kv); s.n != int64(sizes[name]) {
					t.Errorf("%s: length %d, tensor has %d bytes", name, s.n, sizes[name])
				}
			}
			for i, kv := range attrEntries {
				extent(fmt.Sprintf("attribute tensor %d", i), kv)
			}
			// The tensors tile the file in order, without overlap, and the
			// file ends with the last one.
			sort.Slice(spans, func(i, j int) bool { return spans[i].off < spans[j].off })
			var end int64
			for _, s := range spans {
				if s.off < end {
					t.Errorf("tensor at %d overlaps the previous one ending at %d", s.off, end)
				}
				end = s.off + s.n
			}
			if end != st.Size() {
				t.Errorf("data file is %d bytes, last tensor ends at %d", st.Size(), end)
			}
			for name, n := range sizes {
				if _, ext := entries[name]; !ext && n >= c.threshold {
					t.Errorf("%s: %d bytes, threshold %d, but inline", name, n, c.threshold)
				}
			}
			back, err := Load(out)
			if err != nil {
				t.Fatal(err)
			}
			defer back.Close()
			sameModel(t, m, back)
			if align <= os.Getpagesize() && os.Getpagesize()%align == 0 {
				checkExternal(t, back, c.threshold, align)
			}
			// No stray temporary files are left behind.
			ents, _ := os.ReadDir(dir)
			if len(ents) != 2 {
				t.Errorf("folder holds %d entries, want the model and its data file", len(ents))
			}
		})
	}

	// Threshold 0 writes everything inline and no data file.
	dir := t.TempDir()
	out := filepath.Join(dir, "inline.onnx")
	if err := Write(m, out, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(out + ".data"); !os.IsNotExist(err) {
		t.Errorf("inline write made a data file (%v)", err)
	}
	back, err := Load(out)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	sameModel(t, m, back)
	checkExternal(t, back, math.MaxInt, 1)
}

func TestWriteOptionErrors(t *testing.T) {
	m := mustParse(t, featureModel(), "")
	dir := t.TempDir()
	out := filepath.Join(dir, "m.onnx")
	for _, c := range []struct {
		opts WriteOptions
		want string
	}{
		{WriteOptions{ExternalThreshold: 1, DataFile: "../escape.data"}, "plain file name"},
		{WriteOptions{ExternalThreshold: 1, DataFile: "sub/x.data"}, "plain file name"},
		{WriteOptions{ExternalThreshold: 1, DataFile: filepath.Join(dir, "abs.data")}, "plain file name"},
		{WriteOptions{ExternalThreshold: 1, DataFile: ".."}, "plain file name"},
		{WriteOptions{ExternalThreshold: 1, DataFile: "m.onnx"}, "model file itself"},
		{WriteOptions{ExternalThreshold: -1}, "negative"},
		{WriteOptions{Align: -4}, "negative"},
	} {
		err := Write(m, out, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one saying %q", c.opts, err, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed writes left %d files", len(ents))
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.data")); err == nil {
		t.Error("a data file was written outside the model's folder")
	}

	// A closed model's views are gone: writing must fail, naming the tensor.
	l, err := Load("../testdata/models/resnet/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	name := l.Graph.Initializers[0].Name
	l.Close()
	if _, err := Marshal(l); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("Marshal after Close: %v, want an error naming %q", err, name)
	}
	if err := Write(l, out, WriteOptions{ExternalThreshold: 16}); err == nil {
		t.Error("Write after Close succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed writes left %d files", len(ents))
	}

	// Attributes of a kind the reader does not support cannot be written.
	n := m.Graph.Nodes[0]
	n.SetAttr(&Attr{Name: "bad", Kind: kindSparseTensor})
	if _, err := Marshal(m); err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("sparse attribute: %v", err)
	}
	delete(n.Attrs, "bad")
	if _, err := Marshal(&Model{}); err == nil {
		t.Error("Marshal of a model without a graph succeeded")
	}
}

// TestWriteOldIR checks that models declaring IR version 3 list their
// initializers as graph inputs too, as that version requires.
func TestWriteOldIR(t *testing.T) {
	m, err := Load("testdata/mlp_dynamic.onnx")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	count := func() int {
		b := mustMarshal(t, m)
		back := mustParse(t, b, "")
		sameModel(t, m, back)
		return len(protoFields(t, protoFields(t, b, mpGraph)[0], gpInput))
	}
	if n := count(); n != len(m.Graph.Inputs) {
		t.Errorf("IR %d: %d graph inputs written, want %d", m.IRVersion, n, len(m.Graph.Inputs))
	}
	m.IRVersion = 3
	if n, want := count(), len(m.Graph.Inputs)+len(m.Graph.Initializers); n != want {
		t.Errorf("IR 3: %d graph inputs written, want %d", n, want)
	}
}

// TestWriteAtomic writes over files that a loaded model has memory-mapped;
// the loaded model's views must keep their old contents. Writing in place
// would change them (a private mapping shows file changes until a page is
// copied) or fault (a truncated file).
func TestWriteAtomic(t *testing.T) {
	src, err := Load("../testdata/models/llama/model.onnx")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "model.onnx")
	opts := WriteOptions{ExternalThreshold: 64, Align: 4096}
	if err := Write(src, path, opts); err != nil {
		t.Fatal(err)
	}
	loaded, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	snap := map[*Tensor][]byte{}
	forEachTensor(t, loaded.Graph, func(x *Tensor) { snap[x] = bytes.Clone(x.Data) })

	// Rewrite the same files with every external weight changed.
	changed := 0
	for _, v := range src.Graph.Initializers {
		if len(v.Const.Data) >= opts.ExternalThreshold {
			d := bytes.Clone(v.Const.Data)
			for i := range d {
				d[i] ^= 0x5a
			}
			v.Const = &Tensor{Name: v.Const.Name, Type: v.Const.Type, Dims: v.Const.Dims, Data: d}
			changed++
		}
	}
	if changed == 0 {
		t.Fatal("no weight to change")
	}
	if err := Write(src, path, opts); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		for x, want := range snap {
			if !bytes.Equal(x.Data, want) {
				t.Fatalf("%s: the loaded model's tensor %q changed under it", when, x.Name)
			}
		}
	}
	check("after writing new weights")
	fresh, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	sameModel(t, src, fresh)

	// A loaded model written back over its own files, from its own views.
	if err := Write(loaded, path, opts); err != nil {
		t.Fatal(err)
	}
	check("after writing the loaded model over its own files")
	again, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	sameModel(t, loaded, again)
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("folder holds %d entries after the rewrites, want 2", len(ents))
	}
}

// numpyNames maps element types to NumPy's dtype names.
var numpyNames = map[dtype.Type]string{
	dtype.Float32: "float32", dtype.Float16: "float16", dtype.Float64: "float64",
	dtype.Int64: "int64", dtype.Int32: "int32", dtype.Int8: "int8", dtype.Uint8: "uint8", dtype.Bool: "bool",
}

// TestWriteONNXChecker has Debian's onnx package check written models
// (onnx.checker.check_model on the path, so external data files are checked
// too), load them with their external data and compare a weight with the
// bytes this package holds, through NumPy.
func TestWriteONNXChecker(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("Debian's python3 with onnx is required (tools/setup.sh installs it): %v", err)
	}
	dir := t.TempDir()
	type check struct {
		Path     string `json:"path"`
		Tensor   string `json:"tensor"`
		Dtype    string `json:"dtype"`
		Dims     []int64
		Hex      string `json:"hex"`
		External bool   `json:"external"`
		Align    int    `json:"align"`
		Dim      string `json:"dim"` // a dim_param expected on the first output, "" for none
	}
	var checks []check
	add := func(src string, opts WriteOptions, name string, edit func(*Model) string) {
		m, err := Load(src)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		dim := ""
		if edit != nil {
			dim = edit(m)
		}
		out := filepath.Join(dir, name, filepath.Base(src))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := Write(m, out, opts); err != nil {
			t.Fatal(err)
		}
		// The largest initializer: the one most likely to be external.
		var w *Value
		for _, v := range m.Graph.Initializers {
			if numpyNames[v.Type] != "" && (w == nil || len(v.Const.Data) > len(w.Const.Data)) {
				w = v
			}
		}
		if w == nil {
			t.Fatalf("%s: no initializer to compare", src)
		}
		align := opts.Align
		if align == 0 {
			align = 64
		}
		checks = append(checks, check{
			Path: out, Tensor: w.Name, Dtype: numpyNames[w.Type], Dims: append([]int64{}, w.Const.Dims...),
			Hex: hex.EncodeToString(w.Const.Data), Align: align, Dim: dim,
			External: opts.ExternalThreshold > 0 && len(w.Const.Data) >= opts.ExternalThreshold,
		})
	}
	add("../testdata/models/llama/model.onnx", WriteOptions{}, "llama_inline", nil)
	add("../testdata/models/llama/model_ext.onnx", WriteOptions{ExternalThreshold: 1024, Align: 4096}, "llama_ext", nil)
	add("../testdata/models/resnet/model.onnx", WriteOptions{ExternalThreshold: 4096}, "resnet_ext", nil)
	add("testdata/fp16_ext.onnx", WriteOptions{ExternalThreshold: 8, DataFile: "w.bin"}, "fp16_if", nil)
	add("../testdata/models/gpt2/model.onnx", WriteOptions{ExternalThreshold: 2048}, "gpt2_shapes", func(m *Model) string {
		// An inferred shape with an expression: the checker must accept the
		// dim_param text.
		out := m.Graph.Outputs[0]
		out.Shape = make([]symshape.Expr, len(out.Declared))
		for i := range out.Shape {
			out.Shape[i] = symshape.Const(int64(i + 1))
		}
		out.Shape[0] = symshape.Add(symshape.Sym("past"), symshape.Sym("seq"))
		return out.Shape[0].String()
	})
	spec, err := json.Marshal(checks)
	if err != nil {
		t.Fatal(err)
	}
	specPath := filepath.Join(dir, "spec.json")
	if err := os.WriteFile(specPath, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import json, sys
import numpy as np
import onnx
from onnx import numpy_helper
for c in json.load(open(sys.argv[1])):
    p = c["path"]
    onnx.checker.check_model(p, full_check=False)
    raw = onnx.load(p, load_external_data=False)
    t0 = [t for t in raw.graph.initializer if t.name == c["tensor"]][0]
    ext = t0.data_location == onnx.TensorProto.EXTERNAL
    assert ext == c["external"], (p, "external", ext)
    if ext:
        kv = {e.key: e.value for e in t0.external_data}
        assert int(kv["offset"]) % c["align"] == 0, (p, kv)
    if c["dim"]:
        d = raw.graph.output[0].type.tensor_type.shape.dim[0]
        assert d.dim_param == c["dim"], (p, d)
    m = onnx.load(p)
    t = [t for t in m.graph.initializer if t.name == c["tensor"]][0]
    a = numpy_helper.to_array(t)
    want = np.frombuffer(bytes.fromhex(c["hex"]), dtype=np.dtype(c["dtype"]).newbyteorder("<")).reshape(c["Dims"])
    assert a.dtype == want.dtype, (p, a.dtype, want.dtype)
    assert a.shape == want.shape, (p, a.shape, want.shape)
    assert np.array_equal(a, want, equal_nan=True), (p, "values differ")
    print("ok", p, c["tensor"], a.dtype, a.shape, "external" if ext else "inline")
`
	out, err := exec.Command(py, "-c", script, specPath).CombinedOutput()
	if err != nil {
		t.Fatalf("onnx rejected a written model: %v\n%s", err, out)
	}
	if got := strings.Count(string(out), "ok "); got != len(checks) {
		t.Fatalf("%d of %d models checked:\n%s", got, len(checks), out)
	}
	t.Logf("\n%s", out)
}

func BenchmarkMarshal(b *testing.B) {
	m, err := Load("../testdata/models/clip_vision/model.onnx")
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	n, _ := Marshal(m)
	b.SetBytes(int64(len(n)))
	for b.Loop() {
		if _, err := Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteFull writes a full-size model (weights in external data)
// when one has been exported; bytes/s counts model and data file.
func BenchmarkWriteFull(b *testing.B) {
	src := "../testdata/models/clip_vision_full/model.onnx"
	m, err := Load(src)
	if err != nil {
		b.Skipf("no full-size model (export_all.py --size full makes one): %v", err)
	}
	defer m.Close()
	dir := b.TempDir()
	out := filepath.Join(dir, "model.onnx")
	opts := WriteOptions{ExternalThreshold: 1024, Align: 4096}
	if err := Write(m, out, opts); err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, f := range []string{out, out + ".data"} {
		st, err := os.Stat(f)
		if err != nil {
			b.Fatal(err)
		}
		size += st.Size()
	}
	b.SetBytes(size)
	for b.Loop() {
		if err := Write(m, out, opts); err != nil {
			b.Fatal(err)
		}
	}
}
