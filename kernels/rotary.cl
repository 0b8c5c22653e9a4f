// rotary.cl: rotary position embedding as Hugging Face-style exports write
// it, out = x*cos + rotate_half(x)*sin over the first rd elements of each
// row of x, the rest of the row passed through.
//
// One launch rotates up to two tensors that share the tables (attention's
// queries and keys): items below rowsA*perA go to tensor A, the rest to B.
// Each tensor is contiguous [d0, d1, d2, D]; cos and sin are indexed by
// element strides over those four dims (0 where they broadcast), the last
// one (c3, s3) over the rotated part only. An item handles, in row
// r = item / per (per = rd/2 + D - rd), either the pair (j, j + rd/2) of
// the rotated part or one pass-through element: it reads every element it
// writes before writing, and no other item touches them, so out may alias
// x.
__kernel void rotary(__global const store_t* c, int co,
                     __global const store_t* s, int so,
                     int rd, int c3, int s3,
                     __global const store_t* xa, int xao, __global store_t* ya, int yao,
                     int rowsA, int d1A, int d2A, int DA,
                     int c0A, int c1A, int c2A, int s0A, int s1A, int s2A,
                     __global const store_t* xb, int xbo, __global store_t* yb, int ybo,
                     int rowsB, int d1B, int d2B, int DB,
                     int c0B, int c1B, int c2B, int s0B, int s1B, int s2B) {
	int gid = get_global_id(0);
	int h = rd / 2;
	int perA = h + DA - rd;
	__global const store_t* x = xa;
	__global store_t* y = ya;
	int xo = xao, yo = yao, rows = rowsA, d1 = d1A, d2 = d2A, D = DA, per = perA;
	int c0 = c0A, c1 = c1A, c2 = c2A, s0 = s0A, s1 = s1A, s2 = s2A;
	if (gid >= rowsA * perA) {
		gid -= rowsA * perA;
		x = xb; y = yb; xo = xbo; yo = ybo; rows = rowsB; d1 = d1B; d2 = d2B; D = DB;
		per = h + DB - rd;
		c0 = c0B; c1 = c1B; c2 = c2B; s0 = s0B; s1 = s1B; s2 = s2B;
	}
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
