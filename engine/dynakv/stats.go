package dynakv

import (
	"math"
	"time"

	"github.com/tlite/tlite/engine/flash"
)

// driftBucket is the decode-step width of one point of the drift curve.
const driftBucket = 128

// Stats accumulates what a run did; Report summarises it.
type Stats struct {
	cfg                                 Config
	steps                               int
	retrieved, entriesTotal             int64
	recallSum                           float64
	recallN                             int64
	hits, partialHits, misses           int64
	usefulRead, plannedRead             int64
	splitsVariance, splitsForced        int
	splitsDelayed, splitsBMax, buffered int
	appended, prefillWritten            int64
	recentExtra                         int64
	initialClusters                     int
	tScore, tIO, tAttn, tUpdate         time.Duration
	driftSum                            []float64
	driftN                              []int64
	// Pipeline 2 (prefetch.go): planned block bytes, entry bytes,
	// entry bytes used, clusters used, time waited in hooks.
	pfPlanned, pfUseful, pfUsed, pfHits int64
	tPfWait                             time.Duration
	// Pipeline 1 (reps.go): bytes read and written, arrays resident now
	// and at most, time waited.
	repsRead, repsWritten, repsResident, repsPeak int64
	tRepsWait                                     time.Duration
	// Layout counterfactuals (layout.go).
	seqRuns, seqEntries, seqOps, seqBytes int64
	appends, splits                       int64
	packedAppendMoved, packedSplitMoved   int64
	packedSplitWritten                    int64
	dualSplitWritten, dualSplitMoved      int64
}

func (s *Stats) init(cfg Config) { s.cfg = cfg }

// drift records the distance of a new key to its nearest P₀ centroid.
func (s *Stats) drift(step int, p0 [][]float64, key []float32) {
	if len(p0) == 0 {
		return
	}
	bd := math.Inf(1)
	for _, c := range p0 {
		bd = math.Min(bd, dist2(key, c))
	}
	b := (step - 1) / driftBucket
	for len(s.driftSum) <= b {
		s.driftSum = append(s.driftSum, 0)
		s.driftN = append(s.driftN, 0)
	}
	s.driftSum[b] += math.Sqrt(bd)
	s.driftN[b]++
}

