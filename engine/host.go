package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
)

// hostTensor is a tensor in host memory in the engine's canonical host
// layout: floating-point types as little-endian float32 (float16 widened),
// integers and bool in their own little-endian encoding (bool one byte 0/1).
// Constants, shape values, results computed on the CPU and Run's inputs and
// outputs all pass through this form.
type hostTensor struct {
	dt    dtype.Type
	shape []int
	data  []byte
}

// hostSize is the size of one element of dt in the canonical host layout,
// or 0 for types the engine does not handle.
func hostSize(dt dtype.Type) int {
	switch dt {
	case dtype.Float32, dtype.Float16:
		return 4
	case dtype.Float64, dtype.BFloat16, dtype.String, dtype.Complex64, dtype.Complex128, dtype.Undefined:
		return 0
	}
	return dt.Size()
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func newHostTensor(dt dtype.Type, shape []int) *hostTensor {
	return &hostTensor{dt: dt, shape: append([]int(nil), shape...), data: make([]byte, numel(shape)*hostSize(dt))}
}

// ints decodes an integer or bool tensor's elements.
func (h *hostTensor) ints() ([]int64, error) {
	n := numel(h.shape)
	out := make([]int64, n)
	d := h.data
	le := binary.LittleEndian
	if h.dt.IsInt() || h.dt == dtype.Bool {
		for i := range out {
			out[i], _ = h.dt.Int(d, i)
		}
		return out, nil
	}
	switch h.dt {
	case dtype.Float32, dtype.Float16:
		for i := range out {
			f := math.Float32frombits(le.Uint32(d[4*i:]))
			if f != float32(math.Trunc(float64(f))) {
				return nil, fmt.Errorf("%v tensor holds %v, not an integer", h.dt, f)
			}
			out[i] = int64(f)
		}
	default:
		return nil, fmt.Errorf("cannot read %v elements as integers", h.dt)
	}
	return out, nil
}

// floats decodes the elements as float64.
func (h *hostTensor) floats() ([]float64, error) {
	if h.dt == dtype.Float32 || h.dt == dtype.Float16 {
		out := make([]float64, numel(h.shape))
		for i := range out {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(h.data[4*i:])))
		}
		return out, nil
	}
	ints, err := h.ints()
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(ints))
	for i, v := range ints {
		out[i] = float64(v)
		if h.dt == dtype.Uint64 {
			out[i] = float64(uint64(v))
		}
	}
	return out, nil
}

// putInt stores v as element i of a tensor of type dt in canonical layout.
func putInt(dt dtype.Type, data []byte, i int, v int64) {
	le := binary.LittleEndian
	switch dt {
	case dtype.Int64, dtype.Uint64:
		le.PutUint64(data[8*i:], uint64(v))
	case dtype.Int32, dtype.Uint32:
		le.PutUint32(data[4*i:], uint32(v))
	case dtype.Int16, dtype.Uint16:
		le.PutUint16(data[2*i:], uint16(v))
	case dtype.Int8, dtype.Uint8:
		data[i] = byte(v)
	case dtype.Bool:
		data[i] = 0
		if v != 0 {
			data[i] = 1
		}
	case dtype.Float32, dtype.Float16:
		le.PutUint32(data[4*i:], math.Float32bits(float32(v)))
	}
}

// putFloat stores v as element i, rounding or truncating for integer types.
func putFloat(dt dtype.Type, data []byte, i int, v float64) {
	if dt == dtype.Float32 || dt == dtype.Float16 {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(v)))
		return
	}
	putInt(dt, data, i, int64(v))
}

// hostFromInts builds a tensor of type dt holding vals.
func hostFromInts(dt dtype.Type, shape []int, vals []int64) *hostTensor {
	h := newHostTensor(dt, shape)
	for i, v := range vals {
		putInt(dt, h.data, i, v)
	}
	return h
}

// hostFromGraph converts a graph constant into the canonical host layout.
func hostFromGraph(t *graph.Tensor) (*hostTensor, error) {
	shape := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		shape[i] = int(d)
	}
	switch t.Type {
	case dtype.Float32:
		return &hostTensor{dt: t.Type, shape: shape, data: t.Data}, nil
	case dtype.Float16:
		f, err := t.Float32s()
		if err != nil {
			return nil, err
		}
		h := newHostTensor(t.Type, shape)
		for i, x := range f {
			binary.LittleEndian.PutUint32(h.data[4*i:], math.Float32bits(x))
		}
		return h, nil
	}
	if hostSize(t.Type) == 0 {
		return nil, fmt.Errorf("constant %q: element type %v is not supported", t.Name, t.Type)
	}
	return &hostTensor{dt: t.Type, shape: shape, data: t.Data}, nil
}

