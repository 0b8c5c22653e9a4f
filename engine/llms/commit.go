package llms

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/tlite/tlite/engine/flash"
)

// targetLevels is each chunk's level by the mode: LLMS ranks the full
// chunks by density (the trailing partial chunk stays at base INT8);
// baselines store everything at one level.
func (m *Manager) targetLevels(c *context, n int) ([]Level, error) {
	nc := m.lay.chunks(n)
	out := make([]Level, nc)
	fixed := Level8
	switch {
	case m.cfg.Lossless || m.cfg.Mode == ModeVLLMS:
		fixed = LevelFP
	case m.ranks():
		fixed = 0
	}
	if fixed != 0 {
		for i := range out {
			out[i] = fixed
		}
		return out, nil
	}
	full := n / m.lay.C
	dens := make([]float64, full)
	for i := range dens {
		dens[i] = c.meta.Density.Chunk(i*m.lay.C, (i+1)*m.lay.C)
	}
	a, err := Assign(dens, m.cfg.Levels, m.cfg.RatioGlobal, m.cfg.Weight)
	if err != nil {
		return nil, err
	}
	copy(out, a.Levels)
	if m.cfg.Tolerance == TolerancePeak {
		peaks := make([]float64, full)
		for i := range peaks {
			peaks[i] = c.meta.Density.ChunkPeak(i*m.lay.C, (i+1)*m.lay.C)
		}
		placeBy(out[:full], a.Levels, peaks, true)
	}
	for i := full; i < nc; i++ {
		out[i] = Level8
	}
	return out, nil
}

