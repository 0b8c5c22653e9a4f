package llms

import (
	"fmt"
	"math"
	"math/rand"
	"sort"

	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/kv"
)

// QualityPolicy is one way of storing a context's chunks for the
// compression-efficacy experiment (spec §1c substitutes for Fig. 6b/12).
type QualityPolicy string

// The policies. Random and Reversed use exactly LLMS's multiset of levels
// (the same bytes), placed at random or densest-to-lowest: the controls
// that show whether density matters.
const (
	PolicyFP       QualityPolicy = "fp32"
	PolicyINT8     QualityPolicy = "int8"
	PolicyINT4     QualityPolicy = "int4"
	PolicyINT2     QualityPolicy = "int2"
	PolicyLLMS     QualityPolicy = "llms"
	PolicyRandom   QualityPolicy = "random"
	PolicyReversed QualityPolicy = "reversed"
	// PolicyLLMSRatio is LLMS with the "natural" weight ratio_w.
	PolicyLLMSRatio QualityPolicy = "llms_ratio_weight"
	// PolicyRandomRatio and PolicyReversedRatio are the controls of
	// PolicyLLMSRatio. They are needed where the default weight gives every
	// chunk one level (as on the retrained default model: all INT4), which
	// makes Random and Reversed equal to LLMS and silent about density.
	PolicyRandomRatio   QualityPolicy = "random_ratio_weight"
	PolicyReversedRatio QualityPolicy = "reversed_ratio_weight"
	// PolicyPeak and PolicyPeakRatio keep the levels of PolicyLLMS and
	// PolicyLLMSRatio (the same multiset, so the same bytes) but place
	// them by each chunk's mean token peak (TokenPeaks: the largest
	// probability any one row, head and layer gave the token) instead of
	// its density: the tolerance variant that protects chunks attended
	// rarely but sharply. Not the paper's (it ranks by density).
	PolicyPeak      QualityPolicy = "peak"
	PolicyPeakRatio QualityPolicy = "peak_ratio_weight"
	// PolicyQueryPeak and PolicyQueryPeakRatio are the peak placements
	// with peaks taken over the question's rows only (RecallItem.Query:
	// the context is prefilled in two forwards, the question last):
	// statistics refreshed when the query arrives. Recall only.
	PolicyQueryPeak      QualityPolicy = "query_peak"
	PolicyQueryPeakRatio QualityPolicy = "query_peak_ratio_weight"
)

// QualityResult is one policy's outcome over all windows.
type QualityResult struct {
	Policy QualityPolicy `json:"policy"`
	// NLL is the mean negative log-likelihood (nats) of the continuation
	// tokens given the stored context; PPL is exp(NLL).
	NLL float64 `json:"nll"`
	PPL float64 `json:"ppl"`
	// NLLStdErr is the standard error of NLL over windows (the spread of
	// the per-window means / √windows; 0 with one window).
	NLLStdErr float64 `json:"nll_stderr"`
	// DeltaFP is NLL minus the fp32 policy's, and DeltaFPStdErr the
	// standard error of that difference taken window by window (paired:
	// both policies see the same text, so the windows' own difficulty
	// cancels). Both are 0 when fp32 was not among the policies.
	DeltaFP       float64 `json:"delta_nll_vs_fp32"`
	DeltaFPStdErr float64 `json:"delta_nll_vs_fp32_stderr"`
	// Bytes is the stored context's bytes (data + metadata), summed over
	// windows; Bits the effective bits per cached value.
	Bytes int64   `json:"bytes"`
	Bits  float64 `json:"effective_bits"`
	// Levels counts chunks per level over windows.
	Levels map[string]int `json:"levels"`
	// PerWindow is the mean NLL of each window, in window order: what
	// pairs two policies window by window (PairedNLL).
	PerWindow []float64 `json:"per_window_nll"`
}

