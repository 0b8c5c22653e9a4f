package kernels

import (
	_ "embed"
	"encoding/binary"
	"fmt"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/opencl"
)

//go:embed move.cl
var moveSrc string

// View is a strided view of a tensor in a buffer: element (i0, i1, ...) lives
// at Off + Σ ik·Strides[k], in elements. Strides may be 0 (broadcast) or
// negative (a reversed slice). Transpose, Slice and Expand are views of their
// input, so an engine whose consumer accepts strides need launch nothing;
// Copy materialises any view.
type View struct {
	Shape   []int
	Strides []int
	Off     int
}

// ContiguousView is the row-major view of shape at offset 0.
func ContiguousView(shape []int) View {
	v := View{Shape: append([]int(nil), shape...), Strides: make([]int, len(shape))}
	st := 1
	for i := len(shape) - 1; i >= 0; i-- {
		v.Strides[i] = st
		st *= shape[i]
	}
	return v
}

// Elements is the number of elements the view addresses.
func (v View) Elements() int {
	n := 1
	for _, d := range v.Shape {
		n *= d
	}
	return n
}

// IsContiguous reports whether v is row-major and dense (size-1 dims may have
// any stride), i.e. equal to ContiguousView(v.Shape) shifted by v.Off.
func (v View) IsContiguous() bool {
	st := 1
	for i := len(v.Shape) - 1; i >= 0; i-- {
		if v.Shape[i] == 0 {
			return true
		}
		if v.Shape[i] != 1 && v.Strides[i] != st {
			return false
		}
		st *= v.Shape[i]
	}
	return true
}

// bounds returns the lowest and highest offsets v addresses; ok is false for
// an empty view.
func (v View) bounds() (lo, hi int, ok bool) {
	lo, hi = v.Off, v.Off
	for i, d := range v.Shape {
		if d == 0 {
			return 0, 0, false
		}
		if s := (d - 1) * v.Strides[i]; s < 0 {
			lo += s
		} else {
			hi += s
		}
	}
	return lo, hi, true
}

func (v View) clone() View {
	return View{Shape: append([]int(nil), v.Shape...), Strides: append([]int(nil), v.Strides...), Off: v.Off}
}

func (v View) check() error {
	if len(v.Shape) != len(v.Strides) {
		return fmt.Errorf("view has %d dims but %d strides", len(v.Shape), len(v.Strides))
	}
	for _, d := range v.Shape {
		if d < 0 {
			return fmt.Errorf("view shape %v has a negative dim", v.Shape)
		}
	}
	return nil
}

// Permute is ONNX Transpose as a view: dimension k of the result is
// dimension perm[k] of v. A nil perm reverses the dimensions (ONNX's default).
func (v View) Permute(perm []int) (View, error) {
	r := len(v.Shape)
	if perm == nil {
		perm = make([]int, r)
		for i := range perm {
			perm[i] = r - 1 - i
		}
	}
	if len(perm) != r {
		return View{}, fmt.Errorf("kernels: Transpose: perm %v for rank %d", perm, r)
	}
	seen := make([]bool, r)
	out := View{Shape: make([]int, r), Strides: make([]int, r), Off: v.Off}
	for k, p := range perm {
		if p < 0 || p >= r || seen[p] {
			return View{}, fmt.Errorf("kernels: Transpose: perm %v is not a permutation of 0..%d", perm, r-1)
		}
		seen[p] = true
		out.Shape[k], out.Strides[k] = v.Shape[p], v.Strides[p]
	}
	return out, nil
}

// Slice is ONNX Slice (opset 13) as a view. axes nil means 0..len(starts)-1
// and steps nil means all 1; negative axes, starts and ends count from the
// end, and starts/ends are clamped as the operator specifies (so INT64_MAX
// and INT64_MIN work as "to the end"), including negative steps.
func (v View) Slice(starts, ends, axes, steps []int64) (View, error) {
	r := len(v.Shape)
	if len(ends) != len(starts) || (axes != nil && len(axes) != len(starts)) || (steps != nil && len(steps) != len(starts)) {
		return View{}, fmt.Errorf("kernels: Slice: starts %v, ends %v, axes %v, steps %v differ in length", starts, ends, axes, steps)
	}
	out := v.clone()
	seen := make([]bool, r)
	for i := range starts {
		ax := int64(i)
		if axes != nil {
			ax = axes[i]
		}
		if ax < -int64(r) || ax >= int64(r) {
			return View{}, fmt.Errorf("kernels: Slice: axis %d out of range for rank %d", ax, r)
		}
		if ax < 0 {
			ax += int64(r)
		}
		if seen[ax] {
			return View{}, fmt.Errorf("kernels: Slice: axis %d repeated in %v", ax, axes)
		}
		seen[ax] = true
		step := int64(1)
		if steps != nil {
			step = steps[i]
		}
		if step == 0 {
			return View{}, fmt.Errorf("kernels: Slice: step 0 on axis %d", ax)
		}
		start, n := SliceRange(int64(v.Shape[ax]), starts[i], ends[i], step)
		out.Off += int(start) * v.Strides[ax]
		out.Shape[ax] = int(n)
		out.Strides[ax] = v.Strides[ax] * int(step)
	}
	return out, nil
}

