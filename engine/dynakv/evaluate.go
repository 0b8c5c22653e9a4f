package dynakv

import (
	"fmt"
	"math"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/kv"
)

// Eval compares teacher-forced decoding under DynaKV with full attention.
type Eval struct {
	Prefill int `json:"prefill_tokens"`
	// Predicted counts the decode-step predictions scored (the token after
	// each decoded one).
	Predicted int `json:"predicted_tokens"`
	// Loss and Perplexity are DynaKV's; FullLoss and FullPerplexity full
	// attention's over the same predictions (0 without a full state).
	Loss           float64 `json:"loss"`
	Perplexity     float64 `json:"perplexity"`
	FullLoss       float64 `json:"full_loss"`
	FullPerplexity float64 `json:"full_perplexity"`
	// KL is the mean KL(full ‖ DynaKV) of the next-token distributions;
	// Top1 the share of steps whose argmax agree; MaxLogitDiff the largest
	// logit difference seen.
	KL           float64 `json:"logit_kl"`
	Top1         float64 `json:"top1_agreement"`
	MaxLogitDiff float64 `json:"max_logit_diff"`
	// StepMs is the mean wall time of a DynaKV decode step (model and
	// hook), FullStepMs of a full-attention one.
	StepMs     float64 `json:"step_ms"`
	FullStepMs float64 `json:"full_step_ms"`
	// Tokens is the document, with the generated tokens when generating.
	Tokens []int `json:"-"`
}

// Evaluate runs doc through dyn (whose session has sys's hook installed:
// the first prefill tokens as one prompt, then one token per step) and,
// when full is not nil, through full (a plain in-place cache) in
// lockstep, scoring every decode step's prediction of the next token.
// With generate > 0, doc is the prompt alone (prefill = len(doc)) and
// generate tokens are decoded greedily by dyn instead (full attention is
// fed the same tokens, so KL and top-1 compare like with like); the loss
// is then the negative log-likelihood of dyn's own choices.
// progress, when set, is called after each step. Both states are reset
// first.
//
// dyn's cache may be smaller than the document (DeviceSlots): the hook
// owns every decode step's attention, so the device cache only has to hold
// the prompt, for its fused attention, and then each step's new row until
// the hook has read it; position p goes to slot p mod dyn.MaxContext().
// full, which attends its cache on the device, must hold the whole
// document.
func Evaluate(dyn, full *kv.State, doc []int, prefill, generate int, progress func(step int)) (Eval, error) {
	var ev Eval
	if generate > 0 {
		if prefill != len(doc) || prefill < 1 {
			return ev, fmt.Errorf("dynakv: generating after a prompt of %d tokens with prefill %d", len(doc), prefill)
		}
		if full != nil && len(doc)+generate > full.MaxContext() {
			return ev, fmt.Errorf("dynakv: %d prompt and %d generated tokens beyond the full-attention state's %d-slot cache", len(doc), generate, full.MaxContext())
		}
	} else if prefill < 2 || prefill >= len(doc)-1 {
		return ev, fmt.Errorf("dynakv: a prefill of %d tokens for a document of %d: want 2 ≤ prefill < %d", prefill, len(doc), len(doc)-1)
	}
	if prefill > dyn.MaxContext() {
		return ev, fmt.Errorf("dynakv: a prompt of %d tokens beyond the %d-slot device cache: %w", prefill, dyn.MaxContext(), engine.ErrContextFull)
	}
	if full != nil && len(doc) > full.MaxContext() {
		return ev, fmt.Errorf("dynakv: a document of %d tokens beyond the full-attention state's %d-slot cache", len(doc), full.MaxContext())
	}
	ring := dyn.MaxContext()
	ev.Prefill = prefill
	dyn.Reset()
	if full != nil {
		full.Reset()
	}
	pos := make([]int, prefill)
	for i := range pos {
		pos[i] = i
	}
	pl, err := dyn.Forward(doc[:prefill], pos, pos)
	if err != nil {
		return ev, err
	}
	doc = append([]int(nil), doc...)
	if generate > 0 {
		doc = append(doc, argmax(pl[len(pl)-dyn.Vocab():]))
	}
	if full != nil {
		if _, err := full.Forward(doc[:prefill], pos, pos); err != nil {
			return ev, err
		}
	}
	V := dyn.Vocab()
	var nll, fnll, kl float64
	var agree int
	var tDyn, tFull time.Duration
	last := len(doc) - 1
	if generate > 0 {
		last = prefill + generate - 1
	}
	for i := prefill; i < last; i++ {
		t0 := time.Now()
		l, err := dyn.Forward(doc[i:i+1], []int{i}, []int{i % ring})
		if err != nil {
			return ev, fmt.Errorf("step at position %d: %w", i, err)
		}
		tDyn += time.Since(t0)
		row := l[len(l)-V:]
		lp := logSoftmax(row)
		if generate > 0 {
			doc = append(doc, argmax(row))
		}
		nll -= lp[doc[i+1]]
		if full != nil {
			t1 := time.Now()
			fl, err := full.Forward(doc[i:i+1], []int{i}, []int{i})
			if err != nil {
				return ev, fmt.Errorf("full attention at position %d: %w", i, err)
			}
			tFull += time.Since(t1)
			frow := fl[len(fl)-V:]
			flp := logSoftmax(frow)
			fnll -= flp[doc[i+1]]
			for j := range flp {
				kl += math.Exp(flp[j]) * (flp[j] - lp[j])
				ev.MaxLogitDiff = math.Max(ev.MaxLogitDiff, math.Abs(float64(frow[j]-row[j])))
			}
			if argmax(row) == argmax(frow) {
				agree++
			}
		}
		ev.Predicted++
		if progress != nil {
			progress(ev.Predicted)
		}
	}
	ev.Tokens = doc
	n := float64(max(ev.Predicted, 1))
	ev.Loss = nll / n
	ev.Perplexity = math.Exp(ev.Loss)
	ev.StepMs = float64(tDyn) / 1e6 / n
	if full != nil {
		ev.FullLoss = fnll / n
		ev.FullPerplexity = math.Exp(ev.FullLoss)
		ev.KL = kl / n
		ev.Top1 = float64(agree) / n
		ev.FullStepMs = float64(tFull) / 1e6 / n
	}
	return ev, nil
}

func logSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(s)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - lse
	}
	return out
}

func argmax(x []float32) int {
	b := 0
	for i, v := range x {
		if v > x[b] {
			b = i
		}
	}
	return b
}

// Continuation returns the log-likelihood of cand after ctx under dyn
// and, when full is not nil, under full attention. Under dyn, all of ctx
// but its last tail tokens is the prompt (the device's own attention);
// the tail and then cand are teacher-forced one token per step through
// the installed hook, which must be fresh. With tail = 0 the first token
// of cand is scored from the prompt's logits, which full attention
// computed, so DynaKV could change only cand's later tokens; a tail that
// covers the question (for recall items, the text after the filler)
// makes the hook's retrieval decide every token of the answer. Both
// states are reset first. As in Evaluate, dyn's cache need only hold the
// prompt: later positions go to slots modulo its size.
func Continuation(dyn, full *kv.State, ctx, cand []int, tail int) (dynLL, fullLL float64, err error) {
	if len(ctx) < 2 || len(cand) == 0 {
		return 0, 0, fmt.Errorf("dynakv: a context of %d and a continuation of %d tokens", len(ctx), len(cand))
	}
	if tail < 0 || tail > len(ctx)-2 {
		return 0, 0, fmt.Errorf("dynakv: a decoded tail of %d tokens of a %d-token context (want 0..%d)", tail, len(ctx), len(ctx)-2)
	}
	prompt := len(ctx) - tail
	if prompt > dyn.MaxContext() {
		return 0, 0, fmt.Errorf("dynakv: a prompt of %d tokens beyond the %d-slot device cache: %w", prompt, dyn.MaxContext(), engine.ErrContextFull)
	}
	if full != nil && len(ctx)+len(cand) > full.MaxContext() {
		return 0, 0, fmt.Errorf("dynakv: %d tokens beyond the full-attention state's %d-slot cache", len(ctx)+len(cand), full.MaxContext())
	}
	V := dyn.Vocab()
	dyn.Reset()
	pos := make([]int, prompt)
	for i := range pos {
		pos[i] = i
	}
	l, err := dyn.Forward(ctx[:prompt], pos, pos)
	if err != nil {
		return 0, 0, err
	}
	// Every token after the prompt is one decode step through the hook;
	// the logits after the last context token score cand[0].
	all := append(append([]int(nil), ctx...), cand...)
	for p := prompt; p < len(all); p++ {
		if p >= len(ctx) {
			dynLL += logSoftmax(l[len(l)-V:])[all[p]]
		}
		if p+1 == len(all) {
			break
		}
		if l, err = dyn.Forward(all[p:p+1], []int{p}, []int{p % dyn.MaxContext()}); err != nil {
			return 0, 0, err
		}
	}
	if full == nil {
		return dynLL, 0, nil
	}
	full.Reset()
	pos = make([]int, len(all))
	for i := range pos {
		pos[i] = i
	}
	fl, err := full.Forward(all, pos, pos)
	if err != nil {
		return 0, 0, err
	}
	if full.LastRowOnly() {
		return 0, 0, fmt.Errorf("dynakv: the full-attention state returns the last row only")
	}
	for i := range cand {
		row := len(ctx) - 1 + i
		fullLL += logSoftmax(fl[row*V : (row+1)*V])[cand[i]]
	}
	return dynLL, fullLL, nil
}

// DeviceSlots is the in-place cache a session whose attention DynaKV owns
// needs for a prompt of prompt tokens (kv.Config.MaxContext): the prompt
// rounded up to pad (the attended length's multiple, engine.DefaultKVPad
// when 0). The prompt's attention is the device's fused kernel over its
// own slots; after it every decode step's attention is the hook's, over
// entries read from flash and DRAM, so the device keeps no more than the
// prompt and, slot by slot, each step's new keys and values until the
// hook has read them (Evaluate and Continuation reuse the slots as a
// ring). The cache is one size for every layer: all layers share one
// attended length (kv_len) and one kv_bias input.
func DeviceSlots(prompt, pad int) (int, error) {
	if pad == 0 {
		pad = engine.DefaultKVPad
	}
	if prompt < 1 || pad < 1 {
		return 0, fmt.Errorf("dynakv: device slots for a prompt of %d tokens at a pad of %d", prompt, pad)
	}
	return (prompt + pad - 1) / pad * pad, nil
}
