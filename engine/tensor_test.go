package engine

import (
	"testing"

	"gorgonia.org/tensor"
)

func TestTensorDense(t *testing.T) {
	for _, c := range []struct {
		name string
		t    Tensor
		ok   bool
	}{
		{"float32", NewTensor([]int{2, 3}, make([]float32, 6)), true},
		{"int64 scalar", NewTensor(nil, []int64{7}), true},
		{"bool", NewTensor([]int{1}, []bool{true}), true},
		{"empty", NewTensor([]int{0, 4}, []float32{}), true},
		{"too few", NewTensor([]int{2, 3}, make([]float32, 5)), false},
		{"negative dim", Tensor{Shape: []int{-1}, Data: []float32{}}, false},
		{"no data", Tensor{Shape: []int{1}}, false},
		{"unsupported", Tensor{Shape: []int{1}, Data: []string{"x"}}, false},
	} {
		d, err := c.t.Dense()
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v", c.name, err)
			continue
		}
		if err != nil {
			continue
		}
		back := TensorOf(d)
		if back.Len() != c.t.Len() || len(back.Shape) != len(c.t.Shape) {
			t.Errorf("%s: round trip gives shape %v", c.name, back.Shape)
		}
	}
}

// TestRunTensors: RunTensors gives Run's results without gorgonia types,
// and a malformed tensor is an InputError naming the input.
func TestRunTensors(t *testing.T) {
	s, err := Open("../testdata/models/clip_vision/model.onnx", Options{Device: "go"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	px := make([]float32, 3*224*224)
	for i := range px {
		px[i] = float32(i%17)/8 - 1
	}
	out, err := s.RunTensors(map[string]Tensor{"pixel_values": NewTensor([]int{1, 3, 224, 224}, px)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewTensor([]int{1, 3, 224, 224}, px).Dense()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := s.Run(map[string]*tensor.Dense{"pixel_values": d})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := out["image_embeds"].Float32s()
	want := ref["image_embeds"].Data().([]float32)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("RunTensors[%d] = %v, Run %v", i, got[i], want[i])
		}
	}
	_, err = s.RunTensors(map[string]Tensor{"pixel_values": NewTensor([]int{1, 3, 224, 224}, px[:10])})
	if ie, ok := err.(*InputError); !ok || ie.Input != "pixel_values" {
		t.Errorf("short data: %v", err)
	}
}
