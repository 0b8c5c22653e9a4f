package llms

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/trace"
)

// TraceSystem adapts a Manager to engine/trace's System: Switch installs
// the arrival's context, Call prefills the tokens the call adds (taken
// from a corpus, a different stretch per context) and commits, Background
// waits for the ahead-of-time swap-out. Every mode runs this same path.
type TraceSystem struct {
	M      *Manager
	St     *kv.State
	Corpus []int
	Label  string
	hist   map[int][]int
	// Restarts counts contexts restarted because they reached the maximum
	// context (no sliding window: the context starts a new history).
	Restarts int
}

// Name is the mode's name, or Label when set.
func (s *TraceSystem) Name() string {
	if s.Label != "" {
		return s.Label
	}
	return string(s.M.cfg.Mode)
}

func ctxName(i int) string { return fmt.Sprintf("t%d", i) }

// Switch installs the context (created empty on its first call).
func (s *TraceSystem) Switch(a trace.Arrival) (trace.Parts, error) {
	if s.hist == nil {
		s.hist = map[int][]int{}
	}
	h := s.hist[a.Ctx]
	if len(h)+a.Tokens > s.St.MaxContext() {
		// No sliding window: the context restarts (deviation, named).
		if s.M.Has(ctxName(a.Ctx)) {
			if err := s.M.Drop(ctxName(a.Ctx)); err != nil {
				return nil, err
			}
		}
		h = nil
		s.hist[a.Ctx] = nil
		s.Restarts++
	}
	tm, err := s.M.Install(ctxName(a.Ctx), h)
	if err != nil {
		return nil, err
	}
	// "predicted" is the planner's estimate of the restore (not a part of
	// the measured time): its mean against io_wait+recompute+upload is the
	// predicted-versus-measured comparison.
	return trace.Parts{"reclaim": tm.Reclaim, "io": tm.IO, "io_wait": tm.IOWait, "recompute": tm.Recompute, "upload": tm.Upload, "decode": tm.Decode, "aot_wait": tm.AoTWait, "predicted": tm.Predicted}, nil
}

// Call prefills the call's tokens at the end of the context and commits.
func (s *TraceSystem) Call(a trace.Arrival) (trace.Parts, error) {
	h := s.hist[a.Ctx]
	n := len(h)
	// Context i reads the corpus from offset 997·i, wrapping.
	add := make([]int, a.Tokens)
	for k := range add {
		add[k] = s.Corpus[(997*a.Ctx+n+k)%len(s.Corpus)]
	}
	pos := make([]int, a.Tokens)
	for k := range pos {
		pos[k] = n + k
	}
	t0 := time.Now()
	if _, err := s.St.Forward(add, pos, pos); err != nil {
		return nil, err
	}
	if s.M.ranks() {
		if err := s.M.Observe(); err != nil {
			return nil, err
		}
	}
	pre := time.Since(t0)
	h = append(h, add...)
	s.hist[a.Ctx] = h
	t1 := time.Now()
	if err := s.M.Commit(ctxName(a.Ctx), h); err != nil {
		return nil, err
	}
	return trace.Parts{"prefill": pre, "commit": time.Since(t1)}, nil
}

// Background waits for the ahead-of-time swap-out of the last call.
func (s *TraceSystem) Background() (trace.Parts, error) {
	t0 := time.Now()
	err := s.M.waitBG()
	return trace.Parts{"aot_write": time.Since(t0)}, err
}

// IOBytes reports the manager's flash traffic.
func (s *TraceSystem) IOBytes() (read, written int64) { return s.M.IOBytes() }

// ContextBytesINT8 is one full-length context at base INT8 with its
// metadata: the spec's unit of budget (§1c scaling rules).
func ContextBytesINT8(st *kv.State, chunkTokens int) (int64, error) {
	lay, err := newLayout(st.Info(), chunkTokens, Level8)
	if err != nil {
		return 0, err
	}
	return int64(lay.maxChunks) * int64(lay.chunkSize(Level8, chunkTokens)), nil
}

// ExperimentConfig describes a switch-latency comparison.
type ExperimentConfig struct {
	Modes          []Mode
	Contexts       []int
	Calls          int
	Pattern        trace.Pattern
	BudgetContexts float64 // budget in units of ContextBytesINT8
	Seed           int64
	// Cost, when set, skips profiling (else each manager profiles once;
	// the first profile is reused by the others).
	Cost *CostModel
	// ChunkTokens are the chunk sizes to run every mode at (default 16
	// only): the paper's chunk-size curve (Fig. 14). At a size other than
	// 16 a system is reported as "mode@C" (e.g. "llms@32"), and the
	// recompute cost is profiled per size (a chunk of C tokens costs what
	// C tokens cost), unless Cost is given. The budget stays in units of
	// 16-token INT8 contexts, so every size gets the same bytes.
	ChunkTokens []int
}

// RunExperiment replays one trace per context count against every mode,
// on one kv.State (same engine path) and one I/O layer, in a fresh state
// directory under dir per run, and returns the report. The trace's delta
// lengths are the paper's, scaled to the model's maximum context.
func RunExperiment(st *kv.State, corpus []int, dir string, ec ExperimentConfig) (*trace.Report, map[string]CostModel, error) {
	if len(corpus) == 0 {
		return nil, nil, fmt.Errorf("llms: experiment without a corpus")
	}
	unit, err := ContextBytesINT8(st, 16)
	if err != nil {
		return nil, nil, err
	}
	budget := int64(ec.BudgetContexts * float64(unit))
	rep := &trace.Report{}
	costs := map[string]CostModel{}
	sizes := ec.ChunkTokens
	if len(sizes) == 0 {
		sizes = []int{16}
	}
	for _, c := range sizes {
		if c < 1 || c > st.MaxContext() {
			return nil, nil, fmt.Errorf("llms: chunks of %d tokens in a cache of %d", c, st.MaxContext())
		}
	}
	for _, c := range sizes {
		if err := runSize(st, corpus, dir, ec, c, budget, rep, costs); err != nil {
			return nil, nil, err
		}
	}
	return rep, costs, nil
}

// runSize is RunExperiment at chunks of C tokens.
func runSize(st *kv.State, corpus []int, dir string, ec ExperimentConfig, C int, budget int64, rep *trace.Report, costs map[string]CostModel) error {
	cost := ec.Cost
	label := func(m Mode) string {
		if C == 16 {
			return string(m)
		}
		return fmt.Sprintf("%s@%d", m, C)
	}
	for _, n := range ec.Contexts {
		arr, err := trace.Generate(trace.Config{Contexts: n, Calls: ec.Calls, MeanGap: 5 * time.Minute, Pattern: ec.Pattern,
			Deltas: trace.ScaleDeltas(trace.PaperDeltas, st.MaxContext()), Seed: ec.Seed})
		if err != nil {
			return err
		}
		for _, mode := range ec.Modes {
			d := filepath.Join(dir, fmt.Sprintf("%s-%d", label(mode), n))
			os.RemoveAll(d)
			st.Reset()
			m, err := NewManager(st, d, Config{Mode: mode, BudgetBytes: budget, Cost: cost, ChunkTokens: C})
			if err != nil {
				return err
			}
			if cost == nil {
				c := m.Cost()
				cost = &c
			}
			costs[label(mode)] = m.Cost()
			sys := &TraceSystem{M: m, St: st, Corpus: corpus, Label: label(mode)}
			res, err := trace.Run(sys, n, arr, nil)
			m.Close()
			if err != nil {
				return err
			}
			rep.Add(res)
			os.RemoveAll(d)
		}
	}
	return nil
}
