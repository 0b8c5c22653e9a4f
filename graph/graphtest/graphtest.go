// Package graphtest builds small ONNX models for tests out of graph IR
// structs and serializes them with graph.Marshal, so that no test encodes
// protobuf by hand. Parsing the bytes back (graph.Parse) gives a model
// exactly as a file would, with every link resolved.
//
// Nodes name their inputs and outputs; Graph resolves the names into one
// Value each, in node order, so a value named by a node input and never
// produced (an outer-scope reference in a subgraph body) stays a bare name,
// as in a file. Only tests import this package.
package graphtest

import (
	"fmt"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
)

// Dims converts dims written as ints (fixed sizes), strings (dim_param
// symbols) or nil (an axis of unknown size) into declared dims. The result
// is never nil: no dims is a scalar.
func Dims(dims ...any) []graph.Dim {
	out := make([]graph.Dim, len(dims))
	for i, d := range dims {
		switch x := d.(type) {
		case int:
			out[i] = graph.Dim{Value: int64(x)}
		case int64:
			out[i] = graph.Dim{Value: x}
		case string:
			out[i] = graph.Dim{Value: -1, Param: x}
		case nil:
			out[i] = graph.Dim{Value: -1}
		default:
			panic(fmt.Sprintf("graphtest: dim %v of type %T", d, d))
		}
	}
	return out
}

// Value is a typed value with a declared shape (see Dims), for graph inputs
// and outputs.
func Value(name string, t dtype.Type, dims ...any) *graph.Value {
	return &graph.Value{Name: name, Type: t, Declared: Dims(dims...)}
}

// Unshaped is a value whose type is known and whose rank is not.
func Unshaped(name string, t dtype.Type) *graph.Value {
	return &graph.Value{Name: name, Type: t}
}

// Init is an initializer holding t.
func Init(t *graph.Tensor) *graph.Value {
	return &graph.Value{Name: t.Name, Type: t.Type, Const: t}
}

// Tensor is a tensor of raw little-endian bytes; it panics on bytes that do
// not fit the shape (a bug in the test).
func Tensor(name string, t dtype.Type, dims []int64, raw []byte) *graph.Tensor {
	if raw == nil {
		raw = []byte{}
	}
	x, err := graph.NewTensor(name, t, dims, raw)
	if err != nil {
		panic(fmt.Sprintf("graphtest: tensor %q: %v", name, err))
	}
	return x
}

// Float32s is a float32 tensor.
func Float32s(name string, dims []int64, vals ...float32) *graph.Tensor {
	x, err := graph.Float32Tensor(name, dims, vals)
	if err != nil {
		panic(fmt.Sprintf("graphtest: tensor %q: %v", name, err))
	}
	return x
}

// Int64s is an int64 tensor.
func Int64s(name string, dims []int64, vals ...int64) *graph.Tensor {
	x, err := graph.Int64Tensor(name, dims, vals)
	if err != nil {
		panic(fmt.Sprintf("graphtest: tensor %q: %v", name, err))
	}
	return x
}

// Node is a node of the default domain reading and writing the named
// values ("" for an omitted optional input).
func Node(op, name string, ins, outs []string, attrs ...*graph.Attr) *graph.Node {
	n := &graph.Node{Name: name, OpType: op, Attrs: map[string]*graph.Attr{}}
	for _, s := range ins {
		if s == "" {
			n.Inputs = append(n.Inputs, nil)
			continue
		}
		n.Inputs = append(n.Inputs, &graph.Value{Name: s})
	}
	for _, s := range outs {
		n.Outputs = append(n.Outputs, &graph.Value{Name: s})
	}
	for _, a := range attrs {
		n.Attrs[a.Name] = a
	}
	return n
}

// InDomain sets n's domain and returns it.
func InDomain(n *graph.Node, domain string) *graph.Node {
	n.Domain = domain
	return n
}

// Graph assembles a graph, resolving every name the nodes use into one
// Value: the inputs', the initializers', or a node output's (which takes
// the type and declared shape of the output of that name, when it is one).
func Graph(name string, nodes []*graph.Node, inits, inputs, outputs []*graph.Value) *graph.Graph {
	g := &graph.Graph{Name: name, Nodes: nodes, Inputs: inputs, Initializers: inits}
	byName := map[string]*graph.Value{}
	for _, v := range inputs {
		byName[v.Name] = v
	}
	for _, v := range inits {
		byName[v.Name] = v
	}
	declared := map[string]*graph.Value{}
	for _, v := range outputs {
		declared[v.Name] = v
	}
	resolve := func(v *graph.Value) *graph.Value {
		if v == nil {
			return nil
		}
		if r, ok := byName[v.Name]; ok {
			return r
		}
		byName[v.Name] = v
		return v
	}
	for _, n := range nodes {
		for i, v := range n.Inputs {
			n.Inputs[i] = resolve(v)
		}
		for i, v := range n.Outputs {
			if d, ok := declared[v.Name]; ok {
				v.Type, v.Declared = d.Type, d.Declared
			}
			n.Outputs[i] = resolve(v)
		}
	}
	for _, v := range outputs {
		if r, ok := byName[v.Name]; ok {
			g.Outputs = append(g.Outputs, r)
			continue
		}
		g.Outputs = append(g.Outputs, v)
	}
	return g
}

// Model wraps g in a model importing the default domain at opset and the
// tlite domain at its version.
func Model(opset int64, g *graph.Graph) *graph.Model {
	return &graph.Model{IRVersion: 8, Producer: "graphtest", Graph: g,
		Opsets: map[string]int64{"": opset, tlite.Domain: tlite.Version}}
}

// Bytes serializes m with graph.Marshal; it panics on a model Marshal
// refuses (a bug in the test).
func Bytes(m *graph.Model) []byte {
	b, err := graph.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("graphtest: %v", err))
	}
	return b
}

// Attributes.

// Int is an INT attribute.
func Int(name string, v int64) *graph.Attr { return &graph.Attr{Name: name, Kind: graph.KindInt, I: v} }

// Float is a FLOAT attribute.
func Float(name string, v float32) *graph.Attr {
	return &graph.Attr{Name: name, Kind: graph.KindFloat, F: v}
}

// String is a STRING attribute.
func String(name, v string) *graph.Attr {
	return &graph.Attr{Name: name, Kind: graph.KindString, S: v}
}

// Ints is an INTS attribute.
func Ints(name string, v ...int64) *graph.Attr {
	return &graph.Attr{Name: name, Kind: graph.KindInts, Ints: append([]int64{}, v...)}
}

// Floats is a FLOATS attribute.
func Floats(name string, v ...float32) *graph.Attr {
	return &graph.Attr{Name: name, Kind: graph.KindFloats, Floats: append([]float32{}, v...)}
}

// TensorAttr is a TENSOR attribute.
func TensorAttr(name string, t *graph.Tensor) *graph.Attr {
	return &graph.Attr{Name: name, Kind: graph.KindTensor, T: t}
}

// GraphAttr is a GRAPH attribute (a subgraph body).
func GraphAttr(name string, g *graph.Graph) *graph.Attr {
	return &graph.Attr{Name: name, Kind: graph.KindGraph, G: g}
}
