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

__kernel void conv_direct(__global const store_t *X, int offX,
                          __global const wstore_t *Wt, int offW,
                          __global const wstore_t *Bias, int offB, int hasBias,
                          __global store_t *Y, int offY, int C, int H, int W,
                          int OC, int OH, int OW, int KH, int KW, int sh,
                          int sw, int pt, int pl, int dh, int dw, int G) {
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
	STORE(Y, offY + (z * OH + oh) * OW + ow, acc);
}

// conv_im2col: global (P, Kc, imgs*G); image n0 + z/G of the launch.
__kernel void conv_im2col(__global const store_t *X, int offX,
                          __global store_t *Col, int offCol, int n0, int C,
                          int H, int W, int OH, int OW, int KH, int KW, int sh,
                          int sw, int pt, int pl, int dh, int dw, int G, int cp,
                          int ck) {
	const int p = get_global_id(0), kc = get_global_id(1);
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
