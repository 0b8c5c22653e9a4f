package engine

import (
	"fmt"
	"math"

	"github.com/tlite/tlite/graph/dtype"
)

// Ops computed on the CPU: they produce index-like tensors (Range, Trilu
// masks, identity matrices) whose inputs are known on the host, so a CPU
// loop and one upload cost less than a kernel family of their own.

func init() {
	registerHost(hostConstant, "Constant")
	registerHost(hostShape, "Shape")
	registerHost(hostSizeOp, "Size")
	registerHost(hostRange, "Range")
	registerHost(hostTrilu, "Trilu")
	registerHost(hostEyeLike, "EyeLike")
}

// unsupported builds the error for a feature a host op lacks.
func (hc *hostCtx) unsupported(format string, args ...any) error {
	return &UnsupportedError{Node: hc.n.Name, Op: hc.n.OpType, Domain: hc.n.Domain, Opset: hc.opset,
		Backend: hc.c.backendName(true), Reason: fmt.Sprintf(format, args...)}
}

func needIns(ins []*hostTensor, k int) error {
	if len(ins) < k {
		return fmt.Errorf("needs %d inputs, has %d", k, len(ins))
	}
	for i := 0; i < k; i++ {
		if ins[i] == nil {
			return fmt.Errorf("input %d is missing", i)
		}
	}
	return nil
}

// scalar reads a one-element input.
func scalar(h *hostTensor) (float64, error) {
	f, err := h.floats()
	if err != nil {
		return 0, err
	}
	if len(f) != 1 {
		return 0, fmt.Errorf("want one element, have %d", len(f))
	}
	return f[0], nil
}

func hostConstant(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	t := hc.n.AttrTensor("value")
	if len(hc.n.Outputs) > 0 && hc.n.Outputs[0] != nil && hc.n.Outputs[0].Const != nil {
		t = hc.n.Outputs[0].Const
	}
	if t == nil {
		return nil, fmt.Errorf("only the value attribute is supported")
	}
	h, err := hostFromGraph(t)
	if err != nil {
		return nil, err
	}
	return []*hostTensor{h}, nil
}

func hostShape(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	s := ins[0].shape
	r := int64(len(s))
	clamp := func(x int64) int64 {
		if x < 0 {
			x += r
		}
		return min(max(x, 0), r)
	}
	start, end := clamp(hc.n.AttrInt("start", 0)), clamp(hc.n.AttrInt("end", r))
	var vals []int64
	for i := start; i < end; i++ {
		vals = append(vals, int64(s[i]))
	}
	return []*hostTensor{hostFromInts(dtype.Int64, []int{len(vals)}, vals)}, nil
}

func hostSizeOp(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	return []*hostTensor{hostFromInts(dtype.Int64, nil, []int64{int64(numel(ins[0].shape))})}, nil
}

// hostRange is ONNX Range: ceil((limit - start) / delta) elements.
func hostRange(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 3); err != nil {
		return nil, err
	}
	var v [3]float64
	for i := range v {
		x, err := scalar(ins[i])
		if err != nil {
			return nil, fmt.Errorf("input %d: %w", i, err)
		}
		v[i] = x
	}
	start, limit, delta := v[0], v[1], v[2]
	if delta == 0 {
		return nil, fmt.Errorf("delta is 0")
	}
	nf := max(math.Ceil((limit-start)/delta), 0)
	dt := ins[0].dt
	if nf > math.MaxInt32*64 {
		return nil, fmt.Errorf("%g elements from %g to %g by %g: too many", nf, start, limit, delta)
	}
	n := int(nf)
	if err := hc.c.checkHostBytes("output", []int{n}, hostSize(dt)); err != nil {
		return nil, err
	}
	out := newHostTensor(dt, []int{n})
	for i := 0; i < n; i++ {
		if dt.IsFloat() {
			putFloat(dt, out.data, i, float64(float32(start)+float32(i)*float32(delta)))
		} else {
			putInt(dt, out.data, i, int64(start)+int64(i)*int64(delta))
		}
	}
	return []*hostTensor{out}, nil
}

// hostTrilu keeps the upper (upper=1) or lower triangle of the last two
// dims relative to diagonal k, zeroing the rest.
func hostTrilu(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	x := ins[0]
	if len(x.shape) < 2 {
		return nil, fmt.Errorf("input of rank %d; want at least 2", len(x.shape))
	}
	k := int64(0)
	if len(ins) > 1 && ins[1] != nil {
		kv, err := ins[1].ints()
		if err != nil || len(kv) != 1 {
			return nil, fmt.Errorf("k: want one integer")
		}
		k = kv[0]
	}
	upper := hc.n.AttrInt("upper", 1) != 0
	r, c := x.shape[len(x.shape)-2], x.shape[len(x.shape)-1]
	esz := hostSize(x.dt)
	out := &hostTensor{dt: x.dt, shape: x.shape, data: append([]byte(nil), x.data...)}
	for m := 0; m < numel(x.shape)/max(r*c, 1); m++ {
		for i := 0; i < r; i++ {
			for j := 0; j < c; j++ {
				keep := int64(j-i) >= k
				if !upper {
					keep = int64(j-i) <= k
				}
				if !keep {
					e := (m*r+i)*c + j
					clear(out.data[e*esz : (e+1)*esz])
				}
			}
		}
	}
	return []*hostTensor{out}, nil
}

// hostEyeLike is a 2-D tensor of the input's shape with ones on diagonal k.
func hostEyeLike(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	s := ins[0].shape
	if len(s) != 2 {
		return nil, fmt.Errorf("input of rank %d; want 2", len(s))
	}
	dt := ins[0].dt
	if t := hc.n.AttrInt("dtype", 0); t != 0 {
		dt = dtype.Type(t)
	}
	if hostSize(dt) == 0 {
		return nil, hc.unsupported("dtype %v", dt)
	}
	k := int(hc.n.AttrInt("k", 0))
	out := newHostTensor(dt, s)
	for i := 0; i < s[0]; i++ {
		if j := i + k; j >= 0 && j < s[1] {
			putInt(dt, out.data, i*s[1]+j, 1)
		}
	}
	return []*hostTensor{out}, nil
}
