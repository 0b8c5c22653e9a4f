// conv.cl: 2-D convolution over NCHW activations (storage per common.cl) with
// an [OC, C/G, KH, KW] weight and optional [OC] bias (both WLOAD).
//
// Two routes, chosen by the launcher:
//   conv_direct  one work-item per output element, any geometry. No scratch;
//                the route for depthwise and other small-reduction cases.
//   conv_im2col  gathers the receptive fields of `imgs` images into a
//                [G][Kc][P] or [G][P][Kc] matrix (Kc = C/G*KH*KW, P = OH*OW,
//                element (p, kc) at p*cp + kc*ck), zero where the window
//                reaches into padding; the product with the weight is then
//                a batched matmul.cl GEMM, so the convolution runs on
//                whichever GEMM kernel suits the device.

// CONV_RES_PARAMS is the residual a kernel's epilogue adds to conv + bias
// before the activation (a ResNet block's Add, a MobileNet block's skip):
// R holds a tensor of the output's shape and layout from offR, read only
// when hasR (else any buffer). It never overlaps Y (the launcher checks):
// strips shifted back over a neighbour's outputs read R there after the
// neighbour may have stored.
#define CONV_RES_PARAMS __global const store_t *R, int offR, int hasR

// conv_im2col: global (P, Kc, imgs*G) for K-major columns, (Kc, P, imgs*G)
// for pixel-major ones (ck == 1): dimension 0 runs along the columns'
// contiguous axis, so neighbouring work-items write neighbouring elements.
__kernel void conv_im2col(__global const store_t *X, int offX,
                          __global store_t *Col, int offCol, int n0, int C,
                          int H, int W, int OH, int OW, int KH, int KW, int sh,
                          int sw, int pt, int pl, int dh, int dw, int G, int cp,
                          int ck) {
	const int pixMajor = ck == 1;
	const int p = get_global_id(pixMajor ? 1 : 0), kc = get_global_id(pixMajor ? 0 : 1);
	const int z = get_global_id(2); // image-in-launch * G + g
	const int P = OH * OW, Cg = C / G, Kc = Cg * KH * KW;
	if (p >= P || kc >= Kc) return;
	const int kw = kc % KW, kh = (kc / KW) % KH, ic = kc / (KW * KH);
	const int oh = p / OW, ow = p % OW;
	const int ih = oh * sh - pt + kh * dh, iw = ow * sw - pl + kw * dw;
	const int n = n0 + z / G, g = z % G;
	float v = 0.0f;
	if (ih >= 0 && ih < H && iw >= 0 && iw < W)
		v = LOAD(X, offX + ((n * C + g * Cg + ic) * H + ih) * W + iw);
	STORE(Col, offCol + z * P * Kc + p * cp + kc * ck, v);
}

// ---------------------------------------------------------------------------
// conv_tile: the implicit-GEMM convolution. The product is the im2col one,
// C[oc, pixel] = sum over k = (ic, kh, kw) of W[oc, k] * X[ic, ih, iw], but
// the B operand is read from the activation itself: for a fixed k, CONV_PX
// consecutive output pixels of one output row read the input row ih at
// iw, iw + sw, ..., one vector load (two and an even-lane pick at stride 2)
// with no gather buffer in between. A work-item keeps RB output channels x
// CONV_PX pixels of accumulators in registers (the register tile of
// matmul.cl's mm_axpy/mm_reg: per k one B vector and RB broadcast weights
// feed RB vector FMAs). global (OH * ceil(OW / CONV_PX), ceil(OC/G / RB),
// N*G). CONV_PX is the launcher's choice per device: 16 (one AVX-512
// register) on CPUs, 4 on GPUs, where a work-item's registers are scarce
// and neighbouring work-items' strips make the loads coalesce.
//
// The last strip of a row is shifted left to end at OW (its lanes before
// ow1 repeat the previous strip's outputs and are not stored), so only the
// strips touching the padding take the per-lane path, and then only for
// the kw whose window leaves the row. Rows outside the input contribute
// nothing and are skipped.
//
// Epilogue: + bias, then the activation act (conv_act), so a Conv followed
// by its activation writes its output once.
#ifndef CONV_PX
#define CONV_PX 16
#endif
#if CONV_PX == 16
typedef float16 cvec;
#define CV_LOADF(p) vload16(0, (p))
#define CV_STOREF(v, p) vstore16((v), 0, (p))
#define CV_LOADH(p)                                                            \
	((float16)(vload_half4(0, (p)), vload_half4(0, (p) + 4),                   \
	           vload_half4(0, (p) + 8), vload_half4(0, (p) + 12)))
#elif CONV_PX == 8
typedef float8 cvec;
#define CV_LOADF(p) vload8(0, (p))
#define CV_STOREF(v, p) vstore8((v), 0, (p))
#define CV_LOADH(p) ((float8)(vload_half4(0, (p)), vload_half4(0, (p) + 4)))
#elif CONV_PX == 4
typedef float4 cvec;
#define CV_LOADF(p) vload4(0, (p))
#define CV_STOREF(v, p) vstore4((v), 0, (p))
#define CV_LOADH(p) vload_half4(0, (p))
#else
#error "CONV_PX must be 4, 8 or 16"
#endif
#ifdef STORAGE_F16
#define CV_LOAD(p) CV_LOADH(p)
#else
#define CV_LOAD(p) CV_LOADF(p)
#endif

// CV_LANES(M, v) expands M(l, lane l of v) for every lane; CV_BUILD(F) is
// the vector of F(0), F(1), ...: per-lane work on registers, where a
// private array with vload/vstore would put the vector in scratch memory
// on a GPU.
#if CONV_PX == 16
#define CV_LANES(M, v) M(0, (v).s0) M(1, (v).s1) M(2, (v).s2) M(3, (v).s3) M(4, (v).s4) M(5, (v).s5) M(6, (v).s6) M(7, (v).s7) M(8, (v).s8) M(9, (v).s9) M(10, (v).sa) M(11, (v).sb) M(12, (v).sc) M(13, (v).sd) M(14, (v).se) M(15, (v).sf)
#define CV_BUILD(F) ((cvec)(F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7), F(8), F(9), F(10), F(11), F(12), F(13), F(14), F(15)))
#elif CONV_PX == 8
#define CV_LANES(M, v) M(0, (v).s0) M(1, (v).s1) M(2, (v).s2) M(3, (v).s3) M(4, (v).s4) M(5, (v).s5) M(6, (v).s6) M(7, (v).s7)
#define CV_BUILD(F) ((cvec)(F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7)))
#else
#define CV_LANES(M, v) M(0, (v).s0) M(1, (v).s1) M(2, (v).s2) M(3, (v).s3)
#define CV_BUILD(F) ((cvec)(F(0), F(1), F(2), F(3)))
#endif

// CONV_RBMAX bounds the output channels per work-item: 8 with 8- and
// 16-lane strips (CPUs), 4 with 4-lane ones (GPUs: arrays sized for 8
// stayed in scratch memory there).
#if CONV_PX >= 8
#define CONV_RBMAX 8
#else
#define CONV_RBMAX 4
#endif

// Activation codes, kernels.ConvAct in conv.go.
#define CONV_ACT_NONE 0
#define CONV_ACT_RELU 1
#define CONV_ACT_CLIP 2
#define CONV_ACT_HARDSWISH 3
#define CONV_ACT_HARDSIGMOID 4
#define CONV_ACT_SILU 5
#define CONV_ACT_LEAKYRELU 6

// CONV_ACT_FN(name, T) defines name(v, act, a, b), activation act with
// parameters a and b (Clip's bounds; HardSigmoid's alpha and beta;
// LeakyRelu's alpha in a) on a value of type T (a vector or a float).
#define CONV_ACT_FN(name, T)                                                   \
	static inline T name(T v, int act, float a, float b) {                     \
		switch (act) {                                                         \
		case CONV_ACT_RELU:                                                    \
			return fmax(v, (T)(0.0f));                                         \
		case CONV_ACT_CLIP:                                                    \
			return fmin(fmax(v, (T)(a)), (T)(b));                              \
		case CONV_ACT_HARDSWISH:                                               \
			return v * clamp(v * (1.0f / 6.0f) + 0.5f, 0.0f, 1.0f);            \
		case CONV_ACT_HARDSIGMOID:                                             \
			return clamp(v * a + b, 0.0f, 1.0f);                               \
		case CONV_ACT_SILU:                                                    \
			return v / (1.0f + exp(-v));                                       \
		case CONV_ACT_LEAKYRELU:                                               \
			return select(v * a, v, v >= (T)(0.0f));                           \
		default:                                                               \
			return v;                                                          \
		}                                                                      \
	}

