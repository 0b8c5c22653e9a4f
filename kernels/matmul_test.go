package kernels

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// laRand returns n values in [-1, 1) already rounded to storage s, so the
// device (which holds them in s) and the reference see the same numbers.
func laRand(seed int64, n int, s Storage) []float32 {
	v := randVec(seed, n)
	for i := range v {
		v[i] = roundTrip(s, v[i])
	}
	return v
}

// laClose compares a device result stored in s with an fp32 reference:
// within 1e-4 of the output's scale (summation order differs), plus one
// rounding step of fp16 storage.
func laClose(t testing.TB, what string, s Storage, got, want []float32) {
	t.Helper()
	scale := 0.0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	w := append([]float32(nil), want...)
	rtol := 0.0
	if s == F16 {
		for i := range w {
			w[i] = roundTrip(F16, w[i])
		}
		rtol = 1.5e-3
	}
	assertClose(t, what, got, w, 1e-4*scale+1e-6, rtol)
}

// mmRun launches p on random inputs and returns the whole output buffer and
// its reference. C starts out random, so elements the product must not touch
// (past LDC's row end, outside the batch) are checked to survive.
func mmRun(t *testing.T, s Storage, p MatMulParams, withBias bool) (got, want []float32) {
	t.Helper()
	g, err := p.resolve(s, Buf{}, Buf{}, Buf{}, withBias)
	if err != nil {
		t.Fatal(err)
	}
	ends := map[string]int{"A": 1, "B": 1, "C": 1, "bias": 1}
	for _, o := range g.operands() {
		ends[o.name] = o.end
	}
	a := laRand(1, ends["A"], s)
	b := laRand(2, ends["B"], p.Weight)
	c0 := laRand(3, ends["C"], s)
	var bias []float32
	if withBias {
		bias = laRand(4, ends["bias"], p.Weight)
		p.Bias = upload(t, p.Weight, bias)
	}
	cb := upload(t, s, c0)
	if err := testLib.MatMul(s, upload(t, s, a), upload(t, p.Weight, b), cb, p); err != nil {
		t.Fatal(err)
	}
	want = append([]float32(nil), c0...)
	if err := MatMulRef(a, b, bias, want, p); err != nil {
		t.Fatal(err)
	}
	return download(t, s, cb, len(c0)), want
}

// mmStorages are the (activation, weight) storage pairs products are tested in.
var mmStorages = [][2]Storage{{F32, F32}, {F32, F16}, {F16, F16}, {F16, F32}}

func TestMatMulRefByHand(t *testing.T) {
	// [1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50]; with alpha 2, bias row
	// [1 -1] times beta 0.5: [38.5 43.5; 86.5 99.5].
	a, b, bias := []float32{1, 2, 3, 4}, []float32{5, 6, 7, 8}, []float32{1, -1}
	c := make([]float32, 4)
	if err := MatMulRef(a, b, nil, c, MatMulParams{M: 2, N: 2, K: 2}); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "plain", c, []float32{19, 22, 43, 50}, 0, 0)
	p := MatMulParams{M: 2, N: 2, K: 2, Scaled: true, Alpha: 2, Beta: 0.5, BiasColStride: 1}
	if err := MatMulRef(a, b, bias, c, p); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "gemm", c, []float32{38.5, 43.5, 86.5, 99.5}, 0, 0)
	// TransB: B stored [N, K] = [5 7; 6 8] is the same product.
	if err := MatMulRef(a, []float32{5, 7, 6, 8}, nil, c, MatMulParams{M: 2, N: 2, K: 2, TransB: true}); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "transB", c, []float32{19, 22, 43, 50}, 0, 0)
}

func TestMatMulShapes(t *testing.T) {
	shapes := [][3]int{{1, 1, 1}, {1, 17, 33}, {2, 65, 130}, {3, 33, 17}, {4, 130, 65}, {5, 3, 33}, {17, 65, 1}, {33, 17, 130}, {65, 130, 33}}
	for _, st := range mmStorages {
		for _, sh := range shapes {
			layouts := [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}}
			if st[0] != st[1] {
				// Both operands transposed run as the transposed product, which
				// for mixed storages is one more program to build (~5 s of a
				// cold test run) for the same source: TestConvShapes covers a
				// weight-first product with mixed storages.
				layouts = layouts[:3]
			}
			for _, tr := range layouts {
				p := MatMulParams{M: sh[0], N: sh[1], K: sh[2], TransA: tr[0], TransB: tr[1], Weight: st[1]}
				name := fmt.Sprintf("%s/w%s/%dx%dx%d/tA=%v/tB=%v", st[0], st[1], sh[0], sh[1], sh[2], tr[0], tr[1])
				got, want := mmRun(t, st[0], p, false)
				laClose(t, name, st[0], got, want)
			}
		}
	}
}

