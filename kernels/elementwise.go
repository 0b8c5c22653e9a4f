package kernels

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tlite/tlite/graph/dtype"
)

// The element-wise family: every element-wise ONNX op, alone or fused with
// its neighbours, runs as a Chain, an expression DAG compiled to one OpenCL
// kernel. Inputs broadcast to the output shape numpy-style; shapes and
// strides are launch arguments, so one compiled chain serves every shape.
//
// Semantics, shared by the device and RunChainRef:
//   - Float values (ewF32 and f16 alike) are computed in fp32; only stores to
//     f16 and explicit Casts to f16 round to binary16 (ties to even).
//   - Integer values are computed in 64 bits and wrapped to their type after
//     every operation (int8 100+100 = -56). Div truncates toward zero; Div and
//     Mod by 0 give 0 and MIN/-1 wraps, where C would trap. Pow of integers
//     is exact by squaring; a negative exponent truncates (2^-1 = 0).
//   - Cast float->int truncates toward zero, saturates at the int64 range and
//     maps NaN to 0, then wraps to the target width (300.0 -> uint8 44);
//     float->bool and int->bool test != 0 (NaN is true); int->float rounds to
//     nearest even.
//   - Max, Min, Clip and Relu propagate NaN. Clip is Min(max, Max(x, min)),
//     so min > max gives max; an absent bound is argument -1.
//   - Gelu, QuickGelu, HardSwish and Mish return -0 at -inf, their limit,
//     instead of the NaN their formulas give. Erf and Gelu use tlite's own
//     erf/erfc (TestChainErfAccuracy bounds them), not the device built-ins.

//go:embed elementwise.cl
var elementwiseSrc string

// ElemType is the element type of a chain's input, output or intermediate
// value as it is stored on the device.
type ElemType int

// The element types chains support. Float types compute in fp32, integer
// types in 64-bit integers wrapped to their own width after every operation,
// bool as 0/1.
const (
	EF32  ElemType = iota // float32
	EF16                  // IEEE binary16 storage, fp32 arithmetic
	EI64                  // int64
	EI32                  // int32
	EI8                   // int8
	EU8                   // uint8
	EBool                 // bool, stored as one byte 0 or 1
)

var elemTypeNames = [...]string{"ewF32", "f16", "i64", "i32", "i8", "u8", "bool"}

func (t ElemType) valid() bool { return t >= EF32 && t <= EBool }

// String names t as in generated-kernel comments and error messages.
func (t ElemType) String() string {
	if t.valid() {
		return elemTypeNames[t]
	}
	return fmt.Sprintf("ElemType(%d)", int(t))
}

// Size is the number of bytes of one stored element of type t.
func (t ElemType) Size() int {
	switch t {
	case EF32, EI32:
		return 4
	case EF16:
		return 2
	case EI64:
		return 8
	}
	return 1
}

// IsFloat reports whether t is a floating-point type.
func (t ElemType) IsFloat() bool { return t == EF32 || t == EF16 }

// IsInt reports whether t is an integer type (bool excluded).
func (t ElemType) IsInt() bool { return t == EI64 || t == EI32 || t == EI8 || t == EU8 }

// DType is the ONNX element type that t stores.
func (t ElemType) DType() dtype.Type {
	switch t {
	case EF32:
		return dtype.Float32
	case EF16:
		return dtype.Float16
	case EI64:
		return dtype.Int64
	case EI32:
		return dtype.Int32
	case EI8:
		return dtype.Int8
	case EU8:
		return dtype.Uint8
	case EBool:
		return dtype.Bool
	}
	return dtype.Undefined
}

// ElemTypeOf maps an ONNX element type to the chain type that stores it.
func ElemTypeOf(t dtype.Type) (ElemType, error) {
	for e := EF32; e <= EBool; e++ {
		if e.DType() == t {
			return e, nil
		}
	}
	return 0, fmt.Errorf("kernels: element type %v has no element-wise chain support", t)
}

// ElemOp names a chain node's operation: an ONNX operator name, or the two
// leaf kinds ElemInput and ElemConst.
type ElemOp string

