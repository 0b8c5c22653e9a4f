package main

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/graphtest"
)

// freeImageClassifier writes a small conv net whose batch, height and width
// are all free (N, H, W): with the default maxima its plan is sized for
// 4 x 1024 x 1024 images.
func freeImageClassifier(t *testing.T) string {
	t.Helper()
	r := rand.New(rand.NewSource(1))
	rnd := func(name string, dims ...int64) *graph.Tensor {
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32()*0.2 - 0.1
		}
		return graphtest.Float32s(name, dims, v...)
	}
	var inits []*graph.Value
	for _, x := range []*graph.Tensor{rnd("w1", 16, 3, 3, 3), rnd("w2", 16, 16, 3, 3), rnd("fc", 10, 16), rnd("fcb", 10)} {
		inits = append(inits, graphtest.Init(x))
	}
	g := graphtest.Graph("classifier", []*graph.Node{
		graphtest.Node("Conv", "conv1", []string{"x", "w1"}, []string{"c1"}, graphtest.Ints("pads", 1, 1, 1, 1)),
		graphtest.Node("Relu", "relu1", []string{"c1"}, []string{"r1"}),
		graphtest.Node("Conv", "conv2", []string{"r1", "w2"}, []string{"c2"}, graphtest.Ints("pads", 1, 1, 1, 1)),
		graphtest.Node("Relu", "relu2", []string{"c2"}, []string{"r2"}),
		graphtest.Node("GlobalAveragePool", "pool", []string{"r2"}, []string{"p"}),
		graphtest.Node("Flatten", "flat", []string{"p"}, []string{"f"}),
		graphtest.Node("Gemm", "head", []string{"f", "fc", "fcb"}, []string{"logits"}, graphtest.Int("transB", 1)),
	}, inits, []*graph.Value{graphtest.Value("x", dtype.Float32, "N", 3, "H", "W")},
		[]*graph.Value{graphtest.Value("logits", dtype.Float32, "N", 10)})
	path := filepath.Join(t.TempDir(), "classifier.onnx")
	if err := os.WriteFile(path, graphtest.Bytes(graphtest.Model(17, g)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPlansFromInputs: tl run and tl bench size the plan for the inputs
// given (a 1x3x32x32 image takes well under a MiB, where the defaults
// would take hundreds), --max takes over where given, and a plan that
// cannot fit the device is refused at Open naming the symbol, its size
// and the flag.
func TestPlansFromInputs(t *testing.T) {
	model := freeImageClassifier(t)
	img := filepath.Join(t.TempDir(), "x.npy")
	if err := npy.WriteFile(img, tensor.New(tensor.WithShape(1, 3, 32, 32), tensor.WithBacking(make([]float32, 3*32*32)))); err != nil {
		t.Fatal(err)
	}
	out, _, err := capture(t, runRun, model, "--input", "x="+img, "--json", "--device", "go")
	if err != nil {
		t.Fatal(err)
	}
	var rr runResult
	if err := json.Unmarshal([]byte(out), &rr); err != nil {
		t.Fatal(err)
	}
	if rr.Plan.Bytes <= 0 || rr.Plan.Bytes > 1<<20 {
		t.Errorf("tl run plan for a 1x3x32x32 image: %d bytes", rr.Plan.Bytes)
	}
	for sym, want := range map[string]int64{"N": 1, "H": 32, "W": 32} {
		if m := rr.Plan.Maxima[sym]; m.Value != want || m.From != "the input shapes" {
			t.Errorf("maximum of %s: %+v, want %d from the inputs", sym, m, want)
		}
	}
	// --max wins where given.
	out, _, err = capture(t, runRun, model, "--input", "x="+img, "--json", "--device", "go", "--max", "H=64")
	if err != nil {
		t.Fatal(err)
	}
	rr = runResult{}
	if err := json.Unmarshal([]byte(out), &rr); err != nil {
		t.Fatal(err)
	}
	if m := rr.Plan.Maxima["H"]; m.Value != 64 || m.From != "--max" {
		t.Errorf("maximum of H with --max H=64: %+v", m)
	}
	// tl bench --shape plans for the shape benchmarked.
	out, _, err = capture(t, runBench, model, "--shape", "x=1x3x32x32", "-r", "1", "--json", "--device", "go")
	if err != nil {
		t.Fatal(err)
	}
	var br benchResult
	if err := json.Unmarshal([]byte(out), &br); err != nil {
		t.Fatal(err)
	}
	if br.ActBytes <= 0 || br.ActBytes > 1<<20 {
		t.Errorf("tl bench activations for 1x3x32x32: %d bytes", br.ActBytes)
	}
	// A plan that cannot fit is refused at Open, naming the symbol, what it
	// implies and the flag.
	_, _, err = capture(t, runRun, model, "--input", "x="+img, "--device", "go", "--max", "H=10000000,W=10000000")
	if err == nil {
		t.Fatal("a plan for 10^7 x 10^7 images opened")
	}
	for _, want := range []string{"H = 10000000 (declared)", "GiB", "--max H=<n>,W=<n>", "largest tensor is conv2+Relu scratch"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not mention %q", err, want)
		}
	}
	_, _, err = capture(t, runBench, model, "--shape", "x=1x3x100000x100000", "-r", "1", "--device", "go")
	if err == nil || !strings.Contains(err.Error(), "H = 100000 (inputs)") {
		t.Errorf("bench at 100000 x 100000: %v", err)
	}
}

// TestContextFromDerivedLimit: hf_gpt2 has 256 learned positions and no
// config.json: tl generate takes its context from the derived limit, says
// so, and stops there; --ctx beyond it and a bench past it are refused.
func TestContextFromDerivedLimit(t *testing.T) {
	model := "../../testdata/models/hf_gpt2/model.onnx"
	out, _, err := capture(t, runGenerate, model, "--tokens", "1,2,3", "-n", "0", "--ignore-eos", "--kv", "explicit", "--device", "go", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var g generateResult
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatal(err)
	}
	if g.Context != 256 || !strings.Contains(g.ContextFrom, "derived from the model") || !strings.Contains(g.ContextFrom, "/wpe/Gather") ||
		g.StopReason != "context full" || len(g.TokenIDs) != 254 {
		t.Errorf("context %d (%s), stop %q after %d tokens; want 256 from the /wpe/Gather limit, full after 254", g.Context, g.ContextFrom, g.StopReason, len(g.TokenIDs))
	}
	_, _, err = capture(t, runGenerate, model, "--tokens", "1,2,3", "-n", "4", "--ctx", "300", "--kv", "explicit", "--device", "go")
	if err == nil || !strings.Contains(err.Error(), "limit of 256") {
		t.Errorf("--ctx 300: %v", err)
	}
	_, _, err = capture(t, runBench, "--model", model, "-p", "250", "-n", "10", "--kv", "explicit", "--device", "go")
	if err == nil || !strings.Contains(err.Error(), "limit of 256") {
		t.Errorf("bench -p 250 -n 10: %v", err)
	}
}

// TestContextFromPositionTable: hf_llama's rotary tables are cached to 256
// positions and read by position_ids, which bounds the context the same
// way: tl generate takes 256 from it and says so, and --ctx beyond it is
// refused (before, the context defaulted to 1024 and decoding stopped at
// position 256 with an index error).
func TestContextFromPositionTable(t *testing.T) {
	model := "../../testdata/models/hf_llama/model.onnx"
	out, _, err := capture(t, runGenerate, model, "--tokens", "1,2,3", "-n", "2", "--ignore-eos", "--device", "go", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var g generateResult
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatal(err)
	}
	if g.Context != 256 || !strings.Contains(g.ContextFrom, "position_ids <= 255") || !strings.Contains(g.ContextFrom, "Gather") {
		t.Errorf("context %d (%s); want 256 from the position_ids limit", g.Context, g.ContextFrom)
	}
	_, _, err = capture(t, runGenerate, model, "--tokens", "1,2,3", "-n", "4", "--ctx", "300", "--device", "go")
	if err == nil || !strings.Contains(err.Error(), "limit of 256") {
		t.Errorf("--ctx 300: %v", err)
	}
}

// TestPureGoRefusesHugePlans: sizes that used to abort the pure-Go device
// with out-of-memory (--ctx 100000, --max seq=100000) are refused at Open
// with an error naming the size and the flag, before anything is allocated.
func TestPureGoRefusesHugePlans(t *testing.T) {
	llama := "../../testdata/models/llama/model.onnx"
	tok := "../../testdata/models/hf_llama/tokenizer.json"
	before := peakRSSMiB()
	for _, kvMode := range []string{"inplace", "explicit"} {
		_, _, err := capture(t, runGenerate, llama, "--tokenizer", tok, "--tokens", "1,2,3", "-n", "2", "--ctx", "100000", "--kv", kvMode, "--device", "go")
		if err == nil || !strings.Contains(err.Error(), "memory plan") || !strings.Contains(err.Error(), "smaller --ctx") {
			t.Errorf("generate --ctx 100000 --kv %s: %v", kvMode, err)
		}
	}
	_, _, err := capture(t, runBench, llama, "--shape", "seq=5", "--shape", "past=0", "--max", "seq=100000", "-r", "1", "--device", "go")
	if err == nil || !strings.Contains(err.Error(), "seq = 100000 (declared)") || !strings.Contains(err.Error(), "--max seq=<n>") {
		t.Errorf("bench --max seq=100000: %v", err)
	}
	if after := peakRSSMiB(); after-before > 200 {
		t.Errorf("refusing the plans raised the peak RSS by %.0f MiB", after-before)
	}
}
