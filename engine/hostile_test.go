package engine

import (
	"encoding/binary"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
)

// hostileModel parses a model built from nodes, initializers, inputs and
// outputs, as a file would be.
func hostileModel(t *testing.T, nodes []*graph.Node, inits []*graph.Tensor, inputs, outputs []*graph.Value) *graph.Model {
	t.Helper()
	var is []*graph.Value
	for _, x := range inits {
		is = append(is, graphtest.Init(x))
	}
	b := graphtest.Bytes(graphtest.Model(17, graphtest.Graph("hostile", nodes, is, inputs, outputs)))
	m, err := graph.Parse(b, "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// rangeOnDevice is Range(0, limit) with limit an input, cast to float on
// the device: a device tensor whose size only the input's value gives.
func rangeOnDevice(t *testing.T) *graph.Model {
	return hostileModel(t, []*graph.Node{
		graphtest.Node("Range", "range", []string{"start", "limit", "delta"}, []string{"r"}),
		graphtest.Node("Cast", "cast", []string{"r"}, []string{"y"}, graphtest.Int("to", 1)),
	}, []*graph.Tensor{graphtest.Int64s("start", nil, 0), graphtest.Int64s("delta", nil, 1)},
		[]*graph.Value{graphtest.Value("limit", dtype.Int64)}, []*graph.Value{graphtest.Unshaped("y", dtype.Float32)})
}

func f32s(shape []int, fill float32) *tensor.Dense {
	v := make([]float32, numel(shape))
	for i := range v {
		v[i] = fill
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

func i64s(shape []int, v ...int64) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

func int64Raw(v ...int64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

// hostileCase is a model that must fail cleanly at Open (openErr) or, when
// openErr is empty, open and then fail cleanly at Run (runErr) on the
// feeds; good feeds, when set, must run.
type hostileCase struct {
	name    string
	model   func(t *testing.T) *graph.Model
	opts    Options
	openErr []string
	feeds   map[string]*tensor.Dense
	runErr  []string
	good    map[string]*tensor.Dense
}

// TestHostileModels: the defects of issue 9's hostile-input list that
// reach the engine fail with an error naming what and where, on both
// devices, with no panic, no unbounded allocation and no wrong-sized output.
func TestHostileModels(t *testing.T) {
	table := graphtest.Float32s("table", []int64{5, 3}, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)
	cases := []hostileCase{
		{name: "unused ConstantOfShape of 2^62", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("ConstantOfShape", "big", []string{"shape"}, []string{"unused"}),
				graphtest.Node("Identity", "id", []string{"x"}, []string{"y"}),
			}, []*graph.Tensor{graphtest.Int64s("shape", []int64{1}, 1<<62)},
				[]*graph.Value{graphtest.Value("x", dtype.Float32, 2)}, []*graph.Value{graphtest.Value("y", dtype.Float32, 2)})
		}, feeds: map[string]*tensor.Dense{"x": f32s([]int{2}, 1)}, openErr: []string{"big"}},
		{name: "Range 0..2^40", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Range", "range", []string{"start", "limit", "delta"}, []string{"r"}),
				graphtest.Node("ReduceSum", "sum", []string{"r"}, []string{"y"}, graphtest.Int("keepdims", 0)),
			}, []*graph.Tensor{graphtest.Int64s("start", nil, 0), graphtest.Int64s("limit", nil, 1<<40), graphtest.Int64s("delta", nil, 1)},
				nil, []*graph.Value{graphtest.Value("y", dtype.Int64)})
		}, openErr: []string{"range"}},
		{name: "used ConstantOfShape of 256 GiB", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("ConstantOfShape", "big", []string{"shape"}, []string{"c"}),
				graphtest.Node("Add", "add", []string{"c", "x"}, []string{"y"}),
			}, []*graph.Tensor{graphtest.Int64s("shape", []int64{1}, 1<<36)},
				[]*graph.Value{graphtest.Value("x", dtype.Float32, 1)}, []*graph.Value{graphtest.Value("y", dtype.Float32, 1<<36)})
		}, openErr: []string{"memory plan", "256.00 GiB", "c "}},
		{name: "Reshape of 16 elements to Shape(start=10)", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Shape", "shape", []string{"x"}, []string{"s"}, graphtest.Int("start", 10)),
				graphtest.Node("Reshape", "reshape", []string{"x", "s"}, []string{"y"}),
			}, nil, []*graph.Value{graphtest.Value("x", dtype.Float32, 4, 4)}, []*graph.Value{graphtest.Unshaped("y", dtype.Float32)})
		}, openErr: []string{"reshape", "16"}},
		{name: "Reshape of 15 elements to [batch, 4]", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Shape", "shape", []string{"y"}, []string{"s"}),
				graphtest.Node("Reshape", "reshape", []string{"x", "s"}, []string{"r"}),
				graphtest.Node("Add", "add", []string{"r", "y"}, []string{"z"}),
			}, nil, []*graph.Value{graphtest.Value("x", dtype.Float32, 3, 5), graphtest.Value("y", dtype.Float32, "batch", 4)},
				[]*graph.Value{graphtest.Unshaped("z", dtype.Float32)})
		}, openErr: []string{"reshape", "15"}},
		{name: "Reshape of n elements to [2, 3]", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Reshape", "reshape", []string{"x", "s"}, []string{"y"}),
			}, []*graph.Tensor{graphtest.Int64s("s", []int64{2}, 2, 3)},
				[]*graph.Value{graphtest.Value("x", dtype.Float32, "n")}, []*graph.Value{graphtest.Unshaped("y", dtype.Float32)})
		}, feeds: map[string]*tensor.Dense{"x": f32s([]int{5}, 1)}, runErr: []string{"x", "n"},
			good: map[string]*tensor.Dense{"x": f32s([]int{6}, 1)}},
		{name: "Reshape to a shape given at run time", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Reshape", "reshape", []string{"x", "s"}, []string{"y"}),
			}, nil, []*graph.Value{graphtest.Value("x", dtype.Float32, "n"), graphtest.Value("s", dtype.Int64, 2)},
				[]*graph.Value{graphtest.Unshaped("y", dtype.Float32)})
		}, feeds: map[string]*tensor.Dense{"x": f32s([]int{5}, 1), "s": i64s([]int{2}, 2, 3)}, runErr: []string{"reshape", "5"},
			good: map[string]*tensor.Dense{"x": f32s([]int{6}, 1), "s": i64s([]int{2}, 3, 2)}},
		{name: "Pad to 512 GiB", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Pad", "pad", []string{"x", "pads"}, []string{"y"}),
			}, []*graph.Tensor{graphtest.Int64s("pads", []int64{4}, 0, 0, 0, 1<<36)},
				[]*graph.Value{graphtest.Value("x", dtype.Float32, 2, 2)}, []*graph.Value{graphtest.Unshaped("y", dtype.Float32)})
		}, openErr: []string{"memory", "GiB"}},
		{name: "Gather with constant indices out of range", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Gather", "gather", []string{"table", "idx"}, []string{"g"}),
				graphtest.Node("Add", "add", []string{"g", "x"}, []string{"y"}),
			}, []*graph.Tensor{table, graphtest.Int64s("idx", []int64{2}, 1, 7)},
				[]*graph.Value{graphtest.Value("x", dtype.Float32, 3)}, []*graph.Value{graphtest.Value("y", dtype.Float32, 2, 3)})
		}, openErr: []string{"gather", "7"}},
		{name: "Gather with input indices out of range", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Gather", "gather", []string{"table", "ids"}, []string{"y"}),
			}, []*graph.Tensor{table},
				[]*graph.Value{graphtest.Value("ids", dtype.Int64, "n")}, []*graph.Value{graphtest.Value("y", dtype.Float32, "n", 3)})
		}, feeds: map[string]*tensor.Dense{"ids": i64s([]int{3}, 0, 100000, 1)}, runErr: []string{`input "ids"`, "element [1] is 100000", "outside 0..4", "gather"},
			good: map[string]*tensor.Dense{"ids": i64s([]int{3}, 0, 4, 1)}},
		{name: "Gather of a constant table with negative input indices", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Gather", "gather", []string{"table", "ids"}, []string{"y"}),
			}, []*graph.Tensor{table},
				[]*graph.Value{graphtest.Value("ids", dtype.Int64, "n")}, []*graph.Value{graphtest.Value("y", dtype.Float32, "n", 3)})
		}, feeds: map[string]*tensor.Dense{"ids": i64s([]int{3}, 0, 2, -5)}, runErr: []string{`input "ids"`, "element [2] is -5", "outside 0..4", "gather"},
			good: map[string]*tensor.Dense{"ids": i64s([]int{3}, 0, 4, 1)}},
		{name: "Gather of an input table with negative input indices", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Gather", "gather", []string{"data", "ids"}, []string{"y"}),
			}, nil, []*graph.Value{graphtest.Value("data", dtype.Float32, 5, 3), graphtest.Value("ids", dtype.Int64, "n")},
				[]*graph.Value{graphtest.Value("y", dtype.Float32, "n", 3)})
		}, feeds: map[string]*tensor.Dense{"data": f32s([]int{5, 3}, 1), "ids": i64s([]int{2}, 0, -6)}, runErr: []string{`input "ids"`, "element [1] is -6", "outside -5..4"},
			good: map[string]*tensor.Dense{"data": f32s([]int{5, 3}, 1), "ids": i64s([]int{2}, 0, -5)}}, // ONNX: -5 counts from the end
		{name: "Gather with data-driven indices out of range", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Mul", "scale", []string{"ids", "k"}, []string{"ids2"}),
				graphtest.Node("Gather", "gather", []string{"table", "ids2"}, []string{"y"}),
			}, []*graph.Tensor{table, graphtest.Int64s("k", nil, 3)},
				[]*graph.Value{graphtest.Value("ids", dtype.Int64, "n")}, []*graph.Value{graphtest.Value("y", dtype.Float32, "n", 3)})
		}, feeds: map[string]*tensor.Dense{"ids": i64s([]int{2}, 1, 2)}, runErr: []string{"gather", "index 6 is out of range"},
			good: map[string]*tensor.Dense{"ids": i64s([]int{2}, 1, -1)}},
		{name: "ConstantOfShape of a shape given at run time", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("ConstantOfShape", "cos", []string{"s"}, []string{"y"}),
			}, nil, []*graph.Value{graphtest.Value("s", dtype.Int64, 1)}, []*graph.Value{graphtest.Unshaped("y", dtype.Float32)})
		}, openErr: []string{`"y" needs`, "nothing bounds y_", `node "cos"`, "--max y_"}}, // a data-dependent device output: refused, not guessed
		{name: "Range to a limit given at run time", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Range", "range", []string{"start", "limit", "delta"}, []string{"y"}),
			}, []*graph.Tensor{graphtest.Int64s("start", nil, 0), graphtest.Int64s("delta", nil, 1)},
				[]*graph.Value{graphtest.Value("limit", dtype.Int64)}, []*graph.Value{graphtest.Unshaped("y", dtype.Int64)})
		}, opts: Options{MemoryLimit: 1 << 30}, feeds: map[string]*tensor.Dense{"limit": tensor.New(tensor.FromScalar(int64(1 << 34)))}, runErr: []string{"range", "128.00 GiB", "more than the 1.00 GiB"},
			good: map[string]*tensor.Dense{"limit": tensor.New(tensor.FromScalar(int64(5)))}},
		{name: "Expand to a shape given at run time", model: func(t *testing.T) *graph.Model {
			return hostileModel(t, []*graph.Node{
				graphtest.Node("Expand", "expand", []string{"x", "s"}, []string{"y"}),
			}, nil, []*graph.Value{graphtest.Value("x", dtype.Float32, 1), graphtest.Value("s", dtype.Int64, 2)}, []*graph.Value{graphtest.Unshaped("y", dtype.Float32)})
		}, openErr: []string{`"y" needs`, "nothing bounds y_", `node "expand"`, "--max y_"}},
		// A size only known from an input's value: the plan's error names
		// where the size comes from and the --max that bounds it, and a
		// run past the declared maximum is refused, not overrun.
		{name: "Range to a run-time limit read on the device", model: rangeOnDevice, openErr: []string{`"r" needs`, "nothing bounds r_0", `node "range"`, "--max r_0=<n>"}},
		{name: "Range to a run-time limit read on the device, bounded", model: rangeOnDevice, opts: Options{Max: map[string]int64{"r_0": 8}},
			feeds: map[string]*tensor.Dense{"limit": tensor.New(tensor.FromScalar(int64(20)))}, runErr: []string{"range", `"r" is 20`, "maximum of r_0", "--max r_0=20"},
			good: map[string]*tensor.Dense{"limit": tensor.New(tensor.FromScalar(int64(8)))}},
	}
	for _, c := range cases {
		for _, dev := range []string{"go", "opencl"} {
			t.Run(c.name+"/"+dev, func(t *testing.T) {
				opts := c.opts
				if dev == "go" {
					opts.Device = "go"
				} else {
					opts.Kernels = testLib
				}
				m := c.model(t)
				s, err := OpenModel(m, opts)
				if len(c.openErr) > 0 {
					if err == nil {
						s.Close()
						t.Fatalf("Open succeeded; want an error mentioning %q", c.openErr)
					}
					assertMentions(t, "Open", err, c.openErr)
					t.Log(err)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if c.feeds != nil {
					out, err := s.Run(c.feeds)
					if err == nil {
						t.Fatalf("Run succeeded (%v); want an error mentioning %q", out, c.runErr)
					}
					assertMentions(t, "Run", err, c.runErr)
					t.Log(err)
				}
				if c.good != nil {
					if _, err := s.Run(c.good); err != nil {
						t.Errorf("a good run after the bad one: %v", err)
					}
				}
			})
		}
	}
}

func assertMentions(t *testing.T, what string, err error, want []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(w)) {
			t.Errorf("%s: %v\nwant it to mention %q", what, err, w)
		}
	}
}
