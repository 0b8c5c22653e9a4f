package engine

import (
	"fmt"
	"math"
	"slices"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
)

// fusedOp is the op key of a fused element-wise node made by a rewrite: a
// "tlite" FusedElementwise node whose GRAPH attribute "body" holds the
// original element-wise nodes. The node's inputs are the external inputs
// (the body's graph inputs, in order, or values the body names from the
// enclosing graph) and its outputs the external outputs (the body's graph
// outputs, in order). Every output has the same shape; inputs broadcast to
// it.
const fusedOp = tlite.Domain + "." + tlite.FusedElementwise

// elementwiseOps are the ONNX op keys lowered to a chain: those the
// kernels' op table lowers to one chain operation, the composites built
// from several, and CastLike.
func elementwiseOps() []string {
	ops := append(kernels.ElemONNXOps(), "CastLike")
	for op := range compositeOps {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	return ops
}

func init() {
	registerLowering(lowerElementwise, elementwiseOps()...)
	registerLowering(lowerElementwise, fusedOp)
	registerLowering(lowerBatchNorm, "BatchNormalization")
	registerLowering(lowerConstantOfShape, "ConstantOfShape")
}

// chainBuilder translates element-wise graph nodes into one kernels.Chain.
type chainBuilder struct {
	lc   *lowerCtx
	ch   *kernels.Chain
	node map[*graph.Value]int // graph value -> chain node
	args []*vinfo             // chain input k reads args[k]
	// argShape overrides the shape input k is read with (a per-channel
	// vector seen as [C, 1, 1]); nil entries use the value's own shape.
	argShape [][]symshape.Expr
	// argNode[k] is the node holding input k's value (after widening).
	argNode []int
	types   map[int]kernels.ElemType
}

func newChainBuilder(lc *lowerCtx) *chainBuilder {
	return &chainBuilder{lc: lc, ch: &kernels.Chain{}, node: map[*graph.Value]int{}, types: map[int]kernels.ElemType{}}
}

// external makes the chain read vi (a value of the enclosing graph) where
// the body names v. With fp16 storage, scalar constants become chain
// constants, computed in fp32: stored as fp16, -3.4e38 would saturate and
// 1e-5 lose digits. With fp32 storage they stay inputs, so that one
// compiled chain serves every constant value (PoCL compiles are slow),
// except 2, which lets Pow(x, 2) be x*x.
func (b *chainBuilder) external(v *graph.Value, vi *vinfo) error {
	if k, ok := b.scalarConst(vi); ok {
		b.node[v] = k
		return nil
	}
	for k, a := range b.args {
		if a == vi {
			b.node[v] = b.argNode[k]
			return nil
		}
	}
	k, err := b.input(vi)
	if err != nil {
		return err
	}
	b.node[v] = k
	return nil
}

// input adds vi as a chain input and returns the node holding its value.
// fp16 storage is widened at once: the chain computes in fp32 and rounds
// only what it stores, so a constant like -3.4e38 or an intermediate above
// 65504 keeps its value between operations.
func (b *chainBuilder) input(vi *vinfo) (int, error) {
	et, err := b.lc.chainType(vi)
	if err != nil {
		return 0, err
	}
	idx := b.ch.Input(et)
	b.types[idx] = et
	if et == kernels.EF16 {
		idx = b.ch.Cast(idx, kernels.EF32)
		b.types[idx] = kernels.EF32
	}
	b.args = append(b.args, vi)
	b.argNode = append(b.argNode, idx)
	b.argShape = append(b.argShape, nil)
	return idx, nil
}

// compute is the type a chain computes values of storage type et in.
func compute(et kernels.ElemType) kernels.ElemType {
	if et == kernels.EF16 {
		return kernels.EF32
	}
	return et
}

// output stores node k as the chain's next output, narrowed to o's storage.
func (b *chainBuilder) output(k int, o *vinfo) error {
	et, err := b.lc.chainType(o)
	if err != nil {
		return err
	}
	if t := b.typeOf(k); t != et {
		if !t.IsFloat() || !et.IsFloat() {
			return fmt.Errorf("output %s computes as %v but is stored as %v", o.name, t, et)
		}
		if et == kernels.EF16 {
			// Saturate rather than overflow to infinity: an additive mask
			// of -FLT_MAX must stay finite, or a fully masked row's
			// softmax turns to NaN where the fp32 model averages.
			lo, hi := b.ch.Const(t, -65504), b.ch.Const(t, 65504)
			k = b.ch.Node(kernels.ChainNode{Op: kernels.ElemClip, Args: []int{k, lo, hi}})
			b.types[lo], b.types[hi], b.types[k] = t, t, t
		}
		k = b.ch.Cast(k, et)
		b.types[k] = et
	}
	b.ch.Output(k)
	return nil
}

// scalarConst adds a one-element constant as a chain constant.
func (b *chainBuilder) scalarConst(vi *vinfo) (int, bool) {
	r := vi.root
	if r.kind != vkConst || r.konst == nil || numel(r.konst.shape) != 1 || len(vi.shape) > 0 && !allOnes(vi.shape) {
		return 0, false
	}
	et, err := b.lc.chainType(vi)
	if err != nil {
		return 0, false
	}
	if et != kernels.EF16 {
		if f, err := r.konst.floats(); err != nil || f[0] != 2 {
			return 0, false
		}
	}
	return b.constant(et, r.konst)
}

func allOnes(s []symshape.Expr) bool {
	for _, d := range s {
		if k, ok := d.Const(); !ok || k != 1 {
			return false
		}
	}
	return true
}

// constant adds element 0 of h as a chain constant of type et.
func (b *chainBuilder) constant(et kernels.ElemType, h *hostTensor) (int, bool) {
	et = compute(et)
	var idx int
	if et.IsFloat() {
		f, err := h.floats()
		if err != nil || len(f) == 0 {
			return 0, false
		}
		idx = b.ch.Const(et, f[0])
	} else {
		v, err := h.ints()
		if err != nil || len(v) == 0 {
			return 0, false
		}
		idx = b.ch.ConstInt(et, v[0])
	}
	b.types[idx] = et
	return idx, true
}

// typeOf returns the chain type of node k.
func (b *chainBuilder) typeOf(k int) kernels.ElemType {
	if t, ok := b.types[k]; ok {
		return t
	}
	types, err := b.nodeTypes()
	if err != nil || k >= len(types) {
		return kernels.EF32
	}
	for i, t := range types {
		b.types[i] = t
	}
	return types[k]
}

// nodeTypes types every node so far; Chain.Types wants an output, so the
// last node stands in for one while the chain is being built.
func (b *chainBuilder) nodeTypes() ([]kernels.ElemType, error) {
	saved := b.ch.Outputs
	b.ch.Outputs = []int{len(b.ch.Nodes) - 1}
	defer func() { b.ch.Outputs = saved }()
	return b.ch.Types()
}

// add appends a chain node and records its type.
func (b *chainBuilder) add(n kernels.ChainNode) (int, error) {
	idx := b.ch.Node(n)
	types, err := b.nodeTypes()
	if err != nil {
		b.ch.Nodes = b.ch.Nodes[:idx]
		return 0, err
	}
	b.types[idx] = types[idx]
	return idx, nil
}

func (b *chainBuilder) op(op kernels.ElemOp, args ...int) (int, error) {
	return b.add(kernels.ElemNode(op, args...))
}

// onnx adds op for ONNX node n on args, the chain nodes of n's inputs (-1
// where omitted), with n's attributes as the kernels' op table reads them.
func (b *chainBuilder) onnx(op kernels.ElemOp, n *graph.Node, args []int) (int, error) {
	nd, err := kernels.ElemNodeONNX(op, n, args)
	if err != nil {
		return 0, err
	}
	return b.add(nd)
}

// fconst adds a float constant of the type of node like.
func (b *chainBuilder) fconst(like int, v float64) int {
	t := b.typeOf(like)
	idx := b.ch.Const(t, v)
	b.types[idx] = t
	return idx
}

// emit adds the computation of graph node n, whose inputs are already in
// b.node, and records its output.
func (b *chainBuilder) emit(n *graph.Node, opset int64) error {
	args := make([]int, len(n.Inputs))
	for i, v := range n.Inputs {
		args[i] = -1
		if v == nil {
			continue
		}
		k, ok := b.node[v]
		if !ok {
			return fmt.Errorf("input %q of %s is not available to the chain", v.Name, n.OpType)
		}
		args[i] = k
	}
	need := func(k int) error {
		if len(args) < k {
			return fmt.Errorf("%s needs %d inputs, has %d", n.OpType, k, len(args))
		}
		for i := 0; i < k; i++ {
			if args[i] < 0 {
				return fmt.Errorf("%s input %d is missing", n.OpType, i)
			}
		}
		return nil
	}
	var (
		res int
		err error
	)
	key := opKey(n.Domain, n.OpType)
	switch key {
	case "Cast", "CastLike":
		// The target is the type tlite stores ONNX's element type as.
		if err = need(1); err != nil {
			break
		}
		to := dtype.Type(n.AttrInt("to", 0))
		if key == "CastLike" {
			if err = need(2); err != nil {
				break
			}
			to = n.Inputs[1].Type
		}
		var et kernels.ElemType
		et, _, err = storeFor(to, b.lc.fs)
		if err == nil && et < 0 {
			err = fmt.Errorf("cast to %v is not supported", to)
		}
		if err == nil {
			res, err = b.add(kernels.ChainNode{Op: kernels.ElemCast, Args: []int{args[0]}, To: compute(et)})
		}
	case "Clip":
		if opset < 11 && len(args) > 0 && args[0] >= 0 {
			// Clip-6 takes its bounds as attributes.
			args = []int{args[0],
				b.fconst(args[0], float64(n.AttrFloat("min", -math.MaxFloat32))),
				b.fconst(args[0], float64(n.AttrFloat("max", math.MaxFloat32)))}
		}
		res, err = b.onnx(kernels.ElemClip, n, args)
	default:
		if op, ok := kernels.ElemOpFor(key); ok {
			res, err = b.onnx(op, n, args)
			break
		}
		if err = need(1); err != nil {
			break
		}
		res, err = b.composite(n, args[0])
	}
	if err != nil {
		return err
	}
	if len(n.Outputs) == 0 || n.Outputs[0] == nil {
		return fmt.Errorf("%s has no output", n.OpType)
	}
	b.node[n.Outputs[0]] = res
	return nil
}

// compositeErr carries a chain-building error out of composite's nested
// calls; it is the only panic composite recovers.
type compositeErr struct{ err error }

// catchComposite runs f and returns its error, or the one a compositeErr
// panic in it carries; any other panic (an index bug, a runtime.Error)
// goes on.
func catchComposite(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(compositeErr)
			if !ok {
				panic(r)
			}
			err = e.err
		}
	}()
	return f()
}

