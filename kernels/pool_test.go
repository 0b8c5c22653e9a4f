package kernels

import (
	"fmt"
	"math"
	"testing"
)

func TestPoolRefByHand(t *testing.T) {
	x := make([]float32, 16)
	for i := range x {
		x[i] = float32(i + 1)
	}
	p := PoolParams{N: 1, C: 1, H: 4, W: 4, KH: 2, KW: 2, StrideH: 2, StrideW: 2}
	y := make([]float32, 4)
	if err := PoolRef(x, y, p, false); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "max", y, []float32{6, 8, 14, 16}, 0, 0)
	if err := PoolRef(x, y, p, true); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "avg", y, []float32{3.5, 5.5, 11.5, 13.5}, 0, 0)
	// 3x3 of 1..9, window 3 stride 2 pad 1: the top-left window holds
	// 1+2+4+5 = 12 over 4 input positions of 9.
	p = PoolParams{N: 1, C: 1, H: 3, W: 3, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1}
	if err := PoolRef(x[:9], y, p, true); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "avg excluding pad", y, []float32{3, 4, 6, 7}, 0, 0)
	p.CountIncludePad = true
	if err := PoolRef(x[:9], y, p, true); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "avg including pad", y, []float32{12.0 / 9, 16.0 / 9, 24.0 / 9, 28.0 / 9}, 1e-6, 0)
}

func TestPoolOutSize(t *testing.T) {
	for _, c := range []struct {
		in, k, s, d, pb, pe int
		ceil                bool
		want                int
	}{
		{5, 2, 2, 1, 0, 0, false, 2},
		{5, 2, 2, 1, 0, 0, true, 3},
		{4, 3, 2, 1, 1, 1, true, 3}, // last window starts in the input (row 3)
		{5, 2, 2, 1, 1, 1, true, 3}, // a 4th window would start at row 5 in the end padding: dropped
		{112, 3, 2, 1, 1, 1, false, 56},
		{7, 3, 1, 2, 0, 0, false, 3},
	} {
		if got := poolOut(c.in, c.k, c.s, c.d, c.pb, c.pe, c.ceil); got != c.want {
			t.Errorf("poolOut%+v = %d, want %d", c, got, c.want)
		}
	}
}

func poolRun(t *testing.T, s Storage, p PoolParams, avg bool) (got, want []float32) {
	t.Helper()
	oh, ow := p.OutSize()
	x := laRand(21, p.N*p.C*p.H*p.W, s)
	ny := p.N * p.C * oh * ow
	y0 := laRand(22, ny, s)
	yb := upload(t, s, y0)
	var err error
	if avg {
		err = testLib.AvgPool(s, upload(t, s, x), yb, p)
	} else {
		err = testLib.MaxPool(s, upload(t, s, x), yb, p)
	}
	if err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), y0...)
	if err := PoolRef(x, want, p, avg); err != nil {
		t.Fatal(err)
	}
	return download(t, s, yb, ny), want
}

func TestPoolShapes(t *testing.T) {
	cases := map[string]PoolParams{
		"2x2 s2":          {N: 2, C: 3, H: 8, W: 9, KH: 2, KW: 2, StrideH: 2, StrideW: 2},
		"3x3 s2 p1":       {N: 1, C: 4, H: 11, W: 10, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1},
		"ceil":            {N: 1, C: 2, H: 7, W: 10, KH: 3, KW: 2, StrideH: 2, StrideW: 3, CeilMode: true},
		"ceil pads":       {N: 1, C: 3, H: 6, W: 9, KH: 3, KW: 3, StrideH: 2, StrideW: 2, PadTop: 1, PadLeft: 1, PadBottom: 1, PadRight: 1, CeilMode: true},
		"asym dil":        {N: 2, C: 2, H: 9, W: 8, KH: 2, KW: 3, StrideH: 1, StrideW: 2, PadTop: 1, PadLeft: 0, PadBottom: 0, PadRight: 2, DilationH: 2, DilationW: 2},
		"1d":              {N: 2, C: 3, H: 1, W: 19, KH: 1, KW: 3, StrideW: 2, PadLeft: 1, PadRight: 1, CeilMode: true},
		"window is input": {N: 1, C: 5, H: 4, W: 6, KH: 4, KW: 6},
	}
	for name, p := range cases {
		for _, s := range storages {
			for _, cip := range []bool{false, true} {
				p.CountIncludePad = cip
				got, want := poolRun(t, s, p, true)
				laClose(t, fmt.Sprintf("avg %s/%s/cip=%v", name, s, cip), s, got, want)
			}
			got, want := poolRun(t, s, p, false)
			laClose(t, fmt.Sprintf("max %s/%s", name, s), s, got, want)
		}
	}
}

func TestGlobalPool(t *testing.T) {
	for _, hw := range []int{1, 7, 16, 49, 50, 3136} {
		for _, s := range storages {
			const planes = 6
			x := laRand(23, planes*hw, s)
			for _, avg := range []bool{true, false} {
				yb := alloc(t, s, planes)
				var err error
				if avg {
					err = testLib.GlobalAvgPool(s, upload(t, s, x), yb, planes, hw)
				} else {
					err = testLib.GlobalMaxPool(s, upload(t, s, x), yb, planes, hw)
				}
				if err != nil {
					t.Fatal(err)
				}
				want := make([]float32, planes)
				if err := GlobalPoolRef(x, want, planes, hw, avg); err != nil {
					t.Fatal(err)
				}
				laClose(t, fmt.Sprintf("global avg=%v hw=%d %s", avg, hw, s), s, download(t, s, yb, planes), want)
			}
		}
	}
}

// TestPoolNaN: a NaN in a window makes its max NaN, in both the windowed and
// the global kernel (inside the vector part and the scalar tail).
func TestPoolNaN(t *testing.T) {
	nan := float32(math.NaN())
	x := laRand(24, 2*40, F32)
	x[5], x[40+37] = nan, nan
	yb := alloc(t, F32, 2)
	if err := testLib.GlobalMaxPool(F32, upload(t, F32, x), yb, 2, 40); err != nil {
		t.Fatal(err)
	}
	got := download(t, F32, yb, 2)
	if !math.IsNaN(float64(got[0])) || !math.IsNaN(float64(got[1])) {
		t.Errorf("GlobalMaxPool with NaNs = %v", got)
	}
	p := PoolParams{N: 1, C: 1, H: 8, W: 10, KH: 2, KW: 2, StrideH: 2, StrideW: 2}
	yb = alloc(t, F32, 20)
	if err := testLib.MaxPool(F32, upload(t, F32, x), yb, p); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, 20)
	if err := PoolRef(x, want, p, false); err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(float64(want[2])) {
		t.Fatalf("reference lost the NaN: %v", want)
	}
	assertClose(t, "MaxPool with NaN", download(t, F32, yb, 20), want, 0, 0)
}

func TestPoolErrors(t *testing.T) {
	x, y := alloc(t, F32, 16), alloc(t, F32, 16)
	for name, p := range map[string]PoolParams{
		"pad > half window": {N: 1, C: 1, H: 4, W: 4, KH: 2, KW: 2, PadTop: 2},
		"no window":         {N: 1, C: 1, H: 4, W: 4},
		"input too big":     {N: 1, C: 2, H: 4, W: 4, KH: 1, KW: 1},
	} {
		if err := testLib.MaxPool(F32, x, y, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := testLib.GlobalAvgPool(F32, x, y, 2, 0); err == nil {
		t.Errorf("empty planes: no error")
	}
}
