package main

import "testing"

// TestBenchServeArgs: "tl bench serve" is routed to the LLMS comparison,
// which refuses bad command lines before loading anything; "tl bench"
// itself still reaches the ordinary benchmark.
func TestBenchServeArgs(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "serve"},
		{"bench", "serve", "--model", "m.onnx", "--pattern", "zigzag"},
		{"bench", "serve", "--model", "m.onnx", "--contexts", "2,x"},
		{"bench", "serve", "--model", "m.onnx", "--budget-contexts", "0"},
		{"bench", "serve", "--model", "m.onnx", "--limits-ms", "-3"},
		{"bench", "serve", "--model", "m.onnx", "--chunk-sizes", "16,0"},
	} {
		if code := dispatch(args); code != 1 {
			t.Errorf("tl %v: exit %d, want 1", args, code)
		}
	}
	if code := dispatch([]string{"bench", "serve", "-h"}); code != 0 {
		t.Errorf("tl bench serve -h: exit %d", code)
	}
}