// The operations a chain node can perform. Names and semantics follow the
// ONNX operators of the same name (QuickGelu is the com.microsoft one).
const (
	ElemInput          ElemOp = "Input"
	ElemConst          ElemOp = "Const"
	ElemIdentity       ElemOp = "Identity"
	ElemAdd            ElemOp = "Add"
	ElemSub            ElemOp = "Sub"
	ElemMul            ElemOp = "Mul"
	ElemDiv            ElemOp = "Div"
	ElemPow            ElemOp = "Pow"
	ElemMod            ElemOp = "Mod"
	ElemMax            ElemOp = "Max"
	ElemMin            ElemOp = "Min"
	ElemSum            ElemOp = "Sum"
	ElemMean           ElemOp = "Mean"
	ElemEqual          ElemOp = "Equal"
	ElemLess           ElemOp = "Less"
	ElemGreater        ElemOp = "Greater"
	ElemLessOrEqual    ElemOp = "LessOrEqual"
	ElemGreaterOrEqual ElemOp = "GreaterOrEqual"
	ElemAnd            ElemOp = "And"
	ElemOr             ElemOp = "Or"
	ElemXor            ElemOp = "Xor"
	ElemNot            ElemOp = "Not"
	ElemWhere          ElemOp = "Where"
	ElemCast           ElemOp = "Cast"
	ElemClip           ElemOp = "Clip"
	ElemRelu           ElemOp = "Relu"
	ElemLeakyRelu      ElemOp = "LeakyRelu"
	ElemPRelu          ElemOp = "PRelu"
	ElemSigmoid        ElemOp = "Sigmoid"
	ElemHardSigmoid    ElemOp = "HardSigmoid"
	ElemHardSwish      ElemOp = "HardSwish"
	ElemTanh           ElemOp = "Tanh"
	ElemErf            ElemOp = "Erf"
	ElemGelu           ElemOp = "Gelu"
	ElemQuickGelu      ElemOp = "QuickGelu"
	ElemExp            ElemOp = "Exp"
	ElemLog            ElemOp = "Log"
	ElemSqrt           ElemOp = "Sqrt"
	ElemReciprocal     ElemOp = "Reciprocal"
	ElemNeg            ElemOp = "Neg"
	ElemAbs            ElemOp = "Abs"
	ElemFloor          ElemOp = "Floor"
	ElemCeil           ElemOp = "Ceil"
	ElemRound          ElemOp = "Round"
	ElemSign           ElemOp = "Sign"
	ElemSin            ElemOp = "Sin"
	ElemCos            ElemOp = "Cos"
	ElemSoftplus       ElemOp = "Softplus"
	ElemElu            ElemOp = "Elu"
	ElemSelu           ElemOp = "Selu"
	ElemMish           ElemOp = "Mish"
	ElemIsNaN          ElemOp = "IsNaN"
	ElemIsInf          ElemOp = "IsInf"
)

// ChainNode is one operation of a Chain. Args are indices of earlier nodes
// in Chain.Nodes, so the node list is its own topological order; -1 marks an
// absent optional argument (Clip's min or max). Only the attribute fields
// that Op reads matter; ElemNode fills them with ONNX's defaults.
type ChainNode struct {
	Op   ElemOp
	Args []int

	// Input is the Chain.Inputs slot an ElemInput node reads.
	Input int
	// To is the target type of ElemCast and the type of an ElemConst.
	To ElemType
	// Value is an ElemConst's value when To is a float type; IntValue when
	// To is an integer type or bool (non-zero is true).
	Value    float64
	IntValue int64

	// Alpha is LeakyRelu's, Elu's, Selu's, HardSigmoid's and QuickGelu's
	// alpha; Beta is HardSigmoid's beta; Gamma is Selu's gamma. They are
	// rounded to float32 like every float constant of a chain.
	Alpha, Beta, Gamma float64
	// Approximate is Gelu's approximation: "none" (erf) or "tanh".
	Approximate string
	// Fmod is Mod's fmod: 0 for Python's sign-of-divisor remainder
	// (integers only), 1 for C's fmod.
	Fmod int
	// DetectNegative and DetectPositive are IsInf's attributes.
	DetectNegative, DetectPositive bool
}

