package embed

import (
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
)

const testDir = "../../testdata/embed"

type refs struct {
	Images []struct {
		Name        string    `json:"name"`
		File        string    `json:"file"`
		Crop        string    `json:"crop"`
		Mode        string    `json:"mode"`
		ImageEmbeds []float32 `json:"image_embeds"`
	} `json:"images"`
	Texts []struct {
		Text       string    `json:"text"`
		IDs        []int64   `json:"ids"`
		TextEmbeds []float32 `json:"text_embeds"`
	} `json:"texts"`
}

func loadRefs(t *testing.T) refs {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testDir, "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r refs
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func readPNG(t *testing.T, path string) RGB8 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return ToRGB8(img)
}

// TestPreprocessMatchesTorchvision compares the Go resize and crop with
// torchvision's Resize(224, BICUBIC) + CenterCrop(224) on PIL images of
// several sizes and modes, level by level. PNG decoding is lossless, so
// PNG images must match exactly; JPEG decoders differ (Go's image/jpeg
// and libjpeg-turbo round their inverse DCT and colour conversion
// differently), so JPEG's difference is bounded and reported.
func TestPreprocessMatchesTorchvision(t *testing.T) {
	r := loadRefs(t)
	if len(r.Images) < 7 {
		t.Fatalf("%d reference images", len(r.Images))
	}
	for _, im := range r.Images {
		img, err := DecodeImage(filepath.Join(testDir, im.File))
		if err != nil {
			t.Fatal(err)
		}
		got := CLIPImage.ResizeCrop(ToRGB8(img))
		want := readPNG(t, filepath.Join(testDir, im.Crop))
		if got.W != want.W || got.H != want.H {
			t.Fatalf("%s: %dx%d, torchvision %dx%d", im.Name, got.W, got.H, want.W, want.H)
		}
		maxd, differ := 0, 0
		for i := range got.Pix {
			d := int(got.Pix[i]) - int(want.Pix[i])
			if d < 0 {
				d = -d
			}
			if d > 0 {
				differ++
			}
			maxd = max(maxd, d)
		}
		// In normalised units a level is 1/255/std.
		norm := float64(maxd) / 255 / float64(CLIPImage.Std[1])
		t.Logf("%-14s %-4s max difference %d levels (%.4f normalised), %d of %d values differ", im.Name, im.Mode, maxd, norm, differ, len(got.Pix))
		jpeg := strings.HasSuffix(im.File, ".jpg")
		if !jpeg && maxd != 0 {
			t.Errorf("%s: %d levels from torchvision (want 0 for a lossless image)", im.Name, maxd)
		}
		if jpeg && maxd > 4 {
			t.Errorf("%s: %d levels from torchvision after JPEG decoding", im.Name, maxd)
		}
		// Normalize is ToTensor + Normalize: check a pixel of each channel.
		px := CLIPImage.Normalize(want)
		n := want.W * want.H
		for c := 0; c < 3; c++ {
			i := (n/2)*3 + c
			x := float32(want.Pix[i]) / 255
			if w := (x - CLIPImage.Mean[c]) / CLIPImage.Std[c]; px[c*n+n/2] != w {
				t.Errorf("%s: channel %d normalised to %v, want %v", im.Name, c, px[c*n+n/2], w)
			}
		}
	}
}

