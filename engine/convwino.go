package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape/infer"
)

// winogradWeight decides, at Open, whether the weight w of the convolution
// being lowered is stored transformed for the kernels' Winograd route
// (kernels.WinogradWeights, [16][K][C]), so that no run transforms it
// again: w must be a constant fp32 (or widened fp16) 3x3 weight, and every
// node reading it a convolution computed on the device that takes the
// route and reads it only as its weight. The transformed copy replaces
// the original, which is never uploaded (a weight 16/9 as large, not both).
// The first reader lowered makes the copy; the others find it.
func (lc *lowerCtx) winogradWeight(w *vinfo) bool {
	if lc.host || lc.c.s.dev.WeightLayout() == kernels.AnyLayout || w == nil || w.v == nil || len(w.shape) != 4 {
		return false
	}
	return lc.storeDerived(w, "/winograd", func(dims []int) []int { return []int{16, dims[0], dims[1]} },
		func(n *graph.Node, dims []int) bool { return readsAsWinogradWeight(lc.c, n, w.v, dims) },
		winogradInto)
}

// winogradInto writes the Winograd transform of the fp32 weight src
// (little-endian bytes, the ONNX file's order), [K][C][3][3] as dims say,
// into dst, [16][K][C] alike. It works on float32 views of the bytes
// where they are aligned (words32's), and otherwise through a temporary
// of src's size alone: a heap copy of both, 25/9 of the weight, would
// raise the peak RSS of a model's Open by its largest weight's.
func winogradInto(dst, src []byte, dims []int) error {
	k, c := dims[0], dims[1]
	if len(dst) != 4*16*k*c || len(src) != 4*9*k*c {
		return fmt.Errorf("winograd weight: %d and %d bytes for %d x %d x 3 x 3", len(dst), len(src), k, c)
	}
	le := isLittleEndian()
	f := floats32(src)
	if f == nil || !le {
		f = make([]float32, k*c*9)
		for i := range f {
			f[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	}
	if u := floats32(dst); u != nil && le {
		return kernels.WinogradWeightsInto(u, f, k, c)
	}
	u, err := kernels.WinogradWeights(f, k, c)
	if err != nil {
		return err
	}
	for i, v := range u {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	return nil
}

// readsAsWinogradWeight reports whether node n is a 2-D convolution
// computed on the device that takes the kernels' Winograd route (3x3,
// stride 1, dilation 1, one group, enough channels: ConvParams.
// WinogradRoute) with v, of constant shape dims, only as its weight.
func readsAsWinogradWeight(c *compiler, n *graph.Node, v *graph.Value, dims []int) bool {
	if cls, ok := c.res.Class[n]; ok && cls != infer.Device {
		return false
	}
	if k := opKey(n.Domain, n.OpType); k != "Conv" && k != tlite.Key(tlite.ConvAct) {
		return false
	}
	if len(n.Inputs) < 2 || n.Inputs[1] != v {
		return false
	}
	for i, in := range n.Inputs {
		if in == v && i != 1 {
			return false
		}
	}
	ones := func(name string) bool {
		vals, ok := n.AttrInts(name)
		if !ok {
			return true
		}
		for _, x := range vals {
			if x != 1 {
				return false
			}
		}
		return len(vals) == 2
	}
	if !ones("strides") || !ones("dilations") {
		return false
	}
	if ks, ok := n.AttrInts("kernel_shape"); ok && (len(ks) != 2 || ks[0] != 3 || ks[1] != 3) {
		return false
	}
	p := kernels.ConvParams{C: dims[1] * int(n.AttrInt("group", 1)), OutC: dims[0], KH: dims[2], KW: dims[3],
		Groups: int(n.AttrInt("group", 1))}
	return p.WinogradRoute()
}

// floats32 is b as float32s in host order, nil when b is not 4-byte
// aligned (words32's view, as floats).
func floats32(b []byte) []float32 {
	w := words32(b)
	if w == nil {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(w))), len(w))
}

// isLittleEndian reports whether the host stores the low byte first, the
// ONNX file's order.
func isLittleEndian() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}
