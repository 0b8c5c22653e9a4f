package elastic

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
)

const llamaDir = "../../testdata/elastic/llama"

func TestLoadAndSetLevel(t *testing.T) {
	spec, err := Load(filepath.Join(llamaDir, "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Levels) != 9 || spec.Levels[0].Level != 20 || spec.Levels[8].Level != 100 {
		t.Fatalf("levels %v", spec.Levels)
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
	if err := m.SetLevel(55); err == nil || !strings.Contains(err.Error(), "no level 55%") {
		t.Errorf("level 55: %v", err)
	}
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		if err := m.SetLevel(spec.Levels[i%len(spec.Levels)].Level); err != nil {
			panic(err)
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("SetLevel allocates %v times; want 0", allocs)
	}
}

// TestLoadErrors: a broken elastic.json is refused with a reason.
func TestLoadErrors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(llamaDir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		edit       func(m map[string]any)
	}{
		{"format", "format", func(m map[string]any) { m["format"] = "other" }},
		{"no levels", "no levels", func(m map[string]any) { m["levels"] = []any{} }},
		{"weights", "weight sets", func(m map[string]any) { m["weights"] = []any{} }},
		{"heads off group", "out of range", func(m map[string]any) {
			lv := m["levels"].([]any)[0].(map[string]any)
			lv["layers"].([]any)[0].(map[string]any)["q_heads"] = 3.0
		}},
		{"layer count", "layers; want", func(m map[string]any) {
			lv := m["levels"].([]any)[0].(map[string]any)
			lv["layers"] = lv["layers"].([]any)[:1]
		}},
	} {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		c.edit(m)
		dir := t.TempDir()
		b, _ := json.Marshal(m)
		if err := os.WriteFile(filepath.Join(dir, FileName), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", c.name, err, c.want)
		}
	}
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("a folder without elastic.json loaded")
	}
}
