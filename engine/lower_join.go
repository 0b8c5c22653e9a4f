package engine

import (
	"fmt"
	"math"
	"os"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
)

// tlite.MatMulJoin (engine/fuse/matmuljoin.go): S products of one
// activation x [..., K] with constant weights, such as a decoder's q/k/v
// projections.
//
// The weights are concatenated along N once, at Open, into one constant
// written straight into its device buffer at upload (vinfo.derive), which
// takes the place of the separate weights: those are never uploaded, so
// the device holds each weight once.
//
// The outputs lie in one buffer of M*(N_1+...+N_S) elements (M the rows
// of x), output s as the contiguous [M, N_s] range that starts at element
// M*(N_1+...+N_{s-1}): a "segmented" layout. Every output is thus an
// ordinary packed tensor that its readers take unchanged (vinfo.segOff
// puts its start into their references), and the memory plan sees one
// allocation. At M = 1 (a decode step) the segments follow each other
// exactly as the columns of the one [1, N_1+...+N_S] product do, so a
// single launch of the existing product kernel over the joined weight
// writes all of them. At M > 1 the columns of one row are no longer
// contiguous across segments; there each output is its own launch over
// its rows of the joined weight, written at its segment. Prefill's
// products are bound by arithmetic, not by launches, and the kernels stay
// the ones the separate products used: nothing changes on any device's
// kernel set.

func init() {
	registerLowering(lowerMatMulJoin, tlite.Key(tlite.MatMulJoin))
}

// joinSpec is a MatMulJoin node's members as the lowering reads them.
// each runs launch over the joined product's rows. At m = 1 the
// segmented output is exactly the joined row, so one launch covers every
// member; at m > 1 each member writes its own [m, N_s] range.
func (sp *joinSpec) each(m int, launch func(n0, nn, off int) error) error {
	if m == 1 {
		return launch(0, sp.ntot, 0)
	}
	for i := range sp.ns {
		if err := launch(sp.starts[i], sp.ns[i], m*sp.starts[i]); err != nil {
			return err
		}
	}
	return nil
}

type joinSpec struct {
	ns     []int // N of each member
	starts []int // first column of each member in the joined weight
	ntot   int
	k      int
}

func lowerMatMulJoin(lc *lowerCtx) (*stepDef, error) {
	n := lc.n
	ns64, _ := n.AttrInts("ns")
	segs := len(ns64)
	if segs == 0 || len(n.Outputs) != segs || (len(n.Inputs) != 1+segs && len(n.Inputs) != 1+2*segs) {
		return nil, lc.unsupported("ns %v with %d inputs and %d outputs; want ns of S > 0 with 1+S or 1+2S inputs and S outputs", ns64, len(n.Inputs), len(n.Outputs))
	}
	if lc.host {
		return nil, lc.unsupported("joined products run on the device only")
	}
	a := lc.in(0)
	s, err := lc.floatStorage(a)
	if err != nil {
		return nil, err
	}
	sp := joinSpec{k: int(n.AttrInt("K", 0))}
	if len(a.shape) < 2 {
		return nil, lc.unsupported("x (%s) has rank %d; want [..., K]", a.name, len(a.shape))
	}
	if k, ok := a.shape[len(a.shape)-1].Const(); !ok || int(k) != sp.k || sp.k <= 0 {
		return nil, lc.unsupported("x (%s) has shape %s; the node says K = %d", a.name, symshape.FormatShape(a.shape), sp.k)
	}
	ws, ys := make([]*vinfo, segs), make([]*vinfo, segs)
	var biases []*vinfo
	for i, d := range ns64 {
		if d <= 0 || d > math.MaxInt32 {
			return nil, lc.unsupported("ns[%d] = %d", i, d)
		}
		sp.starts = append(sp.starts, sp.ntot)
		sp.ns = append(sp.ns, int(d))
		sp.ntot += int(d)
		ws[i], ys[i] = lc.in(1+i), lc.out(i)
		if ws[i] == nil || ys[i] == nil {
			return nil, lc.unsupported("member %d has no weight or no output", i)
		}
		if len(n.Inputs) == 1+2*segs {
			b := lc.in(1 + segs + i)
			if b == nil {
				return nil, lc.unsupported("member %d has no bias where the others have one", i)
			}
			biases = append(biases, b)
		}
	}
	prefix := a.shape[:len(a.shape)-1]
	for i, y := range ys {
		want := append(append([]symshape.Expr(nil), prefix...), symshape.Const(int64(sp.ns[i])))
		if !shapeEqual(y.shape, want) {
			return nil, lc.unsupported("output %d (%s) has shape %s; want %s", i, y.name, symshape.FormatShape(y.shape), symshape.FormatShape(want))
		}
	}
	format := n.AttrString("format", "")
	var run func(x *exec, m int, jw, jb, jy tref) error
	kernel := "matmul"
	if format == "" {
		if run, err = lc.joinFloat(sp, ws, s); err != nil {
			return nil, err
		}
	} else {
		kernel = "matmulq"
		if run, err = lc.joinQuant(sp, ws, s, format, int(n.AttrInt("group", 0))); err != nil {
			return nil, err
		}
	}
	var jb *vinfo
	if biases != nil {
		if jb, err = lc.joinBias(sp, biases); err != nil {
			return nil, err
		}
	}
	// The one buffer the outputs are ranges of; see the file comment.
	joint := lc.c.newDevice(n.Name+"/joined", ys[0].dt, append(append([]symshape.Expr(nil), prefix...), symshape.Const(int64(sp.ntot))))
	rows := numelExpr(prefix)
	for i, y := range ys {
		if y.root != y {
			return nil, lc.unsupported("output %d (%s) is already a view", i, y.name)
		}
		y.root = joint
		off := symshape.Mul(rows, symshape.Const(int64(sp.starts[i])))
		y.segOff = &off
	}
	return &stepDef{kernel: kernel, joint: joint, run: func(x *exec) error {
		as := x.shape(a)
		if x.err != nil {
			return x.err
		}
		if as[len(as)-1] != sp.k {
			return fmt.Errorf("x %v: last dimension %d, the weights have K = %d", as, as[len(as)-1], sp.k)
		}
		var bref tref
		if jb != nil {
			bref = x.ref(jb)
		}
		return run(x, prod(as, 0, len(as)-1), x.ref(ws[0]), bref, x.ref(joint))
	}}, nil
}

