package graph

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/tlite/tlite/graph/dtype"
)

// maxGraphDepth bounds subgraph nesting (If inside Loop inside ...): real
// models nest a few levels; a hostile file could otherwise recurse until the
// stack runs out.
const maxGraphDepth = 64

// Load memory-maps the ONNX file at path (read-only) and builds its IR.
// Initializer bytes, including external data files in the model's folder, are
// views into the mappings; call Model.Close to release them.
func Load(path string) (*Model, error) {
	mp, err := mapFile(path, false)
	if err != nil {
		return nil, fmt.Errorf("graph.Load: %w", err)
	}
	m, err := parse(mp, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("graph.Load %s: %w", path, err)
	}
	return m, nil
}

// Parse builds the IR of an ONNX model held in data. Initializer bytes are
// views into data, which must stay unmodified while the model is in use.
// External data files are resolved in dir; with dir == "" a model that uses
// external data is rejected.
func Parse(data []byte, dir string) (*Model, error) {
	return parse(mapping{data: data}, dir)
}

// parse decodes the model in mp (owned by the model from here on, released on
// error) with external data resolved in dir.
func parse(mp mapping, dir string) (*Model, error) {
	m := &Model{Dir: dir, Opsets: map[string]int64{}, Metadata: map[string]string{}}
	if mp.release != nil {
		m.maps = append(m.maps, mp)
	}
	l := &loader{model: m, dir: dir, ext: map[string][]byte{}}
	if err := l.decodeModel(mp.data); err != nil {
		m.Close()
		return nil, err
	}
	if err := m.Graph.Validate(); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// loader carries the state of one parse: the model being filled (which owns
// the mappings) and the external files mapped so far.
type loader struct {
	model   *Model
	dir     string
	realDir string            // dir with symlinks resolved, computed on first external tensor
	ext     map[string][]byte // external file (resolved path) -> its mapping, so each is mapped once
}

// ModelProto field numbers (onnx.proto).
const (
	mpIRVersion       = 1
	mpProducerName    = 2
	mpProducerVersion = 3
	mpDomain          = 4
	mpModelVersion    = 5
	mpDoc             = 6
	mpGraph           = 7
	mpOpsetImport     = 8
	mpMetadataProps   = 14
)

func (l *loader) decodeModel(data []byte) error {
	m := l.model
	var graphMsg []byte
	hasGraph := false
	d := newDecoder(data)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return fmt.Errorf("model: %w", err)
		}
		switch f {
		case mpIRVersion:
			m.IRVersion, err = d.int64Field("ir_version", wt)
		case mpProducerName:
			m.Producer, err = d.stringField("producer_name", wt)
		case mpProducerVersion:
			m.ProducerVersion, err = d.stringField("producer_version", wt)
		case mpDomain:
			m.Domain, err = d.stringField("domain", wt)
		case mpModelVersion:
			m.ModelVersion, err = d.int64Field("model_version", wt)
		case mpDoc:
			m.Doc, err = d.stringField("doc_string", wt)
		case mpGraph:
			graphMsg, err = d.bytesField("graph", wt)
			hasGraph = true
		case mpOpsetImport:
			var b []byte
			if b, err = d.bytesField("opset_import", wt); err == nil {
				err = l.decodeOpset(b)
			}
		case mpMetadataProps:
			var b []byte
			if b, err = d.bytesField("metadata_props", wt); err == nil {
				var k, v string
				if k, v, err = decodeStringPair(b); err == nil {
					m.Metadata[k] = v
				}
			}
		default:
			err = d.skip(wt)
		}
		if err != nil {
			return fmt.Errorf("model: %w", err)
		}
	}
	if !hasGraph {
		return fmt.Errorf("model has no graph")
	}
	g, err := l.decodeGraph(graphMsg, nil, nil, 0)
	if err != nil {
		return err
	}
	m.Graph = g
	return nil
}

