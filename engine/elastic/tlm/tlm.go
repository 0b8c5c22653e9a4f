// Package tlm runs ElastiLM's dual-head "TLM" (shared/systems-spec.md
// §3a.7, §3c) on tlite: a small BERT-style encoder over the LLM's own
// tokens whose score head rates each prompt token for retention and whose
// decision head picks a model level and a prompt level for the request's
// SLO, given to it as two special tokens. The model and tlm.json are
// written by models/elastic/tlm.py.
package tlm

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/tlite/tlite/engine"
)

// MetaName is the description written beside the TLM's model.onnx.
const MetaName = "tlm.json"

// Format is the tlm.json version Open accepts.
const Format = "tlite.tlm/1"

// Meta is tlm.json: how the input is laid out and what the heads' classes
// mean.
type Meta struct {
	Format string `json:"format"`
	// Grid is the levels (percent) the decision head's classes stand for,
	// for the model and for the prompt alike.
	Grid []int `json:"grid"`
	// MaxPositions bounds the input: Prefix slots plus the prompt.
	MaxPositions int `json:"max_positions"`
	// CLS, TTFT0 and TPOT0 are the ids of the class token and of the SLO
	// tokens for fraction 0 (fraction k/SLOSteps is TTFT0+k).
	CLS      int `json:"cls"`
	TTFT0    int `json:"ttft0"`
	TPOT0    int `json:"tpot0"`
	SLOSteps int `json:"slo_steps"`
	Prefix   int `json:"prefix"`
}

func (m *Meta) check() error {
	if m.Format != Format {
		return fmt.Errorf("format %q, want %q", m.Format, Format)
	}
	if len(m.Grid) == 0 {
		return errors.New("empty grid")
	}
	for _, g := range m.Grid {
		if g < 1 || g > 100 {
			return fmt.Errorf("grid level %d: want 1..100", g)
		}
	}
	if m.Prefix != 3 || m.SLOSteps < 1 || m.MaxPositions <= m.Prefix+1 {
		return fmt.Errorf("prefix %d, slo steps %d, max positions %d: want a prefix of 3 (CLS, TTFT, TPOT)", m.Prefix, m.SLOSteps, m.MaxPositions)
	}
	return nil
}

// TLM is an open TLM session.
type TLM struct {
	Meta Meta
	s    *engine.Session
}

// Open opens dir/model.onnx with dir/tlm.json.
func Open(dir string, opts engine.Options) (*TLM, error) {
	b, err := os.ReadFile(filepath.Join(dir, MetaName))
	if err != nil {
		return nil, fmt.Errorf("tlm: %w", err)
	}
	var t TLM
	if err := json.Unmarshal(b, &t.Meta); err != nil {
		return nil, fmt.Errorf("tlm: %s: %w", MetaName, err)
	}
	if err := t.Meta.check(); err != nil {
		return nil, fmt.Errorf("tlm: %s: %w", filepath.Join(dir, MetaName), err)
	}
	// The plan is sized for the longest input the TLM takes.
	max := map[string]int64{"seq": int64(t.Meta.MaxPositions)}
	for k, v := range opts.Max {
		max[k] = v
	}
	opts.Max = max
	s, err := engine.Open(filepath.Join(dir, "model.onnx"), opts)
	if err != nil {
		return nil, fmt.Errorf("tlm: %w", err)
	}
	want := map[string]bool{"retain_logits": false, "model_logits": false, "prompt_logits": false}
	for _, o := range s.Outputs() {
		if _, ok := want[o.Name]; ok {
			want[o.Name] = true
		}
	}
	for n, ok := range want {
		if !ok {
			s.Close()
			return nil, fmt.Errorf("tlm: %s has no output %q", dir, n)
		}
	}
	t.s = s
	return &t, nil
}

// Close releases the session.
func (t *TLM) Close() error { return t.s.Close() }

// Session is the engine session (for its profile and device).
func (t *TLM) Session() *engine.Session { return t.s }

// Result is one TLM run.
type Result struct {
	// Scores has a retain logit per prompt token; the first token (BOS)
	// and tokens cut off the front of a long prompt get +Inf and -Inf.
	Scores []float32
	// Model and Prompt are the decision head's picks (levels in percent).
	Model, Prompt int
	// ModelLogits and PromptLogits are the heads' raw outputs.
	ModelLogits, PromptLogits []float32
	// Time is the run's wall time.
	Time time.Duration
}

// sloToken maps a fraction to its token's offset: round(steps × f),
// clamped to 0..steps.
func sloToken(f float64, steps int) int {
	k := int(math.Floor(f*float64(steps) + 0.5))
	if k < 0 {
		k = 0
	}
	if k > steps {
		k = steps
	}
	return k
}

// Input is the TLM's input for a prompt (its first token, the BOS, left
// out) and an SLO: [CLS, TTFT-k, TPOT-k, the last MaxPositions-3 tokens].
func (t *TLM) Input(ids []int, ttft, tpot float64) []int64 {
	m := t.Meta
	body := ids
	if len(body) > 0 {
		body = body[1:]
	}
	if room := m.MaxPositions - m.Prefix; len(body) > room {
		body = body[len(body)-room:]
	}
	in := make([]int64, 0, m.Prefix+len(body))
	in = append(in, int64(m.CLS), int64(m.TTFT0+sloToken(ttft, m.SLOSteps)), int64(m.TPOT0+sloToken(tpot, m.SLOSteps)))
	for _, id := range body {
		in = append(in, int64(id))
	}
	return in
}

// Run rates the prompt ids (BOS first) for an SLO of fractions ttft and
// tpot of the full model's latency.
func (t *TLM) Run(ids []int, ttft, tpot float64) (Result, error) {
	if len(ids) < 2 {
		return Result{}, fmt.Errorf("tlm: a prompt of %d tokens: want a BOS and at least one token", len(ids))
	}
	if !(ttft > 0) || !(tpot > 0) {
		return Result{}, fmt.Errorf("tlm: SLO fractions %v, %v: want positive", ttft, tpot)
	}
	in := t.Input(ids, ttft, tpot)
	t0 := time.Now()
	out, err := t.s.RunTensors(map[string]engine.Tensor{"input_ids": engine.NewTensor([]int{1, len(in)}, in)})
	if err != nil {
		return Result{}, fmt.Errorf("tlm: %w", err)
	}
	res := Result{Time: time.Since(t0)}
	get := func(name string, n int) ([]float32, error) {
		v, ok := out[name].Float32s()
		if !ok || len(v) != n {
			return nil, fmt.Errorf("tlm: output %s: %d float32 values, want %d", name, len(v), n)
		}
		return v, nil
	}
	sc, err := get("retain_logits", len(in))
	if err != nil {
		return Result{}, err
	}
	if res.ModelLogits, err = get("model_logits", len(t.Meta.Grid)); err != nil {
		return Result{}, err
	}
	if res.PromptLogits, err = get("prompt_logits", len(t.Meta.Grid)); err != nil {
		return Result{}, err
	}
	res.Model = t.Meta.Grid[argmax(res.ModelLogits)]
	res.Prompt = t.Meta.Grid[argmax(res.PromptLogits)]
	res.Scores = make([]float32, len(ids))
	res.Scores[0] = float32(math.Inf(1))
	cut := len(ids) - 1 - (len(in) - t.Meta.Prefix)
	for i := 1; i <= cut; i++ {
		res.Scores[i] = float32(math.Inf(-1))
	}
	copy(res.Scores[1+cut:], sc[t.Meta.Prefix:])
	return res, nil
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
