package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// TestVisionDevicesAgree runs the vision launches through VisionDevice on
// the OpenCL library and the host device, with operands at non-zero
// offsets and scratch where a route takes it, and compares.
func TestVisionDevicesAgree(t *testing.T) {
	at := func(t *testing.T, d Device, xs []float32, off int) Buf {
		b := devUpload(t, d, append(make([]float32, off), xs...))
		b.Off = off
		return b
	}
	scratchFor := func(t *testing.T, d Device, n int) Buf {
		if n == 0 {
			return Buf{}
		}
		return devUpload(t, d, make([]float32, n))
	}
	ct := ConvTransposeParams{N: 2, C: 16, H: 3, W: 4, OutC: 6, KH: 3, KW: 2, StrideH: 2, StrideW: 3, PadTop: 1, PadBottom: 0, PadLeft: 0, PadRight: 1, OutPadH: 1, Groups: 2, Weight: F32}
	cth, ctw := ct.OutSize()
	ct3 := ConvTranspose3DParams{N: 1, C: 8, D: 2, H: 3, W: 2, OutC: 4, Kernel: [3]int{2, 2, 3}, Stride: [3]int{2, 1, 2}, PadEnd: [3]int{0, 1, 1}, Weight: F32}
	o3 := ct3.OutSize()
	cv := Conv3DParams{N: 2, C: 4, D: 3, H: 5, W: 4, OutC: 8, Kernel: [3]int{3, 2, 3}, PadBegin: [3]int{1, 0, 1}, PadEnd: [3]int{1, 1, 1}, Weight: F32}
	co := cv.OutSize()
	pl := Pool3DParams{N: 1, C: 3, D: 4, H: 5, W: 6, Kernel: [3]int{2, 3, 2}, Stride: [3]int{2, 2, 2}, PadBegin: [3]int{0, 1, 1}, PadEnd: [3]int{1, 1, 0}, CeilMode: true, CountIncludePad: true}
	po := pl.OutSize()
	np := 3 * po[0] * po[1] * po[2]
	rs := ResizeParams{In: []int{2, 3, 5}, Out: []int{3, 3, 8}, Scales: []float64{1.5, 1, 1.6}, Mode: ResizeCubic, Coord: CoordHalfPixel, CubicA: -0.75}
	cases := []struct {
		name string
		n    int
		run  func(t *testing.T, d Device, v VisionDevice) (Buf, error)
	}{
		{"resize, two passes", 3 * 3 * 8, func(t *testing.T, d Device, v VisionDevice) (Buf, error) {
			y := at(t, d, make([]float32, 72), 3)
			return y, v.Resize(F32, at(t, d, randVec(1, 30), 5), y, scratchFor(t, d, rs.ScratchElems()), rs)
		}},
		{"convtranspose2d gemm", 2 * 6 * cth * ctw, func(t *testing.T, d Device, v VisionDevice) (Buf, error) {
			y := at(t, d, make([]float32, 2*6*cth*ctw), 1)
			p := ct
			p.Bias = at(t, d, randVec(2, 6), 2)
			return y, v.ConvTranspose2D(F32, at(t, d, randVec(3, 2*16*12), 3), at(t, d, randVec(4, 16*3*6), 4), y, scratchFor(t, d, p.ScratchElems()), p)
		}},
		{"convtranspose3d direct", 4 * o3[0] * o3[1] * o3[2], func(t *testing.T, d Device, v VisionDevice) (Buf, error) {
			y := at(t, d, make([]float32, 4*o3[0]*o3[1]*o3[2]), 2)
			return y, v.ConvTranspose3D(F32, at(t, d, randVec(5, 8*12), 1), at(t, d, randVec(6, 8*4*12), 7), y, Buf{}, ct3)
		}},
		{"conv3d gemm", 2 * 8 * co[0] * co[1] * co[2], func(t *testing.T, d Device, v VisionDevice) (Buf, error) {
			y := at(t, d, make([]float32, 2*8*co[0]*co[1]*co[2]), 1)
			p := cv
			p.Bias = at(t, d, randVec(7, 8), 1)
			return y, v.Conv3D(F32, at(t, d, randVec(8, 2*4*60), 2), at(t, d, randVec(9, 8*4*18), 3), y, scratchFor(t, d, p.ScratchElems()), p)
		}},
		{"avgpool3d", np, func(t *testing.T, d Device, v VisionDevice) (Buf, error) {
			y := at(t, d, make([]float32, np), 1)
			return y, v.AvgPool3D(F32, at(t, d, randVec(10, 3*120), 2), y, pl)
		}},
		{"maxpool3d", np, func(t *testing.T, d Device, v VisionDevice) (Buf, error) {
			y := at(t, d, make([]float32, np), 1)
			return y, v.MaxPool3D(F32, at(t, d, randVec(11, 3*120), 2), y, pl)
		}},
		{"maxpool indices", 2 * np, func(t *testing.T, d Device, v VisionDevice) (Buf, error) {
			// Values then indices (int64, as pairs of float32 words) in one
			// allocation.
			y := devUpload(t, d, make([]float32, 3*np+2))
			idx := y
			idx.Off = (np + 1) / 2
			return y, v.MaxPoolWithIndices(F32, at(t, d, randVec(12, 3*120), 2), y, idx, true, pl)
		}},
	}
	devs := []Device{testLib, &HostDevice{}}
	for _, c := range cases {
		var got [2][]float32
		var raw [2][]byte
		for i, d := range devs {
			y, err := c.run(t, d, d.(VisionDevice))
			if err != nil {
				t.Fatalf("%s on %s: %v", c.name, d.Name(), err)
			}
			n := c.n
			if c.name == "maxpool indices" {
				n = 3*np + 2
			}
			got[i] = devDownload(t, d, Buf{Mem: y.Mem, Host: y.Host}, n+y.Off)[y.Off:]
			raw[i] = make([]byte, 4*len(got[i]))
			for j, v := range got[i] {
				binary.LittleEndian.PutUint32(raw[i][4*j:], math.Float32bits(v))
			}
		}
		if c.name == "maxpool indices" {
			if string(raw[0]) != string(raw[1]) {
				t.Errorf("%s: devices differ", c.name)
			}
			continue
		}
		assertClose(t, fmt.Sprintf("%s: OpenCL vs pure-Go", c.name), got[0][:c.n], got[1][:c.n], 1e-5, 1e-5)
	}
}