// SliceRange applies ONNX Slice's clamping to one axis of size dim: it
// returns the first index taken and how many are taken with step (non-zero).
func SliceRange(dim, start, end, step int64) (first, n int64) {
	if dim <= 0 {
		return 0, 0
	}
	if start < 0 {
		start += dim
	}
	if end < 0 {
		end += dim
	}
	if step > 0 {
		start = min(max(start, 0), dim)
		end = min(max(end, 0), dim)
		if end <= start {
			return 0, 0
		}
		return start, (end - start + step - 1) / step
	}
	start = min(max(start, 0), dim-1)
	end = min(max(end, -1), dim-1)
	if end >= start {
		return 0, 0
	}
	return start, (start - end + (-step) - 1) / (-step)
}

// ExpandShape is the shape ONNX Expand produces from shape and the requested
// shape: numpy broadcasting of the two.
func ExpandShape(shape, target []int) ([]int, error) {
	r := max(len(shape), len(target))
	out := make([]int, r)
	for i := 0; i < r; i++ {
		a, b := 1, 1
		if j := i - (r - len(shape)); j >= 0 {
			a = shape[j]
		}
		if j := i - (r - len(target)); j >= 0 {
			b = target[j]
		}
		switch {
		case a == b || b == 1:
			out[i] = a
		case a == 1:
			out[i] = b
		default:
			return nil, fmt.Errorf("kernels: Expand: shape %v does not broadcast to %v (dim %d: %d vs %d)", shape, target, i, a, b)
		}
	}
	return out, nil
}

// Expand is ONNX Expand as a view: broadcast dims get stride 0.
func (v View) Expand(target []int) (View, error) {
	shape, err := ExpandShape(v.Shape, target)
	if err != nil {
		return View{}, err
	}
	r, lead := len(shape), len(shape)-len(v.Shape)
	out := View{Shape: shape, Strides: make([]int, r), Off: v.Off}
	for i := lead; i < r; i++ {
		if v.Shape[i-lead] == shape[i] {
			out.Strides[i] = v.Strides[i-lead]
		}
	}
	return out, nil
}

// elemName is the OpenCL C type moving esize bytes.
func elemName(esize int) (string, error) {
	switch esize {
	case 1:
		return "uchar", nil
	case 2:
		return "ushort", nil
	case 4:
		return "uint", nil
	case 8:
		return "ulong", nil
	}
	return "", fmt.Errorf("kernels: element size %d bytes; want 1, 2, 4 or 8", esize)
}

// is64 is the kernels' index-type flag: 1 for int64, 0 for int32.
func is64(op string, t dtype.Type) (int32, error) {
	switch t {
	case dtype.Int32:
		return 0, nil
	case dtype.Int64:
		return 1, nil
	}
	return 0, fmt.Errorf("kernels: %s: index type %v; want int32 or int64", op, t)
}

// moveKernel returns kernel name of move.cl built for esize-byte elements.
func (l *Lib) moveKernel(esize int, name string) (*moveK, error) {
	if _, err := elemName(esize); err != nil {
		return nil, err
	}
	k, err := l.kernel("move", moveSrc, moveOptions[esize], name)
	if err != nil {
		return nil, err
	}
	return &moveK{l: l, k: k}, nil
}

// moveOptions are the move family's build options by element size, made
// once rather than at every launch.
var moveOptions = func() (o [9]string) {
	for _, n := range []int{1, 2, 4, 8} {
		e, _ := elemName(n)
		o[n] = fmt.Sprintf("-DELEM=%s -DELEM16=%s16", e, e)
	}
	return o
}()

// checkView verifies that b holds every element v addresses.
func checkView(op, what string, b Buf, v View, esize int) error {
	if err := v.check(); err != nil {
		return fmt.Errorf("kernels: %s: %s: %w", op, what, err)
	}
	lo, hi, ok := v.bounds()
	if !ok {
		return nil
	}
	if b.Off+lo < 0 {
		return fmt.Errorf("kernels: %s: %s view reaches element %d before the buffer start", op, what, b.Off+lo)
	}
	return checkSpan(op, what, b, hi+1, esize)
}

// copyDim is one dimension of a canonical copy.
type copyDim struct{ n, s, t int } // size, source stride, destination stride

// canonCopy drops size-1 dims and merges neighbours that are contiguous in
// both views; empty reports a copy of no elements.
func canonCopy(dv, sv View) (dims []copyDim, empty bool) {
	for i, n := range sv.Shape {
		if n == 0 {
			return nil, true
		}
		if n == 1 {
			continue
		}
		d := copyDim{n, sv.Strides[i], dv.Strides[i]}
		if k := len(dims) - 1; k >= 0 && dims[k].s == d.s*d.n && dims[k].t == d.t*d.n {
			dims[k] = copyDim{dims[k].n * d.n, d.s, d.t}
			continue
		}
		dims = append(dims, d)
	}
	return dims, false
}

