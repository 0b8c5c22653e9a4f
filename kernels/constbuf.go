package kernels

import (
	"fmt"
	"unsafe"
)

// ConstPlacer is implemented by devices that can hold a model's constants
// (weights) without a second host copy beside the device's own: the engine
// uses it when it uploads constants at Open.
type ConstPlacer interface {
	// SharesHostMemory reports whether the device reads host memory
	// directly (CPU devices, phone GPUs with unified memory), where a
	// weight mapped from the model file can be used in place.
	SharesHostMemory() bool
	// AllocView wraps p, read-only, as a buffer the kernels read in place
	// (no copy). p must be memory outside the Go heap (a file mapping) that
	// stays valid and unchanged until the buffer is released. ok is false,
	// with no error, when the device cannot use p in place (its address is
	// not aligned as the device needs); the caller then copies.
	AllocView(p []byte) (b Buf, ok bool, err error)
	// AllocFilled allocates size bytes whose initial contents fill writes
	// straight into the buffer (or its staging area), so no host copy of
	// the data outlives the call.
	AllocFilled(size int, fill func(dst []byte) error) (Buf, error)
}

var _ ConstPlacer = (*Lib)(nil)

// viewAlign is the least alignment AllocView accepts, whatever the device
// reports: kernels load float4s and wider from weight buffers, and a
// compiler may assume the alignment of those types.
const viewAlign = 64

// SharesHostMemory is the device's CL_DEVICE_HOST_UNIFIED_MEMORY (true for
// every CPU device).
func (l *Lib) SharesHostMemory() bool { return l.dev.Info().Unified }

// AllocView wraps p as a CL_MEM_USE_HOST_PTR buffer when p starts on the
// device's base-address alignment (and on 64 bytes).
func (l *Lib) AllocView(p []byte) (Buf, bool, error) {
	if len(p) == 0 {
		return Buf{}, false, fmt.Errorf("kernels: AllocView of no bytes")
	}
	align := max(l.dev.Info().BaseAddrAlign, viewAlign)
	if uintptr(unsafe.Pointer(&p[0]))%uintptr(align) != 0 {
		return Buf{}, false, nil
	}
	m, err := l.dev.AllocHost(unsafe.Pointer(&p[0]), len(p))
	if err != nil {
		return Buf{}, false, err
	}
	return Buf{Mem: m}, true, nil
}

// AllocFilled allocates the buffer as host-visible memory
// (CL_MEM_ALLOC_HOST_PTR) on a device sharing host memory and as plain
// device memory otherwise, and fills it through a mapping.
func (l *Lib) AllocFilled(size int, fill func(dst []byte) error) (Buf, error) {
	m, err := l.dev.AllocFilled(size, l.SharesHostMemory(), fill)
	if err != nil {
		return Buf{}, err
	}
	return Buf{Mem: m}, nil
}
