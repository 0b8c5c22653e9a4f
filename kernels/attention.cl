// attention.cl: fused scaled-dot-product attention with online softmax.
//
// O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:].K[b,g,j,:] + mask[b,h,i,j]) V[b,g,j,:]
// with g = h / (H / Hkv) (grouped-query attention). The running maximum and
// sum of the softmax are carried along j (the flash-attention recurrence), so
// no Sq x Skv score matrix exists anywhere.
//
// Every tensor is addressed as base + b*xb + h*xh + s*xs + d with its own
// strides, d contiguous: a KV cache allocated for the maximum length is read
// in place (Skv is the filled prefix; the head stride is the cache length) and
// the output can be written as [B,Sq,H,D] for the transpose that follows
// attention in most graphs. Keys j > past + i are invisible when causal is
// set. A query row that sees no key at all (everything masked to -inf)
// produces zeros.
//
// A mask value at or below MASKED_AT (a build option: -1e30 in fp32
// storage, -65504 in fp16) replaces the score instead of being added to it.
// Models mask with the most negative float (-3.4e38), which
// fp16 storage saturates to -65504: added, that would leave the scores'
// differences intact and a row whose keys are all masked would not be the
// uniform average the fp32 model computes (-3.4e38 swallows any score).
// Replacing makes both storages agree; partially masked rows are unchanged
// because exp(-65504 - max) is 0 either way.
//
// The head size is a build option (-DHD=...): it fixes the loop trip counts
// and the private arrays' sizes. -DATT_GPU builds attn_wg, otherwise
// attn_lanes and attn_row are built.
//
//   attn_lanes  one work-item per RW query rows of one kv head (the rows of
//               every query head in the group, so GQA reads K and V once per
//               group): each row is a lane of a float16, so scores need no
//               horizontal sums and every K/V element loaded feeds RW rows.
//               Keys go TJ at a time with one vector exp per key. The CPU
//               prefill variant.
//   attn_row    one work-item per query row, q and the accumulator in float
//               vectors over the head dimension, keys scored RT at a time so
//               their exps are one vector exp: the CPU decode variant, where
//               a work-item's rows would leave most lanes of attn_lanes idle.
//   attn_wg     a work-group of ATT_WG work-items per query row: keys are
//               scored ATT_WG at a time (one per work-item), and each
//               work-item accumulates a strided slice of the head dimensions,
//               so V is read coalesced. The GPU variant.
//   attn_split  GPU decode on long contexts (-DATT_G, see below): split-K
//   attn_combine  over key ranges with the query heads of a kv group
//               sharing K and V loads, then a combine of the ranges.
//   attn_qtile  GPU prefill (-DATT_G): a work-group per tile of query
//               positions of a kv group's query heads, sharing each K row
//               and V element across the tile's rows.

#ifndef MASKED_AT
#error "attention.cl needs -DMASKED_AT=<threshold> (MaskedF32 or MaskedF16)"
#endif

#ifndef HD
#error "attention.cl needs -DHD=<head size>"
#endif

// PoCL 3.1 marks vload_half8/16 loads 16/32-byte aligned although the spec
// asks only 2 (an odd offset then faults); half4 pieces are safe everywhere.
#define VLOAD_HALF8(p) ((float8)(vload_half4(0, (p)), vload_half4(0, (p) + 4)))
#define VLOAD_HALF16(p) ((float16)(VLOAD_HALF8(p), VLOAD_HALF8((p) + 8)))

#if HD % 16 == 0
#define VW 16
typedef float16 vt;
#ifdef STORAGE_F16
#define VL(p, i) VLOAD_HALF16((p) + (i))
#else
#define VL(p, i) vload16(0, (p) + (i))
#endif
static inline float vsum(vt v) {
	float8 a = v.lo + v.hi;
	float4 b = a.lo + a.hi;
	return b.x + b.y + b.z + b.w;
}
#define VSTORE(v, p, i) vstore16((v), 0, (p) + (i))
#elif HD % 8 == 0
#define VW 8
typedef float8 vt;
#ifdef STORAGE_F16
#define VL(p, i) VLOAD_HALF8((p) + (i))
#else
#define VL(p, i) vload8(0, (p) + (i))
#endif
static inline float vsum(vt v) {
	float4 b = v.lo + v.hi;
	return b.x + b.y + b.z + b.w;
}
#define VSTORE(v, p, i) vstore8((v), 0, (p) + (i))
#elif HD % 4 == 0
#define VW 4
typedef float4 vt;
#ifdef STORAGE_F16
#define VL(p, i) vload_half4(0, (p) + (i))
#else
#define VL(p, i) vload4(0, (p) + (i))
#endif
static inline float vsum(vt v) { return v.x + v.y + v.z + v.w; }
#define VSTORE(v, p, i) vstore4((v), 0, (p) + (i))
#else
#define VW 1
typedef float vt;
#define VL(p, i) LOAD((p), (i))
static inline float vsum(vt v) { return v; }
#define VSTORE(v, p, i) ((p)[(i)] = (v))
#endif
#define NV (HD / VW)

