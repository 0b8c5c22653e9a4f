// move.cl: data movement that never looks at values, so every kernel is
// built per element size (-DELEM=uchar/ushort/uint/ulong, ELEM16 its
// 16-vector) and moves raw bits: f32, f16, int64, bool all go through here.
//
// Tensors are strided views: element (i0..i5) lives at off + sum(ik * sk).
// Shapes are padded on the left to rank 6 with size-1 dims; strides may be 0
// (broadcast) or negative (reversed slices). Offsets and strides are in
// elements.

#ifndef ELEM
#define ELEM uint
#define ELEM16 uint16
#endif

// copy_contig: dst[do + i] = src[so + i] for i < n, `per` elements per item
// (a multiple of 16).
__kernel void copy_contig(__global const ELEM* src, int so,
                          __global ELEM* dst, int dof, int n, int per) {
	int start = get_global_id(0) * per;
	if (start >= n) return;
	int end = min(start + per, n);
	int i = start;
	for (; i + 16 <= end; i += 16) vstore16(vload16(0, src + so + i), 0, dst + dof + i);
	for (; i < end; i++) dst[dof + i] = src[so + i];
}

// copy_rows: one item per row of the innermost dim (CPU style); rows whose
// innermost stride is 1 on both sides move in 16-element vectors.
__kernel void copy_rows(__global const ELEM* src, int so,
                        __global ELEM* dst, int dof, int rows,
                        int d0, int d1, int d2, int d3, int d4, int d5,
                        int s0, int s1, int s2, int s3, int s4, int s5,
                        int t0, int t1, int t2, int t3, int t4, int t5) {
	int row = get_global_id(0);
	if (row >= rows) return;
	int r = row;
	int i4 = r % d4; r /= d4;
	int i3 = r % d3; r /= d3;
	int i2 = r % d2; r /= d2;
	int i1 = r % d1;
	int i0 = r / d1;
	int sp = so + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3 + i4 * s4;
	int dp = dof + i0 * t0 + i1 * t1 + i2 * t2 + i3 * t3 + i4 * t4;
	if (s5 == 1 && t5 == 1) {
		int j = 0;
		for (; j + 16 <= d5; j += 16) vstore16(vload16(0, src + sp + j), 0, dst + dp + j);
		for (; j < d5; j++) dst[dp + j] = src[sp + j];
		return;
	}
	for (int j = 0; j < d5; j++) dst[dp + j * t5] = src[sp + j * s5];
}

// copy_elems: one item per element (GPU style: neighbouring items move
// neighbouring innermost elements).
__kernel void copy_elems(__global const ELEM* src, int so,
                         __global ELEM* dst, int dof, int n,
                         int d0, int d1, int d2, int d3, int d4, int d5,
                         int s0, int s1, int s2, int s3, int s4, int s5,
                         int t0, int t1, int t2, int t3, int t4, int t5) {
	int e = get_global_id(0);
	if (e >= n) return;
	int r = e;
	int i5 = r % d5; r /= d5;
	int i4 = r % d4; r /= d4;
	int i3 = r % d3; r /= d3;
	int i2 = r % d2; r /= d2;
	int i1 = r % d1;
	int i0 = r / d1;
	dst[dof + i0 * t0 + i1 * t1 + i2 * t2 + i3 * t3 + i4 * t4 + i5 * t5] =
		src[so + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3 + i4 * s4 + i5 * s5];
}

// pad_src maps output coordinate c of a dim with input size d and leading
// pad b to an input coordinate, or -1 for the constant.
// mode: 0 constant, 1 reflect (mirror without repeating the edge), 2 edge,
// 3 wrap.
inline int pad_src(int c, int b, int d, int mode) {
	int i = c - b;
	if (i >= 0 && i < d) return i;
	if (mode == 0 || d == 0) return -1;
	if (mode == 2) return clamp(i, 0, d - 1);
	if (mode == 3) {
		i %= d;
		return i < 0 ? i + d : i;
	}
	if (d == 1) return 0;
	int p = 2 * (d - 1); // reflect: period 2(d-1)
	i %= p;
	if (i < 0) i += p;
	return i < d ? i : p - i;
}

// pad: one item per output element of the contiguous output [d0..d5];
// the input has sizes e0..e5, strides s0..s5, and b0..b5 leading pads
// (negative pads crop: the Go side folds them into the input view).
__kernel void pad(__global const ELEM* src, int so,
                  __global ELEM* dst, int dof, int n,
                  int d0, int d1, int d2, int d3, int d4, int d5,
                  int e0, int e1, int e2, int e3, int e4, int e5,
                  int b0, int b1, int b2, int b3, int b4, int b5,
                  int s0, int s1, int s2, int s3, int s4, int s5,
                  int mode, ulong value) {
	int e = get_global_id(0);
	if (e >= n) return;
	int r = e;
	int c5 = r % d5; r /= d5;
	int c4 = r % d4; r /= d4;
	int c3 = r % d3; r /= d3;
	int c2 = r % d2; r /= d2;
	int c1 = r % d1;
	int c0 = r / d1;
	int i0 = pad_src(c0, b0, e0, mode), i1 = pad_src(c1, b1, e1, mode);
	int i2 = pad_src(c2, b2, e2, mode), i3 = pad_src(c3, b3, e3, mode);
	int i4 = pad_src(c4, b4, e4, mode), i5 = pad_src(c5, b5, e5, mode);
	ELEM v = (ELEM)value;
	if (i0 >= 0 && i1 >= 0 && i2 >= 0 && i3 >= 0 && i4 >= 0 && i5 >= 0)
		v = src[so + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3 + i4 * s4 + i5 * s5];
	dst[dof + e] = v;
}

