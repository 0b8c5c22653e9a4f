package kernels

import (
	_ "embed"
	"fmt"
	"math"
	"strings"

	"github.com/tlite/tlite/opencl"
)

//go:embed matmul.cl
var matmulSrc string

//go:embed halfmath.cl
var halfMathSrc string

// matmulProg is the matmul family's program text: the half arithmetic
// layer its mm_reg shares with quant.cl's qmt_mm, then matmul.cl.
func matmulProg() string { return matmulProgSrc }

// matmulProgSrc is joined once: a decode step launches the family a few
// hundred times, and joining per launch copied the whole text each time.
var matmulProgSrc = halfMathSrc + "\n" + matmulSrc

// halfEmu, when set by a test, builds the half paths of mm_reg, qmt_mm
// and norm_group with halfmath.cl's exact emulation (-DHALF_EMU) on any device, so that
// their sequence of half roundings executes on PoCL, which has no half
// arithmetic, and can be compared with the Go emulation bit for bit.
var halfEmu bool

// MatMulBatch lays out a batch of matrix products in up to two nested levels:
// product z = z0*Count[1] + z1 (z0 < Count[0], z1 < Count[1]) reads A at
// z0*A[0] + z1*A[1] elements past its start, and likewise B, C and the bias.
// A stride of 0 broadcasts the operand over that level. Two levels express
// the numpy broadcasts that occur in models (see MatMulBatchPlan) and a
// grouped convolution's (image, group) pairs. The zero value is one product.
type MatMulBatch struct {
	Count         [2]int // products per level; 0 is taken as 1
	A, B, C, Bias [2]int // element strides per level
}

func (b MatMulBatch) counts() (int, int) {
	c0, c1 := b.Count[0], b.Count[1]
	if c0 == 0 {
		c0 = 1
	}
	if c1 == 0 {
		c1 = 1
	}
	return c0, c1
}

// MatMulParams describes C = Alpha * op(A) * op(B) + Beta * Bias, where op(A)
// is M x K, op(B) is K x N and C is M x N, for ONNX MatMul, Gemm and Linear
// alike.
//
// M, N and K are the active sizes; the row strides LDA, LDB and LDC are
// separate so that an elastic sub-model can use the top-left corner of a
// larger weight in place (LDB stays the stored row length while N and K
// shrink). A zero stride means packed: the row length of the operand as
// stored (K or M for A, N or K for B, N for C).
type MatMulParams struct {
	M, N, K int
	// TransA: A is stored K x M. TransB: B is stored N x K, the layout of a
	// Linear weight and of Gemm with transB=1.
	TransA, TransB bool
	LDA, LDB, LDC  int
	// Scaled selects Alpha and Beta as given; otherwise both are 1, a plain
	// product (plus bias). ONNX Gemm sets Scaled.
	Scaled      bool
	Alpha, Beta float32
	// Bias, when Bias.Mem is set, is added as Beta * Bias[m*BiasRowStride +
	// n*BiasColStride]: a length-N vector broadcast over rows is strides
	// (0, 1), a full M x N matrix (N, 1), a column (1, 0), a scalar (0, 0).
	Bias                         Buf
	BiasRowStride, BiasColStride int
	Batch                        MatMulBatch
	// Weight is the storage of B and Bias; A and C use the launch's storage.
	// Weights are often fp16 in an fp32 model. When B is an activation (the
	// second operand of an attention MatMul), set it to the launch's storage.
	Weight Storage
}

// MatMulPlan is how one ONNX MatMul of packed (row-major contiguous) operands
// maps onto MatMulParams; see MatMulBatchPlan.
type MatMulPlan struct {
	M, N, K  int
	Batch    MatMulBatch
	OutShape []int
}

// Params returns the plan as launch parameters for a plain product; callers
// add Weight, a bias or transposes.
func (p MatMulPlan) Params() MatMulParams {
	return MatMulParams{M: p.M, N: p.N, K: p.K, Batch: p.Batch}
}

