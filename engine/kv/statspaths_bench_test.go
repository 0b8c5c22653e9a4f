package kv

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tlite/tlite/engine"
)

// BenchmarkStatsDecodePaths times decode on testdata/longctx at a depth of
// 1,000 tokens (kv_len 1,024) with the attention statistics LLMS samples
// gathered in each of the ways the engine offers, each over its own
// session, interleaved finely so that a burst of load on a shared
// machine falls on every system alike: blocks of 8 decode steps, the
// systems in turn (the order rotating, and reversed every other block),
// 8 blocks making a 64-step call.
// The systems:
//
//   - device: the session opened without statistics (the device store);
//   - host-read: one step in 8 with statistics, read back after the step
//     (AttentionStats) and folded into per-slot sums on the host, the
//     llms store's path before device accumulation;
//   - device-acc: one step in 8 accumulating them on the device at weight
//     8 (AccumulateAttentionStats), taken once per call (the take is
//     timed with the call's last block);
//   - acc-every: accumulating at every step.
//
// It reports each system's ms per token (median over rounds of 64 steps)
// and the per-round ratios of the device store's time to each system's
// (its speed relative to the device store: median, min, max), with the
// 1-minute load before and after. LLMS_PATH_ROUNDS overrides 12 rounds.
func BenchmarkStatsDecodePaths(b *testing.B) {
	const model = "../../testdata/longctx/model.onnx"
	const depth, block, blocks = 1000, 8, 8
	rounds := 12
	if v, err := strconv.Atoi(os.Getenv("LLMS_PATH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	type system struct {
		name       string
		stats, acc bool
		every      int
		st         *State
		sum, cnt   []float64 // the folded statistics (checked to be used)
		step       int
	}
	systems := []*system{
		{name: "device"},
		{name: "host-read", stats: true, every: 8},
		{name: "device-acc", stats: true, acc: true, every: 8},
		{name: "acc-every", stats: true, acc: true, every: 1},
	}
	for _, sy := range systems {
		st, err := Open(model, engine.Options{Kernels: testLib}, Config{MaxContext: 2048, AttentionStats: sy.stats})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Session().Close()
		sy.st = st
		toks, pos := make([]int, depth), make([]int, depth)
		for j := range toks {
			toks[j], pos[j] = (j*5+1)%st.Vocab(), j
		}
		if _, err := st.Forward(toks, pos, pos); err != nil {
			b.Fatal(err)
		}
		if sy.acc {
			if err := st.AccumulateAttentionStats(float64(sy.every)); err != nil {
				b.Fatal(err)
			}
		}
		sy.sum, sy.cnt = make([]float64, 2048), make([]float64, 2048)
	}
	fold := func(sy *system) {
		if sy.acc {
			t, err := sy.st.TakeAttentionStats()
			if err != nil {
				b.Fatal(err)
			}
			for j := 0; j < t.Slots; j++ {
				sy.sum[j] += float64(t.Sum[j])
				sy.cnt[j] += float64(t.Count[j])
			}
			return
		}
		stats, err := sy.st.AttentionStats()
		if err != nil {
			b.Fatal(err)
		}
		for li, a := range stats {
			for j := 0; j < a.Slots; j++ {
				for h := 0; h < a.Heads; h++ {
					sy.sum[j] += float64(sy.every) * float64(a.Sum[h*a.Slots+j])
				}
				if li == 0 {
					sy.cnt[j] += float64(sy.every) * float64(a.Count[j])
				}
			}
		}
	}
	// runBlock decodes block k of a call on sy and returns its time.
	runBlock := func(sy *system, k int) time.Duration {
		t0 := time.Now()
		for i := 0; i < block; i++ {
			p := depth + k*block + i
			on := sy.stats && sy.step%sy.every == 0
			sy.step++
			if sy.stats {
				if err := sy.st.SetAttentionStats(on); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := sy.st.Forward([]int{(p * 7) % sy.st.Vocab()}, []int{p}, []int{p}); err != nil {
				b.Fatal(err)
			}
			if on && !sy.acc {
				fold(sy)
			}
		}
		if k == blocks-1 {
			if sy.acc {
				fold(sy)
			}
			sl := make([]int, blocks*block)
			for i := range sl {
				sl[i] = depth + i
			}
			if err := sy.st.Free(sl...); err != nil {
				b.Fatal(err)
			}
			sy.step = 0
		}
		return time.Since(t0)
	}
	call := func(r int) []time.Duration {
		d := make([]time.Duration, len(systems))
		for k := 0; k < blocks; k++ {
			for u := range systems {
				// Rotated, and reversed every other block, so that no
				// system always follows the same one.
				if (k+r)%2 == 1 {
					u = len(systems) - 1 - u
				}
				i := (u + k + r) % len(systems)
				d[i] += runBlock(systems[i], k)
			}
		}
		return d
	}
	call(0) // warm-up: programs built, recordings made
	load0 := loadAvg()
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		ms := make([][]float64, len(systems))
		ratio := make([][]float64, len(systems))
		for r := 0; r < rounds; r++ {
			d := call(r)
			for i := range systems {
				ms[i] = append(ms[i], d[i].Seconds()*1e3/float64(blocks*block))
				ratio[i] = append(ratio[i], float64(d[0])/float64(d[i]))
			}
		}
		for i, sy := range systems {
			slices.Sort(ms[i])
			slices.Sort(ratio[i])
			b.ReportMetric(ms[i][len(ms[i])/2], sy.name+"-ms/tok")
			if i > 0 {
				b.ReportMetric(ratio[i][len(ratio[i])/2], sy.name+"/device")
				b.ReportMetric(ratio[i][0], sy.name+"/device-min")
				b.ReportMetric(ratio[i][len(ratio[i])-1], sy.name+"/device-max")
			}
			b.Logf("%s: ms/token median %.3f; speed vs device per round %s", sy.name, ms[i][len(ms[i])/2], fmtRatios(ratio[i]))
		}
	}
	b.StopTimer()
	b.ReportMetric(load0, "load1-before")
	b.ReportMetric(loadAvg(), "load1-after")
	for _, sy := range systems[1:] {
		if sy.cnt[0] == 0 {
			b.Fatalf("%s gathered no statistics", sy.name)
		}
	}
}

func fmtRatios(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.3f", x)
	}
	return strings.Join(s, " ")
}

// loadAvg is the 1-minute load average (0 when /proc is not there).
func loadAvg() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