// PairedNLL is the mean over windows of a's NLL minus b's and its paired
// standard error (both Quality results of the same windows).
func PairedNLL(a, b QualityResult) (mean, se float64, err error) {
	if len(a.PerWindow) != len(b.PerWindow) || len(a.PerWindow) == 0 {
		return 0, 0, fmt.Errorf("llms: pairing %d windows of %s with %d of %s", len(a.PerWindow), a.Policy, len(b.PerWindow), b.Policy)
	}
	d := make([]float64, len(a.PerWindow))
	for w := range d {
		d[w] = a.PerWindow[w] - b.PerWindow[w]
	}
	mean, se = meanStdErr(d)
	return mean, se, nil
}

// Quality measures, for each policy, the teacher-forced NLL of contLen
// tokens that follow a context of ctxLen tokens whose KV is stored under
// the policy, over windows consecutive stretches of tokens. Density comes
// from the context's prefill (every row of it). st must compute logits for
// every row (not LastRowOnly). byPos is the mean token density d(t) over
// tenths of the context (spec §1d.4's histogram of D by position: a sink
// at the start or a late-token bias shows here).
func Quality(st *kv.State, tokens []int, ctxLen, contLen, windows, C int, policies []QualityPolicy, seed int64) (res []QualityResult, byPos []float64, err error) {
	if st.LastRowOnly() {
		return nil, nil, fmt.Errorf("llms: Quality needs logits for every row (open without LastLogits)")
	}
	if ctxLen+contLen > st.MaxContext() || windows < 1 || ctxLen < C || contLen < 2 {
		return nil, nil, fmt.Errorf("llms: Quality of %d+%d tokens in %d slots, %d windows", ctxLen, contLen, st.MaxContext(), windows)
	}
	if len(tokens) < windows*(ctxLen+contLen) {
		return nil, nil, fmt.Errorf("llms: Quality needs %d tokens; have %d", windows*(ctxLen+contLen), len(tokens))
	}
	lay, err := newLayout(st.Info(), C, LevelFP)
	if err != nil {
		return nil, nil, err
	}
	rng := rand.New(rand.NewSource(seed))
	res = make([]QualityResult, len(policies))
	byPos = make([]float64, 10)
	posN := make([]float64, 10)
	values := 0
	for i := range res {
		res[i] = QualityResult{Policy: policies[i], Levels: map[string]int{}}
	}
	ntok := 0
	// perWin[pi][w] is policy pi's mean NLL on window w.
	perWin := make([][]float64, len(policies))
	for w := 0; w < windows; w++ {
		win := tokens[w*(ctxLen+contLen) : (w+1)*(ctxLen+contLen)]
		st.Reset()
		if _, err := st.Forward(win[:ctxLen], seq(ctxLen), seq(ctxLen)); err != nil {
			return nil, nil, err
		}
		stats, err := st.AttentionStats()
		if err != nil {
			return nil, nil, err
		}
		var d Density
		if err := d.Add(stats, func(j int) int { return j }); err != nil {
			return nil, nil, err
		}
		for t := 0; t < ctxLen; t++ {
			byPos[10*t/ctxLen] += d.Token(t)
			posN[10*t/ctxLen]++
		}
		dump := make([]byte, ctxLen*lay.slotBytes())
		if err := st.ReadAllSlots(seq(ctxLen), dump); err != nil {
			return nil, nil, err
		}
		nc := lay.chunks(ctxLen)
		dens, peaks := d.chunkFigures(ctxLen/C, C)
		for pi, p := range policies {
			levels, err := policyLevels(p, dens, peaks, nc, rng)
			if err != nil {
				return nil, nil, err
			}
			block := make([]byte, len(dump))
			for i := 0; i < nc; i++ {
				n := lay.tokens(i, ctxLen)
				e, err := lay.encode(dump, ctxLen, i*C, n, levels[i])
				if err != nil {
					return nil, nil, err
				}
				if err := lay.decode(e, block, ctxLen, i*C); err != nil {
					return nil, nil, err
				}
				res[pi].Bytes += int64(e.size())
				res[pi].Levels[levels[i].String()]++
			}
			st.Reset()
			if err := st.WriteAllSlots(seq(ctxLen), block); err != nil {
				return nil, nil, err
			}
			if err := st.SetPositions(seq(ctxLen), seq(ctxLen)); err != nil {
				return nil, nil, err
			}
			pos := seq(ctxLen + contLen)[ctxLen:]
			logits, err := st.Forward(win[ctxLen:], pos, pos)
			if err != nil {
				return nil, nil, err
			}
			V := st.Vocab()
			nll := 0.0
			for r := 0; r+1 < contLen; r++ {
				nll -= generate.LogProb(logits[r*V:(r+1)*V], win[ctxLen+r+1])
			}
			res[pi].NLL += nll
			perWin[pi] = append(perWin[pi], nll/float64(contLen-1))
		}
		ntok += contLen - 1
		values += ctxLen * lay.slotBytes() / 4
	}
	fp := -1
	for i, p := range policies {
		if p == PolicyFP {
			fp = i
		}
	}
	for i := range res {
		res[i].NLL /= float64(ntok)
		res[i].PPL = math.Exp(res[i].NLL)
		res[i].Bits = 8 * float64(res[i].Bytes) / float64(values)
		_, res[i].NLLStdErr = meanStdErr(perWin[i])
		res[i].PerWindow = perWin[i]
		if fp >= 0 {
			d := make([]float64, windows)
			for w := range d {
				d[w] = perWin[i][w] - perWin[fp][w]
			}
			res[i].DeltaFP, res[i].DeltaFPStdErr = meanStdErr(d)
		}
	}
	for k := range byPos {
		if posN[k] > 0 {
			byPos[k] /= posN[k]
		}
	}
	return res, byPos, nil
}

