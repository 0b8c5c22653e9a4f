package dynakv

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/tlite/tlite/engine/flash"
)

// A store is one layer's file of dual-head pools (§5.2, Fig. 8). Each pool
// holds 2·S_max entry slots; the cluster on side 0 grows upward from the
// pool's first slot, the one on side 1 downward from its last, so an
// append moves nothing and the two never meet while each holds at most
// S_max entries. An entry is [k | v] of one KV head in float32.
//
// Writes are whole pages of one cluster (pages are PageSize bytes and a
// pool is a whole number of pages; with S_max a multiple of a page's
// entries, no page is ever shared by the two sides). A page not yet full
// stays in the cluster's page buffer (hot clusters) or is written as a
// whole page with its unused slots zeroed (cold clusters, and flushes):
// the write amplification the statistics report.
type store struct {
	f         *flash.File
	entry     int // bytes per entry
	perPage   int // entries per page
	capacity  int // slots per pool (2·S_max)
	poolBytes int64
	pools     []*pool
	written   int64 // bytes written (pages)
	pageBuf   []byte
}

// pool is one dual-head pool: its position in the file and how many
// slots each side's cluster occupies on flash.
type pool struct {
	idx   int
	off   int64
	owner [2]*cluster
	used  [2]int // slots holding flushed (on-flash) entries of each side
}

func newStore(path string, dim, smax int, stats *flash.Stats) (*store, error) {
	entry := 2 * dim * 4
	if flash.PageSize%entry != 0 {
		return nil, fmt.Errorf("dynakv: an entry of %d bytes does not divide a %d-byte page", entry, flash.PageSize)
	}
	per := flash.PageSize / entry
	if smax%per != 0 {
		return nil, fmt.Errorf("dynakv: S_max %d is not a multiple of the %d entries of a page", smax, per)
	}
	f, err := flash.OpenRW(path, flash.Options{Stats: stats})
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, err
	}
	return &store{f: f, entry: entry, perPage: per, capacity: 2 * smax, poolBytes: int64(2*smax) * int64(entry), pageBuf: flash.AlignedBuf(flash.PageSize)}, nil
}

func (s *store) close() error {
	err := s.f.Close()
	if rerr := os.Remove(s.f.Path()); err == nil && rerr != nil && !os.IsNotExist(rerr) {
		err = rerr
	}
	return err
}

// newPool appends an empty pool to the file.
func (s *store) newPool() *pool {
	p := &pool{idx: len(s.pools), off: int64(len(s.pools)) * s.poolBytes}
	s.pools = append(s.pools, p)
	return p
}

// slot is the pool slot of a side's i-th entry.
func (s *store) slot(side, i int) int {
	if side == 0 {
		return i
	}
	return s.capacity - 1 - i
}

// extent is the byte range on flash of a side's first n entries.
func (s *store) extent(p *pool, side, n int) (off, length int64) {
	if n == 0 {
		return p.off, 0
	}
	lo := 0
	if side == 1 {
		lo = s.capacity - n
	}
	return p.off + int64(lo)*int64(s.entry), int64(n) * int64(s.entry)
}

// writePages writes the pages holding entries [from, to) of a side: kv
// gives entries page·perPage.. of the side (kv[i] is entry base+i, base
// the first entry of from's page). Slots of a page beyond the side's last
// entry are written as zeros. It returns the bytes written.
func (s *store) writePages(p *pool, side int, base int, kv [][]float32, from, to int) error {
	if to > s.capacity/2 {
		return fmt.Errorf("dynakv: pool %d side %d: %d entries exceed S_max %d", p.idx, side, to, s.capacity/2)
	}
	for pg := from / s.perPage; pg*s.perPage < to; pg++ {
		for i := range s.pageBuf {
			s.pageBuf[i] = 0
		}
		for e := pg * s.perPage; e < (pg+1)*s.perPage; e++ {
			if e-base < 0 || e-base >= len(kv) {
				continue
			}
			// Slot order inside the page: side 0 ascending, side 1 descending.
			at := e - pg*s.perPage
			if side == 1 {
				at = s.perPage - 1 - at
			}
			putFloats(s.pageBuf[at*s.entry:(at+1)*s.entry], kv[e-base])
		}
		first := pg * s.perPage
		if side == 1 {
			first = s.capacity - (pg+1)*s.perPage
		}
		if err := s.f.WriteAt(s.pageBuf, p.off+int64(first)*int64(s.entry)); err != nil {
			return err
		}
		s.written += int64(len(s.pageBuf))
	}
	return nil
}

// decode returns a side's first n entries from buf, which holds their
// extent (as extent gives it).
func (s *store) decode(buf []byte, side, n, dim int) [][]float32 {
	out := make([][]float32, n)
	for i := 0; i < n; i++ {
		at := i
		if side == 1 {
			at = n - 1 - i
		}
		out[i] = getFloats(buf[at*s.entry:(at+1)*s.entry], 2*dim)
	}
	return out
}

func putFloats(dst []byte, src []float32) {
	for i, f := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
	}
}

func getFloats(src []byte, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
	return out
}
