package engine

// The layer gate: a narrower form of the attention hook (H2) for loading
// a cache layer by layer while a forward runs (LLMS's swap–recompute
// pipeline, systems-spec §1a.9 and §1c). The gate is called at each
// cache-reading attention, after the step's rows are written and before
// the attention kernel is enqueued; it may block (waiting for its layer's
// reads) and write rows into that layer's cache buffers. Unlike the
// attention hook it reads nothing back from the device, so a gate that
// returns without writing costs no synchronisation; a write is one
// host-to-device copy per run of slots, ordered after the kernels already
// enqueued.

import "fmt"

// GateCall is what a LayerGate receives for one layer of one Run.
type GateCall struct {
	// Layer is the attention's ordinal among the cache-reading attentions,
	// in program order (as AttentionCall.Layer).
	Layer int
	// KBuf and VBuf are the cache buffers this attention reads, as indices
	// into KVInfo().Layers.
	KBuf, VBuf int
	s          *Session
}

// WriteKVSlots is Session.WriteKVSlots from inside the gate (the Run holds
// the session's lock, so the session's own method would deadlock): src is
// len(slots) rows of KVInfo().Layers[buf].RowBytes, written before this
// layer's attention reads the buffer.
func (g *GateCall) WriteKVSlots(buf int, slots []int, src []byte) error {
	return g.s.kvSlotsLocked("GateCall.WriteKVSlots", buf, slots, src, true)
}

// WriteLayerSlots writes this layer's keys and values of slots at once:
// src is len(slots) rows of the lower-numbered of KBuf and VBuf, then
// len(slots) rows of the other (buffer-major, as WriteAllKVSlots lays
// buffers out), crossing to the device in one copy and scattered there;
// it returns when the scatter is done.
func (g *GateCall) WriteLayerSlots(slots []int, src []byte) error {
	bufs := []int{g.KBuf, g.VBuf}
	if g.VBuf < g.KBuf {
		bufs = []int{g.VBuf, g.KBuf}
	}
	return g.s.batchKVSlots("GateCall.WriteLayerSlots", bufs, slots, src, true)
}

// LayerGate is called at each cache-reading attention of every Run (see
// GateCall). An error fails the Run.
type LayerGate func(g *GateCall) error

// SetLayerGate installs g (nil removes it). It runs under the session's
// lock: it must not call the session's methods, only GateCall's.
func (s *Session) SetLayerGate(g LayerGate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.layerGate = g
}

// gate calls the session's layer gate for this attention.
func (h *attnHookSite) gate(ex *exec) error {
	s := ex.c.s
	call := &GateCall{Layer: h.layer, KBuf: -1, VBuf: -1, s: s}
	for i, c := range s.kvCaches() {
		switch c {
		case h.kCache:
			call.KBuf = i
		case h.vCache:
			call.VBuf = i
		}
	}
	if call.KBuf < 0 || call.VBuf < 0 {
		return fmt.Errorf("layer gate, layer %d: the attention's cache buffers are not the session's", h.layer)
	}
	if err := s.layerGate(call); err != nil {
		return fmt.Errorf("layer gate, layer %d: %w", h.layer, err)
	}
	return nil
}