// MatMulBatchPlan applies numpy matmul rules to the shapes of A and B: a
// 1-D A is a row vector [1, K] and a 1-D B a column [K, 1], the extra axis
// being dropped from the output; the batch dims (all but the last two)
// broadcast against each other, right-aligned. The broadcast batch is then
// flattened into MatMulBatch's two levels by merging adjacent dims that every
// operand steps through contiguously (or broadcasts over together) and
// dropping size-1 dims. When B has no batch of its own (a shared weight), A's
// batch folds into M, so a [b, s, K] x [K, N] product is one M = b*s launch
// that reads the weight once.
//
// Shapes whose broadcast needs three or more levels (A [2,1,3,...] against B
// [1,4,1,...], say) are refused with an error naming them; the engine can
// then materialise the broadcast operand (Expand) first.
func MatMulBatchPlan(aShape, bShape []int) (MatMulPlan, error) {
	fail := func(format string, args ...any) (MatMulPlan, error) {
		return MatMulPlan{}, fmt.Errorf("kernels: MatMul of %v and %v: %s", aShape, bShape, fmt.Sprintf(format, args...))
	}
	if len(aShape) == 0 || len(bShape) == 0 {
		return fail("operands must have at least one dimension")
	}
	for _, d := range append(append([]int{}, aShape...), bShape...) {
		if d < 0 {
			return fail("negative dimension")
		}
	}
	var m, k, k2, n int
	var aBatch, bBatch []int
	dropM, dropN := false, false
	if len(aShape) == 1 {
		m, k, dropM = 1, aShape[0], true
	} else {
		m, k = aShape[len(aShape)-2], aShape[len(aShape)-1]
		aBatch = aShape[:len(aShape)-2]
	}
	if len(bShape) == 1 {
		k2, n, dropN = bShape[0], 1, true
	} else {
		k2, n = bShape[len(bShape)-2], bShape[len(bShape)-1]
		bBatch = bShape[:len(bShape)-2]
	}
	if k != k2 {
		return fail("inner dimensions differ (%d vs %d)", k, k2)
	}
	rank := max(len(aBatch), len(bBatch))
	dimAt := func(s []int, i int) int { // i indexes the right-aligned batch
		j := i - (rank - len(s))
		if j < 0 {
			return 1
		}
		return s[j]
	}
	out := make([]int, rank)
	for i := range out {
		da, db := dimAt(aBatch, i), dimAt(bBatch, i)
		switch {
		case da == db, db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return fail("batch dimension %d: %d and %d do not broadcast", i, da, db)
		}
	}
	// Packed strides of each operand over the broadcast batch, 0 where the
	// operand has size 1 (or no dim) there.
	type level struct{ count, a, b, c int }
	levels := make([]level, rank)
	sa, sb, sc := m*k, k*n, m*n
	for i := rank - 1; i >= 0; i-- {
		da, db := dimAt(aBatch, i), dimAt(bBatch, i)
		levels[i] = level{count: out[i], c: sc}
		if da != 1 {
			levels[i].a = sa
		}
		if db != 1 {
			levels[i].b = sb
		}
		sa *= da
		sb *= db
		sc *= out[i]
	}
	var merged []level
	for _, lv := range levels {
		if lv.count == 1 {
			continue
		}
		if j := len(merged) - 1; j >= 0 {
			p := merged[j]
			if p.a == lv.a*lv.count && p.b == lv.b*lv.count && p.c == lv.c*lv.count {
				merged[j] = level{count: p.count * lv.count, a: lv.a, b: lv.b, c: lv.c}
				continue
			}
		}
		merged = append(merged, lv)
	}
	plan := MatMulPlan{M: m, N: n, K: k}
	for _, d := range out {
		plan.OutShape = append(plan.OutShape, d)
	}
	if !dropM {
		plan.OutShape = append(plan.OutShape, m)
	}
	if !dropN {
		plan.OutShape = append(plan.OutShape, n)
	}
	for _, d := range out {
		if d == 0 {
			plan.M = 0 // an empty output: nothing to launch
			return plan, nil
		}
	}
	switch {
	case len(merged) == 1 && merged[0].b == 0:
		// A shared B: A's (necessarily full) batch is just more rows.
		plan.M *= merged[0].count
	case len(merged) > 2:
		return fail("batch broadcast needs %d levels, at most 2 are supported", len(merged))
	default:
		for i, lv := range merged {
			j := i + 2 - len(merged) // one level goes inner
			plan.Batch.Count[j] = lv.count
			plan.Batch.A[j], plan.Batch.B[j], plan.Batch.C[j] = lv.a, lv.b, lv.c
		}
	}
	return plan, nil
}

