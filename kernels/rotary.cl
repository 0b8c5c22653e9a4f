// rotary.cl: rotary position embedding as Hugging Face-style exports write
// it, out = x*cos + rotate_half(x)*sin over the first rd elements of each
// row of x, the rest of the row passed through.
//
// x and out are contiguous [d0, d1, d2, D]; cos and sin are indexed by
// element strides over those four dims (0 where they broadcast), the last
// one over the rotated part only. Work-item gid handles, in row gid / per
// (per = rd/2 + D - rd), either the pair (j, j + rd/2) of the rotated part
// or one pass-through element: each item reads every element it writes
// before writing, and no other item touches them, so out may alias x.
__kernel void rotary(__global const store_t* x, int xo,
                     __global const store_t* c, int co,
                     __global const store_t* s, int so,
                     __global store_t* y, int yo,
                     int rows, int d1, int d2, int D, int rd,
                     int c0, int c1, int c2, int c3,
                     int s0, int s1, int s2, int s3) {
	int gid = get_global_id(0);
	int h = rd / 2;
	int per = h + D - rd;
	int row = gid / per;
	if (row >= rows) return;
	int j = gid - row * per;
	int base = row * D;
	if (j >= h) {
		int k = base + rd + (j - h);
		STORE(y, yo + k, LOAD(x, xo + k));
		return;
	}
	int i2 = row % d2;
	int t = row / d2;
	int i1 = t % d1;
	int i0 = t / d1;
	int cb = co + i0 * c0 + i1 * c1 + i2 * c2;
	int sb = so + i0 * s0 + i1 * s1 + i2 * s2;
	float a = LOAD(x, xo + base + j);
	float b = LOAD(x, xo + base + j + h);
	// rotate_half(x) is (-x[h:], x[:h]): the low half takes -b*sin, the
	// high half +a*sin.
	float lo = a * LOAD(c, cb + j * c3) - b * LOAD(s, sb + j * s3);
	float hi = b * LOAD(c, cb + (j + h) * c3) + a * LOAD(s, sb + (j + h) * s3);
	STORE(y, yo + base + j, lo);
	STORE(y, yo + base + j + h, hi);
}
