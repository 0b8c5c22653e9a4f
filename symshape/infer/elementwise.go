package infer

import (
	"fmt"
	"math"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Element-wise ops: shapes broadcast multidirectionally; contents of small
// integer tensors are computed symbolically where the algebra can do so
// exactly (a comparison it cannot decide is left to run, never guessed).

func init() {
	// Unary ops whose output has the input's shape and type; no contents.
	register("", unaryRule(nil),
		"Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cos", "Cosh", "Sin", "Sinh", "Tan", "Tanh",
		"Exp", "Log", "Erf", "Sigmoid", "HardSigmoid", "HardSwish", "Elu", "Selu", "Celu", "LeakyRelu",
		"ThresholdedRelu", "Softplus", "Softsign", "Shrink", "Mish", "Gelu", "BitwiseNot",
		"Softmax", "LogSoftmax", "Hardmax", "LpNormalization", "LRN", "MeanVarianceNormalization",
		"Trilu", "ReverseSequence", "CumSum")
	register("", likeRule, "EyeLike", "RandomNormalLike", "RandomUniformLike", "Bernoulli")
	register("", dequantizeRule, "DequantizeLinear")
	register("", unaryRule(unaryIdentity), "Identity", "Floor", "Ceil", "Round")
	register("", unaryRule(unaryNeg), "Neg")
	register("", unaryRule(unaryAbs), "Abs")
	register("", unaryRule(unaryRelu), "Relu")
	register("", unaryRule(unarySign), "Sign")
	register("", unaryRule(unarySqrt), "Sqrt")
	register("", unaryRule(unaryReciprocal), "Reciprocal")
	register("", unaryRule(unaryNot), "Not")
	register("", boolUnary, "IsNaN", "IsInf")

	register("", binaryRule(binAdd), "Add")
	register("", binaryRule(binSub), "Sub")
	register("", binaryRule(binMul), "Mul")
	register("", binaryRule(binDiv), "Div")
	register("", binaryRule(binMod), "Mod")
	register("", binaryRule(binPow), "Pow")
	register("", binaryRule(nil), "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu")
	register("", compareRule(cmpEqual), "Equal")
	register("", compareRule(cmpLess), "Less")
	register("", compareRule(cmpLessEq), "LessOrEqual")
	register("", compareRule(cmpGreater), "Greater")
	register("", compareRule(cmpGreaterEq), "GreaterOrEqual")
	register("", compareRule(logicAnd), "And")
	register("", compareRule(logicOr), "Or")
	register("", compareRule(logicXor), "Xor")
	register("", variadicRule(varMax), "Max")
	register("", variadicRule(varMin), "Min")
	register("", variadicRule(varSum), "Sum")
	register("", variadicRule(nil), "Mean")
	register("", whereRule, "Where")
	register("", castRule, "Cast")
	register("", castLikeRule, "CastLike")
	register("", clipRule, "Clip")
	register("", quantizeRule, "QuantizeLinear")
}

// elemFn computes one output element from input elements; t is the output
// type. ok false means "not exactly representable: leave it to run".
type elemFn func(c *ctx, t dtype.Type, a []symshape.Expr) (symshape.Expr, bool)

// unaryRule: output 0 has input 0's shape and type.
func unaryRule(f elemFn) rule {
	return func(c *ctx, n *graph.Node) error {
		s, err := c.shapeOf(n, 0)
		if err != nil {
			return err
		}
		t := typeOf(n, 0)
		c.setOut(n, 0, s, t)
		if f != nil {
			c.mapElems(n, s, f, 0)
		}
		return nil
	}
}

// boolUnary: same shape, bool output; integers are never NaN nor infinite.
func boolUnary(c *ctx, n *graph.Node) error {
	s, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	c.setOut(n, 0, s, dtype.Bool)
	c.mapElems(n, s, func(*ctx, dtype.Type, []symshape.Expr) (symshape.Expr, bool) { return symshape.Const(0), true }, 0)
	return nil
}

// mapElems computes output 0's contents from the given inputs' contents
// broadcast to out.
func (c *ctx) mapElems(n *graph.Node, out []symshape.Expr, f elemFn, ins ...int) {
	dims, ok := constDims(out)
	if !ok {
		return
	}
	sm := make([]small, len(ins))
	for j, i := range ins {
		s, ok := c.smallIn(n, i)
		if !ok {
			return
		}
		sm[j] = s
	}
	ov := output(n, 0)
	if ov == nil {
		return
	}
	t := ov.Type
	e, ok := mapBroadcast(dims, sm, func(a []symshape.Expr) (symshape.Expr, bool) { return f(c, t, a) })
	if ok {
		c.setElems(n, 0, e)
	}
}

func unaryIdentity(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) { return a[0], true }
func unaryNeg(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return symshape.Neg(a[0]), true
}

func unaryAbs(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	switch c.sign(a[0]) {
	case 1, 0:
		return a[0], true
	case -1:
		return symshape.Neg(a[0]), true
	}
	return symshape.Max(a[0], symshape.Neg(a[0])), true
}

func unaryRelu(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return symshape.Max(a[0], symshape.Const(0)), true
}

func unarySign(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	switch c.cmp(a[0], symshape.Const(0)) {
	case symshape.Greater:
		return symshape.Const(1), true
	case symshape.Less:
		return symshape.Const(-1), true
	case symshape.Equal:
		return symshape.Const(0), true
	}
	return symshape.Expr{}, false
}

func unarySqrt(c *ctx, t dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	k, ok := a[0].Const()
	if !ok || k < 0 {
		return symshape.Expr{}, false
	}
	r := int64(math.Sqrt(float64(k)))
	for r*r > k {
		r--
	}
	for (r+1)*(r+1) <= k {
		r++
	}
	if r*r != k && t.IsFloat() {
		return symshape.Expr{}, false
	}
	return symshape.Const(r), true
}

func unaryReciprocal(c *ctx, t dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	k, ok := a[0].Const()
	if !ok || (k != 1 && k != -1) {
		return symshape.Expr{}, false
	}
	return a[0], true
}

func unaryNot(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	k, ok := a[0].Const()
	if !ok {
		return symshape.Expr{}, false
	}
	return b2e(k == 0), true
}

// sign classifies a's sign as far as it is proven: 1 for non-negative
// (a > 0 or a >= 0), -1 for non-positive (a < 0 or a <= 0), 0 for exactly 0
// and 2 when unknown. Callers treat 0 like 1 where zero is harmless.
func (c *ctx) sign(a symshape.Expr) int {
	switch c.cmp(a, symshape.Const(0)) {
	case symshape.Greater, symshape.GreaterEq:
		return 1
	case symshape.Less, symshape.LessEq:
		return -1
	case symshape.Equal:
		return 0
	}
	return 2
}

func b2e(b bool) symshape.Expr {
	if b {
		return symshape.Const(1)
	}
	return symshape.Const(0)
}

// binaryRule: output 0 is the broadcast of inputs 0 and 1, typed like input 0.
func binaryRule(f elemFn) rule {
	return func(c *ctx, n *graph.Node) error {
		a, err := c.shapeOf(n, 0)
		if err != nil {
			return err
		}
		b, err := c.shapeOf(n, 1)
		if err != nil {
			return err
		}
		out, err := c.broadcast("inputs", a, b)
		if err != nil {
			return err
		}
		c.setOut(n, 0, out, typeOf(n, 0))
		if f != nil {
			g := f
			if n.OpType == "Mod" && n.AttrInt("fmod", 0) != 0 {
				g = binFmod
			}
			c.mapElems(n, out, g, 0, 1)
		}
		return nil
	}
}

func binAdd(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return symshape.Add(a[0], a[1]), true
}

func binSub(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return symshape.Sub(a[0], a[1]), true
}

func binMul(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return symshape.Mul(a[0], a[1]), true
}

// binDiv divides: integers truncate toward zero (ONNX), so FloorDiv is used
// only where the signs make floor and truncation agree; floats must divide
// exactly to stay integers.
func binDiv(c *ctx, t dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	x, y := a[0], a[1]
	cx, okx := x.Const()
	cy, oky := y.Const()
	if oky && cy == 0 {
		return symshape.Expr{}, false
	}
	if t.IsFloat() {
		if okx && oky {
			if cx%cy != 0 {
				return symshape.Expr{}, false
			}
			return symshape.Const(cx / cy), true
		}
		q := symshape.FloorDiv(x, y)
		if !q.IsValid() || !symshape.Mul(q, y).Equal(x) {
			return symshape.Expr{}, false
		}
		return q, true
	}
	if okx && oky {
		return symshape.Const(cx / cy), true // Go's / truncates like ONNX
	}
	sx, sy := c.sign(x), c.sign(y)
	switch {
	case sx <= 1 && sx >= 0 && sy == 1:
		return symshape.FloorDiv(x, y), true
	case sx == -1 && sy == 1:
		return symshape.Neg(symshape.FloorDiv(symshape.Neg(x), y)), true
	case sx <= 1 && sx >= 0 && sy == -1:
		return symshape.Neg(symshape.FloorDiv(x, symshape.Neg(y))), true
	case sx == -1 && sy == -1:
		return symshape.FloorDiv(symshape.Neg(x), symshape.Neg(y)), true
	}
	return symshape.Expr{}, false
}

// binMod is ONNX's integer Mod (fmod=0): the remainder takes the divisor's
// sign, which is symshape.Mod.
func binMod(c *ctx, t dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	if c, ok := a[1].Const(); ok && c == 0 {
		return symshape.Expr{}, false
	}
	return symshape.Mod(a[0], a[1]), true
}

// binFmod is C's fmod: the remainder takes the dividend's sign; it agrees
// with the floor remainder when both are non-negative.
func binFmod(c *ctx, t dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	cx, okx := a[0].Const()
	cy, oky := a[1].Const()
	if okx && oky {
		if cy == 0 {
			return symshape.Expr{}, false
		}
		return symshape.Const(cx % cy), true
	}
	sx, sy := c.sign(a[0]), c.sign(a[1])
	if sx >= 0 && sx <= 1 && sy == 1 {
		return symshape.Mod(a[0], a[1]), true
	}
	return symshape.Expr{}, false
}

// binPow raises to small constant non-negative integer powers.
func binPow(c *ctx, t dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	k, ok := a[1].Const()
	if !ok || k < 0 || k > 8 {
		return symshape.Expr{}, false
	}
	r := symshape.Const(1)
	for i := int64(0); i < k; i++ {
		r = symshape.Mul(r, a[0])
	}
	return r, true
}

// compareRule: broadcast of inputs 0 and 1, bool output.
func compareRule(f elemFn) rule {
	return func(c *ctx, n *graph.Node) error {
		a, err := c.shapeOf(n, 0)
		if err != nil {
			return err
		}
		b, err := c.shapeOf(n, 1)
		if err != nil {
			return err
		}
		out, err := c.broadcast("inputs", a, b)
		if err != nil {
			return err
		}
		c.setOut(n, 0, out, dtype.Bool)
		c.mapElems(n, out, f, 0, 1)
		return nil
	}
}

// decide turns a proven relation into 0/1 when it settles the question:
// yes lists the relations that imply true, no those that imply false.
func (c *ctx) decide(a, b symshape.Expr, yes, no []symshape.Relation) (symshape.Expr, bool) {
	r := c.cmp(a, b)
	for _, q := range yes {
		if r == q {
			return symshape.Const(1), true
		}
	}
	for _, q := range no {
		if r == q {
			return symshape.Const(0), true
		}
	}
	return symshape.Expr{}, false
}

func cmpEqual(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	if a[0].Equal(a[1]) {
		return symshape.Const(1), true
	}
	return c.decide(a[0], a[1], []symshape.Relation{symshape.Equal}, []symshape.Relation{symshape.Less, symshape.Greater})
}

func cmpLess(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return c.decide(a[0], a[1], []symshape.Relation{symshape.Less}, []symshape.Relation{symshape.Equal, symshape.Greater, symshape.GreaterEq})
}

func cmpLessEq(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return c.decide(a[0], a[1], []symshape.Relation{symshape.Less, symshape.LessEq, symshape.Equal}, []symshape.Relation{symshape.Greater})
}

func cmpGreater(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return c.decide(a[0], a[1], []symshape.Relation{symshape.Greater}, []symshape.Relation{symshape.Equal, symshape.Less, symshape.LessEq})
}

func cmpGreaterEq(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return c.decide(a[0], a[1], []symshape.Relation{symshape.Greater, symshape.GreaterEq, symshape.Equal}, []symshape.Relation{symshape.Less})
}

func logic(a []symshape.Expr, f func(x, y bool) bool) (symshape.Expr, bool) {
	x, ok1 := a[0].Const()
	y, ok2 := a[1].Const()
	if !ok1 || !ok2 {
		return symshape.Expr{}, false
	}
	return b2e(f(x != 0, y != 0)), true
}

func logicAnd(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return logic(a, func(x, y bool) bool { return x && y })
}

func logicOr(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return logic(a, func(x, y bool) bool { return x || y })
}

func logicXor(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return logic(a, func(x, y bool) bool { return x != y })
}

// variadicRule: the broadcast of every input, typed like input 0.
func variadicRule(f elemFn) rule {
	return func(c *ctx, n *graph.Node) error {
		var shapes [][]symshape.Expr
		var idx []int
		for i, v := range n.Inputs {
			if v == nil {
				continue
			}
			s, err := c.shapeOf(n, i)
			if err != nil {
				return err
			}
			shapes = append(shapes, s)
			idx = append(idx, i)
		}
		if len(shapes) == 0 {
			return fmt.Errorf("needs at least one input")
		}
		out, err := c.broadcast("inputs", shapes...)
		if err != nil {
			return err
		}
		c.setOut(n, 0, out, typeOf(n, idx[0]))
		if f != nil {
			c.mapElems(n, out, f, idx...)
		}
		return nil
	}
}

func varMax(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return symshape.MaxOf(a...), true
}
func varMin(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return symshape.MinOf(a...), true
}
func varSum(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
	return symshape.Sum(a...), true
}

// whereRule broadcasts condition, X and Y; contents need a known condition.
func whereRule(c *ctx, n *graph.Node) error {
	var shapes [][]symshape.Expr
	for i := 0; i < 3; i++ {
		s, err := c.shapeOf(n, i)
		if err != nil {
			return err
		}
		shapes = append(shapes, s)
	}
	out, err := c.broadcast("condition, X and Y", shapes...)
	if err != nil {
		return err
	}
	c.setOut(n, 0, out, typeOf(n, 1))
	c.mapElems(n, out, func(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
		k, ok := a[0].Const()
		if !ok {
			return symshape.Expr{}, false
		}
		if k != 0 {
			return a[1], true
		}
		return a[2], true
	}, 0, 1, 2)
	return nil
}

// castRule keeps the shape; contents survive casts between integer types,
// to and from floats (they hold integers here) and to bool when the sign is
// decidable.
func castRule(c *ctx, n *graph.Node) error {
	to := dtype.Type(n.AttrInt("to", 0))
	if !to.Valid() || to == dtype.Undefined {
		return fmt.Errorf("attribute to=%d is not a valid element type", n.AttrInt("to", 0))
	}
	return c.castTo(n, to)
}

// castLikeRule casts to input 1's type.
func castLikeRule(c *ctx, n *graph.Node) error {
	to := typeOf(n, 1)
	if to == dtype.Undefined {
		return fmt.Errorf("input 1 (target_type) has no known element type")
	}
	return c.castTo(n, to)
}

func (c *ctx) castTo(n *graph.Node, to dtype.Type) error {
	s, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	c.setOut(n, 0, s, to)
	c.mapElems(n, s, func(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
		return c.castElem(a[0], to)
	}, 0)
	return nil
}

// castElem converts one integer-valued element to type to.
func (c *ctx) castElem(x symshape.Expr, to dtype.Type) (symshape.Expr, bool) {
	k, isConst := x.Const()
	if to == dtype.Bool {
		if isConst {
			return b2e(k != 0), true
		}
		switch c.cmp(x, symshape.Const(0)) {
		case symshape.Greater, symshape.Less:
			return symshape.Const(1), true
		case symshape.Equal:
			return symshape.Const(0), true
		}
		return symshape.Expr{}, false
	}
	if !isConst {
		// Symbolic sizes fit every integer type and float32 a model would
		// cast them to; the 16-bit floats hold integers exactly only up to
		// 2048 (float16) and 256 (bfloat16), so those are left to run.
		if to == dtype.Float16 || to == dtype.BFloat16 {
			return symshape.Expr{}, false
		}
		return x, true
	}
	switch to {
	case dtype.Int8:
		k = int64(int8(k))
	case dtype.Uint8:
		k = int64(uint8(k))
	case dtype.Int16:
		k = int64(int16(k))
	case dtype.Uint16:
		k = int64(uint16(k))
	case dtype.Int32:
		k = int64(int32(k))
	case dtype.Uint32:
		k = int64(uint32(k))
	case dtype.Float16:
		if k > 2048 || k < -2048 {
			return symshape.Expr{}, false
		}
	case dtype.BFloat16:
		if k > 256 || k < -256 {
			return symshape.Expr{}, false
		}
	case dtype.Float32:
		if k > 1<<24 || k < -(1<<24) {
			return symshape.Expr{}, false
		}
	}
	return symshape.Const(k), true
}

// clipRule keeps the shape; contents clamp when the bounds are known.
func clipRule(c *ctx, n *graph.Node) error {
	s, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	c.setOut(n, 0, s, typeOf(n, 0))
	if c.opset() >= 11 {
		var lo, hi []symshape.Expr
		if input(n, 1) != nil {
			e, ok := c.elems(n, 1)
			if !ok || len(e) != 1 {
				return nil
			}
			lo = e
		}
		if input(n, 2) != nil {
			e, ok := c.elems(n, 2)
			if !ok || len(e) != 1 {
				return nil
			}
			hi = e
		}
		c.mapElems(n, s, func(c *ctx, _ dtype.Type, a []symshape.Expr) (symshape.Expr, bool) {
			x := a[0]
			if lo != nil {
				x = symshape.Max(x, lo[0])
			}
			if hi != nil {
				x = symshape.Min(x, hi[0])
			}
			return x, true
		}, 0)
	}
	return nil
}

// likeRule: input 0's shape; the dtype attribute, when given, sets the type.
func likeRule(c *ctx, n *graph.Node) error {
	s, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	t := typeOf(n, 0)
	if a := n.AttrInt("dtype", 0); a != 0 {
		t = dtype.Type(a)
	}
	c.setOut(n, 0, s, t)
	return nil
}

// dequantizeRule: x's shape, the scale's type.
func dequantizeRule(c *ctx, n *graph.Node) error {
	s, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	t := dtype.Float32
	if sc := input(n, 1); sc != nil && sc.Type != dtype.Undefined {
		t = sc.Type
	}
	c.setOut(n, 0, s, t)
	return nil
}

// quantizeRule: y has x's shape and the zero point's type (uint8 default).
func quantizeRule(c *ctx, n *graph.Node) error {
	s, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	t := dtype.Uint8
	if zp := input(n, 2); zp != nil {
		t = zp.Type
	}
	if a := n.AttrInt("output_dtype", 0); a != 0 {
		t = dtype.Type(a)
	}
	c.setOut(n, 0, s, t)
	return nil
}
