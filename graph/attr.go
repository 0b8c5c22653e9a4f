package graph

import (
	"fmt"
	"sort"
)

// AttrKind is an attribute's type, numbered as ONNX's AttributeProto.AttributeType.
type AttrKind int32

// The attribute kinds this package reads. Sparse tensors and type protos are
// rejected when a file uses them.
const (
	KindUndefined AttrKind = 0
	KindFloat     AttrKind = 1
	KindInt       AttrKind = 2
	KindString    AttrKind = 3
	KindTensor    AttrKind = 4
	KindGraph     AttrKind = 5
	KindFloats    AttrKind = 6
	KindInts      AttrKind = 7
	KindStrings   AttrKind = 8
	KindTensors   AttrKind = 9
	KindGraphs    AttrKind = 10

	kindSparseTensor  AttrKind = 11
	kindSparseTensors AttrKind = 12
	kindTypeProto     AttrKind = 13
	kindTypeProtos    AttrKind = 14
)

var kindNames = map[AttrKind]string{
	KindUndefined: "UNDEFINED", KindFloat: "FLOAT", KindInt: "INT", KindString: "STRING",
	KindTensor: "TENSOR", KindGraph: "GRAPH", KindFloats: "FLOATS", KindInts: "INTS",
	KindStrings: "STRINGS", KindTensors: "TENSORS", KindGraphs: "GRAPHS",
	kindSparseTensor: "SPARSE_TENSOR", kindSparseTensors: "SPARSE_TENSORS",
	kindTypeProto: "TYPE_PROTO", kindTypeProtos: "TYPE_PROTOS",
}

// String returns ONNX's name for the kind, e.g. "INTS".
func (k AttrKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("AttrKind(%d)", int32(k))
}

// Attr is one node attribute; only the field matching Kind is meaningful.
type Attr struct {
	Name    string
	Kind    AttrKind
	F       float32
	I       int64
	S       string
	T       *Tensor
	G       *Graph
	Floats  []float32
	Ints    []int64
	Strings []string
	Tensors []*Tensor
	Graphs  []*Graph
	Doc     string
}

// Attr returns the attribute called name, or nil.
func (n *Node) Attr(name string) *Attr { return n.Attrs[name] }

// AttrInt returns the INT attribute name, or def when absent or of another kind.
func (n *Node) AttrInt(name string, def int64) int64 {
	if a := n.Attrs[name]; a != nil && a.Kind == KindInt {
		return a.I
	}
	return def
}

// AttrFloat returns the FLOAT attribute name, or def when absent or of another kind.
func (n *Node) AttrFloat(name string, def float32) float32 {
	if a := n.Attrs[name]; a != nil && a.Kind == KindFloat {
		return a.F
	}
	return def
}

// AttrString returns the STRING attribute name, or def when absent or of another kind.
func (n *Node) AttrString(name string, def string) string {
	if a := n.Attrs[name]; a != nil && a.Kind == KindString {
		return a.S
	}
	return def
}

// AttrInts returns the INTS attribute name; ok is false when absent or of
// another kind. An empty list present in the file is returned with ok true.
func (n *Node) AttrInts(name string) (vals []int64, ok bool) {
	if a := n.Attrs[name]; a != nil && a.Kind == KindInts {
		return a.Ints, true
	}
	return nil, false
}

// AttrFloats returns the FLOATS attribute name; ok is false when absent or of another kind.
func (n *Node) AttrFloats(name string) (vals []float32, ok bool) {
	if a := n.Attrs[name]; a != nil && a.Kind == KindFloats {
		return a.Floats, true
	}
	return nil, false
}

// AttrStrings returns the STRINGS attribute name; ok is false when absent or of another kind.
func (n *Node) AttrStrings(name string) (vals []string, ok bool) {
	if a := n.Attrs[name]; a != nil && a.Kind == KindStrings {
		return a.Strings, true
	}
	return nil, false
}

// AttrTensor returns the TENSOR attribute name, or nil.
func (n *Node) AttrTensor(name string) *Tensor {
	if a := n.Attrs[name]; a != nil && a.Kind == KindTensor {
		return a.T
	}
	return nil
}

// AttrGraph returns the GRAPH attribute name, or nil.
func (n *Node) AttrGraph(name string) *Graph {
	if a := n.Attrs[name]; a != nil && a.Kind == KindGraph {
		return a.G
	}
	return nil
}

// SetAttr adds or replaces an attribute, for rewrites that build nodes.
func (n *Node) SetAttr(a *Attr) {
	if n.Attrs == nil {
		n.Attrs = map[string]*Attr{}
	}
	n.Attrs[a.Name] = a
}

func sortedAttrNames(m map[string]*Attr) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// AttributeProto field numbers (onnx.proto).
const (
	apName         = 1
	apF            = 2
	apI            = 3
	apS            = 4
	apT            = 5
	apG            = 6
	apFloats       = 7
	apInts         = 8
	apStrings      = 9
	apTensors      = 10
	apGraphs       = 11
	apDoc          = 13
	apTP           = 14
	apTypeProtos   = 15
	apType         = 20
	apRefAttrName  = 21
	apSparseTensor = 22
	apSparseTensrs = 23
)

