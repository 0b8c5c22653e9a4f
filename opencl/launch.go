package opencl

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// Local is a kernel argument of n bytes of __local memory.
type Local int

// Stats counts the device's work since Open.
type Stats struct {
	Launches     int64 // kernels enqueued
	Flushes      int64 // clFlush calls Launch made (Options.FlushEvery)
	BytesWritten int64 // by Write
	BytesRead    int64 // by Read
	BytesCopied  int64 // by Copy
	Allocs       int64 // Alloc and AllocHost calls that succeeded
	AllocBytes   int64 // bytes those calls allocated
	LiveBuffers  int64 // allocations not yet released (sub-buffers excluded)
	LiveBytes    int64 // their bytes
	Builds       int64 // programs compiled from source
	CacheHits    int64 // programs loaded from the binary cache
	CacheRejects int64 // cache entries found unusable (and removed)
	CacheWrites  int64 // binaries written to the cache
	// BakedReplays counts Replay calls run as one command buffer (Bake);
	// their launches are counted in Launches too. BakeFallbacks counts
	// command buffers the driver refused to enqueue, replayed launch by
	// launch instead.
	BakedReplays  int64
	BakeFallbacks int64
}

// Stats returns the counters.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Record is one profiled kernel execution.
type Record struct {
	Label  string // the label set by SetLabel when the kernel was launched
	Kernel string
	// Start and End are device timestamps relative to the start of the
	// first kernel profiled on this device.
	Start, End time.Duration
}

// Duration is how long the kernel ran on the device.
func (r Record) Duration() time.Duration { return r.End - r.Start }

// argSlot is one kernel argument as clSetKernelArg takes it: val holds the
// value's bytes from offset 0 (written through a pointer of the argument's
// type, so it is endian-independent); local != 0 means size bytes of
// __local memory. Its layout is the C tl_arg of enqueue_cgo.go.
type argSlot struct {
	val   uint64
	size  uintptr
	local uint32
}

type pendingLaunch struct {
	ev            handle
	label, kernel string
}

// maxPending bounds the events kept for a caller that never calls Profile:
// past it, Launch collects the completed ones into records itself.
const maxPending = 1 << 16

// SetLabel attaches label to the kernels launched from now on, for Profile.
func (d *Device) SetLabel(label string) {
	d.mu.Lock()
	d.label = label
	d.mu.Unlock()
}

