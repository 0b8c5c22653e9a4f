package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/elastic/importance"
	"github.com/tlite/tlite/engine/npy"
	"github.com/tlite/tlite/engine/tokenizer"
	"github.com/tlite/tlite/graph"
)

const importanceUsage = "usage: tl elastic importance --model M --text FILE | --tokens FILE.npy --out FILE [--layers] [--seq 256] [--windows 25] [--batch 1] [--head-dim N] [--device go]"

// elasticImportance computes the forward-only importance proxy of a
// llama-style ONNX decoder with tlite (package engine/elastic/importance)
// and writes the scores for elastic.py build --importance-from.
func elasticImportance(args []string) error {
	fs := flag.NewFlagSet("elastic importance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, importanceUsage)
		fmt.Fprintln(stderr, "Scores heads and neurons by mean |input of the O / down product| x the norm of its weight row,")
		fmt.Fprintln(stderr, "forward only, on calibration tokens run through tlite; elastic.py build --importance-from FILE uses them.")
		fs.PrintDefaults()
	}
	model := fs.String("model", "", "the model (model.onnx or its folder) as exported, fp32")
	text := fs.String("text", "", "calibration text, tokenized with tokenizer.json beside the model and cut into windows")
	toks := fs.String("tokens", "", "calibration tokens as .npy: [windows, seq] integer windows, or a 1-D stream cut into --seq windows")
	out := fs.String("out", "", "where to write the scores (JSON)")
	seq := fs.Int("seq", 256, "tokens per window (a 2-D --tokens array sets its own)")
	windows := fs.Int("windows", 25, "at most this many windows (0: all)")
	batch := fs.Int("batch", 1, "windows per run")
	headDim := fs.Int("head-dim", 0, "attention head size (default: config.json's head_dim, or elastic.json's)")
	layers := fs.Bool("layers", false, "also measure layer importance by removal through tlite (one more pass over the windows per layer); elastic.py build then uses it")
	device := fs.String("device", "", `backend: "" (OpenCL), "go" (pure-Go CPU) or an OpenCL device; env TLITE_DEVICE`)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("importance: unexpected argument %q\n%s", fs.Arg(0), importanceUsage)
	}
	if *model == "" || *out == "" || (*text == "") == (*toks == "") {
		return fmt.Errorf("importance: give --model, --out and one of --text or --tokens\n%s", importanceUsage)
	}
	if *batch < 1 || *windows < 0 {
		return fmt.Errorf("importance: --batch %d, --windows %d: want --batch ≥ 1 and --windows ≥ 0", *batch, *windows)
	}
	path := modelFile(*model)
	if !fileExists(path) {
		return fmt.Errorf("importance: no model file %s", path)
	}
	dir := filepath.Dir(path)
	hd := *headDim
	if hd == 0 {
		var err error
		if hd, err = headDimOf(dir); err != nil {
			return err
		}
	}
	var ws [][]int
	var err error
	if *toks != "" {
		ws, err = npyWindows(*toks, *seq, *windows)
	} else {
		ws, err = textWindows(*text, dir, *seq, *windows)
	}
	if err != nil {
		return fmt.Errorf("importance: %w", err)
	}
	m, err := graph.Load(path)
	if err != nil {
		return err
	}
	defer m.Close()
	dev := *device
	if dev == "" {
		dev = os.Getenv("TLITE_DEVICE")
	}
	start := time.Now()
	opts := importance.Options{Engine: engine.Options{Device: dev}, HeadDim: hd, Batch: *batch, Seq: len(ws[0])}
	c, err := importance.New(m, opts)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer c.Close()
	for i := 0; i < len(ws); i += *batch {
		if err := c.Add(ws[i:min(i+*batch, len(ws))]); err != nil {
			return fmt.Errorf("importance: window %d: %w", i, err)
		}
	}
	s, err := c.Scores()
	if err != nil {
		return err
	}
	if *layers {
		base, err := c.Loss()
		if err != nil {
			return err
		}
		s.LayerRemoval, err = importance.LayerRemoval(func() (*graph.Model, error) { return graph.Load(path) }, opts, s.NLayers, ws, base)
		if err != nil {
			return err
		}
	}
	s.Source = path
	if err := importance.Write(*out, s); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "importance: %s, %d layers, %d windows x %d = %d tokens, calibration loss %.4f (tlite, %s), %.1f s -> %s\n",
		importance.Method, s.NLayers, s.Windows, len(ws[0]), s.Tokens, s.Loss, s.Backend, time.Since(start).Seconds(), *out)
	if s.LayerRemoval != nil {
		fmt.Fprintf(stdout, "importance: loss increase with each layer removed %.4f\n", s.LayerRemoval)
	}
	return nil
}

// headDimOf reads the head size from config.json (head_dim, else
// hidden_size / num_heads) or elastic.json (head_dim) in dir.
func headDimOf(dir string) (int, error) {
	var cfg struct {
		HeadDim  int `json:"head_dim"`
		Hidden   int `json:"hidden_size"`
		NumHeads int `json:"num_heads"`
	}
	for _, f := range []string{"config.json", "elastic.json"} {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return 0, fmt.Errorf("importance: %s: %w", filepath.Join(dir, f), err)
		}
		if cfg.HeadDim > 0 {
			return cfg.HeadDim, nil
		}
		if cfg.Hidden > 0 && cfg.NumHeads > 0 && cfg.Hidden%cfg.NumHeads == 0 {
			return cfg.Hidden / cfg.NumHeads, nil
		}
	}
	return 0, fmt.Errorf("importance: no head size in %s/config.json or elastic.json; give --head-dim", dir)
}

// npyWindows reads calibration windows from an integer .npy: a 2-D array
// is taken as windows (its rows), a 1-D one as a stream cut into seq-token
// windows; at most max windows.
func npyWindows(path string, seq, max int) ([][]int, error) {
	t, err := npy.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var flat []int
	switch d := t.Data().(type) {
	case []int64:
		for _, v := range d {
			flat = append(flat, int(v))
		}
	case []int32:
		for _, v := range d {
			flat = append(flat, int(v))
		}
	case []uint16:
		for _, v := range d {
			flat = append(flat, int(v))
		}
	default:
		return nil, fmt.Errorf("%s: %s tokens; want an integer array", path, t.Dtype())
	}
	switch sh := t.Shape(); len(sh) {
	case 1:
	case 2:
		seq = sh[1]
	default:
		return nil, fmt.Errorf("%s: shape %v; want [windows, seq] or a 1-D stream", path, sh)
	}
	for _, v := range flat {
		if v < 0 {
			return nil, fmt.Errorf("%s: negative token id %d", path, v)
		}
	}
	return importance.Windows(flat, seq, max)
}

// textWindows tokenizes a text file with the model's tokenizer.json and
// cuts the stream into windows.
func textWindows(path, dir string, seq, max int) ([][]int, error) {
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("--text needs the model's tokenizer: %w", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ids, err := tok.Encode(string(raw), tokenizer.EncodeOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return importance.Windows(ids, seq, max)
}