// Copy materialises the view sv of src into the view dv of dst (equal
// shapes, any rank). dst's view must not address an element twice or overlap
// src's elements. Dimensions contiguous in both views are merged first, so a
// dense copy moves 16-element vectors; above rank 6 after merging the
// leading dims are looped over on the host.
func (l *Lib) Copy(esize int, dst Buf, dv View, src Buf, sv View) error {
	return l.copyStyle(esize, dst, dv, src, sv, preferGroups(l))
}

func (l *Lib) copyStyle(esize int, dst Buf, dv View, src Buf, sv View, gpu bool) error {
	if len(dv.Shape) != len(sv.Shape) {
		return fmt.Errorf("kernels: Copy: destination shape %v, source shape %v", dv.Shape, sv.Shape)
	}
	for i := range dv.Shape {
		if dv.Shape[i] != sv.Shape[i] {
			return fmt.Errorf("kernels: Copy: destination shape %v, source shape %v", dv.Shape, sv.Shape)
		}
	}
	if err := checkView("Copy", "source", src, sv, esize); err != nil {
		return err
	}
	if err := checkView("Copy", "destination", dst, dv, esize); err != nil {
		return err
	}
	dims, empty := canonCopy(dv, sv)
	if empty {
		return nil
	}
	so, do := src.Off+sv.Off, dst.Off+dv.Off
	if len(dims) == 0 || (len(dims) == 1 && dims[0].s == 1 && dims[0].t == 1) {
		n := 1
		if len(dims) == 1 {
			n = dims[0].n
		}
		k, err := l.moveKernel(esize, "copy_contig")
		if err != nil {
			return err
		}
		per, loc := 4096, 1
		if gpu {
			per, loc = 16, 64
		}
		items := (n + per - 1) / per
		return k.launch([]int{roundUp(items, loc)}, []int{loc}, src.Mem, int32(so), dst.Mem, int32(do), int32(n), int32(per))
	}
	name := "copy_rows"
	if gpu {
		name = "copy_elems"
	}
	k, err := l.moveKernel(esize, name)
	if err != nil {
		return err
	}
	return copyND(k, dims, src.Mem, so, dst.Mem, do, gpu)
}

// copyND launches one rank-6 copy, looping over dims beyond six on the host.
func copyND(k *moveK, dims []copyDim, src *opencl.Buffer, so int, dst *opencl.Buffer, do int, gpu bool) error {
	if len(dims) > 6 {
		d := dims[0]
		for i := 0; i < d.n; i++ {
			if err := copyND(k, dims[1:], src, so+i*d.s, dst, do+i*d.t, gpu); err != nil {
				return err
			}
		}
		return nil
	}
	var n, s, t [6]int32
	for i := range n {
		n[i] = 1
	}
	for i, d := range dims {
		j := 6 - len(dims) + i
		n[j], s[j], t[j] = int32(d.n), int32(d.s), int32(d.t)
	}
	args := []any{src, int32(so), dst, int32(do), int32(0)}
	for _, a := range [][6]int32{n, s, t} {
		for _, v := range a {
			args = append(args, v)
		}
	}
	total := 1
	for _, v := range n {
		total *= int(v)
	}
	if gpu {
		args[4] = int32(total)
		return k.launch([]int{roundUp(total, 64)}, []int{64}, args...)
	}
	rows := total / int(n[5])
	args[4] = int32(rows)
	loc := rowLocal(k.l, rows)
	return k.launch([]int{roundUp(rows, loc)}, []int{loc}, args...)
}

// CopyRef is the reference for Copy on host bytes: views address elements of
// esize bytes from the start of dst and src.
func CopyRef(esize int, dst []byte, dv View, src []byte, sv View) error {
	if len(dv.Shape) != len(sv.Shape) {
		return fmt.Errorf("kernels: CopyRef: destination shape %v, source shape %v", dv.Shape, sv.Shape)
	}
	n := sv.Elements()
	idx := make([]int, len(sv.Shape))
	for e := 0; e < n; e++ {
		r := e
		so, do := sv.Off, dv.Off
		for i := len(idx) - 1; i >= 0; i-- {
			idx[i] = r % sv.Shape[i]
			r /= sv.Shape[i]
			so += idx[i] * sv.Strides[i]
			do += idx[i] * dv.Strides[i]
		}
		copy(dst[do*esize:(do+1)*esize], src[so*esize:(so+1)*esize])
	}
	return nil
}

// Transpose writes ONNX Transpose(perm) of the contiguous src of the given
// shape to dst, contiguous.
func (l *Lib) Transpose(esize int, src Buf, shape, perm []int, dst Buf) error {
	v, err := ContiguousView(shape).Permute(perm)
	if err != nil {
		return err
	}
	return l.Copy(esize, dst, ContiguousView(v.Shape), src, v)
}

