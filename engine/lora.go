package engine

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
)

// LoRA side branches of an elastic model (shared/systems-spec.md §3a.6).
//
// A level's adapters recover what the smaller prefix lost: each bound
// product y = x·W gets y += scale·(x·A)·B next to it, with A [K, r] and
// B [r, N] of a small rank r. The adapters are never merged into W: the
// base weights may be 4-bit and are shared by every level, so merging would
// need a copy per level (or drift when undone in fp32). Instead every
// level's adapters are uploaded once, when they are added, and a switch
// only moves the slots' pointers to another level's buffers: no
// allocation, no program build, no byte written.
//
// The branch runs right after its product, on the product's own input and
// output buffers, as two launches of the device's MatMul: t = x·A into a
// scratch of at most loraChunk rows, then y = scale·t·B + y with y passed
// as its own bias (every MatMul kernel reads an output's bias element and
// writes that output element in the same work-item, so the in-place sum is
// safe). The active sizes follow the elastic binding: the O and down
// adapters read only the active prefix of their input (the columns past it
// hold stale values, see elastic.go), and the Q/K/V/up adapters write only
// the active columns.

// LoRAAdapter is one product's adapter: A is [In, Rank] and B [Rank, Out],
// row-major, where In and Out are the product's stored (100%) K and N.
// The branch adds Scale·(x·A)·B (Scale is alpha/rank).
type LoRAAdapter struct {
	Rank  int
	Scale float32
	A, B  []float32
}

// LoRALayer is one layer's adapters by product; a nil adapter means that
// product has none.
type LoRALayer struct {
	Q, K, V, O, Gate, Up, Down *LoRAAdapter
}

// loraChunk is the most rows of one side-branch launch pair; longer inputs
// run in chunks, so the scratch is bounded by the rank, not the prompt.
var loraChunk = 256

// loraArgs is one product's adapter as uploaded: A stored transposed
// [rank, K] and B transposed [N, rank], the layout the products' dot
// kernels read fastest (TransB).
type loraArgs struct {
	a, b  kernels.Buf
	rank  int
	scale float32
}

// loraSlot is a bound product's side branch: what the step reads and
// writes, its full sizes, the elastic limit it shares with the product,
// and the adapter in use (rank 0: none).
type loraSlot struct {
	x, y         *vinfo
	kFull, nFull int
	lim          *unitLimit
	label        string
	cur          loraArgs
}

// loraSet is one added adapter set: per layer, per product role (q, k, v,
// o, gate, up, down), the uploaded adapter (rank 0: none).
type loraSet struct {
	args [][7]loraArgs
}

// steps lists a bound layer's products in the role order of loraSet.
func (eb *elasticBound) steps() [7]*elasticStep {
	return [7]*elasticStep{&eb.q, &eb.k, &eb.v, &eb.o, &eb.gate, &eb.up, &eb.down}
}

// adapters lists l's adapters in the role order of loraSet.
func (l LoRALayer) adapters() [7]*LoRAAdapter {
	return [7]*LoRAAdapter{l.Q, l.K, l.V, l.O, l.Gate, l.Up, l.Down}
}

var loraRoles = [7]string{"q", "k", "v", "o", "gate", "up", "down"}

