// Package embed turns images and text into CLIP/ViT embeddings with
// tlite sessions: CLIP's image preprocessing (decode with the standard
// library, bicubic resize of the shorter side matching PIL level for
// level, centre crop, normalisation) and CLIP's BPE tokenizer, driven by
// a small JSON file beside the models.
//
// A config file (embed.json) names the towers and their settings; paths
// are relative to the file:
//
//	{
//	  "vision": {"model": "vision.onnx", "input": "pixel_values", "output": "image_embeds",
//	             "resize": 224, "crop": 224,
//	             "mean": [0.48145466, 0.4578275, 0.40821073], "std": [0.26862954, 0.26130258, 0.27577711]},
//	  "text":   {"model": "text.onnx", "input": "input_ids", "output": "text_embeds",
//	             "tokenizer": "tokenizer.json", "context_length": 77, "pad_id": 0}
//	}
//
// Either tower may be left out. Omitted image settings are CLIP's
// (CLIPImage); omitted text settings are CLIP's 77 tokens padded with 0.
package embed

import (
	"encoding/json"
	"fmt"
	"image"
	"math"
	"os"
	"path/filepath"

	"github.com/tlite/tlite/engine"
)

// Config is an embed.json.
type Config struct {
	Vision *VisionConfig `json:"vision,omitempty"`
	Text   *TextConfig   `json:"text,omitempty"`
	// Dir is the folder relative paths are resolved in (the file's).
	Dir string `json:"-"`
}

// VisionConfig is the image tower and its preprocessing.
type VisionConfig struct {
	Model  string `json:"model"`
	Input  string `json:"input"`
	Output string `json:"output"`
	ImageConfig
}

// TextConfig is the text tower and its tokenizer.
type TextConfig struct {
	Model         string `json:"model"`
	Input         string `json:"input"`
	Output        string `json:"output"`
	Tokenizer     string `json:"tokenizer"`
	ContextLength int    `json:"context_length"`
	PadID         int    `json:"pad_id"`
	StartToken    string `json:"start_token,omitempty"`
	EndToken      string `json:"end_token,omitempty"`
}

// ConfigName is the file LoadConfig looks for in a folder.
const ConfigName = "embed.json"

// LoadConfig reads an embed.json, given as the file, the folder holding
// it, or a model file it sits beside. Unset fields get CLIP's values.
func LoadConfig(path string) (*Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		path = filepath.Join(path, ConfigName)
	} else if filepath.Ext(path) == ".onnx" {
		path = filepath.Join(filepath.Dir(path), ConfigName)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("embed: %w (tl embed reads the towers and their preprocessing from an %s beside the models; see go doc engine/embed)", err, ConfigName)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("embed: %s: %w", path, err)
	}
	c.Dir = filepath.Dir(path)
	if c.Vision == nil && c.Text == nil {
		return nil, fmt.Errorf("embed: %s names neither a \"vision\" nor a \"text\" tower", path)
	}
	if v := c.Vision; v != nil {
		if v.Model == "" {
			return nil, fmt.Errorf("embed: %s: vision.model is missing", path)
		}
		v.Input = orDefault(v.Input, "pixel_values")
		v.Output = orDefault(v.Output, "image_embeds")
		if v.Resize == 0 && v.Crop == 0 {
			v.Resize, v.Crop = CLIPImage.Resize, CLIPImage.Crop
		}
		if v.Crop == 0 {
			v.Crop = v.Resize
		}
		if v.Std == [3]float32{} {
			v.Mean, v.Std = CLIPImage.Mean, CLIPImage.Std
		}
		if err := v.ImageConfig.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if t := c.Text; t != nil {
		if t.Model == "" {
			return nil, fmt.Errorf("embed: %s: text.model is missing", path)
		}
		t.Input = orDefault(t.Input, "input_ids")
		t.Output = orDefault(t.Output, "text_embeds")
		t.Tokenizer = orDefault(t.Tokenizer, "tokenizer.json")
		if t.ContextLength == 0 {
			t.ContextLength = 77
		}
		if t.ContextLength < 2 || t.ContextLength > 1<<16 {
			return nil, fmt.Errorf("embed: %s: context_length %d: want 2 to 65536", path, t.ContextLength)
		}
	}
	return &c, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (c *Config) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Dir, p)
}

// Embedder holds the open towers. Its methods are safe for concurrent
// use as the sessions' are (one run at a time per tower).
type Embedder struct {
	Config *Config
	vision *engine.Session
	text   *engine.Session
	tok    *Tokenizer
	tokMu  chan struct{}
}

