package graph

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/owulveryck/onnx-go/backend/testbackend"
	_ "github.com/owulveryck/onnx-go/backend/testbackend/onnx" // registers the corpus
	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph/dtype"
)

// textMsg is a protobuf message parsed from the text format that
// TestCase.Dump prints. That text comes from onnx-go's generated protobuf
// code, a decoder independent of this package, so it serves as the oracle for
// structure (names, op types, attribute values).
type textMsg struct {
	fields map[string][]textVal
}

type textVal struct {
	s   string   // scalar token, unquoted when it was a string
	msg *textMsg // non-nil for sub-messages
}

func (m *textMsg) all(k string) []textVal { return m.fields[k] }

func (m *textMsg) str(k string) string {
	if v := m.fields[k]; len(v) > 0 {
		return v[len(v)-1].s
	}
	return ""
}

func (m *textMsg) sub(k string) *textMsg {
	if v := m.fields[k]; len(v) > 0 {
		return v[len(v)-1].msg
	}
	return nil
}

type textParser struct {
	s   string
	pos int
}

func (p *textParser) ws() {
	for p.pos < len(p.s) && strings.ContainsRune(" \t\n\r", rune(p.s[p.pos])) {
		p.pos++
	}
}

func (p *textParser) msg(end byte) (*textMsg, error) {
	m := &textMsg{fields: map[string][]textVal{}}
	for {
		p.ws()
		if p.pos >= len(p.s) {
			if end == 0 {
				return m, nil
			}
			return nil, fmt.Errorf("unterminated message")
		}
		if p.s[p.pos] == end {
			p.pos++
			return m, nil
		}
		start := p.pos
		for p.pos < len(p.s) && (p.s[p.pos] == '_' || isAlnum(p.s[p.pos])) {
			p.pos++
		}
		key := p.s[start:p.pos]
		if key == "" {
			return nil, fmt.Errorf("expected a field name at %d: %.20q", p.pos, p.s[p.pos:])
		}
		p.ws()
		if p.pos < len(p.s) && p.s[p.pos] == ':' {
			p.pos++
			p.ws()
		}
		if p.pos >= len(p.s) {
			return nil, fmt.Errorf("missing value for %s", key)
		}
		switch c := p.s[p.pos]; c {
		case '<', '{':
			p.pos++
			closer := byte('>')
			if c == '{' {
				closer = '}'
			}
			sub, err := p.msg(closer)
			if err != nil {
				return nil, err
			}
			m.fields[key] = append(m.fields[key], textVal{msg: sub})
		case '"':
			s, err := p.quoted()
			if err != nil {
				return nil, err
			}
			m.fields[key] = append(m.fields[key], textVal{s: s})
		default:
			start := p.pos
			for p.pos < len(p.s) && !strings.ContainsRune(" \t\n\r<>{}", rune(p.s[p.pos])) {
				p.pos++
			}
			m.fields[key] = append(m.fields[key], textVal{s: p.s[start:p.pos]})
		}
	}
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// quoted reads a C-escaped string literal (text format's escapes).
func (p *textParser) quoted() (string, error) {
	p.pos++
	var b []byte
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		p.pos++
		switch {
		case c == '"':
			return string(b), nil
		case c != '\\':
			b = append(b, c)
		case p.pos >= len(p.s):
			return "", fmt.Errorf("bad escape")
		default:
			e := p.s[p.pos]
			p.pos++
			switch e {
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'x':
				v, err := strconv.ParseUint(p.s[p.pos:p.pos+2], 16, 8)
				if err != nil {
					return "", err
				}
				p.pos += 2
				b = append(b, byte(v))
			case '0', '1', '2', '3':
				v, err := strconv.ParseUint(p.s[p.pos-1:p.pos+2], 8, 8)
				if err != nil {
					return "", err
				}
				p.pos += 2
				b = append(b, byte(v))
			default:
				b = append(b, e)
			}
		}
	}
	return "", fmt.Errorf("unterminated string")
}

