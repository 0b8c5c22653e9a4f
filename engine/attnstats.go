package engine

// Attention statistics of a session's in-place KV cache
// (KVConfig.AttentionStats): every fused attention that reads a cache
// buffer also writes its rows' log-sum-exp and then runs
// kernels.Device.AttentionStats, which sums each slot's softmax
// probabilities over the rows of the run, keeps the largest of them (the
// peak) and counts the rows that could attend it. The buffers are allocated at Open (fp32, sized for
// MaxContext rows and slots per query head) and read back on demand.
// SetAttentionStats turns them off and on between Runs: a Run without them
// costs what a session opened without them costs, so a caller can sample
// the rows it gathers statistics for.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/tlite/tlite/kernels"
)

// attnStat is one attention's statistics buffers.
type attnStat struct {
	name            string
	heads, capacity int
	lse, sum, count *buffer
	peak            *buffer
	skv             int // kv_len of the last run; 0 before any, -1 when it skipped the statistics, -2 when it accumulated them
	accSkv          int // kv_len of the last accumulating launch lowered
}

// ErrNoAttentionStats is returned (wrapped) by AttentionStats when the last
// Run computed no statistics because SetAttentionStats had turned them off.
var ErrNoAttentionStats = errors.New("the last run computed no attention statistics")

// SetAttentionStats turns the attention statistics on or off for the
// following Runs of a session opened with KVConfig.AttentionStats (they
// start on). Off, the attentions run as in a session without statistics
// and AttentionStats reports ErrNoAttentionStats until a Run computes them
// again.
func (s *Session) SetAttentionStats(on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("engine: SetAttentionStats on a closed session")
	}
	if len(s.attnStats) == 0 {
		return fmt.Errorf("engine: the session computes no attention statistics (open it with KVConfig.AttentionStats)")
	}
	s.statsOff = !on
	return nil
}

// AttnStats are one attention layer's statistics of the last Run, over the
// attended slots 0..Slots-1 (kv_len).
type AttnStats struct {
	// Node is the fused attention node.
	Node  string
	Heads int
	Slots int
	// Sum[h*Slots+j] is the softmax probability query head h gave slot j,
	// summed over the run's query rows.
	Sum []float32
	// Count[h*Slots+j] is the number of the run's rows that may attend
	// slot j (its mask entry open): the same for every head under kv_bias.
	Count []float32
	// Peak[h*Slots+j] is the largest softmax probability query head h
	// gave slot j in any one of the run's rows (0 when none may attend it).
	Peak []float32
}

// newAttnStat allocates the statistics buffers of one cache-reading
// attention with heads query heads.
func (s *Session) newAttnStat(name string, heads, capacity int) (*attnStat, error) {
	st := &attnStat{name: name, heads: heads, capacity: capacity}
	n := heads * capacity * 4
	for _, p := range []**buffer{&st.lse, &st.sum, &st.count, &st.peak} {
		b, err := allocBuffer(s.dev, n)
		if err != nil {
			return nil, fmt.Errorf("engine: attention statistics of %s: %w", name, err)
		}
		s.consts = append(s.consts, b)
		s.constB += int64(n)
		*p = b
	}
	s.attnStats = append(s.attnStats, st)
	return st, nil
}

// run computes the statistics of the attention p just ran (with p.LSE set
// to st.lse).
func (st *attnStat) run(dev kernels.Device, s kernels.Storage, q, k kernels.Buf, p kernels.AttentionParams) error {
	if p.Batch != 1 || p.Heads != st.heads || p.SeqQ > st.capacity || p.SeqKV > st.capacity {
		return fmt.Errorf("attention statistics sized for batch 1, %d heads, %d rows: got batch %d, %d heads, %d rows over %d slots", st.heads, st.capacity, p.Batch, p.Heads, p.SeqQ, p.SeqKV)
	}
	st.skv = p.SeqKV
	return dev.AttentionStats(s, q, k, st.lse.m, st.sum.m, st.count.m, st.peak.m, p)
}