// chunkFigures are the first full chunks' densities D_i and mean token
// peaks (Density.Chunk, Density.ChunkPeak).
func (d *Density) chunkFigures(full, C int) (dens, peaks []float64) {
	dens, peaks = make([]float64, full), make([]float64, full)
	for i := range dens {
		dens[i], peaks[i] = d.Chunk(i*C, (i+1)*C), d.ChunkPeak(i*C, (i+1)*C)
	}
	return dens, peaks
}

// chunkMeans is the mean of x over each of the first full chunks of C.
func chunkMeans(x []float64, full, C int) []float64 {
	out := make([]float64, full)
	for i := range out {
		for _, v := range x[i*C : (i+1)*C] {
			out[i] += v / float64(C)
		}
	}
	return out
}

// meanStdErr is the mean of x and its standard error (sample standard
// deviation / √n; 0 for fewer than two values).
func meanStdErr(x []float64) (mean, se float64) {
	n := float64(len(x))
	if n == 0 {
		return 0, 0
	}
	for _, v := range x {
		mean += v
	}
	mean /= n
	if n < 2 {
		return mean, 0
	}
	ss := 0.0
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / (n - 1) / n)
}

// policyLevels is each chunk's level under policy p, given the full
// chunks' densities and peaks (nc chunks in all; the partial one stays
// INT8).
func policyLevels(p QualityPolicy, dens, peaks []float64, nc int, rng *rand.Rand) ([]Level, error) {
	full := len(dens)
	ladder := []Level{Level8, Level4, Level2}
	levels := make([]Level, nc)
	for i := range levels {
		levels[i] = Level8
	}
	llms := func(w Weight) ([]Level, error) {
		a, err := Assign(dens, ladder, 0.5, w)
		return a.Levels, err
	}
	switch p {
	case PolicyFP:
		for i := range levels {
			levels[i] = LevelFP
		}
	case PolicyINT8:
	case PolicyINT4, PolicyINT2:
		l := Level4
		if p == PolicyINT2 {
			l = Level2
		}
		for i := 0; i < full; i++ {
			levels[i] = l
		}
	case PolicyLLMS, PolicyLLMSRatio, PolicyRandom, PolicyReversed, PolicyRandomRatio, PolicyReversedRatio, PolicyPeak, PolicyPeakRatio:
		w := WeightInverse
		switch p {
		case PolicyLLMSRatio, PolicyRandomRatio, PolicyReversedRatio, PolicyPeakRatio:
			w = WeightRatio
		}
		lv, err := llms(w)
		if err != nil {
			return nil, err
		}
		switch p {
		case PolicyRandom, PolicyRandomRatio:
			perm := rng.Perm(full)
			for i := 0; i < full; i++ {
				levels[perm[i]] = lv[i]
			}
		case PolicyReversed, PolicyReversedRatio:
			// The densest chunk gets LLMS's lowest level, and so on.
			placeBy(levels, lv, dens, false)
		case PolicyPeak, PolicyPeakRatio:
			// The chunk of highest peak gets LLMS's highest level.
			if len(peaks) != full {
				return nil, fmt.Errorf("llms: policy %s needs %d chunk peaks; have %d", p, full, len(peaks))
			}
			placeBy(levels, lv, peaks, true)
		default:
			copy(levels, lv)
		}
	default:
		return nil, fmt.Errorf("llms: unknown quality policy %q", p)
	}
	return levels, nil
}

