package serve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tlite/tlite/engine/generate"
)

// TestCallMatchesOneShotGeneration: a context built by calls holds the
// same tokens, and produces the same greedy continuation, as generating
// from the whole text at once; the service adds nothing and loses nothing.
func TestCallMatchesOneShotGeneration(t *testing.T) {
	s := newTestService(t, "", Config{})
	ctx := context.Background()
	id, err := s.NewContext("a", "Fortune:")
	if err != nil {
		t.Fatal(err)
	}
	r1, err := s.Call(ctx, id, " The cat", CallOptions{MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Tokens == 0 || r1.Tokens > 8 {
		t.Fatalf("first call generated %d tokens", r1.Tokens)
	}
	r2, err := s.Call(ctx, id, " and the dog", CallOptions{MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	hist, _ := s.History(id)
	if r2.ContextTokens != len(hist) {
		t.Errorf("reply says %d context tokens, history has %d", r2.ContextTokens, len(hist))
	}
	// The reference: greedy generation over the history before the second
	// call's output, from an empty cache.
	gen := len(hist) - r2.Tokens
	st, tok := testModel(t)
	st.Reset()
	g := generate.New(&offsetStepper{st: st}, tok)
	res, err := g.Generate(ctx, generate.Request{Tokens: hist[:gen], MaxNewTokens: 8}, nil)
	st.Reset()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, hist[gen:]) {
		t.Errorf("second call generated %v; one-shot generation over the same tokens gives %v", hist[gen:], res.Tokens)
	}
	if res.Text != r2.Text {
		t.Errorf("text %q, one-shot %q", r2.Text, res.Text)
	}
}

// oneShot is greedy generation over tokens from an empty cache, the
// reference the service's calls must match.
func oneShot(t *testing.T, tokens []int, maxNew int) generate.Result {
	t.Helper()
	st, tok := testModel(t)
	st.Reset()
	g := generate.New(&offsetStepper{st: st}, tok)
	res, err := g.Generate(context.Background(), generate.Request{Tokens: tokens, MaxNewTokens: maxNew}, nil)
	st.Reset()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestSlidingWindow: past the maximum context the window keeps the sink
// tokens and the most recent ones, the history keeps everything, and a
// call after the window moved continues exactly as generation over the
// window would.
func TestSlidingWindow(t *testing.T) {
	for _, store := range exactStores {
		t.Run(store, func(t *testing.T) { testSlidingWindow(t, store) })
	}
}

func testSlidingWindow(t *testing.T, store string) {
	s := newTestServiceStore(t, "", Config{Sinks: 4}, store)
	ctx := context.Background()
	id, err := s.NewContext("a", "Fortune:")
	if err != nil {
		t.Fatal(err)
	}
	maxCtx := s.MaxContext()
	var last Reply
	moves, prevStart := 0, 0
	for i := 0; i < 5; i++ {
		last, err = s.Call(ctx, id, strings.Repeat(" Q: why is the sky blue? A:", 3), CallOptions{MaxTokens: 8, Stop: []string{"never-appears"}})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		s.mu.Lock()
		r := *s.ctxs[id]
		s.mu.Unlock()
		if r.windowLen()-r.Pending > maxCtx || r.Pending != 1 {
			t.Fatalf("call %d: window %d tokens with %d pending: more KV than the context %d", i, r.windowLen(), r.Pending, maxCtx)
		}
		if w := r.window(); !slices.Equal(w[:4], r.History[:4]) || !slices.Equal(w[4:], r.History[len(r.History)-len(w)+4:]) {
			t.Fatalf("call %d: window is not the 4 sinks plus the most recent tokens", i)
		}
		if r.Start != prevStart {
			moves++
			if r.Start-max(prevStart, 4) < maxCtx/4 {
				t.Errorf("call %d: the window moved by %d tokens, less than a quarter of the context", i, r.Start-prevStart)
			}
			prevStart = r.Start
		}
	}
	info, _ := s.Info(id)
	if info.Tokens <= maxCtx || info.EvictedTokens == 0 {
		t.Fatalf("history %d tokens, %d evicted: the test did not pass the context of %d", info.Tokens, info.EvictedTokens, maxCtx)
	}
	if info.Tokens != last.ContextTokens {
		t.Errorf("info says %d tokens, the last reply %d", info.Tokens, last.ContextTokens)
	}
	if n := s.Stats().Counters.WindowMoves; n != moves {
		t.Errorf("stats count %d window moves, the test saw %d", n, moves)
	}
	// One more call, compared with one-shot generation over the window
	// the call sees (the record's window, moved as the call moves it)
	// plus the prompt.
	s.mu.Lock()
	r := *s.ctxs[id]
	r.History = slices.Clone(r.History)
	s.mu.Unlock()
	prompt, _ := s.encodePrompt(" Q: and the sea? A:")
	rep, err := s.Call(ctx, id, " Q: and the sea? A:", CallOptions{MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	s.slide(&r, len(prompt)+8-1, 1)
	ref := oneShot(t, append(r.window(), prompt...), 8)
	after, _ := s.History(id)
	if got := after[len(after)-rep.Tokens:]; !slices.Equal(got, ref.Tokens) {
		t.Errorf("the call generated %v; generation over the window gives %v", got, ref.Tokens)
	}
}

// TestReloadKeepsContexts: a second service on the same state directory
// has every context with its whole history and continues them.
func TestReloadKeepsContexts(t *testing.T) {
	for _, store := range exactStores {
		t.Run(store, func(t *testing.T) { testReload(t, store) })
	}
}

func testReload(t *testing.T, store string) {
	dir := t.TempDir()
	s := newTestServiceStore(t, dir, Config{}, store)
	ctx := context.Background()
	want := map[string][]int{}
	for i, sys := range []string{"One.", "Two.", ""} {
		id, err := s.NewContext("a", sys)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < i; j++ {
			if _, err := s.Call(ctx, id, " more", CallOptions{MaxTokens: 4}); err != nil {
				t.Fatal(err)
			}
		}
		want[id], _ = s.History(id)
	}
	s.Close()
	s2 := newTestServiceStore(t, dir, Config{}, store)
	if q := s2.Quarantined(); len(q) != 0 {
		t.Fatalf("quarantined %v", q)
	}
	if len(s2.IDs()) != len(want) {
		t.Fatalf("reloaded %d contexts, want %d", len(s2.IDs()), len(want))
	}
	for id, h := range want {
		got, err := s2.History(id)
		if err != nil || !slices.Equal(got, h) {
			t.Errorf("context %s: history %v (%v), want %v", id, got, err, h)
		}
		rep, err := s2.Call(ctx, id, " again", CallOptions{MaxTokens: 4})
		if err != nil {
			t.Fatalf("call after reload: %v", err)
		}
		p, _ := s2.encodePrompt(" again")
		ref := oneShot(t, append(slices.Clone(h), p...), 4)
		got, _ = s2.History(id)
		if !slices.Equal(got[len(got)-rep.Tokens:], ref.Tokens) {
			t.Errorf("context %s after reload generated %v, want %v", id, got[len(got)-rep.Tokens:], ref.Tokens)
		}
	}
}

// TestQuarantine: damaged files are moved aside and reported, leftovers
// of an interrupted save are removed, and the good contexts load.
func TestQuarantine(t *testing.T) {
	dir := t.TempDir()
	s := newTestService(t, dir, Config{})
	good, err := s.NewContext("a", "Good.")
	if err != nil {
		t.Fatal(err)
	}
	flipped, err := s.NewContext("a", "Flipped.")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A sound file whose tokens this model cannot read.
	alien := &record{ID: "00000000000000aa", History: []int{1, 99999}, Sinks: 4, Pending: 2}
	if err := (disk{dir}).save(alien); err != nil {
		t.Fatal(err)
	}
	d := disk{dir}
	b, err := os.ReadFile(d.path(flipped))
	if err != nil {
		t.Fatal(err)
	}
	// Change one token id inside the record: valid JSON, wrong checksum.
	i := bytes.Index(b, []byte(`"history":[`)) + len(`"history":[`)
	if b[i] == '9' {
		b[i] = '8'
	} else {
		b[i] = '9'
	}
	os.WriteFile(d.path(flipped), b, 0o644)
	os.WriteFile(filepath.Join(d.ctxDir(), "0123456789abcdef.json"), []byte(`{"version":1,"sha`), 0o644)
	tmp := filepath.Join(d.ctxDir(), good+".json.tmp123")
	os.WriteFile(tmp, []byte("half"), 0o644)

	s2 := newTestService(t, dir, Config{})
	q := s2.Quarantined()
	if len(q) != 3 {
		t.Fatalf("quarantined %+v, want the flipped, the truncated and the foreign file", q)
	}
	for _, x := range q {
		if _, err := os.Stat(x.MovedTo); err != nil {
			t.Errorf("%s: not in quarantine: %v", x.File, err)
		}
		if _, err := os.Stat(x.File); err == nil {
			t.Errorf("%s is still among the contexts", x.File)
		}
	}
	if ids := s2.IDs(); !slices.Equal(ids, []string{good}) {
		t.Errorf("loaded %v, want only %s", ids, good)
	}
	if _, err := os.Stat(tmp); err == nil {
		t.Error("the temporary file of an interrupted save is still there")
	}
	if _, err := s2.Call(context.Background(), good, " hello", CallOptions{MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
}

// TestCancelledCallCommitsNothing: a call whose client goes away mid
// generation leaves the context's history and file as they were, and the
// next call on it (the context still installed in the cache) generates
// what the same call on an identical context does.
func TestCancelledCallCommitsNothing(t *testing.T) {
	dir := t.TempDir()
	s := newTestService(t, dir, Config{})
	bg := context.Background()
	var ids []string
	for range 2 {
		id, err := s.NewContext("a", "Fortune:")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Call(bg, id, " The", CallOptions{MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	a, b := ids[0], ids[1]
	hist, _ := s.History(a)
	file, _ := os.ReadFile(disk{dir}.path(a))
	ctx, cancel := context.WithCancel(bg)
	pieces := 0
	_, err := s.Call(ctx, a, " long story", CallOptions{MaxTokens: 40, OnText: func(string) error {
		pieces++
		if pieces == 2 {
			cancel()
		}
		return nil
	}})
	if !errors.Is(err, ErrCancelled) {
		t.Fatalf("cancelled call: err %v, want ErrCancelled", err)
	}
	if pieces < 2 {
		t.Fatalf("the call produced %d pieces before ending; the test needs it cancelled mid generation", pieces)
	}
	if got, _ := s.History(a); !slices.Equal(got, hist) {
		t.Errorf("history changed by a cancelled call: %d -> %d tokens", len(hist), len(got))
	}
	if got, _ := os.ReadFile(disk{dir}.path(a)); !bytes.Equal(got, file) {
		t.Error("the context's file changed after a cancelled call")
	}
	if st, _ := testModel(t); st.Len() != len(hist)-1 {
		t.Errorf("the cache holds %d tokens after the rollback, want the %d committed", st.Len(), len(hist)-1)
	}
	ra, err := s.Call(bg, a, " short", CallOptions{MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := s.Call(bg, b, " short", CallOptions{MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	if ra.Text != rb.Text {
		t.Errorf("after a cancelled call the context generates %q; an identical context %q", ra.Text, rb.Text)
	}
	if ra.Switch.Total() != 0 {
		t.Errorf("the call after the cancelled one recomputed (switch %v): the installed context should have been reused as it was", ra.Switch.Total())
	}
}

// TestRefusalsChangeNothing: bad calls are refused before anything runs.
func TestRefusalsChangeNothing(t *testing.T) {
	dir := t.TempDir()
	s := newTestService(t, dir, Config{AppContexts: 2})
	bg := context.Background()
	id, err := s.NewContext("a", "x")
	if err != nil {
		t.Fatal(err)
	}
	hist, _ := s.History(id)
	long := strings.Repeat(" word", 200)
	cases := []struct {
		name   string
		id     string
		prompt string
		o      CallOptions
		want   error
	}{
		{"unknown context", "0000000000000000", "hi", CallOptions{}, ErrNotFound},
		{"prompt too long", id, long, CallOptions{}, ErrBadRequest},
		{"negative max tokens", id, "hi", CallOptions{MaxTokens: -1}, ErrBadRequest},
		{"max tokens beyond the context", id, "hi", CallOptions{MaxTokens: 1000}, ErrBadRequest},
		{"negative temperature", id, "hi", CallOptions{Temperature: -1}, ErrBadRequest},
		{"top_p above 1", id, "hi", CallOptions{TopP: 1.5}, ErrBadRequest},
		{"empty stop string", id, "hi", CallOptions{Stop: []string{""}}, ErrBadRequest},
	}
	for _, c := range cases {
		if _, err := s.Call(bg, c.id, c.prompt, c.o); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	if got, _ := s.History(id); !slices.Equal(got, hist) {
		t.Error("a refused call changed the history")
	}
	if _, err := s.NewContext("a", strings.Repeat("long system prompt ", 40)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("a system prompt longer than half the context: err %v", err)
	}
	if _, err := s.NewContext("a", "y"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewContext("a", "z"); !errors.Is(err, ErrLimit) {
		t.Errorf("third context of app a with K=2: err %v, want ErrLimit", err)
	}
	if _, err := s.NewContext("b", "z"); err != nil {
		t.Errorf("app b is not at its limit: %v", err)
	}
	if err := s.Delete(bg, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewContext("a", "z"); err != nil {
		t.Errorf("after a delete app a has room: %v", err)
	}
	if err := s.Delete(bg, id); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: err %v", err)
	}
	if _, err := os.Stat(disk{dir}.path(id)); err == nil {
		t.Error("a deleted context's file is still there")
	}
}

// TestSchedulerRoundRobin: the worker takes contexts in turn, each
// context's jobs in order.
func TestSchedulerRoundRobin(t *testing.T) {
	s := newScheduler()
	defer s.close()
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	rec := func(name string) func() {
		return func() { mu.Lock(); order = append(order, name); mu.Unlock() }
	}
	started := make(chan struct{})
	s.submit("x", func() { close(started); <-release })
	<-started
	var jobs []*job
	for _, k := range []string{"a1", "a2", "a3", "b1", "c1", "b2", "x1"} {
		jobs = append(jobs, s.submit(k[:1], rec(k)))
	}
	withdrawn := s.submit("d", rec("d1"))
	if !s.withdraw(withdrawn) {
		t.Fatal("a queued job could not be withdrawn")
	}
	close(release)
	for _, j := range jobs {
		<-j.done
	}
	want := []string{"a1", "b1", "c1", "x1", "a2", "b2", "a3"}
	if !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
}

// TestStopStringTrimsHistory: a call that ends at a stop string keeps the
// tokens of its reply's text only, and the next call continues from
// exactly that history.
func TestStopStringTrimsHistory(t *testing.T) {
	s := newTestService(t, "", Config{})
	bg := context.Background()
	a, _ := s.NewContext("a", "Fortune:")
	b, _ := s.NewContext("a", "Fortune:")
	ra, err := s.Call(bg, a, " The", CallOptions{MaxTokens: 24})
	if err != nil {
		t.Fatal(err)
	}
	if len(ra.Text) < 12 {
		t.Fatalf("the reference reply %q is too short to cut", ra.Text)
	}
	stop := ra.Text[len(ra.Text)/2 : len(ra.Text)/2+3]
	cut := strings.Index(ra.Text, stop)
	before, _ := s.History(b)
	rb, err := s.Call(bg, b, " The", CallOptions{MaxTokens: 24, Stop: []string{stop}})
	if err != nil {
		t.Fatal(err)
	}
	if rb.Text != ra.Text[:cut] || rb.FinishReason != string(generate.StopString) {
		t.Fatalf("with stop %q: %q (%s), want %q", stop, rb.Text, rb.FinishReason, ra.Text[:cut])
	}
	h, _ := s.History(b)
	_, tok := testModel(t)
	p, _ := s.encodePrompt(" The")
	kept := h[len(before)+len(p):]
	if len(kept) != rb.Tokens {
		t.Errorf("reply counts %d tokens, the history kept %d", rb.Tokens, len(kept))
	}
	if got := tok.Decode(kept); !strings.HasPrefix(got, rb.Text) || strings.Contains(got, stop) {
		t.Errorf("kept tokens spell %q: want the reply %q and not the stop string %q", got, rb.Text, stop)
	}
	if _, err := s.Call(bg, b, " more", CallOptions{MaxTokens: 6}); err != nil {
		t.Fatal(err)
	}
	after, _ := s.History(b)
	p2, _ := s.encodePrompt(" more")
	ref := oneShot(t, append(slices.Clone(h), p2...), 6)
	if got := after[len(h)+len(p2):]; !slices.Equal(got, ref.Tokens) {
		t.Errorf("after the trimmed call: %v, generation over the history gives %v", got, ref.Tokens)
	}
}

// TestBusy: past MaxQueue waiting calls, a call is refused at once; a
// call that waited reports its wait.
func TestBusy(t *testing.T) {
	s := newTestService(t, "", Config{MaxQueue: 2})
	id, _ := s.NewContext("a", "x")
	release := make(chan struct{})
	started := make(chan struct{})
	s.sched.submit("hold", func() { close(started); <-release })
	<-started
	var jobs []*job
	for range 2 {
		jobs = append(jobs, s.sched.submit("other", func() {}))
	}
	if _, err := s.Call(context.Background(), id, " hi", CallOptions{MaxTokens: 1}); !errors.Is(err, ErrBusy) {
		t.Errorf("a call behind a full queue: %v, want ErrBusy", err)
	}
	s.sched.withdraw(jobs[1])
	done := make(chan Reply)
	go func() {
		r, err := s.Call(context.Background(), id, " hi", CallOptions{MaxTokens: 1})
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	for s.sched.depth() < 2 { // the call is queued
		time.Sleep(time.Millisecond)
	}
	const hold = 50 * time.Millisecond
	time.Sleep(hold)
	close(release)
	if r := <-done; r.Queue < hold {
		t.Errorf("the call waited at least %v behind the held job; it reports %v", hold, r.Queue)
	}
}

// strictStore wraps LMK with the rule a chunk store keeps (engine/llms):
// Install's tokens must extend what was committed for id, and Drop of an
// unknown id is an error.
type strictStore struct {
	*LMK
	has map[string][]int
}

func (s *strictStore) Install(id string, tokens []int) (SwitchTimings, error) {
	if h, ok := s.has[id]; ok && (len(tokens) < len(h) || !slices.Equal(tokens[:len(h)], h)) {
		return SwitchTimings{}, fmt.Errorf("strict: Install %s: tokens do not extend the %d committed", id, len(h))
	}
	return s.LMK.Install(id, tokens)
}

func (s *strictStore) Commit(id string, tokens []int) error {
	s.has[id] = slices.Clone(tokens)
	return s.LMK.Commit(id, tokens)
}

func (s *strictStore) Drop(id string) error {
	if _, ok := s.has[id]; !ok {
		return fmt.Errorf("strict: unknown context %s", id)
	}
	delete(s.has, id)
	return s.LMK.Drop(id)
}

// TestStoreDisagreement: with a store that refuses tokens that do not
// extend its copy, calls still work when the window moves and when the
// store's copy (from before a restart) holds a call that was never
// acknowledged: the service drops the store's copy and rebuilds it.
func TestStoreDisagreement(t *testing.T) {
	st, tok := testModel(t)
	dir := t.TempDir()
	store := &strictStore{LMK: NewLMK(st, 0), has: map[string][]int{}}
	s, err := New(st, tok, store, Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	id, _ := s.NewContext("a", "Fortune:")
	prompt := strings.Repeat(" Q: why is the sky blue? A:", 5)
	for i := 0; i < 3; i++ {
		if _, err := s.Call(bg, id, prompt, CallOptions{MaxTokens: 8, Stop: []string{"never-appears"}}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if s.Stats().Counters.WindowMoves == 0 {
		t.Fatal("the window never moved: the test needs it to")
	}
	s.Close()
	// A restart whose store holds one more call than the service knows.
	h, _ := s.History(id)
	store.has[id] = append(slices.Clone(store.has[id]), 5, 6, 7)
	s2, err := New(st, tok, store, Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Call(bg, id, " more", CallOptions{MaxTokens: 3}); err != nil {
		t.Fatalf("call after the store diverged: %v", err)
	}
	if got, _ := s2.History(id); !slices.Equal(got[:len(h)], h) {
		t.Error("the history changed")
	}
}
