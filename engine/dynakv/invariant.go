package dynakv

import (
	"fmt"
	"sort"
)

// CheckInvariant verifies the exactly-once invariant (systems-spec §2d.5)
// after a step: in every (layer, KV head), each of the entries so far is
// in exactly one place, a cluster's flash region, its page buffer or its
// delayed-split buffer; every pool side is owned by at most one cluster
// whose flushed entries it records, the two sides of a pool never
// overlap, and no cluster exceeds S_max. With Config.Debug it also checks
// that the last step attended exactly the entries (and buffers) of the
// clusters it selected.
func (s *System) CheckInvariant() error {
	for _, l := range s.layers {
		if !l.prefilled {
			continue
		}
		owners := map[*pool]int{}
		for h, hs := range l.hs {
			seen := map[int]string{}
			count := 0
			for _, c := range hs.clusters {
				if len(c.members) > s.cfg.SMax {
					return fmt.Errorf("layer %d head %d: cluster %d holds %d > S_max %d", l.idx, h, c.id, len(c.members), s.cfg.SMax)
				}
				base := l.tailBase(c)
				if c.flushed < base || c.flushed > len(c.members) || len(c.tail) != len(c.members)-base {
					return fmt.Errorf("layer %d head %d: cluster %d: %d members, %d flushed, %d in the last page's buffer", l.idx, h, c.id, len(c.members), c.flushed, len(c.tail))
				}
				if c.pool == nil || c.pool.owner[c.side] != c {
					return fmt.Errorf("layer %d head %d: cluster %d does not own its pool side", l.idx, h, c.id)
				}
				if c.pool.used[c.side] != c.flushed {
					return fmt.Errorf("layer %d head %d: cluster %d: pool records %d flushed, cluster %d", l.idx, h, c.id, c.pool.used[c.side], c.flushed)
				}
				owners[c.pool]++
				if len(c.buf) != len(c.bufKV) || (len(c.buf) > 0) != c.flag && len(c.buf) > 0 {
					return fmt.Errorf("layer %d head %d: cluster %d: buffer of %d positions and %d entries, flag %v", l.idx, h, c.id, len(c.buf), len(c.bufKV), c.flag)
				}
				for i, p := range c.members {
					where := fmt.Sprintf("cluster %d flash", c.id)
					if i >= c.flushed {
						where = fmt.Sprintf("cluster %d page buffer", c.id)
					}
					if prev, dup := seen[p]; dup {
						return fmt.Errorf("layer %d head %d: position %d in %s and in %s", l.idx, h, p, prev, where)
					}
					seen[p] = where
				}
				for _, p := range c.buf {
					where := fmt.Sprintf("cluster %d delayed buffer", c.id)
					if prev, dup := seen[p]; dup {
						return fmt.Errorf("layer %d head %d: position %d in %s and in %s", l.idx, h, p, prev, where)
					}
					seen[p] = where
				}
				count += c.size()
			}
			if count != hs.total || len(seen) != hs.total {
				return fmt.Errorf("layer %d head %d: %d entries placed, %d expected", l.idx, h, len(seen), hs.total)
			}
			for p := 0; p < hs.total; p++ {
				if _, ok := seen[p]; !ok {
					return fmt.Errorf("layer %d head %d: position %d is nowhere", l.idx, h, p)
				}
			}
			if s.cfg.Debug && s.step > 0 && !s.cfg.AttendAllBuffers {
				a, b := append([]int(nil), hs.attended...), append([]int(nil), hs.selected...)
				sort.Ints(a)
				sort.Ints(b)
				if fmt.Sprint(a) != fmt.Sprint(b) {
					return fmt.Errorf("layer %d head %d: attended %d entries, the selected clusters and their buffers hold %d", l.idx, h, len(a), len(b))
				}
			}
		}
		for _, p := range l.store.pools {
			if p.used[0]+p.used[1] > l.store.capacity {
				return fmt.Errorf("layer %d pool %d: sides of %d and %d slots overlap in %d", l.idx, p.idx, p.used[0], p.used[1], l.store.capacity)
			}
			for side := 0; side < 2; side++ {
				if p.owner[side] == nil && p.used[side] != 0 {
					return fmt.Errorf("layer %d pool %d side %d: no owner but %d slots used", l.idx, p.idx, side, p.used[side])
				}
			}
		}
	}
	return nil
}

// VerifyData reads every cluster back from its pool file (bypassing the
// cache) and checks each entry, page-buffered and delayed ones included,
// against want(layer, head, position), which returns [k | v].
func (s *System) VerifyData(want func(layer, head, pos int) []float32) error {
	for _, l := range s.layers {
		for h, hs := range l.hs {
			for _, c := range hs.clusters {
				off, n := l.store.extent(c.pool, c.side, c.flushed)
				buf := make([]byte, n)
				if err := l.store.f.ReadAt(buf, off); err != nil {
					return err
				}
				got := l.store.decode(buf, c.side, c.flushed, l.dim)
				base := l.tailBase(c)
				got = append(got, c.tail[c.flushed-base:]...)
				got = append(got, c.bufKV...)
				pos := append(append([]int(nil), c.members...), c.buf...)
				for i, p := range pos {
					w := want(l.idx, h, p)
					for d := range w {
						if got[i][d] != w[d] {
							return fmt.Errorf("layer %d head %d cluster %d: position %d element %d is %v, want %v", l.idx, h, c.id, p, d, got[i][d], w[d])
						}
					}
				}
			}
		}
	}
	return nil
}
