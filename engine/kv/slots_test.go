package kv

import (
	"bytes"
	"math"
	"math/rand"
	"testing"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/graph/dtype"
)

// slotDevices are the sessions the slot tests run on: OpenCL at fp32 and
// fp16 storage, and the pure-Go device.
var slotDevices = []struct {
	name string
	opts func() engine.Options
}{
	{"opencl", func() engine.Options { return engine.Options{Kernels: testLib} }},
	{"opencl-fp16", func() engine.Options { return engine.Options{Kernels: testLib, Precision: engine.FP16} }},
	{"go", func() engine.Options { return engine.Options{Device: "go"} }},
}

var slotModels = map[string]string{"llama": modelPath("llama"), "default": "../../testdata/default/model.onnx"}

// TestSlotsRoundTrip: rows written into scattered slots of every buffer
// read back bit for bit, neighbours untouched, in the store type's size.
func TestSlotsRoundTrip(t *testing.T) {
	for _, d := range slotDevices {
		for name, path := range slotModels {
			t.Run(d.name+"/"+name, func(t *testing.T) {
				st, err := Open(path, d.opts(), Config{MaxContext: 64})
				if err != nil {
					t.Fatal(err)
				}
				defer st.Session().Close()
				info := st.Info()
				esz := 4
				if d.name == "opencl-fp16" {
					esz = 2
				}
				for _, l := range info.Layers {
					if l.RowBytes != l.KVHeads*l.HeadDim*esz || l.RowBytes == 0 {
						t.Fatalf("%s: RowBytes %d for %d heads of %d at %d bytes", l.Name, l.RowBytes, l.KVHeads, l.HeadDim, esz)
					}
				}
				rng := rand.New(rand.NewSource(7))
				slots := []int{3, 4, 5, 17, 40, 41, 63, 0}
				src := make([]byte, len(slots)*st.SlotBytes())
				rng.Read(src)
				// Before: the neighbours of the written slots.
				nb := []int{2, 6, 16, 18, 39, 42, 62, 1}
				before := make([]byte, len(nb)*st.SlotBytes())
				if err := st.ReadAllSlots(nb, before); err != nil {
					t.Fatal(err)
				}
				if err := st.WriteAllSlots(slots, src); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(src))
				if err := st.ReadAllSlots(slots, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, src) {
					t.Fatal("rows read back differ from the rows written")
				}
				after := make([]byte, len(before))
				if err := st.ReadAllSlots(nb, after); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(before, after) {
					t.Fatal("writing slots changed their neighbours")
				}
				// The per-buffer copies agree with the batched ones.
				each := make([]byte, len(src))
				off0 := 0
				for b := range info.Layers {
					n := len(slots) * st.RowBytes(b)
					if err := st.ReadSlots(b, slots, each[off0:off0+n]); err != nil {
						t.Fatal(err)
					}
					off0 += n
				}
				if !bytes.Equal(each, src) {
					t.Fatal("ReadSlots per buffer disagrees with ReadAllSlots")
				}
				// One buffer alone, in another order.
				one := []int{41, 3}
				row := make([]byte, 2*st.RowBytes(1))
				if err := st.ReadSlots(1, one, row); err != nil {
					t.Fatal(err)
				}
				off := len(slots) * st.RowBytes(0)
				r := st.RowBytes(1)
				if !bytes.Equal(row[:r], src[off+5*r:off+6*r]) || !bytes.Equal(row[r:], src[off:off+r]) {
					t.Fatal("ReadSlots of buffer 1 disagrees with ReadAllSlots' layout")
				}
				// Bad requests are refused, naming what is wrong.
				for _, bad := range []func() error{
					func() error { return st.ReadSlots(len(info.Layers), one, row) },
					func() error { return st.ReadSlots(0, []int{64}, make([]byte, st.RowBytes(0))) },
					func() error { return st.ReadSlots(0, one, row[:1]) },
					func() error { return st.WriteSlots(0, []int{5, 5}, make([]byte, 2*st.RowBytes(0))) },
					func() error { return st.SetPositions([]int{1}, []int{1, 2}) },
					func() error { return st.WriteAllSlots([]int{5, 5}, make([]byte, 2*st.SlotBytes())) },
					func() error { return st.ReadAllSlots([]int{-1}, make([]byte, st.SlotBytes())) },
					func() error { return st.ReadAllSlots([]int{1}, make([]byte, 3)) },
				} {
					if err := bad(); err == nil {
						t.Error("a bad slot request was accepted")
					}
				}
			})
		}
	}
}

