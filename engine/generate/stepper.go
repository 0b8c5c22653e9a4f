// Package generate turns a decoder-only language model into text: a Stepper
// feeds the model its past (the KV cache), a Sampler picks the next token
// from the logits, and a Generator runs the loop (prefill of the prompt in
// one step, then one token per step) and streams the text as it completes.
//
// Two ways of keeping the past are foreseen behind the Stepper interface:
// Explicit, here, which feeds a model's present outputs back as its past
// inputs (a copy through the host every step), and an in-place cache owned
// by the session (engine/kv), which keeps K/V on the device.
package generate

import (
	"fmt"
	"strings"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/symshape"
)

// Stepper is how a generator runs a decoder over a growing sequence (batch
// one): each Step appends tokens to the sequence the model has seen and
// returns their logits.
type Stepper interface {
	// Step runs the model on tokens placed at positions (normally the
	// current length plus 0, 1, ...) with everything stepped since the last
	// Reset as context. The logits are row-major [len(tokens), Vocab()], or
	// only the last row ([Vocab()]) for a stepper made to return just that.
	// On error the sequence is as it was before the call.
	Step(tokens []int, positions []int) (logits []float32, err error)
	// Reset empties the sequence.
	Reset() error
	// MaxContext is the most tokens a sequence may hold.
	MaxContext() int
	// Vocab is the length of one row of logits.
	Vocab() int
}

// Config configures NewExplicit.
type Config struct {
	// MaxContext caps the sequence length below what the session's plan
	// allows (a model trained on short contexts, or learned positions).
	// 0 means the session's limit.
	MaxContext int
	// LastOnly makes Step return only the last row of logits.
	LastOnly bool
	// AttentionStats opens the in-place cache with the engine's attention
	// statistics (engine.KVConfig.AttentionStats: what LLMS ranks chunks
	// by); the explicit cache ignores it.
	AttentionStats bool
}

// kvPort is one past input and the present output that feeds it next step.
type kvPort struct {
	in, out string
	dtype   tensor.Dtype
	shape   []int // with batch 1 and the past axis 0
	axis    int   // the past-length axis
}

// Explicit runs a model that takes its KV cache as inputs and returns the
// extended cache as outputs: LLaMA-style per-layer past_key_values.{i}.key
// and .value (-> present.{i}.key/.value) or GPT-2-style combined
// past_key_values.{i} (-> present.{i}). It keeps the present tensors on the
// host and passes them as the past of the next step.
type Explicit struct {
	s      *engine.Session
	cfg    Config
	ids    string
	idsT   tensor.Dtype
	mask   string
	maskT  tensor.Dtype
	pos    string
	posT   tensor.Dtype
	logits string
	kv     []kvPort
	vocab  int
	maxSeq int
	maxCtx int

	n    int                      // tokens in the sequence
	past map[string]*tensor.Dense // by past input name
}

