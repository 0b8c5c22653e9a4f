package graph

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/dtype"
)

// oneExt is a model whose only initializer lives in external data.
func oneExt(location, offset, length string) []byte {
	g := graphMsg{
		name:    "g",
		inits:   []pb{tensorExt("w", dtype.Float32, []int64{4}, location, offset, length)},
		outputs: []pb{vinfo("w", dtype.Float32, 4)},
	}
	return model(g.enc(), defaultOpset())
}

func TestExternalDataHostile(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "model")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Real files outside the folder, so a rejection cannot be a missing file.
	if err := os.WriteFile(filepath.Join(root, "x"), make([]byte, 128), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "weights.bin"), make([]byte, 128), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "x"), filepath.Join(dir, "link.bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(dir, "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../x", filepath.Join(dir, "rel.bin")); err != nil {
		t.Fatal(err)
	}
	cases := []errorCase{
		{"dotdot", oneExt("../x", "", ""), []string{`"w"`, `"../x"`, "leaves the model's folder"}},
		{"dotdot inside path", oneExt("sub/../../x", "", ""), []string{"leaves the model's folder"}},
		{"absolute", oneExt("/etc/passwd", "", ""), []string{`"/etc/passwd"`, "absolute"}},
		{"absolute into folder", oneExt(filepath.Join(dir, "weights.bin"), "", ""), []string{"absolute"}},
		{"symlink outside", oneExt("link.bin", "", ""), []string{`"link.bin"`, "not inside the model's folder"}},
		{"relative symlink outside", oneExt("rel.bin", "", ""), []string{"not inside the model's folder"}},
		{"symlinked folder outside", oneExt("up/x", "", ""), []string{`"up/x"`, "not inside the model's folder"}},
		{"folder itself", oneExt(".", "", ""), []string{"not inside the model's folder"}},
		{"subfolder", oneExt("sub", "", ""), []string{"not a regular file"}},
		{"missing", oneExt("nofile.bin", "", ""), []string{`"nofile.bin"`}},
		{"no location", oneExt("", "", ""), []string{"without a location"}},
		{"offset beyond file", oneExt("weights.bin", "200", ""), []string{"offset 200", "beyond the end", "128 bytes"}},
		{"offset+length beyond file", oneExt("weights.bin", "120", "16"), []string{"beyond the end"}},
		{"huge offset", oneExt("weights.bin", "9223372036854775807", "16"), []string{"beyond the end"}},
		{"huge length", oneExt("weights.bin", "8", "9223372036854775807"), []string{"beyond the end"}},
		{"length mismatch", oneExt("weights.bin", "0", "8"), []string{"length 8", "need 16"}},
		{"negative offset", oneExt("weights.bin", "-1", ""), []string{"offset", "not a non-negative integer"}},
		{"junk length", oneExt("weights.bin", "", "12abc"), []string{"length", "not a non-negative integer"}},
		{"NUL in location", oneExt("weights.bin\x00", "", ""), []string{"NUL"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Parse(c.data, dir)
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
	// The same folder accepts a well-formed reference, so the rejections
	// above are about the references.
	m := mustParse(t, oneExt("weights.bin", "112", "16"), dir)
	if len(m.Graph.Value("w").Const.Data) != 16 {
		t.Errorf("good reference: %d bytes", len(m.Graph.Value("w").Const.Data))
	}
}

// TestHostileAllocations feeds inputs whose headers claim huge sizes and checks
// that each is rejected without allocating anywhere near the claim.
func TestHostileAllocations(t *testing.T) {
	mk := func(inits ...pb) []byte {
		return model(graphMsg{name: "g", inits: inits, outputs: []pb{vinfo("w", dtype.Float32)}}.enc(), defaultOpset())
	}
	hugeLen := appendVarint(pb(nil).tag(7, 2), 1<<60)
	cases := []errorCase{
		{"length prefix 2^60", hugeLen, []string{"exceeds"}},
		{"length prefix 2^60 nested", mk(pb(appendVarint(pb(nil).tag(9, 2), 1<<60))), []string{"exceeds"}},
		{"11-byte varint", pb{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, []string{"varint"}},
		{"dims overflow", mk(tensorRaw("w", dtype.Float32, []int64{1 << 40, 1 << 40, 1 << 40}, nil)), []string{`"w"`, "overflows"}},
		{"dims product just over the limit", mk(tensorRaw("w", dtype.Float64, []int64{1 << 31, 1 << 31}, nil)), []string{`"w"`, "overflows"}},
		{"negative dim", mk(tensorRaw("w", dtype.Float32, []int64{-4}, nil)), []string{`"w"`, "negative"}},
		{"huge dims, few typed values", mk(dimsField(nil, []int64{1 << 50}).v(2, int64(dtype.Int64)).s(8, "w").packed(7, 1, 2, 3)), []string{`"w"`, "int64_data has 3 values"}},
		{"huge dims, raw", mk(tensorRaw("w", dtype.Float32, []int64{1 << 40}, make([]byte, 16))), []string{`"w"`, "need 4398046511104"}},
		{"huge dims, external", mk(tensorExt("w", dtype.Float32, []int64{1 << 40}, "x", "", "")), []string{`"w"`, "without a folder"}},
		{"packed dims claiming 2^40 bytes", mk(appendVarint(pb(nil).tag(1, 2), 1<<40)), []string{"exceeds"}},
		{"unterminated packed varints", mk(pb(nil).v(2, 7).s(8, "w").b(7, []byte{0x80, 0x80})), []string{"int64_data", "end of data"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			m, err := Parse(c.data, "")
			runtime.ReadMemStats(&after)
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
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Errorf("allocated %d bytes for a %d-byte input", grew, len(c.data))
			}
		})
	}
}

// TestTruncatedPrefixes cuts valid models at every length: each prefix must
// be an error (the graph is the last field, so it is cut or missing), never a
// panic.
func TestTruncatedPrefixes(t *testing.T) {
	dir := t.TempDir()
	writeExtFiles(t, dir)
	for _, full := range [][]byte{featureModel(), extModel("weights.bin", "16", "16"), simpleModel()} {
		m, err := Parse(full, dir)
		if err != nil {
			t.Fatalf("full model: %v", err)
		}
		m.Close()
		for n := 0; n < len(full); n++ {
			m, err := Parse(full[:n:n], dir)
			if err == nil {
				m.Close()
				t.Fatalf("prefix of %d/%d bytes accepted", n, len(full))
			}
		}
	}
}

// nested builds a graph holding If nodes nested depth levels deep; the
// innermost branch reads the main graph's input "x".
func nested(depth int) pb {
	if depth == 0 {
		return graphMsg{name: "leaf", nodes: []pb{node("", "Identity", []string{"x"}, []string{"o0"})},
			outputs: []pb{vinfoNoShape("o0", dtype.Float32)}}.enc()
	}
	out := fmt.Sprintf("o%d", depth)
	return graphMsg{
		name:    fmt.Sprintf("level%d", depth),
		nodes:   []pb{node("", "If", []string{"c"}, []string{out}, attrGraph("then_branch", nested(depth-1)))},
		outputs: []pb{vinfoNoShape(out, dtype.Float32)},
	}.enc()
}

func nestedModel(depth int) []byte {
	inner := nested(depth)
	// Main graph: inputs c and x, one If whose branch is the nest.
	g := graphMsg{
		name:    "main",
		nodes:   []pb{node("", "If", []string{"c"}, []string{"y"}, attrGraph("then_branch", inner))},
		inputs:  []pb{vinfo("c", dtype.Bool), vinfo("x", dtype.Float32, 1)},
		outputs: []pb{vinfoNoShape("y", dtype.Float32)},
	}
	return model(g.enc(), defaultOpset())
}

func TestNestingDepth(t *testing.T) {
	// nestedModel(d) has d+1 levels of subgraphs below the main graph.
	m := mustParse(t, nestedModel(maxGraphDepth-1), "")
	g := m.Graph
	for d := 0; d < maxGraphDepth; d++ {
		if len(g.Nodes) != 1 {
			t.Fatalf("depth %d: %d nodes", d, len(g.Nodes))
		}
		// Every level's If reads c itself; x is read only by the leaf.
		want := "[x c]"
		if d == maxGraphDepth-1 {
			want = "[x]"
		}
		if imp := valueNames(g.Nodes[0].ImplicitInputs()); fmt.Sprint(imp) != want {
			t.Fatalf("depth %d: implicit inputs %v, want %s", d, imp, want)
		}
		g = g.Nodes[0].AttrGraph("then_branch")
	}
	if g.Name != "leaf" || !g.Value("x").Outer {
		t.Fatalf("deepest graph %q does not read x as an outer value", g.Name)
	}
	_, err := Parse(nestedModel(maxGraphDepth), "")
	if err == nil || !strings.Contains(err.Error(), "nested deeper than") {
		t.Fatalf("depth %d: %v, want a nesting error", maxGraphDepth+1, err)
	}
}

// TestRandomCorruption flips bytes of valid models: whatever the result, no
// panic, and an accepted model still validates.
func TestRandomCorruption(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	dir := t.TempDir()
	writeExtFiles(t, dir)
	seeds := [][]byte{featureModel(), extModel("weights.bin", "16", "16"), nestedModel(3)}
	for i := 0; i < 3000; i++ {
		src := seeds[i%len(seeds)]
		data := append([]byte(nil), src...)
		for k := 0; k < 1+rng.Intn(4); k++ {
			data[rng.Intn(len(data))] = byte(rng.Intn(256))
		}
		m, err := Parse(data, dir)
		if err != nil {
			continue
		}
		exercise(t, m)
		m.Close()
	}
}

// exercise runs the read paths a later pass would use on an accepted model.
func exercise(t testing.TB, m *Model) {
	if err := m.Graph.Validate(); err != nil {
		t.Fatalf("accepted model does not validate: %v", err)
	}
	var walk func(g *Graph)
	walk = func(g *Graph) {
		for _, v := range g.Initializers {
			v.Const.Float32s()
			v.Const.Int64s()
		}
		for _, n := range g.Nodes {
			n.ImplicitInputs()
			for _, a := range n.Attrs {
				if a.T != nil {
					a.T.Float32s()
				}
			}
			for _, s := range n.Subgraphs() {
				walk(s)
			}
		}
	}
	walk(m.Graph)
	if err := m.Graph.Sort(); err != nil {
		t.Fatalf("accepted model does not sort: %v", err)
	}
}
