package dynakv

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/tlite/tlite/engine/flash"
)

// Pipeline 1 (systems-spec §2a.7), an option (Config.CentroidsOnFlash):
// the representatives (centroids, float32) of each layer live in a
// per-layer file, one slot of D floats per cluster; a cluster keeps its
// slot for life and a split's first child takes its parent's. At the end
// of layer l's hook the slots it changed (appends move a centroid, splits
// make new ones) are written back as whole pages, and the whole array of
// layer l+1 is read ahead (the read overlaps layer l's FFN and layer
// l+1's projections, as the paper overlaps it with the Q projection), so
// that scoring at layer l+1 uses the representatives read from flash. At
// most two layers' arrays are in DRAM at once.
//
// What is not saved here: the clusters' Welford statistics (count, M2 and
// the float64 mean that Alg. 1's updates use) stay in DRAM, so the DRAM
// saving the report gives (RepsDRAMBytes) is that of the scoring arrays,
// computed, not a measured drop in the process's memory.
type repStore struct {
	f      *flash.File
	dim    int
	owner  []*cluster // slot -> cluster (nil: free)
	free   []int
	dirty  map[int]bool
	batch  *flash.Batch // the read in flight
	buf    []byte
	arr    []float32 // the array read, while the layer holds it
	held   int64     // bytes of arr counted as resident
	page   []byte
	slotsB int
}

func newRepStore(dir string, layer, dim int, stats *flash.Stats) (*repStore, error) {
	if flash.PageSize%(dim*4) != 0 {
		return nil, fmt.Errorf("dynakv: a representative of %d bytes does not divide a %d-byte page", dim*4, flash.PageSize)
	}
	f, err := flash.OpenRW(filepath.Join(dir, fmt.Sprintf("dynakv-layer%02d.reps", layer)), flash.Options{Stats: stats})
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, err
	}
	return &repStore{f: f, dim: dim, dirty: map[int]bool{}, page: flash.AlignedBuf(flash.PageSize), slotsB: dim * 4}, nil
}

// assign gives c a slot (reusing a freed one) and marks it dirty.
func (r *repStore) assign(c *cluster) {
	if c.repSlot == 0 {
		if k := len(r.free); k > 0 {
			c.repSlot = r.free[k-1] + 1
			r.free = r.free[:k-1]
		} else {
			r.owner = append(r.owner, nil)
			c.repSlot = len(r.owner)
		}
	}
	r.owner[c.repSlot-1] = c
	r.dirty[c.repSlot-1] = true
}

// release frees c's slot (c was split).
func (r *repStore) release(c *cluster) {
	if c.repSlot == 0 {
		return
	}
	s := c.repSlot - 1
	r.owner[s] = nil
	r.free = append(r.free, s)
	r.dirty[s] = true
	c.repSlot = 0
}

// flush writes the pages holding dirty slots.
func (r *repStore) flush() (int64, error) {
	per := flash.PageSize / r.slotsB
	pages := map[int]bool{}
	for s := range r.dirty {
		pages[s/per] = true
	}
	var written int64
	for pg := range pages {
		for i := range r.page {
			r.page[i] = 0
		}
		for s := pg * per; s < (pg+1)*per && s < len(r.owner); s++ {
			c := r.owner[s]
			if c == nil {
				continue
			}
			v := make([]float32, r.dim)
			for d := range v {
				v[d] = float32(c.w.mean[d])
			}
			putFloats(r.page[(s-pg*per)*r.slotsB:], v)
		}
		if err := r.f.WriteAt(r.page, int64(pg)*flash.PageSize); err != nil {
			return written, err
		}
		written += flash.PageSize
	}
	r.dirty = map[int]bool{}
	return written, nil
}

// startRead submits the read of the whole array (nothing if one is in
// flight or held).
func (s *System) startRepsRead(l *layerState) {
	r := l.reps
	if r == nil || r.batch != nil || r.arr != nil || len(r.owner) == 0 {
		return
	}
	n := (int64(len(r.owner))*int64(r.slotsB) + flash.PageSize - 1) &^ (flash.PageSize - 1)
	r.buf = flash.AlignedBuf(int(n))
	s.st.repsRead += n
	r.held = n
	s.st.repsResident += n
	s.st.repsPeak = max(s.st.repsPeak, s.st.repsResident)
	r.batch = s.rd.Submit([]flash.Request{{File: r.f, Off: 0, Dst: r.buf}})
}

// repsFor returns layer l's array, waiting for its read (started now if
// the prefetcher did not), and the time waited.
func (s *System) repsFor(l *layerState) ([]float32, time.Duration, error) {
	r := l.reps
	if r.arr != nil {
		return r.arr, 0, nil
	}
	s.startRepsRead(l)
	t := time.Now()
	err := r.batch.Wait()
	wait := time.Since(t)
	r.batch = nil
	if err != nil {
		return nil, wait, err
	}
	r.arr = getFloats(r.buf, len(r.owner)*r.dim)
	r.buf = nil
	return r.arr, wait, nil
}

// dropReps ends layer l's hold on its array.
func (s *System) dropReps(l *layerState) {
	if r := l.reps; r != nil && r.arr != nil {
		s.st.repsResident -= r.held
		r.arr, r.held = nil, 0
	}
}

// checkReps verifies (Debug) that the array read holds each cluster's
// centroid as float32.
func checkReps(l *layerState, arr []float32) error {
	for h, hs := range l.hs {
		for _, c := range hs.clusters {
			v := arr[(c.repSlot-1)*l.dim : c.repSlot*l.dim]
			for d := range v {
				if v[d] != float32(c.w.mean[d]) {
					return fmt.Errorf("dynakv: layer %d head %d cluster %d: representative %d read as %v, centroid %v", l.idx, h, c.id, d, v[d], c.w.mean[d])
				}
			}
		}
	}
	return nil
}
