package main

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/quant/qonnx"
)

// convWeightsToHalf stores the float32 weights of Conv nodes (input 1,
// an initializer read only by Convs) as float16, as qonnx does for
// MatMul/Gemm weights: the session widens them at Open (FP32) or keeps
// them half (FP16), so only the file and the upload shrink. Weights of
// fewer than minSize elements stay float32. It returns the converted
// weights in qonnx's form for the report.
func convWeightsToHalf(g *graph.Graph, minSize int) ([]qonnx.Weight, error) {
	var out []qonnx.Weight
	seen := map[*graph.Value]bool{}
	for _, n := range g.Nodes {
		if n.OpType != "Conv" || (n.Domain != "" && n.Domain != "ai.onnx") || len(n.Inputs) < 2 {
			continue
		}
		w := n.Inputs[1]
		if w == nil || w.Const == nil || w.Const.Type != dtype.Float32 || seen[w] {
			continue
		}
		seen[w] = true
		onlyConv := true
		for _, c := range w.Consumers {
			if c.OpType != "Conv" {
				onlyConv = false
			}
		}
		if !onlyConv || w.Const.NumElements() < int64(minSize) || len(w.Const.Dims) < 3 {
			continue
		}
		t := w.Const
		vals, err := t.Float32s()
		if err != nil {
			return nil, fmt.Errorf("conv weight %q: %w", w.Name, err)
		}
		data := make([]byte, 2*len(vals))
		sat := 0
		for i, x := range vals {
			if !math.IsInf(float64(x), 0) && !math.IsNaN(float64(x)) && (x > 65504 || x < -65504) {
				x = float32(math.Copysign(65504, float64(x)))
				sat++
			}
			binary.LittleEndian.PutUint16(data[2*i:], dtype.Float32ToHalf(x))
		}
		ht, err := graph.NewTensor(w.Name, dtype.Float16, t.Dims, data)
		if err != nil {
			return nil, fmt.Errorf("conv weight %q: %w", w.Name, err)
		}
		w.Const, w.Type = ht, dtype.Float16
		for i := range w.Declared {
			w.Declared[i] = graph.Dim{Value: t.Dims[i]}
		}
		// K and N as the convolution's GEMM sees them: C/group*kh*kw by M.
		k := 1
		for _, d := range t.Dims[1:] {
			k *= int(d)
		}
		wt := qonnx.Weight{Name: w.Name, Stored: w.Name, K: k, N: int(t.Dims[0]), Layout: "conv",
			FloatBytes: int64(len(t.Data)), StoredBytes: int64(len(data)), Saturated: sat}
		for _, c := range w.Consumers {
			wt.Nodes = append(wt.Nodes, c.Name)
		}
		out = append(out, wt)
	}
	return out, nil
}
