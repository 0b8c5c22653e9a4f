package generate

import (
	"math"
	"testing"
)

func sampler(t *testing.T, cfg Sampling) *Sampler {
	t.Helper()
	s, err := NewSampler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func closeTo(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d probabilities, want %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("%s: p[%d] = %.15f, want %.15f (all: %v)", what, i, got[i], want[i], got)
			return
		}
	}
}

// softmaxOf is the textbook softmax of a few values, written out so the
// expected distributions below are checkable by hand.
func softmaxOf(v ...float64) []float64 {
	var sum float64
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = math.Exp(x)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func TestDistributions(t *testing.T) {
	logits := []float32{1, 2, 3, 4}
	e := math.E
	// Temperature 1: softmax(1, 2, 3, 4) = e^i / (e + e^2 + e^3 + e^4).
	z := e + e*e + e*e*e + e*e*e*e
	closeTo(t, "T=1", sampler(t, Sampling{Temperature: 1}).Distribution(logits, nil),
		[]float64{e / z, e * e / z, e * e * e / z, e * e * e * e / z})
	// Temperature 2 halves the logits: softmax(0.5, 1, 1.5, 2).
	closeTo(t, "T=2", sampler(t, Sampling{Temperature: 2}).Distribution(logits, nil), softmaxOf(0.5, 1, 1.5, 2))
	// Top-k 2 keeps logits 3 and 4: e^3/(e^3+e^4) = 1/(1+e).
	closeTo(t, "top-k 2", sampler(t, Sampling{Temperature: 1, TopK: 2}).Distribution(logits, nil),
		[]float64{0, 0, 1 / (1 + e), e / (1 + e)})
	// Top-k keeps every token tied with the k-th.
	closeTo(t, "top-k tie", sampler(t, Sampling{Temperature: 1, TopK: 2}).Distribution([]float32{3, 1, 3, 4}, nil),
		softmaxOf3tie())
	// Greedy is one-hot at the argmax, the first of ties.
	closeTo(t, "greedy", sampler(t, Sampling{}).Distribution([]float32{0, 5, 5, -1}, nil), []float64{0, 1, 0, 0})

	// Top-p over probabilities 0.1, 0.2, 0.3, 0.4 (logits are their logs):
	// sorted 0.4, 0.3, 0.2, 0.1; 0.4 < 0.5 so 0.3 is kept too, then 0.7
	// reaches 0.5 and the rest go: 0.4/0.7 and 0.3/0.7.
	lp := []float32{float32(math.Log(0.1)), float32(math.Log(0.2)), float32(math.Log(0.3)), float32(math.Log(0.4))}
	got := sampler(t, Sampling{Temperature: 1, TopP: 0.5}).Distribution(lp, nil)
	want := []float64{0, 0, 3.0 / 7, 4.0 / 7}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-6 { // float32 logs
			t.Errorf("top-p 0.5: %v, want %v", got, want)
			break
		}
	}
	// p = 0.35: the most likely token (0.4) reaches it alone.
	got = sampler(t, Sampling{Temperature: 1, TopP: 0.35}).Distribution(lp, nil)
	if got[3] != 1 || got[2] != 0 {
		t.Errorf("top-p 0.35: %v, want only the 0.4 token", got)
	}
	// p = 0.95: 0.4+0.3+0.2 = 0.9 < 0.95, so all four stay.
	got = sampler(t, Sampling{Temperature: 1, TopP: 0.95}).Distribution(lp, nil)
	if got[0] < 0.09 {
		t.Errorf("top-p 0.95: %v, want every token", got)
	}
	// Top-k then top-p: k=3 drops 0.1 and renormalises to 2/9, 3/9, 4/9;
	// p=0.5: 4/9 < 0.5, keep 3/9 as well: 3/7, 4/7.
	got = sampler(t, Sampling{Temperature: 1, TopK: 3, TopP: 0.5}).Distribution(lp, nil)
	want = []float64{0, 0, 3.0 / 7, 4.0 / 7}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-6 {
			t.Errorf("top-k 3 + top-p 0.5: %v, want %v", got, want)
			break
		}
	}
}