// NewExplicit inspects s's inputs and outputs and returns a stepper over it.
// Inputs it recognises: input_ids (required), attention_mask and
// position_ids (optional), and past inputs named past_key_values.* whose
// outputs are the same names with "present" in place of "past_key_values".
func NewExplicit(s *engine.Session, cfg Config) (*Explicit, error) {
	if s.LastLogits() {
		// The session has no other rows to return.
		cfg.LastOnly = true
	}
	e := &Explicit{s: s, cfg: cfg, past: map[string]*tensor.Dense{}}
	outs := map[string]engine.Port{}
	for _, p := range s.Outputs() {
		outs[p.Name] = p
	}
	var batch symshape.Expr
	ins := s.Inputs()
	for _, p := range ins {
		if p.Name != "input_ids" {
			continue
		}
		if len(p.Shape) != 2 {
			return nil, fmt.Errorf("generate: input_ids has shape %s, want [batch, seq]", symshape.FormatShape(p.Shape))
		}
		batch = p.Shape[0]
	}
	if !batch.IsValid() {
		return nil, fmt.Errorf("generate: the model has no input_ids input")
	}
	maxima := s.Maxima()
	limit := func(e symshape.Expr) (int, bool) {
		if v, ok := e.Const(); ok {
			return int(v), true
		}
		if name, ok := e.SymName(); ok {
			if v, ok := maxima[name]; ok {
				return int(v), true
			}
		}
		return 0, false
	}
	maxCtx := -1
	var seqDim symshape.Expr
	bound := func(v int) {
		if maxCtx < 0 || v < maxCtx {
			maxCtx = v
		}
	}
	for _, p := range ins {
		dt, err := denseType(p)
		if err != nil {
			return nil, err
		}
		switch {
		case p.Name == "input_ids":
			e.ids, e.idsT = p.Name, dt
			seqDim = p.Shape[1]
			if v, ok := limit(p.Shape[1]); ok {
				e.maxSeq = v
			}
		case p.Name == "attention_mask":
			if len(p.Shape) != 2 {
				return nil, fmt.Errorf("generate: attention_mask has shape %s, want [batch, total]", symshape.FormatShape(p.Shape))
			}
			e.mask, e.maskT = p.Name, dt
			if v, ok := limit(p.Shape[1]); ok {
				bound(v)
			}
		case p.Name == "position_ids":
			if len(p.Shape) != 2 {
				return nil, fmt.Errorf("generate: position_ids has shape %s, want [batch, seq]", symshape.FormatShape(p.Shape))
			}
			e.pos, e.posT = p.Name, dt
		case strings.HasPrefix(p.Name, "past_key_values"):
			out := "present" + strings.TrimPrefix(p.Name, "past_key_values")
			if _, ok := outs[out]; !ok {
				return nil, fmt.Errorf("generate: past input %q has no matching output %q", p.Name, out)
			}
			kp := kvPort{in: p.Name, out: out, dtype: dt, axis: -1}
			for a, d := range p.Shape {
				if d.Equal(batch) {
					kp.shape = append(kp.shape, 1)
					continue
				}
				if v, ok := d.Const(); ok {
					kp.shape = append(kp.shape, int(v))
					continue
				}
				if b, ok := batch.SymName(); ok {
					// A multiple of the batch (BLOOM's batch * heads).
					if v, ok := d.Substitute(map[string]symshape.Expr{b: symshape.Const(1)}).Const(); ok {
						kp.shape = append(kp.shape, int(v))
						continue
					}
				}
				if kp.axis >= 0 {
					return nil, fmt.Errorf("generate: past input %q has shape %s: two dims (%d and %d) could be the past length", p.Name, symshape.FormatShape(p.Shape), kp.axis, a)
				}
				kp.axis = a
				kp.shape = append(kp.shape, 0)
				if v, ok := limit(d); ok {
					// The last token of a full context is stepped with
					// a past one shorter.
					bound(v + 1)
				}
			}
			if kp.axis < 0 {
				return nil, fmt.Errorf("generate: past input %q has shape %s: no symbolic past-length dim", p.Name, symshape.FormatShape(p.Shape))
			}
			e.kv = append(e.kv, kp)
		default:
			return nil, fmt.Errorf("generate: the model has input %q (%s %s), which a generator does not know how to feed", p.Name, p.Type, symshape.FormatShape(p.Shape))
		}
	}
	if len(e.kv) == 0 {
		return nil, fmt.Errorf("generate: the model has no past_key_values inputs; a stepper needs a KV-cache model")
	}
	// A limit derived from the model (a learned position table) bounds
	// past + seq, the tokens a sequence holds.
	for _, p := range ins {
		if p.Name == e.kv[0].in {
			if v, _, ok := s.ExprLimit(symshape.Add(p.Shape[e.kv[0].axis], seqDim)); ok {
				bound(int(v))
			}
		}
	}
	if lp, ok := outs["logits"]; ok {
		e.logits = lp.Name
	} else {
		for _, p := range s.Outputs() {
			if !strings.HasPrefix(p.Name, "present") {
				e.logits = p.Name
				break
			}
		}
	}
	if e.logits == "" {
		return nil, fmt.Errorf("generate: the model has no logits output")
	}
	if sh := outs[e.logits].Shape; len(sh) > 0 {
		if v, ok := sh[len(sh)-1].Const(); ok {
			e.vocab = int(v)
		}
	}
	if e.vocab <= 0 {
		return nil, fmt.Errorf("generate: output %q has shape %s: want a constant vocabulary as its last dim", e.logits, symshape.FormatShape(outs[e.logits].Shape))
	}
	if maxCtx < 0 {
		return nil, fmt.Errorf("generate: the session declares no maximum for the past length")
	}
	if cfg.MaxContext > 0 && cfg.MaxContext < maxCtx {
		maxCtx = cfg.MaxContext
	}
	e.maxCtx = maxCtx
	if e.maxSeq <= 0 {
		e.maxSeq = maxCtx
	}
	return e, e.Reset()
}