// Indices are int32 or int64 by the run-time flag is64, read through an int
// pointer (two words, little-endian, for int64), so one build per element
// size serves both index types.
inline long index_at(__global const int* p, int i, int is64) {
	if (!is64) return p[i];
	return (long)(((ulong)(uint)p[2 * i + 1] << 32) | (ulong)(uint)p[2 * i]);
}

// report_fault marks the launch's slot of the fault buffer with an index
// that is out of range, for the host to turn into an error after Finish
// (see Lib.checkFaults). Racing writers all store a bad index.
inline void report_fault(__global int* fault, int slot, long k) {
	fault[2 * slot + 1] = (int)clamp(k, (long)INT_MIN + 1, (long)INT_MAX);
	fault[2 * slot] = 1;
}

// gather: out[o, t, j] = data[o, idx[t], j] over [outer, nidx, inner], a
// 2-D range (j, row = o * nidx + t). Negative indices count from the end;
// an index still out of range writes zeros and reports a fault.
__kernel void gather(__global const ELEM* data, int dof,
                     __global const int* idx, int io,
                     __global ELEM* out, int oo,
                     int outer, int axis, int nidx, int inner, int is64,
                     __global int* fault, int slot) {
	int j = get_global_id(0), row = get_global_id(1);
	if (j >= inner || row >= outer * nidx) return;
	int t = row % nidx, o = row / nidx;
	long k = index_at(idx + (is64 ? 2 * io : io), t, is64);
	long k0 = k;
	if (k < 0) k += axis;
	ELEM v = 0;
	if (k >= 0 && k < axis) v = data[dof + (o * axis + (int)k) * inner + j];
	else if (j == 0) report_fault(fault, slot, k0);
	out[oo + row * inner + j] = v;
}

// gather_elements: ONNX GatherElements. The output has the indices' shape
// d0..d5 (contiguous, as are the indices); the data has strides s0..s5 and
// size `axdim` along dimension `ax`, whose coordinate comes from the index.
__kernel void gather_elements(__global const ELEM* data, int dof,
                              __global const int* idx, int io,
                              __global ELEM* out, int oo, int n,
                              int d0, int d1, int d2, int d3, int d4, int d5,
                              int s0, int s1, int s2, int s3, int s4, int s5,
                              int ax, int axdim, int is64,
                              __global int* fault, int slot) {
	int e = get_global_id(0);
	if (e >= n) return;
	int c[6];
	int r = e;
	c[5] = r % d5; r /= d5;
	c[4] = r % d4; r /= d4;
	c[3] = r % d3; r /= d3;
	c[2] = r % d2; r /= d2;
	c[1] = r % d1;
	c[0] = r / d1;
	long k = index_at(idx + (is64 ? 2 * io : io), e, is64);
	long k0 = k;
	if (k < 0) k += axdim;
	ELEM v = 0;
	if (k >= 0 && k < axdim) {
		c[ax] = (int)k;
		v = data[dof + c[0] * s0 + c[1] * s1 + c[2] * s2 + c[3] * s3 + c[4] * s4 + c[5] * s5];
	} else {
		report_fault(fault, slot, k0);
	}
	out[oo + e] = v;
}

// kv_write: cache[b, h, pos[b?, t], d] = src[b, h, t, d] for views [B, H, S,
// D] (cache, strides c*) and [B, H, T, D] (src, strides s*); a 2-D range (d,
// row = (b * H + h) * T + t). Positions are [T] shared by the batch (pb = 0)
// or [B, T] (pb = 1); positions outside [0, S) are skipped.
__kernel void kv_write(__global ELEM* cache, int co,
                       __global const ELEM* src, int so,
                       __global const int* pos, int po,
                       int B, int H, int S, int T, int D,
                       int cb, int ch, int cs, int cd,
                       int sb, int sh, int st, int sd, int pb, int is64) {
	int d = get_global_id(0), row = get_global_id(1);
	if (d >= D || row >= B * H * T) return;
	int t = row % T, r = row / T;
	int h = r % H, b = r / H;
	long p = index_at(pos + (is64 ? 2 * po : po), b * pb * T + t, is64);
	if (p < 0 || p >= S) return;
	cache[co + b * cb + h * ch + (int)p * cs + d * cd] = src[so + b * sb + h * sh + t * st + d * sd];
}
