package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/quant"
)

// devUpload copies float32s (or, with ints, int64s) into a new allocation
// of d.
func devUpload(t *testing.T, d Device, xs []float32) Buf {
	t.Helper()
	raw := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	b, err := d.Alloc(max(len(raw), 4))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 0, raw); err != nil {
		t.Fatal(err)
	}
	return b
}

func devUploadI64(t *testing.T, d Device, xs []int64) Buf {
	t.Helper()
	raw := make([]byte, 8*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(x))
	}
	b, err := d.Alloc(len(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 0, raw); err != nil {
		t.Fatal(err)
	}
	return b
}

func devDownload(t *testing.T, d Device, b Buf, n int) []float32 {
	t.Helper()
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 4*n)
	if err := d.Read(b, 0, raw); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// devUploadQ puts a packed weight in one allocation of d, codes then
// parameters, in the layout d reports (QuantLayout), as UploadQ and the
// engine's load do.
func devUploadQ(t *testing.T, d Device, p *quant.Packed) QBuf {
	t.Helper()
	layout := d.QuantLayout()
	words, params := p.Words, p.Params
	if layout == QLayoutTile4 {
		words, params = RepackQTile4(p)
	}
	raw := QLayoutBytes(words, params)
	b, err := d.Alloc(len(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Write(b, 0, raw); err != nil {
		t.Fatal(err)
	}
	q, pp := b, b
	pp.Off = len(words)
	return QBuf{Format: p.Format, Group: p.Group, Layout: layout, K: p.K, N: p.N, Q: q, P: pp}
}

// TestDevicesAgree runs launches through the Device interface on the
// OpenCL library and on the host device, on odd shapes, and compares: the
// host device is the references behind the same seam, so any difference
// is in the seam (argument order, offsets, optional operands).
func TestDevicesAgree(t *testing.T) {
	w := randVec(7, 64*5)
	pk, err := quant.Quantize(w, 64, 5, quant.Options{Format: quant.E0M4, Group: 32})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		n    int // output elements
		run  func(t *testing.T, d Device) (Buf, error)
	}{
		{"matmul+bias at an offset", 5 * 7, func(t *testing.T, d Device) (Buf, error) {
			a := devUpload(t, d, randVec(1, 2+5*3))
			a.Off = 2
			b, bias, c := devUpload(t, d, randVec(2, 3*7)), devUpload(t, d, randVec(3, 7)), devUpload(t, d, make([]float32, 5*7))
			return c, d.MatMul(F32, a, b, c, MatMulParams{M: 5, N: 7, K: 3, Bias: bias, BiasColStride: 1, Weight: F32})
		}},
		{"matmul without bias", 3 * 2, func(t *testing.T, d Device) (Buf, error) {
			a, b, c := devUpload(t, d, randVec(4, 3*5)), devUpload(t, d, randVec(5, 2*5)), devUpload(t, d, make([]float32, 6))
			return c, d.MatMul(F32, a, b, c, MatMulParams{M: 3, N: 2, K: 5, TransB: true, Weight: F32})
		}},
		{"log-softmax", 3 * 5 * 2, func(t *testing.T, d Device) (Buf, error) {
			x, y := devUpload(t, d, randVec(6, 30)), devUpload(t, d, make([]float32, 30))
			return y, d.LogSoftmax(F32, x, y, 3, 5, 2)
		}},
		{"add-rmsnorm", 3 * 7, func(t *testing.T, d Device) (Buf, error) {
			x, r, s := devUpload(t, d, randVec(8, 21)), devUpload(t, d, randVec(9, 21)), devUpload(t, d, make([]float32, 21))
			g, y := devUpload(t, d, randVec(10, 7)), devUpload(t, d, make([]float32, 21))
			return y, d.AddRMSNorm(NormParams{Storage: F32, Weights: F32, Rows: 3, Cols: 7, Eps: 1e-5}, x, r, s, g, y)
		}},
		{"add-rmsnorm's sum output", 3 * 7, func(t *testing.T, d Device) (Buf, error) {
			x, r, s := devUpload(t, d, randVec(8, 21)), devUpload(t, d, randVec(9, 21)), devUpload(t, d, make([]float32, 21))
			y := devUpload(t, d, make([]float32, 21))
			return s, d.AddRMSNorm(NormParams{Storage: F32, Weights: F32, Rows: 3, Cols: 7, Eps: 1e-5}, x, r, s, Buf{}, y)
		}},
		{"causal grouped attention with a mask", 2 * 3 * 5, func(t *testing.T, d Device) (Buf, error) {
			q, k, v := devUpload(t, d, randVec(11, 2*3*5)), devUpload(t, d, randVec(12, 3*5)), devUpload(t, d, randVec(13, 3*5))
			m, o := devUpload(t, d, []float32{0, -1, 0.5, 0, 0, -2, 1, 0, 0}), devUpload(t, d, make([]float32, 30))
			p := AttentionParams{Batch: 1, Heads: 2, KVHeads: 1, SeqQ: 3, SeqKV: 3, HeadDim: 5, Causal: true, Mask: m, MaskStrides: [4]int{0, 0, 3, 1}}
			return o, d.Attention(F32, q, k, v, o, p)
		}},
		{"kv write at given slots", 6 * 2 * 3, func(t *testing.T, d Device) (Buf, error) {
			cache, src := devUpload(t, d, make([]float32, 36)), devUpload(t, d, randVec(14, 2*2*3))
			slots := devUploadI64(t, d, []int64{4, 1})
			cv := View{Shape: []int{1, 2, 6, 3}, Strides: []int{36, 3, 6, 1}}
			return cache, d.KVWrite(4, cache, cv, src, ContiguousView([]int{1, 2, 2, 3}), slots, dtype.Int64, false)
		}},
		{"4-bit product", 3 * 5, func(t *testing.T, d Device) (Buf, error) {
			a, c := devUpload(t, d, randVec(15, 3*64)), devUpload(t, d, make([]float32, 15))
			return c, d.MatMulQ(F32, a, devUploadQ(t, d, pk), c, QMatMulParams{M: 3, N: 5, K: 64})
		}},
		{"gather rows by int64 indices", 3 * 4, func(t *testing.T, d Device) (Buf, error) {
			data, idx, y := devUpload(t, d, randVec(16, 5*4)), devUploadI64(t, d, []int64{4, 0, -1}), devUpload(t, d, make([]float32, 12))
			return y, d.Gather(4, data, []int{5, 4}, 0, idx, dtype.Int64, 3, y)
		}},
	}
	host := &HostDevice{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var outs [2][]float32
			for i, d := range []Device{testLib, host} {
				b, err := tc.run(t, d)
				if err != nil {
					t.Fatalf("%s: %v", d.Name(), err)
				}
				outs[i] = devDownload(t, d, b, tc.n)
			}
			assertClose(t, fmt.Sprintf("%s vs %s", testLib.Name(), host.Name()), outs[0], outs[1], 1e-5, 1e-4)
			var nonzero bool
			for _, x := range outs[1] {
				nonzero = nonzero || x != 0
			}
			if !nonzero {
				t.Errorf("the host device wrote nothing")
			}
		})
	}
}

// TestHostDeviceRefusesF16 checks the host device's one storage.
func TestHostDeviceRefusesF16(t *testing.T) {
	h := &HostDevice{}
	if h.Supports(F16) || !h.Supports(F32) {
		t.Fatalf("Supports(F16) = %v, Supports(F32) = %v", h.Supports(F16), h.Supports(F32))
	}
	x := devUpload(t, h, make([]float32, 4))
	if err := h.Softmax(F16, x, x, 1, 4, 1); err == nil {
		t.Error("fp16 softmax on the host device: no error")
	}
	if err := h.Write(x, 12, make([]byte, 8)); err == nil {
		t.Error("a write past the end of a host allocation: no error")
	}
}