// Chain is a DAG of element-wise operations compiled into one kernel. All
// outputs have the launch's output shape and every input broadcasts to it.
// A Chain must not be modified once it has been run: its generated source is
// cached in it.
type Chain struct {
	// Inputs are the element types of the input tensors, in RunChain order.
	Inputs []ElemType
	// Nodes are the operations, each referring only to earlier nodes.
	Nodes []ChainNode
	// Outputs are the nodes whose values are stored, in RunChain order; the
	// stored type is the node's type.
	Outputs []int

	prep *chainPrep // guarded by chainPrepMu
}

// nodeType checks n's argument count against d and returns d's result type.
func (c *Chain) nodeType(d elemOpDef, n *ChainNode, types []ElemType) (ElemType, error) {
	lo, hi := d.args[0], d.args[1]
	switch {
	case hi == 0 && len(n.Args) != 0:
		return 0, fmt.Errorf("leaf with %d arguments", len(n.Args))
	case len(n.Args) < lo || len(n.Args) > hi:
		if lo == hi {
			return 0, fmt.Errorf("%d arguments, want %d", len(n.Args), lo)
		}
		return 0, fmt.Errorf("%d arguments, want %d to %d", len(n.Args), lo, hi)
	}
	return d.typ(&typeCtx{c: c, n: n, types: types})
}

// expr is the OpenCL expression computing node i from earlier values.
func (c *Chain) expr(i int, types []ElemType) (string, error) {
	n := &c.Nodes[i]
	d, ok := elemOpTable[n.Op]
	if !ok {
		return "", fmt.Errorf("no code generator")
	}
	return d.expr(&exprCtx{c: c, i: i, n: n, t: types[i], types: types})
}

// chainPrepMu guards every Chain's prep, so that sessions on different
// devices may share a chain.
var chainPrepMu sync.Mutex

// chainPrep is what RunChain derives from a chain once.
type chainPrep struct {
	src    string
	family string
	used   []bool // inputs some node reads
}

// Input adds an input of type t and the node that reads it; it returns the
// node's index.
func (c *Chain) Input(t ElemType) int {
	c.Inputs = append(c.Inputs, t)
	return c.Node(ChainNode{Op: ElemInput, Input: len(c.Inputs) - 1})
}

// Const adds a float constant of float type t and returns its node index.
func (c *Chain) Const(t ElemType, v float64) int {
	return c.Node(ChainNode{Op: ElemConst, To: t, Value: v})
}

// ConstInt adds an integer or bool constant and returns its node index.
func (c *Chain) ConstInt(t ElemType, v int64) int {
	return c.Node(ChainNode{Op: ElemConst, To: t, IntValue: v})
}

// Op adds op on args with ONNX's default attributes and returns its index.
func (c *Chain) Op(op ElemOp, args ...int) int { return c.Node(ElemNode(op, args...)) }

// Cast adds a Cast of node x to type to and returns its index.
func (c *Chain) Cast(x int, to ElemType) int {
	return c.Node(ChainNode{Op: ElemCast, Args: []int{x}, To: to})
}

// Node appends n and returns its index.
func (c *Chain) Node(n ChainNode) int {
	c.Nodes = append(c.Nodes, n)
	return len(c.Nodes) - 1
}

// Output marks node as the chain's next output.
func (c *Chain) Output(node int) { c.Outputs = append(c.Outputs, node) }

// UnaryChain is op applied to one input of type t, with default attributes
// (edit c.Nodes[1] to change them).
func UnaryChain(op ElemOp, t ElemType) *Chain {
	c := &Chain{}
	c.Output(c.Op(op, c.Input(t)))
	return c
}

// BinaryChain is op applied to inputs of types ta and tb, with default
// attributes (edit c.Nodes[2] to change them).
func BinaryChain(op ElemOp, ta, tb ElemType) *Chain {
	c := &Chain{}
	a := c.Input(ta)
	b := c.Input(tb)
	c.Output(c.Op(op, a, b))
	return c
}

