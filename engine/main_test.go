package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// testLib is the OpenCL kernel library every test session shares, so that
// each program compiles once per test binary.
var testLib *kernels.Lib

func TestMain(m *testing.M) {
	// PoCL otherwise compiles each kernel again for every local size.
	if os.Getenv("POCL_WORK_GROUP_SPECIALIZATION") == "" {
		os.Setenv("POCL_WORK_GROUP_SPECIALIZATION", "0")
	}
	dev, err := opencl.Open(opencl.Options{Profile: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine tests need an OpenCL device (install pocl-opencl-icd):", err)
		os.Exit(1)
	}
	testLib = kernels.New(dev)
	code := m.Run()
	dev.Close()
	os.Exit(code)
}

const modelsDir = "../testdata/models"

// refCase is one reference case of an exported model.
type refCase struct {
	name    string
	symbols map[string]int64
	inputs  map[string]*tensor.Dense
	outputs map[string]*tensor.Dense
	order   []string // output names in manifest order
}

type manifest struct {
	Case    string           `json:"case"`
	Symbols map[string]int64 `json:"symbols"`
	Inputs  []struct {
		Name, File string
	} `json:"inputs"`
	Outputs []struct {
		Name, File string
	} `json:"outputs"`
}

// loadCases reads every reference case of model: ref/manifest.json or
// ref/<case>/manifest.json.
func loadCases(t testing.TB, model string) []refCase {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(modelsDir, model, "ref", "*", "manifest.json"))
	if one := filepath.Join(modelsDir, model, "ref", "manifest.json"); fileExists(one) {
		dirs = append(dirs, one)
	}
	sort.Strings(dirs)
	if len(dirs) == 0 {
		t.Fatalf("%s: no reference cases", model)
	}
	var out []refCase
	for _, mf := range dirs {
		raw, err := os.ReadFile(mf)
		if err != nil {
			t.Fatal(err)
		}
		var m manifest
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("%s: %v", mf, err)
		}
		dir := filepath.Dir(mf)
		rc := refCase{name: m.Case, symbols: m.Symbols, inputs: map[string]*tensor.Dense{}, outputs: map[string]*tensor.Dense{}}
		if rc.name == "" {
			rc.name = filepath.Base(dir)
		}
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
		out = append(out, rc)
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// floats returns a float tensor's values.
func floats(t testing.TB, d *tensor.Dense) []float32 {
	t.Helper()
	switch v := d.Data().(type) {
	case []float32:
		return v
	case float32:
		return []float32{v}
	}
	t.Fatalf("want float32 data, have %T", d.Data())
	return nil
}

// compare reports max abs error relative to the reference's scale and the
// cosine similarity.
func compare(got, want []float32) (relErr, cosine float64, worst int) {
	var maxRef, maxErr, dot, ng, nw float64
	for i := range want {
		w, g := float64(want[i]), float64(got[i])
		maxRef = math.Max(maxRef, math.Abs(w))
		if e := math.Abs(g - w); e > maxErr || math.IsNaN(e) {
			maxErr, worst = e, i
			if math.IsNaN(e) {
				maxErr = math.Inf(1)
			}
		}
		dot += g * w
		ng += g * g
		nw += w * w
	}
	cosine = 1
	if ng > 0 || nw > 0 {
		cosine = dot / math.Sqrt(ng*nw)
	}
	return maxErr / math.Max(1, maxRef), cosine, worst
}

func sameShape(a, b tensor.Shape) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