// gemm is a product with every stride explicit, the form the kernels take.
type gemm struct {
	a, b, c, bias     Buf
	at, bt, ct, biasT Storage
	hasBias           bool
	am, ak, bk, bn    int
	cm, cn, brm, brn  int
	sA, sB, sC, sD    [2]int
	m, n, k, nb0, nb1 int
	alpha, beta       float32
}

// transposed is the same product as C^T = B^T A^T, which lets one kernel
// layout serve the mirrored case (a 1x1 convolution, whose output runs
// contiguously along M, becomes a product contiguous along N).
func (g gemm) transposed() gemm {
	t := g
	t.a, t.b = g.b, g.a
	t.at, t.bt = g.bt, g.at
	t.am, t.ak = g.bn, g.bk
	t.bk, t.bn = g.ak, g.am
	t.cm, t.cn = g.cn, g.cm
	t.brm, t.brn = g.brn, g.brm
	t.sA, t.sB = g.sB, g.sA
	t.m, t.n = g.n, g.m
	return t
}

// resolve turns p into an explicit-stride product on a, b, c.
// hasBias says whether a bias operand is present (MatMul: p.Bias.Mem set).
func (p MatMulParams) resolve(s Storage, a, b, c Buf, hasBias bool) (gemm, error) {
	if p.M < 0 || p.N < 0 || p.K < 0 {
		return gemm{}, fmt.Errorf("negative size M=%d N=%d K=%d", p.M, p.N, p.K)
	}
	g := gemm{a: a, b: b, c: c, bias: p.Bias, at: s, bt: p.Weight, ct: s, biasT: p.Weight,
		m: p.M, n: p.N, k: p.K, alpha: 1, beta: 1}
	if p.Scaled {
		g.alpha, g.beta = p.Alpha, p.Beta
	}
	g.hasBias = hasBias && g.beta != 0
	if !g.hasBias {
		g.beta = 0
	}
	lda, ldb, ldc := p.LDA, p.LDB, p.LDC
	if p.TransA {
		if lda == 0 {
			lda = p.M
		}
		if lda < p.M {
			return gemm{}, fmt.Errorf("LDA %d < M %d for a transposed A", lda, p.M)
		}
		g.am, g.ak = 1, lda
	} else {
		if lda == 0 {
			lda = p.K
		}
		if lda < p.K {
			return gemm{}, fmt.Errorf("LDA %d < K %d", lda, p.K)
		}
		g.am, g.ak = lda, 1
	}
	if p.TransB {
		if ldb == 0 {
			ldb = p.K
		}
		if ldb < p.K {
			return gemm{}, fmt.Errorf("LDB %d < K %d for a transposed B", ldb, p.K)
		}
		g.bk, g.bn = 1, ldb
	} else {
		if ldb == 0 {
			ldb = p.N
		}
		if ldb < p.N {
			return gemm{}, fmt.Errorf("LDB %d < N %d", ldb, p.N)
		}
		g.bk, g.bn = ldb, 1
	}
	if ldc == 0 {
		ldc = p.N
	}
	if ldc < p.N {
		return gemm{}, fmt.Errorf("LDC %d < N %d", ldc, p.N)
	}
	g.cm, g.cn = ldc, 1
	g.brm, g.brn = p.BiasRowStride, p.BiasColStride
	g.nb0, g.nb1 = p.Batch.counts()
	g.sA, g.sB, g.sC, g.sD = p.Batch.A, p.Batch.B, p.Batch.C, p.Batch.Bias
	for _, s := range [][2]int{g.sA, g.sB, g.sC, g.sD} {
		if s[0] < 0 || s[1] < 0 {
			return gemm{}, fmt.Errorf("negative batch stride")
		}
	}
	if g.brm < 0 || g.brn < 0 {
		return gemm{}, fmt.Errorf("negative bias stride")
	}
	return g, nil
}

