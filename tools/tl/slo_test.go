package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine/elastic/slo"
)

const tlmFixture = "../../testdata/elastic/tlm"

// TestProfileAndTrace measures a (tiny) profile of the elastic test model
// with the test TLM, then serves a small trace by every strategy from it.
func TestProfileAndTrace(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "profile.json")
	model := elasticLlama + "/model.onnx"
	if _, err := captureStdout(t, func() error {
		return runElastic([]string{"profile", "--model", model, "--tlm", tlmFixture, "--lengths", "4,8", "-r", "1", "--decode", "2",
			"--device", "go", "--out", prof})
	}); err != nil {
		t.Fatal(err)
	}
	p, err := slo.Load(prof)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Levels(); fmt.Sprint(got) != "[20 40 60 80 100]" || len(p.TLMMs) != 2 {
		t.Fatalf("profile levels %v, TLM times %v", got, p.TLMMs)
	}
	// Two grid items: right only at the full model with the whole prompt,
	// and right everywhere.
	var lines []string
	for k, all := range []bool{false, true} {
		correct := map[string]int{}
		for _, m := range []int{20, 60, 100} {
			for _, q := range []int{20, 60, 100} {
				if all || (m == 100 && q == 100) {
					correct[fmt.Sprintf("%d,%d", m, q)] = 1
				} else {
					correct[fmt.Sprintf("%d,%d", m, q)] = 0
				}
			}
		}
		b, _ := json.Marshal(gridItem{Task: "test", IDs: []int{1, 5 + k, 6, 7, 8, 9, 10, 11}, Tail: 2,
			Candidates: [][]int{{3}, {4, 5}}, Answer: 1, Correct: correct})
		lines = append(lines, string(b))
	}
	grid := filepath.Join(dir, "grid.jsonl")
	if err := os.WriteFile(grid, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(dir, "trace.json")
	out, err := captureStdout(t, func() error {
		return runElastic([]string{"trace", "--model", model, "--tlm", tlmFixture, "--slo-profile", prof, "--grid", grid,
			"--alpha", "0", "--requests", "4", "--decode", "2", "--check", "2", "--device", "go", "--out", trace})
	})
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Summary  []traceSummary `json:"summary"`
		Requests []traceRow     `json:"requests"`
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Summary) != 4 || len(res.Requests) != 16 {
		t.Fatalf("%d summaries, %d rows; want 4 strategies × 4 requests\n%s", len(res.Summary), len(res.Requests), out)
	}
	engineChecked := 0
	for _, r := range res.Requests {
		if r.TTFTMs < r.PrefillMs || r.TTFTMs < r.TLMMs || r.Kept > r.N || r.Kept < 1+2 {
			t.Fatalf("row %+v: TTFT must include TLM and prefill; the kept prompt must hold BOS and tail", r)
		}
		if r.Violated != (r.TTFTMs > r.BudgetTT || r.TPOTMs > r.BudgetTP) {
			t.Fatalf("row %+v: violation flag disagrees with the budgets", r)
		}
		if r.Engine != nil {
			engineChecked++
		}
	}
	// Greedy and the oracle fall back exactly when nothing is feasible.
	fell := map[int]map[string]bool{}
	for _, r := range res.Requests {
		if fell[r.Request] == nil {
			fell[r.Request] = map[string]bool{}
		}
		fell[r.Request][r.Strategy] = r.FellBack
	}
	for req, m := range fell {
		if m["greedy"] != m["oracle"] {
			t.Fatalf("request %d: greedy fell back %v, oracle %v", req, m["greedy"], m["oracle"])
		}
	}
	if engineChecked != 2 {
		t.Fatalf("%d rows scored by the engine, want 2", engineChecked)
	}
	for _, s := range res.Summary {
		if s.Accuracy > s.AccuracyRaw || s.Requests != 4 {
			t.Fatalf("summary %+v: accuracy with violations counted wrong exceeds raw accuracy", s)
		}
	}
}

func TestSLOFlagErrors(t *testing.T) {
	model := elasticLlama + "/model.onnx"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", model, "--tokens", "1,2", "--level", "20", "--slo-ttft", "0.5", "--slo-tpot", "0.5"}, "not both"},
		{[]string{"--model", model, "--tokens", "1,2", "--slo-ttft", "0.5", "--device", "go"}, "both"},
		{[]string{"--model", model, "--tokens", "1,2", "--slo-ttft", "0.5", "--slo-tpot", "-1", "--device", "go"}, ""},
	} {
		_, err := captureStdout(t, func() error { return runGenerate(tc.args) })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("generate %v: %v, want an error about %q", tc.args, err, tc.want)
		}
	}
	for _, args := range [][]string{
		{"profile", "--model", model, "--lengths", "0", "--device", "go"},
		{"profile", "--model", model, "--lengths", "4,8", "-r", "0", "--device", "go"},
		{"trace", "--model", model, "--device", "go"},
		{"trace", "--model", model, "--grid", "x", "--strategies", "best", "--device", "go"},
		{"trace", "--model", model, "--grid", "x", "--alpha", "a", "--device", "go"},
		{"nope"},
	} {
		if _, err := captureStdout(t, func() error { return runElastic(args) }); err == nil {
			t.Fatalf("tl elastic %v: no error", args)
		}
	}
}
