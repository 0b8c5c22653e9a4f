package graph

import (
	"syscall"
	"unsafe"
)

// dropPages gives the whole pages inside b (part of a read-only private
// file mapping) back to the kernel: they leave the process's resident set,
// and a later read faults them in again from the file, unchanged.
func dropPages(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	page := uintptr(syscall.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (start + page - 1) &^ (page - 1)
	hi := (start + uintptr(len(b))) &^ (page - 1)
	if hi <= lo {
		return nil
	}
	return syscall.Madvise(b[lo-start:hi-start], syscall.MADV_DONTNEED)
}
