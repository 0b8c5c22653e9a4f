// reduce.cl: ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSumExp,
// ArgMax/ArgMin and CumSum.
//
// A reduction arrives in canonical form (see PlanReduce): up to three kept
// dimensions K0..K2 and three reduced dimensions R0..R2, each with its input
// stride; the output is the kept dimensions, contiguous. reduce_nd runs one
// work-item per output, which reads memory coalesced whenever a kept
// dimension is innermost. When the reduced elements are one contiguous run
// per output (the common last-axis case) reduce_rows (one item per row,
// vector loads: CPU) or reduce_grp (one work-group per row: GPU) is used.

// vload_half16 / vstore_half16 need only 2-byte alignment by the spec, but
// PoCL 3.1 marks them 32-byte aligned and LLVM may emit an aligned vector
// move that faults at an odd element offset (seen as a segfault on AMD EPYC
// hosts); four half4 accesses (8 bytes, never faulting on x86) are safe.
#define HALF16_LD(p) \
	((float16)(vload_half4(0, (p)), vload_half4(0, (p) + 4), vload_half4(0, (p) + 8), vload_half4(0, (p) + 12)))

#ifdef STORAGE_F16
#define LD16(p, i) HALF16_LD((p) + (i))
#else
#define LD16(p, i) vload16(0, (p) + (i))
#endif

#ifndef GROUP
#define GROUP 128
#endif

// Each op: INIT (identity), ACC(a, v) (fold element v into a), COMB(a, b)
// (merge partial results), FIN(a, n) (result of a over n elements).
#define SUM_INIT 0.0f
#define SUM_ACC(a, v) ((a) + (v))
#define SUM_COMB(a, b) ((a) + (b))
#define SUM_FIN(a, n) (a)

#define MEAN_INIT 0.0f
#define MEAN_ACC(a, v) ((a) + (v))
#define MEAN_COMB(a, b) ((a) + (b))
#define MEAN_FIN(a, n) ((a) / (float)(n))

#define MAX_INIT (-INFINITY)
#define MAX_ACC(a, v) fmax((a), (v))
#define MAX_COMB(a, b) fmax((a), (b))
#define MAX_FIN(a, n) (a)

#define MIN_INIT INFINITY
#define MIN_ACC(a, v) fmin((a), (v))
#define MIN_COMB(a, b) fmin((a), (b))
#define MIN_FIN(a, n) (a)

#define PROD_INIT 1.0f
#define PROD_ACC(a, v) ((a) * (v))
#define PROD_COMB(a, b) ((a) * (b))
#define PROD_FIN(a, n) (a)

#define L1_INIT 0.0f
#define L1_ACC(a, v) ((a) + fabs(v))
#define L1_COMB(a, b) ((a) + (b))
#define L1_FIN(a, n) (a)

#define L2_INIT 0.0f
#define L2_ACC(a, v) fma((v), (v), (a))
#define L2_COMB(a, b) ((a) + (b))
#define L2_FIN(a, n) sqrt(a)

#define SSQ_INIT 0.0f
#define SSQ_ACC(a, v) fma((v), (v), (a))
#define SSQ_COMB(a, b) ((a) + (b))
#define SSQ_FIN(a, n) (a)

