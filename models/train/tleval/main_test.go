package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/tokenizer"
)

const defaultDir = "../../../testdata/default"

// TestScoreMatchesOnePass: a candidate's log-likelihood from the context in
// the cache plus the candidate in the slots after it (freed again) equals
// the one computed from a single pass over context + candidate, for every
// candidate in turn, so freeing a candidate leaves nothing behind.
func TestScoreMatchesOnePass(t *testing.T) {
	model := filepath.Join(defaultDir, "model.onnx")
	tok, err := tokenizer.Load(filepath.Join(defaultDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := open(model, "", 128, false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Session().Close()
	it := item{Context: "Lucy keeps a red lamp in the attic.\nQuestion: What colour is the lamp?\nAnswer:",
		Candidates: []string{" red", " blue and green", " (C) white", " a very long answer, with commas."}}
	lls, n, err := score(st, tok, it)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := generate.OpenExplicit(model, engine.Options{}, 128, generate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	ctx, _ := tok.Encode(it.Context, tokenizer.EncodeOptions{AddBOS: true})
	if n != len(ctx) {
		t.Errorf("context of %d tokens, want %d", n, len(ctx))
	}
	for c, cand := range it.Candidates {
		cids, _ := tok.Encode(cand, tokenizer.EncodeOptions{})
		all := append(append([]int(nil), ctx...), cids...)
		ref.Reset()
		logits, err := ref.Step(all, seq(0, len(all)))
		if err != nil {
			t.Fatal(err)
		}
		v := ref.Vocab()
		want := 0.0
		for j := len(ctx); j < len(all); j++ {
			want += generate.LogProb(logits[(j-1)*v:j*v], all[j])
		}
		if math.Abs(lls[c]-want) > 1e-3*math.Max(1, math.Abs(want)) {
			t.Errorf("candidate %d %q: log-likelihood %.5f, one pass %.5f", c, cand, lls[c], want)
		}
	}
}

// TestRunScoresASet runs the command on a small set whose answers are the
// model's own choices and on broken sets.
func TestRunScoresASet(t *testing.T) {
	dir := t.TempDir()
	set := filepath.Join(dir, "set.jsonl")
	line := `{"task":"mc","context":"The cat sat on the","candidates":[" mat"," xylophone zebra"],"answer":0}` + "\n"
	if err := os.WriteFile(set, []byte(line+line), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"--model", filepath.Join(defaultDir, "model.onnx"), "--ctx", "128", "--json", set}, &out); err != nil {
		t.Fatal(err)
	}
	var res []setResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v in %q", err, out.String())
	}
	if len(res) != 1 || res[0].Items != 2 || res[0].Chance != 0.5 || res[0].Correct%2 != 0 ||
		!(res[0].MeanProb > 0 && res[0].MeanProb <= 1) {
		t.Errorf("result %+v", res)
	}
	// The two identical items get the same pick, and the picks agree with
	// the count of correct ones (answer 0).
	if len(res) == 1 && (len(res[0].Picks) != 2 || res[0].Picks[0] != res[0].Picks[1] ||
		(res[0].Picks[0] == 0) != (res[0].Correct == 2)) {
		t.Errorf("picks %v with %d correct", res[0].Picks, res[0].Correct)
	}
	for name, body := range map[string]string{
		"empty.jsonl":  "\n",
		"answer.jsonl": `{"context":"a","candidates":[" b"," c"],"answer":2}`,
		"one.jsonl":    `{"context":"a","candidates":[" b"],"answer":0}`,
		"json.jsonl":   `{"context":`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := run([]string{"--model", filepath.Join(defaultDir, "model.onnx"), "--ctx", "128", p}, &out); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}
