package engine

import (
	"encoding/binary"
	"math"

	"github.com/tlite/tlite/graph/dtype"
)

// A minimal ONNX protobuf writer for hand-built test models: they go
// through graph.Parse like real files do.

type pb []byte

func (b pb) varint(v uint64) pb {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func (b pb) key(field, wt int) pb           { return b.varint(uint64(field<<3 | wt)) }
func (b pb) intField(field int, v int64) pb { return b.key(field, 0).varint(uint64(v)) }
func (b pb) bytesField(field int, v []byte) pb {
	return append(b.key(field, 2).varint(uint64(len(v))), v...)
}
func (b pb) strField(field int, s string) pb { return b.bytesField(field, []byte(s)) }
func (b pb) msgField(field int, m pb) pb     { return b.bytesField(field, m) }
func (b pb) float32Field(field int, f float32) pb {
	return binary.LittleEndian.AppendUint32(b.key(field, 5), math.Float32bits(f))
}

// tvi is a tensor ValueInfoProto; dims are ints (dim_value) or strings
// (dim_param).
func tvi(name string, t dtype.Type, dims ...any) pb {
	var shape pb
	for _, d := range dims {
		var dim pb
		switch x := d.(type) {
		case int:
			dim = dim.intField(1, int64(x))
		case string:
			dim = dim.strField(2, x)
		}
		shape = shape.msgField(1, dim)
	}
	tt := pb(nil).intField(1, int64(t)).msgField(2, shape)
	return pb(nil).strField(1, name).msgField(2, pb(nil).msgField(1, tt))
}

// tensorPB is a TensorProto with raw data.
func tensorPB(name string, t dtype.Type, dims []int64, raw []byte) pb {
	b := pb(nil)
	for _, d := range dims {
		b = b.intField(1, d)
	}
	return b.intField(2, int64(t)).strField(8, name).bytesField(9, raw)
}

func f32Raw(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

type attrPB pb

func aInt(name string, v int64) attrPB {
	return attrPB(pb(nil).strField(1, name).intField(3, v).intField(20, 2))
}
func aFloat(name string, v float32) attrPB {
	return attrPB(pb(nil).strField(1, name).float32Field(2, v).intField(20, 1))
}
func aTensor(name string, t pb) attrPB {
	return attrPB(pb(nil).strField(1, name).msgField(5, t).intField(20, 4))
}
func aGraph(name string, g pb) attrPB {
	return attrPB(pb(nil).strField(1, name).msgField(6, g).intField(20, 5))
}

// nodePB is a NodeProto.
func nodePB(op, name string, ins, outs []string, attrs ...attrPB) pb {
	b := pb(nil)
	for _, s := range ins {
		b = b.strField(1, s)
	}
	for _, s := range outs {
		b = b.strField(2, s)
	}
	b = b.strField(3, name).strField(4, op)
	for _, a := range attrs {
		b = b.msgField(5, pb(a))
	}
	return b
}

func withDomain(n pb, domain string) pb { return n.strField(7, domain) }

// graphPB is a GraphProto.
func graphPB(name string, nodes, inits, inputs, outputs []pb) pb {
	b := pb(nil)
	for _, n := range nodes {
		b = b.msgField(1, n)
	}
	b = b.strField(2, name)
	for _, t := range inits {
		b = b.msgField(5, t)
	}
	for _, v := range inputs {
		b = b.msgField(11, v)
	}
	for _, v := range outputs {
		b = b.msgField(12, v)
	}
	return b
}

// modelPB is a ModelProto importing the default domain at opset (and the
// "tlite" domain at version 1).
func modelPB(opset int64, g pb) []byte {
	b := pb(nil).intField(1, 8)
	b = b.msgField(8, pb(nil).strField(1, "").intField(2, opset))
	b = b.msgField(8, pb(nil).strField(1, "tlite").intField(2, 1))
	return b.msgField(7, g)
}
