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
	for e := 0; e < n; e++ {
		// Multi-index of element e, last dimension fastest.
		for d, q := r-1, e; d >= 0; d-- {
			idx[d] = q % outShape[d]
			q /= outShape[d]
		}
		for i := range c.Nodes {
			nd := &c.Nodes[i]
			if nd.Op == ElemInput {
				in := &ins[nd.Input]
				off := 0
				for j, d := range in.Shape {
					x := idx[j+r-len(in.Shape)]
					if d == 1 {
						x = 0
					}
					off = off*d + x
				}
				if in.Type.IsFloat() {
					vals[i] = ewVal{f: float64(in.F[off])}
				} else {
					vals[i] = ewVal{i: ewWrap(in.Type, in.I[off])}
				}
				continue
			}
			vals[i], err = c.refEval(i, types, vals)
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

// refEval computes node i from the values of earlier nodes.
func (c *Chain) refEval(i int, types []ElemType, vals []ewVal) (ewVal, error) {
	n := &c.Nodes[i]
	t := types[i]
	fl := t.IsFloat()
	arg := func(k int) ewVal { return vals[n.Args[k]] }
	at := func(k int) ElemType { return types[n.Args[k]] }
	var a, b ewVal
	if len(n.Args) > 0 {
		a = arg(0)
	}
	if len(n.Args) > 1 && n.Args[1] >= 0 {
		b = arg(1)
	}
	F := func(x float64) (ewVal, error) { return ewVal{f: ewF32(x)}, nil }
	I := func(x int64) (ewVal, error) { return ewVal{i: ewWrap(t, x)}, nil }
	B := func(x bool) (ewVal, error) { return ewVal{i: ewB2I(x)}, nil }
	switch n.Op {
	case ElemConst:
		switch {
		case t == EF16:
			return ewVal{f: float64(ewRoundHalf(float32(n.Value)))}, nil
		case fl:
			return ewVal{f: ewF32(n.Value)}, nil
		}
		return I(n.IntValue)
	case ElemIdentity:
		return a, nil
	case ElemAdd:
		if fl {
			return F(a.f + b.f)
		}
		return I(int64(uint64(a.i) + uint64(b.i)))
	case ElemSub:
		if fl {
			return F(a.f - b.f)
		}
		return I(int64(uint64(a.i) - uint64(b.i)))
	case ElemMul:
		if fl {
			return F(a.f * b.f)
		}
		return I(int64(uint64(a.i) * uint64(b.i)))
	case ElemDiv:
		if fl {
			return F(a.f / b.f)
		}
		return I(ewRefIDiv(a.i, b.i))
	case ElemMod:
		switch {
		case fl:
			return F(math.Mod(a.f, b.f))
		case n.Fmod == 1:
			return I(ewRefIRem(a.i, b.i))
		}
		return I(ewRefIMod(a.i, b.i))
	case ElemPow:
		switch {
		case fl && at(1).IsFloat():
			return F(math.Pow(a.f, b.f))
		case fl:
			return F(math.Pow(a.f, float64(float32(b.i))))
		case at(1).IsFloat():
			return I(ewSatTrunc(ewF32(math.Pow(float64(float32(a.i)), b.f))))
		}
		return I(ewRefIPow(a.i, b.i))
	case ElemMax, ElemMin:
		acc := a
		for k := 1; k < len(n.Args); k++ {
			x := arg(k)
			if fl {
				// NaN-propagating, in the same argument order as ew_fmax.
				better := acc.f > x.f
				if n.Op == ElemMin {
					better = acc.f < x.f
				}
				if !(better || math.IsNaN(acc.f)) {
					acc = x
				}
				continue
			}
			if (n.Op == ElemMax && x.i > acc.i) || (n.Op == ElemMin && x.i < acc.i) {
				acc = x
			}
		}
		return acc, nil
	case ElemSum, ElemMean:
		acc := a
		for k := 1; k < len(n.Args); k++ {
			if fl {
				acc.f = ewF32(acc.f + arg(k).f)
			} else {
				acc.i = ewWrap(t, int64(uint64(acc.i)+uint64(arg(k).i)))
			}
		}
		if n.Op == ElemMean {
			acc.f = ewF32(acc.f / float64(len(n.Args)))
		}
		return acc, nil
	case ElemEqual, ElemLess, ElemGreater, ElemLessOrEqual, ElemGreaterOrEqual:
		var cmp int // -1, 0, 1; 2 for unordered (NaN)
		if at(0).IsFloat() {
			switch {
			case a.f < b.f:
				cmp = -1
			case a.f > b.f:
				cmp = 1
			case a.f == b.f:
				cmp = 0
			default:
				cmp = 2
			}
		} else {
			switch {
			case a.i < b.i:
				cmp = -1
			case a.i > b.i:
				cmp = 1
			}
		}
		switch n.Op {
		case ElemEqual:
			return B(cmp == 0)
		case ElemLess:
			return B(cmp == -1)
		case ElemGreater:
			return B(cmp == 1)
		case ElemLessOrEqual:
			return B(cmp == -1 || cmp == 0)
		}
		return B(cmp == 1 || cmp == 0)
	case ElemAnd:
		return B(a.i != 0 && b.i != 0)
	case ElemOr:
		return B(a.i != 0 || b.i != 0)
	case ElemXor:
		return B((a.i != 0) != (b.i != 0))
	case ElemNot:
		return B(a.i == 0)
	case ElemWhere:
		if a.i != 0 {
			return arg(1), nil
		}
		return arg(2), nil
	case ElemCast:
		return ewRefCast(at(0), t, a), nil
	case ElemClip:
		x := a
		if len(n.Args) > 1 && n.Args[1] >= 0 {
			if (fl && x.f < b.f) || (!fl && x.i < b.i) {
				x = b
			}
		}
		if len(n.Args) > 2 && n.Args[2] >= 0 {
			hi := arg(2)
			if (fl && x.f > hi.f) || (!fl && x.i > hi.i) {
				x = hi
			}
		}
		return x, nil
	case ElemRelu:
		if fl {
			if a.f < 0 {
				return ewVal{}, nil
			}
			return a, nil
		}
		if a.i < 0 {
			return ewVal{}, nil
		}
		return a, nil
	case ElemNeg:
		if fl {
			return ewVal{f: -a.f}, nil
		}
		return I(int64(-uint64(a.i)))
	case ElemAbs:
		if fl {
			return ewVal{f: math.Abs(a.f)}, nil
		}
		if a.i < 0 {
			return I(int64(-uint64(a.i)))
		}
		return a, nil
	case ElemSign:
		if fl {
			switch {
			case a.f > 0:
				return ewVal{f: 1}, nil
			case a.f < 0:
				return ewVal{f: -1}, nil
			}
			return a, nil
		}
		return ewVal{i: ewB2I(a.i > 0) - ewB2I(a.i < 0)}, nil
	case ElemPRelu:
		if fl {
			if a.f < 0 {
				return F(b.f * a.f)
			}
			return a, nil
		}
		if a.i < 0 {
			return I(int64(uint64(b.i) * uint64(a.i)))
		}
		return a, nil
	case ElemIsNaN:
		return B(math.IsNaN(a.f))
	case ElemIsInf:
		return B((n.DetectPositive && math.IsInf(a.f, 1)) || (n.DetectNegative && math.IsInf(a.f, -1)))
	}
	x := a.f
	switch n.Op {
	case ElemHardSwish, ElemGelu, ElemQuickGelu, ElemMish:
		if math.IsInf(x, -1) {
			// The limit of x*gate(x), where the formula gives NaN.
			return ewVal{f: math.Copysign(0, -1)}, nil
		}
	}
	switch n.Op {
	case ElemLeakyRelu:
		if x < 0 {
			return F(ewF32(n.Alpha) * x)
		}
		return a, nil
	case ElemSigmoid:
		return F(ewRefSigmoid(x))
	case ElemHardSigmoid:
		return F(ewRefHardSigmoid(x, ewF32(n.Alpha), ewF32(n.Beta)))
	case ElemHardSwish:
		return F(x * ewRefHardSigmoid(x, ewF32(1.0/6), 0.5))
	case ElemTanh:
		return F(math.Tanh(x))
	case ElemErf:
		return F(math.Erf(x))
	case ElemGelu:
		switch n.Approximate {
		case "", "none":
			return F(0.5 * x * math.Erfc(-x/math.Sqrt2))
		case "tanh":
			return F(x / (1 + math.Exp(-2*math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x))))
		}
		return ewVal{}, fmt.Errorf("Gelu approximate=%q, want none or tanh", n.Approximate)
	case ElemQuickGelu:
		return F(x * ewRefSigmoid(ewF32(n.Alpha)*x))
	case ElemExp:
		return F(math.Exp(x))
	case ElemLog:
		return F(math.Log(x))
	case ElemSqrt:
		return F(math.Sqrt(x))
	case ElemReciprocal:
		return F(1 / x)
	case ElemFloor:
		return F(math.Floor(x))
	case ElemCeil:
		return F(math.Ceil(x))
	case ElemRound:
		return F(math.RoundToEven(x))
	case ElemSin:
		return F(math.Sin(x))
	case ElemCos:
		return F(math.Cos(x))
	case ElemSoftplus:
		return F(ewRefSoftplus(x))
	case ElemElu:
		if x < 0 {
			return F(ewF32(n.Alpha) * math.Expm1(x))
		}
		return a, nil
	case ElemSelu:
		if x > 0 {
			return F(ewF32(n.Gamma) * x)
		}
		return F(float64(float32(n.Gamma)*float32(n.Alpha)) * math.Expm1(x))
	case ElemMish:
		return F(x * math.Tanh(ewRefSoftplus(x)))
	}
	return ewVal{}, fmt.Errorf("no reference implementation")
}