// AddLoRA uploads one set of adapters (one per layer, typically one
// level's) and returns its id for UseLoRA. Every shape is checked against
// the bound products before anything is allocated. Adding allocates and
// writes device memory; switching between added sets does not.
func (b *ElasticBinding) AddLoRA(layers []LoRALayer) (int, error) {
	if len(layers) != len(b.layers) {
		return 0, fmt.Errorf("engine: LoRA set has %d layers; the binding has %d", len(layers), len(b.layers))
	}
	total, maxRank := 0, 0
	for l, ly := range layers {
		steps := b.layers[l].steps()
		for r, ad := range ly.adapters() {
			if ad == nil {
				continue
			}
			k, n := steps[r].kFull, steps[r].nFull
			if ad.Rank < 1 || ad.Rank > 1024 {
				return 0, fmt.Errorf("engine: LoRA layer %d %s: rank %d outside 1..1024", l, loraRoles[r], ad.Rank)
			}
			if f := float64(ad.Scale); math.IsNaN(f) || math.IsInf(f, 0) {
				return 0, fmt.Errorf("engine: LoRA layer %d %s: scale %v is not finite", l, loraRoles[r], ad.Scale)
			}
			if len(ad.A) != k*ad.Rank || len(ad.B) != ad.Rank*n {
				return 0, fmt.Errorf("engine: LoRA layer %d %s: A has %d and B %d values; the product is [%d, %d], so rank %d needs %d and %d",
					l, loraRoles[r], len(ad.A), len(ad.B), k, n, ad.Rank, k*ad.Rank, ad.Rank*n)
			}
			total += len(ad.A) + len(ad.B)
			maxRank = max(maxRank, ad.Rank)
		}
	}
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("engine: session is closed")
	}
	fs := s.c.fs
	es := fs.Size()
	if total == 0 {
		// A set without adapters runs the plain prefix.
		b.lora = append(b.lora, loraSet{args: make([][7]loraArgs, len(layers))})
		return len(b.lora) - 1, nil
	}
	buf, err := allocBuffer(s.dev, total*es)
	if err != nil {
		return 0, fmt.Errorf("engine: LoRA set of %d values: %w", total, err)
	}
	if need := loraChunk * maxRank * es; s.loraTmp == nil || s.loraTmp.size < need {
		tmp, err := allocBuffer(s.dev, need)
		if err != nil {
			s.dev.Release(buf.m)
			return 0, fmt.Errorf("engine: LoRA scratch: %w", err)
		}
		if s.loraTmp != nil {
			s.dev.Release(s.loraTmp.m)
		}
		s.loraTmp = tmp
	}
	data := make([]byte, total*es)
	set := loraSet{args: make([][7]loraArgs, len(layers))}
	off := 0
	put := func(v float32, at int) {
		if fs == kernels.F16 {
			binary.LittleEndian.PutUint16(data[2*at:], dtype.Float32ToHalf(v))
		} else {
			binary.LittleEndian.PutUint32(data[4*at:], math.Float32bits(v))
		}
	}
	for l, ly := range layers {
		steps := b.layers[l].steps()
		for r, ad := range ly.adapters() {
			if ad == nil {
				continue
			}
			k, n, rk := steps[r].kFull, steps[r].nFull, ad.Rank
			aOff := off
			for i := 0; i < k; i++ { // A [k, rk] -> [rk, k]
				for j := 0; j < rk; j++ {
					put(ad.A[i*rk+j], aOff+j*k+i)
				}
			}
			bOff := aOff + k*rk
			for i := 0; i < rk; i++ { // B [rk, n] -> [n, rk]
				for j := 0; j < n; j++ {
					put(ad.B[i*n+j], bOff+j*rk+i)
				}
			}
			off = bOff + rk*n
			set.args[l][r] = loraArgs{
				a:    kernels.Buf{Mem: buf.m.Mem, Host: buf.m.Host, Off: aOff},
				b:    kernels.Buf{Mem: buf.m.Mem, Host: buf.m.Host, Off: bOff},
				rank: rk, scale: ad.Scale,
			}
		}
	}
	if err := s.dev.Write(buf.m, 0, data); err != nil {
		s.dev.Release(buf.m)
		return 0, fmt.Errorf("engine: uploading a LoRA set: %w", err)
	}
	s.loraBufs = append(s.loraBufs, buf)
	b.attachLoRASlots()
	b.lora = append(b.lora, set)
	return len(b.lora) - 1, nil
}

