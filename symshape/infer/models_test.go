package infer

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/symshape"
)

// The exported models are the acceptance test: every value derives a
// symbolic shape over the inputs' own symbols, no shape computation is left
// for run time, and the derived output shapes evaluated at each reference
// case's symbol values are the shapes PyTorch produced.

const modelsDir = "../../testdata/models"

// exportedModels are the models the acceptance test requires.
var exportedModels = []string{"llama", "gpt2", "bert", "clip_text", "clip_vision", "resnet",
	"hf_llama", "hf_qwen2", "hf_gpt2", "hf_bigcode_mqa", "hf_neox", "hf_bloom"}

// presentLen names, per decoder, the KV cache outputs and the axis holding
// the sequence length.
var presentLen = map[string]struct {
	prefix string
	axis   int
}{
	"llama":    {"present.", 2},
	"gpt2":     {"present.", 3},
	"hf_llama": {"present.", 2},
	"hf_qwen2": {"present.", 2},
	"hf_gpt2":  {"present.", 2},
	"hf_neox":  {"present.", 2},
}

type manifest struct {
	Case    string           `json:"case"`
	Symbols map[string]int64 `json:"symbols"`
	Outputs []struct {
		Name  string  `json:"name"`
		File  string  `json:"file"`
		Shape []int64 `json:"shape"`
	} `json:"outputs"`
}

func loadModel(t *testing.T, name string) *graph.Model {
	t.Helper()
	path := filepath.Join(modelsDir, name, "model.onnx")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("exported model %s is missing (%v): the acceptance test needs testdata/models", name, err)
	}
	m, err := graph.Load(path)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// manifests finds ref/manifest.json and ref/<case>/manifest.json.
func manifests(t *testing.T, name string) map[string]manifest {
	t.Helper()
	out := map[string]manifest{}
	root := filepath.Join(modelsDir, name, "ref")
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || info.Name() != "manifest.json" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var mf manifest
		if err := json.Unmarshal(b, &mf); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		out[filepath.Dir(p)] = mf
		return nil
	})
	if err != nil {
		t.Fatalf("reading manifests of %s: %v", name, err)
	}
	if len(out) == 0 {
		t.Fatalf("model %s has no reference manifest under %s", name, root)
	}
	return out
}

var npyShape = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)

// npyHeaderShape reads the shape from a .npy header (versions 1-3).
func npyHeaderShape(path string) ([]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pre [10]byte
	if _, err := io.ReadFull(f, pre[:]); err != nil {
		return nil, err
	}
	if string(pre[1:6]) != "NUMPY" {
		return nil, fmt.Errorf("%s: not a .npy file", path)
	}
	var hlen int
	if pre[6] == 1 {
		hlen = int(binary.LittleEndian.Uint16(pre[8:10]))
	} else {
		var more [2]byte
		if _, err := io.ReadFull(f, more[:]); err != nil {
			return nil, err
		}
		hlen = int(binary.LittleEndian.Uint32(append(pre[8:10:10], more[:]...)))
	}
	if hlen > 1<<16 {
		return nil, fmt.Errorf("%s: header of %d bytes", path, hlen)
	}
	h := make([]byte, hlen)
	if _, err := io.ReadFull(f, h); err != nil {
		return nil, err
	}
	mm := npyShape.FindStringSubmatch(string(h))
	if mm == nil {
		return nil, fmt.Errorf("%s: no shape in header %q", path, h)
	}
	var dims []int64
	for _, s := range strings.Split(mm[1], ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		d, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: shape %q: %v", path, mm[1], err)
		}
		dims = append(dims, d)
	}
	return dims, nil
}

// allValues lists every value of the main graph.
func allValues(g *graph.Graph) []*graph.Value {
	var out []*graph.Value
	out = append(out, g.Inputs...)
	out = append(out, g.Initializers...)
	for _, n := range g.Nodes {
		for _, v := range n.Outputs {
			if v != nil {
				out = append(out, v)
			}
		}
	}
	return out
}

// inputSymbols collects the dim_params of the graph inputs.
func inputSymbols(g *graph.Graph) map[string]bool {
	s := map[string]bool{}
	for _, v := range g.Inputs {
		for _, d := range v.Declared {
			if d.Param != "" {
				s[d.Param] = true
			}
		}
	}
	return s
}

