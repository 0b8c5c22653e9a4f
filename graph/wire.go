package graph

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Protobuf wire types (the low three bits of a field key).
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireGroupS  = 3 // deprecated groups: ONNX never emits them, so they are rejected
	wireGroupE  = 4
	wireFixed32 = 5
)

// errTruncated is wrapped by every decoder error caused by input ending early,
// so tests can tell truncation from other malformations.
var errTruncated = errors.New("unexpected end of data")

// decoder walks one protobuf message. It never allocates: length-delimited
// fields come back as sub-slices of buf, which is what lets initializer bytes
// stay views into the memory-mapped file.
type decoder struct {
	buf []byte
	pos int
}

func newDecoder(b []byte) *decoder { return &decoder{buf: b} }

func (d *decoder) done() bool { return d.pos >= len(d.buf) }

// varint reads a base-128 varint of at most 10 bytes. A longer run of
// continuation bits would overflow 64 bits, so it is malformed, not merely large.
func (d *decoder) varint() (uint64, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		if d.pos >= len(d.buf) {
			return 0, fmt.Errorf("varint at offset %d: %w", d.pos, errTruncated)
		}
		b := d.buf[d.pos]
		d.pos++
		if i == 9 && b > 1 {
			return 0, fmt.Errorf("varint at offset %d overflows 64 bits", d.pos-10)
		}
		v |= uint64(b&0x7f) << (7 * uint(i))
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("varint at offset %d longer than 10 bytes", d.pos-10)
}

// key reads a field key and splits it into field number and wire type.
func (d *decoder) key() (field int, wt int, err error) {
	start := d.pos
	k, err := d.varint()
	if err != nil {
		return 0, 0, err
	}
	wt = int(k & 7)
	f := k >> 3
	if f == 0 || f > 1<<29-1 {
		return 0, 0, fmt.Errorf("invalid field number %d at offset %d", f, start)
	}
	if wt == wireGroupS || wt == wireGroupE || wt > wireFixed32 {
		return 0, 0, fmt.Errorf("field %d at offset %d: unsupported wire type %d", f, start, wt)
	}
	return int(f), wt, nil
}

// bytes reads a length-delimited field body. The length is checked against
// what is left before slicing, so a hostile length prefix of 2^60 costs nothing.
func (d *decoder) bytes() ([]byte, error) {
	start := d.pos
	n, err := d.varint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(d.buf)-d.pos) {
		return nil, fmt.Errorf("length %d at offset %d exceeds the %d bytes left: %w", n, start, len(d.buf)-d.pos, errTruncated)
	}
	b := d.buf[d.pos : d.pos+int(n) : d.pos+int(n)]
	d.pos += int(n)
	return b, nil
}

func (d *decoder) fixed32() (uint32, error) {
	if len(d.buf)-d.pos < 4 {
		return 0, fmt.Errorf("fixed32 at offset %d: %w", d.pos, errTruncated)
	}
	v := binary.LittleEndian.Uint32(d.buf[d.pos:])
	d.pos += 4
	return v, nil
}

func (d *decoder) fixed64() (uint64, error) {
	lo, err := d.fixed32()
	if err != nil {
		return 0, err
	}
	hi, err := d.fixed32()
	if err != nil {
		return 0, err
	}
	return uint64(lo) | uint64(hi)<<32, nil
}

// skip passes over a field this reader does not use; unknown fields are legal
// protobuf and newer ONNX versions add them.
func (d *decoder) skip(wt int) error {
	var err error
	switch wt {
	case wireVarint:
		_, err = d.varint()
	case wireFixed64:
		_, err = d.fixed64()
	case wireBytes:
		_, err = d.bytes()
	case wireFixed32:
		_, err = d.fixed32()
	default:
		err = fmt.Errorf("unsupported wire type %d", wt)
	}
	return err
}

// int64Field reads a varint-encoded int64 field, checking the wire type.
func (d *decoder) int64Field(name string, wt int) (int64, error) {
	if wt != wireVarint {
		return 0, fmt.Errorf("%s: wire type %d, want varint", name, wt)
	}
	v, err := d.varint()
	return int64(v), err
}

// stringField reads a length-delimited field as a string (copied: names are
// small and must outlive an unmapped file).
func (d *decoder) stringField(name string, wt int) (string, error) {
	b, err := d.bytesField(name, wt)
	return string(b), err
}

// bytesField reads a length-delimited field, checking the wire type.
func (d *decoder) bytesField(name string, wt int) ([]byte, error) {
	if wt != wireBytes {
		return nil, fmt.Errorf("%s: wire type %d, want length-delimited", name, wt)
	}
	return d.bytes()
}

// countVarints counts the varints in a packed field body without decoding
// them: every varint ends with exactly one byte whose top bit is clear.
func countVarints(b []byte) (int, error) {
	n := 0
	for _, c := range b {
		if c < 0x80 {
			n++
		}
	}
	if len(b) > 0 && b[len(b)-1] >= 0x80 {
		return 0, fmt.Errorf("packed varints: last value %w", errTruncated)
	}
	return n, nil
}

// packedInt64s appends the values of a repeated int64 field occurrence, packed
// or not. Growth is bounded by the bytes present: each value costs at least
// one byte of input.
func (d *decoder) packedInt64s(name string, wt int, dst []int64) ([]int64, error) {
	switch wt {
	case wireVarint:
		v, err := d.varint()
		return append(dst, int64(v)), err
	case wireBytes:
		b, err := d.bytes()
		if err != nil {
			return dst, err
		}
		n, err := countVarints(b)
		if err != nil {
			return dst, fmt.Errorf("%s: %w", name, err)
		}
		if cap(dst)-len(dst) < n {
			nd := make([]int64, len(dst), len(dst)+n)
			copy(nd, dst)
			dst = nd
		}
		sub := newDecoder(b)
		for !sub.done() {
			v, err := sub.varint()
			if err != nil {
				return dst, fmt.Errorf("%s: %w", name, err)
			}
			dst = append(dst, int64(v))
		}
		return dst, nil
	}
	return dst, fmt.Errorf("%s: wire type %d, want varint or packed", name, wt)
}

// packedFloat32s appends the values of a repeated float field occurrence.
func (d *decoder) packedFloat32s(name string, wt int, dst []float32) ([]float32, error) {
	switch wt {
	case wireFixed32:
		v, err := d.fixed32()
		return append(dst, math.Float32frombits(v)), err
	case wireBytes:
		b, err := d.bytes()
		if err != nil {
			return dst, err
		}
		if len(b)%4 != 0 {
			return dst, fmt.Errorf("%s: packed length %d is not a multiple of 4", name, len(b))
		}
		for i := 0; i < len(b); i += 4 {
			dst = append(dst, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
		}
		return dst, nil
	}
	return dst, fmt.Errorf("%s: wire type %d, want fixed32 or packed", name, wt)
}
