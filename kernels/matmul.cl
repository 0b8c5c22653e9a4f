// matmul.cl: C = alpha * op(A) * op(B) + beta * Bias, batched, every operand
// addressed through explicit strides.
//
// Element (m, k) of A is A[offA + m*am + k*ak], (k, n) of B is
// B[offB + k*bk + n*bn], (m, n) of C is C[offC + m*cm + n*cn] and of Bias
// Bias[offBias + m*brm + n*brn]. Transposes, the Linear weight layout, a
// transposed output (convolution writes NCHW through it) and a prefix of a
// larger weight (elastic sub-models: M, N, K smaller than the strides say)
// are all just strides, so one source serves ONNX Gemm, MatMul and Linear.
//
// Batch: global dimension 2 runs over nb0*nb1 products; z = z0*nb1 + z1 and
// each operand moves by z0*s?0 + z1*s?1 elements (a stride of 0 broadcasts).
// Two levels are enough for numpy broadcasting of the batch dims that occur in
// practice, and for (image, group) in a grouped convolution.
//
// Each operand has its own storage, chosen per build: -DA_F16, -DB_F16,
// -DBIAS_F16, and the output C follows -DSTORAGE_F16 (common.cl). Arithmetic
// is fp32, except the half paths of mm_gemv_c4 (-DMM_HALF) and mm_reg, both
// written with halfmath.cl's macros, on devices with cl_khr_fp16.
//
// Variants (the launcher picks one by layout and device type; -DMM_GPU builds
// the GPU set, otherwise the CPU set, so neither device compiles kernels it
// never runs):
//   mm_dot_RxC   K contiguous in A and B (ak == bk == 1): RB rows x CB columns
//                at a time over a chunk of rows per work-item, K loop in
//                float16 vectors (1x8 for one row, 2x8 while 8 rows of B
//                fit 32 KiB, 4x4 beyond). The CPU path for weights, which
//                sessions store [N, K] (Linear's layout; PrefersTransB).
//   mm_dot8_4x3  the same in float8 vectors, 4 rows x 3 columns: the CPU
//                path for M > 1 where the native float vector is 8 wide
//                (AVX2, 16 registers, which mm_dot's float16 tiles spill).
//   mm_axpy_RxV  B contiguous along N (bn == 1): RB rows x VB*16 columns
//                at a time over a chunk of rows, VB B vectors per k (1x16
//                for one row, 4x4 otherwise). The CPU path for a B that is
//                an activation stored [K, N].
//   mm_gemv_wg   GPU, K contiguous, 2-4 rows: a work-group per output column
//                strides over K and reduces in local memory.
//   mm_gemv_c4   GPU decode (one row), K contiguous: a work-group per four
//                output columns, subgroup or local-memory reduction.
//   mm_reg       GPU prefill, K contiguous: 4x4 (half arithmetic: 2x4)
//                outputs per work-item in registers, no local memory.
//   mm_tiled     GPU prefill for the other layouts: 64x64 output tiles
//                staged through local memory in 16-deep K slices, 4x4
//                outputs per work-item.
//   mm_naive     one work-item per output, any strides: the fallback, and on
//                GPUs the small-M path when B is contiguous along N (adjacent
//                work-items then read adjacent B elements).

// vload_half16 and vload_half8 only need 2-byte alignment by the spec, but
// PoCL 3.1 marks their loads 32/16-byte aligned and LLVM may then emit an
// aligned vector move that faults on an odd element offset. Four half4 loads
// (8 bytes each, which x86 never faults on) are safe there and cost nothing
// elsewhere.
#define VLOAD_HALF16(p)                                                        \
	((float16)(vload_half4(0, (p)), vload_half4(0, (p) + 4),                   \
	           vload_half4(0, (p) + 8), vload_half4(0, (p) + 12)))

#ifdef A_F16
typedef half a_t;
#define ALOAD(p, i) vload_half((i), (p))
#define ALOAD4(p, i) vload_half4(0, (p) + (i))
#define ALOAD16(p, i) VLOAD_HALF16((p) + (i))
#else
typedef float a_t;
#define ALOAD(p, i) ((p)[(i)])
#define ALOAD4(p, i) vload4(0, (p) + (i))
#define ALOAD16(p, i) vload16(0, (p) + (i))
#endif

#ifdef B_F16
typedef half b_t;
#define BLOAD(p, i) vload_half((i), (p))
#define BLOAD4(p, i) vload_half4(0, (p) + (i))
#define BLOAD16(p, i) VLOAD_HALF16((p) + (i))
#else
typedef float b_t;
#define BLOAD(p, i) ((p)[(i)])
#define BLOAD4(p, i) vload4(0, (p) + (i))
#define BLOAD16(p, i) vload16(0, (p) + (i))
#endif

#ifdef BIAS_F16
typedef half bias_t;
#define BIASLOAD(p, i) vload_half((i), (p))
#else
typedef float bias_t;
#define BIASLOAD(p, i) ((p)[(i)])
#endif

