// Package slo decides, for one request of an elastic model, which model
// level and how much of the prompt to run so that its latency objective
// holds (ElastiLM's prompt and model elastification, shared/systems-spec.md
// §3a.1, §3a.7). Feasibility is judged from a profile measured on the
// device (profile.json, written by `tl elastic profile`), not from the
// paper's proportional latency formula: on a small model the embedding, the
// LM head and fixed launch costs do not shrink with level.
package slo

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
)

// FileName is the profile written beside the elastic model.
const FileName = "profile.json"

// Format is the profile version Load accepts.
const Format = "tlite.elastic.profile/1"

// Profile is profile.json: latencies measured on this device.
type Profile struct {
	Format string `json:"format"`
	// Device names where it was measured, and Load the load average then.
	Device string  `json:"device"`
	Load   float64 `json:"load_average"`
	// PromptLengths are the prompt lengths TTFT was measured at, ascending.
	PromptLengths []int `json:"prompt_lengths"`
	// TTFTMs maps a level ("20") to the median prefill time in ms at each
	// of PromptLengths.
	TTFTMs map[string][]float64 `json:"ttft_ms"`
	// TPOTMs maps a level to the median time of one decode step in ms.
	TPOTMs map[string]float64 `json:"tpot_ms"`
	// TLMLengths and TLMMs are the TLM's run time by input length (empty
	// when the profile was measured without a TLM).
	TLMLengths []int     `json:"tlm_lengths,omitempty"`
	TLMMs      []float64 `json:"tlm_ms,omitempty"`
	// SwitchMs is the median time of one level switch.
	SwitchMs float64 `json:"switch_ms"`
	// Repeats is how many runs each median is of.
	Repeats int `json:"repeats"`
}

// Load reads and checks a profile (path may be the folder holding it).
func Load(path string) (*Profile, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, FileName)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("slo: %w (measure it with tl elastic profile)", err)
	}
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("slo: %s: %w", path, err)
	}
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("slo: %s: %w", path, err)
	}
	return &p, nil
}

// Check reports a profile that cannot be used.
func (p *Profile) Check() error {
	if p.Format != Format {
		return fmt.Errorf("format %q, want %q", p.Format, Format)
	}
	if len(p.PromptLengths) == 0 {
		return errors.New("no prompt lengths")
	}
	for i, n := range p.PromptLengths {
		if n < 1 || (i > 0 && n <= p.PromptLengths[i-1]) {
			return fmt.Errorf("prompt lengths %v: want positive and ascending", p.PromptLengths)
		}
	}
	if _, ok := p.TTFTMs["100"]; !ok {
		return errors.New("no TTFT of level 100 (the SLO's reference)")
	}
	if _, ok := p.TPOTMs["100"]; !ok {
		return errors.New("no TPOT of level 100 (the SLO's reference)")
	}
	for lv, v := range p.TTFTMs {
		if len(v) != len(p.PromptLengths) {
			return fmt.Errorf("level %s: %d TTFT values for %d prompt lengths", lv, len(v), len(p.PromptLengths))
		}
		if err := positive(v); err != nil {
			return fmt.Errorf("level %s TTFT: %w", lv, err)
		}
		if _, ok := p.TPOTMs[lv]; !ok {
			return fmt.Errorf("level %s has a TTFT but no TPOT", lv)
		}
	}
	if len(p.TLMLengths) != len(p.TLMMs) {
		return fmt.Errorf("%d TLM lengths, %d TLM times", len(p.TLMLengths), len(p.TLMMs))
	}
	for i, n := range p.TLMLengths {
		if n < 1 || (i > 0 && n <= p.TLMLengths[i-1]) {
			return fmt.Errorf("TLM lengths %v: want positive and ascending", p.TLMLengths)
		}
	}
	if err := positive(p.TLMMs); err != nil {
		return fmt.Errorf("TLM time: %w", err)
	}
	if p.SwitchMs < 0 || math.IsNaN(p.SwitchMs) {
		return fmt.Errorf("switch time %v", p.SwitchMs)
	}
	return nil
}

func positive(v []float64) error {
	for _, x := range v {
		if !(x > 0) || math.IsInf(x, 0) {
			return fmt.Errorf("%v is not a positive time", x)
		}
	}
	return nil
}

