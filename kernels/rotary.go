package kernels

import (
	_ "embed"
	"fmt"
)

//go:embed rotary.cl
var rotarySrc string

// RotaryParams describes a rotary position embedding, the form Hugging
// Face-style exports write as x*cos + rotate_half(x)*sin with
// rotate_half(x) = concat(-x[h:rd], x[:h]) and h = RotaryDim/2, applied to
// the first RotaryDim elements of each row of x; the other elements of the
// row are copied (GPT-NeoX's partial rotary).
type RotaryParams struct {
	Storage   Storage // x, cos, sin and out
	RotaryDim int
}

// RotaryLayout places one rotated tensor and its tables: x (and out) is
// contiguous of shape Shape (a lower rank padded on the left with 1s);
// cos and sin are read at element strides CosStride and SinStride over
// x's four dims, the last stride counting over the rotated part only; a
// stride of 0 broadcasts. NewRotaryLayout derives it from the shapes.
type RotaryLayout struct {
	Shape     [4]int
	CosStride [4]int
	SinStride [4]int
}

// RotaryTensor is one tensor a Rotary launch rotates: its input, its
// output (which may alias X) and their layout.
type RotaryTensor struct {
	RotaryLayout
	X, Out Buf
}

// present reports whether t names a tensor (the second of a launch is
// optional).
func (t RotaryTensor) present() bool {
	return t.X.Mem != nil || t.X.Host != nil || t.Out.Mem != nil || t.Out.Host != nil
}

// NewRotaryLayout lays out x of shape x (rank 1 to 4) rotated over its
// last axis's first rd elements, with contiguous cos and sin tables of the
// given shapes: aligned on the right, each table dim must be 1 or x's, the
// last rd or 1.
func NewRotaryLayout(x, cos, sin []int, rd int) (RotaryLayout, error) {
	var l RotaryLayout
	if len(x) == 0 || len(x) > 4 {
		return l, fmt.Errorf("kernels: Rotary: x has rank %d; want 1 to 4", len(x))
	}
	l.Shape = [4]int{1, 1, 1, 1}
	copy(l.Shape[4-len(x):], x)
	var err error
	if l.CosStride, err = rotaryStrides(x, cos, rd); err != nil {
		return l, fmt.Errorf("kernels: Rotary: cos: %w", err)
	}
	if l.SinStride, err = rotaryStrides(x, sin, rd); err != nil {
		return l, fmt.Errorf("kernels: Rotary: sin: %w", err)
	}
	return l, nil
}

// rotaryStrides returns the element strides at which a contiguous table of
// shape tab broadcasts against x rotated over rd.
func rotaryStrides(x, tab []int, rd int) ([4]int, error) {
	var st [4]int
	if len(tab) == 0 || len(tab) > len(x) {
		return st, fmt.Errorf("table shape %v does not broadcast to x %v", tab, x)
	}
	off := len(x) - len(tab)
	stride := 1
	for i := len(tab) - 1; i >= 0; i-- {
		want := x[off+i]
		if i == len(tab)-1 {
			want = rd
		}
		d := tab[i]
		if d < 0 {
			return st, fmt.Errorf("negative table dim in %v", tab)
		}
		switch {
		case d == want:
			st[4-len(tab)+i] = stride
		case d == 1:
			// broadcast: stride 0
		default:
			return st, fmt.Errorf("table shape %v does not broadcast to x %v rotated over %d", tab, x, rd)
		}
		stride *= d
	}
	return st, nil
}

// check validates l under p and returns the element count of x (and out)
// and of the spans of cos and sin.
func (l RotaryLayout) check(p RotaryParams) (nx, ncos, nsin int, err error) {
	d := l.Shape[3]
	for _, v := range l.Shape {
		if v < 0 {
			return 0, 0, 0, fmt.Errorf("kernels: Rotary: negative size in %v", l.Shape)
		}
	}
	if p.RotaryDim <= 0 || p.RotaryDim%2 != 0 || p.RotaryDim > d {
		return 0, 0, 0, fmt.Errorf("kernels: Rotary: rotary dim %d must be even, positive and at most the row's %d", p.RotaryDim, d)
	}
	nx = l.Shape[0] * l.Shape[1] * l.Shape[2] * d
	span := func(st [4]int) (int, error) {
		n := 1
		for i, s := range st {
			size := l.Shape[i]
			if i == 3 {
				size = p.RotaryDim
			}
			if s < 0 {
				return 0, fmt.Errorf("kernels: Rotary: negative table stride in %v", st)
			}
			if size > 0 {
				n += (size - 1) * s
			}
		}
		return n, nil
	}
	if ncos, err = span(l.CosStride); err != nil {
		return 0, 0, 0, err
	}
	if nsin, err = span(l.SinStride); err != nil {
		return 0, 0, 0, err
	}
	return nx, ncos, nsin, nil
}

