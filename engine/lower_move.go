package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
)

func init() {
	registerLowering(lowerTranspose, "Transpose")
	registerLowering(lowerConcat, "Concat")
	registerLowering(lowerSplit, "Split")
	registerLowering(lowerSlice, "Slice")
	registerLowering(lowerExpand, "Expand")
	registerLowering(lowerTile, "Tile")
	registerLowering(lowerPad, "Pad")
	registerLowering(lowerGather, "Gather")
	registerLowering(lowerGatherElements, "GatherElements")
	registerLowering(lowerDepthToSpace, "DepthToSpace", "SpaceToDepth")
}

// lowerTranspose copies through a permuted view.
func lowerTranspose(lc *lowerCtx) (*stepDef, error) {
	x, y := lc.in(0), lc.out(0)
	esz, err := lc.esize(x)
	if err != nil {
		return nil, err
	}
	var perm []int
	if p, ok := lc.n.AttrInts("perm"); ok {
		for _, a := range p {
			perm = append(perm, int(a))
		}
	}
	return &stepDef{kernel: "move", run: func(ex *exec) error {
		sv, err := kernels.ContiguousView(ex.shape(x)).Permute(perm)
		if err != nil {
			return err
		}
		return ex.dev.Copy(esz, ex.ref(y).buf(), kernels.ContiguousView(sv.Shape), ex.ref(x).buf(), sv)
	}}, nil
}

// lowerConcat copies each input into its place in the output.
func lowerConcat(lc *lowerCtx) (*stepDef, error) {
	y := lc.out(0)
	esz, err := lc.esize(y)
	if err != nil {
		return nil, err
	}
	var ins []*vinfo
	for i := range lc.n.Inputs {
		if v := lc.in(i); v != nil {
			ins = append(ins, v)
		}
	}
	def := int64(0)
	if lc.opset < 4 {
		def = 1 // Concat-1's default; later opsets require the attribute
	}
	axis, err := normAxis(lc.n.AttrInt("axis", def), len(y.shape))
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	return &stepDef{kernel: "move", run: func(ex *exec) error {
		out := kernels.ContiguousView(ex.shape(y))
		at := 0
		for i, v := range ins {
			s := ex.shape(v)
			if len(s) != len(out.Shape) {
				return fmt.Errorf("input %d has rank %d, the output %d", i, len(s), len(out.Shape))
			}
			// Check before copying: the input must fit where it goes.
			for a := range s {
				if (a == axis && at+s[a] > out.Shape[a]) || (a != axis && s[a] != out.Shape[a]) {
					return fmt.Errorf("input %d of shape %v does not fit the output %v at offset %d along axis %d", i, s, out.Shape, at, axis)
				}
			}
			dv := kernels.View{Shape: s, Strides: out.Strides, Off: at * out.Strides[axis]}
			if err := ex.dev.Copy(esz, ex.ref(y).buf(), dv, ex.ref(v).buf(), kernels.ContiguousView(s)); err != nil {
				return fmt.Errorf("input %d: %w", i, err)
			}
			at += s[axis]
		}
		if at != out.Shape[axis] {
			return fmt.Errorf("inputs fill %d of the output's %d along axis %d", at, out.Shape[axis], axis)
		}
		return nil
	}}, nil
}

// lowerSplit copies consecutive ranges of the input along axis; each
// output's extent comes from its (inferred) shape.
func lowerSplit(lc *lowerCtx) (*stepDef, error) {
	x := lc.in(0)
	esz, err := lc.esize(x)
	if err != nil {
		return nil, err
	}
	axis, err := normAxis(lc.n.AttrInt("axis", 0), len(x.shape))
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	var outs []*vinfo
	for i := range lc.n.Outputs {
		outs = append(outs, lc.out(i))
	}
	return &stepDef{kernel: "move", run: func(ex *exec) error {
		src := kernels.ContiguousView(ex.shape(x))
		at := 0
		for i, o := range outs {
			if o == nil {
				return fmt.Errorf("output %d is omitted; the split sizes are unknown", i)
			}
			s := ex.shape(o)
			sv := kernels.View{Shape: s, Strides: src.Strides, Off: at * src.Strides[axis]}
			if at+s[axis] > src.Shape[axis] {
				return fmt.Errorf("outputs need %d of the input's %d along axis %d", at+s[axis], src.Shape[axis], axis)
			}
			if err := ex.dev.Copy(esz, ex.ref(o).buf(), kernels.ContiguousView(s), ex.ref(x).buf(), sv); err != nil {
				return fmt.Errorf("output %d: %w", i, err)
			}
			at += s[axis]
		}
		return nil
	}}, nil
}

