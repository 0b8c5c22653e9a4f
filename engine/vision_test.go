package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine/npy"
)

// The vision test bed: torchvision 0.14 networks with random weights and
// calibrated BatchNorm, and a UNet with ConvTranspose, exported by
// models/export/vision.py with PyTorch's outputs. They are too big to
// commit, so the test exports them into a cache when missing.

// visionSize is the input height and width the test bed is exported at:
// small, to keep the suite's CPU time down (fcn_resnet50 costs 16x less
// than at 224).
const visionSize = 64

// visionNets are the test bed, in models/export/vision.py's names, with the
// relative error (max |tl - torch| / max |torch|) each must stay within on
// fp32: random-weight nets amplify float rounding differently, the deep
// ResNets (50 layers, 2048-wide reductions) more; measured errors are 5x to
// 200x below these.
var visionNets = []struct {
	name string
	tol  float64
	// tol16 bounds the error with fp16 activations (TLITE_VISION_FP16),
	// about twice what was measured: storage rounding compounds over the
	// depth, most in the ResNets' unnormalised residual sums.
	tol16 float64
}{
	{"mobilenet_v3_small", 1e-4, 1e-2}, {"mobilenet_v3_large", 1e-4, 2e-2}, {"efficientnet_b0", 1e-4, 2e-2},
	{"shufflenet_v2_x1_0", 1e-4, 7e-2}, {"squeezenet1_1", 1e-4, 2e-3}, {"resnet50", 5e-4, 1e-1}, {"resnet18", 5e-4, 1e-1},
	{"densenet121", 1e-4, 3e-2}, {"convnext_tiny", 1e-4, 2e-3}, {"lraspp_mobilenet_v3_large", 1e-4, 1e-2},
	{"deeplabv3_mobilenet_v3_large", 1e-4, 3e-2}, {"fcn_resnet50", 5e-4, 2e-1}, {"unet", 1e-4, 5e-3},
}

// visionGoDefault are the nets the default suite also runs on the pure-Go
// device, whose reference convolutions are slow: those that need the new
// operators (Resize in lraspp, ConvTranspose in the UNet, HardSwish and
// HardSigmoid in mobilenet_v3_small) and a cheap classic, about a second
// each on two cores.
const visionGoDefault = "mobilenet_v3_small,squeezenet1_1,lraspp_mobilenet_v3_large,unet"

