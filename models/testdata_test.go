package models

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// modelsRoot is where export_all.py writes the committed test models.
const modelsRoot = "../testdata/models"

// maxCommittedBytes keeps the committed test data small enough to clone
// quickly; full-size exports (*_full) are git-ignored and not counted.
const maxCommittedBytes = 20 << 20

// npyHeader is the part of a .npy header the tests need.
type npyHeader struct {
	descr   string // numpy dtype string, e.g. "<f4"
	fortran bool
	shape   []int
	offset  int64 // byte offset of the array data
}

// parseNpyHeader reads a .npy header (format versions 1, 2 and 3). The
// header is a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 7), }
func parseNpyHeader(r io.Reader) (npyHeader, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return npyHeader{}, fmt.Errorf("npy preamble: %w", err)
	}
	if string(pre[:6]) != "\x93NUMPY" {
		return npyHeader{}, fmt.Errorf("npy: bad magic %q", pre[:6])
	}
	var hlen, offset int64
	switch pre[6] {
	case 1:
		var n uint16
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return npyHeader{}, fmt.Errorf("npy v1 header length: %w", err)
		}
		hlen, offset = int64(n), 10
	case 2, 3:
		var n uint32
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
			return npyHeader{}, fmt.Errorf("npy v%d header length: %w", pre[6], err)
		}
		hlen, offset = int64(n), 12
	default:
		return npyHeader{}, fmt.Errorf("npy: unsupported format version %d.%d", pre[6], pre[7])
	}
	raw := make([]byte, hlen)
	if _, err := io.ReadFull(r, raw); err != nil {
		return npyHeader{}, fmt.Errorf("npy header (%d bytes): %w", hlen, err)
	}
	h, err := parseNpyDict(strings.TrimSpace(string(raw)))
	if err != nil {
		return npyHeader{}, err
	}
	h.offset = offset + hlen
	return h, nil
}

// parseNpyDict parses the three keys numpy writes; any other key is an
// error, because a header this parser does not understand should not pass.
func parseNpyDict(s string) (npyHeader, error) {
	var h npyHeader
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return h, fmt.Errorf("npy header %q: not a dict literal", s)
	}
	rest := strings.TrimSpace(s[1 : len(s)-1])
	seen := map[string]bool{}
	for rest != "" {
		key, after, err := pyString(rest)
		if err != nil {
			return h, fmt.Errorf("npy header %q: key: %w", s, err)
		}
		after = strings.TrimSpace(after)
		if !strings.HasPrefix(after, ":") {
			return h, fmt.Errorf("npy header %q: missing ':' after %q", s, key)
		}
		after = strings.TrimSpace(after[1:])
		switch key {
		case "descr":
			h.descr, after, err = pyString(after)
		case "fortran_order":
			switch {
			case strings.HasPrefix(after, "True"):
				h.fortran, after = true, after[4:]
			case strings.HasPrefix(after, "False"):
				h.fortran, after = false, after[5:]
			default:
				err = errors.New("fortran_order is not True or False")
			}
		case "shape":
			h.shape, after, err = pyIntTuple(after)
		default:
			err = fmt.Errorf("unexpected key %q", key)
		}
		if err != nil {
			return h, fmt.Errorf("npy header %q: %w", s, err)
		}
		seen[key] = true
		after = strings.TrimSpace(after)
		after = strings.TrimPrefix(after, ",")
		rest = strings.TrimSpace(after)
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return h, fmt.Errorf("npy header %q: missing key %q", s, k)
		}
	}
	return h, nil
}

// pyString parses a single-quoted Python string without escapes, which is
// all numpy emits for keys and dtype strings.
func pyString(s string) (string, string, error) {
	if !strings.HasPrefix(s, "'") {
		return "", s, fmt.Errorf("want a quoted string at %q", s)
	}
	end := strings.IndexByte(s[1:], '\'')
	if end < 0 {
		return "", s, fmt.Errorf("unterminated string at %q", s)
	}
	return s[1 : 1+end], s[2+end:], nil
}

