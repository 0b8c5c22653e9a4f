package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// naiveReduce reduces by walking every input multi-index, independently of
// PlanReduce: the output index is the input index with reduced axes dropped.
func naiveReduce(op ReduceOp, x []float32, shape, axes []int) []float64 {
	r := len(shape)
	red := make([]bool, r)
	for _, a := range axes {
		red[(a+r)%r] = true
	}
	if len(axes) == 0 {
		for i := range red {
			red[i] = true
		}
	}
	nout := 1
	for i, d := range shape {
		if !red[i] {
			nout *= d
		}
	}
	groups := make([][]float64, nout)
	idx := make([]int, r)
	for e := range x {
		rem := e
		for i := r - 1; i >= 0; i-- {
			idx[i] = rem % shape[i]
			rem /= shape[i]
		}
		o := 0
		for i := 0; i < r; i++ {
			if !red[i] {
				o = o*shape[i] + idx[i]
			}
		}
		groups[o] = append(groups[o], float64(x[e]))
	}
	out := make([]float64, nout)
	for o, g := range groups {
		out[o] = reduceValues(op, g)
	}
	return out
}

func TestReduceValuesHand(t *testing.T) {
	v := []float64{1, -2, 3}
	want := map[ReduceOp]float64{
		ReduceSum: 2, ReduceMean: 2.0 / 3, ReduceMax: 3, ReduceMin: -2, ReduceProd: -6,
		ReduceL1: 6, ReduceL2: math.Sqrt(14), ReduceSumSquare: 14,
		ReduceLogSumExp: math.Log(math.E + math.Exp(-2) + math.Exp(3)),
	}
	for op, w := range want {
		if g := reduceValues(op, v); math.Abs(g-w) > 1e-12 {
			t.Errorf("%v of %v = %v, want %v", op, v, g, w)
		}
	}
	// Empty reductions give identities.
	empty := map[ReduceOp]float64{ReduceSum: 0, ReduceProd: 1, ReduceMax: math.Inf(-1), ReduceMin: math.Inf(1), ReduceLogSumExp: math.Inf(-1)}
	for op, w := range empty {
		if g := reduceValues(op, nil); g != w {
			t.Errorf("%v of nothing = %v, want %v", op, g, w)
		}
	}
}

func TestPlanReduce(t *testing.T) {
	cases := []struct {
		shape, axes []int
		rows        bool
		out, count  int
	}{
		{[]int{4, 5}, []int{-1}, true, 4, 5},
		{[]int{4, 5}, []int{0}, false, 5, 4},
		{[]int{2, 3, 4}, []int{1, 2}, true, 2, 12},
		{[]int{2, 1, 3, 4}, []int{2, 3}, true, 2, 12}, // size-1 kept dim dropped
		{[]int{2, 3, 4}, nil, true, 1, 24},
		{[]int{2, 3, 4, 5, 6, 7}, []int{0, 2, 4}, false, 3 * 5 * 7, 2 * 4 * 6},
		{[]int{3, 0, 2}, []int{1}, false, 6, 0},
	}
	for _, c := range cases {
		p, err := PlanReduce(c.shape, c.axes)
		if err != nil {
			t.Fatal(err)
		}
		if p.Rows() != c.rows || p.Out != c.out || p.Count != c.count {
			t.Errorf("PlanReduce(%v, %v) = %+v (rows %v), want rows %v out %d count %d", c.shape, c.axes, p, p.Rows(), c.rows, c.out, c.count)
		}
	}
	if _, err := PlanReduce([]int{2, 3}, []int{1, -1}); err == nil {
		t.Error("repeated axis accepted")
	}
	if _, err := PlanReduce([]int{2, 3}, []int{2}); err == nil {
		t.Error("axis out of range accepted")
	}
}

func TestReduce(t *testing.T) {
	cases := []struct{ shape, axes []int }{
		{[]int{7}, nil},
		{[]int{3, 5}, []int{1}},
		{[]int{3, 5}, []int{0}},
		{[]int{2, 3, 4}, []int{0, 2}},
		{[]int{2, 3, 4}, []int{1}},
		{[]int{4, 37}, []int{-1}},
		{[]int{2, 1, 3, 1, 2, 5}, []int{1, 3, 5}},
		{[]int{2, 3, 2, 3, 2, 3}, []int{0, 2, 4}},
		{[]int{70, 3}, []int{1}},
		{[]int{3, 0, 2}, []int{1}}, // empty reduction: identities, NaN mean
	}
	ops := []ReduceOp{ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSumExp}
	bothStyles(t, func(t *testing.T) {
		for _, s := range storages {
			for ci, c := range cases {
				n := 1
				for _, d := range c.shape {
					n *= d
				}
				x := stored(s, randVec(int64(200+ci), n))
				xb := upload(t, s, x)
				for _, op := range ops {
					want64 := naiveReduce(op, x, c.shape, c.axes)
					want := make([]float32, len(want64))
					for i, w := range want64 {
						want[i] = storeAs(s, float32(w))
					}
					// The plan-based reference must agree with the naive walk.
					ref := make([]float32, len(want))
					if err := ReduceRef(s, op, x, c.shape, c.axes, ref); err != nil {
						t.Fatal(err)
					}
					assertClose(t, fmt.Sprintf("ReduceRef %v %v %v", op, c.shape, c.axes), ref, want, 1e-6, 1e-5)
					ob := alloc(t, s, len(want))
					if err := testLib.Reduce(s, op, xb, c.shape, c.axes, ob); err != nil {
						t.Fatal(err)
					}
					atol, rtol := 2e-6, 2e-5
					if s == F16 {
						atol, rtol = 2e-3, 2e-3
					}
					assertClose(t, fmt.Sprintf("%v %v %v %v", s, op, c.shape, c.axes), download(t, s, ob, len(want)), want, atol, rtol)
				}
			}
		}
	})
}