// Per op, DEF_REDUCE makes the loop bodies as inline functions; one kernel
// per style then dispatches on the run-time op. One kernel instead of nine
// matters on PoCL, which compiles each kernel afresh at its first launch; the
// switch is taken once per output, outside the loops.
#define DEF_REDUCE(OP)                                                        \
inline float nd_##OP(__global const store_t* x, int base,                    \
                     int r0, int r1, int r2, int rs0, int rs1, int rs2) {    \
	float a = OP##_INIT;                                                     \
	for (int a0 = 0; a0 < r0; a0++)                                          \
		for (int a1 = 0; a1 < r1; a1++) {                                    \
			int p = base + a0 * rs0 + a1 * rs1;                              \
			for (int a2 = 0; a2 < r2; a2++, p += rs2) {                      \
				float v = LOAD(x, p);                                        \
				a = OP##_ACC(a, v);                                          \
			}                                                                \
		}                                                                    \
	return OP##_FIN(a, r0 * r1 * r2);                                        \
}                                                                            \
inline float rows_##OP(__global const store_t* x, int base, int cols) {      \
	int vec = cols & ~15;                                                    \
	float16 acc = OP##_INIT;                                                 \
	for (int j = 0; j < vec; j += 16) {                                      \
		float16 v = LD16(x, base + j);                                       \
		acc = OP##_ACC(acc, v);                                              \
	}                                                                        \
	float8 h8 = OP##_COMB(acc.lo, acc.hi);                                   \
	float4 h4 = OP##_COMB(h8.lo, h8.hi);                                     \
	float2 h2 = OP##_COMB(h4.lo, h4.hi);                                     \
	float a = OP##_COMB(h2.x, h2.y);                                         \
	for (int j = vec; j < cols; j++) {                                       \
		float v = LOAD(x, base + j);                                         \
		a = OP##_ACC(a, v);                                                  \
	}                                                                        \
	return OP##_FIN(a, cols);                                                \
}                                                                            \
inline float part_##OP(__global const store_t* x, int base, int cols, int lid) { \
	float a = OP##_INIT;                                                     \
	for (int j = lid; j < cols; j += GROUP) {                                \
		float v = LOAD(x, base + j);                                         \
		a = OP##_ACC(a, v);                                                  \
	}                                                                        \
	return a;                                                                \
}                                                                            \
inline float comb_##OP(float a, float b) { return OP##_COMB(a, b); }         \
inline float fin_##OP(float a, int n) { return OP##_FIN(a, n); }

DEF_REDUCE(SUM)
DEF_REDUCE(MEAN)
DEF_REDUCE(MAX)
DEF_REDUCE(MIN)
DEF_REDUCE(PROD)
DEF_REDUCE(L1)
DEF_REDUCE(L2)
DEF_REDUCE(SSQ)

// Op codes are ReduceOp's values in reduce.go.
#define DISPATCH(P, ARGS)                                                     \
	switch (op) {                                                            \
	case 0: v = P##SUM ARGS; break;                                          \
	case 1: v = P##MEAN ARGS; break;                                         \
	case 2: v = P##MAX ARGS; break;                                          \
	case 3: v = P##MIN ARGS; break;                                          \
	case 4: v = P##PROD ARGS; break;                                         \
	case 5: v = P##L1 ARGS; break;                                           \
	case 6: v = P##L2 ARGS; break;                                           \
	case 7: v = P##SSQ ARGS; break;                                          \
	case 8: v = P##LSE ARGS; break;                                          \
	default: v = NAN;                                                        \
	}

// LogSumExp needs the maximum first so that exp cannot overflow; an all
// -inf (or empty) input gives -inf and a +inf element gives +inf, as
// torch.logsumexp does. Rare enough that the strided form serves every case.
inline float nd_LSE(__global const store_t* x, int base,
                    int r0, int r1, int r2, int rs0, int rs1, int rs2) {
	float m = -INFINITY;
	for (int a0 = 0; a0 < r0; a0++)
		for (int a1 = 0; a1 < r1; a1++)
			for (int a2 = 0; a2 < r2; a2++)
				m = fmax(m, LOAD(x, base + a0 * rs0 + a1 * rs1 + a2 * rs2));
	if (isinf(m)) return m;
	float s = 0.0f;
	for (int a0 = 0; a0 < r0; a0++)
		for (int a1 = 0; a1 < r1; a1++)
			for (int a2 = 0; a2 < r2; a2++)
				s += exp(LOAD(x, base + a0 * rs0 + a1 * rs1 + a2 * rs2) - m);
	return m + log(s);
}
// Never dispatched (LogSumExp always runs reduce_nd); they complete DISPATCH.
#define rows_LSE(x, b, c) NAN
#define part_LSE(x, b, c, l) NAN
#define comb_LSE(a, b) NAN
#define fin_LSE(a, n) NAN

