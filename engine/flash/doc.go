// Package flash is tlite's stand-in for phone flash storage: files read and
// written with O_DIRECT through page-aligned buffers, an asynchronous reader
// pool with a configurable queue depth, and statistics precise enough to
// report what a storage-bound system actually did (operations, bytes, a
// latency histogram, contiguous-run lengths, per-size counts).
//
// Why O_DIRECT: this machine may not drop the page cache, so an ordinary read
// of a file written moments ago costs what RAM costs, not what flash costs.
// Every read here bypasses the cache, and [ReadProcIO] exposes the kernel's
// own count (/proc/self/io read_bytes) so a test can check that the bytes a
// system planned to read really reached the block device.
//
// File systems that cannot do direct I/O are refused with [ErrNoDirect].
// That includes tmpfs and ramfs even on kernels (6.6 and later) that accept
// the O_DIRECT flag there and silently serve the request from memory. The
// only alternative is the explicit [Options.Buffered] opt-in, whose
// statistics carry a label saying what was measured.
//
// How the systems use it (systems-spec §0.3, hook H6):
//
//   - LLMS keeps one layer-major swap file per context, opened with
//     [OpenRW]: region l holds fixed 512-byte-aligned slots for every chunk
//     of layer l, so a level change rewrites a slot in place with
//     [File.WriteAt], and the ahead-of-time swap-out at the end of a call is
//     a batch of such writes followed by [File.Sync]. At a switch, the I/O
//     thread submits one [Batch] per layer to a [Pool] (runs of consecutive
//     chunks coalesced into single requests by the caller) and waits for
//     layer l's batch before releasing the layer gate. The context's
//     metadata file (ctx-<id>.json) is replaced whole with [Writer].
//   - DynaKV keeps one file per layer of page-aligned cluster pools. At each
//     decoding step the layer hook submits the selected clusters' extents
//     as one batch (queue depth at least 4) and prefetches the next layer's
//     while the current one computes; appends are flushed a full page at a
//     time with [File.WriteAt]. Its per-token figures (bytes and read ops
//     per token, mean contiguous run length) come from [Stats.Snapshot].
//
// BenchmarkReadSize in this package reproduces the read-size curve of
// machine-facts.md (4 KB..1 MB at queue depth 1, 4 and 8).
//
// An optional [Throttle] adds delays that emulate a slower device (UFS
// bandwidth and IOPS); statistics gathered under it are labelled as
// emulation. The package is self-contained: it imports nothing from the
// engine, so engine subsystems can import it.
package flash