// compositeOps are the element-wise ONNX ops the chain family has no
// operation for, each built from ones it has: x is the input's node, op
// adds an operation and c a constant of x's type.
var compositeOps = map[string]func(n *graph.Node, x int, op func(kernels.ElemOp, ...int) int, c func(float64) int) int{
	"Tan": func(_ *graph.Node, x int, op func(kernels.ElemOp, ...int) int, _ func(float64) int) int {
		return op(kernels.ElemDiv, op(kernels.ElemSin, x), op(kernels.ElemCos, x))
	},
	"Sinh": func(_ *graph.Node, x int, op func(kernels.ElemOp, ...int) int, c func(float64) int) int {
		return op(kernels.ElemMul, op(kernels.ElemSub, op(kernels.ElemExp, x), op(kernels.ElemExp, op(kernels.ElemNeg, x))), c(0.5))
	},
	"Cosh": func(_ *graph.Node, x int, op func(kernels.ElemOp, ...int) int, c func(float64) int) int {
		return op(kernels.ElemMul, op(kernels.ElemAdd, op(kernels.ElemExp, x), op(kernels.ElemExp, op(kernels.ElemNeg, x))), c(0.5))
	},
	"Asinh": func(_ *graph.Node, x int, op func(kernels.ElemOp, ...int) int, c func(float64) int) int {
		r := op(kernels.ElemSqrt, op(kernels.ElemAdd, op(kernels.ElemMul, x, x), c(1)))
		return op(kernels.ElemLog, op(kernels.ElemAdd, x, r))
	},
	"Acosh": func(_ *graph.Node, x int, op func(kernels.ElemOp, ...int) int, c func(float64) int) int {
		r := op(kernels.ElemSqrt, op(kernels.ElemAdd, op(kernels.ElemMul, x, x), c(-1)))
		return op(kernels.ElemLog, op(kernels.ElemAdd, x, r))
	},
	"Atanh": func(_ *graph.Node, x int, op func(kernels.ElemOp, ...int) int, c func(float64) int) int {
		return op(kernels.ElemMul, c(0.5), op(kernels.ElemLog,
			op(kernels.ElemDiv, op(kernels.ElemAdd, c(1), x), op(kernels.ElemSub, c(1), x))))
	},
	"Softsign": func(_ *graph.Node, x int, op func(kernels.ElemOp, ...int) int, c func(float64) int) int {
		return op(kernels.ElemDiv, x, op(kernels.ElemAdd, c(1), op(kernels.ElemAbs, x)))
	},
	"ThresholdedRelu": func(n *graph.Node, x int, op func(kernels.ElemOp, ...int) int, c func(float64) int) int {
		alpha := float64(n.AttrFloat("alpha", 1))
		return op(kernels.ElemWhere, op(kernels.ElemGreater, x, c(alpha)), x, c(0))
	},
	"Shrink": func(n *graph.Node, x int, op func(kernels.ElemOp, ...int) int, c func(float64) int) int {
		bias, lambd := float64(n.AttrFloat("bias", 0)), float64(n.AttrFloat("lambd", 0.5))
		lo := op(kernels.ElemLess, x, c(-lambd))
		hi := op(kernels.ElemGreater, x, c(lambd))
		return op(kernels.ElemWhere, lo, op(kernels.ElemAdd, x, c(bias)),
			op(kernels.ElemWhere, hi, op(kernels.ElemSub, x, c(bias)), c(0)))
	},
	"Celu": func(n *graph.Node, x int, op func(kernels.ElemOp, ...int) int, c func(float64) int) int {
		alpha := float64(n.AttrFloat("alpha", 1))
		neg := op(kernels.ElemMul, c(alpha), op(kernels.ElemSub, op(kernels.ElemExp, op(kernels.ElemDiv, x, c(alpha))), c(1)))
		return op(kernels.ElemAdd, op(kernels.ElemMax, x, c(0)), op(kernels.ElemMin, neg, c(0)))
	},
}

