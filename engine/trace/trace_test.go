package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

type fakeClock struct{ t time.Duration }

func (c *fakeClock) Now() time.Duration { return c.t }

// fakeSys has known costs on a fake clock: a switch to another context
// costs 6 ms of I/O + 4 ms of recompute and reads 1000 bytes; staying costs
// 1 ms of upload; a call costs 100 µs per token; background work costs
// 50 ms and writes 500 bytes.
type fakeSys struct {
	clk           *fakeClock
	active        int
	read, written int64
	failOn        int // arrival Seq whose Call fails; -1 none
}

func newFake(clk *fakeClock) *fakeSys { return &fakeSys{clk: clk, active: -1, failOn: -1} }

func (f *fakeSys) Name() string { return "fake" }

func (f *fakeSys) Switch(a Arrival) (Parts, error) {
	if a.Ctx == f.active {
		f.clk.t += time.Millisecond
		return Parts{"upload": time.Millisecond}, nil
	}
	f.active = a.Ctx
	f.clk.t += 10 * time.Millisecond
	f.read += 1000
	return Parts{"io": 6 * time.Millisecond, "recompute": 4 * time.Millisecond}, nil
}

func (f *fakeSys) Call(a Arrival) (Parts, error) {
	if a.Seq == f.failOn {
		return nil, errors.New("boom")
	}
	f.clk.t += time.Duration(a.Tokens) * 100 * time.Microsecond
	return nil, nil
}

func (f *fakeSys) Background() (Parts, error) {
	f.clk.t += 50 * time.Millisecond
	f.written += 500
	return Parts{"aot_write": 50 * time.Millisecond}, nil
}

func (f *fakeSys) IOBytes() (int64, int64) { return f.read, f.written }

const msec = time.Millisecond

func TestRunExactVirtualTimes(t *testing.T) {
	arr := []Arrival{
		{Seq: 0, At: 0, Ctx: 0, Tokens: 10},
		{Seq: 1, At: 20 * msec, Ctx: 1, Tokens: 20},
		{Seq: 2, At: 70 * msec, Ctx: 1, Call: 1, Tokens: 5},
		{Seq: 3, At: 1000 * msec, Ctx: 0, Call: 1, Tokens: 10},
	}
	clk := &fakeClock{}
	res, err := Run(newFake(clk), 2, arr, clk)
	if err != nil {
		t.Fatal(err)
	}
	us := time.Microsecond
	want := []struct {
		start, end, queue, bgWait, sw time.Duration
		changed                       bool
	}{
		// Call 0 ends at 11 ms; its background runs to 61 ms.
		{0, 11 * msec, 0, 0, 10 * msec, true},
		// Arrives at 20 ms, waits 41 ms for the background work.
		{61 * msec, 73 * msec, 0, 41 * msec, 10 * msec, true},
		// Arrives at 70 ms while call 1 runs (to 73), then waits for its
		// background work (to 123 ms); same context, 1 ms switch.
		{123 * msec, 124*msec + 500*us, 3 * msec, 50 * msec, msec, false},
		{1000 * msec, 1011 * msec, 0, 0, 10 * msec, true},
	}
	for i, w := range want {
		r := res.Records[i]
		if r.Start != w.start || r.End != w.end || r.QueueWait != w.queue || r.BackgroundWait != w.bgWait || r.Switch != w.sw || r.Changed != w.changed {
			t.Errorf("record %d: start %v end %v queue %v bgwait %v switch %v changed %v; want %+v",
				i, r.Start, r.End, r.QueueWait, r.BackgroundWait, r.Switch, r.Changed, w)
		}
		if r.Background != 50*msec || r.BytesRead != map[bool]int64{true: 1000, false: 0}[w.changed] || r.BytesWritten != 500 {
			t.Errorf("record %d: background %v read %d written %d", i, r.Background, r.BytesRead, r.BytesWritten)
		}
	}
	s := res.Summary()
	close := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Switch latencies 10, 51, 51, 10 ms.
	close("mean", s.SwitchMsMean, 30.5)
	close("p95", s.SwitchMsP95, 51)
	close("changed mean", s.ChangedSwitchMsMean, 71.0/3)
	close("io part", s.PartsMsMean["io"], 4.5)
	close("recompute part", s.PartsMsMean["recompute"], 3)
	close("upload part", s.PartsMsMean["upload"], 0.25)
	close("background_wait part", s.PartsMsMean["background_wait"], 22.75)
	close("call mean", s.CallMsMean, (1+2+0.5+1)/4.0)
	close("gap mean", s.GapMsMean, 1000.0/3)
	close("queue mean", s.QueueWaitMsMean, 0.75)
	close("bg wait total", s.BackgroundWaitMsTotal, 91)
	close("virtual s", s.VirtualSeconds, 1.061)
	if s.Calls != 4 || s.Switches != 3 || s.BackgroundWaits != 2 || s.BytesRead != 3000 || s.BytesWritten != 2000 {
		t.Errorf("summary counts %+v", s)
	}
}