// Types checks the chain and returns the type of every node's value.
func (c *Chain) Types() ([]ElemType, error) {
	for i, t := range c.Inputs {
		if !t.valid() {
			return nil, fmt.Errorf("kernels: chain input %d: invalid type %v", i, t)
		}
	}
	types := make([]ElemType, len(c.Nodes))
	for i := range c.Nodes {
		n := &c.Nodes[i]
		d, ok := elemOpTable[n.Op]
		if !ok {
			return nil, fmt.Errorf("kernels: chain node %d (%s): unsupported operation", i, n.Op)
		}
		// Only ops with optional arguments (Clip's bounds) take -1.
		optional := d.args[1] > d.args[0] && d.args != argsVariadic
		for _, a := range n.Args {
			if a >= i || a < -1 || (a == -1 && !optional) {
				return nil, fmt.Errorf("kernels: chain node %d (%s): argument %d does not name an earlier node", i, n.Op, a)
			}
		}
		t, err := c.nodeType(d, n, types)
		if err != nil {
			return nil, fmt.Errorf("kernels: chain node %d (%s): %w", i, n.Op, err)
		}
		types[i] = t
	}
	if len(c.Outputs) == 0 {
		return nil, fmt.Errorf("kernels: chain has no outputs")
	}
	for k, o := range c.Outputs {
		if o < 0 || o >= len(c.Nodes) {
			return nil, fmt.Errorf("kernels: chain output %d names node %d of %d", k, o, len(c.Nodes))
		}
	}
	return types, nil
}

// OutputTypes returns the stored type of each output.
func (c *Chain) OutputTypes() ([]ElemType, error) {
	types, err := c.Types()
	if err != nil {
		return nil, err
	}
	out := make([]ElemType, len(c.Outputs))
	for k, o := range c.Outputs {
		out[k] = types[o]
	}
	return out, nil
}

// ---- OpenCL source generation ----

// chainCType is the OpenCL type that holds a value of type t during computation.
func chainCType(t ElemType) string {
	switch {
	case t.IsFloat():
		return "float"
	case t == EBool:
		return "int"
	}
	return "long"
}

// chainPtrType is the OpenCL element type of a buffer of t.
func chainPtrType(t ElemType) string {
	return [...]string{"float", "half", "long", "int", "char", "uchar", "uchar"}[t]
}

// chainWrap narrows a long expression to integer type t's range, as storing
// and reloading it would.
func chainWrap(t ElemType, e string) string {
	switch t {
	case EI32:
		return "(long)(int)(" + e + ")"
	case EI8:
		return "(long)(char)(" + e + ")"
	case EU8:
		return "(long)(uchar)(" + e + ")"
	}
	return e
}

// chainFloatLit is v rounded to float32 as an exact OpenCL literal.
func chainFloatLit(v float64) string {
	f := float32(v)
	switch {
	case math.IsNaN(float64(f)):
		return "NAN"
	case math.IsInf(float64(f), 1):
		return "INFINITY"
	case math.IsInf(float64(f), -1):
		return "(-INFINITY)"
	}
	s := strconv.FormatFloat(float64(f), 'x', -1, 32) + "f"
	if f < 0 || (f == 0 && math.Signbit(float64(f))) {
		return "(" + s + ")"
	}
	return s
}

func chainLongLit(v int64) string {
	if v == math.MinInt64 {
		return "(-9223372036854775807L - 1L)"
	}
	if v < 0 {
		return "(" + strconv.FormatInt(v, 10) + "L)"
	}
	return strconv.FormatInt(v, 10) + "L"
}