// Slice writes ONNX Slice of the contiguous src to dst, contiguous; see
// View.Slice for the parameters.
func (l *Lib) Slice(esize int, src Buf, shape []int, starts, ends, axes, steps []int64, dst Buf) error {
	v, err := ContiguousView(shape).Slice(starts, ends, axes, steps)
	if err != nil {
		return err
	}
	return l.Copy(esize, dst, ContiguousView(v.Shape), src, v)
}

// Expand writes ONNX Expand of the contiguous src to dst, contiguous, of
// shape ExpandShape(shape, target).
func (l *Lib) Expand(esize int, src Buf, shape, target []int, dst Buf) error {
	v, err := ContiguousView(shape).Expand(target)
	if err != nil {
		return err
	}
	return l.Copy(esize, dst, ContiguousView(v.Shape), src, v)
}

// tileViews expresses Tile as one copy of rank 2r: dim k of the input becomes
// (repeat, index) pairs, the repeat reading with stride 0.
func tileViews(shape, repeats []int) (dv, sv View, err error) {
	if len(repeats) != len(shape) {
		return View{}, View{}, fmt.Errorf("kernels: Tile: %d repeats for rank %d", len(repeats), len(shape))
	}
	out := make([]int, len(shape))
	for i, d := range shape {
		if repeats[i] < 0 {
			return View{}, View{}, fmt.Errorf("kernels: Tile: negative repeat %d on axis %d", repeats[i], i)
		}
		out[i] = d * repeats[i]
	}
	in, os := ContiguousView(shape), ContiguousView(out)
	for i, d := range shape {
		dv.Shape = append(dv.Shape, repeats[i], d)
		dv.Strides = append(dv.Strides, d*os.Strides[i], os.Strides[i])
		sv.Strides = append(sv.Strides, 0, in.Strides[i])
	}
	sv.Shape = dv.Shape
	return dv, sv, nil
}

// Tile writes ONNX Tile of the contiguous src to dst, contiguous, of shape
// shape[i]*repeats[i].
func (l *Lib) Tile(esize int, src Buf, shape, repeats []int, dst Buf) error {
	dv, sv, err := tileViews(shape, repeats)
	if err != nil {
		return err
	}
	return l.Copy(esize, dst, dv, src, sv)
}

// concatViews returns, for each input, the view of the output it fills.
func concatViews(shapes [][]int, axis int) (out []int, views []View, err error) {
	if len(shapes) == 0 {
		return nil, nil, fmt.Errorf("kernels: Concat: no inputs")
	}
	r := len(shapes[0])
	if axis < -r || axis >= r {
		return nil, nil, fmt.Errorf("kernels: Concat: axis %d out of range for rank %d", axis, r)
	}
	if axis < 0 {
		axis += r
	}
	out = append([]int(nil), shapes[0]...)
	out[axis] = 0
	for i, s := range shapes {
		if len(s) != r {
			return nil, nil, fmt.Errorf("kernels: Concat: input %d has rank %d, input 0 rank %d", i, len(s), r)
		}
		for k := range s {
			if k != axis && s[k] != out[k] {
				return nil, nil, fmt.Errorf("kernels: Concat: input %d shape %v does not match input 0 shape %v off axis %d", i, s, shapes[0], axis)
			}
		}
		out[axis] += s[axis]
	}
	ov := ContiguousView(out)
	at := 0
	for _, s := range shapes {
		views = append(views, View{Shape: append([]int(nil), s...), Strides: ov.Strides, Off: at * ov.Strides[axis]})
		at += s[axis]
	}
	return out, views, nil
}

// Concat writes ONNX Concat of the contiguous srcs (of the given shapes)
// along axis to dst, contiguous: one copy per non-empty input.
func (l *Lib) Concat(esize int, srcs []Buf, shapes [][]int, axis int, dst Buf) error {
	if len(srcs) != len(shapes) {
		return fmt.Errorf("kernels: Concat: %d inputs, %d shapes", len(srcs), len(shapes))
	}
	_, views, err := concatViews(shapes, axis)
	if err != nil {
		return err
	}
	for i, v := range views {
		if err := l.Copy(esize, dst, v, srcs[i], ContiguousView(shapes[i])); err != nil {
			return fmt.Errorf("Concat input %d: %w", i, err)
		}
	}
	return nil
}

// Split writes ONNX Split of the contiguous src along axis into dsts, the
// i-th of sizes[i] along axis, each contiguous.
func (l *Lib) Split(esize int, src Buf, shape []int, axis int, sizes []int, dsts []Buf) error {
	if len(sizes) != len(dsts) {
		return fmt.Errorf("kernels: Split: %d sizes, %d outputs", len(sizes), len(dsts))
	}
	shapes, views, err := splitViews(shape, axis, sizes)
	if err != nil {
		return err
	}
	for i, v := range views {
		if err := l.Copy(esize, dsts[i], ContiguousView(shapes[i]), src, v); err != nil {
			return fmt.Errorf("Split output %d: %w", i, err)
		}
	}
	return nil
}

