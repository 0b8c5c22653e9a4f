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

__kernel void resize_axis(__global const store_t *X, int offX,
                          __global store_t *Y, int offY, int In, int Out,
                          int inner, int cform, float scale, float num,
                          float den, float off, int extrap, float extrapValue,
                          int mode, int nearest, int m, float kscale, float A,
                          int excl, int norm) {
	const int q = get_global_id(0), o = get_global_id(1);
	if (q >= Out * inner) return;
	const int ox = q / inner, i = q % inner;
	const float x = (float)ox;
	float xo;
	if (cform == 0) {
		const float h = (x + 0.5f) / scale;
		xo = (off + h) - 0.5f;
	} else if (cform == 1) {
		xo = x / scale;
	} else if (cform == 2) {
		const float p = x * num;
		xo = p / den + off;
	} else {
		xo = off;
	}
	const int yi = offY + (o * Out + ox) * inner + i;
	if (extrap && (xo < 0.0f || xo > (float)(In - 1))) {
		STORE(Y, yi, extrapValue);
		return;
	}
	const float fl = floor(xo);
	int base = (int)fl;
	if (fl == xo) base -= 1;
	const float ratio = xo - (float)base;
	__global const store_t *xp = X + offX + o * In * inner + i;
	if (mode == 0) {
		int pick;
		if (ratio == 1.0f) pick = base + 1;
		else if (nearest == 0) pick = ratio > 0.5f ? base + 1 : base;
		else if (nearest == 1) pick = ratio >= 0.5f ? base + 1 : base;
		else if (nearest == 2) pick = base;
		else pick = base + 1;
		pick = clamp(pick, 0, In - 1);
		STORE(Y, yi, LOAD(xp, pick * inner));
		return;
	}
	float acc = 0.0f, wsum = 0.0f;
	for (int j = base - m + 1; j <= base + m; j++) {
		const float t = ((float)(j - base) - ratio) * kscale;
		float w = mode == 1 ? fmax(0.0f, 1.0f - fabs(t)) : rs_cubic(t, A);
		if (excl && (j < 0 || j >= In)) w = 0.0f;
		acc += w * LOAD(xp, clamp(j, 0, In - 1) * inner);
		wsum += w;
	}
	if (norm || excl) acc /= wsum;
	STORE(Y, yi, acc);
}
