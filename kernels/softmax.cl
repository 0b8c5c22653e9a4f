// softmax.cl: Softmax and LogSoftmax over the middle axis of a tensor seen
// as [outer, n, inner] (ONNX opset 13: any axis, no transpose needed).
//
// Max-subtracted, so exp never overflows. A line whose maximum is -inf (all
// -inf, a fully masked row) gives NaN, as PyTorch and ONNX Runtime do; a NaN
// anywhere in a line makes the whole line NaN.
//
// inner == 1: softmax_rows (one item per row, vector loads: CPU) or
// softmax_grp (one work-group per row: GPU). inner > 1: softmax_cols, one
// item per (outer, inner) line, whose neighbours read neighbouring addresses.
//
// Without LOG, the F32 build keeps exp(x - max) in y between passes so each
// element costs one exp; the F16 build recomputes it rather than round it
// twice. y may alias x.

// vload_half16 / vstore_half16 need only 2-byte alignment by the spec, but
// PoCL 3.1 marks them 32-byte aligned and LLVM may emit an aligned vector
// move that faults at an odd element offset (seen as a segfault on AMD EPYC
// hosts); four half4 accesses (8 bytes, never faulting on x86) are safe.
#define HALF16_LD(p) \
	((float16)(vload_half4(0, (p)), vload_half4(0, (p) + 4), vload_half4(0, (p) + 8), vload_half4(0, (p) + 12)))
#define HALF16_ST(v, p)                         \
	do {                                        \
		float16 v_ = (v);                       \
		vstore_half4_rte(v_.s0123, 0, (p));      \
		vstore_half4_rte(v_.s4567, 0, (p) + 4);  \
		vstore_half4_rte(v_.s89ab, 0, (p) + 8);  \
		vstore_half4_rte(v_.scdef, 0, (p) + 12); \
	} while (0)

#ifdef STORAGE_F16
#define LD16(p, i) HALF16_LD((p) + (i))
#define ST16(p, i, v) HALF16_ST((v), (p) + (i))
#else
#define LD16(p, i) vload16(0, (p) + (i))
#define ST16(p, i, v) vstore16((v), 0, (p) + (i))
#endif

#ifndef GROUP
#define GROUP 128
#endif

inline float hmax16(float16 v) {
	float8 a = fmax(v.lo, v.hi);
	float4 b = fmax(a.lo, a.hi);
	float2 c = fmax(b.lo, b.hi);
	return fmax(c.x, c.y);
}

inline float hsum16(float16 v) {
	float8 a = v.lo + v.hi;
	float4 b = a.lo + a.hi;
	float2 c = b.lo + b.hi;
	return c.x + c.y;
}

__kernel void softmax_rows(__global const store_t* x, int xo,
                           __global store_t* y, int yo,
                           int rows, int n, int log_) {
	int row = get_global_id(0);
	if (row >= rows) return;
	int xb = xo + row * n, yb = yo + row * n, vec = n & ~15;
	float16 m16 = -INFINITY;
	float m = -INFINITY;
	for (int j = 0; j < vec; j += 16) m16 = fmax(m16, LD16(x, xb + j));
	for (int j = vec; j < n; j++) m = fmax(m, LOAD(x, xb + j));
	m = fmax(m, hmax16(m16));

	float16 s16 = 0.0f;
	float s = 0.0f;
#ifndef STORAGE_F16
	if (!log_) {
		for (int j = 0; j < vec; j += 16) {
			float16 e = exp(LD16(x, xb + j) - m);
			ST16(y, yb + j, e);
			s16 += e;
		}
		for (int j = vec; j < n; j++) {
			float e = exp(LOAD(x, xb + j) - m);
			STORE(y, yb + j, e);
			s += e;
		}
		float inv = 1.0f / (s + hsum16(s16));
		for (int j = 0; j < vec; j += 16) ST16(y, yb + j, LD16(y, yb + j) * inv);
		for (int j = vec; j < n; j++) STORE(y, yb + j, LOAD(y, yb + j) * inv);
		return;
	}
#endif
	for (int j = 0; j < vec; j += 16) s16 += exp(LD16(x, xb + j) - m);
	for (int j = vec; j < n; j++) s += exp(LOAD(x, xb + j) - m);
	s += hsum16(s16);
	if (log_) {
		float sh = m + log(s);
		for (int j = 0; j < vec; j += 16) ST16(y, yb + j, LD16(x, xb + j) - sh);
		for (int j = vec; j < n; j++) STORE(y, yb + j, LOAD(x, xb + j) - sh);
	} else {
		float inv = 1.0f / s;
		for (int j = 0; j < vec; j += 16) ST16(y, yb + j, exp(LD16(x, xb + j) - m) * inv);
		for (int j = vec; j < n; j++) STORE(y, yb + j, exp(LOAD(x, xb + j) - m) * inv);
	}
}