// The half path of the GPU kernels (attn_wg, attn_split, attn_qtile),
// -DATT_HALF in fp16 storage with one of halfmath.cl's builds (HALF_MATH
// where the device has cl_khr_fp16, HALF_EMU in tests). The products are
// half: q (times scale) is rounded to half once, each score is runs of
// AH_RUN head dimensions summed by half fma from zero, each run added to a
// float score, and each output dimension is runs of AH_RUN keys of
// p * v summed by half fma, each run added to a float accumulator, with p
// the key's probability rounded to half. The softmax statistics stay
// float: scores, the running maximum m and sum l (the sum of the rounded
// probabilities, so the weights the accumulator used are the ones it is
// divided by), the rescaling factors and the split-K parts. A half run
// never holds more than AH_RUN terms: a score or a sum of p * v over a
// whole context would overflow half's 65504 or lose every bit of a late
// small term, and a run of 16 keeps each sum's rounding error within
// gamma_16 of half of the run's magnitude (kernels' attnHalfBound).
//
// The grouped kernels' runs are not unrolled (#pragma unroll 1): unrolled,
// the compiler hoisted a run's 16 loads and kept 66-97 VGPRs live on the
// register gate's target (the fp32 loops 43-61); rolled, 39-64.
//
// AEXP is exp; under HALF_EMU it is att_exp_emu, built from float fma
// alone, so that a Go emulation reproduces it bit for bit (a library exp
// is only specified to within ulps).
#if defined(ATT_HALF) && defined(HM_ON) && defined(STORAGE_F16)
#define AH 1
#define AH_RUN 16
typedef hreal ptype; // a key's probability as the accumulation reads it
typedef hreal AQT;   // q times scale as the scores read it
#define AQCVT(x) HCVT(x)
#define PCVT(x) HCVT(x)
#define PTOF(p) HTOF(p)
#ifdef HM_HALF
#define AHL(p, i) ((p)[(i)]) // a half from fp16 storage, as stored
#define AHFMA(a, b, c) fma((a), (b), (c))
#else
#define AHL(p, i) vload_half((i), (p))
// One out-of-line copy of the emulated fma: inlined at every unrolled
// site, it made each emulation build take 20-45 s to compile on PoCL.
__attribute__((noinline)) static float att_hfma(float a, float b, float c) { return hm_fma(a, b, c); }
#define AHFMA(a, b, c) att_hfma((a), (b), (c))
#endif
#else
typedef float ptype;
typedef float AQT;
#define AQCVT(x) (x)
#define PCVT(x) (x)
#define PTOF(p) (p)
#endif

#ifdef HM_EMU
// att_exp_emu returns e^x for x <= 0: n = rint(x log2 e), r = x - n ln 2
// in two fma steps (ln 2's high part has 16 bits, so n times it is
// exact), e^r by its degree-7 Taylor polynomial (|r| <= 0.35: truncation
// below 6e-9), times 2^n. Below -86 it returns 0 (e^-86 < 4e-38; the
// result then stays a normal float). Within 4e-7 relative of e^x (checked
// in Go by TestAttnExpEmu).
static inline float att_exp_emu(float x) {
	if (!(x >= -86.0f)) return 0.0f;
	const float n = rint(x * 0x1.715476p+0f);
	float r = fma(n, -0x1.62e4p-1f, x);
	r = fma(n, -0x1.7f7d1cp-20f, r);
	float p = 0x1.a01a02p-13f;
	p = fma(p, r, 0x1.6c16c2p-10f);
	p = fma(p, r, 0x1.111112p-7f);
	p = fma(p, r, 0x1.555556p-5f);
	p = fma(p, r, 0x1.555556p-3f);
	p = fma(p, r, 0.5f);
	p = fma(p, r, 1.0f);
	p = fma(p, r, 1.0f);
	return p * as_float(((int)n + 127) << 23);
}
#define AEXP(x) att_exp_emu(x)
#else
#define AEXP(x) exp(x)
#endif

#define ATT_PARAMS                                                             \
	__global const store_t *Q, int offQ, int qb, int qh, int qs,               \
	    __global const store_t *K, int offK, int kb, int kh, int ks,           \
	    __global const store_t *V, int offV, int vb, int vh, int vs,           \
	    __global store_t *O, int offO, int ob, int oh, int os,                 \
	    __global const store_t *Mask, int offM, int mb, int mh, int mq,        \
	    int mk, int hasMask, int H, int Hkv, int Sq, int Skv, int past,        \
	    int causal, float scale, __global float *Lse, int offL, int hasLse

// ATT_SETUP points Q, K, V, O and Mask at query row (b, h, i) and its kv
// head, and sets jn, the number of keys the row may see.
#define ATT_SETUP(i, h, b)                                                     \
	const int g_ = (h) / (H / Hkv);                                            \
	Q += offQ + (b) * qb + (h) * qh + (i) * qs;                                \
	K += offK + (b) * kb + g_ * kh;                                            \
	V += offV + (b) * vb + g_ * vh;                                            \
	O += offO + (b) * ob + (h) * oh + (i) * os;                                \
	Mask += offM + (b) * mb + (h) * mh + (i) * mq;                             \
	const int jn = causal ? clamp(past + (i) + 1, 0, Skv) : Skv;

#ifndef ATT_GPU
#define RT 16 // keys per tile in attn_row: one float16 of scores

static inline float hmax16(float16 v) {
	float8 a = fmax(v.lo, v.hi);
	float4 b = fmax(a.lo, a.hi);
	return fmax(fmax(b.x, b.y), fmax(b.z, b.w));
}

static inline float hsum16(float16 v) {
	float8 a = v.lo + v.hi;
	float4 b = a.lo + a.hi;
	return (b.x + b.y) + (b.z + b.w);
}

