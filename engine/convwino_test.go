package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
	"github.com/tlite/tlite/kernels"
)

// TestWinogradWeightAtOpen builds 3x3 convolutions and checks which
// constant weights the OpenCL session stores Winograd-transformed at Open
// (those whose every reader takes the Winograd route: W1, read by two
// such convolutions, one with a bias and a ReLU), that a transformed
// original is not uploaded, and that every output matches
// kernels.Conv2DRef, on the OpenCL backend (fp32 and fp16) and the pure-Go
// one. W2 is also read by a stride-2 convolution and stays as it is.
func TestWinogradWeightAtOpen(t *testing.T) {
	const C, K, H, W = 32, 33, 6, 7
	r := rand.New(rand.NewSource(9))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32()*2 - 1
		}
		return v
	}
	x, w1, w2, b1 := rnd(C*H*W), rnd(K*C*9), rnd(K*C*9), rnd(K)
	pads := graphtest.Ints("pads", 1, 1, 1, 1)
	nodes := []pb{
		nodePB("Conv", "c1", []string{"x", "W1", "B1"}, []string{"p1"}, pads),
		nodePB("Relu", "relu1", []string{"p1"}, []string{"y1"}),
		nodePB("Conv", "c1b", []string{"x", "W1"}, []string{"y1b"}, graphtest.Ints("pads", 0, 2, 1, 0)),
		nodePB("Conv", "c2", []string{"x", "W2"}, []string{"y2"}, pads),
		nodePB("Conv", "c2s", []string{"x", "W2"}, []string{"y2s"}, pads, graphtest.Ints("strides", 2, 2)),
	}
	wdims := []int64{K, C, 3, 3}
	inits := []pb{
		tensorPB("W1", dtype.Float32, wdims, f32Raw(w1...)),
		tensorPB("W2", dtype.Float32, wdims, f32Raw(w2...)),
		tensorPB("B1", dtype.Float32, []int64{K}, f32Raw(b1...)),
	}
	cp := func(w []float32, bias []float32, act kernels.ConvAct, p kernels.ConvParams) (kernels.ConvParams, []float32) {
		p.N, p.C, p.H, p.W, p.OutC, p.KH, p.KW, p.Act = 1, C, H, W, K, 3, 3, act
		oh, ow := p.OutSize()
		y := make([]float32, K*oh*ow)
		if err := kernels.Conv2DRef(x, w, bias, y, p); err != nil {
			t.Fatal(err)
		}
		return p, y
	}
	one := kernels.ConvParams{PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}
	_, y1 := cp(w1, b1, kernels.ConvActRelu, one)
	p1b, y1b := cp(w1, nil, kernels.ConvActNone, kernels.ConvParams{PadTop: 0, PadLeft: 2, PadBottom: 1, PadRight: 0})
	_, y2 := cp(w2, nil, kernels.ConvActNone, one)
	s2 := one
	s2.StrideH, s2.StrideW = 2, 2
	p2s, y2s := cp(w2, nil, kernels.ConvActNone, s2)
	want := map[string][]float32{"y1": y1, "y1b": y1b, "y2": y2, "y2s": y2s}
	oh1b, ow1b := p1b.OutSize()
	oh2s, ow2s := p2s.OutSize()
	outVI := []pb{tvi("y1", dtype.Float32, 1, K, H, W), tvi("y1b", dtype.Float32, 1, K, oh1b, ow1b),
		tvi("y2", dtype.Float32, 1, K, H, W), tvi("y2s", dtype.Float32, 1, K, oh2s, ow2s)}
	model := modelPB(17, graphPB("g", nodes, inits, []pb{tvi("x", dtype.Float32, 1, C, H, W)}, outVI))
	in := map[string]*tensor.Dense{"x": tensor.New(tensor.WithShape(1, C, H, W), tensor.WithBacking(x))}
	for _, bc := range []struct {
		name string
		opts Options
		tol  float32
	}{
		{"opencl-fp32", Options{Kernels: testLib}, 1e-4},
		{"opencl-fp16", Options{Kernels: testLib, Precision: FP16}, 5e-2},
		{"go-fp32", Options{Device: "go"}, 1e-5},
	} {
		t.Run(bc.name, func(t *testing.T) {
			s, m, got := runPB(t, model, bc.opts, in)
			for o, wv := range want {
				g := floats(t, got[o])
				if len(g) != len(wv) {
					t.Fatalf("%s: %d values, want %d", o, len(g), len(wv))
				}
				for i, w := range wv {
					if abs32(g[i]-w) > bc.tol*max(1, abs32(w)) {
						t.Fatalf("%s: element %d is %v, want %v", o, i, g[i], w)
					}
				}
			}
			transformed := map[string]bool{"W1": bc.opts.Device != "go"}
			for _, name := range []string{"W1", "W2"} {
				vi := s.c.info(m.Graph.Value(name))
				if got := vi.root != vi; got != transformed[name] {
					t.Errorf("%s: transformed at Open = %v, want %v", name, got, transformed[name])
					continue
				}
				if vi.root != vi {
					if vi.devUse || !vi.root.devUse {
						t.Errorf("%s: the original is uploaded (%v) or the transformed copy is not (%v)", name, vi.devUse, vi.root.devUse)
					}
					if fmt.Sprint(vi.root.konst.shape) != fmt.Sprint([]int{16, K, C}) {
						t.Errorf("%s: transformed copy has shape %v, want [16 %d %d]", name, vi.root.konst.shape, K, C)
					}
				}
			}
		})
	}
}

// TestWinogradInto checks the upload-time transform against
// kernels.WinogradWeights bit for bit, with source and destination
// aligned and not (the fallback through a temporary), and that sizes off
// the shape are refused.
func TestWinogradInto(t *testing.T) {
	const K, C = 3, 5
	r := rand.New(rand.NewSource(4))
	w := make([]float32, K*C*9)
	for i := range w {
		w[i] = r.Float32()*2 - 1
	}
	want, err := kernels.WinogradWeights(w, K, C)
	if err != nil {
		t.Fatal(err)
	}
	raw := f32Raw(w...)
	for _, off := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {3, 2}} {
		// off bytes in: a buffer of 4-aligned backing shifted by off.
		src := make([]byte, len(raw)+4)[off[0]:][:len(raw)]
		copy(src, raw)
		dst := make([]byte, 4*16*K*C+4)[off[1]:][:4*16*K*C]
		if err := winogradInto(dst, src, []int{K, C, 3, 3}); err != nil {
			t.Fatalf("offsets %v: %v", off, err)
		}
		for i, v := range want {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(dst[4*i:])); math.Float32bits(got) != math.Float32bits(v) {
				t.Fatalf("offsets %v: U[%d] = %v, want %v", off, i, got, v)
			}
		}
	}
	if err := winogradInto(make([]byte, 4*16*K*C), raw[4:], []int{K, C, 3, 3}); err == nil {
		t.Error("a source one weight short: no error")
	}
	if err := winogradInto(make([]byte, 4*16*K*C-4), raw, []int{K, C, 3, 3}); err == nil {
		t.Error("a destination one value short: no error")
	}
}
