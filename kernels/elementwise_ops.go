package kernels

import (
	"fmt"
	"math"
	"slices"
)

// elemOpTable is the one definition of every chain operation: what ONNX op
// lowers to it and how its attributes are read, how many arguments it takes,
// its result type, its OpenCL C expression and its host reference. The type
// checker (Chain.Types), the source generator (Chain.Source), the reference
// (RunChainRef) and the engine's list of element-wise lowerings
// (ElemONNXOps) all read this table, so a new op is one entry here.
var elemOpTable = map[ElemOp]elemOpDef{
	ElemInput: {
		args: argsNone,
		typ: func(x *typeCtx) (ElemType, error) {
			if x.n.Input < 0 || x.n.Input >= len(x.c.Inputs) {
				return 0, fmt.Errorf("input slot %d of %d", x.n.Input, len(x.c.Inputs))
			}
			return x.c.Inputs[x.n.Input], nil
		},
		expr: func(x *exprCtx) (string, error) { return chainLoad(x.t, x.n.Input), nil },
		ref:  func(x *refCtx) (ewVal, error) { return x.load(x.n.Input), nil },
	},
	ElemConst: {
		args: argsNone,
		typ: func(x *typeCtx) (ElemType, error) {
			n := x.n
			switch {
			case !n.To.valid():
				return 0, fmt.Errorf("invalid constant type %v", n.To)
			case n.To.IsFloat() && n.IntValue != 0:
				return 0, fmt.Errorf("%v constant given in IntValue; float constants use Value", n.To)
			case !n.To.IsFloat() && n.Value != 0:
				return 0, fmt.Errorf("%v constant given in Value; integer and bool constants use IntValue", n.To)
			}
			return n.To, nil
		},
		expr: func(x *exprCtx) (string, error) {
			n, t := x.n, x.t
			switch {
			case t == EF16:
				return chainFloatLit(float64(ewRoundHalf(float32(n.Value)))), nil
			case t.IsFloat():
				return chainFloatLit(n.Value), nil
			case t == EBool:
				if n.IntValue != 0 {
					return "1", nil
				}
				return "0", nil
			}
			return chainLongLit(ewWrap(t, n.IntValue)), nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			switch {
			case x.t == EF16:
				return ewVal{f: float64(ewRoundHalf(float32(x.n.Value)))}, nil
			case x.t.IsFloat():
				return ewVal{f: ewF32(x.n.Value)}, nil
			}
			return x.I(x.n.IntValue)
		},
	},
	// ONNX Identity lowers as an alias, not a chain; chains use this node
	// where a value passes through (a one-input Max, a stored constant).
	ElemIdentity: {
		args: argsUnary, typ: typAnyUnary,
		expr: func(x *exprCtx) (string, error) { return x.v(0), nil },
		ref:  func(x *refCtx) (ewVal, error) { return x.a, nil },
	},

	// ---- arithmetic ----
	ElemAdd: arith("Add", "+", func(a, b float64) float64 { return a + b }, func(a, b uint64) uint64 { return a + b }),
	ElemSub: arith("Sub", "-", func(a, b float64) float64 { return a - b }, func(a, b uint64) uint64 { return a - b }),
	ElemMul: arith("Mul", "*", func(a, b float64) float64 { return a * b }, func(a, b uint64) uint64 { return a * b }),
	ElemDiv: {
		onnx: "Div", args: argsBinary, typ: typNumBinary,
		expr: func(x *exprCtx) (string, error) {
			if x.fl() {
				return x.v(0) + " / " + x.v(1), nil
			}
			return chainWrap(x.t, "ew_idiv("+x.v(0)+", "+x.v(1)+")"), nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			if x.fl() {
				return x.F(x.a.f / x.b.f)
			}
			return x.I(ewRefIDiv(x.a.i, x.b.i))
		},
	},
	ElemMod: {
		onnx: "Mod", args: argsBinary,
		attrs: func(n *ChainNode, a ElemAttrs) { n.Fmod = int(a.AttrInt("fmod", 0)) },
		typ: func(x *typeCtx) (ElemType, error) {
			t, err := x.first(numeric)
			if err != nil {
				return 0, err
			}
			if x.n.Fmod != 0 && x.n.Fmod != 1 {
				return 0, fmt.Errorf("fmod=%d, want 0 or 1", x.n.Fmod)
			}
			if t.IsFloat() && x.n.Fmod != 1 {
				return 0, fmt.Errorf("float Mod needs fmod=1 (ONNX)")
			}
			return t, nil
		},
		expr: func(x *exprCtx) (string, error) {
			if x.fl() {
				return "fmod(" + x.v(0) + ", " + x.v(1) + ")", nil
			}
			if x.n.Fmod == 1 {
				return chainWrap(x.t, "ew_irem("+x.v(0)+", "+x.v(1)+")"), nil
			}
			return chainWrap(x.t, "ew_imod("+x.v(0)+", "+x.v(1)+")"), nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			switch {
			case x.fl():
				return x.F(math.Mod(x.a.f, x.b.f))
			case x.n.Fmod == 1:
				return x.I(ewRefIRem(x.a.i, x.b.i))
			}
			return x.I(ewRefIMod(x.a.i, x.b.i))
		},
	},
	ElemPow: {
		onnx: "Pow", args: argsBinary,
		typ: func(x *typeCtx) (ElemType, error) {
			if x.at(0) == EBool || x.at(1) == EBool {
				return 0, fmt.Errorf("bool arguments are not allowed")
			}
			return x.at(0), nil
		},
		expr: func(x *exprCtx) (string, error) {
			t, fl, et := x.t, x.fl(), x.vt(1)
			v0, v1 := x.v(0), x.v(1)
			if x.c.isConstTwo(x.n.Args[1]) {
				if fl {
					return v0 + " * " + v0, nil
				}
				return chainWrap(t, "(long)((ulong)"+v0+" * (ulong)"+v0+")"), nil
			}
			switch {
			case fl && et.IsFloat():
				return "pow(" + v0 + ", " + v1 + ")", nil
			case fl:
				return "pow(" + v0 + ", (float)" + v1 + ")", nil
			case et.IsFloat():
				return chainWrap(t, "ew_f2l(pow((float)"+v0+", "+v1+"))"), nil
			}
			return chainWrap(t, "ew_ipow("+v0+", "+v1+")"), nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			a, b := x.a, x.b
			switch {
			case x.fl() && x.at(1).IsFloat():
				return x.F(math.Pow(a.f, b.f))
			case x.fl():
				return x.F(math.Pow(a.f, float64(float32(b.i))))
			case x.at(1).IsFloat():
				return x.I(ewSatTrunc(ewF32(math.Pow(float64(float32(a.i)), b.f))))
			}
			return x.I(ewRefIPow(a.i, b.i))
		},
	},
	ElemPRelu: {
		onnx: "PRelu", args: argsBinary, typ: typNumBinary,
		expr: func(x *exprCtx) (string, error) {
			v0, v1 := x.v(0), x.v(1)
			if x.fl() {
				return v0 + " < 0.0f ? " + v1 + " * " + v0 + " : " + v0, nil
			}
			return v0 + " < 0 ? " + chainWrap(x.t, "(long)((ulong)"+v1+" * (ulong)"+v0+")") + " : " + v0, nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			a, b := x.a, x.b
			if x.fl() {
				if a.f < 0 {
					return x.F(b.f * a.f)
				}
				return a, nil
			}
			if a.i < 0 {
				return x.I(int64(uint64(b.i) * uint64(a.i)))
			}
			return a, nil
		},
	},

	// ---- variadic ----
	ElemMax: minMax("Max", "ew_fmax", ">", func(acc, x float64) bool { return acc > x }, func(acc, x int64) bool { return x > acc }),
	ElemMin: minMax("Min", "ew_fmin", "<", func(acc, x float64) bool { return acc < x }, func(acc, x int64) bool { return x < acc }),
	ElemSum: {
		onnx: "Sum", args: argsVariadic, typ: typNumVariadic, oneIsIdentity: true,
		expr: sumExpr, ref: sumRef,
	},
	ElemMean: {
		onnx: "Mean", args: argsVariadic,
		typ:  func(x *typeCtx) (ElemType, error) { return x.first(isFloat) },
		expr: sumExpr, ref: sumRef,
	},

	// ---- comparison and logic ----
	ElemEqual: {
		onnx: "Equal", args: argsBinary,
		typ: func(x *typeCtx) (ElemType, error) {
			_, err := x.first(anyType)
			return EBool, err
		},
		expr: compareExpr("=="), ref: compareRef(func(c int) bool { return c == 0 }),
	},
	ElemLess:           compare("Less", "<", func(c int) bool { return c == -1 }),
	ElemGreater:        compare("Greater", ">", func(c int) bool { return c == 1 }),
	ElemLessOrEqual:    compare("LessOrEqual", "<=", func(c int) bool { return c == -1 || c == 0 }),
	ElemGreaterOrEqual: compare("GreaterOrEqual", ">=", func(c int) bool { return c == 1 || c == 0 }),
	ElemAnd:            logic("And", "&", func(a, b bool) bool { return a && b }),
	ElemOr:             logic("Or", "|", func(a, b bool) bool { return a || b }),
	ElemXor:            logic("Xor", "^", func(a, b bool) bool { return a != b }),
	ElemNot: {
		onnx: "Not", args: argsUnary,
		typ: func(x *typeCtx) (ElemType, error) {
			if x.at(0) != EBool {
				return 0, fmt.Errorf("argument is %v, want bool", x.at(0))
			}
			return EBool, nil
		},
		expr: func(x *exprCtx) (string, error) { return x.v(0) + " ^ 1", nil },
		ref:  func(x *refCtx) (ewVal, error) { return x.B(x.a.i == 0) },
	},
	ElemWhere: {
		onnx: "Where", args: [2]int{3, 3},
		typ: func(x *typeCtx) (ElemType, error) {
			if x.at(0) != EBool {
				return 0, fmt.Errorf("condition is %v, want bool", x.at(0))
			}
			if x.at(1) != x.at(2) {
				return 0, fmt.Errorf("branches are %v and %v; they must match", x.at(1), x.at(2))
			}
			return x.at(1), nil
		},
		expr: func(x *exprCtx) (string, error) { return x.v(0) + " ? " + x.v(1) + " : " + x.v(2), nil },
		ref: func(x *refCtx) (ewVal, error) {
			if x.a.i != 0 {
				return x.arg(1), nil
			}
			return x.arg(2), nil
		},
	},

	// ---- conversion and clamping ----
	// Cast's target is set by the caller: the engine maps ONNX's "to" to
	// the type it stores that element type as.
	ElemCast: {
		onnx: "Cast", args: argsUnary,
		typ: func(x *typeCtx) (ElemType, error) {
			if !x.n.To.valid() {
				return 0, fmt.Errorf("invalid target type %v", x.n.To)
			}
			return x.n.To, nil
		},
		expr: func(x *exprCtx) (string, error) {
			if x.t == EF16 && x.vt(0).IsFloat() && !x.c.feedsNode(x.i) {
				// Only stored: vstore_half_rte rounds exactly like ew_round_half.
				return x.v(0), nil
			}
			return chainCast(x.vt(0), x.t, x.v(0)), nil
		},
		ref: func(x *refCtx) (ewVal, error) { return ewRefCast(x.at(0), x.t, x.a), nil },
	},
	// Clip's bounds are arguments 1 and 2 (-1 when absent); Clip-6's
	// attribute bounds are the caller's to turn into constants.
	ElemClip: {
		onnx: "Clip", args: [2]int{1, 3},
		typ: func(x *typeCtx) (ElemType, error) {
			if x.n.Args[0] < 0 {
				return 0, fmt.Errorf("the clipped argument is absent")
			}
			t := x.at(0)
			if err := numeric(t); err != nil {
				return 0, err
			}
			for k := 1; k < len(x.n.Args); k++ {
				if x.n.Args[k] >= 0 && x.at(k) != t {
					return 0, fmt.Errorf("bound %d is %v, input is %v; they must match", k, x.at(k), t)
				}
			}
			return t, nil
		},
		expr: func(x *exprCtx) (string, error) {
			// ONNX: Min(max, Max(x, min)), so min > max yields max;
			// comparisons rather than fmin/fmax keep NaN.
			n := x.n
			e := x.v(0)
			if len(n.Args) > 1 && n.Args[1] >= 0 {
				e = "(" + e + " < " + x.v(1) + " ? " + x.v(1) + " : " + e + ")"
			}
			if len(n.Args) > 2 && n.Args[2] >= 0 {
				e = "(" + e + " > " + x.v(2) + " ? " + x.v(2) + " : " + e + ")"
			}
			return e, nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			n, fl := x.n, x.fl()
			v := x.a
			if len(n.Args) > 1 && n.Args[1] >= 0 {
				if lo := x.b; (fl && v.f < lo.f) || (!fl && v.i < lo.i) {
					v = lo
				}
			}
			if len(n.Args) > 2 && n.Args[2] >= 0 {
				if hi := x.arg(2); (fl && v.f > hi.f) || (!fl && v.i > hi.i) {
					v = hi
				}
			}
			return v, nil
		},
	},

	// ---- numeric unary (integers too) ----
	ElemRelu: {
		onnx: "Relu", args: argsUnary, typ: typNumUnary,
		expr: func(x *exprCtx) (string, error) {
			if x.fl() {
				return x.v(0) + " < 0.0f ? 0.0f : " + x.v(0), nil
			}
			return x.v(0) + " < 0 ? 0L : " + x.v(0), nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			if (x.fl() && x.a.f < 0) || (!x.fl() && x.a.i < 0) {
				return ewVal{}, nil
			}
			return x.a, nil
		},
	},
	ElemNeg: {
		onnx: "Neg", args: argsUnary, typ: typNumUnary,
		expr: func(x *exprCtx) (string, error) {
			if x.fl() {
				return "-" + x.v(0), nil
			}
			return chainWrap(x.t, "(long)(0UL - (ulong)"+x.v(0)+")"), nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			if x.fl() {
				return ewVal{f: -x.a.f}, nil
			}
			return x.I(int64(-uint64(x.a.i)))
		},
	},
	ElemAbs: {
		onnx: "Abs", args: argsUnary, typ: typNumUnary,
		expr: func(x *exprCtx) (string, error) {
			if x.fl() {
				return "fabs(" + x.v(0) + ")", nil
			}
			return chainWrap(x.t, x.v(0)+" < 0 ? (long)(0UL - (ulong)"+x.v(0)+") : "+x.v(0)), nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			if x.fl() {
				return ewVal{f: math.Abs(x.a.f)}, nil
			}
			if x.a.i < 0 {
				return x.I(int64(-uint64(x.a.i)))
			}
			return x.a, nil
		},
	},
	ElemSign: {
		onnx: "Sign", args: argsUnary, typ: typNumUnary,
		expr: func(x *exprCtx) (string, error) {
			v := x.v(0)
			if x.fl() {
				return v + " > 0.0f ? 1.0f : (" + v + " < 0.0f ? -1.0f : " + v + ")", nil
			}
			return "(long)((" + v + " > 0) - (" + v + " < 0))", nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			a := x.a
			if x.fl() {
				switch {
				case a.f > 0:
					return ewVal{f: 1}, nil
				case a.f < 0:
					return ewVal{f: -1}, nil
				}
				return a, nil
			}
			return ewVal{i: ewB2I(a.i > 0) - ewB2I(a.i < 0)}, nil
		},
	},

	// ---- float unary ----
	ElemLeakyRelu: {
		onnx: "LeakyRelu", args: argsUnary, typ: typFloatUnary,
		attrs: func(n *ChainNode, a ElemAttrs) { n.Alpha = float64(a.AttrFloat("alpha", 0.01)) },
		expr: func(x *exprCtx) (string, error) {
			v := x.v(0)
			return v + " < 0.0f ? " + chainFloatLit(x.n.Alpha) + " * " + v + " : " + v, nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			if x.a.f < 0 {
				return x.F(ewF32(x.n.Alpha) * x.a.f)
			}
			return x.a, nil
		},
	},
	ElemSigmoid: floatFunc("Sigmoid", "ew_sigmoid", ewRefSigmoid),
	ElemHardSigmoid: {
		onnx: "HardSigmoid", args: argsUnary, typ: typFloatUnary,
		attrs: func(n *ChainNode, a ElemAttrs) {
			n.Alpha = float64(a.AttrFloat("alpha", 0.2))
			n.Beta = float64(a.AttrFloat("beta", 0.5))
		},
		expr: func(x *exprCtx) (string, error) {
			return "ew_hardsigmoid(" + x.v(0) + ", " + chainFloatLit(x.n.Alpha) + ", " + chainFloatLit(x.n.Beta) + ")", nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			return x.F(ewRefHardSigmoid(x.a.f, ewF32(x.n.Alpha), ewF32(x.n.Beta)))
		},
	},
	ElemHardSwish: {
		onnx: "HardSwish", args: argsUnary, typ: typFloatUnary,
		expr: func(x *exprCtx) (string, error) { return "ew_hardswish(" + x.v(0) + ")", nil },
		ref: gatedRef(func(x *refCtx) (ewVal, error) {
			return x.F(x.a.f * ewRefHardSigmoid(x.a.f, ewF32(1.0/6), 0.5))
		}),
	},
	ElemTanh: floatFunc("Tanh", "tanh", math.Tanh),
	ElemErf:  floatFunc("Erf", "ew_erf", math.Erf),
	ElemGelu: {
		onnx: "Gelu", args: argsUnary, typ: typFloatUnary,
		attrs: func(n *ChainNode, a ElemAttrs) { n.Approximate = a.AttrString("approximate", "none") },
		expr: func(x *exprCtx) (string, error) {
			switch x.n.Approximate {
			case "", "none":
				return "ew_gelu_erf(" + x.v(0) + ")", nil
			case "tanh":
				return "ew_gelu_tanh(" + x.v(0) + ")", nil
			}
			return "", fmt.Errorf("Gelu approximate=%q, want none or tanh", x.n.Approximate)
		},
		ref: gatedRef(func(x *refCtx) (ewVal, error) {
			v := x.a.f
			switch x.n.Approximate {
			case "", "none":
				return x.F(0.5 * v * math.Erfc(-v/math.Sqrt2))
			case "tanh":
				return x.F(v / (1 + math.Exp(-2*math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
			}
			return ewVal{}, fmt.Errorf("Gelu approximate=%q, want none or tanh", x.n.Approximate)
		}),
	},
	ElemQuickGelu: {
		onnx: "com.microsoft.QuickGelu", args: argsUnary, typ: typFloatUnary,
		attrs: func(n *ChainNode, a ElemAttrs) { n.Alpha = float64(a.AttrFloat("alpha", 1.702)) },
		expr: func(x *exprCtx) (string, error) {
			return "ew_quickgelu(" + x.v(0) + ", " + chainFloatLit(x.n.Alpha) + ")", nil
		},
		ref: gatedRef(func(x *refCtx) (ewVal, error) {
			return x.F(x.a.f * ewRefSigmoid(ewF32(x.n.Alpha)*x.a.f))
		}),
	},
	ElemExp:        floatFunc("Exp", "exp", math.Exp),
	ElemLog:        floatFunc("Log", "log", math.Log),
	ElemSqrt:       floatFunc("Sqrt", "sqrt", math.Sqrt),
	ElemReciprocal: floatOp("Reciprocal", func(v string) string { return "1.0f / " + v }, func(v float64) float64 { return 1 / v }),
	ElemFloor:      floatFunc("Floor", "floor", math.Floor),
	ElemCeil:       floatFunc("Ceil", "ceil", math.Ceil),
	// rint rounds ties to even in the default rounding mode.
	ElemRound:    floatFunc("Round", "rint", math.RoundToEven),
	ElemSin:      floatFunc("Sin", "sin", math.Sin),
	ElemCos:      floatFunc("Cos", "cos", math.Cos),
	ElemSoftplus: floatFunc("Softplus", "ew_softplus", ewRefSoftplus),
	ElemElu: {
		onnx: "Elu", args: argsUnary, typ: typFloatUnary,
		attrs: func(n *ChainNode, a ElemAttrs) { n.Alpha = float64(a.AttrFloat("alpha", 1)) },
		expr: func(x *exprCtx) (string, error) {
			v := x.v(0)
			return v + " < 0.0f ? " + chainFloatLit(x.n.Alpha) + " * expm1(" + v + ") : " + v, nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			if x.a.f < 0 {
				return x.F(ewF32(x.n.Alpha) * math.Expm1(x.a.f))
			}
			return x.a, nil
		},
	},
	ElemSelu: {
		onnx: "Selu", args: argsUnary, typ: typFloatUnary,
		attrs: func(n *ChainNode, a ElemAttrs) {
			n.Alpha = float64(a.AttrFloat("alpha", 1.67326319217681884765625))
			n.Gamma = float64(a.AttrFloat("gamma", 1.05070102214813232421875))
		},
		expr: func(x *exprCtx) (string, error) {
			v, n := x.v(0), x.n
			ga := float64(float32(n.Gamma) * float32(n.Alpha))
			return v + " > 0.0f ? " + chainFloatLit(n.Gamma) + " * " + v + " : " + chainFloatLit(ga) + " * expm1(" + v + ")", nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			if x.a.f > 0 {
				return x.F(ewF32(x.n.Gamma) * x.a.f)
			}
			return x.F(float64(float32(x.n.Gamma)*float32(x.n.Alpha)) * math.Expm1(x.a.f))
		},
	},
	ElemMish: {
		onnx: "Mish", args: argsUnary, typ: typFloatUnary,
		expr: func(x *exprCtx) (string, error) { return "ew_mish(" + x.v(0) + ")", nil },
		ref: gatedRef(func(x *refCtx) (ewVal, error) {
			return x.F(x.a.f * math.Tanh(ewRefSoftplus(x.a.f)))
		}),
	},
	ElemIsNaN: {
		onnx: "IsNaN", args: argsUnary, typ: typFloatTest,
		expr: func(x *exprCtx) (string, error) { return "(int)isnan(" + x.v(0) + ")", nil },
		ref:  func(x *refCtx) (ewVal, error) { return x.B(math.IsNaN(x.a.f)) },
	},
	ElemIsInf: {
		onnx: "IsInf", args: argsUnary, typ: typFloatTest,
		attrs: func(n *ChainNode, a ElemAttrs) {
			n.DetectNegative = a.AttrInt("detect_negative", 1) != 0
			n.DetectPositive = a.AttrInt("detect_positive", 1) != 0
		},
		expr: func(x *exprCtx) (string, error) {
			v, n := x.v(0), x.n
			switch {
			case n.DetectPositive && n.DetectNegative:
				return "(int)isinf(" + v + ")", nil
			case n.DetectPositive:
				return "(int)(" + v + " == INFINITY)", nil
			case n.DetectNegative:
				return "(int)(" + v + " == -INFINITY)", nil
			}
			return "0", nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			return x.B((x.n.DetectPositive && math.IsInf(x.a.f, 1)) || (x.n.DetectNegative && math.IsInf(x.a.f, -1)))
		},
	},
}

// elemOpDef is one entry of elemOpTable.
type elemOpDef struct {
	// onnx is the op key of the ONNX node that lowers to this op: the op
	// type, prefixed with its domain outside the default one. Empty for
	// ops no ONNX node lowers to directly.
	onnx string
	// args bounds the number of arguments: {min, max}; arguments past min
	// are optional (-1 when absent), except for variadic ops, which take
	// any number from min on.
	args [2]int
	// oneIsIdentity makes a one-input ONNX node of a variadic op an
	// ElemIdentity.
	oneIsIdentity bool
	// attrs reads the op's ONNX attributes, with ONNX's defaults, into a
	// node; nil for ops without attributes.
	attrs func(n *ChainNode, a ElemAttrs)
	// typ checks a node's argument types and returns its result type; the
	// argument count has been checked against args.
	typ func(x *typeCtx) (ElemType, error)
	// expr is the OpenCL C expression of the node's value.
	expr func(x *exprCtx) (string, error)
	// ref computes the node's value on the host as the device does.
	ref func(x *refCtx) (ewVal, error)
}

var (
	argsNone     = [2]int{0, 0}
	argsUnary    = [2]int{1, 1}
	argsBinary   = [2]int{2, 2}
	argsVariadic = [2]int{1, math.MaxInt}
)

// ElemAttrs reads an ONNX node's attributes, each with a default for when
// the node does not set it; *graph.Node satisfies it.
type ElemAttrs interface {
	AttrInt(name string, def int64) int64
	AttrFloat(name string, def float32) float32
	AttrString(name string, def string) string
}

// onnxDefaults is a node that sets no attribute.
type onnxDefaults struct{}

func (onnxDefaults) AttrInt(_ string, def int64) int64       { return def }
func (onnxDefaults) AttrFloat(_ string, def float32) float32 { return def }
func (onnxDefaults) AttrString(_ string, def string) string  { return def }

// IsElemOp reports whether a chain can compute the ONNX operator named op
// (leaves excluded), so the engine can decide what to fuse.
func IsElemOp(op string) bool {
	d, ok := elemOpTable[ElemOp(op)]
	return ok && d.args != argsNone
}

// ElemOps lists every operation a chain supports, in a fixed order.
func ElemOps() []ElemOp {
	ops := make([]ElemOp, 0, len(elemOpTable))
	for op := range elemOpTable {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	return ops
}

// ElemONNXOps lists the op keys (as ElemOpFor takes them) of the ONNX nodes
// that lower to one chain operation, sorted.
func ElemONNXOps() []string {
	var keys []string
	for _, d := range elemOpTable {
		if d.onnx != "" {
			keys = append(keys, d.onnx)
		}
	}
	slices.Sort(keys)
	return keys
}

// ElemOpFor returns the chain operation an ONNX node of op key key (the op
// type, prefixed with its domain outside the default one) lowers to.
func ElemOpFor(key string) (ElemOp, bool) {
	for op, d := range elemOpTable {
		if d.onnx != "" && d.onnx == key {
			return op, true
		}
	}
	return "", false
}

// ElemNodeONNX returns the node computing op on the arguments of an ONNX
// node (args[k] is the chain node of its input k, -1 where the input is
// omitted), with attributes read from a. Required inputs must be present;
// absent inputs of variadic ops are dropped, and a one-input Max, Min or
// Sum is an ElemIdentity.
func ElemNodeONNX(op ElemOp, a ElemAttrs, args []int) (ChainNode, error) {
	d, ok := elemOpTable[op]
	if !ok || d.args == argsNone {
		return ChainNode{}, fmt.Errorf("%s is not an element-wise operation", op)
	}
	lo, hi := d.args[0], d.args[1]
	if hi == math.MaxInt {
		var present []int
		for _, k := range args {
			if k >= 0 {
				present = append(present, k)
			}
		}
		if len(present) == 0 {
			return ChainNode{}, fmt.Errorf("%s has no inputs", op)
		}
		if len(present) == 1 && d.oneIsIdentity {
			return ElemNode(ElemIdentity, present[0]), nil
		}
		args = present
	} else {
		if len(args) < lo {
			return ChainNode{}, fmt.Errorf("%s needs %d inputs, has %d", op, lo, len(args))
		}
		for i := 0; i < lo; i++ {
			if args[i] < 0 {
				return ChainNode{}, fmt.Errorf("%s input %d is missing", op, i)
			}
		}
		if len(args) > hi {
			args = args[:hi]
		}
		for len(args) < hi {
			args = append(args, -1)
		}
	}
	n := ChainNode{Op: op, Args: args}
	if d.attrs != nil {
		d.attrs(&n, a)
	}
	return n, nil
}

// ElemNode returns a node for op on args with ONNX's default attributes.
func ElemNode(op ElemOp, args ...int) ChainNode {
	n := ChainNode{Op: op, Args: args}
	if d := elemOpTable[op]; d.attrs != nil {
		d.attrs(&n, onnxDefaults{})
	}
	return n
}

// ---- result-type rules ----

// typeCtx is what a type rule sees: the node and its arguments' types.
type typeCtx struct {
	c     *Chain
	n     *ChainNode
	types []ElemType
}

func (x *typeCtx) at(k int) ElemType { return x.types[x.n.Args[k]] }

// first checks that every argument has argument 0's type and that check
// accepts it, and returns that type.
func (x *typeCtx) first(check func(ElemType) error) (ElemType, error) {
	for k := 1; k < len(x.n.Args); k++ {
		if x.at(k) != x.at(0) {
			return 0, fmt.Errorf("argument %d is %v, argument 0 is %v; they must match", k, x.at(k), x.at(0))
		}
	}
	return x.at(0), check(x.at(0))
}

func numeric(t ElemType) error {
	if t == EBool {
		return fmt.Errorf("bool arguments are not allowed")
	}
	return nil
}

func isFloat(t ElemType) error {
	if !t.IsFloat() {
		return fmt.Errorf("argument is %v, want a float type", t)
	}
	return nil
}

func isBool(t ElemType) error {
	if t != EBool {
		return fmt.Errorf("argument is %v, want bool", t)
	}
	return nil
}

func anyType(ElemType) error { return nil }

// The shared type rules.
func typFloatUnary(x *typeCtx) (ElemType, error)  { return x.first(isFloat) }   // float -> same
func typNumUnary(x *typeCtx) (ElemType, error)    { return x.first(numeric) }   // numeric -> same
func typAnyUnary(x *typeCtx) (ElemType, error)    { return x.first(anyType) }   // any -> same
func typNumBinary(x *typeCtx) (ElemType, error)   { return x.first(numeric) }   // (T, T) -> T
func typNumVariadic(x *typeCtx) (ElemType, error) { return x.first(numeric) }   // (T, ...) -> T
func typFloatTest(x *typeCtx) (ElemType, error)   { return boolOf(x, isFloat) } // float -> bool
func typCompare(x *typeCtx) (ElemType, error)     { return boolOf(x, numeric) } // (T, T) -> bool
func typLogic(x *typeCtx) (ElemType, error)       { return boolOf(x, isBool) }  // (bool, bool) -> bool

func boolOf(x *typeCtx, check func(ElemType) error) (ElemType, error) {
	_, err := x.first(check)
	return EBool, err
}

// ---- expression generation ----

// exprCtx is what an expression generator sees: node i, its type, and
// the types of all nodes. Argument k's value is the variable v(k).
type exprCtx struct {
	c     *Chain
	i     int
	n     *ChainNode
	t     ElemType
	types []ElemType
}

func (x *exprCtx) v(k int) string    { return fmt.Sprintf("v%d", x.n.Args[k]) }
func (x *exprCtx) vt(k int) ElemType { return x.types[x.n.Args[k]] }
func (x *exprCtx) fl() bool          { return x.t.IsFloat() }
func (x *exprCtx) wrapArith(op string) string {
	return chainWrap(x.t, "(long)((ulong)"+x.v(0)+" "+op+" (ulong)"+x.v(1)+")")
}

// fold combines the arguments left to right with f.
func (x *exprCtx) fold(f func(a, b string) string) string {
	acc := x.v(0)
	for k := 1; k < len(x.n.Args); k++ {
		acc = f(acc, x.v(k))
	}
	return acc
}

// ---- reference evaluation ----

// refCtx is what a reference evaluator sees: the node, its type, the
// values computed so far, and arguments 0 and 1 (zero when absent).
type refCtx struct {
	n     *ChainNode
	t     ElemType
	types []ElemType
	vals  []ewVal
	a, b  ewVal
	// load reads input slot k at the current element.
	load func(k int) ewVal
}

func (x *refCtx) arg(k int) ewVal            { return x.vals[x.n.Args[k]] }
func (x *refCtx) at(k int) ElemType          { return x.types[x.n.Args[k]] }
func (x *refCtx) fl() bool                   { return x.t.IsFloat() }
func (x *refCtx) F(v float64) (ewVal, error) { return ewVal{f: ewF32(v)}, nil }
func (x *refCtx) I(v int64) (ewVal, error)   { return ewVal{i: ewWrap(x.t, v)}, nil }
func (x *refCtx) B(v bool) (ewVal, error)    { return ewVal{i: ewB2I(v)}, nil }

// ---- entry makers for families of alike ops ----

// arith is a binary arithmetic op: fop on floats, iop on integers with
// two's-complement wrap.
func arith(onnx, op string, fop func(a, b float64) float64, iop func(a, b uint64) uint64) elemOpDef {
	return elemOpDef{
		onnx: onnx, args: argsBinary, typ: typNumBinary,
		expr: func(x *exprCtx) (string, error) {
			if x.fl() {
				return x.v(0) + " " + op + " " + x.v(1), nil
			}
			return x.wrapArith(op), nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			if x.fl() {
				return x.F(fop(x.a.f, x.b.f))
			}
			return x.I(int64(iop(uint64(x.a.i), uint64(x.b.i))))
		},
	}
}

// minMax is Max or Min: fkeep says whether the float accumulator beats
// the next argument, itake whether the next integer argument beats the
// accumulator (the argument orders ew_fmax and the generated ternaries use).
func minMax(onnx, ffn, cmp string, fkeep func(acc, x float64) bool, itake func(acc, x int64) bool) elemOpDef {
	return elemOpDef{
		onnx: onnx, args: argsVariadic, typ: typNumVariadic, oneIsIdentity: true,
		expr: func(x *exprCtx) (string, error) {
			if x.fl() {
				return x.fold(func(a, b string) string { return ffn + "(" + a + ", " + b + ")" }), nil
			}
			return x.fold(func(a, b string) string {
				return "(" + a + " " + cmp + " " + b + " ? " + a + " : " + b + ")"
			}), nil
		},
		ref: func(x *refCtx) (ewVal, error) {
			acc := x.a
			for k := 1; k < len(x.n.Args); k++ {
				v := x.arg(k)
				if x.fl() {
					// NaN-propagating, in the same argument order as ew_fmax.
					if !(fkeep(acc.f, v.f) || math.IsNaN(acc.f)) {
						acc = v
					}
					continue
				}
				if itake(acc.i, v.i) {
					acc = v
				}
			}
			return acc, nil
		},
	}
}

// sumExpr and sumRef are Sum, and Mean when the node is a Mean.
func sumExpr(x *exprCtx) (string, error) {
	if x.fl() {
		s := x.fold(func(a, b string) string { return "(" + a + " + " + b + ")" })
		if x.n.Op == ElemMean {
			s += " / " + chainFloatLit(float64(len(x.n.Args)))
		}
		return s, nil
	}
	return chainWrap(x.t, x.fold(func(a, b string) string { return "(long)((ulong)" + a + " + (ulong)" + b + ")" })), nil
}

func sumRef(x *refCtx) (ewVal, error) {
	acc := x.a
	for k := 1; k < len(x.n.Args); k++ {
		if x.fl() {
			acc.f = ewF32(acc.f + x.arg(k).f)
		} else {
			acc.i = ewWrap(x.t, int64(uint64(acc.i)+uint64(x.arg(k).i)))
		}
	}
	if x.n.Op == ElemMean {
		acc.f = ewF32(acc.f / float64(len(x.n.Args)))
	}
	return acc, nil
}

// compare is an ordering comparison of numbers; holds says whether a
// three-way result (-1, 0, 1, or 2 for unordered) makes it true.
func compare(onnx, op string, holds func(cmp int) bool) elemOpDef {
	return elemOpDef{onnx: onnx, args: argsBinary, typ: typCompare, expr: compareExpr(op), ref: compareRef(holds)}
}

func compareExpr(op string) func(x *exprCtx) (string, error) {
	return func(x *exprCtx) (string, error) { return "(int)(" + x.v(0) + " " + op + " " + x.v(1) + ")", nil }
}

func compareRef(holds func(cmp int) bool) func(x *refCtx) (ewVal, error) {
	return func(x *refCtx) (ewVal, error) {
		a, b := x.a, x.b
		var cmp int
		if x.at(0).IsFloat() {
			switch {
			case a.f < b.f:
				cmp = -1
			case a.f > b.f:
				cmp = 1
			case a.f == b.f:
				cmp = 0
			default:
				cmp = 2
			}
		} else {
			switch {
			case a.i < b.i:
				cmp = -1
			case a.i > b.i:
				cmp = 1
			}
		}
		return x.B(holds(cmp))
	}
}

// logic is a binary op on bools.
func logic(onnx, op string, f func(a, b bool) bool) elemOpDef {
	return elemOpDef{
		onnx: onnx, args: argsBinary, typ: typLogic,
		expr: func(x *exprCtx) (string, error) { return x.v(0) + " " + op + " " + x.v(1), nil },
		ref:  func(x *refCtx) (ewVal, error) { return x.B(f(x.a.i != 0, x.b.i != 0)) },
	}
}

// floatFunc is a float op that is one OpenCL function of its argument.
func floatFunc(onnx, fn string, f func(float64) float64) elemOpDef {
	return floatOp(onnx, func(v string) string { return fn + "(" + v + ")" }, f)
}

// floatOp is a float op with no attributes: e builds its expression from
// the argument's variable, f computes it exactly.
func floatOp(onnx string, e func(v string) string, f func(float64) float64) elemOpDef {
	return elemOpDef{
		onnx: onnx, args: argsUnary, typ: typFloatUnary,
		expr: func(x *exprCtx) (string, error) { return e(x.v(0)), nil },
		ref:  func(x *refCtx) (ewVal, error) { return x.F(f(x.a.f)) },
	}
}

// gatedRef wraps the reference of an x*gate(x) activation: at -inf it
// returns -0, the limit, where the formula gives NaN.
func gatedRef(f func(x *refCtx) (ewVal, error)) func(x *refCtx) (ewVal, error) {
	return func(x *refCtx) (ewVal, error) {
		if math.IsInf(x.a.f, -1) {
			return ewVal{f: math.Copysign(0, -1)}, nil
		}
		return f(x)
	}
}