// placeBy puts the multiset of levels lv on the chunks ranked by key,
// descending: the highest level on the highest key when heavyFirst, the
// lowest level there otherwise.
func placeBy(levels, lv []Level, key []float64, heavyFirst bool) {
	by := make([]int, len(key))
	for i := range by {
		by[i] = i
	}
	sort.SliceStable(by, func(a, b int) bool { return key[by[a]] > key[by[b]] })
	ls := append([]Level(nil), lv...)
	sort.Slice(ls, func(a, b int) bool {
		if heavyFirst {
			return ls[a] > ls[b]
		}
		return ls[a] < ls[b]
	})
	for k, i := range by {
		levels[i] = ls[k]
	}
}

// storeUnder replaces the first ctxLen slots' KV (dump, read before) by
// its round trip through the codec at levels, and returns the bytes the
// chunks take.
func storeUnder(st *kv.State, lay *layout, dump []byte, ctxLen int, levels []Level) (int64, error) {
	block := make([]byte, len(dump))
	var bytes int64
	for i := range levels {
		n := lay.tokens(i, ctxLen)
		e, err := lay.encode(dump, ctxLen, i*lay.C, n, levels[i])
		if err != nil {
			return 0, err
		}
		if err := lay.decode(e, block, ctxLen, i*lay.C); err != nil {
			return 0, err
		}
		bytes += int64(e.size())
	}
	st.Reset()
	if err := st.WriteAllSlots(seq(ctxLen), block); err != nil {
		return 0, err
	}
	return bytes, st.SetPositions(seq(ctxLen), seq(ctxLen))
}

// RecallItem is one multiple-choice item: the context, the candidate
// continuations (token ids) and the index of the right one.
type RecallItem struct {
	Context    []int
	Candidates [][]int
	Answer     int
	// Query is the number of the context's last tokens that ask the
	// question (the query-peak policies' rows); 0: none marked.
	Query int
}

// RecallResult is Recall's outcome, item by item so that policies can be
// compared on the same items (Pair).
type RecallResult struct {
	// N is the number of items.
	N int
	// Correct[p][k] is whether policy p picked item k's answer.
	Correct map[QualityPolicy][]bool
}

// Accuracy is policy p's fraction of items answered right (0 for a
// policy that was not run).
func (r RecallResult) Accuracy(p QualityPolicy) float64 {
	c := r.Correct[p]
	if len(c) == 0 {
		return 0
	}
	n := 0
	for _, ok := range c {
		if ok {
			n++
		}
	}
	return float64(n) / float64(len(c))
}

// Pair compares policy a with policy b on the same items.
func (r RecallResult) Pair(a, b QualityPolicy) (Paired, error) {
	ca, okA := r.Correct[a]
	cb, okB := r.Correct[b]
	if !okA || !okB {
		return Paired{}, fmt.Errorf("llms: pairing %q with %q: not both run", a, b)
	}
	return PairCorrect(ca, cb)
}