// decodeOpset reads an OperatorSetIdProto (domain = 1, version = 2).
func (l *loader) decodeOpset(msg []byte) error {
	var domain string
	var version int64
	d := newDecoder(msg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return fmt.Errorf("opset_import: %w", err)
		}
		switch f {
		case 1:
			domain, err = d.stringField("domain", wt)
		case 2:
			version, err = d.int64Field("version", wt)
		default:
			err = d.skip(wt)
		}
		if err != nil {
			return fmt.Errorf("opset_import: %w", err)
		}
	}
	domain = normDomain(domain)
	if old, ok := l.model.Opsets[domain]; ok && old != version {
		return fmt.Errorf("opset_import lists domain %q twice (versions %d and %d)", domain, old, version)
	}
	l.model.Opsets[domain] = version
	return nil
}

// decodeStringPair reads a StringStringEntryProto (key = 1, value = 2).
func decodeStringPair(msg []byte) (key, value string, err error) {
	d := newDecoder(msg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return "", "", err
		}
		switch f {
		case 1:
			key, err = d.stringField("key", wt)
		case 2:
			value, err = d.stringField("value", wt)
		default:
			err = d.skip(wt)
		}
		if err != nil {
			return "", "", err
		}
	}
	return key, value, nil
}

// GraphProto and NodeProto field numbers (onnx.proto).
const (
	gpNode              = 1
	gpName              = 2
	gpInitializer       = 5
	gpDoc               = 10
	gpInput             = 11
	gpOutput            = 12
	gpValueInfo         = 13
	gpSparseInitializer = 15

	npInput     = 1
	npOutput    = 2
	npName      = 3
	npOpType    = 4
	npAttribute = 5
	npDoc       = 6
	npDomain    = 7
)

// rawNode is a NodeProto read far enough to create its outputs; attributes
// wait until every value of the graph exists, because subgraphs resolve
// outer references against them.
type rawNode struct {
	node    *Node
	inputs  []string
	outputs []string
	attrs   [][]byte
}

// decodeGraph builds a GraphProto. parent and owner are nil for the main
// graph; depth counts enclosing graphs.
func (l *loader) decodeGraph(msg []byte, parent *Graph, owner *Node, depth int) (*Graph, error) {
	if depth > maxGraphDepth {
		return nil, fmt.Errorf("subgraphs nested deeper than %d levels", maxGraphDepth)
	}
	g := newGraph(parent, owner)
	var nodes, inits, inputs, outputs, infos [][]byte
	d := newDecoder(msg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return nil, graphErr(g, err)
		}
		var b []byte
		switch f {
		case gpNode, gpInitializer, gpInput, gpOutput, gpValueInfo:
			if b, err = d.bytesField("graph field", wt); err != nil {
				break
			}
			switch f {
			case gpNode:
				nodes = append(nodes, b)
			case gpInitializer:
				inits = append(inits, b)
			case gpInput:
				inputs = append(inputs, b)
			case gpOutput:
				outputs = append(outputs, b)
			case gpValueInfo:
				infos = append(infos, b)
			}
		case gpName:
			g.Name, err = d.stringField("name", wt)
		case gpDoc:
			g.Doc, err = d.stringField("doc_string", wt)
		case gpSparseInitializer:
			return nil, graphErr(g, fmt.Errorf("sparse initializers are not supported"))
		default:
			err = d.skip(wt)
		}
		if err != nil {
			return nil, graphErr(g, err)
		}
	}
	if err := l.buildGraph(g, nodes, inits, inputs, outputs, infos, depth); err != nil {
		return nil, graphErr(g, err)
	}
	return g, nil
}

func graphErr(g *Graph, err error) error {
	return fmt.Errorf("graph %q: %w", g.Name, err)
}

