package trace

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary condenses a Result. Latencies are in milliseconds.
type Summary struct {
	System   string `json:"system"`
	Contexts int    `json:"contexts"`
	Calls    int    `json:"calls"`
	// Switches counts calls whose context differs from the previous call's.
	Switches int `json:"switches"`
	// Switch latency (background wait + switch) over all calls, and over
	// the calls that changed context.
	SwitchMsMean        float64 `json:"switch_ms_mean"`
	SwitchMsP95         float64 `json:"switch_ms_p95"`
	ChangedSwitchMsMean float64 `json:"changed_switch_ms_mean"`
	ChangedSwitchMsP95  float64 `json:"changed_switch_ms_p95"`
	// PartsMsMean is the mean per call of each named part of the switch,
	// plus "background_wait"; parts may overlap.
	PartsMsMean map[string]float64 `json:"parts_ms_mean"`
	CallMsMean  float64            `json:"call_ms_mean"`
	// Background work after each call against the virtual gap after it.
	BackgroundMsMean      float64 `json:"background_ms_mean"`
	BackgroundMsMax       float64 `json:"background_ms_max"`
	GapMsMean             float64 `json:"gap_ms_mean"`
	BackgroundWaits       int     `json:"background_waits"`
	BackgroundWaitMsTotal float64 `json:"background_wait_ms_total"`
	QueueWaitMsMean       float64 `json:"queue_wait_ms_mean"`
	BytesRead             int64   `json:"bytes_read"`
	BytesWritten          int64   `json:"bytes_written"`
	// VirtualSeconds is the trace's simulated span; RealSeconds the time
	// its operations took.
	VirtualSeconds float64 `json:"virtual_s"`
	RealSeconds    float64 `json:"real_s"`
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// percentile is the nearest-rank p-th percentile of sorted xs.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

func meanOf(xs []time.Duration) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s time.Duration
	for _, x := range xs {
		s += x
	}
	return ms(s) / float64(len(xs))
}

// Summary computes the summary of r.
func (r *Result) Summary() Summary {
	s := Summary{System: r.System, Contexts: r.Contexts, Calls: len(r.Records), PartsMsMean: map[string]float64{}}
	if len(r.Records) == 0 {
		return s
	}
	var all, changed, calls, bgs, gaps, queue []time.Duration
	var bgWait, real time.Duration
	parts := map[string]time.Duration{}
	for _, rec := range r.Records {
		l := rec.SwitchLatency()
		all = append(all, l)
		if rec.Changed {
			changed = append(changed, l)
			s.Switches++
		}
		calls = append(calls, rec.Call)
		bgs = append(bgs, rec.Background)
		if rec.Gap > 0 {
			gaps = append(gaps, rec.Gap)
		}
		queue = append(queue, rec.QueueWait)
		if rec.BackgroundWait > 0 {
			s.BackgroundWaits++
			bgWait += rec.BackgroundWait
		}
		for k, v := range rec.SwitchParts {
			parts[k] += v
		}
		parts["background_wait"] += rec.BackgroundWait
		s.BytesRead += rec.BytesRead
		s.BytesWritten += rec.BytesWritten
		real += rec.Switch + rec.Call + rec.Background
	}
	slices.Sort(all)
	slices.Sort(changed)
	s.SwitchMsMean, s.SwitchMsP95 = meanOf(all), ms(percentile(all, 95))
	s.ChangedSwitchMsMean, s.ChangedSwitchMsP95 = meanOf(changed), ms(percentile(changed, 95))
	for k, v := range parts {
		s.PartsMsMean[k] = ms(v) / float64(len(r.Records))
	}
	s.CallMsMean = meanOf(calls)
	s.BackgroundMsMean = meanOf(bgs)
	s.BackgroundMsMax = ms(slices.Max(bgs))
	s.GapMsMean = meanOf(gaps)
	s.BackgroundWaitMsTotal = ms(bgWait)
	s.QueueWaitMsMean = meanOf(queue)
	last := r.Records[len(r.Records)-1]
	s.VirtualSeconds = (last.End + last.Background).Seconds()
	s.RealSeconds = real.Seconds()
	return s
}

// Report gathers summaries per system and context count. Its JSON form is
// {"systems": {"llms": {"4": {...Summary}}}}.
type Report struct {
	Systems map[string]map[int]Summary `json:"systems"`
}

// Add files a result's summary under its system and context count.
func (rep *Report) Add(r *Result) {
	if rep.Systems == nil {
		rep.Systems = map[string]map[int]Summary{}
	}
	if rep.Systems[r.System] == nil {
		rep.Systems[r.System] = map[int]Summary{}
	}
	rep.Systems[r.System][r.Contexts] = r.Summary()
}

