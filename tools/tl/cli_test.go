package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/graph"

	"gorgonia.org/tensor"
)

const cliFixtures = "../../testdata/cli"

// TestHelpExitsZero: every command's -h, and tl help CMD, succeed.
func TestHelpExitsZero(t *testing.T) {
	for _, c := range commands {
		if c.run == nil {
			continue
		}
		if rc := dispatch([]string{c.name, "-h"}); rc != 0 {
			t.Errorf("tl %s -h exited %d", c.name, rc)
		}
		if rc := dispatch([]string{"help", c.name}); rc != 0 {
			t.Errorf("tl help %s exited %d", c.name, rc)
		}
	}
	if rc := dispatch([]string{"help", "help"}); rc != 0 {
		t.Errorf("tl help help exited %d", rc)
	}
	if rc := dispatch([]string{"help", "nosuch"}); rc == 0 {
		t.Error("tl help nosuch exited 0")
	}
	if rc := dispatch([]string{"nosuch"}); rc == 0 {
		t.Error("tl nosuch exited 0")
	}
}

func TestVersion(t *testing.T) {
	out, _, err := capture(t, runVersion, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Module == "" || !strings.HasPrefix(v.Go, "go") || v.Devices == nil {
		t.Errorf("version %+v", v)
	}
}

func writeNpy(t *testing.T, path string, v []float32) {
	t.Helper()
	if err := npy.WriteFile(path, tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))); err != nil {
		t.Fatal(err)
	}
}

// TestRunEmptyAndCollidingOutputs: an output with zero elements is
// summarised and written; outputs whose names sanitise alike get distinct
// files, each holding its own values.
func TestRunEmptyAndCollidingOutputs(t *testing.T) {
	dir := t.TempDir()
	x := filepath.Join(dir, "x.npy")
	writeNpy(t, x, []float32{1, -2, 3})
	out := filepath.Join(dir, "out")
	text, _, err := capture(t, runRun, filepath.Join(cliFixtures, "empty_output.onnx"), "--input", "x="+x, "--out", out, "--device", "go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "(empty)") {
		t.Errorf("summary of an empty output: %q", text)
	}
	e, err := npy.ReadFile(filepath.Join(out, "empty.npy"))
	if err != nil || e.Shape().TotalSize() != 0 {
		t.Errorf("empty.npy: %v %v", e, err)
	}
	if _, _, err := capture(t, runRun, filepath.Join(cliFixtures, "colliding_names.onnx"), "--input", "x="+x, "--out", out, "--device", "go"); err != nil {
		t.Fatal(err)
	}
	a, err1 := npy.ReadFile(filepath.Join(out, "a_b.npy"))
	b, err2 := npy.ReadFile(filepath.Join(out, "a_b_2.npy"))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	// Sorted names: "a/b" (Relu) gets a_b.npy, "a_b" (Neg) a_b_2.npy.
	if got := a.Data().([]float32); got[1] != 0 || got[2] != 3 {
		t.Errorf("a_b.npy = %v, want Relu(x)", got)
	}
	if got := b.Data().([]float32); got[0] != -1 || got[1] != 2 {
		t.Errorf("a_b_2.npy = %v, want -x", got)
	}
}

func TestUniqueFileNames(t *testing.T) {
	got := uniqueFileNames([]string{"a/b", "a:b", "a_b", "c"})
	seen := map[string]bool{}
	for n, f := range got {
		if seen[f] {
			t.Errorf("%s: file %s used twice (%v)", n, f, got)
		}
		seen[f] = true
	}
}

