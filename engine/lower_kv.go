package engine

// In-place KV cache for exported decoders (Transformer-Lite style): the
// session side. With Options.KVCache the graph is rewritten after the
// fusion passes by engine/fuse's KVCache pass (engine/fuse/kvcache.go
// describes the rewritten model); this file holds the configuration, the
// maxima the rewrite implies, the lowering of tlite.KVWrite (the session
// owns one device buffer per cache tensor, sized for KVConfig.MaxContext
// tokens and allocated once at Open) and the session's reports on the
// cache and on copy traffic.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/tlite/tlite/engine/fuse"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// Names of the rewritten model's cache inputs and of the attended length
// (engine/fuse's KV-cache pass documents them).
const (
	KVSlotsInput     = fuse.KVSlotsInput
	KVBiasInput      = fuse.KVBiasInput
	KVPositionsInput = fuse.KVPositionsInput
	KVLengthSymbol   = fuse.KVLengthSymbol
)

// ErrContextFull is returned (wrapped) when tokens do not fit in a
// context: a position or slot beyond an in-place cache (here and in
// engine/kv), or a prompt longer than a model's context (engine/generate).
// It is the one sentinel for it, so errors.Is works across the layers.
var ErrContextFull = errors.New("context full")

// KVCacheError is the error Open returns when the in-place KV cache
// (Options.KVCache) cannot be applied to the model: it says which node
// reads the cache in a way the rewrite does not know. The model itself may
// still open without Options.KVCache (its cache fed back as exported).
type KVCacheError struct {
	Err error
}

func (e *KVCacheError) Error() string { return "engine: in-place KV cache: " + e.Err.Error() }

// Unwrap returns the rewrite's error.
func (e *KVCacheError) Unwrap() error { return e.Err }

// DefaultKVPad is the multiple the attended length is rounded up to when
// KVConfig.Pad is 0.
const DefaultKVPad = 64

// KVConfig turns on the in-place KV cache (Options.KVCache).
type KVConfig struct {
	// MaxContext is the number of token slots per layer's cache: the most
	// tokens a sequence holds. Required.
	MaxContext int
	// Pad is the multiple the attended length (kv_len) is rounded up to; 0
	// means DefaultKVPad, 1 no padding. The session does not pad by itself:
	// it is the policy engine/kv follows when building kv_bias.
	Pad int
	// AttentionStats makes every attention that reads the cache also sum
	// each slot's softmax probabilities over the run's rows and count the
	// rows that may attend it (Session.AttentionStats): one more kernel per
	// layer and 12 bytes per query head and slot of device memory.
	AttentionStats bool
}

// normalized fills the defaults and validates.
func (c KVConfig) normalized() (KVConfig, error) {
	if c.MaxContext <= 0 {
		return c, fmt.Errorf("engine: KVConfig.MaxContext = %d; want the number of cache slots (> 0)", c.MaxContext)
	}
	if c.Pad == 0 {
		c.Pad = DefaultKVPad
	}
	if c.Pad < 0 {
		return c, fmt.Errorf("engine: KVConfig.Pad = %d; want >= 0", c.Pad)
	}
	return c, nil
}

// KVLayer is one cache buffer of a session's in-place KV cache.
type KVLayer struct {
	// Name is the past input the buffer replaces ("past_key_values.0.key";
	// for a stacked input, "past_key_values.0[1]" for its second half).
	Name    string
	KVHeads int
	HeadDim int
	// Bytes is the buffer's device size.
	Bytes int64
	// RowBytes is one slot's keys or values (KVHeads x HeadDim elements of
	// the store type): the unit ReadKVSlots and WriteKVSlots copy.
	RowBytes int
	// Store is the element type the buffer holds: "float32" or "float16"
	// (Options.Precision).
	Store string
	// Fallback, when set, says which node cannot read this cache tensor
	// in place and why: the buffer is then copied into the export's
	// layout for its readers every step (one line; see KVInfo.Ordered).
	Fallback string
}

