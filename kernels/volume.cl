// volume.cl: 3-D convolution and pooling over NCDHW activations (storage per
// common.cl), one work-item per output element: global (OW, OH, N*Ch*OD).
// Window tap (kd, kh, kw) of output (od, oh, ow) reads input
// (od*sd - pd + kd*dd, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw); positions
// outside the input are padding. Pooling follows pool.cl's rules: padding
// never wins a max, NaN propagates, and with cip (count_include_pad) the
// average divides by the taps inside the padded extent, else by those inside
// the input.

__kernel void conv3d_direct(__global const store_t *X, int offX,
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
	const int Cg = C / G, g = oc / (OC / G);
	const int d0 = od * sd - pd, h0 = oh * sh - ph, w0 = ow * sw - pw;
	float acc = 0.0f;
	for (int ic = 0; ic < Cg; ic++) {
		__global const store_t *xp = X + offX + (long)(n * C + g * Cg + ic) * D * H * W;
		__global const wstore_t *wp = Wt + offW + (oc * Cg + ic) * KD * KH * KW;
		for (int kd = 0; kd < KD; kd++) {
			const int id = d0 + kd * dd;
			if (id < 0 || id >= D) continue;
			for (int kh = 0; kh < KH; kh++) {
				const int ih = h0 + kh * dh;
				if (ih < 0 || ih >= H) continue;
				__global const store_t *row = xp + (id * H + ih) * W;
				__global const wstore_t *wrow = wp + (kd * KH + kh) * KW;
				for (int kw = 0; kw < KW; kw++) {
					const int iw = w0 + kw * dw;
					if (iw >= 0 && iw < W)
						acc = fma(LOAD(row, iw), WLOAD(wrow, kw), acc);
				}
			}
		}
	}
	if (hasBias) acc += WLOAD(Bias, offB + oc);
	STORE(Y, offY + (z * OH + oh) * OW + ow, acc);
}

__kernel void pool3d(__global const store_t *X, int offX, __global store_t *Y,
                     int offY, int D, int H, int W, int OD, int OH, int OW,
                     int KD, int KH, int KW, int sd, int sh, int sw, int pd,
                     int ph, int pw, int ed, int eh, int ew, int dd, int dh,
                     int dw, int avg, int cip) {
	const int ow = get_global_id(0), oh = get_global_id(1);
	const int z = get_global_id(2); // plane*OD + od
	if (ow >= OW || oh >= OH) return;
	const int od = z % OD, plane = z / OD;
	__global const store_t *xp = X + offX + (long)plane * D * H * W;
	const int d0 = od * sd - pd, h0 = oh * sh - ph, w0 = ow * sw - pw;
	float m = -INFINITY, sum = 0.0f;
	for (int kd = 0; kd < KD; kd++) {
		const int id = d0 + kd * dd;
		if (id < 0 || id >= D) continue;
		for (int kh = 0; kh < KH; kh++) {
			const int ih = h0 + kh * dh;
			if (ih < 0 || ih >= H) continue;
			for (int kw = 0; kw < KW; kw++) {
				const int iw = w0 + kw * dw;
				if (iw < 0 || iw >= W) continue;
				const float v = LOAD(xp, (id * H + ih) * W + iw);
				sum += v;
				m = (v > m || isnan(v)) ? v : m;
			}
		}
	}
	if (avg) {
		// Taps counted by the divisor, per axis.
		int nd = 0, nh = 0, nw = 0;
		for (int k = 0; k < KD; k++) {
			const int i = d0 + k * dd;
			if (cip ? (i < D + ed) : (i >= 0 && i < D)) nd++;
		}
		for (int k = 0; k < KH; k++) {
			const int i = h0 + k * dh;
			if (cip ? (i < H + eh) : (i >= 0 && i < H)) nh++;
		}
		for (int k = 0; k < KW; k++) {
			const int i = w0 + k * dw;
			if (cip ? (i < W + ew) : (i >= 0 && i < W)) nw++;
		}
		m = sum / (float)(nd * nh * nw);
	}
	STORE(Y, offY + (z * OH + oh) * OW + ow, m);
}

