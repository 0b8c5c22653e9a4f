// Command tleval scores the default model's in-context task sets with
// tlite's engine: key->value recall at fixed distances, synthetic 4-way
// multiple choice, and held-out continuation choice (the JSONL files that
// models/train/train_default.py prepare writes to WORK/evals and export
// copies to testdata/default/evals).
//
// Each line of a set is {"context", "candidates", "answer", ...}. An item
// is answered by the candidate with the highest log-likelihood after the
// context (which gets a BOS): the context is run once into the in-place KV
// cache, then each candidate is run in the slots after it and freed again,
// so a 2000-token context costs one prefill, not one per candidate. Chance
// is 1/len(candidates).
//
// Usage:
//
//	go run ./models/train/tleval --model testdata/default/model.onnx testdata/default/evals/*.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/elastic"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/tokenizer"
	"github.com/tlite/tlite/graph"
)

// item is one line of a task set.
type item struct {
	Task       string   `json:"task"`
	Distance   int      `json:"distance,omitempty"`
	Context    string   `json:"context"`
	Candidates []string `json:"candidates"`
	Answer     int      `json:"answer"`
}

// setResult is the score of one file.
type setResult struct {
	File     string  `json:"file"`
	Task     string  `json:"task"`
	Distance int     `json:"distance,omitempty"`
	Items    int     `json:"items"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"`
	Chance   float64 `json:"chance"`
	// MeanProb is the mean probability the model gives the right answer,
	// normalised over the candidates.
	MeanProb float64 `json:"mean_answer_prob"`
	// MeanTokens is the mean context length in tokens, BOS included.
	MeanTokens float64 `json:"mean_context_tokens"`
	Seconds    float64 `json:"seconds"`
	// Picks is the chosen candidate of each item, in file order, so that
	// two models or two wordings of the same items can be paired.
	Picks []int `json:"picks"`
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "tleval:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tleval", flag.ContinueOnError)
	model := fs.String("model", "testdata/default/model.onnx", "the decoder's ONNX file")
	tokPath := fs.String("tokenizer", "", "tokenizer.json (default: the one next to the model)")
	ctx := fs.Int("ctx", 2048, "context length the cache is sized for")
	device := fs.String("device", "", `device ("" = OpenCL, "go" = pure Go)`)
	limit := fs.Int("n", 0, "score at most this many items per file (0: all)")
	asJSON := fs.Bool("json", false, "write the results as JSON")
	level := fs.Int("level", 0, "elastic model: score the sub-model of this level in percent (elastic.json beside the model; 0: not elastic)")
	loraDir := fs.String("lora", "", "elastic model: a folder of LoRA adapters (lora/level-XX.bin) to attach with --level (default: none)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tleval [--model m.onnx] [--tokenizer t.json] [--ctx 2048] [--n N] [--level P [--lora DIR]] [--json] set.jsonl...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("give at least one task set (.jsonl)")
	}
	if *tokPath == "" {
		*tokPath = filepath.Join(filepath.Dir(*model), "tokenizer.json")
	}
	tok, err := tokenizer.Load(*tokPath)
	if err != nil {
		return err
	}
	st, err := open(*model, *device, *ctx, *level != 0)
	if err != nil {
		return err
	}
	defer st.Session().Close()
	if *level != 0 {
		spec, err := elastic.Load(*model)
		if err != nil {
			return err
		}
		em, err := elastic.Bind(st.Session(), spec)
		if err != nil {
			return err
		}
		if *loraDir != "" {
			sets, err := elastic.ReadLoRADir(*loraDir, spec)
			if err != nil {
				return err
			}
			if len(sets) == 0 {
				return fmt.Errorf("--lora %s: no level-XX.bin file in it", *loraDir)
			}
			if _, err := em.AttachLoRA(sets); err != nil {
				return err
			}
		}
		if err := em.SetLevel(*level); err != nil {
			return err
		}
	} else if *loraDir != "" {
		return fmt.Errorf("--lora needs --level")
	}

	var results []setResult
	for _, path := range fs.Args() {
		items, err := readSet(path)
		if err != nil {
			return err
		}
		if *limit > 0 && len(items) > *limit {
			items = items[:*limit]
		}
		r, err := scoreSet(st, tok, path, items)
		if err != nil {
			return err
		}
		results = append(results, r)
		if !*asJSON {
			fmt.Fprintf(stdout, "%-40s %-12s dist %4d  %3d/%3d = %.3f (chance %.3f)  p(answer) %.3f  ctx %.0f tok  %.1f s\n",
				filepath.Base(r.File), r.Task, r.Distance, r.Correct, r.Items, r.Accuracy, r.Chance, r.MeanProb, r.MeanTokens, r.Seconds)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	return nil
}

// open opens the model with an in-place cache of ctx slots.
func open(path, device string, ctx int, bindsElastic bool) (*kv.State, error) {
	m, err := graph.Load(path)
	if err != nil {
		return nil, err
	}
	maxima, err := generate.ContextMaxima(m, ctx, nil)
	m.Close()
	if err != nil {
		return nil, err
	}
	// --level binds each product by its weight (elastic.Bind), which needs
	// the products apart.
	return kv.Open(path, engine.Options{Device: device, Max: maxima, NoJoin: bindsElastic}, kv.Config{MaxContext: ctx})
}

func readSet(path string) ([]item, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var items []item
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var it item
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if len(it.Candidates) < 2 || it.Answer < 0 || it.Answer >= len(it.Candidates) {
			return nil, fmt.Errorf("%s:%d: %d candidates with answer %d; want at least 2 and an answer among them",
				path, line, len(it.Candidates), it.Answer)
		}
		items = append(items, it)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%s: no items", path)
	}
	return items, nil
}