#define MM_PARAMS                                                              \
	__global const a_t *A, int offA, int am, int ak, int sA0, int sA1,         \
	    __global const b_t *B, int offB, int bk, int bn, int sB0, int sB1,     \
	    __global store_t *C, int offC, int cm, int cn, int sC0, int sC1,       \
	    __global const bias_t *Bias, int offBias, int brm, int brn, int sD0,   \
	    int sD1, int M, int N, int K, int nb1, float alpha, float beta

#define MM_ARGS                                                                \
	A, offA, am, ak, sA0, sA1, B, offB, bk, bn, sB0, sB1, C, offC, cm, cn,     \
	    sC0, sC1, Bias, offBias, brm, brn, sD0, sD1, M, N, K, nb1, alpha, beta

// MM_BATCH moves every operand to batch entry get_global_id(2) (or the group's
// id, for kernels that spread one product over a work-group).
#define MM_BATCH(z)                                                            \
	const int z0_ = (z) / nb1, z1_ = (z) - z0_ * nb1;                          \
	A += offA + z0_ * sA0 + z1_ * sA1;                                         \
	B += offB + z0_ * sB0 + z1_ * sB1;                                         \
	C += offC + z0_ * sC0 + z1_ * sC1;                                         \
	Bias += offBias + z0_ * sD0 + z1_ * sD1;

// mm_put writes one finished output. A zero beta means "no bias", so Bias is
// then never read (the launcher passes a placeholder buffer).
static inline void mm_put(__global store_t *C, int ci, __global const bias_t *Bias,
                   int bi, float acc, float alpha, float beta) {
	float v = alpha * acc;
	if (beta != 0.0f) v = fma(beta, BIASLOAD(Bias, bi), v);
	STORE(C, ci, v);
}

static inline float hsum16(float16 v) {
	float8 a = v.lo + v.hi;
	float4 b = a.lo + a.hi;
	float2 c = b.lo + b.hi;
	return c.x + c.y;
}

// hsum16x4 returns the sums of a, b, c and d's lanes. Folding the four
// vectors into each other level by level takes ~15 instructions where four
// hsum16 take ~32; mm_dot reduces RB*CB accumulators per K/16 rounds of
// RB*CB FMAs, so at K = 512 this is a tenth of its work.
static inline float4 hsum16x4(float16 a, float16 b, float16 c, float16 d) {
	const float16 ab = (float16)(a.lo, b.lo) + (float16)(a.hi, b.hi);
	const float16 cd = (float16)(c.lo, d.lo) + (float16)(c.hi, d.hi);
	const float16 q = (float16)(ab.s0123, ab.s89ab, cd.s0123, cd.s89ab) +
	                  (float16)(ab.s4567, ab.scdef, cd.s4567, cd.scdef);
	const float8 h = q.even + q.odd;
	return h.even + h.odd;
}

#ifndef MM_GPU
// The CPU kernels give each work-item a block of columns and a chunk of rows
// (global (column blocks, row chunks, batch)) and loop over the chunk RB rows
// at a time. The work-item's slice of B is then read from memory once and
// reused from cache for every row of the chunk. With one row block per
// work-item, a weight too big for the last-level cache comes from memory
// once per row block: a 50-token ViT layer ran at a fifth of its speed with
// the weight in cache. The launcher picks the number of chunks (global size
// 1): few, for reuse, but enough work-groups for every core.
#define MM_ROW_CHUNK(RB)                                                       \
	const int nblk_ = (M + (RB)-1) / (RB);                                     \
	const int per_ =                                                           \
	    (nblk_ + (int)get_global_size(1) - 1) / (int)get_global_size(1);       \
	const int blk0_ = (int)get_global_id(1) * per_;                            \
	const int blk1_ = min(blk0_ + per_, nblk_);

