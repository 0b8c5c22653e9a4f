package kernels

import (
	"fmt"
	"math"

	"github.com/tlite/tlite/graph/dtype"
)

// HostTensor is a dense row-major tensor in host memory, the currency of
// RunChainRef. Float types keep their values in F (an EF16 tensor holds
// values representable in binary16); integer types and bool keep theirs in
// I (bool as 0/1).
type HostTensor struct {
	Type  ElemType
	Shape []int
	F     []float32
	I     []int64
}

// Len is the number of elements the shape holds.
func (h HostTensor) Len() int {
	n := 1
	for _, d := range h.Shape {
		n *= d
	}
	return n
}

// NewHostTensor returns a zero tensor of type t and shape shape.
func NewHostTensor(t ElemType, shape []int) HostTensor {
	h := HostTensor{Type: t, Shape: append([]int(nil), shape...)}
	if t.IsFloat() {
		h.F = make([]float32, h.Len())
	} else {
		h.I = make([]int64, h.Len())
	}
	return h
}

// ewVal is one element's value during reference evaluation: f for float
// types (always a float32 value), i for integers and bool.
type ewVal struct {
	f float64
	i int64
}

// ewF32 rounds an exactly computed result, an attribute or a constant to
// float32, the precision the device computes float chains in.
func ewF32(x float64) float64 { return float64(float32(x)) }

// ewRoundHalf rounds x to the nearest binary16 value, ties to even.
func ewRoundHalf(x float32) float32 { return dtype.HalfToFloat32(dtype.Float32ToHalf(x)) }

// ewWrap narrows v to integer type t's range with two's-complement wrap.
func ewWrap(t ElemType, v int64) int64 {
	switch t {
	case EI32:
		return int64(int32(v))
	case EI8:
		return int64(int8(v))
	case EU8:
		return int64(uint8(v))
	case EBool:
		if v != 0 {
			return 1
		}
		return 0
	}
	return v
}

// ewSatTrunc converts a float to int64 truncating toward zero, saturating and
// mapping NaN to 0 (OpenCL's convert_long_sat_rtz).
func ewSatTrunc(x float64) int64 {
	switch {
	case math.IsNaN(x):
		return 0
	case x >= 0x1p63:
		return math.MaxInt64
	case x <= -0x1p63:
		return math.MinInt64
	}
	return int64(x)
}

