package graph

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/tlite/tlite/graph/dtype"
)

// Tensor is a constant tensor: an initializer, a Constant's value or a tensor
// attribute.
type Tensor struct {
	Name string
	Type dtype.Type
	Dims []int64
	// Data holds the elements in little-endian order, row-major. When the
	// tensor came from raw_data or external data it is a read-only view into a
	// memory mapping: never write to it, and do not use it after Model.Close.
	Data []byte
	// External reports whether Data lives in an external data file.
	External bool
}

// maxElements bounds a tensor's element count so that products and byte
// sizes stay far from int64 overflow on every path.
const maxElements = int64(1) << 56

// numElements multiplies dims, failing on negative sizes and on products
// beyond maxElements instead of overflowing.
func numElements(dims []int64) (int64, error) {
	n := int64(1)
	for i, d := range dims {
		if d < 0 {
			return 0, fmt.Errorf("dimension %d is negative (%d)", i, d)
		}
		if d == 0 {
			n = 0
			continue
		}
		if n > maxElements/d {
			return 0, fmt.Errorf("dimensions %v: element count overflows (limit 2^56)", dims)
		}
		n *= d
	}
	return n, nil
}

// NumElements returns the product of the dimensions (1 for a scalar). Dims are
// checked when a tensor is read or built, so this cannot overflow for tensors
// from this package.
func (t *Tensor) NumElements() int64 {
	n, err := numElements(t.Dims)
	if err != nil {
		return -1
	}
	return n
}

// checkSize verifies that Data holds exactly NumElements elements of Type.
func (t *Tensor) checkSize() error {
	sz := int64(t.Type.Size())
	if sz == 0 || t.Type == dtype.Complex64 || t.Type == dtype.Complex128 {
		return fmt.Errorf("tensor %q: unsupported element type %v", t.Name, t.Type)
	}
	n, err := numElements(t.Dims)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if int64(len(t.Data)) != n*sz {
		return fmt.Errorf("tensor %q: %d bytes of data, but dims %v of %v need %d", t.Name, len(t.Data), t.Dims, t.Type, n*sz)
	}
	return nil
}

// NewTensor builds a tensor over data (not copied), checking that the size
// matches the dims.
func NewTensor(name string, typ dtype.Type, dims []int64, data []byte) (*Tensor, error) {
	t := &Tensor{Name: name, Type: typ, Dims: append([]int64(nil), dims...), Data: data}
	if err := t.checkSize(); err != nil {
		return nil, err
	}
	return t, nil
}

// Float32Tensor builds a float32 tensor from values.
func Float32Tensor(name string, dims []int64, vals []float32) (*Tensor, error) {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return NewTensor(name, dtype.Float32, dims, b)
}

// Int64Tensor builds an int64 tensor from values.
func Int64Tensor(name string, dims []int64, vals []int64) (*Tensor, error) {
	b := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return NewTensor(name, dtype.Int64, dims, b)
}

// Float32s decodes the elements of any real floating-point, integer or bool
// type into a new float32 slice (wide integers and float64 round).
func (t *Tensor) Float32s() ([]float32, error) {
	if err := t.checkSize(); err != nil {
		return nil, err
	}
	n := int(t.NumElements())
	out := make([]float32, n)
	d := t.Data
	le := binary.LittleEndian
	switch t.Type {
	case dtype.Float32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(d[4*i:]))
		}
	case dtype.Float16:
		for i := range out {
			out[i] = dtype.HalfToFloat32(le.Uint16(d[2*i:]))
		}
	case dtype.BFloat16:
		for i := range out {
			out[i] = dtype.BFloat16ToFloat32(le.Uint16(d[2*i:]))
		}
	case dtype.Float64:
		for i := range out {
			out[i] = float32(math.Float64frombits(le.Uint64(d[8*i:])))
		}
	default:
		ints, err := t.Int64s()
		if err != nil {
			return nil, err
		}
		if t.Type == dtype.Uint64 {
			for i := range out {
				out[i] = float32(uint64(ints[i]))
			}
			break
		}
		for i, v := range ints {
			out[i] = float32(v)
		}
	}
	return out, nil
}

// Int64s decodes the elements of an integer or bool tensor into a new int64
// slice. Uint64 values above MaxInt64 come back as their two's-complement bit
// pattern. Floating-point tensors are an error: truncating them silently would
// hide a wrong type.
func (t *Tensor) Int64s() ([]int64, error) {
	if err := t.checkSize(); err != nil {
		return nil, err
	}
	n := int(t.NumElements())
	out := make([]int64, n)
	d := t.Data
	if !t.Type.IsInt() && t.Type != dtype.Bool {
		return nil, fmt.Errorf("tensor %q: Int64s of %v tensor", t.Name, t.Type)
	}
	for i := range out {
		out[i], _ = t.Type.Int(d, i)
	}
	return out, nil
}