// Recall is in-context recall under each policy, item by item: the
// context's KV (all but its last token) is stored under the policy; each
// candidate is scored by the log-likelihood of its tokens after the last
// context token; the best-scored candidate is the model's answer.
func Recall(st *kv.State, items []RecallItem, C int, policies []QualityPolicy, seed int64) (RecallResult, error) {
	res := RecallResult{N: len(items), Correct: map[QualityPolicy][]bool{}}
	if st.LastRowOnly() {
		return res, fmt.Errorf("llms: Recall needs logits for every row (open without LastLogits)")
	}
	for _, p := range policies {
		if _, dup := res.Correct[p]; dup {
			return res, fmt.Errorf("llms: Recall: policy %q named twice", p)
		}
		res.Correct[p] = make([]bool, len(items))
	}
	lay, err := newLayout(st.Info(), C, LevelFP)
	if err != nil {
		return res, err
	}
	rng := rand.New(rand.NewSource(seed))
	for k, it := range items {
		n := len(it.Context) - 1
		longest, shortest := 0, math.MaxInt
		for _, c := range it.Candidates {
			longest, shortest = max(longest, len(c)), min(shortest, len(c))
		}
		if shortest == 0 {
			return res, fmt.Errorf("llms: recall item %d has an empty candidate", k)
		}
		if n < C || n+1+longest > st.MaxContext() || it.Answer < 0 || it.Answer >= len(it.Candidates) || it.Query < 0 || it.Query >= n {
			return res, fmt.Errorf("llms: recall item %d: %d context tokens (question %d), answer %d of %d, cache %d", k, n+1, it.Query, it.Answer, len(it.Candidates), st.MaxContext())
		}
		// The prefill, in two forwards when the question is marked (the
		// same KV, sums and counts as one; the second's statistics are the
		// question's rows alone).
		st.Reset()
		var d Density
		qpeaks := make([]float64, n)
		for _, span := range [][2]int{{0, n - it.Query}, {n - it.Query, n}} {
			if span[0] == span[1] {
				continue
			}
			pos := seq(span[1])[span[0]:]
			if _, err := st.Forward(it.Context[span[0]:span[1]], pos, pos); err != nil {
				return res, err
			}
			stats, err := st.AttentionStats()
			if err != nil {
				return res, err
			}
			if err := d.Add(stats, func(j int) int { return j }); err != nil {
				return res, err
			}
			// d keeps the peaks over both forwards; the question's alone
			// are the second's.
			if span[0] > 0 {
				if qpeaks, err = TokenPeaks(stats, n, func(j int) int { return j }); err != nil {
					return res, err
				}
			}
		}
		dump := make([]byte, n*lay.slotBytes())
		if err := st.ReadAllSlots(seq(n), dump); err != nil {
			return res, err
		}
		full := n / C
		dens, chPeaks := d.chunkFigures(full, C)
		chQPeaks := chunkMeans(qpeaks, full, C)
		for _, p := range policies {
			var levels []Level
			var err error
			switch p {
			case PolicyQueryPeak, PolicyQueryPeakRatio:
				if it.Query == 0 {
					return res, fmt.Errorf("llms: recall item %d: policy %s needs the question marked (RecallItem.Query)", k, p)
				}
				as := PolicyPeak
				if p == PolicyQueryPeakRatio {
					as = PolicyPeakRatio
				}
				levels, err = policyLevels(as, dens, chQPeaks, lay.chunks(n), rng)
			default:
				levels, err = policyLevels(p, dens, chPeaks, lay.chunks(n), rng)
			}
			if err != nil {
				return res, err
			}
			if _, err := storeUnder(st, lay, dump, n, levels); err != nil {
				return res, err
			}
			best, bestScore := -1, math.Inf(-1)
			for ci, cand := range it.Candidates {
				toks := append([]int{it.Context[n]}, cand[:len(cand)-1]...)
				pos := seq(n + len(toks))[n:]
				logits, err := st.Forward(toks, pos, pos)
				if err != nil {
					return res, err
				}
				V := st.Vocab()
				score := 0.0
				for r, want := range cand {
					score += generate.LogProb(logits[r*V:(r+1)*V], want)
				}
				if err := st.Free(pos...); err != nil {
					return res, err
				}
				if score > bestScore {
					best, bestScore = ci, score
				}
			}
			res.Correct[p][k] = best == it.Answer
		}
	}
	return res, nil
}