func (l *loader) buildGraph(g *Graph, nodes, inits, inputs, outputs, infos [][]byte, depth int) error {
	for i, b := range inits {
		t, err := l.decodeTensor(b)
		if err != nil {
			return fmt.Errorf("initializer %d: %w", i, err)
		}
		if t.Name == "" {
			return fmt.Errorf("initializer %d has no name", i)
		}
		if g.values[t.Name] != nil {
			return fmt.Errorf("initializer %q is defined twice", t.Name)
		}
		v := g.addValue(t.Name)
		v.Type, v.Const = t.Type, t
		v.Declared = dimsOf(t.Dims)
		g.Initializers = append(g.Initializers, v)
	}
	for i, b := range inputs {
		vi, err := decodeValueInfo(b, true)
		if err != nil {
			return fmt.Errorf("graph input %d: %w", i, err)
		}
		if v := g.values[vi.name]; v != nil {
			if v.Const == nil {
				return fmt.Errorf("graph input %q is listed twice", vi.name)
			}
			// An initializer also listed as an input (IR < 4 style, or a
			// default value): it stays an initializer, not a runtime input.
			if vi.typ != dtype.Undefined && vi.typ != v.Type {
				return fmt.Errorf("graph input %q is declared %v but its initializer is %v", vi.name, vi.typ, v.Type)
			}
			continue
		}
		v := g.addValue(vi.name)
		v.Type, v.Declared, v.Doc = vi.typ, vi.dims, vi.doc
		g.Inputs = append(g.Inputs, v)
	}

	raws := make([]rawNode, len(nodes))
	for i, b := range nodes {
		rn, err := decodeNode(b, i)
		if err != nil {
			return err
		}
		rn.node.graph = g
		for _, name := range rn.outputs {
			if name == "" {
				rn.node.Outputs = append(rn.node.Outputs, nil)
				continue
			}
			if old := g.values[name]; old != nil {
				if old.Producer != nil {
					return fmt.Errorf("value %q is produced by both node %v and node %v", name, old.Producer, rn.node)
				}
				return fmt.Errorf("node %v output %q redefines a graph input or initializer", rn.node, name)
			}
			v := g.addValue(name)
			v.Producer = rn.node
			rn.node.Outputs = append(rn.node.Outputs, v)
		}
		raws[i] = rn
	}
	for _, rn := range raws {
		n := rn.node
		for _, b := range rn.attrs {
			a, err := l.decodeAttr(b, g, n, depth)
			if err != nil {
				return fmt.Errorf("node %v: %w", n, err)
			}
			if _, dup := n.Attrs[a.Name]; dup {
				return fmt.Errorf("node %v: attribute %q given twice", n, a.Name)
			}
			n.Attrs[a.Name] = a
		}
		if err := setConstant(n); err != nil {
			return err
		}
	}
	for _, rn := range raws {
		n := rn.node
		for i, name := range rn.inputs {
			if name == "" {
				n.Inputs = append(n.Inputs, nil)
				continue
			}
			v := g.resolve(name)
			if v == nil {
				return fmt.Errorf("node %v input %d %q is dangling: no node produces it and it is not a graph input or initializer", n, i, name)
			}
			n.Inputs = append(n.Inputs, v)
		}
		g.Nodes = append(g.Nodes, n)
	}

	for i, b := range outputs {
		vi, err := decodeValueInfo(b, true)
		if err != nil {
			return fmt.Errorf("graph output %d: %w", i, err)
		}
		v := g.resolve(vi.name)
		if v == nil {
			return fmt.Errorf("graph output %q is never produced", vi.name)
		}
		v.declare(vi)
		g.Outputs = append(g.Outputs, v)
	}
	for i, b := range infos {
		vi, err := decodeValueInfo(b, false)
		if err != nil {
			return fmt.Errorf("value_info %d: %w", i, err)
		}
		// value_info may describe values this reader does not keep (or that a
		// later optimisation removed); only annotate what exists.
		if v := g.values[vi.name]; v != nil {
			v.declare(vi)
		}
	}
	g.link()
	order, err := g.topoOrder()
	if err != nil {
		return err // decodeGraph adds the graph's name
	}
	g.Nodes = order
	return nil
}