// Report is a run's summary (the figures systems-spec §2c asks for).
type Report struct {
	Steps int `json:"steps"`
	// Budget is ρ; RetrievedShare the retrieved entries over |K_t|.
	Budget         float64 `json:"budget"`
	RetrievedShare float64 `json:"retrieved_share"`
	// RecentPerToken is the entries per token and head attended from the
	// recent window beyond the retrieved clusters (Config.Recent).
	RecentPerToken float64 `json:"recent_extra_per_token"`
	// Flash reads during decoding (O_DIRECT): per token, across layers.
	ReadBytesPerToken  float64 `json:"read_bytes_per_token"`
	UsefulBytesPerTok  float64 `json:"useful_bytes_per_token"`
	ReadOpsPerToken    float64 `json:"read_ops_per_token"`
	MeanRunEntries     float64 `json:"mean_contiguous_run_entries"`
	MaxRunEntries      float64 `json:"max_contiguous_run_entries"`
	ReadBusyMs         float64 `json:"read_busy_ms"`
	EffectiveBandwidth float64 `json:"effective_bandwidth_mb_s"`
	// Cluster cache: hits over cluster reads with flushed entries.
	CachePolicy string  `json:"cache_policy"`
	CacheBytes  int64   `json:"cache_bytes"`
	HitRate     float64 `json:"hit_rate"`
	// Splits and buffering, per 1000 decoded tokens and in all.
	InitialClusters int     `json:"initial_clusters"`
	FinalClusters   int     `json:"final_clusters"`
	SplitsPer1K     float64 `json:"splits_per_1k_tokens"`
	SplitsVariance  int     `json:"splits_variance"`
	SplitsDelayed   int     `json:"splits_delayed"`
	SplitsBMax      int     `json:"splits_bmax"`
	SplitsForced    int     `json:"splits_forced"`
	Buffered        int     `json:"entries_buffered"`
	// WriteAmplification is decode-time bytes written over the bytes of
	// the entries appended.
	WriteAmplification float64 `json:"write_amplification"`
	PrefillWritten     int64   `json:"prefill_written_bytes"`
	// Recall is the mean share of the full-attention probability mass the
	// retrieved set holds (Config.Shadow; 0 otherwise).
	Recall float64 `json:"attention_recall"`
	// Drift is the mean L2 distance of new keys to their nearest P₀
	// centroid, per 128 decode steps.
	Drift []float64 `json:"drift_per_128_steps"`
	// Mode names the system: dynakv or a baseline.
	Mode string `json:"mode"`
	// Host time per decode token, split as §2c asks.
	ScoreMs, IOMs, AttnMs, UpdateMs float64
	// Prefetch (Pipeline 2): block bytes read ahead per token (included
	// in ReadBytesPerToken), the share of prefetched entry bytes the hooks
	// used, clusters served from it per token, and the mean wait for it
	// inside the hooks per token (included in IOMs).
	PrefetchBytesPerToken float64 `json:"prefetch_bytes_per_token"`
	PrefetchAccuracy      float64 `json:"prefetch_accuracy"`
	// PrefetchCoverage is the share of the flushed entry bytes the hooks
	// needed from flash (not cached) that the prefetch had read.
	PrefetchCoverage     float64 `json:"prefetch_coverage"`
	PrefetchHitsPerToken float64 `json:"prefetch_hits_per_token"`
	PrefetchWaitMs       float64 `json:"prefetch_wait_ms"`
	// Layout counterfactuals of the same selections (layout.go): a
	// sequence-order file's read operations and bytes per token and mean
	// contiguous run (entries), and the bytes moved per split and per
	// append by the dual-head pools and by a packed cluster-by-cluster
	// layout.
	SeqOpsPerToken     float64 `json:"seq_order_ops_per_token"`
	SeqBytesPerToken   float64 `json:"seq_order_bytes_per_token"`
	SeqMeanRunEntries  float64 `json:"seq_order_mean_run_entries"`
	DualSplitWritten   float64 `json:"dual_split_written_bytes"`
	DualSplitMoved     float64 `json:"dual_split_moved_bytes"`
	PackedSplitWritten float64 `json:"packed_split_written_bytes"`
	PackedSplitMoved   float64 `json:"packed_split_shifted_bytes"`
	PackedAppendMoved  float64 `json:"packed_append_shifted_bytes"`
	// Per decoded token: the bytes the packed layout shifts (appends and
	// splits) and the bytes dual-head splits move to new pool sides.
	PackedMovedPerToken float64 `json:"packed_moved_bytes_per_token"`
	DualMovedPerToken   float64 `json:"dual_moved_bytes_per_token"`
	// Representatives (Pipeline 1): DRAM bytes of the scoring arrays (at
	// most, with CentroidsOnFlash; all layers' float32 centroids without),
	// bytes read and written per token (included in the flash totals) and
	// the wait for them per token (included in IOMs).
	RepsOnFlash         bool    `json:"reps_on_flash"`
	RepsDRAMBytes       int64   `json:"reps_dram_bytes"`
	RepsReadPerToken    float64 `json:"reps_read_bytes_per_token"`
	RepsWrittenPerToken float64 `json:"reps_written_bytes_per_token"`
	RepsWaitMs          float64 `json:"reps_wait_ms"`
	// Label says what the I/O numbers measure.
	Label string `json:"io_label"`
}

// Report summarises the run so far.
func (s *System) Report() Report {
	s.settle()
	clusters := 0
	var written int64
	for _, l := range s.layers {
		for _, h := range l.hs {
			clusters += len(h.clusters)
		}
		written += l.store.written
	}
	entry := 0
	if len(s.layers) > 0 {
		entry = s.layers[0].store.entry
	}
	r := s.st.report(s.fstats.Snapshot(), entry, clusters, written)
	if len(s.layers) > 0 {
		r.RepsOnFlash = s.cfg.CentroidsOnFlash
		r.RepsDRAMBytes = int64(clusters) * int64(s.layers[0].dim) * 4
		if r.RepsOnFlash {
			r.RepsDRAMBytes = s.st.repsPeak
		}
	}
	return r
}

