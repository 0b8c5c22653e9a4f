package flash

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tlite/tlite/engine/atomicfile"
)

// writerBuf is the Writer's aligned staging buffer: large enough that a
// whole-file rewrite runs at the device's sequential write speed.
const writerBuf = 1 << 20

// Writer rewrites a file whole and atomically: bytes stream through a
// page-aligned buffer into a temporary file beside the target with direct
// I/O; Commit syncs it, renames it over the target and syncs the directory.
// A crash or an Abort at any point leaves the old file intact and no
// half-written file under the target's name. Use it for files replaced
// whole (an LLMS context's metadata); files updated in place use OpenRW.
type Writer struct {
	path, tmp string
	f         *File
	buf       []byte
	n         int   // bytes staged in buf
	off       int64 // bytes already written to the file
	err       error // first failure; sticky
	done      bool
}

// Create starts the atomic replacement of path. The caller must end with
// Commit or Abort (deferring Abort after a successful Commit is harmless).
func Create(path string, opt Options) (*Writer, error) {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	f, err := open(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, opt)
	if err != nil {
		return nil, fmt.Errorf("flash: create %s: %w", path, err)
	}
	return &Writer{path: path, tmp: tmp, f: f, buf: AlignedBuf(writerBuf)}, nil
}

// Write stages p, writing full buffers to the temporary file.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.done {
		return 0, fmt.Errorf("flash: write %s: writer already finished", w.path)
	}
	total := len(p)
	for len(p) > 0 {
		c := copy(w.buf[w.n:], p)
		w.n += c
		p = p[c:]
		if w.n == len(w.buf) {
			if err := w.flush(len(w.buf)); err != nil {
				return total - len(p), err
			}
		}
	}
	return total, nil
}

// flush writes the first n staged bytes (a multiple of BlockSize).
func (w *Writer) flush(n int) error {
	if err := w.f.WriteAt(w.buf[:n], w.off); err != nil {
		w.err = err
		return err
	}
	w.off += int64(n)
	w.n = copy(w.buf, w.buf[n:w.n])
	return nil
}

// Commit writes the remaining bytes, makes the file durable and atomically
// replaces the target. The tail is written as a zero-padded whole block and
// the file then truncated to its exact length, since direct I/O cannot
// write a partial block.
func (w *Writer) Commit() error {
	if w.done {
		return fmt.Errorf("flash: commit %s: writer already finished", w.path)
	}
	if w.err == nil && w.n > 0 {
		size := w.off + int64(w.n)
		padded := int(alignUp(int64(w.n)))
		clear(w.buf[w.n:padded])
		w.n = padded
		if err := w.flush(padded); err == nil {
			w.err = w.f.Truncate(size)
		}
	}
	if w.err == nil {
		w.err = w.f.Sync()
	}
	if w.err != nil {
		err := w.err
		w.Abort()
		return fmt.Errorf("flash: commit %s: %w", w.path, err)
	}
	w.done = true
	if err := w.f.Close(); err != nil {
		os.Remove(w.tmp)
		return fmt.Errorf("flash: commit %s: %w", w.path, err)
	}
	if err := os.Rename(w.tmp, w.path); err != nil {
		os.Remove(w.tmp)
		return fmt.Errorf("flash: commit %s: %w", w.path, err)
	}
	return atomicfile.SyncDir(filepath.Dir(w.path))
}

// Abort discards the temporary file; the target is untouched.
func (w *Writer) Abort() error {
	if w.done {
		return nil
	}
	w.done = true
	cerr := w.f.Close()
	rerr := os.Remove(w.tmp)
	if err := errors.Join(cerr, rerr); err != nil {
		return fmt.Errorf("flash: abort %s: %w", w.path, err)
	}
	return nil
}