// decodeAttr reads an AttributeProto of node owner in graph g. Subgraphs are
// built as children of g so they can resolve outer references; depth is the
// nesting depth of g.
func (l *loader) decodeAttr(msg []byte, g *Graph, owner *Node, depth int) (*Attr, error) {
	a := &Attr{}
	var (
		kind     int64
		seen     = map[int]bool{}
		graphMsg [][]byte // graphs are built after the whole attribute is read
		gMsg     []byte
	)
	d := newDecoder(msg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return nil, err
		}
		seen[f] = true
		switch f {
		case apName:
			a.Name, err = d.stringField("name", wt)
		case apType:
			kind, err = d.int64Field("type", wt)
		case apF:
			if wt != wireFixed32 {
				return nil, fmt.Errorf("attribute %q: f: wire type %d, want fixed32", a.Name, wt)
			}
			var fl []float32
			fl, err = d.packedFloat32s("f", wt, nil)
			if err == nil {
				a.F = fl[0]
			}
		case apI:
			a.I, err = d.int64Field("i", wt)
		case apS:
			a.S, err = d.stringField("s", wt)
		case apT:
			var b []byte
			if b, err = d.bytesField("t", wt); err == nil {
				a.T, err = l.decodeTensor(b)
			}
		case apG:
			gMsg, err = d.bytesField("g", wt)
		case apFloats:
			a.Floats, err = d.packedFloat32s("floats", wt, a.Floats)
		case apInts:
			a.Ints, err = d.packedInt64s("ints", wt, a.Ints)
		case apStrings:
			var s string
			if s, err = d.stringField("strings", wt); err == nil {
				a.Strings = append(a.Strings, s)
			}
		case apTensors:
			var b []byte
			if b, err = d.bytesField("tensors", wt); err == nil {
				var t *Tensor
				if t, err = l.decodeTensor(b); err == nil {
					a.Tensors = append(a.Tensors, t)
				}
			}
		case apGraphs:
			var b []byte
			if b, err = d.bytesField("graphs", wt); err == nil {
				graphMsg = append(graphMsg, b)
			}
		case apDoc:
			a.Doc, err = d.stringField("doc_string", wt)
		case apSparseTensor, apSparseTensrs:
			return nil, fmt.Errorf("attribute %q: sparse tensor attributes are not supported", a.Name)
		case apTP, apTypeProtos:
			return nil, fmt.Errorf("attribute %q: type-proto attributes are not supported", a.Name)
		case apRefAttrName:
			return nil, fmt.Errorf("attribute %q: ref_attr_name (function attribute reference) outside a function", a.Name)
		default:
			err = d.skip(wt)
		}
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", a.Name, err)
		}
	}
	if a.Name == "" {
		return nil, fmt.Errorf("attribute without a name")
	}
	a.Kind = AttrKind(kind)
	if kind == 0 {
		// Files from before IR version 2 leave the type out; the field that is
		// set says it.
		a.Kind = inferKind(seen)
	}
	switch a.Kind {
	case KindFloat, KindInt, KindString, KindFloats, KindInts, KindStrings:
	case KindTensor:
		if a.T == nil {
			return nil, fmt.Errorf("attribute %q: kind TENSOR without a tensor", a.Name)
		}
	case KindTensors:
	case KindGraph:
		if gMsg == nil {
			return nil, fmt.Errorf("attribute %q: kind GRAPH without a graph", a.Name)
		}
	case KindGraphs:
	case kindSparseTensor, kindSparseTensors, kindTypeProto, kindTypeProtos:
		return nil, fmt.Errorf("attribute %q: %v attributes are not supported", a.Name, a.Kind)
	default:
		return nil, fmt.Errorf("attribute %q: unknown attribute type %d", a.Name, kind)
	}
	// Only the graphs of the declared kind are built: a stray g field on an
	// INT attribute must not cost a subgraph parse.
	if a.Kind == KindGraph {
		sg, err := l.decodeGraph(gMsg, g, owner, depth+1)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", a.Name, err)
		}
		a.G = sg
	}
	if a.Kind == KindGraphs {
		for i, b := range graphMsg {
			sg, err := l.decodeGraph(b, g, owner, depth+1)
			if err != nil {
				return nil, fmt.Errorf("attribute %q graph %d: %w", a.Name, i, err)
			}
			a.Graphs = append(a.Graphs, sg)
		}
	}
	return a, nil
}

// inferKind guesses an untyped attribute's kind from the fields present.
func inferKind(seen map[int]bool) AttrKind {
	order := []struct {
		f int
		k AttrKind
	}{
		{apF, KindFloat}, {apI, KindInt}, {apS, KindString}, {apT, KindTensor}, {apG, KindGraph},
		{apFloats, KindFloats}, {apInts, KindInts}, {apStrings, KindStrings},
		{apTensors, KindTensors}, {apGraphs, KindGraphs},
	}
	for _, o := range order {
		if seen[o.f] {
			return o.k
		}
	}
	return KindUndefined
}