// empty reports a product with no outputs, which launches nothing.
func (g gemm) empty() bool { return g.m == 0 || g.n == 0 || g.nb0 == 0 || g.nb1 == 0 }

// stridedEnd is one past the largest element offset a strided operand touches.
func stridedEnd(dims ...int) int {
	end := 1
	for i := 0; i+1 < len(dims); i += 2 {
		end += (dims[i] - 1) * dims[i+1]
	}
	return end
}

// bufUse is one tensor a product touches: its buffer, storage and one past
// the largest element offset it reaches.
type bufUse struct {
	name string
	buf  Buf
	st   Storage
	end  int
}

// operands lists what g reads and writes (nothing for an empty product).
func (g gemm) operands() []bufUse {
	if g.empty() {
		return nil
	}
	ops := []bufUse{{"C", g.c, g.ct, stridedEnd(g.m, g.cm, g.n, g.cn, g.nb0, g.sC[0], g.nb1, g.sC[1])}}
	if g.k > 0 {
		ops = append(ops,
			bufUse{"A", g.a, g.at, stridedEnd(g.m, g.am, g.k, g.ak, g.nb0, g.sA[0], g.nb1, g.sA[1])},
			bufUse{"B", g.b, g.bt, stridedEnd(g.k, g.bk, g.n, g.bn, g.nb0, g.sB[0], g.nb1, g.sB[1])})
	}
	if g.hasBias {
		ops = append(ops, bufUse{"bias", g.bias, g.biasT, stridedEnd(g.m, g.brm, g.n, g.brn, g.nb0, g.sD[0], g.nb1, g.sD[1])})
	}
	return ops
}

// checkBufUses verifies that every element a list of uses touches lies inside
// its buffer, and that the kernels' 32-bit indices cannot overflow.
func checkBufUses(ops []bufUse) error {
	for _, o := range ops {
		if o.buf.Mem == nil {
			return fmt.Errorf("%s has no buffer", o.name)
		}
		if o.buf.Off < 0 {
			return fmt.Errorf("%s: negative offset %d", o.name, o.buf.Off)
		}
		end := o.buf.Off + o.end
		if end > math.MaxInt32 {
			return fmt.Errorf("%s: element index %d overflows the kernels' 32-bit indexing", o.name, end)
		}
		if have := o.buf.Mem.Size() / o.st.Size(); end > have {
			return fmt.Errorf("%s: needs %d %s elements from the buffer's start, the buffer holds %d", o.name, end, o.st, have)
		}
	}
	return nil
}

// checkLen is checkBufUses for host slices (the references).
func (g gemm) checkLen(a, b, c, bias int) error {
	return checkSliceLens(g.operands(), map[string]int{"A": a, "B": b, "C": c, "bias": bias})
}

// checkSliceLens is checkBufUses for the references' host slices: have
// maps each operand's name to its slice's length.
func checkSliceLens(ops []bufUse, have map[string]int) error {
	for _, o := range ops {
		if o.end > have[o.name] {
			return fmt.Errorf("%s needs %d elements, slice holds %d", o.name, o.end, have[o.name])
		}
	}
	return nil
}

