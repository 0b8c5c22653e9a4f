package llms

import (
	"math"
	"os"
	"strconv"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/kv"
)

var allPolicies = []QualityPolicy{PolicyFP, PolicyINT8, PolicyINT4, PolicyINT2, PolicyLLMS, PolicyLLMSRatio, PolicyRandom, PolicyReversed}

// TestQualityControls on the default model: the uncompressed policy gives
// the plain forward's NLL, the LLMS, random and reversed policies store
// the same bytes at a mean ratio of 50%, and static INT2 is the smallest.
func TestQualityControls(t *testing.T) {
	st := openDefault(t, 96)
	toks := heldoutTokens(t, 120)
	res, byPos, err := Quality(st, toks, 64, 16, 1, 16, []QualityPolicy{PolicyFP, PolicyINT8, PolicyINT2, PolicyLLMS, PolicyRandom, PolicyReversed}, 1)
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
		row := logits[r*V : (r+1)*V]
		mx := row[0]
		for _, v := range row {
			mx = max(mx, v)
		}
		var z float64
		for _, v := range row {
			z += math.Exp(float64(v - mx))
		}
		nll += math.Log(z) - float64(row[toks[r+1]]-mx)
	}
	nll /= 15
	if d := math.Abs(by[PolicyFP].NLL - nll); d > 1e-4 {
		t.Errorf("fp32 policy NLL %.6f, plain forward %.6f", by[PolicyFP].NLL, nll)
	}
	if by[PolicyLLMS].Bytes != by[PolicyRandom].Bytes || by[PolicyLLMS].Bytes != by[PolicyReversed].Bytes {
		t.Errorf("controls differ in bytes: llms %d random %d reversed %d", by[PolicyLLMS].Bytes, by[PolicyRandom].Bytes, by[PolicyReversed].Bytes)
	}
	if !(by[PolicyINT2].Bytes < by[PolicyLLMS].Bytes && by[PolicyLLMS].Bytes < by[PolicyINT8].Bytes && by[PolicyINT8].Bytes < by[PolicyFP].Bytes) {
		t.Errorf("bytes not ordered int2 < llms < int8 < fp32")
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
		for _, r := range res {
			b.Logf("%-18s nll %.4f ppl %.3f bits/value %.2f levels %v", r.Policy, r.NLL, r.PPL, r.Bits, r.Levels)
			b.ReportMetric(r.PPL, string(r.Policy)+"-ppl")
		}
	}
}
