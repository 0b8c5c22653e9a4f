package embed

import (
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // registers the JPEG decoder
	_ "image/png"  // registers the PNG decoder
	"io"
	"math"
	"os"
)

// MaxPixels bounds the images DecodeImage accepts (width*height), so that
// a hostile header cannot make it allocate without bound: 64 Mpixel, a
// 8192x8192 photograph.
const MaxPixels = 64 << 20

// ImageConfig is CLIP's image preprocessing.
type ImageConfig struct {
	// Resize is the length the shorter side is resized to (bicubic).
	Resize int `json:"resize"`
	// Crop is the side of the centred square cut from the resized image.
	Crop int `json:"crop"`
	// Mean and Std normalise each channel (R, G, B) of pixels scaled to
	// [0, 1]: (x - mean) / std.
	Mean [3]float32 `json:"mean"`
	Std  [3]float32 `json:"std"`
}

// CLIPImage is the preprocessing of OpenAI's CLIP models (ViT-B/32 and
// kin): 224 pixels, and the mean and standard deviation of its training
// images.
var CLIPImage = ImageConfig{
	Resize: 224,
	Crop:   224,
	Mean:   [3]float32{0.48145466, 0.4578275, 0.40821073},
	Std:    [3]float32{0.26862954, 0.26130258, 0.27577711},
}

// Validate reports a configuration that cannot be applied.
func (c ImageConfig) Validate() error {
	if c.Resize < 1 || c.Crop < 1 || c.Crop > c.Resize || c.Resize > 8192 {
		return fmt.Errorf("embed: image resize %d and crop %d: want 1 <= crop <= resize <= 8192", c.Resize, c.Crop)
	}
	for i, s := range c.Std {
		if !(s > 0) {
			return fmt.Errorf("embed: image std[%d] = %v: want a positive value", i, s)
		}
	}
	return nil
}

// DecodeImage reads a PNG or JPEG file.
func DecodeImage(path string) (image.Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg, format, err := image.DecodeConfig(f)
	if err != nil {
		return nil, fmt.Errorf("embed: %s: %w (PNG and JPEG are supported)", path, err)
	}
	if cfg.Width < 1 || cfg.Height < 1 || int64(cfg.Width)*int64(cfg.Height) > MaxPixels {
		return nil, fmt.Errorf("embed: %s: a %s image of %dx%d pixels; at most %d pixels are accepted", path, format, cfg.Width, cfg.Height, MaxPixels)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	img, _, err := image.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("embed: %s: %w", path, err)
	}
	return img, nil
}

// RGB8 is an 8-bit RGB image, rows top to bottom, 3 bytes a pixel.
type RGB8 struct {
	W, H int
	Pix  []uint8
}

// ToRGB8 converts any image to 8-bit RGB; JPEG's YCbCr as libjpeg
// converts it (see jpeg.go). Alpha is dropped (not
// composited), as PIL's convert("RGB") does; grey levels are copied to all
// three channels.
func ToRGB8(img image.Image) RGB8 {
	if y, ok := img.(*image.YCbCr); ok {
		if out, ok := ycbcrToRGB8(y); ok {
			return out
		}
	}
	b := img.Bounds()
	out := RGB8{W: b.Dx(), H: b.Dy(), Pix: make([]uint8, 3*b.Dx()*b.Dy())}
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			var r, g, bl uint8
			switch c := img.At(x, y).(type) {
			case color.NRGBA:
				r, g, bl = c.R, c.G, c.B
			case color.Gray:
				r, g, bl = c.Y, c.Y, c.Y
			case color.YCbCr:
				r, g, bl = color.YCbCrToRGB(c.Y, c.Cb, c.Cr)
			case color.RGBA:
				if c.A == 255 {
					r, g, bl = c.R, c.G, c.B
				} else {
					n := color.NRGBAModel.Convert(c).(color.NRGBA)
					r, g, bl = n.R, n.G, n.B
				}
			default:
				n := color.NRGBAModel.Convert(c).(color.NRGBA)
				r, g, bl = n.R, n.G, n.B
			}
			out.Pix[i], out.Pix[i+1], out.Pix[i+2] = r, g, bl
			i += 3
		}
	}
	return out
}

// pilBits is the fixed-point precision of PIL's 8-bit resampling
// (PRECISION_BITS in Pillow's Resample.c), which the results must match
// level for level.
const pilBits = 32 - 8 - 2

// bicubic is the cubic convolution kernel with a = -0.5, PIL's BICUBIC.
func bicubic(x float64) float64 {
	const a = -0.5
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return ((a+2)*x-(a+3))*x*x + 1
	}
	if x < 2 {
		return (((x-5)*x+8)*x - 4) * a
	}
	return 0
}

// coeffs computes, for each output position, the first input index, the
// number of taps and the fixed-point weights, as PIL does: the kernel is
// widened by the scale when shrinking (antialiasing), weights are
// normalised to sum to one in float64 and then rounded to pilBits.
func coeffs(in, out int) (first, n []int, k [][]int32) {
	scale := float64(in) / float64(out)
	filterscale := max(scale, 1)
	support := 2 * filterscale
	first, n, k = make([]int, out), make([]int, out), make([][]int32, out)
	for xx := 0; xx < out; xx++ {
		center := (float64(xx) + 0.5) * scale
		ss := 1 / filterscale
		xmin := int(center - support + 0.5)
		if xmin < 0 {
			xmin = 0
		}
		xmax := int(center + support + 0.5)
		if xmax > in {
			xmax = in
		}
		xmax -= xmin
		w := make([]float64, xmax)
		var sum float64
		for x := 0; x < xmax; x++ {
			w[x] = bicubic((float64(x+xmin) - center + 0.5) * ss)
			sum += w[x]
		}
		kk := make([]int32, xmax)
		for x := range w {
			if sum != 0 {
				w[x] /= sum
			}
			if w[x] < 0 {
				kk[x] = int32(-0.5 + w[x]*(1<<pilBits))
			} else {
				kk[x] = int32(0.5 + w[x]*(1<<pilBits))
			}
		}
		first[xx], n[xx], k[xx] = xmin, xmax, kk
	}
	return first, n, k
}