// attn_row: global (Sq, H, B), local (1, 1, 1).
__kernel void attn_row(ATT_PARAMS) {
	const int i = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
	if (i >= Sq) return;
	ATT_SETUP(i, h, b)
	// Loops over NV and RT are unrolled so that q and the accumulators stay
	// in registers (rolled, PoCL keeps acc on the stack and every key's
	// update waits on the previous one's store). Two accumulator sets, for
	// even and odd keys, halve the fma chains' length.
	vt q[NV], acc[NV], acc1[NV];
	#pragma unroll
	for (int c = 0; c < NV; c++) {
		q[c] = VL(Q, c * VW) * scale;
		acc[c] = (vt)(0.0f);
		acc1[c] = (vt)(0.0f);
	}
	float m = -INFINITY, l = 0.0f;
	// The tile before this one: its first key and its weights (relative to
	// m), whose V rows are accumulated while this tile's K rows are scored,
	// so that K and V stream together (a tile of K, then a tile of V ran
	// ~10% slower on BenchmarkAttentionDecode's 32 MiB fp32 cache).
	int jp = 0;
	float p[RT];
	for (int j0 = 0; j0 < jn; j0 += RT) {
		// Score a whole tile first: the dot products are independent (no
		// chain through the running maximum), and the tile's exps are one
		// vector exp. Keys past jn read row jn-1 and are masked.
		float sc[RT];
		#pragma unroll
		for (int u = 0; u < RT; u++) {
			const int j = min(j0 + u, jn - 1);
			__global const store_t *kp = K + j * ks;
			vt t = q[0] * VL(kp, 0);
			#pragma unroll
			for (int c = 1; c < NV; c++) t = fma(q[c], VL(kp, c * VW), t);
			float s = vsum(t);
			if (hasMask) {
				const float mv = LOAD(Mask, j * mk);
				s = mv <= MASKED_AT ? mv : s + mv;
			}
			sc[u] = j0 + u < jn ? s : -INFINITY;
			if (j0 > 0) { // the previous tile is whole
				__global const store_t *vp = V + (jp + u) * vs;
				#pragma unroll
				for (int c = 0; c < NV; c++) {
					if (u % 2 == 0)
						acc[c] = fma((vt)(p[u]), VL(vp, c * VW), acc[c]);
					else
						acc1[c] = fma((vt)(p[u]), VL(vp, c * VW), acc1[c]);
				}
			}
		}
		const float16 st = vload16(0, sc);
		const float mn = fmax(m, hmax16(st));
		// While every key so far is masked to -inf, subtract 0 instead of
		// mn: the weights are exp(-inf) = 0, not NaN. On the first visible
		// tile exp(-inf - mn) = 0 rescales nothing.
		const float ms = mn == -INFINITY ? 0.0f : mn;
		const float corr = exp(m - ms);
		const float16 pt = exp(st - ms);
		l = fma(l, corr, hsum16(pt));
		m = mn;
		vstore16(pt, 0, p);
		#pragma unroll
		for (int c = 0; c < NV; c++) {
			acc[c] *= corr;
			acc1[c] *= corr;
		}
		jp = j0;
	}
	const int un = min(RT, jn - jp);
	for (int u = 0; u < un; u++) {
		__global const store_t *vp = V + (jp + u) * vs;
		#pragma unroll
		for (int c = 0; c < NV; c++) acc[c] = fma((vt)(p[u]), VL(vp, c * VW), acc[c]);
	}
	if (hasLse) Lse[offL + (b * H + h) * Sq + i] = l > 0.0f ? m + log(l) : -INFINITY;
	const float inv = l > 0.0f ? 1.0f / l : 0.0f;
	#pragma unroll
	for (int c = 0; c < NV; c++) {
		float t[VW];
		VSTORE((acc[c] + acc1[c]) * inv, t, 0);
		for (int e = 0; e < VW; e++) STORE(O, c * VW + e, t[e]);
	}
}

#define RW 16 // query rows (lanes) per work-item in attn_lanes
#define TJ 8 // keys per tile in attn_lanes
typedef float16 lt;
typedef int16 lti;

// A lane-major [HD][RW] array: whole vectors are read and written through
// v (one aligned access each; vstore16 to private memory compiles to four
// pieces on PoCL), single lanes through f.
typedef union {
	lt v[HD];
	float f[HD * RW];
} lanes_t;

#ifdef STORAGE_F16
// half_bits_rte returns the fp16 bit patterns of f rounded to nearest even,
// as vstore_half_rte stores them (NaN becomes the quiet NaN 0x7e00).
// Normal results round by adding 0xfff plus the lowest kept bit before
// truncating 13 mantissa bits; results below fp16's smallest normal are
// rounded by the fp32 adder itself, aligning the value against 0.5 so that
// the kept bits land at the bottom of the mantissa.
static inline ushort16 half_bits_rte(float16 f) {
	const uint16 x = as_uint16(f);
	const uint16 sign = (x >> 16) & 0x8000u;
	const uint16 a = x & 0x7fffffffu;
	const uint16 big = select((uint16)(0x7c00u), (uint16)(0x7e00u), a > 0x7f800000u);
	const uint16 sub = as_uint16(as_float16(a) + 0.5f) - 0x3f000000u;
	const uint16 nrm = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
	uint16 h = select(nrm, sub, a < 0x38800000u);
	h = select(h, big, a >= 0x47800000u);
	return convert_ushort16(h | sign);
}

// attn_half_bits: H[i] = half_bits_rte(X[i]), 16 per work-item, for a
// bit-exact test of the rounding.
__kernel void attn_half_bits(__global const float *X, int offX, __global ushort *H, int offH) {
	const int i = get_global_id(0) * 16;
	float x[16];
	union {
		ushort16 v;
		ushort s[16];
	} h;
	for (int k = 0; k < 16; k++) x[k] = X[offX + i + k];
	h.v = half_bits_rte(vload16(0, x));
	for (int k = 0; k < 16; k++) H[offH + i + k] = h.s[k];
}
#endif