// group_max / group_sum return the reduction of v over the work-group to
// every item; sc is reusable when they return.
inline float group_max(float v, __local float* sc) {
	int lid = get_local_id(0);
	sc[lid] = v;
	barrier(CLK_LOCAL_MEM_FENCE);
	for (int h = GROUP / 2; h > 0; h >>= 1) {
		if (lid < h) sc[lid] = fmax(sc[lid], sc[lid + h]);
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	float t = sc[0];
	barrier(CLK_LOCAL_MEM_FENCE);
	return t;
}

inline float group_sum(float v, __local float* sc) {
	int lid = get_local_id(0);
	sc[lid] = v;
	barrier(CLK_LOCAL_MEM_FENCE);
	for (int h = GROUP / 2; h > 0; h >>= 1) {
		if (lid < h) sc[lid] += sc[lid + h];
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	float t = sc[0];
	barrier(CLK_LOCAL_MEM_FENCE);
	return t;
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void softmax_grp(__global const store_t* x, int xo,
                 __global store_t* y, int yo,
                 int rows, int n, int log_) {
	__local float sc[GROUP];
	// No early exit: the launch has exactly `rows` groups (see norm.cl).
	int row = get_group_id(0), lid = get_local_id(0);
	int xb = xo + row * n, yb = yo + row * n;
	float m = -INFINITY;
	for (int j = lid; j < n; j += GROUP) m = fmax(m, LOAD(x, xb + j));
	m = group_max(m, sc);
	float s = 0.0f;
	for (int j = lid; j < n; j += GROUP) s += exp(LOAD(x, xb + j) - m);
	s = group_sum(s, sc);
	float sh = log_ ? m + log(s) : m;
	float inv = 1.0f / s;
	for (int j = lid; j < n; j += GROUP) {
		float v = LOAD(x, xb + j) - sh;
		STORE(y, yb + j, log_ ? v : exp(v) * inv);
	}
}

__kernel void softmax_cols(__global const store_t* x, int xo,
                           __global store_t* y, int yo,
                           int outer, int n, int inner, int log_) {
	int o = get_global_id(0);
	if (o >= outer * inner) return;
	int i = o % inner, ou = o / inner;
	int b = ou * n * inner + i;
	float m = -INFINITY;
	for (int k = 0; k < n; k++) m = fmax(m, LOAD(x, xo + b + k * inner));
	float s = 0.0f;
	for (int k = 0; k < n; k++) s += exp(LOAD(x, xo + b + k * inner) - m);
	if (log_) {
		float sh = m + log(s);
		for (int k = 0; k < n; k++) STORE(y, yo + b + k * inner, LOAD(x, xo + b + k * inner) - sh);
	} else {
		float inv = 1.0f / s;
		for (int k = 0; k < n; k++) STORE(y, yo + b + k * inner, exp(LOAD(x, xo + b + k * inner) - m) * inv);
	}
}
