package serve

import (
	"github.com/tlite/tlite/engine/llms"
)

// LLMSStore is the LLMS memory system (engine/llms.Manager) as the
// service's ContextStore: chunked, compressed, swapped contexts restored
// by the swap–recompute pipeline, and the paper's baselines (the
// Manager's modes). It observes every forward of a call, so that chunk
// density counts the prefill's rows and the decode steps' (one in
// llms.Config.StatsEvery), not only the call's last forward.
//
// The Manager must drive the service's kv.State and be used by nothing
// else; its state directory must not be the service's.
type LLMSStore struct {
	m *llms.Manager
}

// NewLLMSStore returns the store over m.
func NewLLMSStore(m *llms.Manager) *LLMSStore { return &LLMSStore{m: m} }

// Manager is the manager behind the store.
func (s *LLMSStore) Manager() *llms.Manager { return s.m }

// Install installs id through the Manager. Its timings map onto the
// service's without double counting: the reads overlap the upload and
// the recompute, so IO is the part the switch waited for (IOWait, not the
// reads' span); waiting for the previous call's ahead-of-time swap-out
// counts as reclaiming (it is what frees the memory); the rest of the
// Manager's total is Other.
func (s *LLMSStore) Install(id string, tokens []int) (SwitchTimings, error) {
	tm, err := s.m.Install(id, tokens)
	sw := SwitchTimings{Reclaim: tm.AoTWait + tm.Reclaim, IO: tm.IOWait, Recompute: tm.Recompute, Upload: tm.Upload}
	if rest := tm.Total - sw.Total(); rest > 0 {
		sw.Other = rest
	}
	return sw, err
}

// Commit ends the call: density, ranking, encoding and (LLMS) the
// ahead-of-time swap-out.
func (s *LLMSStore) Commit(id string, tokens []int) error { return s.m.Commit(id, tokens) }

// Drop deletes id's chunks, swap file and metadata.
func (s *LLMSStore) Drop(id string) error { return s.m.Drop(id) }

// Stats is the Manager's snapshot (llms.ManagerStats): bytes per tier,
// chunks by level and tier, swap I/O, recompute and fault counts.
func (s *LLMSStore) Stats() any { return s.m.Stats() }

// ContextStats describes id's chunks by level and by tier (device,
// memory, flash, none) as llms.CtxInfo; a context the Manager does not
// hold yet (created, never called) reports no chunks.
func (s *LLMSStore) ContextStats(id string) any {
	ci, err := s.m.Info(id)
	if err != nil {
		return llms.CtxInfo{ID: id, Chunks: map[string]int{}, Tiers: map[string]int{}}
	}
	return ci
}

// Prepare announces a forward of rows tokens: the Manager gathers
// attention statistics for prefills and one decode step in
// llms.Config.StatsEvery.
func (s *LLMSStore) Prepare(rows int) error {
	if !s.m.Ranks() {
		return nil
	}
	return s.m.Prepare(rows)
}

// Observe accumulates the last forward's attention statistics into the
// installed context's density. Modes that do not rank chunks need no
// statistics, and a session opened without them is no error there.
func (s *LLMSStore) Observe() error {
	if !s.m.Ranks() {
		return nil
	}
	return s.m.Observe()
}
