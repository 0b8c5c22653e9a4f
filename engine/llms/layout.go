package llms

import (
	"fmt"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/flash"
)

// layout maps a model's cache buffers onto chunks, swap-file regions and
// the device's buffer-major slot layout (kv.State.ReadAllSlots).
type layout struct {
	C         int     // tokens per chunk
	bufs      []Shape // one per cache buffer, in Info().Layers order
	bpg       int     // buffers per region: 2 (a layer's K and V) or 1
	groups    int     // regions: model layers
	maxChunks int     // chunks of a full context
	top       Level   // the largest level a slot must hold
	slot      []int64 // per region: the aligned slot size
	region    []int64 // per region: its offset in the swap file
	fileSize  int64
}

func newLayout(info engine.KVInfo, C int, top Level) (*layout, error) {
	if C <= 0 {
		return nil, fmt.Errorf("llms: chunk of %d tokens", C)
	}
	if len(info.Layers) == 0 {
		return nil, fmt.Errorf("llms: the session's KV cache has no buffers")
	}
	lay := &layout{C: C, top: top, maxChunks: (info.MaxContext + C - 1) / C}
	for _, l := range info.Layers {
		e := 0
		if n := l.KVHeads * l.HeadDim; n > 0 {
			e = l.RowBytes / n
		}
		if e != 4 && e != 2 || e*l.KVHeads*l.HeadDim != l.RowBytes {
			return nil, fmt.Errorf("llms: cache buffer %s: %d bytes per row for %d heads of %d; want fp32 or fp16 storage", l.Name, l.RowBytes, l.KVHeads, l.HeadDim)
		}
		lay.bufs = append(lay.bufs, Shape{Heads: l.KVHeads, Dim: l.HeadDim, ElemSize: e})
	}
	lay.bpg = 1
	if len(lay.bufs)%2 == 0 {
		lay.bpg = 2
	}
	lay.groups = len(lay.bufs) / lay.bpg
	var off int64
	for g := 0; g < lay.groups; g++ {
		s := alignUp(int64(lay.groupSize(g, top, C)))
		lay.slot = append(lay.slot, s)
		lay.region = append(lay.region, off)
		off += s * int64(lay.maxChunks)
	}
	lay.fileSize = off
	return lay, nil
}

func alignUp(x int64) int64 { return (x + flash.BlockSize - 1) / flash.BlockSize * flash.BlockSize }

// groupSize is the encoded bytes of region g's buffers for a chunk of n
// tokens at level l.
func (lay *layout) groupSize(g int, l Level, n int) int {
	s := 0
	for b := g * lay.bpg; b < (g+1)*lay.bpg; b++ {
		s += EncodedSize(l, n, lay.bufs[b])
	}
	return s
}

// chunkSize is the encoded bytes of a whole chunk (all buffers).
func (lay *layout) chunkSize(l Level, n int) int {
	s := 0
	for g := 0; g < lay.groups; g++ {
		s += lay.groupSize(g, l, n)
	}
	return s
}

// slotOff is chunk i's slot in region g.
func (lay *layout) slotOff(g, i int) int64 { return lay.region[g] + int64(i)*lay.slot[g] }

// rowBytes is one slot of buffer b on the device.
func (lay *layout) rowBytes(b int) int {
	s := lay.bufs[b]
	return s.Heads * s.Dim * s.ElemSize
}

// slotBytes is one slot over every buffer.
func (lay *layout) slotBytes() int {
	n := 0
	for b := range lay.bufs {
		n += lay.rowBytes(b)
	}
	return n
}

// tokens is the number of tokens chunk i of a context of n tokens holds.
func (lay *layout) tokens(i, n int) int { return min(lay.C, n-i*lay.C) }

// chunks is the number of chunks of a context of n tokens.
func (lay *layout) chunks(n int) int { return (n + lay.C - 1) / lay.C }

// encChunk is one chunk's encoded bytes, per region (the region's
// buffers' encodings concatenated).
type encChunk struct {
	level  Level
	n      int
	groups [][]byte
}

func (e *encChunk) size() int {
	s := 0
	for _, g := range e.groups {
		s += len(g)
	}
	return s
}

// encode encodes chunk rows taken from a buffer-major device dump: dump
// holds len(slots) rows per buffer; the chunk's rows are rows
// [at, at+n) of each buffer's block.
func (lay *layout) encode(dump []byte, nslots, at, n int, l Level) (*encChunk, error) {
	e := &encChunk{level: l, n: n, groups: make([][]byte, lay.groups)}
	off := 0
	for b, s := range lay.bufs {
		rb := lay.rowBytes(b)
		rows := dump[off+at*rb : off+(at+n)*rb]
		g := b / lay.bpg
		var err error
		e.groups[g], err = EncodeChunk(e.groups[g], rows, n, s, l)
		if err != nil {
			return nil, fmt.Errorf("llms: buffer %d: %w", b, err)
		}
		off += nslots * rb
	}
	return e, nil
}

// decode writes the chunk's rows into a buffer-major upload block of
// nslots rows per buffer, at rows [at, at+n).
func (lay *layout) decode(e *encChunk, dst []byte, nslots, at int) error {
	off := 0
	for g := 0; g < lay.groups; g++ {
		enc := e.groups[g]
		for b := g * lay.bpg; b < (g+1)*lay.bpg; b++ {
			sz := EncodedSize(e.level, e.n, lay.bufs[b])
			if len(enc) < sz {
				return fmt.Errorf("llms: region %d holds %d bytes; a %s chunk of %d tokens needs %d", g, len(e.groups[g]), e.level, e.n, sz)
			}
			rb := lay.rowBytes(b)
			base := 0
			for bb := 0; bb < b; bb++ {
				base += nslots * lay.rowBytes(bb)
			}
			out, err := DecodeChunk(dst[base+at*rb:base+at*rb], enc[:sz], e.n, lay.bufs[b], e.level)
			if err != nil {
				return fmt.Errorf("llms: buffer %d: %w", b, err)
			}
			if len(out) != e.n*rb {
				return fmt.Errorf("llms: buffer %d: decoded %d bytes, want %d", b, len(out), e.n*rb)
			}
			enc = enc[sz:]
		}
		_ = off
	}
	return nil
}

// seq is 0..n-1: the positions (and slots) of a context of n tokens.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