// conv_act is the activation on a strip.
CONV_ACT_FN(conv_act, cvec)
// conv_act1 is the activation on one value.
CONV_ACT_FN(conv_act1, float)

// conv_direct: one work-item per output element, any geometry; the
// epilogue adds the bias and the residual R (hasR) and applies act.
__kernel void conv_direct(__global const store_t *X, int offX,
                          __global const wstore_t *Wt, int offW,
                          __global const wstore_t *Bias, int offB, int hasBias,
                          __global store_t *Y, int offY, int C, int H, int W,
                          int OC, int OH, int OW, int KH, int KW, int sh,
                          int sw, int pt, int pl, int dh, int dw, int G,
                          int act, float actA, float actB, CONV_RES_PARAMS) {
	const int ow = get_global_id(0), oh = get_global_id(1);
	const int z = get_global_id(2); // n*OC + oc
	if (ow >= OW || oh >= OH) return;
	const int oc = z % OC, n = z / OC;
	const int Cg = C / G, g = oc / (OC / G);
	__global const store_t *xp = X + offX + (n * C + g * Cg) * H * W;
	__global const wstore_t *wp = Wt + offW + oc * Cg * KH * KW;
	const int ih0 = oh * sh - pt, iw0 = ow * sw - pl;
	float acc = 0.0f;
	for (int ic = 0; ic < Cg; ic++) {
		for (int kh = 0; kh < KH; kh++) {
			const int ih = ih0 + kh * dh;
			if (ih < 0 || ih >= H) continue;
			__global const store_t *row = xp + (ic * H + ih) * W;
			__global const wstore_t *wrow = wp + (ic * KH + kh) * KW;
			for (int kw = 0; kw < KW; kw++) {
				const int iw = iw0 + kw * dw;
				if (iw >= 0 && iw < W)
					acc = fma(LOAD(row, iw), WLOAD(wrow, kw), acc);
			}
		}
	}
	if (hasBias) acc += WLOAD(Bias, offB + oc);
	const int o = (z * OH + oh) * OW + ow;
	if (hasR) acc += LOAD(R, offR + o);
	STORE(Y, offY + o, conv_act1(acc, act, actA, actB));
}


// conv_row_gather returns lanes iw, iw + sw, ... of an input row of W
// elements, zero outside it: the window of a strip at the padding, and any
// stride other than 1 and 2.
static inline cvec conv_row_gather(__global const store_t *row, int iw, int sw, int W) {
#define CONV_GATHER_LANE(l) ((iw + (l)*sw >= 0 && iw + (l)*sw < W) ? LOAD(row, iw + (l)*sw) : 0.0f)
	return CV_BUILD(CONV_GATHER_LANE);
#undef CONV_GATHER_LANE
}

// conv_even is the even lanes of a followed by those of b: a strip at
// stride 2 from two contiguous loads.
static inline cvec conv_even(cvec a, cvec b) { return (cvec)(a.even, b.even); }

static inline cvec conv_row_load(__global const store_t *row, int iw, int sw, int W) {
	if (sw == 1 && iw >= 0 && iw + CONV_PX <= W) return CV_LOAD(row + iw);
	if (sw == 2 && iw >= 0 && iw + 2 * CONV_PX <= W)
		return conv_even(CV_LOAD(row + iw), CV_LOAD(row + iw + CONV_PX));
	return conv_row_gather(row, iw, sw, W);
}

// conv_get is lanes ow0 .. ow0+CONV_PX-1 of a row of OW elements, zero
// past its end: the residual under an output strip.
static inline cvec conv_get(__global const store_t *row, int ow0, int OW) {
	if (ow0 + CONV_PX <= OW) return CV_LOAD(row + ow0);
	return conv_row_gather(row, ow0, 1, OW);
}

// conv_res: Y = act(Y + R) (R when hasR) in place over n elements, one per
// work-item: the epilogue of the GEMM routes (gemm1x1, im2col), whose
// product ends at the bias. global (n).
__kernel void conv_res(__global store_t *Y, int offY, CONV_RES_PARAMS, int n,
                       int act, float actA, float actB) {
	const int i = get_global_id(0);
	if (i >= n) return;
	float v = LOAD(Y, offY + i);
	if (hasR) v += LOAD(R, offR + i);
	STORE(Y, offY + i, conv_act1(v, act, actA, actB));
}

// conv_put stores lanes ow >= ow1 (and < OW) of a strip starting at ow0 in
// output row yrow.
static inline void conv_put(__global store_t *yrow, int ow0, int ow1, int OW, cvec v) {
#ifndef STORAGE_F16
	if (ow0 == ow1 && ow0 + CONV_PX <= OW) {
		CV_STOREF(v, yrow + ow0);
		return;
	}
#endif
#define CONV_PUT_LANE(l, x)                                                    \
	if (ow0 + (l) >= ow1 && ow0 + (l) < OW) STORE(yrow, ow0 + (l), (x));
	CV_LANES(CONV_PUT_LANE, v)
#undef CONV_PUT_LANE
}

// conv_acc adds weight k of each of RB rows (offsets wo) times xv to acc.
// A function rather than a loop in conv_tile's loop macro, whose _Pragma
// unroll left the accumulators in scratch memory on a GPU.
__attribute__((always_inline)) static inline void
conv_acc(const int RB, cvec *acc, cvec xv, __global const wstore_t *Wt,
         const int *wo, int k) {
	#pragma unroll
	for (int r = 0; r < RB; r++) acc[r] = fma((cvec)(WLOAD(Wt, wo[r] + k)), xv, acc[r]);
}

#define CONV_TILE_PARAMS                                                       \
	__global const store_t *X, int offX, __global const wstore_t *Wt,          \
	    int offW, __global const wstore_t *Bias, int offB, int hasBias,        \
	    __global store_t *Y, int offY, int C, int H, int W, int OC, int OH,    \
	    int OW, int KH, int KW, int sh, int sw, int pt, int pl, int dh,        \
	    int dw, int G, int act, float actA, float actB, CONV_RES_PARAMS,       \
	    __global const store_t *Sc, int offSc, int hasSc
#define CONV_TILE_ARGS                                                         \
	X, offX, Wt, offW, Bias, offB, hasBias, Y, offY, C, H, W, OC, OH, OW, KH,  \
	    KW, sh, sw, pt, pl, dh, dw, G, act, actA, actB, R, offR, hasR, Sc,     \
	    offSc, hasSc

__attribute__((always_inline)) static inline void conv_tile(const int RB,
                                                            CONV_TILE_PARAMS) {
	const int strips = (OW + CONV_PX - 1) / CONV_PX;
	const int t = get_global_id(0);
	const int oh = t / strips;
	if (oh >= OH) return;
	const int ow1 = (t - oh * strips) * CONV_PX;
	const int ow0 = OW >= CONV_PX ? min(ow1, OW - CONV_PX) : 0;
	const int Cg = C / G, OCg = OC / G;
	const int ocb = get_global_id(1) * RB;
	if (ocb >= OCg) return;
	const int z = get_global_id(2), n = z / G, g = z - n * G;
	const int Kc = Cg * KH * KW;
	__global const store_t *xp = X + offX + (n * C + g * Cg) * H * W;
	int wo[CONV_RBMAX];
	#pragma unroll
	for (int r = 0; r < RB; r++) wo[r] = offW + (g * OCg + min(ocb + r, OCg - 1)) * Kc;
	cvec acc[CONV_RBMAX];
	#pragma unroll
	for (int r = 0; r < RB; r++) acc[r] = (cvec)(0.0f);
	const int ih0 = oh * sh - pt, iw0 = ow0 * sw - pl;
	// Whether every kw's window of the strip lies inside the row, decided
	// once: the loop nests below then carry no per-load branch.
	const int last = iw0 + (KW - 1) * dw;
	const bool inside1 = sw == 1 && iw0 >= 0 && last + CONV_PX <= W;
	const bool inside2 = sw == 2 && iw0 >= 0 && last + 2 * CONV_PX <= W;
#define CONV_TILE_LOOP(XLOAD)                                                  \
	for (int ic = 0; ic < Cg; ic++) {                                          \
		for (int kh = 0; kh < KH; kh++) {                                      \
			const int ih = ih0 + kh * dh;                                      \
			if (ih < 0 || ih >= H) continue;                                   \
			__global const store_t *row = xp + (ic * H + ih) * W;              \
			const int kb = (ic * KH + kh) * KW;                                \
			for (int kw = 0; kw < KW; kw++) {                                  \
				const int iw = iw0 + kw * dw;                                  \
				conv_acc(RB, acc, XLOAD, Wt, wo, kb + kw);                     \
			}                                                                  \
		}                                                                      \
	}
	// Sc (hasSc): a factor per input channel of this image, applied to x as
	// it is read (squeeze-excite's Mul folded into the convolution).
	__global const store_t *sp = Sc + offSc + n * C + g * Cg;
	if (hasSc) {
		CONV_TILE_LOOP(conv_row_load(row, iw, sw, W) * LOAD(sp, ic))
	} else if (inside1) {
		CONV_TILE_LOOP(CV_LOAD(row + iw))
	} else if (inside2) {
		CONV_TILE_LOOP(conv_even(CV_LOAD(row + iw), CV_LOAD(row + iw + CONV_PX)))
	} else {
		CONV_TILE_LOOP(conv_row_load(row, iw, sw, W))
	}
#undef CONV_TILE_LOOP
	#pragma unroll
	for (int r = 0; r < RB; r++) {
		const int oc = g * OCg + ocb + r;
		if (ocb + r < OCg) {
			cvec v = acc[r];
			if (hasBias) v += (cvec)(WLOAD(Bias, offB + oc));
			const int o = ((n * OC + oc) * OH + oh) * OW;
			if (hasR) v += conv_get(R + offR + o, ow0, OW);
			v = conv_act(v, act, actA, actB);
			conv_put(Y + offY + o, ow0, ow1, OW, v);
		}
	}
}

