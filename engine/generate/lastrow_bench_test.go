package generate

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tlite/tlite/engine"
)

// BenchmarkPrefillLastLogits times a prefill of 128 tokens (in place, on
// OpenCL) with logits for every row and for the last row only, both
// sessions open at once and timed alternately, 3 rounds of 10 prefills
// each; it reports the median of each mode and the ratio range over the
// rounds. The model is $TLITE_BENCH_MODEL, else the default model.
func BenchmarkPrefillLastLogits(b *testing.B) {
	path := os.Getenv("TLITE_BENCH_MODEL")
	if path == "" {
		path = filepath.Join(defaultDir, "model.onnx")
	}
	const n, rounds, reps = 128, 3, 10
	var ds [2]*Decoder
	for i, last := range []bool{false, true} {
		d, err := Open(path, engine.Options{Kernels: testLib}, n, Config{LastOnly: last})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		ds[i] = d
	}
	toks, pos := make([]int, n), make([]int, n)
	for i := range toks {
		toks[i], pos[i] = (i*7+3)%ds[0].Vocab(), i
	}
	prefill := func(d *Decoder) time.Duration {
		t0 := time.Now()
		if err := d.Reset(); err != nil {
			b.Fatal(err)
		}
		if _, err := d.Step(toks, pos); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	for _, d := range ds {
		prefill(d) // builds the kernels for these shapes
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		var all, last, ratio []float64
		for r := 0; r < rounds; r++ {
			var ta, tl time.Duration
			for k := 0; k < reps; k++ {
				ta += prefill(ds[0])
				tl += prefill(ds[1])
			}
			a, l := ta.Seconds()*1e3/reps, tl.Seconds()*1e3/reps
			all, last, ratio = append(all, a), append(last, l), append(ratio, l/a)
		}
		slices.Sort(all)
		slices.Sort(last)
		slices.Sort(ratio)
		b.ReportMetric(all[1], "all-rows-ms")
		b.ReportMetric(last[1], "last-row-ms")
		b.ReportMetric(ratio[0], "ratio-min")
		b.ReportMetric(ratio[2], "ratio-max")
	}
}