// TestMatMulVariants forces every kernel variant, the GPU ones included, onto
// the layouts it accepts.
func TestMatMulVariants(t *testing.T) {
	defer func() { mmForce = "" }()
	shapes := [][3]int{{1, 17, 33}, {3, 65, 17}, {4, 33, 130}, {5, 130, 65}, {70, 67, 20}}
	variants := map[string][][2]bool{ // name -> (transA, transB) layouts
		"mm_dot_1x8": {{false, true}}, "mm_dot_2x8": {{false, true}}, "mm_dot_4x4": {{false, true}},
		"mm_dot8_4x3":  {{false, true}},
		"mm_axpy_1x16": {{false, false}, {true, false}}, "mm_axpy_4x4": {{false, false}, {true, false}},
		"mm_naive":   {{false, false}, {true, true}},
		"mm_gemv_wg": {{false, true}},
		"mm_gemv_c4": {{false, true}},
		"mm_tiled":   {{false, false}, {false, true}, {true, false}, {true, true}},
		"mm_reg":     {{false, true}},
	}
	for name, layouts := range variants {
		for _, st := range [][2]Storage{{F32, F32}, {F16, F16}} {
			for _, tr := range layouts {
				for _, sh := range shapes {
					mmForce = name
					p := MatMulParams{M: sh[0], N: sh[1], K: sh[2], TransA: tr[0], TransB: tr[1], Weight: st[1],
						Scaled: true, Alpha: 0.75, Beta: -1.5, BiasColStride: 1}
					got, want := mmRun(t, st[0], p, true)
					laClose(t, fmt.Sprintf("%s/%s/%v/%v", name, st[0], sh, tr), st[0], got, want)
				}
			}
		}
	}
}

func TestMatMulBiasAndStrides(t *testing.T) {
	biases := map[string][2]int{"row": {0, 1}, "full": {37, 1}, "column": {1, 0}, "scalar": {0, 0}}
	for name, bs := range biases {
		for _, st := range mmStorages {
			for _, sh := range [][3]int{{1, 33, 65}, {9, 35, 20}} {
				// Padded leading dimensions: elements between rows must survive.
				p := MatMulParams{M: sh[0], N: sh[1], K: sh[2], TransB: true, LDA: 70, LDB: 66, LDC: 37,
					Weight: st[1], Scaled: true, Alpha: 1.25, Beta: 0.5, BiasRowStride: bs[0], BiasColStride: bs[1]}
				got, want := mmRun(t, st[0], p, true)
				laClose(t, fmt.Sprintf("%s/%s/w%s/%v", name, st[0], st[1], sh), st[0], got, want)
			}
		}
	}
	// Gemm with transA and an unscaled bias.
	p := MatMulParams{M: 7, N: 19, K: 23, TransA: true, BiasColStride: 1}
	got, want := mmRun(t, F32, p, true)
	laClose(t, "transA+bias", F32, got, want)
}

// TestMatMulElasticPrefix: the top-left N' x K' corner of a stored weight,
// used in place through LDB, gives the product with that corner stored on
// its own.
func TestMatMulElasticPrefix(t *testing.T) {
	const M, N, K, n2, k2 = 3, 96, 80, 50, 33
	for _, transB := range []bool{true, false} {
		for _, st := range mmStorages {
			s, ws := st[0], st[1]
			for _, m := range []int{1, M, 40, 130} {
				big := laRand(5, N*K, ws)
				small := make([]float32, n2*k2)
				for n := 0; n < n2; n++ {
					for k := 0; k < k2; k++ {
						if transB {
							small[n*k2+k] = big[n*K+k]
						} else {
							small[k*n2+n] = big[k*N+n]
						}
					}
				}
				ldb := N
				if transB {
					ldb = K
				}
				// A's rows are K long as the big model's activations would be;
				// only the first k2 columns take part.
				a := upload(t, s, laRand(6, m*K, s))
				c1, c2 := alloc(t, s, m*n2), alloc(t, s, m*n2)
				pBig := MatMulParams{M: m, N: n2, K: k2, LDA: K, LDB: ldb, TransB: transB, Weight: ws}
				pSmall := MatMulParams{M: m, N: n2, K: k2, LDA: K, TransB: transB, Weight: ws}
				if err := testLib.MatMul(s, a, upload(t, ws, big), c1, pBig); err != nil {
					t.Fatal(err)
				}
				if err := testLib.MatMul(s, a, upload(t, ws, small), c2, pSmall); err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("transB=%v/%s/w%s/M=%d", transB, s, ws, m)
				assertClose(t, what, download(t, s, c1, m*n2), download(t, s, c2, m*n2), 0, 0)
			}
		}
	}
}

