package slo

import (
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// testProfile: TTFT proportional to length × level (ms = n·level/100) at
// lengths 10 and 100, TPOT = level/10 ms, a TLM of n/20 ms, switch 0.
func testProfile() *Profile {
	p := &Profile{Format: Format, PromptLengths: []int{10, 100}, TTFTMs: map[string][]float64{}, TPOTMs: map[string]float64{},
		TLMLengths: []int{10, 100}, TLMMs: []float64{0.5, 5}}
	for _, lv := range []int{20, 40, 60, 80, 100} {
		k := map[int]string{20: "20", 40: "40", 60: "60", 80: "80", 100: "100"}[lv]
		p.TTFTMs[k] = []float64{10 * float64(lv) / 100, 100 * float64(lv) / 100}
		p.TPOTMs[k] = float64(lv) / 10
	}
	return p
}

var grid = []int{20, 40, 60, 80, 100}

func TestInterp(t *testing.T) {
	p := testProfile()
	for _, tc := range []struct {
		n, level int
		want     float64
	}{
		{10, 100, 10}, {100, 100, 100}, {55, 100, 55}, {5, 100, 5}, {200, 100, 200}, {50, 20, 10},
	} {
		got, err := p.TTFT(tc.n, tc.level)
		if err != nil || math.Abs(got-tc.want) > 1e-9 {
			t.Fatalf("TTFT(%d, %d) = %v, %v; want %v", tc.n, tc.level, got, err, tc.want)
		}
	}
	if _, err := p.TTFT(10, 30); err == nil {
		t.Fatal("level 30 is not in the profile: want an error")
	}
	if got := p.TLM(50); math.Abs(got-2.5) > 1e-9 {
		t.Fatalf("TLM(50) = %v, want 2.5", got)
	}
}

func TestKeptLen(t *testing.T) {
	for _, tc := range []struct{ n, tail, pct, want int }{
		{101, 0, 50, 51}, {101, 0, 100, 101}, {101, 0, 0, 1}, {11, 4, 20, 1 + 4 + 1}, {5, 4, 20, 5}, {3, 4, 50, 3},
	} {
		if got := KeptLen(tc.n, tc.tail, tc.pct); got != tc.want {
			t.Fatalf("KeptLen(%d, %d, %d) = %d, want %d", tc.n, tc.tail, tc.pct, got, tc.want)
		}
	}
}

func TestFeasibleOrderAndBudgets(t *testing.T) {
	p := testProfile()
	// 101 tokens, tail 0: the full model's TTFT is 101 ms and TPOT 10 ms.
	r := Request{N: 101, Tail: 0, SLO: SLO{TTFT: 0.5, TPOT: 0.7}}
	feas, err := p.Feasible(r, grid, grid)
	if err != nil {
		t.Fatal(err)
	}
	if len(feas) == 0 {
		t.Fatal("nothing feasible")
	}
	bt, bp, _ := p.Budget(r)
	for i, d := range feas {
		if d.TTFTMs > bt || d.TPOTMs > bp {
			t.Fatalf("%+v exceeds the budgets %v, %v", d, bt, bp)
		}
		if d.Model > 60 {
			t.Fatalf("%+v: TPOT %v of level %d exceeds 0.7 × 10 ms", d, d.TPOTMs, d.Model)
		}
		if i > 0 && d.TTFTMs < feas[i-1].TTFTMs {
			t.Fatalf("not sorted by predicted TTFT: %+v after %+v", d, feas[i-1])
		}
	}
	// The predicted TTFT counts the TLM (101/20 ms) and the kept tokens.
	d, _ := p.Predict(r, 60, 40)
	if want := 5.05 + 41*0.6; math.Abs(d.TTFTMs-want) > 1e-9 || d.Kept != 41 {
		t.Fatalf("Predict(60, 40) = %+v, want TTFT %v with 41 tokens", d, want)
	}
	g, ok := Greedy(feas)
	if !ok || g.Model != 60 {
		t.Fatalf("greedy %+v: want the largest feasible model, 60", g)
	}
	for _, f := range feas {
		if f.Model == 60 && f.Prompt > g.Prompt {
			t.Fatalf("greedy %+v: %+v has a larger prompt at the same model", g, f)
		}
	}
}

func TestPickFallsBack(t *testing.T) {
	p := testProfile()
	rng := rand.New(rand.NewSource(1))
	r := Request{N: 101, SLO: SLO{TTFT: 0.5, TPOT: 0.7}}
	d, fb, err := p.Pick(r, 40, 40, grid, grid, rng)
	if err != nil || fb || d.Model != 40 || d.Prompt != 40 {
		t.Fatalf("a feasible pick: %+v, fell back %v, %v", d, fb, err)
	}
	d, fb, err = p.Pick(r, 100, 100, grid, grid, rng)
	if err != nil || !fb {
		t.Fatalf("an infeasible pick was kept: %+v, %v", d, err)
	}
	if bt, bp, _ := p.Budget(r); d.TTFTMs > bt || d.TPOTMs > bp {
		t.Fatalf("the fallback %+v is not feasible", d)
	}
	// Nothing feasible (TPOT 0.1 is below every level): the lightest.
	d, fb, err = p.Pick(Request{N: 101, SLO: SLO{TTFT: 1, TPOT: 0.1}}, 100, 100, grid, grid, rng)
	if err != nil || !fb || d.Model != 20 || d.Prompt != 20 {
		t.Fatalf("nothing feasible: %+v, fell back %v, %v; want 20/20", d, fb, err)
	}
	if _, err := p.Feasible(Request{N: 5, Tail: 5, SLO: SLO{1, 1}}, grid, grid); err == nil {
		t.Fatal("a tail as long as the prompt: want an error")
	}
	if _, err := p.Feasible(Request{N: 5, SLO: SLO{0, 1}}, grid, grid); err == nil {
		t.Fatal("an SLO of 0: want an error")
	}
}

func TestCompress(t *testing.T) {
	ids := []int{100, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	scores := []float32{0, 5, 1, 9, 2, 8, 3, 7, 4, 6, 0}
	for _, tc := range []struct {
		tail, pct int
		want      []int
	}{
		{0, 100, ids},
		{0, 0, []int{100}},
		{0, 50, []int{100, 1, 3, 5, 7, 9}},     // the 5 best of 10, in their order
		{2, 50, []int{100, 1, 3, 5, 7, 9, 10}}, // 4 of the 8 between BOS and tail
		{2, 20, []int{100, 3, 5, 9, 10}},       // round(1.6) = 2
	} {
		got, err := Compress(ids, tc.tail, scores, tc.pct)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("Compress(tail %d, %d%%) = %v, %v; want %v", tc.tail, tc.pct, got, err, tc.want)
		}
		if len(got) != KeptLen(len(ids), tc.tail, tc.pct) {
			t.Fatalf("Compress kept %d, KeptLen says %d", len(got), KeptLen(len(ids), tc.tail, tc.pct))
		}
	}
	for _, tc := range []struct {
		scores    []float32
		tail, pct int
	}{{scores[:3], 0, 50}, {scores, 11, 50}, {scores, -1, 50}, {scores, 0, 101}} {
		if _, err := Compress(ids, tc.tail, tc.scores, tc.pct); err == nil {
			t.Fatalf("Compress(%d scores, tail %d, %d%%): want an error", len(tc.scores), tc.tail, tc.pct)
		}
	}
}

func TestLoadChecks(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tl elastic profile") {
		t.Fatalf("missing profile: %v", err)
	}
	good := `{"format":"tlite.elastic.profile/1","prompt_lengths":[8,16],"ttft_ms":{"100":[1,2],"20":[0.5,1]},"tpot_ms":{"100":1,"20":0.5},"switch_ms":0.001}`
	for _, tc := range []struct{ body, want string }{
		{good, ""},
		{`{"format":"x"}`, "format"},
		{strings.Replace(good, `[8,16]`, `[16,8]`, 1), "ascending"},
		{strings.Replace(good, `"100":[1,2],`, ``, 1), "level 100"},
		{strings.Replace(good, `[0.5,1]`, `[0.5]`, 1), "2 prompt lengths"},
		{strings.Replace(good, `[0.5,1]`, `[0.5,-1]`, 1), "positive"},
		{strings.Replace(good, `,"20":0.5`, ``, 1), "no TPOT"},
		{`not json`, "invalid"},
	} {
		path := filepath.Join(dir, FileName)
		if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := Load(dir)
		if tc.want == "" {
			if err != nil {
				t.Fatalf("%s: %v", tc.body, err)
			}
			if !reflect.DeepEqual(p.Levels(), []int{20, 100}) {
				t.Fatalf("levels %v", p.Levels())
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want an error about %q", tc.body, err, tc.want)
		}
	}
}
