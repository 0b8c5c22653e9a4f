package flash

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// Histogram buckets: sub-buckets per power of two. Eight keeps the relative
// error of a reported percentile under 9% with 8 × 40 counters, enough for
// latencies from 1 ns to ~18 minutes.
const (
	histSub     = 8
	histBuckets = 40 * histSub
)

// Histogram is a fixed-memory log-scale histogram of durations.
// The zero value is ready to use; it is not safe for concurrent use.
type Histogram struct {
	counts   [histBuckets]int64
	n        int64
	sum, max time.Duration
	min      time.Duration
}

func histIndex(d time.Duration) int {
	if d < 1 {
		d = 1
	}
	x := uint64(d)
	e := 63 - bits.LeadingZeros64(x) // floor(log2 x)
	// Position inside [2^e, 2^(e+1)) in histSub linear steps.
	var frac int
	if e >= 3 {
		frac = int((x >> uint(e-3)) & (histSub - 1))
	} else {
		frac = int((x << uint(3-e)) & (histSub - 1))
	}
	i := e*histSub + frac
	if i >= histBuckets {
		i = histBuckets - 1
	}
	return i
}

// histUpper is the exclusive upper bound of bucket i.
func histUpper(i int) time.Duration {
	e, frac := i/histSub, i%histSub
	return time.Duration(math.Ceil(math.Ldexp(1+float64(frac+1)/histSub, e)))
}

// Add records one duration.
func (h *Histogram) Add(d time.Duration) {
	h.counts[histIndex(d)]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.n++
	h.sum += d
}

// Count is the number of recorded durations.
func (h *Histogram) Count() int64 { return h.n }

// Mean is the exact mean of the recorded durations.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// Percentile returns the upper edge of the bucket holding the p-th
// percentile (0 < p ≤ 100), clamped to the exact minimum and maximum, so it
// overstates by at most one bucket width (< 12.5%).
func (h *Histogram) Percentile(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(p / 100 * float64(h.n)))
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			u := histUpper(i)
			if u > h.max {
				u = h.max
			}
			if u < h.min {
				u = h.min
			}
			return u
		}
	}
	return h.max
}

// Summary condenses the histogram for reports.
func (h *Histogram) Summary() LatencySummary {
	return LatencySummary{
		Mean: h.Mean(), P50: h.Percentile(50), P95: h.Percentile(95),
		P99: h.Percentile(99), Min: h.min, Max: h.max,
	}
}

// LatencySummary holds the usual percentiles of a Histogram.
type LatencySummary struct {
	Mean time.Duration `json:"mean_ns"`
	P50  time.Duration `json:"p50_ns"`
	P95  time.Duration `json:"p95_ns"`
	P99  time.Duration `json:"p99_ns"`
	Min  time.Duration `json:"min_ns"`
	Max  time.Duration `json:"max_ns"`
}

// SizeCount is one bucket of a size histogram: Count items of size in
// (Size/2, Size] (Size a power of two).
type SizeCount struct {
	Size  int64 `json:"size"`
	Count int64 `json:"count"`
}

// sizeHist counts sizes in power-of-two buckets.
type sizeHist [64]int64

func sizeIndex(n int64) int {
	if n <= 1 {
		return 0
	}
	return 64 - bits.LeadingZeros64(uint64(n-1))
}

func (s *sizeHist) add(n int64) { s[sizeIndex(n)]++ }

func (s *sizeHist) list() []SizeCount {
	var out []SizeCount
	for i, c := range s {
		if c != 0 {
			out = append(out, SizeCount{Size: int64(1) << uint(i), Count: c})
		}
	}
	return out
}

// opStats accumulates one direction (reads or writes).
type opStats struct {
	ops, bytes, devBytes int64
	lat                  Histogram
	sizes                sizeHist
	// Contiguous runs, in issue order: a run grows while each request starts
	// in the same file exactly where the previous one ended.
	runs, runBytes, maxRun int64
	runHist                sizeHist
	lastFile               *File
	lastEnd                int64
}

func (o *opStats) issue(f *File, off, n int64) {
	if o.runBytes > 0 && f == o.lastFile && off == o.lastEnd {
		o.runBytes += n
	} else {
		o.closeRun()
		o.runBytes = n
	}
	o.lastFile, o.lastEnd = f, off+n
}