// lowerSlice copies a strided view; starts, ends, axes and steps may be
// symbolic (a KV-cache window at "past") and are evaluated per run.
func lowerSlice(lc *lowerCtx) (*stepDef, error) {
	n := lc.n
	x, y := lc.in(0), lc.out(0)
	esz, err := lc.esize(x)
	if err != nil {
		return nil, err
	}
	var starts, ends, axes, steps []symshape.Expr
	if lc.opset < 10 {
		conv := func(name string) ([]symshape.Expr, bool) {
			v, ok := n.AttrInts(name)
			out := make([]symshape.Expr, len(v))
			for i, k := range v {
				out[i] = symshape.Const(k)
			}
			return out, ok
		}
		starts, _ = conv("starts")
		ends, _ = conv("ends")
		if a, ok := conv("axes"); ok {
			axes = a
		}
	} else {
		get := func(i int, what string) ([]symshape.Expr, error) {
			v := lc.in(i)
			if v == nil {
				return nil, nil
			}
			e, ok := lc.ints(v)
			if !ok {
				return nil, lc.unsupported("%s are computed on the device (data-dependent slicing)", what)
			}
			return e, nil
		}
		if starts, err = get(1, "starts"); err != nil {
			return nil, err
		}
		if ends, err = get(2, "ends"); err != nil {
			return nil, err
		}
		if axes, err = get(3, "axes"); err != nil {
			return nil, err
		}
		if steps, err = get(4, "steps"); err != nil {
			return nil, err
		}
	}
	return &stepDef{kernel: "move", run: func(ex *exec) error {
		st, err := ex.eval(starts)
		if err != nil {
			return err
		}
		en, err := ex.eval(ends)
		if err != nil {
			return err
		}
		var ax, sp []int64
		if axes != nil {
			if ax, err = ex.eval(axes); err != nil {
				return err
			}
		}
		if steps != nil {
			if sp, err = ex.eval(steps); err != nil {
				return err
			}
		}
		sv, err := kernels.ContiguousView(ex.shape(x)).Slice(st, en, ax, sp)
		if err != nil {
			return err
		}
		ys := ex.shape(y)
		if numel(sv.Shape) != numel(ys) {
			return fmt.Errorf("slice of %v gives %v, the output is %v", ex.shape(x), sv.Shape, ys)
		}
		return ex.dev.Copy(esz, ex.ref(y).buf(), kernels.ContiguousView(sv.Shape), ex.ref(x).buf(), sv)
	}}, nil
}

// lowerExpand copies through a broadcast view of the input onto the
// (inferred) output shape.
func lowerExpand(lc *lowerCtx) (*stepDef, error) {
	x, y := lc.in(0), lc.out(0)
	esz, err := lc.esize(x)
	if err != nil {
		return nil, err
	}
	return &stepDef{kernel: "move", run: func(ex *exec) error {
		ys := ex.shape(y)
		sv, err := kernels.ContiguousView(ex.shape(x)).Expand(ys)
		if err != nil {
			return err
		}
		return ex.dev.Copy(esz, ex.ref(y).buf(), kernels.ContiguousView(ys), ex.ref(x).buf(), sv)
	}}, nil
}