func TestRunErrors(t *testing.T) {
	clk := &fakeClock{}
	if _, err := Run(newFake(clk), 2, []Arrival{{Ctx: 2}}, clk); err == nil || !strings.Contains(err.Error(), "context 2 of 2") {
		t.Errorf("out-of-range context: %v", err)
	}
	if _, err := Run(newFake(clk), 2, []Arrival{{At: 5}, {At: 1}}, clk); err == nil || !strings.Contains(err.Error(), "precedes") {
		t.Errorf("unsorted: %v", err)
	}
	sys := newFake(clk)
	sys.failOn = 1
	res, err := Run(sys, 2, []Arrival{{Seq: 0, Tokens: 1}, {Seq: 1, At: time.Second, Ctx: 1, Tokens: 1}}, clk)
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "context 1 (arrival 1)") || len(res.Records) != 1 {
		t.Errorf("failing call: %v, %d records kept", err, len(res.Records))
	}
}

func TestGenerateDeterministic(t *testing.T) {
	for _, p := range []Pattern{Random, Markov, Gaussian} {
		c := Config{Contexts: 6, Calls: 500, MeanGap: 5 * time.Minute, Pattern: p, Deltas: PaperDeltas, Seed: 7}
		a, err := Generate(c)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Generate(c)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: same seed, different traces", p)
		}
		c.Seed = 8
		d, _ := Generate(c)
		if reflect.DeepEqual(a, d) {
			t.Fatalf("%s: seeds 7 and 8 give the same trace", p)
		}
		// Replays of the same trace against the fake system agree exactly.
		clk1, clk2 := &fakeClock{}, &fakeClock{}
		r1, err := Run(newFake(clk1), 6, a, clk1)
		if err != nil {
			t.Fatal(err)
		}
		r2, _ := Run(newFake(clk2), 6, a, clk2)
		if !reflect.DeepEqual(r1.Summary(), r2.Summary()) {
			t.Fatalf("%s: replays differ", p)
		}
		calls := make([]int, 6)
		for i, x := range a {
			d := PaperDeltas[x.Ctx%len(PaperDeltas)]
			if x.Seq != i || x.Call != calls[x.Ctx] || x.Tokens < d.Min || x.Tokens > d.Max || (i > 0 && x.At < a[i-1].At) {
				t.Fatalf("%s: arrival %d malformed: %+v", p, i, x)
			}
			calls[x.Ctx]++
		}
	}
}