// joinFloat sets up the joined fp32/fp16 weight, stored [N_total, K] (the
// layout the product kernels read as TransB, and the one in which each
// member's rows are one contiguous range), and returns the launcher.
func (lc *lowerCtx) joinFloat(sp joinSpec, ws []*vinfo, s kernels.Storage) (func(x *exec, m int, jw, jb, jy tref) error, error) {
	srcs := make([]*vinfo, len(ws))
	var parts [][]byte
	for i, w := range ws {
		if _, err := lc.floatStorage(w); err != nil {
			return nil, err
		}
		dims, ok := constShape(w.shape)
		if w.root != w || w.kind != vkConst || w.konst == nil || !ok || len(dims) != 2 || dims[0] != sp.k || dims[1] != sp.ns[i] {
			return nil, lc.unsupported("weight %d (%s) is not a constant [%d, %d] read by this node alone", i, w.name, sp.k, sp.ns[i])
		}
		if w.konst.data == nil && w.derive == nil || w.konst.data != nil && len(w.konst.data) != 4*sp.k*sp.ns[i] {
			return nil, lc.unsupported("weight %d (%s) has no float contents", i, w.name)
		}
		srcs[i] = w
		if w.konst.data != nil {
			parts = append(parts, w.konst.data)
		} else {
			parts = append(parts, w.derivedFrom)
		}
	}
	k := sp.k
	t := lc.newConst(lc.n.Name+"/joined_weight", &hostTensor{dt: dtype.Float32, shape: []int{sp.ntot, k}})
	t.derive = func(dst []byte) error {
		for i, w := range srcs {
			src := w.konst.data
			if src == nil {
				// A float16 initializer still to be widened (deferWiden):
				// widened into a temporary dropped after this member.
				src = make([]byte, 4*k*sp.ns[i])
				if err := w.derive(src); err != nil {
					return err
				}
			}
			transpose32Into(dst[4*k*sp.starts[i]:4*k*(sp.starts[i]+sp.ns[i])], src, k, sp.ns[i])
		}
		return nil
	}
	t.derivedParts = parts
	// Every member now reads the joined weight (the separate ones are
	// never uploaded), as productWeight's transposed copies replace theirs.
	for _, w := range srcs {
		w.root = t
	}
	alpha, beta := lc.n.AttrFloat("alpha", 1), lc.n.AttrFloat("beta", 1)
	a := lc.in(0)
	return func(x *exec, m int, jw, jb, jy tref) error {
		launch := func(n0, nn, off int) error {
			p := kernels.MatMulParams{M: m, N: nn, K: k, TransB: true, Weight: s}
			if alpha != 1 || beta != 1 {
				p.Scaled, p.Alpha, p.Beta = true, alpha, beta
			}
			w := jw
			w.off += n0 * k
			y := jy
			y.off += off
			if jb.b != nil {
				b := jb
				b.off += n0
				p.Bias, p.BiasColStride = b.buf(), 1
			}
			return x.dev.MatMul(s, x.ref(a).buf(), w.buf(), y.buf(), p)
		}
		return sp.each(m, launch)
	}, nil
}

