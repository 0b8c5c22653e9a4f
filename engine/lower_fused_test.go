package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
)

// fgb builds a test model through the graph package's rewrite API (the
// engine opens a *graph.Model directly, so no ONNX bytes are needed).
type fgb struct {
	t *testing.T
	m *graph.Model
	g *graph.Graph
	k int
}

func newFGB(t *testing.T) *fgb {
	t.Helper()
	gp := append([]byte{0x12, 0x01}, 'g')                                            // GraphProto.name
	data := append(append([]byte{0x3a, byte(len(gp))}, gp...), 0x42, 0x02, 0x10, 17) // graph, opset_import{version 17}
	m, err := graph.Parse(data, "")
	if err != nil {
		t.Fatal(err)
	}
	return &fgb{t: t, m: m, g: m.Graph}
}

func (b *fgb) input(name string, dims ...any) *graph.Value {
	v := b.g.NewValue(name)
	v.Type = dtype.Float32
	for _, d := range dims {
		switch d := d.(type) {
		case int:
			v.Declared = append(v.Declared, graph.Dim{Value: int64(d)})
		case string:
			v.Declared = append(v.Declared, graph.Dim{Value: -1, Param: d})
		}
	}
	b.g.Inputs = append(b.g.Inputs, v)
	return v
}

func (b *fgb) tensor(name string, t dtype.Type, dims []int64, raw []byte) *graph.Value {
	b.t.Helper()
	v := b.g.NewValue(name)
	tn, err := graph.NewTensor(v.Name, t, dims, raw)
	if err != nil {
		b.t.Fatal(err)
	}
	v.Type, v.Const = t, tn
	for _, d := range dims {
		v.Declared = append(v.Declared, graph.Dim{Value: d})
	}
	b.g.Initializers = append(b.g.Initializers, v)
	return v
}

// weights adds a float32 initializer of seeded random values.
func (b *fgb) weights(name string, seed int64, dims ...int64) *graph.Value {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	r := rand.New(rand.NewSource(seed))
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(r.NormFloat64()) * 0.5
	}
	return b.tensor(name, dtype.Float32, dims, fzF32(vals...))
}

func (b *fgb) scalar(name string, f float32) *graph.Value {
	return b.tensor(name, dtype.Float32, nil, fzF32(f))
}

func (b *fgb) ints(name string, v ...int64) *graph.Value {
	return b.tensor(name, dtype.Int64, []int64{int64(len(v))}, fzI64(v...))
}

func (b *fgb) op(op string, ins []*graph.Value, attrs ...*graph.Attr) *graph.Value {
	b.t.Helper()
	b.k++
	out := b.g.NewValue(fmt.Sprintf("%s_%d", strings.ToLower(op), b.k))
	n := &graph.Node{Name: fmt.Sprintf("/m/%s_%d", op, b.k), OpType: op, Inputs: ins, Outputs: []*graph.Value{out}}
	for _, a := range attrs {
		n.SetAttr(a)
	}
	if err := b.g.AddNode(n); err != nil {
		b.t.Fatal(err)
	}
	return out
}

func (b *fgb) output(v ...*graph.Value) { b.g.Outputs = append(b.g.Outputs, v...) }

func fv(v ...*graph.Value) []*graph.Value { return v }

func intsA(name string, v ...int64) *graph.Attr {
	return &graph.Attr{Name: name, Kind: graph.KindInts, Ints: v}
}

func intA(name string, v int64) *graph.Attr {
	return &graph.Attr{Name: name, Kind: graph.KindInt, I: v}
}

