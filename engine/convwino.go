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
	name := w.name + "/winograd"
	if r := w.root; r != w {
		return r.v == nil && r.kind == vkConst && r.name == name
	}
	dims, ok := constShape(w.shape)
	if w.kind != vkConst || w.konst == nil || !ok || !w.isFloat() || hostSize(w.dt) != 4 {
		return false
	}
	if w.derive == nil && len(w.konst.data) != 4*numel(dims) || w.derive != nil && w.konst.data != nil {
		return false
	}
	for _, o := range lc.c.g.Outputs {
		if o == w.v {
			return false
		}
	}
	for _, n := range w.v.Consumers {
		if !readsAsWinogradWeight(lc.c, n, w.v, dims) {
			return false
		}
	}
	k, c := dims[0], dims[1]
	transform := func(dst, src []byte) error {
		// In place on float32 views of the bytes where they are aligned
		// (a host of the ONNX file's little-endian order, as words32
		// assumes): a heap copy of both, 25/9 of the weight, would raise
		// the peak RSS of a model's Open by its largest weight's.
		if f, u := floats32(src), floats32(dst); f != nil && u != nil && isLittleEndian() {
			return kernels.WinogradWeightsInto(u, f, k, c)
		}
		f := make([]float32, k*c*9)
		for i := range f {
			f[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		u, err := kernels.WinogradWeights(f, k, c)
		if err != nil {
			return err
		}
		if len(dst) != 4*len(u) {
			return fmt.Errorf("winograd weight %s: %d bytes for %d values", name, len(dst), len(u))
		}
		for i, v := range u {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
		return nil
	}
	// Deferred to the upload, as productWeight's transposition is: the
	// copy is written straight into the device buffer.
	src := w.konst.data
	t := lc.newConst(name, &hostTensor{dt: w.dt, shape: []int{16, k, c}})
	t.derive = func(dst []byte) error { return transform(dst, src) }
	t.derivedFrom = src
	if widen := w.derive; widen != nil {
		// A float16 initializer still to be widened: widen it into a
		// temporary, dropped once transformed.
		t.derive = func(dst []byte) error {
			tmp := make([]byte, 4*k*c*9)
			if err := widen(tmp); err != nil {
				return err
			}
			return transform(dst, tmp)
		}
		t.derivedFrom = w.derivedFrom
	}
	// w becomes an alias of the copy (buffers, uploads and lifetimes go
	// to it) but keeps its own [K, C, 3, 3] shape, which the convolution's
	// run reads; every reader is one of the convolutions checked above,
	// each of which sets ConvParams.WinogradWeight.
	w.root = t
	return true
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