// KVInfo describes the in-place KV cache of a session opened with
// Options.KVCache.
type KVInfo struct {
	KVConfig
	// Layers lists the buffers in the order the program writes them.
	Layers []KVLayer
	// Ordered is set when some layer falls back (KVLayer.Fallback): its
	// readers may mask with the model's own mask, computed from the past
	// length, so slot i must hold position i, every slot below kv_len
	// must be filled and kv_len is not padded (Pad is 1).
	Ordered bool
}

// Fallbacks returns one line per cache tensor that falls back to a copy
// (KVLayer.Fallback), naming the buffer, the node and why.
func (k KVInfo) Fallbacks() []string {
	var out []string
	for _, l := range k.Layers {
		if l.Fallback != "" {
			out = append(out, fmt.Sprintf("in-place KV cache: %s falls back to a copy into the export's layout each step: %s", l.Name, l.Fallback))
		}
	}
	return out
}

// Bytes is the device memory of all cache buffers.
func (k KVInfo) Bytes() int64 {
	var n int64
	for _, l := range k.Layers {
		n += l.Bytes
	}
	return n
}

// KVInfo returns the session's in-place KV cache, ok false when it was not
// opened with Options.KVCache.
func (s *Session) KVInfo() (KVInfo, bool) {
	if s.c == nil {
		return KVInfo{}, false
	}
	var info KVInfo
	found := false
	for _, in := range s.c.prog {
		n := in.node
		if in.kind != iDevice || n.Domain != tlite.Domain || n.OpType != "KVWrite" {
			continue
		}
		found = true
		info.MaxContext = int(n.AttrInt("capacity", 0))
		info.Pad = int(n.AttrInt("pad", DefaultKVPad))
		cache := s.c.info(n.Outputs[0]).root
		_, esz, _ := storeFor(cache.dt, s.c.fs)
		l := KVLayer{Name: n.AttrString("cache", n.Name), Fallback: n.AttrString("fallback", "")}
		if n.AttrInt("ordered", 0) != 0 {
			info.Ordered = true
		}
		if len(cache.shape) == 3 {
			h, _ := cache.shape[1].Const()
			d, _ := cache.shape[2].Const()
			l.KVHeads, l.HeadDim = int(h), int(d)
		}
		l.Bytes = int64(info.MaxContext) * int64(l.KVHeads) * int64(l.HeadDim) * int64(esz)
		l.RowBytes = l.KVHeads * l.HeadDim * esz
		l.Store = "float32"
		if esz == 2 {
			l.Store = "float16"
		}
		info.Layers = append(info.Layers, l)
	}
	return info, found
}

// applyKVCache is compile's hook for Options.KVCache: it runs the KV-cache
// pass (which also updates res's symbol list) and sets the maxima it
// implies: batch 1, kv_len and seq at most MaxContext.
func (s *Session) applyKVCache(g *graph.Graph, res *infer.Result, opts *Options) error {
	cfg, err := opts.KVCache.normalized()
	if err != nil {
		return err
	}
	rw, err := fuse.KVCache(g, res, cfg.MaxContext, cfg.Pad)
	if err != nil {
		return &KVCacheError{Err: err}
	}
	maxima := map[string]int64{}
	for k, v := range opts.Max {
		maxima[k] = v
	}
	ctx := int64(cfg.MaxContext)
	maxima[KVLengthSymbol] = ctx
	if rw.Seq != "" {
		if v, ok := maxima[rw.Seq]; !ok || v > ctx {
			maxima[rw.Seq] = ctx
		}
	}
	if rw.Batch != "" {
		maxima[rw.Batch] = 1
	}
	opts.Max = maxima
	s.kvStats, s.kvCap = cfg.AttentionStats, cfg.MaxContext
	return nil
}

// kvCaches returns the cache buffers in KVInfo's order.
func (s *Session) kvCaches() []*vinfo {
	var out []*vinfo
	for _, in := range s.c.prog {
		n := in.node
		if in.kind == iDevice && n.Domain == tlite.Domain && n.OpType == "KVWrite" {
			out = append(out, s.c.info(n.Outputs[0]).root)
		}
	}
	return out
}

