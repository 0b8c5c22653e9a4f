package llms

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/flash"
	"github.com/tlite/tlite/engine/kv"
)

// BenchmarkGatedRestore times the restore of a 1,024-token context of
// testdata/longctx (64 compressed chunks, evicted from the pool) through
// the per-layer gate and through the ungated "cheaper variant", the two
// alternating in one process (the order swapped each round), with the
// same forced plan: every LLMS_GATE_STRIDE-th chunk (default 8, from
// chunk 3 on) recomputed and the rest loaded from flash, so that loads lie
// both before and after recomputed chunks. It reports the median install
// time of each, the per-round ratios gated/ungated (min and max) and the
// 1-minute load average before and after. LLMS_GATE_ROUNDS (default 5)
// sets the rounds; LLMS_GATE_MBPS, when set, reads through the flash
// package's throttle at that many MB/s (an emulated slower device,
// labelled in the log: the disk here reads these chunks in tens of
// milliseconds, far less than the recompute forward takes).
func BenchmarkGatedRestore(b *testing.B) {
	rounds, stride := 5, 8
	if v, err := strconv.Atoi(os.Getenv("LLMS_GATE_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	if v, err := strconv.Atoi(os.Getenv("LLMS_GATE_STRIDE")); err == nil && v > 1 {
		stride = v
	}
	const n = 1024
	st, err := kv.Open("../../testdata/longctx/model.onnx", engine.Options{LastLogits: true}, kv.Config{MaxContext: n + 64, AttentionStats: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Session().Close()
	corpus := longctxCorpus(b)
	cfg := Config{Cost: fixedCost}
	if v, err := strconv.ParseFloat(os.Getenv("LLMS_GATE_MBPS"), 64); err == nil && v > 0 {
		cfg.Flash.Throttle = flash.NewThrottle(v*1e6, 0)
		b.Logf("reads through %s", cfg.Flash.Throttle)
	}
	m, err := NewManager(st, b.TempDir(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	hist, other := corpus[:n], corpus[5000:5000+n/4]
	for _, c := range []struct {
		id string
		h  []int
	}{{"a", hist}, {"b", other}} {
		if _, err := m.Install(c.id, c.h); err != nil {
			b.Fatal(err)
		}
		if err := m.Commit(c.id, c.h); err != nil {
			b.Fatal(err)
		}
	}
	rec := map[int]bool{}
	for i := 3; i < n/16; i += stride {
		rec[i] = true
	}
	m.choose = interleaved(rec)
	restore := func(ungated bool) SwitchTimings {
		if _, err := m.Install("b", other); err != nil {
			b.Fatal(err)
		}
		evictAll(b, m, "a")
		m.cfg.Ungated = ungated
		tm, err := m.Install("a", hist)
		if err != nil {
			b.Fatal(err)
		}
		if tm.Recomputed != len(rec) || tm.Loaded != n/16-len(rec) || (len(tm.Layers) > 0) == ungated {
			b.Fatalf("plan not executed: %+v", tm)
		}
		if err := m.Commit("a", hist); err != nil {
			b.Fatal(err)
		}
		return tm
	}
	restore(false)
	restore(true)
	load0 := loadAvg()
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		var tot [2][]float64
		var ratio []float64
		for r := 0; r < rounds; r++ {
			var got [2]SwitchTimings
			for k := 0; k < 2; k++ {
				u := (k + r) % 2
				got[u] = restore(u == 1)
			}
			for u := range got {
				tot[u] = append(tot[u], ms(got[u].Total))
			}
			ratio = append(ratio, ms(got[0].Total)/ms(got[1].Total))
			b.Logf("round %d: gated %.1f ms (io %.1f, io wait %.1f, recompute %.1f, upload %.1f); ungated %.1f ms (io %.1f, io wait %.1f, recompute %.1f, upload %.1f)", r,
				ms(got[0].Total), ms(got[0].IO), ms(got[0].IOWait), ms(got[0].Recompute), ms(got[0].Upload),
				ms(got[1].Total), ms(got[1].IO), ms(got[1].IOWait), ms(got[1].Recompute), ms(got[1].Upload))
		}
		for u, name := range []string{"gated", "ungated"} {
			slices.Sort(tot[u])
			b.ReportMetric(tot[u][len(tot[u])/2], name+"-ms")
		}
		slices.Sort(ratio)
		b.ReportMetric(ratio[0], "gated/ungated-min")
		b.ReportMetric(ratio[len(ratio)-1], "gated/ungated-max")
		b.ReportMetric(ratio[len(ratio)/2], "gated/ungated-median")
	}
	b.StopTimer()
	b.ReportMetric(load0, "load1-before")
	b.ReportMetric(loadAvg(), "load1-after")
	b.ReportMetric(float64(len(rec)), "chunks-recomputed")
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }

// loadAvg is the 1-minute load average (0 when /proc is not there).
func loadAvg() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var v float64
	for i, c := range string(raw) {
		if c == ' ' {
			v, _ = strconv.ParseFloat(string(raw[:i]), 64)
			break
		}
	}
	return v
}
