package llms

import (
	"math"
	"testing"
)

func bools(s string) []bool {
	b := make([]bool, len(s))
	for i, c := range s {
		b[i] = c == '1'
	}
	return b
}

// TestPairCorrect on hand-made items whose counts, paired standard error
// and exact McNemar p are worked out by hand in the comments.
func TestPairCorrect(t *testing.T) {
	for _, tc := range []struct {
		a, b                        string
		both, onlyA, onlyB, neither int
		diff, se, p                 float64
	}{
		// d = 1,0,0,-1: mean 0, sample variance 2/3, se √(2/3/4); a 1:1
		// split: 2·(C(2,0)+C(2,1))/4 = 1.5, capped at 1.
		{"1100", "0101", 1, 1, 1, 1, 0, 0.408248, 1},
		// nine +1 and one 0: mean 0.9, variance 0.9/9 = 0.1, se √(0.1/10);
		// 9:0: 2/2^9.
		{"1111111111", "1000000000", 1, 9, 0, 0, 0.9, 0.1, 2.0 / 512},
		// 1:10 against A: 2·(1+11)/2^11, diff −9/12; d = ten −1, one +1,
		// one 0: sample variance 4.25/11.
		{"010000000001", "111111111110", 1, 1, 10, 0, -0.75, 0.179435, 24.0 / 2048},
		// 3:7: 2·(1+10+45+120)/2^10.
		{"1110000000", "0001111111", 0, 3, 7, 0, -0.4, 0.305505, 352.0 / 1024},
		// no discordant items: no evidence either way.
		{"1010", "1010", 2, 0, 0, 2, 0, 0, 1},
	} {
		got, err := PairCorrect(bools(tc.a), bools(tc.b))
		if err != nil {
			t.Fatal(err)
		}
		if got.N != len(tc.a) || got.Both != tc.both || got.OnlyA != tc.onlyA || got.OnlyB != tc.onlyB || got.Neither != tc.neither {
			t.Errorf("%s vs %s: counts %+v", tc.a, tc.b, got)
		}
		if math.Abs(got.Diff-tc.diff) > 1e-9 || math.Abs(got.StdErr-tc.se) > 1e-5 || math.Abs(got.P-tc.p) > 1e-9 {
			t.Errorf("%s vs %s: diff %g se %g p %g; want %g %g %g", tc.a, tc.b, got.Diff, got.StdErr, got.P, tc.diff, tc.se, tc.p)
		}
		// Swapping the policies negates the difference, keeps the rest.
		sw, err := PairCorrect(bools(tc.b), bools(tc.a))
		if err != nil {
			t.Fatal(err)
		}
		if sw.Diff != -got.Diff || sw.StdErr != got.StdErr || sw.P != got.P || sw.OnlyA != got.OnlyB {
			t.Errorf("%s vs %s swapped: %+v against %+v", tc.a, tc.b, sw, got)
		}
	}
	if _, err := PairCorrect(bools("10"), bools("1")); err == nil {
		t.Error("pairing 2 items with 1: no error")
	}
	if _, err := PairCorrect(nil, nil); err == nil {
		t.Error("pairing no items: no error")
	}
}

// TestMcNemarLarge: thousands of discordant items neither overflow nor
// give NaN; a tie is 1, a lopsided split tiny but positive.
func TestMcNemarLarge(t *testing.T) {
	if p := mcNemarExact(1000, 1000); p != 1 {
		t.Errorf("1000:1000 p %g", p)
	}
	p := mcNemarExact(1500, 500)
	if !(p > 0 && p < 1e-40) {
		t.Errorf("1500:500 p %g", p)
	}
	// 60:40 of 100: the normal approximation with continuity correction
	// gives 2·(1−Φ(1.9)) ≈ 0.057; the exact value is 0.0569.
	if p := mcNemarExact(60, 40); math.Abs(p-0.0569) > 0.0005 {
		t.Errorf("60:40 p %g, want about 0.0569", p)
	}
}

func TestRecallResultPair(t *testing.T) {
	r := RecallResult{N: 4, Correct: map[QualityPolicy][]bool{PolicyFP: bools("1101"), PolicyINT2: bools("0100")}}
	if a := r.Accuracy(PolicyFP); a != 0.75 {
		t.Errorf("fp32 accuracy %g", a)
	}
	if a := r.Accuracy(PolicyLLMS); a != 0 {
		t.Errorf("accuracy of a policy not run %g", a)
	}
	p, err := r.Pair(PolicyFP, PolicyINT2)
	if err != nil {
		t.Fatal(err)
	}
	if p.OnlyA != 2 || p.OnlyB != 0 || p.Diff != 0.5 {
		t.Errorf("fp32 vs int2 %+v", p)
	}
	if _, err := r.Pair(PolicyFP, PolicyLLMS); err == nil {
		t.Error("pairing with a policy not run: no error")
	}
}
