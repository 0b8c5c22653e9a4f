//go:build !linux

package flash

import "errors"

const oDirect = 0

func memoryFS(dir string) (string, error) { return "", nil }

func fadviseDontNeed(fd uintptr, off, n int64) error {
	return errors.New("fadvise is only implemented on Linux")
}

// directSupported is false off Linux: O_DIRECT is Linux's flag, and this
// package would rather refuse than measure the page cache.
func directSupported() bool { return false }

func pread(fd int, b []byte, off int64, direct bool) (int, error) {
	return 0, errors.New("flash: pread is only implemented on Linux")
}

func pwrite(fd int, b []byte, off int64) (int, error) {
	return 0, errors.New("flash: pwrite is only implemented on Linux")
}