// attn_lanes: global (ceil(G*Sq / RW), Hkv, B), local (1, 1, 1), with
// G = H / Hkv. Work-item w takes the query rows v = w*RW + r of the
// kv head g's G*Sq rows, row v being query head g*G + v/Sq, position v%Sq.
__kernel void attn_lanes(ATT_PARAMS) {
	const int w = get_global_id(0), g = get_global_id(1), b = get_global_id(2);
	const int G = H / Hkv, rows = G * Sq, v0 = w * RW;
	if (v0 >= rows) return;
	K += offK + b * kb + g * kh;
	V += offV + b * vb + g * vh;
	// Q transposed and scaled, and the accumulator likewise. Lanes past the
	// last row repeat it and are never stored.
	lanes_t qT, acc;
	int mo[RW], lim[RW];
	int jmax = 0;
	for (int r = 0; r < RW; r++) {
		const int v = min(v0 + r, rows - 1);
		const int h = g * G + v / Sq, i = v % Sq;
		__global const store_t *q = Q + offQ + b * qb + h * qh + i * qs;
		for (int d = 0; d < HD; d++) qT.f[d * RW + r] = LOAD(q, d) * scale;
		mo[r] = offM + b * mb + h * mh + i * mq;
		lim[r] = causal ? clamp(past + i + 1, 0, Skv) : Skv;
		jmax = max(jmax, lim[r]);
	}
	for (int d = 0; d < HD; d++) acc.v[d] = (lt)(0.0f);
	const lti limv = vload16(0, lim);
	lt m = (lt)(-INFINITY), l = (lt)(0.0f);
#ifdef STORAGE_F16
	// The tile's K and V rows converted to fp32 once, not once per use.
	union {
		vt v[TJ * NV];
		float f[TJ * HD];
	} kt, vt_;
#define KEL(u, d) kt.f[(u) * HD + (d)]
#define VEL(u, d) vt_.f[(u) * HD + (d)]
#else
	__global const store_t *kt[TJ], *vt_[TJ];
#define KEL(u, d) kt[u][d]
#define VEL(u, d) vt_[u][d]
#endif
	for (int j0 = 0; j0 < jmax; j0 += TJ) {
		#pragma unroll
		for (int u = 0; u < TJ; u++) {
			// Keys past jmax read row jmax-1 and are masked below.
			const int j = min(j0 + u, jmax - 1);
#ifdef STORAGE_F16
			for (int c = 0; c < NV; c++) {
				kt.v[u * NV + c] = VL(K + j * ks, c * VW);
				vt_.v[u * NV + c] = VL(V + j * vs, c * VW);
			}
#else
			kt[u] = K + j * ks;
			vt_[u] = V + j * vs;
#endif
		}
		// Every K element is broadcast to all lanes: no horizontal sums.
		lt s[TJ];
		#pragma unroll
		for (int u = 0; u < TJ; u++) s[u] = (lt)(0.0f);
		for (int d = 0; d < HD; d++) {
			const lt qd = qT.v[d];
			#pragma unroll
			for (int u = 0; u < TJ; u++) s[u] = fma(qd, (lt)(KEL(u, d)), s[u]);
		}
		lt bm = (lt)(-INFINITY);
		#pragma unroll
		for (int u = 0; u < TJ; u++) {
			const int j = j0 + u;
			lt x = s[u];
			if (hasMask) {
				float mv[RW];
				const int jm = min(j, jmax - 1) * mk;
				#pragma unroll
				for (int r = 0; r < RW; r++) mv[r] = LOAD(Mask, mo[r] + jm);
				const lt mvv = vload16(0, mv);
				x = select(x + mvv, mvv, mvv <= (lt)(MASKED_AT));
			}
			x = select(x, (lt)(-INFINITY), (lti)(j) >= limv);
			s[u] = x;
			bm = fmax(bm, x);
		}
		const lt mn = fmax(m, bm);
		// A lane that has seen only -inf keeps zero weights: subtract 0
		// there instead of -inf (exp(-inf - -inf) would be NaN).
		const lt ms = select(mn, (lt)(0.0f), mn == (lt)(-INFINITY));
		const lt corr = exp(m - ms);
		lt ps = (lt)(0.0f);
		#pragma unroll
		for (int u = 0; u < TJ; u++) {
			s[u] = exp(s[u] - ms);
			ps += s[u];
		}
		l = fma(l, corr, ps);
		m = mn;
		for (int d = 0; d < HD; d++) {
			lt a = acc.v[d] * corr;
			#pragma unroll
			for (int u = 0; u < TJ; u++) a = fma(s[u], (lt)(VEL(u, d)), a);
			acc.v[d] = a;
		}
	}
#undef KEL
#undef VEL
	const lt inv = select((lt)(1.0f) / l, (lt)(0.0f), l <= (lt)(0.0f));
	const int rn = min(RW, rows - v0);
#ifdef STORAGE_F16
	// Rounded to fp16 a vector at a time: PoCL's vstore_half_rte is
	// emulated element by element, which cost as much as the attention.
	union {
		ushort16 v[HD];
		ushort s[HD * RW];
	} oT;
	for (int d = 0; d < HD; d++) oT.v[d] = half_bits_rte(acc.v[d] * inv);
#else
	for (int d = 0; d < HD; d++) acc.v[d] *= inv;
#endif
	if (hasLse) {
		float mf[RW], lf[RW];
		vstore16(m, 0, mf);
		vstore16(l, 0, lf);
		for (int r = 0; r < rn; r++) {
			const int v = v0 + r, h = g * G + v / Sq, i = v % Sq;
			Lse[offL + (b * H + h) * Sq + i] = lf[r] > 0.0f ? mf[r] + log(lf[r]) : -INFINITY;
		}
	}
	for (int r = 0; r < rn; r++) {
		const int v = v0 + r, h = g * G + v / Sq, i = v % Sq;
		__global store_t *o = O + offO + b * ob + h * oh + i * os;
#ifdef STORAGE_F16
		__global ushort *ou = (__global ushort *)o;
		for (int d = 0; d < HD; d++) ou[d] = oT.s[d * RW + r];
#else
		for (int d = 0; d < HD; d++) o[d] = acc.f[d * RW + r];
#endif
	}
}

#endif // !ATT_GPU

#ifdef ATT_GPU
#define ATT_WG 64

// ATT_SCORE_ROWS adds q_r . k to sr[r] for the N query rows qv[r][.] that
// share the key at kp; ATT_PV_ROWS adds sum_u pr[r][u] v_u[d] over the
// block's cnt keys (from j0) to acc[r][c]. Under AH each is runs of AH_RUN
// terms summed in half and added to the float, otherwise fp32 fma. The
// grouped-query (attn_split, N = ATT_G) and query-tile (attn_qtile,
// N = ATT_R) kernels share them, so their arithmetic cannot drift apart.
#ifdef AH
#define ATT_SCORE_ROWS(N, qv, kp, sr) \
	for (int d0 = 0; d0 < HD; d0 += AH_RUN) { \
		hreal hs_[N]; \
		_Pragma("unroll") for (int r = 0; r < N; r++) hs_[r] = HZERO; \
		_Pragma("unroll 1") for (int d = d0; d < min(d0 + AH_RUN, HD); d++) { \
			const hreal kd_ = AHL(kp, d); \
			_Pragma("unroll") for (int r = 0; r < N; r++) hs_[r] = AHFMA(qv[r][d], kd_, hs_[r]); \
		} \
		_Pragma("unroll") for (int r = 0; r < N; r++) sr[r] += HTOF(hs_[r]); \
	}
#define ATT_PV_ROWS(N, pr, V, vs, j0, cnt, d, acc, c) \
	for (int u0 = 0; u0 < (cnt); u0 += AH_RUN) { \
		hreal hv_[N]; \
		_Pragma("unroll") for (int r = 0; r < N; r++) hv_[r] = HZERO; \
		_Pragma("unroll 1") for (int u = u0; u < min(u0 + AH_RUN, (cnt)); u++) { \
			const hreal vd_ = AHL(V, ((j0) + u) * (vs) + (d)); \
			_Pragma("unroll") for (int r = 0; r < N; r++) hv_[r] = AHFMA(pr[r][u], vd_, hv_[r]); \
		} \
		_Pragma("unroll") for (int r = 0; r < N; r++) acc[r][c] += HTOF(hv_[r]); \
	}
