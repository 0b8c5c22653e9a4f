package kv

import (
	"testing"

	"github.com/tlite/tlite/engine"
)

// BenchmarkSlots times moving one 16-token chunk of the default model's
// cache (every layer's keys and values) between host and device, as
// LLMS's load and swap-out do, for contiguous and scattered slots, batched
// (gather or scatter on the device, one host copy) and per buffer (one
// host copy per run of slots and buffer).
func BenchmarkSlots(b *testing.B) {
	st, err := Open("../../testdata/default/model.onnx", engine.Options{Kernels: testLib}, Config{MaxContext: 128})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Session().Close()
	contiguous, scattered := make([]int, 16), make([]int, 16)
	for i := range contiguous {
		contiguous[i], scattered[i] = 32+i, 7*i
	}
	buf := make([]byte, 16*st.SlotBytes())
	// The same copies one buffer at a time (one device copy per run of
	// consecutive slots and buffer), for comparison.
	perBuffer := func(write bool) func([]int, []byte) error {
		return func(slots []int, p []byte) error {
			off := 0
			for l := range st.Info().Layers {
				n := len(slots) * st.RowBytes(l)
				var err error
				if write {
					err = st.WriteSlots(l, slots, p[off:off+n])
				} else {
					err = st.ReadSlots(l, slots, p[off:off+n])
				}
				if err != nil {
					return err
				}
				off += n
			}
			return nil
		}
	}
	for _, c := range []struct {
		name  string
		slots []int
		op    func([]int, []byte) error
	}{
		{"read/contiguous/batched", contiguous, st.ReadAllSlots},
		{"read/contiguous/per-buffer", contiguous, perBuffer(false)},
		{"read/scattered/batched", scattered, st.ReadAllSlots},
		{"read/scattered/per-buffer", scattered, perBuffer(false)},
		{"write/contiguous/batched", contiguous, st.WriteAllSlots},
		{"write/contiguous/per-buffer", contiguous, perBuffer(true)},
		{"write/scattered/batched", scattered, st.WriteAllSlots},
		{"write/scattered/per-buffer", scattered, perBuffer(true)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for i := 0; i < b.N; i++ {
				if err := c.op(c.slots, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