// TestRunInputs: --inputs reads a folder or a JSON file; past inputs left
// out become empty tensors; an input given twice is refused.
func TestRunInputs(t *testing.T) {
	model := "../../testdata/models/llama/model.onnx"
	ref := "../../testdata/models/llama/ref/prefill"
	full, _, err := capture(t, runRun, model, "--inputs", ref, "--json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, n := range []string{"input_ids", "attention_mask", "position_ids"} {
		b, err := os.ReadFile(filepath.Join(ref, "input."+n+".npy"))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, n+".npy"), b, 0o644)
	}
	noPast, _, err := capture(t, runRun, model, "--inputs", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var a, b runResult
	if err := json.Unmarshal([]byte(full), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(noPast), &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Made) != 4 {
		t.Errorf("made %v, want the 4 past inputs", b.Made)
	}
	// The reference prefill's past is empty too: the outputs agree.
	if len(a.Outputs) != len(b.Outputs) || *a.Outputs[0].Mean != *b.Outputs[0].Mean {
		t.Errorf("outputs with and without explicit empty past differ: %+v vs %+v", a.Outputs[0], b.Outputs[0])
	}
	if a.Device.Backend == "" || len(a.Outputs[0].Shape) != 3 {
		t.Errorf("JSON lacks the device or shapes as arrays: %+v", a)
	}

	// The same inputs as JSON.
	ids, _ := npy.ReadFile(filepath.Join(ref, "input.input_ids.npy"))
	mask, _ := npy.ReadFile(filepath.Join(ref, "input.attention_mask.npy"))
	pos, _ := npy.ReadFile(filepath.Join(ref, "input.position_ids.npy"))
	js := map[string]any{}
	for n, v := range map[string]*tensor.Dense{"input_ids": ids, "attention_mask": mask, "position_ids": pos} {
		js[n] = map[string]any{"dims": []int(v.Shape()), "type": "int64", "data": v.Data()}
	}
	jb, _ := json.Marshal(js)
	jf := filepath.Join(t.TempDir(), "in.json")
	os.WriteFile(jf, jb, 0o644)
	fromJSON, _, err := capture(t, runRun, model, "--inputs", jf, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var c runResult
	json.Unmarshal([]byte(fromJSON), &c)
	if len(c.Outputs) == 0 || *c.Outputs[0].Mean != *b.Outputs[0].Mean {
		t.Errorf("JSON inputs give %+v, .npy inputs %+v", c.Outputs, b.Outputs)
	}

	for _, args := range [][]string{
		{model, "--input", "input_ids=" + filepath.Join(dir, "input_ids.npy"), "--input", "input_ids=" + filepath.Join(dir, "input_ids.npy")},
		{model, "--inputs", dir, "--input", "input_ids=" + filepath.Join(dir, "input_ids.npy")},
		{model, "--inputs", dir, "--max", "bogus=4"},
		{filepath.Join(cliFixtures, "opset99.onnx"), "--inputs", dir},
	} {
		if _, _, err := capture(t, runRun, args...); err == nil {
			t.Errorf("tl run %q: no error", args)
		}
	}
}

func TestInspectRefusals(t *testing.T) {
	for _, args := range [][]string{
		{"../../testdata/models/llama/model.onnx", "--top", "-1"},
		{filepath.Join(cliFixtures, "opset99.onnx")},
	} {
		if err := runInspect(args); err == nil {
			t.Errorf("tl inspect %q: no error", args)
		}
	}
}

// TestDeviceFromEnv: TLITE_DEVICE=go selects the pure-Go backend.
func TestDeviceFromEnv(t *testing.T) {
	t.Setenv("TLITE_DEVICE", "go")
	dir := t.TempDir()
	x := filepath.Join(dir, "x.npy")
	writeNpy(t, x, []float32{1, 2})
	out, _, err := capture(t, runRun, filepath.Join(cliFixtures, "empty_output.onnx"), "--input", "x="+x, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r runResult
	json.Unmarshal([]byte(out), &r)
	if r.Device.Backend != "go" {
		t.Errorf("TLITE_DEVICE=go ran on %+v", r.Device)
	}
}

// TestBenchShapes: symbol values shape inputs, batch defaults to 1, and
// sizes beyond the plan are refused before any input is made.
func TestBenchShapes(t *testing.T) {
	llama := "../../testdata/models/llama/model.onnx"
	out, _, err := capture(t, runBench, llama, "--shape", "seq=5", "--shape", "past=0", "-r", "1", "--json", "--device", "go")
	if err != nil {
		t.Fatal(err)
	}
	var r benchResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if got := r.Shapes["input_ids"]; len(got) != 2 || got[0] != 1 || got[1] != 5 {
		t.Errorf("input_ids shape %v, want [1 5]", got)
	}
	if got := r.Shapes["past_key_values.0.key"]; len(got) != 4 || got[2] != 0 {
		t.Errorf("past shape %v, want past = 0", got)
	}
	if r.Device.Backend != "go" || r.Startup.LoadMs <= 0 {
		t.Errorf("device %+v, startup %+v", r.Device, r.Startup)
	}
	// Only batch is free: no --shape needed.
	if _, _, err := capture(t, runBench, "../../testdata/models/clip_vision/model.onnx", "-r", "1", "--device", "go"); err != nil {
		t.Errorf("bench with batch free: %v", err)
	}
	var before, after float64
	before = peakRSSMiB()
	t0 := time.Now()
	for _, args := range [][]string{
		{llama, "--shape", "input_ids=1x100000000", "--shape", "past=0"},
		{llama, "--shape", "nosuch=3"},
		{llama, "-w", "-5", "--shape", "seq=4", "--shape", "past=0"},
		{llama, "-p", "128"},
		{llama, "--shape", "input_ids=1x4"}, // past unknown
	} {
		_, _, err := capture(t, runBench, append(args, "--device", "go")...)
		if err == nil {
			t.Errorf("tl bench %q: no error", args)
		} else if args[1] == "-p" && !strings.Contains(err.Error(), "--model") {
			t.Errorf("-p error %q does not point to --model", err)
		}
	}
	after = peakRSSMiB()
	if after-before > 200 || time.Since(t0) > 30*time.Second {
		t.Errorf("refusing a 1e8-token input took %v and raised the peak RSS by %.0f MiB", time.Since(t0), after-before)
	}
}

func TestPerplexityEmptyText(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.txt")
	os.WriteFile(empty, []byte("\n\n"), 0o644)
	for _, extra := range [][]string{nil, {"--json"}} {
		out, _, err := capture(t, runPerplexity, append([]string{filepath.Join(defaultModelDir, "model.onnx"), "--text", empty}, extra...)...)
		if err == nil || strings.Contains(out, "NaN") {
			t.Errorf("perplexity of an empty file: %q, %v", out, err)
		}
	}
}

// TestGenerateSampling: sampling flags at temperature 0 warn; a sampled
// run prints its seed, and --seed repeats it exactly.
func TestGenerateSampling(t *testing.T) {
	model := filepath.Join(defaultModelDir, "model.onnx")
	_, stats, err := capture(t, runGenerate, model, "--prompt", "The", "-n", "4", "--top-k", "5")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "warning") || !strings.Contains(stats, "--temperature") {
		t.Errorf("no warning for --top-k at temperature 0: %q", stats)
	}
	gen := func(args ...string) generateResult {
		out, _, err := capture(t, runGenerate, append([]string{model, "--prompt", "The", "-n", "24", "--temperature", "1.5", "--json"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var r generateResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := gen()
	b := gen("--seed", strconvI(a.SamplingJSON.Seed))
	if a.Text != b.Text || a.SamplingJSON.Seed != b.SamplingJSON.Seed {
		t.Errorf("--seed %d did not repeat the run: %q vs %q", a.SamplingJSON.Seed, a.Text, b.Text)
	}
	c := gen()
	if c.SamplingJSON.Seed == a.SamplingJSON.Seed {
		t.Errorf("two runs without --seed used the same seed %d", a.SamplingJSON.Seed)
	}
	// --tokens: the prompt as ids.
	out, _, err := capture(t, runGenerate, model, "--tokens", strings.Trim(strings.Join(strings.Fields(strings.Trim(jsonInts(a.PromptIDs), "[]")), ""), ","), "-n", "3", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var d generateResult
	json.Unmarshal([]byte(out), &d)
	if jsonInts(d.PromptIDs) != jsonInts(a.PromptIDs) || d.Stats.NewTokens != 3 || d.Startup.LoadMs <= 0 {
		t.Errorf("--tokens run: %+v", d)
	}
}

func strconvI(v int64) string { b, _ := json.Marshal(v); return string(b) }

func jsonInts(v []int) string { b, _ := json.Marshal(v); return string(b) }

// TestQuantizeRefusesInputFiles: an output that would replace the input's
// external data, or a directory, is refused and nothing is left behind;
// the report counts the original parameters and copies the tokenizer.
func TestQuantizeRefusesInputFiles(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"model_ext.onnx", "model_ext.onnx.data"} {
		b, err := os.ReadFile(filepath.Join("../../testdata/models/llama", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	in := filepath.Join(dir, "model_ext.onnx")
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	for _, out := range []string{in, in + ".data", filepath.Join(dir, "sub")} {
		if _, _, err := captureQ(t, runQuantize, in, out, "--format", "e0m4"); err == nil {
			t.Errorf("quantize onto %s: no error", out)
		}
	}
	m, err := graph.Load(in)
	if err != nil {
		t.Fatalf("the input no longer loads: %v", err)
	}
	m.Close()
	entries, _ := os.ReadDir(dir)
	sub, _ := os.ReadDir(filepath.Join(dir, "sub"))
	if len(entries) != 3 || len(sub) != 0 {
		t.Errorf("left behind: %v, sub %v", entries, sub)
	}

	// A normal run: original parameter count, tokenizer and config beside.
	out := filepath.Join(t.TempDir(), "q.onnx")
	js, _, err := captureQ(t, runQuantize, filepath.Join(defaultModelDir, "model.onnx"), out, "--format", "int4", "--group", "32", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep quantizeReport
	json.Unmarshal([]byte(js), &rep)
	orig, _ := graph.Load(filepath.Join(defaultModelDir, "model.onnx"))
	want := paramCount(orig)
	orig.Close()
	if rep.Params != want || len(rep.Copied) != 2 {
		t.Errorf("params %d (want %d), copied %v", rep.Params, want, rep.Copied)
	}
	q, _ := graph.Load(out)
	got := paramCount(q)
	q.Close()
	if got != want {
		t.Errorf("the quantized model counts %d parameters, the original %d", got, want)
	}
	hidden, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".*"))
	if len(hidden) != 0 {
		t.Errorf("hidden files left: %v", hidden)
	}
}

// TestEmbedCommand: tl embed reproduces the PyTorch embeddings of
// testdata/embed/refs.json and the cosine table matches them.
func TestEmbedCommand(t *testing.T) {
	const dir = "../../testdata/embed"
	var refs struct {
		Images []struct {
			File        string    `json:"file"`
			ImageEmbeds []float32 `json:"image_embeds"`
		} `json:"images"`
		Texts []struct {
			Text       string    `json:"text"`
			TextEmbeds []float32 `json:"text_embeds"`
		} `json:"texts"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &refs)
	img, txt := refs.Images[0], refs.Texts[0]
	out, _, err := capture(t, runEmbed, "--model", dir, "--image", filepath.Join(dir, img.File), "--text", txt.Text, "--similarity", "--json", "--device", "go")
	if err != nil {
		t.Fatal(err)
	}
	var r embedResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Images) != 1 || len(r.Texts) != 1 || len(r.Similarity) != 1 {
		t.Fatalf("result %+v", r)
	}
	for i, want := range img.ImageEmbeds {
		if d := r.Images[0].Embedding[i] - want; d > 1e-4 || d < -1e-4 {
			t.Fatalf("image embedding[%d] = %v, PyTorch %v", i, r.Images[0].Embedding[i], want)
		}
	}
	for i, want := range txt.TextEmbeds {
		if d := r.Texts[0].Embedding[i] - want; d > 1e-4 || d < -1e-4 {
			t.Fatalf("text embedding[%d] = %v, PyTorch %v", i, r.Texts[0].Embedding[i], want)
		}
	}
	var ab, aa, bb float64
	for i := range img.ImageEmbeds {
		x, y := float64(img.ImageEmbeds[i]), float64(txt.TextEmbeds[i])
		ab, aa, bb = ab+x*y, aa+x*x, bb+y*y
	}
	if want := ab / math.Sqrt(aa*bb); math.Abs(r.Similarity[0][0]-want) > 1e-4 {
		t.Errorf("cosine %v, from PyTorch's embeddings %v", r.Similarity[0][0], want)
	}
	for _, args := range [][]string{
		{"--model", dir}, // nothing to embed
		{"--model", dir, "--image", "missing.png"},                        // no such image
		{"--model", dir, "--text", "x", "--similarity"},                   // similarity needs both
		{"--model", t.TempDir(), "--text", "x"},                           // no embed.json
		{"--model", dir, "--image", filepath.Join(dir, "tokenizer.json")}, // not an image
	} {
		if _, _, err := capture(t, runEmbed, append(args, "--device", "go")...); err == nil {
			t.Errorf("tl embed %q: no error", args)
		}
	}
}

// TestQuantizeConv: fp16 stores Conv weights half and the model still
// matches PyTorch; the 4-bit formats leave Conv weights float and say why.
func TestQuantizeConv(t *testing.T) {
	const resnet = "../../testdata/models/resnet"
	out := filepath.Join(t.TempDir(), "r16.onnx")
	js, _, err := captureQ(t, runQuantize, filepath.Join(resnet, "model.onnx"), out, "--format", "fp16", "--min-size", "0", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep quantizeReport
	json.Unmarshal([]byte(js), &rep)
	convs := 0
	for _, w := range rep.Weights {
		if w.Layout == "conv" {
			convs++
		}
	}
	m, err := graph.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	halfConvs := 0
	for _, n := range m.Graph.Nodes {
		if n.OpType == "Conv" && n.Inputs[1].Const != nil && n.Inputs[1].Const.Type.String() == "float16" {
			halfConvs++
		}
	}
	m.Close()
	if convs == 0 || halfConvs != convs {
		t.Fatalf("%d conv weights reported, %d stored half", convs, halfConvs)
	}
	dir := t.TempDir()
	if _, _, err := capture(t, runRun, out, "--inputs", filepath.Join(resnet, "ref"), "--out", dir, "--device", "go"); err != nil {
		t.Fatal(err)
	}
	got, err := npy.ReadFile(filepath.Join(dir, "logits.npy"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := npy.ReadFile(filepath.Join(resnet, "ref", "output.logits.npy"))
	g, w := got.Data().([]float32), want.Data().([]float32)
	for i := range w {
		if d := math.Abs(float64(g[i] - w[i])); d > 1e-3 {
			t.Fatalf("logits[%d] = %v with fp16 conv weights, PyTorch %v", i, g[i], w[i])
		}
	}
	js, _, err = captureQ(t, runQuantize, filepath.Join(resnet, "model.onnx"), filepath.Join(t.TempDir(), "r4.onnx"), "--format", "e0m4", "--group", "32", "--min-size", "0", "--json")
	if err != nil {
		t.Fatal(err)
	}
	rep = quantizeReport{}
	json.Unmarshal([]byte(js), &rep)
	said := 0
	for _, s := range rep.Skipped {
		if strings.Contains(s.Reason, "no 4-bit convolution kernel") {
			said++
		}
	}
	if said != convs {
		t.Errorf("4-bit: %d Conv weights said to stay float, want %d", said, convs)
	}
}

// TestMessagesSayWhatToDo: the errors a new user meets name the fix.
func TestMessagesSayWhatToDo(t *testing.T) {
	for _, c := range []struct {
		run  func([]string) error
		args []string
		want string
	}{
		{runBench, []string{"--model", "../../testdata/models/resnet/model.onnx"}, "--shape"},
		{runGenerate, []string{"../../testdata/models/clip_text/model.onnx", "--tokenizer", filepath.Join(defaultModelDir, "tokenizer.json"), "--prompt", "x"}, "models/README.md"},
		{runBench, []string{"../../testdata/models/llama/model.onnx", "-p", "128"}, "--model"},
		{runBench, []string{"../../testdata/models/llama/model.onnx", "--shape", "seq=4"}, "--shape past="},
		{runRun, []string{"../../testdata/models/llama/model.onnx", "--max", "bogus=4"}, "its symbols"},
	} {
		_, _, err := capture(t, c.run, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want a message with %q", c.args, err, c.want)
		}
	}
	if err := cliError(&engine.NoDeviceError{Err: os.ErrNotExist}); !strings.Contains(err.Error(), "--device go") {
		t.Errorf("no-device message %q does not name --device go", err)
	}
}

// TestQuantizeInterrupted: SIGINT while quantize writes leaves nothing
// behind, neither output nor hidden temporary files. The test runs itself
// as a child process that interrupts itself after the files are written
// and before they move into place.
func TestQuantizeInterrupted(t *testing.T) {
	if dir := os.Getenv("TL_TEST_SIGINT_DIR"); dir != "" {
		afterWrite = func() {
			p, _ := os.FindProcess(os.Getpid())
			p.Signal(os.Interrupt)
			time.Sleep(5 * time.Second) // the handler exits first
		}
		runQuantize([]string{filepath.Join(defaultModelDir, "model.onnx"), filepath.Join(dir, "q.onnx"), "--format", "e0m4", "--group", "32"})
		os.Exit(0) // not reached when the interrupt works
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestQuantizeInterrupted$")
	cmd.Env = append(os.Environ(), "TL_TEST_SIGINT_DIR="+dir)
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 130 {
		t.Fatalf("child: %v (want exit 130)\n%s", err, out)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		t.Errorf("left behind after SIGINT: %v", names)
	}
}

// TestParamCountOfPacked: a quantized model without the recorded count
// still counts K*N parameters per packed weight, not its bytes.
func TestParamCountOfPacked(t *testing.T) {
	out := filepath.Join(t.TempDir(), "q.onnx")
	if _, _, err := captureQ(t, runQuantize, filepath.Join(defaultModelDir, "model.onnx"), out, "--format", "int4", "--group", "32", "--min-size", "0"); err != nil {
		t.Fatal(err)
	}
	orig, _ := graph.Load(filepath.Join(defaultModelDir, "model.onnx"))
	want := paramCount(orig)
	orig.Close()
	q, err := graph.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	delete(q.Metadata, paramsKey)
	if got := paramCount(q); got != want {
		t.Errorf("counted %d parameters from MatMulQ's K and N, the original has %d", got, want)
	}
}
