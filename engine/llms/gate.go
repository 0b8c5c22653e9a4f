package llms

// The per-layer I/O gate of the swap–recompute pipeline (spec §1a.9
// "Execution" and §1c): on a restore that both loads and recomputes
// chunks, an I/O goroutine submits the reads region by region (a region
// is one model layer of the layer-major swap file), and the recompute
// forward runs at once. At each layer's attention the engine's layer gate
// (engine.Session.SetLayerGate, a narrower form of hook H2 that reads
// nothing back) waits for that layer's reads only, decodes them and
// writes the loaded chunks' rows of that layer; reads of later layers
// proceed while earlier layers compute. The loaded slots' positions are
// set before the forward, so every recomputed token attends them exactly
// as in the ungated restore (the rows are the same bytes, written before
// the attention that reads them).
//
// A chunk's checksum covers all its regions, so it is verified after the
// forward. A chunk that fails it (a torn or corrupt file) is recomputed
// afterwards, together with every recomputed chunk positioned after it,
// which attended the bad rows.

import (
	"fmt"
	"sort"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/flash"
)

// LayerTiming is one layer of a gated restore, as offsets from the start
// of the install: when the forward reached the layer's attention (Enter),
// when the layer's reads had completed (Loaded), and when the gate let the
// attention run (Exit).
type LayerTiming struct {
	Layer  int           `json:"layer"`
	Enter  time.Duration `json:"enter_ns"`
	Loaded time.Duration `json:"loaded_ns"`
	Exit   time.Duration `json:"exit_ns"`
}

// gatedReads are one gated restore's reads, per region.
type gatedReads struct {
	idx   []int
	runs  []run
	reqs  [][]flash.Request // per region, one per run
	batch []*flash.Batch    // set by the I/O goroutine before ready[g] closes
	sub   []time.Time       // submission time per region
	ready []chan struct{}
}

// gates reports whether restores use the per-layer gate (LLMS with its
// pipeline, unless Config.Ungated).
func (m *Manager) gates() bool { return m.plans() && !m.cfg.Ungated }

// submitGated plans the reads of the loaded chunks idx region by region
// and starts the I/O goroutine that submits them in region order. The
// bytes and operations are counted into tm.
func (m *Manager) submitGated(f *flash.File, idx []int, levelOf func(int) (Level, int), tm *SwitchTimings) *gatedReads {
	G := m.lay.groups
	gr := &gatedReads{idx: idx, runs: runsOf(idx), reqs: make([][]flash.Request, G), batch: make([]*flash.Batch, G),
		sub: make([]time.Time, G), ready: make([]chan struct{}, G)}
	for g := 0; g < G; g++ {
		for _, r := range gr.runs {
			n := m.lay.readSpan(g, r, levelOf)
			gr.reqs[g] = append(gr.reqs[g], flash.Request{File: f, Off: m.lay.slotOff(g, r.lo), Dst: flash.AlignedBuf(int(n))})
			tm.BytesRead += n
		}
		tm.Reads += len(gr.reqs[g])
		gr.ready[g] = make(chan struct{})
	}
	delay := m.ioDelay
	go func() {
		for g := 0; g < G; g++ {
			if delay != nil {
				delay(g)
			}
			gr.sub[g] = time.Now()
			gr.batch[g] = m.reader.Submit(gr.reqs[g])
			close(gr.ready[g])
		}
	}()
	return gr
}