#if CONV_RBMAX == 8
__kernel void conv_tile_8(CONV_TILE_PARAMS) { conv_tile(8, CONV_TILE_ARGS); }
#endif
__kernel void conv_tile_4(CONV_TILE_PARAMS) { conv_tile(4, CONV_TILE_ARGS); }
__kernel void conv_tile_1(CONV_TILE_PARAMS) { conv_tile(1, CONV_TILE_ARGS); }

// conv_dw: depthwise convolution (C == OC == G). A work-item computes
// blocks of CONV_DW_ROWS (4 with 8- and 16-lane strips, 2 on GPUs) output rows x CONV_PX pixels of one channel: per
// block it walks the input rows the block's windows cover once, and each
// vector it loads from a row feeds every output row whose window contains
// that row (up to KH of them at stride 1), where one row per work-item
// would load it KH times. A work-item takes nblk blocks one after the
// other (the launcher's choice: on a CPU all of a plane's, since a work-
// group costs more than a block's arithmetic; on a GPU one, for
// parallelism). global (ceil(OH / (CONV_DW_ROWS*nblk)) *
// ceil(OW / CONV_PX), 1, N*C).
#if CONV_PX >= 8
#define CONV_DW_ROWS 4
#else
#define CONV_DW_ROWS 2 // GPU: four rows took 70 VGPRs of the gate's 64
#endif
// conv_dw_wrow is the offset of the weight row with which output row oh
// reads input row ih (wo: the channel's first weight), or -1 when oh is
// not in the block (!live) or its window misses ih. Dilation 1 needs no
// division (one per row and output row cost more than the row's
// multiply-adds).
static inline int conv_dw_wrow(int ih, int oh, bool live, int sh, int pt, int dh, int KH, int KW, int wo) {
	const int d = ih - (oh * sh - pt);
	int kh = d;
	if (dh != 1) kh = d % dh == 0 ? d / dh : -1;
	return (live && d >= 0 && kh >= 0 && kh < KH) ? wo + kh * KW : -1;
}

__kernel void conv_dw(CONV_TILE_PARAMS, int nblk) {
	const int strips = (OW + CONV_PX - 1) / CONV_PX;
	const int t = get_global_id(0);
	const int blk0 = (t / strips) * nblk;
	if (blk0 * CONV_DW_ROWS >= OH) return;
	const int ow1 = (t % strips) * CONV_PX;
	const int ow0 = OW >= CONV_PX ? min(ow1, OW - CONV_PX) : 0;
	const int z = get_global_id(2), c = z % C;
	__global const store_t *xp = X + offX + z * H * W;
	const int wo = offW + c * KH * KW;
	const int iw0 = ow0 * sw - pl, last = iw0 + (KW - 1) * dw;
	const bool inside1 = sw == 1 && iw0 >= 0 && last + CONV_PX <= W;
	const bool inside2 = sw == 2 && iw0 >= 0 && last + 2 * CONV_PX <= W;
	const float b = hasBias ? WLOAD(Bias, offB + c) : 0.0f;
	for (int oh0 = blk0 * CONV_DW_ROWS; oh0 < min(OH, (blk0 + nblk) * CONV_DW_ROWS); oh0 += CONV_DW_ROWS) {
		cvec acc[CONV_DW_ROWS];
		#pragma unroll
		for (int r = 0; r < CONV_DW_ROWS; r++) acc[r] = (cvec)(0.0f);
		// Input rows from the first window's top to the last one's bottom.
		const int nrows = min(CONV_DW_ROWS, OH - oh0);
		const int ihA = max(oh0 * sh - pt, 0);
		const int ihB = min((oh0 + nrows - 1) * sh - pt + (KH - 1) * dh, H - 1);
		for (int ih = ihA; ih <= ihB; ih++) {
			__global const store_t *row = xp + ih * W;
			int kb[CONV_DW_ROWS];
			#pragma unroll
			for (int r = 0; r < CONV_DW_ROWS; r++) kb[r] = conv_dw_wrow(ih, oh0 + r, r < nrows, sh, pt, dh, KH, KW, wo);
			for (int kw = 0; kw < KW; kw++) {
				const int iw = iw0 + kw * dw;
				cvec xv;
				if (inside1)
					xv = CV_LOAD(row + iw);
				else if (inside2)
					xv = conv_even(CV_LOAD(row + iw), CV_LOAD(row + iw + CONV_PX));
				else
					xv = conv_row_load(row, iw, sw, W);
				#pragma unroll
				for (int r = 0; r < CONV_DW_ROWS; r++)
					if (kb[r] >= 0) acc[r] = fma((cvec)(WLOAD(Wt, kb[r] + kw)), xv, acc[r]);
			}
		}
		#pragma unroll
		for (int r = 0; r < CONV_DW_ROWS; r++) {
			if (r >= nrows) continue;
			const int o = (z * OH + oh0 + r) * OW;
			cvec v = acc[r] + b;
			if (hasR) v += conv_get(R + offR + o, ow0, OW);
			conv_put(Y + offY + o, ow0, ow1, OW, conv_act(v, act, actA, actB));
		}
	}
}

