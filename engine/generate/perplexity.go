package generate

import (
	"fmt"
	"math"
)

// Eval is a language-modelling score: the summed negative log-likelihood
// (natural log) of predicted tokens.
type Eval struct {
	NLL       float64
	Predicted int
}

// Add combines two scores (e.g. of several documents).
func (e Eval) Add(o Eval) Eval { return Eval{NLL: e.NLL + o.NLL, Predicted: e.Predicted + o.Predicted} }

// Loss is the mean negative log-likelihood per predicted token.
func (e Eval) Loss() float64 {
	if e.Predicted == 0 {
		return math.NaN()
	}
	return e.NLL / float64(e.Predicted)
}

// Perplexity is exp(Loss).
func (e Eval) Perplexity() float64 { return math.Exp(e.Loss()) }

// BitsPerByte is the summed negative log-likelihood in bits divided by the
// number of UTF-8 bytes of the text scored: unlike perplexity it does not
// depend on how the tokenizer cuts the text, so models with different
// vocabularies compare on it.
func (e Eval) BitsPerByte(textBytes int) float64 {
	if textBytes <= 0 {
		return math.NaN()
	}
	return e.NLL / math.Ln2 / float64(textBytes)
}

// Perplexity scores tokens with the model behind st: the text is cut into
// consecutive windows of at most window tokens (0: the stepper's
// MaxContext), each run from an empty context in one step, and every token
// of a window but its first is predicted from the ones before it. So a text
// that fits in one window is scored exactly as a single forward pass
// would; longer texts lose the context across window boundaries. The
// stepper must return every row of logits.
func Perplexity(st Stepper, tokens []int, window int) (Eval, error) {
	return PerplexityBuckets(st, tokens, window, nil)
}

// Buckets splits a score by where the predicted token sits in its window
// (its index from the window's first token, a BOS when there is one): how
// much a model gains from a longer context shows as a loss that falls from
// bucket to bucket.
type Buckets struct {
	// Edges are ascending positions; bucket i holds the predictions at
	// positions in [Edges[i], Edges[i+1]). Predictions outside every bucket
	// are counted only in the total.
	Edges []int
	// Evals has one score per bucket, len(Edges)-1.
	Evals []Eval
}

// NewBuckets returns empty buckets with the given edges, which must be at
// least two, non-negative and strictly ascending.
func NewBuckets(edges ...int) (*Buckets, error) {
	if len(edges) < 2 {
		return nil, fmt.Errorf("generate: buckets need at least two edges, got %v", edges)
	}
	for i, e := range edges {
		if e < 0 || (i > 0 && e <= edges[i-1]) {
			return nil, fmt.Errorf("generate: bucket edges %v: want non-negative and strictly ascending", edges)
		}
	}
	return &Buckets{Edges: append([]int(nil), edges...), Evals: make([]Eval, len(edges)-1)}, nil
}

func (b *Buckets) add(pos int, nll float64) {
	// A handful of buckets: a linear scan beats a search.
	for i := 0; i+1 < len(b.Edges); i++ {
		if pos >= b.Edges[i] && pos < b.Edges[i+1] {
			b.Evals[i].NLL += nll
			b.Evals[i].Predicted++
			return
		}
	}
}

// PerplexityBuckets is Perplexity that also adds every prediction to the
// bucket of its position when b is not nil.
func PerplexityBuckets(st Stepper, tokens []int, window int, b *Buckets) (Eval, error) {
	var ev Eval
	if window <= 0 || window > st.MaxContext() {
		window = st.MaxContext()
	}
	if window < 2 {
		return ev, fmt.Errorf("generate: perplexity window %d: want at least 2 tokens", window)
	}
	vocab := st.Vocab()
	for start := 0; start < len(tokens)-1; start += window {
		w := tokens[start:min(start+window, len(tokens))]
		if len(w) < 2 {
			break
		}
		if err := st.Reset(); err != nil {
			return ev, fmt.Errorf("generate: perplexity: %w", err)
		}
		pos := make([]int, len(w))
		for i := range pos {
			pos[i] = i
		}
		logits, err := st.Step(w, pos)
		if err != nil {
			return ev, fmt.Errorf("generate: perplexity window at token %d: %w", start, err)
		}
		if len(logits) != len(w)*vocab {
			return ev, fmt.Errorf("generate: perplexity needs every row of logits: got %d values for %d tokens of vocabulary %d (a LastOnly stepper?)", len(logits), len(w), vocab)
		}
		for i := 0; i+1 < len(w); i++ {
			next := w[i+1]
			if next < 0 || next >= vocab {
				return ev, fmt.Errorf("generate: perplexity: token %d at index %d is outside the vocabulary [0, %d)", next, start+i+1, vocab)
			}
			nll := -LogProb(logits[i*vocab:(i+1)*vocab], next)
			ev.NLL += nll
			ev.Predicted++
			if b != nil {
				b.add(i+1, nll)
			}
		}
	}
	return ev, nil
}

// LogProb is log(softmax(row)[k]), computed in float64 with the maximum
// subtracted: the log-probability of token k under one row of logits.
func LogProb(row []float32, k int) float64 {
	m := math.Inf(-1)
	for _, v := range row {
		m = math.Max(m, float64(v))
	}
	var sum float64
	for _, v := range row {
		sum += math.Exp(float64(v) - m)
	}
	return float64(row[k]) - m - math.Log(sum)
}
