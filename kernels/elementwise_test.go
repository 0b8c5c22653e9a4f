package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph/dtype"
)

// ---- helpers: typed host tensors to and from the device ----

// ewPad is the element offset every uploaded tensor starts at, so every test
// also checks that RunChain honours Buf.Off.
const ewPad = 5

func ewBytes(h HostTensor) []byte {
	sz := h.Type.Size()
	raw := make([]byte, (h.Len()+ewPad+1)*sz)
	for i := 0; i < h.Len(); i++ {
		p := raw[(ewPad+i)*sz:]
		switch h.Type {
		case EF32:
			binary.LittleEndian.PutUint32(p, math.Float32bits(h.F[i]))
		case EF16:
			binary.LittleEndian.PutUint16(p, dtype.Float32ToHalf(h.F[i]))
		case EI64:
			binary.LittleEndian.PutUint64(p, uint64(h.I[i]))
		case EI32:
			binary.LittleEndian.PutUint32(p, uint32(h.I[i]))
		default:
			p[0] = byte(h.I[i])
		}
	}
	return raw
}

func ewUpload(t testing.TB, h HostTensor) Buf {
	t.Helper()
	raw := ewBytes(h)
	mem, err := testLib.Device().Alloc(len(raw))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mem.Release)
	if err := testLib.Device().Write(mem, 0, raw); err != nil {
		t.Fatal(err)
	}
	return Buf{Mem: mem, Off: ewPad}
}

// ewAlloc returns an output buffer filled with a 0x5a pattern, so a kernel
// that skips elements is caught.
func ewAlloc(t testing.TB, typ ElemType, n int) Buf {
	t.Helper()
	raw := make([]byte, (n+ewPad+1)*typ.Size())
	for i := range raw {
		raw[i] = 0x5a
	}
	mem, err := testLib.Device().Alloc(len(raw))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mem.Release)
	if err := testLib.Device().Write(mem, 0, raw); err != nil {
		t.Fatal(err)
	}
	return Buf{Mem: mem, Off: ewPad}
}

func ewDownload(t testing.TB, b Buf, typ ElemType, shape []int) HostTensor {
	t.Helper()
	if err := testLib.Device().Finish(); err != nil {
		t.Fatal(err)
	}
	h := NewHostTensor(typ, shape)
	sz := typ.Size()
	raw := make([]byte, h.Len()*sz)
	if len(raw) == 0 {
		return h
	}
	if err := testLib.Device().Read(b.Mem, b.Off*sz, raw); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < h.Len(); i++ {
		p := raw[i*sz:]
		switch typ {
		case EF32:
			h.F[i] = math.Float32frombits(binary.LittleEndian.Uint32(p))
		case EF16:
			h.F[i] = dtype.HalfToFloat32(binary.LittleEndian.Uint16(p))
		case EI64:
			h.I[i] = int64(binary.LittleEndian.Uint64(p))
		case EI32:
			h.I[i] = int64(int32(binary.LittleEndian.Uint32(p)))
		case EI8:
			h.I[i] = int64(int8(p[0]))
		default:
			h.I[i] = int64(p[0])
		}
	}
	return h
}

// ewRun runs c on the device and on the reference and returns both sets of
// outputs.
func ewRun(t testing.TB, c *Chain, outShape []int, ins []HostTensor) (got, want []HostTensor) {
	t.Helper()
	want, err := RunChainRef(c, outShape, ins)
	if err != nil {
		t.Fatal(err)
	}
	args := make([]ElemArg, len(ins))
	for k, h := range ins {
		args[k] = ElemArg{Buf: ewUpload(t, h), Shape: h.Shape}
	}
	types, err := c.OutputTypes()
	if err != nil {
		t.Fatal(err)
	}
	n := 1
	for _, d := range outShape {
		n *= d
	}
	outs := make([]Buf, len(types))
	for k, ty := range types {
		outs[k] = ewAlloc(t, ty, n)
	}
	if err := testLib.RunChain(c, outShape, args, outs); err != nil {
		t.Fatal(err)
	}
	got = make([]HostTensor, len(types))
	for k, ty := range types {
		got[k] = ewDownload(t, outs[k], ty, outShape)
	}
	return got, want
}

// ewTol is the tolerance of one output: atol + rtol*|want|.
type ewTol struct{ atol, rtol float64 }

// ewCompare checks one output against the reference: floats within tol,
// (f16 outputs within one binary16 rounding step), integers exactly.
func ewCompare(t testing.TB, what string, got, want HostTensor, tol ewTol) {
	t.Helper()
	if got.Type != want.Type || got.Len() != want.Len() {
		t.Fatalf("%s: got %v%v, want %v%v", what, got.Type, got.Shape, want.Type, want.Shape)
	}
	if !got.Type.IsFloat() {
		for i := range got.I {
			if got.I[i] != want.I[i] {
				t.Fatalf("%s: element %d = %d, want %d", what, i, got.I[i], want.I[i])
			}
		}
		return
	}
	if got.Type == EF16 {
		// Device and reference differ by a few fp32 ulps before the final
		// rounding, which can move the result across one binary16 step.
		tol.rtol = math.Max(tol.rtol, 1.0/1024)
		tol.atol = math.Max(tol.atol, 1e-7)
	}
	for i := range got.F {
		g, w := float64(got.F[i]), float64(want.F[i])
		if math.IsNaN(g) && math.IsNaN(w) || g == w {
			continue
		}
		if math.IsNaN(g) || math.IsNaN(w) || math.IsInf(w, 0) || math.Abs(g-w) > tol.atol+tol.rtol*math.Abs(w) {
			t.Fatalf("%s: element %d = %v, want %v (atol %g rtol %g)", what, i, g, w, tol.atol, tol.rtol)
		}
	}
}

// ewFloats returns n values uniform in [lo, hi) representable in typ.
func ewFloats(seed int64, typ ElemType, n int, lo, hi float64) HostTensor {
	r := rand.New(rand.NewSource(seed))
	h := HostTensor{Type: typ, F: make([]float32, n)}
	for i := range h.F {
		x := float32(lo + (hi-lo)*r.Float64())
		if typ == EF16 {
			x = ewRoundHalf(x)
		}
		h.F[i] = x
	}
	return h
}

// ewInts returns n integers: the given specials first, then values uniform
// in [lo, hi], all wrapped to typ.
func ewInts(seed int64, typ ElemType, n int, lo, hi int64, specials ...int64) HostTensor {
	r := rand.New(rand.NewSource(seed))
	h := HostTensor{Type: typ, I: make([]int64, n)}
	for i := range h.I {
		v := lo + r.Int63n(hi-lo+1)
		if i < len(specials) {
			v = specials[i]
		}
		h.I[i] = ewWrap(typ, v)
	}
	return h
}

func ewShaped(h HostTensor, shape ...int) HostTensor {
	h.Shape = shape
	n := h.Len()
	if h.Type.IsFloat() {
		h.F = h.F[:n]
	} else {
		h.I = h.I[:n]
	}
	return h
}

// ewSpecials are float inputs every float test starts with.
var ewSpecials = []float32{
	float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)),
	0.5, 1.5, 2.5, -0.5, -2.5, 100, -100, 1e-3, 20, -20,
}

// ewShapeCase is one output shape with the shape of each input. Together
// the cases cover every launch path: flat, flat with scalars, row and column
// broadcast (rank-2 nd), rank 3, rank above 3 (index division), a single
// element and an empty output.
type ewShapeCase struct {
	out []int
	ins [][]int
}

