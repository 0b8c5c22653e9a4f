// Package dtype names tensor element types with ONNX's numbering and converts
// the 16-bit float formats, so that the reader, the kernels and the engine agree
// on one vocabulary without depending on each other.
package dtype

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Type is an element type, numbered as ONNX's TensorProto.DataType.
type Type int32

// The element types ONNX defines. Values match the protobuf enum so a type read
// from a file needs no translation.
const (
	Undefined  Type = 0
	Float32    Type = 1
	Uint8      Type = 2
	Int8       Type = 3
	Uint16     Type = 4
	Int16      Type = 5
	Int32      Type = 6
	Int64      Type = 7
	String     Type = 8
	Bool       Type = 9
	Float16    Type = 10
	Float64    Type = 11
	Uint32     Type = 12
	Uint64     Type = 13
	Complex64  Type = 14
	Complex128 Type = 15
	BFloat16   Type = 16
)

var names = map[Type]string{
	Undefined: "undefined", Float32: "float32", Uint8: "uint8", Int8: "int8",
	Uint16: "uint16", Int16: "int16", Int32: "int32", Int64: "int64",
	String: "string", Bool: "bool", Float16: "float16", Float64: "float64",
	Uint32: "uint32", Uint64: "uint64", Complex64: "complex64",
	Complex128: "complex128", BFloat16: "bfloat16",
}

var sizes = map[Type]int{
	Float32: 4, Uint8: 1, Int8: 1, Uint16: 2, Int16: 2, Int32: 4, Int64: 8,
	Bool: 1, Float16: 2, Float64: 8, Uint32: 4, Uint64: 8, Complex64: 8,
	Complex128: 16, BFloat16: 2,
}

// String returns the lower-case name used in reports, e.g. "float16".
func (t Type) String() string {
	if n, ok := names[t]; ok {
		return n
	}
	return fmt.Sprintf("dtype(%d)", int32(t))
}

// Size is the number of bytes of one element, or 0 for types without a fixed
// size (String, Undefined, unknown numbers).
func (t Type) Size() int { return sizes[t] }

// Valid reports whether t is one of the types ONNX defines.
func (t Type) Valid() bool { _, ok := names[t]; return ok }

// IsFloat reports whether t is a real floating-point type.
func (t Type) IsFloat() bool {
	return t == Float32 || t == Float16 || t == Float64 || t == BFloat16
}

// IsInt reports whether t is a signed or unsigned integer type (Bool excluded).
func (t Type) IsInt() bool {
	switch t {
	case Uint8, Int8, Uint16, Int16, Int32, Int64, Uint32, Uint64:
		return true
	}
	return false
}

// HalfToFloat32 converts IEEE 754 binary16 bits to float32 exactly.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		// Subnormal half: renormalise into a normal float32.
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		man &= 0x3ff
		return math.Float32frombits(sign | e<<23 | man<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// Float32ToHalf converts f to binary16 bits with round-to-nearest-even, the
// rounding OpenCL's vstore_half_rte uses, so host and device agree bit for bit.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 // quiet NaN
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		// Subnormal result: shift the implicit-1 mantissa into place and round.
		m := man | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rest := m & ((1 << shift) - 1)
		out := m >> shift
		if rest > half || (rest == half && out&1 == 1) {
			out++
		}
		return sign | uint16(out)
	}
	out := uint32(e)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && out&1 == 1) {
		out++ // may carry into the exponent, which is the correct result
	}
	return sign | uint16(out)
}

// BFloat16ToFloat32 converts bfloat16 bits to float32 exactly.
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBFloat16 converts f to bfloat16 bits with round-to-nearest-even.
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // keep NaN a NaN
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Int reads element i of little-endian data holding t, for integer and bool
// types; ok is false for every other type. One decoder keeps the reader, the
// engine's host tensors and the tools agreeing on signedness and width.
func (t Type) Int(data []byte, i int) (v int64, ok bool) {
	le := binary.LittleEndian
	switch t {
	case Int64, Uint64:
		return int64(le.Uint64(data[8*i:])), true
	case Int32:
		return int64(int32(le.Uint32(data[4*i:]))), true
	case Uint32:
		return int64(le.Uint32(data[4*i:])), true
	case Int16:
		return int64(int16(le.Uint16(data[2*i:]))), true
	case Uint16:
		return int64(le.Uint16(data[2*i:])), true
	case Int8:
		return int64(int8(data[i])), true
	case Uint8:
		return int64(data[i]), true
	case Bool:
		if data[i] != 0 {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}
