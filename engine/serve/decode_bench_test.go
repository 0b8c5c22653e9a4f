package serve

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/generate"
	"github.com/tlite/tlite/engine/kv"
	"github.com/tlite/tlite/engine/llms"
	"github.com/tlite/tlite/engine/tokenizer"
)

// BenchmarkDecodeStores is the paper's "inference speed with and without
// LLMS" (spec §1b, target: within 5%) on testdata/longctx: four services
// in one process, each over its own model session and holding one context
// of about 1,000 tokens, decode 64 tokens per call in turn for 3 rounds
// (the order rotating each round): the device store (no statistics, the
// session opened without them, as tl serve does), the llms store sampling
// one decode step in 8 (tl serve's default --stats-every) with the
// statistics accumulated on the device, the same reading them back after
// every sampled step (llms.Config.HostStats, the earlier path: llms-host)
// and the llms store gathering statistics at every step. Each llms
// store's background swap-out is waited for after its call (untimed), so
// that it does not slow the next system's decode. It reports each system's
// median decode tokens/s, the per-round ratios to the device store (min
// and max) and the 1-minute load average before and after. Contexts do
// not switch: decode speed only (the switch is BenchmarkExperiment's).
// LLMS_DECODE_TOKENS and LLMS_DECODE_ROUNDS override 64 and 3.
func BenchmarkDecodeStores(b *testing.B) {
	const model = "../../testdata/longctx"
	tokens, rounds := 64, 3
	if v, err := strconv.Atoi(os.Getenv("LLMS_DECODE_TOKENS")); err == nil && v > 1 {
		tokens = v
	}
	if v, err := strconv.Atoi(os.Getenv("LLMS_DECODE_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	tok, err := tokenizer.Load(model + "/tokenizer.json")
	if err != nil {
		b.Fatal(err)
	}
	text, err := os.ReadFile(model + "/heldout_split.txt")
	if err != nil {
		b.Fatal(err)
	}
	system := string(text[:2900])
	maxCtx := 1100 + rounds*(tokens+8)
	systems := []struct {
		name  string
		every int  // 0: the device store
		host  bool // llms.Config.HostStats
	}{{"device", 0, false}, {"llms", 8, false}, {"llms-host", 8, true}, {"llms-every", 1, false}}
	svcs := make([]*Service, len(systems))
	stores := make([]ContextStore, len(systems))
	ids := make([]string, len(systems))
	bg := context.Background()
	for i, sys := range systems {
		d, err := generate.Open(model+"/model.onnx", engine.Options{}, maxCtx, generate.Config{LastOnly: true, AttentionStats: sys.every > 0})
		if err != nil {
			b.Fatal(err)
		}
		st := d.Stepper.(*kv.Stepper).State()
		defer st.Session().Close()
		dir := b.TempDir()
		var store ContextStore
		if sys.every > 0 {
			m, err := llms.NewManager(st, filepath.Join(dir, "kv"), llms.Config{Cost: &testCost, BudgetBytes: 1 << 30, StatsEvery: sys.every, HostStats: sys.host})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			store = NewLLMSStore(m)
		}
		stores[i] = store
		s, err := New(st, tok, store, Config{StateDir: dir, Model: "longctx"})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		svcs[i] = s
		if ids[i], err = s.NewContext("", ""); err != nil {
			b.Fatal(err)
		}
		// The first call prefills the context (not timed).
		if _, err := s.Call(bg, ids[i], system, CallOptions{MaxTokens: 1}); err != nil {
			b.Fatal(err)
		}
	}
	load0 := loadAvg()
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		tps := make([][]float64, len(systems))
		ratios := make([][]float64, len(systems))
		for r := 0; r < rounds; r++ {
			got := make([]float64, len(systems))
			for k := range systems {
				i := (k + r) % len(systems)
				rep, err := svcs[i].Call(bg, ids[i], " And", CallOptions{MaxTokens: tokens, Stop: []string{"never-appears-here"}})
				if err != nil {
					b.Fatal(err)
				}
				if rep.Tokens < 2 || rep.Decode <= 0 {
					b.Fatalf("%s: %d tokens in %v", systems[i].name, rep.Tokens, rep.Decode)
				}
				got[i] = float64(rep.Tokens-1) / rep.Decode.Seconds()
				// The llms stores' ahead-of-time swap-out runs in the
				// background after the call: wait for it, or it would
				// run during the next system's decode (always the same
				// one, the order being a rotation).
				if ls, ok := stores[i].(*LLMSStore); ok {
					if err := ls.Manager().Wait(); err != nil {
						b.Fatal(err)
					}
				}
			}
			for i := range systems {
				tps[i] = append(tps[i], got[i])
				ratios[i] = append(ratios[i], got[i]/got[0])
			}
		}
		for i, sys := range systems {
			slices.Sort(tps[i])
			slices.Sort(ratios[i])
			b.ReportMetric(tps[i][len(tps[i])/2], sys.name+"-tok/s")
			b.Logf("%s: tok/s %.1f, per round %v, ratio to device %v", sys.name, tps[i][len(tps[i])/2], fmtf(tps[i]), fmtf(ratios[i]))
			if i > 0 {
				b.ReportMetric(ratios[i][0], sys.name+"/device-min")
				b.ReportMetric(ratios[i][len(ratios[i])-1], sys.name+"/device-max")
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(load0, "load1-before")
	b.ReportMetric(loadAvg(), "load1-after")
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

func fmtf(v []float64) string {
	var sb strings.Builder
	for i, x := range v {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(strconv.FormatFloat(x, 'f', 3, 64))
	}
	return sb.String()
}
