package llms

import (
	"fmt"
	"math"
	"testing"

	"github.com/tlite/tlite/engine"
)

// TestDensityFig6a is the paper's worked example (Fig. 6a): token "a" is
// attended 0.3, 0.5 and 0.1 by the three rows that can see it, so its
// density is (0.3+0.5+0.1)/3 = 0.3 — the mean of its column over its
// unmasked rows (the spec's erratum reading of Eq. 1). A 4-token causal
// prefill: "x a are y".
func TestDensityFig6a(t *testing.T) {
	A := [][]float32{
		{1, 0, 0, 0},
		{0.7, 0.3, 0, 0},
		{0.2, 0.5, 0.3, 0},
		{0.4, 0.1, 0.3, 0.2},
	}
	// Two layers of one head with the same matrix, and one layer of two
	// heads: averaging over layers and heads must give the same 0.3.
	mk := func(heads int) engine.AttnStats {
		a := engine.AttnStats{Heads: heads, Slots: 4, Sum: make([]float32, heads*4), Count: make([]float32, heads*4)}
		for h := 0; h < heads; h++ {
			for col := 0; col < 4; col++ {
				for row := 0; row < 4; row++ {
					a.Sum[h*4+col] += A[row][col]
				}
				a.Count[h*4+col] = float32(4 - col)
			}
		}
		return a
	}
	for _, tc := range []struct {
		name  string
		stats []engine.AttnStats
	}{
		{"one head", []engine.AttnStats{mk(1)}},
		{"two layers", []engine.AttnStats{mk(1), mk(1)}},
		{"two heads", []engine.AttnStats{mk(2)}},
	} {
		var d Density
		if err := d.Add(tc.stats, func(j int) int { return j }); err != nil {
			t.Fatal(err)
		}
		if got := d.Token(1); math.Abs(got-0.3) > 1e-6 {
			t.Errorf("%s: density of \"a\" %.6f, want 0.3", tc.name, got)
		}
		if got := d.Token(0); math.Abs(got-(1+0.7+0.2+0.4)/4) > 1e-6 {
			t.Errorf("%s: density of \"x\" %.6f", tc.name, got)
		}
		if got := d.Chunk(0, 2); math.Abs(got-(0.575+0.3)/2) > 1e-6 {
			t.Errorf("%s: chunk density %.6f", tc.name, got)
		}
	}
	// Later calls accumulate: a decode row giving "a" 0.9 makes its column
	// (0.3+0.5+0.1+0.9)/4.
	var d Density
	d.Add([]engine.AttnStats{mk(1)}, func(j int) int { return j })
	row := engine.AttnStats{Heads: 1, Slots: 5, Sum: []float32{0, 0.9, 0, 0, 0.1}, Count: []float32{1, 1, 1, 1, 1}}
	d.Add([]engine.AttnStats{row}, func(j int) int { return j })
	if got := d.Token(1); math.Abs(got-1.8/4) > 1e-6 {
		t.Errorf("accumulated density of \"a\" %.6f, want 0.45", got)
	}
	if math.Abs(d.Token(4)-0.1) > 1e-6 {
		t.Errorf("new token's density %g, want 0.1", d.Token(4))
	}
	if err := d.Add([]engine.AttnStats{mk(2)}, func(j int) int { return j }); err == nil {
		t.Error("statistics over a different number of heads were accepted")
	}
}

