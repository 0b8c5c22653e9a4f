// Package serve is tlite's LLM service (the LLMS paper's LLMService, spec
// §1a items 1, 11 and 12): one resident decoder serves many persistent
// contexts over HTTP/JSON (see Handler).
//
// A context is a memory-resident fragment, kept here and in the state
// directory (its system prompt and every token id, never dropped), and a
// swappable fragment, its keys and values, which a ContextStore keeps or
// rebuilds. A call installs the context in the model's KV cache
// (ContextStore.Install: the paper's switch), prefills the new prompt,
// decodes with engine/generate's sampler and stop handling, commits the
// extended context to the store, writes the context's file and then
// replies. The service runs in-process in tl serve and speaks HTTP over
// TCP or a unix socket (the paper's service is a process reached by
// socket IPC; this is that).
//
// Consistency: a call is committed entirely or not at all. If it fails, or
// its client goes away while it waits or generates, generation stops, the
// KV slots it filled are freed, and the context's history and file are as
// before the call. Once generation has ended the call is committed (store,
// file) before the reply is written, so a client that leaves after that
// finds the call in the context, and a reply that was acknowledged is on
// disk (written atomically: temporary file, fsync, rename, directory
// fsync; checksummed): kill -9 loses at most the calls in flight. A call
// that ends at a stop string keeps only the tokens of its reply's text.
//
// Scheduling: one worker runs the model. Calls on one context run in
// arrival order, one at a time; contexts with waiting calls take turns
// (round robin), so a long backlog on one context does not starve the
// others. Each app (X-App-Id) may hold Config.AppContexts contexts (the
// paper's K).
//
// Sliding window: beyond the maximum context the model sees the first
// Config.Sinks tokens (attention sinks, as StreamingLLM keeps) followed
// by the most recent tokens, at consecutive positions 0..n-1 (StreamingLLM
// also numbers positions within the cache). The window moves by at least
// a quarter of the context at a time so that the store recomputes after a
// move rarely, not on every call; the history keeps every token.
package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/serve/api"
	"github.com/tlite/tlite/engine/tokenizer"
)

// Config configures a Service.
type Config struct {
	// StateDir holds the contexts' files (required).
	StateDir string
	// Model names the model in replies and stats.
	Model string
	// Sinks is the number of leading tokens the sliding window keeps
	// (default 4, StreamingLLM's).
	Sinks int
	// AppContexts is K, the most contexts one app may hold (0: no limit).
	AppContexts int
	// DefaultMaxTokens is max_tokens when a call gives none (default 64).
	DefaultMaxTokens int
	// BudgetBytes is the KV budget given to the store, reported in stats.
	BudgetBytes int64
	// MaxQueue is the most calls that may wait for the model (default
	// 256); more are refused with ErrBusy.
	MaxQueue int
}

// Service is the LLM service: one model, many contexts.
type Service struct {
	st    *kv.State
	tok   *tokenizer.Tokenizer
	store ContextStore
	cfg   Config
	disk  disk
	sched *scheduler
	start time.Time

	// storeHas is, per context, the tokens this process last committed
	// to the store (only the worker touches it).
	storeHas map[string][]int

	mu          sync.Mutex
	ctxs        map[string]*record
	quarantined []Quarantined
	counters    counters
}

// counters are the service's running totals (guarded by Service.mu).
type counters struct {
	Calls           int     `json:"calls"`
	FailedCalls     int     `json:"failed_calls"`
	CancelledCalls  int     `json:"cancelled_calls"`
	GeneratedTokens int     `json:"generated_tokens"`
	SwitchMs        float64 `json:"switch_ms_total"`
	PrefillMs       float64 `json:"prefill_ms_total"`
	DecodeMs        float64 `json:"decode_ms_total"`
	WindowMoves     int     `json:"window_moves"`
}

