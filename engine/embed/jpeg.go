package embed

import "image"

// The YCbCr conversion below follows libjpeg (jdcolor.c and jdsample.c),
// which PIL decodes JPEG with: chroma planes subsampled 2x are upsampled
// with its "fancy" triangular filter (3/4 of the nearer sample, 1/4 of the
// farther) rather than repeated, and colours are converted with its
// 16-bit fixed-point tables. Go's image/jpeg repeats chroma samples,
// which moves edges in 4:2:0 photographs by tens of levels against
// torchvision's input. The inverse DCTs still differ slightly (a level or
// two).

const (
	jScale   = 16
	jOneHalf = 1 << (jScale - 1)
)

func jfix(x float64) int32 { return int32(x*(1<<jScale) + 0.5) }

var crR, cbB, crG, cbG = func() (a, b, c, d [256]int32) {
	for i := 0; i < 256; i++ {
		x := int32(i - 128)
		a[i] = (jfix(1.40200)*x + jOneHalf) >> jScale
		b[i] = (jfix(1.77200)*x + jOneHalf) >> jScale
		c[i] = -jfix(0.71414) * x
		d[i] = -jfix(0.34414)*x + jOneHalf
	}
	return
}()

func clamp8(v int32) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// upsampleH2 widens one row of chroma samples to 2*len(in) (libjpeg's
// h2v1 fancy upsampling).
func upsampleH2(in []uint8, out []uint8) {
	n := len(in)
	if n == 1 {
		out[0], out[1] = in[0], in[0]
		return
	}
	out[0] = in[0]
	out[1] = uint8((int(in[0])*3 + int(in[1]) + 2) >> 2)
	for i := 1; i < n-1; i++ {
		v := int(in[i]) * 3
		out[2*i] = uint8((v + int(in[i-1]) + 1) >> 2)
		out[2*i+1] = uint8((v + int(in[i+1]) + 2) >> 2)
	}
	v := int(in[n-1]) * 3
	out[2*n-2] = uint8((v + int(in[n-2]) + 1) >> 2)
	out[2*n-1] = in[n-1]
}

// upsampleH2V2 makes one output row of chroma from the nearer input row
// a and the farther b (libjpeg's h2v2 fancy upsampling).
func upsampleH2V2(a, b []uint8, out []uint8) {
	n := len(a)
	col := func(i int) int { return int(a[i])*3 + int(b[i]) }
	if n == 1 {
		s := col(0)
		out[0] = uint8((s*4 + 8) >> 4)
		out[1] = uint8((s*4 + 7) >> 4)
		return
	}
	this, next := col(0), col(1)
	out[0] = uint8((this*4 + 8) >> 4)
	out[1] = uint8((this*3 + next + 7) >> 4)
	last := this
	this = next
	for i := 1; i < n-1; i++ {
		next = col(i + 1)
		out[2*i] = uint8((this*3 + last + 8) >> 4)
		out[2*i+1] = uint8((this*3 + next + 7) >> 4)
		last, this = this, next
	}
	out[2*n-2] = uint8((this*3 + last + 8) >> 4)
	out[2*n-1] = uint8((this*4 + 7) >> 4)
}

// ycbcrToRGB8 converts a decoded JPEG as libjpeg would; ok is false for
// subsampling ratios it does not handle (4:4:0, 4:1:1, 4:1:0), which then
// take the generic path.
func ycbcrToRGB8(m *image.YCbCr) (RGB8, bool) {
	r := m.Rect
	w, h := r.Dx(), r.Dy()
	var hs, vs int
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio444:
		hs, vs = 1, 1
	case image.YCbCrSubsampleRatio422:
		hs, vs = 2, 1
	case image.YCbCrSubsampleRatio420:
		hs, vs = 2, 2
	default:
		return RGB8{}, false
	}
	cw, ch := (w+hs-1)/hs, (h+vs-1)/vs
	crow := func(p []uint8, y int) []uint8 {
		o := m.COffset(r.Min.X, r.Min.Y+y*vs)
		return p[o : o+cw]
	}
	out := RGB8{W: w, H: h, Pix: make([]uint8, 3*w*h)}
	cb, cr := make([]uint8, cw*hs), make([]uint8, cw*hs)
	for y := 0; y < h; y++ {
		switch vs {
		case 1:
			if hs == 1 {
				copy(cb, crow(m.Cb, y))
				copy(cr, crow(m.Cr, y))
			} else {
				upsampleH2(crow(m.Cb, y), cb)
				upsampleH2(crow(m.Cr, y), cr)
			}
		case 2:
			cy := y / 2
			far := cy - 1 // even output rows lean on the row above
			if y%2 == 1 {
				far = cy + 1
			}
			far = min(max(far, 0), ch-1) // libjpeg repeats the edge rows
			upsampleH2V2(crow(m.Cb, cy), crow(m.Cb, far), cb)
			upsampleH2V2(crow(m.Cr, cy), crow(m.Cr, far), cr)
		}
		yo := m.YOffset(r.Min.X, r.Min.Y+y)
		ys := m.Y[yo : yo+w]
		o := out.Pix[3*y*w:]
		for x := 0; x < w; x++ {
			Y := int32(ys[x])
			b, c := cb[x], cr[x]
			o[3*x] = clamp8(Y + crR[c])
			o[3*x+1] = clamp8(Y + ((cbG[b] + crG[c]) >> jScale))
			o[3*x+2] = clamp8(Y + cbB[b])
		}
	}
	return out, true
}