// mm_dot computes RB x CB outputs at a time (RB <= 4, CB <= 8), each as a
// float16 of partial sums over K reduced once at the end. Per 16 k the
// inner loop loads RB vectors of A, which stream from L2, and CB of B, from
// a slice of CB weight rows that stays in L1 across the row chunk. 2x8
// halves the A traffic of 4x4 and ran 10-25% faster where the slice fits L1
// (K <= 1024 in fp32); 4x4 wins beyond (K = 3072: 97 vs 74 GFLOP/s on one
// core). 3x8 and 4x6 spill AVX-512's 32 registers and ran at 60%.
// always_inline makes RB and CB constants before the loops are unrolled,
// and the unroll pragmas make sure they are: otherwise PoCL kept the
// accumulator arrays on the stack and ran 4x slower. Rows and columns past
// the edge are clamped for loading, which keeps the loop free of branches,
// and skipped when storing.
__attribute__((always_inline)) static inline void
mm_dot(const int RB, const int CB, MM_PARAMS) {
	const int n0 = get_global_id(0) * CB;
	if (n0 >= N) return;
	MM_ROW_CHUNK(RB)
	MM_BATCH(get_global_id(2))
	__global const b_t *bp[8];
	#pragma unroll
	for (int c = 0; c < CB; c++) bp[c] = B + min(n0 + c, N - 1) * bn;
	for (int blk = blk0_; blk < blk1_; blk++) {
		const int m0 = blk * RB;
		__global const a_t *ap[4];
		#pragma unroll
		for (int r = 0; r < RB; r++) ap[r] = A + min(m0 + r, M - 1) * am;
		float16 acc[4][8];
		#pragma unroll
		for (int r = 0; r < RB; r++)
			#pragma unroll
			for (int c = 0; c < CB; c++) acc[r][c] = (float16)(0.0f);
		int k = 0;
		for (; k + 16 <= K; k += 16) {
			float16 av[4], bv[8];
			#pragma unroll
			for (int r = 0; r < RB; r++) av[r] = ALOAD16(ap[r], k);
			#pragma unroll
			for (int c = 0; c < CB; c++) bv[c] = BLOAD16(bp[c], k);
			#pragma unroll
			for (int r = 0; r < RB; r++)
				#pragma unroll
				for (int c = 0; c < CB; c++) acc[r][c] = fma(av[r], bv[c], acc[r][c]);
		}
		float s[4][8];
		#pragma unroll
		for (int r = 0; r < RB; r++) {
			if (CB % 4 == 0) {
				#pragma unroll
				for (int c = 0; c < CB; c += 4) {
					const float4 h = hsum16x4(acc[r][c], acc[r][c + 1], acc[r][c + 2], acc[r][c + 3]);
					s[r][c] = h.x, s[r][c + 1] = h.y, s[r][c + 2] = h.z, s[r][c + 3] = h.w;
				}
			} else {
				#pragma unroll
				for (int c = 0; c < CB; c++) s[r][c] = hsum16(acc[r][c]);
			}
		}
		for (; k < K; k++) {
			float av[4], bv[8];
			#pragma unroll
			for (int r = 0; r < RB; r++) av[r] = ALOAD(ap[r], k);
			#pragma unroll
			for (int c = 0; c < CB; c++) bv[c] = BLOAD(bp[c], k);
			#pragma unroll
			for (int r = 0; r < RB; r++)
				#pragma unroll
				for (int c = 0; c < CB; c++) s[r][c] = fma(av[r], bv[c], s[r][c]);
		}
		#pragma unroll
		for (int r = 0; r < RB; r++) {
			const int m = m0 + r;
			if (m >= M) break;
			#pragma unroll
			for (int c = 0; c < CB; c++) {
				const int n = n0 + c;
				if (n >= N) break;
				mm_put(C, m * cm + n * cn, Bias, m * brm + n * brn, s[r][c],
				       alpha, beta);
			}
		}
	}
}

__kernel void mm_dot_4x4(MM_PARAMS) { mm_dot(4, 4, MM_ARGS); }
__kernel void mm_dot_2x8(MM_PARAMS) { mm_dot(2, 8, MM_ARGS); }
__kernel void mm_dot_1x8(MM_PARAMS) { mm_dot(1, 8, MM_ARGS); }

#ifdef A_F16
#define ALOAD8(p, i) ((float8)(vload_half4(0, (p) + (i)), vload_half4(0, (p) + (i) + 4)))
#else
#define ALOAD8(p, i) vload8(0, (p) + (i))
#endif
#ifdef B_F16
#define BLOAD8(p, i) ((float8)(vload_half4(0, (p) + (i)), vload_half4(0, (p) + (i) + 4)))
#else
#define BLOAD8(p, i) vload8(0, (p) + (i))
#endif

static inline float hsum8(float8 v) {
	const float4 a = v.lo + v.hi;
	const float2 b = a.lo + a.hi;
	return b.x + b.y;
}

