//go:build cgo

package opencl

/*
#include <stddef.h>
#include <stdint.h>

// The two entry points, as function pointers from dlsym (CL_API_CALL is
// empty outside Windows). Plain C types, so that no OpenCL header is needed
// to build, cross builds included.
typedef int32_t (*tl_set_arg)(void *kernel, uint32_t index, size_t size, const void *value);
typedef int32_t (*tl_enqueue)(void *queue, void *kernel, uint32_t dim, const size_t *offset,
                              const size_t *global, const size_t *local, uint32_t nwait,
                              const void *wait, void **event);

// tl_arg has the layout of the Go argSlot.
typedef struct {
	uint64_t val;
	size_t size;
	uint32_t local;
} tl_arg;

static int32_t tl_launch(uintptr_t set_arg, uintptr_t enqueue, uintptr_t queue, uintptr_t kernel,
                         uint32_t nargs, const tl_arg *args, uint32_t dim, const size_t *global,
                         const size_t *local, void **event, int32_t *bad) {
	*bad = -1;
	for (uint32_t i = 0; i < nargs; i++) {
		int32_t e = ((tl_set_arg)set_arg)((void *)kernel, i, args[i].size, args[i].local ? NULL : (const void *)&args[i].val);
		if (e != 0) {
			*bad = (int32_t)i;
			return e;
		}
	}
	return ((tl_enqueue)enqueue)((void *)queue, (void *)kernel, dim, NULL, global, local, 0, NULL, event);
}
*/
import "C"

import "unsafe"

// The Go and C argument records must agree; either line fails to compile
// when their sizes differ.
var (
	_ [unsafe.Sizeof(argSlot{}) - C.sizeof_tl_arg]byte
	_ [C.sizeof_tl_arg - unsafe.Sizeof(argSlot{})]byte
)

// enqueue sets k's arguments a and enqueues it over d.sizes[:dim], with
// local sizes at local (nil: the driver's choice) and the event written to
// ev (nil: none). On failure it returns the index of the argument that
// failed, or -1 when the enqueue did, and the status.
//
// With cgo the whole launch is one crossing into C, which calls
// clSetKernelArg per argument and clEnqueueNDRangeKernel through the
// pointers load resolved; the purego path (enqueue_nocgo.go) pays a crossing
// per call. d.mu is held.
func (d *Device) enqueue(k handle, a []argSlot, dim int, local *uintptr, ev *handle) (int, int32) {
	var argp *C.tl_arg
	if len(a) > 0 {
		argp = (*C.tl_arg)(unsafe.Pointer(&a[0]))
	}
	code := C.tl_launch(C.uintptr_t(fns.SetKernelArg), C.uintptr_t(fns.EnqueueNDRangeKernel), C.uintptr_t(d.queue), C.uintptr_t(k),
		C.uint32_t(len(a)), argp, C.uint32_t(dim), (*C.size_t)(unsafe.Pointer(&d.sizes[0])),
		(*C.size_t)(unsafe.Pointer(local)), (*unsafe.Pointer)(unsafe.Pointer(ev)), (*C.int32_t)(unsafe.Pointer(&d.bad[0])))
	return int(d.bad[0]), int32(code)
}