// ReadKVSlots copies the rows of the given slots of cache buffer layer
// (an index into KVInfo().Layers) into dst, slot after slot, each
// KVLayer.RowBytes long, in the buffer's store type: dst must hold exactly
// len(slots) rows. Runs of consecutive slots are one device read each.
// It waits for the runs enqueued before it, and is serialised with Run.
func (s *Session) ReadKVSlots(layer int, slots []int, dst []byte) error {
	return s.kvSlots("ReadKVSlots", layer, slots, dst, false)
}

// WriteKVSlots copies src, len(slots) rows of KVLayer.RowBytes in the
// buffer's store type, into the given slots of cache buffer layer. Slots
// must be distinct. Runs of consecutive slots are one device write each.
func (s *Session) WriteKVSlots(layer int, slots []int, src []byte) error {
	return s.kvSlots("WriteKVSlots", layer, slots, src, true)
}

// ReadAllKVSlots reads the given slots of every cache buffer into dst,
// buffer-major (buffer 0's len(slots) rows, then buffer 1's, ...), with one
// device-to-host copy in all: each buffer's rows are gathered on the
// device into a staging buffer first. WriteAllKVSlots is its inverse
// (one host-to-device copy, then one scatter per buffer). For slots that
// are not one contiguous run they beat per-buffer copies by the number of
// runs times the buffers.
func (s *Session) ReadAllKVSlots(slots []int, dst []byte) error {
	return s.allKVSlots("ReadAllKVSlots", slots, dst, false)
}

// WriteAllKVSlots writes src, laid out as ReadAllKVSlots returns it, into
// the given (distinct) slots of every cache buffer.
func (s *Session) WriteAllKVSlots(slots []int, src []byte) error {
	return s.allKVSlots("WriteAllKVSlots", slots, src, true)
}

func (s *Session) allKVSlots(what string, slots []int, p []byte, write bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("engine: %s on a closed session", what)
	}
	return s.batchKVSlots(what, nil, slots, p, write)
}

