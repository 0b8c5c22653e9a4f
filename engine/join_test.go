package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/quant/qonnx"
	"github.com/tlite/tlite/graph/tlite"
)

// joinWeights are the test products' weights: [K, N] row-major, values
// that make every column and every row distinct, so that a column read
// from the wrong member or a row written to the wrong place shows.
func joinWeights(k, n, seed int) []float32 {
	w := make([]float32, k*n)
	for i := range w {
		w[i] = float32(math.Sin(float64(seed*131+i*7+1))) * 0.5
	}
	return w
}

func f16Raw(v []float32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint16(b, dtype.Float32ToHalf(x))
	}
	return b
}

// joinTestModel reads x [batch, seq, 7] with three fp32 products of odd
// widths N = 5, 3, 3 (the shape of q/k/v under grouped-query attention,
// and no width a multiple of any vector size), each with a bias when
// bias is set, and a fourth product with an fp16 weight (N = 4), which
// must stay apart. The products' readers take their ranges in different
// ways: a view that is a graph output (Identity), an element-wise kernel
// (Neg), a movement kernel (Transpose).
func joinTestModel(bias bool) []byte {
	const k = 7
	ns := []int{5, 3, 3}
	var nodes, inits []pb
	for i, n := range ns {
		w := fmt.Sprintf("w%d", i)
		inits = append(inits, tensorPB(w, dtype.Float32, []int64{k, int64(n)}, f32Raw(joinWeights(k, n, i)...)))
		y := fmt.Sprintf("y%d", i)
		if bias {
			b := fmt.Sprintf("b%d", i)
			inits = append(inits, tensorPB(b, dtype.Float32, []int64{int64(n)}, f32Raw(joinWeights(1, n, 10+i)...)))
			nodes = append(nodes, nodePB("MatMul", "mm"+y, []string{"x", w}, []string{y + "p"}),
				nodePB("Add", "add"+y, []string{y + "p", b}, []string{y}))
		} else {
			nodes = append(nodes, nodePB("MatMul", "mm"+y, []string{"x", w}, []string{y}))
		}
	}
	inits = append(inits, tensorPB("w3", dtype.Float16, []int64{k, 4}, f16Raw(joinWeights(k, 4, 3))))
	nodes = append(nodes,
		nodePB("MatMul", "mmy3", []string{"x", "w3"}, []string{"y3"}),
		nodePB("Identity", "id0", []string{"y0"}, []string{"out0"}),
		nodePB("Neg", "neg1", []string{"y1"}, []string{"out1"}),
		nodePB("Transpose", "tr2", []string{"y2"}, []string{"out2"}, graphIntsAttr("perm", 0, 2, 1)),
		nodePB("Neg", "neg3", []string{"y3"}, []string{"out3"}))
	g := graphPB("join", nodes, inits,
		[]pb{tvi("x", dtype.Float32, "batch", "seq", k)},
		[]pb{tvi("out0", dtype.Float32, "batch", "seq", 5), tvi("out1", dtype.Float32, "batch", "seq", 3),
			tvi("out2", dtype.Float32, "batch", 3, "seq"), tvi("out3", dtype.Float32, "batch", "seq", 4)})
	return modelPB(17, g)
}

func graphIntsAttr(name string, v ...int64) attrPB {
	return &graph.Attr{Name: name, Kind: graph.KindInts, Ints: v}
}

// joinReference computes the test model's outputs in float64.
func joinReference(x []float32, batch, seq int, bias bool) map[string][]float32 {
	const k = 7
	ns := []int{5, 3, 3, 4}
	out := map[string][]float32{}
	for i, n := range ns {
		w := joinWeights(k, n, i)
		if i == 3 {
			for j := range w {
				w[j] = dtype.HalfToFloat32(dtype.Float32ToHalf(w[j]))
			}
		}
		var b []float32
		if bias && i < 3 {
			b = joinWeights(1, n, 10+i)
		}
		rows := batch * seq
		y := make([]float32, rows*n)
		for r := 0; r < rows; r++ {
			for c := 0; c < n; c++ {
				var s float64
				for kk := 0; kk < k; kk++ {
					s += float64(x[r*k+kk]) * float64(w[kk*n+c])
				}
				if b != nil {
					s += float64(b[c])
				}
				y[r*n+c] = float32(s)
			}
		}
		switch i {
		case 0:
			out["out0"] = y
		case 1, 3:
			for j := range y {
				y[j] = -y[j]
			}
			out[fmt.Sprintf("out%d", i)] = y
		case 2:
			t := make([]float32, len(y))
			for bb := 0; bb < batch; bb++ {
				for s := 0; s < seq; s++ {
					for c := 0; c < n; c++ {
						t[(bb*n+c)*seq+s] = y[(bb*seq+s)*n+c]
					}
				}
			}
			out["out2"] = t
		}
	}
	return out
}