// composite builds an op of compositeOps.
func (b *chainBuilder) composite(n *graph.Node, x int) (int, error) {
	build, ok := compositeOps[n.OpType]
	if !ok || n.Domain != "" {
		return 0, fmt.Errorf("%s is not an element-wise op", n.OpType)
	}
	if !b.typeOf(x).IsFloat() {
		return 0, fmt.Errorf("%s of %v: float inputs only", n.OpType, b.typeOf(x))
	}
	c := func(v float64) int { return b.fconst(x, v) }
	// must unwinds the nested op calls of build on the first error;
	// catchComposite recovers only this wrapper, so any other panic (an
	// index bug, a runtime.Error) still crashes where it happened.
	must := func(k int, err error) int {
		if err != nil {
			panic(compositeErr{err})
		}
		return k
	}
	var res int
	err := catchComposite(func() error {
		res = build(n, x, func(o kernels.ElemOp, a ...int) int { return must(b.op(o, a...)) }, c)
		return nil
	})
	return res, err
}

// chainStep is a built chain with the values it reads and writes.
func chainStep(lc *lowerCtx, b *chainBuilder, outs []*vinfo) (*stepDef, error) {
	if _, err := b.ch.Types(); err != nil {
		return nil, lc.unsupported("%v", err)
	}
	outTypes, err := b.ch.OutputTypes()
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	for k, o := range outs {
		et, err := lc.et(o)
		if err != nil {
			return nil, err
		}
		if et != outTypes[k] {
			return nil, lc.unsupported("output %s computes as %v but is stored as %v", o.name, outTypes[k], et)
		}
		if k > 0 && !shapeEqual(o.shape, outs[0].shape) {
			return nil, lc.unsupported("fused outputs %s and %s differ in shape (%s vs %s)", outs[0].name, o.name, symshape.FormatShape(outs[0].shape), symshape.FormatShape(o.shape))
		}
	}
	sd := &stepDef{kernel: "elementwise"}
	// An output may overwrite an input it matches element for element.
	for _, o := range outs {
		_, osz, _ := storeFor(o.dt, lc.fs)
		for _, a := range b.args {
			_, isz, _ := storeFor(a.dt, lc.fs)
			if osz != isz || !shapeEqual(a.shape, o.shape) {
				continue
			}
			for j, v := range lc.n.Inputs {
				if v != nil && lc.c.info(v) == a {
					sd.inPlace = append(sd.inPlace, [2]int{outIndex(lc.n, o), j})
				}
			}
		}
	}
	ch, args, argShape := b.ch, b.args, b.argShape
	sd.run = func(x *exec) error {
		shape := x.shape(outs[0])
		ins := make([]chainArg, len(args))
		for i, a := range args {
			s := x.shape(a)
			if argShape[i] != nil {
				d, err := x.eval(argShape[i])
				if err != nil {
					return err
				}
				s = make([]int, len(d))
				for j, v := range d {
					s[j] = int(v)
				}
			}
			ins[i] = chainArg{t: x.ref(a), shape: s}
		}
		refs := make([]tref, len(outs))
		for i, o := range outs {
			refs[i] = x.ref(o)
		}
		if x.err != nil {
			return x.err
		}
		return runChain(x.dev, ch, shape, ins, refs)
	}
	return sd, nil
}