// batchKVSlots is allKVSlots over the cache buffers bufs (indices into
// KVInfo().Layers, ascending; nil: all), with the session's lock held.
func (s *Session) batchKVSlots(what string, bufs []int, slots []int, p []byte, write bool) error {
	info, ok := s.KVInfo()
	if !ok {
		return fmt.Errorf("engine: %s: the session has no in-place KV cache", what)
	}
	if bufs == nil {
		for i := range info.Layers {
			bufs = append(bufs, i)
		}
	}
	total := 0
	for k, b := range bufs {
		if b < 0 || b >= len(info.Layers) || (k > 0 && b <= bufs[k-1]) {
			return fmt.Errorf("engine: %s: cache buffers %v: want ascending indices below %d", what, bufs, len(info.Layers))
		}
		total += info.Layers[b].RowBytes
	}
	if len(p) != len(slots)*total {
		return fmt.Errorf("engine: %s: %d bytes for %d slots of %d bytes across %d buffers", what, len(p), len(slots), total, len(bufs))
	}
	if err := checkSlots(what, slots, info.MaxContext, write); err != nil {
		return err
	}
	if len(slots) == 0 {
		return nil
	}
	idx := make([]byte, 8*len(slots))
	for i, sl := range slots {
		binary.LittleEndian.PutUint64(idx[8*i:], uint64(sl))
	}
	ib, err := allocBuffer(s.dev, len(idx))
	if err != nil {
		return fmt.Errorf("engine: %s: %w", what, err)
	}
	defer s.dev.Release(ib.m)
	stage, err := allocBuffer(s.dev, len(p))
	if err != nil {
		return fmt.Errorf("engine: %s: staging %d bytes: %w", what, len(p), err)
	}
	defer s.dev.Release(stage.m)
	if err := s.dev.Write(ib.m, 0, idx); err != nil {
		return fmt.Errorf("engine: %s: %w", what, err)
	}
	if write {
		if err := s.dev.Write(stage.m, 0, p); err != nil {
			return fmt.Errorf("engine: %s: %w", what, err)
		}
	}
	caches := s.kvCaches()
	off, n := 0, len(slots)
	for _, i := range bufs {
		l := info.Layers[i]
		esz := l.RowBytes / (l.KVHeads * l.HeadDim)
		cache := s.x.refs[caches[i].id].buf()
		part := kernels.Buf{Mem: stage.m.Mem, Host: stage.m.Host, Off: off / esz}
		if write {
			cv := kernels.View{Shape: []int{1, l.KVHeads, info.MaxContext, l.HeadDim}, Strides: []int{info.MaxContext * l.KVHeads * l.HeadDim, l.HeadDim, l.KVHeads * l.HeadDim, 1}}
			sv := kernels.View{Shape: []int{1, l.KVHeads, n, l.HeadDim}, Strides: []int{n * l.KVHeads * l.HeadDim, l.HeadDim, l.KVHeads * l.HeadDim, 1}}
			err = s.dev.KVWrite(esz, cache, cv, part, sv, ib.m, dtype.Int64, false)
		} else {
			err = s.dev.Gather(esz, cache, []int{info.MaxContext, l.KVHeads * l.HeadDim}, 0, ib.m, dtype.Int64, n, part)
		}
		if err != nil {
			return fmt.Errorf("engine: %s %s: %w", what, l.Name, err)
		}
		off += n * l.RowBytes
	}
	if write {
		// The staging buffer is released on return: the scatters must be done.
		if err := s.dev.Finish(); err != nil {
			return fmt.Errorf("engine: %s: %w", what, err)
		}
		return nil
	}
	if err := s.dev.Read(stage.m, 0, p); err != nil {
		return fmt.Errorf("engine: %s: %w", what, err)
	}
	return nil
}

// checkSlots validates slot indices (distinct when written).
func checkSlots(what string, slots []int, capacity int, distinct bool) error {
	seen := make(map[int]bool, len(slots))
	for i, sl := range slots {
		if sl < 0 || sl >= capacity {
			return fmt.Errorf("engine: %s: slot %d (index %d) outside the cache's %d slots: %w", what, sl, i, capacity, ErrContextFull)
		}
		if distinct && seen[sl] {
			return fmt.Errorf("engine: %s: slot %d written twice", what, sl)
		}
		seen[sl] = true
	}
	return nil
}

func (s *Session) kvSlots(what string, layer int, slots []int, p []byte, write bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("engine: %s on a closed session", what)
	}
	return s.kvSlotsLocked(what, layer, slots, p, write)
}

// kvSlotsLocked is kvSlots with the session's lock held (by the caller or
// by the Run a LayerGate is called from).
func (s *Session) kvSlotsLocked(what string, layer int, slots []int, p []byte, write bool) error {
	caches := s.kvCaches()
	if layer < 0 || layer >= len(caches) {
		return fmt.Errorf("engine: %s: cache buffer %d of %d", what, layer, len(caches))
	}
	info, _ := s.KVInfo()
	l := info.Layers[layer]
	if len(p) != len(slots)*l.RowBytes {
		return fmt.Errorf("engine: %s: %d bytes for %d slots of %d bytes (%s)", what, len(p), len(slots), l.RowBytes, l.Name)
	}
	if err := checkSlots(what, slots, info.MaxContext, write); err != nil {
		return err
	}
	b := s.x.refs[caches[layer].id].buf()
	for i := 0; i < len(slots); {
		j := i + 1
		for j < len(slots) && slots[j] == slots[j-1]+1 {
			j++
		}
		off, part := slots[i]*l.RowBytes, p[i*l.RowBytes:j*l.RowBytes]
		var err error
		if write {
			err = s.dev.Write(b, off, part)
		} else {
			err = s.dev.Read(b, off, part)
		}
		if err != nil {
			return fmt.Errorf("engine: %s %s slots %d..%d: %w", what, l.Name, slots[i], slots[j-1], err)
		}
		i = j
	}
	return nil
}