// Levels are the model levels the profile has, ascending.
func (p *Profile) Levels() []int {
	var out []int
	for k := range p.TTFTMs {
		var v int
		if _, err := fmt.Sscanf(k, "%d", &v); err == nil {
			out = append(out, v)
		}
	}
	sort.Ints(out)
	return out
}

// interp is piecewise-linear in n through the measured points, and
// proportional to n through the origin outside them.
func interp(xs []int, ys []float64, n int) float64 {
	x := float64(n)
	if n <= xs[0] {
		return ys[0] * x / float64(xs[0])
	}
	for i := 1; i < len(xs); i++ {
		if n <= xs[i] {
			t := (x - float64(xs[i-1])) / float64(xs[i]-xs[i-1])
			return ys[i-1] + t*(ys[i]-ys[i-1])
		}
	}
	return ys[len(ys)-1] * x / float64(xs[len(xs)-1])
}

// TTFT is the profiled prefill time (ms) of n prompt tokens at level.
func (p *Profile) TTFT(n, level int) (float64, error) {
	v, ok := p.TTFTMs[fmt.Sprint(level)]
	if !ok {
		return 0, fmt.Errorf("slo: level %d is not in the profile (levels %v)", level, p.Levels())
	}
	return interp(p.PromptLengths, v, n), nil
}

// TPOT is the profiled decode step time (ms) at level.
func (p *Profile) TPOT(level int) (float64, error) {
	v, ok := p.TPOTMs[fmt.Sprint(level)]
	if !ok {
		return 0, fmt.Errorf("slo: level %d is not in the profile (levels %v)", level, p.Levels())
	}
	return v, nil
}

// TLM is the profiled TLM time (ms) for an n-token prompt (0 without one).
func (p *Profile) TLM(n int) float64 {
	if len(p.TLMMs) == 0 {
		return 0
	}
	return interp(p.TLMLengths, p.TLMMs, n)
}

// SLO is a request's objective as fractions of the full model's latency
// for the same prompt: TTFT and TPOT.
type SLO struct {
	TTFT, TPOT float64
}

// Check reports fractions that are not usable.
func (s SLO) Check() error {
	if !(s.TTFT > 0 && s.TTFT <= 10) || !(s.TPOT > 0 && s.TPOT <= 10) {
		return fmt.Errorf("slo: TTFT %v and TPOT %v: want fractions of the full model's latency in (0, 10]", s.TTFT, s.TPOT)
	}
	return nil
}

// Decision is a model level and a prompt level (percent of the
// compressible prompt tokens kept), with the profile's prediction.
type Decision struct {
	Model, Prompt int
	// Kept is the prompt length after compression.
	Kept int
	// TTFTMs is the predicted TTFT: TLM + switch + prefill of Kept tokens.
	TTFTMs float64
	// TPOTMs is the predicted decode step time.
	TPOTMs float64
}

// Request is what a decision is made for: a prompt of N tokens of which
// the last Tail are never dropped (the question), and its SLO.
type Request struct {
	N, Tail int
	SLO     SLO
}

// KeptLen is the prompt length after keeping pct% of the compressible
// tokens: the first token and the tail always stay.
func KeptLen(n, tail, pct int) int {
	body := n - 1 - tail
	if body < 0 {
		return n
	}
	return 1 + tail + int(math.Round(float64(body)*float64(pct)/100))
}

// Budget is the request's TTFT and TPOT budgets in ms: the SLO's
// fractions of the full model's profiled latency on the whole prompt.
func (p *Profile) Budget(r Request) (ttft, tpot float64, err error) {
	full, err := p.TTFT(r.N, 100)
	if err != nil {
		return 0, 0, err
	}
	step, err := p.TPOT(100)
	if err != nil {
		return 0, 0, err
	}
	return r.SLO.TTFT * full, r.SLO.TPOT * step, nil
}

// Predict is the profile's latency of decision (m, pct) for r.
func (p *Profile) Predict(r Request, m, pct int) (Decision, error) {
	kept := KeptLen(r.N, r.Tail, pct)
	t, err := p.TTFT(kept, m)
	if err != nil {
		return Decision{}, err
	}
	step, err := p.TPOT(m)
	if err != nil {
		return Decision{}, err
	}
	return Decision{Model: m, Prompt: pct, Kept: kept, TTFTMs: p.TLM(r.N) + p.SwitchMs + t, TPOTMs: step}, nil
}

