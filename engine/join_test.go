package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
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