// Source returns the OpenCL C program of the chain: the helpers, then the
// chain's body in two kernels that are never built together: chain3
// (default) covers every broadcast that collapses to at most 3 dimensions
// (contiguous, scalars, rows, columns) with no index division; chain6
// (built with -DEW_RANK6, only when a launch needs it) covers up to 6.
// Which inputs broadcast along the innermost dimension is a build option
// too, so a chain has a program per such pattern it meets (usually one).
// Equal chains give identical text, which is what keys the program cache.
func (c *Chain) Source() (string, error) {
	types, err := c.Types()
	if err != nil {
		return "", err
	}
	used := c.usedInputs()
	var b strings.Builder
	b.WriteString(elementwiseSrc)
	b.WriteString("\n// Generated chain:\n")
	for i := range c.Nodes {
		fmt.Fprintf(&b, "//   v%d = %s\n", i, c.describe(i, types))
	}

	// An input's innermost stride is always 0 (broadcast) or 1 after
	// collapsing, and it is a build option (EW_B0_k: input k broadcasts
	// along dimension 0) rather than an argument: compilers that vectorise
	// across work-items (PoCL) version the loop on symbolic strides being 1
	// and run scalar code otherwise, 8x slower for a scalar operand.
	for k := range c.Inputs {
		if used[k] {
			fmt.Fprintf(&b, "#ifdef EW_B0_%[1]d\n#define EW_X0_%[1]d 0\n#else\n#define EW_X0_%[1]d x0\n#endif\n", k)
		}
	}
	body := func(w *strings.Builder, rank int) error {
		for k, t := range c.Inputs {
			if !used[k] {
				continue
			}
			fmt.Fprintf(w, "\tconst int p%d = io%d + EW_X0_%d", k, k, k)
			for d := 1; d < rank; d++ {
				fmt.Fprintf(w, " + x%d * s%d_%d", d, k, d)
			}
			fmt.Fprintf(w, "; // %v\n", t)
		}
		for i := range c.Nodes {
			e, err := c.expr(i, types)
			if err != nil {
				return fmt.Errorf("kernels: chain node %d (%s): %w", i, c.Nodes[i].Op, err)
			}
			fmt.Fprintf(w, "\tconst %s v%d = %s;\n", chainCType(types[i]), i, e)
		}
		for k, o := range c.Outputs {
			fmt.Fprintf(w, "\t%s;\n", chainStore(types[o], fmt.Sprintf("o%d", k), fmt.Sprintf("oo%d + o", k), fmt.Sprintf("v%d", o)))
		}
		return nil
	}
	header := func(w *strings.Builder, name string, rank int) {
		fmt.Fprintf(w, "\n__kernel void %s(", name)
		for d := 0; d < rank; d++ {
			if d > 0 {
				w.WriteString(", ")
			}
			fmt.Fprintf(w, "const int n%d", d)
		}
		for k, o := range c.Outputs {
			fmt.Fprintf(w, ",\n\t__global %s* o%d, const int oo%d", chainPtrType(types[o]), k, k)
		}
		for k, t := range c.Inputs {
			fmt.Fprintf(w, ",\n\t__global const %s* i%d, const int io%d", chainPtrType(t), k, k)
			for d := 1; d < rank; d++ {
				fmt.Fprintf(w, ", const int s%d_%d", k, d)
			}
		}
		w.WriteString(")\n{\n")
	}

	// EW_FULL: the launch covers dimension 0 exactly (n0 is a multiple of
	// the work-group width), so no work-item is out of bounds. Without the
	// test, a compiler that vectorises across work-items (PoCL) loads and
	// stores whole vectors instead of masked ones, which AMD's cores run
	// as slow microcode.
	b.WriteString("\n#ifdef EW_FULL\n#define EW_BOUND\n#else\n#define EW_BOUND if (x0 >= n0) return;\n#endif")
	b.WriteString("\n#ifndef EW_RANK6")
	header(&b, "chain3", 3)
	// Work-groups are one row wide, so dimensions 1 and 2 come from group
	// ids: the compiler then knows they are uniform in a group, and loads
	// that only they index stay scalar (with get_global_id, PoCL turns them
	// into gathers and the kernel runs 6x slower).
	b.WriteString(`	const int x0 = get_global_id(0);
	const int x1 = get_group_id(1);
	const int x2 = get_group_id(2);
	EW_BOUND
	const int o = (x2 * n1 + x1) * n0 + x0;
`)
	if err := body(&b, 3); err != nil {
		return "", err
	}
	b.WriteString("}\n#else")
	header(&b, "chain6", chainMaxRank)
	b.WriteString(`	const int x0 = get_global_id(0);
	const int x1 = get_group_id(1);
	const int r = get_group_id(2);
	EW_BOUND
	int q = r;
	const int x2 = q % n2; q /= n2;
	const int x3 = q % n3; q /= n3;
	const int x4 = q % n4;
	const int x5 = q / n4;
	const int o = (r * n1 + x1) * n0 + x0;
`)
	if err := body(&b, chainMaxRank); err != nil {
		return "", err
	}
	b.WriteString("}\n#endif\n")
	return b.String(), nil
}

