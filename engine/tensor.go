package engine

import (
	"fmt"
	"reflect"

	"gorgonia.org/tensor"
)

// Tensor is a tensor in host memory for Session.RunTensors: a shape and
// the elements in row-major order as a Go slice. Data is one of []float32,
// []float64, []int64, []int32, []int16, []int8, []uint8, []uint16,
// []uint32, []uint64 or []bool; float16 inputs are given and returned as
// []float32. A nil or empty Shape is a scalar (one element).
type Tensor struct {
	Shape []int
	Data  any
}

// NewTensor returns a Tensor of the given shape holding data (not copied).
func NewTensor[T float32 | float64 | int64 | int32 | int16 | int8 | uint8 | uint16 | uint32 | uint64 | bool](shape []int, data []T) Tensor {
	return Tensor{Shape: append([]int(nil), shape...), Data: data}
}

// Len is the number of elements the shape holds.
func (t Tensor) Len() int { return numel(t.Shape) }

// Float32s returns the elements as []float32 when that is their type.
func (t Tensor) Float32s() ([]float32, bool) { v, ok := t.Data.([]float32); return v, ok }

// Int64s returns the elements as []int64 when that is their type.
func (t Tensor) Int64s() ([]int64, bool) { v, ok := t.Data.([]int64); return v, ok }

// Dense converts t to a gorgonia tensor sharing its data, for Run.
func (t Tensor) Dense() (*tensor.Dense, error) {
	n, err := sliceLen(t.Data)
	if err != nil {
		return nil, err
	}
	for _, d := range t.Shape {
		if d < 0 {
			return nil, fmt.Errorf("engine: negative dimension in shape %v", t.Shape)
		}
	}
	if want := numel(t.Shape); n != want {
		return nil, fmt.Errorf("engine: shape %v holds %d elements, data has %d", t.Shape, want, n)
	}
	if len(t.Shape) == 0 {
		return tensor.New(tensor.FromScalar(index0(t.Data))), nil
	}
	return tensor.New(tensor.WithShape(t.Shape...), tensor.WithBacking(t.Data)), nil
}

// TensorOf converts a gorgonia tensor to a Tensor sharing its data.
func TensorOf(d *tensor.Dense) Tensor {
	shape := append([]int(nil), d.Shape()...)
	if d.Shape().IsScalar() {
		shape = []int{}
	}
	if len(shape) > 0 && d.Shape().TotalSize() == 0 {
		// gorgonia's Data panics on an empty backing.
		return Tensor{Shape: shape, Data: reflect.MakeSlice(reflect.SliceOf(d.Dtype().Type), 0, 0).Interface()}
	}
	if len(shape) == 0 {
		// A scalar's Data is the bare value; Tensor always holds a slice.
		v := reflect.ValueOf(d.Data())
		sl := reflect.MakeSlice(reflect.SliceOf(v.Type()), 1, 1)
		sl.Index(0).Set(v)
		return Tensor{Shape: shape, Data: sl.Interface()}
	}
	return Tensor{Shape: shape, Data: d.Data()}
}

// RunTensors is Run with plain Go slices in and out: no gorgonia types
// needed. Inputs and outputs are keyed by name as Inputs and Outputs list
// them. Input data is only read during the call.
func (s *Session) RunTensors(inputs map[string]Tensor) (map[string]Tensor, error) {
	in := make(map[string]*tensor.Dense, len(inputs))
	for name, t := range inputs {
		d, err := t.Dense()
		if err != nil {
			return nil, &InputError{Input: name, Problem: err.Error()}
		}
		in[name] = d
	}
	res, err := s.Run(in)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Tensor, len(res))
	for name, d := range res {
		out[name] = TensorOf(d)
	}
	return out, nil
}

func sliceLen(data any) (int, error) {
	switch v := data.(type) {
	case []float32:
		return len(v), nil
	case []float64:
		return len(v), nil
	case []int64:
		return len(v), nil
	case []int32:
		return len(v), nil
	case []int16:
		return len(v), nil
	case []int8:
		return len(v), nil
	case []uint8:
		return len(v), nil
	case []uint16:
		return len(v), nil
	case []uint32:
		return len(v), nil
	case []uint64:
		return len(v), nil
	case []bool:
		return len(v), nil
	case nil:
		return 0, fmt.Errorf("engine: tensor has no data")
	}
	return 0, fmt.Errorf("engine: tensor data of type %T is not supported (want a slice such as []float32 or []int64)", data)
}

// index0 is the first element of data, a slice sliceLen accepted with at
// least one element.
func index0(data any) any { return reflect.ValueOf(data).Index(0).Interface() }