// softmaxOf3tie is top-k 2 over (3, 1, 3, 4): the two 3s tie for second
// place, so tokens 0, 2 and 3 stay: softmax over (3, 3, 4).
func softmaxOf3tie() []float64 {
	p := softmaxOf(3, 3, 4)
	return []float64{p[0], 0, p[1], p[2]}
}

func TestRepetitionPenalty(t *testing.T) {
	// Penalty 2 on tokens 0 and 1 (token 0 listed twice, penalised once):
	// 2 -> 1, -1 -> -2; token 2 (0.5) and 3 (1.5) are not in the history.
	s := sampler(t, Sampling{Temperature: 1, RepetitionPenalty: 2})
	closeTo(t, "penalty 2", s.Distribution([]float32{2, -1, 0.5, 1.5}, []int{0, 1, 0}), softmaxOf(1, -2, 0.5, 1.5))
	// Greedy applies the penalty too: token 0 (2 -> 1) loses to token 3.
	g := sampler(t, Sampling{RepetitionPenalty: 2})
	if id := g.Sample([]float32{2, -1, 0.5, 1.5}, []int{0}); id != 3 {
		t.Errorf("greedy with penalty picked %d, want 3", id)
	}
	if id := g.Sample([]float32{2, -1, 0.5, 1.5}, nil); id != 0 {
		t.Errorf("greedy without history picked %d, want 0", id)
	}
	// History ids outside the vocabulary are ignored.
	closeTo(t, "stray ids", s.Distribution([]float32{0, 1}, []int{-1, 7}), softmaxOf(0, 1))
}

// TestSampleFrequencies draws many tokens and checks their frequencies
// against the distribution: within 5 standard errors for 20000 draws.
func TestSampleFrequencies(t *testing.T) {
	s := sampler(t, Sampling{Temperature: 0.7, TopK: 3, Seed: 1})
	logits := []float32{0.2, 1.5, -0.3, 1.1, 0.9}
	p := s.Distribution(logits, nil)
	const n = 20000
	counts := make([]int, len(p))
	for range n {
		counts[s.Sample(logits, nil)]++
	}
	for i := range p {
		f := float64(counts[i]) / n
		se := math.Sqrt(p[i]*(1-p[i])/n) + 1e-9
		if math.Abs(f-p[i]) > 5*se {
			t.Errorf("token %d drawn %.4f of the time, probability %.4f", i, f, p[i])
		}
	}
	if counts[0] != 0 || counts[2] != 0 {
		t.Errorf("top-k 3 drew tokens outside the top 3: %v", counts)
	}
}

func TestSampleDeterministic(t *testing.T) {
	logits := make([]float32, 100)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)))
	}
	draw := func(seed int64) []int {
		s := sampler(t, Sampling{Temperature: 1.3, TopP: 0.9, Seed: seed})
		var out []int
		for range 50 {
			out = append(out, s.Sample(logits, out))
		}
		return out
	}
	a, b, c := draw(7), draw(7), draw(8)
	same := func(x, y []int) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Errorf("seed 7 twice gave different tokens:\n%v\n%v", a, b)
	}
	if same(a, c) {
		t.Errorf("seeds 7 and 8 gave the same 50 tokens")
	}
}

func TestSamplingValidate(t *testing.T) {
	for _, bad := range []Sampling{
		{Temperature: -1}, {Temperature: math.NaN()}, {TopK: -2}, {TopP: 1.5}, {TopP: -0.1}, {RepetitionPenalty: -1}, {RepetitionPenalty: math.NaN()},
	} {
		if _, err := NewSampler(bad); err == nil {
			t.Errorf("NewSampler(%+v) succeeded", bad)
		}
	}
}
