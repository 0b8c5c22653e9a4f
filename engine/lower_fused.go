package engine

import (
	"fmt"

	"github.com/tlite/tlite/engine/fuse"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
)

// DefaultRewrites returns the rewrites run when Options.Rewrites is nil:
// the fusion passes of engine/fuse, with the element-wise pass limited to
// what this package's element-wise lowering accepts.
func DefaultRewrites() []Rewrite {
	var out []Rewrite
	for _, p := range fuse.Passes(fuse.Options{Elementwise: fusableElementwise}) {
		out = append(out, Rewrite(p))
	}
	return out
}

// The nodes the fusion passes make lower here: norms with a residual add,
// products with a bias epilogue, fused attention and rotary embeddings. FusedElementwise
// nodes lower through lower_elementwise.go.
func init() {
	registerLowering(lowerFusedNorm, tlite.Key(tlite.RMSNorm), tlite.Key(tlite.AddRMSNorm), tlite.Key(tlite.AddLayerNorm))
	registerLowering(lowerMatMulBias, tlite.Key(tlite.MatMulBias))
	registerLowering(lowerAttention, tlite.Key(tlite.Attention))
	registerLowering(lowerRotary, tlite.Key(tlite.Rotary))
}

// fusableElementwise reports whether n can join a FusedElementwise body:
// an op the element-wise lowering accepts, on element types a chain
// computes. Clip stays out: a body is lowered with the opset of the tlite
// domain, and Clip reads its bounds from attributes or inputs by opset.
func fusableElementwise(n *graph.Node) bool {
	key := opKey(n.Domain, n.OpType)
	if !isElementwise(key) || key == "Clip" {
		return false
	}
	for _, vs := range [][]*graph.Value{n.Inputs, n.Outputs} {
		for _, v := range vs {
			if v == nil {
				continue
			}
			if et, _, err := storeFor(v.Type, kernels.F32); err != nil || et < 0 {
				return false
			}
		}
	}
	return true
}

func optRef(ex *exec, v *vinfo) *tref {
	if v == nil {
		return nil
	}
	r := ex.ref(v)
	return &r
}

// lowerFusedNorm lowers RMSNorm(x, scale?), AddRMSNorm(a, b, scale?) and
// AddLayerNorm(a, b, scale, bias?): the Add variants write the sum (output
// 0, when read) and the normalised sum (output 1).
func lowerFusedNorm(lc *lowerCtx) (*stepDef, error) {
	n := lc.n
	rms := n.OpType != "AddLayerNorm"
	add := n.OpType != "RMSNorm"
	x := lc.in(0)
	var res, sum *vinfo
	k := 1
	if add {
		res, k = lc.in(1), 2
		if res == nil {
			return nil, lc.unsupported("needs two addends")
		}
	}
	scale, bias := lc.in(k), lc.in(k+1)
	if rms && bias != nil {
		return nil, lc.unsupported("RMS norms take no bias")
	}
	if !rms && scale == nil {
		return nil, lc.unsupported("needs a scale")
	}
	y := lc.out(len(n.Outputs) - 1)
	if y == nil || add && len(n.Outputs) != 2 {
		return nil, lc.unsupported("want outputs (sum, normalised) for the Add forms, (normalised) otherwise")
	}
	if add && lc.used(0) {
		sum = lc.out(0)
	}
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	for _, v := range []*vinfo{res, scale, bias} {
		if v == nil {
			continue
		}
		if _, err := lc.floatStorage(v); err != nil {
			return nil, err
		}
	}
	if res != nil && !shapeEqual(res.shape, x.shape) {
		return nil, lc.unsupported("addends %s %s and %s %s differ in shape", x.name, symshape.FormatShape(x.shape), res.name, symshape.FormatShape(res.shape))
	}
	axis, err := normAxis(n.AttrInt("axis", -1), len(x.shape))
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	cols := numelExpr(x.shape[axis:])
	for _, w := range []*vinfo{scale, bias} {
		if w != nil && !numelExpr(w.shape).Equal(cols) {
			return nil, lc.unsupported("%s has shape %s; want %s elements", w.name, symshape.FormatShape(w.shape), cols)
		}
	}
	eps := n.AttrFloat("epsilon", 1e-5)
	return &stepDef{kernel: "norm", inPlace: [][2]int{{len(n.Outputs) - 1, 0}}, run: func(ex *exec) error {
		xs := ex.shape(x)
		p := kernels.NormParams{Storage: s, Weights: s, Rows: prod(xs, 0, axis), Cols: prod(xs, axis, len(xs)), Eps: eps}
		if rms {
			return ex.dev.AddRMSNorm(p, ex.ref(x).buf(), optBuf(optRef(ex, res)), optBuf(optRef(ex, sum)), optBuf(optRef(ex, scale)), ex.ref(y).buf())
		}
		return ex.dev.AddLayerNorm(p, ex.ref(x).buf(), optBuf(optRef(ex, res)), optBuf(optRef(ex, sum)), optBuf(optRef(ex, scale)), optBuf(optRef(ex, bias)), ex.ref(y).buf())
	}}, nil
}