// declare fills type and shape from a value_info where the value has none;
// what an initializer's tensor says wins over a declaration.
func (v *Value) declare(vi valueInfo) {
	if v.Type == dtype.Undefined {
		v.Type = vi.typ
	}
	if v.Declared == nil {
		v.Declared = vi.dims
	}
	if v.Doc == "" {
		v.Doc = vi.doc
	}
}

// resolve finds name in g's scope or, for subgraphs, in an enclosing scope;
// a name found outside becomes an Outer value in g and in every graph between
// g and the defining one, so each level lists what it takes from outside.
func (g *Graph) resolve(name string) *Value {
	if v := g.values[name]; v != nil {
		return v
	}
	if g.Parent == nil {
		return nil
	}
	pv := g.Parent.resolve(name)
	if pv == nil {
		return nil
	}
	v := g.addValue(name)
	v.Type, v.Declared, v.Outer = pv.Type, pv.Declared, true
	g.outer = append(g.outer, v)
	return v
}

// addValue registers a new value called name in g's scope.
func (g *Graph) addValue(name string) *Value {
	v := &Value{Name: name, graph: g}
	g.values[name] = v
	g.names.add(name)
	return v
}

func dimsOf(dims []int64) []Dim {
	out := make([]Dim, len(dims))
	for i, d := range dims {
		out[i] = Dim{Value: d}
	}
	return out
}

// decodeNode reads a NodeProto's names, op type and raw attributes. index is
// the node's position in the file, used to name unnamed nodes.
func decodeNode(msg []byte, index int) (rawNode, error) {
	n := &Node{Attrs: map[string]*Attr{}}
	rn := rawNode{node: n}
	d := newDecoder(msg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return rn, fmt.Errorf("node %d: %w", index, err)
		}
		var s string
		switch f {
		case npInput:
			if s, err = d.stringField("input", wt); err == nil {
				rn.inputs = append(rn.inputs, s)
			}
		case npOutput:
			if s, err = d.stringField("output", wt); err == nil {
				rn.outputs = append(rn.outputs, s)
			}
		case npName:
			n.Name, err = d.stringField("name", wt)
		case npOpType:
			n.OpType, err = d.stringField("op_type", wt)
		case npDomain:
			n.Domain, err = d.stringField("domain", wt)
		case npDoc:
			n.Doc, err = d.stringField("doc_string", wt)
		case npAttribute:
			var b []byte
			if b, err = d.bytesField("attribute", wt); err == nil {
				rn.attrs = append(rn.attrs, b)
			}
		default:
			err = d.skip(wt)
		}
		if err != nil {
			return rn, fmt.Errorf("node %d (%q): %w", index, n.Name, err)
		}
	}
	if n.OpType == "" {
		return rn, fmt.Errorf("node %d (%q) has no op_type", index, n.Name)
	}
	n.Domain = normDomain(n.Domain)
	if n.Name == "" {
		n.Name = fmt.Sprintf("%s_%d", n.OpType, index)
	}
	return rn, nil
}

