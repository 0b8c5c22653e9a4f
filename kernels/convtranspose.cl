// convtranspose.cl: 2-D transposed convolution (ONNX ConvTranspose) of an
// NCHW input [N, C, H, W] (storage per common.cl) with a weight
// [C, OC/G, KH, KW] and optional [OC] bias (both WLOAD).
//
// Input pixel (ih, iw) scatters into output row ih*sh - pt + kh*dh, column
// iw*sw - pl + kw*dw. The kernel gathers instead, one work-item per output
// element: for each tap, the input row is (oh + pt - kh*dh) / sh when that
// division is exact and in range. Pads may be negative (an output larger
// than the full transposed convolution, as output_padding or an explicit
// output_shape makes it); such positions receive only the bias.

__kernel void convt_direct(__global const store_t *X, int offX,
                           __global const wstore_t *Wt, int offW,
                           __global const wstore_t *Bias, int offB,
                           int hasBias, __global store_t *Y, int offY, int C,
                           int H, int W, int OC, int OH, int OW, int KH,
                           int KW, int sh, int sw, int pt, int pl, int dh,
                           int dw, int G) {
	const int ow = get_global_id(0), oh = get_global_id(1);
	const int z = get_global_id(2); // n*OC + oc
	if (ow >= OW || oh >= OH) return;
	const int oc = z % OC, n = z / OC;
	const int Cg = C / G, OCg = OC / G, g = oc / OCg, ocg = oc % OCg;
	float acc = 0.0f;
	for (int ic = 0; ic < Cg; ic++) {
		const int c = g * Cg + ic;
		__global const store_t *xp = X + offX + (n * C + c) * H * W;
		__global const wstore_t *wp = Wt + offW + (c * OCg + ocg) * KH * KW;
		for (int kh = 0; kh < KH; kh++) {
			const int th = oh + pt - kh * dh;
			if (th < 0 || th % sh != 0) continue;
			const int ih = th / sh;
			if (ih >= H) continue;
			for (int kw = 0; kw < KW; kw++) {
				const int tw = ow + pl - kw * dw;
				if (tw < 0 || tw % sw != 0) continue;
				const int iw = tw / sw;
				if (iw >= W) continue;
				acc = fma(LOAD(xp, ih * W + iw), WLOAD(wp, kh * KW + kw), acc);
			}
		}
	}
	if (hasBias) acc += WLOAD(Bias, offB + oc);
	STORE(Y, offY + (z * OH + oh) * OW + ow, acc);
}

// convt_col2im: the GEMM route's second half. Col (float32 whatever the
// storage: a sum of up to KH*KW of its entries makes each output, and fp16
// entries would round every one) holds, for `imgs` images
// from n0 and each group, the product W^T X: row (ocg*KH + kh)*KW + kw,
// column ih*W + iw, i.e. what input pixel (ih, iw) sends through tap
// (kh, kw) to channel ocg. Each output element gathers its taps from there.
// global (OW, OH, imgs*OC).
__kernel void convt_col2im(__global const float *Col, int offCol,
                           __global const wstore_t *Bias, int offB,
                           int hasBias, __global store_t *Y, int offY, int n0,
                           int H, int W, int OC, int OH, int OW, int KH,
                           int KW, int sh, int sw, int pt, int pl, int dh,
                           int dw, int G) {
	const int ow = get_global_id(0), oh = get_global_id(1);
	const int z = get_global_id(2); // image-in-launch * OC + oc
	if (ow >= OW || oh >= OH) return;
	const int oc = z % OC, OCg = OC / G, g = oc / OCg, ocg = oc % OCg;
	const int img = z / OC, HW = H * W, MK = OCg * KH * KW;
	__global const float *cp = Col + offCol + ((img * G + g) * MK + ocg * KH * KW) * HW;
	float acc = hasBias ? WLOAD(Bias, offB + oc) : 0.0f;
	for (int kh = 0; kh < KH; kh++) {
		const int th = oh + pt - kh * dh;
		if (th < 0 || th % sh != 0) continue;
		const int ih = th / sh;
		if (ih >= H) continue;
		for (int kw = 0; kw < KW; kw++) {
			const int tw = ow + pl - kw * dw;
			if (tw < 0 || tw % sw != 0) continue;
			const int iw = tw / sw;
			if (iw >= W) continue;
			acc += cp[(kh * KW + kw) * HW + ih * W + iw];
		}
	}
	STORE(Y, offY + ((n0 * OC + z) * OH + oh) * OW + ow, acc);
}

