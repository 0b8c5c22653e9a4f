package engine

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
)

// Hand-built test models, assembled with graph/graphtest and serialized by
// graph.Marshal: they go through graph.Parse like real files do.

// pb is one piece of a test model: a node (nodePB), a value (tvi), a tensor
// (tensorPB) or a graph (graphPB).
type pb = any

// tvi is a graph input or output; dims are ints (dim_value) or strings
// (dim_param), none for a scalar.
func tvi(name string, t dtype.Type, dims ...any) pb { return graphtest.Value(name, t, dims...) }

// tensorPB is a tensor of raw little-endian bytes.
func tensorPB(name string, t dtype.Type, dims []int64, raw []byte) pb {
	return graphtest.Tensor(name, t, dims, raw)
}

func f32Raw(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

type attrPB = *graph.Attr

func aInt(name string, v int64) attrPB     { return graphtest.Int(name, v) }
func aFloat(name string, v float32) attrPB { return graphtest.Float(name, v) }
func aTensor(name string, t pb) attrPB     { return graphtest.TensorAttr(name, t.(*graph.Tensor)) }
func aGraph(name string, g pb) attrPB      { return graphtest.GraphAttr(name, g.(*graph.Graph)) }

// nodePB is a node of the default domain.
func nodePB(op, name string, ins, outs []string, attrs ...attrPB) pb {
	return graphtest.Node(op, name, ins, outs, attrs...)
}

func withDomain(n pb, domain string) pb { return graphtest.InDomain(n.(*graph.Node), domain) }

// graphPB assembles a graph of nodes, initializer tensors, inputs and
// outputs.
func graphPB(name string, nodes, inits, inputs, outputs []pb) pb {
	var ns []*graph.Node
	for _, n := range nodes {
		ns = append(ns, n.(*graph.Node))
	}
	var is []*graph.Value
	for _, t := range inits {
		is = append(is, graphtest.Init(t.(*graph.Tensor)))
	}
	values := func(ps []pb) []*graph.Value {
		var out []*graph.Value
		for _, p := range ps {
			out = append(out, p.(*graph.Value))
		}
		return out
	}
	return graphtest.Graph(name, ns, is, values(inputs), values(outputs))
}

// modelPB is the model file of g importing the default domain at opset and
// the tlite domain at its version.
func modelPB(opset int64, g pb) []byte {
	gg, ok := g.(*graph.Graph)
	if !ok {
		panic(fmt.Sprintf("modelPB of a %T", g))
	}
	return graphtest.Bytes(graphtest.Model(opset, gg))
}
