package engine

import (
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
)

func init() {
	registerLowering(lowerLayerNorm, "LayerNormalization")
	registerLowering(lowerGroupNorm, "InstanceNormalization", "GroupNormalization")
	registerLowering(lowerSoftmax, "Softmax", "LogSoftmax")
	registerLowering(lowerReduce, "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
		"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum")
	registerLowering(lowerArg, "ArgMax", "ArgMin")
	registerLowering(lowerCumSum, "CumSum")
}

// lowerLayerNorm normalises over the dims from axis on, folded into Cols.
func lowerLayerNorm(lc *lowerCtx) (*stepDef, error) {
	x, scale, bias, y := lc.in(0), lc.in(1), lc.in(2), lc.out(0)
	if x == nil || scale == nil {
		return nil, lc.unsupported("needs X and Scale")
	}
	if lc.used(1) || lc.used(2) {
		return nil, lc.unsupported("the Mean and InvStdDev outputs")
	}
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	if _, err := lc.floatStorage(scale); err != nil {
		return nil, err
	}
	axis, err := normAxis(lc.n.AttrInt("axis", -1), len(x.shape))
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	norm := numelExpr(x.shape[axis:])
	for _, w := range []*vinfo{scale, bias} {
		if w == nil {
			continue
		}
		if !numelExpr(w.shape).Equal(norm) {
			return nil, lc.unsupported("%s has shape %s; a broadcast scale or bias over %s is not supported", w.name, symshape.FormatShape(w.shape), symshape.FormatShape(x.shape[axis:]))
		}
	}
	eps := lc.n.AttrFloat("epsilon", 1e-5)
	return &stepDef{kernel: "norm", run: func(ex *exec) error {
		xs := ex.shape(x)
		p := kernels.NormParams{Storage: s, Weights: s, Rows: prod(xs, 0, axis), Cols: prod(xs, axis, len(xs)), Eps: eps}
		var bref *tref
		if bias != nil {
			r := ex.ref(bias)
			bref = &r
		}
		return ex.dev.LayerNorm(p, ex.ref(x).buf(), ex.ref(scale).buf(), optBuf(bref), ex.ref(y).buf())
	}}, nil
}

// lowerGroupNorm lowers InstanceNormalization and GroupNormalization over
// [N, C, spatial...].
func lowerGroupNorm(lc *lowerCtx) (*stepDef, error) {
	x, scale, bias, y := lc.in(0), lc.in(1), lc.in(2), lc.out(0)
	if x == nil || scale == nil || bias == nil {
		return nil, lc.unsupported("needs input, scale and B")
	}
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	if len(x.shape) < 2 {
		return nil, lc.unsupported("input of rank %d", len(x.shape))
	}
	inst := lc.n.OpType == "InstanceNormalization"
	groups := int(lc.n.AttrInt("num_groups", 0))
	if !inst && groups <= 0 {
		return nil, lc.unsupported("num_groups %d", groups)
	}
	perGroup := !inst && lc.opset < 21
	eps := lc.n.AttrFloat("epsilon", 1e-5)
	return &stepDef{kernel: "norm", run: func(ex *exec) error {
		xs := ex.shape(x)
		g := groups
		if inst {
			g = xs[1]
		}
		p := kernels.GroupNormParams{Storage: s, Weights: s, N: xs[0], C: xs[1], Groups: g,
			Spatial: prod(xs, 2, len(xs)), Eps: eps, ScalePerGroup: perGroup}
		return ex.dev.GroupNorm(p, ex.ref(x).buf(), ex.ref(scale).buf(), ex.ref(bias).buf(), ex.ref(y).buf())
	}}, nil
}

// lowerSoftmax: opset 13 normalises one axis; earlier opsets flatten from
// the axis on.
func lowerSoftmax(lc *lowerCtx) (*stepDef, error) {
	x, y := lc.in(0), lc.out(0)
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	rank := len(x.shape)
	def := int64(-1)
	if lc.opset < 13 {
		def = 1
	}
	axis, err := normAxis(lc.n.AttrInt("axis", def), max(rank, 1))
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	log := lc.n.OpType == "LogSoftmax"
	flat := lc.opset < 13
	return &stepDef{kernel: "softmax", run: func(ex *exec) error {
		xs := ex.shape(x)
		if len(xs) == 0 {
			xs = []int{1}
		}
		outer, n, inner := prod(xs, 0, axis), xs[axis], prod(xs, axis+1, len(xs))
		if flat {
			n, inner = prod(xs, axis, len(xs)), 1
		}
		if log {
			return ex.dev.LogSoftmax(s, ex.ref(x).buf(), ex.ref(y).buf(), outer, n, inner)
		}
		return ex.dev.Softmax(s, ex.ref(x).buf(), ex.ref(y).buf(), outer, n, inner)
	}}, nil
}

var reduceOps = map[string]kernels.ReduceOp{
	"ReduceSum": kernels.ReduceSum, "ReduceMean": kernels.ReduceMean, "ReduceMax": kernels.ReduceMax,
	"ReduceMin": kernels.ReduceMin, "ReduceProd": kernels.ReduceProd, "ReduceL1": kernels.ReduceL1,
	"ReduceL2": kernels.ReduceL2, "ReduceSumSquare": kernels.ReduceSumSquare,
	"ReduceLogSumExp": kernels.ReduceLogSumExp, "ReduceLogSum": kernels.ReduceSum,
}

