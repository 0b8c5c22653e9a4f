package dynakv

import (
	"math"
	"sort"
	"time"

	"github.com/tlite/tlite/engine/flash"
)

// Pipeline 2 (systems-spec §2a.7): while layer l's FFN and layer l+1's
// projections run on the device, the reader pool fetches layer l+1's
// likely clusters, so that layer l+1's hook finds them in DRAM. Which
// clusters are likely is not fixed by the paper; ours [ours]:
//
//   - the clusters the layer selected at the previous decode step
//     (temporal locality of consecutive queries), most relevant first;
//   - then clusters updated in the last PrefetchRecent steps (new entries
//     are the likeliest to be attended, §6.2 principle 2);
//
// up to a byte bound of PrefetchFactor × the layer's retrieval budget
// (Σ_h ⌈ρ·|K_h|⌉ entries), about one layer. Two layers' prefetch buffers
// exist at most (the one the current hook consumes and the one being
// filled): DRAM is bounded by two layers, not the model.
//
// The reads are submitted at the end of layer l's hook and waited for in
// layer l+1's hook after scoring; that wait is I/O wait and is counted as
// such. A prefetched cluster is used only if it is unchanged (the same
// flushed entries); layer l+1's clusters change only inside its own hook,
// after its reads, so a prefetched copy is always current when used.

// readWant is the missing flushed entries of one cluster: members
// [from, to) at byte extent [lo, hi) of the layer's file; have is the
// cached prefix.
type readWant struct {
	c        *cluster
	have     [][]float32
	lo, hi   int64
	from, to int
}

// readRun is one block-aligned request covering adjacent wants.
type readRun struct {
	lo, hi int64
	ws     []*readWant
}

// want makes the read of c's flushed entries from member from on.
func (l *layerState) want(c *cluster, have [][]float32) *readWant {
	w := &readWant{c: c, have: have, from: len(have), to: c.flushed}
	st := l.store
	if c.side == 0 {
		w.lo = c.pool.off + int64(w.from)*int64(st.entry)
		w.hi = c.pool.off + int64(w.to)*int64(st.entry)
	} else {
		w.lo = c.pool.off + int64(st.capacity-w.to)*int64(st.entry)
		w.hi = c.pool.off + int64(st.capacity-w.from)*int64(st.entry)
	}
	return w
}

// plan sorts wants by offset and coalesces them into block-aligned
// requests, one per run of touching extents.
func (l *layerState) plan(wants []*readWant) ([]*readRun, []flash.Request) {
	sort.Slice(wants, func(a, b int) bool { return wants[a].lo < wants[b].lo })
	var runs []*readRun
	for _, w := range wants {
		lo, hi := w.lo&^(flash.BlockSize-1), (w.hi+flash.BlockSize-1)&^(flash.BlockSize-1)
		if k := len(runs); k > 0 && lo <= runs[k-1].hi {
			runs[k-1].hi = max(runs[k-1].hi, hi)
			runs[k-1].ws = append(runs[k-1].ws, w)
			continue
		}
		runs = append(runs, &readRun{lo: lo, hi: hi, ws: []*readWant{w}})
	}
	reqs := make([]flash.Request, len(runs))
	for i, r := range runs {
		reqs[i] = flash.Request{File: l.store.f, Off: r.lo, Dst: flash.AlignedBuf(int(r.hi - r.lo))}
	}
	return runs, reqs
}

// scatter decodes the read runs into each want's full flushed entries
// (cached prefix first) and hands them to fn.
func (l *layerState) scatter(runs []*readRun, reqs []flash.Request, fn func(c *cluster, kv [][]float32)) {
	for i, r := range runs {
		for _, w := range r.ws {
			b := reqs[i].Dst[w.lo-r.lo : w.hi-r.lo]
			n := w.to - w.from
			got := make([][]float32, n)
			for j := 0; j < n; j++ {
				at := j
				if w.c.side == 1 {
					at = n - 1 - j
				}
				got[j] = getFloats(b[at*l.store.entry:(at+1)*l.store.entry], 2*l.dim)
			}
			fn(w.c, append(append([][]float32(nil), w.have...), got...))
		}
	}
}

// prefetch is one layer's pending or completed prefetch.
type prefetch struct {
	batch *flash.Batch
	runs  []*readRun
	reqs  []flash.Request
	// data holds the prefetched clusters' flushed entries once joined;
	// bytes their entry bytes (for the accuracy).
	data  map[*cluster][][]float32
	bytes map[*cluster]int64
}