func (c *Chain) usedInputs() []bool {
	used := make([]bool, len(c.Inputs))
	for _, n := range c.Nodes {
		if n.Op == ElemInput && n.Input >= 0 && n.Input < len(used) {
			used[n.Input] = true
		}
	}
	return used
}

// describe renders node i for the comment header of the generated source.
func (c *Chain) describe(i int, types []ElemType) string {
	n := &c.Nodes[i]
	var s string
	switch n.Op {
	case ElemInput:
		s = fmt.Sprintf("Input(%d)", n.Input)
	case ElemConst:
		if n.To.IsFloat() {
			s = "Const(" + chainFloatLit(n.Value) + ")"
		} else {
			s = "Const(" + chainLongLit(n.IntValue) + ")"
		}
	default:
		args := make([]string, len(n.Args))
		for k, a := range n.Args {
			if a < 0 {
				args[k] = "absent"
			} else {
				args[k] = fmt.Sprintf("v%d", a)
			}
		}
		s = string(n.Op) + "(" + strings.Join(args, ", ") + ")"
	}
	return s + " : " + types[i].String()
}

func chainLoad(t ElemType, k int) string {
	p, i := fmt.Sprintf("i%d", k), fmt.Sprintf("p%d", k)
	switch t {
	case EF32, EI64:
		return p + "[" + i + "]"
	case EF16:
		return "vload_half(" + i + ", " + p + ")"
	case EBool:
		return "(int)(" + p + "[" + i + "] != 0)"
	}
	return "(long)" + p + "[" + i + "]"
}

func chainStore(t ElemType, p, i, v string) string {
	switch t {
	case EF32, EI64:
		return p + "[" + i + "] = " + v
	case EF16:
		return "vstore_half_rte(" + v + ", " + i + ", " + p + ")"
	}
	return p + "[" + i + "] = (" + chainPtrType(t) + ")" + v
}

// chainCast converts expression e of type from to type to.
func chainCast(from, to ElemType, e string) string {
	switch {
	case from == to:
		return e
	case from.IsFloat() && to == EF16:
		return "ew_round_half(" + e + ")"
	case from.IsFloat() && to.IsFloat():
		return e
	case from.IsFloat() && to == EBool:
		return "(int)(" + e + " != 0.0f)"
	case from.IsFloat():
		return chainWrap(to, "ew_f2l("+e+")")
	case to == EF16:
		return "ew_round_half((float)(" + e + "))"
	case to.IsFloat():
		return "(float)(" + e + ")"
	case to == EBool:
		return "(int)(" + e + " != 0)"
	case from == EBool:
		return "(long)(" + e + ")"
	}
	return chainWrap(to, e)
}

// isConstTwo reports whether node a is a constant equal to 2, so Pow can
// multiply instead of calling pow (x^2 is common: RMSNorm, variance).
func (c *Chain) isConstTwo(a int) bool {
	n := &c.Nodes[a]
	if n.Op != ElemConst {
		return false
	}
	if n.To.IsFloat() {
		return float32(n.Value) == 2
	}
	return n.To != EBool && n.IntValue == 2
}

// feedsNode reports whether some node takes node i as an argument.
func (c *Chain) feedsNode(i int) bool {
	for _, n := range c.Nodes[i+1:] {
		if slices.Contains(n.Args, i) {
			return true
		}
	}
	return false
}

// ---- launching ----

// chainMaxRank is the most dimensions a broadcast may have after size-1
// dimensions are dropped and contiguous runs merged.
const chainMaxRank = 6

// Every kernel keeps within these, so that it builds and launches on any
// OpenCL device: SPIR-V allows a function 255 parameters, and
// CL_DEVICE_MAX_PARAMETER_SIZE is only guaranteed to be 1 KiB (phones give
// no more). tools/kernelgate checks every built kernel against both.
const (
	MaxKernelParams     = 255
	MaxKernelParamBytes = 1024
)