// New starts a service over st (the resident model's KV cache) with tok
// and store (nil: the LMK baseline). It reloads every context file in
// cfg.StateDir; files that do not read back are quarantined and listed in
// Quarantined.
func New(st *kv.State, tok *tokenizer.Tokenizer, store ContextStore, cfg Config) (*Service, error) {
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("serve: no state directory")
	}
	if cfg.Sinks <= 0 {
		cfg.Sinks = 4
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 64
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 256
	}
	if cfg.Sinks >= st.MaxContext()/2 {
		return nil, fmt.Errorf("serve: %d sink tokens in a context of %d: want fewer than half", cfg.Sinks, st.MaxContext())
	}
	if store == nil {
		store = NewLMK(st, 0)
	}
	d, err := newDisk(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("serve: state directory: %w", err)
	}
	recs, bad, err := d.load()
	if err != nil {
		return nil, err
	}
	s := &Service{st: st, tok: tok, store: store, cfg: cfg, disk: d, start: time.Now(), ctxs: map[string]*record{}, quarantined: bad, storeHas: map[string][]int{}}
	for _, r := range recs {
		if i := slices.IndexFunc(r.History, func(t int) bool { return t >= st.Vocab() }); i >= 0 {
			s.quarantined = append(s.quarantined, d.quarantine(d.path(r.ID),
				fmt.Sprintf("token %d is %d, outside this model's vocabulary of %d (written for another model?)", i, r.History[i], st.Vocab())))
			continue
		}
		// A window longer than this model's context (written by a
		// service with a longer one) moves at its next call.
		s.ctxs[r.ID] = r
	}
	s.sched = newScheduler()
	return s, nil
}

// Close waits for the queued calls and stops the worker. It does not
// close the model.
func (s *Service) Close() { s.sched.close() }

// Quarantined lists the context files that did not read back at start.
func (s *Service) Quarantined() []Quarantined {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.quarantined)
}

// MaxContext is the model's context (the window's length).
func (s *Service) MaxContext() int { return s.st.MaxContext() }

// Error kinds the HTTP layer maps to status codes.
var (
	// ErrNotFound: no such context.
	ErrNotFound = errors.New("unknown context")
	// ErrBadRequest: the request is wrong (too long, bad parameters).
	ErrBadRequest = errors.New("bad request")
	// ErrLimit: the app holds its K contexts.
	ErrLimit = errors.New("context limit reached")
	// ErrCancelled: the client went away; nothing was committed.
	ErrCancelled = errors.New("call cancelled")
	// ErrClosed: the service is shutting down.
	ErrClosed = errors.New("service closed")
	// ErrBusy: Config.MaxQueue calls are waiting already.
	ErrBusy = errors.New("too many calls waiting")
)

func badRequest(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, a...))
}

func newID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b[:])
}

// systemTokens are a context's first tokens: BOS and the system prompt.
func (s *Service) systemTokens(system string) ([]int, error) {
	ids, err := s.tok.Encode(system, tokenizer.EncodeOptions{AddBOS: s.tok.Special().BOS >= 0})
	if err != nil {
		return nil, badRequest("encoding the system prompt: %v", err)
	}
	if len(ids) == 0 {
		return nil, badRequest("the system prompt encodes to no tokens and the tokenizer has no BOS token")
	}
	if len(ids)+1 > s.st.MaxContext()/2 {
		return nil, badRequest("the system prompt is %d tokens; the context holds %d and the system prompt may take at most half less one (%d)", len(ids), s.st.MaxContext(), s.st.MaxContext()/2-1)
	}
	return ids, nil
}

