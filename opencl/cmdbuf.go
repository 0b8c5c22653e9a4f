package opencl

import (
	"fmt"
	"os"
	"unsafe"
)

// Command buffers (cl_khr_command_buffer) let a driver take a whole list of
// launches, with their arguments and sizes, once, and run it again with one
// call. A Recording (record.go) is exactly such a list, fixed until it is
// recorded again, so Bake turns it into a command buffer and Replay then
// enqueues that instead of the launches one by one. The extension's entry
// points are not exported by the ICD loader: they come from
// clGetExtensionFunctionAddressForPlatform, per platform.
//
// The prototypes used (cl_khr_command_buffer 0.9.x, as the Khronos
// registry gives them):
//
//	cl_command_buffer_khr clCreateCommandBufferKHR(cl_uint num_queues,
//	    const cl_command_queue *queues, const cl_command_buffer_properties_khr *props,
//	    cl_int *errcode_ret);
//	cl_int clFinalizeCommandBufferKHR(cl_command_buffer_khr);
//	cl_int clReleaseCommandBufferKHR(cl_command_buffer_khr);
//	cl_int clCommandNDRangeKernelKHR(cl_command_buffer_khr, cl_command_queue (NULL),
//	    const props *, cl_kernel, cl_uint work_dim, const size_t *offset,
//	    const size_t *global, const size_t *local, cl_uint num_sync_points,
//	    const cl_sync_point_khr *wait, cl_sync_point_khr *sync_point,
//	    cl_mutable_command_khr *mutable_handle);
//	cl_int clEnqueueCommandBufferKHR(cl_uint num_queues, cl_command_queue *queues,
//	    cl_command_buffer_khr, cl_uint num_events, const cl_event *wait, cl_event *event);
//
// Only the arguments' ABI matters here (every pointer and handle is one
// machine word, cl_uint and cl_int are 32-bit), so the provisional
// versions' renamed property types change nothing.

const (
	clCommandBufferFlags      = 0x1293 // CL_COMMAND_BUFFER_FLAGS_KHR
	clCommandBufferSimultUse  = 1 << 0 // CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR
	clDeviceCommandBufferCaps = 0x12A9 // CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR
	clCommandBufferCapSimult  = 1 << 2 // CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR
)

// cbFuncs are one platform's command-buffer entry points.
type cbFuncs struct {
	create, finalize, release, ndrange, enqueue uintptr
	// simultaneous says the device lets a command buffer be enqueued again
	// while an earlier enqueue of it is still pending (a decode step
	// enqueues each of its buffers once per step, but a caller that does not
	// wait between steps would otherwise get CL_INVALID_OPERATION).
	simultaneous bool
}

// CommandBuffersEnv is the environment variable that, set to "0" or "off",
// keeps a device from using command buffers at all (HasCommandBuffers is
// then false), whatever the driver offers.
const CommandBuffersEnv = "TLITE_CMDBUF"

// loadCommandBuffers resolves the command-buffer entry points of d's
// platform when the device names the extension; it leaves d.cb nil when any
// is missing or the environment turns them off.
func (d *Device) loadCommandBuffers() {
	if v := os.Getenv(CommandBuffersEnv); v == "0" || v == "off" {
		return
	}
	if fns.GetExtensionFunctionAddressForPlatform == 0 || !d.HasExtension("cl_khr_command_buffer") {
		return
	}
	get := func(name string) uintptr {
		return clCreate(fns.GetExtensionFunctionAddressForPlatform, d.platform, uintptr(unsafe.Pointer(cstr(name))))
	}
	f := &cbFuncs{
		create:   get("clCreateCommandBufferKHR"),
		finalize: get("clFinalizeCommandBufferKHR"),
		release:  get("clReleaseCommandBufferKHR"),
		ndrange:  get("clCommandNDRangeKernelKHR"),
		enqueue:  get("clEnqueueCommandBufferKHR"),
	}
	if f.create == 0 || f.finalize == 0 || f.release == 0 || f.ndrange == 0 || f.enqueue == 0 {
		return
	}
	var caps uint64
	if devInfo(d.id, clDeviceCommandBufferCaps, &caps) == nil {
		f.simultaneous = caps&clCommandBufferCapSimult != 0
	}
	d.cb = f
}

