package llms

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/flash"
	"github.com/tlite/tlite/engine/kv"
)

// Mode selects the memory system: LLMS or one of the paper's baselines,
// all on the same I/O layer and engine path (spec §1c).
type Mode string

// The modes.
const (
	// ModeLLMS: density-ranked levels, LCTRU, AoT swap-out, swap–recompute
	// planner.
	ModeLLMS Mode = "llms"
	// ModeLMK: no swap: under pressure a context's chunks are killed; the
	// next call recomputes them all.
	ModeLMK Mode = "lmk"
	// ModeSwap: the whole context is swapped out and in at base INT8, LRU
	// by context.
	ModeSwap Mode = "swap"
	// ModeVLLMS: 16-token chunks stored uncompressed (the buffer's own
	// bytes), LRU, swap-out on demand, load-only restore.
	ModeVLLMS Mode = "vllm_s"
	// ModeVLLMSQ: ModeVLLMS at static INT8.
	ModeVLLMSQ Mode = "vllm_sq"

	// The ablations of the paper's Fig. 13 (spec §1c): LLMS without one
	// mechanism each.
	// ModeNoLifecycle: plain LRU and on-demand swap-out (no LCTRU, no AoT).
	ModeNoLifecycle Mode = "llms_nolife"
	// ModeNoTolerance: every chunk at base INT8 (no density ranking).
	ModeNoTolerance Mode = "llms_notol"
	// ModeNoPipeline: missing chunks restored by I/O only (no planner, no
	// recompute).
	ModeNoPipeline Mode = "llms_nopipe"
)

// isLLMS: LLMS or one of its ablations.
func (m *Manager) isLLMS() bool {
	switch m.cfg.Mode {
	case ModeLLMS, ModeNoLifecycle, ModeNoTolerance, ModeNoPipeline:
		return true
	}
	return false
}

// aot: modified chunks are written at the end of every call.
func (m *Manager) aot() bool { return m.isLLMS() && m.cfg.Mode != ModeNoLifecycle }

// plans: the swap–recompute planner chooses the restore.
func (m *Manager) plans() bool { return m.isLLMS() && m.cfg.Mode != ModeNoPipeline }

// Config configures a Manager.
type Config struct {
	// ChunkTokens is C, the tokens per chunk (default 16).
	ChunkTokens int
	// BudgetBytes bounds the memory pool of compressed chunks, counting
	// chunk data with its metadata, per-chunk bookkeeping and the contexts'
	// memory-resident fragments (token ids, density sums). 0: unbounded.
	// The device working set (the installed context) is outside it.
	BudgetBytes int64
	// RatioGlobal is the target mean ratio_w (default 0.5).
	RatioGlobal float64
	// Levels is the ladder (default 8, 4, 2 bits).
	Levels []Level
	// Weight is ctxInfo's level weight (default the literal 1/ratio_w).
	Weight Weight
	// Tolerance is the statistic chunks are placed by (default
	// ToleranceDensity, the paper's).
	Tolerance Tolerance
	// Mode selects LLMS or a baseline (default ModeLLMS).
	Mode Mode
	// Lossless stores every chunk at LevelFP (no compression): the
	// exactness tests' mode.
	Lossless bool
	// QueueDepth is the reader pool's depth (default 4).
	QueueDepth int
	// MaxStep caps the tokens of one forward (the session plan's seq
	// maximum); 0: no cap.
	MaxStep int
	// StatsEvery samples the decode rows density is gathered from: a
	// call's forwards announced by Prepare gather attention statistics
	// when they run more than one token (prefill: always) and for one
	// single-token forward (decode step) in StatsEvery, the first
	// included. 0 or 1: every forward. Density stays the mean of a column
	// over the rows observed, now a systematic sample of the decode rows
	// (a deviation from the spec's "every row", named in doc.go).
	StatsEvery int
	// HostStats reads the attention statistics back to the host after
	// every forward that gathers them (per layer and head, converted and
	// added to density at once): the path before statistics were
	// accumulated on the device, kept as the benchmarks' A/B control. By
	// default the session adds them up on the device
	// (kv.State.AccumulateAttentionStats, each sampled step weighted by
	// StatsEvery there) and density takes the totals once per call.
	HostStats bool
	// Ungated restores with the spec's "cheaper variant" instead of the
	// per-layer I/O gate: the chunks positioned before the last recomputed
	// one are installed before the recompute forward, and only later
	// reads overlap it. The A/B control of the gate (gate.go).
	Ungated bool
	// Cost is the planner's model; nil profiles the machine at NewManager.
	Cost *CostModel
	// Flash opens the swap files (Buffered opts out of O_DIRECT, labelled).
	Flash flash.Options
}

// Tolerance selects what ranks a context's chunks for their levels.
type Tolerance int

const (
	// ToleranceDensity ranks by information density (spec §1a.5: the mean
	// attention a chunk's tokens received over every row that may attend
	// them), the paper's policy.
	ToleranceDensity Tolerance = iota
	// TolerancePeak keeps the levels density assigns (the same band
	// sizes, so the same bytes) but places them by the chunks' mean token
	// peak (Density.Peak: the largest probability any one row, head and
	// layer gave the token), so that a chunk attended rarely but sharply,
	// e.g. a fact only a later question asks for, keeps its precision.
	// Ours, not the paper's (see doc.go).
	TolerancePeak
)

// String is the tolerance's name as ParseTolerance reads it.
func (t Tolerance) String() string {
	switch t {
	case ToleranceDensity:
		return "density"
	case TolerancePeak:
		return "peak"
	}
	return fmt.Sprintf("Tolerance(%d)", int(t))
}

