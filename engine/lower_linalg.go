package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

func init() {
	registerLowering(lowerMatMul, "MatMul")
	registerLowering(lowerGemm, "Gemm")
	registerLowering(lowerConv, "Conv", tlite.Key(tlite.ConvAct))
	registerLowering(lowerPool, "MaxPool", "AveragePool")
	registerLowering(lowerGlobalPool, "GlobalAveragePool", "GlobalMaxPool")
}

// lowerMatMul maps numpy matmul onto the batched product; the batch plan
// is made per run from the concrete shapes.
func lowerMatMul(lc *lowerCtx) (*stepDef, error) {
	a, b, y := lc.in(0), lc.in(1), lc.out(0)
	if a == nil || b == nil {
		return nil, lc.unsupported("needs two inputs")
	}
	s, err := lc.floatStorage(a)
	if err != nil {
		return nil, err
	}
	if _, err := lc.floatStorage(b); err != nil {
		return nil, err
	}
	w := lc.productWeight(b, false)
	return &stepDef{kernel: "matmul", run: func(x *exec) error {
		plan, err := kernels.MatMulBatchPlan(x.shape(a), x.shape(b))
		if err != nil {
			return err
		}
		p := plan.Params()
		p.Weight = s
		w.apply(&p)
		x.lim.matmul(&p)
		return x.dev.MatMul(s, x.ref(a).buf(), x.ref(b).buf(), x.ref(y).buf(), p)
	}}, nil
}

// weightLayout is how a product's B operand is stored: flipped when the
// session laid a constant weight out transposed at Open (see
// productWeight), so the product reads it with TransB inverted.
type weightLayout struct {
	flipped bool
}

// apply adjusts a product's parameters to the stored layout of B. A flipped
// weight is stored packed ([N, K] for [K, N]), so LDB stays 0; an elastic
// sub-model that shrinks N and K still reads the top-left corner through
// the stored row length.
func (w weightLayout) apply(p *kernels.MatMulParams) {
	if w.flipped {
		p.TransB = !p.TransB
	}
}

// productWeight decides, at Open, how the B operand b of the product being
// lowered (MatMul, Gemm, tlite.MatMulBias; read as [K, N], or as [N, K]
// when transB) is stored. A constant matrix is transposed once, here, when
// the device's kernels prefer the other layout (kernels.Device.WeightLayout:
// [N, K] on CPUs and GPUs alike; a weight exported from nn.Linear into a
// MatMul is [K, N]), provided that every node reading it is a product
// computed on the device that reads it as B in the same layout: the
// transposed copy then replaces the original, which is never uploaded. The
// first of those products to be lowered makes the copy; the others find it.
func (lc *lowerCtx) productWeight(b *vinfo, transB bool) weightLayout {
	wl := lc.c.s.dev.WeightLayout()
	if lc.host || wl == kernels.AnyLayout || b == nil || b.v == nil || len(b.shape) != 2 || (wl == kernels.LayoutNK) == transB {
		return weightLayout{}
	}
	ok := lc.storeDerived(b, "/transposed", func(dims []int) []int { return []int{dims[1], dims[0]} },
		func(n *graph.Node, _ []int) bool { return readsAsWeight(lc.c, n, b.v, transB) },
		func(dst, src []byte, dims []int) error {
			transpose32Into(dst, src, dims[0], dims[1])
			return nil
		})
	return weightLayout{flipped: ok}
}

