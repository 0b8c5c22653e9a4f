package generate

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
)

// Sampling chooses how the next token is drawn from the logits. The zero
// value is greedy decoding.
type Sampling struct {
	// Temperature divides the logits; 0 means greedy (argmax).
	Temperature float64
	// TopK keeps the k most likely tokens (and any tied with the k-th);
	// 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches p (nucleus sampling); 0 or 1 keeps all.
	TopP float64
	// RepetitionPenalty discourages tokens already in the sequence (prompt
	// included), as in CTRL and Hugging Face: their positive logits are
	// divided by it and their negative logits multiplied. 0 or 1 is off.
	RepetitionPenalty float64
	// Seed makes sampling reproducible: the same seed, logits and history
	// give the same tokens.
	Seed int64
}

// Validate reports a setting out of range.
func (s Sampling) Validate() error {
	switch {
	case s.Temperature < 0 || math.IsNaN(s.Temperature) || math.IsInf(s.Temperature, 0):
		return fmt.Errorf("generate: temperature %v: want 0 (greedy) or more", s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("generate: top-k %d: want 0 (off) or more", s.TopK)
	case !(s.TopP >= 0 && s.TopP <= 1):
		return fmt.Errorf("generate: top-p %v: want a value in [0, 1] (0 or 1: off)", s.TopP)
	case !(s.RepetitionPenalty >= 0) || math.IsInf(s.RepetitionPenalty, 0):
		return fmt.Errorf("generate: repetition penalty %v: want a positive value (0 or 1: off)", s.RepetitionPenalty)
	}
	return nil
}

// Sampler draws tokens. The order of the processing steps is Hugging
// Face's: repetition penalty, temperature, top-k, top-p, then a draw from
// the softmax. A Sampler is not safe for concurrent use.
type Sampler struct {
	cfg    Sampling
	rng    *rand.Rand
	scores []float64
	idx    []int
	seen   map[int]bool
}

// NewSampler returns a sampler seeded with cfg.Seed.
func NewSampler(cfg Sampling) (*Sampler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{cfg: cfg, rng: rand.New(rand.NewSource(cfg.Seed)), seen: map[int]bool{}}, nil
}

// Greedy reports whether the sampler takes the argmax.
func (s *Sampler) Greedy() bool { return s.cfg.Temperature == 0 }

// penalised returns the logits as float64 after the repetition penalty over
// history (each token once, however often it occurs).
func (s *Sampler) penalised(logits []float32, history []int) []float64 {
	if cap(s.scores) < len(logits) {
		s.scores = make([]float64, len(logits))
	}
	sc := s.scores[:len(logits)]
	for i, v := range logits {
		sc[i] = float64(v)
	}
	if p := s.cfg.RepetitionPenalty; p != 0 && p != 1 {
		clear(s.seen)
		for _, t := range history {
			if t < 0 || t >= len(sc) || s.seen[t] {
				continue
			}
			s.seen[t] = true
			if sc[t] > 0 {
				sc[t] /= p
			} else {
				sc[t] *= p
			}
		}
	}
	return sc
}

// Distribution returns the probabilities the sampler draws from, after
// every processing step (a one-hot vector when greedy). history is the
// sequence so far, for the repetition penalty.
func (s *Sampler) Distribution(logits []float32, history []int) []float64 {
	sc := s.penalised(logits, history)
	probs := make([]float64, len(sc))
	if len(sc) == 0 {
		return probs
	}
	if s.Greedy() {
		probs[argmax(sc)] = 1
		return probs
	}
	for i := range sc {
		sc[i] /= s.cfg.Temperature
	}
	kept := s.filter(sc)
	// Softmax over the kept tokens, with the maximum subtracted so that
	// exp cannot overflow.
	m := math.Inf(-1)
	for _, i := range kept {
		m = math.Max(m, sc[i])
	}
	var sum float64
	for _, i := range kept {
		p := math.Exp(sc[i] - m)
		probs[i] = p
		sum += p
	}
	for _, i := range kept {
		probs[i] /= sum
	}
	return probs
}

// filter applies top-k and top-p to the scaled scores and returns the
// indices kept, most likely first.
func (s *Sampler) filter(sc []float64) []int {
	if cap(s.idx) < len(sc) {
		s.idx = make([]int, len(sc))
	}
	idx := s.idx[:len(sc)]
	for i := range idx {
		idx[i] = i
	}
	// Stable so that ties keep vocabulary order and results do not depend
	// on the sort's internals.
	sort.SliceStable(idx, func(a, b int) bool { return sc[idx[a]] > sc[idx[b]] })
	if k := s.cfg.TopK; k > 0 && k < len(idx) {
		// Tokens tied with the k-th are kept, as Hugging Face's
		// "score < k-th score" removal does.
		kth := sc[idx[k-1]]
		n := k
		for n < len(idx) && sc[idx[n]] >= kth {
			n++
		}
		idx = idx[:n]
	}
	if p := s.cfg.TopP; p > 0 && p < 1 {
		m := sc[idx[0]]
		var sum float64
		w := make([]float64, len(idx))
		for j, i := range idx {
			w[j] = math.Exp(sc[i] - m)
			sum += w[j]
		}
		// A token stays while the probability of the tokens before it is
		// below p: the smallest prefix reaching p, and at least one token.
		var cum float64
		n := 0
		for n < len(idx) && cum < p {
			cum += w[n] / sum
			n++
		}
		idx = idx[:n]
	}
	return idx
}

// Sample draws the next token.
func (s *Sampler) Sample(logits []float32, history []int) int {
	if s.Greedy() {
		return argmax(s.penalised(logits, history))
	}
	probs := s.Distribution(logits, history)
	u := s.rng.Float64()
	var cum float64
	last := -1
	for i, p := range probs {
		if p == 0 {
			continue
		}
		cum += p
		last = i
		if u < cum {
			return i
		}
	}
	if last < 0 {
		// Nothing had a probability (every logit -Inf or NaN).
		return argmax(s.penalised(logits, history))
	}
	// Rounding left the cumulative sum a hair below u.
	return last
}

// argmax returns the index of the largest value (the first of ties, as
// torch.argmax does), treating NaN as smaller than everything.
func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] || math.IsNaN(v[best]) && !math.IsNaN(x) {
			best = i
		}
	}
	return best
}
