package engine

import (
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/kernels"
)

// rotaryFileModel is a model file holding a tlite Rotary node itself, as a
// hand-written or tool-written file may: x [2, 3, 6] rotated over
// rotary_dim with cos and sin inputs of shape tab.
func rotaryFileModel(t *testing.T, rd int64, xDims []any, tab ...any) *graph.Model {
	n := graphtest.InDomain(graphtest.Node(tlite.Rotary, "rot", []string{"x", "cos", "sin"}, []string{"y"}, graphtest.Int("rotary_dim", rd)), tlite.Domain)
	return hostileModel(t, []*graph.Node{n}, nil,
		[]*graph.Value{graphtest.Value("x", dtype.Float32, xDims...), graphtest.Value("cos", dtype.Float32, tab...), graphtest.Value("sin", dtype.Float32, tab...)},
		[]*graph.Value{graphtest.Value("y", dtype.Float32, xDims...)})
}

// TestRotaryNodeFromFile runs a Rotary node written in the file on both
// devices against kernels.RotaryRef, and checks that a malformed one fails
// with an error naming the node or the tensor, not a panic.
func TestRotaryNodeFromFile(t *testing.T) {
	ramp := func(shape []int, scale float32) *tensor.Dense {
		v := make([]float32, numel(shape))
		for i := range v {
			v[i] = scale * float32(i%7-3)
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
	}
	for _, dev := range []string{"go", "opencl"} {
		opts := Options{Device: "go"}
		if dev == "opencl" {
			opts = Options{Kernels: testLib}
		}
		t.Run("good/"+dev, func(t *testing.T) {
			s, err := OpenModel(rotaryFileModel(t, 4, []any{2, 3, 6}, 3, 4), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			x, cos, sin := ramp([]int{2, 3, 6}, 0.5), ramp([]int{3, 4}, 0.25), ramp([]int{3, 4}, -0.125)
			out, err := s.Run(map[string]*tensor.Dense{"x": x, "cos": cos, "sin": sin})
			if err != nil {
				t.Fatal(err)
			}
			l, err := kernels.NewRotaryLayout([]int{2, 3, 6}, []int{3, 4}, []int{3, 4}, 4)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, 36)
			if err := kernels.RotaryRef(kernels.RotaryParams{Storage: kernels.F32, RotaryDim: 4}, l,
				x.Data().([]float32), cos.Data().([]float32), sin.Data().([]float32), want); err != nil {
				t.Fatal(err)
			}
			rel, _, worst := compare(floats(t, out["y"]), want)
			if !(rel <= 1e-6) {
				t.Errorf("error %.2e at %d", rel, worst)
			}
		})
		for _, c := range []struct {
			name string
			m    func(t *testing.T) *graph.Model
			want []string
		}{
			{"odd rotary_dim", func(t *testing.T) *graph.Model { return rotaryFileModel(t, 3, []any{2, 3, 6}, 3, 3) }, []string{"rot", "rotary_dim 3"}},
			{"rotary_dim past the row", func(t *testing.T) *graph.Model { return rotaryFileModel(t, 8, []any{2, 3, 6}, 3, 8) }, []string{"rot", "rotary_dim 8"}},
			{"rank 5", func(t *testing.T) *graph.Model { return rotaryFileModel(t, 2, []any{1, 1, 1, 1, 2}, 2) }, []string{"rot", "rank 5"}},
		} {
			t.Run(c.name+"/"+dev, func(t *testing.T) {
				s, err := OpenModel(c.m(t), opts)
				if err == nil {
					s.Close()
					t.Fatalf("Open succeeded; want an error mentioning %q", c.want)
				}
				assertMentions(t, "Open", err, c.want)
			})
		}
		t.Run("constant inputs, folded at Open/"+dev, func(t *testing.T) {
			xs, tabs := make([]float32, 12), make([]float32, 4)
			for i := range xs {
				xs[i] = float32(i%5) - 2
			}
			for i := range tabs {
				tabs[i] = 0.5 + float32(i)/8
			}
			n := graphtest.InDomain(graphtest.Node(tlite.Rotary, "rot", []string{"x", "cos", "sin"}, []string{"y"}, graphtest.Int("rotary_dim", 4)), tlite.Domain)
			m := hostileModel(t, []*graph.Node{n},
				[]*graph.Tensor{graphtest.Float32s("x", []int64{2, 6}, xs...), graphtest.Float32s("cos", []int64{4}, tabs...), graphtest.Float32s("sin", []int64{1, 4}, tabs...)},
				nil, []*graph.Value{graphtest.Value("y", dtype.Float32, 2, 6)})
			s, err := OpenModel(m, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			out, err := s.Run(nil)
			if err != nil {
				t.Fatal(err)
			}
			l, err := kernels.NewRotaryLayout([]int{2, 6}, []int{4}, []int{1, 4}, 4)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float32, 12)
			if err := kernels.RotaryRef(kernels.RotaryParams{Storage: kernels.F32, RotaryDim: 4}, l, xs, tabs, tabs, want); err != nil {
				t.Fatal(err)
			}
			if rel, _, worst := compare(floats(t, out["y"]), want); !(rel <= 1e-6) {
				t.Errorf("error %.2e at %d", rel, worst)
			}
		})
		t.Run("tables that do not broadcast/"+dev, func(t *testing.T) {
			s, err := OpenModel(rotaryFileModel(t, 4, []any{2, 3, 6}, "n", 4), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			bad := map[string]*tensor.Dense{"x": ramp([]int{2, 3, 6}, 1), "cos": ramp([]int{2, 4}, 1), "sin": ramp([]int{2, 4}, 1)}
			if _, err := s.Run(bad); err == nil {
				t.Fatal("Run succeeded with [2, 4] tables for x [2, 3, 6]")
			} else {
				assertMentions(t, "Run", err, []string{"rot", "broadcast"})
			}
			good := map[string]*tensor.Dense{"x": ramp([]int{2, 3, 6}, 1), "cos": ramp([]int{3, 4}, 1), "sin": ramp([]int{3, 4}, 1)}
			if _, err := s.Run(good); err != nil {
				t.Errorf("a good run after the bad one: %v", err)
			}
		})
	}
}