// TensorProto field numbers (onnx.proto).
const (
	tpDims         = 1
	tpDataType     = 2
	tpSegment      = 3
	tpFloatData    = 4
	tpInt32Data    = 5
	tpStringData   = 6
	tpInt64Data    = 7
	tpName         = 8
	tpRawData      = 9
	tpDoubleData   = 10
	tpUint64Data   = 11
	tpDoc          = 12
	tpExternalData = 13
	tpDataLocation = 14
)

// typedFieldFor names the TensorProto field that carries each element type
// when raw_data is not used.
func typedFieldFor(t dtype.Type) int {
	switch t {
	case dtype.Float32:
		return tpFloatData
	case dtype.Int32, dtype.Int16, dtype.Int8, dtype.Uint16, dtype.Uint8, dtype.Bool, dtype.Float16, dtype.BFloat16:
		return tpInt32Data
	case dtype.Int64:
		return tpInt64Data
	case dtype.Float64:
		return tpDoubleData
	case dtype.Uint32, dtype.Uint64:
		return tpUint64Data
	}
	return 0
}

var typedFieldNames = map[int]string{
	tpFloatData: "float_data", tpInt32Data: "int32_data", tpInt64Data: "int64_data",
	tpDoubleData: "double_data", tpUint64Data: "uint64_data",
}

// typedCount counts the values of one occurrence of a typed data field
// without decoding them, so the element count can be checked against the dims
// before anything is allocated.
func typedCount(d *decoder, field, wt int) (int64, error) {
	name := typedFieldNames[field]
	fixed := 0
	switch field {
	case tpFloatData:
		fixed = 4
	case tpDoubleData:
		fixed = 8
	}
	switch {
	case wt == wireBytes:
		b, err := d.bytes()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if fixed > 0 {
			if len(b)%fixed != 0 {
				return 0, fmt.Errorf("%s: packed length %d is not a multiple of %d", name, len(b), fixed)
			}
			return int64(len(b) / fixed), nil
		}
		n, err := countVarints(b)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return int64(n), nil
	case fixed == 4 && wt == wireFixed32, fixed == 8 && wt == wireFixed64, fixed == 0 && wt == wireVarint:
		if err := d.skip(wt); err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return 1, nil
	}
	return 0, fmt.Errorf("%s: wire type %d does not fit the field", name, wt)
}

// fillTyped decodes every occurrence of a typed data field of msg into out,
// element size sz. The caller has checked the element count.
func fillTyped(msg []byte, field int, typ dtype.Type, out []byte) error {
	sz := typ.Size()
	i := 0
	put := func(v uint64) error {
		if (i+1)*sz > len(out) {
			return fmt.Errorf("%s: more values than counted", typedFieldNames[field])
		}
		o := out[i*sz:]
		switch {
		case field == tpFloatData || field == tpDoubleData:
			// fixed-width payloads are already the element's bits
			if sz == 4 {
				binary.LittleEndian.PutUint32(o, uint32(v))
			} else {
				binary.LittleEndian.PutUint64(o, v)
			}
		case typ == dtype.Bool:
			if v != 0 {
				o[0] = 1
			} else {
				o[0] = 0
			}
		case sz == 1:
			o[0] = byte(v)
		case sz == 2:
			binary.LittleEndian.PutUint16(o, uint16(v))
		case sz == 4:
			binary.LittleEndian.PutUint32(o, uint32(v))
		default:
			binary.LittleEndian.PutUint64(o, v)
		}
		i++
		return nil
	}
	d := newDecoder(msg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return err
		}
		if f != field {
			if err := d.skip(wt); err != nil {
				return err
			}
			continue
		}
		if wt != wireBytes {
			var v uint64
			switch wt {
			case wireFixed32:
				var u uint32
				u, err = d.fixed32()
				v = uint64(u)
			case wireFixed64:
				v, err = d.fixed64()
			default:
				v, err = d.varint()
			}
			if err != nil {
				return err
			}
			if err := put(v); err != nil {
				return err
			}
			continue
		}
		b, err := d.bytes()
		if err != nil {
			return err
		}
		sub := newDecoder(b)
		for !sub.done() {
			var v uint64
			switch field {
			case tpFloatData:
				var u uint32
				u, err = sub.fixed32()
				v = uint64(u)
			case tpDoubleData:
				v, err = sub.fixed64()
			default:
				v, err = sub.varint()
			}
			if err != nil {
				return err
			}
			if err := put(v); err != nil {
				return err
			}
		}
	}
	if i*sz != len(out) {
		return fmt.Errorf("%s: %d values, want %d", typedFieldNames[field], i, len(out)/sz)
	}
	return nil
}

