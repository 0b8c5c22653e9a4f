package graph

import (
	"encoding/binary"
	"math"

	"github.com/tlite/tlite/graph/dtype"
)

// pb is a tiny protobuf encoder for building ONNX files byte by byte in
// tests, independent of the decoder under test. Each method appends one field.
type pb []byte

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func (b pb) tag(f, wt int) pb { return appendVarint(b, uint64(f)<<3|uint64(wt)) }

// v appends a varint field (negative int64 values as 10-byte two's complement).
func (b pb) v(f int, x int64) pb { return appendVarint(b.tag(f, 0), uint64(x)) }

// b appends a length-delimited field.
func (b pb) b(f int, data []byte) pb {
	return append(appendVarint(b.tag(f, 2), uint64(len(data))), data...)
}

func (b pb) s(f int, s string) pb { return b.b(f, []byte(s)) }

func (b pb) m(f int, m pb) pb { return b.b(f, m) }

func (b pb) f32(f int, x float32) pb {
	return binary.LittleEndian.AppendUint32(b.tag(f, 5), math.Float32bits(x))
}

func (b pb) f64(f int, x float64) pb {
	return binary.LittleEndian.AppendUint64(b.tag(f, 1), math.Float64bits(x))
}

// packed appends a packed repeated varint field.
func (b pb) packed(f int, xs ...int64) pb {
	var body []byte
	for _, x := range xs {
		body = appendVarint(body, uint64(x))
	}
	return b.b(f, body)
}

// ---- ONNX messages ----

func dimsField(b pb, dims []int64) pb {
	for _, d := range dims {
		b = b.v(1, d)
	}
	return b
}

// tensorRaw is a TensorProto with raw_data.
func tensorRaw(name string, dt dtype.Type, dims []int64, raw []byte) pb {
	return dimsField(nil, dims).v(2, int64(dt)).s(8, name).b(9, raw)
}

// tensorExt is a TensorProto in external data; empty offset/length are left out.
func tensorExt(name string, dt dtype.Type, dims []int64, location, offset, length string) pb {
	b := dimsField(nil, dims).v(2, int64(dt)).s(8, name)
	b = b.m(13, pb(nil).s(1, "location").s(2, location))
	if offset != "" {
		b = b.m(13, pb(nil).s(1, "offset").s(2, offset))
	}
	if length != "" {
		b = b.m(13, pb(nil).s(1, "length").s(2, length))
	}
	return b.v(14, 1)
}

// vinfo is a ValueInfoProto of a tensor; dims are int (dim_value), string
// (dim_param) or nil (a dim with neither).
func vinfo(name string, et dtype.Type, dims ...any) pb {
	shape := pb{}
	for _, d := range dims {
		switch d := d.(type) {
		case int:
			shape = shape.m(1, pb(nil).v(1, int64(d)))
		case string:
			shape = shape.m(1, pb(nil).s(2, d))
		case nil:
			shape = shape.m(1, pb{})
		}
	}
	tt := pb(nil).v(1, int64(et)).m(2, shape)
	return pb(nil).s(1, name).m(2, pb(nil).m(1, tt))
}

// vinfoNoShape declares only the element type (rank unknown).
func vinfoNoShape(name string, et dtype.Type) pb {
	return pb(nil).s(1, name).m(2, pb(nil).m(1, pb(nil).v(1, int64(et))))
}

// node is a NodeProto; attrs are AttributeProto messages.
func node(name, op string, ins, outs []string, attrs ...pb) pb {
	b := pb{}
	for _, in := range ins {
		b = b.s(1, in)
	}
	for _, o := range outs {
		b = b.s(2, o)
	}
	if name != "" {
		b = b.s(3, name)
	}
	b = b.s(4, op)
	for _, a := range attrs {
		b = b.m(5, a)
	}
	return b
}

func attrHead(name string, kind AttrKind) pb { return pb(nil).s(1, name).v(20, int64(kind)) }

func attrFloat(name string, f float32) pb { return attrHead(name, KindFloat).f32(2, f) }
func attrInt(name string, i int64) pb     { return attrHead(name, KindInt).v(3, i) }
func attrString(name, s string) pb        { return attrHead(name, KindString).s(4, s) }
func attrTensor(name string, t pb) pb     { return attrHead(name, KindTensor).m(5, t) }
func attrGraph(name string, g pb) pb      { return attrHead(name, KindGraph).m(6, g) }

func attrFloats(name string, fs ...float32) pb {
	b := attrHead(name, KindFloats)
	for _, f := range fs {
		b = b.f32(7, f)
	}
	return b
}

func attrInts(name string, is ...int64) pb { return attrHead(name, KindInts).packed(8, is...) }

func attrStrings(name string, ss ...string) pb {
	b := attrHead(name, KindStrings)
	for _, s := range ss {
		b = b.s(9, s)
	}
	return b
}

func attrTensors(name string, ts ...pb) pb {
	b := attrHead(name, KindTensors)
	for _, t := range ts {
		b = b.m(10, t)
	}
	return b
}

func attrGraphs(name string, gs ...pb) pb {
	b := attrHead(name, KindGraphs)
	for _, g := range gs {
		b = b.m(11, g)
	}
	return b
}

// graphMsg assembles a GraphProto.
type graphMsg struct {
	name                   string
	nodes, inits           []pb
	inputs, outputs, infos []pb
}

func (g graphMsg) enc() pb {
	b := pb{}
	for _, n := range g.nodes {
		b = b.m(1, n)
	}
	b = b.s(2, g.name)
	for _, t := range g.inits {
		b = b.m(5, t)
	}
	for _, v := range g.inputs {
		b = b.m(11, v)
	}
	for _, v := range g.outputs {
		b = b.m(12, v)
	}
	for _, v := range g.infos {
		b = b.m(13, v)
	}
	return b
}

// model assembles a ModelProto with the graph as the last field, so that
// every proper prefix of the encoding is an invalid model (either the graph
// is cut or missing).
func model(g pb, opsets map[string]int64) pb {
	b := pb(nil).v(1, 8).s(2, "pb_test").s(3, "0.1")
	for d, v := range opsets {
		b = b.m(8, pb(nil).s(1, d).v(2, v))
	}
	b = b.m(14, pb(nil).s(1, "author").s(2, "tests"))
	return b.m(7, g)
}

func defaultOpset() map[string]int64 { return map[string]int64{"": 17} }

// simpleModel is x -> Relu -> y.
func simpleModel() pb {
	g := graphMsg{
		name:    "simple",
		nodes:   []pb{node("", "Relu", []string{"x"}, []string{"y"})},
		inputs:  []pb{vinfo("x", dtype.Float32, 2, 3)},
		outputs: []pb{vinfo("y", dtype.Float32, 2, 3)},
	}
	return model(g.enc(), defaultOpset())
}

func le16s(vs ...uint16) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

func le32f(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}