// outIndex is the position of o among n's outputs.
func outIndex(n *graph.Node, o *vinfo) int {
	for i, v := range n.Outputs {
		if v == o.v {
			return i
		}
	}
	return -1
}

// lowerElementwise lowers one element-wise node, or a fused body, to a
// chain: both go through the same builder.
func lowerElementwise(lc *lowerCtx) (*stepDef, error) {
	n := lc.n
	b := newChainBuilder(lc)
	var outs []*vinfo
	if opKey(n.Domain, n.OpType) == fusedOp {
		body := n.AttrGraph("body")
		if body == nil {
			return nil, lc.unsupported("no GRAPH attribute \"body\"")
		}
		if err := b.fused(body); err != nil {
			return nil, lc.unsupported("%v", err)
		}
		for _, o := range n.Outputs {
			if o == nil {
				return nil, lc.unsupported("omitted output")
			}
			outs = append(outs, lc.c.info(o))
		}
	} else {
		for i, v := range n.Inputs {
			if v == nil {
				continue
			}
			if n.OpType == "CastLike" && i == 1 {
				continue // only its type matters
			}
			if err := b.external(v, lc.c.info(v)); err != nil {
				return nil, err
			}
		}
		if err := b.emit(n, lc.opset); err != nil {
			return nil, lc.unsupported("%v", err)
		}
		outs = []*vinfo{lc.out(0)}
		if err := b.output(b.node[n.Outputs[0]], outs[0]); err != nil {
			return nil, lc.unsupported("%v", err)
		}
	}
	return chainStep(lc, b, outs)
}