// lowerTile copies the input once per repeat as one rank-2r copy: each
// input dim becomes a (repeat, index) pair, the repeat read with stride 0.
func lowerTile(lc *lowerCtx) (*stepDef, error) {
	x, y := lc.in(0), lc.out(0)
	esz, err := lc.esize(x)
	if err != nil {
		return nil, err
	}
	return &stepDef{kernel: "move", run: func(ex *exec) error {
		xs, ys := ex.shape(x), ex.shape(y)
		if len(xs) != len(ys) {
			return fmt.Errorf("input rank %d, output rank %d", len(xs), len(ys))
		}
		in, out := kernels.ContiguousView(xs), kernels.ContiguousView(ys)
		var dv, sv kernels.View
		for i, d := range xs {
			r := 0
			if d > 0 {
				if ys[i]%d != 0 {
					return fmt.Errorf("output dim %d (%d) is not a multiple of the input's (%d)", i, ys[i], d)
				}
				r = ys[i] / d
			}
			dv.Shape = append(dv.Shape, r, d)
			dv.Strides = append(dv.Strides, d*out.Strides[i], out.Strides[i])
			sv.Strides = append(sv.Strides, 0, in.Strides[i])
		}
		sv.Shape = dv.Shape
		return ex.dev.Copy(esz, ex.ref(y).buf(), dv, ex.ref(x).buf(), sv)
	}}, nil
}

// padModes maps Pad's mode attribute.
var padModes = map[string]kernels.PadMode{
	"constant": kernels.PadConstant, "reflect": kernels.PadReflect, "edge": kernels.PadEdge, "wrap": kernels.PadWrap,
}

// lowerPad lowers Pad with pads known at Open (possibly symbolically) and a
// constant fill value.
func lowerPad(lc *lowerCtx) (*stepDef, error) {
	n := lc.n
	x, y := lc.in(0), lc.out(0)
	esz, err := lc.esize(x)
	if err != nil {
		return nil, err
	}
	et, _ := lc.et(x)
	mode, ok := padModes[n.AttrString("mode", "constant")]
	if !ok {
		return nil, lc.unsupported("mode %q", n.AttrString("mode", "constant"))
	}
	rank := len(x.shape)
	var pads []symshape.Expr
	value := 0.0
	var axes []int
	if lc.opset < 11 {
		p, _ := n.AttrInts("pads")
		for _, k := range p {
			pads = append(pads, symshape.Const(k))
		}
		value = float64(n.AttrFloat("value", 0))
	} else {
		e, ok := lc.ints(lc.in(1))
		if !ok {
			return nil, lc.unsupported("pads computed on the device")
		}
		pads = e
		if cv := lc.in(2); cv != nil {
			h, err := lc.c.constHost(cv)
			if err != nil {
				return nil, lc.unsupported("constant_value computed at run time")
			}
			f, err := h.floats()
			if err != nil || len(f) != 1 {
				return nil, lc.unsupported("constant_value: want one element")
			}
			value = f[0]
		}
		if av := lc.in(3); av != nil {
			a, ok := lc.constInts(av)
			if !ok {
				return nil, lc.unsupported("axes computed at run time")
			}
			for _, k := range a {
				ax, err := normAxis(k, rank)
				if err != nil {
					return nil, lc.unsupported("%v", err)
				}
				axes = append(axes, ax)
			}
		}
	}
	if axes == nil {
		for i := 0; i < rank; i++ {
			axes = append(axes, i)
		}
	}
	if len(pads) != 2*len(axes) {
		return nil, lc.unsupported("%d pads for %d axes", len(pads), len(axes))
	}
	bits := padBits(et, esz, x.dt, value)
	return &stepDef{kernel: "move", run: func(ex *exec) error {
		pv, err := ex.eval(pads)
		if err != nil {
			return err
		}
		full := make([]int, 2*rank)
		for i, a := range axes {
			full[a], full[rank+a] = int(pv[i]), int(pv[len(axes)+i])
		}
		// The pads are read at run time: the output they give must be the
		// shape the plan sized for.
		want, err := kernels.PadShape(ex.shape(x), full)
		if err != nil {
			return err
		}
		if got := ex.shape(y); !slices.Equal(want, got) {
			return fmt.Errorf("pads %v of %v give %v, but the derived output shape is %v", full, ex.shape(x), want, got)
		}
		return ex.dev.Pad(esz, ex.ref(x).buf(), ex.shape(x), full, mode, bits, ex.ref(y).buf())
	}}, nil
}