func TestExportedModels(t *testing.T) {
	for _, name := range exportedModels {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name)
			r, err := Run(m, Options{})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			t.Logf("%s: %s; symbols %v; equalities %v", name, r.Summary(), r.Symbols, r.Equalities)
			for _, a := range r.Assumptions {
				t.Logf("assumption: %v", a)
			}
			if len(r.Fresh) > 0 {
				t.Errorf("fresh symbols: %v", r.Fresh)
			}
			if rem := r.Remaining(); len(rem) > 0 {
				for _, n := range rem {
					t.Errorf("HostRuntime node left: %s (%s)", n.Name, n.OpType)
				}
			}
			ins := inputSymbols(m.Graph)
			for _, s := range r.Symbols {
				if !ins[s] {
					t.Errorf("symbol %q is not an input's dim_param", s)
				}
			}
			for _, v := range allValues(m.Graph) {
				if v.Shape == nil {
					t.Errorf("value %q has no shape", v.Name)
					continue
				}
				for _, d := range v.Shape {
					if !d.IsValid() {
						t.Errorf("value %q has an invalid dim: %s", v.Name, symshape.FormatShape(v.Shape))
					}
				}
			}
			if p, ok := presentLen[name]; ok {
				found := 0
				for _, v := range m.Graph.Outputs {
					if !strings.HasPrefix(v.Name, p.prefix) {
						continue
					}
					found++
					if got := v.Shape[p.axis].String(); got != "past + seq" {
						t.Errorf("%s length = %s, want past + seq (shape %s)", v.Name, got, symshape.FormatShape(v.Shape))
					}
				}
				if found == 0 {
					t.Errorf("no %s* outputs", p.prefix)
				}
			}
			// Within the models' position limits every clamp resolves and
			// nothing is left to assume.
			mb := loadModel(t, name)
			rb, err := Run(mb, Options{Bounds: symshape.Bounds{"seq": {1, 64}, "past": {0, 64}}})
			if err != nil {
				t.Fatalf("Run with bounds: %v", err)
			}
			for _, a := range rb.Assumptions {
				t.Errorf("with bounds, assumption left: %v", a)
			}
			for dir, mf := range manifests(t, name) {
				b := symshape.Binding(mf.Symbols)
				for _, o := range mf.Outputs {
					v := m.Graph.Lookup(o.Name)
					if v == nil {
						t.Errorf("%s: output %q is not in the graph", dir, o.Name)
						continue
					}
					want, err := npyHeaderShape(filepath.Join(dir, o.File))
					if err != nil {
						t.Errorf("%s: %v", dir, err)
						continue
					}
					got, err := evalShape(v.Shape, b)
					if err != nil {
						t.Errorf("%s: output %q shape %s at %v: %v", dir, o.Name, symshape.FormatShape(v.Shape), mf.Symbols, err)
						continue
					}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("%s: output %q: derived %s = %v at %v, reference %v", dir, o.Name, symshape.FormatShape(v.Shape), got, mf.Symbols, want)
					}
				}
			}
		})
	}
}

func evalShape(s []symshape.Expr, b symshape.Binding) ([]int64, error) {
	out := make([]int64, len(s))
	for i, d := range s {
		v, err := d.Eval(b)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// checkAgainstFixed runs build twice, symbolically and with the symbols the
// symbolic run left fixed to random values, and checks that every value's
// derived shape and contents evaluate to what the concrete run derived.
func checkAgainstFixed(t *testing.T, load func() *graph.Model, ranges map[string][2]int64, rng *rand.Rand, trials int) {
	t.Helper()
	ms := load()
	rs, err := Run(ms, Options{})
	if err != nil {
		t.Fatalf("symbolic Run: %v", err)
	}
	for trial := 0; trial < trials; trial++ {
		fixed := map[string]int64{}
		for _, s := range rs.Symbols {
			lo, hi := int64(1), int64(9)
			if r, ok := ranges[s]; ok {
				lo, hi = r[0], r[1]
			}
			fixed[s] = lo + rng.Int63n(hi-lo+1)
		}
		mc := load()
		if _, err := Run(mc, Options{Fixed: fixed}); err != nil {
			t.Fatalf("Run with %v: %v", fixed, err)
		}
		b := symshape.Binding(fixed)
		byName := map[string]*graph.Value{}
		for _, v := range allValues(mc.Graph) {
			byName[v.Name] = v
		}
		bad := 0
		for _, v := range allValues(ms.Graph) {
			w := byName[v.Name]
			got, err := evalShape(v.Shape, b)
			if err != nil {
				t.Errorf("%q: shape %s at %v: %v", v.Name, symshape.FormatShape(v.Shape), fixed, err)
				bad++
				continue
			}
			want, ok := constDims(w.Shape)
			if !ok {
				t.Errorf("%q: fixed run derived %s, not constant", v.Name, symshape.FormatShape(w.Shape))
				bad++
				continue
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%q: %s at %v = %v, fixed run derived %v", v.Name, symshape.FormatShape(v.Shape), fixed, got, want)
				bad++
			}
			if v.Elems != nil && w.Elems != nil {
				ge, err := evalShape(v.Elems, b)
				we, ok := constInts(w.Elems)
				if err == nil && ok && fmt.Sprint(ge) != fmt.Sprint(we) {
					t.Errorf("%q: contents %s at %v = %v, fixed run derived %v", v.Name, symshape.FormatShape(v.Elems), fixed, ge, we)
					bad++
				}
			}
			if bad > 10 {
				t.Fatalf("too many mismatches")
			}
		}
	}
}

// TestPropertyModels: symbolic shapes of the exported models agree with
// concrete derivations at random symbol values (within each model's limits:
// position tables of 64 (bert) and 128 (gpt2) entries).
func TestPropertyModels(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	ranges := map[string][2]int64{"batch": {1, 4}, "seq": {1, 24}, "past": {0, 24}}
	for _, name := range exportedModels {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(modelsDir, name, "model.onnx")
			load := func() *graph.Model {
				m, err := graph.Load(path)
				if err != nil {
					t.Fatalf("load: %v", err)
				}
				t.Cleanup(func() { m.Close() })
				return m
			}
			checkAgainstFixed(t, load, ranges, rng, 3)
		})
	}
}

