package engine

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// tlite.MatMulQ, the 4-bit weight product `tl quantize` writes (see
// graph/quant): Y = A * W (+ bias) with W packed in one uint8 initializer.
//
// The packed initializer is an ordinary constant to the compiler, so the
// session uploads it once at Open like every other weight, straight from
// its bytes: from a model written with external data those bytes are a view
// of the memory-mapped data file, so the host copies nothing on the way to
// the device. The kernels address the codes and parameters inside that one
// buffer at the offsets the header gives (both 64-byte aligned). On devices
// that share host memory the upload itself could go too: the mapped bytes
// could back the buffer directly (opencl.Device.AllocHost,
// CL_MEM_USE_HOST_PTR), which needs the session's constant upload to
// offer that path; the kernels would not change.

func init() {
	registerLowering(lowerMatMulQ, opKey(tlite.Domain, tlite.MatMulQ))
}

// lowerMatMulQ checks the packed weight's header against the node's
// attributes once, at Open, and returns a step that runs the device's
// MatMulQ where the packed arrays lie in the uploaded weight.
func lowerMatMulQ(lc *lowerCtx) (*stepDef, error) {
	a, w, bias, y := lc.in(0), lc.in(1), lc.in(2), lc.out(0)
	if a == nil || w == nil || y == nil {
		return nil, lc.unsupported("needs A, the packed weight and an output")
	}
	s, err := lc.floatStorage(a)
	if err != nil {
		return nil, err
	}
	r := w.root
	if w.dt != dtype.Uint8 || r.kind != vkConst || r.konst == nil {
		return nil, lc.unsupported("input 1 (%s) must be a uint8 initializer holding a packed weight", w.name)
	}
	tiled := lc.tileQWeight(w)
	r = w.root
	hdr := r.konst.data
	if tiled {
		// The tiled copy is made at upload and keeps the original's
		// header: read it from the original.
		hdr = w.konst.data
	}
	h, err := quant.ParseHeader(hdr, int64(len(hdr)))
	if err != nil {
		return nil, fmt.Errorf("engine: node %q (%s.%s): packed weight %s: %w", lc.n.Name, lc.n.Domain, lc.n.OpType, w.name, err)
	}
	if err := checkQAttrs(lc, h); err != nil {
		return nil, fmt.Errorf("engine: node %q (%s.%s): packed weight %s: %w", lc.n.Name, lc.n.Domain, lc.n.OpType, w.name, err)
	}
	if bias != nil {
		if _, err := lc.floatStorage(bias); err != nil {
			return nil, err
		}
		if bs, ok := constShape(bias.shape); !ok || len(bs) != 1 || bs[0] != h.N {
			return nil, lc.unsupported("bias %s has shape %s; want [%d]", bias.name, symshape.FormatShape(bias.shape), h.N)
		}
	}
	if len(a.shape) == 0 {
		return nil, lc.unsupported("A (%s) is a scalar", a.name)
	}
	layout := kernels.QLayoutColumns
	if tiled {
		layout = kernels.QLayoutTile4
	}
	return &stepDef{kernel: "matmulq", run: func(x *exec) error {
		as := x.shape(a)
		k := as[len(as)-1]
		if k != h.K {
			return fmt.Errorf("A %v: last dimension %d, the weight has K = %d", as, k, h.K)
		}
		p := kernels.QMatMulParams{M: prod(as, 0, len(as)-1), N: h.N, K: h.K}
		wr := x.ref(w)
		need := int(h.Size)
		if tiled {
			need = qTile4Size(h)
		}
		if wr.b.size-wr.off < need {
			return fmt.Errorf("packed weight buffer holds %d bytes, the %s layout needs %d", wr.b.size-wr.off, layout, need)
		}
		q, err := qbufAt(wr, h, tiled)
		if err != nil {
			return err
		}
		if bias != nil {
			p.Bias, p.BiasStorage = x.ref(bias).buf(), s
		}
		x.lim.matmulQ(&p)
		return x.dev.MatMulQ(s, x.ref(a).buf(), q, x.ref(y).buf(), p)
	}}, nil
}

// checkQAttrs verifies that the node's attributes describe the weight its
// header does: the graph's shapes were derived from the attributes.
func checkQAttrs(lc *lowerCtx, h quant.Header) error {
	n := lc.n
	f, err := quant.ParseFormat(n.AttrString("format", ""))
	if err != nil {
		return fmt.Errorf("attribute format: %w", err)
	}
	got := [4]int64{int64(f), n.AttrInt("group", 0), n.AttrInt("K", 0), n.AttrInt("N", 0)}
	want := [4]int64{int64(h.Format), int64(h.Group), int64(h.K), int64(h.N)}
	if got != want {
		return fmt.Errorf("attributes say format %v, group %d, K %d, N %d; the header says %v, group %d, K %d, N %d",
			f, got[1], got[2], got[3], h.Format, h.Group, h.K, h.N)
	}
	return nil
}