// NewContext creates a context for app with a system prompt, writes its
// file and returns its id.
func (s *Service) NewContext(app, system string) (string, error) {
	ids, err := s.systemTokens(system)
	if err != nil {
		return "", err
	}
	now := time.Now().UTC()
	r := &record{ID: newID(), App: app, System: system, History: ids, Sinks: s.cfg.Sinks, Pending: len(ids), Created: now, LastUse: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.cfg.AppContexts; k > 0 {
		n := 0
		for _, c := range s.ctxs {
			if c.App == app {
				n++
			}
		}
		if n >= k {
			return "", fmt.Errorf("%w: app %q holds %d contexts, the limit per app (delete one first)", ErrLimit, app, k)
		}
	}
	// Saved under the lock, so that the count above holds; a save is a
	// few milliseconds.
	if err := s.disk.save(r); err != nil {
		return "", err
	}
	s.ctxs[r.ID] = r
	return r.ID, nil
}

// Info describes context id, with the store's view of it.
func (s *Service) Info(id string) (api.ContextInfo, error) {
	info, err := s.infoNoStore(id)
	if err != nil {
		return info, err
	}
	if cs, ok := s.store.(ContextStatser); ok {
		// The store is not safe for concurrent use: ask on the worker.
		j := s.sched.submit(id, func() { info.Store = cs.ContextStats(id) })
		if j != nil {
			<-j.done
		}
	}
	return info, nil
}

// infoNoStore is Info without asking the store.
func (s *Service) infoNoStore(id string) (api.ContextInfo, error) {
	s.mu.Lock()
	r, ok := s.ctxs[id]
	var info api.ContextInfo
	if ok {
		info = api.ContextInfo{ID: r.ID, App: r.App, System: r.System, Tokens: len(r.History), WindowTokens: r.windowLen(),
			EvictedTokens: len(r.History) - r.windowLen(), KVTokens: r.windowLen() - r.Pending, Calls: r.Calls, Created: r.Created, LastUse: r.LastUse}
	}
	s.mu.Unlock()
	if !ok {
		return info, fmt.Errorf("%w %q", ErrNotFound, id)
	}
	return info, nil
}

// History returns a copy of context id's token history.
func (s *Service) History(id string) ([]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.ctxs[id]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrNotFound, id)
	}
	return slices.Clone(r.History), nil
}

// IDs lists the contexts, sorted.
func (s *Service) IDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.ctxs))
	for id := range s.ctxs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Delete removes context id: its file, then what the store holds. It runs
// after the calls already queued on id.
func (s *Service) Delete(ctx context.Context, id string) error {
	var err error
	j := s.sched.submit(id, func() {
		s.mu.Lock()
		_, ok := s.ctxs[id]
		s.mu.Unlock()
		if !ok {
			err = fmt.Errorf("%w %q", ErrNotFound, id)
			return
		}
		if err = s.disk.remove(id); err != nil {
			return
		}
		s.mu.Lock()
		delete(s.ctxs, id)
		s.mu.Unlock()
		delete(s.storeHas, id)
		if derr := s.store.Drop(id); derr != nil {
			// The context is gone from disk and from the service; the
			// store keeps garbage, which it reports in its stats.
			err = nil
		}
	})
	return s.wait(ctx, j, &err)
}

// wait waits for j, withdrawing it if ctx ends first; err is what the job
// sets.
func (s *Service) wait(ctx context.Context, j *job, err *error) error {
	if j == nil {
		return ErrClosed
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		if s.sched.withdraw(j) {
			return fmt.Errorf("%w before it ran: %v", ErrCancelled, ctx.Err())
		}
		<-j.done
	}
	return *err
}

// CallOptions are a call's generation settings.
type CallOptions struct {
	// MaxTokens caps the tokens generated; 0 means Config.DefaultMaxTokens.
	MaxTokens   int
	Temperature float64
	TopP        float64
	// Seed, when SeedSet, repeats a sampled run; otherwise a sampled call
	// draws one (returned in Reply.Seed).
	Seed    int64
	SeedSet bool
	// Stop ends generation at the first of these strings.
	Stop []string
	// OnText, when set, receives the text as it is generated; an error
	// from it cancels the call.
	OnText func(string) error
}