// splitViews returns each output's shape and the view of the input it takes.
func splitViews(shape []int, axis int, sizes []int) (shapes [][]int, views []View, err error) {
	total := 0
	for _, s := range sizes {
		if s < 0 {
			return nil, nil, fmt.Errorf("kernels: Split: negative size in %v", sizes)
		}
		total += s
	}
	r := len(shape)
	if axis < -r || axis >= r {
		return nil, nil, fmt.Errorf("kernels: Split: axis %d out of range for rank %d", axis, r)
	}
	if axis < 0 {
		axis += r
	}
	if total != shape[axis] {
		return nil, nil, fmt.Errorf("kernels: Split: sizes %v sum to %d, axis %d of %v has %d", sizes, total, axis, shape, shape[axis])
	}
	for _, s := range sizes {
		sh := append([]int(nil), shape...)
		sh[axis] = s
		shapes = append(shapes, sh)
	}
	_, views, err = concatViews(shapes, axis)
	return shapes, views, err
}

// PadMode is ONNX Pad's mode attribute.
type PadMode int

// The pad modes: Constant fills with the value, Reflect mirrors without
// repeating the edge, Edge repeats the edge, Wrap wraps around (opset 19).
const (
	PadConstant PadMode = iota
	PadReflect
	PadEdge
	PadWrap
)

// padPlan folds negative pads into a cropped input view and merges dims that
// are not padded, returning at most six dims of output size, input view and
// leading pad.
func padPlan(shape, pads []int) (out []int, in View, begin []int, err error) {
	r := len(shape)
	if len(pads) != 2*r {
		return nil, View{}, nil, fmt.Errorf("kernels: Pad: %d pads for rank %d; want 2*rank (all begins, then all ends)", len(pads), r)
	}
	in = ContiguousView(shape)
	var outs, begins []int
	var cv View
	for i := 0; i < r; i++ {
		b, e, d := pads[i], pads[r+i], shape[i]
		st := in.Strides[i]
		off := 0
		endCrop := e < 0
		if b < 0 {
			off, d, b = -b, d+b, 0
		}
		if e < 0 {
			d, e = d+e, 0
		}
		if d < 0 {
			// A crop past the data eats into the padding on the other
			// side: the output is d + pads[i] + pads[r+i] long.
			if endCrop {
				b = max(b+d, 0)
			} else {
				e = max(e+d, 0)
			}
			d, off = 0, 0
		}
		cv.Off += off * st
		o := d + b + e
		if k := len(outs) - 1; k >= 0 && b == 0 && e == 0 && begins[k] == 0 && outs[k] == cv.Shape[k] &&
			cv.Strides[k] == st*d {
			// Unpadded neighbour: merge into the previous dim.
			outs[k] *= d
			cv.Shape[k] *= d
			cv.Strides[k] = st
			continue
		}
		outs = append(outs, o)
		begins = append(begins, b)
		cv.Shape = append(cv.Shape, d)
		cv.Strides = append(cv.Strides, st)
	}
	if len(outs) > 6 {
		return nil, View{}, nil, fmt.Errorf("kernels: Pad: rank %d with more than six padded or separated dims is not supported", r)
	}
	return outs, cv, begins, nil
}

// Pad writes ONNX Pad of the contiguous src to dst, contiguous. pads holds
// all begins then all ends (negative crops); value is the constant's raw
// bits in the low esize bytes (math.Float32bits for f32, dtype.Float32ToHalf
// for f16, the integer for int types).
func (l *Lib) Pad(esize int, src Buf, shape, pads []int, mode PadMode, value uint64, dst Buf) error {
	outs, in, begin, err := padPlan(shape, pads)
	if err != nil {
		return err
	}
	n := 1
	for _, d := range outs {
		n *= d
	}
	if n == 0 {
		return nil
	}
	if mode != PadConstant && in.Elements() == 0 {
		return fmt.Errorf("kernels: Pad: mode %d needs a non-empty input, shape %v with pads %v", mode, shape, pads)
	}
	if mode < PadConstant || mode > PadWrap {
		return fmt.Errorf("kernels: Pad: unknown mode %d", mode)
	}
	if err := checkView("Pad", "input", src, in, esize); err != nil {
		return err
	}
	if err := checkSpan("Pad", "output", dst, n, esize); err != nil {
		return err
	}
	k, err := l.moveKernel(esize, "pad")
	if err != nil {
		return err
	}
	var d, e, b, s [6]int32
	for i := range d {
		d[i], e[i] = 1, 1
	}
	for i := range outs {
		j := 6 - len(outs) + i
		d[j], e[j], b[j], s[j] = int32(outs[i]), int32(in.Shape[i]), int32(begin[i]), int32(in.Strides[i])
	}
	args := []any{src.Mem, int32(src.Off + in.Off), dst.Mem, int32(dst.Off), int32(n)}
	for _, a := range [][6]int32{d, e, b, s} {
		for _, v := range a {
			args = append(args, v)
		}
	}
	args = append(args, int32(mode), int64(value))
	return k.launch([]int{roundUp(n, 64)}, []int{64}, args...)
}

