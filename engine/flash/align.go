package flash

import "unsafe"

const (
	// PageSize is the alignment of every buffer this package allocates.
	// O_DIRECT only needs the logical block size for the address, but a page
	// also satisfies devices with 4 KiB logical blocks.
	PageSize = 4096
	// BlockSize is the granularity of direct-I/O offsets and lengths: the
	// logical block size of the disk this project measures on (512 B). A
	// request that is not a multiple of it is widened to the covering blocks.
	BlockSize = 512
)

// AlignedBuf returns a zeroed buffer of n bytes whose first byte sits on a
// PageSize boundary. It over-allocates on the Go heap and slices; Go's
// collector does not move heap objects, so the address stays aligned for the
// buffer's lifetime. Its capacity is n, so appends cannot silently move it.
func AlignedBuf(n int) []byte {
	if n <= 0 {
		return nil
	}
	raw := make([]byte, n+PageSize)
	skip := int((PageSize - uintptr(unsafe.Pointer(&raw[0]))%PageSize) % PageSize)
	return raw[skip : skip+n : skip+n]
}

// IsAligned reports whether b starts on a BlockSize boundary and its length
// is a multiple of BlockSize, i.e. whether it can be handed to O_DIRECT as is.
func IsAligned(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	return uintptr(unsafe.Pointer(&b[0]))%BlockSize == 0 && len(b)%BlockSize == 0
}

// alignDown and alignUp round to BlockSize.
func alignDown(x int64) int64 { return x &^ (BlockSize - 1) }
func alignUp(x int64) int64   { return (x + BlockSize - 1) &^ (BlockSize - 1) }
