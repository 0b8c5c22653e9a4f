package llms

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/tlite/tlite/engine/flash"
)

// chunkMeta is one row of a context's chunk table (ctx-<id>.json).
type chunkMeta struct {
	Level Level `json:"level"`
	// Tokens is how many tokens the stored chunk holds (< C for the
	// trailing partial chunk).
	Tokens int `json:"tokens"`
	// Dirty: the swap file does not hold the chunk's current bytes.
	Dirty bool `json:"dirty"`
	// CRC is crc32 (IEEE) of the chunk's bytes in the swap file, region by
	// region; a mismatch on load (a torn in-place rewrite) makes the chunk
	// a fault, restored by recompute.
	CRC uint32 `json:"crc"`
	// DensitySum and DensityCount are the chunk's tokens' running sums
	// (for reports; the per-token sums are in the context's density).
	DensitySum   float64 `json:"density_sum"`
	DensityCount float64 `json:"density_count"`
	// LastAccess is the manager's logical clock at the chunk's last use.
	LastAccess int64 `json:"last_access"`
	// Offsets are the chunk's slot offsets in the swap file, per region.
	Offsets []int64 `json:"offsets"`
}

// ctxMeta is a context's persistent state: the memory-resident fragment
// (token ids, never swapped) and the chunk table.
type ctxMeta struct {
	ID        string      `json:"id"`
	Tokens    []int       `json:"tokens"`
	Positions []int       `json:"positions"` // token i is at position Positions[i] (= i here)
	Chunk     int         `json:"chunk_tokens"`
	Chunks    []chunkMeta `json:"chunks"`
	Density   Density     `json:"density"`
	LastUse   int64       `json:"last_use"`
	Calls     int         `json:"calls"`
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidID reports whether id can name a context (it becomes part of file
// names).
func ValidID(id string) bool { return idRE.MatchString(id) }

func metaPath(dir, id string) string { return filepath.Join(dir, "ctx-"+id+".json") }
func swapPath(dir, id string) string { return filepath.Join(dir, "ctx-"+id+".swap") }

const sumPrefix = "\n#sha256:"

// encodeMeta is the file's bytes: the JSON body, then a line with the
// body's SHA-256.
func encodeMeta(m *ctxMeta) ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("llms: encoding context %s: %w", m.ID, err)
	}
	sum := sha256.Sum256(body)
	return append(append(body, sumPrefix...), hex.EncodeToString(sum[:])+"\n"...), nil
}

// decodeMeta parses and verifies a metadata file.
func decodeMeta(data []byte) (*ctxMeta, error) {
	i := bytes.LastIndex(data, []byte(sumPrefix))
	if i < 0 {
		return nil, fmt.Errorf("no checksum line")
	}
	body, want := data[:i], strings.TrimSpace(string(data[i+len(sumPrefix):]))
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != want {
		return nil, fmt.Errorf("checksum mismatch")
	}
	var m ctxMeta
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	if !ValidID(m.ID) {
		return nil, fmt.Errorf("bad context id %q", m.ID)
	}
	if len(m.Positions) != len(m.Tokens) {
		return nil, fmt.Errorf("%d tokens and %d positions", len(m.Tokens), len(m.Positions))
	}
	return &m, nil
}

// writeMeta replaces ctx-<id>.json atomically (temporary file, sync,
// rename, directory sync) through flash.Writer.
func writeMeta(dir string, m *ctxMeta, opt flash.Options) error {
	data, err := encodeMeta(m)
	if err != nil {
		return err
	}
	w, err := flash.Create(metaPath(dir, m.ID), opt)
	if err != nil {
		return fmt.Errorf("llms: writing context %s: %w", m.ID, err)
	}
	if _, err := w.Write(data); err != nil {
		w.Abort()
		return fmt.Errorf("llms: writing context %s: %w", m.ID, err)
	}
	if err := w.Commit(); err != nil {
		return fmt.Errorf("llms: writing context %s: %w", m.ID, err)
	}
	return nil
}

// loadMetas reads every ctx-*.json in dir; files that fail verification
// are reported in bad and left in place.
func loadMetas(dir string) (good []*ctxMeta, bad map[string]error, err error) {
	names, err := filepath.Glob(filepath.Join(dir, "ctx-*.json"))
	if err != nil {
		return nil, nil, fmt.Errorf("llms: listing %s: %w", dir, err)
	}
	bad = map[string]error{}
	for _, p := range names {
		data, err := os.ReadFile(p)
		if err != nil {
			bad[filepath.Base(p)] = err
			continue
		}
		m, err := decodeMeta(data)
		if err != nil {
			bad[filepath.Base(p)] = err
			continue
		}
		if metaPath(dir, m.ID) != p {
			bad[filepath.Base(p)] = fmt.Errorf("holds context %q", m.ID)
			continue
		}
		good = append(good, m)
	}
	return good, bad, nil
}

// chunkCRC is the CRC of a chunk's stored bytes.
func chunkCRC(e *encChunk) uint32 {
	h := crc32.NewIEEE()
	for _, g := range e.groups {
		h.Write(g)
	}
	return h.Sum32()
}

// run is a run of consecutive chunk indices [lo, hi).
type run struct{ lo, hi int }

// runsOf groups sorted chunk indices into runs of consecutive ones.
func runsOf(idx []int) []run {
	var rs []run
	for _, i := range idx {
		if n := len(rs); n > 0 && rs[n-1].hi == i {
			rs[n-1].hi++
			continue
		}
		rs = append(rs, run{i, i + 1})
	}
	return rs
}

// readSpan is the bytes one read of run r in region g covers: whole slots
// up to the last chunk, whose stored bytes are rounded up to a block.
func (lay *layout) readSpan(g int, r run, levelOf func(int) (Level, int)) int64 {
	l, n := levelOf(r.hi - 1)
	return int64(r.hi-1-r.lo)*lay.slot[g] + alignUp(int64(lay.groupSize(g, l, n)))
}

// writeChunks writes encoded chunks (sorted by index) into f: one write
// per run of consecutive chunks per region, whole slots, then one sync.
func (lay *layout) writeChunks(f *flash.File, idx []int, enc map[int]*encChunk) (int64, int, error) {
	var bytesW int64
	ops := 0
	for g := 0; g < lay.groups; g++ {
		for _, r := range runsOf(idx) {
			buf := flash.AlignedBuf(int((r.hi - r.lo)) * int(lay.slot[g]))
			for i := r.lo; i < r.hi; i++ {
				copy(buf[int64(i-r.lo)*lay.slot[g]:], enc[i].groups[g])
			}
			if err := f.WriteAt(buf, lay.slotOff(g, r.lo)); err != nil {
				return bytesW, ops, err
			}
			bytesW += int64(len(buf))
			ops++
		}
	}
	if err := f.Sync(); err != nil {
		return bytesW, ops, err
	}
	return bytesW, ops, nil
}