// conv_pw: a 1x1 convolution with stride 1 and no padding (the pointwise
// layers of MobileNet and EfficientNet), on a CPU: per image and group,
// Y[oc, p] = sum over c of W[oc, c] * X[c, p], each plane one row of P =
// H*W pixels. A work-item keeps RB output channels x VB vectors of
// CONV_PX pixels of accumulators (a strip of VB*CONV_PX pixels); per input
// channel VB vector loads of X and RB broadcast weight loads from one
// pointer at fixed offsets (r * Cg), which compile to plain base + index
// addresses: conv_tile's per-row offset array was turned into vector index
// arithmetic, extracted lane by lane before each load. VB = 2 halves the
// weight loads per multiply-add of VB = 1 (RB + VB loads feed RB*VB FMAs).
// The last strip of a plane and the last block of channels are shifted
// back to end at P and OCg (lanes and rows already computed by a neighbour
// are not stored again), so every row a work-item reads exists and no
// lane needs a bounds test; a plane narrower than a strip (the
// squeeze-excite layers' 1x1 maps) is read lane by lane. global
// (ceil(P / (VB*CONV_PX)), ceil(OCg / RB), N*G); the launcher takes RB <=
// OCg.
// CONV_PW_ACC bounds a work-item's accumulators: 8 rows x 1 vector or 6 x
// 2 on CPUs (12 of AVX2's 16 registers), 4 x 1 on GPUs.
#if CONV_RBMAX == 8
#define CONV_PW_ACC 12
#else
#define CONV_PW_ACC 4
#endif
__attribute__((always_inline)) static inline void
conv_pw(const int RB, const int VB, __global const store_t *X, int offX,
        __global const wstore_t *Wt, int offW, __global const wstore_t *Bias,
        int offB, int hasBias, __global store_t *Y, int offY, int C, int P,
        int OC, int G, int act, float actA, float actB, CONV_RES_PARAMS,
        __global const store_t *Sc, int offSc, int hasSc) {
	const int S = VB * CONV_PX;
	const int p1 = get_global_id(0) * S;
	if (p1 >= P) return;
	const int p0 = P >= S ? min(p1, P - S) : 0;
	const int Cg = C / G, OCg = OC / G;
	const int ocb1 = get_global_id(1) * RB;
	if (ocb1 >= OCg) return;
	const int ocb = min(ocb1, OCg - RB);
	const int z = get_global_id(2), n = z / G, g = z - n * G;
	__global const store_t *xp = X + offX + (n * C + g * Cg) * P + p0;
	__global const wstore_t *wp = Wt + offW + (g * OCg + ocb) * Cg;
	// Sc (hasSc): a factor per input channel of this image, applied to the
	// input vectors as they are loaded (squeeze-excite's Mul).
	__global const store_t *sp = Sc + offSc + n * C + g * Cg;
	cvec acc[CONV_PW_ACC];
	#pragma unroll
	for (int i = 0; i < RB * VB; i++) acc[i] = (cvec)(0.0f);
	if (P >= S && hasSc) {
		for (int k = 0; k < Cg; k++) {
			const float sk = LOAD(sp, k);
			cvec xv[2];
			#pragma unroll
			for (int v = 0; v < VB; v++) xv[v] = CV_LOAD(xp + k * P + v * CONV_PX) * sk;
			#pragma unroll
			for (int r = 0; r < RB; r++) {
				const cvec w = (cvec)(WLOAD(wp, r * Cg + k));
				#pragma unroll
				for (int v = 0; v < VB; v++) acc[r * VB + v] = fma(w, xv[v], acc[r * VB + v]);
			}
		}
	} else if (P >= S) {
		for (int k = 0; k < Cg; k++) {
			cvec xv[2];
			#pragma unroll
			for (int v = 0; v < VB; v++) xv[v] = CV_LOAD(xp + k * P + v * CONV_PX);
			#pragma unroll
			for (int r = 0; r < RB; r++) {
				const cvec w = (cvec)(WLOAD(wp, r * Cg + k));
				#pragma unroll
				for (int v = 0; v < VB; v++) acc[r * VB + v] = fma(w, xv[v], acc[r * VB + v]);
			}
		}
	} else {
		for (int k = 0; k < Cg; k++) {
			cvec xv[2];
			#pragma unroll
			for (int v = 0; v < VB; v++) xv[v] = conv_row_gather(xp + k * P, v * CONV_PX, 1, P) * (hasSc ? LOAD(sp, k) : 1.0f);
			#pragma unroll
			for (int r = 0; r < RB; r++) {
				const cvec w = (cvec)(WLOAD(wp, r * Cg + k));
				#pragma unroll
				for (int v = 0; v < VB; v++) acc[r * VB + v] = fma(w, xv[v], acc[r * VB + v]);
			}
		}
	}
	#pragma unroll
	for (int r = 0; r < RB; r++) {
		if (ocb + r < ocb1) continue;
		const int oc = g * OCg + ocb + r;
		const float b = hasBias ? WLOAD(Bias, offB + oc) : 0.0f;
		#pragma unroll
		for (int v = 0; v < VB; v++) {
			const int q0 = p0 + v * CONV_PX, o = (n * OC + oc) * P;
			cvec y = acc[r * VB + v] + b;
			if (hasR) y += conv_get(R + offR + o, q0, P);
			y = conv_act(y, act, actA, actB);
			conv_put(Y + offY + o, q0, max(p1, q0), P, y);
		}
	}
}

#define CONV_PW_PARAMS                                                         \
	__global const store_t *X, int offX, __global const wstore_t *Wt,          \
	    int offW, __global const wstore_t *Bias, int offB, int hasBias,        \
	    __global store_t *Y, int offY, int C, int P, int OC, int G, int act,   \
	    float actA, float actB, CONV_RES_PARAMS, __global const store_t *Sc,   \
	    int offSc, int hasSc
#define CONV_PW_ARGS                                                           \
	X, offX, Wt, offW, Bias, offB, hasBias, Y, offY, C, P, OC, G, act, actA,  \
	    actB, R, offR, hasR, Sc, offSc, hasSc
#if CONV_RBMAX == 8
__kernel void conv_pw_8(CONV_PW_PARAMS) { conv_pw(8, 1, CONV_PW_ARGS); }
__kernel void conv_pw2_6(CONV_PW_PARAMS) { conv_pw(6, 2, CONV_PW_ARGS); }
__kernel void conv_pw2_4(CONV_PW_PARAMS) { conv_pw(4, 2, CONV_PW_ARGS); }
#endif
__kernel void conv_pw_4(CONV_PW_PARAMS) { conv_pw(4, 1, CONV_PW_ARGS); }
__kernel void conv_pw_1(CONV_PW_PARAMS) { conv_pw(1, 1, CONV_PW_ARGS); }

// conv_pwdot: a 1x1 convolution over 1x1 maps (P = 1: squeeze-excite's
// two fully connected layers), where conv_pw's strips would use one lane
// of CONV_PX and read that lane by lane. Each output is a dot product of
// a weight row with the image's Cg inputs, both contiguous: a work-item
// computes 4 output channels in CONV_PX-lane vectors along c (one input
// load and 4 weight loads per 4 FMAs), reduced once at the end, then bias
// and activation. The last block of channels is shifted back to end at
// OCg (clamped where OCg < 4). global (ceil(OCg / 4), N*G).
#ifdef WEIGHT_F16
#define CV_WLOAD(p) CV_LOADH(p)
#else
#define CV_WLOAD(p) CV_LOADF(p)
#endif
static inline float cv_hsum(cvec v) {
#if CONV_PX == 16
	const float8 a = v.lo + v.hi;
	const float4 b = a.lo + a.hi;
#elif CONV_PX == 8
	const float4 b = v.lo + v.hi;
#else
	const float4 b = v;
#endif
	return (b.x + b.y) + (b.z + b.w);
}
__kernel void conv_pwdot(__global const store_t *X, int offX, __global const wstore_t *Wt,
                         int offW, __global const wstore_t *Bias, int offB, int hasBias,
                         __global store_t *Y, int offY, int C, int OC, int G, int act,
                         float actA, float actB, CONV_RES_PARAMS,
                         __global const store_t *Sc, int offSc, int hasSc) {
	const int Cg = C / G, OCg = OC / G;
	const int ocb1 = get_global_id(0) * 4;
	if (ocb1 >= OCg) return;
	const int ocb = max(0, min(ocb1, OCg - 4));
	const int z = get_global_id(1), n = z / G, g = z - n * G;
	__global const store_t *xp = X + offX + n * C + g * Cg;
	__global const wstore_t *wr[4];
	#pragma unroll
	for (int r = 0; r < 4; r++) wr[r] = Wt + offW + (g * OCg + min(ocb + r, OCg - 1)) * Cg;
	cvec acc[4];
	#pragma unroll
	for (int r = 0; r < 4; r++) acc[r] = (cvec)(0.0f);
	int k = 0;
	// Sc (hasSc) scales the inputs, [N, C] as the 1x1 input itself.
	__global const store_t *sp = Sc + offSc + n * C + g * Cg;
	for (; k + CONV_PX <= Cg; k += CONV_PX) {
		cvec xv = CV_LOAD(xp + k);
		if (hasSc) xv *= CV_LOAD(sp + k);
		#pragma unroll
		for (int r = 0; r < 4; r++) acc[r] = fma(CV_WLOAD(wr[r] + k), xv, acc[r]);
	}
	float sum[4];
	#pragma unroll
	for (int r = 0; r < 4; r++) sum[r] = cv_hsum(acc[r]);
	for (; k < Cg; k++) {
		const float xv = LOAD(xp, k) * (hasSc ? LOAD(sp, k) : 1.0f);
		#pragma unroll
		for (int r = 0; r < 4; r++) sum[r] = fma(WLOAD(wr[r], k), xv, sum[r]);
	}
	#pragma unroll
	for (int r = 0; r < 4; r++) {
		const int oc = ocb + r;
		if (oc < ocb1 || oc >= OCg) continue;
		float v = sum[r];
		if (hasBias) v += WLOAD(Bias, offB + g * OCg + oc);
		const int o = n * OC + g * OCg + oc;
		if (hasR) v += LOAD(R, offR + o);
		STORE(Y, offY + o, conv_act1(v, act, actA, actB));
	}
}

