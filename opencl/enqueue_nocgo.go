//go:build !cgo

package opencl

import "unsafe"

// enqueue sets k's arguments a and enqueues it over d.sizes[:dim], with
// local sizes at local (nil: the driver's choice) and the event written to
// ev (nil: none). On failure it returns the index of the argument that
// failed, or -1 when the enqueue did, and the status.
//
// Without cgo each OpenCL call is a purego.SyscallN (about 100 ns here,
// against 40 for a cgo call), so a launch costs len(a)+1 of them; the cgo
// build folds them into one crossing (enqueue_cgo.go). The arguments come
// from d.call, a heap slice, rather than from a variadic list, whose backing
// array would be allocated per call (SyscallN's arguments escape); every
// pointer in it is into d's own heap slices, which d keeps alive. d.mu is
// held.
func (d *Device) enqueue(k handle, a []argSlot, dim int, local *uintptr, ev *handle) (int, int32) {
	c := d.call
	for i := range a {
		p := &a[i]
		c[0], c[1], c[2], c[3] = k, uintptr(i), p.size, 0
		if p.local == 0 {
			c[3] = uintptr(unsafe.Pointer(&p.val))
		}
		if code := callArgs(fns.SetKernelArg, c[:4]); code != clSuccess {
			return i, code
		}
	}
	c[0], c[1], c[2], c[3], c[4] = d.queue, k, uintptr(dim), 0, uintptr(unsafe.Pointer(&d.sizes[0]))
	c[5], c[6], c[7], c[8] = uintptr(unsafe.Pointer(local)), 0, 0, uintptr(unsafe.Pointer(ev))
	return -1, callArgs(fns.EnqueueNDRangeKernel, c[:9])
}
