// pool.cl: windowed and global pooling over NCHW activations.
//
// Windowed pools: global (OW, OH, N*C), one work-item per output. Window
// element (kh, kw) of output (oh, ow) is input row oh*sh - pt + kh*dh, column
// ow*sw - pl + kw*dw; positions outside the input are padding. Padding never
// wins a max; for averages, cip (count_include_pad) counts the positions
// inside the padded extent [-pt, H+pb) x [-pl, W+pr) (PyTorch's rule, which
// also governs ONNX exports: with ceil_mode a window may overhang even the
// padding, and the overhang is not counted), otherwise only those inside the
// input. NaN inputs propagate through max, as in PyTorch.

__kernel void pool_max(__global const store_t *X, int offX,
                       __global store_t *Y, int offY, int H, int W, int OH,
                       int OW, int KH, int KW, int sh, int sw, int pt, int pl,
                       int dh, int dw) {
	const int ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
	if (ow >= OW || oh >= OH) return;
	__global const store_t *xp = X + offX + z * H * W;
	const int h0 = oh * sh - pt, w0 = ow * sw - pl;
	float m = -INFINITY;
	for (int kh = 0; kh < KH; kh++) {
		const int ih = h0 + kh * dh;
		if (ih < 0 || ih >= H) continue;
		for (int kw = 0; kw < KW; kw++) {
			const int iw = w0 + kw * dw;
			if (iw < 0 || iw >= W) continue;
			const float v = LOAD(xp, ih * W + iw);
			m = (v > m || isnan(v)) ? v : m;
		}
	}
	STORE(Y, offY + (z * OH + oh) * OW + ow, m);
}

__kernel void pool_avg(__global const store_t *X, int offX,
                       __global store_t *Y, int offY, int H, int W, int OH,
                       int OW, int KH, int KW, int sh, int sw, int pt, int pl,
                       int pb, int pr, int dh, int dw, int cip) {
	const int ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
	if (ow >= OW || oh >= OH) return;
	__global const store_t *xp = X + offX + z * H * W;
	const int h0 = oh * sh - pt, w0 = ow * sw - pl;
	float sum = 0.0f;
	int nh = 0, nw = 0; // window rows / columns counted by the divisor
	for (int kh = 0; kh < KH; kh++) {
		const int ih = h0 + kh * dh;
		if (cip ? (ih < H + pb) : (ih >= 0 && ih < H)) nh++;
	}
	for (int kw = 0; kw < KW; kw++) {
		const int iw = w0 + kw * dw;
		if (cip ? (iw < W + pr) : (iw >= 0 && iw < W)) nw++;
	}
	for (int kh = 0; kh < KH; kh++) {
		const int ih = h0 + kh * dh;
		if (ih < 0 || ih >= H) continue;
		for (int kw = 0; kw < KW; kw++) {
			const int iw = w0 + kw * dw;
			if (iw >= 0 && iw < W) sum += LOAD(xp, ih * W + iw);
		}
	}
	STORE(Y, offY + (z * OH + oh) * OW + ow, sum / (float)(nh * nw));
}

#ifdef STORAGE_F16
// Four half4 loads, not vload_half16: PoCL 3.1 marks the latter's load
// 32-byte aligned and it faults on odd offsets.
#define LOAD16(p, i)                                                           \
	((float16)(vload_half4(0, (p) + (i)), vload_half4(0, (p) + (i) + 4),       \
	           vload_half4(0, (p) + (i) + 8), vload_half4(0, (p) + (i) + 12)))
#else
#define LOAD16(p, i) vload16(0, (p) + (i))
#endif

// Global pools: one work-item per (n, c) plane of n elements, read in
// float16 vectors (the one-row-per-work-item shape PoCL runs fastest).
__kernel void pool_global_avg(__global const store_t *X, int offX,
                              __global store_t *Y, int offY, int n, int planes) {
	const int z = get_global_id(0);
	if (z >= planes) return;
	__global const store_t *xp = X + offX + z * n;
	float16 acc = (float16)(0.0f);
	int i = 0;
	for (; i + 16 <= n; i += 16) acc += LOAD16(xp, i);
	float8 a8 = acc.lo + acc.hi;
	float4 a4 = a8.lo + a8.hi;
	float s = a4.x + a4.y + a4.z + a4.w;
	for (; i < n; i++) s += LOAD(xp, i);
	STORE(Y, offY + z, s / (float)n);
}

__kernel void pool_global_max(__global const store_t *X, int offX,
                              __global store_t *Y, int offY, int n, int planes) {
	const int z = get_global_id(0);
	if (z >= planes) return;
	__global const store_t *xp = X + offX + z * n;
	float16 acc = (float16)(-INFINITY);
	int16 nan = (int16)(0);
	int i = 0;
	for (; i + 16 <= n; i += 16) {
		const float16 v = LOAD16(xp, i);
		acc = fmax(acc, v);
		nan |= isnan(v);
	}
	float8 a8 = fmax(acc.lo, acc.hi);
	float4 a4 = fmax(a8.lo, a8.hi);
	float m = fmax(fmax(a4.x, a4.y), fmax(a4.z, a4.w));
	if (any(nan)) m = NAN;
	for (; i < n; i++) {
		const float v = LOAD(xp, i);
		m = (v > m || isnan(v)) ? v : m;
	}
	STORE(Y, offY + z, m);
}
