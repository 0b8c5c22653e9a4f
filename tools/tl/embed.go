package main

import (
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tlite/tlite/engine/embed"
)

func init() {
	register(command{"embed", "CLIP/ViT embeddings of images and texts, and their cosine similarities", runEmbed})
}

// embedResult is what embed --json writes.
type embedResult struct {
	Config     string       `json:"config"`
	Device     *deviceJSON  `json:"device,omitempty"`
	Images     []embedItem  `json:"images"`
	Texts      []embedItem  `json:"texts"`
	Similarity [][]float64  `json:"similarity,omitempty"` // rows: images, columns: texts
	LoadMs     float64      `json:"load_ms"`
	Timings    embedTimings `json:"timings"`
}

type embedItem struct {
	Input     string    `json:"input"`
	Tokens    []int64   `json:"input_ids,omitempty"`
	Embedding []float32 `json:"embedding"`
	Norm      float64   `json:"norm"`
	Ms        float64   `json:"ms"`
}

type embedTimings struct {
	FirstImageMs float64 `json:"first_image_ms,omitempty"` // includes kernel builds on OpenCL
	FirstTextMs  float64 `json:"first_text_ms,omitempty"`
}

func runEmbed(args []string) error {
	fs := flag.NewFlagSet("embed", flag.ContinueOnError)
	model := fs.String("model", "", "embed.json, the folder holding it, or a model beside it")
	var images, texts multiFlag
	fs.Var(&images, "image", "an image file, PNG or JPEG (repeat)")
	fs.Var(&texts, "text", "a text (repeat)")
	sim := fs.Bool("similarity", false, "print the cosine similarity of every image with every text")
	asJSON := fs.Bool("json", false, "write the embeddings (and similarities) as JSON")
	sf := addSessionFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: tl embed --model DIR|embed.json --image a.jpg ... --text "a photo of a dog" ... [--similarity] [--json] [--device d]`)
		fmt.Fprintln(fs.Output(), "embed.json names the vision and text towers, the image preprocessing and the tokenizer (go doc ./engine/embed).")
		fs.PrintDefaults()
	}
	valued := map[string]bool{"model": true, "image": true, "text": true}
	for k := range sessionValued {
		valued[k] = true
	}
	flags, pos := splitArgs(args, valued)
	if err := fs.Parse(flags); err != nil {
		return err
	}
	if *model == "" && len(pos) == 1 {
		*model = pos[0]
	} else if len(pos) > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments %q: give images with --image and texts with --text", pos)
	}
	if *model == "" {
		fs.Usage()
		return fmt.Errorf("give the models with --model DIR (a folder with %s)", embed.ConfigName)
	}
	if len(images)+len(texts) == 0 {
		return fmt.Errorf("nothing to embed: give --image FILE and/or --text STRING")
	}
	if *sim && (len(images) == 0 || len(texts) == 0) {
		return fmt.Errorf("--similarity compares images with texts: give at least one --image and one --text")
	}
	opts, err := sf.options()
	if err != nil {
		return err
	}
	cfg, err := embed.LoadConfig(*model)
	if err != nil {
		return err
	}
	if len(images) > 0 && cfg.Vision == nil {
		return fmt.Errorf("%s has no vision tower: --image cannot be embedded", *model)
	}
	if len(texts) > 0 && cfg.Text == nil {
		return fmt.Errorf("%s has no text tower: --text cannot be embedded", *model)
	}
	t0 := time.Now()
	e, err := embed.Open(cfg, opts)
	if err != nil {
		return cliError(err)
	}
	defer e.Close()
	res := embedResult{Config: *model, LoadMs: ms(time.Since(t0)), Images: []embedItem{}, Texts: []embedItem{}}
	if s := e.Vision(); s != nil {
		d := deviceOf(s)
		res.Device = &d
	} else if s := e.Text(); s != nil {
		d := deviceOf(s)
		res.Device = &d
	}
	for i, path := range images {
		t := time.Now()
		img, err := embed.DecodeImage(path)
		if err != nil {
			return err
		}
		v, err := e.Image(img)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		item := embedItem{Input: path, Embedding: v, Norm: norm(v), Ms: ms(time.Since(t))}
		if i == 0 {
			res.Timings.FirstImageMs = item.Ms
		}
		res.Images = append(res.Images, item)
	}
	for i, text := range texts {
		t := time.Now()
		ids, err := e.InputIDs(text)
		if err != nil {
			return fmt.Errorf("--text %q: %w", text, err)
		}
		v, err := e.TextEmbedding(text)
		if err != nil {
			return fmt.Errorf("--text %q: %w", text, err)
		}
		item := embedItem{Input: text, Tokens: trimPad(ids, int64(cfg.Text.PadID)), Embedding: v, Norm: norm(v), Ms: ms(time.Since(t))}
		if i == 0 {
			res.Timings.FirstTextMs = item.Ms
		}
		res.Texts = append(res.Texts, item)
	}
	if *sim {
		for _, im := range res.Images {
			row := make([]float64, len(res.Texts))
			for j, tx := range res.Texts {
				row[j] = embed.Cosine(im.Embedding, tx.Embedding)
			}
			res.Similarity = append(res.Similarity, row)
		}
	}
	if *asJSON {
		return writeJSON(stdout, res)
	}
	t := newTable("input", "kind", "dims", "norm", "first values", "ms").alignRight(2, 3, 5)
	for _, it := range res.Images {
		t.add(it.Input, "image", len(it.Embedding), fmt.Sprintf("%.4f", it.Norm), firstValues(it.Embedding), fmt.Sprintf("%.1f", it.Ms))
	}
	for _, it := range res.Texts {
		t.add(fmt.Sprintf("%q", it.Input), fmt.Sprintf("text (%d tokens)", len(it.Tokens)), len(it.Embedding), fmt.Sprintf("%.4f", it.Norm), firstValues(it.Embedding), fmt.Sprintf("%.1f", it.Ms))
	}
	t.write(stdout)
	if *sim {
		head := []string{"cosine"}
		for _, tx := range res.Texts {
			head = append(head, fmt.Sprintf("%q", tx.Input))
		}
		st := newTable(head...)
		for j := range res.Texts {
			st.alignRight(j + 1)
		}
		for i, im := range res.Images {
			cells := []any{im.Input}
			for _, c := range res.Similarity[i] {
				cells = append(cells, fmt.Sprintf("%.4f", c))
			}
			st.add(cells...)
		}
		fmt.Fprintln(stdout)
		st.write(stdout)
	}
	dev := "?"
	if res.Device != nil {
		dev = res.Device.Backend + " " + res.Device.Name
	}
	fmt.Fprintf(stdout, "\non %s: load %.0f ms; first image %.1f ms and first text %.1f ms include kernel builds\n", dev, res.LoadMs, res.Timings.FirstImageMs, res.Timings.FirstTextMs)
	return nil
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func firstValues(v []float32) string {
	var parts []string
	for i := 0; i < len(v) && i < 4; i++ {
		parts = append(parts, fmt.Sprintf("%.4g", v[i]))
	}
	if len(v) > 4 {
		parts = append(parts, "…")
	}
	return strings.Join(parts, " ")
}

// trimPad drops the padding after the end token.
func trimPad(ids []int64, pad int64) []int64 {
	n := len(ids)
	for n > 0 && ids[n-1] == pad {
		n--
	}
	return append([]int64(nil), ids[:n]...)
}
