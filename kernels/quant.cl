// quant.cl: C = A * W (+ bias) with W a 4-bit packed weight.
//
// A is [M, K] (row stride lda), C is [M, N] (row stride ldc), both in the
// launch's storage (common.cl). W is logically [K, N] and packed as
// graph/quant documents: column n's codes are the uint32 words
// Q[offQ + n*ldq ...], group g of a column is its words [g*QW, (g+1)*QW)
// (QW = QG/8), and word i of a group holds in bits 4t..4t+3 the code of the
// weight at k = g*QG + t*QW + i. The group's two float32 parameters are
// P[offP + n*ldp + 2g], P[offP + n*ldp + 2g + 1].
//
// M, N and K are the active sizes and ldq/ldp the stored column strides, so
// an elastic sub-model runs on the top-left corner of a larger packed weight
// without repacking (K must stay a multiple of QG).
//
// Build options: -DQG=<group size, a multiple of 32>, -DQ_E0M4 or -DQ_INT4,
// -DSTORAGE_F16 (A and C), -DBIAS_F16 (the bias). halfmath.cl's
// -DHALF_MATH selects fp16 arithmetic on devices with cl_khr_fp16 (the
// launcher asks for it only there): in the tiled kernels qmt_r1 and qmt_mm
// for E0M4 and INT4, in qmm_* (with -DQ_HALF) for E0M4; with -DHALF_EMU
// (tests) the same path runs in an exact float emulation of half, which
// PoCL executes. The fp16 path rounds the group's d and m to half, so a
// weight of 0 decodes to 0 only within that rounding; the float32 path
// decodes it to exactly 0.
//
// Dequantization, per weight:
//   E0M4: fma(as_float(0x3F800000 | q << 19), d, m): two bit operations
//         (move the nibble under the mantissa's top, OR in the exponent of
//         1.0) and one fma. The fp16 form is as_half(0x3C00 | q << 6).
//   INT4: (convert_float(q) - z) * s: a convert, a subtract and a multiply.
// The product then costs one more fma per weight and row.
//
// Kernels:
//   qmm_RxC  R rows x C columns per work-item. A group's QW
//            words are read as QV-word vectors; nibble t of every lane
//            decodes at once and meets the QV contiguous activations
//            k = g*QG + t*QW + h + lane. Each decoded vector is reused across
//            the R rows: decode (M small) runs 1 x 4, one work-item per
//            four output columns; prefill runs 4 x 2, dequantizing each
//            weight vector once per four rows, in registers. The CPU path
//            (PoCL favours a work-item per output with wide vectors) and the
//            GPU prefill path.
//   qmv_wg   GPU decode: a work-group per output column (and block of up to
//            4 rows); adjacent work-items read adjacent uint4s of the column
//            (coalesced), partial sums meet in local memory.

#ifndef QG
#error "quant.cl needs -DQG=<group size>"
#endif
#if QG % 32 != 0
#error "QG must be a multiple of 32"
#endif
#define QW (QG / 8)

// QV: the widest of 16, 8, 4 words that divides a group's QW words.
#if QW % 16 == 0
#define QV 16
#elif QW % 8 == 0
#define QV 8
#else
#define QV 4
#endif

#define QCAT_(a, b) a##b
#define QCAT(a, b) QCAT_(a, b)
#define floatV QCAT(float, QV)
#define uintV QCAT(uint, QV)
#define vloadV QCAT(vload, QV)
#define as_floatV QCAT(as_float, QV)
#define convert_floatV QCAT(convert_float, QV)

// Activation loads of QV (or 4) consecutive elements. vload_half16/8 only
// need 2-byte alignment by the spec, but PoCL 3.1 marks them 32/16-byte
// aligned and LLVM may emit an aligned move that faults on an odd offset;
// half4 pieces (8 bytes, never faulting on x86) are safe everywhere.
#ifdef STORAGE_F16
#define QAH4(p, i) vload_half4(0, (p) + (i))
#if QV == 16
#define ALOADV(p, i)                                                           \
	((float16)(QAH4(p, i), QAH4(p, (i) + 4), QAH4(p, (i) + 8),                \
	           QAH4(p, (i) + 12)))
#elif QV == 8
#define ALOADV(p, i) ((float8)(QAH4(p, i), QAH4(p, (i) + 4)))
#else
#define ALOADV(p, i) QAH4(p, i)
#endif
#define ALOAD4(p, i) QAH4(p, i)
#else
#define ALOADV(p, i) vloadV(0, (p) + (i))
#define ALOAD4(p, i) vload4(0, (p) + (i))
#endif

#ifdef BIAS_F16
typedef half bias_t;
#define BIASLOAD(p, i) vload_half((i), (p))
#else
typedef float bias_t;
#define BIASLOAD(p, i) ((p)[(i)])
#endif

// QSHt moves nibble t (bits 4t..4t+3) of every lane to bits 19..22, the top
// four mantissa bits of a float32; the mask that follows drops the rest.
#define QSH0(u) ((u) << 19)
#define QSH1(u) ((u) << 15)
#define QSH2(u) ((u) << 11)
#define QSH3(u) ((u) << 7)
#define QSH4(u) ((u) << 3)
#define QSH5(u) ((u) >> 1)
#define QSH6(u) ((u) >> 5)
#define QSH7(u) ((u) >> 9)

