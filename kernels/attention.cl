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
// The head size is a build option (-DHD=...): it fixes the loop trip counts
// and the private accumulators' size. -DATT_GPU builds attn_wg, otherwise
// attn_row is built.
//
//   attn_row  one work-item per query row, q and the accumulator in float
//             vectors: the CPU variant (no local memory, no barriers).
//   attn_wg   a work-group of ATT_WG work-items per query row: keys are
//             scored ATT_WG at a time (one per work-item), and each
//             work-item accumulates a strided slice of the head dimensions,
//             so V is read coalesced. The GPU variant.

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

#define ATT_PARAMS                                                             \
	__global const store_t *Q, int offQ, int qb, int qh, int qs,               \
	    __global const store_t *K, int offK, int kb, int kh, int ks,           \
	    __global const store_t *V, int offV, int vb, int vh, int vs,           \
	    __global store_t *O, int offO, int ob, int oh, int os,                 \
	    __global const store_t *Mask, int offM, int mb, int mh, int mq,        \
	    int mk, int hasMask, int H, int Hkv, int Sq, int Skv, int past,        \
	    int causal, float scale

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
__kernel void attn_row(ATT_PARAMS) {
	const int i = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
	if (i >= Sq) return;
	ATT_SETUP(i, h, b)
	vt q[NV], acc[NV];
	for (int c = 0; c < NV; c++) {
		q[c] = VL(Q, c * VW) * scale;
		acc[c] = (vt)(0.0f);
	}
	float m = -INFINITY, l = 0.0f;
	for (int j = 0; j < jn; j++) {
		__global const store_t *kp = K + j * ks;
		vt t = q[0] * VL(kp, 0);
		for (int c = 1; c < NV; c++) t = fma(q[c], VL(kp, c * VW), t);
		float s = vsum(t);
		if (hasMask) s += LOAD(Mask, j * mk);
		if (s == -INFINITY) continue; // masked out: weight exactly 0
		if (s > m) {
			// New maximum: rescale what was accumulated under the old one
			// (exp(-inf) = 0 on the first key).
			const float corr = exp(m - s);
			l *= corr;
			for (int c = 0; c < NV; c++) acc[c] *= corr;
			m = s;
		}
		const float p = exp(s - m);
		l += p;
		__global const store_t *vp = V + j * vs;
		for (int c = 0; c < NV; c++) acc[c] = fma((vt)(p), VL(vp, c * VW), acc[c]);
	}
	const float inv = l > 0.0f ? 1.0f / l : 0.0f;
	for (int c = 0; c < NV; c++) {
		float t[VW];
		VSTORE(acc[c] * inv, t, 0);
		for (int e = 0; e < VW; e++) STORE(O, c * VW + e, t[e]);
	}
}

#endif // !ATT_GPU

#ifdef ATT_GPU
#define ATT_WG 64
#define DPT ((HD + ATT_WG - 1) / ATT_WG) // head dims per work-item

// attn_wg: global (Sq*ATT_WG, H, B), local (ATT_WG, 1, 1).
__kernel __attribute__((reqd_work_group_size(ATT_WG, 1, 1))) void
attn_wg(ATT_PARAMS) {
	const int i = get_group_id(0), h = get_global_id(1), b = get_global_id(2);
	const int t = get_local_id(0);
	ATT_SETUP(i, h, b)
	__local float qv[HD];
	__local float sc[ATT_WG]; // this block's scores
	__local float pr[ATT_WG]; // and their probabilities
	for (int d = t; d < HD; d += ATT_WG) qv[d] = LOAD(Q, d) * scale;
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
			for (int d = 0; d < HD; d++) s = fma(qv[d], LOAD(kp, d), s);
			if (hasMask) s += LOAD(Mask, (j0 + t) * mk);
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
		pr[t] = s == -INFINITY ? 0.0f : exp(s - mn);
		barrier(CLK_LOCAL_MEM_FENCE);
		const float corr = exp(m - mn);
		l *= corr;
		for (int u = 0; u < cnt; u++) l += pr[u];
		for (int c = 0; c < DPT; c++) {
			const int d = t + c * ATT_WG;
			if (d >= HD) break;
			float a = acc[c] * corr;
			for (int u = 0; u < cnt; u++) a = fma(pr[u], LOAD(V, (j0 + u) * vs + d), a);
			acc[c] = a;
		}
		m = mn;
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	const float inv = l > 0.0f ? 1.0f / l : 0.0f;
	for (int c = 0; c < DPT; c++) {
		const int d = t + c * ATT_WG;
		if (d < HD) STORE(O, d, acc[c] * inv);
	}
}
#endif // ATT_GPU