func clip8(v int32) uint8 {
	v >>= pilBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// ResizeBicubic resizes to w x h with PIL's bicubic resampling: a
// horizontal pass rounded to 8 bits, then a vertical one, in PIL's fixed
// point, so the result equals Image.resize(..., BICUBIC) level for level.
func ResizeBicubic(src RGB8, w, h int) RGB8 {
	cur := src
	if w != src.W {
		first, n, k := coeffs(src.W, w)
		tmp := RGB8{W: w, H: cur.H, Pix: make([]uint8, 3*w*cur.H)}
		for y := 0; y < cur.H; y++ {
			row := cur.Pix[3*y*cur.W:]
			out := tmp.Pix[3*y*w:]
			for xx := 0; xx < w; xx++ {
				s0, s1, s2 := int32(1<<(pilBits-1)), int32(1<<(pilBits-1)), int32(1<<(pilBits-1))
				for x := 0; x < n[xx]; x++ {
					p := row[3*(first[xx]+x):]
					c := k[xx][x]
					s0 += int32(p[0]) * c
					s1 += int32(p[1]) * c
					s2 += int32(p[2]) * c
				}
				out[3*xx], out[3*xx+1], out[3*xx+2] = clip8(s0), clip8(s1), clip8(s2)
			}
		}
		cur = tmp
	}
	if h != cur.H {
		first, n, k := coeffs(cur.H, h)
		tmp := RGB8{W: cur.W, H: h, Pix: make([]uint8, 3*cur.W*h)}
		stride := 3 * cur.W
		for yy := 0; yy < h; yy++ {
			out := tmp.Pix[yy*stride:]
			for xx := 0; xx < cur.W; xx++ {
				s0, s1, s2 := int32(1<<(pilBits-1)), int32(1<<(pilBits-1)), int32(1<<(pilBits-1))
				for y := 0; y < n[yy]; y++ {
					p := cur.Pix[(first[yy]+y)*stride+3*xx:]
					c := k[yy][y]
					s0 += int32(p[0]) * c
					s1 += int32(p[1]) * c
					s2 += int32(p[2]) * c
				}
				out[3*xx], out[3*xx+1], out[3*xx+2] = clip8(s0), clip8(s1), clip8(s2)
			}
		}
		cur = tmp
	}
	if cur.W == src.W && cur.H == src.H {
		cur = RGB8{W: src.W, H: src.H, Pix: append([]uint8(nil), src.Pix...)}
	}
	return cur
}

// resizedSize is torchvision's Resize(int) output size: the shorter side
// becomes size and the longer keeps the aspect ratio, truncated.
func resizedSize(w, h, size int) (int, int) {
	if w <= h {
		return size, int(float64(size) * float64(h) / float64(w))
	}
	return int(float64(size) * float64(w) / float64(h)), size
}

// CenterCrop cuts the centred w x h window, offsets rounded half to even
// as torchvision's CenterCrop rounds them (Python's round). The image
// must be at least that large.
func CenterCrop(src RGB8, w, h int) RGB8 {
	top := int(math.RoundToEven(float64(src.H-h) / 2))
	left := int(math.RoundToEven(float64(src.W-w) / 2))
	out := RGB8{W: w, H: h, Pix: make([]uint8, 3*w*h)}
	for y := 0; y < h; y++ {
		copy(out.Pix[3*y*w:3*(y+1)*w], src.Pix[3*((top+y)*src.W+left):])
	}
	return out
}

// ResizeCrop is the geometric part of CLIP's preprocessing: shorter side
// to c.Resize with bicubic, then the centred c.Crop square.
func (c ImageConfig) ResizeCrop(img RGB8) RGB8 {
	w, h := resizedSize(img.W, img.H, c.Resize)
	if w != img.W || h != img.H {
		img = ResizeBicubic(img, w, h)
	}
	return CenterCrop(img, c.Crop, c.Crop)
}

// Normalize turns a c.Crop square into the model's input: channels first
// (3 x Crop x Crop), each pixel x/255 then (x - mean) / std in float32,
// the operations and order of torchvision's ToTensor and Normalize.
func (c ImageConfig) Normalize(img RGB8) []float32 {
	n := img.W * img.H
	out := make([]float32, 3*n)
	for ch := 0; ch < 3; ch++ {
		m, s := c.Mean[ch], c.Std[ch]
		dst := out[ch*n : (ch+1)*n]
		for i := range dst {
			x := float32(img.Pix[3*i+ch]) / 255
			dst[i] = (x - m) / s
		}
	}
	return out
}

// Preprocess is CLIP's whole image pipeline: RGB conversion, resize,
// centre crop and normalisation.
//
// RGB, grey and JPEG images give torchvision's input exactly (JPEG up to
// the decoders' inverse DCTs, a level or two). Images with transparency
// or a palette are converted to RGB before resizing, as Hugging Face's
// CLIPImageProcessor does; torchvision applied to such a PIL image would
// resize premultiplied RGBA or, for a palette, with nearest neighbour,
// and differs there.
func (c ImageConfig) Preprocess(img image.Image) ([]float32, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c.Normalize(c.ResizeCrop(ToRGB8(img))), nil
}