// mm_dot8 is mm_dot for 8-wide vector units (AVX2; the device's native
// float vector width is 8): RB x CB outputs as float8 partial sums, at most
// 12 of them, so that accumulators, one vector of A and the CB vectors of B
// fit 16 registers. mm_dot's float16 tiles hold 32 registers of
// accumulators there and spill on every step.
__attribute__((always_inline)) static inline void
mm_dot8(const int RB, const int CB, MM_PARAMS) {
	const int n0 = get_global_id(0) * CB;
	if (n0 >= N) return;
	MM_ROW_CHUNK(RB)
	MM_BATCH(get_global_id(2))
	__global const b_t *bp[6];
	#pragma unroll
	for (int c = 0; c < CB; c++) bp[c] = B + min(n0 + c, N - 1) * bn;
	for (int blk = blk0_; blk < blk1_; blk++) {
		const int m0 = blk * RB;
		__global const a_t *ap[4];
		#pragma unroll
		for (int r = 0; r < RB; r++) ap[r] = A + min(m0 + r, M - 1) * am;
		float8 acc[4][6];
		#pragma unroll
		for (int r = 0; r < RB; r++)
			#pragma unroll
			for (int c = 0; c < CB; c++) acc[r][c] = (float8)(0.0f);
		int k = 0;
		for (; k + 8 <= K; k += 8) {
			float8 bv[6];
			#pragma unroll
			for (int c = 0; c < CB; c++) bv[c] = BLOAD8(bp[c], k);
			#pragma unroll
			for (int r = 0; r < RB; r++) {
				const float8 av = ALOAD8(ap[r], k);
				#pragma unroll
				for (int c = 0; c < CB; c++) acc[r][c] = fma(av, bv[c], acc[r][c]);
			}
		}
		float s[4][6];
		#pragma unroll
		for (int r = 0; r < RB; r++)
			#pragma unroll
			for (int c = 0; c < CB; c++) s[r][c] = hsum8(acc[r][c]);
		for (; k < K; k++) {
			float bv[6];
			#pragma unroll
			for (int c = 0; c < CB; c++) bv[c] = BLOAD(bp[c], k);
			#pragma unroll
			for (int r = 0; r < RB; r++) {
				const float av = ALOAD(ap[r], k);
				#pragma unroll
				for (int c = 0; c < CB; c++) s[r][c] = fma(av, bv[c], s[r][c]);
			}
		}
		#pragma unroll
		for (int r = 0; r < RB; r++) {
			const int m = m0 + r;
			if (m >= M) break;
			#pragma unroll
			for (int c = 0; c < CB; c++) {
				const int n = n0 + c;
				if (n >= N) break;
				mm_put(C, m * cm + n * cn, Bias, m * brm + n * brn, s[r][c],
				       alpha, beta);
			}
		}
	}
}

// 4x3: 12 accumulators, 4 + 3 loads per 12 FMAs (3x4 and 2x6 need a 17th
// register and spilled; 6x2 ran alike or slower).
__kernel void mm_dot8_4x3(MM_PARAMS) { mm_dot8(4, 3, MM_ARGS); }

// mm_axpy computes RB rows x VB*16 columns at a time (RB*VB <= 16): per k,
// VB vectors of one B row times a broadcast element of each A row. Wide
// column blocks make each B row a contiguous run of VB*64 bytes, which is
// what keeps the CPU's prefetchers streaming when B is read row by row.
// Vectors reaching past N are shifted left to end at N (their overlap with
// the previous vector is not stored twice); only N < 16 takes a scalar path.
__attribute__((always_inline)) static inline void
mm_axpy(const int RB, const int VB, MM_PARAMS) {
	const int n0 = get_global_id(0) * VB * 16;
	if (n0 >= N) return;
	MM_ROW_CHUNK(RB)
	MM_BATCH(get_global_id(2))
	for (int blk = blk0_; blk < blk1_; blk++) {
		const int m0 = blk * RB;
		__global const a_t *ap[16];
		#pragma unroll
		for (int r = 0; r < RB; r++) ap[r] = A + min(m0 + r, M - 1) * am;
		if (N < 16) {
			for (int n = n0; n < N; n++) {
				float acc[16];
				#pragma unroll
				for (int r = 0; r < RB; r++) acc[r] = 0.0f;
				for (int k = 0; k < K; k++) {
					const float bv = BLOAD(B, k * bk + n);
					#pragma unroll
					for (int r = 0; r < RB; r++)
						acc[r] = fma(ALOAD(ap[r], k * ak), bv, acc[r]);
				}
				#pragma unroll
				for (int r = 0; r < RB; r++) {
					const int m = m0 + r;
					if (m >= M) break;
					mm_put(C, m * cm + n * cn, Bias, m * brm + n * brn, acc[r],
					       alpha, beta);
				}
			}
			continue;
		}
		int nv[16];
		#pragma unroll
		for (int v = 0; v < VB; v++) nv[v] = min(n0 + 16 * v, N - 16);
		float16 acc[16][16];
		#pragma unroll
		for (int r = 0; r < RB; r++)
			#pragma unroll
			for (int v = 0; v < VB; v++) acc[r][v] = (float16)(0.0f);
		for (int k = 0; k < K; k++) {
			float16 bv[16];
			#pragma unroll
			for (int v = 0; v < VB; v++) bv[v] = BLOAD16(B, k * bk + nv[v]);
			#pragma unroll
			for (int r = 0; r < RB; r++) {
				const float16 a = (float16)(ALOAD(ap[r], k * ak));
				#pragma unroll
				for (int v = 0; v < VB; v++) acc[r][v] = fma(a, bv[v], acc[r][v]);
			}
		}
		#pragma unroll
		for (int r = 0; r < RB; r++) {
			const int m = m0 + r;
			if (m >= M) break;
			#pragma unroll
			for (int v = 0; v < VB; v++) {
				float t[16];
				vstore16(acc[r][v], 0, t);
				for (int j = 0; j < 16; j++) {
					const int n = nv[v] + j;
					if (n >= n0 + 16 * v)
						mm_put(C, m * cm + n * cn, Bias, m * brm + n * brn, t[j],
						       alpha, beta);
				}
			}
		}
	}
}