// cv_shift is lanes s .. s+CONV_PX-1 of the concatenation v, t (s from 0
// to 4, a constant once conv_dw_reg's kw loop is unrolled): a row window
// moved by s input columns, from registers, with swizzles only.
static inline cvec cv_shift(cvec v, cvec t, const int s) {
#if CONV_PX == 16
	switch (s) {
	case 1: return (cvec)(v.s12345678, v.s9abc, v.sdef, t.s0);
	case 2: return (cvec)(v.s23456789, v.sabcd, v.sef, t.s01);
	case 3: return (cvec)(v.s3456789a, v.sbcde, v.sf, t.s012);
	case 4: return (cvec)(v.s456789ab, v.scdef, t.s0123);
	}
#elif CONV_PX == 8
	switch (s) {
	case 1: return (cvec)(v.s1234, v.s567, t.s0);
	case 2: return (cvec)(v.s2345, v.s67, t.s01);
	case 3: return (cvec)(v.s3456, v.s7, t.s012);
	case 4: return (cvec)(v.s4567, t.s0123);
	}
#else
	switch (s) {
	case 1: return (cvec)(v.s123, t.s0);
	case 2: return (cvec)(v.s23, t.s01);
	case 3: return (cvec)(v.s3, t.s012);
	case 4: return t;
	}
#endif
	return v;
}

// cv_row is CONV_PX consecutive elements of a row of W from column i, zero
// outside the row: one vector load inside it, lane by lane at its ends.
static inline cvec cv_row(__global const store_t *row, int i, int W) {
	if (i >= 0 && i + CONV_PX <= W) return CV_LOAD(row + i);
	return conv_row_gather(row, i, 1, W);
}

// conv_dw_reg: depthwise convolution with kernel width KW <= 5, stride 1 or
// 2 along the width and no dilation there (MobileNet's and EfficientNet's
// 3x3 and 5x5). As conv_dw (CONV_DW_ROWS output rows x CONV_PX pixels of
// one channel per block, each input row walked once per block), but each
// input row is loaded once as two (stride 1) or three (stride 2) vectors
// covering every kw's window, and the window of each kw is cut from those
// registers (cv_shift; at stride 2 from their even and odd lanes). conv_dw
// loads a row KW times, and at the row's ends (every strip of a 7x7 or
// 14x14 map) lane by lane each time; here only the row's 2-3 loads take
// the lane path, once.
//
// Work-items: chanFirst (CPUs) puts channels along dimension 0, global
// (N*C = NC, strips * ceil(blocks / nblk)), so a work-group is
// neighbouring channels at one strip and a small map still fills it;
// otherwise (GPUs) strips along dimension 0 as conv_dw, global
// (strips * ceil(blocks / nblk), NC).
__kernel void conv_dw_reg(CONV_TILE_PARAMS, int nblk, int chanFirst, int NC) {
	const int strips = (OW + CONV_PX - 1) / CONV_PX;
	const int t = get_global_id(chanFirst ? 1 : 0);
	const int z = get_global_id(chanFirst ? 0 : 1); // n*C + c
	if (z >= NC) return;
	const int blk0 = (t / strips) * nblk;
	if (blk0 * CONV_DW_ROWS >= OH) return;
	const int ow1 = (t % strips) * CONV_PX;
	const int ow0 = OW >= CONV_PX ? min(ow1, OW - CONV_PX) : 0;
	const int c = z % C;
	__global const store_t *xp = X + offX + z * H * W;
	const int wo = offW + c * KH * KW;
	const int iw0 = ow0 * sw - pl;
	const float b = hasBias ? WLOAD(Bias, offB + c) : 0.0f;
	for (int oh0 = blk0 * CONV_DW_ROWS; oh0 < min(OH, (blk0 + nblk) * CONV_DW_ROWS); oh0 += CONV_DW_ROWS) {
		cvec acc[CONV_DW_ROWS];
		#pragma unroll
		for (int r = 0; r < CONV_DW_ROWS; r++) acc[r] = (cvec)(0.0f);
		const int nrows = min(CONV_DW_ROWS, OH - oh0);
		const int ihA = max(oh0 * sh - pt, 0);
		const int ihB = min((oh0 + nrows - 1) * sh - pt + (KH - 1) * dh, H - 1);
		for (int ih = ihA; ih <= ihB; ih++) {
			__global const store_t *row = xp + ih * W;
			int kb[CONV_DW_ROWS];
			#pragma unroll
			for (int r = 0; r < CONV_DW_ROWS; r++) kb[r] = conv_dw_wrow(ih, oh0 + r, r < nrows, sh, pt, dh, KH, KW, wo);
			const cvec a0 = cv_row(row, iw0, W), a1 = cv_row(row, iw0 + CONV_PX, W);
			cvec lo = a0, hi = a1, lo2 = a0, hi2 = a1;
			if (sw == 2) {
				const cvec a2 = cv_row(row, iw0 + 2 * CONV_PX, W);
				lo = (cvec)(a0.even, a1.even), hi = (cvec)(a2.even, a2.even);
				lo2 = (cvec)(a0.odd, a1.odd), hi2 = (cvec)(a2.odd, a2.odd);
			}
			// Stride 1: window kw is the pair moved by kw. Stride 2:
			// lanes kw, kw+2, ...: the even lanes moved by kw/2 for an
			// even kw, the odd ones for an odd kw. Written out per kw so
			// every move is a constant swizzle (a loop with an early exit
			// was left rolled, and its moves became runtime selects).
#define CONV_DW_TAP(kw)                                                        \
	if ((kw) < KW) {                                                           \
		const cvec xv = sw == 1 ? cv_shift(lo, hi, (kw))                       \
		                        : ((kw) % 2 == 0 ? cv_shift(lo, hi, (kw) / 2)  \
		                                         : cv_shift(lo2, hi2, (kw) / 2)); \
		_Pragma("unroll") for (int r = 0; r < CONV_DW_ROWS; r++) if (kb[r] >= 0) \
			acc[r] = fma((cvec)(WLOAD(Wt, kb[r] + (kw))), xv, acc[r]);         \
	}
			CONV_DW_TAP(0)
			CONV_DW_TAP(1)
			CONV_DW_TAP(2)
			CONV_DW_TAP(3)
			CONV_DW_TAP(4)
#undef CONV_DW_TAP
		}
		#pragma unroll
		for (int r = 0; r < CONV_DW_ROWS; r++) {
			if (r >= nrows) continue;
			const int o = (z * OH + oh0 + r) * OW;
			cvec v = acc[r] + b;
			if (hasR) v += conv_get(R + offR + o, ow0, OW);
			conv_put(Y + offY + o, ow0, ow1, OW, conv_act(v, act, actA, actB));
		}
	}
}

// conv_pad copies planes of X (H x W) into conv_flat's layout: each plane
// zero-padded (the input at row pt, column pl) and split by stride into
// sh*sw phase planes of Hq x Wq, phase (a, b) holding padded rows a, a+sh,
// ... and columns b, b+sw, ... (one phase at stride 1). A work-item writes
// `rows` consecutive rows of a phase plane: one on a GPU, many on a CPU,
// where a work-item per row (14 elements at a 14x14 map) spent more on its
// index arithmetic than on the copy. global (ceil(Hq / rows),
// planes*sh*sw).
//
// conv_divs is a / s for a >= 0 and a stride s: a shift at 1 and 2 (an
// integer division costs more than a short row's copy).
static inline int conv_divs(int a, int s) { return s == 1 ? a : s == 2 ? a >> 1 : a / s; }