// Commit records the end of a call on the installed context id: tokens is
// its full history now in st (slots 0..n-1 at positions 0..n-1). It
// accumulates density (the last forward's statistics unless Observe was
// called during the call), re-ranks the chunks (levels only move down),
// encodes every new or changed chunk from the device into the pool, and
// — under LLMS — starts their ahead-of-time swap-out, which the next
// method call waits for (recorded as SwitchTimings.AoTWait). Other modes
// swap out on demand.
func (m *Manager) Commit(id string, tokens []int) error {
	if err := m.waitBG(); err != nil {
		return fmt.Errorf("llms: background swap-out failed: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.ctxs[id]
	if c == nil {
		return fmt.Errorf("%w %q", ErrUnknown, id)
	}
	if m.active != id {
		return fmt.Errorf("llms: Commit %s: the installed context is %q", id, m.active)
	}
	stored := len(c.meta.Tokens)
	n := len(tokens)
	if n < stored || !slices.Equal(tokens[:stored], c.meta.Tokens) {
		return fmt.Errorf("llms: Commit %s: the tokens given do not extend the context's %d stored tokens", id, stored)
	}
	if n > m.st.MaxContext() || !m.holds(n) {
		return fmt.Errorf("llms: Commit %s: the cache does not hold the %d tokens at their positions", id, n)
	}
	if !m.observed {
		if err := m.observe(); err != nil && m.ranks() {
			return fmt.Errorf("llms: Commit %s: %w", id, err)
		}
	}
	if err := m.flush(c); err != nil {
		return fmt.Errorf("llms: Commit %s: %w", id, err)
	}
	if err := m.setWeight(1); err != nil {
		return err
	}
	m.observed, m.step = false, 0
	if err := m.setStats(m.ranks()); err != nil {
		return err
	}
	c.meta.Tokens = append([]int(nil), tokens...)
	c.meta.Positions = seq(n)
	c.meta.Density.Grow(n)
	target, err := m.targetLevels(c, n)
	if err != nil {
		return err
	}
	old := len(c.meta.Chunks)
	nc := m.lay.chunks(n)
	for len(c.meta.Chunks) < nc {
		c.meta.Chunks = append(c.meta.Chunks, chunkMeta{})
	}
	now := m.tick()
	var changed []int
	for i := 0; i < nc; i++ {
		ch := &c.meta.Chunks[i]
		tk := m.lay.tokens(i, n)
		lv := target[i]
		fresh := i >= old || ch.Tokens != tk
		if !fresh && lv.Ratio() > ch.Level.Ratio() {
			lv = ch.Level // precision once dropped is gone
		}
		if fresh || lv != ch.Level || (ch.Dirty && c.pool[i] == nil && !c.pending[i]) {
			changed = append(changed, i)
		}
		ch.Tokens, ch.Level, ch.LastAccess = tk, lv, now
		ch.Offsets = ch.Offsets[:0]
		for g := 0; g < m.lay.groups; g++ {
			ch.Offsets = append(ch.Offsets, m.lay.slotOff(g, i))
		}
		ch.DensitySum, ch.DensityCount = 0, 0
		for t := i * m.lay.C; t < i*m.lay.C+tk; t++ {
			ch.DensitySum += c.meta.Density.Sum[t]
			ch.DensityCount += c.meta.Density.Count[t]
		}
	}
	enc := map[int]*encChunk{}
	if len(changed) > 0 {
		var slots []int
		at := map[int]int{}
		for _, i := range changed {
			at[i] = len(slots)
			for t := 0; t < c.meta.Chunks[i].Tokens; t++ {
				slots = append(slots, i*m.lay.C+t)
			}
		}
		dump := make([]byte, len(slots)*m.lay.slotBytes())
		if err := m.st.ReadAllSlots(slots, dump); err != nil {
			return err
		}
		for _, i := range changed {
			ch := &c.meta.Chunks[i]
			e, err := m.lay.encode(dump, len(slots), at[i], ch.Tokens, ch.Level)
			if err != nil {
				return fmt.Errorf("llms: chunk %d of %s: %w", i, id, err)
			}
			enc[i] = e
			ch.Dirty = true
			ch.CRC = chunkCRC(e)
			m.poolPut(c, i, e)
		}
	}
	c.meta.Calls++
	c.meta.LastUse = now
	for i := range c.pool {
		m.queue.Touch(m.key(c, i), c.pool[i].level)
	}
	switch {
	case m.aot():
		if err := m.startAoT(c, changed, enc); err != nil {
			return err
		}
	default:
		// On-demand swap-out: only the memory-resident fragment (token
		// ids, chunk table) is persisted now.
		if err := writeMeta(m.dir, &c.meta, m.cfg.Flash); err != nil {
			return err
		}
	}
	// The call is over: reclaim others first, then (unlocked) this one.
	if err := m.reclaim(); err != nil {
		return err
	}
	m.queue.Unlock(id)
	return m.reclaim()
}

// startAoT writes the changed chunks and then the metadata in the
// background (spec §1a.12): the write is invisible to the caller, and a
// crash before it completes leaves the previous metadata, whose CRCs
// expose any chunk rewritten in place (restored by recompute).
func (m *Manager) startAoT(c *context, changed []int, enc map[int]*encChunk) error {
	f, err := m.file(c)
	if err != nil {
		return err
	}
	snap := c.meta
	snap.Tokens = append([]int(nil), c.meta.Tokens...)
	snap.Positions = append([]int(nil), c.meta.Positions...)
	snap.Density.Sum = append([]float64(nil), c.meta.Density.Sum...)
	snap.Density.Count = append([]float64(nil), c.meta.Density.Count...)
	snap.Density.Peak = append([]float64(nil), c.meta.Density.Peak...)
	snap.Chunks = append([]chunkMeta(nil), c.meta.Chunks...)
	for _, i := range changed {
		snap.Chunks[i].Dirty = false
		c.pending[i] = true
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		_, _, err := m.lay.writeChunks(f, changed, enc)
		if err == nil {
			err = writeMeta(m.dir, &snap, m.cfg.Flash)
		}
		m.mu.Lock()
		for _, i := range changed {
			delete(c.pending, i)
			if err == nil && i < len(c.meta.Chunks) && c.meta.Chunks[i].CRC == chunkCRC(enc[i]) {
				c.meta.Chunks[i].Dirty = false
			}
		}
		m.mu.Unlock()
		if err != nil {
			m.bgMu.Lock()
			m.bgErr = err
			m.bgMu.Unlock()
		}
	}()
	return nil
}

// Drop deletes context id: its pool chunks, swap file and metadata.
func (m *Manager) Drop(id string) error {
	if err := m.waitBG(); err != nil {
		return fmt.Errorf("llms: background swap-out failed: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.ctxs[id]
	if c == nil {
		return fmt.Errorf("%w %q", ErrUnknown, id)
	}
	for i := range c.meta.Chunks {
		m.poolDrop(c, i)
		m.queue.Remove(ChunkKey{id, i})
	}
	m.queue.Unlock(id)
	if c.file != nil {
		c.file.Close()
	}
	delete(m.ctxs, id)
	if m.active == id {
		if err := m.flush(nil); err != nil {
			return err
		}
		m.active = ""
		m.st.Reset()
	}
	// Metadata first: without it a leftover swap file is inert.
	for _, p := range []string{metaPath(m.dir, id), swapPath(m.dir, id)} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("llms: Drop %s: %w", id, err)
		}
	}
	return nil
}

// Has reports whether the manager holds context id.
func (m *Manager) Has(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ctxs[id] != nil
}

// Tokens returns context id's stored token history.
func (m *Manager) Tokens(id string) ([]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.ctxs[id]
	if c == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknown, id)
	}
	return append([]int(nil), c.meta.Tokens...), nil
}