// fused adds a FusedElementwise body: its inputs bind to the node's inputs
// by position, names it takes from the enclosing graph bind to the node
// input of that name, and its outputs become the chain's outputs.
func (b *chainBuilder) fused(body *graph.Graph) error {
	n := b.lc.n
	if len(body.Inputs) > 0 && len(body.Inputs) != len(n.Inputs) {
		return fmt.Errorf("body has %d inputs, the node %d", len(body.Inputs), len(n.Inputs))
	}
	for i, bv := range body.Inputs {
		if n.Inputs[i] == nil {
			return fmt.Errorf("input %d is omitted", i)
		}
		if err := b.external(bv, b.lc.c.info(n.Inputs[i])); err != nil {
			return err
		}
	}
	for _, ov := range body.OuterValues() {
		var src *graph.Value
		for _, v := range n.Inputs {
			if v != nil && v.Name == ov.Name {
				src = v
			}
		}
		if src == nil {
			return fmt.Errorf("body reads %q, which is not an input of the node", ov.Name)
		}
		if err := b.external(ov, b.lc.c.info(src)); err != nil {
			return err
		}
	}
	for _, iv := range body.Initializers {
		if err := b.bodyConst(iv, iv.Const); err != nil {
			return err
		}
	}
	// Body nodes are default-domain ops: their attributes and inputs
	// follow the model's default opset, not the fused node's domain's.
	opset := b.lc.c.m.Opset("")
	for _, bn := range body.Nodes {
		if bn.OpType == "Constant" && bn.Domain == "" {
			if len(bn.Outputs) != 1 || bn.Outputs[0] == nil {
				return fmt.Errorf("body Constant %q has no output", bn.Name)
			}
			t := bn.Outputs[0].Const
			if t == nil {
				t = bn.AttrTensor("value")
			}
			if err := b.bodyConst(bn.Outputs[0], t); err != nil {
				return err
			}
			continue
		}
		if bn.OpType == "Identity" && bn.Domain == "" && len(bn.Inputs) == 1 && bn.Inputs[0] != nil {
			k, ok := b.node[bn.Inputs[0]]
			if !ok {
				return fmt.Errorf("body node %q reads %q before it is defined", bn.Name, bn.Inputs[0].Name)
			}
			b.node[bn.Outputs[0]] = k
			continue
		}
		if !isElementwise(opKey(bn.Domain, bn.OpType)) {
			return fmt.Errorf("body node %q (%s) is not element-wise", bn.Name, bn.OpType)
		}
		if err := b.emit(bn, opset); err != nil {
			return fmt.Errorf("body node %q: %w", bn.Name, err)
		}
	}
	if len(body.Outputs) != len(n.Outputs) {
		return fmt.Errorf("body has %d outputs, the node %d", len(body.Outputs), len(n.Outputs))
	}
	for i, o := range body.Outputs {
		k, ok := b.node[o]
		if !ok {
			return fmt.Errorf("body output %q is not computed by the body", o.Name)
		}
		if n.Outputs[i] == nil {
			return fmt.Errorf("output %d is omitted", i)
		}
		if err := b.output(k, b.lc.c.info(n.Outputs[i])); err != nil {
			return err
		}
	}
	return nil
}