// TestRunTwice: a second Run on the same model, with symbols fixed, replaces
// what the first derived.
func TestRunTwice(t *testing.T) {
	m := loadModel(t, "llama")
	if _, err := Run(m, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(m, Options{Fixed: map[string]int64{"batch": 2, "seq": 3, "past": 5}}); err != nil {
		t.Fatal(err)
	}
	for _, v := range allValues(m.Graph) {
		if _, ok := constDims(v.Shape); !ok {
			t.Fatalf("%q still has a symbolic shape %s after a fixed Run", v.Name, symshape.FormatShape(v.Shape))
		}
	}
	v := m.Graph.Lookup("present.0.key")
	if got := symshape.FormatShape(v.Shape); got != "[2, 2, 8, 16]" {
		t.Errorf("present.0.key = %s, want [2, 2, 8, 16]", got)
	}
}

// BenchmarkRunLlama measures one derivation of the LLaMA export (graph
// loading excluded; Run clears what the previous iteration derived).
func BenchmarkRunLlama(b *testing.B) {
	m, err := graph.Load(filepath.Join(modelsDir, "llama", "model.onnx"))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Run(m, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// The decoder test bed's limits: what tl inspect reports and an engine
// must enforce. GPT-2, GPTBigCode and GPT-NeoX slice a 256-row causal mask
// (and GPT-2 gathers arange(past, past + seq) from a 256-row table), so
// past + seq <= 256; the rotary tables of the LLaMA family are gathered by
// position_ids, a limit on that input's values. The GQA export written
// with repeat_interleave pins total to the traced constant.
func TestTestBedLimits(t *testing.T) {
	cases := []struct {
		name   string
		limits []string
		pins   []string
	}{
		{"hf_llama", []string{"values of input_ids <= 319", "values of position_ids <= 255"}, nil},
		{"hf_qwen2", []string{"values of input_ids <= 299", "values of position_ids <= 255"}, nil},
		{"hf_gpt2", []string{"past + seq <= 256", "values of input_ids <= 319"}, nil},
		{"hf_bigcode_mqa", []string{"past + seq <= 256", "values of input_ids <= 299", "values of position_ids <= 255"}, nil},
		{"hf_neox", []string{"past + seq <= 256", "values of input_ids <= 319", "values of position_ids <= 255"}, nil},
		{"hf_bloom", []string{"values of input_ids <= 319"}, nil},
		{"hf_gqa_interleave", []string{"values of input_ids <= 287", "values of position_ids <= 1"},
			[]string{"total = 2", "seq = -past + 2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Run(loadModel(t, tc.name), Options{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range r.Limits {
				got = append(got, strings.SplitN(l.String(), " (", 2)[0])
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.limits) {
				t.Errorf("limits %q, want %q", got, tc.limits)
			}
			var pins []string
			for _, p := range r.Pins {
				pins = append(pins, p.Sym+" = "+p.Expr.String())
			}
			if fmt.Sprint(pins) != fmt.Sprint(tc.pins) {
				t.Errorf("pins %q, want %q", pins, tc.pins)
			}
			for _, a := range r.Assumptions {
				if !a.Limited && tc.pins == nil {
					t.Errorf("assumption no limit explains: %v", a)
				}
			}
			// The reference cases are within the limits; the pinned export
			// cannot run its own exporter's cases.
			for dir, mf := range manifests(t, tc.name) {
				err := r.Check(symshape.Binding(mf.Symbols))
				if (err != nil) != (tc.pins != nil) {
					t.Errorf("%s: Check(%v) = %v", dir, mf.Symbols, err)
				}
			}
			over := symshape.Binding{"batch": 1, "past": 256, "seq": 1, "batch_heads": 4}
			err = r.Check(over)
			if limited := len(tc.limits) > 0 && strings.HasPrefix(tc.limits[0], "past + seq"); limited != (err != nil) && tc.pins == nil {
				t.Errorf("Check(%v) = %v", over, err)
			}
		})
	}
}
