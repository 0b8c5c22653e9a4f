package engine

import (
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// buffer is one allocation of a backend: an OpenCL buffer, or host bytes
// for the pure-Go backend.
type buffer struct {
	cl   *opencl.Buffer
	host []byte
	size int
}

// tref addresses a tensor: a buffer and the element offset it starts at
// (elements of the tensor's own storage type).
type tref struct {
	b   *buffer
	off int
}

// chainArg is one input of an element-wise chain: its tensor and its own
// shape, which broadcasts to the chain's output shape.
type chainArg struct {
	t     tref
	shape []int
}

// backend is what a session runs on: memory, and the kernel families. The
// OpenCL backend enqueues kernels.Lib launchers; the pure-Go backend runs
// the families' reference implementations on host memory (fp32 storage
// only). Steps are written once against this interface, so tests can run
// every model on both and compare.
type backend interface {
	// name is "OpenCL" or "pure-Go", for error messages.
	name() string
	// supports reports whether s is a float storage this backend computes on.
	supports(s kernels.Storage) bool
	alloc(size int) (*buffer, error)
	release(b *buffer)
	write(b *buffer, off int, src []byte) error
	read(b *buffer, off int, dst []byte) error
	finish() error
	setLabel(label string)

	chain(c *kernels.Chain, out []int, ins []chainArg, outs []tref) error
	matmul(s kernels.Storage, a, b, c tref, bias *tref, p kernels.MatMulParams) error
	conv(s kernels.Storage, x, w, y tref, bias *tref, scratch *tref, p kernels.ConvParams) error
	pool(s kernels.Storage, x, y tref, p kernels.PoolParams, avg bool) error
	globalPool(s kernels.Storage, x, y tref, planes, hw int, avg bool) error
	layerNorm(p kernels.NormParams, x, scale tref, bias *tref, out tref) error
	groupNorm(p kernels.GroupNormParams, x, scale, bias, out tref) error
	softmax(s kernels.Storage, log bool, x, out tref, outer, n, inner int) error
	reduce(s kernels.Storage, op kernels.ReduceOp, x tref, shape, axes []int, out tref) error
	argReduce(s kernels.Storage, isMin, last bool, x tref, outer, r, inner int, out tref) error
	cumSum(s kernels.Storage, x, out tref, outer, r, inner int, exclusive, reverse bool) error
	copy(esize int, dst tref, dv kernels.View, src tref, sv kernels.View) error
	gather(esize int, data tref, shape []int, axis int, idx tref, it dtype.Type, nidx int, dst tref) error
	gatherElements(esize int, data tref, dataShape []int, axis int, idx tref, it dtype.Type, idxShape []int, dst tref) error
	pad(esize int, src tref, shape, pads []int, mode kernels.PadMode, value uint64, dst tref) error
	close() error
}
