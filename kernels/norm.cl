// norm.cl: normalisation over rows. LayerNorm, RMSNorm, and GroupNorm /
// InstanceNorm (a row per (batch, group) with per-channel affine weights),
// each with an optional fused residual add.
//
// Two styles of the same kernel: norm_rows runs one work-item per row with
// 16-wide vector loads (fast on CPU devices such as PoCL, where work-group
// barriers are expensive); norm_group runs one work-group of GROUP items per
// row with local-memory reductions (right for GPUs, where one item per row
// leaves the machine idle). Both compute the mean and variance in two passes
// over the row, which is exact enough for long rows where E[x^2]-E[x]^2 is not.
//
// flags (run-time, uniform per launch):
#define NF_RES 1      // add residual r to x first
#define NF_SUM 2      // store x + r to s (and normalise what was stored)
#define NF_BIAS 4     // add bias b
#define NF_RMS 8      // RMSNorm: no mean subtraction
#define NF_SCALE 16   // multiply by scale w
#define NF_CHANNEL 32 // weights per channel run, not per column (see widx)
//
// Weight index: for column j of row `row`, LayerNorm/RMSNorm use w[j]; with
// NF_CHANNEL the index is (row % wmod) * wmul + j / wdiv, which covers
// InstanceNorm (wmod=C, wmul=1, wdiv=cols), GroupNorm with per-channel
// scale (wmod=G, wmul=C/G, wdiv=spatial) and per-group scale (wmod=G, wmul=1,
// wdiv=cols).

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
#ifdef WEIGHT_F16
#define WLD16(p, i) HALF16_LD((p) + (i))
#else
#define WLD16(p, i) vload16(0, (p) + (i))
#endif

#ifndef GROUP
#define GROUP 128
#endif

inline float hsum16(float16 v) {
	float8 a = v.lo + v.hi;
	float4 b = a.lo + a.hi;
	float2 c = b.lo + b.hi;
	return c.x + c.y;
}

__kernel void norm_rows(__global const store_t* x, int xo,
                        __global const store_t* r, int ro,
                        __global store_t* s, int so,
                        __global const wstore_t* w, int wo,
                        __global const wstore_t* b, int bo,
                        __global store_t* y, int yo,
                        int rows, int cols, float eps, int flags,
                        int wmod, int wmul, int wdiv) {
	int row = get_global_id(0);
	if (row >= rows) return;
	int base = row * cols;
	int vec = cols & ~15;
	bool res = (flags & NF_RES) != 0;
	bool sum = (flags & NF_SUM) != 0;

	// Pass 1: residual add (stored) and the row sum.
	float16 acc = 0.0f;
	float acc1 = 0.0f;
	for (int j = 0; j < vec; j += 16) {
		float16 v = LD16(x, xo + base + j);
		if (res) v += LD16(r, ro + base + j);
		if (sum) {
			ST16(s, so + base + j, v);
#ifdef STORAGE_F16
			v = LD16(s, so + base + j);
#endif
		}
		acc += v;
	}
	for (int j = vec; j < cols; j++) {
		float v = LOAD(x, xo + base + j);
		if (res) v += LOAD(r, ro + base + j);
		if (sum) {
			STORE(s, so + base + j, v);
#ifdef STORAGE_F16
			v = LOAD(s, so + base + j);
#endif
		}
		acc1 += v;
	}
	// From here on the row is read from s when it was stored there, so s may
	// alias x or r (an in-place residual stream).
	__global const store_t* src = sum ? (__global const store_t*)s : x;
	int srco = (sum ? so : xo) + base;
	bool add = res && !sum;
	float mean = 0.0f;
	if (!(flags & NF_RMS)) mean = (hsum16(acc) + acc1) / (float)cols;

	// Pass 2: sum of squared deviations (of squares for RMSNorm).
	acc = 0.0f;
	acc1 = 0.0f;
	for (int j = 0; j < vec; j += 16) {
		float16 v = LD16(src, srco + j);
		if (add) v += LD16(r, ro + base + j);
		v -= mean;
		acc = fma(v, v, acc);
	}
	for (int j = vec; j < cols; j++) {
		float v = LOAD(src, srco + j);
		if (add) v += LOAD(r, ro + base + j);
		v -= mean;
		acc1 = fma(v, v, acc1);
	}
	float inv = rsqrt((hsum16(acc) + acc1) / (float)cols + eps);

	// Pass 3: normalise, scale, shift.
	bool hasw = (flags & NF_SCALE) != 0, hasb = (flags & NF_BIAS) != 0;
	if (!(flags & NF_CHANNEL)) {
		for (int j = 0; j < vec; j += 16) {
			float16 v = LD16(src, srco + j);
			if (add) v += LD16(r, ro + base + j);
			v = (v - mean) * inv;
			if (hasw) v *= WLD16(w, wo + j);
			if (hasb) v += WLD16(b, bo + j);
			ST16(y, yo + base + j, v);
		}
		for (int j = vec; j < cols; j++) {
			float v = LOAD(src, srco + j);
			if (add) v += LOAD(r, ro + base + j);
			v = (v - mean) * inv;
			if (hasw) v *= WLOAD(w, wo + j);
			if (hasb) v += WLOAD(b, bo + j);
			STORE(y, yo + base + j, v);
		}
		return;
	}
	// Channel weights: constant over runs of wdiv columns.
	for (int j0 = 0; j0 < cols; j0 += wdiv) {
		int wi = (row % wmod) * wmul + j0 / wdiv;
		float sc = hasw ? WLOAD(w, wo + wi) * inv : inv;
		float sh = (hasb ? WLOAD(b, bo + wi) : 0.0f) - mean * sc;
		int end = min(j0 + wdiv, cols);
		int j = j0;
		for (; j + 16 <= end; j += 16) {
			float16 v = LD16(src, srco + j);
			if (add) v += LD16(r, ro + base + j);
			ST16(y, yo + base + j, fma(v, (float16)sc, (float16)sh));
		}
		for (; j < end; j++) {
			float v = LOAD(src, srco + j);
			if (add) v += LOAD(r, ro + base + j);
			STORE(y, yo + base + j, fma(v, sc, sh));
		}
	}
}

