// halfmath.cl: the fp16 arithmetic of the phone prefill GEMMs (matmul.cl's
// mm_reg, quant.cl's qmt_mm), written once as macros so that the same
// kernel text can also run on a device without half arithmetic. It is
// prepended to those two families' sources (after common.cl), and to
// norm.cl's, whose norm_group has a half path for its normalise-and-affine
// step.
//
// A kernel's half path computes with hreal / hreal4 values, HFMA(a, b, c)
// (one fused multiply-add rounded once to half), HCVT(x) (a float rounded
// to the nearest half, ties to even), HTOF(h) (half to float, exact) and
// HLOAD4(p, i) (four halves from fp16 storage, exact). Two builds define
// them, and HM_ON says that one did:
//
//   -DHALF_MATH on a device with cl_khr_fp16 (HM_HALF): hreal is half and
//       HFMA is the fma built-in, which OpenCL requires to be correctly
//       rounded. The launchers ask for this only where the device reports
//       cl_khr_fp16; elsewhere the kernels take their fp32 path.
//   -DHALF_EMU (HM_EMU, tests only): hreal is a float that always holds a
//       half value, and HFMA forms a*b + c exactly (the product of two
//       halves fits a float's significand; TwoSum keeps the sum's rounding
//       error) and rounds it to half in integer steps. Each operation then
//       yields the value half arithmetic yields, so PoCL, which has no
//       half arithmetic, executes the half path's exact sequence of
//       roundings, and a Go emulation (halfemu_test.go) can be compared
//       with it bit for bit.

#if defined(HALF_EMU)
#define HM_EMU 1
#define HM_ON 1
typedef float hreal;
typedef float4 hreal4;

// hm_round returns the half nearest to x + e (ties to even) as a float.
// x is a float, e an error term below half of x's float ulp (so e only
// matters when x lies exactly halfway between two halves); |x| below 2^-14
// rounds on the subnormal grid of 2^-24, |x| above 65504 to infinity.
static inline float hm_round(float x, float e) {
	const uint b = as_uint(x);
	const uint ax = b & 0x7fffffffu;
	if (ax == 0u || ax >= 0x7f800000u) return x;
	const int ex = (int)(ax >> 23);
	// Significand bits below the half's last place: 13 for a normal half,
	// one more per binade below 2^-14 (the grid stays 2^-24 there).
	const int drop = max(13, 126 - ex);
	if (drop > 24) return as_float(b & 0x80000000u);
	const uint sig = (ax & 0x7fffffu) | 0x800000u;
	const uint mid = 1u << (drop - 1);
	const uint rest = sig & ((mid << 1) - 1u);
	uint q = sig >> drop;
	// e pushes a tie away from zero when it has x's sign, towards it
	// otherwise; with no e a tie goes to the even neighbour.
	const int push = e == 0.0f ? 0 : ((e > 0.0f) == (x > 0.0f) ? 1 : -1);
	if (rest > mid || (rest == mid && (push > 0 || (push == 0 && (q & 1u)))))
		q++;
	float r = ldexp((float)q, ex - 150 + drop);
	if (r > 65504.0f) r = INFINITY;
	return (b >> 31) ? -r : r;
}

// hm_fma is fma on halves held in floats.
static inline float hm_fma(float a, float b, float c) {
	const float p = a * b; // exact: two 11-bit significands, no underflow
	const float s = p + c;
	const float v = s - p;
	const float e = (p - (s - v)) + (c - v); // s + e == p + c exactly
	return hm_round(s, e);
}

#define HFMA(a, b, c) hm_fma((a), (b), (c))
#define HCVT(x) hm_round((x), 0.0f)
#define HTOF(h) (h)
#define HZERO 0.0f
#define HLOAD4(p, i) vload_half4(0, (p) + (i))
// HE0M4(n): 1 + n/16 for the 4-bit integers n of a uint4.
#define HE0M4(n) as_float4(((n) << 19) | 0x3F800000u)

#elif defined(HALF_MATH) && defined(cl_khr_fp16)
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define HM_HALF 1
#define HM_ON 1
typedef half hreal;
typedef half4 hreal4;
#define HFMA(a, b, c) fma((a), (b), (c))
#define HCVT(x) ((half)(x))
#define HTOF(h) ((float)(h))
#define HZERO 0.0h
#define HLOAD4(p, i) vload4(0, (p) + (i))
#define HE0M4(n) as_half4(convert_ushort4(((n) << 6) | 0x3C00u))
#endif