// hostFromElems evaluates a value's symbolic contents under b.
func hostFromElems(dt dtype.Type, shape []int, elems []symshape.Expr, b symshape.Binding) (*hostTensor, error) {
	vals := make([]int64, len(elems))
	for i, e := range elems {
		v, err := e.Eval(b)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	if numel(shape) != len(vals) {
		return nil, fmt.Errorf("%d symbolic elements for shape %v", len(vals), shape)
	}
	return hostFromInts(dt, shape, vals), nil
}

// toStorage converts canonical host data of type dt into the device layout
// of element type et (only floats differ: float32 may become float16).
// Finite values beyond fp16's range saturate to ±65504, as element-wise
// results do, so that a -FLT_MAX mask stays a finite large negative.
func toStorage(h *hostTensor, et kernels.ElemType) []byte {
	if et == kernels.EF16 && (h.dt == dtype.Float32 || h.dt == dtype.Float16) {
		n := numel(h.shape)
		out := make([]byte, 2*n)
		for i := 0; i < n; i++ {
			f := math.Float32frombits(binary.LittleEndian.Uint32(h.data[4*i:]))
			if !math.IsInf(float64(f), 0) {
				f = max(min(f, 65504), -65504)
			}
			binary.LittleEndian.PutUint16(out[2*i:], dtype.Float32ToHalf(f))
		}
		return out
	}
	return h.data
}

// fromStorage converts device bytes of element type et into a canonical
// host tensor of type dt.
func fromStorage(raw []byte, et kernels.ElemType, dt dtype.Type, shape []int) *hostTensor {
	if et == kernels.EF16 && (dt == dtype.Float32 || dt == dtype.Float16) {
		h := newHostTensor(dt, shape)
		for i := 0; i < numel(shape); i++ {
			f := dtype.HalfToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
			binary.LittleEndian.PutUint32(h.data[4*i:], math.Float32bits(f))
		}
		return h
	}
	return &hostTensor{dt: dt, shape: append([]int(nil), shape...), data: raw}
}

// dtypeOfDense maps a gorgonia element type onto ONNX's.
func dtypeOfDense(t tensor.Dtype) dtype.Type {
	switch t {
	case tensor.Float32:
		return dtype.Float32
	case tensor.Float64:
		return dtype.Float64
	case tensor.Int64:
		return dtype.Int64
	case tensor.Int32:
		return dtype.Int32
	case tensor.Int16:
		return dtype.Int16
	case tensor.Int8:
		return dtype.Int8
	case tensor.Uint8:
		return dtype.Uint8
	case tensor.Uint16:
		return dtype.Uint16
	case tensor.Uint32:
		return dtype.Uint32
	case tensor.Uint64:
		return dtype.Uint64
	case tensor.Bool:
		return dtype.Bool
	}
	return dtype.Undefined
}

// hostFromDense converts a gorgonia tensor into canonical host layout.
func hostFromDense(t *tensor.Dense) (*hostTensor, error) {
	dt := dtypeOfDense(t.Dtype())
	shape := append([]int(nil), t.Shape()...)
	if t.Shape().IsScalar() {
		shape = nil
	}
	n := numel(shape)
	if dt == dtype.Undefined || hostSize(dt) == 0 {
		return nil, fmt.Errorf("element type %v is not supported", t.Dtype())
	}
	h := newHostTensor(dt, shape)
	if n == 0 {
		return h, nil
	}
	if raw, ok := sliceBytes(t.Data()); ok && len(raw) >= len(h.data) {
		// The host's numbers are the canonical bytes already: one copy.
		copy(h.data, raw)
		return h, nil
	}
	_, raw, err := npy.ToBytes(t)
	if err != nil {
		return nil, fmt.Errorf("element type %v: %w", t.Dtype(), err)
	}
	if len(raw) < len(h.data) {
		return nil, fmt.Errorf("tensor of shape %v holds %d bytes, want %d", shape, len(raw), len(h.data))
	}
	copy(h.data, raw)
	return h, nil
}

// littleEndian reports whether this machine stores numbers as the
// canonical host layout does, so that a float32 or integer slice is its
// canonical bytes as they lie in memory.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// sliceBytes returns the memory of a numeric slice as bytes, without a
// copy, where that memory is the canonical host layout (a little-endian
// machine; not bool, whose Go layout the canonical one does not promise).
func sliceBytes(data any) ([]byte, bool) {
	if !littleEndian {
		return nil, false
	}
	view := func(p unsafe.Pointer, n int) []byte { return unsafe.Slice((*byte)(p), n) }
	switch v := data.(type) {
	case []float32:
		return view(unsafe.Pointer(unsafe.SliceData(v)), 4*len(v)), len(v) > 0
	case []float64:
		return view(unsafe.Pointer(unsafe.SliceData(v)), 8*len(v)), len(v) > 0
	case []int64:
		return view(unsafe.Pointer(unsafe.SliceData(v)), 8*len(v)), len(v) > 0
	case []int32:
		return view(unsafe.Pointer(unsafe.SliceData(v)), 4*len(v)), len(v) > 0
	}
	return nil, false
}

// denseOwned is dense for a tensor whose bytes nothing else holds (just
// read from the device): a float32 result becomes the tensor's backing
// in place, without a conversion copy.
func (h *hostTensor) denseOwned() (*tensor.Dense, error) {
	n := numel(h.shape)
	if !littleEndian || h.dt != dtype.Float32 || len(h.shape) == 0 || n == 0 || len(h.data) < 4*n ||
		uintptr(unsafe.Pointer(unsafe.SliceData(h.data)))%4 != 0 {
		return h.dense()
	}
	v := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(h.data))), n)
	return tensor.New(tensor.WithShape(h.shape...), tensor.WithBacking(v)), nil
}

// dense converts a canonical host tensor into a gorgonia tensor. Float16
// values come back as float32, gorgonia having no half type.
func (h *hostTensor) dense() (*tensor.Dense, error) {
	dt := h.dt
	if dt == dtype.Float16 {
		dt = dtype.Float32 // the host layout keeps halves widened
	}
	return npy.FromBytes(dt, h.shape, h.data[:numel(h.shape)*hostSize(h.dt)])
}