#else
#define ATT_SCORE_ROWS(N, qv, kp, sr) \
	for (int d = 0; d < HD; d++) { \
		const float kd_ = LOAD(kp, d); \
		_Pragma("unroll") for (int r = 0; r < N; r++) sr[r] = fma(qv[r][d], kd_, sr[r]); \
	}
#define ATT_PV_ROWS(N, pr, V, vs, j0, cnt, d, acc, c) \
	for (int u = 0; u < (cnt); u++) { \
		const float vd_ = LOAD(V, ((j0) + u) * (vs) + (d)); \
		_Pragma("unroll") for (int r = 0; r < N; r++) acc[r][c] = fma(pr[r][u], vd_, acc[r][c]); \
	}
#endif
#define DPT ((HD + ATT_WG - 1) / ATT_WG) // head dims per work-item

// attn_wg: global (Sq*ATT_WG, H, B), local (ATT_WG, 1, 1).
__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1))) void
attn_wg(ATT_PARAMS) {
	const int i = get_group_id(0), h = get_global_id(1), b = get_global_id(2);
	const int t = get_local_id(0);
	ATT_SETUP(i, h, b)
#ifdef AH
	__local hreal qv[HD];
	for (int d = t; d < HD; d += ATT_WG) qv[d] = HCVT(LOAD(Q, d) * scale);
#else
	__local float qv[HD];
	for (int d = t; d < HD; d += ATT_WG) qv[d] = LOAD(Q, d) * scale;
#endif
	__local float sc[ATT_WG]; // this block's scores
	__local ptype pr[ATT_WG]; // and their probabilities
	barrier(CLK_LOCAL_MEM_FENCE);
	float acc[DPT];
	for (int c = 0; c < DPT; c++) acc[c] = 0.0f;
	float m = -INFINITY, l = 0.0f;
	for (int j0 = 0; j0 < jn; j0 += ATT_WG) {
		const int cnt = min(ATT_WG, jn - j0);
		float s = -INFINITY;
		if (t < cnt) {
			__global const store_t *kp = K + (j0 + t) * ks;
			s = 0.0f;
#ifdef AH
			for (int d0 = 0; d0 < HD; d0 += AH_RUN) {
				hreal hs = HZERO;
				for (int d = d0; d < min(d0 + AH_RUN, HD); d++) hs = AHFMA(qv[d], AHL(kp, d), hs);
				s += HTOF(hs);
			}
#else
			for (int d = 0; d < HD; d++) s = fma(qv[d], LOAD(kp, d), s);
#endif
			if (hasMask) {
				const float mv = LOAD(Mask, (j0 + t) * mk);
				s = mv <= MASKED_AT ? mv : s + mv;
			}
		}
		sc[t] = s;
		barrier(CLK_LOCAL_MEM_FENCE);
		float bm = -INFINITY;
		for (int u = 0; u < cnt; u++) bm = fmax(bm, sc[u]);
		const float mn = fmax(m, bm);
		// Every work-item computes the same mn, so this branch (and the
		// barriers it skips) is uniform across the group.
		if (mn == -INFINITY) {
			barrier(CLK_LOCAL_MEM_FENCE); // sc is rewritten next
			continue;
		}
		pr[t] = PCVT(s == -INFINITY ? 0.0f : AEXP(s - mn));
		barrier(CLK_LOCAL_MEM_FENCE);
		const float corr = AEXP(m - mn);
		l *= corr;
		for (int u = 0; u < cnt; u++) l += PTOF(pr[u]);
		for (int c = 0; c < DPT; c++) {
			const int d = t + c * ATT_WG;
			if (d >= HD) break;
			float a = acc[c] * corr;
#ifdef AH
			for (int u0 = 0; u0 < cnt; u0 += AH_RUN) {
				hreal hv = HZERO;
				for (int u = u0; u < min(u0 + AH_RUN, cnt); u++) hv = AHFMA(pr[u], AHL(V, (j0 + u) * vs + d), hv);
				a += HTOF(hv);
			}
#else
			for (int u = 0; u < cnt; u++) a = fma(pr[u], LOAD(V, (j0 + u) * vs + d), a);
#endif
			acc[c] = a;
		}
		m = mn;
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	if (hasLse && t == 0) Lse[offL + (b * H + h) * Sq + i] = l > 0.0f ? m + log(l) : -INFINITY;
	const float inv = l > 0.0f ? 1.0f / l : 0.0f;
	for (int c = 0; c < DPT; c++) {
		const int d = t + c * ATT_WG;
		if (d < HD) STORE(O, d, acc[c] * inv);
	}
}

#ifdef ATT_G
// Split-K (flash-decode) attention for one query row per head (decode) on
// long contexts, -DATT_G=<query heads per kv head>. attn_split runs a
// work-group per (split of the keys, kv head, batch): its ATT_G query
// heads share every K and V element it loads (each key's K row is read
// once for all of them, each V element once per key), and each key range
// of splitLen keys leaves, per query head, its running maximum m, sum l
// and unnormalised accumulator in Part ((b*H + h)*ns + s) * (HD + 2):
// m, l, acc[HD]. attn_combine then rescales the splits to their common
// maximum, writes O and the row's log-sum-exp. A split past the keys the
// row sees writes m = -inf, l = 0 and adds nothing.

// attn_split: global (ns*ATT_WG, Hkv, B), local (ATT_WG, 1, 1).
__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1))) void
attn_split(ATT_PARAMS, int splitLen, __global float *Part) {
	const int s = get_group_id(0), g = get_global_id(1), b = get_global_id(2);
	const int t = get_local_id(0), ns = get_num_groups(0);
	const int h0 = g * ATT_G;
	const int jn = causal ? clamp(past + 1, 0, Skv) : Skv;
	const int js = s * splitLen, je = min(js + splitLen, jn);
	K += offK + b * kb + g * kh;
	V += offV + b * vb + g * vh;
	__local AQT qv[ATT_G][HD];
	__local float sc[ATT_G][ATT_WG]; // this block's scores per query head
	__local ptype pr[ATT_G][ATT_WG]; // and their probabilities
	#pragma unroll
	for (int r = 0; r < ATT_G; r++)
		for (int d = t; d < HD; d += ATT_WG)
			qv[r][d] = AQCVT(LOAD(Q, offQ + b * qb + (h0 + r) * qh + d) * scale);
	barrier(CLK_LOCAL_MEM_FENCE);
	float acc[ATT_G][DPT], m[ATT_G], l[ATT_G];
	#pragma unroll
	for (int r = 0; r < ATT_G; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
		#pragma unroll
		for (int c = 0; c < DPT; c++) acc[r][c] = 0.0f;
	}
	for (int j0 = js; j0 < je; j0 += ATT_WG) {
		const int cnt = min(ATT_WG, je - j0);
		float sr[ATT_G];
		#pragma unroll
		for (int r = 0; r < ATT_G; r++) sr[r] = -INFINITY;
		if (t < cnt) {
			__global const store_t *kp = K + (j0 + t) * ks;
			#pragma unroll
			for (int r = 0; r < ATT_G; r++) sr[r] = 0.0f;
			ATT_SCORE_ROWS(ATT_G, qv, kp, sr);
			if (hasMask) {
				#pragma unroll
				for (int r = 0; r < ATT_G; r++) {
					const float mv = LOAD(Mask, offM + b * mb + (h0 + r) * mh + (j0 + t) * mk);
					sr[r] = mv <= MASKED_AT ? mv : sr[r] + mv;
				}
			}
		}
		#pragma unroll
		for (int r = 0; r < ATT_G; r++) sc[r][t] = sr[r];
		barrier(CLK_LOCAL_MEM_FENCE);
		// Every work-item computes the same block maxima (uniform).
		float corr[ATT_G];
		#pragma unroll
		for (int r = 0; r < ATT_G; r++) {
			float bm = -INFINITY;
			for (int u = 0; u < cnt; u++) bm = fmax(bm, sc[r][u]);
			const float mn = fmax(m[r], bm);
			corr[r] = mn == -INFINITY ? 1.0f : AEXP(m[r] - mn);
			pr[r][t] = PCVT(t < cnt && sc[r][t] != -INFINITY ? AEXP(sc[r][t] - mn) : 0.0f);
			m[r] = mn;
		}
		barrier(CLK_LOCAL_MEM_FENCE);
		#pragma unroll
		for (int r = 0; r < ATT_G; r++) {
			float lr = l[r] * corr[r];
			for (int u = 0; u < cnt; u++) lr += PTOF(pr[r][u]);
			l[r] = lr;
			#pragma unroll
			for (int c = 0; c < DPT; c++) acc[r][c] *= corr[r];
		}
		#pragma unroll
		for (int c = 0; c < DPT; c++) {
			const int d = t + c * ATT_WG;
			if (d < HD) {
				ATT_PV_ROWS(ATT_G, pr, V, vs, j0, cnt, d, acc, c);
			}
		}
		barrier(CLK_LOCAL_MEM_FENCE); // sc and pr are rewritten next
	}
	#pragma unroll
	for (int r = 0; r < ATT_G; r++) {
		__global float *part = Part + ((b * H + h0 + r) * ns + s) * (HD + 2);
		if (t == 0) {
			part[0] = m[r];
			part[1] = l[r];
		}
		#pragma unroll
		for (int c = 0; c < DPT; c++) {
			const int d = t + c * ATT_WG;
			if (d < HD) part[2 + d] = acc[r][c];
		}
	}
}

