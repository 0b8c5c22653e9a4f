package elastic

import (
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/flash"
	"github.com/tlite/tlite/opencl"
)

// The switch-cost comparison of spec §3c: moving the end pointer
// (SetLevel) against gathering a non-contiguous sub-model into contiguous
// device buffers (an LLMPruner-like order, whose units are not a prefix)
// and against reading a separately stored sub-model from disk with
// O_DIRECT. The sizes are those of the elastic.json in $TLITE_ELASTIC
// (default testdata/elastic/llama), at level $TLITE_ELASTIC_LEVEL (50).
//
//	go test ./engine/elastic -run X -bench Switch -benchtime 20x
func benchSpec(b *testing.B) (*Spec, string, *Level) {
	dir := os.Getenv("TLITE_ELASTIC")
	if dir == "" {
		dir = llamaDir
	}
	spec, err := Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	lv, err := spec.LevelOf(50)
	if err != nil {
		b.Fatal(err)
	}
	return spec, dir, lv
}

// subRows lists, per weight of the level's sub-model, the rows to gather
// (each row one unit's fp32 weights along the model dimension) and the row
// length in bytes, for [units, dim] storage of every elastic weight.
func subRows(spec *Spec, lv *Level, dim int) (rows []int, full []int, rowBytes int) {
	for _, l := range lv.Layers {
		// Q and O: q heads; K and V: kv heads; gate, up, down: neurons.
		for _, r := range []struct{ n, of int }{
			{l.QHeads * spec.HeadDim, spec.NHeads * spec.HeadDim}, {l.QHeads * spec.HeadDim, spec.NHeads * spec.HeadDim},
			{l.KVHeads * spec.HeadDim, spec.NKVHeads * spec.HeadDim}, {l.KVHeads * spec.HeadDim, spec.NKVHeads * spec.HeadDim},
			{l.FFN, spec.FFN}, {l.FFN, spec.FFN}, {l.FFN, spec.FFN},
		} {
			rows, full = append(rows, r.n), append(full, r.of)
		}
	}
	return rows, full, 4 * dim
}

func BenchmarkSwitch(b *testing.B) {
	spec, dir, lv := benchSpec(b)
	dim := spec.HeadDim * spec.NHeads // the model dimension of the test models
	rows, full, rowBytes := subRows(spec, lv, dim)
	var subTotal, fullTotal int
	for i := range rows {
		subTotal += rows[i] * rowBytes
		fullTotal += full[i] * rowBytes
	}
	b.Logf("model %s: level %d%%: sub-model elastic weights %.2f MiB of %.2f MiB", dir, lv.Level, float64(subTotal)/(1<<20), float64(fullTotal)/(1<<20))

	b.Run("pointer", func(b *testing.B) {
		s, err := engine.Open(filepath.Join(dir, "model.onnx"), engine.Options{Device: "go", NoJoin: true})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		m, err := Bind(s, spec)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			l := lv.Level
			if i%2 == 1 {
				l = 100
			}
			if err := m.SetLevel(l); err != nil {
				b.Fatal(err)
			}
		}
	})

	// The same switch with LoRA attached (ELMS's detach, move, attach):
	// between the first two levels that have adapters in dir/lora.
	b.Run("pointer+lora", func(b *testing.B) {
		sets, err := ReadLoRADir(filepath.Join(dir, LoRADir), spec)
		if err != nil {
			b.Fatal(err)
		}
		if len(sets) < 2 {
			b.Fatalf("%s/%s holds adapters for %d levels; the benchmark switches between two", dir, LoRADir, len(sets))
		}
		s, err := engine.Open(filepath.Join(dir, "model.onnx"), engine.Options{Device: "go", NoJoin: true})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		m, err := Bind(s, spec)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := m.AttachLoRA(sets); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := m.SetLevel(sets[i%2].Level); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("gather", func(b *testing.B) {
		dev, err := opencl.Open(opencl.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer dev.Close()
		rng := rand.New(rand.NewSource(1))
		src := make([][]byte, len(rows))
		idx := make([][]int, len(rows))
		bufs := make([]*opencl.Buffer, len(rows))
		stage := make([]byte, 0, fullTotal)
		for i := range rows {
			src[i] = make([]byte, full[i]*rowBytes)
			rng.Read(src[i])
			idx[i] = rng.Perm(full[i])[:rows[i]] // a non-contiguous unit set
			if bufs[i], err = dev.Alloc(max(1, rows[i]*rowBytes)); err != nil {
				b.Fatal(err)
			}
			defer bufs[i].Release()
		}
		b.SetBytes(int64(subTotal))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			for w := range rows {
				stage = stage[:0]
				for _, r := range idx[w] {
					stage = append(stage, src[w][r*rowBytes:(r+1)*rowBytes]...)
				}
				if err := dev.Write(bufs[w], 0, stage); err != nil {
					b.Fatal(err)
				}
			}
			if err := dev.Finish(); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("disk", func(b *testing.B) {
		// A separately stored sub-model, read whole with O_DIRECT (the
		// page cache is bypassed, so every iteration reads the device).
		path := filepath.Join(b.TempDir(), "sub.bin")
		data := flash.AlignedBuf(subTotal)
		rand.New(rand.NewSource(2)).Read(data)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			b.Fatal(err)
		}
		f, err := flash.Open(path, flash.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		dst := flash.AlignedBuf(subTotal)
		b.SetBytes(int64(subTotal))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := f.ReadAt(dst, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWQ4096 is the paper's micro-benchmark (§2.2): upgrading a
// 4096x4096 W_Q from 50% to 100% of its heads. The elastic weight only
// changes the active N it is launched with; a non-contiguous sub-model
// gathers the chosen rows of the 4-bit packed [N, K] weight (K/2 bytes of
// codes and 2 fp32 parameters per group of 32 per row) and uploads them.
// The pointer side is BenchmarkSwitch/pointer: Set writes a few integers
// per weight whatever the weight's size.
func BenchmarkWQ4096(b *testing.B) {
	const n, k, group = 4096, 4096, 32
	rowBytes := k/2 + 2*4*(k/group)
	b.Run("gather", func(b *testing.B) {
		dev, err := opencl.Open(opencl.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer dev.Close()
		src := make([]byte, n*rowBytes)
		rand.New(rand.NewSource(3)).Read(src)
		idx := rand.New(rand.NewSource(4)).Perm(n)[:n/2]
		buf, err := dev.Alloc(n * rowBytes)
		if err != nil {
			b.Fatal(err)
		}
		defer buf.Release()
		stage := make([]byte, 0, n*rowBytes)
		b.SetBytes(int64(len(idx) * rowBytes))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			stage = stage[:0]
			for _, r := range idx {
				stage = append(stage, src[r*rowBytes:(r+1)*rowBytes]...)
			}
			if err := dev.Write(buf, 0, stage); err != nil {
				b.Fatal(err)
			}
			if err := dev.Finish(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