// Rotary applies the rotary embedding p describes, with tables cos and
// sin, to a and, when it is given (a zero RotaryTensor is none), to b in
// the same launch: attention's queries and keys share their tables. Out
// may alias X (each pair of elements is read before it is written).
func (l *Lib) Rotary(p RotaryParams, cos, sin Buf, a, b RotaryTensor) error {
	es := p.Storage.Size()
	var rows, per [2]int
	ts := [2]RotaryTensor{a, b}
	n := 1
	if b.present() {
		n = 2
		if a.CosStride[3] != b.CosStride[3] || a.SinStride[3] != b.SinStride[3] {
			return fmt.Errorf("kernels: Rotary: the two tensors read the tables' last axis at different strides (%d/%d, %d/%d)",
				a.CosStride[3], b.CosStride[3], a.SinStride[3], b.SinStride[3])
		}
	}
	for i, t := range ts[:n] {
		nx, nc, ns, err := t.check(p)
		if err != nil {
			return err
		}
		for _, c := range []struct {
			what string
			b    Buf
			n    int
		}{{"x", t.X, nx}, {"cos", cos, nc}, {"sin", sin, ns}, {"out", t.Out, nx}} {
			if err := checkSpan("Rotary", c.what, c.b, c.n, es); err != nil {
				return err
			}
		}
		rows[i] = t.Shape[0] * t.Shape[1] * t.Shape[2]
		per[i] = p.RotaryDim/2 + t.Shape[3] - p.RotaryDim
	}
	items := rows[0]*per[0] + rows[1]*per[1]
	if items == 0 {
		return nil
	}
	if items < 0 || items > 1<<31-1 {
		return fmt.Errorf("kernels: Rotary: %d work-items do not fit int32 indices", items)
	}
	if n == 1 {
		// The kernel binds every argument: point the absent second tensor
		// at the first, with no rows.
		b = a
	}
	name, global, local := "rotary_rows", rows[0]+rows[1], rowLocal(l, rows[0]+rows[1])
	if preferGroups(l) {
		name, global, local = "rotary_elems", items, 64
	}
	k, err := l.kernel("rotary", rotarySrc, p.Storage.define(), name)
	if err != nil {
		return err
	}
	return l.dev.Launch(k, []int{roundUp(global, local)}, []int{local},
		cos.Mem, int32(cos.Off), sin.Mem, int32(sin.Off), int32(p.RotaryDim), int32(a.CosStride[3]), int32(a.SinStride[3]),
		a.X.Mem, int32(a.X.Off), a.Out.Mem, int32(a.Out.Off), int32(rows[0]), int32(a.Shape[1]), int32(a.Shape[2]), int32(a.Shape[3]),
		int32(a.CosStride[0]), int32(a.CosStride[1]), int32(a.CosStride[2]), int32(a.SinStride[0]), int32(a.SinStride[1]), int32(a.SinStride[2]),
		b.X.Mem, int32(b.X.Off), b.Out.Mem, int32(b.Out.Off), int32(rows[1]), int32(b.Shape[1]), int32(b.Shape[2]), int32(b.Shape[3]),
		int32(b.CosStride[0]), int32(b.CosStride[1]), int32(b.CosStride[2]), int32(b.SinStride[0]), int32(b.SinStride[1]), int32(b.SinStride[2]))
}

// RotaryRef is the reference for one tensor of Rotary on host slices, in
// float32 arithmetic like the kernel, rounding what it stores to
// p.Storage. out may alias x.
func RotaryRef(p RotaryParams, l RotaryLayout, x, cos, sin, out []float32) error {
	nx, nc, ns, err := l.check(p)
	if err != nil {
		return err
	}
	if len(x) < nx || len(out) < nx || len(cos) < nc || len(sin) < ns {
		return fmt.Errorf("kernels: Rotary: have x %d, cos %d, sin %d, out %d elements; want %d, %d, %d, %d",
			len(x), len(cos), len(sin), len(out), nx, nc, ns, nx)
	}
	d, rd := l.Shape[3], p.RotaryDim
	h := rd / 2
	c, s := l.CosStride, l.SinStride
	for i0 := 0; i0 < l.Shape[0]; i0++ {
		for i1 := 0; i1 < l.Shape[1]; i1++ {
			for i2 := 0; i2 < l.Shape[2]; i2++ {
				base := ((i0*l.Shape[1]+i1)*l.Shape[2] + i2) * d
				cb := i0*c[0] + i1*c[1] + i2*c[2]
				sb := i0*s[0] + i1*s[1] + i2*s[2]
				for j := 0; j < h; j++ {
					a, b := x[base+j], x[base+j+h]
					lo := a*cos[cb+j*c[3]] - b*sin[sb+j*s[3]]
					hi := b*cos[cb+(j+h)*c[3]] + a*sin[sb+(j+h)*s[3]]
					out[base+j] = storeAs(p.Storage, lo)
					out[base+j+h] = storeAs(p.Storage, hi)
				}
				for k := base + rd; k < base+d; k++ {
					out[k] = storeAs(p.Storage, x[k])
				}
			}
		}
	}
	return nil
}

// Rotary runs RotaryRef on a, then on b when it is given.
func (h *HostDevice) Rotary(p RotaryParams, cos, sin Buf, a, b RotaryTensor) error {
	if err := f32only(p.Storage); err != nil {
		return err
	}
	if err := RotaryRef(p, a.RotaryLayout, hostF32(a.X), hostF32(cos), hostF32(sin), hostF32(a.Out)); err != nil {
		return err
	}
	if !b.present() {
		return nil
	}
	return RotaryRef(p, b.RotaryLayout, hostF32(b.X), hostF32(cos), hostF32(sin), hostF32(b.Out))
}