// Reply is a call's outcome.
type Reply struct {
	Text          string
	Tokens        int
	FinishReason  string
	Seed          int64
	ContextTokens int
	// PromptTokens is the tokens the call forwarded before generating
	// (the new prompt and any pending tokens).
	PromptTokens int
	Queue        time.Duration
	Switch       SwitchTimings
	Prefill      time.Duration
	Decode       time.Duration
	Persist      time.Duration
}

// validate checks the options that do not depend on the context.
func (s *Service) validate(o *CallOptions) error {
	if n := s.sched.depth(); n >= s.cfg.MaxQueue {
		return fmt.Errorf("%w: %d calls are queued (the limit); try again later", ErrBusy, n)
	}
	if o.MaxTokens < 0 {
		return badRequest("max_tokens %d: want at least 1", o.MaxTokens)
	}
	if o.MaxTokens == 0 {
		o.MaxTokens = s.cfg.DefaultMaxTokens
	}
	if o.MaxTokens > s.st.MaxContext() {
		return badRequest("max_tokens %d is more than the context of %d tokens", o.MaxTokens, s.st.MaxContext())
	}
	smp := generate.Sampling{Temperature: o.Temperature, TopP: o.TopP}
	if err := smp.Validate(); err != nil {
		return badRequest("%v", err)
	}
	for _, st := range o.Stop {
		if st == "" {
			return badRequest("an empty stop string")
		}
	}
	if len(o.Stop) > 16 {
		return badRequest("%d stop strings: at most 16", len(o.Stop))
	}
	if o.Temperature > 0 && !o.SeedSet {
		var b [4]byte
		rand.Read(b[:])
		o.Seed = int64(b[0])<<24 | int64(b[1])<<16 | int64(b[2])<<8 | int64(b[3])
	}
	if o.Temperature == 0 {
		o.Seed = 0
	}
	return nil
}

// encodePrompt encodes a call's prompt (no BOS) and checks that it fits.
func (s *Service) encodePrompt(prompt string) ([]int, error) {
	ids, err := s.tok.Encode(prompt, tokenizer.EncodeOptions{})
	if err != nil {
		return nil, badRequest("encoding the prompt: %v", err)
	}
	if limit := s.st.MaxContext() - s.cfg.Sinks - 1; len(ids) > limit {
		return nil, badRequest("the prompt is %d tokens, longer than the context limit: at most %d (context %d, less %d sink tokens and 1 pending token)", len(ids), limit, s.st.MaxContext(), s.cfg.Sinks)
	}
	return ids, nil
}

// Call appends prompt to context id and generates, as described in the
// package doc. It runs after the calls queued on id before it, and in
// turn with the other contexts' calls. When ctx ends before the call is
// committed the call changes nothing and returns an error wrapping
// ErrCancelled.
func (s *Service) Call(ctx context.Context, id, prompt string, o CallOptions) (Reply, error) {
	if err := s.validate(&o); err != nil {
		return Reply{}, err
	}
	ids, err := s.encodePrompt(prompt)
	if err != nil {
		return Reply{}, err
	}
	s.mu.Lock()
	_, ok := s.ctxs[id]
	s.mu.Unlock()
	if !ok {
		return Reply{}, fmt.Errorf("%w %q", ErrNotFound, id)
	}
	var rep Reply
	j := s.sched.submit(id, func() {
		rep, err = s.run(ctx, id, nil, ids, o)
	})
	if err := s.wait(ctx, j, &err); err != nil {
		return rep, err
	}
	rep.Queue = j.start.Sub(j.queued)
	return rep, nil
}