func parseDump(tc *testbackend.TestCase) (*textMsg, error) {
	var buf bytes.Buffer
	if err := tc.Dump(&buf); err != nil {
		return nil, err
	}
	s := strings.TrimSpace(buf.String())
	// Dump prints "(*ir.ModelProto)(<text>)".
	i := strings.Index(s, ")(")
	if i < 0 || !strings.HasSuffix(s, ")") {
		return nil, fmt.Errorf("unexpected dump format: %.60q", s)
	}
	p := &textParser{s: s[i+2 : len(s)-1]}
	return p.msg(0)
}

// dumpValueInfo checks a value's element type and declared dims against a
// ValueInfoProto of the dump.
func dumpValueInfo(t *testing.T, v *Value, want *textMsg) {
	t.Helper()
	tt := want.sub("type").sub("tensor_type")
	if tt == nil {
		t.Errorf("value %q: dump has no tensor type", v.Name)
		return
	}
	if et, _ := strconv.Atoi(tt.str("elem_type")); dtype.Type(et) != v.Type {
		t.Errorf("value %q: type %v, dump says %v", v.Name, v.Type, dtype.Type(et))
	}
	shape := tt.sub("shape")
	if shape == nil {
		if v.Declared != nil {
			t.Errorf("value %q: declared %v, dump has no shape", v.Name, v.Declared)
		}
		return
	}
	var want2 []Dim
	for _, d := range shape.all("dim") {
		dim := Dim{Value: -1}
		if s := d.msg.str("dim_value"); s != "" {
			dim.Value, _ = strconv.ParseInt(s, 10, 64)
		}
		if p := d.msg.str("dim_param"); p != "" {
			dim.Param = p
		}
		want2 = append(want2, dim)
	}
	if v.Declared == nil || fmt.Sprint(v.Declared) != fmt.Sprint(want2) {
		t.Errorf("value %q: declared %v, dump says %v", v.Name, v.Declared, want2)
	}
}

// TestCorpus parses every model of onnx-go's backend corpus and compares it
// with what the case states (op type, input and output counts, the shapes and
// element types of its input and expected output tensors) and with the
// independent text dump (node structure, names, attributes).
func TestCorpus(t *testing.T) {
	cases := testbackend.GetAllRegisteredTests()
	if len(cases) < 300 {
		t.Fatalf("corpus has %d cases, expected about 348", len(cases))
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i]().Title < cases[j]().Title })
	for _, mk := range cases {
		tc := mk()
		t.Run(tc.Title, func(t *testing.T) {
			m, err := Parse(tc.ModelB, "")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			defer m.Close()
			if err := m.Graph.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			g := m.Graph
			if len(g.Nodes) != 1 {
				t.Errorf("%d nodes, corpus cases are single-node", len(g.Nodes))
			} else if g.Nodes[0].OpType != tc.OpType {
				t.Errorf("op type %q, case says %q", g.Nodes[0].OpType, tc.OpType)
			}
			if len(g.Inputs) != len(tc.Input) {
				t.Errorf("%d runtime inputs, case feeds %d", len(g.Inputs), len(tc.Input))
			}
			if len(g.Outputs) != len(tc.ExpectedOutput) {
				t.Errorf("%d outputs, case expects %d", len(g.Outputs), len(tc.ExpectedOutput))
			}
			checkAgainstTensors(t, "input", g.Inputs, tc.Input)
			checkAgainstTensors(t, "output", g.Outputs, tc.ExpectedOutput)
			text, err := parseDump(tc)
			if err != nil {
				t.Fatalf("parsing the dump: %v", err)
			}
			if v, _ := strconv.ParseInt(text.str("ir_version"), 10, 64); v != m.IRVersion {
				t.Errorf("ir_version %d, dump says %d", m.IRVersion, v)
			}
			if m.Producer != text.str("producer_name") {
				t.Errorf("producer %q, dump says %q", m.Producer, text.str("producer_name"))
			}
			for _, o := range text.all("opset_import") {
				v, _ := strconv.ParseInt(o.msg.str("version"), 10, 64)
				if got := m.Opset(o.msg.str("domain")); got != v {
					t.Errorf("opset %q = %d, dump says %d", o.msg.str("domain"), got, v)
				}
			}
			compareGraph(t, g, text.sub("graph"))
		})
	}
}

