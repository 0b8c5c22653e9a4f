package opencl

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

const imageSrc = `
__kernel void read_u(__read_only image1d_buffer_t im, __global uint *out, int off) {
	const int i = get_global_id(0);
	vstore4(read_imageui(im, off + i), i, out);
}
__kernel void read_h(__read_only image1d_buffer_t im, __global float *out) {
	const int i = get_global_id(0);
	vstore4(read_imagef(im, i), i, out);
}
`

// TestImage1D reads a buffer through images over it, as uint4 and as
// half4 widened to float4, and checks every value bit for bit, that the
// image is made once per format, and that releasing the buffer releases
// it. On a device without images (PoCL has them) only the refusal is
// checked.
func TestImage1D(t *testing.T) {
	d := open(t, Options{})
	const texels = 37
	raw := make([]byte, 16*texels+5) // a partial texel at the end
	for i := 0; i+4 <= len(raw); i += 4 {
		binary.LittleEndian.PutUint32(raw[i:], uint32(i)*2654435761)
	}
	b, err := d.Alloc(len(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 0, raw); err != nil {
		t.Fatal(err)
	}
	if !d.Info().Images {
		if _, err := b.Image1D(ImageUint32x4); err == nil || !strings.Contains(err.Error(), "no images") {
			t.Errorf("image on a device without images: error %v", err)
		}
		t.Skip("the device has no images")
	}
	if got := d.ImageTexels(ImageUint32x4, len(raw)); got != texels {
		t.Errorf("ImageTexels = %d, want %d", got, texels)
	}
	if got := d.ImageTexels(ImageUint32x4, int(16*(d.Info().ImageMaxBuffer+1))); got != 0 {
		t.Errorf("ImageTexels past CL_DEVICE_IMAGE_MAX_BUFFER_SIZE = %d, want 0", got)
	}
	im, err := b.Image1D(ImageUint32x4)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := b.Image1D(ImageUint32x4); err != nil || again != im {
		t.Errorf("second Image1D: %p, %v; want the first image %p", again, err, im)
	}
	if im.Texels() != texels || im.Format() != ImageUint32x4 {
		t.Errorf("image of %d texels, format %s", im.Texels(), im.Format())
	}
	p, err := d.Build(imageSrc, "")
	if err != nil {
		t.Fatal(err)
	}
	ku, err := p.Kernel("read_u")
	if err != nil {
		t.Fatal(err)
	}
	const off = 3
	out, err := d.Alloc(16 * texels)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(ku, []int{texels - off}, nil, im, out, int32(off)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16*(texels-off))
	if err := d.Read(out, 0, got); err != nil {
		t.Fatal(err)
	}
	for i := range texels - off {
		for c := range 4 {
			w := binary.LittleEndian.Uint32(raw[16*(off+i)+4*c:])
			if g := binary.LittleEndian.Uint32(got[16*i+4*c:]); g != w {
				t.Fatalf("texel %d channel %d: %#x, want %#x", off+i, c, g, w)
			}
		}
	}

	// Halves: every finite half value's bits, widened exactly.
	const hTexels = 64
	hraw := make([]byte, 8*hTexels)
	want := make([]float32, 4*hTexels)
	for i := range want {
		h := uint16(i * 251 % 0x7C00) // positive finite halves
		if i%2 == 1 {
			h |= 0x8000
		}
		binary.LittleEndian.PutUint16(hraw[2*i:], h)
		want[i] = halfToFloat(h)
	}
	hb, _ := d.Alloc(len(hraw))
	if err := d.Write(hb, 0, hraw); err != nil {
		t.Fatal(err)
	}
	him, err := hb.Image1D(ImageHalfx4)
	if err != nil {
		t.Fatal(err)
	}
	kh, err := p.Kernel("read_h")
	if err != nil {
		t.Fatal(err)
	}
	hout, _ := d.Alloc(16 * hTexels)
	if err := d.Launch(kh, []int{hTexels}, nil, him, hout); err != nil {
		t.Fatal(err)
	}
	hgot := make([]byte, 16*hTexels)
	if err := d.Read(hout, 0, hgot); err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if g := math.Float32frombits(binary.LittleEndian.Uint32(hgot[4*i:])); math.Float32bits(g) != math.Float32bits(w) {
			t.Fatalf("half %d: %v, want %v", i, g, w)
		}
	}

	b.Release()
	if err := d.Launch(ku, []int{1}, nil, im, out, int32(0)); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("launch with the image of a released buffer: %v", err)
	}
	if _, err := b.Image1D(ImageUint32x4); err == nil {
		t.Error("Image1D of a released buffer made an image")
	}
	if _, err := hb.Image1D(ImageFormat(7)); err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Errorf("unknown format: %v", err)
	}
}

// halfToFloat widens IEEE half bits h (finite) to float32.
func halfToFloat(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&0x1F), float64(h&0x3FF)
	if e == 0 {
		return sign * float32(math.Ldexp(m, -24))
	}
	return sign * float32(math.Ldexp(1024+m, e-25))
}