// CallEphemeral runs prompt on a context that exists for this call only
// (the stateless chat completion): created with system, never written to
// disk, dropped from the store afterwards.
func (s *Service) CallEphemeral(ctx context.Context, system, prompt string, o CallOptions) (Reply, error) {
	if err := s.validate(&o); err != nil {
		return Reply{}, err
	}
	sys, err := s.systemTokens(system)
	if err != nil {
		return Reply{}, err
	}
	ids, err := s.encodePrompt(prompt)
	if err != nil {
		return Reply{}, err
	}
	r := &record{ID: newID(), System: system, History: sys, Sinks: s.cfg.Sinks, Pending: len(sys)}
	var rep Reply
	j := s.sched.submit(r.ID, func() {
		rep, err = s.run(ctx, r.ID, r, ids, o)
		s.store.Drop(r.ID)
		delete(s.storeHas, r.ID)
	})
	if err := s.wait(ctx, j, &err); err != nil {
		return rep, err
	}
	rep.Queue = j.start.Sub(j.queued)
	return rep, nil
}

// slide moves r's window so that room more tokens fit after it with the
// window at most the context, keeping the sinks, moving by at least a
// quarter of the context. minMove 0 moves only as far as needed.
func (s *Service) slide(r *record, room, minMove int) {
	maxCtx := s.st.MaxContext()
	if r.windowLen()+room <= maxCtx {
		return
	}
	if r.Start < r.Sinks {
		r.Start = r.Sinks
	}
	// Tokens of the window beyond the sinks to keep.
	keep := maxCtx - room - r.Sinks
	if minMove > 0 {
		keep = min(keep, len(r.History)-r.Start-maxCtx/4)
	}
	keep = max(keep, 0)
	r.Start = max(r.Start, len(r.History)-keep)
	r.Pending = min(r.Pending, r.windowLen())
}