// mmForce, when set by a test, names the kernel variant to use regardless of
// shape and device, so the GPU variants are exercised on a CPU device too.
var mmForce string

// cpuGroup is the work-group size along dimension 0 that launches of
// self-guarding kernels use on CPU devices (measured: 1 to 8 run alike).
const cpuGroup = 4

// cpuGroups returns the global and local size for a kernel that checks its
// own bounds. On a CPU device the work-group is fixed, cpuGroup work-items
// along dimension 0: PoCL compiles a kernel afresh for each local size it
// meets, and its own choice varies with the global size, which would cost a
// compile for nearly every new shape. Elsewhere the driver chooses (nil).
func (l *Lib) cpuGroups(global []int) ([]int, []int) {
	if l.info().Type != "CPU" {
		return global, nil
	}
	g := append([]int(nil), global...)
	g[0] = roundUp(g[0], cpuGroup)
	local := []int{cpuGroup, 1, 1}[:len(g)]
	for i := 1; i < len(local); i++ {
		local[i] = 1
	}
	return g, local
}

// MatMul computes C = alpha*op(A)*op(B) + beta*Bias as p describes; A and C
// are stored in s, B and the bias in p.Weight. An empty product (M, N or a
// batch count of 0) launches nothing. Work is enqueued, not finished.
func (l *Lib) MatMul(s Storage, a, b, c Buf, p MatMulParams) error {
	g, err := p.resolve(s, a, b, c, p.Bias.Mem != nil)
	if err == nil {
		err = checkBufUses(g.operands())
	}
	if err != nil {
		return fmt.Errorf("kernels: MatMul %dx%dx%d: %w", p.M, p.N, p.K, err)
	}
	if err := l.gemm(g); err != nil {
		return fmt.Errorf("kernels: MatMul %dx%dx%d: %w", p.M, p.N, p.K, err)
	}
	return nil
}

// pick chooses the kernel for g, possibly as its transpose. On CPUs the
// register-blocked kernels without local memory win; on GPUs the
// local-memory ones (see matmul.cl).
func (l *Lib) pick(g gemm, gpu bool) (gemm, string) {
	if mmForce != "" {
		if strings.HasPrefix(mmForce, "mm_axpy") && g.bn != 1 {
			g = g.transposed()
		}
		return g, mmForce
	}
	dot := func(g gemm) bool { return g.ak == 1 && g.bk == 1 }
	axpy := func(g gemm) bool { return g.bn == 1 }
	if gpu {
		switch {
		case g.m > 4 && dot(g):
			return g, "mm_reg"
		case g.m > 4:
			return g, "mm_tiled"
		case dot(g) && g.m == 1:
			return g, "mm_gemv_c4"
		case dot(g):
			return g, "mm_gemv_wg"
		case !axpy(g) && axpy(g.transposed()):
			// Adjacent work-items take adjacent columns: make that the
			// contiguous direction.
			return g.transposed(), "mm_naive"
		}
		return g, "mm_naive"
	}
	if dot(g) {
		// Register tiles by vector width: mm_dot's float16 tiles fill
		// AVX-512's 32 registers; with 8-wide vectors (AVX2: 16 registers)
		// they spill on every step, and mm_dot8 keeps 12 accumulators.
		narrow := l.info().NativeFloatWidth == 8
		switch {
		case g.m == 1:
			// Decode is bound by the weight's bandwidth: a float8 1x6
			// tile ran no faster here (3 alternated rounds, mixed).
			return g, "mm_dot_1x8"
		case narrow:
			return g, "mm_dot8_4x3"
		case 8*g.k*g.bt.Size() <= mmDotL1:
			return g, "mm_dot_2x8"
		}
		return g, "mm_dot_4x4"
	}
	if !axpy(g) && axpy(g.transposed()) {
		g = g.transposed()
	}
	if axpy(g) {
		if g.m == 1 {
			return g, "mm_axpy_1x16"
		}
		return g, "mm_axpy_4x4"
	}
	return g, "mm_naive"
}

