package kernels

import (
	_ "embed"
	"fmt"
	"math"
)

//go:embed softmax.cl
var softmaxSrc string

// Softmax computes ONNX Softmax (opset 13) of the contiguous tensor x seen as
// [outer, n, inner], normalising over the middle axis: for axis a of shape d,
// outer = d[0]*...*d[a-1], n = d[a], inner = the product of the rest. The
// pre-13 "flatten to 2-D" form is outer = d[0]*...*d[a-1], n = the product of
// the rest, inner = 1. out may alias x. A line whose maximum is -inf gives
// NaN, like PyTorch.
func (l *Lib) Softmax(s Storage, x, out Buf, outer, n, inner int) error {
	return l.softmax("Softmax", s, x, out, outer, n, inner, false, preferGroups(l))
}

// LogSoftmax computes ONNX LogSoftmax with Softmax's layout and aliasing.
func (l *Lib) LogSoftmax(s Storage, x, out Buf, outer, n, inner int) error {
	return l.softmax("LogSoftmax", s, x, out, outer, n, inner, true, preferGroups(l))
}

func (l *Lib) softmax(op string, s Storage, x, out Buf, outer, n, inner int, log, groups bool) error {
	if outer < 0 || n < 0 || inner < 0 {
		return fmt.Errorf("kernels: %s: negative size [%d, %d, %d]", op, outer, n, inner)
	}
	total := outer * n * inner
	if total == 0 {
		return nil
	}
	if err := checkSpan(op, "x", x, total, s.Size()); err != nil {
		return err
	}
	if err := checkSpan(op, "out", out, total, s.Size()); err != nil {
		return err
	}
	g := groupSize(l) // defined for every style, so they share one program
	opts := fmt.Sprintf("%s -DGROUP=%d", s.define(), g)
	lg := boolArg(log)
	if inner > 1 {
		k, err := l.kernel("softmax", softmaxSrc, opts, "softmax_cols")
		if err != nil {
			return err
		}
		const loc = 64
		return l.dev.Launch(k, []int{roundUp(outer*inner, loc)}, []int{loc},
			x.Mem, int32(x.Off), out.Mem, int32(out.Off), int32(outer), int32(n), int32(inner), lg)
	}
	if groups {
		k, err := l.kernel("softmax", softmaxSrc, opts, "softmax_grp")
		if err != nil {
			return err
		}
		return l.dev.Launch(k, []int{outer * g}, []int{g}, x.Mem, int32(x.Off), out.Mem, int32(out.Off), int32(outer), int32(n), lg)
	}
	k, err := l.kernel("softmax", softmaxSrc, opts, "softmax_rows")
	if err != nil {
		return err
	}
	loc := rowLocal(l, outer)
	return l.dev.Launch(k, []int{roundUp(outer, loc)}, []int{loc}, x.Mem, int32(x.Off), out.Mem, int32(out.Off), int32(outer), int32(n), lg)
}

// SoftmaxRef is the reference for Softmax (log false) and LogSoftmax,
// computed in float64 and rounded to storage s. out may alias x.
func SoftmaxRef(s Storage, log bool, x, out []float32, outer, n, inner int) {
	line := make([]float64, n)
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			m := math.Inf(-1)
			for k := range line {
				line[k] = float64(x[(o*n+k)*inner+i])
				if !math.IsNaN(line[k]) {
					m = math.Max(m, line[k])
				}
			}
			sum := 0.0
			for _, v := range line {
				sum += math.Exp(v - m)
			}
			for k, v := range line {
				y := math.Exp(v-m) / sum
				if log {
					y = v - m - math.Log(sum)
				}
				out[(o*n+k)*inner+i] = storeAs(s, float32(y))
			}
		}
	}
}