// lowerReduce lowers the Reduce* family; ReduceLogSum is a sum followed by
// a Log chain over the output.
func lowerReduce(lc *lowerCtx) (*stepDef, error) {
	n := lc.n
	x, y := lc.in(0), lc.out(0)
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	// Axes moved from an attribute to an input in opset 13 for ReduceSum
	// and in opset 18 for the others.
	inputAxes := lc.opset >= 18 || n.OpType == "ReduceSum" && lc.opset >= 13
	var axes []int64
	if inputAxes {
		if a := lc.in(1); a != nil {
			v, ok := lc.constInts(a)
			if !ok {
				return nil, lc.unsupported("axes computed at run time")
			}
			axes = v
		}
	} else if v, ok := n.AttrInts("axes"); ok {
		axes = v
	}
	rank := len(x.shape)
	norm := make([]int, len(axes))
	for i, a := range axes {
		k, err := normAxis(a, rank)
		if err != nil {
			return nil, lc.unsupported("%v", err)
		}
		norm[i] = k
	}
	esz, err := lc.esize(x)
	if err != nil {
		return nil, err
	}
	if len(norm) == 0 && n.AttrInt("noop_with_empty_axes", 0) != 0 {
		return &stepDef{kernel: "move", run: func(ex *exec) error {
			v := kernels.ContiguousView(ex.shape(x))
			return ex.dev.Copy(esz, ex.ref(y).buf(), v, ex.ref(x).buf(), v)
		}}, nil
	}
	op := reduceOps[n.OpType]
	var logChain *kernels.Chain
	if n.OpType == "ReduceLogSum" {
		et, _ := lc.chainType(y)
		logChain = kernels.UnaryChain(kernels.ElemLog, et)
	}
	return &stepDef{kernel: "reduce", run: func(ex *exec) error {
		xs := ex.shape(x)
		if err := ex.dev.Reduce(s, op, ex.ref(x).buf(), xs, norm, ex.ref(y).buf()); err != nil {
			return err
		}
		if logChain != nil {
			ys := ex.shape(y)
			return runChain(ex.dev, logChain, ys, []chainArg{{t: ex.ref(y), shape: ys}}, []tref{ex.ref(y)})
		}
		return nil
	}}, nil
}

// lowerArg lowers ArgMax/ArgMin. Integer inputs are first cast to float32
// in scratch memory (exact below 2^24), the arg kernel reading floats.
func lowerArg(lc *lowerCtx) (*stepDef, error) {
	n := lc.n
	x, y := lc.in(0), lc.out(0)
	if x == nil {
		return nil, lc.unsupported("needs an input")
	}
	axis, err := normAxis(n.AttrInt("axis", 0), max(len(x.shape), 1))
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	isMin, last := n.OpType == "ArgMin", n.AttrInt("select_last_index", 0) != 0
	sd := &stepDef{kernel: "reduce"}
	s := lc.fs
	var cast *kernels.Chain
	if !x.isFloat() {
		et, err := lc.chainType(x)
		if err != nil {
			return nil, err
		}
		cast = &kernels.Chain{}
		cast.Output(cast.Cast(cast.Input(et), kernels.EF32))
		s = kernels.F32
		sd.scratch = []symshape.Expr{symshape.Mul(numelExpr(x.shape), symshape.Const(4))}
	}
	sd.run = func(ex *exec) error {
		xs := ex.shape(x)
		if len(xs) == 0 {
			xs = []int{1}
		}
		src := ex.ref(x)
		if cast != nil {
			if err := runChain(ex.dev, cast, xs, []chainArg{{t: src, shape: xs}}, []tref{ex.scratch[0]}); err != nil {
				return err
			}
			src = ex.scratch[0]
		}
		return ex.dev.ArgReduce(s, isMin, last, src.buf(), prod(xs, 0, axis), xs[axis], prod(xs, axis+1, len(xs)), ex.ref(y).buf())
	}
	return sd, nil
}

// lowerCumSum lowers CumSum over a constant axis.
func lowerCumSum(lc *lowerCtx) (*stepDef, error) {
	x, y := lc.in(0), lc.out(0)
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	av, ok := lc.constInts(lc.in(1))
	if !ok || len(av) != 1 {
		return nil, lc.unsupported("axis must be a constant scalar")
	}
	axis, err := normAxis(av[0], len(x.shape))
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	excl, rev := lc.n.AttrInt("exclusive", 0) != 0, lc.n.AttrInt("reverse", 0) != 0
	return &stepDef{kernel: "reduce", inPlace: [][2]int{{0, 0}}, run: func(ex *exec) error {
		xs := ex.shape(x)
		return ex.dev.CumSum(s, ex.ref(x).buf(), ex.ref(y).buf(), prod(xs, 0, axis), xs[axis], prod(xs, axis+1, len(xs)), excl, rev)
	}}, nil
}