// lowerRotary lowers Rotary(x, cos, sin, x2?) -> y, y2? (graph/tlite
// has its schema) to one launch of the rotary kernel, each output in
// place on its input when nothing reads the input after it.
func lowerRotary(lc *lowerCtx) (*stepDef, error) {
	x, cos, sin, x2 := lc.in(0), lc.in(1), lc.in(2), lc.in(3)
	y, y2 := lc.out(0), lc.out(1)
	if x == nil || cos == nil || sin == nil || y == nil {
		return nil, lc.unsupported("needs x, cos, sin and an output")
	}
	if (x2 == nil) != (y2 == nil) || len(lc.n.Inputs) > 4 || len(lc.n.Outputs) > 2 {
		return nil, lc.unsupported("want inputs (x, cos, sin) with output y, or (x, cos, sin, x2) with outputs y, y2")
	}
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	for _, v := range []*vinfo{cos, sin, x2} {
		if v == nil {
			continue
		}
		if _, err := lc.floatStorage(v); err != nil {
			return nil, err
		}
	}
	rd := lc.n.AttrInt("rotary_dim", 0)
	pairs := [][2]*vinfo{{x, y}}
	inPlace := [][2]int{{0, 0}}
	if x2 != nil {
		pairs = append(pairs, [2]*vinfo{x2, y2})
		inPlace = append(inPlace, [2]int{1, 3})
	}
	for _, p := range pairs {
		in, out := p[0], p[1]
		rank := len(in.shape)
		if rank < 1 || rank > 4 {
			return nil, lc.unsupported("%s has rank %d; the rotary kernel takes 1 to 4", in.name, rank)
		}
		if !shapeEqual(out.shape, in.shape) {
			return nil, lc.unsupported("output %s %s differs from its input %s %s", out.name, symshape.FormatShape(out.shape), in.name, symshape.FormatShape(in.shape))
		}
		if d, ok := in.shape[rank-1].Const(); rd <= 0 || rd%2 != 0 || ok && rd > d {
			return nil, lc.unsupported("rotary_dim %d: want an even number from 2 to the last axis of %s %s", rd, in.name, symshape.FormatShape(in.shape))
		}
	}
	tensor := func(ex *exec, in, out *vinfo) (kernels.RotaryTensor, error) {
		l, err := kernels.NewRotaryLayout(ex.shape(in), ex.shape(cos), ex.shape(sin), int(rd))
		return kernels.RotaryTensor{RotaryLayout: l, X: ex.ref(in).buf(), Out: ex.ref(out).buf()}, err
	}
	return &stepDef{kernel: "rotary", inPlace: inPlace, run: func(ex *exec) error {
		a, err := tensor(ex, x, y)
		if err != nil {
			return err
		}
		var b kernels.RotaryTensor
		if x2 != nil {
			if b, err = tensor(ex, x2, y2); err != nil {
				return err
			}
		}
		p := kernels.RotaryParams{Storage: s, RotaryDim: int(rd)}
		return ex.dev.Rotary(p, ex.ref(cos).buf(), ex.ref(sin).buf(), a, b)
	}}, nil
}