// raw_t holds a stored element's bits, which conv_pad copies as they are.
#ifdef STORAGE_F16
typedef ushort raw_t;
#else
typedef uint raw_t;
#endif
__kernel void conv_pad(__global const store_t *X, int offX, __global store_t *P,
                       int offP, int H, int W, int Hq, int Wq, int pt, int pl,
                       int sh, int sw, int rows) {
	const int i0 = get_global_id(0) * rows, zp = get_global_id(1);
	if (i0 >= Hq) return;
	const int nph = sh * sw, z = conv_divs(conv_divs(zp, sh), sw), ph = zp - z * nph;
	const int pa = conv_divs(ph, sw), b = ph - pa * sw - pl;
	// Columns j in [j0, j1) read the row (iw = j*sw + b in [0, W)); the
	// rest are padding. Inside, whole vectors of the raw bits (the value is
	// copied, never converted, in either storage) at stride 1 and 2.
	const int j0 = b >= 0 ? 0 : conv_divs(-b + sw - 1, sw);
	const int j1 = max(j0, min(Wq, W - b > 0 ? conv_divs(W - b + sw - 1, sw) : 0));
	__global const raw_t *xp = (__global const raw_t *)(X + offX) + z * H * W;
	__global raw_t *o = (__global raw_t *)(P + offP) + (zp * Hq + i0) * Wq;
	for (int i = i0; i < min(Hq, i0 + rows); i++, o += Wq) {
		const int ih = i * sh + pa - pt;
		if (ih < 0 || ih >= H) {
			for (int j = 0; j < Wq; j++) o[j] = 0;
			continue;
		}
		__global const raw_t *row = xp + ih * W;
		for (int j = 0; j < j0; j++) o[j] = 0;
		int j = j0;
		if (sw == 1)
			for (; j + 8 <= j1; j += 8) vstore8(vload8(0, row + j + b), 0, o + j);
		else if (sw == 2)
			for (; j + 8 <= j1 && 2 * (j + 8) + b <= W; j += 8) vstore8(vload16(0, row + 2 * j + b).even, 0, o + j);
		for (; j < j1; j++) o[j] = row[j * sw + b];
		for (j = j1; j < Wq; j++) o[j] = 0;
	}
}

// conv_dwf: a depthwise convolution (one input and one output channel per
// group) over conv_pad's padded phase planes, on the flattened grid of
// conv_flat: grid position q = oh*Wq + ow, tap (kh, kw) one contiguous
// vector load at a fixed offset from q whatever the stride, dilation and
// padding. A work-item computes CONV_DWF_VB vectors of CONV_PX grid
// positions of one channel, so each tap's weight is loaded once for
// CONV_DWF_VB loads and FMAs, and no load needs a bounds test or a lane
// path: conv_dw_reg's row windows test the row's ends on every row and
// gather lane by lane there (every strip of a 7x7 or 14x14 map), and its
// runtime kernel width and stride put a branch before every tap. The
// kernels conv_dwf_K_S fix the kernel size K x K and stride S (dilation
// 1), so the tap loops unroll into straight code; conv_dwf takes any
// geometry. The planes need CONV_DWF_VB*CONV_PX + (KW-1)*dw readable
// elements past the last one (the last work-item's vectors beyond the grid
// are computed and dropped). Work-items: chanFirst (CPUs) puts channels
// along dimension 0, global (NC = N*C, ceil(OH*Wq / (CONV_DWF_VB*
// CONV_PX))), so a work-group is neighbouring channels and a small map
// still fills it; otherwise grid chunks along dimension 0, global (chunks,
// NC).
// conv_grid_res is the residual under a strip of CONV_PX positions of
// conv_flat's grid (row oh, column ow; Wq columns a row, the last Wq - OW
// computed and dropped): R's element (oh, ow) of the plane rp (OH x OW),
// zero where the position is dropped. Inside a row, one load; across a
// row's end, lane by lane.
static inline cvec conv_grid_res(__global const store_t *rp, int oh, int ow, int OH, int OW, int Wq) {
	if (ow + CONV_PX <= OW) return CV_LOAD(rp + oh * OW + ow);
#define CONV_GRID_LANE(l)                                                      \
	((oh + (ow + (l)) / Wq < OH && (ow + (l)) % Wq < OW)                       \
	     ? LOAD(rp, (oh + (ow + (l)) / Wq) * OW + (ow + (l)) % Wq)             \
	     : 0.0f)
	return CV_BUILD(CONV_GRID_LANE);
#undef CONV_GRID_LANE
}

#if CONV_PX >= 8
#define CONV_DWF_VB 4
#else
#define CONV_DWF_VB 2
#endif
__attribute__((always_inline)) static inline void
conv_dwf_body(const int KH, const int KW, const int sh, const int sw, const int dh,
         const int dw, __global const store_t *P, int offP,
         __global const wstore_t *Wt, int offW, __global const wstore_t *Bias,
         int offB, int hasBias, __global store_t *Y, int offY, int C, int Hq,
         int Wq, int OH, int OW, int act, float actA, float actB,
         int chanFirst, int NC, CONV_RES_PARAMS) {
	const int z = get_global_id(chanFirst ? 0 : 1); // n*C + c
	if (z >= NC) return;
	const int grid = OH * Wq;
	const int q0 = get_global_id(chanFirst ? 1 : 0) * (CONV_DWF_VB * CONV_PX);
	if (q0 >= grid) return;
	const int c = z % C, phase = Hq * Wq;
	__global const store_t *xp = P + offP + z * sh * sw * phase + q0;
	__global const wstore_t *wp = Wt + offW + c * KH * KW;
	cvec acc[CONV_DWF_VB];
	#pragma unroll
	for (int v = 0; v < CONV_DWF_VB; v++) acc[v] = (cvec)(0.0f);
	// The phase and offset of kh*dh and kw*dw (quotient and remainder by
	// the stride) are stepped, as conv_flat does; with constant sizes and
	// strides the unrolled loops fold them into constant offsets.
	int uq = 0, ur = 0; // kh*dh = uq*sh + ur
	#pragma unroll
	for (int kh = 0; kh < KH; kh++) {
		__global const store_t *row = xp + ur * sw * phase + uq * Wq;
		int vq = 0, vr = 0; // kw*dw = vq*sw + vr
		#pragma unroll
		for (int kw = 0; kw < KW; kw++) {
			const cvec w = (cvec)(WLOAD(wp, kh * KW + kw));
			__global const store_t *src = row + vr * phase + vq;
			#pragma unroll
			for (int v = 0; v < CONV_DWF_VB; v++) acc[v] = fma(w, CV_LOAD(src + v * CONV_PX), acc[v]);
			for (vr += dw; vr >= sw; vr -= sw) vq++;
		}
		for (ur += dh; ur >= sh; ur -= sh) uq++;
	}
	const float b = hasBias ? WLOAD(Bias, offB + c) : 0.0f;
	__global store_t *yp = Y + offY + z * OH * OW;
	#pragma unroll
	for (int v = 0; v < CONV_DWF_VB; v++) {
		const int q = q0 + v * CONV_PX;
		if (q >= grid) break;
		int oh = q / Wq, ow = q - oh * Wq;
		cvec y = acc[v] + b;
		if (hasR) y += conv_grid_res(R + offR + z * OH * OW, oh, ow, OH, OW, Wq);
		y = conv_act(y, act, actA, actB);
		if (ow + CONV_PX <= OW) {
			conv_put(yp + oh * OW, ow, ow, OW, y);
			continue;
		}
#define CONV_DWF_LANE(l, x)                                                    \
	{                                                                          \
		if (oh < OH && ow < OW) STORE(yp, oh * OW + ow, (x));                  \
		if (++ow == Wq) ow = 0, oh++;                                          \
	}
		CV_LANES(CONV_DWF_LANE, y)
#undef CONV_DWF_LANE
	}
}

#define CONV_DWF_PARAMS                                                        \
	__global const store_t *P, int offP, __global const wstore_t *Wt,          \
	    int offW, __global const wstore_t *Bias, int offB, int hasBias,        \
	    __global store_t *Y, int offY, int C, int Hq, int Wq, int OH, int OW,  \
	    int KH, int KW, int sh, int sw, int dh, int dw, int act, float actA,   \
	    float actB, int chanFirst, int NC, CONV_RES_PARAMS
#define CONV_DWF_ARGS                                                          \
	P, offP, Wt, offW, Bias, offB, hasBias, Y, offY, C, Hq, Wq, OH, OW, act,   \
	    actA, actB, chanFirst, NC, R, offR, hasR
__kernel void conv_dwf(CONV_DWF_PARAMS) { conv_dwf_body(KH, KW, sh, sw, dh, dw, CONV_DWF_ARGS); }
#define CONV_DWF_FIXED(K, S)                                                   \
	__kernel void conv_dwf_##K##_##S(CONV_DWF_PARAMS) {                        \
		conv_dwf_body(K, K, S, S, 1, 1, CONV_DWF_ARGS);                        \
	}
CONV_DWF_FIXED(3, 1)
CONV_DWF_FIXED(3, 2)
CONV_DWF_FIXED(5, 1)
CONV_DWF_FIXED(5, 2)
#undef CONV_DWF_FIXED