// TestSlotsRestore is LLMS's restore path: a context's rows are read
// out, another context overwrites the cache, and the first context is put
// back partly from the saved rows (WriteAllSlots + SetPositions, into
// other slots than before) and partly recomputed at its original
// positions from its tokens; the cache then holds the original bytes (to
// rounding) and the next token's logits equal the uninterrupted run's.
func TestSlotsRestore(t *testing.T) {
	for _, d := range slotDevices {
		for name, path := range slotModels {
			t.Run(d.name+"/"+name, func(t *testing.T) {
				st, err := Open(path, d.opts(), Config{MaxContext: 64})
				if err != nil {
					t.Fatal(err)
				}
				defer st.Session().Close()
				v := st.Vocab()
				rng := rand.New(rand.NewSource(3))
				n := 24
				toks, pos := make([]int, n), make([]int, n)
				for i := range toks {
					toks[i], pos[i] = rng.Intn(v), i
				}
				if _, err := st.Forward(toks, pos, pos); err != nil {
					t.Fatal(err)
				}
				saved := make([]byte, n*st.SlotBytes())
				if err := st.ReadAllSlots(pos, saved); err != nil {
					t.Fatal(err)
				}
				next := rng.Intn(v)
				want, err := st.Forward([]int{next}, []int{n}, []int{n})
				if err != nil {
					t.Fatal(err)
				}
				// Another context overwrites the slots.
				st.Reset()
				other := make([]int, 40)
				for i := range other {
					other[i] = rng.Intn(v)
				}
				opos := make([]int, len(other))
				for i := range opos {
					opos[i] = i
				}
				if _, err := st.Forward(other, opos, opos); err != nil {
					t.Fatal(err)
				}
				st.Reset()
				// Restore: chunks of 4 tokens, even chunks loaded into slots
				// shifted by 30, odd chunks recomputed into their own slots.
				var ld, ldSlot, rc []int
				for i := 0; i < n; i++ {
					if (i/4)%2 == 0 {
						ld, ldSlot = append(ld, i), append(ldSlot, i+30)
					} else {
						rc = append(rc, i)
					}
				}
				rows := make([]byte, len(ld)*st.SlotBytes())
				off := 0
				for b, l := range st.Info().Layers {
					for _, i := range ld {
						src := saved[b*n*l.RowBytes+i*l.RowBytes:]
						off += copy(rows[off:off+l.RowBytes], src[:l.RowBytes])
					}
				}
				if err := st.WriteAllSlots(ldSlot, rows); err != nil {
					t.Fatal(err)
				}
				if err := st.SetPositions(ldSlot, ld); err != nil {
					t.Fatal(err)
				}
				rt := make([]int, len(rc))
				for k, i := range rc {
					rt[k] = toks[i]
				}
				if _, err := st.Forward(rt, rc, rc); err != nil {
					t.Fatal(err)
				}
				if st.Len() != n {
					t.Fatalf("restored context holds %d slots, want %d", st.Len(), n)
				}
				// The recomputed rows equal the originals.
				got := make([]byte, len(rc)*st.SlotBytes())
				if err := st.ReadAllSlots(rc, got); err != nil {
					t.Fatal(err)
				}
				tol := 1e-4
				if d.name == "opencl-fp16" {
					tol = 4e-3
				}
				off = 0
				for b, l := range st.Info().Layers {
					for _, i := range rc {
						w := rowFloats(saved[b*n*l.RowBytes+i*l.RowBytes:][:l.RowBytes], l.Store)
						g := rowFloats(got[off:off+l.RowBytes], l.Store)
						if e := relErr(g, w); e > tol {
							t.Fatalf("%s position %d recomputed off by %.3g", l.Name, i, e)
						}
						off += l.RowBytes
					}
				}
				logits, err := st.Forward([]int{next}, []int{n}, []int{n + 30})
				if err != nil {
					t.Fatal(err)
				}
				if e := relErr(logits, want); e > tol {
					t.Fatalf("next-token logits after the restore differ by %.3g", e)
				}
			})
		}
	}
}

// rowFloats decodes a row in its store type.
func rowFloats(b []byte, store string) []float32 {
	if store == "float16" {
		out := make([]float32, len(b)/2)
		for i := range out {
			out[i] = dtype.HalfToFloat32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
		}
		return out
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return out
}