// visionDir returns the cache holding the exported test bed, exporting the
// nets named that it lacks with Debian's python3 (python3-torchvision,
// installed by tools/setup.sh). Each net is exported into a scratch
// directory and renamed into place, so an interrupted export leaves no half
// net behind.
func visionDir(t *testing.T, names []string) string {
	base := os.Getenv("TLITE_CACHE")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		base = filepath.Join(home, ".cache", "tlite")
	}
	dir := filepath.Join(base, fmt.Sprintf("vision-%d", visionSize))
	var missing []string
	for _, n := range names {
		if !fileExists(filepath.Join(dir, n, "ref", "manifest.json")) {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return dir
	}
	tmp, err := os.MkdirTemp(base, "vision-export-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	script, _ := filepath.Abs(filepath.Join("..", "models", "export", "vision.py"))
	cmd := osexec.Command("/usr/bin/python3", script, "--size", fmt.Sprint(visionSize), "--out", tmp, "--only", strings.Join(missing, ","))
	cmd.Dir = filepath.Dir(script)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("exporting %v (tools/setup.sh installs python3-torchvision): %v\n%s", missing, err, out)
	}
	t.Logf("exported %v in %.0fs", missing, time.Since(t0).Seconds())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range missing {
		os.RemoveAll(filepath.Join(dir, n))
		if err := os.Rename(filepath.Join(tmp, n), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestVisionNets runs the vision test bed on the OpenCL device and requires
// each net's output to match PyTorch's within its tolerance, relative to the
// output's scale. TLITE_VISION picks the nets ("all", the default, or a
// comma-separated list); of them, those in TLITE_VISION_GO ("all", a list,
// or visionGoDefault when unset) also run on the pure-Go device, and all
// with fp16 activations too when TLITE_VISION_FP16 is set.
func TestVisionNets(t *testing.T) {
	sel := os.Getenv("TLITE_VISION")
	if sel == "" {
		sel = "all"
	}
	goSel := os.Getenv("TLITE_VISION_GO")
	if goSel == "" {
		goSel = visionGoDefault
	}
	var names []string
	tols, tols16 := map[string]float64{}, map[string]float64{}
	for _, n := range visionNets {
		tols[n.name], tols16[n.name] = n.tol, n.tol16
		if sel == "all" {
			names = append(names, n.name)
		}
	}
	if sel != "all" {
		for _, n := range strings.Split(sel, ",") {
			if _, ok := tols[n]; !ok {
				t.Fatalf("TLITE_VISION names %q; the test bed is %v", n, visionNets)
			}
			names = append(names, n)
		}
	}
	dir := visionDir(t, names)
	type device struct {
		name string
		opts Options
	}
	for _, name := range names {
		devices := []device{{"opencl", Options{Kernels: testLib}}}
		if os.Getenv("TLITE_VISION_FP16") != "" {
			devices = append(devices, device{"opencl-fp16", Options{Kernels: testLib, Precision: FP16}})
		}
		if goSel == "all" || strings.Contains(","+goSel+",", ","+name+",") {
			devices = append(devices, device{"go", Options{Device: "go"}})
		}
		for _, d := range devices {
			t.Run(name+"/"+d.name, func(t *testing.T) {
				rel, dur := runVisionNet(t, filepath.Join(dir, name), d.opts)
				tol := tols[name]
				if d.opts.Precision == FP16 {
					tol = tols16[name]
				}
				t.Logf("%s on %s: max error %.2e of the output's scale (tolerance %.0e), run %.0f ms", name, d.name, rel, tol, float64(dur.Microseconds())/1e3)
				if !(rel <= tol) {
					t.Errorf("%s on %s: max error %.3g of the output's scale, want <= %g", name, d.name, rel, tol)
				}
			})
		}
	}
}

// runVisionNet runs one exported net's reference case and returns the max
// error relative to the reference output's largest magnitude, and the time
// of the second of two runs (the first compiles kernels).
func runVisionNet(t *testing.T, dir string, opts Options) (float64, time.Duration) {
	t.Helper()
	s, err := Open(filepath.Join(dir, "model.onnx"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rc := loadVisionCase(t, filepath.Join(dir, "ref"))
	if _, err := s.Run(rc.inputs); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	out, err := s.Run(rc.inputs)
	if err != nil {
		t.Fatal(err)
	}
	dur := time.Since(t0)
	worst := 0.0
	for _, name := range rc.order {
		want, got := rc.outputs[name], out[name]
		if got == nil {
			t.Fatalf("output %q missing", name)
		}
		if !sameShape(got.Shape(), want.Shape()) {
			t.Fatalf("output %q has shape %v, PyTorch's %v", name, got.Shape(), want.Shape())
		}
		g, w := floats(t, got), floats(t, want)
		var scale, maxErr float64
		for i := range w {
			scale = math.Max(scale, math.Abs(float64(w[i])))
			e := math.Abs(float64(g[i]) - float64(w[i]))
			if math.IsNaN(e) {
				e = math.Inf(1)
			}
			maxErr = math.Max(maxErr, e)
		}
		if scale == 0 {
			t.Fatalf("output %q of the reference is all zeros: the export's calibration failed", name)
		}
		worst = math.Max(worst, maxErr/scale)
	}
	return worst, dur
}

// loadVisionCase reads an exported net's reference case (the layout of
// testdata/models, outside it).
func loadVisionCase(t *testing.T, dir string) refCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	rc := refCase{name: m.Case, symbols: m.Symbols, inputs: map[string]*tensor.Dense{}, outputs: map[string]*tensor.Dense{}}
	for _, in := range m.Inputs {
		d, err := npy.ReadFile(filepath.Join(dir, in.File))
		if err != nil {
			t.Fatal(err)
		}
		rc.inputs[in.Name] = d
	}
	for _, o := range m.Outputs {
		d, err := npy.ReadFile(filepath.Join(dir, o.File))
		if err != nil {
			t.Fatal(err)
		}
		rc.outputs[o.Name] = d
		rc.order = append(rc.order, o.Name)
	}
	return rc
}