func scoreSet(st *kv.State, tok *tokenizer.Tokenizer, path string, items []item) (setResult, error) {
	t0 := time.Now()
	r := setResult{File: path, Task: items[0].Task, Distance: items[0].Distance, Items: len(items)}
	var probSum, chanceSum, tokSum float64
	for i, it := range items {
		lls, n, err := score(st, tok, it)
		if err != nil {
			return r, fmt.Errorf("%s item %d: %w", path, i+1, err)
		}
		best := 0
		for c := range lls {
			if lls[c] > lls[best] {
				best = c
			}
		}
		if best == it.Answer {
			r.Correct++
		}
		r.Picks = append(r.Picks, best)
		probSum += softmaxAt(lls, it.Answer)
		chanceSum += 1 / float64(len(lls))
		tokSum += float64(n)
	}
	k := float64(len(items))
	r.Accuracy, r.Chance, r.MeanProb, r.MeanTokens = float64(r.Correct)/k, chanceSum/k, probSum/k, tokSum/k
	r.Seconds = time.Since(t0).Seconds()
	return r, nil
}

// score returns each candidate's log-likelihood after the item's context
// and the context's length in tokens.
func score(st *kv.State, tok *tokenizer.Tokenizer, it item) ([]float64, int, error) {
	ids, err := tok.Encode(it.Context, tokenizer.EncodeOptions{AddBOS: true})
	if err != nil {
		return nil, 0, err
	}
	n := len(ids)
	st.Reset()
	logits, err := st.Forward(ids, seq(0, n), seq(0, n))
	if err != nil {
		return nil, n, fmt.Errorf("context of %d tokens: %w", n, err)
	}
	vocab := st.Vocab()
	last := append([]float32(nil), logits[(n-1)*vocab:]...)
	lls := make([]float64, len(it.Candidates))
	for c, cand := range it.Candidates {
		cids, err := tok.Encode(cand, tokenizer.EncodeOptions{})
		if err != nil {
			return nil, n, err
		}
		if len(cids) == 0 {
			return nil, n, fmt.Errorf("candidate %d %q has no tokens", c, cand)
		}
		ll := generate.LogProb(last, cids[0])
		if len(cids) > 1 {
			// The candidate's tokens but its last go into the slots after
			// the context; each row predicts the next candidate token.
			m := len(cids) - 1
			rows, err := st.Forward(cids[:m], seq(n, m), seq(n, m))
			if err != nil {
				return nil, n, fmt.Errorf("candidate %d after %d tokens: %w", c, n, err)
			}
			for j := 0; j < m; j++ {
				ll += generate.LogProb(rows[j*vocab:(j+1)*vocab], cids[j+1])
			}
			if err := st.Free(seq(n, m)...); err != nil {
				return nil, n, err
			}
		}
		lls[c] = ll
	}
	return lls, n, nil
}

func seq(from, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = from + i
	}
	return s
}

// softmaxAt is softmax(v)[k].
func softmaxAt(v []float64, k int) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	var sum float64
	for _, x := range v {
		sum += math.Exp(x - m)
	}
	return math.Exp(v[k]-m) / sum
}
