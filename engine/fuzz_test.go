package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/owulveryck/onnx-go/backend/testbackend"
	_ "github.com/owulveryck/onnx-go/backend/testbackend/onnx" // registers the corpus
	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
	"github.com/tlite/tlite/symshape"
)

// Fuzzing limits: every fuzzed model is planned for inputs whose free dims
// are at most fuzzDim, with at most fuzzMemory bytes of plan and
// constants and fuzzFold bytes of load-time folding. The memory limit also
// bounds the work of one run (a 512 x 512 MatMul at most), so that no
// input nears the fuzzer's 10-second limit on a loaded machine.
const (
	fuzzDim    = 4
	fuzzMemory = 1 << 20
	fuzzFold   = 1 << 20
)

// FuzzOpenRun goes past parsing: each input that parses as a model is
// opened on the pure-Go device (shape derivation, rewrites, lowering, the
// memory plan) with the plan sized for small input shapes, and run once on
// inputs of those shapes. Any error is fine; a panic, an allocation past
// the limits or a run that does not return is a failure. Seeds: the
// onnx-go operator corpus, the test models under testdata/cli and the
// hostile models of hostile_test.go.
func FuzzOpenRun(f *testing.F) {
	for _, mk := range testbackend.GetAllRegisteredTests() {
		f.Add(mk().ModelB)
	}
	paths, _ := filepath.Glob("../testdata/cli/*.onnx")
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil && len(data) < 1<<20 {
			f.Add(data)
		}
	}
	for _, m := range fuzzSeeds() {
		f.Add(graphtest.Bytes(m))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := graph.Parse(data, "")
		if err != nil {
			return
		}
		defer m.Close()
		openAndRunSmall(t, m, data)
	})
}

// openAndRunSmall opens m on the pure-Go device with small input shapes
// (free dims 1..fuzzDim, chosen from seed bytes) and runs it once.
func openAndRunSmall(t *testing.T, m *graph.Model, seed []byte) {
	pick := func(i int) int {
		if len(seed) == 0 {
			return 1
		}
		return 1 + int(seed[i%len(seed)])%fuzzDim
	}
	var shapes map[string][]int
	opts := Options{Device: "go", MemoryLimit: fuzzMemory, FoldBytes: fuzzFold,
		InputShapes: func(ports []Port) (map[string][]int, error) {
			shapes = map[string][]int{}
			b := symshape.Binding{}
			for pi, p := range ports {
				for a, d := range p.Shape {
					if name, bare := d.SymName(); bare {
						if _, seen := b[name]; !seen {
							b[name] = int64(pick(7*pi + a))
						}
					}
				}
			}
			for pi, p := range ports {
				dims := make([]int, len(p.Shape))
				for a, d := range p.Shape {
					v, err := d.Eval(b)
					if err != nil || v < 0 || v > 1<<16 {
						v = int64(pick(7*pi + a)) // left to the binding to refuse
					}
					dims[a] = int(v)
				}
				shapes[p.Name] = dims
			}
			return shapes, nil
		}}
	s, err := OpenModel(m, opts)
	if err != nil {
		return
	}
	defer s.Close()
	if tot := s.Plan().Allocated() + s.constB; tot > 2*fuzzMemory {
		t.Fatalf("the plan and constants take %d bytes, past the %d-byte limit", tot, int64(fuzzMemory))
	}
	feeds := map[string]*tensor.Dense{}
	for i, p := range s.Inputs() {
		dims := shapes[p.Name]
		n := 1
		for _, d := range dims {
			n *= d
		}
		if n > fuzzMemory/8 {
			return
		}
		var backing any
		switch p.Type {
		case "float32", "float16":
			v := make([]float32, n)
			for j := range v {
				v[j] = float32(pick(i+j)) - 2.5
			}
			backing = v
		case "int64":
			v := make([]int64, n)
			for j := range v {
				v[j] = int64(pick(i+j) - 1)
			}
			backing = v
		case "int32":
			v := make([]int32, n)
			for j := range v {
				v[j] = int32(pick(i+j) - 1)
			}
			backing = v
		case "bool":
			v := make([]bool, n)
			for j := range v {
				v[j] = pick(i+j)%2 == 0
			}
			backing = v
		default:
			return
		}
		if len(dims) == 0 {
			feeds[p.Name] = tensor.New(tensor.FromScalar(scalarOf(backing)))
		} else {
			feeds[p.Name] = tensor.New(tensor.WithShape(dims...), tensor.WithBacking(backing))
		}
	}
	s.Run(feeds)
}

func scalarOf(backing any) any {
	switch v := backing.(type) {
	case []float32:
		return v[0]
	case []int64:
		return v[0]
	case []int32:
		return v[0]
	case []bool:
		return v[0]
	}
	return nil
}

