package engine

import (
	"encoding/binary"
	"fmt"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
)

func i64Raw(v ...int64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

// runBoth opens a hand-built model on both backends, runs it and returns
// each backend's outputs.
func runBoth(t *testing.T, model []byte, in map[string]*tensor.Dense) []map[string]*tensor.Dense {
	t.Helper()
	var res []map[string]*tensor.Dense
	for _, opts := range []Options{{Kernels: testLib}, {Device: "go"}} {
		m, err := graph.Parse(model, "")
		if err != nil {
			t.Fatal(err)
		}
		s, err := OpenModel(m, opts)
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.Run(in)
		if err != nil {
			t.Fatalf("%s: %v", s.dev.Name(), err)
		}
		s.Close()
		res = append(res, out)
	}
	return res
}

func checkFloats(t *testing.T, what string, got *tensor.Dense, want []float32) {
	t.Helper()
	g := floats(t, got)
	if len(g) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(g), len(want))
	}
	for i := range want {
		if abs32(g[i]-want[i]) > 1e-5*max(1, abs32(want[i])) {
			t.Fatalf("%s: element %d is %v, want %v (all: %v)", what, i, g[i], want[i], g)
		}
	}
}

// TestCumSumAndGatherElements covers two lowerings no exported model uses.
func TestCumSumAndGatherElements(t *testing.T) {
	nodes := []pb{
		nodePB("CumSum", "cs", []string{"x", "axis"}, []string{"c"}, aInt("reverse", 1)),
		nodePB("GatherElements", "ge", []string{"x", "idx"}, []string{"g"}, aInt("axis", 1)),
	}
	inits := []pb{
		tensorPB("axis", dtype.Int64, nil, i64Raw(1)),
		tensorPB("idx", dtype.Int64, []int64{2, 2}, i64Raw(2, 0, -1, 1)),
	}
	g := graphPB("g", nodes, inits, []pb{tvi("x", dtype.Float32, 2, 3)},
		[]pb{tvi("c", dtype.Float32, 2, 3), tvi("g", dtype.Float32, 2, 2)})
	x := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{1, 2, 3, 4, 5, 6}))
	for _, out := range runBoth(t, modelPB(17, g), map[string]*tensor.Dense{"x": x}) {
		// reverse cumulative sums along each row
		checkFloats(t, "CumSum", out["c"], []float32{6, 5, 3, 15, 11, 6})
		// row 0 takes columns 2, 0; row 1 columns -1 (=2), 1
		checkFloats(t, "GatherElements", out["g"], []float32{3, 1, 6, 5})
	}
}

// TestCumSumInt runs CumSum over an int64 mask, as decoders build position
// ids from attention_mask: the device kernel takes floats only, so the
// host op computes it, exclusive and reverse included.
func TestCumSumInt(t *testing.T) {
	nodes := []pb{
		nodePB("CumSum", "cs", []string{"m", "axis"}, []string{"c"}),
		nodePB("CumSum", "cx", []string{"m", "axis"}, []string{"e"}, aInt("exclusive", 1), aInt("reverse", 1)),
	}
	inits := []pb{tensorPB("axis", dtype.Int64, nil, i64Raw(1))}
	g := graphPB("g", nodes, inits, []pb{tvi("m", dtype.Int64, 2, 4)},
		[]pb{tvi("c", dtype.Int64, 2, 4), tvi("e", dtype.Int64, 2, 4)})
	m := tensor.New(tensor.WithShape(2, 4), tensor.WithBacking([]int64{0, 1, 1, 1, 1, 1, 0, 1}))
	for _, out := range runBoth(t, modelPB(17, g), map[string]*tensor.Dense{"m": m}) {
		for name, want := range map[string][]int64{"c": {0, 1, 2, 3, 1, 2, 2, 3}, "e": {3, 2, 1, 0, 2, 1, 1, 0}} {
			got, ok := out[name].Data().([]int64)
			if !ok || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("CumSum %s = %v, want %v", name, out[name].Data(), want)
			}
		}
	}
}

// TestHostOpBetweenKernels puts a CPU-only op (Trilu) between two device
// steps: its input is read back from the device and its result uploaded
// again mid-program.
func TestHostOpBetweenKernels(t *testing.T) {
	nodes := []pb{
		nodePB("Neg", "neg", []string{"x"}, []string{"n"}),
		nodePB("Trilu", "tri", []string{"n"}, []string{"u"}, aInt("upper", 0)),
		nodePB("Abs", "abs", []string{"u"}, []string{"y"}),
	}
	g := graphPB("g", nodes, nil, []pb{tvi("x", dtype.Float32, "n", 3)}, []pb{tvi("y", dtype.Float32, "n", 3)})
	x := tensor.New(tensor.WithShape(3, 3), tensor.WithBacking([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9}))
	for _, out := range runBoth(t, modelPB(17, g), map[string]*tensor.Dense{"x": x}) {
		checkFloats(t, "Abs(Trilu(Neg))", out["y"], []float32{1, 0, 0, 4, 5, 0, 7, 8, 9})
	}
}

// TestRangeFromInputs runs Range on scalars given to Run: a host op whose
// output length depends on the data, bound at run time.
func TestRangeFromInputs(t *testing.T) {
	nodes := []pb{nodePB("Range", "r", []string{"a", "b", "d"}, []string{"y"})}
	g := graphPB("g", nodes, nil,
		[]pb{tvi("a", dtype.Float32), tvi("b", dtype.Float32), tvi("d", dtype.Float32)},
		[]pb{tvi("y", dtype.Float32, "len")})
	sc := func(v float32) *tensor.Dense { return tensor.New(tensor.FromScalar(v)) }
	for _, out := range runBoth(t, modelPB(17, g), map[string]*tensor.Dense{"a": sc(1), "b": sc(2.2), "d": sc(0.25)}) {
		checkFloats(t, "Range", out["y"], []float32{1, 1.25, 1.5, 1.75, 2})
	}
}

// TestCatchComposite: the composite builder's recover turns its own error
// carrier into an error and lets every other panic through, a runtime
// error above all (it would otherwise read as "unsupported").
func TestCatchComposite(t *testing.T) {
	want := fmt.Errorf("no such op")
	if err := catchComposite(func() error { panic(compositeErr{want}) }); err != want {
		t.Errorf("carried error: got %v, want %v", err, want)
	}
	if err := catchComposite(func() error { return want }); err != want {
		t.Errorf("returned error: got %v, want %v", err, want)
	}
	for name, f := range map[string]func() error{
		"runtime error": func() error {
			var xs []int
			return fmt.Errorf("%d", xs[len(xs)+1])
		},
		"plain error value": func() error { panic(want) },
	} {
		got := func() (r any) {
			defer func() { r = recover() }()
			catchComposite(f)
			return nil
		}()
		if got == nil {
			t.Errorf("%s: recovered by catchComposite", name)
		}
	}
}
