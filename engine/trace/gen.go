package trace

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"time"
)

// Pattern selects which context each call goes to.
type Pattern string

// The switching patterns of the LLMS paper (§4). The paper leaves their
// parameters open; ours follow systems-spec §1c.
const (
	// Random picks a context uniformly.
	Random Pattern = "random"
	// Markov is first order and favours recently used contexts: with
	// probability Config.MarkovStay the call goes to one of the
	// Config.MarkovRecent most recently used contexts (uniformly among
	// them), otherwise to a uniformly chosen context.
	Markov Pattern = "markov"
	// Gaussian weights context i by N(w_i; mean, σ), where w_i is the
	// midpoint of its delta range and mean and σ are the mean and standard
	// deviation of the w_i: moderate-workload contexts are likelier.
	Gaussian Pattern = "gaussian"
)

// ParsePattern accepts "random", "markov" or "gaussian".
func ParsePattern(s string) (Pattern, error) {
	switch p := Pattern(s); p {
	case Random, Markov, Gaussian:
		return p, nil
	}
	return "", fmt.Errorf("trace: unknown pattern %q (want random, markov or gaussian)", s)
}

// DeltaRange bounds the tokens one call adds to a context (prompt plus
// output), drawn uniformly in [Min, Max].
type DeltaRange struct {
	Name     string
	Min, Max int
}

// PaperDeltas are the per-call context growths of the six datasets of the
// LLMS paper (§4, Table 3), for a 4096-token maximum context.
var PaperDeltas = []DeltaRange{
	{"AGNews", 200, 500},
	{"XSum", 1000, 2000},
	{"SAMSum", 100, 300},
	{"CNN/DailyMail", 500, 1000},
	{"WMT17 de-en", 100, 500},
	{"SST-2", 10, 100},
}

// ScaleDeltas rescales ranges from the paper's 4096-token context to a
// model with maxContext tokens (spec §1c), keeping every bound ≥ 1.
func ScaleDeltas(ranges []DeltaRange, maxContext int) []DeltaRange {
	out := make([]DeltaRange, len(ranges))
	for i, r := range ranges {
		s := func(x int) int { return max(1, int(math.Round(float64(x)*float64(maxContext)/4096))) }
		out[i] = DeltaRange{r.Name, s(r.Min), max(s(r.Min), s(r.Max))}
	}
	return out
}

// Config describes a trace.
type Config struct {
	Contexts int           // number of contexts, ≥ 1
	Calls    int           // number of arrivals, ≥ 1
	MeanGap  time.Duration // mean inter-arrival time of the Poisson process (paper: 5 min)
	Pattern  Pattern
	// Deltas are assigned to contexts round-robin: context i draws its
	// calls' token counts from Deltas[i % len(Deltas)].
	Deltas []DeltaRange
	Seed   int64
	// Markov parameters; zero values mean the spec's 0.6 and 2.
	MarkovStay   float64
	MarkovRecent int
}

// Arrival is one call of the trace. The paper's entries also carry the
// prompt and its ground truth; here the system derives them from (Ctx,
// Call), e.g. the Call-th segment of the document assigned to Ctx, so one
// trace replays identically against every system.
type Arrival struct {
	Seq    int           `json:"seq"`    // position in the trace
	At     time.Duration `json:"at_ns"`  // virtual arrival time
	Ctx    int           `json:"ctx"`    // context id, 0 ≤ Ctx < Contexts
	Call   int           `json:"call"`   // how many earlier calls this context had
	Tokens int           `json:"tokens"` // tokens this call adds to the context
}

// Generate draws a trace; the same Config always gives the same trace.
func Generate(c Config) ([]Arrival, error) {
	if c.Contexts < 1 || c.Calls < 1 {
		return nil, fmt.Errorf("trace: need ≥ 1 context and ≥ 1 call, got %d and %d", c.Contexts, c.Calls)
	}
	if c.MeanGap <= 0 {
		return nil, fmt.Errorf("trace: mean gap %v must be positive", c.MeanGap)
	}
	if len(c.Deltas) == 0 {
		return nil, errors.New("trace: no delta ranges")
	}
	for _, d := range c.Deltas {
		if d.Min < 1 || d.Max < d.Min {
			return nil, fmt.Errorf("trace: delta range %q [%d, %d] is empty or not positive", d.Name, d.Min, d.Max)
		}
	}
	stay, recent := c.MarkovStay, c.MarkovRecent
	if stay == 0 {
		stay = 0.6
	}
	if recent == 0 {
		recent = 2
	}
	if stay < 0 || stay > 1 || recent < 1 {
		return nil, fmt.Errorf("trace: markov stay %v must be in [0,1] and recent %d ≥ 1", stay, recent)
	}
	var weights []float64
	switch c.Pattern {
	case Random, Markov:
	case Gaussian:
		weights = gaussianWeights(c.Contexts, c.Deltas)
	default:
		return nil, fmt.Errorf("trace: unknown pattern %q", c.Pattern)
	}

	rng := rand.New(rand.NewSource(c.Seed))
	calls := make([]int, c.Contexts)
	var mru []int // most recently used first
	out := make([]Arrival, c.Calls)
	var t time.Duration
	for i := range out {
		t += time.Duration(rng.ExpFloat64() * float64(c.MeanGap))
		var ctx int
		switch c.Pattern {
		case Random:
			ctx = rng.Intn(c.Contexts)
		case Markov:
			if len(mru) > 0 && rng.Float64() < stay {
				ctx = mru[rng.Intn(min(recent, len(mru)))]
			} else {
				ctx = rng.Intn(c.Contexts)
			}
		case Gaussian:
			ctx = pickWeighted(rng, weights)
		}
		d := c.Deltas[ctx%len(c.Deltas)]
		out[i] = Arrival{Seq: i, At: t, Ctx: ctx, Call: calls[ctx], Tokens: d.Min + rng.Intn(d.Max-d.Min+1)}
		calls[ctx]++
		mru = touch(mru, ctx)
	}
	return out, nil
}

// touch moves ctx to the front of the most-recently-used list.
func touch(mru []int, ctx int) []int {
	for i, x := range mru {
		if x == ctx {
			copy(mru[1:i+1], mru[:i])
			mru[0] = ctx
			return mru
		}
	}
	mru = append(mru, 0)
	copy(mru[1:], mru)
	mru[0] = ctx
	return mru
}

func gaussianWeights(n int, deltas []DeltaRange) []float64 {
	w := make([]float64, n)
	var mean float64
	for i := range w {
		d := deltas[i%len(deltas)]
		w[i] = float64(d.Min+d.Max) / 2
		mean += w[i]
	}
	mean /= float64(n)
	var v float64
	for _, x := range w {
		v += (x - mean) * (x - mean)
	}
	sigma := math.Sqrt(v / float64(n))
	for i, x := range w {
		if sigma == 0 {
			w[i] = 1
		} else {
			w[i] = math.Exp(-(x - mean) * (x - mean) / (2 * sigma * sigma))
		}
	}
	return w
}

func pickWeighted(rng *rand.Rand, w []float64) int {
	var sum float64
	for _, x := range w {
		sum += x
	}
	r := rng.Float64() * sum
	for i, x := range w {
		if r < x {
			return i
		}
		r -= x
	}
	return len(w) - 1
}