// run is a call on the worker: install, prefill, decode, commit, persist.
// r is the ephemeral record, nil for a stored context.
func (s *Service) run(ctx context.Context, id string, r *record, prompt []int, o CallOptions) (Reply, error) {
	var rep Reply
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("%w before it ran: %v", ErrCancelled, err)
	}
	ephemeral := r != nil
	if !ephemeral {
		s.mu.Lock()
		cur, ok := s.ctxs[id]
		if ok {
			cp := *cur
			cp.History = slices.Clone(cur.History)
			r = &cp
		}
		s.mu.Unlock()
		if !ok {
			return rep, fmt.Errorf("%w %q (deleted before the call ran)", ErrNotFound, id)
		}
	}
	maxCtx := s.st.MaxContext()
	if r.Pending+len(prompt) == 0 {
		return rep, badRequest("empty prompt")
	}
	// The KV will hold the window, the prompt and every generated token
	// but the last: windowLen + len(prompt) + maxTokens - 1 <= maxCtx.
	sinks := min(r.Sinks, len(r.History))
	if len(prompt)+sinks > maxCtx {
		return rep, badRequest("the prompt is %d tokens, longer than the context limit of %d less %d sink tokens", len(prompt), maxCtx, sinks)
	}
	mt := min(o.MaxTokens, maxCtx+1-len(prompt)-sinks)
	before := r.Start
	s.slide(r, len(prompt)+mt-1, 1)
	moved := r.Start != before
	window := r.window()
	base := len(window) - r.Pending
	in := append(slices.Clone(window[base:]), prompt...)

	sw, err := s.install(id, window[:base])
	rep.Switch = sw
	if err != nil {
		s.rollback(base)
		return rep, fmt.Errorf("installing context %s: %w", id, err)
	}
	if s.st.Len() != base {
		s.rollback(base)
		return rep, fmt.Errorf("installing context %s: the store left %d filled slots, want %d", id, s.st.Len(), base)
	}
	obs, _ := s.store.(ForwardObserver)
	g := generate.New(&offsetStepper{st: s.st, base: base, obs: obs}, s.tok)
	res, err := g.Generate(ctx, generate.Request{Tokens: in, MaxNewTokens: mt, StopStrings: o.Stop,
		Sampling: generate.Sampling{Temperature: o.Temperature, TopP: o.TopP, Seed: o.Seed}}, o.OnText)
	rep.Prefill, rep.Decode = res.PrefillTime, res.DecodeTime
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		s.rollback(base)
		s.mu.Lock()
		if ctx.Err() != nil {
			s.counters.CancelledCalls++
		} else {
			s.counters.FailedCalls++
		}
		s.mu.Unlock()
		if ctx.Err() != nil {
			return rep, fmt.Errorf("%w: %v (nothing committed)", ErrCancelled, ctx.Err())
		}
		return rep, fmt.Errorf("generating: %w", err)
	}
	if want := base + len(in) + len(res.Tokens) - 1; s.st.Len() != want {
		s.rollback(base)
		return rep, fmt.Errorf("context %s: the cache holds %d tokens after the call, want %d", id, s.st.Len(), want)
	}
	// The context keeps the generated tokens up to the reply's text: after
	// a stop string, the tokens that spelled it are dropped (a chat turn
	// ends before "\nUser:", which the next turn writes itself).
	keep := len(res.Tokens)
	if res.Reason == generate.StopString {
		keep = s.tokensFor(res.Tokens, res.Text)
	}
	// The cache holds every generated token but the last; the kept ones
	// it holds are committed, a kept one it does not hold is pending.
	inKV := min(keep, len(res.Tokens)-1)
	s.rollback(base + len(in) + inKV)
	r.History = append(append(r.History, prompt...), res.Tokens[:keep]...)
	r.Pending = keep - inKV
	r.Calls++
	r.LastUse = time.Now().UTC()
	w := r.window()
	if err := s.store.Commit(id, w[:len(w)-r.Pending]); err != nil {
		s.rollback(base)
		delete(s.storeHas, id)
		return rep, fmt.Errorf("committing context %s: %w", id, err)
	}
	s.storeHas[id] = slices.Clone(w[:len(w)-r.Pending])
	if !ephemeral {
		t0 := time.Now()
		if err := s.disk.save(r); err != nil {
			// Not acknowledged: the service keeps the old record, and the
			// store, which committed more, sees a different token list at
			// the next Install and rebuilds.
			return rep, err
		}
		rep.Persist = time.Since(t0)
	}
	s.mu.Lock()
	if !ephemeral {
		if _, ok := s.ctxs[id]; ok {
			s.ctxs[id] = r
		}
	}
	s.counters.Calls++
	s.counters.GeneratedTokens += keep
	s.counters.SwitchMs += ms(sw.Total())
	s.counters.PrefillMs += ms(res.PrefillTime)
	s.counters.DecodeMs += ms(res.DecodeTime)
	if moved {
		s.counters.WindowMoves++
	}
	s.mu.Unlock()
	rep.Text, rep.Tokens, rep.FinishReason, rep.Seed = res.Text, keep, string(res.Reason), o.Seed
	rep.ContextTokens = len(r.History)
	rep.PromptTokens = len(in)
	return rep, nil
}

// install installs id's tokens through the store. When the store's copy
// of the context is known to disagree with tokens (the window moved, or a
// call was committed to the store but not acknowledged), or the store
// refuses them (a copy from before a crash that holds an unacknowledged
// call), the store drops its copy and rebuilds the context from the token
// ids: the history here is the truth.
func (s *Service) install(id string, tokens []int) (SwitchTimings, error) {
	if has, ok := s.storeHas[id]; ok && !slices.Equal(has, tokens) {
		s.store.Drop(id) // an error: the store did not know id either
		delete(s.storeHas, id)
	}
	sw, err := s.store.Install(id, tokens)
	if err == nil {
		return sw, nil
	}
	s.store.Drop(id)
	delete(s.storeHas, id)
	s.rollback(0)
	sw2, err2 := s.store.Install(id, tokens)
	sw.add(sw2)
	if err2 != nil {
		return sw, fmt.Errorf("%v; after dropping the store's copy: %w", err, err2)
	}
	return sw, nil
}