// restoreGated runs the recompute forward of chunks rec with the layer
// gate installing the loaded chunks of gr layer by layer, then verifies
// the loaded chunks, puts the good ones in the pool and redoes what a
// bad one spoiled. ioEnd is advanced to the last read's completion.
func (m *Manager) restoreGated(c *context, rec []int, gr *gatedReads, levelOf func(int) (Level, int), t0 time.Time, ioEnd *time.Time, tm *SwitchTimings) error {
	G := m.lay.groups
	var slots []int
	for _, i := range gr.idx {
		_, n := levelOf(i)
		for t := 0; t < n; t++ {
			slots = append(slots, i*m.lay.C+t)
		}
	}
	// The loaded slots are attended from the first layer on; their bytes
	// arrive layer by layer, each before the attention that reads it.
	if err := m.st.SetPositions(slots, slots); err != nil {
		return err
	}
	got := map[int]*encChunk{}
	for _, i := range gr.idx {
		l, n := levelOf(i)
		got[i] = &encChunk{level: l, n: n, groups: make([][]byte, G)}
	}
	done := make([]bool, G)
	var stall, decode time.Duration
	// install waits for region g's reads and writes its rows, buffer-major
	// over the region's buffers, through write (the gate's, inside the
	// forward, or the state's after it).
	install := func(g int, write func(bufs, slots []int, src []byte) error) error {
		if done[g] {
			return nil
		}
		tw := time.Now()
		<-gr.ready[g]
		err := gr.batch[g].Wait()
		stall += time.Since(tw)
		if e := gr.sub[g].Add(gr.batch[g].Elapsed()); e.After(*ioEnd) {
			*ioEnd = e
		}
		if err != nil {
			return fmt.Errorf("llms: reading %s: %w", c.meta.ID, err)
		}
		tu := time.Now()
		for k, r := range gr.runs {
			buf := gr.reqs[g][k].Dst
			for i := r.lo; i < r.hi; i++ {
				l, n := levelOf(i)
				o := int64(i-r.lo) * m.lay.slot[g]
				got[i].groups[g] = append([]byte(nil), buf[o:o+int64(m.lay.groupSize(g, l, n))]...)
			}
		}
		td := time.Now()
		var block []byte
		var bufs []int
		for b := g * m.lay.bpg; b < (g+1)*m.lay.bpg; b++ {
			bufs = append(bufs, b)
			for _, i := range gr.idx {
				e := got[i]
				enc := e.groups[g]
				for bb := g * m.lay.bpg; bb < b; bb++ {
					enc = enc[EncodedSize(e.level, e.n, m.lay.bufs[bb]):]
				}
				sz := EncodedSize(e.level, e.n, m.lay.bufs[b])
				if len(enc) < sz {
					return fmt.Errorf("llms: chunk %d region %d holds %d bytes; buffer %d needs %d", i, g, len(enc), b, sz)
				}
				var err error
				if block, err = DecodeChunk(block, enc[:sz], e.n, m.lay.bufs[b], e.level); err != nil {
					return fmt.Errorf("llms: chunk %d of %s, buffer %d: %w", i, c.meta.ID, b, err)
				}
			}
		}
		tm.Decode += time.Since(td)
		decode += time.Since(tu) // splitting the reads and decoding them
		if err := write(bufs, slots, block); err != nil {
			return err
		}
		done[g] = true
		return nil
	}
	var trace []LayerTiming
	gate := func(gc *engine.GateCall) error {
		g := gc.KBuf / m.lay.bpg
		if g >= G || gc.VBuf/m.lay.bpg != g {
			return fmt.Errorf("llms: the attention reads buffers %d and %d, outside one region of %d", gc.KBuf, gc.VBuf, G)
		}
		if done[g] {
			return nil // a later piece of a split forward
		}
		lt := LayerTiming{Layer: gc.Layer, Enter: time.Since(t0)}
		if m.onGate != nil {
			m.onGate(gc.Layer)
		}
		err := install(g, func(bufs, slots []int, src []byte) error {
			if len(bufs) == 2 && bufs[0] == min(gc.KBuf, gc.VBuf) && bufs[1] == max(gc.KBuf, gc.VBuf) {
				// One copy to the device and two scatters.
				return gc.WriteLayerSlots(slots, src)
			}
			return eachBuffer(bufs, slots, src, m.lay, gc.WriteKVSlots)
		})
		lt.Loaded = gr.sub[g].Add(gr.batch[g].Elapsed()).Sub(t0)
		lt.Exit = time.Since(t0)
		trace = append(trace, lt)
		return err
	}
	sess := m.st.Session()
	sess.SetLayerGate(gate)
	trc := time.Now()
	err := m.recompute(c, rec, 0)
	sess.SetLayerGate(nil)
	tm.Layers = trace
	if err != nil {
		return err
	}
	// A region no attention asked for (none in a transformer whose every
	// layer attends the cache) is installed now, and the recompute, whose
	// rows may have read that region's stale bytes, is run again.
	missed := false
	for g := 0; g < G; g++ {
		missed = missed || !done[g]
		if err := install(g, func(bufs, slots []int, src []byte) error {
			return eachBuffer(bufs, slots, src, m.lay, m.st.WriteSlots)
		}); err != nil {
			return err
		}
	}
	if missed {
		if err := m.recompute(c, rec, 0); err != nil {
			return err
		}
	}
	// The gate's copies to the device wait for the kernels enqueued before
	// them (the forward's earlier layers), so their time is the forward's:
	// Recompute is the forward's span less the waits for reads and the
	// host's decoding of loaded chunks, which Upload counts.
	tm.Recompute += time.Since(trc) - stall - decode
	tm.IOWait += stall
	tm.Upload += decode
	tm.Recomputed = len(rec)

	var bad []int
	for _, i := range gr.idx {
		if chunkCRC(got[i]) != c.meta.Chunks[i].CRC {
			bad = append(bad, i)
			continue
		}
		m.poolPut(c, i, got[i])
		tm.Loaded++
	}
	if len(bad) == 0 {
		return nil
	}
	// Recompute the bad chunks, and the recomputed chunks after the first
	// bad one (they attended its rows), in position order.
	redo := append([]int(nil), bad...)
	for _, i := range rec {
		if i > bad[0] {
			redo = append(redo, i)
		}
	}
	sort.Ints(redo)
	trc = time.Now()
	if err := m.recompute(c, redo, 0); err != nil {
		return err
	}
	tm.Recompute += time.Since(trc)
	for _, i := range bad {
		c.meta.Chunks[i].Dirty = true // the flash copy is bad
	}
	tm.Faults += len(bad)
	m.counts.faults += int64(len(bad))
	return nil
}

// eachBuffer writes a buffer-major block (len(slots) rows per buffer of
// bufs) one buffer at a time through write.
func eachBuffer(bufs, slots []int, src []byte, lay *layout, write func(buf int, slots []int, src []byte) error) error {
	off := 0
	for _, b := range bufs {
		n := len(slots) * lay.rowBytes(b)
		if err := write(b, slots, src[off:off+n]); err != nil {
			return err
		}
		off += n
	}
	return nil
}