// denseType is the gorgonia element type that feeds port p.
func denseType(p engine.Port) (tensor.Dtype, error) {
	switch p.Type {
	case "int64":
		return tensor.Int64, nil
	case "int32":
		return tensor.Int32, nil
	case "float32", "float16":
		return tensor.Float32, nil
	case "bool":
		return tensor.Bool, nil
	}
	return tensor.Dtype{}, fmt.Errorf("generate: input %q has element type %s, which a generator cannot feed", p.Name, p.Type)
}

// Session is the session the stepper runs.
func (e *Explicit) Session() *engine.Session { return e.s }

// MaxContext is the most tokens a sequence may hold.
func (e *Explicit) MaxContext() int { return e.maxCtx }

// Vocab is the length of one row of logits.
func (e *Explicit) Vocab() int { return e.vocab }

// Len is the number of tokens in the sequence.
func (e *Explicit) Len() int { return e.n }

// Reset empties the sequence.
func (e *Explicit) Reset() error {
	e.n = 0
	for _, kp := range e.kv {
		e.past[kp.in] = tensor.New(tensor.WithShape(kp.shape...), tensor.Of(kp.dtype))
	}
	return nil
}

// Step runs the tokens, in pieces of at most the session's maximum sequence
// length, and keeps the extended cache.
func (e *Explicit) Step(tokens []int, positions []int) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("generate: Step with no tokens")
	}
	if len(positions) != len(tokens) {
		return nil, fmt.Errorf("generate: Step with %d tokens and %d positions", len(tokens), len(positions))
	}
	if e.n+len(tokens) > e.maxCtx {
		return nil, fmt.Errorf("generate: %d tokens after %d do not fit in a context of %d: %w", len(tokens), e.n, e.maxCtx, engine.ErrContextFull)
	}
	for i, id := range tokens {
		if id < 0 || id >= e.vocab {
			return nil, fmt.Errorf("generate: token %d at index %d is outside the vocabulary [0, %d)", id, i, e.vocab)
		}
	}
	if e.pos == "" {
		// The model derives positions from the past length itself.
		for i, p := range positions {
			if p != e.n+i {
				return nil, fmt.Errorf("generate: the model has no position_ids input, so token %d must be at position %d (the sequence length), not %d", i, e.n+i, p)
			}
		}
	}
	saved, savedN := make(map[string]*tensor.Dense, len(e.past)), e.n
	for k, v := range e.past {
		saved[k] = v
	}
	var out []float32
	if !e.cfg.LastOnly {
		out = make([]float32, 0, len(tokens)*e.vocab)
	}
	for start := 0; start < len(tokens); start += e.maxSeq {
		end := min(start+e.maxSeq, len(tokens))
		rows, err := e.run(tokens[start:end], positions[start:end])
		if err != nil {
			e.past, e.n = saved, savedN
			return nil, err
		}
		if e.cfg.LastOnly {
			out = rows[len(rows)-e.vocab:]
		} else {
			out = append(out, rows...)
		}
	}
	return out, nil
}