// lowerMatMulBias lowers MatMulBias(a, b, bias?): alpha*(a@b) + beta*bias
// with numpy matmul broadcasting and the bias per output column (or one
// number).
func lowerMatMulBias(lc *lowerCtx) (*stepDef, error) {
	a, b, bias, y := lc.in(0), lc.in(1), lc.in(2), lc.out(0)
	if a == nil || b == nil {
		return nil, lc.unsupported("needs two factors")
	}
	s, err := lc.floatStorage(a)
	if err != nil {
		return nil, err
	}
	for _, v := range []*vinfo{b, bias} {
		if v == nil {
			continue
		}
		if _, err := lc.floatStorage(v); err != nil {
			return nil, err
		}
	}
	alpha, beta := lc.n.AttrFloat("alpha", 1), lc.n.AttrFloat("beta", 1)
	w := lc.productWeight(b, false)
	return &stepDef{kernel: "matmul", run: func(x *exec) error {
		plan, err := kernels.MatMulBatchPlan(x.shape(a), x.shape(b))
		if err != nil {
			return err
		}
		p := plan.Params()
		p.Weight = s
		w.apply(&p)
		if alpha != 1 || beta != 1 {
			p.Scaled, p.Alpha, p.Beta = true, alpha, beta
		}
		var bref *tref
		if bias != nil {
			switch nb := numel(x.shape(bias)); nb {
			case 1:
			case plan.N:
				p.BiasColStride = 1
			default:
				return fmt.Errorf("bias %s has %d elements for %d output columns", bias.name, nb, plan.N)
			}
			bref = optRef(x, bias)
		}
		p.Bias = optBuf(bref)
		x.lim.matmul(&p)
		return x.dev.MatMul(s, x.ref(a).buf(), x.ref(b).buf(), x.ref(y).buf(), p)
	}}, nil
}

// attnPerm reads a permutation attribute of Attention (identity when
// absent) and checks that head_dim is the last, contiguous axis.
func attnPerm(lc *lowerCtx, name string) ([4]int, error) {
	p := [4]int{0, 1, 2, 3}
	v, ok := lc.n.AttrInts(name)
	if !ok {
		return p, nil
	}
	if len(v) != 4 {
		return p, lc.unsupported("%s %v; want 4 axes", name, v)
	}
	seen := [4]bool{}
	for i, a := range v {
		if a < 0 || a > 3 || seen[a] {
			return p, lc.unsupported("%s %v is not a permutation of 0..3", name, v)
		}
		seen[a] = true
		p[i] = int(a)
	}
	if p[3] != 3 {
		return p, lc.unsupported("%s %v: head_dim must be the last axis", name, v)
	}
	return p, nil
}

// attnLayout is the kernel layout of a contiguous tensor of concrete shape
// dims read through perm; an axis of size 1 where the full size is larger
// broadcasts (stride 0).
func attnLayout(dims []int, perm [4]int, full [4]int) kernels.AttnLayout {
	st := make([]int, len(dims))
	acc := 1
	for i := len(dims) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= dims[i]
	}
	stride := func(l int) int {
		if dims[perm[l]] == 1 && full[l] > 1 {
			return 0
		}
		return st[perm[l]]
	}
	return kernels.AttnLayout{Batch: stride(0), Head: stride(1), Seq: stride(2)}
}

