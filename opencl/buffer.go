package opencl

import (
	"fmt"
	"unsafe"
)

// Buffer is a region of device memory: an allocation or a sub-buffer of one.
type Buffer struct {
	d        *Device
	mem      handle
	size     int
	off      int     // offset in parent
	parent   *Buffer // nil for an allocation
	released bool
	// images are the images over the buffer by format (Image1D), released
	// with it.
	images []*Image
}

// Size is the buffer's length in bytes.
func (b *Buffer) Size() int { return b.size }

// Offset is the sub-buffer's offset in its parent (0 for an allocation).
func (b *Buffer) Offset() int { return b.off }

// Alloc allocates size bytes of read-write device memory. Contents are
// undefined until written.
func (d *Device) Alloc(size int) (*Buffer, error) {
	return d.alloc(size, clMemReadWrite, nil, "Alloc")
}

// AllocHost wraps size bytes at p as a read-only buffer (CL_MEM_USE_HOST_PTR):
// on devices sharing host memory (Info().Unified) the kernels read p in place,
// so weights over a memory-mapped file cost no copy. p must be C or mmap
// memory, not the Go heap, and must stay valid and unchanged until the
// buffer is released.
func (d *Device) AllocHost(p unsafe.Pointer, size int) (*Buffer, error) {
	if p == nil {
		return nil, fmt.Errorf("opencl: AllocHost: nil host pointer")
	}
	return d.alloc(size, clMemUseHostPtr|clMemReadOnly, p, "AllocHost")
}

// AllocFilled allocates size bytes of read-write memory and has fill write
// their initial contents straight into a mapping of the buffer
// (clEnqueueMapBuffer with CL_MAP_WRITE_INVALIDATE_REGION), so no host copy
// of the data is made beside the buffer. With hostAlloc the buffer is
// CL_MEM_ALLOC_HOST_PTR: on a device that shares host memory (Info().Unified)
// the mapping is the buffer itself and the kernels read what fill wrote in
// place; on a discrete GPU the mapping is a staging area copied to the
// device when it is unmapped, and plain device memory (hostAlloc false) is
// the better choice there. dst must not be kept after fill returns.
func (d *Device) AllocFilled(size int, hostAlloc bool, fill func(dst []byte) error) (*Buffer, error) {
	flags := clMemReadWrite
	if hostAlloc {
		flags |= clMemAllocHostPtr
	}
	b, err := d.alloc(size, flags, nil, "AllocFilled")
	if err != nil {
		return nil, err
	}
	if err := d.fillMapped(b, fill); err != nil {
		b.Release()
		return nil, err
	}
	return b, nil
}

// fillMapped maps all of b for writing, runs fill on the mapping and unmaps
// it, waiting until the unmap is done so that the contents are in place
// before anything else is enqueued.
func (d *Device) fillMapped(b *Buffer, fill func(dst []byte) error) error {
	var code int32
	p := clCreate(fns.EnqueueMapBuffer, d.queue, b.mem, clTrue, uintptr(clMapWriteInvalidate), 0, uintptr(b.size), 0, 0, 0, uintptr(unsafe.Pointer(&code)))
	if code != clSuccess || p == 0 {
		if code == clSuccess {
			code = clInvalidOperation
		}
		return fmt.Errorf("opencl: mapping a %d-byte buffer for writing: %w", b.size, clErr("clEnqueueMapBuffer", code))
	}
	// p is C (driver) memory for as long as the mapping lasts; reading the
	// handle's bits as a pointer avoids a uintptr conversion vet rejects.
	dst := unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), b.size)
	ferr := fill(dst)
	if code := clCall(fns.EnqueueUnmapMemObject, d.queue, b.mem, p, 0, 0, 0); code != clSuccess {
		return fmt.Errorf("opencl: unmapping a %d-byte buffer: %w", b.size, clErr("clEnqueueUnmapMemObject", code))
	}
	if code := clCall(fns.Finish, d.queue); code != clSuccess {
		return fmt.Errorf("opencl: waiting for an unmap: %w", clErr("clFinish", code))
	}
	if ferr != nil {
		return ferr
	}
	d.mu.Lock()
	d.stats.BytesWritten += int64(b.size)
	d.mu.Unlock()
	return nil
}

