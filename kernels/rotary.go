package kernels

import (
	_ "embed"
	"fmt"
)

//go:embed rotary.cl
var rotarySrc string

// RotaryParams describes one rotary position embedding, the form
// Hugging Face-style exports write as x*cos + rotate_half(x)*sin with
// rotate_half(x) = concat(-x[h:rd], x[:h]) and h = RotaryDim/2, applied to
// the first RotaryDim elements of each row of x; the other elements of the
// row are copied (GPT-NeoX's partial rotary).
//
// x and out are contiguous of shape Shape (a lower rank padded on the
// left with 1s). cos and sin are read at element strides CosStride and
// SinStride over x's four dims, the last stride counting over the rotated
// part only; a stride of 0 broadcasts. RotaryStrides derives them from a
// contiguous cos or sin shape.
type RotaryParams struct {
	Storage   Storage
	Shape     [4]int
	RotaryDim int
	CosStride [4]int
	SinStride [4]int
}

// RotaryStrides returns the element strides at which a contiguous table of
// shape tab (cos or sin) broadcasts against x of shape x (rank at most 4)
// whose last axis's first rd elements are rotated: tab, aligned on the
// right, must have on each axis 1 or x's size, rd (or 1) on the last.
func RotaryStrides(x, tab []int, rd int) ([4]int, error) {
	var st [4]int
	if len(x) == 0 || len(x) > 4 {
		return st, fmt.Errorf("kernels: Rotary: x has rank %d; want 1 to 4", len(x))
	}
	if len(tab) == 0 || len(tab) > len(x) {
		return st, fmt.Errorf("kernels: Rotary: table shape %v does not broadcast to x %v", tab, x)
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
			return st, fmt.Errorf("kernels: Rotary: negative table dim in %v", tab)
		}
		switch {
		case d == want:
			st[4-len(tab)+i] = stride
		case d == 1:
			// broadcast: stride 0
		default:
			return st, fmt.Errorf("kernels: Rotary: table shape %v does not broadcast to x %v rotated over %d", tab, x, rd)
		}
		stride *= d
	}
	return st, nil
}

// RotaryShape pads x's shape on the left to the four dims of
// RotaryParams.Shape.
func RotaryShape(x []int) ([4]int, error) {
	s := [4]int{1, 1, 1, 1}
	if len(x) == 0 || len(x) > 4 {
		return s, fmt.Errorf("kernels: Rotary: x has rank %d; want 1 to 4", len(x))
	}
	copy(s[4-len(x):], x)
	return s, nil
}

// check validates p and returns the element counts of x (and out) and of
// the spans of cos and sin.
func (p RotaryParams) check() (nx, ncos, nsin int, err error) {
	d := p.Shape[3]
	for _, v := range p.Shape {
		if v < 0 {
			return 0, 0, 0, fmt.Errorf("kernels: Rotary: negative size in %v", p.Shape)
		}
	}
	if p.RotaryDim <= 0 || p.RotaryDim%2 != 0 || p.RotaryDim > d {
		return 0, 0, 0, fmt.Errorf("kernels: Rotary: rotary dim %d must be even, positive and at most the row's %d", p.RotaryDim, d)
	}
	nx = p.Shape[0] * p.Shape[1] * p.Shape[2] * d
	span := func(st [4]int) (int, error) {
		n := 1
		for i, s := range st {
			size := p.Shape[i]
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
	if ncos, err = span(p.CosStride); err != nil {
		return 0, 0, 0, err
	}
	if nsin, err = span(p.SinStride); err != nil {
		return 0, 0, 0, err
	}
	return nx, ncos, nsin, nil
}

// Rotary applies the rotary embedding p describes to x, writing out; out
// may alias x (each pair of elements is read before it is written).
func (l *Lib) Rotary(p RotaryParams, x, cos, sin, out Buf) error {
	nx, nc, ns, err := p.check()
	if err != nil {
		return err
	}
	if nx == 0 {
		return nil
	}
	es := p.Storage.Size()
	for _, a := range []struct {
		what string
		b    Buf
		n    int
	}{{"x", x, nx}, {"cos", cos, nc}, {"sin", sin, ns}, {"out", out, nx}} {
		if err := checkSpan("Rotary", a.what, a.b, a.n, es); err != nil {
			return err
		}
	}
	rows := p.Shape[0] * p.Shape[1] * p.Shape[2]
	per := p.RotaryDim/2 + p.Shape[3] - p.RotaryDim
	k, err := l.kernel("rotary", rotarySrc, p.Storage.define(), "rotary")
	if err != nil {
		return err
	}
	const loc = 64
	c, s := p.CosStride, p.SinStride
	return l.dev.Launch(k, []int{roundUp(rows*per, loc)}, []int{loc},
		x.Mem, int32(x.Off), cos.Mem, int32(cos.Off), sin.Mem, int32(sin.Off), out.Mem, int32(out.Off),
		int32(rows), int32(p.Shape[1]), int32(p.Shape[2]), int32(p.Shape[3]), int32(p.RotaryDim),
		int32(c[0]), int32(c[1]), int32(c[2]), int32(c[3]), int32(s[0]), int32(s[1]), int32(s[2]), int32(s[3]))
}

// RotaryRef is the reference for Rotary on host slices, in float32
// arithmetic like the kernel, rounding what it stores to p.Storage. out may
// alias x.
func RotaryRef(p RotaryParams, x, cos, sin, out []float32) error {
	nx, nc, ns, err := p.check()
	if err != nil {
		return err
	}
	if len(x) < nx || len(out) < nx || len(cos) < nc || len(sin) < ns {
		return fmt.Errorf("kernels: Rotary: have x %d, cos %d, sin %d, out %d elements; want %d, %d, %d, %d",
			len(x), len(cos), len(sin), len(out), nx, nc, ns, nx)
	}
	d, rd := p.Shape[3], p.RotaryDim
	h := rd / 2
	c, s := p.CosStride, p.SinStride
	for i0 := 0; i0 < p.Shape[0]; i0++ {
		for i1 := 0; i1 < p.Shape[1]; i1++ {
			for i2 := 0; i2 < p.Shape[2]; i2++ {
				base := ((i0*p.Shape[1]+i1)*p.Shape[2] + i2) * d
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

// Rotary runs RotaryRef.
func (h *HostDevice) Rotary(p RotaryParams, x, cos, sin, out Buf) error {
	if err := f32only(p.Storage); err != nil {
		return err
	}
	return RotaryRef(p, hostF32(x), hostF32(cos), hostF32(sin), hostF32(out))
}