// ChainKernelArgs returns the parameters of the chain kernel with ins
// inputs and outs outputs, and their bytes, for its widest form (chain6,
// the one any broadcast of rank 4 to 6 builds): the sizes, then a pointer
// and offset per output, then a pointer, offset and strides per input.
func ChainKernelArgs(ins, outs int) (params, bytes int) {
	const ptr, i32 = 8, 4
	params = chainMaxRank + 2*outs + (2+chainMaxRank-1)*ins
	bytes = chainMaxRank*i32 + outs*(ptr+i32) + ins*(ptr+i32+(chainMaxRank-1)*i32)
	return params, bytes
}

// ChainFits reports, as an error naming the counts, whether a chain of ins
// inputs and outs outputs compiles to a kernel within MaxKernelParams and
// MaxKernelParamBytes. Fusion passes size their groups by it.
func ChainFits(ins, outs int) error {
	n, b := ChainKernelArgs(ins, outs)
	if n > MaxKernelParams || b > MaxKernelParamBytes {
		return fmt.Errorf("kernels: a chain of %d inputs and %d outputs needs %d kernel arguments of %d bytes; at most %d arguments and %d bytes build on every device (split the chain)",
			ins, outs, n, b, MaxKernelParams, MaxKernelParamBytes)
	}
	return nil
}

// ElemArg is a chain input: its buffer and its own shape, which broadcasts
// to the output shape by numpy's rules (right-aligned; each dimension equal
// to the output's or 1). The tensor is dense row-major from Buf.Off.
type ElemArg struct {
	Buf
	Shape []int
}

// chainLayout is a broadcast reduced to its essentials: the output's
// dimensions innermost first, with size-1 dimensions dropped and runs that
// every input reads contiguously (or not at all) merged, and each input's
// element stride per dimension (0 where it broadcasts).
type chainLayout struct {
	dims    []int
	strides [][]int
	n       int
}

// chainBroadcast computes the layout of inputs of shapes ins broadcast to
// out, or says which input does not broadcast.
func chainBroadcast(out []int, ins [][]int) (chainLayout, error) {
	var lay chainLayout
	lay.n = 1
	for d, s := range out {
		if s < 0 {
			return lay, fmt.Errorf("kernels: chain output shape %v: dimension %d is negative", out, d)
		}
		lay.n *= s
		if lay.n > math.MaxInt32 {
			return lay, fmt.Errorf("kernels: chain output shape %v has more than 2^31-1 elements", out)
		}
	}
	r := len(out)
	full := make([][]int, len(ins)) // per input, stride per output dim
	for k, s := range ins {
		if len(s) > r {
			return lay, fmt.Errorf("kernels: chain input %d shape %v has more dimensions than output %v", k, s, out)
		}
		st := make([]int, r)
		step := 1
		for j := len(s) - 1; j >= 0; j-- {
			d := j + r - len(s)
			switch s[j] {
			case out[d]:
				if s[j] != 1 {
					st[d] = step
				}
			case 1:
			default:
				return lay, fmt.Errorf("kernels: chain input %d shape %v does not broadcast to %v (dimension %d)", k, s, out, j)
			}
			step *= s[j]
		}
		full[k] = st
	}
	lay.strides = make([][]int, len(ins))
	// Walk from the innermost dimension, merging dimension d into the
	// current innermost group when every input's stride continues it.
	for d := r - 1; d >= 0; d-- {
		if out[d] == 1 {
			continue
		}
		g := len(lay.dims) - 1
		if g >= 0 {
			merge := true
			for k := range ins {
				if full[k][d] != lay.strides[k][g]*lay.dims[g] {
					merge = false
					break
				}
			}
			if merge {
				lay.dims[g] *= out[d]
				continue
			}
		}
		lay.dims = append(lay.dims, out[d])
		for k := range ins {
			lay.strides[k] = append(lay.strides[k], full[k][d])
		}
	}
	return lay, nil
}

// prepare generates and keeps the chain's source the first time it runs.
func (c *Chain) prepare() (*chainPrep, error) {
	chainPrepMu.Lock()
	defer chainPrepMu.Unlock()
	if c.prep != nil {
		return c.prep, nil
	}
	src, err := c.Source()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(src))
	c.prep = &chainPrep{src: src, family: "elementwise/" + hex.EncodeToString(sum[:]), used: c.usedInputs()}
	return c.prep, nil
}

