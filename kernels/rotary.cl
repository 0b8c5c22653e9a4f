// rotary.cl: rotary position embedding as Hugging Face-style exports write
// it, out = x*cos + rotate_half(x)*sin over the first rd elements of each
// row of x, the rest of the row passed through.
//
// One launch rotates up to two tensors that share the tables (attention's
// queries and keys): tensor A's rows come first, then B's. Each tensor is
// contiguous [d0, d1, d2, D]; cos and sin are indexed by element strides
// over those four dims (0 where they broadcast), the last one (c3, s3) over
// the rotated part only. Every element is written by the work-item that
// read it, after reading it, so out may alias x.
//
// Two styles share the arguments: rotary_rows, one item per row looping
// over it (CPU devices, where per-item index arithmetic costs more than
// the data), and rotary_elems, one item per pair (j, j + rd/2) or per
// pass-through element (GPUs).

#define ROTARY_ARGS \
	__global const store_t* c, int co, __global const store_t* s, int so, \
	int rd, int c3, int s3, \
	__global const store_t* xa, int xao, __global store_t* ya, int yao, \
	int rowsA, int d1A, int d2A, int DA, \
	int c0A, int c1A, int c2A, int s0A, int s1A, int s2A, \
	__global const store_t* xb, int xbo, __global store_t* yb, int ybo, \
	int rowsB, int d1B, int d2B, int DB, \
	int c0B, int c1B, int c2B, int s0B, int s1B, int s2B

// ROTARY_PICK selects tensor A for row < rowsA, else tensor B with row
// counted from its first, and derives the row's offsets: base (x and y),
// cb and sb (the tables).
#define ROTARY_PICK(row) \
	__global const store_t* x = xa; \
	__global store_t* y = ya; \
	int xo = xao, yo = yao, rows = rowsA, d1 = d1A, d2 = d2A, D = DA; \
	int c0 = c0A, c1 = c1A, c2 = c2A, s0 = s0A, s1 = s1A, s2 = s2A; \
	if (row >= rowsA) { \
		row -= rowsA; \
		x = xb; y = yb; xo = xbo; yo = ybo; rows = rowsB; d1 = d1B; d2 = d2B; D = DB; \
		c0 = c0B; c1 = c1B; c2 = c2B; s0 = s0B; s1 = s1B; s2 = s2B; \
	} \
	int i2 = row % d2; \
	int i1 = (row / d2) % d1; \
	int i0 = row / d2 / d1; \
	int base = row * D; \
	int cb = co + i0 * c0 + i1 * c1 + i2 * c2; \
	int sb = so + i0 * s0 + i1 * s1 + i2 * s2;

// rotary_pair rotates elements j and j + h of the row at base: rotate_half
// is (-x[h:], x[:h]), so the low half takes -b*sin, the high half +a*sin.
inline void rotary_pair(__global const store_t* x, int xo, __global store_t* y, int yo,
                        __global const store_t* c, __global const store_t* s,
                        int base, int cb, int sb, int c3, int s3, int j, int h) {
	float a = LOAD(x, xo + base + j);
	float b = LOAD(x, xo + base + j + h);
	float lo = a * LOAD(c, cb + j * c3) - b * LOAD(s, sb + j * s3);
	float hi = b * LOAD(c, cb + (j + h) * c3) + a * LOAD(s, sb + (j + h) * s3);
	STORE(y, yo + base + j, lo);
	STORE(y, yo + base + j + h, hi);
}

#ifdef STORAGE_F16
#define LOAD4(p, i) vload_half4(0, (p) + (i))
#define STORE4(p, i, v) vstore_half4_rte((v), 0, (p) + (i))
#else
#define LOAD4(p, i) vload4(0, (p) + (i))
#define STORE4(p, i, v) vstore4((v), 0, (p) + (i))
#endif

__kernel void rotary_rows(ROTARY_ARGS) {
	int row = get_global_id(0);
	if (row >= rowsA + rowsB) return;
	ROTARY_PICK(row)
	int h = rd / 2;
	int j = 0;
	if (c3 == 1 && s3 == 1) {
		// Tables along the row: four pairs a step, in vector loads (which
		// need only element alignment).
		for (; j + 4 <= h; j += 4) {
			float4 a = LOAD4(x, xo + base + j), b = LOAD4(x, xo + base + j + h);
			STORE4(y, yo + base + j, a * LOAD4(c, cb + j) - b * LOAD4(s, sb + j));
			STORE4(y, yo + base + j + h, b * LOAD4(c, cb + j + h) + a * LOAD4(s, sb + j + h));
		}
	}
	for (; j < h; j++) rotary_pair(x, xo, y, yo, c, s, base, cb, sb, c3, s3, j, h);
	for (int k = base + rd; k < base + D; k++) STORE(y, yo + k, LOAD(x, xo + k));
}

__kernel void rotary_elems(ROTARY_ARGS) {
	int gid = get_global_id(0);
	int h = rd / 2;
	int perA = h + DA - rd, perB = h + DB - rd;
	int row, j;
	if (gid < rowsA * perA) {
		row = gid / perA;
		j = gid - row * perA;
	} else {
		gid -= rowsA * perA;
		if (gid >= rowsB * perB) return;
		row = gid / perB;
		j = gid - row * perB;
		row += rowsA;
	}
	ROTARY_PICK(row)
	if (j >= h) {
		int k = base + rd + (j - h);
		STORE(y, yo + k, LOAD(x, xo + k));
		return;
	}
	rotary_pair(x, xo, y, yo, c, s, base, cb, sb, c3, s3, j, h);
}