// TestAssign checks the exact discrete scan against brute force over
// every band split, and the general enumeration's mean ratio.
func TestAssign(t *testing.T) {
	ladder := []Level{Level8, Level4, Level2}
	for _, tc := range []struct {
		name string
		dens []float64
		w    Weight
		// want is the expected level per chunk (nil: only check optimality).
		want []Level
	}{
		// The literal weight 1/ratio_w rewards compression: moving one chunk
		// from 4 to 8 bits costs its D, moving two from 4 to 2 bits gains
		// twice theirs. Flat density goes to the corner n8 = n/3; one dense
		// outlier keeps everything at 4 bits (10 > 2·(1+1)).
		{"one outlier", []float64{10, 1, 1, 1, 1, 1}, WeightInverse, []Level{Level4, Level4, Level4, Level4, Level4, Level4}},
		{"flat", []float64{1, 1, 1, 1, 1, 1}, WeightInverse, []Level{Level8, Level8, Level2, Level2, Level2, Level2}},
		{"natural weight corner", []float64{6, 5, 4, 3, 2, 1}, WeightRatio, []Level{Level8, Level8, Level2, Level2, Level2, Level2}},
		{"random", []float64{0.3, 0.01, 0.2, 0.05, 0.9, 0.02, 0.4, 0.1, 0.15}, WeightInverse, nil},
	} {
		got, err := Assign(tc.dens, ladder, 0.5, tc.w)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got.MeanRatio-0.5) > 1e-12 {
			t.Errorf("%s: mean ratio %.4f, want 0.5", tc.name, got.MeanRatio)
		}
		if tc.want != nil {
			for i := range tc.want {
				if got.Levels[i] != tc.want[i] {
					t.Errorf("%s: levels %v, want %v", tc.name, got.Levels, tc.want)
					break
				}
			}
		}
		// Brute force: every level vector with mean exactly 0.5 and the band
		// order (denser never below sparser) has ctxInfo ≤ the scan's.
		n := len(tc.dens)
		vec := make([]Level, n)
		var rec func(i int)
		bestBF := math.Inf(-1)
		rec = func(i int) {
			if i == n {
				mean, info := 0.0, 0.0
				for k, l := range vec {
					mean += l.Ratio()
					info += tc.w(l) * tc.dens[k]
				}
				if math.Abs(mean/float64(n)-0.5) > 1e-12 {
					return
				}
				for a := range vec {
					for b := range vec {
						if tc.dens[a] > tc.dens[b] && vec[a].Ratio() < vec[b].Ratio() {
							return
						}
					}
				}
				bestBF = max(bestBF, info)
				return
			}
			for _, l := range ladder {
				vec[i] = l
				rec(i + 1)
			}
		}
		rec(0)
		if math.Abs(bestBF-got.Info) > 1e-9 {
			t.Errorf("%s: scan's ctxInfo %.6f, brute force %.6f", tc.name, got.Info, bestBF)
		}
	}
	// Another global ratio: the general enumeration stays at or under it,
	// within one chunk's step.
	got, err := Assign([]float64{5, 4, 3, 2, 1, 0.5, 0.2}, ladder, 0.6, WeightInverse)
	if err != nil {
		t.Fatal(err)
	}
	if got.MeanRatio > 0.6 || got.MeanRatio < 0.6-0.75/7 {
		t.Errorf("ratio 0.6: achieved mean %.4f", got.MeanRatio)
	}
	if _, err := Assign([]float64{1}, nil, 0.5, nil); err == nil {
		t.Error("an empty ladder was accepted")
	}
}

// TestLCTRUOrder: eviction pops the 8-bit sub-queue in LRU order first,
// then 4-bit, then 2-bit; a touch refreshes recency; locked contexts are
// skipped; plain LRU ignores levels.
func TestLCTRUOrder(t *testing.T) {
	k := func(c string, i int) ChunkKey { return ChunkKey{c, i} }
	for _, tc := range []struct {
		name  string
		lru   bool
		lock  string
		touch []struct {
			k ChunkKey
			l Level
		}
		expect []ChunkKey
	}{
		{"lctru", false, "", []struct {
			k ChunkKey
			l Level
		}{
			{k("a", 0), Level2}, {k("a", 1), Level8}, {k("b", 0), Level4}, {k("b", 1), Level8}, {k("a", 2), Level4}, {k("a", 1), Level8},
		}, []ChunkKey{k("b", 1), k("a", 1), k("b", 0), k("a", 2), k("a", 0)}},
		{"locked", false, "b", []struct {
			k ChunkKey
			l Level
		}{
			{k("a", 0), Level2}, {k("b", 1), Level8}, {k("a", 1), Level8}, {k("b", 0), Level4},
		}, []ChunkKey{k("a", 1), k("a", 0)}},
		{"plain lru", true, "", []struct {
			k ChunkKey
			l Level
		}{
			{k("a", 0), Level2}, {k("a", 1), Level8}, {k("b", 0), Level4}, {k("a", 0), Level2},
		}, []ChunkKey{k("a", 1), k("b", 0), k("a", 0)}},
	} {
		q := NewLCTRU(tc.lru)
		for _, x := range tc.touch {
			q.Touch(x.k, x.l)
		}
		if tc.lock != "" {
			q.Lock(tc.lock)
		}
		var got []ChunkKey
		for {
			v, ok := q.Pop()
			if !ok {
				break
			}
			got = append(got, v)
		}
		if len(got) != len(tc.expect) {
			t.Fatalf("%s: popped %v, want %v", tc.name, got, tc.expect)
		}
		for i := range got {
			if got[i] != tc.expect[i] {
				t.Fatalf("%s: popped %v, want %v", tc.name, got, tc.expect)
			}
		}
		if tc.lock != "" {
			q.Unlock(tc.lock)
			if q.Len() == 0 {
				t.Fatalf("%s: locked chunks were popped", tc.name)
			}
			if _, ok := q.Pop(); !ok {
				t.Fatalf("%s: unlocked chunks cannot be popped", tc.name)
			}
		}
	}
}