// TestMatMulRowChunks covers the CPU kernels' row loop: work-items that
// take several row blocks, a last chunk that ends early or holds nothing,
// chunks split for parallelism when the columns are few, and batches.
func TestMatMulRowChunks(t *testing.T) {
	for _, c := range []struct {
		m, n, k, batch int
	}{
		{130, 40, 50, 1},  // 3 chunks of 11 blocks of 4 rows, the last short
		{200, 5, 33, 1},   // 2 column blocks: chunks split to 8; N < 16 for mm_axpy
		{70, 37, 19, 3},   // batched
		{257, 130, 17, 1}, // 5 chunks, one row past a block boundary
	} {
		for _, st := range [][2]Storage{{F32, F32}, {F16, F16}, {F32, F16}} {
			for _, transB := range []bool{true, false} {
				p := MatMulParams{M: c.m, N: c.n, K: c.k, TransB: transB, Weight: st[1],
					Scaled: true, Alpha: 0.5, Beta: 2, BiasColStride: 1}
				if c.batch > 1 {
					p.Batch = MatMulBatch{Count: [2]int{1, c.batch}, A: [2]int{0, c.m * c.k},
						B: [2]int{0, c.n * c.k}, C: [2]int{0, c.m * c.n}, Bias: [2]int{0, c.n}}
				}
				got, want := mmRun(t, st[0], p, true)
				laClose(t, fmt.Sprintf("%v/%s/w%s/transB=%v", c, st[0], st[1], transB), st[0], got, want)
			}
		}
	}
	// The split itself: every block in exactly one chunk, as MM_ROW_CHUNK
	// assigns them, and enough work-groups unless every chunk is one block.
	for _, m := range []int{1, 3, 4, 5, 50, 64, 65, 130, 512, 1000} {
		for _, cols := range []int{1, 3, 8, 96, 768} {
			for _, rb := range []int{1, 2, 4} {
				blocks := (m + rb - 1) / rb
				ch := rowChunks(m, rb, cols, 1, 2)
				if ch < 1 || ch > blocks {
					t.Fatalf("m %d rb %d cols %d: %d chunks for %d blocks", m, rb, cols, ch, blocks)
				}
				per := (blocks + ch - 1) / ch
				covered := 0
				for id := 0; id < ch; id++ {
					covered += max(0, min(id*per+per, blocks)-id*per)
				}
				if covered != blocks {
					t.Errorf("m %d rb %d cols %d: %d chunks cover %d of %d blocks", m, rb, cols, ch, covered, blocks)
				}
				if groups := (cols + cpuGroup - 1) / cpuGroup * ch; groups < 8 && ch < blocks {
					t.Errorf("m %d rb %d cols %d: %d chunks make only %d work-groups", m, rb, cols, ch, groups)
				}
				if per*rb > mmChunkRows && ch < blocks && cols >= 8*cpuGroup {
					t.Errorf("m %d rb %d cols %d: %d rows per chunk with %d columns blocks", m, rb, cols, per*rb, cols)
				}
			}
		}
	}
}

