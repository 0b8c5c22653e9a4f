//go:build unix

package graph

import (
	"fmt"
	"os"
	"syscall"
)

// mapping is a region of memory holding a file's bytes; release (nil for
// memory the package does not own) gives it back.
type mapping struct {
	data    []byte
	release func() error
}

// mapFile maps the regular file at path read-only and private. With noFollow
// the final path component may not be a symlink. An empty file maps to an
// empty slice (mmap rejects zero lengths).
func mapFile(path string, noFollow bool) (mapping, error) {
	flags := os.O_RDONLY
	if noFollow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return mapping{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return mapping{}, err
	}
	if !fi.Mode().IsRegular() {
		return mapping{}, fmt.Errorf("%s is not a regular file", path)
	}
	size := fi.Size()
	if size == 0 {
		return mapping{data: []byte{}}, nil
	}
	if int64(int(size)) != size || size < 0 {
		return mapping{}, fmt.Errorf("%s: %d bytes do not fit the address space", path, size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return mapping{}, fmt.Errorf("mmap %s: %w", path, err)
	}
	released := false
	return mapping{data: data, release: func() error {
		if released {
			return nil
		}
		released = true
		return syscall.Munmap(data)
	}}, nil
}