var ewBinaryShapes = []ewShapeCase{
	{[]int{3, 5, 7}, [][]int{{3, 5, 7}, {3, 5, 7}}},
	{[]int{3, 5, 7}, [][]int{{3, 1, 7}, {5, 1}}},
	{[]int{3, 5, 7}, [][]int{{}, {3, 5, 7}}},
	{[]int{4, 33}, [][]int{{4, 33}, {33}}},
	{[]int{70, 3}, [][]int{{70, 1}, {70, 3}}},
	{[]int{2, 3, 1, 4, 5, 2}, [][]int{{2, 1, 1, 4, 1, 2}, {3, 1, 1, 5, 1}}},
	{[]int{1}, [][]int{{1}, {}}},
	{[]int{}, [][]int{{}, {}}},
	{[]int{0, 4}, [][]int{{0, 4}, {4}}},
}

// ---- reference checked by hand ----

func TestChainRefHandValues(t *testing.T) {
	f := func(op ElemOp, x float32, edit func(*ChainNode)) float32 {
		t.Helper()
		c := UnaryChain(op, EF32)
		if edit != nil {
			edit(&c.Nodes[1])
		}
		out, err := RunChainRef(c, nil, []HostTensor{{Type: EF32, F: []float32{x}}})
		if err != nil {
			t.Fatal(err)
		}
		return out[0].F[0]
	}
	ibin := func(op ElemOp, a, b int64, fmod int) int64 {
		t.Helper()
		c := BinaryChain(op, EI64, EI64)
		c.Nodes[2].Fmod = fmod
		out, err := RunChainRef(c, nil, []HostTensor{{Type: EI64, I: []int64{a}}, {Type: EI64, I: []int64{b}}})
		if err != nil {
			t.Fatal(err)
		}
		return out[0].I[0]
	}
	cast := func(from, to ElemType, x float64) ewVal {
		t.Helper()
		in := HostTensor{Type: from}
		if from.IsFloat() {
			in.F = []float32{float32(x)}
		} else {
			in.I = []int64{int64(x)}
		}
		c := &Chain{}
		c.Output(c.Cast(c.Input(from), to))
		out, err := RunChainRef(c, nil, []HostTensor{in})
		if err != nil {
			t.Fatal(err)
		}
		if to.IsFloat() {
			return ewVal{f: float64(out[0].F[0])}
		}
		return ewVal{i: out[0].I[0]}
	}
	near := func(what string, got float32, want float64) {
		t.Helper()
		if math.Abs(float64(got)-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("Round(2.5)", f(ElemRound, 2.5, nil), 2)
	near("Round(-2.5)", f(ElemRound, -2.5, nil), -2)
	near("Round(1.5)", f(ElemRound, 1.5, nil), 2)
	near("Round(0.5)", f(ElemRound, 0.5, nil), 0)
	near("Gelu(1)", f(ElemGelu, 1, nil), 0.8413447)
	near("Gelu(-1)", f(ElemGelu, -1, nil), -0.1586553)
	near("Gelu_tanh(1)", f(ElemGelu, 1, func(n *ChainNode) { n.Approximate = "tanh" }), 0.8411920)
	near("Sigmoid(0)", f(ElemSigmoid, 0, nil), 0.5)
	near("Softplus(100)", f(ElemSoftplus, 100, nil), 100)
	near("Softplus(0)", f(ElemSoftplus, 0, nil), math.Ln2)
	near("HardSwish(1)", f(ElemHardSwish, 1, nil), 2.0/3)
	near("HardSwish(-4)", f(ElemHardSwish, -4, nil), 0)
	near("HardSigmoid(1)", f(ElemHardSigmoid, 1, nil), 0.7)
	near("Selu(-1)", f(ElemSelu, -1, nil), -1.1113307)
	near("Selu(2)", f(ElemSelu, 2, nil), 2.1014020)
	near("Elu(-1)", f(ElemElu, -1, nil), -0.6321206)
	near("LeakyRelu(-2)", f(ElemLeakyRelu, -2, nil), -0.02)
	near("QuickGelu(1)", f(ElemQuickGelu, 1, nil), 0.8457957) // 1*sigmoid(1.702)
	near("Mish(1)", f(ElemMish, 1, nil), 0.8650984)
	near("Sign(-3)", f(ElemSign, -3, nil), -1)
	if v := f(ElemRelu, float32(math.NaN()), nil); !math.IsNaN(float64(v)) {
		t.Errorf("Relu(NaN) = %v, want NaN", v)
	}

	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"Div(-7,2)", ibin(ElemDiv, -7, 2, 0), -3},
		{"Div(7,-2)", ibin(ElemDiv, 7, -2, 0), -3},
		{"Div(7,0)", ibin(ElemDiv, 7, 0, 0), 0},
		{"Div(MinInt64,-1)", ibin(ElemDiv, math.MinInt64, -1, 0), math.MinInt64},
		{"Mod(-7,2) fmod=0", ibin(ElemMod, -7, 2, 0), 1},
		{"Mod(7,-2) fmod=0", ibin(ElemMod, 7, -2, 0), -1},
		{"Mod(-7,2) fmod=1", ibin(ElemMod, -7, 2, 1), -1},
		{"Mod(7,-2) fmod=1", ibin(ElemMod, 7, -2, 1), 1},
		{"Pow(3,4)", ibin(ElemPow, 3, 4, 0), 81},
		{"Pow(-2,3)", ibin(ElemPow, -2, 3, 0), -8},
		{"Pow(2,-1)", ibin(ElemPow, 2, -1, 0), 0},
		{"Max(-3,2)", ibin(ElemMax, -3, 2, 0), 2},
		{"Cast(-2.7 ewF32->i64)", cast(EF32, EI64, -2.7).i, -2},
		{"Cast(2.7 ewF32->i64)", cast(EF32, EI64, 2.7).i, 2},
		{"Cast(300 ewF32->u8)", cast(EF32, EU8, 300).i, 44},
		{"Cast(-1 ewF32->u8)", cast(EF32, EU8, -1).i, 255},
		{"Cast(NaN ewF32->i32)", cast(EF32, EI32, math.NaN()).i, 0},
		{"Cast(1e20 ewF32->i64)", cast(EF32, EI64, 1e20).i, math.MaxInt64},
		{"Cast(0.1 ewF32->bool)", cast(EF32, EBool, 0.1).i, 1},
		{"Cast(NaN ewF32->bool)", cast(EF32, EBool, math.NaN()).i, 1},
		{"Cast(256 i64->u8)", cast(EI64, EU8, 256).i, 0},
		{"Cast(200 i64->i8)", cast(EI64, EI8, 200).i, -56},
		{"Cast(-1 i8->u8)", cast(EI8, EU8, -1).i, 255},
		{"Cast(5 i64->bool)", cast(EI64, EBool, 5).i, 1},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"Cast(70000 ewF32->f16)", cast(EF32, EF16, 70000).f, math.Inf(1)},
		{"Cast(65519 ewF32->f16)", cast(EF32, EF16, 65519).f, 65504},
		{"Cast(1+2^-11 ewF32->f16)", cast(EF32, EF16, 1+0x1p-11).f, 1},
		{"Cast(1+3*2^-11 ewF32->f16)", cast(EF32, EF16, 1+3*0x1p-11).f, 1 + 0x1p-9},
		{"Cast(2049 i64->f16)", cast(EI64, EF16, 2049).f, 2048},
		{"Cast(1 bool->ewF32)", cast(EBool, EF32, 1).f, 1},
		{"Cast(-3 i8->ewF32)", cast(EI8, EF32, -3).f, -3},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}

	// Clip: ONNX defines min > max as max; NaN passes through.
	clip := &Chain{}
	x := clip.Input(EF32)
	clip.Output(clip.Op(ElemClip, x, clip.Const(EF32, 5), clip.Const(EF32, 3)))
	clip.Output(clip.Op(ElemClip, x, -1, clip.Const(EF32, 0.5)))
	out, err := RunChainRef(clip, []int{2}, []HostTensor{{Type: EF32, Shape: []int{2}, F: []float32{0, float32(math.NaN())}}})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].F[0] != 3 || !math.IsNaN(float64(out[0].F[1])) || out[1].F[0] != 0 {
		t.Errorf("Clip(min 5, max 3) = %v, Clip(max 0.5) = %v; want [3 NaN], [0 NaN]", out[0].F, out[1].F)
	}

	// Max propagates NaN from either side, Where and broadcasting pick by
	// position: [2,1] + [3].
	bc := BinaryChain(ElemAdd, EF32, EF32)
	out, err = RunChainRef(bc, []int{2, 3}, []HostTensor{
		{Type: EF32, Shape: []int{2, 1}, F: []float32{10, 20}},
		{Type: EF32, Shape: []int{3}, F: []float32{1, 2, 3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{11, 12, 13, 21, 22, 23}; fmt.Sprint(out[0].F) != fmt.Sprint(want) {
		t.Errorf("[2,1]+[3] = %v, want %v", out[0].F, want)
	}
	mx := BinaryChain(ElemMax, EF32, EF32)
	nan := float32(math.NaN())
	out, err = RunChainRef(mx, []int{3}, []HostTensor{
		{Type: EF32, Shape: []int{3}, F: []float32{nan, 1, 2}},
		{Type: EF32, Shape: []int{3}, F: []float32{1, nan, 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(float64(out[0].F[0])) || !math.IsNaN(float64(out[0].F[1])) || out[0].F[2] != 2 {
		t.Errorf("Max with NaN = %v, want [NaN NaN 2]", out[0].F)
	}
}

// ---- device against reference ----

// ewUnaryOp is one output of the unary test chain: op applied to x (or to
// the positive input p) of storage type st, with its tolerance.
type ewUnaryOp struct {
	name  string
	tol   ewTol
	build func(c *Chain, st ElemType, x, p int) int
}

var (
	ewExact  = ewTol{0, 0}
	ewArith  = ewTol{0, 1.2e-7}    // one rounding step (division: OpenCL allows 2.5 ulp)
	ewArith2 = ewTol{1e-7, 3e-7}   // two roundings (HardSigmoid: alpha*x+beta, then a product)
	ewTrans  = ewTol{1e-7, 1.2e-6} // a few ulps for transcendental functions
	ewComp   = ewTol{2e-6, 4e-6}   // composites with cancellation (Gelu of large negatives, Mish)
)

func ewUnaryOps() []ewUnaryOp {
	op := func(o ElemOp, tol ewTol) ewUnaryOp {
		return ewUnaryOp{name: string(o), tol: tol, build: func(c *Chain, _ ElemType, x, _ int) int { return c.Op(o, x) }}
	}
	pos := func(o ElemOp, tol ewTol) ewUnaryOp {
		return ewUnaryOp{name: string(o), tol: tol, build: func(c *Chain, _ ElemType, _, p int) int { return c.Op(o, p) }}
	}
	attr := func(name string, o ElemOp, tol ewTol, edit func(*ChainNode)) ewUnaryOp {
		return ewUnaryOp{name: name, tol: tol, build: func(c *Chain, _ ElemType, x, _ int) int {
			n := ElemNode(o, x)
			edit(&n)
			return c.Node(n)
		}}
	}
	return []ewUnaryOp{
		op(ElemIdentity, ewExact), op(ElemRelu, ewExact), op(ElemNeg, ewExact), op(ElemAbs, ewExact),
		op(ElemSign, ewExact), op(ElemFloor, ewExact), op(ElemCeil, ewExact), op(ElemRound, ewExact),
		op(ElemReciprocal, ewArith), op(ElemLeakyRelu, ewArith),
		attr("LeakyRelu(0.2)", ElemLeakyRelu, ewArith, func(n *ChainNode) { n.Alpha = 0.2 }),
		op(ElemSigmoid, ewTrans), op(ElemTanh, ewTrans), op(ElemErf, ewTrans), op(ElemExp, ewTrans),
		op(ElemSin, ewTrans), op(ElemCos, ewTrans), op(ElemSoftplus, ewTrans),
		op(ElemHardSigmoid, ewArith2), op(ElemHardSwish, ewArith2),
		attr("HardSigmoid(0.3,0.4)", ElemHardSigmoid, ewArith2, func(n *ChainNode) { n.Alpha, n.Beta = 0.3, 0.4 }),
		op(ElemElu, ewTrans), attr("Elu(0.5)", ElemElu, ewTrans, func(n *ChainNode) { n.Alpha = 0.5 }),
		op(ElemSelu, ewTrans), op(ElemGelu, ewComp),
		attr("Gelu(tanh)", ElemGelu, ewComp, func(n *ChainNode) { n.Approximate = "tanh" }),
		op(ElemQuickGelu, ewComp), op(ElemMish, ewComp),
		op(ElemIsNaN, ewExact), op(ElemIsInf, ewExact),
		attr("IsInf(neg)", ElemIsInf, ewExact, func(n *ChainNode) { n.DetectPositive = false }),
		attr("IsInf(pos)", ElemIsInf, ewExact, func(n *ChainNode) { n.DetectNegative = false }),
		pos(ElemLog, ewTrans), pos(ElemSqrt, ewArith),
		{"Pow(x,2)", ewArith, func(c *Chain, st ElemType, x, _ int) int { return c.Op(ElemPow, x, c.Const(st, 2)) }},
		{"Pow(p,x)", ewTol{1e-7, 3e-6}, func(c *Chain, _ ElemType, x, p int) int { return c.Op(ElemPow, p, x) }},
		{"Pow(x,int 3)", ewTrans, func(c *Chain, _ ElemType, x, _ int) int { return c.Op(ElemPow, x, c.ConstInt(EI64, 3)) }},
		{"Clip(-1,0.5)", ewExact, func(c *Chain, st ElemType, x, _ int) int {
			return c.Op(ElemClip, x, c.Const(st, -1), c.Const(st, 0.5))
		}},
		{"Clip(,0.5)", ewExact, func(c *Chain, st ElemType, x, _ int) int { return c.Op(ElemClip, x, -1, c.Const(st, 0.5)) }},
		{"Clip(5,3)", ewExact, func(c *Chain, st ElemType, x, _ int) int {
			return c.Op(ElemClip, x, c.Const(st, 5), c.Const(st, 3))
		}},
		{"Cast(i64)", ewExact, func(c *Chain, _ ElemType, x, _ int) int { return c.Cast(x, EI64) }},
		{"Cast(f16)", ewExact, func(c *Chain, st ElemType, x, _ int) int { return c.Cast(c.Op(ElemMul, x, c.Const(st, 3.3)), EF16) }},
	}
}

// ewStorages are the float storage types float tests cover.
var ewStorages = []ElemType{EF32, EF16}

// TestChainUnaryOps runs every unary operation on each storage type as the
// outputs of one chain per type (PoCL builds are slow; one program covers
// a type's operations, and staying within ChainFits keeps it buildable on
// phones), over specials and random values, at shapes taking the
// contiguous, broadcast (rank 3), scalar and empty paths.
func TestChainUnaryOps(t *testing.T) {
	ops := ewUnaryOps()
	for si, st := range ewStorages {
		c := &Chain{}
		x, p := c.Input(st), c.Input(st)
		for _, u := range ops {
			c.Output(u.build(c, st, x, p))
		}
		xs := ewFloats(int64(11+si), st, 200, -6, 6)
		for i, s := range ewSpecials {
			xs.F[i] = s
			if st == EF16 {
				xs.F[i] = ewRoundHalf(s)
			}
		}
		ps := ewFloats(int64(13+si), st, 200, 0.01, 5)
		ps.F[0], ps.F[1] = 0, float32(math.Inf(1))
		data := []HostTensor{xs, ps}
		for _, sc := range []ewShapeCase{
			{[]int{3, 5, 7}, [][]int{{3, 5, 7}, {3, 5, 7}}},
			{[]int{2, 5, 40}, [][]int{{5, 1}, {2, 1, 40}}},
			{[]int{}, [][]int{{}, {}}},
			{[]int{0, 4}, [][]int{{0, 1}, {4}}},
		} {
			ins := make([]HostTensor, len(data))
			for k, h := range data {
				ins[k] = ewShaped(h, sc.ins[k%2]...)
			}
			got, want := ewRun(t, c, sc.out, ins)
			for k, u := range ops {
				ewCompare(t, fmt.Sprintf("%v %s at %v", st, u.name, sc.out), got[k], want[k], u.tol)
			}
		}
	}
}

// ewBinaryFloat adds the outputs of the binary float test on (a, b) of
// storage type st.
func ewBinaryFloat(c *Chain, st ElemType, a, b int) (names []string, tols []ewTol) {
	add := func(name string, tol ewTol, node int) {
		names = append(names, fmt.Sprintf("%v %s", st, name))
		tols = append(tols, tol)
		c.Output(node)
	}
	for _, o := range []ElemOp{ElemAdd, ElemSub, ElemMul, ElemDiv} {
		add(string(o), ewArith, c.Op(o, a, b))
	}
	for _, o := range []ElemOp{ElemMax, ElemMin, ElemEqual, ElemLess, ElemGreater, ElemLessOrEqual, ElemGreaterOrEqual, ElemPRelu} {
		add(string(o), ewExact, c.Op(o, a, b))
	}
	add("Pow", ewTol{1e-7, 3e-6}, c.Op(ElemPow, a, b))
	mod := ElemNode(ElemMod, a, b)
	mod.Fmod = 1
	add("Mod(fmod=1)", ewExact, c.Node(mod))
	add("Where(a>b,a,b)", ewExact, c.Op(ElemWhere, c.Op(ElemGreater, a, b), a, b))
	add("Sum(a,b,a)", ewArith, c.Op(ElemSum, a, b, a))
	add("Mean(a,b)", ewArith, c.Op(ElemMean, a, b))
	add("Max(a,b,0.25)", ewExact, c.Op(ElemMax, a, b, c.Const(st, 0.25)))
	add("Clip(a,b,1)", ewExact, c.Op(ElemClip, a, b, c.Const(st, 1)))
	return names, tols
}

// ewMixedFloats returns values where every third is a multiple of 1/4, so
// that comparisons see equal pairs, and the rest are continuous.
func ewMixedFloats(seed int64, st ElemType, n int) HostTensor {
	h := ewFloats(seed, st, n, -3, 3)
	for i := 0; i < n; i += 3 {
		h.F[i] = float32(math.Round(float64(h.F[i])*2)) / 4
	}
	return h
}

func TestChainBinaryFloat(t *testing.T) {
	c := &Chain{}
	var names []string
	var tols []ewTol
	var data []HostTensor
	for si, st := range ewStorages {
		n, tl := ewBinaryFloat(c, st, c.Input(st), c.Input(st))
		names, tols = append(names, n...), append(tols, tl...)
		as := ewMixedFloats(int64(21+si), st, 400)
		bs := ewMixedFloats(int64(23+si), st, 400)
		for i, s := range ewSpecials {
			if st == EF16 {
				s = ewRoundHalf(s)
			}
			as.F[i] = s
			bs.F[len(ewSpecials)+i] = s // specials on the right too
		}
		bs.F[1] = 0 // a zero divisor against an infinity
		data = append(data, as, bs)
	}
	for _, sc := range ewBinaryShapes {
		ins := make([]HostTensor, len(data))
		for k, h := range data {
			ins[k] = ewShaped(h, sc.ins[k%2]...)
		}
		got, want := ewRun(t, c, sc.out, ins)
		for k := range names {
			ewCompare(t, fmt.Sprintf("%s at %v <- %v", names[k], sc.out, sc.ins), got[k], want[k], tols[k])
		}
	}
}

// TestChainInt checks the integer operations on every integer type,
// including wrap-around at the type's width and the defined results for
// zero divisors; one chain per type keeps each within ChainFits.
func TestChainInt(t *testing.T) {
	for ti, it := range []ElemType{EI64, EI32, EI8, EU8} {
		c := &Chain{}
		var names []string
		a, b, e := c.Input(it), c.Input(it), c.Input(it)
		add := func(name string, node int) {
			names = append(names, fmt.Sprintf("%v %s", it, name))
			c.Output(node)
		}
		for _, o := range []ElemOp{ElemAdd, ElemSub, ElemMul, ElemDiv, ElemMax, ElemMin, ElemEqual, ElemLess,
			ElemGreater, ElemLessOrEqual, ElemGreaterOrEqual, ElemPRelu, ElemSum} {
			add(string(o), c.Op(o, a, b))
		}
		add("Mod(fmod=0)", c.Op(ElemMod, a, b))
		rem := ElemNode(ElemMod, a, b)
		rem.Fmod = 1
		add("Mod(fmod=1)", c.Node(rem))
		add("Pow(a,e)", c.Op(ElemPow, a, e))
		add("Pow(a,2)", c.Op(ElemPow, a, c.ConstInt(it, 2)))
		add("Pow(a,1.0f)", c.Op(ElemPow, a, c.Const(EF32, 1)))
		for _, o := range []ElemOp{ElemNeg, ElemAbs, ElemSign, ElemRelu, ElemIdentity} {
			add(string(o), c.Op(o, a))
		}
		add("Clip(a,-3,5)", c.Op(ElemClip, a, c.ConstInt(it, -3), c.ConstInt(it, 5)))
		add("Where(a<b,a,b)", c.Op(ElemWhere, c.Op(ElemLess, a, b), a, b))
		add("Cast(ewF32)", c.Cast(c.Op(ElemMul, a, b), EF32))
		add("Mul(a,7)", c.Op(ElemMul, a, c.ConstInt(it, 7)))
		seed := int64(31 + 3*ti)
		data := []HostTensor{
			ewInts(seed, it, 400, -40, 40, 0, 1, -1, 7, -7, 100, math.MinInt64, math.MaxInt64, 127, -128, 255, 1<<40, -3),
			ewInts(seed+1, it, 400, -9, 9, 2, 0, -1, -2, 2, 100, -1, 1, 1, -1, 3, 1<<20, 0),
			ewInts(seed+2, it, 400, -2, 9)}
		for _, sc := range ewBinaryShapes {
			ins := make([]HostTensor, len(data))
			for k, h := range data {
				// a takes the first shape, b and the exponent the second.
				ins[k] = ewShaped(h, sc.ins[min(k%3, 1)]...)
			}
			got, want := ewRun(t, c, sc.out, ins)
			for k := range names {
				ewCompare(t, fmt.Sprintf("%s at %v <- %v", names[k], sc.out, sc.ins), got[k], want[k], ewExact)
			}
		}
	}
}

func TestChainBool(t *testing.T) {
	c := &Chain{}
	a, b := c.Input(EBool), c.Input(EBool)
	x, y := c.Input(EF32), c.Input(EI64)
	var names []string
	add := func(name string, node int) {
		names = append(names, name)
		c.Output(node)
	}
	for _, o := range []ElemOp{ElemAnd, ElemOr, ElemXor, ElemEqual} {
		add(string(o), c.Op(o, a, b))
	}
	add("Not", c.Op(ElemNot, a))
	add("Where(a,x,-x)", c.Op(ElemWhere, a, x, c.Op(ElemNeg, x)))
	add("Where(b,y,3)", c.Op(ElemWhere, b, y, c.ConstInt(EI64, 3)))
	add("Where(a,b,true)", c.Op(ElemWhere, a, b, c.ConstInt(EBool, 1)))
	add("Cast(a,i32)", c.Cast(a, EI32))
	add("Const(7)", c.ConstInt(EI64, 7)) // an output no input feeds: a fill
	add("Identity(y)", y)                // an input stored as it is: a copy
	as := ewInts(41, EBool, 105, 0, 1)
	bs := ewInts(42, EBool, 105, 0, 1)
	// Bools are stored as a byte and any non-zero byte reads as true: the
	// upload writes these raw (the reference reads them as 1).
	as.I[0], as.I[1], bs.I[2] = 2, 255, 7
	xs := ewFloats(43, EF32, 105, -2, 2)
	ys := ewInts(44, EI64, 105, -100, 100)
	for _, sc := range []ewShapeCase{
		{[]int{3, 5, 7}, [][]int{{3, 5, 7}, {3, 5, 7}, {3, 5, 7}, {3, 5, 7}}},
		{[]int{3, 5, 7}, [][]int{{5, 1}, {3, 1, 7}, {}, {7}}},
	} {
		got, want := ewRun(t, c, sc.out, []HostTensor{
			ewShaped(as, sc.ins[0]...), ewShaped(bs, sc.ins[1]...), ewShaped(xs, sc.ins[2]...), ewShaped(ys, sc.ins[3]...)})
		for k := range names {
			ewCompare(t, fmt.Sprintf("%s at %v <- %v", names[k], sc.out, sc.ins), got[k], want[k], ewExact)
		}
	}
}

// TestChainCastMatrix casts every type to every type, including values
// that round, saturate, wrap and tie in binary16, in one chain.
func TestChainCastMatrix(t *testing.T) {
	all := []ElemType{EF32, EF16, EI64, EI32, EI8, EU8, EBool}
	floats := []float32{0, float32(math.Copysign(0, -1)), 0.4, -0.6, 1.5, -2.5, 2.7, -2.7, 127.9, 128, 255.5, 256,
		-129, 300, 65504, 65519, 65520, 70000, 1e10, -1e10, 3e9, float32(math.NaN()), float32(math.Inf(1)),
		float32(math.Inf(-1)), 1e-8, 3e-5, 6.1e-5, 1 + 0x1p-11, 1 + 3*0x1p-11, 2049, 0x1p-24, 0x1p-25, 0x1.8p-25, 5.96e-8}
	ints := []int64{0, 1, -1, 127, 128, -128, -129, 255, 256, 2049, 65504, 65520, 70000, 1<<24 + 1, 1 << 40,
		math.MinInt64, math.MaxInt64, 3000000000, -3000000000}
	c := &Chain{}
	var ins []HostTensor
	for fi, from := range all {
		x := c.Input(from)
		for _, to := range all {
			c.Output(c.Cast(x, to))
		}
		// Rounding to f16 inside the chain (the Cast feeds another node)
		// rather than by the store.
		c.Output(c.Cast(c.Cast(x, EF16), EF32))
		var in HostTensor
		switch {
		case from.IsFloat():
			in = ewFloats(int64(51+fi), from, 300, -1e5, 1e5)
			copy(in.F[len(floats):], ewFloats(int64(61+fi), from, 100, -3, 3).F)
			for i, v := range floats {
				if from == EF16 {
					v = ewRoundHalf(v)
				}
				in.F[i] = v
			}
		default:
			in = ewInts(int64(51+fi), from, 300, -100000, 100000, ints...)
		}
		ins = append(ins, ewShaped(in, 300))
	}
	got, want := ewRun(t, c, []int{300}, ins)
	per := len(all) + 1
	for fi, from := range all {
		for ti, to := range all {
			k := fi*per + ti
			ewCompare(t, fmt.Sprintf("Cast %v -> %v", from, to), got[k], want[k], ewExact)
		}
		k := fi*per + len(all)
		ewCompare(t, fmt.Sprintf("Cast %v -> f16 -> ewF32", from), got[k], want[k], ewExact)
	}
}

// ewFusedChain is the test's fused chain: 10 operations over an f16 input
// and ewF32 bias and scale, 3 outputs of three different types.
func ewFusedChain() *Chain {
	c := &Chain{}
	x, bias, s := c.Input(EF16), c.Input(EF32), c.Input(EF32)
	tt := c.Op(ElemAdd, c.Op(ElemMul, c.Cast(x, EF32), s), bias)
	g := c.Op(ElemGelu, tt)
	m := c.Op(ElemGreater, tt, c.Const(EF32, 0))
	y := c.Op(ElemWhere, m, g, c.Op(ElemNeg, c.Op(ElemSigmoid, tt)))
	c.Output(c.Cast(c.Op(ElemMul, y, c.Op(ElemTanh, tt)), EF16))
	c.Output(m)
	c.Output(tt)
	return c
}

// TestChainFusedReuse runs one fused chain at shapes of every kind and
// checks that the library builds one program per launch pattern (rank class
// and which inputs broadcast innermost) and reuses it for other shapes.
func TestChainFusedReuse(t *testing.T) {
	c := ewFusedChain()
	prep, err := c.prepare()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[any]bool{}
	for i, sc := range []struct {
		ewShapeCase
		programs int
	}{
		// Rank <= 3, the scalar s broadcasts innermost.
		{ewShapeCase{[]int{2, 3, 8}, [][]int{{2, 3, 8}, {8}, {}}}, 1},
		{ewShapeCase{[]int{1, 7, 40}, [][]int{{1, 7, 40}, {40}, {1}}}, 1},
		{ewShapeCase{[]int{6, 8}, [][]int{{6, 8}, {8}, {}}}, 1},
		// Rank 4.
		{ewShapeCase{[]int{4, 3, 2, 8}, [][]int{{4, 3, 2, 8}, {3, 1, 8}, {4, 1, 1, 1}}}, 2},
		{ewShapeCase{[]int{3, 3, 2, 8}, [][]int{{3, 3, 2, 8}, {3, 1, 8}, {3, 1, 1, 1}}}, 2},
		// The bias broadcasts innermost too.
		{ewShapeCase{[]int{5, 8}, [][]int{{5, 8}, {1}, {1, 1}}}, 3},
		{ewShapeCase{[]int{2, 8}, [][]int{{2, 8}, {2, 1}, {}}}, 3},
	} {
		got, want := ewRun(t, c, sc.out, []HostTensor{
			ewShaped(ewFloats(int64(60+i), EF16, 400, -3, 3), sc.ins[0]...),
			ewShaped(ewFloats(70, EF32, 400, -1, 1), sc.ins[1]...),
			ewShaped(ewFloats(71, EF32, 4, 0.5, 2), sc.ins[2]...)})
		for k, tol := range []ewTol{ewComp, ewExact, ewArith2} {
			ewCompare(t, fmt.Sprintf("fused output %d at %v", k, sc.out), got[k], want[k], tol)
		}
		testLib.mu.Lock()
		n := 0
		for key, p := range testLib.progs {
			if strings.HasPrefix(key, prep.family+"\x00") {
				n++
				seen[p] = true
			}
		}
		testLib.mu.Unlock()
		if n != sc.programs || len(seen) != sc.programs {
			t.Fatalf("after run %d at %v the library holds %d programs for the chain (%d ever), want %d",
				i, sc.out, n, len(seen), sc.programs)
		}
	}
}

func TestChainBroadcastLayout(t *testing.T) {
	for _, c := range []struct {
		out     []int
		ins     [][]int
		dims    []int
		strides [][]int
	}{
		{[]int{3, 5, 7}, [][]int{{3, 5, 7}, {}}, []int{105}, [][]int{{1}, {0}}},
		{[]int{4, 6}, [][]int{{4, 6}, {6}}, []int{6, 4}, [][]int{{1, 6}, {1, 0}}},
		{[]int{4, 6}, [][]int{{4, 1}}, []int{6, 4}, [][]int{{0, 1}}},
		{[]int{3, 5, 7}, [][]int{{3, 1, 7}, {5, 1}}, []int{7, 5, 3}, [][]int{{1, 0, 7}, {0, 1, 0}}},
		{[]int{1, 4, 1, 6}, [][]int{{4, 1, 6}, {1, 1, 1, 1}}, []int{24}, [][]int{{1}, {0}}},
		{[]int{2, 3, 4}, [][]int{{2, 1, 1}}, []int{12, 2}, [][]int{{0, 1}}},
		{[]int{}, [][]int{{}}, nil, [][]int{nil}},
	} {
		lay, err := chainBroadcast(c.out, c.ins)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(lay.dims) != fmt.Sprint(c.dims) || fmt.Sprint(lay.strides) != fmt.Sprint(c.strides) {
			t.Errorf("layout of %v <- %v = dims %v strides %v, want %v %v", c.out, c.ins, lay.dims, lay.strides, c.dims, c.strides)
		}
	}
	for _, c := range []struct {
		out []int
		ins [][]int
	}{
		{[]int{3, 5}, [][]int{{4}}},
		{[]int{5}, [][]int{{2, 5}}},
		{[]int{0, 3}, [][]int{{2, 3}}},
	} {
		if _, err := chainBroadcast(c.out, c.ins); err == nil {
			t.Errorf("%v <- %v: no error", c.out, c.ins)
		}
	}
}

func TestChainErrors(t *testing.T) {
	bad := []struct {
		what  string
		chain *Chain
		want  string
	}{
		{"mixed float types", BinaryChain(ElemAdd, EF32, EF16), "must match"},
		{"float Mod fmod=0", BinaryChain(ElemMod, EF32, EF32), "fmod=1"},
		{"Sigmoid of int", UnaryChain(ElemSigmoid, EI64), "float type"},
		{"And of float", BinaryChain(ElemAnd, EF32, EF32), "want bool"},
		{"Add of bool", BinaryChain(ElemAdd, EBool, EBool), "bool"},
		{"unknown op", UnaryChain("Frobnicate", EF32), "unsupported"},
		{"forward reference", &Chain{Inputs: []ElemType{EF32}, Nodes: []ChainNode{{Op: ElemNeg, Args: []int{1}}, {Op: ElemInput}}, Outputs: []int{0}}, "earlier node"},
		{"no outputs", &Chain{Inputs: []ElemType{EF32}, Nodes: []ChainNode{{Op: ElemInput}}}, "no outputs"},
		{"int constant as Value", func() *Chain {
			c := &Chain{}
			c.Output(c.Const(EI64, 2.5))
			return c
		}(), "IntValue"},
		{"Where branches", func() *Chain {
			c := &Chain{}
			c.Output(c.Op(ElemWhere, c.Input(EBool), c.Input(EF32), c.Input(EI64)))
			return c
		}(), "branches"},
	}
	for _, b := range bad {
		_, err := b.chain.Source()
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: error %v, want one containing %q", b.what, err, b.want)
		}
	}

	c := BinaryChain(ElemAdd, EF32, EF32)
	a := ewUpload(t, HostTensor{Type: EF32, Shape: []int{4}, F: make([]float32, 4)})
	o := ewAlloc(t, EF32, 12)
	if err := testLib.RunChain(c, []int{3, 4}, []ElemArg{{Buf: a, Shape: []int{4}}}, []Buf{o}); err == nil {
		t.Error("RunChain with one input of two: no error")
	}
	err := testLib.RunChain(c, []int{3, 4}, []ElemArg{{Buf: a, Shape: []int{4}}, {Buf: a, Shape: []int{3}}}, []Buf{o})
	if err == nil || !strings.Contains(err.Error(), "input 1") {
		t.Errorf("RunChain with shape [3] against [3 4]: error %v, want one naming input 1", err)
	}
	if _, err := RunChainRef(c, []int{3, 4}, []HostTensor{{Type: EF32, Shape: []int{4}, F: make([]float32, 4)}, {Type: EF32, Shape: []int{3}, F: make([]float32, 3)}}); err == nil {
		t.Error("RunChainRef with shape [3] against [3 4]: no error")
	}
}

func TestChainSourceDeterministic(t *testing.T) {
	s1, err := ewFusedChain().Source()
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := ewFusedChain().Source()
	if s1 != s2 {
		t.Error("equal chains generated different sources")
	}
	s3, _ := BinaryChain(ElemAdd, EF16, EF16).Source()
	s4, _ := BinaryChain(ElemAdd, EF32, EF32).Source()
	if s3 == s4 {
		t.Error("chains of different input types generated the same source")
	}
	a, b := UnaryChain(ElemLeakyRelu, EF32), UnaryChain(ElemLeakyRelu, EF32)
	b.Nodes[1].Alpha = 0.2
	sa, _ := a.Source()
	sb, _ := b.Source()
	if sa == sb {
		t.Error("LeakyRelu alpha does not reach the source")
	}
}

func TestChainElemTypeOf(t *testing.T) {
	for e := EF32; e <= EBool; e++ {
		got, err := ElemTypeOf(e.DType())
		if err != nil || got != e {
			t.Errorf("ElemTypeOf(%v) = %v, %v; want %v", e.DType(), got, err, e)
		}
		if e.Size() != e.DType().Size() {
			t.Errorf("%v: Size %d, dtype size %d", e, e.Size(), e.DType().Size())
		}
	}
	if _, err := ElemTypeOf(dtype.Float64); err == nil {
		t.Error("ElemTypeOf(float64): no error")
	}
	if len(ElemOps()) != len(elemOpTable) {
		t.Error("ElemOps does not list every operation")
	}
	if !IsElemOp("Gelu") || !IsElemOp("Where") || IsElemOp("Input") || IsElemOp("MatMul") {
		t.Error("IsElemOp: want Gelu and Where in, Input and MatMul out")
	}
}

// ---- benchmarks ----

func benchChain(b *testing.B, c *Chain, outShape []int, ins []HostTensor, bytes int64) {
	args := make([]ElemArg, len(ins))
	for k, h := range ins {
		args[k] = ElemArg{Buf: ewUpload(b, h), Shape: h.Shape}
	}
	n := 1
	for _, d := range outShape {
		n *= d
	}
	out := []Buf{ewAlloc(b, EF32, n)}
	if err := testLib.RunChain(c, outShape, args, out); err != nil {
		b.Fatal(err)
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(bytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := testLib.RunChain(c, outShape, args, out); err != nil {
			b.Fatal(err)
		}
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkChainAdd: contiguous ewF32 a+b over 1M elements (flat kernel);
// bytes are those read and written.
func BenchmarkChainAdd(b *testing.B) {
	const n = 1 << 20
	x := ewShaped(ewFloats(1, EF32, n, -1, 1), n)
	y := ewShaped(ewFloats(2, EF32, n, -1, 1), n)
	benchChain(b, BinaryChain(ElemAdd, EF32, EF32), []int{n}, []HostTensor{x, y}, 3*4*n)
}

// BenchmarkChainBroadcast: [1024,1024] + [1024] row broadcast (nd kernel).
func BenchmarkChainBroadcast(b *testing.B) {
	const r, cols = 1024, 1024
	x := ewShaped(ewFloats(1, EF32, r*cols, -1, 1), r, cols)
	y := ewShaped(ewFloats(2, EF32, cols, -1, 1), cols)
	benchChain(b, BinaryChain(ElemAdd, EF32, EF32), []int{r, cols}, []HostTensor{x, y}, 2*4*r*cols+4*cols)
}

// BenchmarkChainFusedF16: the fused test chain (f16 in, f16/bool/ewF32 out)
// over [1024,1024] with a row-broadcast bias.
func BenchmarkChainFusedF16(b *testing.B) {
	const r, cols = 1024, 1024
	c := ewFusedChain()
	x := ewShaped(ewFloats(1, EF16, r*cols, -1, 1), r, cols)
	bias := ewShaped(ewFloats(2, EF32, cols, -1, 1), cols)
	s := ewShaped(ewFloats(3, EF32, 1, 1, 2))
	args := []HostTensor{x, bias, s}
	ins := make([]ElemArg, 3)
	for k, h := range args {
		ins[k] = ElemArg{Buf: ewUpload(b, h), Shape: h.Shape}
	}
	outs := []Buf{ewAlloc(b, EF16, r*cols), ewAlloc(b, EBool, r*cols), ewAlloc(b, EF32, r*cols)}
	run := func() {
		if err := testLib.RunChain(c, []int{r, cols}, ins, outs); err != nil {
			b.Fatal(err)
		}
	}
	run()
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(r * cols * (2 + 2 + 1 + 4)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
}

// TestChainErfAccuracy sweeps the chain's own erf (and the erfc behind
// Gelu) densely against float64 and bounds the error: they replace the
// device built-ins, so their accuracy is tlite's to prove.
func TestChainErfAccuracy(t *testing.T) {
	c := &Chain{}
	x := c.Input(EF32)
	c.Output(c.Op(ElemErf, x))
	c.Output(c.Op(ElemGelu, x))
	const n = 1 << 16
	xs := HostTensor{Type: EF32, Shape: []int{n}, F: make([]float32, n)}
	for i := range xs.F {
		// Uniform in [-9, 9) plus a geometric run of tiny magnitudes.
		xs.F[i] = float32(-9 + 18*float64(i)/n)
		if i%8 == 0 {
			xs.F[i] = float32(math.Pow(2, -30+30*float64(i)/n))
		}
	}
	got, _ := ewRun(t, c, []int{n}, []HostTensor{xs})
	var worstErf, worstGelu, worstTail float64
	for i, v := range xs.F {
		xv := float64(v)
		we := math.Erf(xv)
		wg := 0.5 * xv * math.Erfc(-xv/math.Sqrt2)
		// Error in units of the float32 spacing at the true value, with a
		// floor at the smallest normal so underflowing tails count as 0.
		ulp := func(w float64) float64 {
			return math.Max(math.Abs(w), 0x1p-126) * 0x1p-23
		}
		worstErf = math.Max(worstErf, math.Abs(float64(got[0].F[i])-we)/ulp(we))
		eg := math.Abs(float64(got[1].F[i])-wg) / ulp(wg)
		if xv >= -4 {
			worstGelu = math.Max(worstGelu, eg)
		} else {
			worstTail = math.Max(worstTail, eg)
		}
	}
	t.Logf("max error over %d points: erf %.2f ulp, gelu %.2f ulp (x >= -4), %.2f ulp (x < -4)", n, worstErf, worstGelu, worstTail)
	// Beyond -4 Gelu's error grows as x*x (the rounding of x*x/2 inside
	// exp), on values below 1e-4 in magnitude.
	if worstErf > 3 || worstGelu > 10 || worstTail > 64 {
		t.Errorf("erf error %.2f ulp (want <= 3), gelu error %.2f ulp (want <= 10), %.2f below -4 (want <= 64)", worstErf, worstGelu, worstTail)
	}
}

// TestChainFits checks the chain kernel's argument count against the
// generated source and that RunChain refuses a chain over the limits with
// an error naming them, instead of handing the driver a kernel it may
// reject.
func TestChainFits(t *testing.T) {
	for _, tc := range []struct{ ins, outs int }{{1, 1}, {4, 2}, {16, 8}, {12, 108}} {
		c := &Chain{}
		var xs []int
		for range tc.ins {
			xs = append(xs, c.Input(EF32))
		}
		for o := range tc.outs {
			c.Output(c.Op(ElemAdd, xs[o%len(xs)], xs[(o+1)%len(xs)]))
		}
		src, err := c.Source()
		if err != nil {
			t.Fatal(err)
		}
		six := src[strings.Index(src, "__kernel void chain6("):]
		six = six[:strings.Index(six, ")")]
		params, _ := ChainKernelArgs(tc.ins, tc.outs)
		if got := strings.Count(six, ",") + 1; got != params {
			t.Errorf("%d inputs, %d outputs: chain6 has %d parameters, ChainKernelArgs says %d", tc.ins, tc.outs, got, params)
		}
		fits := ChainFits(tc.ins, tc.outs) == nil
		if want := tc.ins <= 16 && tc.outs <= 8; fits != want {
			t.Errorf("%d inputs, %d outputs: ChainFits = %v, want %v", tc.ins, tc.outs, fits, want)
		}
		if fits {
			continue
		}
		outs := make([]Buf, tc.outs)
		for k := range outs {
			outs[k] = alloc(t, F32, 4)
		}
		ins := make([]ElemArg, tc.ins)
		for k := range ins {
			ins[k] = ElemArg{Buf: alloc(t, F32, 4), Shape: []int{4}}
		}
		err = testLib.RunChain(c, []int{4}, ins, outs)
		if err == nil || !strings.Contains(err.Error(), "split the chain") {
			t.Errorf("%d inputs, %d outputs: RunChain error %v, want one over the limits", tc.ins, tc.outs, err)
		}
	}
}

// TestElemOpTableComplete: every entry of the op table has its type rule,
// generator and reference, and each is reached: some choice of argument
// types type-checks, generates source and evaluates on the host. The ONNX
// keys are unique and map back to their op.
func TestElemOpTableComplete(t *testing.T) {
	seen := map[string]ElemOp{}
	for _, op := range ElemOps() {
		d := elemOpTable[op]
		if d.typ == nil || d.expr == nil || d.ref == nil {
			t.Errorf("%s: type rule %t, generator %t, reference %t; want all three", op, d.typ != nil, d.expr != nil, d.ref != nil)
			continue
		}
		if d.args[0] > d.args[1] {
			t.Errorf("%s: argument bounds %v", op, d.args)
		}
		if d.onnx != "" {
			if prev, dup := seen[d.onnx]; dup {
				t.Errorf("ONNX op %s maps to both %s and %s", d.onnx, prev, op)
			}
			seen[d.onnx] = op
			if got, ok := ElemOpFor(d.onnx); !ok || got != op {
				t.Errorf("ElemOpFor(%q) = %s, %t; want %s", d.onnx, got, ok, op)
			}
		} else if IsElemOp(string(op)) && op != ElemIdentity {
			t.Errorf("%s: no ONNX op lowers to it", op)
		}
		if !IsElemOp(string(op)) {
			continue // leaves: exercised by every chain below
		}
		ran := false
		for _, first := range []ElemType{EF32, EI64, EBool} {
			for _, rest := range []ElemType{EF32, EI64, EBool} {
				c := &Chain{}
				args := make([]int, d.args[0])
				for k := range args {
					typ := rest
					if k == 0 {
						typ = first
					}
					args[k] = c.Input(typ)
				}
				n, err := ElemNodeONNX(op, onnxDefaults{}, args)
				if err != nil {
					t.Fatalf("%s: ElemNodeONNX: %v", op, err)
				}
				if n.Op == ElemCast {
					n.To = EF32
				}
				c.Output(c.Node(n))
				if _, err := c.Types(); err != nil {
					continue
				}
				if _, err := c.Source(); err != nil {
					t.Errorf("%s(%v, %v...): type-checks but generates no source: %v", op, first, rest, err)
				}
				ins := make([]HostTensor, len(c.Inputs))
				for k, typ := range c.Inputs {
					ins[k] = NewHostTensor(typ, []int{1})
				}
				if _, err := RunChainRef(c, []int{1}, ins); err != nil {
					t.Errorf("%s(%v, %v...): type-checks but has no reference: %v", op, first, rest, err)
				}
				ran = true
			}
		}
		if !ran {
			t.Errorf("%s: no argument types type-check", op)
		}
		if d.attrs != nil && d.args[1] == 1 {
			// ElemNode's defaults are the ONNX ones the table reads.
			def, _ := ElemNodeONNX(op, onnxDefaults{}, []int{0})
			if got := ElemNode(op, 0); fmt.Sprint(got) != fmt.Sprint(def) {
				t.Errorf("%s: ElemNode %+v, ONNX defaults %+v", op, got, def)
			}
		}
	}
}

// TestElemNodeONNX: the ONNX side of the table reads attributes and
// checks inputs.
func TestElemNodeONNX(t *testing.T) {
	attrs := ewCorpusAttrs{attrs: map[string]ewPBAttr{"alpha": {f: 0.25}, "fmod": {i: 1}, "approximate": {s: "tanh"}}, read: map[string]bool{}}
	if n, _ := ElemNodeONNX(ElemLeakyRelu, attrs, []int{0}); n.Alpha != 0.25 {
		t.Errorf("LeakyRelu alpha = %g, want 0.25", n.Alpha)
	}
	if n, _ := ElemNodeONNX(ElemMod, attrs, []int{0, 1}); n.Fmod != 1 {
		t.Errorf("Mod fmod = %d, want 1", n.Fmod)
	}
	if n, _ := ElemNodeONNX(ElemGelu, attrs, []int{0}); n.Approximate != "tanh" {
		t.Errorf("Gelu approximate = %q, want tanh", n.Approximate)
	}
	if n, _ := ElemNodeONNX(ElemMax, attrs, []int{-1, 3, -1}); n.Op != ElemIdentity || fmt.Sprint(n.Args) != "[3]" {
		t.Errorf("one-input Max = %s%v, want Identity[3]", n.Op, n.Args)
	}
	if n, _ := ElemNodeONNX(ElemMean, attrs, []int{3}); n.Op != ElemMean {
		t.Errorf("one-input Mean = %s, want Mean (its float check stays)", n.Op)
	}
	if n, _ := ElemNodeONNX(ElemClip, attrs, []int{2}); fmt.Sprint(n.Args) != "[2 -1 -1]" {
		t.Errorf("Clip without bounds: args %v, want [2 -1 -1]", n.Args)
	}
	for _, bad := range []struct {
		op   ElemOp
		args []int
		want string
	}{
		{ElemAdd, []int{0}, "needs 2 inputs"},
		{ElemWhere, []int{0, -1, 2}, "input 1 is missing"},
		{ElemSum, []int{-1}, "no inputs"},
		{ElemInput, nil, "not an element-wise operation"},
		{"Frobnicate", []int{0}, "not an element-wise operation"},
	} {
		if _, err := ElemNodeONNX(bad.op, attrs, bad.args); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ElemNodeONNX(%s, %v): error %v, want one containing %q", bad.op, bad.args, err, bad.want)
		}
	}
}

// BenchmarkChainGeluErf: erf-GELU as PyTorch exports it, x*0.5 *
// (1 + erf(x/sqrt2)), one fused chain over a BERT-small FFN activation
// (128 tokens x 2048); "gelu" is the same through the Gelu op, "add" a
// plain a+b over as many elements (the memory-bound floor).
func BenchmarkChainGeluErf(b *testing.B) {
	const r, cols = 128, 2048
	// Wide enough that erfc's exp underflows for part of the elements, as
	// in a randomly initialised model, whose FFN activations reach +-30.
	x := ewShaped(ewFloats(1, EF32, r*cols, -30, 30), r, cols)
	for _, tc := range []struct {
		name  string
		chain func() *Chain
		ins   []HostTensor
	}{
		{"exported", func() *Chain {
			c := &Chain{}
			in := c.Input(EF32)
			half := c.Op(ElemMul, in, c.Const(EF32, 0.5))
			e := c.Op(ElemErf, c.Op(ElemDiv, in, c.Const(EF32, math.Sqrt2)))
			c.Output(c.Op(ElemMul, half, c.Op(ElemAdd, e, c.Const(EF32, 1))))
			return c
		}, []HostTensor{x}},
		{"gelu", func() *Chain {
			c := &Chain{}
			c.Output(c.Op(ElemGelu, c.Input(EF32)))
			return c
		}, []HostTensor{x}},
		{"add", func() *Chain { return BinaryChain(ElemAdd, EF32, EF32) }, []HostTensor{x, x}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cpu0 := cpuTime()
			benchChain(b, tc.chain(), []int{r, cols}, tc.ins, int64(4*r*cols*(1+len(tc.ins))))
			// CPU time includes the first (untimed) run; with -benchtime
			// 20x or more that is a few percent.
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N)/float64(r*cols), "cpu-ns/elem")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(r*cols), "ns/elem")
		})
	}
}

// TestChainExactCover runs a chain whose rows fill the work-groups exactly
// (built without the bounds test, EW_FULL) and rows that do not, and checks
// every element against the reference, so a launch that drops the test
// where a row ends mid-group would show as wrong or missing elements.
func TestChainExactCover(t *testing.T) {
	for _, shape := range [][]int{{3, 64}, {3, 128}, {2, 32}, {3, 70}, {2, 17}, {5, 48}} {
		n := shape[0] * shape[1]
		x := ewShaped(ewFloats(1, EF32, n, -3, 3), shape...)
		y := ewShaped(ewFloats(2, EF32, shape[1], -3, 3), shape[1])
		c := &Chain{}
		a, b := c.Input(EF32), c.Input(EF32)
		c.Output(c.Op(ElemGelu, c.Op(ElemAdd, a, b)))
		got, want := ewRun(t, c, shape, []HostTensor{x, y})
		assertClose(t, fmt.Sprint(shape), got[0].F, want[0].F, 1e-6, 1e-5)
	}
}
