//go:build !unix

package graph

import (
	"fmt"
	"os"
)

// mapping is a region of memory holding a file's bytes; release (nil for
// memory the package does not own) gives it back.
type mapping struct {
	data    []byte
	release func() error
}

// mapFile reads the file into memory where mmap is not available; views then
// point into this copy instead of a mapping.
func mapFile(path string, noFollow bool) (mapping, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return mapping{}, err
	}
	if noFollow && fi.Mode()&os.ModeSymlink != 0 {
		return mapping{}, fmt.Errorf("%s is a symlink", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return mapping{}, err
	}
	return mapping{data: data}, nil
}
