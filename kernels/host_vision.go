package kernels

import "fmt"

// VisionDevice is the vision families' part of a Device: Resize, transposed
// convolution, 3-D convolution and pooling, and MaxPool's Indices output.
// Both *Lib and *HostDevice implement it; wiring it into the engine is
// adding these methods to Device.
type VisionDevice interface {
	// Resize computes ONNX Resize (and Upsample); scratch holds the
	// intermediates of a resize along axes other than the two innermost.
	Resize(s Storage, x, y, scratch Buf, p ResizeParams) error
	// ConvTranspose2D and ConvTranspose3D compute transposed convolutions;
	// scratch, when set, holds the GEMM route's float32 columns.
	ConvTranspose2D(s Storage, x, w, y, scratch Buf, p ConvTransposeParams) error
	ConvTranspose3D(s Storage, x, w, y, scratch Buf, p ConvTranspose3DParams) error
	// Conv3D computes a 3-D convolution; scratch, when set, may hold the
	// im2col matrix.
	Conv3D(s Storage, x, w, y, scratch Buf, p Conv3DParams) error
	// MaxPool3D and AvgPool3D pool NCDHW volumes.
	MaxPool3D(s Storage, x, y Buf, p Pool3DParams) error
	AvgPool3D(s Storage, x, y Buf, p Pool3DParams) error
	// MaxPoolWithIndices is MaxPool with its int64 Indices output.
	MaxPoolWithIndices(s Storage, x, y, idx Buf, colMajor bool, p Pool3DParams) error
}

var (
	_ VisionDevice = (*Lib)(nil)
	_ VisionDevice = (*HostDevice)(nil)
)

func f32Weights(s, w Storage) error {
	if err := f32only(s); err != nil {
		return err
	}
	if w != F32 {
		return fmt.Errorf("kernels: the pure-Go device stores weights as float32 only")
	}
	return nil
}

// Resize runs ResizeRef; it needs no scratch.
func (h *HostDevice) Resize(s Storage, x, y, scratch Buf, p ResizeParams) error {
	if err := f32only(s); err != nil {
		return err
	}
	return ResizeRef(hostF32(x), hostF32(y), p)
}

// ConvTranspose2D runs ConvTranspose2DRef; it needs no scratch.
func (h *HostDevice) ConvTranspose2D(s Storage, x, w, y, scratch Buf, p ConvTransposeParams) error {
	if err := f32Weights(s, p.Weight); err != nil {
		return err
	}
	return ConvTranspose2DRef(hostF32(x), hostF32(w), hostF32(p.Bias), hostF32(y), p)
}

// ConvTranspose3D runs ConvTranspose3DRef; it needs no scratch.
func (h *HostDevice) ConvTranspose3D(s Storage, x, w, y, scratch Buf, p ConvTranspose3DParams) error {
	if err := f32Weights(s, p.Weight); err != nil {
		return err
	}
	return ConvTranspose3DRef(hostF32(x), hostF32(w), hostF32(p.Bias), hostF32(y), p)
}

// Conv3D runs Conv3DRef; it needs no scratch.
func (h *HostDevice) Conv3D(s Storage, x, w, y, scratch Buf, p Conv3DParams) error {
	if err := f32Weights(s, p.Weight); err != nil {
		return err
	}
	return Conv3DRef(hostF32(x), hostF32(w), hostF32(p.Bias), hostF32(y), p)
}

// MaxPool3D runs Pool3DRef.
func (h *HostDevice) MaxPool3D(s Storage, x, y Buf, p Pool3DParams) error {
	if err := f32only(s); err != nil {
		return err
	}
	return Pool3DRef(hostF32(x), hostF32(y), p, false)
}

// AvgPool3D runs Pool3DRef.
func (h *HostDevice) AvgPool3D(s Storage, x, y Buf, p Pool3DParams) error {
	if err := f32only(s); err != nil {
		return err
	}
	return Pool3DRef(hostF32(x), hostF32(y), p, true)
}

// MaxPoolWithIndices runs MaxPoolIndicesRef.
func (h *HostDevice) MaxPoolWithIndices(s Storage, x, y, idx Buf, colMajor bool, p Pool3DParams) error {
	if err := f32only(s); err != nil {
		return err
	}
	return MaxPoolIndicesRef(hostF32(x), hostF32(y), hostI64(idx), colMajor, p)
}