// Open opens the towers c names with opts.
func Open(c *Config, opts engine.Options) (*Embedder, error) {
	e := &Embedder{Config: c, tokMu: make(chan struct{}, 1)}
	if c.Vision != nil {
		s, err := engine.Open(c.path(c.Vision.Model), opts)
		if err != nil {
			return nil, fmt.Errorf("embed: vision tower: %w", err)
		}
		e.vision = s
	}
	if c.Text != nil {
		tok, err := LoadTokenizer(c.path(c.Text.Tokenizer), c.Text.StartToken, c.Text.EndToken)
		if err != nil {
			e.Close()
			return nil, err
		}
		e.tok = tok
		s, err := engine.Open(c.path(c.Text.Model), opts)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("embed: text tower: %w", err)
		}
		e.text = s
	}
	return e, nil
}

// Close releases the sessions.
func (e *Embedder) Close() error {
	var first error
	for _, s := range []*engine.Session{e.vision, e.text} {
		if s != nil {
			if err := s.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Vision is the image tower's session (nil when not configured).
func (e *Embedder) Vision() *engine.Session { return e.vision }

// Text is the text tower's session (nil when not configured).
func (e *Embedder) Text() *engine.Session { return e.text }

// Tokenizer is the text tower's tokenizer.
func (e *Embedder) Tokenizer() *Tokenizer { return e.tok }

// PixelValues preprocesses an image into the vision tower's input.
func (e *Embedder) PixelValues(img image.Image) ([]float32, error) {
	if e.vision == nil {
		return nil, fmt.Errorf("embed: the config has no vision tower")
	}
	return e.Config.Vision.Preprocess(img)
}

// Image returns the image's embedding (as the model outputs it, not
// normalised).
func (e *Embedder) Image(img image.Image) ([]float32, error) {
	px, err := e.PixelValues(img)
	if err != nil {
		return nil, err
	}
	v := e.Config.Vision
	return e.run(e.vision, map[string]engine.Tensor{v.Input: engine.NewTensor([]int{1, 3, v.Crop, v.Crop}, px)}, v.Output)
}

// InputIDs tokenizes text into the text tower's input.
func (e *Embedder) InputIDs(text string) ([]int64, error) {
	ids, _, err := e.inputIDs(text)
	return ids, err
}

func (e *Embedder) inputIDs(text string) (ids, mask []int64, err error) {
	if e.text == nil {
		return nil, nil, fmt.Errorf("embed: the config has no text tower")
	}
	e.tokMu <- struct{}{} // the tokenizer's word cache is not shared safely
	defer func() { <-e.tokMu }()
	return e.tok.EncodeMask(text, e.Config.Text.ContextLength, e.Config.Text.PadID)
}

// TextEmbedding returns the text's embedding (not normalised). A text
// tower with an attention_mask input (as Hugging Face exports have) gets
// 1 over the tokens and 0 over the padding.
func (e *Embedder) TextEmbedding(text string) ([]float32, error) {
	ids, mask, err := e.inputIDs(text)
	if err != nil {
		return nil, err
	}
	t := e.Config.Text
	in := map[string]engine.Tensor{t.Input: engine.NewTensor([]int{1, len(ids)}, ids)}
	for _, p := range e.text.Inputs() {
		if p.Name == "attention_mask" {
			switch p.Type {
			case "int64":
				in[p.Name] = engine.NewTensor([]int{1, len(mask)}, mask)
			case "int32":
				m32 := make([]int32, len(mask))
				for i, v := range mask {
					m32[i] = int32(v)
				}
				in[p.Name] = engine.NewTensor([]int{1, len(mask)}, m32)
			default:
				return nil, fmt.Errorf("embed: attention_mask of type %s: want int64 or int32", p.Type)
			}
		}
	}
	return e.run(e.text, in, t.Output)
}

func (e *Embedder) run(s *engine.Session, in map[string]engine.Tensor, out string) ([]float32, error) {
	res, err := s.RunTensors(in)
	if err != nil {
		return nil, err
	}
	y, ok := res[out]
	if !ok {
		var names []string
		for n := range res {
			names = append(names, n)
		}
		return nil, fmt.Errorf("embed: the model has no output %q (outputs: %v); set \"output\" in %s", out, names, ConfigName)
	}
	v, ok := y.Float32s()
	if !ok {
		return nil, fmt.Errorf("embed: output %q is not float32", out)
	}
	return append([]float32(nil), v...), nil
}

// Cosine is the cosine similarity of a and b (0 when either is zero).
func Cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		if i >= len(b) {
			break
		}
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	if aa == 0 || bb == 0 {
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}
