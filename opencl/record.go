package opencl

import "fmt"

// Recording is a list of launches captured between StartRecording and
// StopRecording, to be enqueued again by Replay with the same kernels,
// sizes and arguments. A caller records a step once and replays it while
// nothing it depends on changes: the buffers are the same objects, so new
// contents written into them are what the replayed launches read.
type Recording struct {
	launches []recLaunch
	args     []argSlot // every launch's arguments, concatenated
	// cb is the command buffer Bake made of the launches (0: none), on
	// device cbDev (cmdbuf.go); priv[i] is the private copy of launch i's
	// kernel that the buffer's command i runs, released with the buffer.
	cb    handle
	cbDev *Device
	priv  []handle
}

// recLaunch is one recorded launch; its arguments are
// Recording.args[off : off+n].
type recLaunch struct {
	k        *Kernel
	off, n   int
	dim      int
	sizes    [6]uintptr
	hasLocal bool
	label    string
}

// Len is the number of recorded launches.
func (r *Recording) Len() int { return len(r.launches) }

// StartRecording empties r and appends every later successful Launch to
// it (the launches are enqueued as usual) until StopRecording. A command
// buffer baked from r's earlier launches is released: it would replay
// them, not the new ones.
func (d *Device) StartRecording(r *Recording) {
	r.Release()
	d.mu.Lock()
	r.launches, r.args = r.launches[:0], r.args[:0]
	d.rec = r
	d.mu.Unlock()
}

// StopRecording ends the recording StartRecording began.
func (d *Device) StopRecording() {
	d.mu.Lock()
	d.rec = nil
	d.mu.Unlock()
}

// record appends a launch that was just enqueued (d.mu held).
func (d *Device) record(k *Kernel, a []argSlot, dim int, hasLocal bool) {
	r := d.rec
	l := recLaunch{k: k, off: len(r.args), n: len(a), dim: dim, hasLocal: hasLocal, label: d.label}
	copy(l.sizes[:], d.sizes)
	r.args = append(r.args, a...)
	r.launches = append(r.launches, l)
}

// Replay enqueues r's launches again, in order, with the label each had
// (for Profile). It does not wait. It checks only that the device and
// the kernels are still open: the caller vouches that the buffers are.
// A recording Bake made a command buffer of is enqueued as that buffer,
// unless the driver refuses it, when the buffer is dropped and the
// launches are enqueued one by one.
func (d *Device) Replay(r *Recording) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("opencl: Replay on a closed device")
	}
	// Checked before anything is enqueued, so that a refused replay
	// leaves no part of r run.
	if err := r.kernelsOpen(d); err != nil {
		return fmt.Errorf("opencl: Replay: %w", err)
	}
	if r.cb != 0 && r.cbDev == d && !d.profile && d.replayBakedLocked(r) {
		return nil
	}
	for i := range r.launches {
		l := &r.launches[i]
		copy(d.sizes, l.sizes[:])
		var localp *uintptr
		if l.hasLocal {
			localp = &d.sizes[3]
		}
		var evp *handle
		if d.profile {
			d.ev[0] = 0
			evp = &d.ev[0]
		}
		bad, code := d.enqueue(l.k.k, r.args[l.off:l.off+l.n], l.dim, localp, evp)
		if code != clSuccess {
			if bad >= 0 {
				return fmt.Errorf("opencl: replay of %s: argument %d: %w", l.k.name, bad, clErr("clSetKernelArg", code))
			}
			return fmt.Errorf("opencl: replay of %s: %w", l.k.name, clErr("clEnqueueNDRangeKernel", code))
		}
		if err := d.launched(l.k, l.label); err != nil {
			return err
		}
	}
	return nil
}

// Append adds o's launches after r's, as if they had been recorded into r
// in that order: replaying r then replays both. It drops a command buffer
// baked from r (it would miss o's launches); o is unchanged.
func (r *Recording) Append(o *Recording) {
	r.Release()
	base := len(r.args)
	r.args = append(r.args, o.args...)
	for _, l := range o.launches {
		l.off += base
		r.launches = append(r.launches, l)
	}
}

// Reset empties r, releasing what Bake made of it, for a caller that
// builds recordings with Append.
func (r *Recording) Reset() {
	r.Release()
	r.launches, r.args = r.launches[:0], r.args[:0]
}
