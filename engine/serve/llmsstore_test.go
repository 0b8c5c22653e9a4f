package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/tlite/tlite/engine/llms"
)

// observingLMK counts the forwards the service reports, and the rows of
// each one announced.
type observingLMK struct {
	*LMK
	observed int
	rows     []int
}

func (s *observingLMK) Prepare(rows int) error {
	if len(s.rows) != s.observed {
		return fmt.Errorf("Prepare of forward %d after %d observed", len(s.rows), s.observed)
	}
	s.rows = append(s.rows, rows)
	return nil
}

func (s *observingLMK) Observe() error {
	s.observed++
	if len(s.rows) != s.observed {
		return fmt.Errorf("Observe of forward %d, %d prepared", s.observed, len(s.rows))
	}
	return nil
}

// TestObserverSeesEveryForward: a store that observes forwards is told of
// the prefill and of every decode step, not only of the last, each one
// announced (Prepare) before it runs with its token count: several for the
// prefill, one for each decode step.
func TestObserverSeesEveryForward(t *testing.T) {
	st, tok := testModel(t)
	store := &observingLMK{LMK: NewLMK(st, 0)}
	s, err := New(st, tok, store, Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id, err := s.NewContext("", "Fortune:")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Call(context.Background(), id, " The cat", CallOptions{MaxTokens: 6, Stop: []string{"never-appears"}})
	if err != nil {
		t.Fatal(err)
	}
	// The prefill, then one step per generated token but the last.
	want := 1 + rep.Tokens - 1
	if rep.FinishReason != "length" {
		t.Skipf("finished by %s after %d tokens; the count below assumes length", rep.FinishReason, rep.Tokens)
	}
	if store.observed != want {
		t.Errorf("observed %d forwards for %d generated tokens, want %d", store.observed, rep.Tokens, want)
	}
	for i, r := range store.rows {
		if (i == 0) != (r > 1) {
			t.Errorf("forward %d announced %d rows; want several for the prefill only (%v)", i, r, store.rows)
		}
	}
}

// alternate runs rounds of greedy calls on n contexts in turn and returns
// the replies' texts in order, with the last call's switch timings.
func alternate(t *testing.T, s *Service, n, rounds int) ([]string, []string) {
	t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		id, err := s.NewContext("", fmt.Sprintf("Fortune %d:", i))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	prompts := []string{" The cat sat on", " Once upon a time", " A wise man said", " The sea is"}
	var out []string
	for r := 0; r < rounds; r++ {
		for i, id := range ids {
			rep, err := s.Call(context.Background(), id, prompts[(i+r)%len(prompts)], CallOptions{MaxTokens: 8})
			if err != nil {
				t.Fatalf("round %d, context %d: %v", r, i, err)
			}
			out = append(out, rep.Text)
		}
	}
	return out, ids
}

// TestLLMSStoreSwitching: contexts alternating under a budget of a few
// chunks. With the lossless configuration every greedy reply equals the
// LMK store's (which recomputes each context from its tokens); with the
// default compression the replies are close (counted, logged). The
// Manager's view shows through the API: chunks by level and tier per
// context, swap I/O and recomputes in the stats.
func TestLLMSStoreSwitching(t *testing.T) {
	st, tok := testModel(t)
	run := func(store string, lossless bool) ([]string, *Service, []string) {
		dir := t.TempDir()
		s, err := New(st, tok, newStore(t, store, st, dir, lossless), Config{StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		out, ids := alternate(t, s, 3, 2)
		return out, s, ids
	}
	ref, sl, _ := run("lmk", false)
	sl.Close()
	exact, sx, _ := run("llms", true)
	sx.Close()
	for i := range ref {
		if exact[i] != ref[i] {
			t.Errorf("call %d: lossless llms %q, lmk %q", i, exact[i], ref[i])
		}
	}
	lossy, s, ids := run("llms", false)
	same := 0
	for i := range ref {
		if lossy[i] == ref[i] {
			same++
		}
	}
	t.Logf("llms (compressed): %d of %d greedy replies equal lmk's", same, len(ref))
	if same == 0 {
		t.Errorf("no reply of the compressed llms store equals lmk's: %q vs %q", lossy, ref)
	}
	info, err := s.Info(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	var ci llms.CtxInfo
	b, _ := json.Marshal(info.Store)
	if err := json.Unmarshal(b, &ci); err != nil || ci.Tokens != info.KVTokens {
		t.Fatalf("store info %s for a context of %d KV tokens: %v", b, info.KVTokens, err)
	}
	chunks, tiers := 0, 0
	for _, n := range ci.Chunks {
		chunks += n
	}
	for _, n := range ci.Tiers {
		tiers += n
	}
	if want := (ci.Tokens + 15) / 16; chunks != want || tiers != want || ci.Tiers["device"] != 0 {
		t.Errorf("store info %s: want %d chunks by level and by tier, none on the device (not installed)", b, want)
	}
	var ms llms.ManagerStats
	b, _ = json.Marshal(s.Stats().Store)
	if err := json.Unmarshal(b, &ms); err != nil || ms.Mode != llms.ModeLLMS || ms.Contexts != 3 || ms.WriteBytes == 0 || ms.ReadBytes+ms.Recomputed == 0 {
		t.Errorf("store stats %s: want mode llms, 3 contexts, swap writes and reads or recomputes (budget %d)", b, testBudget)
	}
	if ms.PoolBytes > testBudget {
		t.Errorf("pool %d bytes over the budget %d", ms.PoolBytes, testBudget)
	}
}

// TestLLMSStoreTimings: the API's switch parts add up to switch_ms (IO is
// the wait, not the overlapped reads' span).
func TestLLMSStoreTimings(t *testing.T) {
	st, _ := testModel(t)
	m, err := llms.NewManager(st, t.TempDir(), llms.Config{Cost: &testCost, BudgetBytes: testBudget})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	store := NewLLMSStore(m)
	toks := make([]int, 40)
	for i := range toks {
		toks[i] = 10 + i
	}
	for _, id := range []string{"a", "b", "a"} {
		sw, err := store.Install(id, toks)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Commit(id, toks); err != nil {
			t.Fatal(err)
		}
		tm := timingsOf(Reply{Switch: sw})
		sum := tm.ReclaimMs + tm.IOMs + tm.RecomputeMs + tm.UploadMs + tm.OtherMs
		if d := sum - tm.SwitchMs; d > 1e-6 || d < -1e-6 || sw.Other < 0 {
			t.Errorf("%s: parts %+v sum to %.3f ms, switch %.3f ms", id, tm, sum, tm.SwitchMs)
		}
	}
}