// PadShape is the output shape of Pad.
func PadShape(shape, pads []int) ([]int, error) {
	r := len(shape)
	if len(pads) != 2*r {
		return nil, fmt.Errorf("kernels: Pad: %d pads for rank %d", len(pads), r)
	}
	out := make([]int, r)
	for i, d := range shape {
		out[i] = max(d+pads[i]+pads[r+i], 0)
	}
	return out, nil
}

// PadRef is the reference for Pad on host bytes.
func PadRef(esize int, src []byte, shape, pads []int, mode PadMode, value uint64, dst []byte) error {
	outs, in, begin, err := padPlan(shape, pads)
	if err != nil {
		return err
	}
	var val [8]byte
	binary.LittleEndian.PutUint64(val[:], value)
	n := 1
	for _, d := range outs {
		n *= d
	}
	if n > 0 && mode != PadConstant && in.Elements() == 0 {
		return fmt.Errorf("kernels: Pad: mode %d needs a non-empty input, shape %v with pads %v", mode, shape, pads)
	}
	for e := 0; e < n; e++ {
		r, so, inside := e, in.Off, true
		for i := len(outs) - 1; i >= 0; i-- {
			c := r % outs[i]
			r /= outs[i]
			j := padSrcRef(c, begin[i], in.Shape[i], mode)
			if j < 0 {
				inside = false
				break
			}
			so += j * in.Strides[i]
		}
		if inside {
			copy(dst[e*esize:(e+1)*esize], src[so*esize:(so+1)*esize])
		} else {
			copy(dst[e*esize:(e+1)*esize], val[:esize])
		}
	}
	return nil
}

// padSrcRef mirrors move.cl's pad_src.
func padSrcRef(c, b, d int, mode PadMode) int {
	i := c - b
	if i >= 0 && i < d {
		return i
	}
	if mode == PadConstant || d == 0 {
		return -1
	}
	switch mode {
	case PadEdge:
		return min(max(i, 0), d-1)
	case PadWrap:
		i %= d
		if i < 0 {
			i += d
		}
		return i
	}
	if d == 1 {
		return 0
	}
	p := 2 * (d - 1)
	i %= p
	if i < 0 {
		i += p
	}
	if i < d {
		return i
	}
	return p - i
}

// gatherDims splits shape around axis into outer, axis size and inner.
func gatherDims(op string, shape []int, axis int) (outer, ad, inner int, err error) {
	r := len(shape)
	if axis < -r || axis >= r {
		return 0, 0, 0, fmt.Errorf("kernels: %s: axis %d out of range for rank %d", op, axis, r)
	}
	if axis < 0 {
		axis += r
	}
	outer, inner = 1, 1
	for i, d := range shape {
		switch {
		case i < axis:
			outer *= d
		case i > axis:
			inner *= d
		}
	}
	return outer, shape[axis], inner, nil
}

// local2D picks a 2-D local size for (inner, rows) launches from three
// shapes, so PoCL compiles each kernel at most three times.
func local2D(inner int) [2]int {
	switch {
	case inner >= 64:
		return [2]int{64, 1}
	case inner >= 16:
		return [2]int{16, 4}
	}
	return [2]int{1, 64}
}

// Gather writes ONNX Gather of the contiguous data (shape) along axis with
// nidx indices (int32 or int64, any shape: the output is shape[:axis] ++
// indices' shape ++ shape[axis+1:]) to dst. Negative indices count from the
// end; an index still out of range writes zeros and makes the next Finish
// return an error (the launch itself cannot see device-computed indices).
func (l *Lib) Gather(esize int, data Buf, shape []int, axis int, indices Buf, it dtype.Type, nidx int, dst Buf) error {
	outer, ad, inner, err := gatherDims("Gather", shape, axis)
	if err != nil {
		return err
	}
	rows := outer * nidx
	if rows*inner == 0 {
		return nil
	}
	if err := checkSpan("Gather", "data", data, outer*ad*inner, esize); err != nil {
		return err
	}
	if err := checkSpan("Gather", "indices", indices, nidx, it.Size()); err != nil {
		return err
	}
	if err := checkSpan("Gather", "output", dst, rows*inner, esize); err != nil {
		return err
	}
	wide, err := is64("Gather", it)
	if err != nil {
		return err
	}
	k, err := l.moveKernel(esize, "gather")
	if err != nil {
		return err
	}
	fault, slot, err := l.faultSlot("Gather", ad)
	if err != nil {
		return err
	}
	loc := local2D(inner)
	return k.launch([]int{roundUp(inner, loc[0]), roundUp(rows, loc[1])}, loc[:],
		data.Mem, int32(data.Off), indices.Mem, int32(indices.Off), dst.Mem, int32(dst.Off),
		int32(outer), int32(ad), int32(nidx), int32(inner), wide, fault, slot)
}