// PrefersTransB reports whether constant weights should be stored [N, K]
// (MatMulParams.TransB, the Linear layout) rather than [K, N] on this
// device, for products whose B is a weight the caller may lay out once
// ahead of time (an engine session at Open).
//
// CPUs: yes. [N, K] feeds mm_dot, whose work-items keep CB whole weight
// rows in L1. Measured on PoCL (one thread, weights read from memory as in
// a model: BenchmarkMatMulViT), [N, K] ran decode (M = 1, 768 and 3072
// wide) at 13.5-17 GFLOP/s against 11.5-13.7 for [K, N] (mm_axpy), and
// prefill (M = 50-512, ten shapes) 3-31% faster on eight, 6% and 11%
// slower on 50x768x768 and 77x2048x512 (single runs; the machine was
// shared, so differences under ~10% are noise).
//
// GPUs: yes as well. mm_tiled stages either layout through local memory
// with coalesced reads, so prefill does not care, and decode then takes
// mm_gemv_wg (a work-group per output, coalesced along K) instead of
// mm_naive. This is by construction, not measured: no GPU was at hand.
func (l *Lib) PrefersTransB() bool {
	return true
}

// mmDotL1 is the most bytes of B (CB rows of K) that mm_dot_2x8 keeps
// in L1 for a whole row chunk; wider products take mm_dot_4x4, whose
// slice is half as tall (see matmul.cl).
const mmDotL1 = 32 << 10

// mmChunkRows is how many rows of A one CPU work-item covers at most: its
// slice of B is read from memory once and reused from cache for all of
// them. 64 rows of A at K = 768 are 192 KiB, which stay in a 1 MiB L2 next
// to the slice; BenchmarkMatMulViT at M = 512 ran alike for 32 to 128.
const mmChunkRows = 64

// rowChunks returns the number of row chunks (global size 1) of a CPU
// launch whose rb-row blocks cover m rows, with cols work-items across and
// batch products: chunks of up to mmChunkRows rows, split further while
// there are fewer than 4 work-groups per compute unit to share out.
func rowChunks(m, rb, cols, batch, units int) int {
	blocks := (m + rb - 1) / rb
	chunks := (m + mmChunkRows - 1) / mmChunkRows
	groups := func(ch int) int { return (cols + cpuGroup - 1) / cpuGroup * ch * batch }
	for chunks < blocks && groups(chunks) < 4*units {
		chunks *= 2
	}
	return min(chunks, blocks)
}

// options is the build for g's storages; gpu selects the GPU kernel set.
func (g gemm) options(gpu bool) string {
	var o []string
	if gpu {
		o = append(o, "-DMM_GPU")
	}
	if g.at == F16 {
		o = append(o, "-DA_F16")
	}
	if g.bt == F16 {
		o = append(o, "-DB_F16")
	}
	if g.biasT == F16 {
		o = append(o, "-DBIAS_F16")
	}
	if g.ct == F16 {
		o = append(o, "-DSTORAGE_F16")
	}
	return strings.Join(o, " ")
}

// regOptions are mm_reg's extra build options and its rows per
// work-item: half arithmetic (with -cl-mad-enable) where the device has
// cl_khr_fp16 and A and B are both fp16, or its exact emulation when a
// test asks (halfEmu). The half path takes 2 rows (MR): at 4 it kept 84
// VGPRs live on the register gate's target, at 2 58; the fp32 path keeps
// 62 at 4.
func (g gemm) regOptions(fp16 bool) (string, int) {
	switch {
	case g.at != F16 || g.bt != F16:
		return "", 4
	case halfEmu:
		return halfEmuMMOptions, 2
	case fp16:
		return " -DHALF_MATH -cl-mad-enable -DMR=2", 2
	}
	return "", 4
}

