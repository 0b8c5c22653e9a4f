package engine

// The attention hook (systems-spec §0.3, hooks H2 and H7): a Go callback
// called at every attention that reads the in-place KV cache, with the
// layer's queries and the keys and values the step just wrote, which may
// replace the attention's output with one the host computed (DynaKV's
// attention over a retrieved subset of the cache, kept on flash). It costs
// one device synchronisation per layer: the queries and the new rows are
// read back before the callback runs, and a replacement is written before
// the next step is enqueued.

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/kernels"
)

// AttentionCall is what an AttentionHook receives for one layer of one
// Run. The slices are the hook's to keep until it returns; Out is read
// after.
type AttentionCall struct {
	// Layer is the attention's ordinal among the cache-reading attentions,
	// in program order (0 for the first layer).
	Layer int
	// Rows is the number of queries of the run (the tokens of the step).
	Rows                    int
	Heads, KVHeads, HeadDim int
	// Scale multiplies q·k before the softmax.
	Scale float32
	// Q is the queries, [Rows][Heads][HeadDim] (post-RoPE, as the kernel
	// sees them). Query head h belongs to KV head h/(Heads/KVHeads).
	Q []float32
	// Slots are the cache slots the run wrote, one per row.
	Slots []int
	// Positions are the rows' positions (the run's position ids), one per
	// row. They equal Slots only when the caller fills slots in position
	// order: a hook that keeps its own copy of the cache (DynaKV) may let
	// the caller reuse a small ring of slots, so positions, not slots,
	// name the entries. A model without a position ids input gets the
	// slots here.
	Positions []int
	// KNew and VNew are the rows written into those slots,
	// [Rows][KVHeads][HeadDim]: the keys are post-RoPE.
	KNew, VNew []float32
	// Full is the fused kernel's own output, [Rows][Heads][HeadDim], when
	// the hook was set with shadow on (full attention over the whole
	// cache, masked as the run asked); nil otherwise.
	Full []float32
	// Out, when the hook sets it ([Rows][Heads][HeadDim]), replaces the
	// attention's output; left nil, the fused kernel's output stands.
	Out []float32

	read func(kv int, slots []int, dst []float32) error
}

// ReadK copies the cached keys of slots into dst, [len(slots)][KVHeads][HeadDim]
// (a device read: for tests and shadow computations, not the retrieval
// path, which reads its own store).
func (c *AttentionCall) ReadK(slots []int, dst []float32) error { return c.read(0, slots, dst) }

// ReadV is ReadK for the values.
func (c *AttentionCall) ReadV(slots []int, dst []float32) error { return c.read(1, slots, dst) }

// AttentionHook is called at each cache-reading attention of every Run
// (prefill and decode); see AttentionCall. An error fails the Run.
type AttentionHook func(c *AttentionCall) error

// SetAttentionHook installs h (nil removes it). With shadow, the fused
// kernel runs first and its output is handed to h as AttentionCall.Full
// (one more read per layer), so a hook can compare itself with full
// attention. The hook runs under the session's lock: it must not call the
// session's methods.
func (s *Session) SetAttentionHook(h AttentionHook, shadow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attnHook, s.attnShadow = h, shadow
}

// CacheAttentionLayers is the number of attentions that read the in-place
// cache: the layers an AttentionHook is called for, per Run.
func (s *Session) CacheAttentionLayers() int { return s.attnLayers }

// attnHookSite is the lowering-time part of a hooked attention: which
// layer it is and where the step's slots and cache buffers are.
type attnHookSite struct {
	layer        int
	kCache       *vinfo
	vCache       *vinfo
	slots        *vinfo
	positions    *vinfo // nil when the model has no position ids input
	q, o         *vinfo
	qPerm, oPerm [4]int
}

// hookSite returns the hook site of an attention reading k and v, or nil
// when they are not views of in-place cache buffers written by KVWrite.
func hookSite(lc *lowerCtx, q, k, v, o *vinfo, perms [4][4]int) *attnHookSite {
	sess := lc.c.s
	if lc.host || !sess.kvCacheSet[k.root] || !sess.kvCacheSet[v.root] {
		return nil
	}
	var slots *vinfo
	for _, n := range lc.c.g.Nodes {
		if n.Domain == tlite.Domain && n.OpType == "KVWrite" && len(n.Outputs) > 0 && n.Outputs[0] != nil && len(n.Inputs) > 1 {
			if lc.c.info(n.Outputs[0]).root == k.root {
				slots = lc.c.info(n.Inputs[1])
			}
		}
	}
	if slots == nil {
		return nil
	}
	site := &attnHookSite{layer: sess.attnLayers, kCache: k.root, vCache: v.root, slots: slots, q: q, o: o, qPerm: perms[0], oPerm: perms[3]}
	for _, in := range lc.c.g.Inputs {
		if in != nil && in.Name == KVPositionsInput {
			site.positions = lc.c.info(in)
		}
	}
	sess.attnLayers++
	return site
}