// 3-D: NCDHW input, weight [C, OC/G, KD, KH, KW]; the same two routes.
static float convt3d_taps(__global const store_t *src,
                          __global const float *col, int W, int H, int D, int od, int oh, int ow, int KD, int KH,
                          int KW, int sd, int sh, int sw, int pd, int ph,
                          int pw, int dd, int dh, int dw,
                          __global const wstore_t *wp, int colStride) {
	// colStride 0: a direct dot of src (one input channel) with wp over the
	// taps; else the sum of the GEMM's column entries, tap t at t*colStride.
	float acc = 0.0f;
	for (int kd = 0; kd < KD; kd++) {
		const int td = od + pd - kd * dd;
		if (td < 0 || td % sd != 0) continue;
		const int id = td / sd;
		if (id >= D) continue;
		for (int kh = 0; kh < KH; kh++) {
			const int th = oh + ph - kh * dh;
			if (th < 0 || th % sh != 0) continue;
			const int ih = th / sh;
			if (ih >= H) continue;
			for (int kw = 0; kw < KW; kw++) {
				const int tw = ow + pw - kw * dw;
				if (tw < 0 || tw % sw != 0) continue;
				const int iw = tw / sw;
				if (iw >= W) continue;
				const int t = (kd * KH + kh) * KW + kw, pix = (id * H + ih) * W + iw;
				if (colStride > 0) acc += col[t * colStride + pix];
				else acc = fma(LOAD(src, pix), WLOAD(wp, t), acc);
			}
		}
	}
	return acc;
}

// global (OW, OH, N*OC*OD).
__kernel void convt3d_direct(__global const store_t *X, int offX,
                             __global const wstore_t *Wt, int offW,
                             __global const wstore_t *Bias, int offB,
                             int hasBias, __global store_t *Y, int offY, int C,
                             int D, int H, int W, int OC, int OD, int OH,
                             int OW, int KD, int KH, int KW, int sd, int sh,
                             int sw, int pd, int ph, int pw, int dd, int dh,
                             int dw, int G) {
	const int ow = get_global_id(0), oh = get_global_id(1);
	const int z = get_global_id(2); // (n*OC + oc)*OD + od
	if (ow >= OW || oh >= OH) return;
	const int od = z % OD, oc = (z / OD) % OC, n = z / (OD * OC);
	const int Cg = C / G, OCg = OC / G, g = oc / OCg, ocg = oc % OCg;
	const int K = KD * KH * KW;
	float acc = hasBias ? WLOAD(Bias, offB + oc) : 0.0f;
	for (int ic = 0; ic < Cg; ic++) {
		const int c = g * Cg + ic;
		acc += convt3d_taps(X + offX + (n * C + c) * D * H * W, (__global const float *)0, W, H, D,
		                    od, oh, ow, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd,
		                    dh, dw, Wt + offW + (c * OCg + ocg) * K, 0);
	}
	STORE(Y, offY + (z * OH + oh) * OW + ow, acc);
}

// Col as convt_col2im's with DHW columns. global (OW, OH, imgs*OC*OD).
__kernel void convt3d_col2im(__global const float *Col, int offCol,
                             __global const wstore_t *Bias, int offB,
                             int hasBias, __global store_t *Y, int offY,
                             int n0, int D, int H, int W, int OC, int OD,
                             int OH, int OW, int KD, int KH, int KW, int sd,
                             int sh, int sw, int pd, int ph, int pw, int dd,
                             int dh, int dw, int G) {
	const int ow = get_global_id(0), oh = get_global_id(1);
	const int z = get_global_id(2); // (image-in-launch*OC + oc)*OD + od
	if (ow >= OW || oh >= OH) return;
	const int od = z % OD, oc = (z / OD) % OC, img = z / (OD * OC);
	const int OCg = OC / G, g = oc / OCg, ocg = oc % OCg;
	const int K = KD * KH * KW, DHW = D * H * W, MK = OCg * K;
	__global const float *cp = Col + offCol + ((img * G + g) * MK + ocg * K) * DHW;
	float acc = hasBias ? WLOAD(Bias, offB + oc) : 0.0f;
	acc += convt3d_taps((__global const store_t *)0, cp, W, H, D, od, oh, ow, KD, KH, KW, sd, sh, sw,
	                    pd, ph, pw, dd, dh, dw, (__global const wstore_t *)0, DHW);
	STORE(Y, offY + ((n0 * OC * OD + z) * OH + oh) * OW + ow, acc);
}