func checkAgainstTensors(t *testing.T, what string, vals []*Value, ts []tensor.Tensor) {
	t.Helper()
	for i := 0; i < len(vals) && i < len(ts); i++ {
		// Element types are compared with the dump, not with these tensors:
		// the corpus generator stored some integer inputs (Slice's starts,
		// TopK's k, ...) as float32 tensors.
		v, x := vals[i], ts[i]
		shape := x.Shape()
		if v.Declared == nil {
			continue
		}
		if x.IsScalar() {
			shape = nil
		}
		// gorgonia stores some 1-element tensors as scalars; compare only
		// when the ranks agree, and then every known dim must agree.
		if len(shape) != len(v.Declared) {
			if x.DataSize() != 1 {
				t.Errorf("%s %q: declared rank %d, case tensor shape %v", what, v.Name, len(v.Declared), x.Shape())
			}
			continue
		}
		for j, d := range v.Declared {
			if d.Known() && d.Value != int64(shape[j]) {
				t.Errorf("%s %q: declared %v, case tensor shape %v", what, v.Name, v.Declared, x.Shape())
				break
			}
		}
	}
}

// compareGraph checks g against the text dump of its GraphProto: node op
// types, input/output names (omitted ones as nil), attribute values, graph
// inputs/outputs; subgraphs recursively.
func compareGraph(t *testing.T, g *Graph, text *textMsg) {
	t.Helper()
	if text == nil {
		t.Fatalf("dump has no graph")
	}
	if g.Name != text.str("name") {
		t.Errorf("graph name %q, dump says %q", g.Name, text.str("name"))
	}
	inits := map[string]bool{}
	for _, in := range text.all("initializer") {
		inits[in.msg.str("name")] = true
	}
	var wantIn []string
	for _, in := range text.all("input") {
		if n := in.msg.str("name"); !inits[n] {
			wantIn = append(wantIn, n)
			if v := g.Value(n); v != nil {
				dumpValueInfo(t, v, in.msg)
			}
		}
	}
	if got := valueNames(g.Inputs); !equalStrings(got, wantIn) {
		t.Errorf("graph %q inputs %q, dump says %q", g.Name, got, wantIn)
	}
	var wantOut []string
	for _, o := range text.all("output") {
		wantOut = append(wantOut, o.msg.str("name"))
		if v := g.Value(o.msg.str("name")); v != nil {
			dumpValueInfo(t, v, o.msg)
		}
	}
	if got := valueNames(g.Outputs); !equalStrings(got, wantOut) {
		t.Errorf("graph %q outputs %q, dump says %q", g.Name, got, wantOut)
	}
	nodes := text.all("node")
	if len(nodes) != len(g.Nodes) {
		t.Fatalf("graph %q: %d nodes, dump has %d", g.Name, len(g.Nodes), len(nodes))
	}
	for i, tn := range nodes {
		n, want := g.Nodes[i], tn.msg
		if n.OpType != want.str("op_type") {
			t.Errorf("node %d: op %q, dump says %q", i, n.OpType, want.str("op_type"))
		}
		if want.str("name") != "" && n.Name != want.str("name") {
			t.Errorf("node %d: name %q, dump says %q", i, n.Name, want.str("name"))
		}
		if got, w := valueNames(n.Inputs), scalars(want.all("input")); !equalStrings(got, w) {
			t.Errorf("node %v inputs %q, dump says %q", n, got, w)
		}
		if got, w := valueNames(n.Outputs), scalars(want.all("output")); !equalStrings(got, w) {
			t.Errorf("node %v outputs %q, dump says %q", n, got, w)
		}
		attrs := want.all("attribute")
		if len(attrs) != len(n.Attrs) {
			t.Errorf("node %v: %d attributes, dump has %d", n, len(n.Attrs), len(attrs))
		}
		for _, ta := range attrs {
			compareAttr(t, n, ta.msg)
		}
	}
}

