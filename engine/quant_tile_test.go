package engine

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/quant/qonnx"
	"github.com/tlite/tlite/kernels"
)

// TestQuantTiledOnGPU opens a quantized Linear (odd N) with a kernel
// library that selects as a GPU does: the packed weight must be repacked
// into four-column tiles at Open and run by the tiled kernels (the build
// dump names them: qmt_r1 for decode, one row, and qmt_mm for prefill,
// five rows), and give
// what the dequantized weight gives.
func TestQuantTiledOnGPU(t *testing.T) {
	const k, n, group = 96, 37, 32
	w := make([]float32, k*n)
	bias := make([]float32, n)
	for i := range w {
		w[i] = float32(math.Sin(float64(i)*0.41)) * 0.1
	}
	for i := range bias {
		bias[i] = float32(i) * 0.02
	}
	m := buildLinear(t, w, bias, k, n)
	if _, err := qonnx.Quantize(m, qonnx.Options{Format: quant.E0M4, Group: group}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "linear.onnx")
	if err := graph.Write(m, path, graph.WriteOptions{ExternalThreshold: 64, Align: 64}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	p, err := quant.Quantize(w, k, n, quant.Options{Format: quant.E0M4, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	dq := quant.Dequantize(p)

	dump := t.TempDir()
	t.Setenv("TLITE_KERNEL_PROFILE", "gpu")
	t.Setenv("TLITE_KERNEL_DUMP", dump)
	lib := kernels.New(testLib.Device())
	if lib.QuantLayout() != kernels.QLayoutTile4 {
		t.Fatalf("the gpu profile's layout is %v", lib.QuantLayout())
	}
	s, err := Open(path, Options{Kernels: lib, Max: testMax})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The tiled copy is written into its device buffer at upload, not
	// kept on the Go heap.
	tiledCopies := 0
	for _, r := range s.c.vals {
		if r.derive != nil && r.konst != nil && r.konst.dt == dtype.Uint8 {
			tiledCopies++
			if r.konst.data != nil {
				t.Errorf("tiled weight %s has a host copy after Open", r.name)
			}
		}
	}
	if tiledCopies != 1 {
		t.Errorf("%d tiled weights made at Open, want 1", tiledCopies)
	}
	for _, rows := range []int{1, 5} {
		x := make([]float32, rows*k)
		for i := range x {
			x[i] = float32(math.Cos(float64(i) * 0.13))
		}
		want := make([]float32, rows*n)
		for r := 0; r < rows; r++ {
			for j := 0; j < n; j++ {
				acc := float64(bias[j])
				for kk := 0; kk < k; kk++ {
					acc += float64(x[r*k+kk]) * float64(dq[kk*n+j])
				}
				want[r*n+j] = float32(acc)
			}
		}
		out, err := s.Run(map[string]*tensor.Dense{"x": tensor.New(tensor.WithShape(1, rows, k), tensor.WithBacking(x))})
		if err != nil {
			t.Fatal(err)
		}
		if rel, _, worst := compare(floats(t, out["y"]), want); rel > 1e-5 {
			t.Errorf("%d rows: relative error %g (worst at %d)", rows, rel, worst)
		}
	}
	tsv, err := os.ReadFile(filepath.Join(dump, "builds.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	for _, kern := range []string{"qmt_r1", "qmt_mm"} {
		if !strings.Contains(string(tsv), "\t"+kern+"\t") {
			t.Errorf("no build of %s recorded; builds:\n%s", kern, tsv)
		}
	}
	if strings.Contains(string(tsv), "\tqmv_wg\t") || strings.Contains(string(tsv), "\tqmm_4x2\t") {
		t.Errorf("a columns-layout kernel ran; builds:\n%s", tsv)
	}
}