// MarshalText writes the name, so that reports (ManagerStats) say
// "density" or "peak" rather than a number.
func (t Tolerance) MarshalText() ([]byte, error) {
	if t != ToleranceDensity && t != TolerancePeak {
		return nil, fmt.Errorf("llms: unknown tolerance %d", int(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText reads the name MarshalText writes, so that a report
// read back (a client's /v1/stats) round-trips.
func (t *Tolerance) UnmarshalText(b []byte) error {
	v, err := ParseTolerance(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// ParseTolerance reads a tolerance's name: "density" or "peak".
func ParseTolerance(name string) (Tolerance, error) {
	for _, t := range []Tolerance{ToleranceDensity, TolerancePeak} {
		if name == t.String() {
			return t, nil
		}
	}
	return 0, fmt.Errorf("llms: unknown tolerance %q (want density or peak)", name)
}

// Bookkeeping costs counted in the budget besides chunk bytes: the
// in-memory chunk table row and pool entry, and per token the id and the
// three density figures (sum, count, peak).
const (
	chunkOverhead = 96
	ctxOverhead   = 512
	tokenOverhead = 8 + 24
)

// SwitchTimings splits an Install (switch latency, spec §1c) into parts.
// IO is the wall time the reads were in flight (submission to the last
// completion); IOWait the part of it the install waited for; the rest
// (IO − IOWait) overlapped the upload of resident chunks and the
// recompute.
type SwitchTimings struct {
	AoTWait   time.Duration `json:"aot_wait_ns"`
	Reclaim   time.Duration `json:"reclaim_ns"`
	IO        time.Duration `json:"io_ns"`
	IOWait    time.Duration `json:"io_wait_ns"`
	Recompute time.Duration `json:"recompute_ns"`
	Upload    time.Duration `json:"upload_ns"`
	// Decode is the part of Upload spent dequantizing on the host (the
	// rest is the host-to-device copy and bookkeeping).
	Decode time.Duration `json:"decode_ns"`
	Total  time.Duration `json:"total_ns"`
	// Predicted is the planner's estimate; PaperMax the paper's objective.
	Predicted time.Duration `json:"predicted_ns"`
	PaperMax  time.Duration `json:"paper_max_ns"`

	Resident   int   `json:"chunks_resident"`
	Loaded     int   `json:"chunks_loaded"`
	Recomputed int   `json:"chunks_recomputed"`
	Faults     int   `json:"chunks_faulted"`
	BytesRead  int64 `json:"bytes_read"`
	Reads      int   `json:"reads"`
	// Noop: the context was already installed.
	Noop bool `json:"noop"`
	// Layers is the per-layer timeline of a gated restore (gate.go);
	// empty when the restore did not both load and recompute.
	Layers []LayerTiming `json:"layers,omitempty"`
}

// ManagerStats is a snapshot for reports and the service's /v1/stats.
type ManagerStats struct {
	Mode        Mode              `json:"mode"`
	Tolerance   Tolerance         `json:"tolerance"`
	BudgetBytes int64             `json:"budget_bytes"`
	PoolBytes   int64             `json:"pool_bytes"`
	PoolData    int64             `json:"pool_data_bytes"`
	Bookkeeping int64             `json:"bookkeeping_bytes"`
	FlashBytes  int64             `json:"flash_bytes"`
	DeviceBytes int64             `json:"device_bytes"`
	Contexts    int               `json:"contexts"`
	Active      string            `json:"active"`
	Chunks      map[string]int    `json:"chunks_by_level"`
	Residency   map[string]int    `json:"chunks_by_tier"`
	ReadBytes   int64             `json:"io_read_bytes"`
	ReadOps     int64             `json:"io_read_ops"`
	WriteBytes  int64             `json:"io_write_bytes"`
	WriteOps    int64             `json:"io_write_ops"`
	Recomputed  int64             `json:"recomputed_chunks"`
	Faults      int64             `json:"faulted_chunks"`
	Evicted     int64             `json:"evicted_chunks"`
	Corrupt     map[string]string `json:"corrupt,omitempty"`
	Cost        CostModel         `json:"cost_model"`
	IOLabel     string            `json:"io_label"`
}

// CtxInfo describes one context (the service's GET /v1/contexts/{id}).
type CtxInfo struct {
	ID      string         `json:"id"`
	Tokens  int            `json:"tokens"`
	Chunks  map[string]int `json:"chunks_by_level"`
	Tiers   map[string]int `json:"chunks_by_tier"`
	LastUse int64          `json:"last_use"`
	Calls   int            `json:"calls"`
}

// context is a context's in-memory state.
type context struct {
	meta ctxMeta
	pool map[int]*encChunk // chunks resident in memory (compressed)
	file *flash.File
	// pending are chunks whose AoT write has not completed.
	pending map[int]bool
}

// ErrUnknown is returned for a context id the manager does not hold.
var ErrUnknown = errors.New("llms: unknown context")

// Manager is LLMS's context memory: it installs contexts into one
// kv.State, keeps their compressed chunks in a budgeted pool and on flash,
// and persists them in a directory. Its methods are safe for concurrent
// use but serialised; the kv.State must not be used by anyone else while a
// method runs.
type Manager struct {
	st   *kv.State
	dir  string
	cfg  Config
	lay  *layout
	cost CostModel

	mu      sync.Mutex
	ctxs    map[string]*context
	corrupt map[string]string
	queue   *LCTRU
	poolB   int64 // chunk bytes + chunk overhead in the pool
	clock   int64
	active  string
	// observed: Observe accumulated this call's forwards already.
	observed bool
	// hasStats: the session computes attention statistics; statsOn is
	// the switch as the manager last set it (SetAttentionStats), step
	// counts the call's single-token forwards announced by Prepare, and
	// rowWeight is what the next observed forward's rows count for (a
	// sampled decode step stands for StatsEvery steps).
	hasStats, statsOn bool
	step              int
	rowWeight         float64
	// accum: the statistics are accumulated on the device (not
	// Config.HostStats); accW is the weight last given to the session and
	// pending whether its totals may hold rows not yet in density.
	accum, pending bool
	accW           float64

	reader *flash.Pool
	stats  *flash.Stats

	bg     sync.WaitGroup
	bgErr  error
	bgMu   sync.Mutex
	counts struct{ recomputed, faults, evicted int64 }
	// choose, when set (tests), replaces the planner.
	choose func(miss []missingChunk, forced []int) plan
	// ioDelay, when set (tests), is called by a gated restore's I/O
	// goroutine before it submits region g's reads; onGate, when set, at
	// the layer gate's entry for layer l, before it waits.
	ioDelay func(g int)
	onGate  func(l int)
}

// NewManager opens (or creates) the state directory dir and returns a
// manager over st. Existing ctx-*.json files are reloaded (their checksums
// verified; a corrupt one is reported in Stats().Corrupt and skipped).
func NewManager(st *kv.State, dir string, cfg Config) (*Manager, error) {
	if cfg.ChunkTokens == 0 {
		cfg.ChunkTokens = 16
	}
	if cfg.RatioGlobal == 0 {
		cfg.RatioGlobal = 0.5
	}
	if len(cfg.Levels) == 0 {
		cfg.Levels = []Level{Level8, Level4, Level2}
	}
	if cfg.Weight == nil {
		cfg.Weight = WeightInverse
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeLLMS
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = 4
	}
	switch cfg.Mode {
	case ModeLLMS, ModeLMK, ModeSwap, ModeVLLMS, ModeVLLMSQ, ModeNoLifecycle, ModeNoTolerance, ModeNoPipeline:
	default:
		return nil, fmt.Errorf("llms: unknown mode %q", cfg.Mode)
	}
	if cfg.Tolerance != ToleranceDensity && cfg.Tolerance != TolerancePeak {
		return nil, fmt.Errorf("llms: unknown tolerance %d", cfg.Tolerance)
	}
	for _, l := range cfg.Levels {
		if !l.valid() || l == LevelFP {
			return nil, fmt.Errorf("llms: level %d is not in the ladder 8/4/2", int(l))
		}
	}
	if cfg.BudgetBytes < 0 || cfg.RatioGlobal <= 0 || cfg.RatioGlobal > 1 {
		return nil, fmt.Errorf("llms: budget %d, global ratio %g", cfg.BudgetBytes, cfg.RatioGlobal)
	}
	if cfg.StatsEvery < 0 {
		return nil, fmt.Errorf("llms: statistics every %d decode steps", cfg.StatsEvery)
	}
	// Probing the switch also turns the statistics on.
	statsErr := st.SetAttentionStats(true)
	if (cfg.Mode == ModeLLMS || cfg.Mode == ModeNoLifecycle || cfg.Mode == ModeNoPipeline) && !cfg.Lossless {
		// Density needs the engine's attention statistics (hook H3).
		if statsErr != nil {
			return nil, fmt.Errorf("llms: mode llms ranks chunks by attention: open the session with kv.Config.AttentionStats (%w)", statsErr)
		}
	}
	lay, err := newLayout(st.Info(), cfg.ChunkTokens, topLevel(cfg))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("llms: state directory: %w", err)
	}
	m := &Manager{st: st, dir: dir, cfg: cfg, lay: lay, ctxs: map[string]*context{}, corrupt: map[string]string{},
		queue: NewLCTRU(!(cfg.Mode == ModeLLMS || cfg.Mode == ModeNoTolerance || cfg.Mode == ModeNoPipeline)), stats: flash.NewStats()}
	m.cfg.Flash.Stats = m.stats
	m.hasStats, m.statsOn = statsErr == nil, statsErr == nil
	// Modes that do not rank chunks never pay for statistics.
	if err := m.setStats(m.ranks()); err != nil {
		return nil, err
	}
	if m.hasStats {
		// Totals another manager of the state left are discarded, and a
		// manager that reads per forward (HostStats) gets the per-forward
		// statistics back.
		w := 0.0
		if m.ranks() && !cfg.HostStats {
			w = 1
		}
		if err := st.AccumulateAttentionStats(0); err != nil {
			return nil, fmt.Errorf("llms: %w", err)
		}
		if err := st.AccumulateAttentionStats(w); err != nil {
			return nil, fmt.Errorf("llms: %w", err)
		}
		m.accum, m.accW = w > 0, w
	}
	metas, bad, err := loadMetas(dir)
	if err != nil {
		return nil, err
	}
	for name, e := range bad {
		m.corrupt[name] = e.Error()
	}
	for _, md := range metas {
		if md.Chunk != cfg.ChunkTokens {
			m.corrupt["ctx-"+md.ID+".json"] = fmt.Sprintf("chunks of %d tokens; the manager uses %d", md.Chunk, cfg.ChunkTokens)
			continue
		}
		if err := checkMeta(md, lay, st.MaxContext(), st.Vocab()); err != nil {
			m.corrupt["ctx-"+md.ID+".json"] = err.Error()
			continue
		}
		m.ctxs[md.ID] = &context{meta: *md, pool: map[int]*encChunk{}, pending: map[int]bool{}}
		m.clock = max(m.clock, md.LastUse)
	}
	m.reader, err = flash.NewPool(cfg.QueueDepth)
	if err != nil {
		return nil, err
	}
	if cfg.Cost != nil {
		m.cost = *cfg.Cost
	} else if m.cost, err = m.profile(); err != nil {
		m.reader.Close()
		return nil, err
	}
	return m, nil
}

func topLevel(cfg Config) Level {
	if cfg.Lossless || cfg.Mode == ModeVLLMS {
		return LevelFP
	}
	return Level8
}

// Wait waits for the ahead-of-time swap-out a Commit started in the
// background (the next Install, Commit or Drop waits for it anyway) and
// returns its error: a caller timing other work on the same machine
// keeps the write out of it.
func (m *Manager) Wait() error {
	if err := m.waitBG(); err != nil {
		return fmt.Errorf("llms: background swap-out failed: %w", err)
	}
	return nil
}

// Close waits for background writes and stops the reader pool.
func (m *Manager) Close() error {
	err := m.waitBG()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.ctxs {
		if c.file != nil {
			c.file.Close()
			c.file = nil
		}
	}
	m.reader.Close()
	return err
}

// Cost is the planner's model in use.
func (m *Manager) Cost() CostModel { return m.cost }

// waitBG waits for the AoT writes of the previous call.
func (m *Manager) waitBG() error {
	m.bg.Wait()
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	err := m.bgErr
	m.bgErr = nil
	return err
}

func (m *Manager) tick() int64 { m.clock++; return m.clock }

func (m *Manager) file(c *context) (*flash.File, error) {
	if c.file != nil {
		return c.file, nil
	}
	f, err := flash.OpenRW(swapPath(m.dir, c.meta.ID), m.cfg.Flash)
	if err != nil {
		return nil, fmt.Errorf("llms: swap file of %s: %w", c.meta.ID, err)
	}
	c.file = f
	return f, nil
}

// bookkeeping is a context's budgeted bytes besides pool chunk data.
func (m *Manager) bookkeeping(c *context) int64 {
	return ctxOverhead + int64(len(c.meta.Tokens))*tokenOverhead + int64(len(c.meta.Chunks))*chunkOverhead
}

// used is the budgeted total: pool chunks and everyone's bookkeeping.
func (m *Manager) used() int64 {
	u := m.poolB
	for _, c := range m.ctxs {
		u += m.bookkeeping(c)
	}
	return u
}

func (m *Manager) poolPut(c *context, i int, e *encChunk) {
	if old, ok := c.pool[i]; ok {
		m.poolB -= int64(old.size())
	}
	c.pool[i] = e
	m.poolB += int64(e.size())
	key := ChunkKey{c.meta.ID, i}
	if m.cfg.Mode == ModeSwap {
		key.Index = 0 // one entry per context: whole-context LRU
	}
	m.queue.Touch(key, e.level)
}

func (m *Manager) poolDrop(c *context, i int) {
	if e, ok := c.pool[i]; ok {
		m.poolB -= int64(e.size())
		delete(c.pool, i)
	}
}

// reclaim evicts until the budget holds (or nothing unlocked is left).
// Clean chunks are dropped; a chunk with no flash copy is written first
// (on-demand swap-out: the VLLM baselines; with AoT it does not happen),
// or, under LMK, killed.
func (m *Manager) reclaim() error {
	if m.cfg.BudgetBytes == 0 {
		return nil
	}
	for m.used() > m.cfg.BudgetBytes {
		k, ok := m.queue.Pop()
		if !ok {
			return nil
		}
		c := m.ctxs[k.Ctx]
		if c == nil {
			continue
		}
		victims := []int{k.Index}
		if m.cfg.Mode == ModeSwap {
			victims = victims[:0]
			for i := range c.pool {
				victims = append(victims, i)
			}
			sort.Ints(victims)
		}
		var toWrite []int
		for _, i := range victims {
			if c.meta.Chunks[i].Dirty && !c.pending[i] && m.cfg.Mode != ModeLMK {
				toWrite = append(toWrite, i)
			}
		}
		if len(toWrite) > 0 {
			f, err := m.file(c)
			if err != nil {
				return err
			}
			if _, _, err := m.lay.writeChunks(f, toWrite, c.pool); err != nil {
				return fmt.Errorf("llms: swapping out %s: %w", c.meta.ID, err)
			}
			for _, i := range toWrite {
				c.meta.Chunks[i].Dirty = false
				c.meta.Chunks[i].CRC = chunkCRC(c.pool[i])
			}
			if err := writeMeta(m.dir, &c.meta, m.cfg.Flash); err != nil {
				return err
			}
		}
		for _, i := range victims {
			m.poolDrop(c, i)
			m.counts.evicted++
		}
	}
	return nil
}

// Observe accumulates the attention statistics of the last forward into
// the installed context's density. Call it after every forward of a call
// (prefill and each decode step) for the spec's density; Commit observes
// the last forward itself when Observe was not called during the call.
func (m *Manager) Observe() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.observe()
}

func (m *Manager) observe() error {
	c := m.ctxs[m.active]
	if c == nil {
		return fmt.Errorf("llms: Observe with no context installed")
	}
	if !m.statsOn {
		// Prepare left this forward out of the sample (or the mode ranks
		// nothing): it is observed by design.
		m.observed = true
		return nil
	}
	if m.accum {
		// The session added the forward's statistics to its totals on
		// the device; Commit takes them (flush).
		m.observed = true
		return nil
	}
	stats, err := m.st.AttentionStats()
	if errors.Is(err, engine.ErrNoAttentionStats) {
		// The last forward ran without statistics: a restore's recompute
		// (its rows were counted when first computed), or a step Prepare
		// left out of the sample. There is nothing to count.
		m.observed = true
		return nil
	}
	if err != nil {
		return err
	}
	m.observed = true
	w := m.rowWeight
	m.rowWeight = 1
	return c.meta.Density.AddWeighted(stats, func(j int) int {
		if p, ok := m.st.Position(j); ok && p == j {
			return j
		}
		return -1
	}, max(w, 1))
}

// Prepare announces the next forward of a call, of rows tokens, and
// switches the attention statistics on or off for it by
// Config.StatsEvery: on for a forward of several tokens (a prefill), on
// for one decode step in StatsEvery. Modes that do not rank chunks keep
// them off. Call it before each forward and Observe after.
func (m *Manager) Prepare(rows int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.prepare(rows)
}

func (m *Manager) prepare(rows int) error {
	if rows < 1 {
		return fmt.Errorf("llms: Prepare of a forward of %d tokens", rows)
	}
	if !m.ranks() {
		return nil
	}
	on, every := true, max(m.cfg.StatsEvery, 1)
	m.rowWeight = 1
	if rows == 1 {
		on = m.step%every == 0
		m.step++
		m.rowWeight = float64(every)
	}
	if on {
		if err := m.setWeight(m.rowWeight); err != nil {
			return err
		}
	}
	return m.setStats(on)
}

// setWeight gives the session the weight of the rows of the forwards that
// follow (device accumulation only).
func (m *Manager) setWeight(w float64) error {
	if !m.accum {
		return nil
	}
	m.pending = true
	if m.accW == w {
		return nil
	}
	if err := m.st.AccumulateAttentionStats(w); err != nil {
		return fmt.Errorf("llms: %w", err)
	}
	m.accW = w
	return nil
}

// flush adds the statistics the session accumulated on the device since
// the last flush to c's density (nil: they are discarded), slot j standing
// for token j where the slot holds position j. It runs at the end of a
// call and before anything frees or rewrites the slots the totals are
// keyed by (an install, a drop): one read for the call's every sampled
// forward, where Config.HostStats reads after each.
func (m *Manager) flush(c *context) error {
	if !m.accum || !m.pending {
		return nil
	}
	tot, err := m.st.TakeAttentionStats()
	if err != nil {
		return fmt.Errorf("llms: %w", err)
	}
	m.pending = false
	if c == nil || tot.Runs == 0 {
		return nil
	}
	return c.meta.Density.AddTotal(tot, func(j int) int {
		if p, ok := m.st.Position(j); ok && p == j {
			return j
		}
		return -1
	})
}

// setStats sets the session's statistics switch (a no-op for a session
// without statistics).
func (m *Manager) setStats(on bool) error {
	if !m.hasStats || m.statsOn == on {
		return nil
	}
	if err := m.st.SetAttentionStats(on); err != nil {
		return fmt.Errorf("llms: %w", err)
	}
	m.statsOn = on
	return nil
}

// Forward runs st.Forward and accumulates the forward's attention
// statistics into the installed context's density (Prepare, then
// Observe): the way to drive a call's prefill and decode steps so that
// density sees every row Config.StatsEvery samples.
func (m *Manager) Forward(tokens, positions, slots []int) ([]float32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.prepare(max(len(tokens), 1)); err != nil {
		return nil, err
	}
	logits, err := m.st.Forward(tokens, positions, slots)
	if err != nil {
		return nil, err
	}
	if m.ctxs[m.active] != nil {
		if err := m.observe(); err != nil && m.ranks() {
			return nil, err
		}
	}
	return logits, nil
}

// Install makes context id the installed one: on return, st's slots
// 0..len(tokens)-1 hold its keys and values at positions 0..n-1. tokens is
// the context's full history; it must extend what the manager stored for
// id (a new id is created, and tokens beyond the stored ones are
// computed by a forward).
func (m *Manager) Install(id string, tokens []int) (SwitchTimings, error) {
	t0 := time.Now()
	var tm SwitchTimings
	bgErr := m.waitBG()
	tm.AoTWait = time.Since(t0)
	m.mu.Lock()
	defer m.mu.Unlock()
	if bgErr != nil {
		return tm, fmt.Errorf("llms: background swap-out failed: %w", bgErr)
	}
	// Rows a call gathered statistics for but did not commit (it failed)
	// count for the installed context, as they did when statistics were
	// read per forward; the slots they are keyed by may change below.
	if err := m.flush(m.ctxs[m.active]); err != nil {
		return tm, err
	}
	if err := m.setWeight(1); err != nil {
		return tm, err
	}
	// The install's own forwards (a new tail) are not counted in density,
	// as when statistics were read per observed forward: what they added
	// to the device totals is dropped (a failed take leaves it pending,
	// counted at the next flush).
	defer func() {
		if m.accum && m.pending {
			if _, err := m.st.TakeAttentionStats(); err == nil {
				m.pending = false
			}
		}
	}()
	if !ValidID(id) {
		return tm, fmt.Errorf("llms: bad context id %q", id)
	}
	if len(tokens) > m.st.MaxContext() {
		return tm, fmt.Errorf("llms: context %s of %d tokens exceeds the cache's %d", id, len(tokens), m.st.MaxContext())
	}
	c := m.ctxs[id]
	if c == nil {
		c = &context{meta: ctxMeta{ID: id, Chunk: m.lay.C}, pool: map[int]*encChunk{}, pending: map[int]bool{}}
		m.ctxs[id] = c
	}
	// The history given may diverge from the stored one (a sliding window
	// moved: only the sink prefix is shared; a call committed here but not
	// acknowledged: a prefix of it). Chunks wholly inside the common prefix
	// stay; the rest are dropped and the tail recomputed.
	if p := commonPrefix(tokens, c.meta.Tokens); p < len(c.meta.Tokens) {
		m.truncate(c, p)
	}
	stored := len(c.meta.Tokens)
	for _, t := range tokens {
		if t < 0 || t >= m.st.Vocab() {
			return tm, fmt.Errorf("llms: Install %s: token %d outside the vocabulary", id, t)
		}
	}
	if m.active == id && m.holds(stored) {
		// Already installed: drop whatever a failed call left beyond the
		// stored history, and compute any new tail.
		var extra []int
		for j := stored; j < m.st.MaxContext(); j++ {
			if _, ok := m.st.Position(j); ok {
				extra = append(extra, j)
			}
		}
		if err := m.st.Free(extra...); err != nil {
			return tm, err
		}
		tm.Noop = len(tokens) == stored
		m.observed, m.step = false, 0
		m.queue.Lock(id)
		if len(tokens) > stored {
			trc := time.Now()
			if err := m.forward(tokens[stored:], seq(len(tokens))[stored:]); err != nil {
				return tm, fmt.Errorf("llms: Install %s: computing %d new tokens: %w", id, len(tokens)-stored, err)
			}
			tm.Recompute = time.Since(trc)
		}
		tm.Total = time.Since(t0)
		return tm, nil
	}
	if m.active != "" {
		m.queue.Unlock(m.active)
	}
	m.active = ""
	m.queue.Lock(id)
	m.observed, m.step = false, 0
	m.st.Reset()

	// Resident chunks are decoded and uploaded; missing ones are planned.
	var resident []int
	var miss []missingChunk
	var forced []int
	for i := range c.meta.Chunks {
		ch := &c.meta.Chunks[i]
		switch {
		case c.pool[i] != nil:
			resident = append(resident, i)
		case ch.Dirty || m.cfg.Mode == ModeLMK:
			forced = append(forced, i)
		default:
			miss = append(miss, missingChunk{idx: i, level: ch.Level, n: ch.Tokens})
		}
	}
	var p plan
	switch {
	case m.choose != nil:
		p = m.choose(miss, forced)
	case m.plans():
		p = m.lay.planRestore(miss, forced, m.cost, m.gates())
	default:
		// Baselines restore by I/O alone (LMK has nothing to read).
		p = loadOnly(miss, forced)
		p.Predicted = m.cost.IO(ioBytes(m.lay, p.load, miss))
		if len(p.recompute) > 0 {
			p.Predicted += m.cost.Recompute(len(p.recompute))
		}
		p.PaperMax = p.Predicted
	}
	tm.Predicted, tm.PaperMax = p.Predicted, p.PaperMax

	// Issue the reads: pre first, then post, one request per run and
	// region (layer-major file: a run of one layer is contiguous).
	levelOf := func(i int) (Level, int) { return c.meta.Chunks[i].Level, c.meta.Chunks[i].Tokens }
	var f *flash.File
	if len(p.load) > 0 {
		var err error
		if f, err = m.file(c); err != nil {
			return tm, err
		}
	}
	type readSet struct {
		idx   []int
		runs  []run
		reqs  []flash.Request
		batch *flash.Batch
	}
	ioStart := time.Now()
	submit := func(idx []int) *readSet {
		rs := &readSet{idx: idx, runs: runsOf(idx)}
		for g := 0; g < m.lay.groups; g++ {
			for _, r := range rs.runs {
				n := m.lay.readSpan(g, r, levelOf)
				rs.reqs = append(rs.reqs, flash.Request{File: f, Off: m.lay.slotOff(g, r.lo), Dst: flash.AlignedBuf(int(n))})
				tm.BytesRead += n
			}
		}
		tm.Reads += len(rs.reqs)
		rs.batch = m.reader.Submit(rs.reqs)
		return rs
	}
	gated := m.gates() && len(p.recompute) > 0 && len(p.load) > 0
	var pre, post *readSet
	var gr *gatedReads
	if gated {
		gr = m.submitGated(f, p.load, levelOf, &tm)
	} else {
		pre, post = submit(p.pre), submit(p.post)
	}
	var ioEnd time.Time

	// Reclaim room for the chunks being loaded into the pool.
	tr := time.Now()
	for _, i := range p.load {
		l, n := levelOf(i)
		m.poolB += int64(m.lay.chunkSize(l, n)) // claimed ahead
	}
	err := m.reclaim()
	for _, i := range p.load {
		l, n := levelOf(i)
		m.poolB -= int64(m.lay.chunkSize(l, n))
	}
	tm.Reclaim = time.Since(tr)
	if err != nil {
		return tm, err
	}

	// Upload resident chunks.
	tu := time.Now()
	if err := m.upload(c, resident, c.pool, &tm.Decode); err != nil {
		return tm, err
	}
	tm.Upload += time.Since(tu)
	tm.Resident = len(resident)

	// collect waits for a read set, verifies and uploads its chunks;
	// chunks failing their CRC become faults, recomputed afterwards.
	var faults []int
	collect := func(rs *readSet) error {
		tw := time.Now()
		err := rs.batch.Wait()
		tm.IOWait += time.Since(tw)
		// The batch's own span (submit to last completion) is the I/O
		// time; it is not inflated by the compute thread's work.
		if e := ioStart.Add(rs.batch.Elapsed()); e.After(ioEnd) {
			ioEnd = e
		}
		if err != nil {
			return fmt.Errorf("llms: reading %s: %w", id, err)
		}
		tu := time.Now()
		got := map[int]*encChunk{}
		k := 0
		for g := 0; g < m.lay.groups; g++ {
			for _, r := range rs.runs {
				buf := rs.reqs[k].Dst
				k++
				for i := r.lo; i < r.hi; i++ {
					l, n := levelOf(i)
					if got[i] == nil {
						got[i] = &encChunk{level: l, n: n, groups: make([][]byte, m.lay.groups)}
					}
					o := int64(i-r.lo) * m.lay.slot[g]
					got[i].groups[g] = append([]byte(nil), buf[o:o+int64(m.lay.groupSize(g, l, n))]...)
				}
			}
		}
		var ok []int
		for _, i := range rs.idx {
			if chunkCRC(got[i]) != c.meta.Chunks[i].CRC {
				faults = append(faults, i)
				delete(got, i)
				continue
			}
			ok = append(ok, i)
		}
		if err := m.upload(c, ok, got, &tm.Decode); err != nil {
			return err
		}
		for _, i := range ok {
			m.poolPut(c, i, got[i])
		}
		tm.Loaded += len(ok)
		tm.Upload += time.Since(tu)
		return nil
	}
	if gated {
		if err := m.restoreGated(c, p.recompute, gr, levelOf, t0, &ioEnd, &tm); err != nil {
			return tm, err
		}
	} else {
		// The spec's "cheaper variant" (Config.Ungated).
		if err := collect(pre); err != nil {
			return tm, err
		}
		// Recompute: after everything before the last recomputed chunk is in.
		// Chunks of the pre set that failed their CRC join this forward, so
		// that later recomputed chunks attend them.
		rec := p.recompute
		if len(faults) > 0 {
			rec = append(append([]int(nil), rec...), faults...)
			sort.Ints(rec)
			for _, i := range faults {
				c.meta.Chunks[i].Dirty = true
			}
			tm.Faults += len(faults)
			m.counts.faults += int64(len(faults))
			faults = nil
		}
		trc := time.Now()
		if err := m.recompute(c, rec, 0); err != nil {
			return tm, err
		}
		tm.Recompute = time.Since(trc)
		tm.Recomputed = len(p.recompute)
		if err := collect(post); err != nil {
			return tm, err
		}
	}
	if ioEnd.IsZero() {
		ioEnd = ioStart
	}
	tm.IO = ioEnd.Sub(ioStart)
	if len(p.load) == 0 {
		tm.IO = 0
	}
	// Faults (torn or lost chunks) and the tail beyond the stored tokens.
	if len(faults) > 0 {
		sort.Ints(faults)
		trc := time.Now()
		if err := m.recompute(c, faults, 0); err != nil {
			return tm, err
		}
		for _, i := range faults {
			c.meta.Chunks[i].Dirty = true // the flash copy is bad
		}
		tm.Recompute += time.Since(trc)
		tm.Faults += len(faults)
		m.counts.faults += int64(len(faults))
	}
	m.counts.recomputed += int64(len(p.recompute))
	if len(tokens) > stored {
		trc := time.Now()
		if err := m.forward(tokens[stored:], seq(len(tokens))[stored:]); err != nil {
			return tm, fmt.Errorf("llms: Install %s: computing %d new tokens: %w", id, len(tokens)-stored, err)
		}
		tm.Recompute += time.Since(trc)
	}
	c.meta.LastUse = m.tick()
	m.active = id
	for i := range c.pool {
		m.queue.Touch(m.key(c, i), c.pool[i].level)
	}
	tm.Total = time.Since(t0)
	return tm, nil
}

func (m *Manager) key(c *context, i int) ChunkKey {
	if m.cfg.Mode == ModeSwap {
		return ChunkKey{c.meta.ID, 0}
	}
	return ChunkKey{c.meta.ID, i}
}

// loadOnly is the baselines' restore: every chunk with a flash copy is
// read; the rest (LMK: all) recomputed, before any load.
func loadOnly(miss []missingChunk, forced []int) plan {
	var p plan
	p.recompute = append([]int(nil), forced...)
	sort.Ints(p.recompute)
	last := -1
	if n := len(p.recompute); n > 0 {
		last = p.recompute[n-1]
	}
	for _, c := range miss {
		p.load = append(p.load, c.idx)
		if c.idx < last {
			p.pre = append(p.pre, c.idx)
		} else {
			p.post = append(p.post, c.idx)
		}
	}
	sort.Ints(p.load)
	sort.Ints(p.pre)
	sort.Ints(p.post)
	return p
}

func ioBytes(lay *layout, load []int, miss []missingChunk) (int64, int) {
	info := map[int]missingChunk{}
	for _, c := range miss {
		info[c.idx] = c
	}
	var b int64
	rs := runsOf(load)
	for g := 0; g < lay.groups; g++ {
		for _, r := range rs {
			b += lay.readSpan(g, r, func(i int) (Level, int) { return info[i].level, info[i].n })
		}
	}
	return b, len(rs) * lay.groups
}

// holds reports whether st's slots 0..n-1 hold positions 0..n-1.
func (m *Manager) holds(n int) bool {
	for i := 0; i < n; i++ {
		if p, ok := m.st.Position(i); !ok || p != i {
			return false
		}
	}
	return true
}

// upload decodes chunks idx (from enc) into one buffer-major block and
// writes it to their slots, then records their positions.
func (m *Manager) upload(c *context, idx []int, enc map[int]*encChunk, decode *time.Duration) error {
	if len(idx) == 0 {
		return nil
	}
	var slots []int
	at := map[int]int{}
	for _, i := range idx {
		at[i] = len(slots)
		for t := 0; t < enc[i].n; t++ {
			slots = append(slots, i*m.lay.C+t)
		}
	}
	td := time.Now()
	block := make([]byte, len(slots)*m.lay.slotBytes())
	for _, i := range idx {
		if err := m.lay.decode(enc[i], block, len(slots), at[i]); err != nil {
			return fmt.Errorf("llms: chunk %d of %s: %w", i, c.meta.ID, err)
		}
	}
	*decode += time.Since(td)
	if err := m.st.WriteAllSlots(slots, block); err != nil {
		return err
	}
	return m.st.SetPositions(slots, slots)
}

// recompute runs the chunks' tokens at their global positions, into the
// slots of those positions, in one forward (spec §1a.8): each token
// attends every installed slot at an earlier or equal position.
func (m *Manager) recompute(c *context, idx []int, _ int) error {
	if len(idx) == 0 {
		return nil
	}
	var toks, pos []int
	for _, i := range idx {
		for t := 0; t < c.meta.Chunks[i].Tokens; t++ {
			p := i*m.lay.C + t
			toks = append(toks, c.meta.Tokens[p])
			pos = append(pos, p)
		}
	}
	// The recomputed rows were observed when first computed: they run
	// without statistics (cheaper, and density does not count them twice).
	if err := m.setStats(false); err != nil {
		return err
	}
	err := m.forward(toks, pos)
	if e := m.setStats(m.ranks()); err == nil {
		err = e
	}
	if err != nil {
		return fmt.Errorf("llms: recomputing %d chunks of %s: %w", len(idx), c.meta.ID, err)
	}
	return nil
}

// forward runs tokens at positions (ascending), each into the slot of its
// position, in forwards of at most Config.MaxStep tokens. Splitting in
// position order keeps recompute exact: each piece attends the slots the
// earlier pieces wrote.
func (m *Manager) forward(toks, pos []int) error {
	step := m.cfg.MaxStep
	if step <= 0 {
		step = len(toks)
	}
	for i := 0; i < len(toks); i += step {
		j := min(i+step, len(toks))
		if _, err := m.st.Forward(toks[i:j], pos[i:j], pos[i:j]); err != nil {
			return err
		}
	}
	return nil
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// truncate cuts context c back to the chunks wholly inside its first p
// tokens (the diverged rest is forgotten; the next Commit persists it).
func (m *Manager) truncate(c *context, p int) {
	kept := p / m.lay.C
	for i := kept; i < len(c.meta.Chunks); i++ {
		m.poolDrop(c, i)
		m.queue.Remove(ChunkKey{c.meta.ID, i})
		delete(c.pending, i)
	}
	q := kept * m.lay.C
	c.meta.Chunks = c.meta.Chunks[:kept]
	c.meta.Tokens = c.meta.Tokens[:q]
	c.meta.Positions = c.meta.Positions[:q]
	c.meta.Density.Truncate(q)
}

// Ranks reports whether the manager ranks chunks by attention density
// (LLMS and the ablations that keep tolerance-aware compression, unless
// Lossless): only then does it need the engine's attention statistics, and
// only then must a caller's Observe succeed.
func (m *Manager) Ranks() bool { return m.ranks() }

// ranks reports whether chunks are ranked by density (needs statistics).
func (m *Manager) ranks() bool {
	return m.isLLMS() && m.cfg.Mode != ModeNoTolerance && !m.cfg.Lossless
}

// checkMeta refuses a reloaded context whose table does not fit the model
// and the manager (a file from another model or configuration, or one
// edited by hand): it is reported, never trusted.
func checkMeta(md *ctxMeta, lay *layout, maxCtx, vocab int) error {
	n := len(md.Tokens)
	if n > maxCtx || len(md.Chunks) != lay.chunks(n) {
		return fmt.Errorf("%d tokens in %d chunks do not fit the cache of %d", n, len(md.Chunks), maxCtx)
	}
	for i, t := range md.Tokens {
		if t < 0 || t >= vocab || md.Positions[i] != i {
			return fmt.Errorf("token %d is %d at position %d (vocabulary %d)", i, t, md.Positions[i], vocab)
		}
	}
	for i, ch := range md.Chunks {
		if !ch.Level.valid() || ch.Level.Ratio() > lay.top.Ratio() || (ch.Level == LevelFP) != (lay.top == LevelFP) || ch.Tokens != lay.tokens(i, n) {
			return fmt.Errorf("chunk %d: %s with %d tokens", i, ch.Level, ch.Tokens)
		}
	}
	d := md.Density
	if len(d.Sum) != len(d.Count) || len(d.Sum) > n || len(d.Peak) > len(d.Sum) || d.LH < 0 {
		return fmt.Errorf("density over %d sums, %d counts and %d peaks for %d tokens", len(d.Sum), len(d.Count), len(d.Peak), n)
	}
	return nil
}