func compareAttr(t *testing.T, n *Node, want *textMsg) {
	t.Helper()
	name := want.str("name")
	a := n.Attrs[name]
	if a == nil {
		t.Errorf("node %v: attribute %q missing", n, name)
		return
	}
	if a.Kind.String() != want.str("type") {
		t.Errorf("node %v attribute %q: kind %v, dump says %s", n, name, a.Kind, want.str("type"))
	}
	switch a.Kind {
	case KindInt:
		if w, _ := strconv.ParseInt(want.str("i"), 10, 64); a.I != w {
			t.Errorf("node %v attribute %q: %d, dump says %d", n, name, a.I, w)
		}
	case KindFloat:
		if w := parseF32(want.str("f")); a.F != w && !(isNaN32(a.F) && isNaN32(w)) {
			t.Errorf("node %v attribute %q: %v, dump says %v", n, name, a.F, w)
		}
	case KindString:
		if a.S != want.str("s") {
			t.Errorf("node %v attribute %q: %q, dump says %q", n, name, a.S, want.str("s"))
		}
	case KindInts:
		var w []int64
		for _, s := range scalars(want.all("ints")) {
			v, _ := strconv.ParseInt(s, 10, 64)
			w = append(w, v)
		}
		if fmt.Sprint(a.Ints) != fmt.Sprint(w) {
			t.Errorf("node %v attribute %q: %v, dump says %v", n, name, a.Ints, w)
		}
	case KindFloats:
		var w []float32
		for _, s := range scalars(want.all("floats")) {
			w = append(w, parseF32(s))
		}
		if fmt.Sprint(a.Floats) != fmt.Sprint(w) {
			t.Errorf("node %v attribute %q: %v, dump says %v", n, name, a.Floats, w)
		}
	case KindStrings:
		if w := scalars(want.all("strings")); !equalStrings(a.Strings, w) {
			t.Errorf("node %v attribute %q: %q, dump says %q", n, name, a.Strings, w)
		}
	case KindTensor:
		compareTensor(t, a.T, want.sub("t"))
	case KindGraph:
		compareGraph(t, a.G, want.sub("g"))
	}
}

// compareTensor checks dims, type and element values against the dump's
// TensorProto, whichever data field it used.
func compareTensor(t *testing.T, x *Tensor, want *textMsg) {
	t.Helper()
	var dims []int64
	for _, s := range scalars(want.all("dims")) {
		v, _ := strconv.ParseInt(s, 10, 64)
		dims = append(dims, v)
	}
	if fmt.Sprint(x.Dims) != fmt.Sprint(dims) {
		t.Errorf("tensor %q dims %v, dump says %v", x.Name, x.Dims, dims)
	}
	if dt, _ := strconv.Atoi(want.str("data_type")); int(x.Type) != dt {
		t.Errorf("tensor %q type %v, dump says %d", x.Name, x.Type, dt)
	}
	if raw := want.all("raw_data"); len(raw) > 0 {
		if !bytes.Equal(x.Data, []byte(raw[0].s)) {
			t.Errorf("tensor %q raw bytes differ from the dump", x.Name)
		}
		return
	}
	var wantVals []float64
	for _, f := range []string{"float_data", "int32_data", "int64_data", "double_data", "uint64_data"} {
		for _, s := range scalars(want.all(f)) {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("dump value %q: %v", s, err)
			}
			wantVals = append(wantVals, v)
		}
	}
	got, err := x.Float32s()
	if err != nil {
		t.Fatalf("tensor %q: %v", x.Name, err)
	}
	if len(got) != len(wantVals) {
		t.Fatalf("tensor %q: %d values, dump has %d", x.Name, len(got), len(wantVals))
	}
	for i := range got {
		if got[i] != float32(wantVals[i]) {
			t.Errorf("tensor %q[%d] = %v, dump says %v", x.Name, i, got[i], wantVals[i])
		}
	}
}

func parseF32(s string) float32 {
	v, _ := strconv.ParseFloat(s, 32)
	return float32(v)
}

func isNaN32(f float32) bool { return math.IsNaN(float64(f)) }

func scalars(vs []textVal) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.s
	}
	return out
}

func valueNames(vs []*Value) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		if v != nil {
			out[i] = v.Name
		}
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