// joinQuant sets up the joined 4-bit weight (graph/quant's packed layout
// with N = N_total, or the device's tiled copy of it) and returns the
// launcher. Columns are stored one after another in both layouts, so
// member s starts starts[s]*K/8 code words and starts[s]*2*K/group
// parameters in (the fuse pass keeps every N a multiple of four, which
// keeps a four-column tile inside one member).
func (lc *lowerCtx) joinQuant(sp joinSpec, ws []*vinfo, s kernels.Storage, format string, group int) (func(x *exec, m int, jw, jb, jy tref) error, error) {
	f, err := quant.ParseFormat(format)
	if err != nil {
		return nil, lc.unsupported("format: %v", err)
	}
	srcs := make([][]byte, len(ws))
	for i, w := range ws {
		if w.dt != dtype.Uint8 || w.root != w || w.kind != vkConst || w.konst == nil {
			return nil, lc.unsupported("weight %d (%s) is not a packed weight read by this node alone", i, w.name)
		}
		h, err := quant.ParseHeader(w.konst.data, int64(len(w.konst.data)))
		if err != nil {
			return nil, fmt.Errorf("engine: node %q (%s.%s): packed weight %s: %w", lc.n.Name, lc.n.Domain, lc.n.OpType, w.name, err)
		}
		if h.Format != f || h.Group != group || h.K != sp.k || h.N != sp.ns[i] {
			return nil, fmt.Errorf("engine: node %q (%s.%s): packed weight %s is %v, group %d, [%d, %d]; the node says %v, group %d, [%d, %d]",
				lc.n.Name, lc.n.Domain, lc.n.OpType, w.name, h.Format, h.Group, h.K, h.N, f, group, sp.k, sp.ns[i])
		}
		srcs[i] = w.konst.data
	}
	jh, err := quant.HeaderOf(f, group, sp.k, sp.ntot)
	if err != nil {
		return nil, lc.unsupported("joined weight: %v", err)
	}
	tiled := lc.c.s.dev.QuantLayout() == kernels.QLayoutTile4
	size := int(jh.Size)
	if tiled {
		size = qTile4Size(jh)
	}
	t := lc.newConst(lc.n.Name+"/joined_weight", &hostTensor{dt: dtype.Uint8, shape: []int{size}})
	t.derive = func(dst []byte) error {
		if !tiled {
			// Straight from the (mapped) encodings: nothing decoded on
			// the heap.
			return quant.ConcatEncoded(dst, srcs...)
		}
		ps := make([]*quant.Packed, len(srcs))
		for i, src := range srcs {
			p, err := quant.UnmarshalPacked(src)
			if err != nil {
				return err
			}
			ps[i] = p
		}
		j, err := quant.Concat(ps...)
		if err != nil {
			return err
		}
		b, err := j.MarshalBinary()
		if err != nil {
			return err
		}
		return writeQTile4(dst, b[:quant.HeaderSize], j, "tiled joined packed weight")
	}
	t.derivedParts = srcs
	for _, w := range ws {
		w.root = t
	}
	k := sp.k
	a := lc.in(0)
	return func(x *exec, m int, jw, jb, jy tref) error {
		q, err := qbufAt(jw, jh, tiled)
		if err != nil {
			return err
		}
		if jw.b.size-jw.off < size {
			return fmt.Errorf("joined packed weight buffer holds %d bytes, needs %d", jw.b.size-jw.off, size)
		}
		launch := func(n0, nn, off int) error {
			qs := q
			qs.N = nn
			qs.Q.Off += n0 * (k / 8)
			qs.P.Off += n0 * 2 * (k / group)
			p := kernels.QMatMulParams{M: m, N: nn, K: k}
			if jb.b != nil {
				b := jb
				b.off += n0
				p.Bias, p.BiasStorage = b.buf(), s
			}
			y := jy
			y.off += off
			return x.dev.MatMulQ(s, x.ref(a).buf(), qs, y.buf(), p)
		}
		return sp.each(m, launch)
	}, nil
}

// joinBias concatenates the members' constant biases into one [N_total]
// constant that replaces them.
func (lc *lowerCtx) joinBias(sp joinSpec, biases []*vinfo) (*vinfo, error) {
	var data []byte
	for i, b := range biases {
		if _, err := lc.floatStorage(b); err != nil {
			return nil, err
		}
		if b.root != b || b.kind != vkConst || b.konst == nil {
			return nil, lc.unsupported("bias %d (%s) is not a constant read by this node alone", i, b.name)
		}
		if err := b.materialize(); err != nil {
			return nil, err
		}
		if len(b.konst.data) != 4*sp.ns[i] {
			return nil, lc.unsupported("bias %d (%s) has %d bytes of contents for %d columns", i, b.name, len(b.konst.data), sp.ns[i])
		}
		data = append(data, b.konst.data...)
	}
	t := lc.newConst(lc.n.Name+"/joined_bias", &hostTensor{dt: dtype.Float32, shape: []int{sp.ntot}, data: data})
	for _, b := range biases {
		b.root = t
	}
	return t, nil
}

// JoinEnv is the environment variable that, set to 0 (or off), keeps
// products apart as Options.NoJoin does.
const JoinEnv = "TLITE_JOIN"

// joinProducts reports whether a session joins products: not with
// Options.NoJoin, nor with TLITE_JOIN=0/off.
func joinProducts(noJoin bool) bool {
	v := os.Getenv(JoinEnv)
	return !noJoin && v != "0" && v != "off"
}
