package elastic

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/quant/qonnx"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

var (
	clOnce sync.Once
	clLib  *kernels.Lib
	clErr  error
)

// sharedCL is one OpenCL kernel library for this package's tests, so that
// each session does not build the programs again.
func sharedCL(t *testing.T) *kernels.Lib {
	t.Helper()
	clOnce.Do(func() {
		dev, err := opencl.Open(opencl.Options{})
		if err != nil {
			clErr = err
			return
		}
		clLib = kernels.New(dev)
	})
	if clErr != nil {
		t.Fatalf("these tests need an OpenCL device (install pocl-opencl-icd): %v", clErr)
	}
	return clLib
}

func npyF32(t *testing.T, path string) []float32 {
	t.Helper()
	d, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := d.Data().([]float32)
	if !ok {
		t.Fatalf("%s: not float32", path)
	}
	return v
}

func npyI64(t *testing.T, path string) []int64 {
	t.Helper()
	d, err := npy.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := d.Data().([]int64)
	if !ok {
		t.Fatalf("%s: not int64", path)
	}
	return v
}

// TestLoRAMatchesPyTorch: with the adapters lora.py wrote for levels 20
// and 60 (random, nonzero), the engine's side branch reproduces PyTorch's
// sub-model with lora.py's hooks attached, on the OpenCL and pure-Go
// backends (and OpenCL with fp16 storage, to 0.02, about 100x below the
// adapters' effect); a level without adapters (40) runs its plain prefix,
// and going back to 20 attaches its adapters again.
func TestLoRAMatchesPyTorch(t *testing.T) {
	spec, err := Load(llamaDir)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := ReadLoRADir(filepath.Join(llamaDir, LoRADir), spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 2 {
		t.Fatalf("%d adapter files; want levels 20 and 60", len(sets))
	}
	ids := npyI64(t, filepath.Join(llamaDir, "input_ids.npy"))
	for _, dev := range []struct {
		name string
		opts engine.Options
		tol  float64
	}{
		{"go", engine.Options{Device: "go", NoJoin: true}, 1e-4},
		{"opencl", engine.Options{Kernels: sharedCL(t), NoJoin: true}, 1e-4},
		{"opencl-fp16", engine.Options{Kernels: sharedCL(t), Precision: engine.FP16, NoJoin: true}, 0.02},
	} {
		t.Run(dev.name, func(t *testing.T) {
			s, err := engine.Open(filepath.Join(llamaDir, "model.onnx"), dev.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			m, err := Bind(s, spec)
			if err != nil {
				t.Fatal(err)
			}
			levels, err := m.AttachLoRA(sets)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(levels) != "[20 60]" || !m.HasLoRA(20) || m.HasLoRA(40) {
				t.Fatalf("adapters for %v", levels)
			}
			for _, c := range []struct {
				level int
				want  string
			}{
				{20, "logits_lora_level020.npy"}, {60, "logits_lora_level060.npy"},
				{40, "logits_level040.npy"}, {100, "logits_level100.npy"}, {20, "logits_lora_level020.npy"},
			} {
				if err := m.SetLevel(c.level); err != nil {
					t.Fatal(err)
				}
				got := prefill(t, s, ids)
				want := npyF32(t, filepath.Join(llamaDir, c.want))
				if len(got) != len(want) {
					t.Fatalf("level %d: %d logits, want %d", c.level, len(got), len(want))
				}
				e := dist(got, want)
				t.Logf("level %d%% (%s): max |engine - PyTorch| = %.3g", c.level, c.want, e)
				if e > dev.tol {
					t.Errorf("level %d%%: max |diff| %g from PyTorch (%s) > %g", c.level, e, c.want, dev.tol)
				}
			}
		})
	}
}

// TestLoRASetLevelAllocatesNothing: with adapters attached, switching
// levels (with and without adapters) allocates nothing on the host.
func TestLoRASetLevelAllocatesNothing(t *testing.T) {
	spec, err := Load(llamaDir)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := ReadLoRADir(filepath.Join(llamaDir, LoRADir), spec)
	if err != nil {
		t.Fatal(err)
	}
	s, err := engine.Open(filepath.Join(llamaDir, "model.onnx"), engine.Options{Device: "go", NoJoin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := Bind(s, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AttachLoRA(sets); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AttachLoRA(sets[:1]); err == nil {
		t.Error("attaching level 20's adapters twice was accepted")
	}
	cycle := []int{20, 60, 40, 100, 60}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		if err := m.SetLevel(cycle[i%len(cycle)]); err != nil {
			panic(err)
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("SetLevel with adapters allocates %v times; want 0", allocs)
	}
}

// loraFile builds a valid adapter file for spec's model at level 20 with
// the given targets (rank 2), so that the error cases below each break
// exactly one field of an otherwise good file.
func loraFile(spec *Spec, dim int, targets []string) []byte {
	const rank = 2
	le := binary.LittleEndian
	b := []byte("TLLORA\x00\x00")
	for _, v := range []uint32{1, 20, rank, math.Float32bits(4), uint32(spec.NLayers), uint32(len(targets))} {
		b = le.AppendUint32(b, v)
	}
	for _, n := range targets {
		name := make([]byte, 8)
		copy(name, n)
		b = append(b, name...)
	}
	shape := func(role string) (int, int) {
		q, kv := spec.NHeads*spec.HeadDim, spec.NKVHeads*spec.HeadDim
		switch role {
		case "q":
			return dim, q
		case "k", "v":
			return dim, kv
		case "o":
			return q, dim
		case "up", "gate":
			return dim, spec.FFN
		}
		return spec.FFN, dim
	}
	var body []byte
	for l := 0; l < spec.NLayers; l++ {
		for _, n := range targets {
			in, out := shape(n)
			b = le.AppendUint32(le.AppendUint32(b, uint32(in)), uint32(out))
			for i := 0; i < rank*(in+out); i++ {
				body = le.AppendUint32(body, math.Float32bits(0.01*float32(i%7)))
			}
		}
	}
	b = append(b, body...)
	return le.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// TestReadLoRAErrors: each broken field is refused with an error naming
// the file and the field; a good file built the same way loads.
func TestReadLoRAErrors(t *testing.T) {
	spec, err := Load(llamaDir)
	if err != nil {
		t.Fatal(err)
	}
	dim := spec.Dim
	if dim == 0 {
		t.Fatal("testdata elastic.json records no dim")
	}
	le := binary.LittleEndian
	recrc := func(b []byte) []byte {
		le.PutUint32(b[len(b)-4:], crc32.ChecksumIEEE(b[:len(b)-4]))
		return b
	}
	good := loraFile(spec, dim, []string{"q", "v", "down"})
	dir := t.TempDir()
	path := filepath.Join(dir, "level-20.bin")
	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := ReadLoRA(path)
	if err != nil {
		t.Fatalf("a good file: %v", err)
	}
	if err := l.check(spec); err != nil {
		t.Fatalf("a good file: %v", err)
	}
	if l.Level != 20 || l.Rank != 2 || l.Alpha != 4 || len(l.Layers) != spec.NLayers || strings.Join(l.Targets, ",") != "q,v,down" {
		t.Fatalf("read %+v", l)
	}
	firstShape := 8 + 24 + 3*8 // the fixed header, three names
	for _, c := range []struct {
		name, field string
		edit        func(b []byte) []byte
		check       bool // the error comes from the model check
	}{
		{"empty", "header", func(b []byte) []byte { return b[:0] }, false},
		{"magic", "magic", func(b []byte) []byte { b[0] = 'X'; return recrc(b) }, false},
		{"version", "version", func(b []byte) []byte { le.PutUint32(b[8:], 9); return recrc(b) }, false},
		{"level", "level", func(b []byte) []byte { le.PutUint32(b[12:], 0); return recrc(b) }, false},
		{"rank", "rank", func(b []byte) []byte { le.PutUint32(b[16:], 0); return recrc(b) }, false},
		{"alpha", "alpha", func(b []byte) []byte { le.PutUint32(b[20:], math.Float32bits(float32(math.NaN()))); return recrc(b) }, false},
		{"layers", "n_layers", func(b []byte) []byte { le.PutUint32(b[24:], 1<<30); return recrc(b) }, false},
		{"targets", "n_targets", func(b []byte) []byte { le.PutUint32(b[28:], 99); return recrc(b) }, false},
		{"target name", "target 1", func(b []byte) []byte { copy(b[8+24+8:], "gatex\x00\x00\x00"); return recrc(b) }, false},
		{"repeated target", "target 1", func(b []byte) []byte { copy(b[8+24+8:], "q\x00\x00\x00\x00\x00\x00\x00"); return recrc(b) }, false},
		{"huge shape", "layer 0 q shape", func(b []byte) []byte { le.PutUint32(b[firstShape:], 1<<30); return recrc(b) }, false},
		{"size", "size", func(b []byte) []byte { le.PutUint32(b[firstShape:], uint32(dim+1)); return recrc(b) }, false},
		{"truncated", "size", func(b []byte) []byte { return b[:len(b)-9] }, false},
		{"crc", "crc32", func(b []byte) []byte { b[len(b)-20] ^= 1; return b }, false},
		{"not finite", "layer 0 q", func(b []byte) []byte {
			le.PutUint32(b[firstShape+3*spec.NLayers*8:], math.Float32bits(float32(math.Inf(1))))
			return recrc(b)
		}, false},
		{"level the model lacks", "level", func(b []byte) []byte { le.PutUint32(b[12:], 55); return recrc(b) }, true},
		{"layer count", "n_layers", func(b []byte) []byte {
			return loraFileLayers(spec, dim, 1)
		}, true},
	} {
		b := c.edit(append([]byte(nil), good...))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := ReadLoRA(path)
		if c.check {
			if err != nil {
				t.Errorf("%s: the file itself is good, ReadLoRA said %v", c.name, err)
				continue
			}
			err = l.check(spec)
		}
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v; want an error naming %s and %q", c.name, err, path, c.field)
		}
	}
	// A shape that does not fit the model is refused by ReadLoRADir.
	wrong := loraFile(&Spec{NLayers: spec.NLayers, NHeads: spec.NHeads, NKVHeads: spec.NKVHeads, HeadDim: spec.HeadDim, FFN: spec.FFN + 1}, dim, []string{"up"})
	if err := os.WriteFile(path, wrong, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLoRADir(dir, spec); err == nil || !strings.Contains(err.Error(), "layer 0 up shape") {
		t.Errorf("an up adapter of FFN+1 columns: %v", err)
	}
	// Two files of one level.
	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "level-20b.bin"), good, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLoRADir(dir, spec); err == nil || !strings.Contains(err.Error(), "both level 20") {
		t.Errorf("two files of level 20: %v", err)
	}
	if _, err := ReadLoRA(filepath.Join(dir, "missing.bin")); err == nil {
		t.Error("a missing file was read")
	}
	if sets, err := ReadLoRADir(filepath.Join(dir, "none"), spec); err != nil || sets != nil {
		t.Errorf("a missing folder: %v, %v; want no adapters and no error", sets, err)
	}
}

// loraFileLayers is loraFile for a model of n layers.
func loraFileLayers(spec *Spec, dim, n int) []byte {
	s := *spec
	s.NLayers = n
	return loraFile(&s, dim, []string{"q"})
}

// TestLoRAOnQuantizedWeights: the side branch runs next to E0M4 (4-bit)
// products too (the spec's case: the shared weights cannot take a merge).
// The 4-bit sub-model with adapters stays near PyTorch's fp32 sub-model
// with the same adapters, much nearer than to the 4-bit sub-model without
// them.
func TestLoRAOnQuantizedWeights(t *testing.T) {
	path := filepath.Join(llamaDir, "model.onnx")
	spec, err := Load(llamaDir)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := ReadLoRADir(filepath.Join(llamaDir, LoRADir), spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := graph.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := qonnx.Quantize(m, qonnx.Options{Format: quant.E0M4, Group: 32})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Weights) < 6*spec.NLayers {
		t.Fatalf("only %d weights quantized; the adapted products must be 4-bit", len(res.Weights))
	}
	s, err := engine.OpenModel(m, engine.Options{Device: "go", NoJoin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	em, err := Bind(s, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := em.AttachLoRA(sets); err != nil {
		t.Fatal(err)
	}
	ids := npyI64(t, filepath.Join(llamaDir, "input_ids.npy"))
	for _, lv := range []int{20, 60} {
		if err := em.SetLevelLoRA(lv, false); err != nil {
			t.Fatal(err)
		}
		plain := prefill(t, s, ids)
		if err := em.SetLevel(lv); err != nil {
			t.Fatal(err)
		}
		with := prefill(t, s, ids)
		want := npyF32(t, filepath.Join(llamaDir, fmt.Sprintf("logits_lora_level%03d.npy", lv)))
		near, far := dist(with, want), dist(plain, want)
		t.Logf("level %d%%: 4-bit + LoRA vs PyTorch fp32 + LoRA %.4f; 4-bit without LoRA %.4f", lv, near, far)
		if !(near < far/4) {
			t.Errorf("level %d%%: 4-bit + LoRA is %.4f from PyTorch's fp32 + LoRA, without LoRA %.4f: the branch did not run on the 4-bit products", lv, near, far)
		}
	}
}