// run executes a hooked attention: kernel (when shadowing or when the hook
// keeps it), reads, the callback, and the replacement write.
func (h *attnHookSite) run(ex *exec, p kernels.AttentionParams, kernel func() error) error {
	s := ex.c.s
	if p.Batch != 1 {
		return fmt.Errorf("attention hook: batch %d; the in-place cache holds one sequence", p.Batch)
	}
	et, esz, err := storeFor(h.q.dt, ex.c.fs)
	if err != nil {
		return err
	}
	H, KVH, Sq, D := p.Heads, p.KVHeads, p.SeqQ, p.HeadDim
	sh, err := ex.hostOf(h.slots)
	if err != nil {
		return fmt.Errorf("attention hook: slots: %w", err)
	}
	slots := hostInts(sh)
	if len(slots) != Sq {
		return fmt.Errorf("attention hook: %d slots for %d queries", len(slots), Sq)
	}
	call := &AttentionCall{Layer: h.layer, Rows: Sq, Heads: H, KVHeads: KVH, HeadDim: D, Scale: p.Scale, Slots: slots, Positions: slots}
	if h.positions != nil {
		ph, err := ex.hostOf(h.positions)
		if err != nil {
			return fmt.Errorf("attention hook: positions: %w", err)
		}
		if call.Positions = hostInts(ph); len(call.Positions) != Sq {
			return fmt.Errorf("attention hook: %d positions for %d queries", len(call.Positions), Sq)
		}
	}
	capacity := s.kvCap
	row := KVH * D
	call.read = func(which int, sl []int, dst []float32) error {
		if len(dst) != len(sl)*row {
			return fmt.Errorf("attention hook: %d floats for %d rows of %d", len(dst), len(sl), row)
		}
		cache := h.kCache
		if which == 1 {
			cache = h.vCache
		}
		ref := ex.refs[cache.id]
		raw := make([]byte, row*esz)
		for i, slot := range sl {
			if slot < 0 || slot >= capacity {
				return fmt.Errorf("attention hook: slot %d outside the cache's %d: %w", slot, capacity, ErrContextFull)
			}
			if err := ex.dev.Read(ref.b.m, (ref.off+slot*row)*esz, raw); err != nil {
				return err
			}
			decodeFloats(raw, et, dst[i*row:(i+1)*row])
		}
		return nil
	}
	if s.attnShadow {
		if err := kernel(); err != nil {
			return err
		}
		full, err := readLayout(ex, h.o, et, esz, p.O, H, Sq, D)
		if err != nil {
			return fmt.Errorf("attention hook: output: %w", err)
		}
		call.Full = full
	}
	if call.Q, err = readLayout(ex, h.q, et, esz, p.Q, H, Sq, D); err != nil {
		return fmt.Errorf("attention hook: queries: %w", err)
	}
	call.KNew, call.VNew = make([]float32, Sq*row), make([]float32, Sq*row)
	if err := call.ReadK(slots, call.KNew); err != nil {
		return err
	}
	if err := call.ReadV(slots, call.VNew); err != nil {
		return err
	}
	if err := s.attnHook(call); err != nil {
		return fmt.Errorf("attention hook, layer %d: %w", h.layer, err)
	}
	if call.Out == nil {
		if s.attnShadow {
			return nil
		}
		return kernel()
	}
	if len(call.Out) != Sq*H*D {
		return fmt.Errorf("attention hook, layer %d: output of %d floats; want %d", h.layer, len(call.Out), Sq*H*D)
	}
	return writeLayout(ex, h.o, et, esz, p.O, H, Sq, D, call.Out)
}

// readLayout reads tensor v (batch 1, laid out as l) into [Sq][H][D].
func readLayout(ex *exec, v *vinfo, et kernels.ElemType, esz int, l kernels.AttnLayout, H, Sq, D int) ([]float32, error) {
	dims := ex.shape(v)
	if ex.err != nil {
		return nil, ex.err
	}
	n := numel(dims)
	raw := make([]byte, n*esz)
	ref := ex.ref(v)
	if err := ex.dev.Read(ref.b.m, ref.off*esz, raw); err != nil {
		return nil, err
	}
	all := make([]float32, n)
	decodeFloats(raw, et, all)
	out := make([]float32, Sq*H*D)
	for i := 0; i < Sq; i++ {
		for h := 0; h < H; h++ {
			src := h*l.Head + i*l.Seq
			copy(out[(i*H+h)*D:(i*H+h+1)*D], all[src:src+D])
		}
	}
	return out, nil
}

// writeLayout writes src ([Sq][H][D]) into tensor v laid out as l.
func writeLayout(ex *exec, v *vinfo, et kernels.ElemType, esz int, l kernels.AttnLayout, H, Sq, D int, src []float32) error {
	dims := ex.shape(v)
	if ex.err != nil {
		return ex.err
	}
	all := make([]float32, numel(dims))
	for i := 0; i < Sq; i++ {
		for h := 0; h < H; h++ {
			dst := h*l.Head + i*l.Seq
			copy(all[dst:dst+D], src[(i*H+h)*D:(i*H+h+1)*D])
		}
	}
	raw := make([]byte, len(all)*esz)
	encodeFloats(all, et, raw)
	ref := ex.ref(v)
	return ex.dev.Write(ref.b.m, ref.off*esz, raw)
}

func decodeFloats(raw []byte, et kernels.ElemType, dst []float32) {
	if et == kernels.EF16 {
		for i := range dst {
			dst[i] = dtype.HalfToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
		return
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
}

func encodeFloats(src []float32, et kernels.ElemType, raw []byte) {
	if et == kernels.EF16 {
		h := &hostTensor{dt: dtype.Float32, shape: []int{len(src)}, data: make([]byte, 4*len(src))}
		for i, f := range src {
			binary.LittleEndian.PutUint32(h.data[4*i:], math.Float32bits(f))
		}
		copy(raw, toStorage(h, et))
		return
	}
	for i, f := range src {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
	}
}

// hostInts reads an int32 or int64 host tensor.
func hostInts(h *hostTensor) []int {
	n := numel(h.shape)
	out := make([]int, n)
	if h.dt == dtype.Int64 {
		for i := range out {
			out[i] = int(int64(binary.LittleEndian.Uint64(h.data[8*i:])))
		}
		return out
	}
	for i := range out {
		out[i] = int(int32(binary.LittleEndian.Uint32(h.data[4*i:])))
	}
	return out
}