func TestTokenizerMatchesHuggingFace(t *testing.T) {
	tok, err := LoadTokenizer(filepath.Join(testDir, "tokenizer.json"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(testDir, "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	unk := 0
	for _, c := range cases {
		ids, err := tok.Tokens(c.Text)
		if err != nil {
			t.Errorf("%q: %v", c.Text, err)
			continue
		}
		got := append(append([]int{tok.Start()}, ids...), tok.End())
		if !equalInts(got, c.IDs) {
			t.Errorf("%q:\n got %v\nwant %v (Hugging Face)", c.Text, got, c.IDs)
		}
		for _, id := range ids {
			if id == tok.End() {
				unk++
			}
		}
	}
	if unk == 0 {
		t.Error("no case exercised unknown characters")
	}
	// CLIP's truncation: 77 ids, the last the end token, padded with 0.
	long := cases[len(cases)-1]
	if len(long.IDs) <= 77 {
		t.Fatalf("the long case has %d ids", len(long.IDs))
	}
	enc, err := tok.Encode(long.Text, 77, 0)
	if err != nil || len(enc) != 77 || enc[76] != int64(tok.End()) || enc[75] != int64(long.IDs[75]) {
		t.Errorf("truncated: %v %v", enc, err)
	}
	short, _ := tok.Encode("a dog", 77, 0)
	if short[0] != int64(tok.Start()) || short[76] != 0 {
		t.Errorf("padded: %v", short)
	}
	if _, err := tok.Tokens("cafe\u0301"); err == nil {
		t.Error("a decomposed accent was accepted")
	}
	if _, err := tok.Tokens("\xff"); err == nil {
		t.Error("invalid UTF-8 was accepted")
	}
}

func equalInts(a, b []int) bool {
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

func maxAbs(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

// TestEmbeddingsMatchPyTorch runs the whole path, file to embedding, and
// compares with the PyTorch models on torchvision's preprocessing and
// Hugging Face's token ids.
func TestEmbeddingsMatchPyTorch(t *testing.T) {
	r := loadRefs(t)
	cfg, err := LoadConfig(testDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"go", ""} {
		e, err := Open(cfg, engine.Options{Device: dev})
		if err != nil {
			if dev == "" && engine.IsNoDevice(err) {
				t.Logf("no OpenCL device: %v", err)
				continue
			}
			t.Fatal(err)
		}
		for _, im := range r.Images {
			img, err := DecodeImage(filepath.Join(testDir, im.File))
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.Image(img)
			if err != nil {
				t.Fatal(err)
			}
			d := maxAbs(got, im.ImageEmbeds)
			cos := Cosine(got, im.ImageEmbeds)
			t.Logf("device %q image %-14s max |diff| %.2e, cosine %.7f", dev, im.Name, d, cos)
			tol := 1e-4
			if strings.HasSuffix(im.File, ".jpg") {
				tol = 2e-3 // decoder differences, see TestPreprocessMatchesTorchvision
			}
			if d > tol || cos < 0.999 {
				t.Errorf("device %q image %s: max |diff| %.2e from PyTorch, cosine %.6f", dev, im.Name, d, cos)
			}
		}
		for _, tx := range r.Texts {
			ids, err := e.InputIDs(tx.Text)
			if err != nil {
				t.Fatal(err)
			}
			for i := range ids {
				if ids[i] != tx.IDs[i] {
					t.Fatalf("%q: ids %v, reference %v", tx.Text, ids, tx.IDs)
				}
			}
			got, err := e.TextEmbedding(tx.Text)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxAbs(got, tx.TextEmbeds); d > 1e-4 {
				t.Errorf("device %q text %q: max |diff| %.2e from PyTorch", dev, tx.Text, d)
			}
		}
		e.Close()
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"empty":   `{}`,
		"nomodel": `{"vision": {}}`,
		"badcrop": `{"vision": {"model": "m.onnx", "resize": 100, "crop": 200}}`,
		"badstd":  `{"vision": {"model": "m.onnx", "mean": [0,0,0], "std": [1,0,1]}}`,
		"badctx":  `{"text": {"model": "m.onnx", "context_length": 1}}`,
		"notjson": `{`,
	} {
		p := filepath.Join(dir, name+".json")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := LoadConfig(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing file was accepted")
	}
	if _, err := DecodeImage(filepath.Join(testDir, "tokenizer.json")); err == nil {
		t.Error("a JSON file decoded as an image")
	}
}

// TestAttentionMask: a text tower with an attention_mask input gets ones
// over the start token, the text and the end token and zeros over the
// padding, even when the padding id is the end token's (Hugging Face's
// CLIP pads with <|endoftext|>).
func TestAttentionMask(t *testing.T) {
	cfg, err := LoadConfig(filepath.Join(testDir, "masked.json"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := Open(cfg, engine.Options{Device: "go"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, text := range []string{"a photo of a dog", ""} {
		ids, err := e.Tokenizer().Tokens(text)
		if err != nil {
			t.Fatal(err)
		}
		n := len(ids) + 2
		sum := e.Tokenizer().Start() + e.Tokenizer().End()
		for _, id := range ids {
			sum += id
		}
		got, err := e.TextEmbedding(text)
		if err != nil {
			t.Fatal(err)
		}
		if int(got[0]) != n || int(got[1]) != sum {
			t.Errorf("%q: the model saw %v tokens summing to %v; want %d and %d", text, got[0], got[1], n, sum)
		}
	}
}
