package engine

import (
	"reflect"
	"slices"
	"testing"

	"github.com/tlite/tlite/kernels"
)

// TestElementwiseLoweringList: the ops the engine lowers as element-wise
// chains are exactly the kernels' op table's ONNX ops, the composites and
// CastLike, each registered to lowerElementwise, and every op the engine
// lowered before the table existed still is.
func TestElementwiseLoweringList(t *testing.T) {
	isChain := func(key string) bool {
		fn, ok := lowerings[key]
		return ok && reflect.ValueOf(fn).Pointer() == reflect.ValueOf(lowerElementwise).Pointer()
	}
	want := map[string]bool{"CastLike": true}
	for _, op := range kernels.ElemONNXOps() {
		want[op] = true
	}
	for op := range compositeOps {
		if want[op] {
			t.Errorf("%s is both a composite and an op of the kernels' table", op)
		}
		want[op] = true
	}
	for op := range want {
		if !isChain(op) {
			t.Errorf("%s: not registered to lowerElementwise", op)
		}
		if !isElementwise(op) {
			t.Errorf("%s: isElementwise says no", op)
		}
	}
	for key := range lowerings {
		if isChain(key) && key != fusedOp && !want[key] {
			t.Errorf("%s is lowered as a chain but is in neither the table nor the composites", key)
		}
	}
	if got := elementwiseOps(); len(got) != len(want) || !slices.IsSorted(got) {
		t.Errorf("elementwiseOps lists %d ops (sorted %t), want the %d of the table, composites and CastLike", len(got), slices.IsSorted(got), len(want))
	}
	// The list as it stood before the table: none may go missing.
	before := []string{
		"Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu",
		"Max", "Min", "Sum", "Mean",
		"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not",
		"Where", "Cast", "CastLike", "Clip",
		"Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf", "Gelu",
		"Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil", "Round", "Sign",
		"Sin", "Cos", "Tan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
		"Softplus", "Softsign", "Elu", "Selu", "Celu", "Mish", "ThresholdedRelu", "Shrink",
		"IsNaN", "IsInf", "com.microsoft.QuickGelu",
	}
	for _, op := range before {
		if !want[op] {
			t.Errorf("%s is no longer lowered as element-wise", op)
		}
	}
	if isElementwise("Identity") || isElementwise("MatMul") {
		t.Error("isElementwise: Identity and MatMul are not chain lowerings")
	}
}