func (st *Stats) report(snap flash.Snapshot, entry, clusters int, written int64) Report {
	r := Report{Steps: st.steps, Budget: st.cfg.Budget, CachePolicy: st.cfg.CachePolicy, CacheBytes: st.cfg.CacheBytes,
		InitialClusters: st.initialClusters, SplitsVariance: st.splitsVariance, SplitsDelayed: st.splitsDelayed,
		SplitsBMax: st.splitsBMax, SplitsForced: st.splitsForced, Buffered: st.buffered, PrefillWritten: st.prefillWritten,
		Label: snap.Label, FinalClusters: clusters, Mode: "dynakv"}
	if st.cfg.CacheBytes == 0 {
		r.CachePolicy = "none"
	}
	n := float64(max(st.steps, 1))
	if st.entriesTotal > 0 {
		r.RetrievedShare = float64(st.retrieved) / float64(st.entriesTotal)
	}
	r.ReadBytesPerToken = float64(snap.Read.Bytes) / n
	r.RecentPerToken = float64(st.recentExtra) / n
	r.UsefulBytesPerTok = float64(st.usefulRead) / n
	r.ReadOpsPerToken = float64(snap.Read.Ops) / n
	if entry > 0 {
		r.MeanRunEntries = snap.Read.MeanRunBytes / float64(entry)
		r.MaxRunEntries = float64(snap.Read.MaxRunBytes) / float64(entry)
	}
	r.ReadBusyMs = float64(snap.Read.Busy) / 1e6
	if snap.Read.Busy > 0 {
		r.EffectiveBandwidth = float64(st.usefulRead) / snap.Read.Busy.Seconds() / 1e6
	}
	if a := st.hits + st.misses + st.partialHits; a > 0 {
		r.HitRate = float64(st.hits) / float64(a)
	}
	splits := st.splitsVariance + st.splitsDelayed + st.splitsBMax + st.splitsForced
	r.SplitsPer1K = float64(splits) * 1000 / n
	if st.appended > 0 {
		r.WriteAmplification = float64(written) / float64(st.appended)
	}
	if st.recallN > 0 {
		r.Recall = st.recallSum / float64(st.recallN)
	}
	for i := range st.driftSum {
		r.Drift = append(r.Drift, st.driftSum[i]/float64(max(st.driftN[i], 1)))
	}
	r.RepsReadPerToken = float64(st.repsRead) / n
	r.RepsWrittenPerToken = float64(st.repsWritten) / n
	r.RepsWaitMs = float64(st.tRepsWait) / 1e6 / n
	r.PrefetchBytesPerToken = float64(st.pfPlanned) / n
	if st.pfUseful > 0 {
		r.PrefetchAccuracy = float64(st.pfUsed) / float64(st.pfUseful)
		r.PrefetchCoverage = float64(st.pfUsed) / float64(st.pfUsed+st.usefulRead)
	}
	r.PrefetchHitsPerToken = float64(st.pfHits) / n
	r.PrefetchWaitMs = float64(st.tPfWait) / 1e6 / n
	r.SeqOpsPerToken = float64(st.seqOps) / n
	r.SeqBytesPerToken = float64(st.seqBytes) / n
	if st.seqRuns > 0 {
		r.SeqMeanRunEntries = float64(st.seqEntries) / float64(st.seqRuns)
	}
	if st.splits > 0 {
		k := float64(st.splits)
		r.DualSplitWritten, r.DualSplitMoved = float64(st.dualSplitWritten)/k, float64(st.dualSplitMoved)/k
		r.PackedSplitWritten, r.PackedSplitMoved = float64(st.packedSplitWritten)/k, float64(st.packedSplitMoved)/k
	}
	r.PackedMovedPerToken = float64(st.packedAppendMoved+st.packedSplitMoved) / n
	r.DualMovedPerToken = float64(st.dualSplitMoved) / n
	if st.appends > 0 {
		r.PackedAppendMoved = float64(st.packedAppendMoved) / float64(st.appends)
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 / n }
	r.ScoreMs, r.IOMs, r.AttnMs, r.UpdateMs = ms(st.tScore), ms(st.tIO), ms(st.tAttn), ms(st.tUpdate)
	return r
}

// ReadSnapshot is the pool files' flash statistics.
func (s *System) ReadSnapshot() flash.Snapshot {
	s.settle()
	return s.fstats.Snapshot()
}

// PlannedReadBytes is the bytes the reads were planned to fetch
// (block-aligned extents of cache misses); UsefulReadBytes the entries in
// them. Tests check the flash statistics against them.
func (s *System) PlannedReadBytes() int64 { return s.st.plannedRead }

// UsefulReadBytes is the entry bytes of the planned reads.
func (s *System) UsefulReadBytes() int64 { return s.st.usefulRead }