// GatherRef is the reference for Gather on host bytes.
func GatherRef(esize int, data []byte, shape []int, axis int, indices []int64, dst []byte) error {
	outer, ad, inner, err := gatherDims("Gather", shape, axis)
	if err != nil {
		return err
	}
	n := len(indices)
	for o := 0; o < outer; o++ {
		for t, k := range indices {
			if k < 0 {
				k += int64(ad)
			}
			d := dst[(o*n+t)*inner*esize : (o*n+t+1)*inner*esize]
			if k < 0 || k >= int64(ad) {
				return indexError("Gather", indices[t], ad)
			}
			copy(d, data[(o*ad+int(k))*inner*esize:])
		}
	}
	return nil
}

// GatherElements writes ONNX GatherElements: dst (shape idxShape, like the
// contiguous int32/int64 indices) takes data[..., indices[...], ...] along
// axis from the contiguous data of dataShape (same rank, at most 6).
// Negative indices count from the end; an out-of-range one is reported by
// the next Finish, as for Gather.
func (l *Lib) GatherElements(esize int, data Buf, dataShape []int, axis int, indices Buf, it dtype.Type, idxShape []int, dst Buf) error {
	r := len(dataShape)
	if len(idxShape) != r || r == 0 || r > 6 {
		return fmt.Errorf("kernels: GatherElements: data shape %v and indices shape %v; want equal ranks 1..6", dataShape, idxShape)
	}
	if axis < -r || axis >= r {
		return fmt.Errorf("kernels: GatherElements: axis %d out of range for rank %d", axis, r)
	}
	if axis < 0 {
		axis += r
	}
	for i := range idxShape {
		if i != axis && idxShape[i] > dataShape[i] {
			return fmt.Errorf("kernels: GatherElements: indices shape %v exceeds data shape %v on axis %d", idxShape, dataShape, i)
		}
	}
	n := ContiguousView(idxShape).Elements()
	if n == 0 {
		return nil
	}
	dv := ContiguousView(dataShape)
	if err := checkSpan("GatherElements", "data", data, dv.Elements(), esize); err != nil {
		return err
	}
	if err := checkSpan("GatherElements", "indices", indices, n, it.Size()); err != nil {
		return err
	}
	if err := checkSpan("GatherElements", "output", dst, n, esize); err != nil {
		return err
	}
	wide, err := is64("GatherElements", it)
	if err != nil {
		return err
	}
	k, err := l.moveKernel(esize, "gather_elements")
	if err != nil {
		return err
	}
	var d, s [6]int32
	for i := range d {
		d[i] = 1
	}
	lead := 6 - r
	for i := 0; i < r; i++ {
		d[lead+i], s[lead+i] = int32(idxShape[i]), int32(dv.Strides[i])
	}
	args := []any{data.Mem, int32(data.Off), indices.Mem, int32(indices.Off), dst.Mem, int32(dst.Off), int32(n)}
	for _, a := range [][6]int32{d, s} {
		for _, v := range a {
			args = append(args, v)
		}
	}
	fault, slot, err := l.faultSlot("GatherElements", dataShape[axis])
	if err != nil {
		return err
	}
	args = append(args, int32(lead+axis), int32(dataShape[axis]), wide, fault, slot)
	return k.launch([]int{roundUp(n, 64)}, []int{64}, args...)
}

// GatherElementsRef is the reference for GatherElements on host bytes.
func GatherElementsRef(esize int, data []byte, dataShape []int, axis int, indices []int64, idxShape []int, dst []byte) error {
	r := len(dataShape)
	if len(idxShape) != r || axis < -r || axis >= r {
		return fmt.Errorf("kernels: GatherElementsRef: data shape %v, indices shape %v, axis %d", dataShape, idxShape, axis)
	}
	if axis < 0 {
		axis += r
	}
	dv := ContiguousView(dataShape)
	for e, k := range indices {
		if k < 0 {
			k += int64(dataShape[axis])
		}
		o := dst[e*esize : (e+1)*esize]
		if k < 0 || k >= int64(dataShape[axis]) {
			return indexError("GatherElements", indices[e], dataShape[axis])
		}
		rem, off := e, 0
		for i := r - 1; i >= 0; i-- {
			c := rem % idxShape[i]
			rem /= idxShape[i]
			if i == axis {
				c = int(k)
			}
			off += c * dv.Strides[i]
		}
		copy(o, data[off*esize:(off+1)*esize])
	}
	return nil
}