__kernel void reduce_nd(__global const store_t* x, int xo,
                        __global store_t* y, int yo, int nout,
                        int k0, int k1, int k2, int ks0, int ks1, int ks2,
                        int r0, int r1, int r2, int rs0, int rs1, int rs2, int op) {
	int o = get_global_id(0);
	if (o >= nout) return;
	int i2 = o % k2, t = o / k2;
	int i1 = t % k1, i0 = t / k1;
	int base = xo + i0 * ks0 + i1 * ks1 + i2 * ks2;
	float v;
	DISPATCH(nd_, (x, base, r0, r1, r2, rs0, rs1, rs2))
	STORE(y, yo + o, v);
}

__kernel void reduce_rows(__global const store_t* x, int xo,
                          __global store_t* y, int yo, int rows, int cols, int op) {
	int row = get_global_id(0);
	if (row >= rows) return;
	float v;
	DISPATCH(rows_, (x, xo + row * cols, cols))
	STORE(y, yo + row, v);
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void reduce_grp(__global const store_t* x, int xo,
                __global store_t* y, int yo, int rows, int cols, int op) {
	__local float sc[GROUP];
	// No early exit before barriers: the launch has exactly `rows` groups,
	// and PoCL 3.1 crashes on a group-uniform return before a barrier.
	int row = get_group_id(0), lid = get_local_id(0);
	float v;
	DISPATCH(part_, (x, xo + row * cols, cols, lid))
	sc[lid] = v;
	barrier(CLK_LOCAL_MEM_FENCE);
	for (int h = GROUP / 2; h > 0; h >>= 1) {
		if (lid < h) {
			float a = sc[lid], b = sc[lid + h];
			DISPATCH(comb_, (a, b))
			sc[lid] = v;
		}
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	if (lid == 0) {
		float a = sc[0];
		DISPATCH(fin_, (a, cols))
		STORE(y, yo + row, v);
	}
}

// ArgMax / ArgMin over the middle axis of [outer, r, inner]; the output is
// int64 as ONNX specifies. flags bit 0: min instead of max; bit 1: the last
// index of ties instead of the first (select_last_index). NaN never compares
// better, so it wins only in position 0.
__kernel void argreduce(__global const store_t* x, int xo,
                        __global long* y, int yo,
                        int outer, int r, int inner, int flags) {
	int o = get_global_id(0);
	if (o >= outer * inner) return;
	int i = o % inner, ou = o / inner;
	int base = xo + ou * r * inner + i;
	bool mn = (flags & 1) != 0, last = (flags & 2) != 0;
	float best = LOAD(x, base);
	int bi = 0;
	for (int k = 1; k < r; k++) {
		float v = LOAD(x, base + k * inner);
		bool better = mn ? (last ? v <= best : v < best) : (last ? v >= best : v > best);
		if (better) {
			best = v;
			bi = k;
		}
	}
	y[yo + o] = bi;
}

// CumSum over the middle axis of [outer, r, inner], one item per (outer,
// inner) line; the running sum is kept in fp32 and each prefix rounded once.
__kernel void cumsum(__global const store_t* x, int xo,
                     __global store_t* y, int yo,
                     int outer, int r, int inner, int exclusive, int reverse) {
	int o = get_global_id(0);
	if (o >= outer * inner) return;
	int i = o % inner, ou = o / inner;
	int base = ou * r * inner + i;
	float s = 0.0f;
	for (int k = 0; k < r; k++) {
		int kk = reverse ? r - 1 - k : k;
		int p = base + kk * inner;
		float v = LOAD(x, xo + p);
		if (exclusive) {
			STORE(y, yo + p, s);
			s += v;
		} else {
			s += v;
			STORE(y, yo + p, s);
		}
	}
}