// TestTokenPeaks: a token's peak is the largest probability over layers
// and heads, slots not of the context are skipped, and statistics without
// peaks are refused.
func TestTokenPeaks(t *testing.T) {
	stats := []engine.AttnStats{
		{Node: "l0", Heads: 2, Slots: 3, Sum: make([]float32, 6), Count: make([]float32, 6),
			Peak: []float32{0.1, 0.2, 0.9, 0.4, 0.05, 0.3}},
		{Node: "l1", Heads: 2, Slots: 3, Sum: make([]float32, 6), Count: make([]float32, 6),
			Peak: []float32{0.6, 0.1, 0.2, 0.0, 0.7, 0.1}},
	}
	// Slot 2 holds no token of the context; slots 0 and 1 are tokens 1, 0.
	got, err := TokenPeaks(stats, 2, func(j int) int { return []int{1, 0, -1}[j] })
	if err != nil {
		t.Fatal(err)
	}
	// token 1 (slot 0): max(0.1, 0.4, 0.6, 0) = 0.6; token 0 (slot 1):
	// max(0.2, 0.05, 0.1, 0.7) = 0.7.
	if math.Abs(got[0]-0.7) > 1e-6 || math.Abs(got[1]-0.6) > 1e-6 || len(got) != 2 {
		t.Errorf("peaks %v; want [0.7 0.6]", got)
	}
	stats[1].Peak = stats[1].Peak[:5]
	if _, err := TokenPeaks(stats, 2, func(j int) int { return j }); err == nil {
		t.Error("statistics with 5 peaks for 2x3: no error")
	}
	if _, err := TokenPeaks(nil, 2, func(j int) int { return j }); err == nil {
		t.Error("no statistics: no error")
	}
}

// TestPeakPlacement: the peak policies use LLMS's multiset of levels and
// put the highest levels on the chunks of highest peak, whatever their
// density.
func TestPeakPlacement(t *testing.T) {
	dens := []float64{0.9, 0.1, 0.5, 0.2, 0.3, 0.05, 0.4, 0.15, 0.6}
	peaks := []float64{0.1, 0.9, 0.2, 0.8, 0.3, 0.7, 0.4, 0.6, 0.5}
	for _, pair := range [][2]QualityPolicy{{PolicyLLMS, PolicyPeak}, {PolicyLLMSRatio, PolicyPeakRatio}} {
		base, err := policyLevels(pair[0], dens, peaks, len(dens), nil)
		if err != nil {
			t.Fatal(err)
		}
		pk, err := policyLevels(pair[1], dens, peaks, len(dens), nil)
		if err != nil {
			t.Fatal(err)
		}
		count := func(ls []Level) map[Level]int {
			m := map[Level]int{}
			for _, l := range ls {
				m[l]++
			}
			return m
		}
		if fmt.Sprint(count(base)) != fmt.Sprint(count(pk)) {
			t.Errorf("%s levels %v, %s levels %v: not the same multiset", pair[0], base, pair[1], pk)
		}
		for i := range peaks {
			for j := range peaks {
				if peaks[i] > peaks[j] && pk[i] < pk[j] {
					t.Errorf("%s: chunk %d (peak %g) at %v below chunk %d (peak %g) at %v", pair[1], i, peaks[i], pk[i], j, peaks[j], pk[j])
				}
			}
		}
		if len(count(pk)) < 2 {
			t.Errorf("%s: one level %v; the test needs a mix", pair[1], pk)
		}
	}
	if _, err := policyLevels(PolicyPeak, dens, peaks[:3], len(dens), nil); err == nil {
		t.Error("3 peaks for 9 chunks: no error")
	}
}