// storeDerived stores the constant weight w, at Open, as a derived copy
// of the given shape (of w's constant dims) named w's name + suffix, which
// xform writes from w's fp32 bytes: productWeight's transposition and
// winogradWeight's transform. The copy is made only when w is a constant
// fp32 (or fp16 still to be widened) weight of constant shape, no graph
// output, whose every consumer reads accepts; it then replaces the
// original, which is never uploaded. The first reader lowered makes the
// copy; the others find it. storeDerived reports whether w is an alias of
// such a copy.
func (lc *lowerCtx) storeDerived(w *vinfo, suffix string, shape func(dims []int) []int,
	reads func(n *graph.Node, dims []int) bool, xform func(dst, src []byte, dims []int) error) bool {
	name := w.name + suffix
	if r := w.root; r != w {
		// An alias: of a copy this function made for another reader, or of
		// some other value, whose layout it leaves alone.
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
		if !reads(n, dims) {
			return false
		}
	}
	// The copy is deferred to the upload (Session.allocate), which writes
	// it straight into the device buffer: a copy here would keep a second
	// host copy of nearly every weight alive until the session ends.
	src := w.konst.data
	t := lc.newConst(name, &hostTensor{dt: w.dt, shape: shape(dims)})
	t.derive = func(dst []byte) error { return xform(dst, src, dims) }
	t.derivedFrom = src
	if widen := w.derive; widen != nil {
		// A float16 initializer still to be widened (deferWiden): widen
		// it into a temporary, dropped once the copy is written.
		t.derive = func(dst []byte) error {
			tmp := make([]byte, 4*numel(dims))
			if err := widen(tmp); err != nil {
				return err
			}
			return xform(dst, tmp, dims)
		}
		t.derivedFrom = w.derivedFrom
	}
	// w becomes an alias of the copy, so uploads, buffers and lifetimes all
	// go to the copy. Unlike a view's alias it does not share w's layout
	// (nor, for winogradWeight, its shape): that is safe only because
	// every reader is one of the nodes reads accepted, each of which reads
	// the copy's layout.
	w.root = t
	return true
}

// readsAsWeight reports whether node n is a product computed on the device
// that reads v only as its B operand, in the layout transB says.
func readsAsWeight(c *compiler, n *graph.Node, v *graph.Value, transB bool) bool {
	if cls, ok := c.res.Class[n]; ok && cls != infer.Device {
		return false // computed on the host, from the original contents
	}
	var nodeTransB bool
	switch opKey(n.Domain, n.OpType) {
	case "MatMul", tlite.Key(tlite.MatMulBias):
	case "Gemm":
		nodeTransB = n.AttrInt("transB", 0) != 0
	default:
		return false
	}
	if nodeTransB != transB || len(n.Inputs) < 2 || n.Inputs[1] != v {
		return false
	}
	for i, in := range n.Inputs {
		if in == v && i != 1 {
			return false
		}
	}
	return true
}

// transpose32 returns the [cols, rows] transpose of a row-major [rows, cols]
// matrix of 4-byte elements. It works in square tiles, so that both sides
// stay in cache, split across the cores: a ViT-B's 85 M weights take a
// fraction of a second.
func transpose32(src []byte, rows, cols int) []byte {
	dst := make([]byte, len(src))
	transpose32Into(dst, src, rows, cols)
	return dst
}

// transpose32Into writes the [cols, rows] transpose of src into dst (of
// src's length). Elements move as whole 4-byte words, which keeps each
// element's bytes in order whatever the host's byte order. The matrix is
// cut into 256x256 tiles shared out to the cores; inside a tile, four
// source rows are read together, so that each store writes four
// consecutive destination words. This ran ViT-B/32's 85 M weights about
// four times faster than 32x32 tiles moving one element at a time
// (105-110 against 415-480 ms of CPU on this machine).
func transpose32Into(dst, src []byte, rows, cols int) {
	const tile = 256
	if len(src) < 4*rows*cols || len(dst) < 4*rows*cols {
		panic(fmt.Sprintf("transpose32Into: %d and %d bytes for a %dx%d matrix", len(dst), len(src), rows, cols))
	}
	if rows == 0 || cols == 0 {
		return
	}
	d32, s32 := words32(dst), words32(src)
	rowTiles, colTiles := (rows+tile-1)/tile, (cols+tile-1)/tile
	units := rowTiles * colTiles
	workers := max(1, min(runtime.GOMAXPROCS(0), units))
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for u := w; u < units; u += workers {
				r0, c0 := (u/colTiles)*tile, (u%colTiles)*tile
				r1, c1 := min(r0+tile, rows), min(c0+tile, cols)
				if d32 == nil || s32 == nil {
					le := binary.LittleEndian
					for r := r0; r < r1; r++ {
						for c := c0; c < c1; c++ {
							le.PutUint32(dst[4*(c*rows+r):], le.Uint32(src[4*(r*cols+c):]))
						}
					}
					continue
				}
				r := r0
				for ; r+4 <= r1; r += 4 {
					a0 := s32[r*cols : (r+1)*cols]
					a1 := s32[(r+1)*cols : (r+2)*cols]
					a2 := s32[(r+2)*cols : (r+3)*cols]
					a3 := s32[(r+3)*cols : (r+4)*cols]
					for c := c0; c < c1; c++ {
						o := d32[c*rows+r : c*rows+r+4 : c*rows+r+4]
						o[0], o[1], o[2], o[3] = a0[c], a1[c], a2[c], a3[c]
					}
				}
				for ; r < r1; r++ {
					a := s32[r*cols : (r+1)*cols]
					for c := c0; c < c1; c++ {
						d32[c*rows+r] = a[c]
					}
				}
			}
		}(w)
	}
	wg.Wait()
}

