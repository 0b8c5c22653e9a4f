package elastic

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/npy"
)

// TestLevelsWithKVCache: through the in-place KV cache (as tl generate
// runs), a prefill chunk then one-token decode steps at a level give the
// rows of PyTorch's truncated sub-model of that level; the cache holds all
// KV heads, the level's attention reads its prefix. Levels switch between
// sequences (Reset).
func TestLevelsWithKVCache(t *testing.T) {
	spec, err := Load(llamaDir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := generate.Open(filepath.Join(llamaDir, "model.onnx"), engine.Options{Device: "go", NoJoin: true}, 32, generate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Mode != generate.KVInPlace {
		t.Fatalf("KV mode %s: %s", d.Mode, d.Fallback)
	}
	m, err := Bind(d.Session(), spec)
	if err != nil {
		t.Fatal(err)
	}
	idsT, err := npy.ReadFile(filepath.Join(llamaDir, "input_ids.npy"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, v := range idsT.Data().([]int64) {
		ids = append(ids, int(v))
	}
	vocab := d.Vocab()
	for _, lv := range []int{60, 20, 100} {
		wantT, err := npy.ReadFile(filepath.Join(llamaDir, fmt.Sprintf("logits_level%03d.npy", lv)))
		if err != nil {
			t.Fatal(err)
		}
		want := wantT.Data().([]float32)
		if err := m.SetLevel(lv); err != nil {
			t.Fatal(err)
		}
		if err := d.Reset(); err != nil {
			t.Fatal(err)
		}
		var got []float32
		split := 6
		pos := make([]int, len(ids))
		for i := range pos {
			pos[i] = i
		}
		rows, err := d.Step(ids[:split], pos[:split])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rows...)
		for i := split; i < len(ids); i++ {
			row, err := d.Step(ids[i:i+1], pos[i:i+1])
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, row...)
		}
		if len(got) != len(ids)*vocab {
			t.Fatalf("level %d: %d logits; want %d", lv, len(got), len(ids)*vocab)
		}
		if e := dist(got, want); e > 1e-4 {
			t.Errorf("level %d%%: cached prefill+decode differs from PyTorch's sub-model by %g", lv, e)
		}
	}
}
