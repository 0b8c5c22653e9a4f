package llms

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sort"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/kv"
)

// sampledEvery is the decode sampling the ranking test holds to its
// tolerance: tl serve's default Config.StatsEvery.
const sampledEvery = 8

// TestSampledStatsRankChunks: density gathered from one decode step in
// sampledEvery (the prefill always) ranks a real model's chunks like
// density gathered at every step. On testdata/longctx, a 384-token
// history is prefilled, then a call prefills a 32-token prompt and
// decodes 192 teacher-forced tokens of held-out text. The call's density
// (prompt and decode rows: the decode rows are 6 in 7 of them) is kept
// three ways: from every step (full), from the sample with each sampled
// row weighted sampledEvery (Density.AddWeighted), and from the prompt
// alone. Tolerance, over the 38 chunks: the sample's chunk densities have
// a Spearman correlation with the full ones of at least 0.95 for the
// call's density and 0.98 for the context's (history plus call), and the
// levels the exact scan picks from the sample keep at least 99% of the
// ctxInfo (Eq. 3, under the full density) of the full density's levels.
// The scan is not compared level by level: with the literal weight it
// jumps between a corner (all 4-bit) and an interior split on small
// changes of nearly equal densities. Controls: the prompt's rows alone
// must miss the Spearman bound (else the decode rows would not matter and
// the test would show nothing), and so must a shuffled ranking.
// Measured when written: Spearman 0.973 (call) and 0.997 (context),
// ctxInfo kept 1.000; sampling 1 in 16 gave 0.980 and 0.951 of ctxInfo
// for the context, 1 in 32 gave 0.62 (logged, not asserted); without the
// weight, 1 in 16 gave 0.91 (call) and 0.78 (context).
func TestSampledStatsRankChunks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs testdata/longctx")
	}
	const hist, prompt, decode, maxCtx = 384, 32, 192, 640
	st, err := kv.Open("../../testdata/longctx/model.onnx", engine.Options{LastLogits: true}, kv.Config{MaxContext: maxCtx, AttentionStats: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Session().Close()
	corpus := longctxCorpus(t)
	toks := corpus[1000 : 1000+hist+prompt+decode]
	slot := func(j int) int {
		if p, ok := st.Position(j); ok && p == j {
			return j
		}
		return -1
	}
	var history, full, sampled, promptOnly Density
	var others [3]Density // sampled 1 in 4, 16, 32 (logged only)
	otherK := [3]int{4, 16, 32}
	add := func(w float64, ds ...*Density) {
		t.Helper()
		stats, err := st.AttentionStats()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if err := d.AddWeighted(stats, slot, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := st.Forward(toks[:hist], seq(hist), seq(hist)); err != nil {
		t.Fatal(err)
	}
	add(1, &history)
	if _, err := st.Forward(toks[hist:hist+prompt], seq(hist + prompt)[hist:], seq(hist + prompt)[hist:]); err != nil {
		t.Fatal(err)
	}
	add(1, &full, &sampled, &promptOnly, &others[0], &others[1], &others[2])
	for i := 0; i < decode; i++ {
		p := hist + prompt + i
		if _, err := st.Forward(toks[p:p+1], []int{p}, []int{p}); err != nil {
			t.Fatal(err)
		}
		if i%sampledEvery == 0 {
			add(1, &full)
			add(sampledEvery, &sampled)
		} else {
			add(1, &full)
		}
		for j, k := range otherK {
			if i%k == 0 {
				add(float64(k), &others[j])
			}
		}
	}
	n := hist + prompt + decode
	chunks := func(d Density) []float64 {
		d.Grow(n)
		var out []float64
		for p := 0; p+16 <= n; p += 16 {
			out = append(out, d.Chunk(p, p+16))
		}
		return out
	}
	plus := func(a, b Density) Density {
		a.Grow(n)
		b.Grow(n)
		c := Density{Sum: make([]float64, n), Count: make([]float64, n), LH: max(a.LH, b.LH)}
		for i := range c.Sum {
			c.Sum[i], c.Count[i] = a.Sum[i]+b.Sum[i], a.Count[i]+b.Count[i]
		}
		return c
	}
	levels := func(d []float64) []Level {
		as, err := Assign(d, []Level{Level8, Level4, Level2}, 0.5, WeightInverse)
		if err != nil {
			t.Fatal(err)
		}
		return as.Levels
	}
	// retained is the ctxInfo (under the full density) of the levels the
	// other density chose, as a fraction of the full density's optimum.
	retained := func(full, other []float64) float64 {
		info := func(lv []Level) float64 {
			v := 0.0
			for i, l := range lv {
				v += WeightInverse(l) * full[i]
			}
			return v
		}
		return info(levels(other)) / info(levels(full))
	}
	shuffled := chunks(full)
	rand.New(rand.NewSource(3)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, c := range []struct {
		name               string
		full, sample, ctrl []float64
		rho                float64
	}{
		{"call", chunks(full), chunks(sampled), chunks(promptOnly), 0.95},
		{"context", chunks(plus(history, full)), chunks(plus(history, sampled)), chunks(plus(history, promptOnly)), 0.98},
	} {
		rs, rc := spearman(c.full, c.sample), spearman(c.full, c.ctrl)
		ks, kc := retained(c.full, c.sample), retained(c.full, c.ctrl)
		t.Logf("%s density over %d chunks, sampled 1 in %d decode steps: Spearman %.4f, ctxInfo retained %.4f; prompt rows only: Spearman %.4f, retained %.4f",
			c.name, len(c.full), sampledEvery, rs, ks, rc, kc)
		if rs < c.rho || ks < 0.99 {
			t.Errorf("%s: the sampled statistics rank chunks with Spearman %.4f and keep %.4f of ctxInfo; want >= %.2f and >= 0.99", c.name, rs, ks, c.rho)
		}
		if rc >= c.rho {
			t.Errorf("%s: the prompt's rows alone rank with Spearman %.4f: the decode rows do not matter here", c.name, rc)
		}
	}
	for j, k := range otherK {
		cf, cs := chunks(plus(history, full)), chunks(plus(history, others[j]))
		t.Logf("context density sampled 1 in %d: Spearman %.4f, ctxInfo retained %.4f", k, spearman(cf, cs), retained(cf, cs))
	}
	if r := spearman(chunks(full), shuffled); r >= 0.9 {
		t.Errorf("a shuffled ranking has Spearman %.4f with the full one: the bound catches nothing", r)
	}
}

// spearman is the rank correlation of a and b (ties get their mean rank).
func spearman(a, b []float64) float64 {
	ra, rb := ranks(a), ranks(b)
	var ma, mb float64
	for i := range ra {
		ma += ra[i]
		mb += rb[i]
	}
	ma /= float64(len(ra))
	mb /= float64(len(rb))
	var sab, saa, sbb float64
	for i := range ra {
		sab += (ra[i] - ma) * (rb[i] - mb)
		saa += (ra[i] - ma) * (ra[i] - ma)
		sbb += (rb[i] - mb) * (rb[i] - mb)
	}
	return sab / math.Sqrt(saa*sbb)
}

func ranks(v []float64) []float64 {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return v[idx[i]] < v[idx[j]] })
	r := make([]float64, len(v))
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && v[idx[j]] == v[idx[i]] {
			j++
		}
		for k := i; k < j; k++ {
			r[idx[k]] = float64(i+j-1) / 2
		}
		i = j
	}
	return r
}

// TestPrepareSamplesDecode: with StatsEvery 4, Prepare leaves the prefill
// and decode steps 0, 4 and 8 of a call with statistics and the others
// without (the session reports engine.ErrNoAttentionStats after them),
// and Observe counts each sampled step's rows 4 times: token 0 of the
// context is attended by the 10 prefill rows and 3 sampled steps standing
// for 4 rows each. Recompute at the next install runs without statistics
// and a Commit right after it counts nothing more; a mode that ranks
// nothing never turns them on.
func TestPrepareSamplesDecode(t *testing.T) {
	for _, host := range []bool{false, true} {
		t.Run(fmt.Sprintf("HostStats=%v", host), func(t *testing.T) { testPrepareSamplesDecode(t, host) })
	}
}

// gathered reports whether err, from AttentionStats after a forward, says
// the forward computed statistics: per forward (nil), or into the device
// totals (an error other than ErrNoAttentionStats) when host is false.
func gathered(t *testing.T, err error, host bool) bool {
	t.Helper()
	switch {
	case err == nil:
		if !host {
			t.Errorf("per-forward statistics while the manager accumulates them on the device")
		}
		return true
	case errors.Is(err, engine.ErrNoAttentionStats):
		return false
	case host:
		t.Fatal(err)
	}
	return true
}

func testPrepareSamplesDecode(t *testing.T, host bool) {
	st := openDefault(t, 128)
	m := newManager(t, st, t.TempDir(), Config{StatsEvery: 4, HostStats: host})
	toks := heldoutTokens(t, 80)
	if _, err := m.Install("a", toks[:30]); err != nil {
		t.Fatal(err)
	}
	if err := m.Prepare(0); err == nil {
		t.Error("Prepare of a forward of 0 tokens accepted")
	}
	step := func(p, q int) {
		t.Helper()
		if err := m.Prepare(q - p); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Forward(toks[p:q], seq(q)[p:], seq(q)[p:]); err != nil {
			t.Fatal(err)
		}
		if err := m.Observe(); err != nil {
			t.Fatal(err)
		}
	}
	step(30, 40)
	if _, err := st.AttentionStats(); !gathered(t, err, host) {
		t.Fatalf("after the prefill: %v", err)
	}
	for i := 0; i < 10; i++ {
		step(40+i, 41+i)
		_, err := st.AttentionStats()
		if sampled := i%4 == 0; sampled != gathered(t, err, host) {
			t.Fatalf("decode step %d: statistics error %v; sampled %v", i, err, sampled)
		}
	}
	if err := m.Commit("a", toks[:50]); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	d := m.ctxs["a"].meta.Density
	m.mu.Unlock()
	// Token 45 is attended by sampled step 8 (row 48) only.
	if d.Count[0] != 10+3*4 || d.Count[45] != 4 || d.Count[49] != 0 {
		t.Errorf("row counts: token 0 %g, 45 %g, 49 %g; want 22, 4, 0", d.Count[0], d.Count[45], d.Count[49])
	}
	// Commit turns the statistics back on for whoever drives the next
	// forward without Prepare.
	if !m.statsOn {
		t.Error("statistics left off after Commit")
	}
	evictAll(t, m, "a")
	if _, err := m.Install("b", toks[:20]); err != nil {
		t.Fatal(err)
	}
	if err := m.Commit("b", toks[:20]); err != nil {
		t.Fatal(err)
	}
	m.choose = func(miss []missingChunk, forced []int) plan {
		var p plan
		for _, c := range miss {
			p.recompute = append(p.recompute, c.idx)
		}
		p.recompute = append(p.recompute, forced...)
		sort.Ints(p.recompute)
		return p
	}
	if _, err := m.Install("a", toks[:50]); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AttentionStats(); !errors.Is(err, engine.ErrNoAttentionStats) {
		t.Errorf("after an install by recompute only, the last forward had statistics (%v)", err)
	}
	if !m.statsOn {
		t.Error("statistics left off after Install")
	}
	// Committing right after the restore counts nothing: the recompute's
	// rows were counted when first computed.
	if err := m.Commit("a", toks[:50]); err != nil {
		t.Fatalf("Commit after an install by recompute: %v", err)
	}
	m.mu.Lock()
	d = m.ctxs["a"].meta.Density
	m.mu.Unlock()
	if d.Count[0] != 10+3*4 {
		t.Errorf("after a restore and a Commit, token 0 is counted %g times; want 22 as before", d.Count[0])
	}

	st2 := openDefault(t, 64)
	newManager(t, st2, t.TempDir(), Config{Mode: ModeSwap})
	if _, err := st2.Forward(toks[:4], seq(4), seq(4)); err != nil {
		t.Fatal(err)
	}
	if _, err := st2.AttentionStats(); !errors.Is(err, engine.ErrNoAttentionStats) {
		t.Errorf("mode swap ranks nothing, yet the forward computed statistics (%v)", err)
	}
}

// TestDeviceStatsMatchHostStats: the manager's density from statistics
// accumulated on the device and taken once per call equals, within fp32
// rounding, the density of a manager that reads them back after every
// sampled forward (Config.HostStats), over two calls of a context (37
// tokens installed, prefills of 10 and 3 tokens, 21 and 9 decode steps
// sampled 1 in 4: lengths off every multiple of 16 and of the stride), a
// failed call between them whose rows count for the context either way
// (an Install refused in between loses none), and a second context; and
// the chunk levels Commit picks agree.
func TestDeviceStatsMatchHostStats(t *testing.T) {
	toks := heldoutTokens(t, 120)
	var dens [2]map[string]Density
	var levels [2]map[string][]Level
	for k, host := range []bool{false, true} {
		st := openDefault(t, 128)
		m := newManager(t, st, t.TempDir(), Config{StatsEvery: 4, HostStats: host})
		if m.accum == host {
			t.Fatalf("HostStats %v: accumulating on the device %v", host, m.accum)
		}
		call := func(id string, have, prompt, decode int, commit bool) {
			t.Helper()
			if _, err := m.Install(id, toks[:have]); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Forward(toks[have:have+prompt], seq(have + prompt)[have:], seq(have + prompt)[have:]); err != nil {
				t.Fatal(err)
			}
			for p := have + prompt; p < have+prompt+decode; p++ {
				if _, err := m.Forward(toks[p:p+1], []int{p}, []int{p}); err != nil {
					t.Fatal(err)
				}
			}
			if commit {
				if err := m.Commit(id, toks[:have+prompt+decode]); err != nil {
					t.Fatal(err)
				}
			}
		}
		call("a", 37, 10, 21, true)
		call("a", 68, 2, 5, false) // fails: no Commit
		if _, err := m.Install("../a", toks[:3]); err == nil {
			t.Fatal("Install of a bad id: no error")
		}
		call("a", 68, 3, 9, true)
		call("b", 19, 4, 13, true)
		dens[k], levels[k] = map[string]Density{}, map[string][]Level{}
		m.mu.Lock()
		for id, c := range m.ctxs {
			dens[k][id] = c.meta.Density
			for _, ch := range c.meta.Chunks {
				levels[k][id] = append(levels[k][id], ch.Level)
			}
		}
		m.mu.Unlock()
	}
	for _, id := range []string{"a", "b"} {
		dev, host := dens[0][id], dens[1][id]
		if dev.LH != host.LH || len(dev.Sum) != len(host.Sum) || len(dev.Sum) == 0 {
			t.Fatalf("%s: device density over %d tokens, %d layer-heads; host %d, %d", id, len(dev.Sum), dev.LH, len(host.Sum), host.LH)
		}
		for j := range dev.Sum {
			if math.Abs(dev.Sum[j]-host.Sum[j]) > 1e-5*(1+math.Abs(host.Sum[j])) || dev.Count[j] != host.Count[j] {
				t.Fatalf("%s token %d: device sum %g over %g rows, host %g over %g", id, j, dev.Sum[j], dev.Count[j], host.Sum[j], host.Count[j])
			}
			// Peaks: the same rows' largest probability, in (0, 1].
			if math.Abs(dev.Peak[j]-host.Peak[j]) > 1e-5 || !(host.Peak[j] > 0 && host.Peak[j] <= 1+1e-6) {
				t.Fatalf("%s token %d: device peak %g, host %g", id, j, dev.Peak[j], host.Peak[j])
			}
		}
		if !slices.Equal(levels[0][id], levels[1][id]) {
			t.Errorf("%s: levels %v from device statistics, %v from host ones", id, levels[0][id], levels[1][id])
		}
	}
	// Token 0 of a: 10 + 3 prefill rows, 6 + 2 + 3 sampled decode steps
	// of 4 rows each (21, 5 and 9 steps), and 2 rows of the failed
	// call's prefill.
	if c := dens[0]["a"].Count[0]; c != 10+3+2+4*(6+2+3) {
		t.Errorf("token 0 of a counted %g times; want %d", c, 10+3+2+4*(6+2+3))
	}
}

// TestPeakTolerance: with Config.Tolerance = TolerancePeak a context's
// chunks hold the levels density assigns (the same multiset) placed by
// their mean token peak, the peaks survive a restart, and an unknown
// tolerance is refused.
func TestPeakTolerance(t *testing.T) {
	toks := heldoutTokens(t, 120)
	dir := t.TempDir()
	var levels [2][]Level
	var peaks []float64
	for k, tol := range []Tolerance{ToleranceDensity, TolerancePeak} {
		st := openDefault(t, 128)
		d := t.TempDir()
		if tol == TolerancePeak {
			d = dir
		}
		m := newManager(t, st, d, Config{Tolerance: tol, Weight: WeightRatio})
		if _, err := m.Install("a", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Forward(toks[:100], seq(100), seq(100)); err != nil {
			t.Fatal(err)
		}
		if err := m.Commit("a", toks[:100]); err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		c := m.ctxs["a"]
		for _, ch := range c.meta.Chunks[:100/16] {
			levels[k] = append(levels[k], ch.Level)
		}
		if tol == TolerancePeak {
			for i := 0; i < 100/16; i++ {
				peaks = append(peaks, c.meta.Density.ChunkPeak(16*i, 16*i+16))
			}
		}
		m.mu.Unlock()
		if err := m.Wait(); err != nil { // the swap-out that persists the table
			t.Fatal(err)
		}
	}
	count := func(ls []Level) string {
		m := map[Level]int{}
		for _, l := range ls {
			m[l]++
		}
		return fmt.Sprint(m)
	}
	if count(levels[0]) != count(levels[1]) || len(levels[0]) != 6 {
		t.Fatalf("density levels %v, peak levels %v: not one multiset", levels[0], levels[1])
	}
	if count(levels[1]) == count([]Level{levels[1][0]}) {
		t.Fatalf("one level for every chunk (%v): nothing to place", levels[1])
	}
	for i := range peaks {
		if !(peaks[i] > 0) {
			t.Fatalf("chunk %d peak %g", i, peaks[i])
		}
		for j := range peaks {
			if peaks[i] > peaks[j] && levels[1][i] < levels[1][j] {
				t.Errorf("chunk %d (peak %g) at %v below chunk %d (peak %g) at %v", i, peaks[i], levels[1][i], j, peaks[j], levels[1][j])
			}
		}
	}
	// The peaks are in the persisted table.
	st := openDefault(t, 128)
	m := newManager(t, st, dir, Config{Tolerance: TolerancePeak})
	m.mu.Lock()
	c := m.ctxs["a"]
	got := 0.0
	if c != nil {
		got = c.meta.Density.ChunkPeak(0, 16)
	}
	m.mu.Unlock()
	if math.Abs(got-peaks[0]) > 1e-12 {
		t.Errorf("after a restart chunk 0's peak is %g; it was %g", got, peaks[0])
	}
	if _, err := NewManager(st, t.TempDir(), Config{Tolerance: 7, Cost: fixedCost}); err == nil {
		t.Error("tolerance 7: no error")
	}
}