// words32 views b as 4-byte words when its address allows it (nil when it
// is not 4-byte aligned, where the caller moves bytes instead).
func words32(b []byte) []uint32 {
	if len(b) < 4 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 != 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// lowerGemm is C = alpha*op(A)*op(B) + beta*C with C broadcast to [M, N].
func lowerGemm(lc *lowerCtx) (*stepDef, error) {
	n := lc.n
	a, b, bias, y := lc.in(0), lc.in(1), lc.in(2), lc.out(0)
	if a == nil || b == nil {
		return nil, lc.unsupported("needs A and B")
	}
	if len(a.shape) != 2 || len(b.shape) != 2 {
		return nil, lc.unsupported("A and B must be matrices")
	}
	s, err := lc.floatStorage(a)
	if err != nil {
		return nil, err
	}
	if _, err := lc.floatStorage(b); err != nil {
		return nil, err
	}
	if bias != nil {
		if _, err := lc.floatStorage(bias); err != nil {
			return nil, err
		}
		if len(bias.shape) > 2 {
			return nil, lc.unsupported("C of rank %d", len(bias.shape))
		}
	}
	transA, transB := n.AttrInt("transA", 0) != 0, n.AttrInt("transB", 0) != 0
	alpha, beta := n.AttrFloat("alpha", 1), n.AttrFloat("beta", 1)
	w := lc.productWeight(b, transB)
	return &stepDef{kernel: "matmul", run: func(x *exec) error {
		as, bs := x.shape(a), x.shape(b)
		m, k := as[0], as[1]
		if transA {
			m, k = k, m
		}
		kb, nn := bs[0], bs[1]
		if transB {
			kb, nn = nn, kb
		}
		if k != kb {
			return fmt.Errorf("A %v and B %v: inner dimensions %d and %d differ", as, bs, k, kb)
		}
		p := kernels.MatMulParams{M: m, N: nn, K: k, TransA: transA, TransB: transB,
			Scaled: true, Alpha: alpha, Beta: beta, Weight: s}
		w.apply(&p)
		var bref *tref
		if bias != nil {
			cs := x.shape(bias)
			switch len(cs) {
			case 1:
				if cs[0] != 1 {
					p.BiasColStride = 1
				}
			case 2:
				if cs[0] != 1 {
					p.BiasRowStride = cs[1]
				}
				if cs[1] != 1 {
					p.BiasColStride = 1
				}
			}
			r := x.ref(bias)
			bref = &r
		} else {
			p.Beta = 0
		}
		p.Bias = optBuf(bref)
		return x.dev.MatMul(s, x.ref(a).buf(), x.ref(b).buf(), x.ref(y).buf(), p)
	}}, nil
}

// spatial reads the 2-D (or 1-D as H = 1) geometry attributes of a
// convolution or pooling node; pads come back as top, left, bottom, right.
type spatial struct {
	oneD             bool
	kh, kw           int
	sh, sw, dh, dw   int
	pads             [4]int
	autoPad          string
	haveKernelAttr   bool
	ceil, includePad bool
}

func readSpatial(lc *lowerCtx, rank int) (spatial, error) {
	n := lc.n
	var sp spatial
	switch rank {
	case 4:
	case 3:
		sp.oneD = true
	default:
		return sp, lc.unsupported("input of rank %d; only 1-D and 2-D spatial inputs are supported", rank)
	}
	nd := 2
	if sp.oneD {
		nd = 1
	}
	get := func(name string, def int64) ([]int, error) {
		v, ok := n.AttrInts(name)
		out := make([]int, nd)
		for i := range out {
			out[i] = int(def)
		}
		if !ok {
			return out, nil
		}
		if len(v) != nd && !(name == "pads" && len(v) == 2*nd) {
			return nil, lc.unsupported("%s %v for %d spatial dims", name, v, nd)
		}
		if name == "pads" {
			out = make([]int, len(v))
		}
		for i, x := range v {
			out[i] = int(x)
		}
		return out, nil
	}
	ks, _ := get("kernel_shape", 0)
	_, sp.haveKernelAttr = n.AttrInts("kernel_shape")
	st, err := get("strides", 1)
	if err != nil {
		return sp, err
	}
	dl, err := get("dilations", 1)
	if err != nil {
		return sp, err
	}
	pd, err := get("pads", 0)
	if err != nil {
		return sp, err
	}
	if len(pd) == nd {
		pd = append(pd, pd...)
	}
	if sp.oneD {
		sp.kh, sp.kw = 1, ks[0]
		sp.sh, sp.sw, sp.dh, sp.dw = 1, st[0], 1, dl[0]
		sp.pads = [4]int{0, pd[0], 0, pd[1]}
	} else {
		sp.kh, sp.kw = ks[0], ks[1]
		sp.sh, sp.sw, sp.dh, sp.dw = st[0], st[1], dl[0], dl[1]
		sp.pads = [4]int{pd[0], pd[1], pd[2], pd[3]}
	}
	sp.autoPad = n.AttrString("auto_pad", "NOTSET")
	switch sp.autoPad {
	case "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER":
	default:
		return sp, lc.unsupported("auto_pad %q", sp.autoPad)
	}
	if sp.autoPad == "VALID" {
		sp.pads = [4]int{}
	}
	sp.ceil = n.AttrInt("ceil_mode", 0) != 0
	sp.includePad = n.AttrInt("count_include_pad", 0) != 0
	return sp, nil
}

// padsFor resolves SAME padding for input size h, w: the output is
// ceil(in / stride) and the total padding splits evenly, the odd one at the
// end (SAME_UPPER) or the beginning (SAME_LOWER).
func (sp spatial) padsFor(h, w int) [4]int {
	if sp.autoPad != "SAME_UPPER" && sp.autoPad != "SAME_LOWER" {
		return sp.pads
	}
	one := func(in, k, s, d int) (int, int) {
		out := (in + s - 1) / s
		total := max(0, (out-1)*s+(k-1)*d+1-in)
		if sp.autoPad == "SAME_UPPER" {
			return total / 2, total - total/2
		}
		return total - total/2, total / 2
	}
	t, b := one(h, sp.kh, sp.sh, sp.dh)
	l, r := one(w, sp.kw, sp.sw, sp.dw)
	if sp.oneD {
		t, b = 0, 0
	}
	return [4]int{t, l, b, r}
}

// nchw splits a concrete input shape into N, C, H, W.
func (sp spatial) nchw(s []int) (n, c, h, w int) {
	if sp.oneD {
		return s[0], s[1], 1, s[2]
	}
	return s[0], s[1], s[2], s[3]
}

// lowerConv lowers a 1-D or 2-D convolution; im2col scratch comes from the
// memory plan.
func lowerConv(lc *lowerCtx) (*stepDef, error) {
	x, w, bias, y := lc.in(0), lc.in(1), lc.in(2), lc.out(0)
	if x == nil || w == nil {
		return nil, lc.unsupported("needs X and W")
	}
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	if _, err := lc.floatStorage(w); err != nil {
		return nil, err
	}
	// ConvAct's residual (ConvResidual's Add) and input scale
	// (ConvScale's squeeze-excite Mul).
	res, scale := lc.in(3), lc.in(4)
	for _, v := range []*vinfo{res, scale} {
		if v == nil {
			continue
		}
		if _, err := lc.floatStorage(v); err != nil {
			return nil, err
		}
	}
	if len(x.shape) == 5 {
		if lc.n.Domain != "" {
			return nil, lc.unsupported("an activation epilogue on a 3-D convolution")
		}
		return lowerConv3D(lc, s)
	}
	sp, err := readSpatial(lc, len(x.shape))
	if err != nil {
		return nil, err
	}
	if len(w.shape) != len(x.shape) {
		return nil, lc.unsupported("weight of rank %d for input of rank %d", len(w.shape), len(x.shape))
	}
	groups := int(lc.n.AttrInt("group", 1))
	act, actA, actB, err := convActivation(lc)
	if err != nil {
		return nil, err
	}
	_, esz, _ := storeFor(x.dt, lc.fs)
	sd := &stepDef{kernel: "conv"}
	// Scratch for conv_flat's padded copy of the input, about the input's
	// size: every convolution but a depthwise or plain 1x1 one
	// (kernels.ConvParams' routing).
	// A constant weight of a convolution on the Winograd route is stored
	// transformed (winogradWeight), once, at Open.
	winoW := !sp.oneD && lc.winogradWeight(w)
	if scratch, ok := convScratch(x, w, y, sp, groups, esz, winoW); ok {
		sd.scratch = []symshape.Expr{scratch}
	}
	sd.run = func(ex *exec) error {
		xs, ws := ex.shape(x), ex.shape(w)
		n, c, h, wd := sp.nchw(xs)
		kh, kw := 1, ws[len(ws)-1]
		if !sp.oneD {
			kh = ws[2]
		}
		pads := sp.padsFor(h, wd)
		p := kernels.ConvParams{N: n, C: c, H: h, W: wd, OutC: ws[0], KH: kh, KW: kw,
			StrideH: sp.sh, StrideW: sp.sw, DilationH: sp.dh, DilationW: sp.dw,
			PadTop: pads[0], PadLeft: pads[1], PadBottom: pads[2], PadRight: pads[3],
			Groups: groups, Weight: s, Act: act, ActA: actA, ActB: actB, WinogradWeight: winoW}
		var bref, sref *tref
		if bias != nil {
			r := ex.ref(bias)
			bref = &r
		}
		if len(ex.scratch) > 0 {
			sref = &ex.scratch[0]
		}
		p.Bias = optBuf(bref)
		if res != nil {
			if rs, ys := ex.shape(res), ex.shape(y); !equalInts(rs, ys) {
				return fmt.Errorf("residual of shape %v for a convolution output of shape %v", rs, ys)
			}
			p.Res = ex.ref(res).buf()
		}
		if scale != nil {
			if ss := ex.shape(scale); len(ss) != len(xs) || ss[0] != n || ss[1] != c || prod(ss, 0, len(ss)) != n*c {
				return fmt.Errorf("input scale of shape %v for a convolution input of shape %v", ss, xs)
			}
			p.Scale = ex.ref(scale).buf()
		}
		return ex.dev.Conv2D(s, ex.ref(x).buf(), ex.ref(w).buf(), ex.ref(y).buf(), optBuf(sref), p)
	}
	return sd, nil
}

// convActs maps ConvAct's activation attribute to the kernels' epilogue.
var convActs = map[string]kernels.ConvAct{
	"Relu": kernels.ConvActRelu, "Clip": kernels.ConvActClip, "HardSwish": kernels.ConvActHardSwish,
	"HardSigmoid": kernels.ConvActHardSigmoid, "SiLU": kernels.ConvActSiLU, "LeakyRelu": kernels.ConvActLeakyRelu,
}

// convActivation reads a tlite ConvAct node's activation (none for a plain
// Conv).
func convActivation(lc *lowerCtx) (kernels.ConvAct, float32, float32, error) {
	if lc.n.Domain != tlite.Domain || lc.n.OpType != tlite.ConvAct {
		return kernels.ConvActNone, 0, 0, nil
	}
	name := lc.n.AttrString("activation", "")
	if name == "" {
		// A residual or an input scale alone (ConvResidual, ConvScale).
		return kernels.ConvActNone, 0, 0, nil
	}
	a, ok := convActs[name]
	if !ok {
		return 0, 0, 0, lc.unsupported("activation %q", name)
	}
	return a, lc.n.AttrFloat("act_alpha", 0), lc.n.AttrFloat("act_beta", 0), nil
}

// convScratch is the size in bytes of conv_flat's zero-padded phase copy
// of the input (kernels.ConvParams' flatElems), for the convolutions that
// take that route or conv_dwf's (depthwise with one output channel per
// input channel): all but plain 1x1 ones and depthwise ones with a channel
// multiplier. The phase planes hold ceil((H+pads)/sh) * sh <= H+pads+sh-1
// rows (columns alike), plus 64 elements and the kernel's width of slack. A convolution that takes the Winograd route gets the
// larger of that and the Winograd route's scratch, which holds the
// transformed weight too unless winoW (the weight is stored transformed).
func convScratch(x, w, y *vinfo, sp spatial, groups, esz int, winoW bool) (symshape.Expr, bool) {
	ws, ok := constShape(w.shape)
	if !ok || groups <= 0 || len(ws) < 3 {
		return symshape.Expr{}, false
	}
	kh, kw := 1, ws[len(ws)-1]
	if !sp.oneD {
		kh = ws[2]
	}
	if ws[1] == 1 && ws[0] != groups {
		return symshape.Expr{}, false // depthwise with a multiplier: conv_dw, no copy
	}
	if kh == 1 && kw == 1 && sp.sh == 1 && sp.sw == 1 && sp.pads == [4]int{} && sp.autoPad != "SAME_UPPER" && sp.autoPad != "SAME_LOWER" {
		return symshape.Expr{}, false // plain 1x1: a GEMM on the input
	}
	padH, padW := sp.pads[0]+sp.pads[2], sp.pads[1]+sp.pads[3]
	switch sp.autoPad {
	case "SAME_UPPER", "SAME_LOWER":
		// At most the dilated kernel's extent less one, at any stride.
		padH, padW = (kh-1)*sp.dh, (kw-1)*sp.dw
	case "VALID":
		padH, padW = 0, 0
	}
	hdim := symshape.Const(1)
	if !sp.oneD {
		hdim = symshape.Add(x.shape[2], symshape.Const(int64(padH+sp.sh-1)))
	}
	wdim := symshape.Add(x.shape[len(x.shape)-1], symshape.Const(int64(padW+sp.sw-1)))
	e := symshape.Mul(symshape.Mul(x.shape[0], x.shape[1]), symshape.Mul(hdim, wdim))
	e = symshape.Add(e, symshape.Const(int64(64+(kw-1)*sp.dw)))
	wp := kernels.ConvParams{C: ws[1] * groups, OutC: ws[0], KH: kh, KW: kw, StrideH: sp.sh, StrideW: sp.sw,
		DilationH: sp.dh, DilationW: sp.dw, Groups: groups}
	if !sp.oneD && wp.WinogradRoute() {
		// The Winograd route's transformed weight, input and products
		// (kernels.ConvParams.ScratchElems), over T = N * ceil(OH/2) *
		// ceil(OW/2) tiles of 2x2 outputs, OH = H + padH - 2.
		half := func(in symshape.Expr, pad int) symshape.Expr {
			return symshape.FloorDiv(symshape.Add(in, symshape.Const(int64(pad-1))), symshape.Const(2))
		}
		t := symshape.Mul(x.shape[0], symshape.Mul(half(x.shape[2], padH), half(x.shape[3], padW)))
		c, k := int64(wp.C), int64(wp.OutC)
		u := k * c
		if winoW {
			u = 0
		}
		wino := symshape.Mul(symshape.Const(16), symshape.Add(symshape.Const(u), symshape.Mul(t, symshape.Const(c+k))))
		e = symshape.Max(e, wino)
	}
	return symshape.Mul(e, symshape.Const(int64(esz))), true
}

// lowerPool lowers MaxPool and AveragePool.
func lowerPool(lc *lowerCtx) (*stepDef, error) {
	x, y := lc.in(0), lc.out(0)
	if x == nil {
		return nil, lc.unsupported("needs X")
	}
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	if lc.used(1) || len(x.shape) == 5 {
		return lowerPoolVolume(lc, s)
	}
	sp, err := readSpatial(lc, len(x.shape))
	if err != nil {
		return nil, err
	}
	if !sp.haveKernelAttr {
		return nil, lc.unsupported("no kernel_shape")
	}
	if lc.n.AttrInt("storage_order", 0) != 0 {
		return nil, lc.unsupported("storage_order 1")
	}
	avg := lc.n.OpType == "AveragePool"
	sd := &stepDef{kernel: "pool"}
	// The pool kernels refuse padding beyond half the window (PyTorch's
	// limit; ONNX allows up to the window). Where the padding's value is
	// known (-inf for the maximum, 0 for an average that counts it), the
	// input is padded explicitly into scratch memory first.
	eh, ew := (sp.kh-1)*sp.dh+1, (sp.kw-1)*sp.dw+1
	pre := false
	if p := sp.pads; 2*p[0] > eh || 2*p[2] > eh || 2*p[1] > ew || 2*p[3] > ew {
		if avg && !sp.includePad || sp.ceil {
			return nil, lc.unsupported("pads %v exceed half the %dx%d window (with count_include_pad=0 or ceil_mode)", p, eh, ew)
		}
		pre = true
		esz, _ := lc.esize(x)
		e := symshape.Const(int64(esz))
		for i, d := range x.shape {
			switch {
			case i == len(x.shape)-1:
				d = symshape.Add(d, symshape.Const(int64(sp.pads[1]+sp.pads[3])))
			case i == 2 && !sp.oneD:
				d = symshape.Add(d, symshape.Const(int64(sp.pads[0]+sp.pads[2])))
			}
			e = symshape.Mul(e, d)
		}
		sd.scratch = []symshape.Expr{e}
	}
	et, _ := lc.et(x)
	esz, _ := lc.esize(x)
	fill := padBits(et, esz, x.dt, math.Inf(-1))
	if avg {
		fill = 0
	}
	sd.run = func(ex *exec) error {
		xs := ex.shape(x)
		n, c, h, w := sp.nchw(xs)
		pads := sp.padsFor(h, w)
		src := ex.ref(x)
		if pre {
			full := make([]int, 2*len(xs))
			r := len(xs)
			full[r-1], full[2*r-1] = pads[1], pads[3]
			if !sp.oneD {
				full[r-2], full[2*r-2] = pads[0], pads[2]
			}
			if err := ex.dev.Pad(esz, src.buf(), xs, full, kernels.PadConstant, fill, ex.scratch[0].buf()); err != nil {
				return err
			}
			src = ex.scratch[0]
			h, w = h+pads[0]+pads[2], w+pads[1]+pads[3]
			pads = [4]int{}
		}
		p := kernels.PoolParams{N: n, C: c, H: h, W: w, KH: sp.kh, KW: sp.kw,
			StrideH: sp.sh, StrideW: sp.sw, DilationH: sp.dh, DilationW: sp.dw,
			PadTop: pads[0], PadLeft: pads[1], PadBottom: pads[2], PadRight: pads[3],
			CeilMode: sp.ceil, CountIncludePad: sp.includePad}
		if avg {
			return ex.dev.AvgPool(s, src.buf(), ex.ref(y).buf(), p)
		}
		return ex.dev.MaxPool(s, src.buf(), ex.ref(y).buf(), p)
	}
	return sd, nil
}

// lowerGlobalPool averages or maximises each [N, C] plane.
func lowerGlobalPool(lc *lowerCtx) (*stepDef, error) {
	x, y := lc.in(0), lc.out(0)
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	if len(x.shape) < 2 {
		return nil, lc.unsupported("input of rank %d", len(x.shape))
	}
	avg := lc.n.OpType == "GlobalAveragePool"
	return &stepDef{kernel: "pool", run: func(ex *exec) error {
		xs := ex.shape(x)
		if avg {
			return ex.dev.GlobalAvgPool(s, ex.ref(x).buf(), ex.ref(y).buf(), xs[0]*xs[1], prod(xs, 2, len(xs)))
		}
		return ex.dev.GlobalMaxPool(s, ex.ref(x).buf(), ex.ref(y).buf(), xs[0]*xs[1], prod(xs, 2, len(xs)))
	}}, nil
}
