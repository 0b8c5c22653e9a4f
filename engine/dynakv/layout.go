package dynakv

import (
	"sort"

	"github.com/tlite/tlite/engine/flash"
)

// Layout counterfactuals (systems-spec §2a.5–6, §2c): what the same
// clustering and the same selections would cost on other layouts. They
// are counted, not run: no second file is written or read.
//
//   - Sequence order: a (layer, head) file of entries by position (as the
//     static and no-cluster baselines store them). A step's selected
//     clusters' flushed entries are read as block-aligned requests, one
//     per run of touching blocks, coalesced as the pool reads are.
//   - Cluster by cluster, packed: each head's clusters back to back in
//     their list order, no slack. An append to a cluster shifts every
//     later cluster of the head by one entry; a split rewrites the
//     parent's region with its children in place and shifts the later
//     clusters by the entries it adds (the buffered and the new one).
//     The dual-head pools move nothing on an append, and on a split write
//     the children's pages (the first in place, the others on new sides).

// seqOrder counts the sequence-order reads of one head's selection.
func (st *Stats) seqOrder(l *layerState, hs *headState, sel []*cluster) {
	var pos []int
	for _, c := range sel {
		pos = append(pos, c.members[:c.flushed]...)
	}
	if len(pos) == 0 {
		return
	}
	sort.Ints(pos)
	entry := int64(l.store.entry)
	// Contiguous runs of positions (entries adjacent in the file).
	runs := 1
	for i := 1; i < len(pos); i++ {
		if pos[i] != pos[i-1]+1 {
			runs++
		}
	}
	st.seqRuns += int64(runs)
	st.seqEntries += int64(len(pos))
	// Block-aligned requests, touching extents coalesced.
	var lo, hi int64 = -1, -1
	for _, p := range pos {
		a := (int64(p) * entry) &^ (flash.BlockSize - 1)
		b := (int64(p+1)*entry + flash.BlockSize - 1) &^ (flash.BlockSize - 1)
		if hi >= 0 && a <= hi {
			hi = max(hi, b)
			continue
		}
		if hi >= 0 {
			st.seqOps++
			st.seqBytes += hi - lo
		}
		lo, hi = a, b
	}
	st.seqOps++
	st.seqBytes += hi - lo
}

// after is the entries of the head's clusters after index i (packed).
func after(hs *headState, i int) int64 {
	var n int64
	for _, c := range hs.clusters[i+1:] {
		n += int64(len(c.members))
	}
	return n
}

// packedAppend counts the shift an append to cluster i causes.
func (st *Stats) packedAppend(hs *headState, i, entry int) {
	st.appends++
	st.packedAppendMoved += after(hs, i) * int64(entry)
}

// packedSplit counts a split of c (n entries after it) in the packed
// layout: its region rewritten, the later clusters shifted by the growth.
func (st *Stats) packedSplit(hs *headState, c *cluster, n, entry int) {
	st.splits++
	st.packedSplitWritten += int64(n) * int64(entry)
	if n > len(c.members) {
		for i, x := range hs.clusters {
			if x == c {
				st.packedSplitMoved += after(hs, i) * int64(entry)
				break
			}
		}
	}
}

// dualSplit counts the pages a split wrote in the dual-head pools and
// the entry bytes that left the parent's side.
func (st *Stats) dualSplit(written int64, kids []*cluster, entry int) {
	st.dualSplitWritten += written
	for _, k := range kids[1:] {
		st.dualSplitMoved += int64(len(k.members)) * int64(entry)
	}
}