// bodyConst makes a scalar constant of a fused body a chain constant.
func (b *chainBuilder) bodyConst(v *graph.Value, t *graph.Tensor) error {
	if t == nil || t.NumElements() != 1 {
		return fmt.Errorf("body constant %q: only scalar constants can be fused", v.Name)
	}
	h, err := hostFromGraph(t)
	if err != nil {
		return err
	}
	et, _, err := storeFor(t.Type, b.lc.fs)
	if err != nil || et < 0 {
		return fmt.Errorf("body constant %q: element type %v", v.Name, t.Type)
	}
	k, ok := b.constant(et, h)
	if !ok {
		return fmt.Errorf("body constant %q cannot be read", v.Name)
	}
	b.node[v] = k
	return nil
}

func isElementwise(key string) bool {
	if _, ok := kernels.ElemOpFor(key); ok || key == "CastLike" {
		return true
	}
	_, ok := compositeOps[key]
	return ok
}

// lowerBatchNorm lowers inference BatchNormalization as x*a + b per
// channel, with a = scale/sqrt(var+eps) and b = bias - mean*a computed once
// at Open when the statistics are constants.
func lowerBatchNorm(lc *lowerCtx) (*stepDef, error) {
	n := lc.n
	if n.AttrInt("training_mode", 0) != 0 || lc.used(1) || lc.used(2) {
		return nil, lc.unsupported("training mode (running statistics outputs)")
	}
	x, y := lc.in(0), lc.out(0)
	if x == nil || len(n.Inputs) < 5 {
		return nil, lc.unsupported("needs X, scale, B, mean and var")
	}
	if _, err := lc.floatStorage(x); err != nil {
		return nil, err
	}
	rank := len(x.shape)
	if rank < 2 {
		return nil, lc.unsupported("input of rank %d; want [N, C, ...]", rank)
	}
	eps := float64(n.AttrFloat("epsilon", 1e-5))
	stats := make([][]float64, 4)
	for i := 1; i < 5; i++ {
		vi := lc.in(i)
		if vi == nil {
			return nil, lc.unsupported("input %d is missing", i)
		}
		h, err := lc.c.constHost(vi)
		if err != nil {
			return batchNormChain(lc, eps)
		}
		if stats[i-1], err = h.floats(); err != nil {
			return nil, lc.unsupported("statistics input %d: %v", i, err)
		}
	}
	ch := len(stats[0])
	for i, s := range stats {
		if len(s) != ch {
			return nil, lc.unsupported("statistics input %d has %d elements, scale %d", i+1, len(s), ch)
		}
	}
	shape := make([]int, rank-1)
	shape[0] = ch
	for i := 1; i < len(shape); i++ {
		shape[i] = 1
	}
	a, bias := newHostTensor(x.dt, shape), newHostTensor(x.dt, shape)
	for c := 0; c < ch; c++ {
		k := stats[0][c] / math.Sqrt(stats[3][c]+eps)
		putFloat(x.dt, a.data, c, k)
		putFloat(x.dt, bias.data, c, stats[1][c]-stats[2][c]*k)
	}
	av := lc.newConst(n.Name+".scale", a)
	bv := lc.newConst(n.Name+".shift", bias)
	if !lc.host {
		av.devUse, bv.devUse = true, true
	}
	b := newChainBuilder(lc)
	var in [3]int
	for i, v := range []*vinfo{x, av, bv} {
		k, err := b.input(v)
		if err != nil {
			return nil, err
		}
		in[i] = k
	}
	m, err := b.op(kernels.ElemMul, in[0], in[1])
	if err == nil {
		m, err = b.op(kernels.ElemAdd, m, in[2])
	}
	if err == nil {
		err = b.output(m, y)
	}
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	return chainStep(lc, b, []*vinfo{y})
}

