package quant

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// MAE is the mean absolute difference between a and b, accumulated in
// float64. It panics if the lengths differ, which is a caller's bug.
func MAE(a, b []float32) float64 {
	if len(a) != len(b) {
		panic(fmt.Sprintf("quant: MAE of slices of length %d and %d", len(a), len(b)))
	}
	if len(a) == 0 {
		return 0
	}
	var sum float64
	for i := range a {
		sum += math.Abs(float64(a[i]) - float64(b[i]))
	}
	return sum / float64(len(a))
}

// MatrixReport compares E0M4 and INT4 on one weight matrix.
type MatrixReport struct {
	Name    string
	K, N    int
	MAEE0M4 float64 // mean absolute error of the E0M4 round trip
	MAEInt4 float64 // mean absolute error of the INT4 round trip
}

// Ratio is MAEE0M4 / MAEInt4; Transformer-Lite's Table 2 reports about
// 0.955 on real LLM weights. NaN when INT4 is exact.
func (m MatrixReport) Ratio() float64 {
	if m.MAEInt4 == 0 {
		return math.NaN()
	}
	return m.MAEE0M4 / m.MAEInt4
}

// Compare quantizes w (stored as layout says, rows x cols) in both formats
// with the given group size and measures each round trip's error against w.
func Compare(name string, w []float32, rows, cols int, layout Layout, group int) (MatrixReport, error) {
	r := MatrixReport{Name: name}
	for _, f := range []Format{E0M4, Int4} {
		p, err := Quantize(w, rows, cols, Options{Format: f, Group: group, Layout: layout})
		if err != nil {
			return MatrixReport{}, fmt.Errorf("quant: compare %s: %w", name, err)
		}
		r.K, r.N = p.K, p.N
		back := Dequantize(p) // [K, N]
		orig := w
		if layout == LayoutNK {
			orig = transpose(w, rows, cols)
		}
		if f == E0M4 {
			r.MAEE0M4 = MAE(orig, back)
		} else {
			r.MAEInt4 = MAE(orig, back)
		}
	}
	return r, nil
}

// transpose returns the cols x rows transpose of the rows x cols matrix w.
func transpose(w []float32, rows, cols int) []float32 {
	out := make([]float32, len(w))
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			out[j*rows+i] = w[i*cols+j]
		}
	}
	return out
}

// Report collects MatrixReports, one per weight of a model.
type Report struct {
	Group    int
	Matrices []MatrixReport
}

// Add compares one more weight matrix and appends its row.
func (r *Report) Add(name string, w []float32, rows, cols int, layout Layout) error {
	m, err := Compare(name, w, rows, cols, layout, r.Group)
	if err != nil {
		return err
	}
	r.Matrices = append(r.Matrices, m)
	return nil
}

// Totals returns both formats' MAE over every weight of the report
// (weighted by element count) and their ratio.
func (r *Report) Totals() (e0m4, int4, ratio float64) {
	var n float64
	for _, m := range r.Matrices {
		c := float64(m.K) * float64(m.N)
		e0m4 += m.MAEE0M4 * c
		int4 += m.MAEInt4 * c
		n += c
	}
	if n == 0 {
		return 0, 0, math.NaN()
	}
	e0m4, int4 = e0m4/n, int4/n
	if int4 == 0 {
		return e0m4, int4, math.NaN()
	}
	return e0m4, int4, e0m4 / int4
}

// WriteTo writes the report as an aligned text table with a total row.
func (r *Report) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	group := r.Group
	if group == 0 {
		group = DefaultGroup
	}
	fmt.Fprintf(&b, "4-bit quantization error, group %d (mean absolute error against the float weights)\n", group)
	width := len("total")
	for _, m := range r.Matrices {
		width = max(width, len(m.Name))
	}
	fmt.Fprintf(&b, "%-*s %7s %7s %12s %12s %7s\n", width, "weight", "K", "N", "MAE e0m4", "MAE int4", "ratio")
	for _, m := range r.Matrices {
		fmt.Fprintf(&b, "%-*s %7d %7d %12.5g %12.5g %7.4f\n", width, m.Name, m.K, m.N, m.MAEE0M4, m.MAEInt4, m.Ratio())
	}
	e, i, ratio := r.Totals()
	fmt.Fprintf(&b, "%-*s %7s %7s %12.5g %12.5g %7.4f\n", width, "total", "", "", e, i, ratio)
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}
