// Package elastic runs an elastic model (shared/systems-spec.md §3): a
// decoder whose attention heads and MLP neurons were reordered offline by
// importance (models/elastic/elastic.py), so that the sub-model at each
// level is a prefix of every weight. The offline step writes elastic.json
// beside model.onnx; Load reads it, Bind attaches it to an open session, and
// Model.SetLevel switches level by changing only the active sizes the
// kernels are launched with (engine.ElasticBinding).
package elastic

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/tlite/tlite/engine"
)

// FileName is the elastic description written beside the model.
const FileName = "elastic.json"

// Format is the version Load accepts.
const Format = "tlite.elastic/1"

// LayerWidth is one layer's active size at one level.
type LayerWidth struct {
	QHeads  int  `json:"q_heads"`
	KVHeads int  `json:"kv_heads"`
	FFN     int  `json:"ffn"`
	Anchor  bool `json:"anchor"`
}

// Level is one sub-model: its percentage, the non-anchor retention and the
// realized fractions the offline step computed.
type Level struct {
	Level        int          `json:"level"`
	RNonAnchor   float64      `json:"r_non_anchor"`
	Layers       []LayerWidth `json:"layers"`
	ParamsLayers float64      `json:"param_fraction_layers"`
	ParamsTotal  float64      `json:"param_fraction_total"`
	MACsLayers   float64      `json:"mac_fraction_layers"`
	MACsWithHead float64      `json:"mac_fraction_with_lm_head"`
}

// Spec is elastic.json.
type Spec struct {
	Format   string              `json:"format"`
	Order    string              `json:"order"`
	NLayers  int                 `json:"n_layers"`
	NHeads   int                 `json:"n_heads"`
	NKVHeads int                 `json:"n_kv_heads"`
	HeadDim  int                 `json:"head_dim"`
	Dim      int                 `json:"dim"` // the model dimension (0: not recorded)
	FFN      int                 `json:"ffn"`
	Group    int                 `json:"group"`
	Anchors  []int               `json:"anchors"`
	Weights  []map[string]string `json:"weights"`
	Levels   []Level             `json:"levels"`
}

// Dir is the folder an elastic model's files (FileName, LoRADir) sit in:
// path itself, or the folder of the model file path names.
func Dir(path string) string {
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		return filepath.Dir(path)
	}
	return path
}

// Exists reports whether path (a model file or its folder) has an elastic
// description beside it.
func Exists(path string) bool {
	_, err := os.Stat(filepath.Join(Dir(path), FileName))
	return err == nil
}

// Load reads and checks dir/elastic.json (dir may also be the model file,
// whose folder is then used).
func Load(path string) (*Spec, error) {
	file := filepath.Join(Dir(path), FileName)
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("elastic: %w (an elastic model is made by tl elastic build)", err)
	}
	var s Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("elastic: %s: %w", file, err)
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("elastic: %s: %w", file, err)
	}
	sort.Slice(s.Levels, func(i, j int) bool { return s.Levels[i].Level < s.Levels[j].Level })
	return &s, nil
}

func (s *Spec) check() error {
	if s.Format != Format {
		return fmt.Errorf("format %q; want %q", s.Format, Format)
	}
	if s.NLayers <= 0 || s.NHeads <= 0 || s.NKVHeads <= 0 || s.HeadDim <= 0 || s.FFN <= 0 || s.NHeads%s.NKVHeads != 0 {
		return fmt.Errorf("bad shape: %d layers, %d/%d heads of %d, FFN %d", s.NLayers, s.NHeads, s.NKVHeads, s.HeadDim, s.FFN)
	}
	if len(s.Weights) != s.NLayers {
		return fmt.Errorf("%d weight sets for %d layers", len(s.Weights), s.NLayers)
	}
	for l, w := range s.Weights {
		for _, r := range []string{"q", "k", "v", "o", "gate", "up", "down"} {
			if w[r] == "" {
				return fmt.Errorf("layer %d names no %s weight", l, r)
			}
		}
	}
	if len(s.Levels) == 0 {
		return fmt.Errorf("no levels")
	}
	seen := map[int]bool{}
	for _, lv := range s.Levels {
		if lv.Level < 1 || lv.Level > 100 || seen[lv.Level] {
			return fmt.Errorf("level %d is out of 1..100 or repeated", lv.Level)
		}
		seen[lv.Level] = true
		if len(lv.Layers) != s.NLayers {
			return fmt.Errorf("level %d has %d layers; want %d", lv.Level, len(lv.Layers), s.NLayers)
		}
		g := s.NHeads / s.NKVHeads
		for l, w := range lv.Layers {
			if w.KVHeads < 1 || w.KVHeads > s.NKVHeads || w.QHeads != g*w.KVHeads || w.FFN < 1 || w.FFN > s.FFN {
				return fmt.Errorf("level %d layer %d: %d/%d heads, FFN %d out of range", lv.Level, l, w.QHeads, w.KVHeads, w.FFN)
			}
		}
	}
	return nil
}

