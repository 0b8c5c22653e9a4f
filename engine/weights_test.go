package engine

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/quant/qonnx"
)

// TestWeightPlacement runs the llama export whose weights live in an
// external data file with its weights used in place from the mapping and
// with every weight copied to the device (the discrete-GPU path), forced on
// PoCL. Both must match PyTorch's outputs, bit for bit each other (the same
// kernels read the same values), and say where the weights went; the
// transposed weights must never have been held on the Go heap.
func TestWeightPlacement(t *testing.T) {
	path := filepath.Join(modelsDir, "llama", "model_ext.onnx")
	cases := loadCases(t, "llama")
	outs := map[WeightPlacement]map[string][]float32{}
	for _, wp := range []WeightPlacement{WeightsInPlace, WeightsCopy} {
		t.Run(wp.String(), func(t *testing.T) {
			s, err := Open(path, Options{Kernels: testLib, Max: testMax, Weights: wp})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			st := s.WeightStats()
			t.Logf("%+v", st)
			if st.Placement != wp {
				t.Fatalf("placement %v, want %v", st.Placement, wp)
			}
			switch wp {
			case WeightsInPlace:
				if st.Views == 0 || st.InPlace == 0 {
					t.Errorf("in place: no weight was used from the mapping: %+v", st)
				}
			case WeightsCopy:
				if st.Views != 0 || st.InPlace != 0 || st.Copied == 0 {
					t.Errorf("copy: %+v, want every byte copied", st)
				}
			}
			derived := 0
			for _, r := range s.c.vals {
				if r.derive == nil {
					continue
				}
				derived++
				if r.konst.data != nil {
					t.Errorf("transposed weight %s has a host copy after Open", r.name)
				}
			}
			if derived == 0 {
				t.Errorf("no weight was transposed at Open: the test no longer covers derived weights")
			}
			got := map[string][]float32{}
			for _, rc := range cases {
				res, err := s.Run(rc.inputs)
				if err != nil {
					t.Fatalf("case %s: %v", rc.name, err)
				}
				for _, name := range rc.order {
					g := floats(t, res[name])
					rel, _, worst := compare(g, floats(t, rc.outputs[name]))
					if !(rel <= 1e-4) || math.IsNaN(rel) {
						t.Errorf("case %s: %s: max abs error %.3e of scale at %d", rc.name, name, rel, worst)
					}
					got[rc.name+"/"+name] = g
				}
			}
			outs[wp] = got
		})
	}
	a, b := outs[WeightsInPlace], outs[WeightsCopy]
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("outputs: %d in place, %d copied", len(a), len(b))
	}
	for k, x := range a {
		y := b[k]
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				t.Fatalf("%s[%d]: %v in place, %v copied", k, i, x[i], y[i])
			}
		}
	}
}

// TestWeightPlacementChoice checks the per-device choice and its overrides.
func TestWeightPlacementChoice(t *testing.T) {
	path := filepath.Join(modelsDir, "llama", "model_ext.onnx")
	for _, tc := range []struct {
		name string
		env  string
		opts Options
		want WeightPlacement
	}{
		{"pocl-auto", "", Options{Kernels: testLib, Max: testMax}, WeightsInPlace},
		{"pocl-env-copy", "copy", Options{Kernels: testLib, Max: testMax}, WeightsCopy},
		{"pocl-option-beats-env", "copy", Options{Kernels: testLib, Max: testMax, Weights: WeightsInPlace}, WeightsInPlace},
		{"go-auto", "", Options{Device: "go", Max: testMax}, WeightsCopy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TLITE_WEIGHTS", tc.env)
			s, err := Open(path, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.WeightStats().Placement; got != tc.want {
				t.Errorf("placement %v, want %v", got, tc.want)
			}
		})
	}
	t.Setenv("TLITE_WEIGHTS", "sideways")
	if _, err := Open(path, Options{Kernels: testLib, Max: testMax}); err == nil {
		t.Error("TLITE_WEIGHTS=sideways was accepted")
	}
	for in, want := range map[string]WeightPlacement{"": WeightsAuto, "Auto": WeightsAuto, "inplace": WeightsInPlace, "copy": WeightsCopy} {
		if got, err := ParseWeightPlacement(in); err != nil || got != want {
			t.Errorf("ParseWeightPlacement(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// TestFP16WeightsNotKept opens the test LLaMA with float16 weights on
// OpenCL in both storages: the large ones must be widened at upload only
// (no float32 copy left on the Go heap after Open), the transposed ones
// included, and the logits must still match PyTorch's.
func TestFP16WeightsNotKept(t *testing.T) {
	src := filepath.Join(modelsDir, "llama", "model.onnx")
	cases := loadCases(t, "llama")
	path, _ := quantizeModel(t, src, qonnx.Options{Format: quant.FP16, MinSize: qonnx.DefaultMinSize})
	for _, prec := range []Precision{FP32, FP16} {
		s, err := Open(path, Options{Kernels: testLib, Max: testMax, Precision: prec})
		if err != nil {
			t.Fatal(err)
		}
		deferred := 0
		for _, r := range s.c.vals {
			if r.derive == nil || r.konst == nil {
				continue
			}
			// Made from the file's float16 bytes, not from a widened copy.
			if len(r.derivedFrom) == 2*numel(r.konst.shape) {
				deferred++
			}
			if r.konst.data != nil {
				t.Errorf("precision %v: %s (%v) has a host copy after Open", prec, r.name, r.konst.dt)
			}
		}
		s.Close()
		if deferred == 0 {
			t.Errorf("precision %v: no float16 weight was widened at upload", prec)
		}
		cos, _ := runQuantCases(t, path, cases, Options{Kernels: testLib, Max: testMax, Precision: prec})
		if c := minOf(cos); !(c >= 0.999) {
			t.Errorf("precision %v: logits cosine similarity %.6f < 0.999", prec, c)
		}
	}
}
