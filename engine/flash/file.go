package flash

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ErrNoDirect reports that a file cannot be opened for direct I/O, or that
// its file system would serve direct I/O from memory (tmpfs, ramfs).
var ErrNoDirect = errors.New("flash: direct I/O not available")

// DefaultScratch is the size of the aligned bounce buffer used for requests
// that are not block-aligned; larger requests go through it in pieces, so
// memory stays bounded whatever the request size.
const DefaultScratch = 1 << 20

// Options configure how a file is opened.
type Options struct {
	// Buffered opts in to ordinary buffered I/O for file systems without
	// O_DIRECT: every read is followed by posix_fadvise(DONTNEED) of its
	// range and Sync drops the whole file's pages, so later reads go to the
	// device where the file system has one. The statistics' label says
	// "buffered"; on tmpfs it says that RAM is being measured.
	Buffered bool
	// Stats receives the file's statistics; nil gives the file its own.
	Stats *Stats
	// Throttle, if set, emulates a slower device (see Throttle).
	Throttle *Throttle
}

// File is an open file whose reads and writes bypass the page cache.
// Its methods are safe for concurrent use.
type File struct {
	f        *os.File
	fd       int
	path     string
	buffered bool
	stats    *Stats
	thr      *Throttle

	scratchMu sync.Mutex
	scratch   []byte // bounce buffer for unaligned synchronous reads
}

// Open opens an existing file read-only for direct I/O.
func Open(path string, opt Options) (*File, error) {
	return open(path, os.O_RDONLY, opt)
}

// OpenRW opens a file for direct reads and in-place writes, creating it if
// needed. Use it for files updated in place (swap slots, cluster pools);
// files rewritten whole go through Create instead.
func OpenRW(path string, opt Options) (*File, error) {
	return open(path, os.O_RDWR|os.O_CREATE, opt)
}

func open(path string, flag int, opt Options) (*File, error) {
	memfs, err := memoryFS(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("flash: open %s: checking file system: %w", path, err)
	}
	label := "O_DIRECT"
	if opt.Buffered {
		label = "buffered I/O + fadvise(DONTNEED), explicit opt-in, not O_DIRECT"
		if memfs != "" {
			label += "; on " + memfs + ": measures RAM, not flash"
		}
	} else {
		if !directSupported() {
			return nil, fmt.Errorf("%w: %s: O_DIRECT is implemented on Linux only; opt in to Options.Buffered to run anyway (labelled)", ErrNoDirect, path)
		}
		if memfs != "" {
			return nil, fmt.Errorf("%w: %s is on %s, which serves O_DIRECT from memory; put flash files on a disk-backed file system, or opt in to Options.Buffered (labelled as measuring RAM)", ErrNoDirect, path, memfs)
		}
		flag |= oDirect
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		if !opt.Buffered && errors.Is(err, syscall.EINVAL) {
			return nil, fmt.Errorf("%w: %s: the file system refused O_DIRECT; opt in to Options.Buffered to run anyway (labelled)", ErrNoDirect, path)
		}
		return nil, fmt.Errorf("flash: open %s: %w", path, err)
	}
	st := opt.Stats
	if st == nil {
		st = NewStats()
	}
	if opt.Throttle != nil {
		label += "; " + opt.Throttle.String()
	}
	st.label(label)
	return &File{f: f, fd: int(f.Fd()), path: path, buffered: opt.Buffered, stats: st, thr: opt.Throttle}, nil
}

// Path is the file's name as opened.
func (f *File) Path() string { return f.path }

// Stats is where the file's statistics go.
func (f *File) Stats() *Stats { return f.stats }

// Size is the file's current length.
func (f *File) Size() (int64, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return 0, fmt.Errorf("flash: stat %s: %w", f.path, err)
	}
	return fi.Size(), nil
}

// Truncate sets the file's length (a new tail reads as zeros), e.g. to size
// a swap file before its slots are written. The new tail is a hole: reading
// it costs no device I/O, so a DeviceCheck over such reads fails. Write
// slots before measuring reads of them.
func (f *File) Truncate(size int64) error {
	if err := f.f.Truncate(size); err != nil {
		return fmt.Errorf("flash: truncate %s to %d: %w", f.path, size, err)
	}
	return nil
}

// ReadAt fills dst with the file's bytes at off, or fails naming the file,
// offset and length; a range past the end of the file is an error, never a
// silent partial read. dst need not be aligned: an unaligned request is read
// through a bounce buffer as the covering whole blocks (DeviceBytes in the
// statistics counts them). Aligned requests (see IsAligned and AlignedBuf)
// go straight into dst.
func (f *File) ReadAt(dst []byte, off int64) error {
	if f.buffered || (IsAligned(dst) && off%BlockSize == 0) {
		// No bounce buffer needed, so concurrent callers do not serialise.
		var none []byte
		return f.read(dst, off, &none)
	}
	f.scratchMu.Lock()
	defer f.scratchMu.Unlock()
	return f.read(dst, off, &f.scratch)
}