// LevelOf returns the level of percentage pct.
func (s *Spec) LevelOf(pct int) (*Level, error) {
	for i := range s.Levels {
		if s.Levels[i].Level == pct {
			return &s.Levels[i], nil
		}
	}
	have := make([]int, len(s.Levels))
	for i, lv := range s.Levels {
		have[i] = lv.Level
	}
	return nil, fmt.Errorf("elastic: no level %d%% (the model has %v)", pct, have)
}

// EngineLayers is the weights of every layer, as the engine binds them.
func (s *Spec) EngineLayers() []engine.ElasticLayer {
	out := make([]engine.ElasticLayer, len(s.Weights))
	for i, w := range s.Weights {
		out[i] = engine.ElasticLayer{Q: w["q"], K: w["k"], V: w["v"], O: w["o"], Gate: w["gate"], Up: w["up"], Down: w["down"]}
	}
	return out
}

// Model is a session bound to its elastic description.
type Model struct {
	Spec    *Spec
	b       *engine.ElasticBinding
	widths  map[int][]engine.ElasticWidth
	current int
	// lora maps a level to its adapter set in the binding (AttachLoRA).
	lora map[int]int
}

// Bind attaches spec to s (a session of the model spec describes). The
// session starts at 100%.
func Bind(s *engine.Session, spec *Spec) (*Model, error) {
	b, err := s.BindElastic(spec.EngineLayers(), spec.HeadDim)
	if err != nil {
		return nil, fmt.Errorf("elastic: %w", err)
	}
	if f := b.Full(); f.QHeads != spec.NHeads || f.KVHeads != spec.NKVHeads || f.FFN != spec.FFN {
		return nil, fmt.Errorf("elastic: the session's layers have %d/%d heads and FFN %d; elastic.json says %d/%d and %d",
			f.QHeads, f.KVHeads, f.FFN, spec.NHeads, spec.NKVHeads, spec.FFN)
	}
	m := &Model{Spec: spec, b: b, widths: map[int][]engine.ElasticWidth{}, current: 100, lora: map[int]int{}}
	for _, lv := range spec.Levels {
		w := make([]engine.ElasticWidth, len(lv.Layers))
		for i, l := range lv.Layers {
			w[i] = engine.ElasticWidth{QHeads: l.QHeads, KVHeads: l.KVHeads, FFN: l.FFN}
		}
		m.widths[lv.Level] = w
	}
	return m, nil
}

// SetLevel switches to level pct (a percentage elastic.json lists), with
// its LoRA adapters when AttachLoRA gave it some (otherwise the plain
// prefix runs). It allocates nothing, builds nothing and copies no weight:
// the adapters of every level are resident and only their pointers move.
// Switch between sequences: the KV cache rows a smaller level did not
// write are stale.
func (m *Model) SetLevel(pct int) error {
	return m.SetLevelLoRA(pct, true)
}

// SetLevelLoRA is SetLevel with the choice of attaching the level's
// adapters (withLoRA) or running its plain prefix, for measuring the side
// branch's cost and gain in one session.
func (m *Model) SetLevelLoRA(pct int, withLoRA bool) error {
	w, ok := m.widths[pct]
	if !ok {
		_, err := m.Spec.LevelOf(pct)
		return err
	}
	if err := m.b.Set(w); err != nil {
		return err
	}
	id := -1
	if withLoRA {
		if i, ok := m.lora[pct]; ok {
			id = i
		}
	}
	if err := m.b.UseLoRA(id); err != nil {
		return err
	}
	m.current = pct
	return nil
}

// Level is the current level's percentage.
func (m *Model) Level() int { return m.current }