// joinedNodes lists the MatMulJoin nodes of s's program with their widths.
func joinedNodes(s *Session) [][]int64 {
	var out [][]int64
	for _, in := range s.c.prog {
		if in.node != nil && in.node.Domain == tlite.Domain && in.node.OpType == tlite.MatMulJoin {
			ns, _ := in.node.AttrInts("ns")
			out = append(out, ns)
		}
	}
	return out
}

// TestMatMulJoin checks the joined products on odd widths (N = 5, 3, 3,
// K = 7) at one row (the single launch over the joined weight) and at
// several rows (a launch per member into its range of the segmented
// buffer), with and without biases, on OpenCL and the pure-Go device:
// each output against a float64 reference, and bit for bit against the
// same session opened with NoJoin (the same kernels on the same weights,
// column by column). A wrong range start or a member's weight rows out of
// place changes the outputs.
func TestMatMulJoin(t *testing.T) {
	max := map[string]int64{"batch": 2, "seq": 4}
	devs := []struct {
		name string
		opts Options
	}{
		{"opencl", Options{Kernels: testLib, Max: max}},
		{"go", Options{Device: "go", Max: max}},
	}
	for _, bias := range []bool{false, true} {
		model := joinTestModel(bias)
		for _, d := range devs {
			t.Run(fmt.Sprintf("%s/bias=%v", d.name, bias), func(t *testing.T) {
				open := func(noJoin bool) *Session {
					m, err := graph.Parse(model, "")
					if err != nil {
						t.Fatal(err)
					}
					o := d.opts
					o.NoJoin = noJoin
					s, err := OpenModel(m, o)
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				js, ps := open(false), open(true)
				defer js.Close()
				defer ps.Close()
				// The members come in graph order, which the bias pass
				// before the join may have changed.
				if got := joinedNodes(js); len(got) != 1 || len(got[0]) != 3 || got[0][0]+got[0][1]+got[0][2] != 11 || got[0][0]*got[0][1]*got[0][2] != 45 {
					t.Fatalf("joined products %v; want one join of widths 5, 3, 3 (the fp16 product apart)", got)
				}
				if got := joinedNodes(ps); len(got) != 0 {
					t.Fatalf("NoJoin session joined %v", got)
				}
				if jc, pc := js.DeviceMemory().Constants, ps.DeviceMemory().Constants; jc > pc {
					t.Errorf("constants take %d bytes joined, %d apart: the separate weights stayed", jc, pc)
				}
				for _, sz := range [][2]int{{1, 1}, {1, 4}, {2, 1}, {2, 3}, {1, 1}} {
					b, sq := sz[0], sz[1]
					x := make([]float32, b*sq*7)
					for i := range x {
						x[i] = float32(math.Cos(float64(i)*0.7+float64(sq))) * 1.5
					}
					in := map[string]*tensor.Dense{"x": tensor.New(tensor.WithShape(b, sq, 7), tensor.WithBacking(x))}
					jo, err := js.Run(in)
					if err != nil {
						t.Fatalf("batch %d seq %d: %v", b, sq, err)
					}
					in = map[string]*tensor.Dense{"x": tensor.New(tensor.WithShape(b, sq, 7), tensor.WithBacking(x))}
					po, err := ps.Run(in)
					if err != nil {
						t.Fatalf("batch %d seq %d, apart: %v", b, sq, err)
					}
					ref := joinReference(x, b, sq, bias)
					for name, want := range ref {
						got, apart := floats(t, jo[name]), floats(t, po[name])
						if len(got) != len(want) {
							t.Fatalf("batch %d seq %d %s: %d values, want %d", b, sq, name, len(got), len(want))
						}
						for i := range want {
							if math.Abs(float64(got[i]-want[i])) > 1e-5 {
								t.Fatalf("batch %d seq %d %s[%d] = %g, reference %g", b, sq, name, i, got[i], want[i])
							}
							if math.Float32bits(got[i]) != math.Float32bits(apart[i]) {
								t.Fatalf("batch %d seq %d %s[%d] = %g joined, %g apart", b, sq, name, i, got[i], apart[i])
							}
						}
					}
				}
			})
		}
	}
}

// TestMatMulJoinModels opens exports the join must not change: the default
// model (testdata/longctx), the Hugging Face test bed's LLaMA and Qwen2
// (q/k/v with biases) and GPT-2 (whose fused c_attn is one product already,
// so nothing joins), and runs their reference cases (a prefill, and a
// decode step with the cache fed back as exported) and a few in-place KV
// steps (one prompt of 5 tokens, then single tokens) with the products
// joined and apart. The kernels and the weights are the same either way,
// so the outputs must be equal bit for bit; the joined session must not
// take more constant memory.
func TestMatMulJoinModels(t *testing.T) {
	for _, tc := range []struct {
		model string
		joins int // MatMulJoin nodes: two per layer (q/k/v, gate/up)
		fp16  bool
	}{
		{"../longctx", 12, false},
		{"hf_llama", 4, false},
		{"hf_qwen2", 4, true},
		{"hf_gpt2", 0, false},
	} {
		t.Run(filepath.Base(tc.model), func(t *testing.T) {
			path := filepath.Join(modelsDir, tc.model, "model.onnx")
			opts := Options{Kernels: testLib, Max: testMax}
			if tc.fp16 {
				opts.Precision = FP16
			}
			run := func(noJoin bool, kvc bool) (outs [][]float32, consts int64) {
				o := opts
				o.NoJoin = noJoin
				if kvc {
					o.KVCache = &KVConfig{MaxContext: 32, Pad: 8}
				}
				s, err := Open(path, o)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if got := len(joinedNodes(s)); noJoin && got != 0 || !noJoin && got != tc.joins {
					t.Fatalf("NoJoin %v, KV cache %v: %d joined products; want %d", noJoin, kvc, got, map[bool]int{true: 0, false: tc.joins}[noJoin])
				}
				if kvc {
					q := newKVSeq(t, s, 8)
					steps := [][]int{{3, 1, 4, 1, 5}, {9}, {2}, {6}}
					n := 0
					for _, toks := range steps {
						pos := make([]int, len(toks))
						for i := range pos {
							pos[i] = n + i
						}
						lg, err := q.step(toks, pos, pos)
						if err != nil {
							t.Fatal(err)
						}
						outs = append(outs, lg...)
						n += len(toks)
					}
					return outs, s.DeviceMemory().Constants
				}
				for _, rc := range loadCases(t, tc.model) {
					got, err := s.Run(rc.inputs)
					if err != nil {
						t.Fatalf("case %s: %v", rc.name, err)
					}
					for _, name := range rc.order {
						outs = append(outs, floats(t, got[name]))
					}
				}
				return outs, s.DeviceMemory().Constants
			}
			for _, kvc := range []bool{false, true} {
				joined, jc := run(false, kvc)
				apart, pc := run(true, kvc)
				if jc > pc {
					t.Errorf("KV cache %v: constants take %d bytes joined, %d apart", kvc, jc, pc)
				}
				if len(joined) != len(apart) {
					t.Fatalf("KV cache %v: %d outputs joined, %d apart", kvc, len(joined), len(apart))
				}
				for i := range joined {
					if len(joined[i]) != len(apart[i]) {
						t.Fatalf("KV cache %v: output %d has %d values joined, %d apart", kvc, i, len(joined[i]), len(apart[i]))
					}
					for j := range joined[i] {
						if math.Float32bits(joined[i][j]) != math.Float32bits(apart[i][j]) {
							t.Fatalf("KV cache %v: output %d [%d] = %g joined, %g apart", kvc, i, j, joined[i][j], apart[i][j])
						}
					}
				}
			}
		})
	}
}

// TestMatMulJoinQuantized joins the products of the test LLaMA as `tl
// quantize` writes it: 4-bit E0M4 and INT4 (q/k/v and gate/up become
// MatMulQ; down_proj, K = 172, stays float), and fp16 weights, where
// small weights stay fp32 at the default threshold (q_proj is fp16, k and
// v fp32: only k and v join) or everything is fp16 (widened at Open, some
// of them only at upload). Joined and apart must agree bit for bit on
// OpenCL and the pure-Go device.
func TestMatMulJoinQuantized(t *testing.T) {
	src := filepath.Join(modelsDir, "llama", "model.onnx")
	cases := loadCases(t, "llama")
	for _, tc := range []struct {
		name  string
		opts  qonnx.Options
		joins [][]int64 // the widths of each join of layer 0, ascending
	}{
		{"e0m4", qonnx.Options{Format: quant.E0M4, Group: 32}, [][]int64{{32, 32, 64}, {172, 172}}},
		{"int4", qonnx.Options{Format: quant.Int4, Group: 32}, [][]int64{{32, 32, 64}, {172, 172}}},
		{"fp16-default", qonnx.Options{Format: quant.FP16, MinSize: qonnx.DefaultMinSize}, [][]int64{{32, 32}, {172, 172}}},
		{"fp16-all", qonnx.Options{Format: quant.FP16, MinSize: 1}, [][]int64{{32, 32, 64}, {172, 172}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, _ := quantizeModel(t, src, tc.opts)
			for _, bc := range backends() {
				if bc.fp16 {
					continue
				}
				o := bc.opts
				s, err := Open(path, o)
				if err != nil {
					t.Fatal(err)
				}
				js := joinedNodes(s)
				s.Close()
				for _, ns := range js {
					slices.Sort(ns) // members come in graph order
				}
				if len(js) != 4 || fmt.Sprint(js[:2]) != fmt.Sprint(tc.joins) {
					t.Fatalf("%s: joins %v; want two layers of %v", bc.name, js, tc.joins)
				}
				_, joined := runQuantCases(t, path, cases, o)
				o.NoJoin = true
				_, apart := runQuantCases(t, path, cases, o)
				for i := range joined {
					for j := range joined[i] {
						if math.Float32bits(joined[i][j]) != math.Float32bits(apart[i][j]) {
							t.Fatalf("%s case %d logit %d: %g joined, %g apart", bc.name, i, j, joined[i][j], apart[i][j])
						}
					}
				}
			}
		})
	}
}