func (d *Device) alloc(size int, flags uint64, host unsafe.Pointer, op string) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("opencl: %s(%d): size must be positive", op, size)
	}
	if int64(size) > d.info.MaxAlloc {
		return nil, fmt.Errorf("opencl: %s(%d): larger than the device's largest allocation (%d bytes, CL_DEVICE_MAX_MEM_ALLOC_SIZE)", op, size, d.info.MaxAlloc)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("opencl: %s on a closed device", op)
	}
	var code int32
	mem := clCreate(fns.CreateBuffer, d.ctx, uintptr(flags), uintptr(size), uintptr(host), uintptr(unsafe.Pointer(&code)))
	if code != clSuccess {
		return nil, fmt.Errorf("opencl: %s(%d) (live: %d buffers, %d bytes): %w", op, size, d.stats.LiveBuffers, d.stats.LiveBytes, clErr("clCreateBuffer", code))
	}
	b := &Buffer{d: d, mem: mem, size: size}
	d.buffers[b] = struct{}{}
	d.stats.Allocs++
	d.stats.AllocBytes += int64(size)
	d.stats.LiveBuffers++
	d.stats.LiveBytes += int64(size)
	return b, nil
}

// Sub returns the sub-buffer [offset, offset+size) of b (clCreateSubBuffer).
// offset must be a multiple of Info().BaseAddrAlign. A sub-buffer keeps its
// parent's memory alive until both are released; a sub-buffer of a
// sub-buffer is made from the root allocation.
func (b *Buffer) Sub(offset, size int) (*Buffer, error) {
	d := b.d
	if offset < 0 || size <= 0 || offset+size > b.size {
		return nil, fmt.Errorf("opencl: Sub(%d, %d) of a %d-byte buffer: out of range", offset, size, b.size)
	}
	root, abs := b, offset
	if b.parent != nil {
		root, abs = b.parent, b.off+offset
	}
	if align := d.info.BaseAddrAlign; align > 0 && abs%align != 0 {
		return nil, fmt.Errorf("opencl: Sub(%d, %d): offset %d in the allocation is not a multiple of the device's base address alignment (%d bytes)", offset, size, abs, align)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if b.released || root.released {
		return nil, fmt.Errorf("opencl: Sub(%d, %d) of a released buffer", offset, size)
	}
	var code int32
	region := &[2]uintptr{uintptr(abs), uintptr(size)} // cl_buffer_region
	mem := clCreate(fns.CreateSubBuffer, root.mem, 0, clBufferRegion, uintptr(unsafe.Pointer(region)), uintptr(unsafe.Pointer(&code)))
	if code != clSuccess {
		return nil, fmt.Errorf("opencl: Sub(%d, %d) of a %d-byte buffer: %w", offset, size, b.size, clErr("clCreateSubBuffer", code))
	}
	// The spec leaves open whether a sub-buffer keeps its parent alive;
	// retaining it makes releasing the parent first safe everywhere.
	clCall(fns.RetainMemObject, root.mem)
	sub := &Buffer{d: d, mem: mem, size: size, off: abs, parent: root}
	d.buffers[sub] = struct{}{}
	return sub, nil
}

// Release frees the buffer once queued commands using it are done. It is
// idempotent, and a no-op after the device is closed.
func (b *Buffer) Release() {
	if b == nil {
		return
	}
	d := b.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if b.released || d.closed {
		return
	}
	b.released = true
	b.releaseImagesLocked()
	clCall(fns.ReleaseMemObject, b.mem)
	delete(d.buffers, b)
	if b.parent != nil {
		clCall(fns.ReleaseMemObject, b.parent.mem)
	} else {
		d.stats.LiveBuffers--
		d.stats.LiveBytes -= int64(b.size)
	}
}

// check validates a byte range of b for op on d.
func (b *Buffer) check(d *Device, op string, off, n int) error {
	if b == nil {
		return fmt.Errorf("opencl: %s: nil buffer", op)
	}
	if b.d != d {
		return fmt.Errorf("opencl: %s: buffer belongs to device %s, not %s", op, b.d.info.Index, d.info.Index)
	}
	d.mu.Lock()
	closed, released := d.closed, b.released
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("opencl: %s on a closed device", op)
	}
	if released {
		return fmt.Errorf("opencl: %s: buffer released", op)
	}
	if off < 0 || n < 0 || off+n > b.size {
		return fmt.Errorf("opencl: %s: bytes [%d, %d) outside a %d-byte buffer", op, off, off+n, b.size)
	}
	return nil
}