func init() {
	registerLowering(lowerKVWrite, tlite.Key(tlite.KVWrite))
}

// lowerKVWrite lowers ("tlite", "KVWrite")(new, slots) -> view. The cache
// buffer is a constant of the lowering (zeros, uploaded once at Open, so
// that slots never written hold finite numbers under a mask); the view
// shares it: a device step writes into it, and attention reads it where
// the view is read.
func lowerKVWrite(lc *lowerCtx) (*stepDef, error) {
	n := lc.n
	if lc.host {
		return nil, lc.unsupported("KVWrite writes session state; it never runs on the host")
	}
	src, slots, view := lc.in(0), lc.in(1), lc.out(0)
	if src == nil || slots == nil || view == nil {
		return nil, lc.unsupported("needs new rows, slots and an output")
	}
	if slots.dt != dtype.Int64 && slots.dt != dtype.Int32 {
		return nil, lc.unsupported("slots %s are %v; want int32 or int64", slots.name, slots.dt)
	}
	if len(src.shape) != 4 || len(view.shape) != 4 {
		return nil, lc.unsupported("new rows %s %s and view %s: want rank 4", src.name, symshape.FormatShape(src.shape), symshape.FormatShape(view.shape))
	}
	for _, o := range lc.c.g.Outputs {
		if o == n.Outputs[0] {
			// The view shares the cache buffer, which the host never
			// mirrors; an op reading it makes a copy that can be returned.
			return nil, lc.unsupported("its view %s is a graph output; read it through an op instead", view.name)
		}
	}
	esz, err := lc.esize(src)
	if err != nil {
		return nil, err
	}
	capacity := int(n.AttrInt("capacity", 0))
	if capacity <= 0 {
		return nil, lc.unsupported("capacity %d", capacity)
	}
	perm := []int{0, 1, 2, 3}
	if p, ok := n.AttrInts("new_perm"); ok {
		if len(p) != 4 {
			return nil, lc.unsupported("new_perm %v; want 4 axes", p)
		}
		for i, a := range p {
			perm[i] = int(a)
		}
	}
	h, okH := src.shape[perm[1]].Const()
	d, okD := src.shape[perm[3]].Const()
	if !okH || !okD {
		return nil, lc.unsupported("new rows %s: heads and head size must be constants", symshape.FormatShape(src.shape))
	}
	heads, hd := int(h), int(d)
	cache := lc.newConst(n.AttrString("cache", n.Name)+" (kv cache)", newHostTensor(src.dt, []int{capacity, heads, hd}))
	cache.devUse = true
	view.root = cache
	if lc.c.s.kvCacheSet == nil {
		lc.c.s.kvCacheSet = map[*vinfo]bool{}
	}
	lc.c.s.kvCacheSet[cache] = true
	// [batch 1, heads, slot, head_dim] over the [slot, heads, head_dim] buffer.
	cv := kernels.View{Shape: []int{1, heads, capacity, hd}, Strides: []int{capacity * heads * hd, hd, heads * hd, 1}}
	return &stepDef{kernel: "kv", run: func(ex *exec) error {
		sv, err := kernels.ContiguousView(ex.shape(src)).Permute(perm)
		if err != nil {
			return err
		}
		vs := ex.shape(view)
		if ex.err != nil {
			return ex.err
		}
		if sv.Shape[0] != 1 {
			return fmt.Errorf("new rows of batch %d; the in-place cache holds one sequence", sv.Shape[0])
		}
		if sv.Shape[1] != heads || sv.Shape[3] != hd {
			return fmt.Errorf("new rows %v (read through %v) do not fit a cache of %d heads of %d", ex.shape(src), perm, heads, hd)
		}
		if vs[1] > capacity {
			return fmt.Errorf("%s = %d is beyond the cache's %d slots: %w", KVLengthSymbol, vs[1], capacity, ErrContextFull)
		}
		if ns := numel(ex.shape(slots)); ns != sv.Shape[2] {
			return fmt.Errorf("%d slots for %d new rows", ns, sv.Shape[2])
		}
		return ex.dev.KVWrite(esz, ex.ref(cache).buf(), cv, ex.ref(src).buf(), sv, ex.ref(slots).buf(), slots.dt, false)
	}}, nil
}