// kvDims validates KVWrite's views and returns B, H, S, T, D.
func kvDims(cv, sv View) (b, h, s, t, d int, err error) {
	if len(cv.Shape) != 4 || len(sv.Shape) != 4 || len(cv.Strides) != 4 || len(sv.Strides) != 4 {
		return 0, 0, 0, 0, 0, fmt.Errorf("kernels: KVWrite: cache view %v and new view %v; want rank-4 [batch, heads, seq, headDim] views", cv.Shape, sv.Shape)
	}
	if cv.Shape[0] != sv.Shape[0] || cv.Shape[1] != sv.Shape[1] || cv.Shape[3] != sv.Shape[3] {
		return 0, 0, 0, 0, 0, fmt.Errorf("kernels: KVWrite: cache %v and new %v differ off the seq axis (2)", cv.Shape, sv.Shape)
	}
	return cv.Shape[0], cv.Shape[1], cv.Shape[2], sv.Shape[2], cv.Shape[3], nil
}

// KVWrite writes new keys or values into a cache in place:
// cache[b, h, pos[b, t], :] = src[b, h, t, :]. Both are views of rank 4,
// [batch, heads, seq, headDim] (View.Permute turns a [batch, seq, heads,
// headDim] layout into this one; the source view may be the un-transposed
// projection output). pos holds T int32 or int64 positions shared by the
// batch, or batch*T when perBatch; they need not be contiguous or ordered
// (chunk recompute writes scattered slots). Positions outside [0, cache seq)
// are skipped.
func (l *Lib) KVWrite(esize int, cache Buf, cv View, src Buf, sv View, pos Buf, pt dtype.Type, perBatch bool) error {
	b, h, s, t, d, err := kvDims(cv, sv)
	if err != nil {
		return err
	}
	rows := b * h * t
	if rows*d == 0 {
		return nil
	}
	if err := checkView("KVWrite", "cache", cache, cv, esize); err != nil {
		return err
	}
	if err := checkView("KVWrite", "new", src, sv, esize); err != nil {
		return err
	}
	np := t
	if perBatch {
		np = b * t
	}
	if err := checkSpan("KVWrite", "positions", pos, np, pt.Size()); err != nil {
		return err
	}
	wide, err := is64("KVWrite", pt)
	if err != nil {
		return err
	}
	k, err := l.moveKernel(esize, "kv_write")
	if err != nil {
		return err
	}
	loc := local2D(d)
	return k.launch([]int{roundUp(d, loc[0]), roundUp(rows, loc[1])}, loc[:],
		cache.Mem, int32(cache.Off+cv.Off), src.Mem, int32(src.Off+sv.Off), pos.Mem, int32(pos.Off),
		int32(b), int32(h), int32(s), int32(t), int32(d),
		int32(cv.Strides[0]), int32(cv.Strides[1]), int32(cv.Strides[2]), int32(cv.Strides[3]),
		int32(sv.Strides[0]), int32(sv.Strides[1]), int32(sv.Strides[2]), int32(sv.Strides[3]), boolArg(perBatch), wide)
}

// KVWriteAt is KVWrite for the consecutive host-known positions start,
// start+1, ...: a plain strided copy into the cache, no positions buffer.
func (l *Lib) KVWriteAt(esize int, cache Buf, cv View, src Buf, sv View, start int) error {
	_, _, s, t, _, err := kvDims(cv, sv)
	if err != nil {
		return err
	}
	if start < 0 || start+t > s {
		return fmt.Errorf("kernels: KVWriteAt: positions [%d, %d) outside a cache of %d", start, start+t, s)
	}
	dv := cv.clone()
	dv.Shape[2] = t
	dv.Off += start * cv.Strides[2]
	return l.Copy(esize, cache, dv, src, sv)
}

// KVWriteRef is the reference for KVWrite on host bytes.
func KVWriteRef(esize int, cache []byte, cv View, src []byte, sv View, pos []int64, perBatch bool) error {
	b, h, s, t, d, err := kvDims(cv, sv)
	if err != nil {
		return err
	}
	for bi := 0; bi < b; bi++ {
		for hi := 0; hi < h; hi++ {
			for ti := 0; ti < t; ti++ {
				p := pos[ti]
				if perBatch {
					p = pos[bi*t+ti]
				}
				if p < 0 || p >= int64(s) {
					continue
				}
				for di := 0; di < d; di++ {
					co := cv.Off + bi*cv.Strides[0] + hi*cv.Strides[1] + int(p)*cv.Strides[2] + di*cv.Strides[3]
					so := sv.Off + bi*sv.Strides[0] + hi*sv.Strides[1] + ti*sv.Strides[2] + di*sv.Strides[3]
					copy(cache[co*esize:(co+1)*esize], src[so*esize:(so+1)*esize])
				}
			}
		}
	}
	return nil
}

// moveK is a move kernel bound to its library, for launches.
type moveK struct {
	l *Lib
	k *opencl.Kernel
}

// launch enqueues the kernel. Sizes, strides and offsets go as int32: the
// bounds checks before each launch keep every address below math.MaxInt32.
func (m *moveK) launch(global, local []int, args ...any) error {
	return m.l.dev.Launch(m.k, global, local, args...)
}