func downloadInt64(t *testing.T, b Buf, n int) []int64 {
	t.Helper()
	if err := testLib.Device().Finish(); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 8*n)
	if err := testLib.Device().Read(b.Mem, 8*b.Off, raw); err != nil {
		t.Fatal(err)
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	return out
}

func TestReduceArgMax(t *testing.T) {
	// Hand case with ties: [[1, 3, 3, 0], [2, 2, -1, -1]] over the last axis.
	x := []float32{1, 3, 3, 0, 2, 2, -1, -1}
	want := map[[2]bool][]int64{
		{false, false}: {1, 0}, {false, true}: {2, 1},
		{true, false}: {3, 2}, {true, true}: {3, 3},
	}
	for k, w := range want {
		got := make([]int64, 2)
		ArgReduceRef(k[0], k[1], x, 2, 4, 1, got)
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Fatalf("ArgReduceRef(min=%v, last=%v) = %v, want %v", k[0], k[1], got, w)
		}
	}
	shapes := [][3]int{{2, 4, 1}, {1, 1, 1}, {3, 7, 5}, {1, 100, 3}, {5, 2, 1}}
	for _, s := range storages {
		for i, sh := range shapes {
			n := sh[0] * sh[1] * sh[2]
			xs := randVec(int64(300+i), n)
			if i == 0 {
				xs = x
			}
			for j := range xs {
				xs[j] = roundTrip(s, float32(math.Round(float64(xs[j])*4))) // ties are common
			}
			xb := upload(t, s, xs)
			for k := range want {
				w := make([]int64, sh[0]*sh[2])
				ArgReduceRef(k[0], k[1], xs, sh[0], sh[1], sh[2], w)
				ob := Buf{Mem: alloc(t, F32, 2*len(w)+2).Mem, Off: 1}
				if err := testLib.ArgReduce(s, k[0], k[1], xb, sh[0], sh[1], sh[2], ob); err != nil {
					t.Fatal(err)
				}
				if got := downloadInt64(t, ob, len(w)); fmt.Sprint(got) != fmt.Sprint(w) {
					t.Fatalf("%v ArgReduce %v min=%v last=%v: %v, want %v", s, sh, k[0], k[1], got, w)
				}
			}
		}
	}
}

func TestReduceCumSum(t *testing.T) {
	out := make([]float32, 4)
	CumSumRef(F32, []float32{1, 2, 3, 4}, out, 1, 4, 1, false, false)
	assertClose(t, "cumsum", out, []float32{1, 3, 6, 10}, 0, 0)
	CumSumRef(F32, []float32{1, 2, 3, 4}, out, 1, 4, 1, true, false)
	assertClose(t, "exclusive", out, []float32{0, 1, 3, 6}, 0, 0)
	CumSumRef(F32, []float32{1, 2, 3, 4}, out, 1, 4, 1, false, true)
	assertClose(t, "reverse", out, []float32{10, 9, 7, 4}, 0, 0)
	CumSumRef(F32, []float32{1, 2, 3, 4}, out, 1, 4, 1, true, true)
	assertClose(t, "exclusive reverse", out, []float32{9, 7, 4, 0}, 0, 0)
	shapes := [][3]int{{1, 1, 1}, {2, 9, 1}, {3, 5, 4}, {1, 33, 2}}
	for _, s := range storages {
		for i, sh := range shapes {
			n := sh[0] * sh[1] * sh[2]
			x := stored(s, randVec(int64(400+i), n))
			for _, ex := range []bool{false, true} {
				for _, rev := range []bool{false, true} {
					want := make([]float32, n)
					CumSumRef(s, x, want, sh[0], sh[1], sh[2], ex, rev)
					xb := upload(t, s, x)
					if err := testLib.CumSum(s, xb, xb, sh[0], sh[1], sh[2], ex, rev); err != nil { // in place
						t.Fatal(err)
					}
					atol, rtol := 1e-6, 1e-5
					if s == F16 {
						atol, rtol = 4e-3, 2e-3
					}
					assertClose(t, fmt.Sprintf("%v CumSum %v ex=%v rev=%v", s, sh, ex, rev), download(t, s, xb, n), want, atol, rtol)
				}
			}
		}
	}
}