// batchNormChain is BatchNormalization with statistics computed at run
// time: (x - mean) / sqrt(var + eps) * scale + B in one chain, each
// per-channel vector read as [C, 1, ...].
func batchNormChain(lc *lowerCtx, eps float64) (*stepDef, error) {
	x, y := lc.in(0), lc.out(0)
	b := newChainBuilder(lc)
	var in [5]int
	for i := 0; i < 5; i++ {
		v := lc.in(i)
		k, err := b.input(v)
		if err != nil {
			return nil, err
		}
		in[i] = k
		if i > 0 {
			if len(v.shape) != 1 {
				return nil, lc.unsupported("statistics input %d has rank %d; want [C]", i, len(v.shape))
			}
			s := []symshape.Expr{v.shape[0]}
			for j := 2; j < len(x.shape); j++ {
				s = append(s, symshape.Const(1))
			}
			b.argShape[len(b.argShape)-1] = s
		}
	}
	// Operands: in[1] scale, in[2] B, in[3] mean, in[4] var.
	d, err := b.op(kernels.ElemSub, in[0], in[3])
	var r int
	if err == nil {
		r, err = b.op(kernels.ElemAdd, in[4], b.fconst(in[4], eps))
	}
	if err == nil {
		r, err = b.op(kernels.ElemSqrt, r)
	}
	if err == nil {
		d, err = b.op(kernels.ElemDiv, d, r)
	}
	if err == nil {
		d, err = b.op(kernels.ElemMul, d, in[1])
	}
	if err == nil {
		d, err = b.op(kernels.ElemAdd, d, in[2])
	}
	if err == nil {
		err = b.output(d, y)
	}
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	return chainStep(lc, b, []*vinfo{y})
}

// lowerConstantOfShape fills the output with the value attribute (float32
// zero by default) through a chain with no inputs.
func lowerConstantOfShape(lc *lowerCtx) (*stepDef, error) {
	y := lc.out(0)
	et, err := lc.chainType(y)
	if err != nil {
		return nil, err
	}
	h := newHostTensor(y.dt, []int{1})
	if t := lc.n.AttrTensor("value"); t != nil {
		if h, err = hostFromGraph(t); err != nil {
			return nil, lc.unsupported("value: %v", err)
		}
	}
	b := newChainBuilder(lc)
	k, ok := b.constant(et, h)
	if !ok {
		return nil, lc.unsupported("value of type %v", h.dt)
	}
	// A chain of a constant alone would be folded to nothing by some
	// compilers' view of unused inputs; Identity makes the store explicit.
	k, err = b.op(kernels.ElemIdentity, k)
	if err == nil {
		err = b.output(k, y)
	}
	if err != nil {
		return nil, lc.unsupported("%v", err)
	}
	return chainStep(lc, b, []*vinfo{y})
}