func TestPoissonGaps(t *testing.T) {
	const n = 20000
	mean := 5 * time.Minute
	a, err := Generate(Config{Contexts: 4, Calls: n, MeanGap: mean, Pattern: Random, Deltas: PaperDeltas, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var sum time.Duration
	over := 0
	prev := time.Duration(0)
	for _, x := range a {
		g := x.At - prev
		prev = x.At
		sum += g
		if g > mean {
			over++
		}
	}
	if got := float64(sum) / n / float64(mean); math.Abs(got-1) > 0.03 {
		t.Errorf("mean gap %.3f × configured", got)
	}
	// Exponential gaps: P(gap > mean) = 1/e.
	if got := float64(over) / n; math.Abs(got-math.Exp(-1)) > 0.015 {
		t.Errorf("P(gap > mean) = %.3f, want %.3f", got, math.Exp(-1))
	}
}

func freqs(t *testing.T, c Config) []float64 {
	t.Helper()
	a, err := Generate(c)
	if err != nil {
		t.Fatal(err)
	}
	f := make([]float64, c.Contexts)
	for _, x := range a {
		f[x.Ctx] += 1 / float64(len(a))
	}
	return f
}

// recentShare is the share of calls going to one of the two contexts used
// most recently before them.
func recentShare(a []Arrival) float64 {
	var mru []int
	hits := 0
	for _, x := range a {
		for i := 0; i < min(2, len(mru)); i++ {
			if mru[i] == x.Ctx {
				hits++
				break
			}
		}
		mru = touch(mru, x.Ctx)
	}
	return float64(hits) / float64(len(a))
}

func TestPatterns(t *testing.T) {
	base := Config{Contexts: 8, Calls: 40000, MeanGap: time.Second, Deltas: PaperDeltas, Seed: 3}

	c := base
	c.Pattern = Random
	for i, f := range freqs(t, c) {
		if math.Abs(f-1.0/8) > 0.01 {
			t.Errorf("random: context %d share %.3f", i, f)
		}
	}
	ra, _ := Generate(c)

	c.Pattern = Markov
	ma, _ := Generate(c)
	// Stay on the 2 most recent with p = 0.6, else uniform over 8 (which
	// hits them with 2/8): 0.6 + 0.4·0.25 = 0.7. Random gives 0.25.
	if got := recentShare(ma); math.Abs(got-0.7) > 0.02 {
		t.Errorf("markov: recent share %.3f, want 0.70", got)
	}
	if got := recentShare(ra); math.Abs(got-0.25) > 0.02 {
		t.Errorf("random: recent share %.3f, want 0.25", got)
	}

	c = base
	c.Contexts = 6
	c.Pattern = Gaussian
	f := freqs(t, c)
	w := gaussianWeights(6, PaperDeltas)
	var sw float64
	for _, x := range w {
		sw += x
	}
	for i := range f {
		if math.Abs(f[i]-w[i]/sw) > 0.01 {
			t.Errorf("gaussian: context %d (%s) share %.3f, want %.3f", i, PaperDeltas[i].Name, f[i], w[i]/sw)
		}
	}
	// Moderate workloads (AGNews, 350 mean tokens) beat the extremes (XSum
	// at 1500, SST-2 at 55).
	if !(f[0] > f[1] && f[0] > f[5]) {
		t.Errorf("gaussian: shares %v do not favour moderate workloads", f)
	}
}

func TestGenerateErrors(t *testing.T) {
	ok := Config{Contexts: 2, Calls: 3, MeanGap: time.Second, Pattern: Random, Deltas: PaperDeltas}
	for name, mod := range map[string]func(*Config){
		"no contexts": func(c *Config) { c.Contexts = 0 },
		"no calls":    func(c *Config) { c.Calls = 0 },
		"zero gap":    func(c *Config) { c.MeanGap = 0 },
		"no deltas":   func(c *Config) { c.Deltas = nil },
		"bad delta":   func(c *Config) { c.Deltas = []DeltaRange{{"x", 5, 4}} },
		"bad pattern": func(c *Config) { c.Pattern = "zipf" },
		"bad markov":  func(c *Config) { c.Pattern = Markov; c.MarkovStay = 1.5 },
	} {
		c := ok
		mod(&c)
		if _, err := Generate(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ParsePattern("gaussian"); err != nil {
		t.Error(err)
	}
	if _, err := ParsePattern("uniform"); err == nil {
		t.Error("unknown pattern parsed")
	}
}

func TestScaleDeltas(t *testing.T) {
	if got := ScaleDeltas(PaperDeltas, 4096); !reflect.DeepEqual(got, PaperDeltas) {
		t.Errorf("4096: %v", got)
	}
	got := ScaleDeltas(PaperDeltas, 1024)
	if got[1] != (DeltaRange{"XSum", 250, 500}) || got[5] != (DeltaRange{"SST-2", 3, 25}) {
		t.Errorf("1024: %v", got)
	}
	if g := ScaleDeltas([]DeltaRange{{"tiny", 1, 2}}, 16); g[0].Min != 1 || g[0].Max != 1 {
		t.Errorf("floor at 1: %v", g)
	}
}

func TestReport(t *testing.T) {
	var rep Report
	mk := func(sys string, n int, lat ...time.Duration) {
		r := &Result{System: sys, Contexts: n}
		for i, l := range lat {
			r.Records = append(r.Records, Record{Arrival: Arrival{Seq: i}, Switch: l, Changed: true, SwitchParts: Parts{"io": l}})
		}
		rep.Add(r)
	}
	mk("llms", 2, 1*msec, 2*msec)
	mk("llms", 4, 3*msec, 5*msec)
	mk("llms", 8, 20*msec, 30*msec)
	mk("lmk", 2, 12*msec, 14*msec)
	mk("lmk", 4, 4*msec, 4*msec) // within the limit, but 2 is not: counts 0
	got := rep.MaxContexts(10*msec, false)
	if got["llms"] != 4 || got["lmk"] != 0 {
		t.Errorf("max contexts %v", got)
	}
	if got := rep.MaxContexts(4*msec, true); got["llms"] != 2 {
		t.Errorf("p95 max contexts %v", got)
	}
	// Under 10 ms llms stops at 4 of 2/4/8 measured (a maximum); under
	// 50 ms it holds the largest count measured, a lower bound.
	held := rep.HeldUnder(10*msec, false)
	if held["llms"] != (Held{Contexts: 4}) || held["lmk"] != (Held{}) {
		t.Errorf("held under 10 ms %v", held)
	}
	held = rep.HeldUnder(50*msec, false)
	if held["llms"] != (Held{Contexts: 8, AtLeast: true}) || held["lmk"] != (Held{Contexts: 4, AtLeast: true}) {
		t.Errorf("held under 50 ms %v", held)
	}
	if s := held["llms"].String(); s != "≥8" {
		t.Errorf("Held.String %q", s)
	}
	js, err := json.Marshal(&rep)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]map[string]map[string]map[string]any
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if v := back["systems"]["llms"]["4"]["switch_ms_mean"]; v != 4.0 {
		t.Errorf("json switch_ms_mean for llms/4 = %v in %s", v, js)
	}
	if v := back["systems"]["lmk"]["2"]["switch_ms_p95"]; v != 14.0 {
		t.Errorf("json switch_ms_p95 for lmk/2 = %v", v)
	}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "switch mean ms") || !strings.Contains(out, "io ms") || strings.Count(out, "\n") != 6 {
		t.Errorf("table:\n%s", out)
	}
}

func TestRealClockRun(t *testing.T) {
	// With the real clock, measured durations include the system's work.
	sys := &sleepSys{}
	res, err := Run(sys, 1, []Arrival{{Tokens: 1}, {At: time.Hour, Tokens: 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Records {
		if r.Switch < 2*msec || r.Call < msec {
			t.Errorf("measured switch %v call %v, below the sleeps", r.Switch, r.Call)
		}
	}
	if res.Records[1].Start != time.Hour {
		t.Errorf("second call starts at %v, want the virtual arrival", res.Records[1].Start)
	}
}

type sleepSys struct{}

func (sleepSys) Name() string                  { return "sleep" }
func (sleepSys) Switch(Arrival) (Parts, error) { time.Sleep(2 * msec); return nil, nil }
func (sleepSys) Call(Arrival) (Parts, error)   { time.Sleep(msec); return nil, nil }
func (sleepSys) Background() (Parts, error)    { return nil, nil }

// TestMedianReport: the switch figures are the medians over rounds, a
// count missing from a round is refused, and HeldUnder reads the medians.
func TestMedianReport(t *testing.T) {
	mk := func(lat ...time.Duration) *Report {
		var rep Report
		for i, l := range lat {
			r := &Result{System: "llms", Contexts: 2 << i}
			r.Records = append(r.Records, Record{Switch: l, Changed: true})
			rep.Add(r)
		}
		return &rep
	}
	reps := []*Report{mk(1*msec, 30*msec), mk(9*msec, 5*msec), mk(2*msec, 40*msec)}
	med, err := MedianReport(reps)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := med.Systems["llms"][2].SwitchMsMean, med.Systems["llms"][4].SwitchMsMean; a != 2 || b != 30 {
		t.Errorf("medians %v and %v; want 2 and 30", a, b)
	}
	if h := med.HeldUnder(10*msec, false)["llms"]; h != (Held{Contexts: 2}) {
		t.Errorf("held under 10 ms of the medians: %v", h)
	}
	if _, err := MedianReport([]*Report{mk(1 * msec), mk(1*msec, 2*msec)}); err == nil {
		t.Error("a count only in round 1 accepted")
	}
	if _, err := MedianReport([]*Report{mk(1*msec, 2*msec), mk(1 * msec)}); err == nil {
		t.Error("a count missing from round 1 accepted")
	}
	if _, err := MedianReport(nil); err == nil {
		t.Error("no reports accepted")
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("Median of 4 values %v", m)
	}
}
