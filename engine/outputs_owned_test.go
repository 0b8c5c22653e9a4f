package engine

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestRunOutputsOwned: Run hands device results out without a copy, so
// each output must own its memory: a later run does not change an
// earlier run's outputs, and scribbling over an output does not change
// what the next run returns.
func TestRunOutputsOwned(t *testing.T) {
	cases := loadCases(t, "llama")
	s, err := Open(filepath.Join(modelsDir, "llama", "model.onnx"), Options{Kernels: testLib, Max: testMax})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rc := cases[0]
	first, err := s.Run(rc.inputs)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string][]float32{}
	for name, d := range first {
		kept[name] = slices.Clone(floats(t, d))
	}
	for _, other := range cases {
		if _, err := s.Run(other.inputs); err != nil {
			t.Fatal(err)
		}
	}
	for name, d := range first {
		if !slices.Equal(floats(t, d), kept[name]) {
			t.Fatalf("output %q of the first run changed after later runs", name)
		}
		clear(floats(t, d))
	}
	again, err := s.Run(rc.inputs)
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range again {
		if !slices.Equal(floats(t, d), kept[name]) {
			t.Fatalf("output %q differs after the earlier outputs were overwritten", name)
		}
	}
}