// AttentionStats returns the attention statistics of the last Run, one
// entry per attention that reads the in-place cache, in program order. The
// session must have been opened with KVConfig.AttentionStats.
func (s *Session) AttentionStats() ([]AttnStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("engine: AttentionStats on a closed session")
	}
	if len(s.attnStats) == 0 {
		return nil, fmt.Errorf("engine: the session computes no attention statistics (open it with KVConfig.AttentionStats)")
	}
	out := make([]AttnStats, len(s.attnStats))
	for i, st := range s.attnStats {
		if st.skv == -2 {
			return nil, fmt.Errorf("engine: attention statistics of %s were accumulated on the device (AccumulateAttentionStats): read them with TakeAttentionStats", st.name)
		}
		if st.skv < 0 {
			return nil, fmt.Errorf("engine: attention statistics of %s: %w", st.name, ErrNoAttentionStats)
		}
		n := st.heads * st.skv
		a := AttnStats{Node: st.name, Heads: st.heads, Slots: st.skv, Sum: make([]float32, n), Count: make([]float32, n), Peak: make([]float32, n)}
		raw := make([]byte, 4*n)
		for _, f := range []struct {
			b   *buffer
			dst []float32
		}{{st.sum, a.Sum}, {st.count, a.Count}, {st.peak, a.Peak}} {
			if err := s.dev.Read(f.b.m, 0, raw); err != nil {
				return nil, fmt.Errorf("engine: reading the attention statistics of %s: %w", st.name, err)
			}
			for j := range f.dst {
				f.dst[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
			}
		}
		out[i] = a
	}
	return out, nil
}

// attnStatFor allocates the statistics buffers of the attention being
// lowered, whose query q (read through perm) has constant heads.
func attnStatFor(lc *lowerCtx, q *vinfo, perm [4]int) (*attnStat, error) {
	h, ok := q.shape[perm[1]].Const()
	if !ok {
		return nil, lc.unsupported("attention statistics need a constant number of query heads; q is %v", q.shape)
	}
	return lc.c.s.newAttnStat(lc.n.Name, int(h), lc.c.s.kvCap)
}

// Accumulated statistics (AccumulateAttentionStats): instead of each Run's
// per-head statistics, which a caller gathering them over many decode
// steps would read back and convert after every step, each Run that
// computes statistics adds them, weighted and summed over layers and query
// heads, into per-slot totals on the device
// (kernels.Device.AttentionStatsAcc). TakeAttentionStats reads and zeroes
// them: one read of 3·kv_len floats (sums, counts, peaks) for any number
// of Runs.

// statsTotals are the device totals of accumulated statistics.
type statsTotals struct {
	sum, count *buffer
	peak       *buffer
	skv        int // the largest kv_len added since the last take
	runs       int // Runs added since the last take
}

// AttnStatsTotal are attention statistics accumulated over Runs on the
// device (AccumulateAttentionStats), over slots 0..Slots-1.
type AttnStatsTotal struct {
	// Slots is the largest kv_len of the Runs added.
	Slots int
	// LH is the number of (attention layer, query head) pairs each Run
	// added into Sum.
	LH int
	// Runs is the number of Runs added.
	Runs int
	// Sum[j] is Σ over the Runs of weight × the softmax probability
	// slot j received, summed over the Run's query rows, the query heads
	// and the attention layers.
	Sum []float32
	// Count[j] is Σ over the Runs of weight × the number of the Run's rows
	// that may attend slot j, counted at the first attention's query
	// head 0 (under kv_bias every head and layer has the same count).
	Count []float32
	// Peak[j] is the largest softmax probability slot j received from any
	// one query row, head and layer of the Runs added (unweighted: a peak
	// is not a count of rows).
	Peak []float32
}

// AccumulateAttentionStats switches the statistics of the following Runs
// that compute them (SetAttentionStats on) to accumulation with weight:
// each such Run adds weight times its statistics into device totals
// (summed over layers and query heads) instead of replacing the per-run
// ones, and TakeAttentionStats reads them. Weight 0 switches back to
// per-run statistics (AttentionStats) and discards the totals. Slots
// keep their identity in the totals: take them before slots are freed or
// rewritten with other tokens.
func (s *Session) AccumulateAttentionStats(weight float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("engine: AccumulateAttentionStats on a closed session")
	}
	if len(s.attnStats) == 0 {
		return fmt.Errorf("engine: the session computes no attention statistics (open it with KVConfig.AttentionStats)")
	}
	if weight < 0 || math.IsNaN(weight) || math.IsInf(weight, 0) || float32(weight) == 0 && weight != 0 {
		return fmt.Errorf("engine: attention statistics weight %g", weight)
	}
	if float32(weight) != s.statsW {
		// Recorded launches carry the weight.
		s.replayGen++
	}
	if weight == 0 {
		s.statsW = 0
		if s.statsAcc != nil {
			return s.zeroTotals()
		}
		return nil
	}
	if s.statsAcc == nil {
		t := &statsTotals{}
		n := 4 * s.kvCap
		for _, p := range []**buffer{&t.sum, &t.count, &t.peak} {
			b, err := allocBuffer(s.dev, n)
			if err != nil {
				return fmt.Errorf("engine: accumulated attention statistics: %w", err)
			}
			s.consts = append(s.consts, b)
			s.constB += int64(n)
			*p = b
		}
		s.statsAcc = t
		t.skv = s.kvCap // zero every slot once
		if err := s.zeroTotals(); err != nil {
			return err
		}
	}
	s.statsW = float32(weight)
	return nil
}

