// Package graph reads ONNX models and holds them as a rewritable IR.
//
// The reader decodes the protobuf wire format itself: initializer bytes stay
// views into the memory-mapped model (and into memory-mapped external data
// files), so loading a multi-gigabyte model costs page-table entries, not a
// copy on the Go heap. The IR is pointer-based: a Node points at its input and
// output Values, a Value at its producer and consumers, and the rewrite API
// (rewrite.go) keeps those links consistent.
package graph

import (
	"fmt"
	"strconv"
	"unsafe"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Model is a loaded ONNX model. Tensors whose bytes came from the file are
// views into memory mappings that Close releases.
type Model struct {
	IRVersion       int64
	Producer        string // producer_name
	ProducerVersion string
	Domain          string
	ModelVersion    int64
	Doc             string
	// Opsets maps an operator-set domain to its imported version; the default
	// domain is "" (a file's "ai.onnx" is stored as "").
	Opsets   map[string]int64
	Graph    *Graph
	Metadata map[string]string
	// Dir is the folder external data is resolved in ("" for in-memory models
	// parsed without one).
	Dir string

	maps     []mapping // every mapping to release on Close (the model file and external files)
	extFiles []string  // external data files read, resolved absolute paths
	views    []*Tensor // tensors whose Data point into maps, cleared on Close
}

// ExternalFiles lists the external data files the model's initializers
// were read from, as absolute paths with symlinks resolved: the files a
// writer must not replace while, or after, deriving a model from this one.
func (m *Model) ExternalFiles() []string { return append([]string(nil), m.extFiles...) }

// Mapped reports whether b lies entirely inside one of the model's file
// mappings (memory the Go runtime does not own, valid until Close): such
// bytes may be handed to a device that reads host memory in place. It is
// false for models parsed from memory and where files are read, not mapped.
func (m *Model) Mapped(b []byte) bool {
	mp := m.mappingOf(b)
	return mp != nil
}

// DropPages tells the kernel that the file-mapped bytes b are not needed in
// memory for now (madvise MADV_DONTNEED on the whole pages inside b, on
// Linux): after their contents were copied to a device, they stop counting
// toward the process's resident memory. They stay readable: a later read
// faults them in again from the file. Bytes outside the mappings are left
// alone.
func (m *Model) DropPages(b []byte) error {
	if m.mappingOf(b) == nil {
		return nil
	}
	return dropPages(b)
}

// mappingOf returns the file mapping holding all of b, or nil.
func (m *Model) mappingOf(b []byte) *mapping {
	if len(b) == 0 {
		return nil
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for i := range m.maps {
		mp := &m.maps[i]
		if mp.release == nil || len(mp.data) == 0 {
			continue
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(mp.data)))
		if p >= lo && p-lo <= uintptr(len(mp.data)) && uintptr(len(b)) <= uintptr(len(mp.data))-(p-lo) {
			return mp
		}
	}
	return nil
}

// Opset returns the imported version of domain ("" or "ai.onnx" for the
// default domain), or 0 when the model does not import it.
func (m *Model) Opset(domain string) int64 {
	return m.Opsets[normDomain(domain)]
}

// normDomain maps the default domain's two spellings onto one.
func normDomain(d string) string {
	if d == "ai.onnx" {
		return ""
	}
	return d
}

// Close releases the memory mappings behind the model's tensors. Tensors whose
// Data were views are cleared (Data = nil) so a use after Close fails loudly
// in Go code instead of faulting on unmapped memory. Close is idempotent.
func (m *Model) Close() error {
	for _, t := range m.views {
		t.Data = nil
	}
	m.views = nil
	var first error
	for _, mp := range m.maps {
		if err := mp.release(); err != nil && first == nil {
			first = err
		}
	}
	m.maps = nil
	return first
}

// Graph is one ONNX graph: the model's main graph or a subgraph held by a
// node attribute (If branches, Loop and Scan bodies).
type Graph struct {
	Name string
	Doc  string
	// Nodes are kept in topological order: every node comes after the
	// producers of its inputs (including values its subgraphs use).
	Nodes []*Node
	// Inputs are the runtime inputs. Initializers that a file also lists as
	// graph inputs are not among them: they are in Initializers.
	Inputs       []*Value
	Outputs      []*Value
	Initializers []*Value
	// Parent is the enclosing graph for subgraphs, nil for the main graph.
	Parent *Graph
	// Owner is the node whose attribute holds this subgraph, nil for the main graph.
	Owner *Node

	values map[string]*Value // every value visible by name in this graph's own scope
	outer  []*Value          // this graph's Outer values, in creation order
	names  *nameSet          // shared by a main graph and all its subgraphs
}

// nameSet tracks every value name used anywhere in one model so that names
// minted by rewrites stay unique across all scopes.
type nameSet struct {
	used map[string]struct{}
	next map[string]int // per base name, the next suffix NewValue tries
}

func (s *nameSet) add(name string) { s.used[name] = struct{}{} }

func (s *nameSet) has(name string) bool { _, ok := s.used[name]; return ok }

// newGraph makes an empty graph; names is shared with the enclosing graph.
func newGraph(parent *Graph, owner *Node) *Graph {
	g := &Graph{Parent: parent, Owner: owner, values: map[string]*Value{}}
	if parent != nil {
		g.names = parent.names
	} else {
		g.names = &nameSet{used: map[string]struct{}{}, next: map[string]int{}}
	}
	return g
}

// Value returns the value named name in this graph's own scope (inputs,
// initializers, node outputs and outer references), or nil.
func (g *Graph) Value(name string) *Value { return g.values[name] }

// Lookup resolves name the way a node of this graph would: in this graph, then
// in each enclosing graph. It returns nil when no scope defines name.
func (g *Graph) Lookup(name string) *Value {
	for s := g; s != nil; s = s.Parent {
		if v := s.values[name]; v != nil {
			return v
		}
	}
	return nil
}

// OuterValues returns the values this graph uses from enclosing graphs, in the
// order they were first referenced.
func (g *Graph) OuterValues() []*Value {
	out := make([]*Value, 0, len(g.outer))
	for _, v := range g.outer {
		if g.values[v.Name] == v {
			out = append(out, v)
		}
	}
	return out
}

// Dim is one declared dimension of a value's type, as written in the file.
type Dim struct {
	Value int64  // the size, or -1 when not a fixed size
	Param string // the symbolic name for a dim_param, "" otherwise
}

// Known reports whether the dimension is a fixed size.
func (d Dim) Known() bool { return d.Param == "" && d.Value >= 0 }

// String formats a dimension as "4", "batch" or "?".
func (d Dim) String() string {
	switch {
	case d.Param != "":
		return d.Param
	case d.Value >= 0:
		return strconv.FormatInt(d.Value, 10)
	}
	return "?"
}

// Value is a tensor flowing along graph edges: a graph input, an initializer
// or a node output.
type Value struct {
	Name string
	Type dtype.Type // dtype.Undefined when the file does not say and inference has not run
	// Declared is the shape written in the file; nil means the rank is unknown.
	Declared []Dim
	// Shape is filled by shape inference; nil until then.
	Shape []symshape.Expr
	// Elems holds the symbolic contents of small integer tensors (shapes being
	// computed), filled by inference.
	Elems []symshape.Expr
	// Const is the value's contents when known: for initializers and the
	// outputs of Constant nodes.
	Const *Tensor
	// Producer is the node computing this value; nil for graph inputs,
	// initializers and outer references.
	Producer *Node
	// Consumers are the nodes reading this value, each listed once, including
	// nodes whose subgraphs read it (implicit inputs).
	Consumers []*Node
	// Outer marks a subgraph's reference to a value of an enclosing graph;
	// Graph().Parent.Lookup(Name) finds the value it stands for, which is
	// authoritative: Type and Declared are copied from it at load time only.
	Outer bool
	Doc   string

	graph *Graph
}

// Graph returns the graph whose scope holds v.
func (v *Value) Graph() *Graph { return v.graph }

// IsInitializer reports whether v is an initializer of its graph.
func (v *Value) IsInitializer() bool {
	if v.graph == nil || v.Const == nil || v.Producer != nil {
		return false
	}
	for _, w := range v.graph.Initializers {
		if w == v {
			return true
		}
	}
	return false
}

// String returns the value's name, for error messages.
func (v *Value) String() string {
	if v == nil {
		return "<omitted>"
	}
	return v.Name
}

// Node is one operator application.
type Node struct {
	// Name is the file's node name or, when the file has none, "<OpType>_<index>"
	// with the node's index in the file, so that errors can always name it.
	Name   string
	OpType string
	Domain string // "" for the default domain (the file's "ai.onnx" is stored as "")
	// Inputs and Outputs are positional; a nil entry is an omitted optional one.
	Inputs  []*Value
	Outputs []*Value
	Attrs   map[string]*Attr
	Doc     string

	graph *Graph
}

// Graph returns the graph n belongs to, or nil once removed.
func (n *Node) Graph() *Graph { return n.graph }

// String names the node for error messages: `"name" (OpType)`.
func (n *Node) String() string {
	if n == nil {
		return "<nil node>"
	}
	return fmt.Sprintf("%q (%s)", n.Name, n.OpType)
}

// Subgraphs returns the graphs held by n's attributes, in attribute-name order.
func (n *Node) Subgraphs() []*Graph {
	// Most nodes hold no graph; skip the sort for them, since uses() asks
	// every node on every link, sort and validate pass.
	has := false
	for _, a := range n.Attrs {
		if a.G != nil || len(a.Graphs) > 0 {
			has = true
			break
		}
	}
	if !has {
		return nil
	}
	var out []*Graph
	for _, name := range sortedAttrNames(n.Attrs) {
		a := n.Attrs[name]
		if a.G != nil {
			out = append(out, a.G)
		}
		for _, g := range a.Graphs {
			if g != nil {
				out = append(out, g)
			}
		}
	}
	return out
}

// ImplicitInputs returns the values of n's graph that n's subgraphs read by
// name (outer references), each once. They are inputs for ordering and
// liveness even though they are not in n.Inputs.
func (n *Node) ImplicitInputs() []*Value {
	if n.graph == nil {
		return nil
	}
	var out []*Value
	seen := map[*Value]bool{}
	for _, s := range n.Subgraphs() {
		for _, o := range s.OuterValues() {
			v := n.graph.values[o.Name]
			if v != nil && !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return out
}

// uses returns every value n reads, explicit inputs first, each once.
func (n *Node) uses() []*Value {
	out := make([]*Value, 0, len(n.Inputs))
	var seen map[*Value]bool
	if len(n.Inputs) > 16 {
		// A map keeps nodes with very many inputs (a hostile file's, or a
		// huge Concat) linear instead of quadratic.
		seen = make(map[*Value]bool, len(n.Inputs))
	}
	add := func(v *Value) {
		if v == nil {
			return
		}
		if seen != nil {
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
			return
		}
		if !containsValue(out, v) {
			out = append(out, v)
		}
	}
	for _, v := range n.Inputs {
		add(v)
	}
	for _, v := range n.ImplicitInputs() {
		add(v)
	}
	return out
}

func containsValue(vs []*Value, v *Value) bool {
	for _, w := range vs {
		if w == v {
			return true
		}
	}
	return false
}
