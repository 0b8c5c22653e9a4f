package engine

import (
	"path/filepath"
	"testing"
)

// TestProfile checks that a profiled run reports its nodes with their op
// types, kernels and device time, on both backends.
func TestProfile(t *testing.T) {
	rc := loadCases(t, "resnet")[0]
	for _, opts := range []Options{{Kernels: testLib, Profile: true}, {Device: "go", Profile: true}} {
		s, err := Open(filepath.Join(modelsDir, "resnet", "model.onnx"), opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Profile(); err != nil { // drop launches of earlier tests
			t.Fatal(err)
		}
		if _, err := s.Run(rc.inputs); err != nil {
			t.Fatal(err)
		}
		rows, err := s.Profile()
		if err != nil {
			t.Fatal(err)
		}
		convs, total := 0, 0.0
		for _, r := range rows {
			if r.Node == "" || r.Kernel == "" || r.Calls <= 0 || r.Ms < 0 {
				t.Errorf("%s: bad row %+v", s.dev.Name(), r)
			}
			if r.OpType == "Conv" {
				convs++
			}
			total += r.Ms
		}
		t.Logf("%s: %d rows, %d conv rows, %.3f ms in total", s.dev.Name(), len(rows), convs, total)
		if convs == 0 || total <= 0 {
			t.Errorf("%s: profile has %d conv rows and %.3f ms: %+v", s.dev.Name(), convs, total, rows)
		}
		s.Close()
	}
	s, err := Open(filepath.Join(modelsDir, "resnet", "model.onnx"), Options{Kernels: testLib})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Profile(); err == nil {
		t.Error("Profile without Options.Profile should fail")
	}
}

// BenchmarkLlamaDecode is one decode step of the test LLaMA (batch 2, 7
// tokens of context) per iteration.
func BenchmarkLlamaDecode(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts Options
	}{{"opencl", Options{Kernels: testLib, Max: testMax}}, {"go", Options{Device: "go", Max: testMax}}} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := Open(filepath.Join(modelsDir, "llama", "model.onnx"), bc.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var in refCase
			for _, rc := range loadCases(b, "llama") {
				if rc.name == "decode" {
					in = rc
				}
			}
			if _, err := s.Run(in.inputs); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.Run(in.inputs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