// read is ReadAt with a caller-owned bounce buffer (allocated on demand).
func (f *File) read(dst []byte, off int64, scratch *[]byte) error {
	n := int64(len(dst))
	if off < 0 {
		return fmt.Errorf("flash: read %s offset %d length %d: negative offset", f.path, off, n)
	}
	if n == 0 {
		return nil
	}
	f.stats.issue(false, f, off, n)
	return f.readIssued(dst, off, scratch)
}

// readIssued is read for a request whose issue is already recorded.
func (f *File) readIssued(dst []byte, off int64, scratch *[]byte) error {
	n := int64(len(dst))
	if off < 0 {
		return fmt.Errorf("flash: read %s offset %d length %d: negative offset", f.path, off, n)
	}
	start := time.Now()
	dev, err := f.readRaw(dst, off, scratch)
	if err != nil {
		return fmt.Errorf("flash: read %s offset %d length %d: %w", f.path, off, n, err)
	}
	f.thr.wait(start, dev)
	f.stats.done(false, n, dev, time.Since(start))
	return nil
}

func (f *File) short(got, want int64) error {
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("short read (%d of %d bytes)", got, want)
	}
	return fmt.Errorf("short read (%d of %d bytes): file ends at %d", got, want, size)
}

// readRaw performs the read and returns the bytes moved by the device.
func (f *File) readRaw(dst []byte, off int64, scratch *[]byte) (int64, error) {
	n := int64(len(dst))
	if f.buffered {
		got, err := pread(f.fd, dst, off, false)
		if err != nil {
			return int64(got), err
		}
		if int64(got) < n {
			return int64(got), f.short(int64(got), n)
		}
		if err := fadviseDontNeed(uintptr(f.fd), off, n); err != nil {
			return n, err
		}
		return n, nil
	}
	if IsAligned(dst) && off%BlockSize == 0 {
		got, err := pread(f.fd, dst, off, true)
		if err != nil {
			return int64(got), err
		}
		if int64(got) < n {
			return int64(got), f.short(int64(got), n)
		}
		return n, nil
	}
	// Unaligned: read the covering blocks piecewise through the bounce buffer.
	if len(*scratch) == 0 {
		*scratch = AlignedBuf(DefaultScratch)
	}
	buf := *scratch
	lo, hi, end := alignDown(off), alignUp(off+n), off+n
	var dev int64
	for pos := lo; pos < hi; {
		m := min(hi-pos, int64(len(buf)))
		got, err := pread(f.fd, buf[:m], pos, true)
		dev += int64(got)
		if err != nil {
			return dev, err
		}
		a, b := max(pos, off), min(pos+int64(got), end)
		if b > a {
			copy(dst[a-off:b-off], buf[a-pos:b-pos])
		}
		if int64(got) < m {
			if pos+int64(got) < end {
				return dev, f.short(max(0, pos+int64(got)-off), n)
			}
			break
		}
		pos += m
	}
	return dev, nil
}

// WriteAt writes src at off in place. With direct I/O, off and len(src)
// must be multiples of BlockSize and src must start on a block boundary
// (use AlignedBuf); anything else is refused, naming file, offset and
// length, rather than silently falling back to the page cache. Durability
// needs Sync.
func (f *File) WriteAt(src []byte, off int64) error {
	n := int64(len(src))
	if off < 0 {
		return fmt.Errorf("flash: write %s offset %d length %d: negative offset", f.path, off, n)
	}
	if n == 0 {
		return nil
	}
	if !f.buffered && (!IsAligned(src) || off%BlockSize != 0) {
		return fmt.Errorf("flash: write %s offset %d length %d: direct writes need the offset, the length and the buffer address aligned to %d bytes (use AlignedBuf)", f.path, off, n, BlockSize)
	}
	f.stats.issue(true, f, off, n)
	start := time.Now()
	if _, err := pwrite(f.fd, src, off); err != nil {
		return fmt.Errorf("flash: write %s offset %d length %d: %w", f.path, off, n, err)
	}
	f.thr.wait(start, n)
	f.stats.done(true, n, n, time.Since(start))
	return nil
}

// Sync makes written data durable. In buffered mode it then drops the
// file's cached pages so that later reads go to the device.
func (f *File) Sync() error {
	if err := f.f.Sync(); err != nil {
		return fmt.Errorf("flash: sync %s: %w", f.path, err)
	}
	if f.buffered {
		if err := fadviseDontNeed(uintptr(f.fd), 0, 0); err != nil {
			return fmt.Errorf("flash: sync %s: %w", f.path, err)
		}
	}
	return nil
}

// Close closes the file.
func (f *File) Close() error {
	if err := f.f.Close(); err != nil {
		return fmt.Errorf("flash: close %s: %w", f.path, err)
	}
	return nil
}