// tokensFor is the number of leading tokens of ids whose text covers
// text (the reply cut before a stop string).
func (s *Service) tokensFor(ids []int, text string) int {
	dec := s.tok.DecodeStreamWith(tokenizer.DecodeOptions{SkipSpecial: true})
	n := 0
	for i, id := range ids {
		if n >= len(text) {
			return i
		}
		n += len(dec.Add(id))
	}
	return len(ids)
}

// rollback frees every slot beyond the installed n (what an uncommitted
// call filled).
func (s *Service) rollback(n int) {
	var free []int
	for j := n; j < s.st.MaxContext(); j++ {
		if _, ok := s.st.Position(j); ok {
			free = append(free, j)
		}
	}
	s.st.Free(free...)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Stats are the service's figures (GET /v1/stats).
type Stats struct {
	Model         string         `json:"model"`
	MaxContext    int            `json:"max_context"`
	Sinks         int            `json:"sinks"`
	AppContexts   int            `json:"app_contexts_limit"`
	BudgetBytes   int64          `json:"kv_budget_bytes"`
	DeviceKVBytes int64          `json:"device_kv_bytes"`
	Contexts      int            `json:"contexts"`
	Apps          map[string]int `json:"contexts_by_app"`
	HistoryTokens int            `json:"history_tokens"`
	Queued        int            `json:"queued"`
	UptimeS       float64        `json:"uptime_s"`
	Counters      counters       `json:"counters"`
	Quarantined   []Quarantined  `json:"quarantined"`
	Store         any            `json:"store"`
}

// Stats returns the service's figures and the store's.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	st := Stats{Model: s.cfg.Model, MaxContext: s.st.MaxContext(), Sinks: s.cfg.Sinks, AppContexts: s.cfg.AppContexts, BudgetBytes: s.cfg.BudgetBytes,
		DeviceKVBytes: int64(s.st.SlotBytes()) * int64(s.st.MaxContext()),
		Contexts:      len(s.ctxs), Apps: map[string]int{}, UptimeS: time.Since(s.start).Seconds(), Counters: s.counters,
		Quarantined: slices.Clone(s.quarantined)}
	for _, r := range s.ctxs {
		st.Apps[r.App]++
		st.HistoryTokens += len(r.History)
	}
	s.mu.Unlock()
	if st.Quarantined == nil {
		st.Quarantined = []Quarantined{}
	}
	st.Queued = s.sched.depth()
	j := s.sched.submit("\x00stats", func() { st.Store = s.store.Stats() })
	if j != nil {
		<-j.done
	}
	return st
}

// offsetStepper runs the generator after an installed context of base
// tokens: the generator's positions 0, 1, ... are the cache's base,
// base+1, ..., in the slots of those positions, and Reset keeps the
// context. When the store observes forwards, each Step reports its
// forward to it (prefill and every decode step).
type offsetStepper struct {
	st   *kv.State
	base int
	obs  ForwardObserver
}

func (p *offsetStepper) Step(tokens, positions []int) ([]float32, error) {
	at := make([]int, len(positions))
	for i, q := range positions {
		at[i] = q + p.base
	}
	if p.obs != nil {
		if err := p.obs.Prepare(len(tokens)); err != nil {
			return nil, fmt.Errorf("the context store preparing the forward: %w", err)
		}
	}
	logits, err := p.st.Forward(tokens, at, at)
	if err != nil {
		return nil, err
	}
	if p.obs != nil {
		if err := p.obs.Observe(); err != nil {
			return nil, fmt.Errorf("the context store observing the forward: %w", err)
		}
	}
	v := p.st.Vocab()
	return logits[len(logits)-v:], nil
}

func (p *offsetStepper) Reset() error    { return nil }
func (p *offsetStepper) MaxContext() int { return p.st.MaxContext() - p.base }
func (p *offsetStepper) Vocab() int      { return p.st.Vocab() }