// QNIBt extracts nibble t as an integer 0..15 (INT4).
#define QNIB0(u) ((u) & 0xFu)
#define QNIB1(u) (((u) >> 4) & 0xFu)
#define QNIB2(u) (((u) >> 8) & 0xFu)
#define QNIB3(u) (((u) >> 12) & 0xFu)
#define QNIB4(u) (((u) >> 16) & 0xFu)
#define QNIB5(u) (((u) >> 20) & 0xFu)
#define QNIB6(u) (((u) >> 24) & 0xFu)
#define QNIB7(u) ((u) >> 28)

// DEQ(FT, AS, CV, u, t, a, b): nibble t of the word vector u dequantized to
// the float vector type FT with the group's parameters (a, b); AS and CV are
// FT's as_ and convert_ functions. t must be a literal 0..7.
//
// On AVX-512 the E0M4 mask and OR fuse into one vpternlogd, so a weight
// costs a shift, a ternary-logic op and the fma; INT4 costs a shift, an
// AND, a convert, a subtract and a multiply.
#if defined(Q_E0M4)
#define DEQ(FT, AS, CV, u, t, a, b)                                            \
	fma(AS((QSH##t(u) & 0x00780000u) | 0x3F800000u), (FT)(a), (FT)(b))
#elif defined(Q_INT4)
#define DEQ(FT, AS, CV, u, t, a, b) ((CV(QNIB##t(u)) - (FT)(b)) * (FT)(a))
#else
#error "quant.cl needs -DQ_E0M4 or -DQ_INT4"
#endif

// The qmm_* half path (Q_HALF_MATH): E0M4 weights in fp16 storage, built
// with -DQ_HALF and one of halfmath.cl's builds. QHV is the QV-wide half
// vector the path computes in, QHFMA its fma, QHLOAD loads QV activations,
// QHTOF converts to floatV and DEQH(u, t, a, b) decodes nibble t of the
// words u as fma(1 + q/16, half(a), half(b)). On cl_khr_fp16 (HM_HALF)
// these are the half built-ins; in the tests' emulation (HM_EMU) floatV
// lanes that hold half values, each fma rounded to half by hm_fma, so
// PoCL runs the same sequence of roundings (halfemu_test.go's
// qmmHalfSim emulates it in Go).
#if defined(Q_HALF) && defined(HM_ON) && defined(Q_E0M4) &&                   \
    defined(STORAGE_F16)
#define Q_HALF_MATH 1
#ifdef HM_HALF
#define halfV QCAT(half, QV)
#define as_halfV QCAT(as_half, QV)
#define convert_ushortV QCAT(convert_ushort, QV)
#define ushortV QCAT(ushort, QV)
// QHSHt moves nibble t to bits 6..9, the top four mantissa bits of a half.
#define QHSH0(u) ((u) << 6)
#define QHSH1(u) ((u) << 2)
#define QHSH2(u) ((u) >> 2)
#define QHSH3(u) ((u) >> 6)
#define QHSH4(u) ((u) >> 10)
#define QHSH5(u) ((u) >> 14)
#define QHSH6(u) ((u) >> 18)
#define QHSH7(u) ((u) >> 22)
#define QHV halfV
#define QHFMA(a, b, c) fma(a, b, c)
#define QHLOAD(p, i) vloadV(0, (p) + (i))
#define QHTOF(h) convert_floatV(h)
#define QHZERO ((halfV)(0.0h))
#define DEQH(u, t, a, b)                                                       \
	fma(as_halfV(convert_ushortV(QHSH##t(u) & 0x3C0u) | (ushortV)(0x3C00)),    \
	    (halfV)(a), (halfV)(b))
#else
#define vstoreV QCAT(vstore, QV)
// qh_fma is hm_fma lane by lane. Not inlined: the kernels call it 16 to
// 80 times per vector step, and inlining each copy of the emulation
// multiplied the cold build time.
__attribute__((noinline)) static floatV qh_fma(floatV a, floatV b, floatV c) {
	float x[QV], y[QV], z[QV];
	vstoreV(a, 0, x);
	vstoreV(b, 0, y);
	vstoreV(c, 0, z);
	for (int i = 0; i < QV; i++) z[i] = hm_fma(x[i], y[i], z[i]);
	return vloadV(0, z);
}
#define QHV floatV
#define QHFMA(a, b, c) qh_fma(a, b, c)
#define QHLOAD(p, i) ALOADV(p, i)
#define QHTOF(h) (h)
#define QHZERO ((floatV)(0.0f))
// qh_deq decodes the bases 1 + q/16 (exact in float as in half) with the
// parameters d and m rounded to half; not inlined, as qh_fma.
__attribute__((noinline)) static floatV qh_deq(floatV base, float d, float m) {
	return qh_fma(base, (floatV)(HCVT(d)), (floatV)(HCVT(m)));
}
#define DEQH(u, t, a, b)                                                       \
	qh_deq(as_floatV((QSH##t(u) & 0x00780000u) | 0x3F800000u), (a), (b))
#endif
#endif

static inline float qhsum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }
#if QV == 16
static inline float qhsum(float16 v) {
	const float8 a = v.lo + v.hi;
	return qhsum4(a.lo + a.hi);
}
#elif QV == 8
static inline float qhsum(float8 v) { return qhsum4(v.lo + v.hi); }
#else
static inline float qhsum(float4 v) { return qhsum4(v); }
#endif

#define QMM_PARAMS                                                             \
	__global const uint *Q, int offQ, int ldq, __global const float *P,        \
	    int offP, int ldp, __global const store_t *A, int offA, int lda,       \
	    __global store_t *C, int offC, int ldc, __global const bias_t *Bias,   \
	    int offBias, int hasBias, int M, int N, int K

#define QMM_ARGS                                                               \
	Q, offQ, ldq, P, offP, ldp, A, offA, lda, C, offC, ldc, Bias, offBias,     \
	    hasBias, M, N, K

static inline void qput(__global store_t *C, int ci, __global const bias_t *Bias,
                        int bi, int hasBias, float v) {
	if (hasBias) v += BIASLOAD(Bias, bi);
	STORE(C, ci, v);
}

// QSTEP(t, RB, CB, NA) handles nibble t of the current words: QV weights
// per column, QV activations per row. Accumulators are split NA ways by t
// (NA = 4, 2, 1 for 1, 2, 4+ outputs per work-item) so that at least four
// independent fma chains are in flight: with one accumulator per output
// every fma waits for the previous one (4 cycles) and the loop runs at a
// fraction of the issue rate.
#ifdef Q_HALF_MATH
// fp16 arithmetic: the two bit operations and the fma run on halves; the
// products of one group are summed in half (8 terms per lane for QG = 128)
// and each group's sum is added to a float accumulator.
#define QSTEP(t, RB, CB, NA)                                                   \
	{                                                                          \
		QHV av[RB];                                                            \
		_Pragma("unroll") for (int r = 0; r < RB; r++)                         \
		    av[r] = QHLOAD(ap[r] + kb, (t) * QW);                              \
		_Pragma("unroll") for (int c = 0; c < CB; c++) {                       \
			const QHV w = DEQH(u[c], t, pa[c], pb[c]);                         \
			_Pragma("unroll") for (int r = 0; r < RB; r++)                     \
			    gacc[r][c][(t) % NA] = QHFMA(av[r], w, gacc[r][c][(t) % NA]);  \
		}                                                                      \
	}
#define QH_BEGIN(RB, CB, NA)                                                   \
	QHV gacc[RB][CB][NA];                                                      \
	_Pragma("unroll") for (int r = 0; r < RB; r++)                             \
	    _Pragma("unroll") for (int c = 0; c < CB; c++)                         \
	        _Pragma("unroll") for (int j = 0; j < NA; j++)                     \
	            gacc[r][c][j] = QHZERO;
#define QH_END(RB, CB, NA)                                                     \
	_Pragma("unroll") for (int r = 0; r < RB; r++)                             \
	    _Pragma("unroll") for (int c = 0; c < CB; c++)                         \
	        _Pragma("unroll") for (int j = 0; j < NA; j++)                     \
	            acc[r][c][j] += QHTOF(gacc[r][c][j]);
#else
#define QSTEP(t, RB, CB, NA)                                                   \
	{                                                                          \
		floatV av[RB];                                                         \
		_Pragma("unroll") for (int r = 0; r < RB; r++)                         \
		    av[r] = ALOADV(ap[r], kb + (t) * QW);                              \
		_Pragma("unroll") for (int c = 0; c < CB; c++) {                       \
			const floatV w =                                                   \
			    DEQ(floatV, as_floatV, convert_floatV, u[c], t, pa[c], pb[c]); \
			_Pragma("unroll") for (int r = 0; r < RB; r++)                     \
			    acc[r][c][(t) % NA] = fma(av[r], w, acc[r][c][(t) % NA]);      \
		}                                                                      \
	}
#define QH_BEGIN(RB, CB, NA)
#define QH_END(RB, CB, NA)
#endif

// QMM_KERNEL defines kernel NAME computing RB x CB outputs per work-item.
// It is a macro rather than a function taking RB and CB so that every
// private array has its exact constant size: with arrays sized for the
// largest variant and indexed through an inlined function's constants,
// PoCL kept them in memory, once per work-item of a 2048-item group, and
// overflowed the stack. Rows and columns past the edge are clamped for
// loading and skipped when storing, which keeps the loop free of branches.
#define QMM_KERNEL(NAME, RB, CB, NA)                                           \
	__kernel void NAME(QMM_PARAMS) {                                           \
		const int n0 = get_global_id(0) * CB, m0 = get_global_id(1) * RB;      \
		if (n0 >= N || m0 >= M) return;                                        \
		__global const uint *qp[CB];                                           \
		__global const float *pp[CB];                                          \
		__global const store_t *ap[RB];                                        \
		_Pragma("unroll") for (int c = 0; c < CB; c++) {                       \
			const int n = min(n0 + c, N - 1);                                  \
			qp[c] = Q + offQ + n * ldq;                                        \
			pp[c] = P + offP + n * ldp;                                        \
		}                                                                      \
		_Pragma("unroll") for (int r = 0; r < RB; r++)                         \
		    ap[r] = A + offA + min(m0 + r, M - 1) * lda;                       \
		floatV acc[RB][CB][NA];                                                \
		_Pragma("unroll") for (int r = 0; r < RB; r++)                         \
		    _Pragma("unroll") for (int c = 0; c < CB; c++)                     \
		        _Pragma("unroll") for (int j = 0; j < NA; j++)                 \
		            acc[r][c][j] = (floatV)(0.0f);                             \
		const int ng = K / QG;                                                 \
		for (int g = 0; g < ng; g++) {                                         \
			float pa[CB], pb[CB];                                              \
			_Pragma("unroll") for (int c = 0; c < CB; c++) {                   \
				const float2 pr = vload2(g, pp[c]);                            \
				pa[c] = pr.x;                                                  \
				pb[c] = pr.y;                                                  \
			}                                                                  \
			QH_BEGIN(RB, CB, NA)                                               \
			for (int h = 0; h < QW; h += QV) {                                 \
				uintV u[CB];                                                   \
				_Pragma("unroll") for (int c = 0; c < CB; c++)                 \
				    u[c] = vloadV(0, qp[c] + g * QW + h);                      \
				const int kb = g * QG + h;                                     \
				QSTEP(0, RB, CB, NA)                                           \
				QSTEP(1, RB, CB, NA)                                           \
				QSTEP(2, RB, CB, NA)                                           \
				QSTEP(3, RB, CB, NA)                                           \
				QSTEP(4, RB, CB, NA)                                           \
				QSTEP(5, RB, CB, NA)                                           \
				QSTEP(6, RB, CB, NA)                                           \
				QSTEP(7, RB, CB, NA)                                           \
			}                                                                  \
			QH_END(RB, CB, NA)                                                 \
		}                                                                      \
		_Pragma("unroll") for (int r = 0; r < RB; r++) {                       \
			const int m = m0 + r;                                              \
			if (m >= M) break;                                                 \
			_Pragma("unroll") for (int c = 0; c < CB; c++) {                   \
				const int n = n0 + c;                                          \
				if (n >= N) break;                                             \
				floatV v = acc[r][c][0];                                       \
				_Pragma("unroll") for (int j = 1; j < NA; j++) v += acc[r][c][j]; \
				qput(C, offC + m * ldc + n, Bias, offBias + n, hasBias,        \
				     qhsum(v));                                                \
			}                                                                  \
		}                                                                      \
	}

// The two blockings the launcher uses. Measured on PoCL (CPU time per
// launch): for one row, 1x4 and 1x2 tie at K = 4096 and 1x4 is 1.5x faster
// at K = 11008 (half the activation re-reads, which no longer fit in L1),
// 1x1 is 30% slower than either; for 64 rows 4x2, 4x4, 2x4 and 8x2 are within 10% of
// each other. Each variant adds about a second to a cold build, so only
// these two are compiled.
// The half-emulation builds (-DHALF_EMU, tests only) hold only kernels
// with an emulated half path, which keeps their cold builds small: qmt_r1
// and qmt_mm for the tiled layout, or, with -DQMM_EMU (the launcher adds
// it for the column layout), qmm_1x4 and qmm_4x2 alone.
// The image build (-DQ_IMG) holds qmt_r1 alone.
#if (!defined(HALF_EMU) || defined(QMM_EMU)) && !defined(Q_IMG)
QMM_KERNEL(qmm_1x4, 1, 4, 1)
QMM_KERNEL(qmm_4x2, 4, 2, 1)
#endif

#if !defined(HALF_EMU) && !defined(Q_IMG)

// qmv_wg: work-group (QWG, 1, 1) per output column n and block of up to 4
// rows; global (N*QWG, ceil(M/4)). Work-item l takes the column's uint4
// chunks l, l+QWG, ...: chunk e is words 4e..4e+3 of group 4e/QW, i.e. the
// weights k = g*QG + t*QW + h + (0..3) with h = 4e mod QW.
#define QWG 64
__kernel __attribute__((reqd_work_group_size(QWG, 1, 1))) void
qmv_wg(QMM_PARAMS) {
	const int n = get_group_id(0), m0 = get_global_id(1) * 4;
	const int l = get_local_id(0);
	__local float red[4][QWG];
	__global const uint *qp = Q + offQ + n * ldq;
	__global const float *pp = P + offP + n * ldp;
	__global const store_t *ap[4];
	for (int r = 0; r < 4; r++) ap[r] = A + offA + min(m0 + r, M - 1) * lda;
	float4 acc[4] = {(float4)(0.0f), (float4)(0.0f), (float4)(0.0f),
	                 (float4)(0.0f)};
	const int chunks = K / 32;
	for (int e = l; e < chunks; e += QWG) {
		const int g = (4 * e) / QW, h = (4 * e) % QW;
		const float2 pr = vload2(g, pp);
		const uint4 u = vload4(e, qp);
		const int kb = g * QG + h;
#define QSTEP4(t)                                                              \
	{                                                                          \
		const float4 w = DEQ(float4, as_float4, convert_float4, u, t, pr.x, pr.y); \
		for (int r = 0; r < 4; r++)                                            \
			acc[r] = fma(ALOAD4(ap[r], kb + (t) * QW), w, acc[r]);             \
	}
		QSTEP4(0)
		QSTEP4(1)
		QSTEP4(2)
		QSTEP4(3)
		QSTEP4(4)
		QSTEP4(5)
		QSTEP4(6)
		QSTEP4(7)
#undef QSTEP4
	}
	for (int r = 0; r < 4; r++) red[r][l] = qhsum4(acc[r]);
	barrier(CLK_LOCAL_MEM_FENCE);
	for (int w = QWG / 2; w > 0; w >>= 1) {
		if (l < w)
			for (int r = 0; r < 4; r++) red[r][l] += red[r][l + w];
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	if (l < 4 && m0 + l < M)
		qput(C, offC + (m0 + l) * ldc + n, Bias, offBias + n, hasBias, red[l][0]);
}

#endif // !HALF_EMU && !Q_IMG

// ---------------------------------------------------------------------------
// The phone decode GEMV on the four-column tiled layout (QLayoutTile4,
// quant.go's RepackQTile4): columns are taken in blocks of four (the last
// block padded with zero columns); block b's codes are QTB = (Kstored/32)*16
// words from Q[offQ + b*ldq], chunk e (words 4e..4e+3 of every column of
// the block, i.e. weights k = g*QG + t*QW + h + 0..3 with g = 4e/QW,
// h = 4e mod QW, t = 0..7) at words 16e + 4c .. 16e + 4c + 3 for column c;
// the group parameters of block b, group g are the eight floats
// P[offP + b*ldp + 8g + 2c + {0, 1}].
//
// qmt_r1 runs a work-group of QTL lanes per column block and row: lane
// l takes chunks l, l + QTL, ..., so neighbouring lanes read neighbouring
// 64-byte runs (one uint16 load covers all four columns), and each
// activation load serves four columns. A lane's RB x 4 partial sums meet
// through sub_group_reduce_add and one local array when the device has
// subgroups (-DQ_SG, set from the extension string), otherwise through a
// local-memory reduction of three barriers. In fp16 storage on a device
// with cl_khr_fp16 (halfmath.cl's HALF_MATH, which the launcher adds there
// for E0M4 and INT4 alike; HALF_EMU in tests) the weights decode in half
// and each chunk's 32 products per column are summed in half, then added
// to float sums (QT_HALF below; conversions as scalar casts: libclc, which
// the register gate compiles against, has no vector half conversions).

#define QTL 64

#if defined(Q_SG) &&                                                           \
    (defined(cl_khr_subgroups) || defined(cl_intel_subgroups) ||               \
     defined(__opencl_c_subgroups))
#if defined(cl_khr_subgroups)
#pragma OPENCL EXTENSION cl_khr_subgroups : enable
#elif defined(cl_intel_subgroups)
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
#endif
#define QT_SUBGROUPS 1
#endif

#if defined(HM_ON) && (defined(Q_E0M4) || defined(Q_INT4)) &&               \
    defined(STORAGE_F16)
// The half path (halfmath.cl; HALF_MATH on cl_khr_fp16, HALF_EMU in
// tests): qmt_mm's order. The group's parameters are rounded to half, each
// E0M4 weight decodes as HFMA(1 + q/16, d, m) and each INT4 weight as
// HFMA(q - z, s, 0) (Q4_DEC below), and a chunk's 32 products per column
// are summed by HFMA from zero in the order k = kb + t*QW + 0..3 for
// t = 0..7 (dot's order is unspecified, so it is not used), then the
// chunk's half sum is added to the lane's float sum.
#define QT_HALF 1

// Q4_DEC(n, d, m): the four weights of the nibbles n (a uint4) as hreal4,
// from the group's parameters in half: (d, m) for E0M4, (s, 1024 + z) for
// INT4 (Q4_M). INT4 forms q - z as (1024 + q) - (1024 + z), both exact
// in half (its spacing at 1024 is 1), 1024 + q by setting the bits of
// 0x6400 (1024.0): convert_half4 of the integers took 138-174 VGPRs and
// 16 KiB of scratch per lane through libclc on the register gate's target.
// qmt_r1 and qmt_mm share it.
#ifdef Q_E0M4
#define Q4_DEC(n, d, m) q4_dec(HE0M4(n), (d), (m))
#define Q4_M(y) HCVT(y)
#else
#ifdef HM_HALF
#define Q4_DEC(n, d, m)                                                        \
	q4_dec(as_half4(convert_ushort4(n) | (ushort4)(0x6400)) - (m), (d), HZERO)
#else
#define Q4_DEC(n, d, m) q4_dec((convert_float4(n) + 1024.0f) - (m), (d), HZERO)
#endif
#define Q4_M(y) HCVT((y) + 1024.0f)
#endif

// q4_dec is HFMA(b, d, m) lane by lane.
static inline hreal4 q4_dec(hreal4 b, hreal d, hreal m) {
	return (hreal4)(HFMA(b.x, d, m), HFMA(b.y, d, m), HFMA(b.z, d, m), HFMA(b.w, d, m));
}
// qt_dot4 adds a.x*w.x, then a.y*w.y, a.z*w.z and a.w*w.w to h.
static inline hreal qt_dot4(hreal4 a, hreal4 w, hreal h) {
	return HFMA(a.w, w.w, HFMA(a.z, w.z, HFMA(a.y, w.y, HFMA(a.x, w.x, h))));
}
#define QT_STEP(t, RB)                                                         \
	{                                                                          \
		const hreal4 w0 = Q4_DEC(QNIB##t(u.s0123), hd.x, hm.x);                \
		const hreal4 w1 = Q4_DEC(QNIB##t(u.s4567), hd.y, hm.y);                \
		const hreal4 w2 = Q4_DEC(QNIB##t(u.s89ab), hd.z, hm.z);                \
		const hreal4 w3 = Q4_DEC(QNIB##t(u.scdef), hd.w, hm.w);                \
		_Pragma("unroll") for (int r = 0; r < RB; r++) {                       \
			const hreal4 a = HLOAD4(ap[r], kb + (t) * QW);                     \
			h[r] = (hreal4)(qt_dot4(a, w0, h[r].x), qt_dot4(a, w1, h[r].y),    \
			                qt_dot4(a, w2, h[r].z), qt_dot4(a, w3, h[r].w));   \
		}                                                                      \
	}
#define QT_CHUNK(RB)                                                           \
	{                                                                          \
		const hreal4 hd = (hreal4)(HCVT(pr.s0), HCVT(pr.s2), HCVT(pr.s4),      \
		                           HCVT(pr.s6));                               \
		const hreal4 hm = (hreal4)(Q4_M(pr.s1), Q4_M(pr.s3), Q4_M(pr.s5),      \
		                           Q4_M(pr.s7));                               \
		hreal4 h[RB];                                                          \
		_Pragma("unroll") for (int r = 0; r < RB; r++) h[r] = (hreal4)(HZERO); \
		QT_STEP(0, RB) QT_STEP(1, RB) QT_STEP(2, RB) QT_STEP(3, RB)            \
		QT_STEP(4, RB) QT_STEP(5, RB) QT_STEP(6, RB) QT_STEP(7, RB)            \
		_Pragma("unroll") for (int r = 0; r < RB; r++)                         \
		    acc[r] += (float4)(HTOF(h[r].x), HTOF(h[r].y), HTOF(h[r].z),       \
		                       HTOF(h[r].w));                                  \
	}
#else
#define QT_DEQ4(u4, t, d, m)                                                   \
	DEQ(float4, as_float4, convert_float4, u4, t, d, m)
// acc[r] holds the four columns' sums of row r; dot keeps one column's
// four products together before they meet its sum.
#define QT_STEP(t, RB)                                                         \
	{                                                                          \
		const float4 w0 = QT_DEQ4(u.s0123, t, pr.s0, pr.s1);                   \
		const float4 w1 = QT_DEQ4(u.s4567, t, pr.s2, pr.s3);                   \
		const float4 w2 = QT_DEQ4(u.s89ab, t, pr.s4, pr.s5);                   \
		const float4 w3 = QT_DEQ4(u.scdef, t, pr.s6, pr.s7);                   \
		_Pragma("unroll") for (int r = 0; r < RB; r++) {                       \
			const float4 a = ALOAD4(ap[r], kb + (t) * QW);                     \
			acc[r] += (float4)(dot(a, w0), dot(a, w1), dot(a, w2), dot(a, w3)); \
		}                                                                      \
	}
#define QT_CHUNK(RB)                                                           \
	QT_STEP(0, RB) QT_STEP(1, RB) QT_STEP(2, RB) QT_STEP(3, RB)                \
	QT_STEP(4, RB) QT_STEP(5, RB) QT_STEP(6, RB) QT_STEP(7, RB)
#endif

// QT_REDUCE leaves in red[i][0] (i = 4r + c) the work-group's sum of
// output i, for the lanes' values acc[r].sc.
#ifdef QT_SUBGROUPS
#define QT_REDUCE(RB)                                                          \
	__local float red[RB * 4][QTL];                                            \
	{                                                                          \
		const int sg = get_sub_group_id(), ns = get_num_sub_groups();          \
		const int first = get_sub_group_local_id() == 0;                       \
		_Pragma("unroll") for (int r = 0; r < RB; r++) {                       \
			const float4 v = (float4)(sub_group_reduce_add(acc[r].x),          \
			                          sub_group_reduce_add(acc[r].y),          \
			                          sub_group_reduce_add(acc[r].z),          \
			                          sub_group_reduce_add(acc[r].w));         \
			if (first) {                                                       \
				red[4 * r][sg] = v.x;                                          \
				red[4 * r + 1][sg] = v.y;                                      \
				red[4 * r + 2][sg] = v.z;                                      \
				red[4 * r + 3][sg] = v.w;                                      \
			}                                                                  \
		}                                                                      \
		barrier(CLK_LOCAL_MEM_FENCE);                                          \
		if (l < RB * 4) {                                                      \
			float s = red[l][0];                                               \
			for (int j = 1; j < ns; j++) s += red[l][j];                       \
			red[l][0] = s;                                                     \
		}                                                                      \
	}
#else
// Three barriers: every lane stores its RB*4 sums; then QTL / (RB*4) lanes
// per output each add a contiguous run; then one lane per output adds
// those.
#define QT_REDUCE(RB)                                                          \
	__local float red[RB * 4][QTL];                                            \
	{                                                                          \
		_Pragma("unroll") for (int r = 0; r < RB; r++) {                       \
			red[4 * r][l] = acc[r].x;                                          \
			red[4 * r + 1][l] = acc[r].y;                                      \
			red[4 * r + 2][l] = acc[r].z;                                      \
			red[4 * r + 3][l] = acc[r].w;                                      \
		}                                                                      \
		barrier(CLK_LOCAL_MEM_FENCE);                                          \
		const int lpo = QTL / (RB * 4), run = QTL / lpo;                       \
		const int i = l / lpo, part = l % lpo;                                 \
		float s = 0.0f;                                                        \
		for (int j = 0; j < run; j++) s += red[i][part * run + j];             \
		barrier(CLK_LOCAL_MEM_FENCE);                                          \
		red[i][part] = s;                                                      \
		barrier(CLK_LOCAL_MEM_FENCE);                                          \
		if (l < RB * 4) {                                                      \
			s = red[l][0];                                                     \
			for (int j = 1; j < lpo; j++) s += red[l][j];                      \
			red[l][0] = s;                                                     \
		}                                                                      \
	}
#endif

// With -DQ_IMG (the launcher's choice on devices whose texture path reads
// faster than global loads, see quant.go's qImages) qmt_r1 takes the codes
// and the parameters as images over their buffers (image1d_buffer_t of
// RGBA uint32 texels, four words each) and reads them with read_imageui:
// the same words, so the same sums bit for bit. offQ, ldq, offP and ldp
// still count words; the launcher passes only multiples of four.
#ifdef Q_IMG
#define QMT_PARAMS                                                             \
	__read_only image1d_buffer_t Q, int offQ, int ldq,                         \
	    __read_only image1d_buffer_t P, int offP, int ldp,                     \
	    __global const store_t *A, int offA, int lda, __global store_t *C,     \
	    int offC, int ldc, __global const bias_t *Bias, int offBias,           \
	    int hasBias, int M, int N, int K
// qb and pb are the block's first texels.
#define QT_BASES                                                               \
	const int qb = (offQ + blk * ldq) / 4, pb = (offP + blk * ldp) / 4;
#define QT_LOADU(e)                                                            \
	((uint16)(read_imageui(Q, qb + 4 * (e)), read_imageui(Q, qb + 4 * (e) + 1), \
	          read_imageui(Q, qb + 4 * (e) + 2),                               \
	          read_imageui(Q, qb + 4 * (e) + 3)))
#define QT_LOADP(g)                                                            \
	as_float8((uint8)(read_imageui(P, pb + 2 * (g)),                           \
	                  read_imageui(P, pb + 2 * (g) + 1)))
#else
#define QMT_PARAMS QMM_PARAMS
#define QT_BASES                                                               \
	__global const uint *qb = Q + offQ + blk * ldq;                            \
	__global const float *pb = P + offP + blk * ldp;
#define QT_LOADU(e) vload16((e), qb)
#define QT_LOADP(g) vload8((g), pb)
#endif

#define QMT_KERNEL(NAME, RB)                                                   \
	__kernel __attribute__((reqd_work_group_size(QTL, 1, 1))) void NAME(       \
	    QMT_PARAMS) {                                                          \
		const int blk = get_group_id(0), m0 = get_group_id(1) * RB;            \
		const int l = get_local_id(0);                                         \
		QT_BASES                                                               \
		__global const store_t *ap[RB];                                        \
		_Pragma("unroll") for (int r = 0; r < RB; r++)                         \
		    ap[r] = A + offA + min(m0 + r, M - 1) * lda;                       \
		float4 acc[RB];                                                        \
		_Pragma("unroll") for (int r = 0; r < RB; r++) acc[r] = (float4)(0.0f); \
		const int chunks = K / 32;                                             \
		for (int e = l; e < chunks; e += QTL) {                                \
			const int g = (4 * e) / QW, kb = g * QG + (4 * e) % QW;            \
			const uint16 u = QT_LOADU(e);                                      \
			const float8 pr = QT_LOADP(g);                                     \
			QT_CHUNK(RB)                                                       \
		}                                                                      \
		QT_REDUCE(RB)                                                          \
		if (l < RB * 4) {                                                      \
			const int m = m0 + l / 4, n = blk * 4 + l % 4;                     \
			if (m < M && n < N)                                                \
				qput(C, offC + m * ldc + n, Bias, offBias + n, hasBias,        \
				     red[l][0]);                                               \
		}                                                                      \
	}

// One row per work-group (dimension 1 of the launch takes the rows): the
// four-row variant kept 80-154 VGPRs live on the register gate's target,
// two rows 64-116, over the 64 a phone GPU allows. It serves decode (up to
// 3 rows); prefill takes qmt_mm below.
#ifndef QMM_EMU
QMT_KERNEL(qmt_r1, 1)
#endif

// ---------------------------------------------------------------------------
// qmt_mm: the phone prefill GEMM on the tiled layout (QLayoutTile4). A
// work-item computes QMR = 4 rows x QMC = 2 columns (half a block of four)
// in registers, without local memory (global
// (ceil(M/QMR), ceil(N/QMC))). Dimension 0 runs over row blocks, so the
// work-items of a wave read the same codes and group parameters at the
// same time (one fetch, broadcast): the weight is fetched once per wave of
// rows instead of once per row (qmt_r1). Per 32-weight chunk a work-item
// loads its columns' code words and group parameters; then for each nibble
// t it loads QMR activation vectors of four and decodes four weights per
// column. The codes stay live across the chunk and the activations of one
// nibble at a time. On the register gate's target 4 x 2 keeps 57-63 VGPRs
// live, 2 x 4 56-62, 2 x 2 39-45, 4 x 4 80-96; 4 x 2 shares each weight
// decode among four rows. The launcher sets 2 x 2 for the half path at
// groups of 32, which keeps 66 live at 4 x 2.
//
// Half path (halfmath.cl's HM_ON, E0M4 or INT4 weights, fp16 storage):
// the group's parameters are rounded to half, each E0M4 weight decodes as
// HFMA(1 + q/16, d, m) and each INT4 weight as HFMA(q - z, s, 0) (q - z
// is an exact small integer in half, so its one rounding is the product's),
// and a chunk's 32 products per output are summed by
// HFMA in half, in the order k = kb + t*QW + 0..3 for t = 0..7; the
// chunk's half sum is then added to the output's float sum. The fp32 path
// is DEQ and dot. halfemu_test.go emulates the half path in Go.
#ifndef QMR
#define QMR 4
#endif
#ifndef QMC
#define QMC 2
#endif
#if defined(HM_ON) && (defined(Q_E0M4) || defined(Q_INT4)) &&               \
    defined(STORAGE_F16)
#define QM_HALF 1

// The weights decode by Q4_DEC and Q4_M and the products meet by qt_dot4
// (qmt_r1's half path, above).

#define QM_STEP(t)                                                             \
	{                                                                          \
		hreal4 a[QMR];                                                         \
		_Pragma("unroll") for (int r = 0; r < QMR; r++)                        \
		    a[r] = HLOAD4(A, oa[r] + kb + (t) * QW);                           \
		_Pragma("unroll") for (int c = 0; c < QMC; c++) {                      \
			const hreal4 w = Q4_DEC(QNIB##t(u[c]), d[c], m[c]);                \
			_Pragma("unroll") for (int r = 0; r < QMR; r++)                    \
			    h[r][c] = qt_dot4(a[r], w, h[r][c]);                           \
		}                                                                      \
	}
#define QM_CHUNK                                                               \
	{                                                                          \
		hreal d[QMC], m[QMC], h[QMR][QMC];                                     \
		_Pragma("unroll") for (int c = 0; c < QMC; c++) {                      \
			const float2 pr = vload2(4 * g + c0 + c, pb);                      \
			d[c] = HCVT(pr.x);                                                 \
			m[c] = Q4_M(pr.y);                                                 \
			_Pragma("unroll") for (int r = 0; r < QMR; r++) h[r][c] = HZERO;   \
		}                                                                      \
		QM_STEP(0) QM_STEP(1) QM_STEP(2) QM_STEP(3)                            \
		QM_STEP(4) QM_STEP(5) QM_STEP(6) QM_STEP(7)                            \
		_Pragma("unroll") for (int r = 0; r < QMR; r++)                        \
		    _Pragma("unroll") for (int c = 0; c < QMC; c++)                    \
		        acc[r][c] += HTOF(h[r][c]);                                    \
	}
#else
#define QM_STEP(t)                                                             \
	{                                                                          \
		float4 a[QMR];                                                         \
		_Pragma("unroll") for (int r = 0; r < QMR; r++)                        \
		    a[r] = ALOAD4(A, oa[r] + kb + (t) * QW);                           \
		_Pragma("unroll") for (int c = 0; c < QMC; c++) {                      \
			const float4 w = DEQ(float4, as_float4, convert_float4, u[c], t,   \
			                     pr[c].x, pr[c].y);                            \
			_Pragma("unroll") for (int r = 0; r < QMR; r++)                    \
			    acc[r][c] += dot(a[r], w);                                     \
		}                                                                      \
	}
#define QM_CHUNK                                                               \
	{                                                                          \
		float2 pr[QMC];                                                        \
		_Pragma("unroll") for (int c = 0; c < QMC; c++)                        \
		    pr[c] = vload2(4 * g + c0 + c, pb);                                \
		QM_STEP(0) QM_STEP(1) QM_STEP(2) QM_STEP(3)                            \
		QM_STEP(4) QM_STEP(5) QM_STEP(6) QM_STEP(7)                            \
	}
#endif

#if !defined(QMM_EMU) && !defined(Q_IMG)
__kernel void qmt_mm(QMM_PARAMS) {
	const int m0 = get_global_id(0) * QMR, n0 = get_global_id(1) * QMC;
	if (m0 >= M || n0 >= N) return;
	// Block n0/4, first column c0 within it.
	const int c0 = n0 % 4;
	__global const uint *qb = Q + offQ + (n0 / 4) * ldq;
	__global const float *pb = P + offP + (n0 / 4) * ldp;
	A += offA;
	int oa[QMR]; // element offsets: half a pointer's registers
	_Pragma("unroll") for (int r = 0; r < QMR; r++) oa[r] = min(m0 + r, M - 1) * lda;
	float acc[QMR][QMC];
	_Pragma("unroll") for (int r = 0; r < QMR; r++)
	    _Pragma("unroll") for (int c = 0; c < QMC; c++) acc[r][c] = 0.0f;
	const int chunks = K / 32;
	for (int e = 0; e < chunks; e++) {
		const int g = (4 * e) / QW, kb = g * QG + (4 * e) % QW;
		uint4 u[QMC];
		_Pragma("unroll") for (int c = 0; c < QMC; c++) u[c] = vload4(4 * e + c0 + c, qb);
		QM_CHUNK
	}
	_Pragma("unroll") for (int r = 0; r < QMR; r++) {
		const int m = m0 + r;
		if (m >= M) break;
		_Pragma("unroll") for (int c = 0; c < QMC; c++) {
			const int n = n0 + c;
			if (n >= N) break;
			qput(C, offC + m * ldc + n, Bias, offBias + n, hasBias, acc[r][c]);
		}
	}
}
#endif // !QMM_EMU && !Q_IMG