// Launch enqueues k over global work-items in work-groups of local (nil:
// the driver chooses) with args: *Buffer, *Image, int32, uint32, int64, uint64,
// float32, int (passed as int32, checked for overflow) or Local. It does not
// wait. Each global size must be a multiple of its local size.
//
// On PoCL the first launch of a kernel at each local size compiles a
// work-group-size specialisation (~60 ms here); POCL_WORK_GROUP_SPECIALIZATION=0
// in the environment before the first OpenCL call avoids it.
func (d *Device) Launch(k *Kernel, global, local []int, args ...any) error {
	if k == nil {
		return fmt.Errorf("opencl: Launch: nil kernel")
	}
	dim := len(global)
	if dim < 1 || dim > 3 {
		return fmt.Errorf("opencl: launch %s: %d global dimensions; want 1 to 3", k.name, dim)
	}
	if local != nil && len(local) != dim {
		return fmt.Errorf("opencl: launch %s: local size %s has %d dimensions, global %s has %d", k.name, dims(local), len(local), dims(global), dim)
	}
	if len(args) != k.nargs {
		return fmt.Errorf("opencl: launch %s: %d arguments given, the kernel takes %d", k.name, len(args), k.nargs)
	}
	if err := k.checkLocal(local); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || k.released || k.p.d != d {
		return fmt.Errorf("opencl: launch %s: device closed or kernel released", k.name)
	}
	for i, g := range global {
		if g <= 0 {
			return fmt.Errorf("opencl: launch %s: global size %s must be positive", k.name, dims(global))
		}
		d.sizes[i] = uintptr(g)
		if local != nil {
			l := local[i]
			if l <= 0 || g%l != 0 {
				return fmt.Errorf("opencl: launch %s: global size %s is not a positive multiple of local size %s in dimension %d", k.name, dims(global), dims(local), i)
			}
			d.sizes[3+i] = uintptr(l)
		}
	}
	if cap(d.args) < len(args) {
		d.args = make([]argSlot, len(args))
	}
	a := d.args[:len(args)]
	for i, arg := range args {
		p := &a[i]
		p.val, p.local = 0, 0
		v := unsafe.Pointer(&p.val)
		switch x := arg.(type) {
		case *Buffer:
			if x == nil || x.released || x.d != d {
				return fmt.Errorf("opencl: launch %s: argument %d: nil or released *Buffer, or one of another device", k.name, i)
			}
			*(*handle)(v) = x.mem
			p.size = unsafe.Sizeof(x.mem)
		case *Image:
			if x == nil || x.b.released || x.b.d != d {
				return fmt.Errorf("opencl: launch %s: argument %d: nil *Image, one whose buffer is released, or one of another device", k.name, i)
			}
			*(*handle)(v) = x.mem
			p.size = unsafe.Sizeof(x.mem)
		case int32:
			*(*int32)(v), p.size = x, 4
		case uint32:
			*(*uint32)(v), p.size = x, 4
		case int64:
			*(*int64)(v), p.size = x, 8
		case uint64:
			*(*uint64)(v), p.size = x, 8
		case float32:
			*(*float32)(v), p.size = x, 4
		case int:
			if x < math.MinInt32 || x > math.MaxInt32 {
				return fmt.Errorf("opencl: launch %s: argument %d: int %d overflows int32 (pass int64 for a long parameter)", k.name, i, x)
			}
			*(*int32)(v), p.size = int32(x), 4
		case Local:
			if x <= 0 {
				return fmt.Errorf("opencl: launch %s: argument %d: Local(%d) must be positive", k.name, i, x)
			}
			p.size, p.local = uintptr(x), 1
		default:
			return fmt.Errorf("opencl: launch %s: argument %d has unsupported type %s (want *Buffer, *Image, int32, uint32, int64, uint64, float32, int or Local)", k.name, i, typeName(arg))
		}
	}
	var localp *uintptr
	if local != nil {
		localp = &d.sizes[3]
	}
	var evp *handle
	if d.profile {
		d.ev[0] = 0
		evp = &d.ev[0]
	}
	bad, code := d.enqueue(k.k, a, dim, localp, evp)
	if code != clSuccess {
		if bad >= 0 {
			return fmt.Errorf("opencl: launch %s: argument %d (%s): %w", k.name, bad, typeName(args[bad]), clErr("clSetKernelArg", code))
		}
		return fmt.Errorf("opencl: launch %s (global %s, local %s): %w", k.name, dims(global), dims(local), clErr("clEnqueueNDRangeKernel", code))
	}
	if d.rec != nil {
		d.record(k, a, dim, local != nil)
	}
	return d.launched(k, d.label)
}

// launched does the bookkeeping of a launch just enqueued (d.mu held):
// counts, periodic flushes and the profiling event (d.ev[0]).
func (d *Device) launched(k *Kernel, label string) error {
	d.stats.Launches++
	// A long graph enqueued without a flush may leave the GPU idle until
	// the final Finish; submit every flushEvery launches.
	if d.flushEvery > 0 {
		d.unflushed++
		if d.unflushed >= d.flushEvery {
			d.unflushed = 0
			d.stats.Flushes++
			if code := callArgs(fns.Flush, d.queueArg); code != clSuccess {
				return fmt.Errorf("opencl: launch %s: %w", k.name, clErr("clFlush", code))
			}
		}
	}
	if d.profile {
		d.pending = append(d.pending, pendingLaunch{ev: d.ev[0], label: label, kernel: k.name})
		if len(d.pending) >= maxPending {
			d.collectLocked()
		}
	}
	return nil
}