// attachLoRASlots gives every bound product its side-branch slot (once;
// the caller holds the session's lock). A slot without an adapter costs
// the step one comparison.
func (b *ElasticBinding) attachLoRASlots() {
	if b.slotsOn {
		return
	}
	for l := range b.layers {
		for _, st := range b.layers[l].steps() {
			n := st.in.node
			sl := &loraSlot{
				x: b.s.c.info(n.Inputs[0]), y: b.s.c.info(n.Outputs[0]),
				kFull: st.kFull, nFull: st.nFull, lim: st.lim, label: n.Name + "/lora",
			}
			st.in.lora = sl
			b.s.nodeOps[sl.label] = "LoRA" // profiles show the branches as their own op
		}
	}
	b.slotsOn = true
}

// UseLoRA makes set id (from AddLoRA) the adapters in use; -1 detaches
// them all, so the plain prefix runs. It only moves pointers: no
// allocation, no program build, no byte written. Like Set, it must not run
// concurrently with Run.
func (b *ElasticBinding) UseLoRA(id int) error {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if id < -1 || id >= len(b.lora) {
		return fmt.Errorf("engine: LoRA set %d: %d sets were added", id, len(b.lora))
	}
	b.loraCur = id
	if !b.slotsOn {
		return nil
	}
	for l := range b.layers {
		for r, st := range b.layers[l].steps() {
			if id < 0 {
				st.in.lora.cur = loraArgs{}
			} else {
				st.in.lora.cur = b.lora[id].args[l][r]
			}
		}
	}
	return nil
}

// LoRA is the set in use (-1: none).
func (b *ElasticBinding) LoRA() int {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.loraCur
}

// runLoRA adds slot's side branch to the output its product just wrote.
func (s *Session) runLoRA(sl *loraSlot) error {
	x := s.x
	ad := sl.cur
	k, n := sl.kFull, sl.nFull
	if lim := sl.lim; lim != nil {
		if lim.k > 0 && lim.k < k {
			k = lim.k
		}
		if lim.n > 0 && lim.n < n {
			n = lim.n
		}
	}
	rows := numel(x.shape(sl.x)) / sl.kFull
	if numel(x.shape(sl.y)) != rows*sl.nFull {
		return fmt.Errorf("LoRA: input %v and output %v are not [%d, %d] and [%d, %d] row for row",
			x.shape(sl.x), x.shape(sl.y), rows, sl.kFull, rows, sl.nFull)
	}
	if s.labels {
		s.dev.SetLabel(sl.label)
	}
	fs := s.c.fs
	xb, yb := x.ref(sl.x).buf(), x.ref(sl.y).buf()
	tmp := kernels.Buf{Mem: s.loraTmp.m.Mem, Host: s.loraTmp.m.Host}
	for m0 := 0; m0 < rows; m0 += loraChunk {
		mc := min(loraChunk, rows-m0)
		xa, ya := xb, yb
		xa.Off += m0 * sl.kFull
		ya.Off += m0 * sl.nFull
		// t = x[:, :k]·A[:k, :]
		if err := s.dev.MatMul(fs, xa, ad.a, tmp, kernels.MatMulParams{
			M: mc, N: ad.rank, K: k, TransB: true, LDA: sl.kFull, LDB: sl.kFull, LDC: ad.rank, Weight: fs,
		}); err != nil {
			return fmt.Errorf("LoRA x·A: %w", err)
		}
		// y[:, :n] = scale·t·B[:, :n] + y[:, :n]
		if err := s.dev.MatMul(fs, tmp, ad.b, ya, kernels.MatMulParams{
			M: mc, N: n, K: ad.rank, TransB: true, LDA: ad.rank, LDB: ad.rank, LDC: sl.nFull,
			Scaled: true, Alpha: ad.scale, Beta: 1, Bias: ya, BiasRowStride: sl.nFull, BiasColStride: 1, Weight: fs,
		}); err != nil {
			return fmt.Errorf("LoRA (x·A)·B: %w", err)
		}
	}
	return nil
}