// RunChainRef evaluates chain c on the host with the device's semantics:
// each float operation is computed exactly (float64) and rounded to float32,
// integers wrap to their type's width, outputs of type EF16 are rounded to
// binary16. It returns one tensor of shape outShape per output.
func RunChainRef(c *Chain, outShape []int, ins []HostTensor) ([]HostTensor, error) {
	types, err := c.Types()
	if err != nil {
		return nil, err
	}
	if len(ins) != len(c.Inputs) {
		return nil, fmt.Errorf("kernels: chain has %d inputs, got %d", len(c.Inputs), len(ins))
	}
	r := len(outShape)
	for k, in := range ins {
		if in.Type != c.Inputs[k] {
			return nil, fmt.Errorf("kernels: chain input %d is %v, want %v", k, in.Type, c.Inputs[k])
		}
		if have := len(in.F) + len(in.I); have != in.Len() {
			return nil, fmt.Errorf("kernels: chain input %d: %d values for shape %v", k, have, in.Shape)
		}
		if len(in.Shape) > r {
			return nil, fmt.Errorf("kernels: chain input %d shape %v has more dimensions than output %v", k, in.Shape, outShape)
		}
		for j, d := range in.Shape {
			if o := outShape[j+r-len(in.Shape)]; d != o && d != 1 {
				return nil, fmt.Errorf("kernels: chain input %d shape %v does not broadcast to %v", k, in.Shape, outShape)
			}
		}
	}
	outs := make([]HostTensor, len(c.Outputs))
	for k, o := range c.Outputs {
		outs[k] = NewHostTensor(types[o], outShape)
	}
	n := 1
	for _, d := range outShape {
		n *= d
	}
	idx := make([]int, r)
	vals := make([]ewVal, len(c.Nodes))
	defs := make([]elemOpDef, len(c.Nodes))
	for i := range c.Nodes {
		defs[i] = elemOpTable[c.Nodes[i].Op] // Types checked that it is there
	}
	x := refCtx{types: types, vals: vals}
	x.load = func(k int) ewVal {
		in := &ins[k]
		off := 0
		for j, d := range in.Shape {
			p := idx[j+r-len(in.Shape)]
			if d == 1 {
				p = 0
			}
			off = off*d + p
		}
		if in.Type.IsFloat() {
			return ewVal{f: float64(in.F[off])}
		}
		return ewVal{i: ewWrap(in.Type, in.I[off])}
	}
	for e := 0; e < n; e++ {
		// Multi-index of element e, last dimension fastest.
		for d, q := r-1, e; d >= 0; d-- {
			idx[d] = q % outShape[d]
			q /= outShape[d]
		}
		for i := range c.Nodes {
			nd := &c.Nodes[i]
			x.n, x.t = nd, types[i]
			x.a, x.b = ewVal{}, ewVal{}
			if len(nd.Args) > 0 {
				x.a = vals[nd.Args[0]]
			}
			if len(nd.Args) > 1 && nd.Args[1] >= 0 {
				x.b = vals[nd.Args[1]]
			}
			vals[i], err = defs[i].ref(&x)
			if err != nil {
				return nil, fmt.Errorf("kernels: chain node %d (%s): %w", i, nd.Op, err)
			}
		}
		for k, o := range c.Outputs {
			v := vals[o]
			switch t := types[o]; {
			case t == EF16:
				outs[k].F[e] = ewRoundHalf(float32(v.f))
			case t.IsFloat():
				outs[k].F[e] = float32(v.f)
			default:
				outs[k].I[e] = v.i
			}
		}
	}
	return outs, nil
}

func ewB2I(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// ewRefCast converts v of type from to type to, as chainCast does on device.
func ewRefCast(from, to ElemType, v ewVal) ewVal {
	switch {
	case from.IsFloat() && to == EF16:
		return ewVal{f: float64(ewRoundHalf(float32(v.f)))}
	case from.IsFloat() && to.IsFloat():
		return v
	case from.IsFloat() && to == EBool:
		return ewVal{i: ewB2I(v.f != 0)}
	case from.IsFloat():
		return ewVal{i: ewWrap(to, ewSatTrunc(v.f))}
	case to == EF16:
		return ewVal{f: float64(ewRoundHalf(float32(v.i)))}
	case to.IsFloat():
		return ewVal{f: float64(float32(v.i))}
	}
	return ewVal{i: ewWrap(to, v.i)}
}

func ewRefSigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func ewRefSoftplus(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

func ewRefHardSigmoid(x, alpha, beta float64) float64 {
	t := alpha*x + beta
	switch {
	case t < 0:
		return 0
	case t > 1:
		return 1
	}
	return t
}

func ewRefIDiv(a, b int64) int64 {
	switch b {
	case 0:
		return 0
	case -1:
		return int64(-uint64(a))
	}
	return a / b
}

func ewRefIRem(a, b int64) int64 {
	if b == 0 || b == -1 {
		return 0
	}
	return a % b
}

func ewRefIMod(a, b int64) int64 {
	r := ewRefIRem(a, b)
	if r != 0 && (r < 0) != (b < 0) {
		r += b
	}
	return r
}

func ewRefIPow(b, e int64) int64 {
	if e < 0 {
		switch b {
		case 1:
			return 1
		case -1:
			if e&1 != 0 {
				return -1
			}
			return 1
		}
		return 0
	}
	r, x := uint64(1), uint64(b)
	for e > 0 {
		if e&1 != 0 {
			r *= x
		}
		x *= x
		e >>= 1
	}
	return int64(r)
}