// dims formats sizes for errors. Launch's errors avoid fmt's %v and %T so
// that its slices and arguments do not escape: a launch then allocates
// nothing beyond what the caller's boxing of arguments costs.
func dims(s []int) string {
	if s == nil {
		return "nil"
	}
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func typeName(x any) string {
	if x == nil {
		return "nil"
	}
	return reflect.TypeOf(x).String()
}

// Flush submits queued commands to the device without waiting for them.
func (d *Device) Flush() error {
	if d.isClosed() {
		return fmt.Errorf("opencl: Flush on a closed device")
	}
	return clErr("clFlush", callArgs(fns.Flush, d.queueArg))
}

// Finish waits until every queued command is done.
func (d *Device) Finish() error {
	if d.isClosed() {
		return fmt.Errorf("opencl: Finish on a closed device")
	}
	return clErr("clFinish", callArgs(fns.Finish, d.queueArg))
}

// Profile returns the launches that completed since the last call, in
// launch order; launches still running are reported by a later call.
// It needs Options.Profile.
func (d *Device) Profile() ([]Record, error) {
	if !d.profile {
		return nil, fmt.Errorf("opencl: Profile: the device was opened without Options.Profile")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.collectLocked()
	out := d.done
	d.done = nil
	return out, nil
}

// collectLocked moves completed pending launches into d.done.
func (d *Device) collectLocked() {
	n := len(d.pending)
	if n == 0 {
		return
	}
	status := make([]int32, n)
	start := make([]uint64, n)
	end := make([]uint64, n)
	for i, p := range d.pending {
		status[i] = eventTimes(p.ev, &start[i], &end[i])
	}
	keep := d.pending[:0]
	for i, p := range d.pending {
		switch {
		case status[i] > clComplete:
			keep = append(keep, p)
		case status[i] == clComplete:
			if !d.hasBase {
				d.base, d.hasBase = uint64(start[i]), true
			}
			d.done = append(d.done, Record{
				Label:  p.label,
				Kernel: p.kernel,
				Start:  time.Duration(int64(uint64(start[i]) - d.base)),
				End:    time.Duration(int64(uint64(end[i]) - d.base)),
			})
		}
		// A failed command (negative status) has no times; it was released.
	}
	clear(d.pending[len(keep):])
	d.pending = keep
}

// releasePendingLocked drops profiling events without reading them.
func (d *Device) releasePendingLocked() {
	for _, p := range d.pending {
		clCall(fns.ReleaseEvent, p.ev)
	}
	d.pending = nil
}

// Release frees the kernel. It is idempotent; releasing its program
// releases it too.
func (k *Kernel) Release() {
	if k == nil {
		return
	}
	d := k.p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if k.released || d.closed {
		return
	}
	k.released = true
	clCall(fns.ReleaseKernel, k.k)
}

// eventTimes returns ev's execution status and, when it completed, its
// start and end times. An event that completed or failed (status <=
// CL_COMPLETE) is released, so the caller drops it afterwards.
func eventTimes(ev handle, start, end *uint64) int32 {
	*start, *end = 0, 0
	status := new(int32)
	if code := clCall(fns.GetEventInfo, ev, clEventExecStatus, 4, uintptr(unsafe.Pointer(status)), 0); code != clSuccess {
		*status = code
	}
	if *status > clComplete {
		return *status
	}
	if *status == clComplete {
		clCall(fns.GetEventProfilingInfo, ev, clProfilingStart, 8, uintptr(unsafe.Pointer(start)), 0)
		clCall(fns.GetEventProfilingInfo, ev, clProfilingEnd, 8, uintptr(unsafe.Pointer(end)), 0)
	}
	clCall(fns.ReleaseEvent, ev)
	return *status
}