// qbufAt addresses the codes and parameters inside the uploaded packed
// weight (a byte tensor at wr), in graph/quant's layout or, when tiled, in
// the tiled copy tileQWeight made.
func qbufAt(wr tref, h quant.Header, tiled bool) (kernels.QBuf, error) {
	wo, po := wr.off+int(h.WordsOffset), wr.off+int(h.ParamsOffset)
	layout := kernels.QLayoutColumns
	if tiled {
		wo, po = wr.off+quant.HeaderSize, wr.off+quant.HeaderSize+4*qTile4Words(h)
		layout = kernels.QLayoutTile4
	}
	if wo%4 != 0 || po%4 != 0 {
		return kernels.QBuf{}, fmt.Errorf("packed weight at byte %d: its arrays are not 4-byte aligned", wr.off)
	}
	m := wr.b.m
	return kernels.QBuf{Format: h.Format, Group: h.Group, Layout: layout, K: h.K, N: h.N,
		Q: kernels.Buf{Mem: m.Mem, Host: m.Host, Off: wo / 4}, P: kernels.Buf{Mem: m.Mem, Host: m.Host, Off: po / 4}}, nil
}

// qTile4Words and qTile4Size are the code words and the whole byte size of
// a tiled copy: the 64-byte header, the tiled codes, the tiled parameters
// (kernels.QLayoutTile4 pads N to a multiple of four).
func qTile4Words(h quant.Header) int { return (h.N + 3) / 4 * 4 * (h.K / 8) }

func qTile4Size(h quant.Header) int {
	return quant.HeaderSize + 4*qTile4Words(h) + 4*((h.N+3)/4*8*(h.K/h.Group))
}

// tileQWeight repacks the packed weight w once, at Open, into the layout
// the device's 4-bit kernels read fastest (kernels.Device.QuantLayout:
// four-column tiles on GPUs), provided that every node reading it is a
// device tlite.MatMulQ taking it as the weight: the copy (the original
// header, then the tiled arrays) replaces the original, which is never
// uploaded. The first such node makes the copy; the others find it. It
// reports whether w is now the tiled copy.
func (lc *lowerCtx) tileQWeight(w *vinfo) bool {
	if lc.host || lc.c.s.dev.QuantLayout() != kernels.QLayoutTile4 || w.v == nil {
		return false
	}
	name := w.name + "/tile4"
	if r := w.root; r != w {
		return r.v == nil && r.kind == vkConst && r.name == name
	}
	if w.kind != vkConst || w.konst == nil {
		return false
	}
	for _, o := range lc.c.g.Outputs {
		if o == w.v {
			return false
		}
	}
	for _, n := range w.v.Consumers {
		if cls, ok := lc.c.res.Class[n]; ok && cls != infer.Device {
			return false
		}
		if opKey(n.Domain, n.OpType) != opKey(tlite.Domain, tlite.MatMulQ) {
			return false
		}
		for i, in := range n.Inputs {
			if in == w.v && i != 1 {
				return false
			}
		}
	}
	src := w.konst.data
	h, err := quant.ParseHeader(src, int64(len(src)))
	if err != nil {
		return false // lowerMatMulQ reports the bad header
	}
	// The repacking is deferred to the upload, which writes it straight
	// into the device buffer (see vinfo.derive): kept here, the tiled copy
	// of every 4-bit weight would stay on the Go heap for the session.
	t := lc.newConst(name, &hostTensor{dt: dtype.Uint8, shape: []int{qTile4Size(h)}})
	t.derive = func(dst []byte) error {
		p, err := quant.UnmarshalPacked(src)
		if err != nil {
			return err
		}
		return writeQTile4(dst, src[:quant.HeaderSize], p, "tiled packed weight")
	}
	t.derivedFrom = src
	w.root = t
	return true
}

// writeQTile4 writes header, then p repacked in the GPU tile layout, into
// dst, which must be exactly that size (what names the weight in the
// error).
func writeQTile4(dst, header []byte, p *quant.Packed, what string) error {
	words, params := kernels.RepackQTile4(p)
	le := binary.LittleEndian
	n := copy(dst, header)
	for _, x := range words {
		le.PutUint32(dst[n:], x)
		n += 4
	}
	for _, x := range params {
		le.PutUint32(dst[n:], math.Float32bits(x))
		n += 4
	}
	if n != len(dst) {
		return fmt.Errorf("%s: %d bytes written, %d expected", what, n, len(dst))
	}
	return nil
}
