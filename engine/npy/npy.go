// Package npy reads and writes NumPy .npy files (format versions 1.0-3.0) as
// gorgonia tensors, the host-side currency of tlite's engine and tools.
package npy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph/dtype"
)

var magic = []byte("\x93NUMPY")

// maxHeader bounds the header a reader will accept, so a hostile file cannot
// make us allocate by lying about its header length.
const maxHeader = 1 << 20

// Header is what a .npy file says about its array.
type Header struct {
	Type  dtype.Type
	Shape []int
	// BigEndian is true for '>' descriptors; data is converted on read.
	BigEndian bool
}

var descrTypes = map[string]dtype.Type{
	"f4": dtype.Float32, "f8": dtype.Float64, "f2": dtype.Float16,
	"i8": dtype.Int64, "i4": dtype.Int32, "i2": dtype.Int16, "i1": dtype.Int8,
	"u8": dtype.Uint64, "u4": dtype.Uint32, "u2": dtype.Uint16, "u1": dtype.Uint8,
	"b1": dtype.Bool,
}

// ReadFile reads a .npy file. Float16 arrays are widened to float32, since
// gorgonia has no half type; every other supported type keeps its own.
func ReadFile(path string) (*tensor.Dense, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	t, err := Read(bufio.NewReader(f), st.Size())
	if err != nil {
		return nil, fmt.Errorf("npy: %s: %w", path, err)
	}
	return t, nil
}

// ReadHeader parses the header at the start of r.
func ReadHeader(r io.Reader) (Header, int, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return Header{}, 0, fmt.Errorf("short file: %w", err)
	}
	if !bytes.Equal(pre[:6], magic) {
		return Header{}, 0, errors.New("not a .npy file (bad magic)")
	}
	var hlen int
	switch pre[6] {
	case 1:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Header{}, 0, err
		}
		hlen = int(binary.LittleEndian.Uint16(b[:]))
	case 2, 3:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Header{}, 0, err
		}
		hlen = int(binary.LittleEndian.Uint32(b[:]))
	default:
		return Header{}, 0, fmt.Errorf("unsupported .npy version %d.%d", pre[6], pre[7])
	}
	if hlen > maxHeader {
		return Header{}, 0, fmt.Errorf("header length %d exceeds %d", hlen, maxHeader)
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return Header{}, 0, fmt.Errorf("truncated header: %w", err)
	}
	h, err := parseHeader(string(hb))
	pos := 8 + hlen
	if pre[6] == 1 {
		pos += 2
	} else {
		pos += 4
	}
	return h, pos, err
}

// parseHeader reads the Python dict literal NumPy writes, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
func parseHeader(s string) (Header, error) {
	var h Header
	field := func(key string) (string, error) {
		i := strings.Index(s, "'"+key+"'")
		if i < 0 {
			return "", fmt.Errorf("header lacks %q: %s", key, s)
		}
		rest := strings.TrimLeft(s[i+len(key)+2:], " ")
		if !strings.HasPrefix(rest, ":") {
			return "", fmt.Errorf("header malformed near %q", key)
		}
		return strings.TrimLeft(rest[1:], " "), nil
	}
	d, err := field("descr")
	if err != nil {
		return h, err
	}
	if len(d) < 2 || d[0] != '\'' {
		return h, fmt.Errorf("bad descr in %s", s)
	}
	end := strings.IndexByte(d[1:], '\'')
	if end < 0 {
		return h, fmt.Errorf("bad descr in %s", s)
	}
	descr := d[1 : 1+end]
	if len(descr) == 3 && strings.ContainsRune("<>|=", rune(descr[0])) {
		h.BigEndian = descr[0] == '>'
		descr = descr[1:]
	}
	t, ok := descrTypes[descr]
	if !ok {
		return h, fmt.Errorf("unsupported dtype %q", descr)
	}
	h.Type = t
	fo, err := field("fortran_order")
	if err != nil {
		return h, err
	}
	if strings.HasPrefix(fo, "True") {
		return h, errors.New("fortran_order arrays are not supported; save with np.ascontiguousarray")
	}
	sh, err := field("shape")
	if err != nil {
		return h, err
	}
	if !strings.HasPrefix(sh, "(") {
		return h, fmt.Errorf("bad shape in %s", s)
	}
	close := strings.IndexByte(sh, ')')
	if close < 0 {
		return h, fmt.Errorf("bad shape in %s", s)
	}
	h.Shape = []int{}
	for _, part := range strings.Split(sh[1:close], ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return h, fmt.Errorf("bad dimension %q", part)
		}
		h.Shape = append(h.Shape, n)
	}
	return h, nil
}

