package serve

import (
	"context"
	"strings"
	"testing"
)

// benchCalls runs calls of 4 new tokens on contexts of about 60 tokens,
// alternating between n contexts (n = 1: the same context every time, so
// the LMK store installs nothing; n = 2: every call switches, so it
// recomputes the whole context). Contexts are renewed every 8 rounds (not
// timed) so that they stay near 60 tokens. It reports the mean switch,
// prefill and decode time per call.
func benchCalls(b *testing.B, n int) {
	st, tok := testModel(b)
	s, err := New(st, tok, nil, Config{StateDir: b.TempDir(), Model: "default"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	bg := context.Background()
	system := strings.Repeat("The quick brown fox. ", 5)
	var ids []string
	renew := func() {
		for _, id := range ids {
			s.Delete(bg, id)
		}
		ids = ids[:0]
		for range n {
			id, err := s.NewContext("bench", system)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Call(bg, id, " Once", CallOptions{MaxTokens: 4}); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	renew()
	var sw, pre, dec float64
	calls := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%8 == 7 {
			b.StopTimer()
			renew()
			b.StartTimer()
		}
		for _, id := range ids {
			r, err := s.Call(bg, id, " and then", CallOptions{MaxTokens: 4, Stop: []string{"never"}})
			if err != nil {
				b.Fatal(err)
			}
			sw += ms(r.Switch.Total())
			pre += ms(r.Prefill)
			dec += ms(r.Decode)
			calls++
		}
	}
	b.ReportMetric(sw/float64(calls), "switch-ms/call")
	b.ReportMetric(pre/float64(calls), "prefill-ms/call")
	b.ReportMetric(dec/float64(calls), "decode-ms/call")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(calls), "ms/call")
}

// BenchmarkCallSameContext: calls on one context (no switch).
func BenchmarkCallSameContext(b *testing.B) { benchCalls(b, 1) }

// BenchmarkCallSwitching: calls alternating between two contexts (the LMK
// store recomputes the context at each switch).
func BenchmarkCallSwitching(b *testing.B) { benchCalls(b, 2) }
