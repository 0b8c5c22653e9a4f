// resize.cl: ONNX Resize along one axis of a tensor viewed as
// [outer, In, inner] -> [outer, Out, inner]. ONNX defines an N-D resize as
// nested 1-D interpolations, so the launcher runs one pass per resized axis.
//
// Output coordinate x maps to the input coordinate xo by one of three forms
// (the launcher folds every coordinate_transformation_mode into one):
//   cform 0: (off + (x + 0.5) / scale) - 0.5   half_pixel(_symmetric), pytorch
//   cform 1: x / scale                         asymmetric
//   cform 2: (x * num) / den + off             align_corners, tf_crop_and_resize
//   cform 3: off                               a one-element output's constant
//   cform 4: (x + 0.5) / scale                 tf_half_pixel_for_nn
// The float32 operations and their order are those of ResizeRef, so that
// nearest rounding agrees at exact ties.
//
// With base = ceil(xo) - 1 and ratio = xo - base in (0, 1] (ONNX prefers the
// left neighbour), tap j in [base-m+1, base+m] has weight
// k((j - base - ratio) * kscale): k is the triangle (linear) or Keys cubic
// with coefficient A; kscale < 1 only for antialiased downscaling. Taps
// outside the input read the edge element, or weigh zero with excl
// (exclude_outside); the sum is renormalised when norm or excl is set.

static float rs_cubic(float t, float A) {
	t = fabs(t);
	if (t <= 1.0f) return ((A + 2.0f) * t - (A + 3.0f)) * t * t + 1.0f;
	if (t < 2.0f) return ((A * t - 5.0f * A) * t + 8.0f * A) * t - 4.0f * A;
	return 0.0f;
}

static float rs_coord(int ox, int cform, float scale, float num, float den,
                      float off) {
	const float x = (float)ox;
	if (cform == 0) {
		const float h = (x + 0.5f) / scale;
		return (off + h) - 0.5f;
	}
	if (cform == 1) return x / scale;
	if (cform == 2) {
		const float p = x * num;
		return p / den + off;
	}
	if (cform == 4) return (x + 0.5f) / scale;
	return off;
}

// rs_base: base = ceil(xo) - 1, ratio = xo - base in (0, 1].
static int rs_base(float xo, float *ratio) {
	const float fl = floor(xo);
	int base = (int)fl;
	if (fl == xo) base -= 1;
	*ratio = xo - (float)base;
	return base;
}

static int rs_nearest(int base, float ratio, int nearest, int In) {
	int pick;
	if (ratio == 1.0f) pick = base + 1;
	else if (nearest == 0) pick = ratio > 0.5f ? base + 1 : base;
	else if (nearest == 1) pick = ratio >= 0.5f ? base + 1 : base;
	else if (nearest == 2) pick = base;
	else pick = base + 1;
	return clamp(pick, 0, In - 1);
}

static float rs_weight(int j, int base, float ratio, float kscale, int mode,
                       float A, int excl, int In) {
	const float t = ((float)(j - base) - ratio) * kscale;
	if (excl && (j < 0 || j >= In)) return 0.0f;
	return mode == 1 ? fmax(0.0f, 1.0f - fabs(t)) : rs_cubic(t, A);
}

__kernel void resize_axis(__global const store_t *X, int offX,
                          __global store_t *Y, int offY, int In, int Out,
                          int inner, int cform, float scale, float num,
                          float den, float off, int extrap, float extrapValue,
                          int mode, int nearest, int m, float kscale, float A,
                          int excl, int norm) {
	const int q = get_global_id(0), o = get_global_id(1);
	if (q >= Out * inner) return;
	const int ox = q / inner, i = q % inner;
	const float xo = rs_coord(ox, cform, scale, num, den, off);
	const int yi = offY + (o * Out + ox) * inner + i;
	if (extrap && (xo < 0.0f || xo > (float)(In - 1))) {
		STORE(Y, yi, extrapValue);
		return;
	}
	float ratio;
	const int base = rs_base(xo, &ratio);
	__global const store_t *xp = X + offX + o * In * inner + i;
	if (mode == 0) {
		STORE(Y, yi, LOAD(xp, rs_nearest(base, ratio, nearest, In) * inner));
		return;
	}
	float acc = 0.0f, wsum = 0.0f;
	for (int j = base - m + 1; j <= base + m; j++) {
		const float w = rs_weight(j, base, ratio, kscale, mode, A, excl, In);
		acc += w * LOAD(xp, clamp(j, 0, In - 1) * inner);
		wsum += w;
	}
	if (norm || excl) acc /= wsum;
	STORE(Y, yi, acc);
}

// resize_hw: both of the two innermost axes at once, [planes, H, W] ->
// [planes, OH, OW], global (OW, OH, planes): the common image resize, with
// no intermediate. Per-axis arguments as resize_axis's, h* for rows, w* for
// columns.
__kernel void resize_hw(__global const store_t *X, int offX,
                        __global store_t *Y, int offY, int H, int W, int OH,
                        int OW, int hform, float hscale, float hnum,
                        float hden, float hoff, int hm, float hk, int hnorm,
                        int wform, float wscale, float wnum, float wden,
                        float woff, int wm, float wk, int wnorm, int extrap,
                        float extrapValue, int mode, int nearest, float A,
                        int excl) {
	const int ow = get_global_id(0), oh = get_global_id(1), z = get_global_id(2);
	if (ow >= OW || oh >= OH) return;
	const float yo = rs_coord(oh, hform, hscale, hnum, hden, hoff);
	const float xo = rs_coord(ow, wform, wscale, wnum, wden, woff);
	const int yi = offY + (z * OH + oh) * OW + ow;
	if (extrap && (yo < 0.0f || yo > (float)(H - 1) || xo < 0.0f || xo > (float)(W - 1))) {
		STORE(Y, yi, extrapValue);
		return;
	}
	float hr, wr;
	const int hb = rs_base(yo, &hr), wb = rs_base(xo, &wr);
	__global const store_t *xp = X + offX + z * H * W;
	if (mode == 0) {
		const int r = rs_nearest(hb, hr, nearest, H), c = rs_nearest(wb, wr, nearest, W);
		STORE(Y, yi, LOAD(xp, r * W + c));
		return;
	}
	float acc = 0.0f, hsum = 0.0f;
	for (int i = hb - hm + 1; i <= hb + hm; i++) {
		const float hw = rs_weight(i, hb, hr, hk, mode, A, excl, H);
		__global const store_t *row = xp + clamp(i, 0, H - 1) * W;
		float racc = 0.0f, wsum = 0.0f;
		for (int j = wb - wm + 1; j <= wb + wm; j++) {
			const float ww = rs_weight(j, wb, wr, wk, mode, A, excl, W);
			racc += ww * LOAD(row, clamp(j, 0, W - 1));
			wsum += ww;
		}
		if (wnorm || excl) racc /= wsum;
		acc += hw * racc;
		hsum += hw;
	}
	if (hnorm || excl) acc /= hsum;
	STORE(Y, yi, acc);
}