// halfEmuMMOptions build the half paths' exact emulation of mm_reg (2
// rows per item) and mm_gemv_c4 (MM_HALF): one option string for both, so
// that their tests share one program build.
const halfEmuMMOptions = " -DHALF_EMU -DMR=2 -DMM_HALF"

// gemvOptions are mm_gemv_c4's extra build options: the subgroup
// reduction where the device has subgroups, half arithmetic (with
// -cl-mad-enable) where it has cl_khr_fp16 and both operands are fp16. A
// test's halfEmu builds the half path's exact emulation with the
// local-memory reduction, whose order of float additions is fixed (a
// subgroup reduction's is not).
func (g gemm) gemvOptions(subgroups, fp16 bool) string {
	half := g.at == F16 && g.bt == F16
	switch {
	case half && halfEmu:
		return halfEmuMMOptions
	case half && fp16:
		o := " -DMM_HALF -DHALF_MATH -cl-mad-enable"
		if subgroups {
			o += " -DMM_SG"
		}
		return o
	case subgroups:
		return " -DMM_SG"
	}
	return ""
}

// mmImages reports whether mm_gemv_c4 reads g's weight through an image
// over its buffer, and in which texel format: on a device where images are
// faster (imagesFaster), when every row and batch entry of B starts on a
// four-element texel, the last row's texels lie inside the buffer, and the
// buffer fits the device's largest image; and until the driver refused
// one (mmImgBroken).
func (l *Lib) mmImages(g gemm) (opencl.ImageFormat, bool) {
	f := opencl.ImageUint32x4
	if g.bt == F16 {
		f = opencl.ImageHalfx4
	}
	if l.mmImgBroken || g.b.Mem == nil || g.bk != 1 || !l.imagesFaster() {
		return f, false
	}
	for _, v := range []int{g.b.Off, g.bn, g.sB[0], g.sB[1]} {
		if v%4 != 0 {
			return f, false
		}
	}
	texels := l.dev.ImageTexels(f, g.b.Mem.Size())
	last := g.b.Off + (g.nb0-1)*g.sB[0] + (g.nb1-1)*g.sB[1] + (g.n-1)*g.bn + roundUp(g.k, 4)
	return f, texels > 0 && last <= 4*texels
}

// mmBlocking reads RB and CB (or VB) from a kernel name ending in "_RxC".
func mmBlocking(name string) (int, int) {
	var r, c int
	fmt.Sscanf(name[strings.LastIndexByte(name, '_')+1:], "%dx%d", &r, &c)
	return r, c
}