// group_sum returns the sum of v over the work-group; every item gets it.
inline float group_sum(float v, __local float* sc) {
	int lid = get_local_id(0);
	sc[lid] = v;
	barrier(CLK_LOCAL_MEM_FENCE);
	for (int h = GROUP / 2; h > 0; h >>= 1) {
		if (lid < h) sc[lid] += sc[lid + h];
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	float t = sc[0];
	barrier(CLK_LOCAL_MEM_FENCE); // sc is reused by the next reduction
	return t;
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void norm_group(__global const store_t* x, int xo,
                __global const store_t* r, int ro,
                __global store_t* s, int so,
                __global const wstore_t* w, int wo,
                __global const wstore_t* b, int bo,
                __global store_t* y, int yo,
                int rows, int cols, float eps, int flags,
                int wmod, int wmul, int wdiv) {
	__local float sc[GROUP];
	int row = get_group_id(0);
	int lid = get_local_id(0);
	// No early exit: the launch has exactly `rows` groups, and PoCL 3.1
	// crashes on a return before a barrier even when it is group-uniform.
	int base = row * cols;
	bool res = (flags & NF_RES) != 0;
	bool sum = (flags & NF_SUM) != 0;

	// Each item owns columns lid, lid+GROUP, ...: it rereads only what it
	// stored itself, so s may alias x or r without a barrier.
	float a = 0.0f;
	for (int j = lid; j < cols; j += GROUP) {
		float v = LOAD(x, xo + base + j);
		if (res) v += LOAD(r, ro + base + j);
		if (sum) {
			STORE(s, so + base + j, v);
#ifdef STORAGE_F16
			v = LOAD(s, so + base + j);
#endif
		}
		a += v;
	}
	__global const store_t* src = sum ? (__global const store_t*)s : x;
	int srco = (sum ? so : xo) + base;
	bool add = res && !sum;
	float mean = 0.0f;
	float tot = group_sum(a, sc);
	if (!(flags & NF_RMS)) mean = tot / (float)cols;

	a = 0.0f;
	for (int j = lid; j < cols; j += GROUP) {
		float v = LOAD(src, srco + j);
		if (add) v += LOAD(r, ro + base + j);
		v -= mean;
		a = fma(v, v, a);
	}
	float inv = rsqrt(group_sum(a, sc) / (float)cols + eps);

	bool hasw = (flags & NF_SCALE) != 0, hasb = (flags & NF_BIAS) != 0;
	bool chan = (flags & NF_CHANNEL) != 0;
#ifdef HM_ON
	// The half path (halfmath.cl; the launcher builds it only for fp16
	// storage and weights): the statistics above stay in float, since a
	// row's sum of squares leaves half's range (65504) once |x| reaches 256
	// or a 4096-wide row has |x| of 4, and a half running sum stalls long
	// before that; the normalise-and-affine step below is half arithmetic.
	// The deviation v - mean is formed in float and rounded once, so the
	// cancellation against a large mean costs no more than that one
	// rounding (a half mean would err by half's spacing at the mean).
	const hreal hinv = HCVT(inv);
	for (int j = lid; j < cols; j += GROUP) {
		float v = LOAD(src, srco + j);
		if (add) v += LOAD(r, ro + base + j);
		int wi = chan ? (row % wmod) * wmul + j / wdiv : j;
		hreal t = HFMA(HCVT(v - mean), hinv, HZERO);
		hreal sw = HCVT(hasw ? WLOAD(w, wo + wi) : 1.0f);
		hreal sb = hasb ? HCVT(WLOAD(b, bo + wi)) : HZERO;
		STORE(y, yo + base + j, HTOF(HFMA(t, sw, sb)));
	}
#else
	for (int j = lid; j < cols; j += GROUP) {
		float v = LOAD(src, srco + j);
		if (add) v += LOAD(r, ro + base + j);
		int wi = chan ? (row % wmod) * wmul + j / wdiv : j;
		v = (v - mean) * inv;
		if (hasw) v *= WLOAD(w, wo + wi);
		if (hasb) v += WLOAD(b, bo + wi);
		STORE(y, yo + base + j, v);
	}
#endif
}