// lowerAttention lowers Attention(q, k, v, mask?) (see package fuse) to the
// fused attention kernel.
func lowerAttention(lc *lowerCtx) (*stepDef, error) {
	n := lc.n
	q, k, v, mask, o := lc.in(0), lc.in(1), lc.in(2), lc.in(3), lc.out(0)
	if q == nil || k == nil || v == nil || o == nil {
		return nil, lc.unsupported("needs q, k, v and an output")
	}
	s, err := lc.floatStorage(q)
	if err != nil {
		return nil, err
	}
	for _, t := range []*vinfo{k, v, mask} {
		if t == nil {
			continue
		}
		if _, err := lc.floatStorage(t); err != nil {
			return nil, err
		}
	}
	for _, t := range []*vinfo{q, k, v, o} {
		if len(t.shape) != 4 {
			return nil, lc.unsupported("%s has rank %d; want 4", t.name, len(t.shape))
		}
	}
	if mask != nil && len(mask.shape) > 4 {
		return nil, lc.unsupported("mask %s has rank %d", mask.name, len(mask.shape))
	}
	var perms [4][4]int
	for i, name := range []string{"q_perm", "k_perm", "v_perm", "o_perm"} {
		if perms[i], err = attnPerm(lc, name); err != nil {
			return nil, err
		}
	}
	scale := n.AttrFloat("scale", 0)
	if scale == 0 {
		return nil, lc.unsupported("scale 0")
	}
	causal := n.AttrInt("causal", 0) != 0
	kvHeads := n.AttrInt("kv_heads", 0)
	var stats *attnStat
	if sess := lc.c.s; sess.kvStats && !lc.host && sess.kvCacheSet[k.root] {
		if stats, err = attnStatFor(lc, q, perms[0]); err != nil {
			return nil, err
		}
	}
	hook := hookSite(lc, q, k, v, o, perms)
	return &stepDef{kernel: "attention", run: func(ex *exec) error {
		qs, ks, vs, os := ex.shape(q), ex.shape(k), ex.shape(v), ex.shape(o)
		dim := func(d []int, t, l int) int { return d[perms[t][l]] }
		B, H, Sq, D := dim(qs, 0, 0), dim(qs, 0, 1), dim(qs, 0, 2), dim(qs, 0, 3)
		KVH, Skv := dim(ks, 1, 1), dim(ks, 1, 2)
		full := [4]int{B, H, Sq, D}
		kfull := [4]int{B, KVH, Skv, D}
		for t, d := range [][]int{ks, vs} {
			if b := dim(d, t+1, 0); b != B && b != 1 {
				return fmt.Errorf("batch %d of %s does not broadcast to %d", b, []string{k.name, v.name}[t], B)
			}
		}
		if dim(ks, 1, 3) != D || dim(vs, 2, 3) != D || dim(vs, 2, 1) != KVH || dim(vs, 2, 2) != Skv {
			return fmt.Errorf("q %v, k %v and v %v (read through %v, %v, %v) do not form attention", qs, ks, vs, perms[0], perms[1], perms[2])
		}
		if kvHeads > 0 && int64(KVH) != kvHeads {
			return fmt.Errorf("k has %d heads, the graph said %d", KVH, kvHeads)
		}
		ofull := [4]int{B, H, Sq, D}
		for l := 0; l < 4; l++ {
			if dim(os, 3, l) != ofull[l] {
				return fmt.Errorf("output %s has shape %v; want %v through %v", o.name, os, ofull, perms[3])
			}
		}
		p := kernels.AttentionParams{Batch: B, Heads: H, KVHeads: KVH, SeqQ: Sq, SeqKV: Skv, HeadDim: D,
			Scale: scale, Causal: causal, Past: Skv - Sq,
			Q: attnLayout(qs, perms[0], full), K: attnLayout(ks, perms[1], kfull),
			V: attnLayout(vs, perms[2], kfull), O: attnLayout(os, perms[3], ofull),
			Precision: ex.c.s.attnPrec}
		ex.lim.attention(&p)
		if causal && p.Past < 0 {
			return fmt.Errorf("causal attention with %d queries over %d keys", Sq, Skv)
		}
		var mref *tref
		if mask != nil {
			ms := ex.shape(mask)
			want := [4]int{B, H, Sq, Skv}
			md := [4]int{1, 1, 1, 1}
			copy(md[4-len(ms):], ms)
			acc := 1
			for i := 3; i >= 0; i-- {
				if md[i] != 1 && md[i] != want[i] {
					return fmt.Errorf("mask %s of shape %v does not broadcast to %v", mask.name, ms, want)
				}
				if md[i] != 1 {
					p.MaskStrides[i] = acc
				}
				acc *= md[i]
			}
			mref = optRef(ex, mask)
		}
		if ex.err != nil {
			return ex.err
		}
		p.Mask = optBuf(mref)
		attend := func() error {
			if stats == nil {
				return ex.dev.Attention(s, ex.ref(q).buf(), ex.ref(k).buf(), ex.ref(v).buf(), ex.ref(o).buf(), p)
			}
			if ex.c.s.statsOff {
				stats.skv = -1
				return ex.dev.Attention(s, ex.ref(q).buf(), ex.ref(k).buf(), ex.ref(v).buf(), ex.ref(o).buf(), p)
			}
			p.LSE = stats.lse.m
			if err := ex.dev.Attention(s, ex.ref(q).buf(), ex.ref(k).buf(), ex.ref(v).buf(), ex.ref(o).buf(), p); err != nil {
				return err
			}
			if w := ex.c.s.statsW; w > 0 {
				return stats.accumulate(ex.c.s, s, ex.ref(q).buf(), ex.ref(k).buf(), p, w)
			}
			return stats.run(ex.dev, s, ex.ref(q).buf(), ex.ref(k).buf(), p)
		}
		if hook != nil && ex.c.s.layerGate != nil {
			if err := hook.gate(ex); err != nil {
				return err
			}
		}
		if hook != nil && ex.c.s.attnHook != nil {
			return hook.run(ex, p, attend)
		}
		return attend()
	}}, nil
}
