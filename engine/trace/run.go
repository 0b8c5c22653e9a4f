package trace

import (
	"fmt"
	"time"
)

// Parts names the components of an operation's duration, e.g. "reclaim",
// "io", "recompute" and "upload" for a switch. Parts may overlap (a pipeline
// overlaps I/O with recompute), so they need not add up to the measured
// duration; the runner always reports the measured duration as the total.
type Parts map[string]time.Duration

// System is what the runner drives: one serving system (LLMS or a
// baseline) over the shared engine. Calls are sequential; the runner never
// calls two methods at once.
type System interface {
	// Name identifies the system in reports ("llms", "lmk", ...).
	Name() string
	// Switch makes a.Ctx the active context, fully installed, creating it on
	// its first call (a.Call == 0). Its measured duration is the switch
	// latency (plus any wait for background work).
	Switch(a Arrival) (Parts, error)
	// Call runs the call itself on the active context (prefill of a.Tokens
	// and decoding); it is timed but is not switch latency.
	Call(a Arrival) (Parts, error)
	// Background runs the work the system does after a call, in the idle
	// gap before the next one (LLMS: ahead-of-time swap-out). It runs to
	// completion; if it outlasts the virtual gap, the next call waits.
	Background() (Parts, error)
}

// IOCounter is implemented by systems that count their flash traffic; the
// runner attributes the growth of the counters to each arrival.
type IOCounter interface {
	// IOBytes returns cumulative bytes read from and written to flash.
	IOBytes() (read, written int64)
}

// Clock measures real durations; tests substitute a fake one.
type Clock interface {
	// Now returns a monotonic time since an arbitrary origin.
	Now() time.Duration
}

type realClock struct{ base time.Time }

func (c realClock) Now() time.Duration { return time.Since(c.base) }

// RealClock measures with the monotonic wall clock.
func RealClock() Clock { return realClock{time.Now()} }

// Record is what happened to one arrival. Times called At/Start/End are
// virtual; durations are measured.
type Record struct {
	Arrival
	// Start is when the switch began: the arrival, delayed by a previous
	// call still running (QueueWait) and by pending background work
	// (BackgroundWait). End is when the call finished.
	Start, End     time.Duration
	QueueWait      time.Duration
	BackgroundWait time.Duration
	// Changed is true when the previous call went to another context.
	Changed bool
	Switch  time.Duration
	// SwitchParts are the system's parts of Switch.
	SwitchParts Parts
	Call        time.Duration
	CallParts   Parts
	// Background is the measured duration of the work after this call and
	// Gap the virtual time until the next arrival (0 for the last one).
	Background      time.Duration
	BackgroundParts Parts
	Gap             time.Duration
	// BytesRead and BytesWritten are the flash traffic of the switch, the
	// call and the background work of this arrival.
	BytesRead, BytesWritten int64
}

// SwitchLatency is the time from arrival (or from the end of the previous
// call, if it was still running) until the context was installed: the wait
// for background work plus the switch itself.
func (r *Record) SwitchLatency() time.Duration { return r.BackgroundWait + r.Switch }

// Result is one replay of a trace against one system.
type Result struct {
	System   string
	Contexts int
	Records  []Record
}

// Run replays arrivals against sys, measuring with clock (nil: RealClock).
// contexts is the number of contexts the trace was made for; arrivals must
// be in time order. The timeline is that of one device serving one call at
// a time: a call starts at its arrival or when the previous call ends,
// whichever is later, and after pending background work has finished.
// Operations run one after another on the real clock too (background work
// never overlaps a measured switch or call), so each measurement is the
// operation alone; the overlap exists only on the virtual timeline.
func Run(sys System, contexts int, arrivals []Arrival, clock Clock) (*Result, error) {
	if clock == nil {
		clock = RealClock()
	}
	io, _ := sys.(IOCounter)
	res := &Result{System: sys.Name(), Contexts: contexts, Records: make([]Record, 0, len(arrivals))}
	var free, bgEnd time.Duration // virtual: foreground idle from, background done at
	prevCtx := -1
	for i, a := range arrivals {
		if a.Ctx < 0 || a.Ctx >= contexts {
			return res, fmt.Errorf("trace: %s: arrival %d names context %d of %d", res.System, i, a.Ctx, contexts)
		}
		if i > 0 && a.At < arrivals[i-1].At {
			return res, fmt.Errorf("trace: %s: arrival %d at %v precedes arrival %d at %v", res.System, i, a.At, i-1, arrivals[i-1].At)
		}
		r := Record{Arrival: a, Changed: a.Ctx != prevCtx}
		start := max(a.At, free)
		r.QueueWait = start - a.At
		if bgEnd > start {
			r.BackgroundWait = bgEnd - start
			start = bgEnd
		}
		r.Start = start
		var rd0, wr0 int64
		if io != nil {
			rd0, wr0 = io.IOBytes()
		}
		var err error
		if r.Switch, r.SwitchParts, err = timed(clock, sys.Switch, a); err != nil {
			return res, fmt.Errorf("trace: %s: switch to context %d (arrival %d): %w", res.System, a.Ctx, i, err)
		}
		if r.Call, r.CallParts, err = timed(clock, sys.Call, a); err != nil {
			return res, fmt.Errorf("trace: %s: call on context %d (arrival %d): %w", res.System, a.Ctx, i, err)
		}
		r.End = start + r.Switch + r.Call
		bg := func(Arrival) (Parts, error) { return sys.Background() }
		if r.Background, r.BackgroundParts, err = timed(clock, bg, a); err != nil {
			return res, fmt.Errorf("trace: %s: background work after arrival %d: %w", res.System, i, err)
		}
		if io != nil {
			rd1, wr1 := io.IOBytes()
			r.BytesRead, r.BytesWritten = rd1-rd0, wr1-wr0
		}
		if i+1 < len(arrivals) {
			r.Gap = arrivals[i+1].At - a.At
		}
		free, bgEnd = r.End, r.End+r.Background
		prevCtx = a.Ctx
		res.Records = append(res.Records, r)
	}
	return res, nil
}

func timed(c Clock, op func(Arrival) (Parts, error), a Arrival) (time.Duration, Parts, error) {
	t0 := c.Now()
	p, err := op(a)
	return c.Now() - t0, p, err
}