// conv3d_im2col: the GEMM route's gather, as conv.cl's conv_im2col with a
// depth axis: the receptive fields of `imgs` images from n0 into
// [G][P][Kc] or [G][Kc][P] (P = OD*OH*OW, Kc = C/G*KD*KH*KW, element
// (p, kc) at p*cp + kc*ck), zero in the padding. global (P, Kc, imgs*G),
// or (Kc, P, imgs*G) for pixel-major columns (ck == 1), as conv_im2col.
__kernel void conv3d_im2col(__global const store_t *X, int offX,
                            __global store_t *Col, int offCol, int n0, int C,
                            int D, int H, int W, int OD, int OH, int OW,
                            int KD, int KH, int KW, int sd, int sh, int sw,
                            int pd, int ph, int pw, int dd, int dh, int dw,
                            int G, int cp, int ck) {
	const int pixMajor = ck == 1;
	const int p = get_global_id(pixMajor ? 1 : 0), kc = get_global_id(pixMajor ? 0 : 1);
	const int z = get_global_id(2); // image-in-launch * G + g
	const int P = OD * OH * OW, Cg = C / G, Kc = Cg * KD * KH * KW;
	if (p >= P || kc >= Kc) return;
	const int kw = kc % KW, kh = (kc / KW) % KH, kd = (kc / (KW * KH)) % KD;
	const int ic = kc / (KW * KH * KD);
	const int ow = p % OW, oh = (p / OW) % OH, od = p / (OW * OH);
	const int id = od * sd - pd + kd * dd, ih = oh * sh - ph + kh * dh;
	const int iw = ow * sw - pw + kw * dw;
	const int n = n0 + z / G, g = z % G;
	float v = 0.0f;
	if (id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W)
		v = LOAD(X, offX + (((n * C + g * Cg + ic) * D + id) * H + ih) * W + iw);
	STORE(Col, offCol + z * P * Kc + p * cp + kc * ck, v);
}

// pool3d_argmax: MaxPool's values and, as int64, the flat index of each
// maximum in the whole input tensor: row-major ((plane*D + id)*H + ih)*W + iw,
// or with colMajor (ONNX storage_order 1) plane*D*H*W + (iw*H + ih)*D + id.
// The first maximum wins, a NaN over any number (the last NaN over an
// earlier one), as in PyTorch. global as pool3d.
__kernel void pool3d_argmax(__global const store_t *X, int offX,
                            __global store_t *Y, int offY,
                            __global long *I, int offI, int D, int H, int W,
                            int OD, int OH, int OW, int KD, int KH, int KW,
                            int sd, int sh, int sw, int pd, int ph, int pw,
                            int dd, int dh, int dw, int colMajor) {
	const int ow = get_global_id(0), oh = get_global_id(1);
	const int z = get_global_id(2); // plane*OD + od
	if (ow >= OW || oh >= OH) return;
	const int od = z % OD, plane = z / OD;
	__global const store_t *xp = X + offX + (long)plane * D * H * W;
	const int d0 = od * sd - pd, h0 = oh * sh - ph, w0 = ow * sw - pw;
	float m = -INFINITY;
	long at = -1;
	for (int kd = 0; kd < KD; kd++) {
		const int id = d0 + kd * dd;
		if (id < 0 || id >= D) continue;
		for (int kh = 0; kh < KH; kh++) {
			const int ih = h0 + kh * dh;
			if (ih < 0 || ih >= H) continue;
			for (int kw = 0; kw < KW; kw++) {
				const int iw = w0 + kw * dw;
				if (iw < 0 || iw >= W) continue;
				const float v = LOAD(xp, (id * H + ih) * W + iw);
				if (v > m || isnan(v) || at < 0) {
					m = v;
					at = colMajor ? ((long)iw * H + ih) * D + id : ((long)id * H + ih) * W + iw;
				}
			}
		}
	}
	const int o = (z * OH + oh) * OW + ow;
	STORE(Y, offY + o, m);
	I[offI + o] = (long)plane * D * H * W + at;
}