// CopyStats counts what the copy steps (the data-movement family:
// Concat, Transpose, Slice, Split, Gather, Expand, Pad, ...) of the last
// Run wrote. The device's own Stats().BytesCopied counts buffer-to-buffer
// copies only; these steps are kernels.
type CopyStats struct {
	// Steps and Bytes cover every copy step.
	Steps int
	Bytes int64
	// KVSteps and KVBytes cover the copy steps that read cache contents: a
	// past input, a present tensor, or a view of an in-place cache (and
	// anything copied from those).
	KVSteps int
	KVBytes int64
	// KVWritten is what the in-place cache writes (KVWrite steps) wrote:
	// the new rows only. It is no copy step and not in Bytes.
	KVWritten int64
}

// LastRunCopies returns the copy traffic of the last Run.
func (s *Session) LastRunCopies() CopyStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st CopyStats
	if s.c == nil || s.x == nil {
		return st
	}
	c, x := s.c, s.x
	kv := s.kvValues()
	for _, in := range c.prog {
		if in.kind == iDevice && opKey(in.node.Domain, in.node.OpType) == tlite.Key(tlite.KVWrite) {
			src := c.info(in.node.Inputs[0])
			if dims := x.dims[src.id]; dims != nil {
				_, esz, _ := storeFor(src.dt, c.fs)
				st.KVWritten += int64(numel(dims) * esz)
			}
		}
		if in.kind != iDevice || in.step.kernel != "move" {
			continue
		}
		reads := false
		for _, v := range in.node.Inputs {
			if v != nil && kv[c.info(v).root] {
				reads = true
			}
		}
		for _, o := range in.node.Outputs {
			if o == nil {
				continue
			}
			vi := c.info(o)
			dims := x.dims[vi.id]
			if dims == nil {
				continue
			}
			_, esz, err := storeFor(vi.dt, c.fs)
			if err != nil {
				continue
			}
			b := int64(numel(dims) * esz)
			st.Steps++
			st.Bytes += b
			if reads {
				st.KVSteps++
				st.KVBytes += b
			}
		}
	}
	return st
}

// kvValues returns the roots holding cache contents: the past inputs of a
// Concat-grown cache, in-place cache buffers, and whatever is copied or
// viewed from them, in program order.
func (s *Session) kvValues() map[*vinfo]bool {
	c := s.c
	kv := map[*vinfo]bool{}
	for _, src := range fuse.KVPastSources(c.g) {
		kv[c.info(src).root] = true
	}
	move := map[*graph.Node]bool{}
	for _, in := range c.prog {
		if in.kind == iDevice && in.step.kernel == "move" {
			move[in.node] = true
		}
	}
	for _, n := range c.g.Nodes {
		key := opKey(n.Domain, n.OpType)
		if key == tlite.Key(tlite.KVWrite) {
			for _, o := range n.Outputs {
				if o != nil {
					kv[c.info(o).root] = true
				}
			}
			continue
		}
		if !aliasOps[key] && !move[n] {
			continue
		}
		tainted := false
		for _, v := range n.Inputs {
			if v != nil && kv[c.info(v).root] {
				tainted = true
			}
		}
		if tainted {
			for _, o := range n.Outputs {
				if o != nil {
					kv[c.info(o).root] = true
				}
			}
		}
	}
	return kv
}

// KVBiasMasked is the value kv_bias holds where attention must not look:
// float32's lowest finite number, as the exports use, so that a row keeps
// finite scores (and rounds to -inf in fp16 storage).
const KVBiasMasked = -math.MaxFloat32
