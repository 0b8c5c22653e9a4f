package llms

import (
	"fmt"
	"math"
)

// Paired compares two policies item by item on the same recall items.
// Accuracies measured on the same items are correlated (an easy item is
// easy under both), so the error bar of their difference comes from the
// items on which the two disagree, not from the two accuracies' own
// standard errors.
type Paired struct {
	// N is the number of items.
	N int `json:"n"`
	// Both and Neither count the items both or neither policy got right;
	// OnlyA and OnlyB the discordant items (right under A only, under B
	// only).
	Both    int `json:"both"`
	OnlyA   int `json:"only_a"`
	OnlyB   int `json:"only_b"`
	Neither int `json:"neither"`
	// Diff is accuracy(A) − accuracy(B) = (OnlyA − OnlyB)/N.
	Diff float64 `json:"diff"`
	// StdErr is the paired standard error of Diff: the sample standard
	// deviation of the per-item differences (+1, 0 or −1) over √N.
	StdErr float64 `json:"stderr"`
	// P is the exact two-sided McNemar test: the probability, under "A and
	// B are equally likely to win a discordant item", of a split of the
	// OnlyA+OnlyB discordant items at least as uneven as the one seen
	// (binomial with p = 1/2; 1 when there are none).
	P float64 `json:"p"`
}

// PairCorrect compares per-item correctness a and b (the same items in the
// same order).
func PairCorrect(a, b []bool) (Paired, error) {
	if len(a) != len(b) {
		return Paired{}, fmt.Errorf("llms: pairing %d items with %d", len(a), len(b))
	}
	if len(a) == 0 {
		return Paired{}, fmt.Errorf("llms: pairing no items")
	}
	p := Paired{N: len(a)}
	d := make([]float64, len(a))
	for i := range a {
		switch {
		case a[i] && b[i]:
			p.Both++
		case a[i]:
			p.OnlyA++
			d[i] = 1
		case b[i]:
			p.OnlyB++
			d[i] = -1
		default:
			p.Neither++
		}
	}
	p.Diff, p.StdErr = meanStdErr(d)
	p.P = mcNemarExact(p.OnlyA, p.OnlyB)
	return p, nil
}

// mcNemarExact is the two-sided exact binomial test of a split x : y of
// discordant items under p = 1/2: twice the probability of the smaller
// tail, capped at 1.
func mcNemarExact(x, y int) float64 {
	n := x + y
	if n == 0 {
		return 1
	}
	k := min(x, y)
	// Σ_{i≤k} C(n,i) / 2^n, each term in logs so that n in the thousands
	// neither overflows the binomial nor underflows 2^-n.
	lnN := lgamma(n + 1)
	tail := 0.0
	for i := 0; i <= k; i++ {
		tail += math.Exp(lnN - lgamma(i+1) - lgamma(n-i+1) - float64(n)*math.Ln2)
	}
	return math.Min(1, 2*tail)
}

func lgamma(n int) float64 {
	v, _ := math.Lgamma(float64(n))
	return v
}