// Write copies src into b at byte offset off and returns when it is done.
func (d *Device) Write(b *Buffer, off int, src []byte) error {
	if err := b.check(d, "Write", off, len(src)); err != nil || len(src) == 0 {
		return err
	}
	code := clCall(fns.EnqueueWriteBuffer, d.queue, b.mem, clTrue, uintptr(off), uintptr(len(src)), uintptr(unsafe.Pointer(&src[0])), 0, 0, 0)
	if code != clSuccess {
		return fmt.Errorf("opencl: Write %d bytes at %d of a %d-byte buffer: %w", len(src), off, b.size, clErr("clEnqueueWriteBuffer", code))
	}
	d.mu.Lock()
	d.stats.BytesWritten += int64(len(src))
	d.mu.Unlock()
	return nil
}

// Read copies len(dst) bytes of b from byte offset off into dst once the
// work queued before it is done, and returns when it is done.
func (d *Device) Read(b *Buffer, off int, dst []byte) error {
	if err := b.check(d, "Read", off, len(dst)); err != nil || len(dst) == 0 {
		return err
	}
	code := clCall(fns.EnqueueReadBuffer, d.queue, b.mem, clTrue, uintptr(off), uintptr(len(dst)), uintptr(unsafe.Pointer(&dst[0])), 0, 0, 0)
	if code != clSuccess {
		return fmt.Errorf("opencl: Read %d bytes at %d of a %d-byte buffer: %w", len(dst), off, b.size, clErr("clEnqueueReadBuffer", code))
	}
	d.mu.Lock()
	d.stats.BytesRead += int64(len(dst))
	d.mu.Unlock()
	return nil
}

// Copy enqueues a copy of n bytes from src at srcOff to dst at dstOff.
// Overlapping ranges of one allocation are an error, as in OpenCL.
func (d *Device) Copy(dst *Buffer, dstOff int, src *Buffer, srcOff, n int) error {
	if err := src.check(d, "Copy source", srcOff, n); err != nil {
		return err
	}
	if err := dst.check(d, "Copy destination", dstOff, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if src.root() == dst.root() {
		s, t := src.off+srcOff, dst.off+dstOff
		if s < t+n && t < s+n {
			return fmt.Errorf("opencl: Copy %d bytes: source [%d, %d) and destination [%d, %d) overlap in one allocation", n, s, s+n, t, t+n)
		}
	}
	code := clCall(fns.EnqueueCopyBuffer, d.queue, src.mem, dst.mem, uintptr(srcOff), uintptr(dstOff), uintptr(n), 0, 0, 0)
	if code != clSuccess {
		return fmt.Errorf("opencl: Copy %d bytes: %w", n, clErr("clEnqueueCopyBuffer", code))
	}
	d.mu.Lock()
	d.stats.BytesCopied += int64(n)
	d.mu.Unlock()
	return nil
}

func (b *Buffer) root() *Buffer {
	if b.parent != nil {
		return b.parent
	}
	return b
}

// Fill enqueues filling n bytes of b from off with repeats of pattern, whose
// length must be 1, 2, 4, 8, 16, 32, 64 or 128 and divide off and n.
func (d *Device) Fill(b *Buffer, off, n int, pattern []byte) error {
	if err := b.check(d, "Fill", off, n); err != nil {
		return err
	}
	p := len(pattern)
	if p == 0 || p > 128 || p&(p-1) != 0 {
		return fmt.Errorf("opencl: Fill: pattern of %d bytes; want 1, 2, 4, ..., 128", p)
	}
	if off%p != 0 || n%p != 0 {
		return fmt.Errorf("opencl: Fill: offset %d and size %d must be multiples of the %d-byte pattern", off, n, p)
	}
	if n == 0 {
		return nil
	}
	code := clCall(fns.EnqueueFillBuffer, d.queue, b.mem, uintptr(unsafe.Pointer(&pattern[0])), uintptr(p), uintptr(off), uintptr(n), 0, 0, 0)
	if code != clSuccess {
		return fmt.Errorf("opencl: Fill %d bytes at %d: %w", n, off, clErr("clEnqueueFillBuffer", code))
	}
	return nil
}
