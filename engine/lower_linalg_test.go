package engine

import (
	"fmt"
	"math/rand"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
)

// TestWeightLayoutAtOpen builds products whose constant weights are shared
// or also read otherwise, and checks which ones the OpenCL session
// transposes at Open (only weights that every reader takes as a product's B
// in the non-preferred layout), that a transposed original is not uploaded,
// and that every output matches products computed here from the definition,
// on the OpenCL backend (fp32 and fp16) and the pure-Go one.
func TestWeightLayoutAtOpen(t *testing.T) {
	const B, S, K, N = 2, 5, 20, 24
	r := rand.New(rand.NewSource(7))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32()*2 - 1
		}
		return v
	}
	w1, w2, w3, w4, w6 := rnd(K*N), rnd(K*N), rnd(N*K), rnd(K*N), rnd(K*N)
	b1, c4, c6 := rnd(N), rnd(N), rnd(S*K)
	x, g := rnd(B*S*K), rnd(S*K)

	nodes := []pb{
		// W1: two MatMuls, one of them fused with its bias (MatMulBias).
		nodePB("MatMul", "mm1", []string{"x", "W1"}, []string{"y1"}),
		nodePB("Relu", "relu", []string{"x"}, []string{"rx"}),
		nodePB("MatMul", "mm2", []string{"rx", "W1"}, []string{"p2"}),
		nodePB("Add", "add2", []string{"p2", "b1"}, []string{"y2"}),
		// W2 is also added to itself (folded at Open from the original);
		// the folded sum W2p is a weight of its own.
		nodePB("Add", "w2sum", []string{"W2", "W2"}, []string{"W2p"}),
		nodePB("MatMul", "mm3", []string{"x", "W2"}, []string{"y3"}),
		nodePB("MatMul", "mm3b", []string{"x", "W2p"}, []string{"y3b"}),
		// W3 is [N, K] already; W4 [K, N] through Gemm with a bias.
		nodePB("Gemm", "gemm4", []string{"g", "W3"}, []string{"y4"}, aInt("transB", 1)),
		nodePB("Gemm", "gemm5", []string{"g", "W4", "c4"}, []string{"y5"}, aFloat("alpha", 0.5), aFloat("beta", 2)),
		// W6 is also read by a product of constants, folded at Open.
		nodePB("MatMul", "mm6", []string{"x", "W6"}, []string{"p6"}),
		nodePB("MatMul", "mm6c", []string{"C6", "W6"}, []string{"q6"}),
		nodePB("Add", "add6", []string{"p6", "q6"}, []string{"y6"}),
	}
	kn, nk := []int64{K, N}, []int64{N, K}
	inits := []pb{
		tensorPB("W1", dtype.Float32, kn, f32Raw(w1...)),
		tensorPB("W2", dtype.Float32, kn, f32Raw(w2...)),
		tensorPB("W3", dtype.Float32, nk, f32Raw(w3...)),
		tensorPB("W4", dtype.Float32, kn, f32Raw(w4...)),
		tensorPB("W6", dtype.Float32, kn, f32Raw(w6...)),
		tensorPB("b1", dtype.Float32, []int64{N}, f32Raw(b1...)),
		tensorPB("c4", dtype.Float32, []int64{N}, f32Raw(c4...)),
		tensorPB("C6", dtype.Float32, []int64{S, K}, f32Raw(c6...)),
	}
	outs := []string{"y1", "y2", "y3", "y3b", "y4", "y5", "y6"}
	var outVI []pb
	for _, o := range outs {
		if o == "y4" || o == "y5" {
			outVI = append(outVI, tvi(o, dtype.Float32, S, N))
		} else {
			outVI = append(outVI, tvi(o, dtype.Float32, B, S, N))
		}
	}
	model := modelPB(17, graphPB("g", nodes, inits,
		[]pb{tvi("x", dtype.Float32, B, S, K), tvi("g", dtype.Float32, S, K)}, outVI))

	// The expected outputs, from the definitions. at(w, k, n) reads a
	// weight stored [K, N] (or [N, K] when nk).
	prod := func(a []float32, rows int, w []float32, nk bool, bias []float32, alpha, beta float32) []float32 {
		out := make([]float32, rows*N)
		for m := 0; m < rows; m++ {
			for n := 0; n < N; n++ {
				var acc float64
				for k := 0; k < K; k++ {
					wv := w[k*N+n]
					if nk {
						wv = w[n*K+k]
					}
					acc += float64(a[m*K+k]) * float64(wv)
				}
				v := float64(alpha) * acc
				if bias != nil {
					v += float64(beta) * float64(bias[n])
				}
				out[m*N+n] = float32(v)
			}
		}
		return out
	}
	rx := make([]float32, len(x))
	for i, v := range x {
		rx[i] = max(v, 0)
	}
	w2p := make([]float32, len(w2))
	for i, v := range w2 {
		w2p[i] = v + v
	}
	y6 := prod(x, B*S, w6, false, nil, 1, 0)
	q6 := prod(c6, S, w6, false, nil, 1, 0)
	for i := range y6 {
		y6[i] += q6[i%(S*N)]
	}
	want := map[string][]float32{
		"y1":  prod(x, B*S, w1, false, nil, 1, 0),
		"y2":  prod(rx, B*S, w1, false, b1, 1, 1),
		"y3":  prod(x, B*S, w2, false, nil, 1, 0),
		"y3b": prod(x, B*S, w2p, false, nil, 1, 0),
		"y4":  prod(g, S, w3, true, nil, 1, 0),
		"y5":  prod(g, S, w4, false, c4, 0.5, 2),
		"y6":  y6,
	}
	in := map[string]*tensor.Dense{
		"x": tensor.New(tensor.WithShape(B, S, K), tensor.WithBacking(x)),
		"g": tensor.New(tensor.WithShape(S, K), tensor.WithBacking(g)),
	}

	for _, bc := range []struct {
		name string
		opts Options
		tol  float32
	}{
		{"opencl-fp32", Options{Kernels: testLib}, 1e-5},
		{"opencl-fp16", Options{Kernels: testLib, Precision: FP16}, 2e-2},
		{"go-fp32", Options{Device: "go"}, 1e-5},
	} {
		t.Run(bc.name, func(t *testing.T) {
			s, m, got := runPB(t, model, bc.opts, in)
			for _, o := range outs {
				g := floats(t, got[o])
				if len(g) != len(want[o]) {
					t.Fatalf("%s: %d values, want %d", o, len(g), len(want[o]))
				}
				for i, w := range want[o] {
					if abs32(g[i]-w) > bc.tol*max(1, abs32(w)) {
						t.Fatalf("%s: element %d is %v, want %v", o, i, g[i], w)
					}
				}
			}
			// Which weights the session laid out anew.
			flipped := map[string]bool{"W1": true, "W2p": true, "W4": true}
			if bc.opts.Device == "go" {
				flipped = map[string]bool{} // the reference backend takes any layout
			}
			for _, name := range []string{"W1", "W2", "W2p", "W3", "W4", "W6"} {
				vi := s.c.info(m.Graph.Value(name))
				if got := vi.root != vi; got != flipped[name] {
					t.Errorf("%s: transposed at Open = %v, want %v", name, got, flipped[name])
					continue
				}
				if vi.root != vi {
					if vi.devUse || !vi.root.devUse {
						t.Errorf("%s: the original is uploaded (%v) or the transposed copy is not (%v)", name, vi.devUse, vi.root.devUse)
					}
					if fmt.Sprint(vi.root.konst.shape) != fmt.Sprint([]int{N, K}) {
						t.Errorf("%s: transposed copy has shape %v, want [%d %d]", name, vi.root.konst.shape, N, K)
					}
				}
			}
		})
	}
}