func sortedKeys[K int | string, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// Held is how many contexts a system held under a latency limit: the
// largest measured context count whose switch latency, and that of every
// smaller measured count, stays within the limit. AtLeast marks a count
// that is the largest one measured: the limit was not reached, so the
// true maximum may be higher (a lower bound, not a maximum).
type Held struct {
	Contexts int  `json:"contexts"`
	AtLeast  bool `json:"at_least"`
}

// String is the count, prefixed with "≥" when it is a lower bound.
func (h Held) String() string {
	if h.AtLeast {
		return fmt.Sprintf("≥%d", h.Contexts)
	}
	return fmt.Sprint(h.Contexts)
}

// HeldUnder returns, per system, the contexts held under limit, judged by
// the mean switch latency (p95 if useP95); 0 if even the smallest
// measured count exceeds it.
func (rep *Report) HeldUnder(limit time.Duration, useP95 bool) map[string]Held {
	out := map[string]Held{}
	for sys, byN := range rep.Systems {
		var h Held
		ns := sortedKeys(byN)
		for i, n := range ns {
			v := byN[n].SwitchMsMean
			if useP95 {
				v = byN[n].SwitchMsP95
			}
			if v > ms(limit) {
				break
			}
			h = Held{Contexts: n, AtLeast: i == len(ns)-1}
		}
		out[sys] = h
	}
	return out
}

// MaxContexts is HeldUnder's counts alone.
func (rep *Report) MaxContexts(limit time.Duration, useP95 bool) map[string]int {
	out := map[string]int{}
	for sys, h := range rep.HeldUnder(limit, useP95) {
		out[sys] = h.Contexts
	}
	return out
}

// MedianReport condenses reports of repeated runs of the same systems and
// context counts (rounds) into one whose summaries carry only the system,
// context count, calls and the medians over the rounds of the switch
// latency figures (mean, p95, and both over changed calls); the other
// fields are zero. A system and count missing from any round is an error.
func MedianReport(reps []*Report) (*Report, error) {
	if len(reps) == 0 {
		return nil, fmt.Errorf("trace: median of no reports")
	}
	out := &Report{Systems: map[string]map[int]Summary{}}
	for sys, byN := range reps[0].Systems {
		out.Systems[sys] = map[int]Summary{}
		for n, s0 := range byN {
			cols := make([][]float64, 4)
			for k, r := range reps {
				s, ok := r.Systems[sys][n]
				if !ok {
					return nil, fmt.Errorf("trace: round %d has no %s at %d contexts", k, sys, n)
				}
				for j, v := range []float64{s.SwitchMsMean, s.SwitchMsP95, s.ChangedSwitchMsMean, s.ChangedSwitchMsP95} {
					cols[j] = append(cols[j], v)
				}
			}
			out.Systems[sys][n] = Summary{System: sys, Contexts: n, Calls: s0.Calls,
				SwitchMsMean: Median(cols[0]), SwitchMsP95: Median(cols[1]),
				ChangedSwitchMsMean: Median(cols[2]), ChangedSwitchMsP95: Median(cols[3])}
		}
	}
	for k, r := range reps[1:] {
		for sys, byN := range r.Systems {
			for n := range byN {
				if _, ok := out.Systems[sys][n]; !ok {
					return nil, fmt.Errorf("trace: round %d has %s at %d contexts, round 0 has not", k+1, sys, n)
				}
			}
		}
	}
	return out, nil
}

// Median is the median of xs (the mean of the middle two for an even
// count; 0 for none). xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// WriteTable prints one row per system and context count, with the mean of
// each named switch part.
func (rep *Report) WriteTable(w io.Writer) error {
	partSet := map[string]bool{}
	for _, byN := range rep.Systems {
		for _, s := range byN {
			for k := range s.PartsMsMean {
				partSet[k] = true
			}
		}
	}
	parts := sortedKeys(partSet)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"system", "ctx", "calls", "switch mean ms", "switch p95 ms"}
	for _, p := range parts {
		head = append(head, p+" ms")
	}
	head = append(head, "call ms", "bg ms", "bg waits", "read MB", "written MB")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, sys := range sortedKeys(rep.Systems) {
		for _, n := range sortedKeys(rep.Systems[sys]) {
			s := rep.Systems[sys][n]
			row := []string{sys, fmt.Sprint(n), fmt.Sprint(s.Calls), f3(s.SwitchMsMean), f3(s.SwitchMsP95)}
			for _, p := range parts {
				row = append(row, f3(s.PartsMsMean[p]))
			}
			row = append(row, f3(s.CallMsMean), f3(s.BackgroundMsMean), fmt.Sprint(s.BackgroundWaits),
				f3(float64(s.BytesRead)/1e6), f3(float64(s.BytesWritten)/1e6))
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
	}
	return tw.Flush()
}

func f3(x float64) string { return fmt.Sprintf("%.3f", x) }