// HasCommandBuffers reports whether Bake can turn recordings into command
// buffers on d: the driver offers cl_khr_command_buffer, its entry points
// resolved, and TLITE_CMDBUF does not turn it off.
func (d *Device) HasCommandBuffers() bool { return d.cb != nil }

// Baked reports whether r is replayed through a command buffer.
func (r *Recording) Baked() bool { return r.cb != 0 }

// Bake records r's launches into a command buffer, which Replay enqueues
// from then on with one call instead of one per launch. The buffer holds
// what r holds (kernels, sizes, arguments) as they are now; StartRecording,
// Append and Reset on r release it, so a recording changed since never
// replays a stale one. Baking r again replaces its buffer.
//
// Bake fails, leaving r to replay launch by launch and holding nothing,
// when the device has no command buffers, when it profiles (a command
// buffer gives no event per kernel), or when the driver refuses. r must
// have been recorded on d.
func (d *Device) Bake(r *Recording) error {
	if d.cb == nil {
		return fmt.Errorf("opencl: Bake: %s has no usable cl_khr_command_buffer", d.info.Name)
	}
	if d.profile {
		return fmt.Errorf("opencl: Bake: a profiling device times each launch, which a command buffer does not")
	}
	if len(r.launches) == 0 {
		return fmt.Errorf("opencl: Bake: empty recording")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("opencl: Bake on a closed device")
	}
	if r.cbDev != nil && r.cbDev != d {
		return fmt.Errorf("opencl: Bake: the recording is baked on another device")
	}
	d.dropBakedLocked(r)
	if err := r.kernelsOpen(d); err != nil {
		return fmt.Errorf("opencl: Bake: %w", err)
	}
	var props []uint64
	if d.cb.simultaneous {
		props = []uint64{clCommandBufferFlags, clCommandBufferSimultUse, 0}
	}
	var propp uintptr
	if props != nil {
		propp = uintptr(unsafe.Pointer(&props[0]))
	}
	code := new(int32)
	cb := clCreate(d.cb.create, 1, uintptr(unsafe.Pointer(&d.queueArg[0])), propp, uintptr(unsafe.Pointer(code)))
	if *code != clSuccess || cb == 0 {
		return fmt.Errorf("opencl: Bake: %w", clErr("clCreateCommandBufferKHR", *code))
	}
	// From here r holds the buffer and the kernel copies made so far, so
	// that a failure part way releases them all (d.mu is held throughout:
	// no Replay sees the buffer before it is finalized).
	r.cb, r.cbDev = cb, d
	if d.baked == nil {
		d.baked = map[*Recording]struct{}{}
	}
	d.baked[r] = struct{}{}
	fail := func(err error) error {
		d.dropBakedLocked(r)
		return fmt.Errorf("opencl: Bake: %w", err)
	}
	sizes := make([]uintptr, 6)
	for i := range r.launches {
		l := &r.launches[i]
		// The spec has the command capture the kernel's arguments as set
		// now. PoCL 3.1 instead reads them from the kernel object at each
		// enqueue of the buffer, so every command gets a kernel object of
		// its own, whose arguments nothing else sets.
		var code int32
		k := clCreate(fns.CreateKernel, l.k.p.prog, uintptr(unsafe.Pointer(cstr(l.k.name))), uintptr(unsafe.Pointer(&code)))
		if code != clSuccess {
			return fail(fmt.Errorf("private copy of kernel %s: %w", l.k.name, clErr("clCreateKernel", code)))
		}
		r.priv = append(r.priv, k)
		for j, a := range r.args[l.off : l.off+l.n] {
			var v uintptr
			if a.local == 0 {
				v = uintptr(unsafe.Pointer(&r.args[l.off+j].val))
			}
			if c := clCall(fns.SetKernelArg, k, uintptr(j), a.size, v); c != clSuccess {
				return fail(fmt.Errorf("%s argument %d: %w", l.k.name, j, clErr("clSetKernelArg", c)))
			}
		}
		copy(sizes, l.sizes[:])
		var localp uintptr
		if l.hasLocal {
			localp = uintptr(unsafe.Pointer(&sizes[3]))
		}
		// The queue is in order, and commands of a buffer made for an
		// in-order queue run in the order recorded, so no sync points.
		c := clCall(d.cb.ndrange, cb, 0, 0, k, uintptr(l.dim), 0, uintptr(unsafe.Pointer(&sizes[0])), localp, 0, 0, 0, 0)
		if c != clSuccess {
			return fail(fmt.Errorf("%s: %w", l.k.name, clErr("clCommandNDRangeKernelKHR", c)))
		}
	}
	if c := clCall(d.cb.finalize, cb); c != clSuccess {
		return fail(clErr("clFinalizeCommandBufferKHR", c))
	}
	return nil
}