func TestTranspose32(t *testing.T) {
	for _, sh := range [][2]int{{1, 1}, {1, 7}, {7, 1}, {33, 65}, {64, 32}, {100, 3}, {258, 515}, {517, 6}, {6, 517}} {
		rows, cols := sh[0], sh[1]
		src := make([]float32, rows*cols)
		for i := range src {
			src[i] = float32(i)
		}
		got := transpose32(f32Raw(src...), rows, cols)
		want := make([]float32, rows*cols)
		for r := 0; r < rows; r++ {
			for c := 0; c < cols; c++ {
				want[c*rows+r] = src[r*cols+c]
			}
		}
		if string(got) != string(f32Raw(want...)) {
			t.Errorf("%dx%d: transpose differs", rows, cols)
		}
		// Misaligned buffers take the byte-wise path.
		raw := append([]byte{0}, f32Raw(src...)...)[1:]
		out := make([]byte, len(raw)+1)[1:]
		transpose32Into(out, raw, rows, cols)
		if string(out) != string(f32Raw(want...)) {
			t.Errorf("%dx%d: byte-wise transpose differs", rows, cols)
		}
	}
}

// runPB parses an encoded model, opens it with opts and runs it once on
// in; the session stays open for the test to inspect and closes when the
// test ends.
func runPB(t *testing.T, model []byte, opts Options, in map[string]*tensor.Dense) (*Session, *graph.Model, map[string]*tensor.Dense) {
	t.Helper()
	m, err := graph.Parse(model, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenModel(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	got, err := s.Run(in)
	if err != nil {
		t.Fatal(err)
	}
	return s, m, got
}