// pyIntTuple parses "()", "(5,)" or "(2, 7)".
func pyIntTuple(s string) ([]int, string, error) {
	if !strings.HasPrefix(s, "(") {
		return nil, s, fmt.Errorf("want a tuple at %q", s)
	}
	end := strings.IndexByte(s, ')')
	if end < 0 {
		return nil, s, fmt.Errorf("unterminated tuple at %q", s)
	}
	dims := []int{}
	for _, f := range strings.Split(s[1:end], ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		d, err := strconv.Atoi(f)
		if err != nil || d < 0 {
			return nil, s, fmt.Errorf("bad dimension %q in shape", f)
		}
		dims = append(dims, d)
	}
	return dims, s[end+1:], nil
}

// npyDescr maps the dtype names in manifests to numpy's descr strings and
// element sizes; the recipes write only these.
var npyDescr = map[string]struct {
	descr string
	size  int64
}{
	"float32": {"<f4", 4},
	"float16": {"<f2", 2},
	"int64":   {"<i8", 8},
	"int32":   {"<i4", 4},
	"bool":    {"|b1", 1},
}

type manifestTensor struct {
	Name  string `json:"name"`
	File  string `json:"file"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
}

type manifest struct {
	Model          string           `json:"model"`
	Case           string           `json:"case"`
	ONNX           string           `json:"onnx"`
	Symbols        map[string]int   `json:"symbols"`
	DerivedSymbols map[string]int   `json:"derived_symbols"`
	Inputs         []manifestTensor `json:"inputs"`
	Outputs        []manifestTensor `json:"outputs"`
}

// sigValue is one graph input or output as recorded in model.json: each dim
// is a JSON number (fixed), a string (a dim_param symbol) or null.
type sigValue struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Dims  []any  `json:"dims"`
}

type modelInfo struct {
	Model     string `json:"model"`
	Opset     int    `json:"opset"`
	Signature struct {
		Inputs  []sigValue `json:"inputs"`
		Outputs []sigValue `json:"outputs"`
	} `json:"signature"`
	Ops map[string]int `json:"ops"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// modelDirs lists the committed model directories (not *_full exports).
func modelDirs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(modelsRoot)
	if err != nil {
		t.Fatalf("reading %s (regenerate with models/export/export_all.py): %v", modelsRoot, err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasSuffix(e.Name(), "_full") {
			dirs = append(dirs, filepath.Join(modelsRoot, e.Name()))
		}
	}
	return dirs
}

func findManifests(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(dir, "ref"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "manifest.json" {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return out
}

// TestModelSet pins the recipes the rest of tlite's tests rely on, so a
// half-finished regeneration is noticed here rather than as a skipped test
// elsewhere.
func TestModelSet(t *testing.T) {
	want := []string{"bert", "clip_text", "clip_vision", "gpt2", "llama", "resnet", "resnet_bn",
		"hf_llama", "hf_qwen2", "hf_gqa_interleave", "hf_gpt2", "hf_bigcode_mqa", "hf_neox", "hf_bloom"}
	have := map[string]bool{}
	for _, d := range modelDirs(t) {
		have[filepath.Base(d)] = true
	}
	for _, name := range want {
		if !have[name] {
			t.Errorf("testdata/models/%s is missing", name)
		}
	}
	for _, f := range []string{"llama/model_ext.onnx", "llama/model_ext.onnx.data"} {
		if _, err := os.Stat(filepath.Join(modelsRoot, f)); err != nil {
			t.Errorf("external-data variant: %v", err)
		}
	}
}

// TestManifests checks every reference case against its files and against
// the graph signature in model.json.
func TestManifests(t *testing.T) {
	for _, dir := range modelDirs(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			for _, f := range []string{"model.onnx", "model.json"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Fatal(err)
				}
			}
			var info modelInfo
			readJSON(t, filepath.Join(dir, "model.json"), &info)
			if info.Opset != 17 {
				t.Errorf("model.json: opset %d, want 17", info.Opset)
			}
			if len(info.Ops) == 0 {
				t.Errorf("model.json: empty op histogram")
			}
			manifests := findManifests(t, dir)
			if len(manifests) == 0 {
				t.Fatalf("no ref/**/manifest.json under %s", dir)
			}
			for _, mp := range manifests {
				checkManifest(t, dir, mp, &info)
			}
		})
	}
}