// Contexts lists the held context ids, sorted.
func (m *Manager) Contexts() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id := range m.ctxs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Info describes context id: chunks by level and by tier (device: it is
// installed; memory: in the pool; flash: only on disk; none: to be
// recomputed).
func (m *Manager) Info(id string) (CtxInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.ctxs[id]
	if c == nil {
		return CtxInfo{}, fmt.Errorf("%w %q", ErrUnknown, id)
	}
	ci := CtxInfo{ID: id, Tokens: len(c.meta.Tokens), Chunks: map[string]int{}, Tiers: map[string]int{}, LastUse: c.meta.LastUse, Calls: c.meta.Calls}
	for i, ch := range c.meta.Chunks {
		ci.Chunks[ch.Level.String()]++
		ci.Tiers[m.tier(c, i)]++
	}
	return ci, nil
}

func (m *Manager) tier(c *context, i int) string {
	switch {
	case m.active == c.meta.ID:
		return "device"
	case c.pool[i] != nil:
		return "memory"
	case !c.meta.Chunks[i].Dirty && m.cfg.Mode != ModeLMK:
		return "flash"
	}
	return "none"
}

// Stats is a snapshot of the manager's accounting.
func (m *Manager) Stats() ManagerStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := ManagerStats{Mode: m.cfg.Mode, Tolerance: m.cfg.Tolerance, BudgetBytes: m.cfg.BudgetBytes, PoolData: m.poolB, Contexts: len(m.ctxs), Active: m.active,
		Chunks: map[string]int{}, Residency: map[string]int{}, Cost: m.cost, Corrupt: map[string]string{}}
	for _, c := range m.ctxs {
		s.Bookkeeping += m.bookkeeping(c)
		for i, ch := range c.meta.Chunks {
			s.Chunks[ch.Level.String()]++
			t := m.tier(c, i)
			s.Residency[t]++
			if t == "device" {
				s.DeviceBytes += int64(ch.Tokens * m.lay.slotBytes())
			}
			if !ch.Dirty && m.cfg.Mode != ModeLMK {
				s.FlashBytes += int64(m.lay.chunkSize(ch.Level, ch.Tokens))
			}
		}
	}
	s.PoolBytes = s.PoolData + s.Bookkeeping
	for k, v := range m.corrupt {
		s.Corrupt[k] = v
	}
	snap := m.stats.Snapshot()
	s.ReadBytes, s.ReadOps = snap.Read.Bytes, snap.Read.Ops
	s.WriteBytes, s.WriteOps = snap.Write.Bytes, snap.Write.Ops
	s.IOLabel = snap.Label
	s.Recomputed, s.Faults, s.Evicted = m.counts.recomputed, m.counts.faults, m.counts.evicted
	return s
}

// IOBytes is the cumulative flash traffic (engine/trace.IOCounter).
func (m *Manager) IOBytes() (read, written int64) {
	snap := m.stats.Snapshot()
	return snap.Read.Bytes, snap.Write.Bytes
}

// profile fits the planner's cost model on this machine (spec §1a.9):
// forwards of 1, 2, 4 and 8 chunks for T_re, and O_DIRECT reads of 1..16
// slots of a scratch file for T_IO. It leaves st empty.
func (m *Manager) profile() (CostModel, error) {
	var cm CostModel
	defer m.st.Reset()
	// Recompute runs without statistics (Manager.recompute), and so does
	// its profile.
	if err := m.setStats(false); err != nil {
		return cm, err
	}
	defer m.setStats(m.ranks())
	var xs, ys []float64
	for _, x := range []int{1, 2, 4, 8} {
		n := x * m.lay.C
		if n > m.st.MaxContext() {
			break
		}
		toks := make([]int, n)
		best := time.Duration(1 << 62)
		for rep := 0; rep < 2; rep++ {
			m.st.Reset()
			t := time.Now()
			if err := m.forward(toks, seq(n)); err != nil {
				return cm, fmt.Errorf("llms: profiling recompute: %w", err)
			}
			best = min(best, time.Since(t))
		}
		xs, ys = append(xs, float64(x)), append(ys, best.Seconds())
	}
	cm.ReA, cm.ReB = fitLine(xs, ys)
	path := filepath.Join(m.dir, fmt.Sprintf(".profile-%d.swap", time.Now().UnixNano()))
	opt := m.cfg.Flash
	opt.Stats = nil // the profile's reads are not the manager's traffic
	f, err := flash.OpenRW(path, opt)
	if err != nil {
		return cm, fmt.Errorf("llms: profiling I/O: %w", err)
	}
	defer os.Remove(path)
	defer f.Close()
	slot := int(m.lay.slot[0])
	const slots = 64
	buf := flash.AlignedBuf(slots * slot)
	rand.New(rand.NewSource(1)).Read(buf)
	if err := f.WriteAt(buf, 0); err != nil {
		return cm, err
	}
	if err := f.Sync(); err != nil {
		return cm, err
	}
	var bs, rs, ts []float64
	off := 0
	for _, k := range []int{1, 2, 4, 8, 16} {
		for rep := 0; rep < 3; rep++ {
			dst := buf[:k*slot]
			o := (off % (slots - k + 1)) * slot
			off += 7
			t := time.Now()
			if err := f.ReadAt(dst, int64(o)); err != nil {
				return cm, err
			}
			bs, rs, ts = append(bs, float64(len(dst))), append(rs, 1), append(ts, time.Since(t).Seconds())
		}
	}
	cm.IOC, cm.IOE = fitIO(bs, rs, ts)
	return cm, nil
}
