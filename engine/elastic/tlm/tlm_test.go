package tlm

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
)

const fixture = "../../../testdata/elastic/tlm"

type reference struct {
	Reference struct {
		InputIDs     []int     `json:"input_ids"`
		RetainLogits []float32 `json:"retain_logits"`
		ModelLogits  []float32 `json:"model_logits"`
		PromptLogits []float32 `json:"prompt_logits"`
	} `json:"reference"`
}

func loadRef(t *testing.T) reference {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixture, MetaName))
	if err != nil {
		t.Fatal(err)
	}
	var r reference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func closeTo(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > tol {
			t.Fatalf("%s[%d] = %v, PyTorch %v (|diff| %g > %g)", name, i, got[i], want[i], d, tol)
		}
	}
}

// TestRunMatchesPyTorch runs the exported random-weight TLM (the trained
// one's structure) on both backends against PyTorch's outputs, and checks
// how the heads' outputs map to levels and prompt tokens.
func TestRunMatchesPyTorch(t *testing.T) {
	ref := loadRef(t)
	for _, dev := range []string{"go", ""} {
		tl, err := Open(fixture, engine.Options{Device: dev})
		if engine.IsNoDevice(err) {
			t.Logf("device %q: %v (not run)", dev, err)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		// The reference input is a prompt of BOS + ids 5..24 at TTFT 0.4, TPOT 0.7.
		ids := []int{0}
		for i := 5; i < 25; i++ {
			ids = append(ids, i)
		}
		in := tl.Input(ids, 0.4, 0.7)
		for i, v := range in {
			if int(v) != ref.Reference.InputIDs[i] {
				t.Fatalf("device %q: input %v, PyTorch's %v", dev, in, ref.Reference.InputIDs)
			}
		}
		res, err := tl.Run(ids, 0.4, 0.7)
		if err != nil {
			t.Fatal(err)
		}
		closeTo(t, "model_logits", res.ModelLogits, ref.Reference.ModelLogits, 1e-4)
		closeTo(t, "prompt_logits", res.PromptLogits, ref.Reference.PromptLogits, 1e-4)
		if len(res.Scores) != len(ids) || !math.IsInf(float64(res.Scores[0]), 1) {
			t.Fatalf("scores %v: want one per prompt token, +Inf for the BOS", res.Scores)
		}
		closeTo(t, "scores", res.Scores[1:], ref.Reference.RetainLogits[3:], 1e-4)
		if want := tl.Meta.Grid[argmax(ref.Reference.ModelLogits)]; res.Model != want {
			t.Fatalf("model level %d, want %d", res.Model, want)
		}
		if want := tl.Meta.Grid[argmax(ref.Reference.PromptLogits)]; res.Prompt != want {
			t.Fatalf("prompt level %d, want %d", res.Prompt, want)
		}
		tl.Close()
	}
}

func TestInputLayoutAndCut(t *testing.T) {
	tl := &TLM{Meta: Meta{Format: Format, Grid: []int{20, 100}, MaxPositions: 8, CLS: 100, TTFT0: 70, TPOT0: 85, SLOSteps: 10, Prefix: 3}}
	tests := []struct {
		ids        []int
		ttft, tpot float64
		want       []int64
	}{
		{[]int{9, 1, 2}, 0.4, 0.7, []int64{100, 74, 92, 1, 2}},
		{[]int{9, 1, 2, 3, 4, 5, 6, 7}, 1, 1, []int64{100, 80, 95, 3, 4, 5, 6, 7}}, // the front is cut
		{[]int{9, 1}, 0.25, 3, []int64{100, 73, 95, 1}},                            // 2.5 rounds up; clamped at 10
		{[]int{9, 1}, 0.04, 0.5, []int64{100, 70, 90, 1}},
	}
	for _, tc := range tests {
		got := tl.Input(tc.ids, tc.ttft, tc.tpot)
		if len(got) != len(tc.want) {
			t.Fatalf("Input(%v, %v, %v) = %v, want %v", tc.ids, tc.ttft, tc.tpot, got, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("Input(%v, %v, %v) = %v, want %v", tc.ids, tc.ttft, tc.tpot, got, tc.want)
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	tl, err := Open(fixture, engine.Options{Device: "go"})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	for _, tc := range []struct {
		ids        []int
		ttft, tpot float64
		want       string
	}{
		{[]int{0}, 1, 1, "at least one token"},
		{[]int{0, 1}, 0, 1, "positive"},
		{[]int{0, 1}, 1, math.NaN(), "positive"},
		{[]int{0, 999}, 1, 1, ""}, // out of the vocabulary: the engine's Gather must refuse it
	} {
		_, err := tl.Run(tc.ids, tc.ttft, tc.tpot)
		if err == nil {
			t.Fatalf("Run(%v, %v, %v): no error", tc.ids, tc.ttft, tc.tpot)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Run(%v, %v, %v): %v, want it to mention %q", tc.ids, tc.ttft, tc.tpot, err, tc.want)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, engine.Options{Device: "go"}); err == nil || !strings.Contains(err.Error(), MetaName) {
		t.Fatalf("no tlm.json: %v", err)
	}
	for _, tc := range []struct{ meta, want string }{
		{`{`, "tlm.json"},
		{`{"format":"x"}`, "format"},
		{`{"format":"tlite.tlm/1","grid":[]}`, "empty grid"},
		{`{"format":"tlite.tlm/1","grid":[0]}`, "grid level"},
		{`{"format":"tlite.tlm/1","grid":[20],"max_positions":8,"slo_steps":10,"prefix":2}`, "prefix"},
	} {
		if err := os.WriteFile(filepath.Join(dir, MetaName), []byte(tc.meta), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir, engine.Options{Device: "go"}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("tlm.json %s: %v, want an error about %q", tc.meta, err, tc.want)
		}
	}
}