func checkManifest(t *testing.T, modelDir, path string, info *modelInfo) {
	t.Helper()
	var m manifest
	readJSON(t, path, &m)
	caseDir := filepath.Dir(path)
	if m.Model != filepath.Base(modelDir) {
		t.Errorf("%s: model %q, directory says %q", path, m.Model, filepath.Base(modelDir))
	}
	if _, err := os.Stat(filepath.Join(modelDir, m.ONNX)); err != nil {
		t.Errorf("%s: onnx file: %v", path, err)
	}
	bind := func(sig sigValue, allowDerived bool) ([]int, error) {
		out := make([]int, len(sig.Dims))
		for i, d := range sig.Dims {
			switch v := d.(type) {
			case float64:
				out[i] = int(v)
			case string:
				n, ok := m.Symbols[v]
				if !ok && allowDerived {
					n, ok = m.DerivedSymbols[v]
				}
				if !ok {
					return nil, fmt.Errorf("%s axis %d: symbol %q not bound", sig.Name, i, v)
				}
				out[i] = n
			default:
				return nil, fmt.Errorf("%s axis %d: unknown dim %v", sig.Name, i, d)
			}
		}
		return out, nil
	}
	check := func(kind string, ts []manifestTensor, sigs []sigValue) {
		if len(ts) != len(sigs) {
			t.Errorf("%s: %d %s, graph has %d", path, len(ts), kind, len(sigs))
			return
		}
		for i, mt := range ts {
			sig := sigs[i]
			if mt.Name != sig.Name || mt.DType != sig.DType {
				t.Errorf("%s: %s %d is %s %s, graph has %s %s", path, kind, i, mt.Name, mt.DType, sig.Name, sig.DType)
				continue
			}
			want, err := bind(sig, kind == "outputs")
			if err != nil {
				t.Errorf("%s: %v", path, err)
			} else if fmt.Sprint(want) != fmt.Sprint(mt.Shape) {
				t.Errorf("%s: %s shape %v, graph dims %v bound to %v", path, mt.Name, mt.Shape, sig.Dims, want)
			}
			checkNpy(t, filepath.Join(caseDir, mt.File), mt)
		}
	}
	check("inputs", m.Inputs, info.Signature.Inputs)
	check("outputs", m.Outputs, info.Signature.Outputs)
}

func checkNpy(t *testing.T, path string, mt manifestTensor) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Errorf("%s: %v", mt.Name, err)
		return
	}
	defer f.Close()
	h, err := parseNpyHeader(f)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	d, ok := npyDescr[mt.DType]
	if !ok {
		t.Errorf("%s: manifest dtype %q is not one the recipes write", path, mt.DType)
		return
	}
	if h.descr != d.descr || h.fortran {
		t.Errorf("%s: descr %q fortran %v, want %q C order", path, h.descr, h.fortran, d.descr)
	}
	if fmt.Sprint(h.shape) != fmt.Sprint(mt.Shape) {
		t.Errorf("%s: npy shape %v, manifest %v", path, h.shape, mt.Shape)
	}
	n := d.size
	for _, s := range h.shape {
		n *= int64(s)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != h.offset+n {
		t.Errorf("%s: %d bytes, header says %d + %d of data", path, st.Size(), h.offset, n)
	}
}