// fuzzSeeds are small models of the shapes the hostile tests use, for the
// fuzzer to mutate: a free-dim Reshape, a Gather into a table, a Pad and
// an Expand from a shape input.
func fuzzSeeds() []*graph.Model {
	table := graphtest.Float32s("table", []int64{5, 3}, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)
	mk := func(nodes []*graph.Node, inits []*graph.Tensor, ins, outs []*graph.Value) *graph.Model {
		var is []*graph.Value
		for _, x := range inits {
			is = append(is, graphtest.Init(x))
		}
		return graphtest.Model(17, graphtest.Graph("seed", nodes, is, ins, outs))
	}
	return []*graph.Model{
		mk([]*graph.Node{graphtest.Node("Reshape", "r", []string{"x", "s"}, []string{"y"})},
			[]*graph.Tensor{graphtest.Int64s("s", []int64{2}, -1, 3)},
			[]*graph.Value{graphtest.Value("x", dtype.Float32, "n", 3)}, []*graph.Value{graphtest.Unshaped("y", dtype.Float32)}),
		mk([]*graph.Node{
			graphtest.Node("Gather", "g", []string{"table", "ids"}, []string{"e"}),
			graphtest.Node("Add", "a", []string{"e", "x"}, []string{"y"}),
		}, []*graph.Tensor{table},
			[]*graph.Value{graphtest.Value("ids", dtype.Int64, "b", "n"), graphtest.Value("x", dtype.Float32, "b", "n", 3)},
			[]*graph.Value{graphtest.Unshaped("y", dtype.Float32)}),
		mk([]*graph.Node{graphtest.Node("Pad", "p", []string{"x", "pads"}, []string{"y"})},
			[]*graph.Tensor{graphtest.Int64s("pads", []int64{4}, 0, 1, 2, 1)},
			[]*graph.Value{graphtest.Value("x", dtype.Float32, "h", "w")}, []*graph.Value{graphtest.Unshaped("y", dtype.Float32)}),
		mk([]*graph.Node{
			graphtest.Node("Shape", "sh", []string{"x"}, []string{"s"}),
			graphtest.Node("Expand", "e", []string{"t", "s"}, []string{"y"}),
			graphtest.Node("MatMul", "mm", []string{"y", "w"}, []string{"z"}),
		}, []*graph.Tensor{graphtest.Float32s("t", []int64{1, 3}, 1, 2, 3), graphtest.Float32s("w", []int64{3, 2}, 1, 0, 0, 1, 1, 1)},
			[]*graph.Value{graphtest.Value("x", dtype.Float32, "n", 3)}, []*graph.Value{graphtest.Unshaped("z", dtype.Float32)}),
	}
}

// fuzzBytes reads choices from fuzz input; past its end every choice is 0.
type fuzzBytes struct {
	b []byte
	i int
}

func (r *fuzzBytes) next() int {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return int(r.b[r.i-1])
}

// intn is a choice in [0, n).
func (r *fuzzBytes) intn(n int) int { return r.next() % n }

// size is a small int (-2..9) most of the time, a large one (2^k) rarely:
// the sizes and indices of the generated constants.
func (r *fuzzBytes) size() int64 {
	v := r.next()
	if v >= 250 {
		return int64(1) << (10 + 4*(v-250)) // 2^10 .. 2^30
	}
	return int64(v%12) - 2
}

func (r *fuzzBytes) ints(name string, n int) *graph.Tensor {
	vals := make([]int64, n)
	for i := range vals {
		vals[i] = r.size()
	}
	return graphtest.Int64s(name, []int64{int64(n)}, vals...)
}

// fuzzOps are the operators FuzzGraph composes: element-wise, movement,
// reductions, shape computations and indexing.
var fuzzOps = []string{"Relu", "Neg", "Exp", "Sqrt", "Add", "Mul", "Sub", "Div", "MatMul", "Transpose", "Reshape",
	"Expand", "Tile", "Pad", "Slice", "Concat", "Gather", "Unsqueeze", "Squeeze", "ReduceSum", "Softmax", "Shape",
	"Cast", "ConstantOfShape", "Range", "Where", "Flatten", "GatherElements", "Split", "Equal", "CumSum", "ArgMax"}

// FuzzGraph builds a small graph from the fuzz input (a sequence of
// operators over two free-shaped inputs, with constant operands, indices
// and sizes taken from the input bytes, sometimes huge or out of range)
// and opens and runs it on the pure-Go device like FuzzOpenRun: every
// input reaches shape derivation and most reach the plan and a run.
func FuzzGraph(f *testing.F) {
	for i := 0; i < len(fuzzOps); i++ {
		f.Add([]byte{byte(i), 1, 2, 3, 4, 5, 6, 7, byte(i + 1), 0, 1, 2})
	}
	f.Add([]byte{10, 0, 255, 3, 14, 0, 2, 1, 16, 7, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := fuzzModel(&fuzzBytes{b: data})
		b, err := graph.Marshal(m)
		if err != nil {
			return
		}
		pm, err := graph.Parse(b, "")
		if err != nil {
			return
		}
		defer pm.Close()
		openAndRunSmall(t, pm, data)
	})
}

