package llms

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/tokenizer"
)

var allPolicies = []QualityPolicy{PolicyFP, PolicyINT8, PolicyINT4, PolicyINT2, PolicyLLMS, PolicyLLMSRatio, PolicyRandom, PolicyReversed,
	PolicyRandomRatio, PolicyReversedRatio, PolicyPeak, PolicyPeakRatio}

// TestQualityControls on the default model: the uncompressed policy gives
// the plain forward's NLL, the LLMS, random and reversed policies store
// the same bytes at a mean ratio of 50%, and static INT2 is the smallest.
func TestQualityControls(t *testing.T) {
	st := openDefault(t, 96)
	toks := heldoutTokens(t, 120)
	res, byPos, err := Quality(st, toks, 64, 16, 1, 16, []QualityPolicy{PolicyFP, PolicyINT8, PolicyINT2, PolicyLLMS, PolicyRandom, PolicyReversed,
		PolicyLLMSRatio, PolicyRandomRatio, PolicyReversedRatio, PolicyPeak, PolicyPeakRatio}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("density by position tenth: %.4f", byPos)
	if byPos[0] <= 0 {
		t.Errorf("density of the first tenth %g", byPos[0])
	}
	by := map[QualityPolicy]QualityResult{}
	for _, r := range res {
		by[r.Policy] = r
		t.Logf("%-18s nll %.4f ppl %.2f bytes %d bits %.2f %v", r.Policy, r.NLL, r.PPL, r.Bytes, r.Bits, r.Levels)
	}
	// Plain forward of the whole window: the continuation's NLL.
	st.Reset()
	logits, err := st.Forward(toks[:80], seq(80), seq(80))
	if err != nil {
		t.Fatal(err)
	}
	V := st.Vocab()
	var nll float64
	for r := 64; r < 79; r++ {
		nll -= generate.LogProb(logits[r*V:(r+1)*V], toks[r+1])
	}
	nll /= 15
	if d := math.Abs(by[PolicyFP].NLL - nll); d > 1e-4 {
		t.Errorf("fp32 policy NLL %.6f, plain forward %.6f", by[PolicyFP].NLL, nll)
	}
	if by[PolicyLLMS].Bytes != by[PolicyRandom].Bytes || by[PolicyLLMS].Bytes != by[PolicyReversed].Bytes {
		t.Errorf("controls differ in bytes: llms %d random %d reversed %d", by[PolicyLLMS].Bytes, by[PolicyRandom].Bytes, by[PolicyReversed].Bytes)
	}
	if by[PolicyPeak].Bytes != by[PolicyLLMS].Bytes || by[PolicyPeakRatio].Bytes != by[PolicyLLMSRatio].Bytes {
		t.Errorf("peak placements differ in bytes from LLMS's: %d/%d against %d/%d", by[PolicyPeak].Bytes, by[PolicyPeakRatio].Bytes, by[PolicyLLMS].Bytes, by[PolicyLLMSRatio].Bytes)
	}
	if r := by[PolicyLLMSRatio].Bytes; by[PolicyRandomRatio].Bytes != r || by[PolicyReversedRatio].Bytes != r {
		t.Errorf("ratio-weight controls differ in bytes: llms %d random %d reversed %d", r, by[PolicyRandomRatio].Bytes, by[PolicyReversedRatio].Bytes)
	}
	if !(by[PolicyINT2].Bytes < by[PolicyLLMS].Bytes && by[PolicyLLMS].Bytes < by[PolicyINT8].Bytes && by[PolicyINT8].Bytes < by[PolicyFP].Bytes) {
		t.Errorf("bytes not ordered int2 < llms < int8 < fp32")
	}
}

// TestQualityErrorBars: over three windows the paired difference against
// fp32 is the difference of the means (equal tokens a window), fp32's own
// is zero, and the standard errors are those of the per-window values.
func TestQualityErrorBars(t *testing.T) {
	st := openDefault(t, 96)
	toks := heldoutTokens(t, 3*80)
	res, _, err := Quality(st, toks, 64, 16, 3, 16, []QualityPolicy{PolicyINT2, PolicyFP}, 1)
	if err != nil {
		t.Fatal(err)
	}
	i2, fp := res[0], res[1]
	if fp.DeltaFP != 0 || fp.DeltaFPStdErr != 0 {
		t.Errorf("fp32 against itself: %g ± %g", fp.DeltaFP, fp.DeltaFPStdErr)
	}
	// PairedNLL against fp32 is DeltaFP.
	if d, se, err := PairedNLL(i2, fp); err != nil || math.Abs(d-i2.DeltaFP) > 1e-12 || math.Abs(se-i2.DeltaFPStdErr) > 1e-12 {
		t.Errorf("PairedNLL(int2, fp32) = %g ± %g (%v); DeltaFP %g ± %g", d, se, err, i2.DeltaFP, i2.DeltaFPStdErr)
	}
	if _, _, err := PairedNLL(i2, QualityResult{}); err == nil {
		t.Error("pairing 3 windows with none: no error")
	}
	if d := i2.DeltaFP - (i2.NLL - fp.NLL); math.Abs(d) > 1e-9 {
		t.Errorf("int2 delta %g; the means differ by %g", i2.DeltaFP, i2.NLL-fp.NLL)
	}
	if !(fp.NLLStdErr > 0 && i2.NLLStdErr > 0 && i2.DeltaFPStdErr > 0) {
		t.Errorf("standard errors over 3 windows of different text: fp32 %g, int2 %g, delta %g", fp.NLLStdErr, i2.NLLStdErr, i2.DeltaFPStdErr)
	}
	t.Logf("fp32 %.4f ± %.4f, int2 %.4f ± %.4f, delta %.4f ± %.4f", fp.NLL, fp.NLLStdErr, i2.NLL, i2.NLLStdErr, i2.DeltaFP, i2.DeltaFPStdErr)
}

func TestMeanStdErr(t *testing.T) {
	for _, tc := range []struct {
		x        []float64
		mean, se float64
	}{
		{nil, 0, 0},
		{[]float64{3}, 3, 0},
		{[]float64{1, 3}, 2, 1}, // sd √2, /√2
		{[]float64{2, 4, 4, 4, 5, 5, 7, 9}, 5, 0.7559}, // sd 2.138, /√8
	} {
		m, se := meanStdErr(tc.x)
		if math.Abs(m-tc.mean) > 1e-12 || math.Abs(se-tc.se) > 1e-4 {
			t.Errorf("meanStdErr(%v) = %g, %g; want %g, %g", tc.x, m, se, tc.mean, tc.se)
		}
	}
}

// BenchmarkQuality is the compression-efficacy experiment on the long-
// context model: LLMS_QCTX context tokens (512), LLMS_QCONT continuation
// tokens (128), LLMS_QWIN windows (4) of held-out text.
func BenchmarkQuality(b *testing.B) {
	env := func(k string, d int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
			return v
		}
		return d
	}
	ctx, cont, win := env("LLMS_QCTX", 512), env("LLMS_QCONT", 128), env("LLMS_QWIN", 4)
	st, err := kv.Open("../../testdata/longctx/model.onnx", engine.Options{}, kv.Config{MaxContext: ctx + cont, AttentionStats: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Session().Close()
	corpus := longctxCorpus(b)
	for i := 0; i < b.N; i++ {
		res, byPos, err := Quality(st, corpus, ctx, cont, win, 16, allPolicies, 1)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("density by position tenth: %.4f", byPos)
		by := map[QualityPolicy]QualityResult{}
		for _, r := range res {
			by[r.Policy] = r
			b.Logf("%-18s nll %.4f ± %.4f (vs fp32 %+.4f ± %.4f) ppl %.3f bits/value %.2f levels %v",
				r.Policy, r.NLL, r.NLLStdErr, r.DeltaFP, r.DeltaFPStdErr, r.PPL, r.Bits, r.Levels)
			b.ReportMetric(r.PPL, string(r.Policy)+"-ppl")
		}
		// Each placement against its control, window by window.
		for _, p := range allPolicies {
			if vs, ok := recallControl[p]; ok {
				d, se, err := PairedNLL(by[p], by[vs])
				if err != nil {
					b.Fatal(err)
				}
				b.Logf("%-18s vs %-22s Δ NLL %+.4f ± %.4f (paired over %d windows)", p, vs, d, se, win)
			}
		}
	}
}

// TestRecallScoring: with uncompressed storage, Recall's answer is the
// candidate a plain forward of context+candidate scores highest.
func TestRecallScoring(t *testing.T) {
	st := openDefault(t, 64)
	toks := heldoutTokens(t, 60)
	it := RecallItem{Context: toks[:40], Candidates: [][]int{toks[40:43], toks[50:53], {5, 6, 7}}, Answer: 0}
	res, err := Recall(st, []RecallItem{it}, 16, []QualityPolicy{PolicyFP, PolicyINT2}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.N != 1 || len(res.Correct[PolicyFP]) != 1 || len(res.Correct[PolicyINT2]) != 1 {
		t.Fatalf("one item: %+v", res)
	}
	acc := map[QualityPolicy]float64{PolicyFP: res.Accuracy(PolicyFP), PolicyINT2: res.Accuracy(PolicyINT2)}
	best, bestScore := -1, math.Inf(-1)
	for ci, c := range it.Candidates {
		all := append(append([]int(nil), it.Context...), c...)
		st.Reset()
		logits, err := st.Forward(all, seq(len(all)), seq(len(all)))
		if err != nil {
			t.Fatal(err)
		}
		V := st.Vocab()
		s := 0.0
		for r := 39; r < 39+len(c); r++ {
			s += generate.LogProb(logits[r*V:(r+1)*V], all[r+1])
		}
		if s > bestScore {
			best, bestScore = ci, s
		}
	}
	want := 0.0
	if best == 0 {
		want = 1
	}
	if acc[PolicyFP] != want {
		t.Errorf("fp32 recall accuracy %g; a plain forward picks candidate %d", acc[PolicyFP], best)
	}
	if a := acc[PolicyINT2]; a != 0 && a != 1 {
		t.Errorf("int2 accuracy %g over one item", a)
	}
	// The question marked: the prefill runs in two forwards, which changes
	// no answer of a policy that does not read the question's own peaks;
	// the query-peak policies need it marked.
	it.Query = 9
	pol := []QualityPolicy{PolicyFP, PolicyINT2, PolicyLLMSRatio, PolicyPeakRatio, PolicyQueryPeakRatio}
	split, err := Recall(st, []RecallItem{it}, 16, pol, 1)
	if err != nil {
		t.Fatal(err)
	}
	it.Query = 0
	whole, err := Recall(st, []RecallItem{it}, 16, pol[:4], 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pol[:4] {
		if split.Correct[p][0] != whole.Correct[p][0] {
			t.Errorf("%s: %v with the prefill split at the question, %v without", p, split.Correct[p][0], whole.Correct[p][0])
		}
	}
	if _, err := Recall(st, []RecallItem{it}, 16, []QualityPolicy{PolicyQueryPeak}, 1); err == nil {
		t.Error("query_peak without the question marked: no error")
	}
	it.Query = 39
	if _, err := Recall(st, []RecallItem{it}, 16, pol[:1], 1); err == nil {
		t.Error("a question of 39 of 39 stored tokens: no error")
	}
}

// recallControl is the policy each is paired with besides fp32 in
// BenchmarkRecall's table: the density placements against their reversed
// controls, the peak placements against the density placements of the
// same levels.
var recallControl = map[QualityPolicy]QualityPolicy{
	PolicyLLMS:           PolicyReversed,
	PolicyLLMSRatio:      PolicyReversedRatio,
	PolicyPeak:           PolicyLLMS,
	PolicyPeakRatio:      PolicyLLMSRatio,
	PolicyQueryPeak:      PolicyLLMS,
	PolicyQueryPeakRatio: PolicyLLMSRatio,
}

// recallPolicies are allPolicies and the query-peak placements (Recall
// only: they need the question marked).
var recallPolicies = append(append([]QualityPolicy(nil), allPolicies...), PolicyQueryPeak, PolicyQueryPeakRatio)

// BenchmarkRecall is key→value recall (testdata/longctx/evals/recall_*.jsonl,
// or the same files in LLMS_RECALL_DIR, e.g. train_default.py recall-evals'
// 200-item sets or its --lead sets with the facts mid-context;
// LLMS_RECALL_N items of each distance, default 20; LLMS_RECALL_DISTS the
// distances, default 256,1024; LLMS_RECALL_POLICIES a comma-separated
// subset of the policies, default all) with the context's KV stored under
// each policy. The cache is sized to the longest item (at least 1280).
// Run it with -v: without it go test keeps only the first 10 lines of a
// benchmark's log, which cuts the paired table short.
func BenchmarkRecall(b *testing.B) {
	n := 20
	if v, err := strconv.Atoi(os.Getenv("LLMS_RECALL_N")); err == nil {
		n = v
	}
	dir := "../../testdata/longctx/evals"
	if d := os.Getenv("LLMS_RECALL_DIR"); d != "" {
		dir = d
	}
	policies := recallPolicies
	if v := os.Getenv("LLMS_RECALL_POLICIES"); v != "" {
		var err error
		if policies, err = pickPolicies(v, recallPolicies); err != nil {
			b.Fatal(err)
		}
	}
	tok, err := tokenizer.Load("../../testdata/longctx/tokenizer.json")
	if err != nil {
		b.Fatal(err)
	}
	dists := []string{"256", "1024"}
	if v := os.Getenv("LLMS_RECALL_DISTS"); v != "" {
		dists = strings.Split(v, ",")
	}
	sets := make([][]RecallItem, len(dists))
	cache := 1280
	for k, dist := range dists {
		if sets[k], err = readRecallItems(tok, filepath.Join(dir, "recall_"+dist+".jsonl"), n); err != nil {
			b.Fatal(err)
		}
		for _, it := range sets[k] {
			longest := 0
			for _, c := range it.Candidates {
				longest = max(longest, len(c))
			}
			cache = max(cache, len(it.Context)+longest)
		}
	}
	st, err := kv.Open("../../testdata/longctx/model.onnx", engine.Options{}, kv.Config{MaxContext: cache, AttentionStats: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Session().Close()
	for k, dist := range dists {
		items := sets[k]
		for i := 0; i < b.N; i++ {
			res, err := Recall(st, items, 16, policies, 1)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("recall distance %s, %d items; each policy against fp32 and its control, paired item by item:", dist, len(items))
			b.Logf("%-22s %-8s %-22s %-28s %s", "policy", "accuracy", "vs", "diff ± paired SE", "discordant A:B, exact McNemar p")
			for _, p := range policies {
				b.ReportMetric(res.Accuracy(p), "acc-"+dist+"-"+string(p))
				name, acc := string(p), fmt.Sprintf("%.3f", res.Accuracy(p))
				for _, vs := range []QualityPolicy{PolicyFP, recallControl[p]} {
					if _, ran := res.Correct[vs]; !ran || vs == p {
						continue
					}
					pr, err := res.Pair(p, vs)
					if err != nil {
						b.Fatal(err)
					}
					b.Logf("%-22s %-8s %-22s %+.3f ± %.3f %17s %3d:%-3d p=%.3g", name, acc, vs, pr.Diff, pr.StdErr, "", pr.OnlyA, pr.OnlyB, pr.P)
					name, acc = "", ""
				}
				if name != "" {
					b.Logf("%-22s %s", name, acc)
				}
			}
		}
	}
}

// pickPolicies parses a comma-separated list of policy names, each of
// which must be in known.
func pickPolicies(list string, known []QualityPolicy) ([]QualityPolicy, error) {
	var out []QualityPolicy
	for _, name := range strings.Split(list, ",") {
		p := QualityPolicy(strings.TrimSpace(name))
		found := false
		for _, q := range known {
			found = found || q == p
		}
		if !found {
			return nil, fmt.Errorf("unknown policy %q (known: %v)", p, known)
		}
		out = append(out, p)
	}
	return out, nil
}

// readRecallItems reads up to n recall items from a recall_*.jsonl file
// and tokenizes them, marking each item's question: the context after the
// fact list and filler ("\n\nQuestion: ..."), from where the prefix alone
// stops tokenizing as the whole does (the merges at the boundary may
// differ by a token or two).
func readRecallItems(tok *tokenizer.Tokenizer, path string, n int) ([]RecallItem, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var items []RecallItem
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if len(items) == n {
			break
		}
		var r struct {
			Context    string   `json:"context"`
			Candidates []string `json:"candidates"`
			Answer     int      `json:"answer"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		ctx, err := tok.Encode(r.Context, tokenizer.EncodeOptions{})
		if err != nil {
			return nil, err
		}
		q := strings.LastIndex(r.Context, "\n\nQuestion:")
		if q < 0 {
			return nil, fmt.Errorf("%s: recall item without a question: %.60q", path, r.Context)
		}
		pre, err := tok.Encode(r.Context[:q], tokenizer.EncodeOptions{})
		if err != nil {
			return nil, err
		}
		m := 0
		for m < len(pre) && m < len(ctx)-1 && pre[m] == ctx[m] {
			m++
		}
		if m+3 < len(pre) || m < 16 {
			return nil, fmt.Errorf("%s: the context before its question tokenizes differently alone from token %d of %d", path, m, len(pre))
		}
		it := RecallItem{Context: ctx, Answer: r.Answer, Query: len(ctx) - 1 - m}
		for _, c := range r.Candidates {
			ids, err := tok.Encode(c, tokenizer.EncodeOptions{})
			if err != nil {
				return nil, err
			}
			it.Candidates = append(it.Candidates, ids)
		}
		items = append(items, it)
	}
	return items, nil
}