// TestDecodeContinuesPrefill checks that each decoder's decode case feeds
// back exactly the cache its prefill case produced, which is what lets an
// engine test chain the two runs.
func TestDecodeContinuesPrefill(t *testing.T) {
	for _, name := range []string{"llama", "gpt2", "hf_llama", "hf_qwen2", "hf_gqa_interleave",
		"hf_gpt2", "hf_bigcode_mqa", "hf_neox", "hf_bloom"} {
		var pre, dec manifest
		readJSON(t, filepath.Join(modelsRoot, name, "ref/prefill/manifest.json"), &pre)
		readJSON(t, filepath.Join(modelsRoot, name, "ref/decode/manifest.json"), &dec)
		if dec.Symbols["past"] != pre.Symbols["total"] {
			t.Errorf("%s: decode past %d != prefill total %d", name, dec.Symbols["past"], pre.Symbols["total"])
		}
		presents := map[string]string{}
		for _, o := range pre.Outputs {
			if strings.HasPrefix(o.Name, "present.") {
				presents[strings.TrimPrefix(o.Name, "present.")] = o.File
			}
		}
		matched := 0
		for _, in := range dec.Inputs {
			suffix, ok := strings.CutPrefix(in.Name, "past_key_values.")
			if !ok {
				continue
			}
			pf, ok := presents[suffix]
			if !ok {
				t.Errorf("%s: decode input %s has no prefill present.%s", name, in.Name, suffix)
				continue
			}
			a := npyData(t, filepath.Join(modelsRoot, name, "ref/prefill", pf))
			b := npyData(t, filepath.Join(modelsRoot, name, "ref/decode", in.File))
			if !bytes.Equal(a, b) {
				t.Errorf("%s: decode %s differs from prefill present.%s", name, in.Name, suffix)
			}
			matched++
		}
		if matched == 0 || matched != len(presents) {
			t.Errorf("%s: matched %d cache tensors of %d", name, matched, len(presents))
		}
	}
}

func npyData(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := parseNpyHeader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b[h.offset:]
}

// TestCommittedSize keeps the committed test models under the budget.
func TestCommittedSize(t *testing.T) {
	var total int64
	for _, dir := range modelDirs(t) {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			st, err := d.Info()
			if err != nil {
				return err
			}
			total += st.Size()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if total > maxCommittedBytes {
		t.Errorf("testdata/models holds %d bytes, budget %d", total, maxCommittedBytes)
	}
	t.Logf("testdata/models: %.1f MiB", float64(total)/(1<<20))
}

// TestParseNpyHeader covers the parser on headers written by hand, so that
// the manifest checks above rest on a parser that is itself checked.
func TestParseNpyHeader(t *testing.T) {
	v1 := func(dict string) []byte {
		var b bytes.Buffer
		b.WriteString("\x93NUMPY\x01\x00")
		binary.Write(&b, binary.LittleEndian, uint16(len(dict)))
		b.WriteString(dict)
		return b.Bytes()
	}
	v2 := func(dict string) []byte {
		var b bytes.Buffer
		b.WriteString("\x93NUMPY\x02\x00")
		binary.Write(&b, binary.LittleEndian, uint32(len(dict)))
		b.WriteString(dict)
		return b.Bytes()
	}
	good := []struct {
		name    string
		in      []byte
		descr   string
		fortran bool
		shape   []int
	}{
		{"2d", v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 7), }   \n"), "<f4", false, []int{2, 7}},
		{"1d", v1("{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }\n"), "<i8", false, []int{5}},
		{"scalar", v1("{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n"), "<f4", false, []int{}},
		{"key order and fortran", v2("{'shape': (3, 0, 4), 'fortran_order': True, 'descr': '|b1'}\n"), "|b1", true, []int{3, 0, 4}},
	}
	for _, c := range good {
		h, err := parseNpyHeader(bytes.NewReader(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		// The inputs carry no array data, so the data offset is their length.
		if h.descr != c.descr || h.fortran != c.fortran || fmt.Sprint(h.shape) != fmt.Sprint(c.shape) || h.offset != int64(len(c.in)) {
			t.Errorf("%s: got %+v, want descr %q fortran %v shape %v offset %d", c.name, h, c.descr, c.fortran, c.shape, len(c.in))
		}
	}
	bad := map[string][]byte{
		"magic":       append([]byte("\x93NUMPZ\x01\x00\x02\x00"), "{}"...),
		"version":     append([]byte("\x93NUMPY\x04\x00\x02\x00"), "{}"...),
		"truncated":   []byte("\x93NUMPY\x01\x00\x40\x00{'descr'"),
		"missing key": v1("{'descr': '<f4', 'shape': (2,), }\n"),
		"extra key":   v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}\n"),
		"bad dim":     v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }\n"),
		"not a dict":  v1("['descr']\n"),
	}
	for name, in := range bad {
		if h, err := parseNpyHeader(bytes.NewReader(in)); err == nil {
			t.Errorf("%s: accepted, got %+v", name, h)
		}
	}
}