func (o *opStats) closeRun() {
	if o.runBytes == 0 {
		return
	}
	o.runs++
	o.runHist.add(o.runBytes)
	if o.runBytes > o.maxRun {
		o.maxRun = o.runBytes
	}
	o.runBytes = 0
}

func (o *opStats) done(n, dev int64, d time.Duration) {
	o.ops++
	o.bytes += n
	o.devBytes += dev
	o.sizes.add(n)
	o.lat.Add(d)
}

func (o *opStats) snapshot() OpSnapshot {
	// The open run counts as a run in the snapshot without being closed.
	runs, runHist, maxRun := o.runs, o.runHist, o.maxRun
	if o.runBytes > 0 {
		runs++
		runHist.add(o.runBytes)
		maxRun = max(maxRun, o.runBytes)
	}
	s := OpSnapshot{
		Ops: o.ops, Bytes: o.bytes, DeviceBytes: o.devBytes,
		Latency: o.lat.Summary(), Busy: o.lat.sum,
		Sizes: o.sizes.list(), Runs: runs, MaxRunBytes: maxRun, RunSizes: runHist.list(),
	}
	if runs > 0 {
		s.MeanRunBytes = float64(o.bytes) / float64(runs)
	}
	return s
}

// OpSnapshot is a copy of the statistics of one direction.
type OpSnapshot struct {
	// Ops and Bytes count completed requests and the bytes callers asked for.
	Ops   int64 `json:"ops"`
	Bytes int64 `json:"bytes"`
	// DeviceBytes is what was transferred: requests widened to whole blocks.
	DeviceBytes int64 `json:"device_bytes"`
	// Latency is per request, issue to completion, including any throttle
	// delay; Busy is the sum of request latencies.
	Latency LatencySummary `json:"latency"`
	Busy    time.Duration  `json:"busy_ns"`
	// Sizes counts requests per power-of-two size bucket.
	Sizes []SizeCount `json:"sizes"`
	// Runs counts maximal sequences of requests, in issue order, each
	// starting in the same file where the previous one ended. MeanRunBytes
	// is Bytes/Runs; RunSizes is the run-length histogram in bytes.
	Runs         int64       `json:"runs"`
	MeanRunBytes float64     `json:"mean_run_bytes"`
	MaxRunBytes  int64       `json:"max_run_bytes"`
	RunSizes     []SizeCount `json:"run_sizes"`
}

// Snapshot is a copy of a Stats at one moment.
type Snapshot struct {
	// Label says what the numbers measure: "O_DIRECT", or the buffered
	// opt-in, or a throttle emulation; a reader of any report must see it.
	Label string     `json:"label"`
	Read  OpSnapshot `json:"read"`
	Write OpSnapshot `json:"write"`
}

// Stats collects I/O statistics; one Stats may be shared by many files and
// pools (it is safe for concurrent use). The zero value is ready to use.
type Stats struct {
	mu     sync.Mutex
	labels []string
	read   opStats
	write  opStats
}

// NewStats returns an empty Stats.
func NewStats() *Stats { return &Stats{} }

// label records a description of the I/O mode once per distinct value.
func (s *Stats) label(l string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.labels {
		if x == l {
			return
		}
	}
	s.labels = append(s.labels, l)
}

func (s *Stats) issue(write bool, f *File, off, n int64) {
	s.mu.Lock()
	if write {
		s.write.issue(f, off, n)
	} else {
		s.read.issue(f, off, n)
	}
	s.mu.Unlock()
}

func (s *Stats) done(write bool, n, dev int64, d time.Duration) {
	s.mu.Lock()
	if write {
		s.write.done(n, dev, d)
	} else {
		s.read.done(n, dev, d)
	}
	s.mu.Unlock()
}

// Snapshot returns a consistent copy of the statistics so far.
func (s *Stats) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	label := ""
	for i, l := range s.labels {
		if i > 0 {
			label += "; "
		}
		label += l
	}
	return Snapshot{Label: label, Read: s.read.snapshot(), Write: s.write.snapshot()}
}

// Reset clears the counters (labels stay), e.g. between a warm-up and the
// measured part of a benchmark.
func (s *Stats) Reset() {
	s.mu.Lock()
	s.read, s.write = opStats{}, opStats{}
	s.mu.Unlock()
}
