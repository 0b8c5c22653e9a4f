package conformance

import (
	"errors"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
)

// TestCaseOp: how a case is filed under an operator.
func TestCaseOp(t *testing.T) {
	one := graphtest.Model(17, graphtest.Graph("g", []*graph.Node{graphtest.Node("Relu", "r", []string{"x"}, []string{"y"})}, nil,
		[]*graph.Value{graphtest.Value("x", dtype.Float32, 2)}, []*graph.Value{graphtest.Value("y", dtype.Float32, 2)}))
	two := graphtest.Model(17, graphtest.Graph("g", []*graph.Node{
		graphtest.Node("Relu", "r", []string{"x"}, []string{"t"}), graphtest.Node("Neg", "n", []string{"t"}, []string{"y"})}, nil,
		[]*graph.Value{graphtest.Value("x", dtype.Float32, 2)}, []*graph.Value{graphtest.Value("y", dtype.Float32, 2)}))
	for _, c := range []struct {
		title string
		m     *graph.Model
		want  string
	}{
		{"test_whatever", one, "Relu"},
		{"test_layer_normalization_2d_axis0_expanded", two, "LayerNormalization"},
		{"test_log_softmax_axis_0_expanded", two, "LogSoftmax"},
		{"test_softmax_axis_0_expanded", two, "Softmax"},
		{"test_sce_mean_expanded", two, "sce"},
		{"test_single_relu_model", nil, "single"},
	} {
		if got := caseOp(c.title, c.m); got != c.want {
			t.Errorf("caseOp(%s) = %q, want %q", c.title, got, c.want)
		}
	}
}

// TestOutOfScope: the classes and that an ordinary failing case gets none.
func TestOutOfScope(t *testing.T) {
	model := func(op string, t dtype.Type, attrs ...*graph.Attr) *graph.Model {
		return graphtest.Model(17, graphtest.Graph("g", []*graph.Node{graphtest.Node(op, "n", []string{"x"}, []string{"y"}, attrs...)}, nil,
			[]*graph.Value{graphtest.Value("x", t, 2)}, []*graph.Value{graphtest.Value("y", t, 2)}))
	}
	for _, c := range []struct {
		m     *graph.Model
		title string
		want  string // prefix; "" for in scope
	}{
		{model("RandomUniformLike", dtype.Float32), "test_x", "random"},
		{model("SoftmaxCrossEntropyLoss", dtype.Float32), "test_x", "training"},
		{model("BatchNormalization", dtype.Float32, graphtest.Int("training_mode", 1)), "test_x", "training"},
		{model("Relu", dtype.Float64), "test_x", "float64"},
		{model("StringNormalizer", dtype.String), "test_x", "strings"},
		{model("SequenceEmpty", dtype.Float32), "test_x", "sequences"},
		{model("Relu", dtype.Float32), "test_nllloss_x_expanded", "training"},
		{model("RoiAlign", dtype.Float32), "test_roialign", ""},
		{model("Cast", dtype.BFloat16), "test_cast", ""},
	} {
		got := outOfScope(c.m, c.title)
		if c.want == "" && got != "" || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s %s: %q, want a reason starting %q", c.m.Graph.Nodes[0].OpType, c.title, got, c.want)
		}
	}
	if got := outOfScopeParse(errors.New(`value "s": sequence types are not supported`)); !strings.HasPrefix(got, "sequences") {
		t.Errorf("a sequence-typed input: %q", got)
	}
	if got := outOfScopeParse(errors.New("truncated")); got != "" {
		t.Errorf("a broken file is not out of scope: %q", got)
	}
}