func TestMatMulBatchPlan(t *testing.T) {
	cases := []struct {
		a, b   []int
		out    []int
		m      int
		count  [2]int
		sa, sb [2]int
	}{
		// 2-D: one product.
		{a: []int{3, 4}, b: []int{4, 5}, out: []int{3, 5}, m: 3},
		// A shared weight: the batch folds into M.
		{a: []int{2, 3, 6, 4}, b: []int{4, 5}, out: []int{2, 3, 6, 5}, m: 36},
		// Both batched alike: one merged level.
		{a: []int{2, 3, 6, 4}, b: []int{2, 3, 4, 5}, out: []int{2, 3, 6, 5}, m: 6, count: [2]int{0, 6}, sa: [2]int{0, 24}, sb: [2]int{0, 20}},
		// B broadcast over the outer dim only: two levels.
		{a: []int{2, 3, 6, 4}, b: []int{3, 4, 5}, out: []int{2, 3, 6, 5}, m: 6, count: [2]int{2, 3}, sa: [2]int{72, 24}, sb: [2]int{0, 20}},
		// A broadcast over B's batch.
		{a: []int{6, 4}, b: []int{7, 4, 5}, out: []int{7, 6, 5}, m: 6, count: [2]int{0, 7}, sb: [2]int{0, 20}},
		// Outer product of batches: [3,1] x [1,2].
		{a: []int{3, 1, 6, 4}, b: []int{1, 2, 4, 5}, out: []int{3, 2, 6, 5}, m: 6, count: [2]int{3, 2}, sa: [2]int{24, 0}, sb: [2]int{0, 20}},
		// 1-D operands, numpy style.
		{a: []int{4}, b: []int{4, 5}, out: []int{5}, m: 1},
		{a: []int{2, 6, 4}, b: []int{4}, out: []int{2, 6}, m: 12},
		{a: []int{4}, b: []int{3, 4, 5}, out: []int{3, 5}, m: 1, count: [2]int{0, 3}, sb: [2]int{0, 20}},
		{a: []int{4}, b: []int{4}, out: []int{}, m: 1},
	}
	for _, c := range cases {
		pl, err := MatMulBatchPlan(c.a, c.b)
		if err != nil {
			t.Fatalf("%v x %v: %v", c.a, c.b, err)
		}
		if fmt.Sprint(pl.OutShape) != fmt.Sprint(c.out) || pl.M != c.m || pl.Batch.Count != c.count ||
			pl.Batch.A != c.sa || pl.Batch.B != c.sb {
			t.Errorf("%v x %v: got out %v M %d batch %+v; want out %v M %d count %v A %v B %v",
				c.a, c.b, pl.OutShape, pl.M, pl.Batch, c.out, c.m, c.count, c.sa, c.sb)
		}
	}
	for _, bad := range [][2][]int{
		{{3, 4}, {5, 6}},                   // K mismatch
		{{2, 3, 4}, {3, 4, 5}},             // batch 2 vs 3
		{{2, 1, 3, 6, 4}, {1, 4, 1, 4, 5}}, // three levels
		{{}, {4}},                          // scalar
	} {
		if _, err := MatMulBatchPlan(bad[0], bad[1]); err == nil {
			t.Errorf("%v x %v: no error", bad[0], bad[1])
		} else if !strings.Contains(err.Error(), fmt.Sprint(bad[0])) {
			t.Errorf("%v x %v: error %q does not name the shapes", bad[0], bad[1], err)
		}
	}
}

// TestMatMulBatched runs planned broadcasts on the device against the
// reference, and checks the plan against numpy semantics computed directly.
func TestMatMulBatched(t *testing.T) {
	for _, c := range [][2][]int{
		{{2, 3, 5, 7}, {3, 7, 9}},
		{{3, 1, 2, 7}, {1, 2, 7, 17}},
		{{2, 3, 5, 7}, {7, 9}},
		{{5, 7}, {4, 7, 9}},
		{{7}, {2, 7, 3}},
		{{2, 4, 7}, {7}},
	} {
		pl, err := MatMulBatchPlan(c[0], c[1])
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range storages {
			na, nb, nc := shapeProd(c[0]), shapeProd(c[1]), shapeProd(pl.OutShape)
			a, b := laRand(7, na, s), laRand(8, nb, s)
			cb := alloc(t, s, nc)
			p := pl.Params()
			p.Weight = s
			if err := testLib.MatMul(s, upload(t, s, a), upload(t, s, b), cb, p); err != nil {
				t.Fatal(err)
			}
			want := numpyMatMul(a, b, c[0], c[1])
			laClose(t, fmt.Sprintf("%v x %v %s", c[0], c[1], s), s, download(t, s, cb, nc), want)
		}
	}
}