// gemm launches a checked product.
func (l *Lib) gemm(g gemm) error {
	if g.empty() {
		return nil
	}
	info := l.info()
	g, name := l.pick(g, info.Type == "GPU")
	gpu := name == "mm_reg" || name == "mm_tiled" || name == "mm_gemv_wg" || name == "mm_gemv_c4" || name == "mm_naive" && info.Type == "GPU"
	opts := g.options(gpu)
	var bArg any = g.b.Mem // B as a kernel argument: its buffer, or an image over it
	regRows := 0           // mm_reg's rows per work-item
	switch name {
	case "mm_gemv_c4":
		opts += g.gemvOptions(info.Subgroups, info.FP16)
		if f, ok := l.mmImages(g); ok {
			if im, err := g.b.Mem.Image1D(f); err == nil {
				opts += " -DMM_IMG"
				bArg = im
			} else {
				l.mmImgBroken = true // the driver refused: buffers from now on
			}
		}
	case "mm_reg":
		o, rows := g.regOptions(info.FP16)
		opts, regRows = opts+o, rows
	}
	k, err := l.kernel("matmul", matmulProg(), opts, name)
	if err != nil {
		return err
	}
	batch := g.nb0 * g.nb1
	var global, local []int
	switch {
	case name == "mm_reg":
		global = []int{(g.m + regRows - 1) / regRows, (g.n + 3) / 4, batch}
	case name == "mm_tiled":
		global, local = []int{roundUp(g.n, 64) / 4, roundUp(g.m, 64) / 4, batch}, []int{16, 16, 1}
	case name == "mm_gemv_wg":
		global, local = []int{g.n * 64, (g.m + 3) / 4, batch}, []int{64, 1, 1}
	case name == "mm_gemv_c4":
		global, local = []int{(g.n + 3) / 4 * 64, g.m, batch}, []int{64, 1, 1}
	case name == "mm_naive":
		global = []int{g.n, g.m, batch}
	case strings.HasPrefix(name, "mm_axpy_"):
		rb, vb := mmBlocking(name)
		cols := (g.n + 16*vb - 1) / (16 * vb)
		global = []int{cols, rowChunks(g.m, rb, cols, batch, info.ComputeUnits), batch}
	default: // mm_dot_RxC
		rb, cb := mmBlocking(name)
		cols := (g.n + cb - 1) / cb
		global = []int{cols, rowChunks(g.m, rb, cols, batch, info.ComputeUnits), batch}
	}
	if local == nil {
		global, local = l.cpuGroups(global)
	}
	bias := g.bias
	if !g.hasBias {
		bias = g.c // a valid placeholder; beta == 0 keeps it unread
	}
	i32 := func(v int) int32 { return int32(v) }
	return l.dev.Launch(k, global, local,
		g.a.Mem, i32(g.a.Off), i32(g.am), i32(g.ak), i32(g.sA[0]), i32(g.sA[1]),
		bArg, i32(g.b.Off), i32(g.bk), i32(g.bn), i32(g.sB[0]), i32(g.sB[1]),
		g.c.Mem, i32(g.c.Off), i32(g.cm), i32(g.cn), i32(g.sC[0]), i32(g.sC[1]),
		bias.Mem, i32(bias.Off), i32(g.brm), i32(g.brn), i32(g.sD[0]), i32(g.sD[1]),
		i32(g.m), i32(g.n), i32(g.k), i32(g.nb1), g.alpha, g.beta)
}

// MatMulRef is the pure-Go reference for MatMul: a, b, bias and c are host
// copies of the tensors from their Buf offsets on (bias nil for none; p.Bias
// is ignored), accumulated in float64. It checks p as MatMul does and writes
// only the elements MatMul writes.
func MatMulRef(a, b, bias, c []float32, p MatMulParams) error {
	g, err := p.resolve(F32, Buf{}, Buf{}, Buf{}, bias != nil)
	if err == nil {
		err = g.checkLen(len(a), len(b), len(c), len(bias))
	}
	if err != nil {
		return fmt.Errorf("kernels: MatMulRef %dx%dx%d: %w", p.M, p.N, p.K, err)
	}
	if g.empty() {
		return nil
	}
	for z0 := 0; z0 < g.nb0; z0++ {
		for z1 := 0; z1 < g.nb1; z1++ {
			oa, ob := z0*g.sA[0]+z1*g.sA[1], z0*g.sB[0]+z1*g.sB[1]
			oc, od := z0*g.sC[0]+z1*g.sC[1], z0*g.sD[0]+z1*g.sD[1]
			for m := 0; m < g.m; m++ {
				for n := 0; n < g.n; n++ {
					var acc float64
					for k := 0; k < g.k; k++ {
						acc += float64(a[oa+m*g.am+k*g.ak]) * float64(b[ob+k*g.bk+n*g.bn])
					}
					v := float64(g.alpha) * acc
					if g.hasBias {
						v += float64(g.beta) * float64(bias[od+m*g.brm+n*g.brn])
					}
					c[oc+m*g.cm+n*g.cn] = float32(v)
				}
			}
		}
	}
	return nil
}