// run is one session run of at most maxSeq tokens.
func (e *Explicit) run(tokens, positions []int) ([]float32, error) {
	seq := len(tokens)
	feeds := map[string]*tensor.Dense{e.ids: intTensor(e.idsT, tokens, seq)}
	if e.mask != "" {
		ones := make([]int, e.n+seq)
		for i := range ones {
			ones[i] = 1
		}
		feeds[e.mask] = intTensor(e.maskT, ones, e.n+seq)
	}
	if e.pos != "" {
		feeds[e.pos] = intTensor(e.posT, positions, seq)
	}
	for _, kp := range e.kv {
		feeds[kp.in] = e.past[kp.in]
	}
	res, err := e.s.Run(feeds)
	if err != nil {
		return nil, fmt.Errorf("generate: running %d tokens after %d: %w", seq, e.n, err)
	}
	lt := res[e.logits]
	if lt == nil {
		return nil, fmt.Errorf("generate: the run returned no %q", e.logits)
	}
	rows := seq
	if e.s.LastLogits() {
		rows = 1
	}
	logits, ok := lt.Data().([]float32)
	if !ok || len(logits) != rows*e.vocab {
		return nil, fmt.Errorf("generate: output %q is %v %v, want float32 [1, %d, %d]", e.logits, lt.Dtype(), lt.Shape(), rows, e.vocab)
	}
	next := make(map[string]*tensor.Dense, len(e.kv))
	for _, kp := range e.kv {
		pt := res[kp.out]
		if pt == nil {
			return nil, fmt.Errorf("generate: the run returned no %q", kp.out)
		}
		sh := pt.Shape()
		if len(sh) != len(kp.shape) || sh[kp.axis] != e.n+seq {
			return nil, fmt.Errorf("generate: output %q has shape %v, want length %d on axis %d", kp.out, sh, e.n+seq, kp.axis)
		}
		next[kp.in] = pt
	}
	e.past = next
	e.n += seq
	return logits, nil
}

// intTensor makes a [1, n] integer tensor of type dt.
func intTensor(dt tensor.Dtype, v []int, n int) *tensor.Dense {
	switch dt {
	case tensor.Int32:
		b := make([]int32, n)
		for i := range b {
			b[i] = int32(v[i])
		}
		return tensor.New(tensor.WithShape(1, n), tensor.WithBacking(b))
	case tensor.Bool:
		b := make([]bool, n)
		for i := range b {
			b[i] = v[i] != 0
		}
		return tensor.New(tensor.WithShape(1, n), tensor.WithBacking(b))
	}
	b := make([]int64, n)
	for i := range b {
		b[i] = int64(v[i])
	}
	return tensor.New(tensor.WithShape(1, n), tensor.WithBacking(b))
}

// ContextMaxima returns symbol maxima (engine.Options.Max) that size a
// decoder's memory plan for one sequence of up to ctx tokens: the batch
// symbol (input_ids' first dim) is 1, every other symbol of an input dim
// (sequence, past and total lengths) is ctx. Declared maxima in keep win.
func ContextMaxima(m *graph.Model, ctx int, keep map[string]int64) (map[string]int64, error) {
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("generate: no model")
	}
	batch := ""
	for _, v := range m.Graph.Inputs {
		if v.Name == "input_ids" && len(v.Declared) == 2 {
			batch = v.Declared[0].Param
		}
	}
	out := map[string]int64{}
	for _, v := range m.Graph.Inputs {
		for _, d := range v.Declared {
			switch {
			case d.Param == "":
			case d.Param == batch:
				out[d.Param] = 1
			default:
				out[d.Param] = int64(ctx)
			}
		}
	}
	for k, v := range keep {
		out[k] = v
	}
	return out, nil
}

// OpenExplicit opens the model at path with the plan sized for ctx tokens
// (see ContextMaxima; opts.Max entries win) and returns a stepper over it
// that owns the session: close it with Close.
func OpenExplicit(path string, opts engine.Options, ctx int, cfg Config) (*Explicit, error) {
	m, err := graph.Load(path)
	if err != nil {
		return nil, err
	}
	maxima, err := ContextMaxima(m, ctx, opts.Max)
	m.Close()
	if err != nil {
		return nil, err
	}
	opts.Max = maxima
	if cfg.LastOnly {
		opts.LastLogits = true
	}
	s, err := engine.Open(path, opts)
	if err != nil {
		return nil, err
	}
	if cfg.MaxContext <= 0 || cfg.MaxContext > ctx {
		cfg.MaxContext = ctx
	}
	e, err := NewExplicit(s, cfg)
	if err != nil {
		s.Close()
		return nil, err
	}
	return e, nil
}

// Close closes the session.
func (e *Explicit) Close() error { return e.s.Close() }