// padBits is the fill value's raw bits in the stored element type.
func padBits(et kernels.ElemType, esz int, dt dtype.Type, v float64) uint64 {
	switch {
	case et == kernels.EF32:
		return uint64(math.Float32bits(float32(v)))
	case et == kernels.EF16:
		return uint64(dtype.Float32ToHalf(float32(v)))
	}
	var b [8]byte
	putFloat(dt, b[:], 0, v)
	bits := binary.LittleEndian.Uint64(b[:])
	if esz < 8 {
		bits &= 1<<(8*uint(esz)) - 1
	}
	return bits
}

// lowerGather gathers slices along axis with int32/int64 indices.
func lowerGather(lc *lowerCtx) (*stepDef, error) {
	data, idx, y := lc.in(0), lc.in(1), lc.out(0)
	if data == nil || idx == nil {
		return nil, lc.unsupported("needs data and indices")
	}
	esz, err := lc.esize(data)
	if err != nil {
		return nil, err
	}
	if idx.dt != dtype.Int64 && idx.dt != dtype.Int32 {
		return nil, lc.unsupported("indices of type %v", idx.dt)
	}
	axis, err := normAxis(lc.n.AttrInt("axis", 0), len(data.shape))
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	return &stepDef{kernel: "move", run: func(ex *exec) error {
		return ex.dev.Gather(esz, ex.ref(data).buf(), ex.shape(data), axis, ex.ref(idx).buf(), idx.dt, numel(ex.shape(idx)), ex.ref(y).buf())
	}}, nil
}

// lowerGatherElements gathers single elements along axis.
func lowerGatherElements(lc *lowerCtx) (*stepDef, error) {
	data, idx, y := lc.in(0), lc.in(1), lc.out(0)
	esz, err := lc.esize(data)
	if err != nil {
		return nil, err
	}
	if idx.dt != dtype.Int64 && idx.dt != dtype.Int32 {
		return nil, lc.unsupported("indices of type %v", idx.dt)
	}
	axis, err := normAxis(lc.n.AttrInt("axis", 0), len(data.shape))
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	return &stepDef{kernel: "move", run: func(ex *exec) error {
		return ex.dev.GatherElements(esz, ex.ref(data).buf(), ex.shape(data), axis, ex.ref(idx).buf(), idx.dt, ex.shape(idx), ex.ref(y).buf())
	}}, nil
}

// lowerDepthToSpace rearranges blocks as one rank-6 copy: the input seen
// as blocks of channels, permuted, lands contiguous in the output.
func lowerDepthToSpace(lc *lowerCtx) (*stepDef, error) {
	x, y := lc.in(0), lc.out(0)
	esz, err := lc.esize(x)
	if err != nil {
		return nil, err
	}
	if len(x.shape) != 4 {
		return nil, lc.unsupported("input of rank %d; want NCHW", len(x.shape))
	}
	b := int(lc.n.AttrInt("blocksize", 0))
	if b <= 0 {
		return nil, lc.unsupported("blocksize %d", b)
	}
	d2s := lc.n.OpType == "DepthToSpace"
	crd := lc.n.AttrString("mode", "DCR") == "CRD"
	return &stepDef{kernel: "move", run: func(ex *exec) error {
		xs := ex.shape(x)
		n, c, h, w := xs[0], xs[1], xs[2], xs[3]
		var split []int
		var perm []int
		switch {
		case d2s && crd:
			split, perm = []int{n, c / (b * b), b, b, h, w}, []int{0, 1, 4, 2, 5, 3}
		case d2s:
			split, perm = []int{n, b, b, c / (b * b), h, w}, []int{0, 3, 4, 1, 5, 2}
		default:
			split, perm = []int{n, c, h / b, b, w / b, b}, []int{0, 3, 5, 1, 2, 4}
		}
		if numel(split) != numel(xs) {
			return fmt.Errorf("shape %v does not split into blocks of %d", xs, b)
		}
		sv, err := kernels.ContiguousView(split).Permute(perm)
		if err != nil {
			return err
		}
		return ex.dev.Copy(esz, ex.ref(y).buf(), kernels.ContiguousView(sv.Shape), ex.ref(x).buf(), sv)
	}}, nil
}