// conv_flat: a convolution over conv_pad's padded phase planes. Padded
// element (oh*sh + kh*dh, ow*sw + kw*dw) is element (oh + (kh*dh)/sh,
// ow + (kw*dw)/sw) of phase ((kh*dh)%sh, (kw*dw)%sw), so on the flattened
// grid q = oh*Wq + ow (Wq - OW columns per row computed and dropped) every
// k is one contiguous vector load at a fixed offset from q0, whatever the
// stride, dilation or padding: no edge cases, however narrow the rows
// (ResNet's 7x7 and 14x14 stages, where conv_tile's strips would mostly
// hang off the row). Otherwise as conv_tile: RB output channels x CONV_PX
// grid positions per work-item. The planes need CONV_PX + (KW-1)*dw
// readable elements past the last one. global (ceil(OH*Wq / CONV_PX),
// ceil(OC/G / RB), N*G).
__attribute__((always_inline)) static inline void
conv_flat(const int RB, __global const store_t *P, int offP,
          __global const wstore_t *Wt, int offW, __global const wstore_t *Bias,
          int offB, int hasBias, __global store_t *Y, int offY, int C, int Hq,
          int Wq, int OC, int OH, int OW, int KH, int KW, int sh, int sw, int dh,
          int dw, int G, int act, float actA, float actB, CONV_RES_PARAMS) {
	const int q0 = get_global_id(0) * CONV_PX;
	if (q0 >= OH * Wq) return;
	const int Cg = C / G, OCg = OC / G;
	const int ocb = get_global_id(1) * RB;
	if (ocb >= OCg) return;
	const int z = get_global_id(2), n = z / G, g = z - n * G;
	const int Kc = Cg * KH * KW, phase = Hq * Wq, plane = sh * sw * phase;
	__global const store_t *xp = P + offP + (n * C + g * Cg) * plane + q0;
	int wo[CONV_RBMAX];
	#pragma unroll
	for (int r = 0; r < RB; r++) wo[r] = offW + (g * OCg + min(ocb + r, OCg - 1)) * Kc;
	cvec acc[CONV_RBMAX];
	#pragma unroll
	for (int r = 0; r < RB; r++) acc[r] = (cvec)(0.0f);
	// The phase and offset of kh*dh and kw*dw (quotient and remainder by
	// the stride) are stepped, not divided: an integer division per load
	// cost more than the load's eight FMAs.
	for (int ic = 0; ic < Cg; ic++) {
		int uq = 0, ur = 0; // kh*dh = uq*sh + ur
		for (int kh = 0; kh < KH; kh++) {
			__global const store_t *row = xp + ic * plane + ur * sw * phase + uq * Wq;
			const int kb = (ic * KH + kh) * KW;
			int vq = 0, vr = 0; // kw*dw = vq*sw + vr
			for (int kw = 0; kw < KW; kw++) {
				const cvec xv = CV_LOAD(row + vr * phase + vq);
				#pragma unroll
				for (int r = 0; r < RB; r++)
					acc[r] = fma((cvec)(WLOAD(Wt, wo[r] + kb + kw)), xv, acc[r]);
				for (vr += dw; vr >= sw; vr -= sw) vq++;
			}
			for (ur += dh; ur >= sh; ur -= sh) uq++;
		}
	}
	const int oh0 = q0 / Wq, ow0 = q0 - oh0 * Wq;
	#pragma unroll
	for (int r = 0; r < RB; r++) {
		if (ocb + r >= OCg) continue;
		const int oc = g * OCg + ocb + r;
		cvec v = acc[r];
		if (hasBias) v += (cvec)(WLOAD(Bias, offB + oc));
		if (hasR) v += conv_grid_res(R + offR + (n * OC + oc) * OH * OW, oh0, ow0, OH, OW, Wq);
		v = conv_act(v, act, actA, actB);
		__global store_t *yp = Y + offY + (n * OC + oc) * OH * OW;
		if (ow0 + CONV_PX <= OW) {
			conv_put(yp + oh0 * OW, ow0, ow0, OW, v);
			continue;
		}
		int oh = oh0, ow = ow0;
#define CONV_FLAT_LANE(l, x)                                                   \
	{                                                                          \
		if (oh < OH && ow < OW) STORE(yp, oh * OW + ow, (x));                  \
		if (++ow == Wq) ow = 0, oh++;                                          \
	}
		CV_LANES(CONV_FLAT_LANE, v)
#undef CONV_FLAT_LANE
	}
}

#define CONV_FLAT_PARAMS                                                       \
	__global const store_t *P, int offP, __global const wstore_t *Wt,          \
	    int offW, __global const wstore_t *Bias, int offB, int hasBias,        \
	    __global store_t *Y, int offY, int C, int Hq, int Wq, int OC, int OH,  \
	    int OW, int KH, int KW, int sh, int sw, int dh, int dw, int G,         \
	    int act, float actA, float actB, CONV_RES_PARAMS
#define CONV_FLAT_ARGS                                                         \
	P, offP, Wt, offW, Bias, offB, hasBias, Y, offY, C, Hq, Wq, OC, OH, OW,    \
	    KH, KW, sh, sw, dh, dw, G, act, actA, actB, R, offR, hasR
#if CONV_RBMAX == 8
__kernel void conv_flat_8(CONV_FLAT_PARAMS) { conv_flat(8, CONV_FLAT_ARGS); }
#endif
__kernel void conv_flat_4(CONV_FLAT_PARAMS) { conv_flat(4, CONV_FLAT_ARGS); }

// ---------------------------------------------------------------------------
// Winograd F(2x2, 3x3) for stride-1, dilation-1, ungrouped 3x3
// convolutions: each 2x2 output tile is A^T [(G g G^T) . (B^T d B)] A over
// the 4x4 input tile d, so the C*9 multiply-adds per output become C*4
// (16 per tile of 4 outputs) in 16 independent products, one per element
// xi of the 4x4 transformed tile, that matmul.cl's GEMM runs as a batch:
//   M[xi][t][k] = sum over c of V[xi][t][c] * U[xi][k][c]
// over tiles t (N*TH*TW of them, TH = ceil(OH/2), TW = ceil(OW/2)).
//   G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//   A^T = [1 1 1 0; 0 1 -1 -1]
// The transforms are additions only (and halvings of the weight), so the
// rounding they add is a few ulps of the sums they form.

// The transforms work on WV channels at once: 8 (one float8 per tile
// element; AVX2 registers, AVX-512's halves) on CPUs, 1 on GPUs (CONV_PX 4),
// where a tile of float8 would hold 128 registers. wvec is their type.
#if CONV_PX >= 8
#define WV 8
typedef float8 wvec;
#ifdef STORAGE_F16
#define WV_LOAD(p) ((float8)(vload_half4(0, (p)), vload_half4(0, (p) + 4)))
#define WV_STORE(v, p) (vstore_half4_rte((v).lo, 0, (p)), vstore_half4_rte((v).hi, 0, (p) + 4))
#else
#define WV_LOAD(p) vload8(0, (p))
#define WV_STORE(v, p) vstore8((v), 0, (p))
#endif
// WV_BUILD(F) is the vector of F(0), ..., F(7).
#define WV_BUILD(F) ((float8)(F(0), F(1), F(2), F(3), F(4), F(5), F(6), F(7)))
#else
#define WV 1
typedef float wvec;
#define WV_LOAD(p) LOAD((p), 0)
#define WV_STORE(v, p) STORE((p), 0, (v))
#define WV_BUILD(F) (F(0))
#endif

CONV_ACT_FN(conv_act_w, wvec)

// wv_put stores the first n lanes of v at p[0], p[step], ...: the lanes
// of a channel block, whole (n == WV, step 1: one vector store) or cut
// short at the channel count.
static inline void wv_put(__global store_t *p, int step, int n, wvec v) {
	if (n == WV && step == 1) {
		WV_STORE(v, p);
		return;
	}
	float l[WV];
#if WV == 8
	vstore8(v, 0, l);
#else
	l[0] = v;
#endif
	for (int i = 0; i < n; i++) STORE(p, i * step, l[i]);
}

// wv_get loads the first n lanes of p[0], p[step], ... (zero past n): the
// residual under wv_put's lanes.
static inline wvec wv_get(__global const store_t *p, int step, int n) {
	if (n == WV && step == 1) return WV_LOAD(p);
#define WV_GET_LANE(l) ((l) < n ? LOAD(p, (l)*step) : 0.0f)
	return WV_BUILD(WV_GET_LANE);
#undef WV_GET_LANE
}

