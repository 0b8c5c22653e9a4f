package serve

import (
	"fmt"
	"slices"
	"time"

	"github.com/tlite/tlite/engine/kv"
)

// SwitchTimings are the parts of installing a context (the paper's switch
// latency): reclaiming memory, reading swapped KV, recomputing KV from
// token ids, and uploading KV to the device. The parts do not overlap: a
// store whose reads overlap its recompute reports as IO only the time the
// switch waited for them, so that Total is the switch's wall time.
type SwitchTimings struct {
	Reclaim, IO, Recompute, Upload time.Duration
	// Other is the rest of the switch (planning, bookkeeping, resetting
	// the cache), so that Total is the whole of it.
	Other time.Duration
}

// Total is the whole switch.
func (t SwitchTimings) Total() time.Duration {
	return t.Reclaim + t.IO + t.Recompute + t.Upload + t.Other
}

// add accumulates u's parts into t.
func (t *SwitchTimings) add(u SwitchTimings) {
	t.Reclaim += u.Reclaim
	t.IO += u.IO
	t.Recompute += u.Recompute
	t.Upload += u.Upload
	t.Other += u.Other
}

// ContextStore is the memory system behind the service: it keeps (or
// does not keep) contexts' keys and values between calls and installs a
// context in the model's KV cache before a call. The service calls it
// from one goroutine at a time.
//
// The contract, for a context id:
//   - Install(id, tokens): afterwards the kv.State's slots 0..n-1 hold the
//     keys and values of tokens[i] at position i (n = len(tokens)), and
//     no other slot is filled. tokens is normally exactly what the last
//     Commit of id gave, but the store must compare rather than assume:
//     when the service's sliding window moved, tokens shares only a
//     prefix (the sink tokens) with it; when a call was committed to the
//     store but its file could not be written (so it was not
//     acknowledged), tokens is a prefix of it; for a new context it is
//     empty.
//   - Commit(id, tokens): a call extended the context in the kv.State:
//     slots 0..len(tokens)-1 now hold tokens at their positions. The
//     store may swap the new KV out now (the paper's ahead-of-time
//     swap-out).
//   - A call that is not committed (an error, a client gone) may have
//     filled slots beyond the installed tokens; the service frees them
//     (kv.State.Free) before anything else happens, so the installed
//     tokens stay installed.
//   - Drop(id): the context is deleted (or was a stateless chat's);
//     forget everything about it.
//   - Stats: JSON-able figures for GET /v1/stats.
//
// The service calls Install, Commit and Drop from one goroutine, never
// two at once.
type ContextStore interface {
	Install(id string, tokens []int) (SwitchTimings, error)
	Commit(id string, tokens []int) error
	Drop(id string) error
	Stats() any
}

// ContextStatser is optionally implemented by a ContextStore that can
// describe one context (chunks by level and residency) for GET
// /v1/contexts/{id}.
type ContextStatser interface {
	ContextStats(id string) any
}

// ForwardObserver is optionally implemented by a ContextStore that learns
// from the model's forwards (LLMS ranks chunks by the attention they
// receive): the service calls Prepare before and Observe after every
// forward of a call, the prefill and each decode step, while the call's
// context is installed; Prepare is told the forward's token count, so
// that the store may sample the forwards it gathers statistics for. An
// error fails the call (nothing is committed).
type ForwardObserver interface {
	Prepare(rows int) error
	Observe() error
}

// LMK is the baseline store the paper calls LMK (low-memory killer): it
// keeps nothing between contexts. Installing a context other than the one
// last committed empties the cache and recomputes the whole context with
// one prefill (chunked to the plan's step size); installing the context
// already in the cache costs nothing.
type LMK struct {
	st *kv.State
	// maxStep caps the tokens of one Forward (the plan's seq maximum).
	maxStep int

	installed string // id whose tokens the cache holds; "" = none
	tokens    []int  // the tokens in slots 0..len-1 for installed

	stats LMKStats
}

// LMKStats are the LMK store's counters.
type LMKStats struct {
	System            string  `json:"system"`
	Installs          int     `json:"installs"`
	Hits              int     `json:"hits"`
	Recomputes        int     `json:"recomputes"`
	RecomputedTokens  int     `json:"recomputed_tokens"`
	RecomputeMs       float64 `json:"recompute_ms"`
	DeviceBytesPerTok int     `json:"device_bytes_per_token"`
	ResidentContexts  int     `json:"resident_contexts"`
}

// NewLMK returns the LMK store over st; maxStep is the most tokens one
// Forward may take (0: the whole context).
func NewLMK(st *kv.State, maxStep int) *LMK {
	if maxStep <= 0 {
		maxStep = st.MaxContext()
	}
	return &LMK{st: st, maxStep: maxStep, stats: LMKStats{System: "lmk", DeviceBytesPerTok: st.SlotBytes()}}
}

// Install makes the cache hold tokens for id: nothing when it already
// does, else a reset and a prefill of every token.
func (s *LMK) Install(id string, tokens []int) (SwitchTimings, error) {
	var t SwitchTimings
	s.stats.Installs++
	if len(tokens) > s.st.MaxContext() {
		return t, fmt.Errorf("lmk: context %s has %d tokens, more than the cache's %d", id, len(tokens), s.st.MaxContext())
	}
	if id == s.installed && slices.Equal(tokens, s.tokens) && s.st.Len() == len(tokens) {
		s.stats.Hits++
		return t, nil
	}
	t0 := time.Now()
	s.st.Reset()
	s.installed, s.tokens = "", nil
	for i := 0; i < len(tokens); i += s.maxStep {
		j := min(i+s.maxStep, len(tokens))
		pos := make([]int, j-i)
		for k := range pos {
			pos[k] = i + k
		}
		if _, err := s.st.Forward(tokens[i:j], pos, pos); err != nil {
			s.st.Reset()
			return t, fmt.Errorf("lmk: recomputing context %s (tokens %d..%d of %d): %w", id, i, j, len(tokens), err)
		}
	}
	t.Recompute = time.Since(t0)
	s.installed, s.tokens = id, slices.Clone(tokens)
	s.stats.Recomputes++
	s.stats.RecomputedTokens += len(tokens)
	s.stats.RecomputeMs += float64(t.Recompute) / 1e6
	return t, nil
}

// Commit records that the cache holds tokens for id.
func (s *LMK) Commit(id string, tokens []int) error {
	if len(tokens) > s.st.MaxContext() {
		return fmt.Errorf("lmk: commit of %d tokens for context %s, more than the cache's %d", len(tokens), id, s.st.MaxContext())
	}
	s.installed, s.tokens = id, slices.Clone(tokens)
	return nil
}

// Drop forgets id; the cache is emptied when it held id.
func (s *LMK) Drop(id string) error {
	if s.installed == id {
		s.st.Reset()
		s.installed, s.tokens = "", nil
	}
	return nil
}

// Stats returns the counters (LMKStats).
func (s *LMK) Stats() any {
	st := s.stats
	if s.installed != "" {
		st.ResidentContexts = 1
	}
	return st
}

// LMKContext is what the LMK store knows of one context: whether its KV
// is the one in the device cache (nothing is kept anywhere else).
type LMKContext struct {
	OnDevice     bool `json:"on_device"`
	DeviceTokens int  `json:"device_tokens"`
}

// ContextStats says whether id is the context in the cache (LMKContext).
func (s *LMK) ContextStats(id string) any {
	if id == "" || id != s.installed {
		return LMKContext{}
	}
	return LMKContext{OnDevice: true, DeviceTokens: len(s.tokens)}
}