// statsMode is 1 while Runs accumulate statistics on the device (on,
// AccumulateAttentionStats with a weight, no command buffers), else 0. In
// mode 1 a Run's launches depend only on the binding and the weight (a new
// weight starts a new replay generation), so its device steps replay like
// those of a Run without statistics, from recordings of their own; the
// host-side bookkeeping of the statistics is made per Run (statsRan), not
// by the lowered steps, so that a replayed Run makes it too.
func (s *Session) statsMode() int {
	if s.accumulating() && !s.cmdbuf {
		return 1
	}
	return 0
}

// accumulating reports whether Runs add their statistics into the totals.
func (s *Session) accumulating() bool {
	return len(s.attnStats) > 0 && !s.statsOff && s.statsW > 0
}

// statsRan makes the statistics' host bookkeeping of a Run that
// completed its device steps: off, every attention's are stale;
// accumulated, the totals count the Run and the attended lengths the
// steps last lowered under this binding.
func (s *Session) statsRan() {
	switch {
	case len(s.attnStats) == 0:
	case s.statsOff:
		for _, st := range s.attnStats {
			st.skv = -1
		}
	case s.accumulating():
		t := s.statsAcc
		t.runs++
		for _, st := range s.attnStats {
			t.skv = max(t.skv, st.accSkv)
			st.skv = -2
		}
	}
}

// zeroTotals clears the totals' slots written since the last take.
func (s *Session) zeroTotals() error {
	t := s.statsAcc
	if t.skv > 0 {
		zero := make([]byte, 4*t.skv)
		for _, b := range []*buffer{t.sum, t.count, t.peak} {
			if err := s.dev.Write(b.m, 0, zero); err != nil {
				return fmt.Errorf("engine: clearing the accumulated attention statistics: %w", err)
			}
		}
	}
	t.skv, t.runs = 0, 0
	return nil
}

// accumulate adds the statistics of the attention p just ran (with p.LSE
// set to st.lse) into the session's totals, weighted by w; the first
// statistics attention of the program adds the counts.
func (st *attnStat) accumulate(s *Session, stor kernels.Storage, q, k kernels.Buf, p kernels.AttentionParams, w float32) error {
	t := s.statsAcc
	if p.Batch != 1 || p.Heads != st.heads || p.SeqQ > st.capacity || p.SeqKV > st.capacity {
		return fmt.Errorf("attention statistics sized for batch 1, %d heads, %d rows: got batch %d, %d heads, %d rows over %d slots", st.heads, st.capacity, p.Batch, p.Heads, p.SeqQ, p.SeqKV)
	}
	// The Run's bookkeeping is statsRan's (a replayed Run makes it too).
	st.accSkv = p.SeqKV
	return s.dev.AttentionStatsAcc(stor, q, k, st.lse.m, t.sum.m, t.count.m, t.peak.m, p, w, st == s.attnStats[0])
}

// TakeAttentionStats returns the statistics accumulated since the last
// take (AccumulateAttentionStats) and zeroes the totals.
func (s *Session) TakeAttentionStats() (AttnStatsTotal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return AttnStatsTotal{}, fmt.Errorf("engine: TakeAttentionStats on a closed session")
	}
	t := s.statsAcc
	if t == nil || s.statsW == 0 {
		return AttnStatsTotal{}, fmt.Errorf("engine: the session does not accumulate attention statistics (AccumulateAttentionStats)")
	}
	out := AttnStatsTotal{Slots: t.skv, Runs: t.runs, Sum: make([]float32, t.skv), Count: make([]float32, t.skv), Peak: make([]float32, t.skv)}
	for _, st := range s.attnStats {
		out.LH += st.heads
	}
	raw := make([]byte, 4*t.skv)
	for _, f := range []struct {
		b   *buffer
		dst []float32
	}{{t.sum, out.Sum}, {t.count, out.Count}, {t.peak, out.Peak}} {
		if t.skv == 0 {
			break
		}
		if err := s.dev.Read(f.b.m, 0, raw); err != nil {
			return AttnStatsTotal{}, fmt.Errorf("engine: reading the accumulated attention statistics: %w", err)
		}
		for j := range f.dst {
			f.dst[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
		}
	}
	if err := s.zeroTotals(); err != nil {
		return AttnStatsTotal{}, err
	}
	return out, nil
}