// attn_combine: global (ATT_WG, H, B), local (ATT_WG, 1, 1): query head h's
// ns partial results rescaled to their common maximum.
__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1))) void
attn_combine(__global const float *Part, int ns, __global store_t *O, int offO,
             int ob, int oh, __global float *Lse, int offL, int hasLse, int H) {
	const int h = get_global_id(1), b = get_global_id(2), t = get_local_id(0);
	__global const float *part = Part + (b * H + h) * ns * (HD + 2);
	float mx = -INFINITY;
	for (int s = 0; s < ns; s++) mx = fmax(mx, part[s * (HD + 2)]);
	float sum = 0.0f;
	if (mx != -INFINITY)
		for (int s = 0; s < ns; s++) {
			const float ms = part[s * (HD + 2)];
			// fma: one rounding whether or not the compiler contracts.
			if (ms != -INFINITY) sum = fma(part[s * (HD + 2) + 1], AEXP(ms - mx), sum);
		}
	const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
	O += offO + b * ob + h * oh;
	for (int d = t; d < HD; d += ATT_WG) {
		float a = 0.0f;
		if (mx != -INFINITY)
			for (int s = 0; s < ns; s++) {
				const float ms = part[s * (HD + 2)];
				if (ms != -INFINITY) a = fma(part[s * (HD + 2) + 2 + d], AEXP(ms - mx), a);
			}
		STORE(O, d, a * inv);
	}
	if (hasLse && t == 0) Lse[offL + b * H + h] = sum > 0.0f ? mx + log(sum) : -INFINITY;
}