// randDense is a seeded random float32 tensor.
func randDense(seed int64, shape ...int) *tensor.Dense {
	r := rand.New(rand.NewSource(seed))
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// fusedCase is a hand-built model, the fused ops its program must hold,
// and inputs.
type fusedCase struct {
	name   string
	build  func(b *fgb)
	want   []string // op types (of the fused nodes) the fused program runs
	inputs map[string]*tensor.Dense
}

// deviceOps counts the op types of a session's device steps.
func deviceOps(s *Session) map[string]int {
	c := map[string]int{}
	for _, in := range s.c.prog {
		if in.kind == iDevice {
			c[in.node.OpType]++
		}
	}
	return c
}

// TestFusedLowerings runs each fused node kind on hand-built graphs, on
// OpenCL (fp32 and fp16) and the pure-Go backend, against the same graph
// run unfused (every op lowered on its own): the oracle is the engine's
// independent per-op path.
func TestFusedLowerings(t *testing.T) {
	cases := []fusedCase{
		{name: "add-rmsnorm", want: []string{"AddRMSNorm"}, build: func(b *fgb) {
			h, a := b.input("h", "batch", "seq", 32), b.input("a", "batch", "seq", 32)
			x := b.op("Add", fv(h, a))
			ms := b.op("ReduceMean", fv(b.op("Pow", fv(x, b.scalar("two", 2)))), intsA("axes", -1))
			inv := b.op("Div", fv(b.scalar("one", 1), b.op("Sqrt", fv(b.op("Add", fv(ms, b.scalar("eps", 1e-5)))))))
			y := b.op("Mul", fv(b.op("Mul", fv(x, inv)), b.weights("w", 1, 32)))
			b.output(y, b.op("Add", fv(x, y)))
		}, inputs: map[string]*tensor.Dense{"h": randDense(1, 2, 5, 32), "a": randDense(2, 2, 5, 32)}},
		{name: "rmsnorm-no-weight", want: []string{"RMSNorm"}, build: func(b *fgb) {
			x := b.input("x", "rows", 20)
			ms := b.op("ReduceMean", fv(b.op("Mul", fv(x, x))), intsA("axes", 1))
			b.output(b.op("Div", fv(x, b.op("Sqrt", fv(b.op("Add", fv(ms, b.scalar("eps", 1e-6))))))))
		}, inputs: map[string]*tensor.Dense{"x": randDense(3, 7, 20)}},
		{name: "decomposed-add-layernorm", want: []string{"AddLayerNorm"}, build: func(b *fgb) {
			h, a := b.input("h", "batch", 24), b.input("a", "batch", 24)
			x := b.op("Add", fv(h, a))
			d := b.op("Sub", fv(x, b.op("ReduceMean", fv(x), intsA("axes", -1))))
			v := b.op("ReduceMean", fv(b.op("Pow", fv(d, b.scalar("two", 2)))), intsA("axes", -1))
			y := b.op("Div", fv(d, b.op("Sqrt", fv(b.op("Add", fv(v, b.scalar("eps", 1e-5)))))))
			y = b.op("Add", fv(b.op("Mul", fv(y, b.weights("gamma", 2, 24))), b.weights("beta", 3, 24)))
			b.output(y, x)
		}, inputs: map[string]*tensor.Dense{"h": randDense(4, 3, 24), "a": randDense(5, 3, 24)}},
		{name: "linear-scaled", want: []string{"MatMulBias"}, build: func(b *fgb) {
			x := b.input("x", "batch", "seq", 16)
			y := b.op("Add", fv(b.weights("bias", 4, 12), b.op("MatMul", fv(x, b.weights("w", 5, 16, 12)))))
			b.output(b.op("Mul", fv(y, b.scalar("s", 0.125))))
		}, inputs: map[string]*tensor.Dense{"x": randDense(6, 2, 3, 16)}},
		{name: "bert-attention", want: []string{"Attention"}, build: func(b *fgb) {
			q, k, v := b.input("q", "batch", "seq", 4, 8), b.input("k", "batch", "seq", 4, 8), b.input("v", "batch", "seq", 4, 8)
			mask := b.input("mask", "batch", 1, 1, "seq")
			s := b.op("MatMul", fv(b.op("Transpose", fv(q), intsA("perm", 0, 2, 1, 3)), b.op("Transpose", fv(k), intsA("perm", 0, 2, 3, 1))))
			s = b.op("Add", fv(b.op("Div", fv(s, b.scalar("c", float32(math.Sqrt(8))))), mask))
			o := b.op("MatMul", fv(b.op("Softmax", fv(s), intA("axis", -1)), b.op("Transpose", fv(v), intsA("perm", 0, 2, 1, 3))))
			b.output(b.op("Transpose", fv(o), intsA("perm", 0, 2, 1, 3)))
		}, inputs: map[string]*tensor.Dense{"q": randDense(7, 2, 6, 4, 8), "k": randDense(8, 2, 6, 4, 8), "v": randDense(9, 2, 6, 4, 8),
			"mask": maskDense(2, 6)}},
		{name: "gqa-attention", want: []string{"Attention"}, build: func(b *fgb) {
			q := b.input("q", 2, 4, "seq", 8)
			k, v := b.input("k", 2, 2, "kv", 8), b.input("v", 2, 2, "kv", 8)
			mask := b.input("mask", 2, 1, "seq", "kv")
			rep := func(x *graph.Value, name string) *graph.Value {
				u := b.op("Unsqueeze", fv(x, b.ints(name+"_ax", 2)))
				shape := b.op("Concat", fv(b.ints(name+"_hd", 2, 2, 2), b.op("Slice", fv(b.op("Shape", fv(x)), b.ints(name+"_s", 2), b.ints(name+"_e", 4)))), intA("axis", 0))
				e := b.op("Expand", fv(u, shape))
				return b.op("Reshape", fv(e, b.ints(name+"_r", 2, 4, -1, 8)))
			}
			kr, vr := rep(k, "k"), rep(v, "v")
			s := b.op("MatMul", fv(q, b.op("Transpose", fv(kr), intsA("perm", 0, 1, 3, 2))))
			s = b.op("Add", fv(b.op("Mul", fv(s, b.scalar("c", 0.35))), mask))
			b.output(b.op("MatMul", fv(b.op("Softmax", fv(s), intA("axis", 3)), vr)))
		}, inputs: map[string]*tensor.Dense{"q": randDense(10, 2, 4, 3, 8), "k": randDense(11, 2, 2, 7, 8), "v": randDense(12, 2, 2, 7, 8),
			"mask": randDense(13, 2, 1, 3, 7)}},
		{name: "causal-attention", want: []string{"Attention"}, build: func(b *fgb) {
			q := b.input("q", 1, 2, "seq", 8)
			kp, kn := b.input("kpast", 1, 2, "past", 8), b.input("knew", 1, 2, "seq", 8)
			k := b.op("Concat", fv(kp, kn), intA("axis", 2))
			v := b.op("Neg", fv(k))
			s := b.op("Div", fv(b.op("MatMul", fv(q, b.op("Transpose", fv(k), intsA("perm", 0, 1, 3, 2)))), b.scalar("c", 2.5)))
			const n = 16
			tri := make([]byte, n*n)
			for r := 0; r < n; r++ {
				for c := 0; c <= r; c++ {
					tri[r*n+c] = 1
				}
			}
			bias := b.tensor("bias", dtype.Bool, []int64{n, n}, tri)
			at := func(x *graph.Value, i int64) *graph.Value {
				return b.op("Gather", fv(b.op("Shape", fv(x)), b.ints("i", i)))
			}
			kl := at(k, 2)
			rows := b.op("Slice", fv(bias, b.op("Sub", fv(kl, at(q, 2))), kl, b.ints("a0", 0)))
			cond := b.op("Slice", fv(rows, b.ints("z", 0), kl, b.ints("a1", 1)))
			s = b.op("Where", fv(cond, s, b.scalar("m", -math.MaxFloat32)))
			b.output(b.op("MatMul", fv(b.op("Softmax", fv(s), intA("axis", -1)), v)))
		}, inputs: map[string]*tensor.Dense{"q": randDense(14, 1, 2, 3, 8), "kpast": randDense(15, 1, 2, 4, 8), "knew": randDense(16, 1, 2, 3, 8)}},
		{name: "tanh-gelu", want: []string{"FusedElementwise"}, build: func(b *fgb) {
			x := b.input("x", "batch", 40)
			c := func(name string, f float32) *graph.Value { return b.scalar(name, f) }
			inner := b.op("Mul", fv(b.op("Add", fv(x, b.op("Mul", fv(b.op("Pow", fv(x, c("three", 3))), c("k", 0.044715))))), c("s", 0.7978846)))
			b.output(b.op("Mul", fv(b.op("Mul", fv(x, c("half", 0.5))), b.op("Add", fv(b.op("Tanh", fv(inner)), c("one", 1))))))
		}, inputs: map[string]*tensor.Dense{"x": randDense(17, 3, 40)}},
		// Convolutions with their activation in the epilogue: a 3x3 with
		// padding on rows wider than a strip, SiLU after a depthwise
		// convolution, HardSwish after a 1x1, ReLU6 (Clip) after a strided
		// one.
		{name: "conv-relu", want: []string{"ConvAct"}, build: func(b *fgb) {
			x := b.input("x", "batch", 3, 6, 37)
			y := b.op("Conv", fv(x, b.weights("w", 20, 5, 3, 3, 3), b.weights("b", 21, 5)), intsA("pads", 1, 1, 1, 1))
			b.output(b.op("Relu", fv(y)))
		}, inputs: map[string]*tensor.Dense{"x": randDense(22, 2, 3, 6, 37)}},
		{name: "depthwise-silu", want: []string{"ConvAct"}, build: func(b *fgb) {
			x := b.input("x", "batch", 4, 9, 21)
			y := b.op("Conv", fv(x, b.weights("w", 23, 4, 1, 5, 5)), intsA("pads", 2, 2, 2, 2), intA("group", 4), intsA("strides", 2, 1))
			b.output(b.op("Mul", fv(y, b.op("Sigmoid", fv(y)))))
		}, inputs: map[string]*tensor.Dense{"x": randDense(24, 1, 4, 9, 21)}},
		{name: "pointwise-hardswish", want: []string{"ConvAct"}, build: func(b *fgb) {
			x := b.input("x", "batch", 17, 5, 7)
			y := b.op("Conv", fv(x, b.weights("w", 25, 12, 17, 1, 1), b.weights("b", 26, 12)))
			b.output(b.op("HardSwish", fv(y)))
		}, inputs: map[string]*tensor.Dense{"x": randDense(27, 2, 17, 5, 7)}},
		{name: "strided-relu6", want: []string{"ConvAct"}, build: func(b *fgb) {
			x := b.input("x", "batch", 6, 11, 40)
			y := b.op("Conv", fv(x, b.weights("w", 28, 8, 3, 3, 3)), intsA("pads", 1, 1, 1, 1), intsA("strides", 2, 2), intA("group", 2))
			b.output(b.op("Clip", fv(y, b.scalar("lo", 0), b.scalar("hi", 0.5))))
		}, inputs: map[string]*tensor.Dense{"x": randDense(29, 2, 6, 11, 40)}},
		// Residual Adds in the convolution's epilogue (ConvResidual): a
		// ResNet block's conv + identity + ReLU on conv_flat (6
		// channels) and on Winograd (32), a downsampling block whose
		// 1x1 strided Conv is the residual, and squeeze-excite's Mul
		// folded into a 1x1 projection with MobileNet's skip
		// (ConvScale).
		{name: "conv-add-relu", want: []string{"ConvAct"}, build: func(b *fgb) {
			x := b.input("x", "batch", 6, 7, 19)
			y := b.op("Conv", fv(x, b.weights("w", 30, 6, 6, 3, 3), b.weights("b", 31, 6)), intsA("pads", 1, 1, 1, 1))
			b.output(b.op("Relu", fv(b.op("Add", fv(y, x)))))
		}, inputs: map[string]*tensor.Dense{"x": randDense(32, 2, 6, 7, 19)}},
		{name: "winograd-add-relu", want: []string{"ConvAct"}, build: func(b *fgb) {
			x := b.input("x", "batch", 32, 6, 9)
			y := b.op("Conv", fv(x, b.weights("w", 33, 32, 32, 3, 3), b.weights("b", 34, 32)), intsA("pads", 1, 1, 1, 1))
			b.output(b.op("Relu", fv(b.op("Add", fv(x, y)))))
		}, inputs: map[string]*tensor.Dense{"x": randDense(35, 2, 32, 6, 9)}},
		{name: "downsample-add-relu", want: []string{"ConvAct"}, build: func(b *fgb) {
			x := b.input("x", "batch", 4, 9, 11)
			main := b.op("Conv", fv(x, b.weights("w", 36, 6, 4, 3, 3), b.weights("b", 37, 6)), intsA("pads", 1, 1, 1, 1), intsA("strides", 2, 2))
			skip := b.op("Conv", fv(x, b.weights("ws", 38, 6, 4, 1, 1)), intsA("strides", 2, 2))
			b.output(b.op("Relu", fv(b.op("Add", fv(main, skip)))))
		}, inputs: map[string]*tensor.Dense{"x": randDense(39, 1, 4, 9, 11)}},
		{name: "se-project-skip", want: []string{"ConvAct"}, build: func(b *fgb) {
			x := b.input("x", "batch", 8, 5, 37)
			sq := b.op("Conv", fv(b.op("GlobalAveragePool", fv(x)), b.weights("wse", 40, 8, 8, 1, 1), b.weights("bse", 41, 8)))
			s := b.op("HardSigmoid", fv(sq), &graph.Attr{Name: "alpha", Kind: graph.KindFloat, F: 1.0 / 6})
			y := b.op("Conv", fv(b.op("Mul", fv(x, s)), b.weights("wp", 42, 8, 8, 1, 1), b.weights("bp", 43, 8)))
			b.output(b.op("Add", fv(y, x)))
		}, inputs: map[string]*tensor.Dense{"x": randDense(44, 2, 8, 5, 37)}},
	}
	backends := []struct {
		name string
		opts Options
		fp16 bool
	}{{"opencl-fp32", Options{Kernels: testLib}, false}, {"go", Options{Device: "go"}, false}, {"opencl-fp16", Options{Kernels: testLib, Precision: FP16}, true}}
	for _, tc := range cases {
		for _, be := range backends {
			t.Run(tc.name+"/"+be.name, func(t *testing.T) {
				open := func(rw []Rewrite) *Session {
					b := newFGB(t)
					tc.build(b)
					o := be.opts
					o.Rewrites = rw
					s, err := OpenModel(b.m, o)
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				plain, fused := open([]Rewrite{}), open(nil)
				defer plain.Close()
				defer fused.Close()
				fo, po := deviceOps(fused), deviceOps(plain)
				for _, op := range tc.want {
					if fo[op] == 0 || po[op] != 0 {
						t.Fatalf("fused program runs %v, unfused %v; want %s only in the fused one", fo, po, op)
					}
				}
				if countSteps(fo) >= countSteps(po) {
					t.Errorf("fused program has %d device steps, unfused %d", countSteps(fo), countSteps(po))
				}
				want, err := plain.Run(tc.inputs)
				if err != nil {
					t.Fatal(err)
				}
				got, err := fused.Run(tc.inputs)
				if err != nil {
					t.Fatal(err)
				}
				for name, w := range want {
					g := got[name]
					if g == nil || !sameShape(g.Shape(), w.Shape()) {
						t.Fatalf("output %s: fused %v, unfused %v", name, g, w.Shape())
					}
					rel, cos, worst := compare(floats(t, g), floats(t, w))
					tol := 2e-5
					if be.fp16 {
						tol = 2e-2
					}
					if !(rel <= tol) || be.fp16 && !(cos >= 0.9999) {
						t.Errorf("output %s: error %.2e (cosine %.6f) at %d: fused %v, unfused %v", name, rel, cos, worst, floats(t, g)[worst], floats(t, w)[worst])
					}
				}
			})
		}
	}
}

// maskDense is a BERT extended mask [B, 1, 1, S]: 0 for kept positions,
// -10000 for the padded tail of every sequence but the first.
func maskDense(b, s int) *tensor.Dense {
	v := make([]float32, b*s)
	for i := 1; i < b; i++ {
		for j := s - i; j < s; j++ {
			v[i*s+j] = -10000
		}
	}
	return tensor.New(tensor.WithShape(b, 1, 1, s), tensor.WithBacking(v))
}

func countSteps(c map[string]int) int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

func fzF32(v ...float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func fzI64(v ...int64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}