// conv_wino_w: U[xi][k][c] = (G g G^T)[xi] for the 3x3 weight g = W[k][c],
// WV channels c per work-item. global (ceil(C / WV), K).
__kernel void conv_wino_w(__global const wstore_t *Wt, int offW,
                          __global store_t *U, int offU, int C, int K) {
	const int c0 = get_global_id(0) * WV, k = get_global_id(1);
	if (c0 >= C || k >= K) return;
	const int nc = min(WV, C - c0);
	__global const wstore_t *g = Wt + offW + (k * C + c0) * 9;
	wvec t[4][3];
	#pragma unroll
	for (int j = 0; j < 3; j++) {
#define WINO_G(l, r) ((l) < nc ? WLOAD(g, (l) * 9 + (r) * 3 + j) : 0.0f)
#define WINO_G0(l) WINO_G(l, 0)
#define WINO_G1(l) WINO_G(l, 1)
#define WINO_G2(l) WINO_G(l, 2)
		const wvec g0 = WV_BUILD(WINO_G0), g1 = WV_BUILD(WINO_G1), g2 = WV_BUILD(WINO_G2);
#undef WINO_G
#undef WINO_G0
#undef WINO_G1
#undef WINO_G2
		t[0][j] = g0;
		t[1][j] = 0.5f * (g0 + g1 + g2);
		t[2][j] = 0.5f * (g0 - g1 + g2);
		t[3][j] = g2;
	}
	__global store_t *u = U + offU + k * C + c0;
	const int step = K * C;
	#pragma unroll
	for (int i = 0; i < 4; i++) {
		wv_put(u + (4 * i) * step, 1, nc, t[i][0]);
		wv_put(u + (4 * i + 1) * step, 1, nc, 0.5f * (t[i][0] + t[i][1] + t[i][2]));
		wv_put(u + (4 * i + 2) * step, 1, nc, 0.5f * (t[i][0] - t[i][1] + t[i][2]));
		wv_put(u + (4 * i + 3) * step, 1, nc, t[i][2]);
	}
}

// conv_wino_in: V[xi][t][c] = (B^T d B)[xi] for the 4x4 input tile d of
// tile t = (n*TH + ty)*TW + tx, plane c: rows 2*ty - pt .. +3, columns
// 2*tx - pl .. +3, zero outside the input (the padding, whatever its
// sides, and the overhang of a tile past an odd output edge). WV channels
// per work-item, so that its 16 stores are vectors; each channel's tile
// is read and transformed on its own (a tile inside the input without a
// bounds test per element), into a private [16][WV] block. Gathering the
// channels into vectors element by element, with a bounds test per lane,
// cost several times the GEMMs on UNet's 32-channel 112x112 layers.
// global (ceil(C / WV), T).
__kernel void conv_wino_in(__global const store_t *X, int offX,
                           __global store_t *V, int offV, int C, int H, int W,
                           int TH, int TW, int T, int pt, int pl) {
	const int c0 = get_global_id(0) * WV, t = get_global_id(1);
	if (c0 >= C || t >= T) return;
	const int nc = min(WV, C - c0);
	const int n = t / (TH * TW), r = t - n * TH * TW, ty = r / TW, tx = r - ty * TW;
	const int ih0 = 2 * ty - pt, iw0 = 2 * tx - pl, HW = H * W;
	const bool inside = ih0 >= 0 && ih0 + 4 <= H && iw0 >= 0 && iw0 + 4 <= W;
	float out[16 * WV];
	for (int l = 0; l < WV; l++) {
		__global const store_t *plane = X + offX + (n * C + c0 + l) * HW;
		float d[4][4];
		if (l >= nc) {
			#pragma unroll
			for (int i = 0; i < 4; i++)
				#pragma unroll
				for (int j = 0; j < 4; j++) d[i][j] = 0.0f;
		} else if (inside) {
			#pragma unroll
			for (int i = 0; i < 4; i++)
				#pragma unroll
				for (int j = 0; j < 4; j++) d[i][j] = LOAD(plane, (ih0 + i) * W + iw0 + j);
		} else {
			#pragma unroll
			for (int i = 0; i < 4; i++) {
				const int ih = ih0 + i;
				#pragma unroll
				for (int j = 0; j < 4; j++) {
					const int iw = iw0 + j;
					d[i][j] = ih >= 0 && ih < H && iw >= 0 && iw < W ? LOAD(plane, ih * W + iw) : 0.0f;
				}
			}
		}
		#pragma unroll
		for (int i = 0; i < 4; i++) { // B^T d, then (B^T d) B
			const float e0 = d[0][i] - d[2][i], e1 = d[1][i] + d[2][i];
			const float e2 = d[2][i] - d[1][i], e3 = d[1][i] - d[3][i];
			d[0][i] = e0, d[1][i] = e1, d[2][i] = e2, d[3][i] = e3;
		}
		#pragma unroll
		for (int i = 0; i < 4; i++) {
			out[(4 * i) * WV + l] = d[i][0] - d[i][2];
			out[(4 * i + 1) * WV + l] = d[i][1] + d[i][2];
			out[(4 * i + 2) * WV + l] = d[i][2] - d[i][1];
			out[(4 * i + 3) * WV + l] = d[i][1] - d[i][3];
		}
	}
	__global store_t *v = V + offV + t * C + c0;
	const int step = T * C;
	#pragma unroll
	for (int xi = 0; xi < 16; xi++) {
#if WV == 8
		wv_put(v + xi * step, 1, nc, vload8(0, out + xi * WV));
#else
		wv_put(v + xi * step, 1, nc, out[xi]);
#endif
	}
}

// conv_wino_out: the 2x2 output tile A^T m A of the products m[xi] =
// M[xi][t][k], + bias, then the activation, for WV channels k per
// work-item; outputs past OH or OW (an odd edge's overhang) are not
// stored. global (ceil(K / WV), T).
__kernel void conv_wino_out(__global const store_t *M, int offM,
                            __global const wstore_t *Bias, int offB,
                            int hasBias, __global store_t *Y, int offY, int K,
                            int OH, int OW, int TH, int TW, int T, int act,
                            float actA, float actB, CONV_RES_PARAMS) {
	const int k0 = get_global_id(0) * WV, t = get_global_id(1);
	if (k0 >= K || t >= T) return;
	const int nk = min(WV, K - k0);
	__global const store_t *m = M + offM + t * K + k0;
	const int step = T * K;
	wvec e[2][4]; // A^T m
	#pragma unroll
	for (int j = 0; j < 4; j++) {
		wvec mi[4];
		#pragma unroll
		for (int i = 0; i < 4; i++) {
			__global const store_t *p = m + (4 * i + j) * step;
			if (nk == WV) {
				mi[i] = WV_LOAD(p);
			} else {
#define WINO_M(l) ((l) < nk ? LOAD(p, (l)) : 0.0f)
				mi[i] = WV_BUILD(WINO_M);
#undef WINO_M
			}
		}
		e[0][j] = mi[0] + mi[1] + mi[2];
		e[1][j] = mi[1] - mi[2] - mi[3];
	}
#define WINO_B(l) ((l) < nk ? WLOAD(Bias, offB + k0 + (l)) : 0.0f)
	const wvec b = hasBias ? WV_BUILD(WINO_B) : (wvec)(0.0f);
#undef WINO_B
	const int n = t / (TH * TW), r = t - n * TH * TW, ty = r / TW, tx = r - ty * TW;
	const int plane = OH * OW, ow = 2 * tx;
	const int o = (n * K + k0) * plane;
	__global store_t *y = Y + offY + o;
	__global const store_t *rp = R + offR + o;
	#pragma unroll
	for (int i = 0; i < 2; i++) {
		const int oh = 2 * ty + i;
		if (oh >= OH) continue;
		wvec v0 = e[i][0] + e[i][1] + e[i][2] + b;
		if (hasR) v0 += wv_get(rp + oh * OW + ow, plane, nk);
		wv_put(y + oh * OW + ow, plane, nk, conv_act_w(v0, act, actA, actB));
		if (ow + 1 < OW) {
			wvec v1 = e[i][1] - e[i][2] - e[i][3] + b;
			if (hasR) v1 += wv_get(rp + oh * OW + ow + 1, plane, nk);
			wv_put(y + oh * OW + ow + 1, plane, nk, conv_act_w(v1, act, actA, actB));
		}
	}
}