// Feasible lists the decisions on the grid (model levels × prompt levels)
// that the profile says meet r's SLO, cheapest predicted TTFT first (ties:
// the smaller model level, then the smaller prompt level).
func (p *Profile) Feasible(r Request, models, prompts []int) ([]Decision, error) {
	if err := r.SLO.Check(); err != nil {
		return nil, err
	}
	if r.N < 1 || r.Tail < 0 || r.Tail >= r.N {
		return nil, fmt.Errorf("slo: a prompt of %d tokens with a tail of %d", r.N, r.Tail)
	}
	bt, bp, err := p.Budget(r)
	if err != nil {
		return nil, err
	}
	var out []Decision
	for _, m := range models {
		for _, pct := range prompts {
			d, err := p.Predict(r, m, pct)
			if err != nil {
				return nil, err
			}
			if d.TTFTMs <= bt && d.TPOTMs <= bp {
				out = append(out, d)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.TTFTMs != b.TTFTMs {
			return a.TTFTMs < b.TTFTMs
		}
		if a.Model != b.Model {
			return a.Model < b.Model
		}
		return a.Prompt < b.Prompt
	})
	return out, nil
}

// Greedy is the baseline "largest feasible model, then the largest prompt
// it allows". ok is false when nothing is feasible.
func Greedy(feasible []Decision) (d Decision, ok bool) {
	for _, f := range feasible {
		if !ok || f.Model > d.Model || (f.Model == d.Model && f.Prompt > d.Prompt) {
			d, ok = f, true
		}
	}
	return d, ok
}

// Random is a uniformly random feasible decision.
func Random(feasible []Decision, rng *rand.Rand) (Decision, bool) {
	if len(feasible) == 0 {
		return Decision{}, false
	}
	return feasible[rng.Intn(len(feasible))], true
}

// Pick is the runtime check of a head's pick (spec §3a.7): the pick when
// the profile says it is feasible, else a random feasible decision; with
// nothing feasible, the lightest decision of the grid (the request will
// miss its SLO). fellBack says the pick was replaced.
func (p *Profile) Pick(r Request, m, pct int, models, prompts []int, rng *rand.Rand) (d Decision, fellBack bool, err error) {
	feas, err := p.Feasible(r, models, prompts)
	if err != nil {
		return Decision{}, false, err
	}
	for _, f := range feas {
		if f.Model == m && f.Prompt == pct {
			return f, false, nil
		}
	}
	if f, ok := Random(feas, rng); ok {
		return f, true, nil
	}
	d, err = p.Predict(r, minOf(models), minOf(prompts))
	return d, true, err
}

func minOf(v []int) int {
	m := v[0]
	for _, x := range v[1:] {
		if x < m {
			m = x
		}
	}
	return m
}

// Compress keeps the first token, the last tail tokens and the pct% of the
// tokens between them with the highest scores, in their original order
// (ties to the earlier token). scores has one value per token.
func Compress(ids []int, tail int, scores []float32, pct int) ([]int, error) {
	if len(scores) != len(ids) {
		return nil, fmt.Errorf("slo: %d scores for %d tokens", len(scores), len(ids))
	}
	if tail < 0 || tail >= len(ids) {
		return nil, fmt.Errorf("slo: a tail of %d in a prompt of %d tokens", tail, len(ids))
	}
	if pct < 0 || pct > 100 {
		return nil, fmt.Errorf("slo: prompt level %d%%: want 0..100", pct)
	}
	body := make([]int, 0, len(ids))
	for i := 1; i < len(ids)-tail; i++ {
		body = append(body, i)
	}
	sort.SliceStable(body, func(a, b int) bool { return scores[body[a]] > scores[body[b]] })
	keep := KeptLen(len(ids), tail, pct) - 1 - tail
	mark := make([]bool, len(ids))
	mark[0] = true
	for _, i := range body[:keep] {
		mark[i] = true
	}
	for i := len(ids) - tail; i < len(ids); i++ {
		mark[i] = true
	}
	out := make([]int, 0, keep+1+tail)
	for i, k := range mark {
		if k {
			out = append(out, ids[i])
		}
	}
	return out, nil
}