__kernel void mm_axpy_4x4(MM_PARAMS) { mm_axpy(4, 4, MM_ARGS); }
__kernel void mm_axpy_1x16(MM_PARAMS) { mm_axpy(1, 16, MM_ARGS); }

#endif // !MM_GPU

// The half-emulation build (-DHALF_EMU, tests only) holds only mm_reg and
// mm_gemv_c4, the kernels with an emulated half path: fewer kernels to
// compile.
#ifndef HALF_EMU
__kernel void mm_naive(MM_PARAMS) {
	const int n = get_global_id(0), m = get_global_id(1);
	if (n >= N || m >= M) return;
	MM_BATCH(get_global_id(2))
	float acc = 0.0f;
	for (int k = 0; k < K; k++)
		acc = fma(ALOAD(A, m * am + k * ak), BLOAD(B, k * bk + n * bn), acc);
	mm_put(C, m * cm + n * cn, Bias, m * brm + n * brn, acc, alpha, beta);
}
#endif // !HALF_EMU

#ifdef MM_GPU
#ifndef HALF_EMU
// mm_gemv_wg: work-group (MM_WG, 1, 1) per output column n and block of up
// to 4 rows (global (N*MM_WG, ceil(M/4), batch)). Adjacent work-items read
// adjacent float4s of the same weight row, which is what a GPU's memory
// system wants; the partial sums meet in a local-memory tree.
#define MM_WG 64
__kernel __attribute__((reqd_work_group_size(MM_WG, 1, 1))) void
mm_gemv_wg(MM_PARAMS) {
	const int n = get_group_id(0), m0 = get_global_id(1) * 4;
	const int t = get_local_id(0);
	MM_BATCH(get_global_id(2))
	__local float red[4][MM_WG];
	__global const a_t *ap[4];
	#pragma unroll
	for (int r = 0; r < 4; r++) ap[r] = A + min(m0 + r, M - 1) * am;
	__global const b_t *bp = B + n * bn;
	float4 acc[4] = {(float4)(0.0f), (float4)(0.0f), (float4)(0.0f),
	                 (float4)(0.0f)};
	const int k4 = K & ~3;
	for (int k = t * 4; k < k4; k += MM_WG * 4) {
		const float4 bv = BLOAD4(bp, k);
		#pragma unroll
		for (int r = 0; r < 4; r++) acc[r] = fma(ALOAD4(ap[r], k), bv, acc[r]);
	}
	float s[4];
	#pragma unroll
	for (int r = 0; r < 4; r++) s[r] = acc[r].x + acc[r].y + acc[r].z + acc[r].w;
	for (int k = k4 + t; k < K; k += MM_WG) {
		const float bv = BLOAD(bp, k);
		#pragma unroll
		for (int r = 0; r < 4; r++) s[r] = fma(ALOAD(ap[r], k), bv, s[r]);
	}
	#pragma unroll
	for (int r = 0; r < 4; r++) red[r][t] = s[r];
	barrier(CLK_LOCAL_MEM_FENCE);
	for (int w = MM_WG / 2; w > 0; w >>= 1) {
		if (t < w)
			#pragma unroll
			for (int r = 0; r < 4; r++) red[r][t] += red[r][t + w];
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	if (t < 4 && m0 + t < M)
		mm_put(C, (m0 + t) * cm + n * cn, Bias, (m0 + t) * brm + n * brn,
		       red[t][0], alpha, beta);
}
#endif // !HALF_EMU

// mm_gemv_c4: the phone decode GEMV for float weights stored [N, K]
// (Linear's layout, bk == 1): work-group (MM_C4L, 1, 1) per four output
// columns and row (global (ceil(N/4)*MM_C4L, M, batch)). Lane t reads
// float4s (or half4s) k = 4t, 4t + 4*MM_C4L, ... of all four weight rows,
// so neighbouring lanes read neighbouring 8- or 16-byte runs of each row,
// and every activation load serves four columns. The four partial sums
// meet through sub_group_reduce_add when the device has subgroups
// (-DMM_SG), else in a local-memory reduction of three barriers. With
// -DMM_HALF, fp16 activations and weights on a device with cl_khr_fp16
// (halfmath.cl's HALF_MATH, or its exact emulation HALF_EMU in tests),
// each four-term dot product is computed in half by a chain of half fmas
// from zero (k, k+1, k+2, k+3: an order fixed so that a test can emulate
// it, which dot() does not fix) and summed in float.
#define MM_C4L 64
#if defined(MM_SG) &&                                                          \
    (defined(cl_khr_subgroups) || defined(cl_intel_subgroups) ||               \
     defined(__opencl_c_subgroups))
#if defined(cl_khr_subgroups)
#pragma OPENCL EXTENSION cl_khr_subgroups : enable
#elif defined(cl_intel_subgroups)
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
#endif
#define MM_SUBGROUPS 1
#endif
#if defined(MM_HALF) && defined(A_F16) && defined(B_F16) && defined(HM_ON)
#define MM_HALF_MATH 1
// mm_hdot4 is a . b in half: four half fmas in k order from zero.
static inline float mm_hdot4(hreal4 a, hreal4 b) {
	return HTOF(HFMA(a.w, b.w, HFMA(a.z, b.z, HFMA(a.y, b.y, HFMA(a.x, b.x, HZERO)))));
}
#endif

// mm_reduce4 returns, in lanes 0..3, the work-group's sums of acc.x .. .w
// (other lanes get 0).
static inline float mm_reduce4(float4 acc, __local float (*red)[MM_C4L], int t) {
#ifdef MM_SUBGROUPS
	const float4 v = (float4)(sub_group_reduce_add(acc.x), sub_group_reduce_add(acc.y),
	                          sub_group_reduce_add(acc.z), sub_group_reduce_add(acc.w));
	const int sg = get_sub_group_id(), ns = get_num_sub_groups();
	if (get_sub_group_local_id() == 0) {
		red[0][sg] = v.x;
		red[1][sg] = v.y;
		red[2][sg] = v.z;
		red[3][sg] = v.w;
	}
	barrier(CLK_LOCAL_MEM_FENCE);
	float s = 0.0f;
	if (t < 4)
		for (int j = 0; j < ns; j++) s += red[t][j];
	return s;
#else
	red[0][t] = acc.x;
	red[1][t] = acc.y;
	red[2][t] = acc.z;
	red[3][t] = acc.w;
	barrier(CLK_LOCAL_MEM_FENCE);
	// 16 lanes per output each add a run of 4; then one lane per output
	// adds the 16.
	const int i = t / (MM_C4L / 4), part = t % (MM_C4L / 4);
	float s = red[i][4 * part] + red[i][4 * part + 1] + red[i][4 * part + 2] +
	          red[i][4 * part + 3];
	barrier(CLK_LOCAL_MEM_FENCE);
	red[i][part] = s;
	barrier(CLK_LOCAL_MEM_FENCE);
	s = 0.0f;
	if (t < 4)
		for (int j = 0; j < MM_C4L / 4; j++) s += red[t][j];
	return s;
#endif
}

// With -DMM_IMG (matmul.go's mmImages: devices whose texture path reads
// faster) the weight B comes as an image1d_buffer_t over its buffer, four
// elements a texel: RGBA half for fp16 weights (read_imagef widens
// exactly), RGBA uint32 for fp32 ones (reinterpreted). The values, and so
// the sums, are the buffer build's bit for bit. offB, bn and B's batch
// strides still count elements; the launcher passes only multiples of four.
#ifdef MM_IMG
#define MM_C4_PARAMS                                                           \
	__global const a_t *A, int offA, int am, int ak, int sA0, int sA1,         \
	    __read_only image1d_buffer_t B, int offB, int bk, int bn, int sB0,     \
	    int sB1, __global store_t *C, int offC, int cm, int cn, int sC0,       \
	    int sC1, __global const bias_t *Bias, int offBias, int brm, int brn,   \
	    int sD0, int sD1, int M, int N, int K, int nb1, float alpha,           \
	    float beta
// bo is B's first element for this batch entry; a row is its first texel.
#define MM_C4_BATCH(z)                                                         \
	const int z0_ = (z) / nb1, z1_ = (z) - z0_ * nb1;                          \
	A += offA + z0_ * sA0 + z1_ * sA1;                                         \
	const int bo = offB + z0_ * sB0 + z1_ * sB1;                               \
	C += offC + z0_ * sC0 + z1_ * sC1;                                         \
	Bias += offBias + z0_ * sD0 + z1_ * sD1;
typedef int mm_brow;
#define MM_BROW(n) ((bo + (n) * bn) / 4)
#ifdef B_F16
#define MM_BTEX(t) read_imagef(B, (t))
#else
#define MM_BTEX(t) as_float4(read_imageui(B, (t)))
#endif
#define MM_B4(row, k) MM_BTEX((row) + (k) / 4)
static inline float mm_lane(float4 v, int c) {
	return c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
}
#define MM_B1(row, k) mm_lane(MM_B4(row, k), (k) % 4)
#ifdef HM_HALF
// Scalar casts: libclc, which the register gate compiles against, has no
// vector half conversions. Each value is a half, so each cast is exact.
static inline half4 mm_h4(float4 v) {
	return (half4)((half)v.x, (half)v.y, (half)v.z, (half)v.w);
}
#define MM_H4(row, k) mm_h4(MM_B4(row, k))
#else
#define MM_H4(row, k) MM_B4(row, k)
#endif
#else
#define MM_C4_PARAMS MM_PARAMS
#define MM_C4_BATCH(z) MM_BATCH(z)
typedef __global const b_t *mm_brow;
#define MM_BROW(n) (B + (n) * bn)
#define MM_B4(row, k) BLOAD4(row, k)
#define MM_B1(row, k) BLOAD(row, k)
#define MM_H4(row, k) HLOAD4(row, k)
#endif

__kernel __attribute__((reqd_work_group_size(MM_C4L, 1, 1))) void
mm_gemv_c4(MM_C4_PARAMS) {
	const int n0 = get_group_id(0) * 4, m = get_group_id(1);
	const int t = get_local_id(0);
	MM_C4_BATCH(get_global_id(2))
	__local float red[4][MM_C4L];
	__global const a_t *ap = A + m * am;
	const mm_brow b0 = MM_BROW(min(n0, N - 1));
	const mm_brow b1 = MM_BROW(min(n0 + 1, N - 1));
	const mm_brow b2 = MM_BROW(min(n0 + 2, N - 1));
	const mm_brow b3 = MM_BROW(min(n0 + 3, N - 1));
	float4 acc = (float4)(0.0f);
	const int k4 = K & ~3;
	for (int k = t * 4; k < k4; k += MM_C4L * 4) {
#ifdef MM_HALF_MATH
		const hreal4 a = HLOAD4(ap, k);
		acc += (float4)(mm_hdot4(a, MM_H4(b0, k)), mm_hdot4(a, MM_H4(b1, k)),
		                mm_hdot4(a, MM_H4(b2, k)), mm_hdot4(a, MM_H4(b3, k)));
#else
		const float4 a = ALOAD4(ap, k);
		acc += (float4)(dot(a, MM_B4(b0, k)), dot(a, MM_B4(b1, k)),
		                dot(a, MM_B4(b2, k)), dot(a, MM_B4(b3, k)));
#endif
	}
	for (int k = k4 + t; k < K; k += MM_C4L) {
		const float a = ALOAD(ap, k);
		acc = fma((float4)(a), (float4)(MM_B1(b0, k), MM_B1(b1, k), MM_B1(b2, k), MM_B1(b3, k)), acc);
	}
	const float s = mm_reduce4(acc, red, t);
	if (t < 4 && n0 + t < N)
		mm_put(C, m * cm + (n0 + t) * cn, Bias, m * brm + (n0 + t) * brn, s, alpha, beta);
}
#ifndef HALF_EMU
// mm_tiled: work-group (16, 16) computes a 64x64 block of C; work-item
// (tx, ty) owns rows ty + 16*i and columns tx + 16*j, so reads of the local
// tiles by neighbouring work-items hit neighbouring addresses. Each 16-deep
// K slice of A and B is loaded with the work-item index running along
// whichever dimension is contiguous in memory, to keep global reads
// coalesced for every transpose.
#define TT 64
#define TK 16
__kernel __attribute__((reqd_work_group_size(16, 16, 1))) void
mm_tiled(MM_PARAMS) {
	const int tx = get_local_id(0), ty = get_local_id(1);
	const int tid = ty * 16 + tx;
	const int n0 = get_group_id(0) * TT, m0 = get_group_id(1) * TT;
	MM_BATCH(get_global_id(2))
	__local float As[TK][TT];
	__local float Bs[TK][TT];
	float acc[4][4];
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
	for (int k0 = 0; k0 < K; k0 += TK) {
		for (int e = tid; e < TT * TK; e += 256) {
			int mm, kk;
			if (ak == 1) {
				kk = e % TK;
				mm = e / TK;
			} else {
				mm = e % TT;
				kk = e / TT;
			}
			const int m = m0 + mm, k = k0 + kk;
			As[kk][mm] = (m < M && k < K) ? ALOAD(A, m * am + k * ak) : 0.0f;
			int nn;
			if (bn == 1) {
				nn = e % TT;
				kk = e / TT;
			} else {
				kk = e % TK;
				nn = e / TK;
			}
			const int n = n0 + nn, k2 = k0 + kk;
			Bs[kk][nn] = (n < N && k2 < K) ? BLOAD(B, k2 * bk + n * bn) : 0.0f;
		}
		barrier(CLK_LOCAL_MEM_FENCE);
		for (int kk = 0; kk < TK; kk++) {
			float a[4], b[4];
			for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
			for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
			for (int i = 0; i < 4; i++)
				for (int j = 0; j < 4; j++) acc[i][j] = fma(a[i], b[j], acc[i][j]);
		}
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	for (int i = 0; i < 4; i++) {
		const int m = m0 + ty + 16 * i;
		if (m >= M) continue;
		for (int j = 0; j < 4; j++) {
			const int n = n0 + tx + 16 * j;
			if (n < N)
				mm_put(C, m * cm + n * cn, Bias, m * brm + n * brn, acc[i][j],
				       alpha, beta);
		}
	}
}

#endif // !HALF_EMU

// mm_reg: the phone prefill GEMM for K-contiguous operands (A [M, K] with
// ak == 1, B stored [N, K] with bk == 1, the Linear layout PrefersTransB
// asks for): a work-item computes MR rows x 4 columns in registers, without
// local memory (global (ceil(M/MR), ceil(N/4), batch)); MR is 4, and 2 for
// the half path (the launcher sets it: 84 VGPRs at 4 on the register
// gate's target, 58 at 2). Dimension 0 runs
// over row blocks, so the work-items of a wave load the same four weight
// rows at the same time (one fetch, broadcast) and the weight is fetched
// once per wave of rows. Per four k a work-item loads four weight and MR
// activation vectors of four and does 16*MR multiply-adds.
//
// Half path (halfmath.cl's HM_ON with fp16 A and B): runs of up to MR_HK
// k are summed per output by HFMA in half, in k order, from zero; each
// run's half sum is then added to the output's float sum. The K % 4 tail
// is float fma on the converted halves. halfemu_test.go emulates it in Go.
#ifndef MR
#define MR 4
#endif
#define MR_HK 16
#if defined(HM_ON) && defined(A_F16) && defined(B_F16)
#define MR_HALF 1
// mr_dot4 is h + a.x*b.x + ... + a.w*b.w, one rounding per term, x first.
static inline hreal mr_dot4(hreal4 a, hreal4 b, hreal h) {
	return HFMA(a.w, b.w, HFMA(a.z, b.z, HFMA(a.y, b.y, HFMA(a.x, b.x, h))));
}
#endif

__kernel void mm_reg(MM_PARAMS) {
	const int m0 = get_global_id(0) * MR, n0 = get_global_id(1) * 4;
	if (m0 >= M || n0 >= N) return;
	MM_BATCH(get_global_id(2))
	// Element offsets rather than pointers: half the registers on a
	// 64-bit GPU.
	int oa[MR], ob[4];
	#pragma unroll
	for (int r = 0; r < MR; r++) oa[r] = min(m0 + r, M - 1) * am;
	#pragma unroll
	for (int c = 0; c < 4; c++) ob[c] = min(n0 + c, N - 1) * bn;
	float4 acc[MR];
	#pragma unroll
	for (int r = 0; r < MR; r++) acc[r] = (float4)(0.0f);
	const int k4 = K & ~3;
#ifdef MR_HALF
	for (int k0 = 0; k0 < k4; k0 += MR_HK) {
		const int k1 = min(k0 + MR_HK, k4);
		hreal h[MR][4];
		#pragma unroll
		for (int r = 0; r < MR; r++)
			#pragma unroll
			for (int c = 0; c < 4; c++) h[r][c] = HZERO;
		for (int k = k0; k < k1; k += 4) {
			const hreal4 b0 = HLOAD4(B, ob[0] + k), b1 = HLOAD4(B, ob[1] + k);
			const hreal4 b2 = HLOAD4(B, ob[2] + k), b3 = HLOAD4(B, ob[3] + k);
			#pragma unroll
			for (int r = 0; r < MR; r++) {
				const hreal4 a = HLOAD4(A, oa[r] + k);
				h[r][0] = mr_dot4(a, b0, h[r][0]);
				h[r][1] = mr_dot4(a, b1, h[r][1]);
				h[r][2] = mr_dot4(a, b2, h[r][2]);
				h[r][3] = mr_dot4(a, b3, h[r][3]);
			}
		}
		#pragma unroll
		for (int r = 0; r < MR; r++)
			acc[r] += (float4)(HTOF(h[r][0]), HTOF(h[r][1]), HTOF(h[r][2]),
			                   HTOF(h[r][3]));
	}
#else
	for (int k = 0; k < k4; k += 4) {
		const float4 b0 = BLOAD4(B, ob[0] + k), b1 = BLOAD4(B, ob[1] + k);
		const float4 b2 = BLOAD4(B, ob[2] + k), b3 = BLOAD4(B, ob[3] + k);
		#pragma unroll
		for (int r = 0; r < MR; r++) {
			const float4 a = ALOAD4(A, oa[r] + k);
			acc[r] += (float4)(dot(a, b0), dot(a, b1), dot(a, b2), dot(a, b3));
		}
	}
#endif
	for (int k = k4; k < K; k++) {
		const float4 b = (float4)(BLOAD(B, ob[0] + k), BLOAD(B, ob[1] + k),
		                          BLOAD(B, ob[2] + k), BLOAD(B, ob[3] + k));
		#pragma unroll
		for (int r = 0; r < MR; r++) acc[r] = fma((float4)(ALOAD(A, oa[r] + k)), b, acc[r]);
	}
	#pragma unroll
	for (int r = 0; r < MR; r++) {
		const int m = m0 + r;
		if (m >= M) break;
		const float o[4] = {acc[r].x, acc[r].y, acc[r].z, acc[r].w};
		#pragma unroll
		for (int c = 0; c < 4; c++) {
			const int n = n0 + c;
			if (n >= N) break;
			mm_put(C, m * cm + n * cn, Bias, m * brm + n * brn, o[c], alpha, beta);
		}
	}
}
#endif // MM_GPU