// setConstant records a default-domain Constant node's value on its output so
// later passes can fold through it.
func setConstant(n *Node) error {
	if n.OpType != "Constant" || n.Domain != "" || len(n.Outputs) != 1 || n.Outputs[0] == nil {
		return nil
	}
	out := n.Outputs[0]
	var t *Tensor
	var err error
	switch {
	case n.Attrs["value"] != nil && n.Attrs["value"].Kind == KindTensor:
		t = n.Attrs["value"].T
	case n.Attrs["value_float"] != nil && n.Attrs["value_float"].Kind == KindFloat:
		t, err = Float32Tensor(out.Name, nil, []float32{n.Attrs["value_float"].F})
	case n.Attrs["value_floats"] != nil && n.Attrs["value_floats"].Kind == KindFloats:
		fs := n.Attrs["value_floats"].Floats
		t, err = Float32Tensor(out.Name, []int64{int64(len(fs))}, fs)
	case n.Attrs["value_int"] != nil && n.Attrs["value_int"].Kind == KindInt:
		t, err = Int64Tensor(out.Name, nil, []int64{n.Attrs["value_int"].I})
	case n.Attrs["value_ints"] != nil && n.Attrs["value_ints"].Kind == KindInts:
		is := n.Attrs["value_ints"].Ints
		t, err = Int64Tensor(out.Name, []int64{int64(len(is))}, is)
	default:
		// value_string(s) and sparse_value: not numeric, left to later passes.
		return nil
	}
	if err != nil {
		return fmt.Errorf("node %v: %w", n, err)
	}
	out.Const = t
	out.Type = t.Type
	out.Declared = dimsOf(t.Dims)
	return nil
}

// valueInfo is a decoded ValueInfoProto.
type valueInfo struct {
	name string
	typ  dtype.Type
	dims []Dim // nil when the shape is absent (rank unknown)
	doc  string
}

// decodeValueInfo reads a ValueInfoProto. Graph inputs and outputs must be
// tensors (needTensor); other value_info of other kinds is kept untyped.
func decodeValueInfo(msg []byte, needTensor bool) (valueInfo, error) {
	var vi valueInfo
	var typeMsg []byte
	d := newDecoder(msg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return vi, err
		}
		switch f {
		case 1:
			vi.name, err = d.stringField("name", wt)
		case 2:
			typeMsg, err = d.bytesField("type", wt)
		case 3:
			vi.doc, err = d.stringField("doc_string", wt)
		default:
			err = d.skip(wt)
		}
		if err != nil {
			return vi, fmt.Errorf("value %q: %w", vi.name, err)
		}
	}
	if vi.name == "" {
		return vi, fmt.Errorf("value without a name")
	}
	if err := vi.decodeType(typeMsg, needTensor); err != nil {
		return vi, fmt.Errorf("value %q: %w", vi.name, err)
	}
	return vi, nil
}