// attn_qtile: the query-tiled GPU prefill, -DATT_G=<query heads per kv
// head, at most 4>. A work-group takes ATT_TQ consecutive query positions of all
// ATT_G query heads of one kv head (ATT_R = ATT_G * ATT_TQ rows) and walks
// the keys in blocks of ATT_WG: each key's K row is read once for all
// ATT_R rows and each V element once per key, where attn_wg reads them
// once per row. Row (r, i) sees keys j < past + i + 1 when causal; the
// block loop runs to the tile's last row's limit and scores past a row's
// limit are -inf. Global (ceil(Sq/ATT_TQ)*ATT_WG, Hkv, B), local
// (ATT_WG, 1, 1).
#define ATT_TQ (ATT_G >= 4 ? 1 : 4 / ATT_G)
#define ATT_R (ATT_G * ATT_TQ)
__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1))) void
attn_qtile(ATT_PARAMS) {
	const int i0 = get_group_id(0) * ATT_TQ, g = get_global_id(1), b = get_global_id(2);
	const int t = get_local_id(0);
	const int h0 = g * ATT_G;
	const int jlast = causal ? clamp(past + min(i0 + ATT_TQ, Sq), 0, Skv) : Skv;
	K += offK + b * kb + g * kh;
	V += offV + b * vb + g * vh;
	__local AQT qv[ATT_R][HD];
	__local float sc[ATT_R][ATT_WG];
	__local ptype pr[ATT_R][ATT_WG];
	#pragma unroll
	for (int r = 0; r < ATT_R; r++) {
		const int h = h0 + r / ATT_TQ, i = min(i0 + r % ATT_TQ, Sq - 1);
		for (int d = t; d < HD; d += ATT_WG)
			qv[r][d] = AQCVT(LOAD(Q, offQ + b * qb + h * qh + i * qs + d) * scale);
	}
	barrier(CLK_LOCAL_MEM_FENCE);
	float acc[ATT_R][DPT], m[ATT_R], l[ATT_R];
	#pragma unroll
	for (int r = 0; r < ATT_R; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
		#pragma unroll
		for (int c = 0; c < DPT; c++) acc[r][c] = 0.0f;
	}
	for (int j0 = 0; j0 < jlast; j0 += ATT_WG) {
		const int cnt = min(ATT_WG, jlast - j0), j = j0 + t;
		float sr[ATT_R];
		#pragma unroll
		for (int r = 0; r < ATT_R; r++) sr[r] = -INFINITY;
		if (t < cnt) {
			__global const store_t *kp = K + j * ks;
			#pragma unroll
			for (int r = 0; r < ATT_R; r++) sr[r] = 0.0f;
			ATT_SCORE_ROWS(ATT_R, qv, kp, sr);
			#pragma unroll
			for (int r = 0; r < ATT_R; r++) {
				const int h = h0 + r / ATT_TQ, i = min(i0 + r % ATT_TQ, Sq - 1);
				if (hasMask) {
					const float mv = LOAD(Mask, offM + b * mb + h * mh + i * mq + j * mk);
					sr[r] = mv <= MASKED_AT ? mv : sr[r] + mv;
				}
				if (causal && j > past + i) sr[r] = -INFINITY;
			}
		}
		#pragma unroll
		for (int r = 0; r < ATT_R; r++) sc[r][t] = sr[r];
		barrier(CLK_LOCAL_MEM_FENCE);
		float corr[ATT_R];
		#pragma unroll
		for (int r = 0; r < ATT_R; r++) {
			float bm = -INFINITY;
			for (int u = 0; u < cnt; u++) bm = fmax(bm, sc[r][u]);
			const float mn = fmax(m[r], bm);
			corr[r] = mn == -INFINITY ? 1.0f : AEXP(m[r] - mn);
			pr[r][t] = PCVT(t < cnt && sc[r][t] != -INFINITY ? AEXP(sc[r][t] - mn) : 0.0f);
			m[r] = mn;
		}
		barrier(CLK_LOCAL_MEM_FENCE);
		#pragma unroll
		for (int r = 0; r < ATT_R; r++) {
			float lr = l[r] * corr[r];
			for (int u = 0; u < cnt; u++) lr += PTOF(pr[r][u]);
			l[r] = lr;
			#pragma unroll
			for (int c = 0; c < DPT; c++) acc[r][c] *= corr[r];
		}
		#pragma unroll
		for (int c = 0; c < DPT; c++) {
			const int d = t + c * ATT_WG;
			if (d < HD) {
				ATT_PV_ROWS(ATT_R, pr, V, vs, j0, cnt, d, acc, c);
			}
		}
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	#pragma unroll
	for (int r = 0; r < ATT_R; r++) {
		const int h = h0 + r / ATT_TQ, i = i0 + r % ATT_TQ;
		if (i < Sq) {
			const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
			__global store_t *o = O + offO + b * ob + h * oh + i * os;
			#pragma unroll
			for (int c = 0; c < DPT; c++) {
				const int d = t + c * ATT_WG;
				if (d < HD) STORE(o, d, acc[r][c] * inv);
			}
			if (hasLse && t == 0) Lse[offL + (b * H + h) * Sq + i] = l[r] > 0.0f ? m[r] + log(l[r]) : -INFINITY;
		}
	}
}
#endif // ATT_G
#endif // ATT_GPU

// attn_colstats: global (Skv, H, B). For key j of query head h it sums,
// over the query rows i, the softmax probability attention gave the key,
// exp(score(i, j) - Lse[i]) with Lse the row's log-sum-exp that attention
// wrote, keeps the largest of those probabilities (Peak: how sharply any
// one row attended the key, which a sum over many rows that ignore it
// hides), and counts the rows that may attend it (visible under causal,
// mask above MASKED_AT and finite). Scores are recomputed (one dot product
// per row and key, as attention did); the row sums are not, which is what
// keeps this one pass over the keys.
__kernel void attn_colstats(
    __global const store_t *Q, int offQ, int qb, int qh, int qs,
    __global const store_t *K, int offK, int kb, int kh, int ks,
    __global const store_t *Mask, int offM, int mb, int mh, int mq, int mk,
    int hasMask, __global const float *Lse, int offL, __global float *Sum,
    int offS, __global float *Cnt, int offC, __global float *Peak, int offP,
    int H, int Hkv, int Sq, int Skv, int past, int causal, float scale) {
	const int j = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
	if (j >= Skv) return;
	const int g = h / (H / Hkv);
	__global const store_t *kp = K + offK + b * kb + g * kh + j * ks;
	vt kv[NV];
	for (int c = 0; c < NV; c++) kv[c] = VL(kp, c * VW);
	float sum = 0.0f, cnt = 0.0f, peak = 0.0f;
	for (int i = causal ? max(j - past, 0) : 0; i < Sq; i++) {
		__global const store_t *q = Q + offQ + b * qb + h * qh + i * qs;
		vt t = (vt)(0.0f);
		#pragma unroll
		for (int c = 0; c < NV; c++) t = fma(VL(q, c * VW), kv[c], t);
		float s = vsum(t) * scale;
		bool open = true;
		if (hasMask) {
			const float mv = LOAD(Mask, offM + b * mb + h * mh + i * mq + j * mk);
			if (mv <= MASKED_AT) {
				s = mv;
				open = false;
			} else {
				s += mv;
			}
		}
		if (open && s > -INFINITY) cnt += 1.0f;
		const float lse = Lse[offL + (b * H + h) * Sq + i];
		if (lse > -INFINITY && s > -INFINITY) {
			const float pr = exp(s - lse);
			sum += pr;
			peak = fmax(peak, pr);
		}
	}
	Sum[offS + (b * H + h) * Skv + j] = sum;
	Cnt[offC + (b * H + h) * Skv + j] = cnt;
	Peak[offP + (b * H + h) * Skv + j] = peak;
}

// attn_colstats_acc: global (ceil(Skv / per)) on CPUs (one work-item per
// per consecutive keys) or ceil(Skv / 64) * 64 with per = 1 on GPUs, batch
// 1. For key j it adds, to Sum[j], w times the softmax probability every
// query head and row gave the key (exp(score - Lse) as in attn_colstats,
// summed over heads and rows), raises Peak[j] to the largest of those
// probabilities (unweighted), and when addCnt, adds to Cnt[j] w times the
// number of head 0's rows that may attend it. One work-item owns a key
// across all heads, so the sums over heads need no atomics, and launches
// for the layers of a step add into the same buffers in queue order: the
// statistics of many steps stay on the device until they are read. On
// CPUs (per a multiple of RT) the keys go in tiles of RT, each row's RT
// scores exponentiated as one vector.
// The parameters of both forms of attn_colstats_acc (the launcher sets
// them once for either).
#define STATS_ACC_PARAMS                                                       \
	__global const store_t *Q, int offQ, int qh, int qs,                       \
	    __global const store_t *K, int offK, int kh, int ks,                   \
	    __global const store_t *Mask, int offM, int mh, int mq, int mk,        \
	    int hasMask, __global const float *Lse, int offL, __global float *Sum, \
	    int offS, __global float *Cnt, int offC, __global float *Peak,         \
	    int offP, int H, int Hkv, int Sq, int Skv, int past, int causal,       \
	    float scale, float w, int addCnt, int per
#ifdef ATT_GPU
__kernel void attn_colstats_acc(STATS_ACC_PARAMS) {
	const int j0 = get_global_id(0) * per;
	const int j1 = min(j0 + per, Skv);
	const int group = H / Hkv;
	for (int j = j0; j < j1; j++) {
		float sum = 0.0f, cnt = 0.0f, peak = 0.0f;
		const int i0 = causal ? max(j - past, 0) : 0;
		for (int g = 0; g < Hkv; g++) {
			// The key is read from global (cache) for every row, not held
			// in registers: a key of HD floats per lane, with a row's
			// vector, put the GPU form at 79-82 VGPRs on the register gate.
			__global const store_t *kp = K + offK + g * kh + j * ks;
			for (int h = g * group; h < (g + 1) * group; h++) {
				for (int i = i0; i < Sq; i++) {
					__global const store_t *q = Q + offQ + h * qh + i * qs;
					float t = 0.0f;
					#pragma unroll 4
					for (int d = 0; d < HD; d++) t = fma(LOAD(q, d), LOAD(kp, d), t);
					float s = t * scale;
					bool open = true;
					if (hasMask) {
						const float mv = LOAD(Mask, offM + h * mh + i * mq + j * mk);
						if (mv <= MASKED_AT) {
							s = mv;
							open = false;
						} else {
							s += mv;
						}
					}
					if (h == 0 && open && s > -INFINITY) cnt += 1.0f;
					const float lse = Lse[offL + h * Sq + i];
					if (lse > -INFINITY && s > -INFINITY) {
						const float pr = exp(s - lse);
						sum += pr;
						peak = fmax(peak, pr);
					}
				}
			}
		}
		Sum[offS + j] += w * sum;
		Peak[offP + j] = fmax(Peak[offP + j], peak);
		if (addCnt) Cnt[offC + j] += w * cnt;
	}
}
#else
__kernel void attn_colstats_acc(STATS_ACC_PARAMS) {
	const int j0 = get_global_id(0) * per;
	const int j1 = min(j0 + per, Skv);
	const int group = H / Hkv;
	for (int jt = j0; jt < j1; jt += RT) {
		float16 sum = (float16)(0.0f), peak = (float16)(0.0f);
		float cnt[RT];
		#pragma unroll
		for (int u = 0; u < RT; u++) cnt[u] = 0.0f;
		// The first row any key of the tile may attend.
		const int i0 = causal ? max(jt - past, 0) : 0;
		for (int h = 0; h < H; h++) {
			__global const store_t *kt = K + offK + (h / group) * kh;
			for (int i = i0; i < Sq; i++) {
				const float lse = Lse[offL + h * Sq + i];
				if (!(lse > -INFINITY)) continue; // the row attends nothing
				__global const store_t *qp = Q + offQ + h * qh + i * qs;
				vt q[NV];
				#pragma unroll
				for (int c = 0; c < NV; c++) q[c] = VL(qp, c * VW);
				float sc[RT];
				#pragma unroll
				for (int u = 0; u < RT; u++) {
					const int j = jt + u;
					// Keys past the tile's end read row j1-1 and are dropped.
					__global const store_t *kp = kt + min(j, j1 - 1) * ks;
					vt t = q[0] * VL(kp, 0);
					#pragma unroll
					for (int c = 1; c < NV; c++) t = fma(q[c], VL(kp, c * VW), t);
					float s = vsum(t) * scale;
					bool open = j < j1 && !(causal && j > past + i);
					if (open && hasMask) {
						const float mv = LOAD(Mask, offM + h * mh + i * mq + j * mk);
						if (mv <= MASKED_AT) {
							s = mv;
							open = false;
						} else {
							s += mv;
						}
					}
					if (open && h == 0 && s > -INFINITY) cnt[u] += 1.0f;
					// A masked key keeps its replacement score, as in
					// attention (exp of it underflows to 0 unless the row
					// sees nothing better); one out of the tile or of the
					// causal window gets 0.
					sc[u] = j < j1 && !(causal && j > past + i) ? s : -INFINITY;
				}
				const float16 pr = exp(vload16(0, sc) - lse);
				sum += pr;
				peak = fmax(peak, pr);
			}
		}
		float sv[RT], pv[RT];
		vstore16(sum, 0, sv);
		vstore16(peak, 0, pv);
		for (int u = 0; u < min(RT, j1 - jt); u++) {
			Sum[offS + jt + u] += w * sv[u];
			Peak[offP + jt + u] = fmax(Peak[offP + jt + u], pv[u]);
			if (addCnt) Cnt[offC + jt + u] += w * cnt[u];
		}
	}
}
#endif
