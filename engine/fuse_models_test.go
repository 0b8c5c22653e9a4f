package engine

import (
	"math"
	"path/filepath"
	"testing"
)

// fusionModels are the exported models with PyTorch reference cases.
var fusionModels = []string{"llama", "gpt2", "bert", "clip_text", "clip_vision", "resnet", "resnet_bn"}

// openFusion opens model on the shared OpenCL library, fused (the default
// rewrites) or not (no rewrites).
func openFusion(tb testing.TB, model string, fused bool) *Session {
	tb.Helper()
	opts := Options{Kernels: testLib, Max: testMax}
	if !fused {
		opts.Rewrites = []Rewrite{}
	}
	s, err := Open(filepath.Join(modelsDir, model, "model.onnx"), opts)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestFusionModels runs every exported model fused and unfused on OpenCL
// (fp32) over its reference cases: both must match PyTorch within the
// engine's tolerance (max abs error <= 1e-4 of the output's scale), and
// the fused program must launch fewer kernels per run.
func TestFusionModels(t *testing.T) {
	dev := testLib.Device()
	for _, model := range fusionModels {
		t.Run(model, func(t *testing.T) {
			cases := loadCases(t, model)
			launches := map[bool][]int64{}
			errs := map[bool]float64{}
			for _, fused := range []bool{false, true} {
				s := openFusion(t, model, fused)
				for _, rc := range cases {
					before := dev.Stats().Launches
					got, err := s.Run(rc.inputs)
					if err != nil {
						s.Close()
						t.Fatalf("fused=%v case %s: %v", fused, rc.name, err)
					}
					launches[fused] = append(launches[fused], dev.Stats().Launches-before)
					for _, name := range rc.order {
						want, g := rc.outputs[name], got[name]
						if g == nil || !sameShape(g.Shape(), want.Shape()) {
							t.Errorf("fused=%v case %s: output %s is %v; want shape %v", fused, rc.name, name, g, want.Shape())
							continue
						}
						rel, _, worst := compare(floats(t, g), floats(t, want))
						errs[fused] = math.Max(errs[fused], rel)
						if !(rel <= 1e-4) {
							t.Errorf("fused=%v case %s: %s: error %.3e of the output's scale at %d (got %v, want %v)",
								fused, rc.name, name, rel, worst, floats(t, g)[worst], floats(t, want)[worst])
						}
					}
				}
				s.Close()
			}
			for i, rc := range cases {
				u, f := launches[false][i], launches[true][i]
				t.Logf("case %-8s launches per run: unfused %4d, fused %4d", rc.name, u, f)
				if f >= u {
					t.Errorf("case %s: fused run launches %d kernels, unfused %d", rc.name, f, u)
				}
			}
			t.Logf("max error vs PyTorch: unfused %.2e, fused %.2e", errs[false], errs[true])
		})
	}
}

// BenchmarkFusion times one Run of each model's first reference case,
// fused and unfused, on OpenCL; launches/op is the kernel count per run.
func BenchmarkFusion(b *testing.B) {
	dev := testLib.Device()
	for _, model := range fusionModels {
		rc := loadCases(b, model)[0]
		for _, mode := range []struct {
			name  string
			fused bool
		}{{"fused", true}, {"unfused", false}} {
			b.Run(model+"/"+mode.name, func(b *testing.B) {
				s := openFusion(b, model, mode.fused)
				defer s.Close()
				if _, err := s.Run(rc.inputs); err != nil { // warm: builds the programs
					b.Fatal(err)
				}
				before := dev.Stats().Launches
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := s.Run(rc.inputs); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(dev.Stats().Launches-before)/float64(b.N), "launches/op")
			})
		}
	}
}