// decodeType reads a TypeProto. Only tensor_type (field 1) is descended into:
// the other kinds are recursive messages this engine does not run.
func (vi *valueInfo) decodeType(msg []byte, needTensor bool) error {
	var tensorMsg []byte
	other := ""
	d := newDecoder(msg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return err
		}
		switch f {
		case 1:
			tensorMsg, err = d.bytesField("tensor_type", wt)
		case 4:
			other, err = "sequence", d.skip(wt)
		case 5:
			other, err = "map", d.skip(wt)
		case 8:
			other, err = "sparse tensor", d.skip(wt)
		case 9:
			other, err = "optional", d.skip(wt)
		default:
			err = d.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	if tensorMsg == nil {
		if other != "" && needTensor {
			return fmt.Errorf("%s types are not supported", other)
		}
		return nil
	}
	d = newDecoder(tensorMsg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return err
		}
		switch f {
		case 1:
			var et int64
			if et, err = d.int64Field("elem_type", wt); err == nil {
				if et < 0 || et > math.MaxInt32 || !dtype.Type(et).Valid() {
					return fmt.Errorf("unknown element type %d", et)
				}
				vi.typ = dtype.Type(et)
			}
		case 2:
			var b []byte
			if b, err = d.bytesField("shape", wt); err == nil {
				vi.dims, err = decodeShape(b)
			}
		default:
			err = d.skip(wt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeShape reads a TensorShapeProto. A present shape with no dims is a
// scalar, so the result is non-nil even when empty.
func decodeShape(msg []byte) ([]Dim, error) {
	dims := []Dim{}
	d := newDecoder(msg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return nil, err
		}
		if f != 1 {
			if err := d.skip(wt); err != nil {
				return nil, err
			}
			continue
		}
		b, err := d.bytesField("dim", wt)
		if err != nil {
			return nil, err
		}
		dim := Dim{Value: -1}
		dd := newDecoder(b)
		for !dd.done() {
			f, wt, err := dd.key()
			if err != nil {
				return nil, err
			}
			switch f {
			case 1:
				var v int64
				if v, err = dd.int64Field("dim_value", wt); err == nil {
					// oneof: the last of dim_value/dim_param wins. Negative
					// sizes are not meaningful; treat them as unknown.
					dim = Dim{Value: max(v, -1)}
				}
			case 2:
				var s string
				if s, err = dd.stringField("dim_param", wt); err == nil {
					dim = Dim{Value: -1, Param: s}
				}
			default:
				err = dd.skip(wt)
			}
			if err != nil {
				return nil, err
			}
		}
		dims = append(dims, dim)
	}
	return dims, nil
}

// externalData resolves a tensor's external_data entries to a view of the
// mapped file. The file must lie inside the model's folder after symlinks are
// resolved, and offset+length must lie inside the file.
func (l *loader) externalData(t *Tensor, fields map[string]string, want int64) ([]byte, error) {
	loc := fields["location"]
	if loc == "" {
		return nil, fmt.Errorf("external data without a location")
	}
	if l.dir == "" {
		return nil, fmt.Errorf("external data %q, but the model was parsed without a folder", loc)
	}
	if strings.ContainsRune(loc, 0) {
		return nil, fmt.Errorf("external data location %q contains a NUL byte", loc)
	}
	if filepath.IsAbs(loc) || strings.HasPrefix(loc, "/") {
		return nil, fmt.Errorf("external data location %q is absolute; only paths inside the model's folder are allowed", loc)
	}
	clean := filepath.Clean(loc)
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("external data location %q leaves the model's folder", loc)
	}
	if l.realDir == "" {
		rd, err := filepath.EvalSymlinks(l.dir)
		if err != nil {
			return nil, fmt.Errorf("model folder: %w", err)
		}
		if rd, err = filepath.Abs(rd); err != nil {
			return nil, fmt.Errorf("model folder: %w", err)
		}
		l.realDir = rd
	}
	real, err := filepath.EvalSymlinks(filepath.Join(l.dir, clean))
	if err != nil {
		return nil, fmt.Errorf("external data %q: %w", loc, err)
	}
	if real, err = filepath.Abs(real); err != nil {
		return nil, fmt.Errorf("external data %q: %w", loc, err)
	}
	rel, err := filepath.Rel(l.realDir, real)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("external data %q resolves to %s, which is not inside the model's folder %s", loc, real, l.realDir)
	}
	data, ok := l.ext[real]
	if !ok {
		// The final component must not be a symlink at open time either, so a
		// link swapped in after the check above cannot redirect the open.
		mp, err := mapFile(real, true)
		if err != nil {
			return nil, fmt.Errorf("external data %q: %w", loc, err)
		}
		if mp.release != nil {
			l.model.maps = append(l.model.maps, mp)
		}
		data = mp.data
		l.ext[real] = data
		l.model.extFiles = append(l.model.extFiles, real)
	}
	var off, length int64
	if s, ok := fields["offset"]; ok {
		if off, err = parseNonNegative("offset", s); err != nil {
			return nil, err
		}
	}
	length = want
	if s, ok := fields["length"]; ok {
		if length, err = parseNonNegative("length", s); err != nil {
			return nil, err
		}
	}
	size := int64(len(data))
	if off > size || length > size-off {
		return nil, fmt.Errorf("external data %q: offset %d + length %d is beyond the end of the file (%d bytes)", loc, off, length, size)
	}
	if length != want {
		return nil, fmt.Errorf("external data %q: length %d, but dims %v of %v need %d bytes", loc, length, t.Dims, t.Type, want)
	}
	return data[off : off+length : off+length], nil
}
