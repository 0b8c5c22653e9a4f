package kernels

import (
	"fmt"
	"math"
	"testing"
)

func TestSoftmaxRefHand(t *testing.T) {
	// softmax([0, ln 2, ln 3]) = [1, 2, 3] / 6.
	x := []float32{0, float32(math.Log(2)), float32(math.Log(3))}
	out := make([]float32, 3)
	SoftmaxRef(F32, false, x, out, 1, 3, 1)
	assertClose(t, "softmax", out, []float32{1.0 / 6, 2.0 / 6, 3.0 / 6}, 1e-7, 1e-6)
	SoftmaxRef(F32, true, x, out, 1, 3, 1)
	assertClose(t, "logsoftmax", out, []float32{float32(math.Log(1.0 / 6)), float32(math.Log(2.0 / 6)), float32(math.Log(3.0 / 6))}, 1e-6, 1e-6)
	// Axis in the middle: [1, 2, 2] over axis 1, so pairs (x[0], x[2]) and
	// (x[1], x[3]) are normalised together.
	out4 := make([]float32, 4)
	SoftmaxRef(F32, false, []float32{0, 5, 0, 5}, out4, 1, 2, 2)
	assertClose(t, "softmax strided", out4, []float32{0.5, 0.5, 0.5, 0.5}, 1e-7, 1e-7)
	// A fully masked row is NaN, as in PyTorch.
	inf := float32(math.Inf(-1))
	SoftmaxRef(F32, false, []float32{inf, inf, inf}, out, 1, 3, 1)
	for i, v := range out {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("softmax of all -inf: element %d = %v, want NaN", i, v)
		}
	}
}

func TestSoftmax(t *testing.T) {
	shapes := [][3]int{ // outer, n, inner
		{1, 1, 1}, {3, 5, 1}, {4, 16, 1}, {7, 33, 1}, {2, 1000, 1}, {130, 17, 1},
		{2, 3, 4}, {1, 7, 5}, {3, 1, 6}, {2, 40, 3},
	}
	bothStyles(t, func(t *testing.T) {
		for _, s := range storages {
			for _, log := range []bool{false, true} {
				for i, sh := range shapes {
					n := sh[0] * sh[1] * sh[2]
					x := randVec(int64(100+i), n)
					for j := range x {
						x[j] = roundTrip(s, x[j]*8) // a spread that makes the max matter
					}
					if n > 4 {
						x[2] = float32(math.Inf(-1)) // a masked element
					}
					want := make([]float32, n)
					SoftmaxRef(s, log, x, want, sh[0], sh[1], sh[2])
					xb := upload(t, s, x)
					ob := alloc(t, s, n)
					op := testLib.Softmax
					if log {
						op = testLib.LogSoftmax
					}
					if err := op(s, xb, ob, sh[0], sh[1], sh[2]); err != nil {
						t.Fatal(err)
					}
					atol, rtol := 1e-6, 1e-5
					if s == F16 {
						atol, rtol = 1e-3, 2e-3
					}
					assertClose(t, fmt.Sprintf("%v log=%v %v", s, log, sh), download(t, s, ob, n), want, atol, rtol)
				}
			}
		}
	})
}

func TestSoftmaxSpecial(t *testing.T) {
	inf := float32(math.Inf(-1))
	nan := float32(math.NaN())
	// Row 0 all -inf (masked), row 1 finite, row 2 with a NaN: rows 0 and 2
	// are all NaN, row 1 is ordinary; 20 columns exercise the vector path.
	const cols = 20
	x := make([]float32, 3*cols)
	for j := 0; j < cols; j++ {
		x[j] = inf
		x[cols+j] = float32(j) / 4
		x[2*cols+j] = 1
	}
	x[2*cols+17] = nan
	bothStyles(t, func(t *testing.T) {
		for _, s := range storages {
			want := make([]float32, len(x))
			SoftmaxRef(s, false, x, want, 3, cols, 1)
			for j := 0; j < cols; j++ {
				if !math.IsNaN(float64(want[j])) || !math.IsNaN(float64(want[2*cols+j])) {
					t.Fatalf("reference: masked or NaN rows should be NaN, got %v and %v", want[j], want[2*cols+j])
				}
			}
			xb := upload(t, s, x)
			// In place: out aliases x.
			if err := testLib.Softmax(s, xb, xb, 3, cols, 1); err != nil {
				t.Fatal(err)
			}
			atol, rtol := 1e-6, 1e-5
			if s == F16 {
				atol, rtol = 1e-3, 2e-3
			}
			assertClose(t, fmt.Sprintf("%v special rows in place", s), download(t, s, xb, len(x)), want, atol, rtol)
		}
	})
}

// BenchmarkSoftmax measures attention-score-like rows: 32 heads x 256
// queries of 1024 keys (32 MiB in, 32 MiB out in fp32).
func BenchmarkSoftmax(b *testing.B) {
	rows, cols := 32*256, 1024
	x := upload(b, F32, randVec(1, rows*cols))
	out := alloc(b, F32, rows*cols)
	if err := testLib.Softmax(F32, x, out, rows, cols, 1); err != nil {
		b.Fatal(err)
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(2 * rows * cols * 4))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := testLib.Softmax(F32, x, out, rows, cols, 1); err != nil {
			b.Fatal(err)
		}
	}
	if err := testLib.Device().Finish(); err != nil {
		b.Fatal(err)
	}
}