// Read reads a whole .npy stream of size bytes (size bounds the allocation;
// pass -1 when unknown to trust the header alone).
func Read(r io.Reader, size int64) (*tensor.Dense, error) {
	h, pos, err := ReadHeader(r)
	if err != nil {
		return nil, err
	}
	n := int64(1)
	for _, d := range h.Shape {
		if d != 0 && n > math.MaxInt32/int64(d) {
			return nil, fmt.Errorf("shape %v too large", h.Shape)
		}
		n *= int64(d)
	}
	nbytes := n * int64(h.Type.Size())
	if size >= 0 && int64(pos)+nbytes > size {
		return nil, fmt.Errorf("shape %v of %s needs %d data bytes, file has %d", h.Shape, h.Type, nbytes, size-int64(pos))
	}
	raw := make([]byte, nbytes)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, fmt.Errorf("truncated data: %w", err)
	}
	if h.BigEndian {
		swap(raw, h.Type.Size())
	}
	return FromBytes(h.Type, h.Shape, raw)
}

func swap(raw []byte, size int) {
	for i := 0; i+size <= len(raw); i += size {
		for a, b := i, i+size-1; a < b; a, b = a+1, b-1 {
			raw[a], raw[b] = raw[b], raw[a]
		}
	}
}

// FromBytes builds a dense tensor of type t and the given shape over
// little-endian raw data, the layout of a .npy file's data section. Float16
// elements (2 bytes each) are widened to float32.
func FromBytes(t dtype.Type, shape []int, raw []byte) (*tensor.Dense, error) {
	le := binary.LittleEndian
	var backing any
	switch t {
	case dtype.Float32:
		v := make([]float32, len(raw)/4)
		for i := range v {
			v[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		backing = v
	case dtype.Float16:
		v := make([]float32, len(raw)/2)
		for i := range v {
			v[i] = dtype.HalfToFloat32(le.Uint16(raw[2*i:]))
		}
		backing = v
	case dtype.Float64:
		v := make([]float64, len(raw)/8)
		for i := range v {
			v[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		backing = v
	case dtype.Int64:
		v := make([]int64, len(raw)/8)
		for i := range v {
			v[i] = int64(le.Uint64(raw[8*i:]))
		}
		backing = v
	case dtype.Int32:
		v := make([]int32, len(raw)/4)
		for i := range v {
			v[i] = int32(le.Uint32(raw[4*i:]))
		}
		backing = v
	case dtype.Int16:
		v := make([]int16, len(raw)/2)
		for i := range v {
			v[i] = int16(le.Uint16(raw[2*i:]))
		}
		backing = v
	case dtype.Int8:
		v := make([]int8, len(raw))
		for i := range v {
			v[i] = int8(raw[i])
		}
		backing = v
	case dtype.Uint64:
		v := make([]uint64, len(raw)/8)
		for i := range v {
			v[i] = le.Uint64(raw[8*i:])
		}
		backing = v
	case dtype.Uint32:
		v := make([]uint32, len(raw)/4)
		for i := range v {
			v[i] = le.Uint32(raw[4*i:])
		}
		backing = v
	case dtype.Uint16:
		v := make([]uint16, len(raw)/2)
		for i := range v {
			v[i] = le.Uint16(raw[2*i:])
		}
		backing = v
	case dtype.Uint8:
		backing = append([]byte(nil), raw...) // the tensor must not alias the caller's buffer
	case dtype.Bool:
		v := make([]bool, len(raw))
		for i := range v {
			v[i] = raw[i] != 0
		}
		backing = v
	default:
		return nil, fmt.Errorf("unsupported element type %s", t)
	}
	opts := []tensor.ConsOpt{tensor.WithBacking(backing)}
	if len(shape) > 0 {
		opts = append(opts, tensor.WithShape(shape...))
	} else {
		opts = append(opts, tensor.WithShape())
	}
	return tensor.New(opts...), nil
}

// WriteFile writes t as a version 1.0 .npy file.
func WriteFile(path string, t tensor.Tensor) error {
	var buf bytes.Buffer
	if err := Write(&buf, t); err != nil {
		return fmt.Errorf("npy: %s: %w", path, err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// Write encodes t in .npy format (little-endian, C order).
func Write(w io.Writer, t tensor.Tensor) error {
	typ, raw, err := ToBytes(t)
	if err != nil {
		return err
	}
	descr := descrs[typ]
	shape := t.Shape()
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	st := strings.Join(dims, ", ")
	if len(shape) == 1 {
		st += ","
	}
	if t.Shape().IsScalar() {
		st = ""
	}
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, st)
	// NumPy pads the header with spaces and a newline to a multiple of 64.
	total := len(magic) + 2 + 2 + len(hdr) + 1
	pad := (64 - total%64) % 64
	hdr += strings.Repeat(" ", pad) + "\n"
	out := append([]byte{}, magic...)
	out = append(out, 1, 0)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(hdr)))
	out = append(out, hdr...)
	if _, err := w.Write(out); err != nil {
		return err
	}
	_, err = w.Write(raw)
	return err
}

// denseTypes maps element types onto gorgonia's.
var denseTypes = map[dtype.Type]tensor.Dtype{
	dtype.Float32: tensor.Float32, dtype.Float64: tensor.Float64, dtype.Int64: tensor.Int64, dtype.Int32: tensor.Int32,
	dtype.Int16: tensor.Int16, dtype.Int8: tensor.Int8, dtype.Uint8: tensor.Uint8, dtype.Uint16: tensor.Uint16,
	dtype.Uint32: tensor.Uint32, dtype.Uint64: tensor.Uint64, dtype.Bool: tensor.Bool,
}

// descrs names each type's .npy descriptor.
var descrs = map[dtype.Type]string{
	dtype.Float32: "<f4", dtype.Float64: "<f8", dtype.Int64: "<i8", dtype.Int32: "<i4",
	dtype.Int16: "<i2", dtype.Int8: "|i1", dtype.Uint8: "|u1", dtype.Uint16: "<u2",
	dtype.Uint32: "<u4", dtype.Uint64: "<u8", dtype.Bool: "|b1",
}

// ToBytes returns t's elements as little-endian raw data with their type,
// the inverse of FromBytes. Scalars give one element.
func ToBytes(t tensor.Tensor) (dtype.Type, []byte, error) {
	le := binary.LittleEndian
	if !t.Shape().IsScalar() && t.Shape().TotalSize() == 0 {
		// gorgonia's Data panics on an empty backing; the type is all there is.
		for dt, d := range denseTypes {
			if d == t.Dtype() {
				return dt, nil, nil
			}
		}
		return dtype.Undefined, nil, fmt.Errorf("element type %v is not supported", t.Dtype())
	}
	data := t.Data()
	switch v := data.(type) { // a scalar tensor's Data is the bare value
	case float32:
		data = []float32{v}
	case float64:
		data = []float64{v}
	case int64:
		data = []int64{v}
	case int32:
		data = []int32{v}
	case int16:
		data = []int16{v}
	case int8:
		data = []int8{v}
	case uint8:
		data = []uint8{v}
	case uint16:
		data = []uint16{v}
	case uint32:
		data = []uint32{v}
	case uint64:
		data = []uint64{v}
	case bool:
		data = []bool{v}
	}
	var raw []byte
	switch v := data.(type) {
	case []float32:
		for _, x := range v {
			raw = le.AppendUint32(raw, math.Float32bits(x))
		}
		return dtype.Float32, raw, nil
	case []float64:
		for _, x := range v {
			raw = le.AppendUint64(raw, math.Float64bits(x))
		}
		return dtype.Float64, raw, nil
	case []int64:
		for _, x := range v {
			raw = le.AppendUint64(raw, uint64(x))
		}
		return dtype.Int64, raw, nil
	case []int32:
		for _, x := range v {
			raw = le.AppendUint32(raw, uint32(x))
		}
		return dtype.Int32, raw, nil
	case []int16:
		for _, x := range v {
			raw = le.AppendUint16(raw, uint16(x))
		}
		return dtype.Int16, raw, nil
	case []int8:
		for _, x := range v {
			raw = append(raw, byte(x))
		}
		return dtype.Int8, raw, nil
	case []uint8:
		return dtype.Uint8, append(raw, v...), nil
	case []uint16:
		for _, x := range v {
			raw = le.AppendUint16(raw, x)
		}
		return dtype.Uint16, raw, nil
	case []uint32:
		for _, x := range v {
			raw = le.AppendUint32(raw, x)
		}
		return dtype.Uint32, raw, nil
	case []uint64:
		for _, x := range v {
			raw = le.AppendUint64(raw, x)
		}
		return dtype.Uint64, raw, nil
	case []bool:
		for _, x := range v {
			b := byte(0)
			if x {
				b = 1
			}
			raw = append(raw, b)
		}
		return dtype.Bool, raw, nil
	}
	return dtype.Undefined, nil, fmt.Errorf("unsupported tensor data type %T", t.Data())
}