// kernelsOpen reports the first of r's kernels that is released or not
// d's (Bake and Replay refuse r then).
func (r *Recording) kernelsOpen(d *Device) error {
	for i := range r.launches {
		if k := r.launches[i].k; k.released || k.p.d != d {
			return fmt.Errorf("kernel %s released or of another device", k.name)
		}
	}
	return nil
}

// Release frees r's command buffer and the kernel copies its commands
// run, if Bake made them; r still replays launch by launch. Device.Close
// releases those still held.
func (r *Recording) Release() {
	d := r.cbDev
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropBakedLocked(r)
}

// dropBakedLocked releases r's command buffer and kernel copies (d.mu
// held).
func (d *Device) dropBakedLocked(r *Recording) {
	if r.cbDev != d {
		return
	}
	if !d.closed {
		if r.cb != 0 {
			clCall(d.cb.release, r.cb)
		}
		for _, h := range r.priv {
			clCall(fns.ReleaseKernel, h)
		}
	}
	clear(r.priv)
	r.cb, r.priv, r.cbDev = 0, r.priv[:0], nil
	delete(d.baked, r)
}

// BakedObjects counts what Bake made on d that is not released yet: the
// command buffers and the kernel copies their commands run. Both fall to
// 0 when every baked recording is released (Release, Reset, Append,
// StartRecording, a failed Bake) and after Close; tests check that for
// leaks.
func (d *Device) BakedObjects() (buffers, kernels int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for r := range d.baked {
		if r.cb != 0 {
			buffers++
		}
		kernels += len(r.priv)
	}
	return buffers, kernels
}

// replayBakedLocked enqueues r's command buffer (d.mu held). It reports
// false, having dropped the buffer, when the driver refuses the enqueue:
// the caller then replays launch by launch.
func (d *Device) replayBakedLocked(r *Recording) bool {
	// PoCL 3.1 writes the event without checking for NULL, so one is
	// always asked for (and released at once). d.call and d.ev are heap
	// slices d keeps, so the call allocates nothing.
	d.ev[0] = 0
	c := d.call
	c[0], c[1], c[2], c[3], c[4], c[5] = 0, 0, r.cb, 0, 0, uintptr(unsafe.Pointer(&d.ev[0]))
	code := callArgs(d.cb.enqueue, c[:6])
	if code != clSuccess {
		d.dropBakedLocked(r)
		d.stats.BakeFallbacks++
		return false
	}
	if d.ev[0] != 0 {
		c[0] = d.ev[0]
		callArgs(fns.ReleaseEvent, c[:1])
	}
	d.stats.Launches += int64(len(r.launches))
	d.stats.BakedReplays++
	// The launches count toward Options.FlushEvery as if enqueued one by
	// one, so a GPU gets work as early as without the buffer.
	if d.flushEvery > 0 {
		d.unflushed += len(r.launches)
		if d.unflushed >= d.flushEvery {
			d.unflushed = 0
			d.stats.Flushes++
			callArgs(fns.Flush, d.queueArg)
		}
	}
	return true
}
