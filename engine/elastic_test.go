package engine

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/kernels"
)

const elasticDir = "../testdata/elastic"

// elasticMeta is the part of elastic.json (models/elastic) the tests read.
type elasticMeta struct {
	HeadDim int                 `json:"head_dim"`
	Weights []map[string]string `json:"weights"`
	Levels  []struct {
		Level  int `json:"level"`
		Layers []struct {
			QHeads  int `json:"q_heads"`
			KVHeads int `json:"kv_heads"`
			FFN     int `json:"ffn"`
		} `json:"layers"`
	} `json:"levels"`
}

// openBound opens dir's model.onnx with opts and binds its elastic layers
// as meta describes; the session closes when the test ends.
func openBound(t testing.TB, dir string, meta elasticMeta, opts Options) (*Session, *ElasticBinding) {
	t.Helper()
	opts.NoJoin = true // BindElastic binds each product on its own
	s, err := Open(filepath.Join(dir, "model.onnx"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	b, err := s.BindElastic(meta.layers(), meta.HeadDim)
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

func readElasticMeta(t testing.TB, dir string) elasticMeta {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "elastic.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m elasticMeta
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m elasticMeta) layers() []ElasticLayer {
	out := make([]ElasticLayer, len(m.Weights))
	for i, w := range m.Weights {
		out[i] = ElasticLayer{Q: w["q"], K: w["k"], V: w["v"], O: w["o"], Gate: w["gate"], Up: w["up"], Down: w["down"]}
	}
	return out
}

func (m elasticMeta) widths(level int) []ElasticWidth {
	for _, lv := range m.Levels {
		if lv.Level == level {
			out := make([]ElasticWidth, len(lv.Layers))
			for i, l := range lv.Layers {
				out[i] = ElasticWidth{QHeads: l.QHeads, KVHeads: l.KVHeads, FFN: l.FFN}
			}
			return out
		}
	}
	return nil
}

// prefillInputs is a no-cache prefill of ids [1, n]: attention mask and
// positions where the model takes them, and empty past tensors.
func prefillInputs(t testing.TB, s *Session, ids []int64) map[string]Tensor {
	t.Helper()
	n := len(ids)
	in := map[string]Tensor{}
	for _, p := range s.Inputs() {
		switch {
		case p.Name == "input_ids":
			in[p.Name] = NewTensor([]int{1, n}, ids)
		case p.Name == "attention_mask":
			one := make([]int64, n)
			for i := range one {
				one[i] = 1
			}
			in[p.Name] = NewTensor([]int{1, n}, one)
		case p.Name == "position_ids":
			pos := make([]int64, n)
			for i := range pos {
				pos[i] = int64(i)
			}
			in[p.Name] = NewTensor([]int{1, n}, pos)
		default: // past_key_values: [batch, heads, past, head_dim] with past = 0
			dims := make([]int, len(p.Shape))
			for i, e := range p.Shape {
				if v, ok := e.Const(); ok {
					dims[i] = int(v)
				} else if i == 0 {
					dims[i] = 1
				}
			}
			in[p.Name] = NewTensor(dims, []float32{})
		}
	}
	return in
}

func elasticLogits(t testing.TB, s *Session, ids []int64) []float32 {
	t.Helper()
	out, err := s.RunTensors(prefillInputs(t, s, ids))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := out["logits"].Float32s()
	if !ok {
		t.Fatal("logits are not float32")
	}
	return v
}

func readNpyF32(t testing.TB, path string) []float32 {
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

func readNpyI64(t testing.TB, path string) []int64 {
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

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	m := 0.0
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if d > m || d != d {
			m = d
		}
	}
	return m
}

// elasticDevices are the backends every elastic test runs on.
func elasticDevices() []struct {
	name string
	opts Options
} {
	return []struct {
		name string
		opts Options
	}{{"opencl", Options{Kernels: testLib}}, {"go", Options{Device: "go"}}}
}

// TestElasticPermutedEquivalence is spec §3d.2: the reordered model at 100%
// reproduces the original's logits, for the LLaMA recipe (RoPE, GQA,
// SwiGLU) and for Hugging Face's GPT-2 structure (fused c_attn permuted
// inside each Q/K/V third, biases): through tlite against the original
// model through tlite (<= 1e-5) and against PyTorch's original logits.
func TestElasticPermutedEquivalence(t *testing.T) {
	for _, model := range []string{"llama", "gpt2"} {
		dir := filepath.Join(elasticDir, model)
		ids := readNpyI64(t, filepath.Join(dir, "input_ids.npy"))
		want := readNpyF32(t, filepath.Join(dir, "logits.npy"))
		for _, d := range elasticDevices() {
			t.Run(model+"/"+d.name, func(t *testing.T) {
				orig, err := Open(filepath.Join(dir, "original.onnx"), d.opts)
				if err != nil {
					t.Fatal(err)
				}
				defer orig.Close()
				perm, err := Open(filepath.Join(dir, "model.onnx"), d.opts)
				if err != nil {
					t.Fatal(err)
				}
				defer perm.Close()
				a, b := elasticLogits(t, orig, ids), elasticLogits(t, perm, ids)
				if e := maxAbsDiff(a, b); e > 1e-5 {
					t.Errorf("permuted vs original through tlite: max |diff| %g > 1e-5", e)
				}
				if e := maxAbsDiff(b, want); e > 1e-4 {
					t.Errorf("permuted through tlite vs PyTorch original: max |diff| %g > 1e-4", e)
				}
			})
		}
	}
}

// TestElasticLevels runs the reordered LLaMA at every level of its
// elastic.json through one bound session and compares with PyTorch's
// truncated sub-model; 100% must also equal an unbound session.
func TestElasticLevels(t *testing.T) {
	dir := filepath.Join(elasticDir, "llama")
	meta := readElasticMeta(t, dir)
	ids := readNpyI64(t, filepath.Join(dir, "input_ids.npy"))
	for _, d := range elasticDevices() {
		t.Run(d.name, func(t *testing.T) {
			plain, err := Open(filepath.Join(dir, "model.onnx"), d.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			full := elasticLogits(t, plain, ids)
			s, b := openBound(t, dir, meta, d.opts)
			if got := elasticLogits(t, s, ids); maxAbsDiff(got, full) != 0 {
				t.Fatalf("bound at full width: max |diff| %g from the unbound session; want 0", maxAbsDiff(got, full))
			}
			for _, lv := range meta.Levels {
				if err := b.Set(meta.widths(lv.Level)); err != nil {
					t.Fatal(err)
				}
				got := elasticLogits(t, s, ids)
				want := readNpyF32(t, filepath.Join(dir, fmt.Sprintf("logits_level%03d.npy", lv.Level)))
				if e := maxAbsDiff(got, want); e > 1e-4 {
					t.Errorf("level %d%%: max |diff| %g from PyTorch's truncated sub-model", lv.Level, e)
				}
				if lv.Level == 100 {
					if e := maxAbsDiff(got, full); e != 0 {
						t.Errorf("level 100%%: max |diff| %g from the unbound session; want 0", e)
					}
				}
			}
			// Back down: a lower level after 100% gives that level again.
			if err := b.Set(meta.widths(20)); err != nil {
				t.Fatal(err)
			}
			want := readNpyF32(t, filepath.Join(dir, "logits_level020.npy"))
			if e := maxAbsDiff(elasticLogits(t, s, ids), want); e > 1e-4 {
				t.Errorf("level 20%% after 100%%: max |diff| %g", e)
			}
		})
	}
}

// weightsHash hashes every constant buffer of the session as the device
// holds it.
func weightsHash(t testing.TB, s *Session) [32]byte {
	t.Helper()
	h := sha256.New()
	for _, b := range s.consts {
		p := make([]byte, b.size)
		if err := s.dev.Read(b.m, 0, p); err != nil {
			t.Fatal(err)
		}
		h.Write(p)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// TestElasticSwitchIsFree is spec §3d.3-4: a level switch allocates
// nothing on the host, and on the OpenCL device allocates no buffer,
// builds no program, writes no byte and launches nothing; after 1000
// switches (and runs between some of them) the weights hash as before.
func TestElasticSwitchIsFree(t *testing.T) {
	dir := filepath.Join(elasticDir, "llama")
	meta := readElasticMeta(t, dir)
	ids := readNpyI64(t, filepath.Join(dir, "input_ids.npy"))
	s, b := openBound(t, dir, meta, Options{Kernels: testLib})
	elasticLogits(t, s, ids) // builds the kernels
	pristine := weightsHash(t, s)
	levels := make([][]ElasticWidth, len(meta.Levels))
	for i, lv := range meta.Levels {
		levels[i] = meta.widths(lv.Level)
	}
	before, ok := s.DeviceStats()
	if !ok {
		t.Fatal("no device counters on the OpenCL session")
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		if err := b.Set(levels[i%len(levels)]); err != nil {
			panic(err)
		}
		i++
	})
	after, _ := s.DeviceStats()
	if allocs != 0 {
		t.Errorf("Set allocates %v times per switch; want 0", allocs)
	}
	if before != after {
		t.Errorf("device counters changed over 1000 switches:\nbefore %+v\nafter  %+v", before, after)
	}
	for j := 0; j < 3; j++ {
		if err := b.Set(levels[j*3]); err != nil {
			t.Fatal(err)
		}
		elasticLogits(t, s, ids)
	}
	if got := weightsHash(t, s); got != pristine {
		t.Error("the weights changed after 1000 switches")
	}
	// Bad widths are refused and change nothing.
	bad := append([]ElasticWidth(nil), levels[0]...)
	bad[0].QHeads++
	if err := b.Set(bad); err == nil {
		t.Error("a query-head count off the group size was accepted")
	}
	if err := b.Set(levels[:1][0][:1]); err == nil {
		t.Error("widths for one layer were accepted for a 3-layer binding")
	}
	if _, err := s.BindElastic(meta.layers(), meta.HeadDim); err == nil {
		t.Error("binding the same session twice was accepted")
	}
	joined, err := Open(filepath.Join(dir, "model.onnx"), Options{Kernels: testLib})
	if err != nil {
		t.Fatal(err)
	}
	defer joined.Close()
	if _, err := joined.BindElastic(meta.layers(), meta.HeadDim); err == nil || !strings.Contains(err.Error(), "NoJoin") {
		t.Errorf("binding a session with joined products: %v; want an error naming Options.NoJoin", err)
	}
}

// TestUnitLimit checks the argument override itself: the active sizes
// shrink, the row strides stay those of the full operands, and a zero
// limit changes nothing.
func TestUnitLimit(t *testing.T) {
	for _, c := range []struct {
		name     string
		lim      *unitLimit
		in, want kernels.MatMulParams
	}{
		{"nil", nil, kernels.MatMulParams{M: 3, N: 8, K: 4}, kernels.MatMulParams{M: 3, N: 8, K: 4}},
		{"zero", &unitLimit{}, kernels.MatMulParams{M: 3, N: 8, K: 4}, kernels.MatMulParams{M: 3, N: 8, K: 4}},
		{"N", &unitLimit{n: 2}, kernels.MatMulParams{M: 3, N: 8, K: 4}, kernels.MatMulParams{M: 3, N: 2, K: 4, LDA: 4, LDB: 8, LDC: 8}},
		{"K transB", &unitLimit{k: 2}, kernels.MatMulParams{M: 3, N: 8, K: 4, TransB: true},
			kernels.MatMulParams{M: 3, N: 8, K: 2, TransB: true, LDA: 4, LDB: 4, LDC: 8}},
		{"larger than full", &unitLimit{n: 9, k: 9}, kernels.MatMulParams{M: 3, N: 8, K: 4},
			kernels.MatMulParams{M: 3, N: 8, K: 4, LDA: 4, LDB: 8, LDC: 8}},
	} {
		p := c.in
		c.lim.matmul(&p)
		if !reflect.DeepEqual(p, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, p, c.want)
		}
	}
	q := kernels.QMatMulParams{M: 2, N: 64, K: 128}
	(&unitLimit{k: 64}).matmulQ(&q)
	if !reflect.DeepEqual(q, kernels.QMatMulParams{M: 2, N: 64, K: 64, LDA: 128, LDC: 64}) {
		t.Errorf("matmulQ: got %+v", q)
	}
	a := kernels.AttentionParams{Heads: 8, KVHeads: 4}
	(&unitLimit{heads: 4, kvHeads: 2}).attention(&a)
	if a.Heads != 4 || a.KVHeads != 2 {
		t.Errorf("attention: got %d/%d heads, want 4/2", a.Heads, a.KVHeads)
	}
}

// randomLoRA makes adapters of rank r for every product of every bound
// layer (gate included), with values from seed: A and B both nonzero.
func randomLoRA(b *ElasticBinding, r int, seed uint32) []LoRALayer {
	next := func() float32 { // xorshift: deterministic, no allocation per value
		seed ^= seed << 13
		seed ^= seed >> 17
		seed ^= seed << 5
		return float32(int32(seed%2001)-1000) / 5000
	}
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = next()
		}
		return v
	}
	out := make([]LoRALayer, len(b.layers))
	for l := range b.layers {
		var ads [7]*LoRAAdapter
		for i, st := range b.layers[l].steps() {
			ads[i] = &LoRAAdapter{Rank: r, Scale: 0.5, A: fill(st.kFull * r), B: fill(r * st.nFull)}
		}
		out[l] = LoRALayer{Q: ads[0], K: ads[1], V: ads[2], O: ads[3], Gate: ads[4], Up: ads[5], Down: ads[6]}
	}
	return out
}

// TestLoRADeviceMemory: DeviceMemory counts the uploaded adapter sets at
// the session's storage size (4 bytes a value at FP32, 2 at FP16) and
// their shared scratch apart from the constants, which adding leaves as
// they were.
func TestLoRADeviceMemory(t *testing.T) {
	dir := filepath.Join(elasticDir, "llama")
	meta := readElasticMeta(t, dir)
	for _, tc := range []struct {
		name string
		opts Options
		size int64
	}{{"fp32", Options{Kernels: testLib}, 4}, {"fp16", Options{Kernels: testLib, Precision: FP16}, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			s, b := openBound(t, dir, meta, tc.opts)
			before := s.DeviceMemory()
			if before.Adapters != 0 || before.AdapterScratch != 0 {
				t.Fatalf("before any set: %+v", before)
			}
			var values int64
			for _, r := range []int{8, 4} {
				set := randomLoRA(b, r, uint32(r))
				for _, l := range set {
					for _, ad := range l.adapters() {
						values += int64(len(ad.A) + len(ad.B))
					}
				}
				if _, err := b.AddLoRA(set); err != nil {
					t.Fatal(err)
				}
			}
			m := s.DeviceMemory()
			if m.Adapters != values*tc.size {
				t.Errorf("adapters %d bytes; want %d values × %d", m.Adapters, values, tc.size)
			}
			if want := int64(loraChunk) * 8 * tc.size; m.AdapterScratch != want {
				t.Errorf("scratch %d bytes; want %d (chunk × largest rank × size)", m.AdapterScratch, want)
			}
			if m.Constants != before.Constants || m.Activations != before.Activations {
				t.Errorf("adding sets moved constants %d -> %d or activations %d -> %d",
					before.Constants, m.Constants, before.Activations, m.Activations)
			}
		})
	}
}

// TestElasticLoRASwitchIsFree is spec §3d.3-4 with LoRA attached: 1000
// switches of level and adapter set allocate nothing on the host and
// change none of the OpenCL counters (no buffer, no build, no byte
// written, no launch); the base weights hash as before (the adapters are
// never merged), and a level's output after the switches is bit-identical
// to its output before them.
func TestElasticLoRASwitchIsFree(t *testing.T) {
	dir := filepath.Join(elasticDir, "llama")
	meta := readElasticMeta(t, dir)
	ids := readNpyI64(t, filepath.Join(dir, "input_ids.npy"))
	s, b := openBound(t, dir, meta, Options{Kernels: testLib})
	pristine := weightsHash(t, s)
	plain := elasticLogits(t, s, ids)
	ida, err := b.AddLoRA(randomLoRA(b, 8, 1))
	if err != nil {
		t.Fatal(err)
	}
	idb, err := b.AddLoRA(randomLoRA(b, 4, 2))
	if err != nil {
		t.Fatal(err)
	}
	if b.LoRA() != -1 {
		t.Fatalf("adding sets attached %d; want none until UseLoRA", b.LoRA())
	}
	if got := elasticLogits(t, s, ids); maxAbsDiff(got, plain) != 0 {
		t.Fatal("adding adapter sets changed the output before any was used")
	}
	l20 := meta.widths(20)
	if err := b.Set(l20); err != nil {
		t.Fatal(err)
	}
	if err := b.UseLoRA(ida); err != nil {
		t.Fatal(err)
	}
	first := elasticLogits(t, s, ids)
	if err := b.UseLoRA(-1); err != nil {
		t.Fatal(err)
	}
	if e := maxAbsDiff(first, elasticLogits(t, s, ids)); e < 1e-3 {
		t.Fatalf("the adapters change the level-20 logits by only %g", e)
	}
	levels := make([][]ElasticWidth, len(meta.Levels))
	for i, lv := range meta.Levels {
		levels[i] = meta.widths(lv.Level)
	}
	sets := []int{ida, -1, idb}
	before, _ := s.DeviceStats()
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		if err := b.Set(levels[i%len(levels)]); err != nil {
			panic(err)
		}
		if err := b.UseLoRA(sets[i%len(sets)]); err != nil {
			panic(err)
		}
		i++
	})
	after, _ := s.DeviceStats()
	if allocs != 0 {
		t.Errorf("Set + UseLoRA allocate %v times per switch; want 0", allocs)
	}
	if before != after {
		t.Errorf("device counters changed over 1000 switches:\nbefore %+v\nafter  %+v", before, after)
	}
	if got := weightsHash(t, s); got != pristine {
		t.Error("the base weights changed: the adapters must never be merged into them")
	}
	if err := b.Set(l20); err != nil {
		t.Fatal(err)
	}
	if err := b.UseLoRA(ida); err != nil {
		t.Fatal(err)
	}
	if e := maxAbsDiff(elasticLogits(t, s, ids), first); e != 0 {
		t.Errorf("level 20 with set %d after the switches: max |diff| %g from before; want 0", ida, e)
	}
	// Rows in chunks: 3 rows per launch pair instead of one for all 11.
	defer func(c int) { loraChunk = c }(loraChunk)
	loraChunk = 3
	if e := maxAbsDiff(elasticLogits(t, s, ids), first); e > 1e-5 {
		t.Errorf("in chunks of 3 rows: max |diff| %g from one chunk", e)
	}
	// Bad sets are refused and change nothing.
	bad := randomLoRA(b, 8, 3)
	bad[1].O.A = bad[1].O.A[:len(bad[1].O.A)-1]
	if _, err := b.AddLoRA(bad); err == nil || !strings.Contains(err.Error(), "layer 1 o") {
		t.Errorf("a short O adapter: %v", err)
	}
	if _, err := b.AddLoRA(bad[:1]); err == nil {
		t.Error("a one-layer set was accepted for three layers")
	}
	if err := b.UseLoRA(7); err == nil {
		t.Error("UseLoRA of a set never added was accepted")
	}
	if b.LoRA() != ida {
		t.Errorf("after refused calls the set in use is %d; want %d", b.LoRA(), ida)
	}
}