// startPrefetch plans and submits layer m's prefetch (called at the end
// of the previous layer's hook).
func (s *System) startPrefetch(m int, qbars [][]float32) {
	l := s.layers[m]
	if !s.cfg.Prefetch || !l.prefilled || l.pf != nil {
		return
	}
	var bound int64
	for _, hs := range l.hs {
		bound += int64(math.Ceil(s.cfg.Budget * float64(hs.total)))
	}
	bound = int64(s.cfg.PrefetchFactor * float64(bound*int64(l.store.entry)))
	// Candidates: last step's selection, by rank across heads, then the
	// recently updated, newest first.
	var prev, recent []*cluster
	if s.cfg.PrefetchByQuery && len(qbars) == len(l.hs) {
		// Rank by this layer's query against the next layer's centroids.
		for h, hs := range l.hs {
			for r, i := range s.selectClusters(hs.clusters, qbars[h], hs.total, nil) {
				c := hs.clusters[i]
				c.pfRank = r
				prev = append(prev, c)
			}
		}
		sort.SliceStable(prev, func(a, b int) bool { return prev[a].pfRank < prev[b].pfRank })
		in := map[*cluster]bool{}
		for _, c := range prev {
			in[c] = true
		}
		for _, hs := range l.hs {
			for _, c := range hs.clusters {
				if !in[c] && s.step-c.updated < s.cfg.PrefetchRecent {
					recent = append(recent, c)
				}
			}
		}
	}
	for _, hs := range l.hs {
		if s.cfg.PrefetchByQuery {
			break
		}
		for _, c := range hs.clusters {
			switch {
			case l.lastSel > 0 && c.selAt == l.lastSel:
				prev = append(prev, c)
			case s.step-c.updated < s.cfg.PrefetchRecent:
				recent = append(recent, c)
			}
		}
	}
	if !s.cfg.PrefetchByQuery {
		sort.SliceStable(prev, func(a, b int) bool { return prev[a].selRank < prev[b].selRank })
	}
	sort.SliceStable(recent, func(a, b int) bool { return recent[a].updated > recent[b].updated })
	var wants []*readWant
	var used int64
	for _, c := range append(prev, recent...) {
		if c.flushed == 0 {
			continue
		}
		have := s.cache.peek(c)
		if len(have) > c.flushed {
			have = have[:c.flushed]
		}
		if len(have) == c.flushed {
			continue
		}
		w := l.want(c, have)
		if used+(w.hi-w.lo) > bound {
			continue
		}
		used += w.hi - w.lo
		wants = append(wants, w)
	}
	pf := &prefetch{bytes: map[*cluster]int64{}}
	for _, w := range wants {
		pf.bytes[w.c] = w.hi - w.lo
	}
	pf.runs, pf.reqs = l.plan(wants)
	for _, r := range pf.runs {
		s.st.pfPlanned += r.hi - r.lo
	}
	s.st.pfUseful += used
	pf.batch = s.rd.Submit(pf.reqs)
	l.pf = pf
}

// joinPrefetch waits for layer l's prefetch and decodes it; the wait is
// returned (it is I/O wait inside the hook).
func (s *System) joinPrefetch(l *layerState) (time.Duration, error) {
	pf := l.pf
	if pf == nil || pf.data != nil {
		return 0, nil
	}
	t := time.Now()
	err := pf.batch.Wait()
	wait := time.Since(t)
	pf.data = map[*cluster][][]float32{}
	if err != nil {
		l.pf = nil
		return wait, err
	}
	l.scatter(pf.runs, pf.reqs, func(c *cluster, kv [][]float32) { pf.data[c] = kv })
	pf.runs, pf.reqs = nil, nil
	return wait, nil
}

// takePrefetched returns c's prefetched flushed entries if they are
// current, and counts them as used.
func (s *System) takePrefetched(l *layerState, c *cluster) ([][]float32, bool) {
	if l.pf == nil || l.pf.data == nil {
		return nil, false
	}
	kv, ok := l.pf.data[c]
	if !ok || len(kv) != c.flushed {
		return nil, false
	}
	delete(l.pf.data, c)
	s.st.pfUsed += l.pf.bytes[c]
	s.st.pfHits++
	return kv, true
}

// endPrefetch drops what layer l's hook did not use (double buffering:
// its buffer is free for the next prefetch of l).
func (s *System) endPrefetch(l *layerState) {
	if l.pf == nil {
		return
	}
	if l.pf.data == nil { // never joined: the hook returned early
		l.pf.batch.Wait()
	}
	l.pf = nil
}

// settle waits for prefetch reads in flight (not consuming them), so that
// the flash statistics count every byte submitted.
func (s *System) settle() {
	for _, l := range s.layers {
		if l.pf != nil && l.pf.data == nil {
			l.pf.batch.Wait()
		}
		if l.reps != nil && l.reps.batch != nil {
			l.reps.batch.Wait()
		}
	}
}
