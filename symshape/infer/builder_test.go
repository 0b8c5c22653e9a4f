package infer

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
)

// A minimal ONNX writer for hand-built test graphs: the tests go through
// graph.Parse like real files do, so they exercise the same IR.

type pb []byte

func (b pb) varint(v uint64) pb {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func (b pb) key(field, wt int) pb { return b.varint(uint64(field<<3 | wt)) }

func (b pb) intField(field int, v int64) pb { return b.key(field, 0).varint(uint64(v)) }

func (b pb) bytesField(field int, v []byte) pb {
	return append(b.key(field, 2).varint(uint64(len(v))), v...)
}

func (b pb) strField(field int, s string) pb { return b.bytesField(field, []byte(s)) }

func (b pb) float32Field(field int, f float32) pb {
	b = b.key(field, 5)
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
}

// attr is an encoded AttributeProto.
type attr pb

func aInt(name string, v int64) attr {
	return attr(pb(nil).strField(1, name).intField(3, v).intField(20, 2))
}

func aFloat(name string, v float32) attr {
	return attr(pb(nil).strField(1, name).float32Field(2, v).intField(20, 1))
}

func aString(name, v string) attr {
	return attr(pb(nil).strField(1, name).strField(4, v).intField(20, 3))
}

func aInts(name string, v ...int64) attr {
	b := pb(nil).strField(1, name)
	for _, x := range v {
		b = b.intField(8, x)
	}
	return attr(b.intField(20, 7))
}

func aFloats(name string, v ...float32) attr {
	b := pb(nil).strField(1, name)
	for _, x := range v {
		b = b.float32Field(7, x)
	}
	return attr(b.intField(20, 6))
}

func aTensor(name string, t []byte) attr {
	return attr(pb(nil).strField(1, name).bytesField(5, t).intField(20, 4))
}

func aGraph(name string, g []byte) attr {
	return attr(pb(nil).strField(1, name).bytesField(6, g).intField(20, 5))
}

// tensorI64 encodes an int64 TensorProto.
func tensorI64(name string, dims []int64, vals ...int64) []byte {
	b := pb(nil)
	for _, d := range dims {
		b = b.intField(1, d)
	}
	b = b.intField(2, int64(dtype.Int64)).strField(8, name)
	raw := make([]byte, 0, 8*len(vals))
	for _, v := range vals {
		raw = binary.LittleEndian.AppendUint64(raw, uint64(v))
	}
	return b.bytesField(9, raw)
}

// tensorF32 encodes a float32 TensorProto.
func tensorF32(name string, dims []int64, vals ...float32) []byte {
	b := pb(nil)
	for _, d := range dims {
		b = b.intField(1, d)
	}
	b = b.intField(2, int64(dtype.Float32)).strField(8, name)
	raw := make([]byte, 0, 4*len(vals))
	for _, v := range vals {
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(v))
	}
	return b.bytesField(9, raw)
}

// valueInfo encodes a ValueInfoProto; dims are ints (dim_value), strings
// (dim_param) or nil (unknown). noShape leaves the shape out.
func valueInfo(name string, t dtype.Type, noShape bool, dims ...any) []byte {
	tt := pb(nil).intField(1, int64(t))
	if !noShape {
		sh := pb(nil)
		for _, d := range dims {
			dim := pb(nil)
			switch x := d.(type) {
			case int:
				dim = dim.intField(1, int64(x))
			case string:
				dim = dim.strField(2, x)
			case nil:
			default:
				panic(fmt.Sprintf("bad dim %v", d))
			}
			sh = sh.bytesField(1, dim)
		}
		tt = tt.bytesField(2, sh)
	}
	typ := pb(nil).bytesField(1, tt)
	return pb(nil).strField(1, name).bytesField(2, typ)
}

// gb builds a graph.
type gb struct {
	name                          string
	nodes, inits, inputs, outputs [][]byte
	opset                         int64
	count                         int
}

func newGB(opset int64) *gb { return &gb{name: "test", opset: opset} }

func (g *gb) in(name string, t dtype.Type, dims ...any) *gb {
	g.inputs = append(g.inputs, valueInfo(name, t, false, dims...))
	return g
}

func (g *gb) out(name string, dims ...any) *gb {
	g.outputs = append(g.outputs, valueInfo(name, dtype.Float32, len(dims) == 0, dims...))
	return g
}

// outT declares an output with a type and no shape.
func (g *gb) outT(name string, t dtype.Type) *gb {
	g.outputs = append(g.outputs, valueInfo(name, t, true))
	return g
}

func (g *gb) initI64(name string, dims []int64, vals ...int64) *gb {
	g.inits = append(g.inits, tensorI64(name, dims, vals...))
	return g
}

func (g *gb) initF32(name string, dims []int64, vals ...float32) *gb {
	g.inits = append(g.inits, tensorF32(name, dims, vals...))
	return g
}

// zeros returns n float32 zeros, for weights whose values do not matter.
func zeros(n int) []float32 { return make([]float32, n) }

// node adds a node; the name is "<op>_<k>" unless given with a leading "=".
func (g *gb) node(op string, ins, outs []string, attrs ...attr) *gb {
	g.count++
	b := pb(nil)
	for _, s := range ins {
		b = b.strField(1, s)
	}
	for _, s := range outs {
		b = b.strField(2, s)
	}
	b = b.strField(3, fmt.Sprintf("%s_%d", op, g.count)).strField(4, op)
	for _, a := range attrs {
		b = b.bytesField(5, a)
	}
	g.nodes = append(g.nodes, b)
	return g
}

func (g *gb) graphBytes() []byte {
	b := pb(nil)
	for _, n := range g.nodes {
		b = b.bytesField(1, n)
	}
	b = b.strField(2, g.name)
	for _, t := range g.inits {
		b = b.bytesField(5, t)
	}
	for _, v := range g.inputs {
		b = b.bytesField(11, v)
	}
	for _, v := range g.outputs {
		b = b.bytesField(12, v)
	}
	return b
}

func (g *gb) bytes() []byte {
	op := pb(nil).strField(1, "").intField(2, g.opset)
	return pb(nil).intField(1, 8).strField(2, "infer-test").bytesField(7, g.graphBytes()).bytesField(8, op)
}

func (g *gb) model(t *testing.T) *graph.Model {
	t.Helper()
	m, err := graph.Parse(g.bytes(), "")
	if err != nil {
		t.Fatalf("parse test model: %v", err)
	}
	return m
}

// run parses and infers, failing the test on an error.
func (g *gb) run(t *testing.T, opts Options) (*graph.Model, *Result) {
	t.Helper()
	m := g.model(t)
	r, err := Run(m, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return m, r
}