// RunChain enqueues chain c over outShape: ins[k] is the chain's input k
// (broadcast from its own shape), outs[k] receives output k, dense with
// shape outShape. An empty output launches nothing. The chain is compiled
// on first use for each launch pattern (rank up to 3 or above; which inputs
// broadcast along the innermost dimension), and a pattern's program serves
// every shape that has it: a sequence length changes nothing.
func (l *Lib) RunChain(c *Chain, outShape []int, ins []ElemArg, outs []Buf) error {
	prep, err := c.prepare()
	if err != nil {
		return err
	}
	if err := ChainFits(len(c.Inputs), len(c.Outputs)); err != nil {
		return err
	}
	if len(ins) != len(c.Inputs) {
		return fmt.Errorf("kernels: chain has %d inputs, got %d", len(c.Inputs), len(ins))
	}
	if len(outs) != len(c.Outputs) {
		return fmt.Errorf("kernels: chain has %d outputs, got %d", len(c.Outputs), len(outs))
	}
	shapes := make([][]int, len(ins))
	for k, in := range ins {
		if in.Mem == nil && prep.used[k] {
			return fmt.Errorf("kernels: chain input %d has no buffer", k)
		}
		shapes[k] = in.Shape
	}
	for k, o := range outs {
		if o.Mem == nil {
			return fmt.Errorf("kernels: chain output %d has no buffer", k)
		}
	}
	lay, err := chainBroadcast(outShape, shapes)
	if err != nil {
		return err
	}
	if lay.n == 0 {
		return nil
	}
	rank := len(lay.dims)
	if rank > chainMaxRank {
		return fmt.Errorf("kernels: chain broadcast of %v to %v needs %d dimensions, at most %d supported", shapes, outShape, rank, chainMaxRank)
	}
	// Broadcasts of rank 4 to 6 need index division, which is slow where
	// the compiler vectorises across work-items (PoCL); they are rare enough
	// to get their own program, built only when one occurs.
	var opts strings.Builder
	name, nd := "chain3", 3
	if rank > 3 {
		name, nd = "chain6", chainMaxRank
		opts.WriteString("-DEW_RANK6")
	}
	for k := range ins {
		if !prep.used[k] || rank == 0 {
			continue
		}
		switch lay.strides[k][0] {
		case 0:
			fmt.Fprintf(&opts, " -DEW_B0_%d", k)
		case 1:
		default:
			return fmt.Errorf("kernels: chain input %d: innermost stride %d after collapsing %v to %v (internal error)", k, lay.strides[k][0], shapes, outShape)
		}
	}
	n0 := 1
	if rank > 0 {
		n0 = lay.dims[0]
	}
	if n0%chainWidth(n0) == 0 {
		opts.WriteString(" -DEW_FULL")
	}
	k, err := l.kernel(prep.family, prep.src, opts.String(), name)
	if err != nil {
		return err
	}
	dims := make([]int, nd)
	for d := range dims {
		dims[d] = 1
		if d < rank {
			dims[d] = lay.dims[d]
		}
	}
	args := make([]any, 0, nd+2*len(outs)+(1+nd)*len(ins))
	for _, d := range dims {
		args = append(args, int32(d))
	}
	for _, o := range outs {
		args = append(args, o.Mem, int32(o.Off))
	}
	for k, in := range ins {
		mem := in.Mem
		if mem == nil {
			// An unread input still needs some buffer bound to its slot.
			mem = outs[0].Mem
		}
		args = append(args, mem, int32(in.Off))
		for d := 1; d < nd; d++ {
			s := 0
			if d < rank {
				s = lay.strides[k][d]
			}
			args = append(args, int32(s))
		}
	}
	// Work-groups span part of one row (the kernels rely on it).
	width := chainWidth(dims[0])
	outer := 1
	for _, d := range dims[2:] {
		outer *= d
	}
	global := []int{roundUp(dims[0], width), dims[1], outer}
	local := []int{width, 1, 1}
	return l.dev.Launch(k, global, local, args...)
}

// chainWidth is the work-group width of a chain launch whose innermost
// dimension has n elements. Two fixed widths: PoCL compiles a kernel again
// for every new local size, and a narrow innermost dimension should not
// leave most of a 64-wide group idle on a GPU.
func chainWidth(n int) int {
	if n < 48 {
		return 16
	}
	return 64
}
