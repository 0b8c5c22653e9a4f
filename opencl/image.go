package opencl

import (
	"fmt"
	"unsafe"
)

// ImageFormat is the texel of an image over a buffer: four channels
// (CL_RGBA) of one type.
type ImageFormat int

const (
	// ImageUint32x4 texels are four 32-bit unsigned integers (CL_RGBA,
	// CL_UNSIGNED_INT32; read_imageui gives a uint4): 16 bytes, any bits,
	// so a kernel can reinterpret them (as_float4) without rounding.
	ImageUint32x4 ImageFormat = iota
	// ImageHalfx4 texels are four halves (CL_RGBA, CL_HALF_FLOAT;
	// read_imagef widens them to a float4, which is exact): 8 bytes.
	ImageHalfx4
	numImageFormats
)

// cl_image_format values.
const (
	clRGBA                 = 0x10B5
	clHalfFloat            = 0x10DD
	clUnsignedInt32        = 0x10DC
	clMemObjectImage1DBuf  = 0x10F6
	clDeviceImageMaxBuffer = 0x1040
)

// TexelBytes is the size of one texel of f.
func (f ImageFormat) TexelBytes() int {
	if f == ImageHalfx4 {
		return 8
	}
	return 16
}

func (f ImageFormat) String() string {
	switch f {
	case ImageUint32x4:
		return "RGBA uint32"
	case ImageHalfx4:
		return "RGBA half"
	}
	return fmt.Sprintf("ImageFormat(%d)", int(f))
}

// clImageFormat is cl_image_format.
type clImageFormat struct {
	order, typ uint32
}

// clImageDesc is cl_image_desc (OpenCL 1.2) on a 64-bit host.
type clImageDesc struct {
	imageType                     uint32
	_                             uint32
	width, height, depth          uintptr
	arraySize, rowPitch, slicePit uintptr
	mipLevels, samples            uint32
	buffer                        handle
}

// Image is a read-only one-dimensional image over a buffer's memory
// (CL_MEM_OBJECT_IMAGE1D_BUFFER, OpenCL 1.2): a kernel takes it as an
// image1d_buffer_t and reads texels through the GPU's texture path, with
// its own cache, instead of as global memory. Launch passes it like a
// *Buffer. It covers the buffer's whole texels and lives as long as the
// buffer: Buffer.Image1D makes it once, and releasing the buffer releases
// it.
type Image struct {
	b      *Buffer
	mem    handle
	format ImageFormat
	texels int
}

// Texels is the image's width in texels.
func (m *Image) Texels() int { return m.texels }

// Format is the image's texel format.
func (m *Image) Format() ImageFormat { return m.format }

// ImageTexels is how many texels of f an image over a size-byte buffer
// can have on d: every whole texel, or 0 when d has no images (Info().Images)
// or the buffer holds more texels than CL_DEVICE_IMAGE_MAX_BUFFER_SIZE.
func (d *Device) ImageTexels(f ImageFormat, size int) int {
	if f < 0 || f >= numImageFormats || !d.info.Images || fns.CreateImage == 0 {
		return 0
	}
	n := size / f.TexelBytes()
	if n <= 0 || int64(n) > d.info.ImageMaxBuffer {
		return 0
	}
	return n
}

// Image1D returns the read-only image of format f over all of b's whole
// texels, making it on the first call (clCreateImage) and returning the
// same one after. It fails on a device without images, a buffer larger
// than the device's largest image buffer (see ImageTexels), or a format
// the driver refuses.
func (b *Buffer) Image1D(f ImageFormat) (*Image, error) {
	if b == nil {
		return nil, fmt.Errorf("opencl: Image1D: nil buffer")
	}
	d := b.d
	if f < 0 || f >= numImageFormats {
		return nil, fmt.Errorf("opencl: Image1D: unknown format %d", int(f))
	}
	texels := d.ImageTexels(f, b.size)
	if texels == 0 {
		return nil, fmt.Errorf("opencl: Image1D(%s) of a %d-byte buffer: the device %s has no images of that width (images %v, largest image buffer %d texels)",
			f, b.size, d.info.Name, d.info.Images && fns.CreateImage != 0, d.info.ImageMaxBuffer)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || b.released {
		return nil, fmt.Errorf("opencl: Image1D(%s) of a released buffer or on a closed device", f)
	}
	if b.images == nil {
		b.images = make([]*Image, numImageFormats)
	}
	if m := b.images[f]; m != nil {
		return m, nil
	}
	format := clImageFormat{clRGBA, clUnsignedInt32}
	if f == ImageHalfx4 {
		format.typ = clHalfFloat
	}
	desc := clImageDesc{imageType: clMemObjectImage1DBuf, width: uintptr(texels), buffer: b.mem}
	var code int32
	mem := clCreate(fns.CreateImage, d.ctx, uintptr(clMemReadOnly), uintptr(unsafe.Pointer(&format)),
		uintptr(unsafe.Pointer(&desc)), 0, uintptr(unsafe.Pointer(&code)))
	if code != clSuccess {
		return nil, fmt.Errorf("opencl: Image1D(%s, %d texels) of a %d-byte buffer: %w", f, texels, b.size, clErr("clCreateImage", code))
	}
	m := &Image{b: b, mem: mem, format: f, texels: texels}
	b.images[f] = m
	return m, nil
}

// releaseImagesLocked releases b's images (d.mu held), before b itself.
func (b *Buffer) releaseImagesLocked() {
	for i, m := range b.images {
		if m != nil {
			clCall(fns.ReleaseMemObject, m.mem)
			b.images[i] = nil
		}
	}
}