// fuzzModel composes up to 8 nodes over inputs x (float32 [n, 3]) and ids
// (int64 [n]).
func fuzzModel(r *fuzzBytes) *graph.Model {
	type val struct {
		name  string
		isInt bool
	}
	pool := []val{{"x", false}, {"ids", true}}
	var nodes []*graph.Node
	var inits []*graph.Tensor
	k := 0
	fresh := func(p string) string { k++; return fmt.Sprintf("%s%d", p, k) }
	pickVal := func(wantInt bool) string {
		var c []string
		for _, v := range pool {
			if v.isInt == wantInt {
				c = append(c, v.name)
			}
		}
		return c[r.intn(len(c))]
	}
	constInts := func(n int) string {
		t := r.ints(fresh("c"), n)
		inits = append(inits, t)
		return t.Name
	}
	n := 1 + r.intn(8)
	for i := 0; i < n; i++ {
		op := fuzzOps[r.intn(len(fuzzOps))]
		x := pickVal(false)
		out := fresh("v")
		isInt := false
		var node *graph.Node
		switch op {
		case "Relu", "Neg", "Exp", "Sqrt":
			node = graphtest.Node(op, out, []string{x}, []string{out})
		case "Add", "Mul", "Sub", "Div", "MatMul":
			node = graphtest.Node(op, out, []string{x, pickVal(false)}, []string{out})
		case "Transpose":
			node = graphtest.Node(op, out, []string{x}, []string{out}, graphtest.Ints("perm", int64(r.intn(3)), int64(r.intn(3))))
		case "Reshape", "Expand", "Tile":
			node = graphtest.Node(op, out, []string{x, constInts(1 + r.intn(3))}, []string{out})
		case "Pad":
			node = graphtest.Node(op, out, []string{x, constInts(4)}, []string{out})
		case "Slice":
			node = graphtest.Node(op, out, []string{x, constInts(1), constInts(1), constInts(1)}, []string{out})
		case "Concat":
			node = graphtest.Node(op, out, []string{x, pickVal(false)}, []string{out}, graphtest.Int("axis", r.size()))
		case "Gather", "GatherElements":
			idx := pickVal(true)
			if r.intn(2) == 0 {
				idx = constInts(1 + r.intn(3))
			}
			node = graphtest.Node(op, out, []string{x, idx}, []string{out}, graphtest.Int("axis", int64(r.intn(3))-1))
		case "Unsqueeze", "Squeeze", "ReduceSum":
			node = graphtest.Node(op, out, []string{x, constInts(1)}, []string{out})
		case "Softmax", "Flatten", "CumSum", "ArgMax":
			ins := []string{x}
			if op == "CumSum" {
				ins = append(ins, constInts(1)[0:])
				inits[len(inits)-1].Dims = nil // the axis is a scalar
			}
			node = graphtest.Node(op, out, ins, []string{out}, graphtest.Int("axis", int64(r.intn(3))-1))
			isInt = op == "ArgMax"
		case "Shape":
			node = graphtest.Node(op, out, []string{x}, []string{out})
			isInt = true
		case "Cast":
			node = graphtest.Node(op, out, []string{pickVal(true)}, []string{out}, graphtest.Int("to", int64(dtype.Float32)))
		case "ConstantOfShape":
			node = graphtest.Node(op, out, []string{pickVal(true)}, []string{out})
		case "Range":
			s, l, d := fresh("c"), fresh("c"), fresh("c")
			inits = append(inits, graphtest.Int64s(s, nil, r.size()), graphtest.Int64s(l, nil, r.size()), graphtest.Int64s(d, nil, r.size()))
			node = graphtest.Node(op, out, []string{s, l, d}, []string{out})
			isInt = true
		case "Where":
			cond := fresh("b")
			nodes = append(nodes, graphtest.Node("Equal", cond, []string{pickVal(true), constInts(1)}, []string{cond}))
			node = graphtest.Node(op, out, []string{cond, x, pickVal(false)}, []string{out})
		case "Equal":
			eq := fresh("b")
			nodes = append(nodes, graphtest.Node("Equal", eq, []string{pickVal(true), pickVal(true)}, []string{eq}))
			node = graphtest.Node("Cast", out, []string{eq}, []string{out}, graphtest.Int("to", int64(dtype.Int64)))
			isInt = true
		case "Split":
			o2 := fresh("v")
			node = graphtest.Node(op, out, []string{x}, []string{out, o2}, graphtest.Int("axis", int64(r.intn(2))))
			pool = append(pool, val{o2, false})
		}
		nodes = append(nodes, node)
		pool = append(pool, val{out, isInt})
	}
	last := pool[len(pool)-1]
	var ins []*graph.Value
	ins = append(ins, graphtest.Value("x", dtype.Float32, "n", 3), graphtest.Value("ids", dtype.Int64, "n"))
	ot := dtype.Float32
	if last.isInt {
		ot = dtype.Int64
	}
	var is []*graph.Value
	for _, t := range inits {
		is = append(is, graphtest.Init(t))
	}
	return graphtest.Model(17, graphtest.Graph("fuzz", nodes, is, ins, []*graph.Value{graphtest.Unshaped(last.name, ot)}))
}