func shapeProd(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// numpyMatMul is numpy.matmul written out from its definition, independent of
// MatMulBatchPlan.
func numpyMatMul(a, b []float32, as, bs []int) []float32 {
	as, bs = append([]int(nil), as...), append([]int(nil), bs...)
	if len(as) == 1 {
		as = []int{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int{bs[0], 1}
	}
	for len(as) < len(bs) {
		as = append([]int{1}, as...)
	}
	for len(bs) < len(as) {
		bs = append([]int{1}, bs...)
	}
	r := len(as)
	m, k, n := as[r-2], as[r-1], bs[r-1]
	out := make([]int, r-2)
	for i := range out {
		out[i] = max(as[i], bs[i])
	}
	var res []float32
	idx := make([]int, r-2)
	for z := 0; z < shapeProd(out); z++ {
		rem := z
		for i := r - 3; i >= 0; i-- {
			idx[i] = rem % out[i]
			rem /= out[i]
		}
		oa, ob := 0, 0
		for i := 0; i < r-2; i++ {
			ia, ib := idx[i], idx[i]
			if as[i] == 1 {
				ia = 0
			}
			if bs[i] == 1 {
				ib = 0
			}
			oa = oa*as[i] + ia
			ob = ob*bs[i] + ib
		}
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var acc float64
				for q := 0; q < k; q++ {
					acc += float64(a[(oa*m+i)*k+q]) * float64(b[(ob*k+q)*n+j])
				}
				res = append(res, float32(acc))
			}
		}
	}
	return res
}

func TestMatMulEmptyAndErrors(t *testing.T) {
	s := F32
	a, b := upload(t, s, laRand(1, 64, s)), upload(t, s, laRand(2, 64, s))
	c := upload(t, s, []float32{7, 7, 7, 7})
	before := testLib.Device().Stats().Launches
	empty, err := MatMulBatchPlan([]int{2, 0, 3, 4}, []int{4, 5})
	if err != nil || shapeProd(empty.OutShape) != 0 {
		t.Fatalf("empty batch plan: %+v, %v", empty, err)
	}
	for _, p := range []MatMulParams{{M: 0, N: 4, K: 4}, {M: 4, N: 0, K: 4}, empty.Params()} {
		if err := testLib.MatMul(s, a, b, c, p); err != nil {
			t.Fatal(err)
		}
	}
	if n := testLib.Device().Stats().Launches - before; n != 0 {
		t.Errorf("empty products launched %d kernels", n)
	}
	assertClose(t, "untouched", download(t, s, c, 4), []float32{7, 7, 7, 7}, 0, 0)
	// K = 0: the output is the bias alone (zeros without one).
	bias := upload(t, s, []float32{1, 2})
	if err := testLib.MatMul(s, a, b, c, MatMulParams{M: 2, N: 2, K: 0, Bias: bias, BiasColStride: 1}); err != nil {
		t.Fatal(err)
	}
	assertClose(t, "K=0", download(t, s, c, 4), []float32{1, 2, 1, 2}, 0, 0)
	for name, p := range map[string]MatMulParams{
		"A too small":    {M: 8, N: 4, K: 16},
		"C too small":    {M: 4, N: 4, K: 4, LDC: 9},
		"LDA < K":        {M: 2, N: 2, K: 4, LDA: 3},
		"negative":       {M: -1, N: 2, K: 2},
		"bias too small": {M: 2, N: 2, K: 2, Bias: bias, BiasRowStride: 2, BiasColStride: 1},
	} {
		if err := testLib.MatMul(s, a, b, c, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestMatMulPickByVectorWidth checks that CPU devices choose their K-contiguous
// kernels by native float vector width: the float8 tiles where vectors are 8
// wide (AVX2), the float16 ones where they are 16 wide or not reported.
func TestMatMulPickByVectorWidth(t *testing.T) {
	for _, tc := range []struct {
		width, m, k int
		want        string
	}{
		{8, 1, 768, "mm_dot_1x8"},
		{8, 128, 512, "mm_dot8_4x3"},
		{8, 128, 3072, "mm_dot8_4x3"},
		{16, 1, 768, "mm_dot_1x8"},
		{16, 128, 512, "mm_dot_2x8"},
		{16, 128, 3072, "mm_dot_4x4"},
		{0, 128, 512, "mm_dot_2x8"},
	} {
		inf := testLib.info()
		inf.Type, inf.NativeFloatWidth = "CPU", tc.width
		l := &Lib{dev: testLib.dev, as: &inf}
		g, err := MatMulParams{M: tc.m, N: 64, K: tc.k, TransB: true}.resolve(F32, Buf{}, Buf{}, Buf{}, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, got := l.pick(g, false); got != tc.want {
			t.Errorf("width %d, %dx64x%d: picked %s, want %s", tc.width, tc.m, tc.k, got, tc.want)
		}
	}
}
