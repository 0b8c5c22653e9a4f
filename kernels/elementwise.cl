// elementwise.cl: helpers shared by the element-wise chains that
// elementwise.go generates. The generated kernels follow this text; every
// chain compiles it, so it stays small and free of kernels.
//
// Value representation in a chain: float and float16 values are held as
// float, every integer type as long (wrapped back to its own width after each
// operation), bool as int 0/1.

// Integer division truncates toward zero like C (and ONNX runtimes). A zero
// divisor yields 0 and LONG_MIN / -1 wraps, where C would trap: a kernel must
// not crash the device on data it was handed.
long ew_idiv(long a, long b) {
	if (b == 0) return 0;
	if (b == -1) return (long)(0UL - (ulong)a);
	return a / b;
}

// C remainder, sign of the dividend: ONNX Mod with fmod=1 on integers.
long ew_irem(long a, long b) {
	if (b == 0 || b == -1) return 0;
	return a % b;
}

// Python remainder, sign of the divisor: ONNX Mod with fmod=0.
long ew_imod(long a, long b) {
	long r = ew_irem(a, b);
	if (r != 0 && ((r < 0) != (b < 0))) r += b;
	return r;
}

// Integer power by squaring with wrap-around. A negative exponent gives the
// truncated reciprocal: 1 for base 1, +-1 for base -1, 0 otherwise.
long ew_ipow(long b, long e) {
	if (e < 0) {
		if (b == 1) return 1;
		if (b == -1) return (e & 1) ? -1 : 1;
		return 0;
	}
	ulong r = 1, x = (ulong)b;
	while (e > 0) {
		if (e & 1) r *= x;
		x *= x;
		e >>= 1;
	}
	return (long)r;
}

// Float to integer: truncation toward zero, saturating at the long range and
// NaN to 0, so out-of-range values are defined rather than undefined.
long ew_f2l(float x) { return convert_long_sat_rtz(x); }

// ew_round_half rounds x to the nearest binary16 value (ties to even) and
// returns it as float: a Cast to float16 inside a chain must round exactly as
// vstore_half_rte does, without cl_khr_fp16 arithmetic.
float ew_round_half(float x) {
	uint b = as_uint(x);
	uint a = b & 0x7fffffffu;
	uint s = b & 0x80000000u;
	if (a > 0x7f800000u) return x;                      // NaN
	if (a >= 0x477ff000u) return as_float(s | 0x7f800000u); // >= 65520: inf
	if (a < 0x38800000u) {
		// Below 2^-14 binary16 is subnormal with a fixed quantum of 2^-24;
		// scaling by a power of two is exact, rint rounds ties to even.
		return rint(x * 0x1p24f) * 0x1p-24f;
	}
	uint r = a + 0xfffu + ((a >> 13) & 1u);
	return as_float(s | (r & ~0x1fffu));
}

// NaN-propagating max and min (numpy semantics); fmax/fmin would drop NaN.
float ew_fmax(float a, float b) { return (a > b || isnan(a)) ? a : b; }
float ew_fmin(float a, float b) { return (a < b || isnan(a)) ? a : b; }

float ew_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// log(1+exp(x)) without overflow for large x.
float ew_softplus(float x) {
	return x > 0.0f ? x + log1p(exp(-x)) : log1p(exp(x));
}

// clamp(alpha*x+beta, 0, 1) keeping NaN.
float ew_hardsigmoid(float x, float alpha, float beta) {
	float t = alpha * x + beta;
	return t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
}

// erf and erfc are computed here rather than with the built-ins: PoCL's are
// 20-50x slower than exp, and Gelu is the activation of most transformers.
//
// ew_erfc_pos2 is erfc(z) for z >= 0, given zz = z*z, as t*exp(-zz + P(t))
// with t = 2/(2+z):
// log(erfc(z)/t) + z*z is smooth in t on (0, 1], and P is a degree-9 fit of
// it (weighted least squares towards minimax, made for tlite with mpmath),
// 1e-7 relative error in exact arithmetic. NaN passes through; +inf gives 0.
float ew_erfc_pos2(float z, float zz) {
	float t = 2.0f / (2.0f + z);
	float p = 0x1.599f28p-3f;
	p = fma(p, t, -0x1.a06c18p-1f);
	p = fma(p, t, 0x1.79273ep+0f);
	p = fma(p, t, -0x1.1f0074p+0f);
	p = fma(p, t, 0x1.15dd72p-2f);
	p = fma(p, t, -0x1.78c38p-3f);
	p = fma(p, t, 0x1.8ace64p-4f);
	p = fma(p, t, 0x1.7f1aa2p-2f);
	p = fma(p, t, 0x1.00017cp+0f);
	p = fma(p, t, -0x1.43f89cp+0f);
	return t * exp(p - zz);
}

float ew_erfc_pos(float z) { return ew_erfc_pos2(z, z * z); }

// erf: the Taylor series 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
// through n = 8 below 0.75 (truncation < 1e-8 relative), 1 - erfc above,
// where erfc < 0.29 keeps the subtraction's error small.
float ew_erf(float x) {
	// Both branches are computed and selected: a branch here defeats
	// PoCL's vectoriser and costs more than the polynomial.
	float z = fabs(x);
	float x2 = x * x;
	float p = 0x1.b9e6cap-20f;
	p = fma(p, x2, -0x1.f4d25cp-17f);
	p = fma(p, x2, 0x1.f9a326p-14f);
	p = fma(p, x2, -0x1.c02db4p-11f);
	p = fma(p, x2, 0x1.565bcep-8f);
	p = fma(p, x2, -0x1.b82ce4p-6f);
	p = fma(p, x2, 0x1.ce2f22p-4f);
	p = fma(p, x2, -0x1.812746p-2f);
	p = fma(p, x2, 0x1.20dd76p+0f);
	float big = copysign(1.0f - ew_erfc_pos(z), x);
	return z < 0.75f ? x * p : big;
}

// The x*gate(x) activations below return -0 at x = -inf, their limit,
// where the plain formula would compute -inf * 0 = NaN.

// Gelu with erf, written with erfc: 1 + erf(x/sqrt2) = erfc(-x/sqrt2) has
// no cancellation for negative x. z*z is formed as x*x/2 (one rounding
// instead of three), which matters in exp for large negative x.
// 1/sqrt(2) = 0x1.6a09e6p-1.
float ew_gelu_erf(float x) {
	float e = ew_erfc_pos2(fabs(x) * 0x1.6a09e6p-1f, 0.5f * x * x);
	float r = 0.5f * x * (x <= 0.0f ? e : 2.0f - e);
	return x == -INFINITY ? -0.0f : r;
}

// Gelu's tanh approximation, using 0.5*(1 + tanh(u)) = 1/(1 + exp(-2u)) to
// avoid cancellation for negative x. sqrt(2/pi) = 0x1.988454p-1.
float ew_gelu_tanh(float x) {
	float u = 0x1.988454p-1f * (x + 0.044715f * x * x * x);
	return x == -INFINITY ? -0.0f : x / (1.0f + exp(-2.0f * u));
}

float ew_quickgelu(float x, float alpha) {
	return x == -INFINITY ? -0.0f : x * ew_sigmoid(alpha * x);
}

float ew_hardswish(float x) {
	return x == -INFINITY ? -0.0f : x * ew_hardsigmoid(x, 0x1.555556p-3f, 0.5f);
}

float ew_mish(float x) {
	return x == -INFINITY ? -0.0f : x * tanh(ew_softplus(x));
}
