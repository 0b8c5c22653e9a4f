package engine_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/quant/qonnx"
	"github.com/tlite/tlite/symshape"
)

// Open a model once, then run it on plain Go slices. Device "go" is the
// pure-Go CPU backend; leave Device empty for the first OpenCL GPU.
func Example() {
	s, err := engine.Open("../testdata/models/clip_vision/model.onnx", engine.Options{Device: "go"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for _, p := range s.Inputs() {
		fmt.Println("input", p.Name, p.Type, symshape.FormatShape(p.Shape))
	}
	pixels := make([]float32, 1*3*224*224) // a grey image, already normalised
	out, err := s.RunTensors(map[string]engine.Tensor{
		"pixel_values": engine.NewTensor([]int{1, 3, 224, 224}, pixels),
	})
	if err != nil {
		log.Fatal(err)
	}
	emb := out["image_embeds"]
	v, _ := emb.Float32s()
	fmt.Println("image_embeds", emb.Shape, len(v))
	// Output:
	// input pixel_values float32 [batch, 3, 224, 224]
	// image_embeds [1 32] 32
}

// Quantize a model's weight matrices to 4-bit E0M4, write it with its
// weights in a page-aligned external data file, and open the result.
func Example_quantize() {
	m, err := graph.Load("../testdata/default/model.onnx")
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	res, err := qonnx.Quantize(m, qonnx.Options{Format: quant.E0M4, Group: 32})
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "tlite-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "model.e0m4.onnx")
	if err := graph.Write(m, out, graph.WriteOptions{ExternalThreshold: 1024, DataFile: "model.e0m4.onnx.data", Align: 4096}); err != nil {
		log.Fatal(err)
	}
	s, err := engine.Open(out, engine.Options{Device: "go"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	fmt.Printf("%d weight matrices stored as E0M4; the model opens with inputs:", len(res.Weights))
	for _, p := range s.Inputs()[:3] {
		fmt.Print(" ", p.Name)
	}
	fmt.Println()
	// Output:
	// 25 weight matrices stored as E0M4; the model opens with inputs: input_ids attention_mask position_ids
}
