package kv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// benchModels are the decoders BenchmarkDecodeStep runs: the LLaMA test
// model and, when present, the default model (4 layers, dim 128, 128
// positions).
func benchModels() map[string]string {
	out := map[string]string{"llama": modelPath("llama")}
	if p := filepath.Join(modelsDir, "..", "default", "model.onnx"); fileExists(p) {
		out["default"] = p
	}
	return out
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// BenchmarkDecodeStep times one decode step (one token, batch 1) with ctx
// tokens of context, explicitly (past_key_values in, present out: the
// cache goes up, through the Concats and back every step) and with the
// in-place cache (attended length padded to 64, or not padded), on OpenCL
// fp32. Besides the time it reports per step:
// kvcopy-B (bytes the copy kernels moved out of the cache, engine
// Session.LastRunCopies), copy-B (device buffer copies, opencl
// Stats().BytesCopied), up-B and down-B (host to device and back), and
// dev-allocs.
func BenchmarkDecodeStep(b *testing.B) {
	for name, path := range benchModels() {
		for _, ctx := range []int{32, 100, 1000} {
			b.Run(fmt.Sprintf("%s/ctx=%d/explicit", name, ctx), func(b *testing.B) {
				s, err := engine.Open(path, engine.Options{Kernels: testLib, Max: map[string]int64{"batch": 1, "seq": 1024, "past": 1024}})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				e := newExplicit(b, s)
				if _, err := e.step(prompt(ctx)); err != nil {
					b.Fatal(err)
				}
				past, n := e.past, e.n
				benchSteps(b, s, func() error {
					// Every step sees the same ctx tokens of past.
					e.past, e.n = copyMap(past), n
					_, err := e.step([]int{7})
					return err
				})
			})
			for _, pad := range []int{64, 1} {
				b.Run(fmt.Sprintf("%s/ctx=%d/inplace-pad%d", name, ctx, pad), func(b *testing.B) {
					st, err := Open(path, engine.Options{Kernels: testLib}, Config{MaxContext: 1024, Pad: pad})
					if err != nil {
						b.Fatal(err)
					}
					defer st.Session().Close()
					if _, err := st.Forward(prompt(ctx), seq(0, ctx), seq(0, ctx)); err != nil {
						b.Fatal(err)
					}
					benchSteps(b, st.Session(), func() error {
						// Rewriting slot ctx keeps the context at ctx tokens.
						_, err := st.Forward([]int{7}, []int{ctx}, []int{ctx})
						return err
					})
				})
			}
		}
	}
}

func copyMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// benchSteps runs step b.N times and reports the traffic per step.
func benchSteps(b *testing.B, s *engine.Session, step func() error) {
	dev := testLib.Device()
	if err := step(); err != nil { // compile every kernel once
		b.Fatal(err)
	}
	before := dev.Stats()
	var kvCopied int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := step(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		kvCopied += s.LastRunCopies().KVBytes
		b.StartTimer()
	}
	b.StopTimer()
	after := dev.Stats()
	n := float64(b.N)
	b.ReportMetric(float64(kvCopied)/n, "kvcopy-B/op")
	b.ReportMetric(float64(after.BytesCopied-before.BytesCopied)/n, "copy-B/op")
	b.ReportMetric(float64(after.BytesWritten-before.BytesWritten)/n, "up-B/op")
	b.ReportMetric(float64(after.BytesRead-before.BytesRead)/n, "down-B/op")
	b.ReportMetric(float64(after.Allocs-before.Allocs)/n, "dev-allocs/op")
}

// BenchmarkDecodeStepKernels profiles one decode step of the default model
// (else the LLaMA test model) at 100 tokens of context and reports the
// device time of what handles the cache: explicitly the Concats (and the V
// Transposes feeding them), in place the KVWrites, which transpose the new
// rows as they write them; and attention, which in place reads the cache
// through a strided view.
func BenchmarkDecodeStepKernels(b *testing.B) {
	path := modelPath("llama")
	if p, ok := benchModels()["default"]; ok {
		path = p
	}
	dev, err := opencl.Open(opencl.Options{Profile: true})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	lib := kernels.New(dev)
	const ctx = 100
	for _, mode := range []string{"explicit", "inplace"} {
		b.Run(mode, func(b *testing.B) {
			opts := engine.Options{Kernels: lib, Profile: true, Max: map[string]int64{"batch": 1, "seq": 128, "past": 128}}
			var step func() error
			var s *engine.Session
			if mode == "explicit" {
				if s, err = engine.Open(path, opts); err != nil {
					b.Fatal(err)
				}
				e := newExplicit(b, s)
				if _, err := e.step(prompt(ctx)); err != nil {
					b.Fatal(err)
				}
				past, n := e.past, e.n
				step = func() error {
					e.past, e.n = copyMap(past), n
					_, err := e.step([]int{7})
					return err
				}
			} else {
				opts.Max = nil
				st, err := Open(path, opts, Config{MaxContext: 128})
				if err != nil {
					b.Fatal(err)
				}
				s = st.Session()
				if _, err := st.Forward(prompt(ctx), seq(0, ctx), seq(0, ctx)); err != nil {
					b.Fatal(err)
				}
				step = func() error {
					_, err := st.Forward([]int{7}, []int{ctx}, []int{ctx})
					return err
				}
			}
			defer s.Close()
			if err := step(); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Profile(); err != nil { // drop the warm-up
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := step(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			prof, err := s.Profile()
			if err != nil {
				b.Fatal(err)
			}
			var cache, transpose, attn, all float64
			for _, r := range prof {
				all += r.Ms
				switch {
				case r.OpType == "KVWrite" || r.OpType == "Concat" && (strings.HasSuffix(r.Node, "self_attn/Concat_5") || strings.HasSuffix(r.Node, "self_attn/Concat_6")):
					// The export's cache Concats (llama.py's torch.cat of
					// past and new keys, then values).
					cache += r.Ms
				case r.OpType == "Transpose":
					transpose += r.Ms
				case r.OpType == "Attention":
					attn += r.Ms
				}
			}
			n := float64(b.N)
			b.ReportMetric(cache*1000/n, "cache-us/op")
			b.ReportMetric(transpose*1000/n, "transpose-us/op")
			b.ReportMetric(attn*1000/n, "attn-us/op")
			b.ReportMetric(all*1000/n, "device-us/op")
		})
	}
}

// prompt is n token ids inside the smallest vocabulary (256).
func prompt(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (7*i + 1) % 256
	}
	return out
}