// decodeTensor reads a TensorProto. raw_data and external data become views;
// typed fields are converted to little-endian bytes after their element count
// has been checked against the dims, so a hostile count never allocates.
func (l *loader) decodeTensor(msg []byte) (*Tensor, error) {
	t := &Tensor{}
	var (
		dtypeNum  int64
		raw       []byte
		hasRaw    bool
		counts    = map[int]int64{}
		external  bool
		extFields = map[string]string{}
		hasString bool
	)
	d := newDecoder(msg)
	for !d.done() {
		f, wt, err := d.key()
		if err != nil {
			return nil, tensorErr(t, err)
		}
		switch f {
		case tpDims:
			t.Dims, err = d.packedInt64s("dims", wt, t.Dims)
		case tpDataType:
			dtypeNum, err = d.int64Field("data_type", wt)
		case tpSegment:
			return nil, tensorErr(t, fmt.Errorf("segmented tensors are not supported"))
		case tpFloatData, tpInt32Data, tpInt64Data, tpDoubleData, tpUint64Data:
			var n int64
			n, err = typedCount(d, f, wt)
			counts[f] += n
		case tpStringData:
			hasString = true
			err = d.skip(wt)
		case tpName:
			t.Name, err = d.stringField("name", wt)
		case tpRawData:
			raw, err = d.bytesField("raw_data", wt)
			hasRaw = true
		case tpExternalData:
			var b []byte
			if b, err = d.bytesField("external_data", wt); err == nil {
				var k, v string
				if k, v, err = decodeStringPair(b); err == nil {
					extFields[k] = v
				}
			}
		case tpDataLocation:
			var loc int64
			loc, err = d.int64Field("data_location", wt)
			switch loc {
			case 0:
				external = false
			case 1:
				external = true
			default:
				if err == nil {
					err = fmt.Errorf("unknown data_location %d", loc)
				}
			}
		default:
			err = d.skip(wt)
		}
		if err != nil {
			return nil, tensorErr(t, err)
		}
	}
	if dtypeNum < 0 || dtypeNum > math.MaxInt32 || !dtype.Type(dtypeNum).Valid() {
		return nil, tensorErr(t, fmt.Errorf("unknown element type %d", dtypeNum))
	}
	t.Type = dtype.Type(dtypeNum)
	switch t.Type {
	case dtype.Undefined:
		return nil, tensorErr(t, fmt.Errorf("element type is undefined"))
	case dtype.String:
		return nil, tensorErr(t, fmt.Errorf("string tensors are not supported"))
	case dtype.Complex64, dtype.Complex128:
		return nil, tensorErr(t, fmt.Errorf("%v tensors are not supported", t.Type))
	}
	if hasString {
		return nil, tensorErr(t, fmt.Errorf("string_data given for a %v tensor", t.Type))
	}
	n, err := numElements(t.Dims)
	if err != nil {
		return nil, tensorErr(t, err)
	}
	sz := int64(t.Type.Size())
	want := n * sz // n <= 2^56 and sz <= 8: no overflow

	typedField := 0
	for f, c := range counts {
		if c == 0 {
			continue
		}
		if typedField != 0 {
			return nil, tensorErr(t, fmt.Errorf("data given in both %s and %s", typedFieldNames[typedField], typedFieldNames[f]))
		}
		typedField = f
	}
	sources := 0
	for _, b := range []bool{hasRaw, typedField != 0, external} {
		if b {
			sources++
		}
	}
	if sources > 1 {
		return nil, tensorErr(t, fmt.Errorf("data given in more than one of raw_data, typed fields and external data"))
	}
	switch {
	case external:
		t.Data, err = l.externalData(t, extFields, want)
		if err != nil {
			return nil, tensorErr(t, err)
		}
		t.External = true
		l.model.views = append(l.model.views, t)
	case hasRaw:
		if int64(len(raw)) != want {
			return nil, tensorErr(t, fmt.Errorf("raw_data has %d bytes, but dims %v of %v need %d", len(raw), t.Dims, t.Type, want))
		}
		t.Data = raw
		l.model.views = append(l.model.views, t)
	case typedField != 0:
		if typedFieldFor(t.Type) != typedField {
			return nil, tensorErr(t, fmt.Errorf("%v data given in %s", t.Type, typedFieldNames[typedField]))
		}
		if counts[typedField] != n {
			return nil, tensorErr(t, fmt.Errorf("%s has %d values, but dims %v need %d", typedFieldNames[typedField], counts[typedField], t.Dims, n))
		}
		t.Data = make([]byte, want)
		if err := fillTyped(msg, typedField, t.Type, t.Data); err != nil {
			return nil, tensorErr(t, err)
		}
	default:
		if n != 0 {
			return nil, tensorErr(t, fmt.Errorf("no data, but dims %v need %d elements", t.Dims, n))
		}
		t.Data = []byte{}
	}
	return t, nil
}

func tensorErr(t *Tensor, err error) error {
	if t.Name == "" {
		return fmt.Errorf("tensor: %w", err)
	}
	return fmt.Errorf("tensor %q: %w", t.Name, err)
}

// parseNonNegative parses an external_data offset or length.
func parseNonNegative(key, s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("external data %s %q is not a non-negative integer", key, s)
	}
	return v, nil
}

// ParseTensor decodes one bare serialized TensorProto, such as the
// input_N.pb / output_N.pb files of ONNX's backend test data. Tensors in
// raw_data alias data (the caller must keep it unchanged); typed fields are
// copied. External data is refused: a bare tensor has no model folder.
func ParseTensor(data []byte) (*Tensor, error) {
	l := &loader{model: &Model{}}
	return l.decodeTensor(data)
}
