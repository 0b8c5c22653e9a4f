package kernels

import (
	_ "embed"
	"fmt"
	"math"
	"strings"

	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/opencl"
)

//go:embed quant.cl
var quantSrc string

// quantProg is the quant family's program text: the half arithmetic layer
// its qmt_mm shares with matmul.cl's mm_reg, then quant.cl.
func quantProg() string { return quantProgSrc }

// quantProgSrc is joined once (see matmulProgSrc).
var quantProgSrc = halfMathSrc + "\n" + quantSrc

// qmtRows and qmtCols are qmt_mm's rows and columns per work-item
// (quant.cl's QMR and QMC) by default.
const (
	qmtRows = 4
	qmtCols = 2
)

// qmtBlock is qmt_mm's rows and columns per work-item for g on a device
// with (fp16) or without cl_khr_fp16. The half path at groups of 32
// (group parameters every chunk) kept 66 VGPRs live at 4 x 2 on the
// register gate's target, and INT4's at groups of 96 (a group that is not
// a power of two) 66 too, so groups that are not a multiple of 64 take
// 2 x 2 (43-46 VGPRs). Each output's sums are the same either way.
func (g qmm) qmtBlock(fp16 bool) (rows, cols int) {
	if g.w.Format.FourBit() && g.s == F16 && (fp16 || halfEmu) && g.w.Group%64 != 0 {
		return 2, 2
	}
	return qmtRows, qmtCols
}

// QBuf is a 4-bit packed weight on the device, laid out as graph/quant
// documents (quant.Packed): logical shape [K, N], codes column-major by
// output column with groups along K, and a separate array of per-group
// parameter pairs. The two arrays may share one buffer (UploadQ puts them in
// one) or come from a memory-mapped file (quant.Header gives the offsets).
type QBuf struct {
	Format quant.Format
	Group  int
	// Layout is how the codes and parameters are ordered: QLayoutColumns
	// (the zero value, graph/quant's own order) or QLayoutTile4.
	Layout QLayout
	// K and N are the stored shape; a launch may use a top-left corner.
	K, N int
	// Q holds the N*K/8 uint32 code words; Q.Off counts 32-bit words.
	Q Buf
	// P holds the N*(K/Group)*2 float32 parameters; P.Off counts floats.
	P Buf
}

// UploadQ copies p to a new device buffer (codes, then parameters) in the
// layout the device's kernels read fastest (QuantLayout) and returns it as
// a QBuf; Release frees it.
func (l *Lib) UploadQ(p *quant.Packed) (QBuf, error) {
	return l.uploadQAs(p, l.QuantLayout())
}

// uploadQAs is UploadQ in a given layout (tests use both on one device).
func (l *Lib) uploadQAs(p *quant.Packed, layout QLayout) (QBuf, error) {
	if err := p.Validate(); err != nil {
		return QBuf{}, fmt.Errorf("kernels: UploadQ: %w", err)
	}
	words, params := p.Words, p.Params
	if layout == QLayoutTile4 {
		words, params = RepackQTile4(p)
	}
	raw := QLayoutBytes(words, params)
	base := 4 * len(words)
	mem, err := l.dev.Alloc(len(raw))
	if err != nil {
		return QBuf{}, fmt.Errorf("kernels: UploadQ [%d, %d] %s: %w", p.K, p.N, p.Format, err)
	}
	if err := l.dev.Write(mem, 0, raw); err != nil {
		mem.Release()
		return QBuf{}, fmt.Errorf("kernels: UploadQ [%d, %d] %s: %w", p.K, p.N, p.Format, err)
	}
	return QBuf{Format: p.Format, Group: p.Group, Layout: layout, K: p.K, N: p.N,
		Q: Buf{Mem: mem, Off: 0}, P: Buf{Mem: mem, Off: base / 4}}, nil
}

// Release frees the buffers of w (once, when Q and P share one).
func (w QBuf) Release() {
	if w.Q.Mem != nil {
		w.Q.Mem.Release()
	}
	if w.P.Mem != nil && w.P.Mem != w.Q.Mem {
		w.P.Mem.Release()
	}
}

// QMatMulParams describes C = A * W[:K, :N] (+ bias) for MatMulQ.
//
// M, N and K are the active sizes: N <= the weight's N and K <= its K, K a
// multiple of the group size, so an elastic sub-model uses the top-left
// corner of a packed weight in place. LDA and LDC are the row strides of A
// ([M, K]) and C ([M, N]); zero means packed (K and N).
type QMatMulParams struct {
	M, N, K  int
	LDA, LDC int
	// Bias, when Bias.Mem is set, is a length-N vector added to every row,
	// stored in BiasStorage.
	Bias        Buf
	BiasStorage Storage
}

// qForce, when set by a test, names the kernel variant to use regardless of
// shape and device, so the GPU variant is exercised on a CPU device too.
var qForce string

// qmm is a checked quantized product with every stride explicit.
type qmm struct {
	w          QBuf
	a, c, bias Buf
	s, bs      Storage
	hasBias    bool
	lda, ldc   int
	m, n, k    int
	// img has qmt_r1 read the weight through images (qImages).
	img bool
}

// resolve checks p against w's shape and fills in default strides.
func (p QMatMulParams) resolve(w QBuf, hasBias bool) (qmm, error) {
	g := qmm{w: w, m: p.M, n: p.N, k: p.K, lda: p.LDA, ldc: p.LDC, hasBias: hasBias, bs: p.BiasStorage}
	if !w.Format.FourBit() {
		return g, fmt.Errorf("unknown weight format %d", uint32(w.Format))
	}
	if w.Layout != QLayoutColumns && w.Layout != QLayoutTile4 {
		return g, fmt.Errorf("unknown weight layout %d", int(w.Layout))
	}
	if w.Group < 32 || w.Group%32 != 0 {
		return g, fmt.Errorf("group size %d is not a positive multiple of 32", w.Group)
	}
	if w.K%w.Group != 0 || w.K <= 0 || w.N <= 0 {
		return g, fmt.Errorf("stored weight [%d, %d] is not a whole number of groups of %d along K", w.K, w.N, w.Group)
	}
	if p.M < 0 || p.N < 0 || p.K < 0 {
		return g, fmt.Errorf("negative size M=%d N=%d K=%d", p.M, p.N, p.K)
	}
	if p.K%w.Group != 0 {
		return g, fmt.Errorf("K = %d is not a multiple of the weight's group size %d (a prefix of a quantized weight must keep whole groups)", p.K, w.Group)
	}
	if p.K > w.K || p.N > w.N {
		return g, fmt.Errorf("active K=%d, N=%d exceed the stored weight [%d, %d]", p.K, p.N, w.K, w.N)
	}
	if g.lda == 0 {
		g.lda = p.K
	}
	if g.ldc == 0 {
		g.ldc = p.N
	}
	if g.lda < p.K {
		return g, fmt.Errorf("LDA %d < K %d", g.lda, p.K)
	}
	if g.ldc < p.N {
		return g, fmt.Errorf("LDC %d < N %d", g.ldc, p.N)
	}
	return g, nil
}

func (g qmm) empty() bool { return g.m == 0 || g.n == 0 }

// ldq and ldp are the stored strides of the codes and parameters: per
// column, or per block of four columns in QLayoutTile4.
func (g qmm) ldq() int {
	if g.w.Layout == QLayoutTile4 {
		return 4 * (g.w.K / 8)
	}
	return g.w.K / 8
}

func (g qmm) ldp() int {
	if g.w.Layout == QLayoutTile4 {
		return 8 * (g.w.K / g.w.Group)
	}
	return 2 * (g.w.K / g.w.Group)
}

// qOperand is one array a quantized product touches: its buffer, element
// size in bytes, and one past the last element it reaches.
type qOperand struct {
	name string
	buf  Buf
	size int
	end  int
}

// qEnd is one past the last element of a rows x cols block with row
// stride ld (1 for an empty block, which touches nothing).
func qEnd(rows, ld, cols int) int {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

// operands lists what g reads and writes (32-bit words for Q and P).
func (g qmm) operands() []qOperand {
	if g.empty() {
		return nil
	}
	ops := []qOperand{{"C", g.c, g.s.Size(), qEnd(g.m, g.ldc, g.n)}}
	if g.k > 0 {
		// Columns, or blocks of four columns, each reading its prefix.
		cols, cw, cp := g.n, g.k/8, 2*(g.k/g.w.Group)
		if g.w.Layout == QLayoutTile4 {
			cols, cw, cp = (g.n+3)/4, 4*cw, 4*cp
		}
		ops = append(ops,
			qOperand{"A", g.a, g.s.Size(), qEnd(g.m, g.lda, g.k)},
			qOperand{"Q (codes)", g.w.Q, 4, qEnd(cols, g.ldq(), cw)},
			qOperand{"P (group parameters)", g.w.P, 4, qEnd(cols, g.ldp(), cp)})
	}
	if g.hasBias {
		ops = append(ops, qOperand{"bias", g.bias, g.bs.Size(), g.n})
	}
	return ops
}

// checkQBufs verifies that every element g touches lies inside its buffer
// and that the kernel's 32-bit indices cannot overflow.
func checkQBufs(ops []qOperand) error {
	for _, o := range ops {
		if o.buf.Mem == nil {
			return fmt.Errorf("%s has no buffer", o.name)
		}
		if o.buf.Off < 0 {
			return fmt.Errorf("%s: negative offset %d", o.name, o.buf.Off)
		}
		end := o.buf.Off + o.end
		if end > math.MaxInt32 {
			return fmt.Errorf("%s: element index %d overflows the kernel's 32-bit indexing", o.name, end)
		}
		if have := o.buf.Mem.Size() / o.size; end > have {
			return fmt.Errorf("%s: needs %d elements of %d bytes from the buffer's start, the buffer holds %d", o.name, end, o.size, have)
		}
	}
	return nil
}

// MatMulQ computes C = A * W[:K, :N] (+ bias) as p describes, with A and C
// stored in s and W a 4-bit packed weight (E0M4 or INT4). On a CPU device,
// fewer than 4 rows (decode) run a work-item per 4 output columns and row;
// more rows (prefill) a work-item per 4 rows x 2 columns, which dequantizes
// each weight vector once per 4 rows, in registers. On a GPU the weight is
// in QLayoutTile4: up to 3 rows run a 64-lane work-group per row and block
// of four columns (qmt_r1), more rows 4 rows x 2 columns per work-item in
// registers (qmt_mm), with half arithmetic in fp16 storage where the
// device has cl_khr_fp16 (E0M4 and INT4 in both); on an Adreno, qmt_r1
// reads the weight through images over its buffers (qImages). K must be
// a multiple of the weight's group size. Work is enqueued, not finished.
func (l *Lib) MatMulQ(s Storage, a Buf, w QBuf, c Buf, p QMatMulParams) error {
	fail := func(err error) error {
		return fmt.Errorf("kernels: MatMulQ %s %dx%dx%d (weight [%d, %d], group %d): %w",
			w.Format, p.M, p.N, p.K, w.K, w.N, w.Group, err)
	}
	g, err := p.resolve(w, p.Bias.Mem != nil)
	if err != nil {
		return fail(err)
	}
	g.a, g.c, g.bias, g.s = a, c, p.Bias, s
	if err := checkQBufs(g.operands()); err != nil {
		return fail(err)
	}
	if g.empty() {
		return nil
	}
	if err := l.qmm(g); err != nil {
		return fail(err)
	}
	return nil
}

// qpick chooses the kernel variant and its (rows, columns) per work-item.
func (l *Lib) qpick(g qmm) (string, int, int) {
	if g.w.Layout == QLayoutTile4 {
		// Only the tiled kernels read this layout (qForce applies only
		// when it names one of them): qmt_r1 a work-group per row for
		// decode, qmt_mm (4 rows by 2 columns per work-item) once there
		// are 4 rows to share each weight decode.
		if qForce == "qmt_r1" {
			return "qmt_r1", 1, 4
		}
		if g.m >= qmtRows || qForce == "qmt_mm" {
			rb, cb := g.qmtBlock(l.info().FP16)
			return "qmt_mm", rb, cb
		}
		return "qmt_r1", 1, 4
	}
	name := qForce
	if name == "" {
		gpu := l.info().Type == "GPU"
		switch {
		case gpu && g.m <= 4:
			name = "qmv_wg"
		case gpu:
			name = "qmm_4x2"
		case g.m < 4:
			name = "qmm_1x4"
		default:
			name = "qmm_4x2"
		}
	}
	if name == "qmv_wg" {
		return name, 0, 0
	}
	return name, int(name[4] - '0'), int(name[6] - '0')
}

// options are the build options of g's program: one program per format,
// group size and storages holds every variant.
func (g qmm) options(fp16, subgroups bool) string {
	o := fmt.Sprintf("-DQG=%d", g.w.Group)
	if g.w.Format == quant.E0M4 {
		o += " -DQ_E0M4"
		switch {
		case g.s == F16 && halfEmu:
			o += " -DQ_HALF -DHALF_EMU"
			if g.w.Layout == QLayoutColumns {
				// The emulation build of the column layout's qmm_*
				// alone: its per-lane emulated fma is slow to compile.
				o += " -DQMM_EMU"
			}
		case fp16 && g.s == F16:
			o += " -DQ_HALF -DHALF_MATH -cl-mad-enable"
		}
		if rb, cb := g.qmtBlock(fp16); rb != qmtRows || cb != qmtCols {
			o += fmt.Sprintf(" -DQMR=%d -DQMC=%d", rb, cb)
		}
	} else {
		o += " -DQ_INT4"
		// INT4 has a half path in the tiled layout's kernels only
		// (qmt_r1 and qmt_mm), which its emulation build holds.
		switch {
		case g.s == F16 && halfEmu && g.w.Layout == QLayoutTile4:
			o += " -DHALF_EMU"
		case fp16 && g.s == F16:
			o += " -DHALF_MATH -cl-mad-enable"
		}
		if rb, cb := g.qmtBlock(fp16); rb != qmtRows || cb != qmtCols {
			o += fmt.Sprintf(" -DQMR=%d -DQMC=%d", rb, cb)
		}
	}
	if g.s == F16 {
		o += " -DSTORAGE_F16"
	}
	if g.hasBias && g.bs == F16 {
		o += " -DBIAS_F16"
	}
	// The half emulation (a test's) keeps qmt_r1's local-memory reduction,
	// whose order of float additions is fixed.
	if g.w.Layout == QLayoutTile4 && subgroups && !halfEmu {
		o += " -DQ_SG"
	}
	return o
}

// imgForce, when set by a test, overrides imagesFaster: 1 reads the
// decode GEMVs' weights (qmt_r1's, mm_gemv_c4's) through images wherever
// the device has them (PoCL does), -1 never.
var imgForce int

// imagesFaster reports whether l's device reads a read-only weight faster
// through images than as global memory. On Adreno GPUs image reads go
// through the texture units and their L1 cache, which Qualcomm's OpenCL
// optimisation guide recommends for read-only data; Mali's and desktop
// GPUs' buffer loads are cached as well, so they keep buffers.
func (l *Lib) imagesFaster() bool {
	inf := l.info()
	switch imgForce {
	case 1:
		return inf.Images
	case -1:
		return false
	}
	return inf.Type == "GPU" && inf.Images && isAdreno(inf)
}

// isAdreno reports whether inf describes a Qualcomm Adreno GPU.
func isAdreno(inf opencl.Info) bool {
	s := strings.ToLower(inf.Name + " " + inf.Vendor)
	return strings.Contains(s, "adreno") || strings.Contains(s, "qualcomm")
}

// qImages reports whether qmt_r1 reads g's codes and parameters through
// images: on a device where images are faster (imagesFaster), for the
// tiled layout, when both arrays start on a four-word texel and their
// buffers fit the device's largest image, and until an image could not be
// made (qImgBroken). Otherwise the kernel reads buffers; both give the
// same sums bit for bit.
func (l *Lib) qImages(g qmm) bool {
	if l.qImgBroken || g.w.Layout != QLayoutTile4 || !l.imagesFaster() {
		return false
	}
	if g.w.Q.Mem == nil || g.w.P.Mem == nil || g.w.Q.Off%4 != 0 || g.w.P.Off%4 != 0 {
		return false
	}
	return l.dev.ImageTexels(opencl.ImageUint32x4, g.w.Q.Mem.Size()) > 0 &&
		l.dev.ImageTexels(opencl.ImageUint32x4, g.w.P.Mem.Size()) > 0
}

// qprogram is the launcher's one choice for g: the build options, the
// kernel, and its rows and columns per work-item. qmm launches it, and the
// build space (quantSpace) asks it for every product the launcher accepts.
func (l *Lib) qprogram(g qmm) (options, name string, rb, cb int) {
	name, rb, cb = l.qpick(g)
	inf := l.info()
	options = g.options(inf.FP16, inf.Subgroups)
	if g.img && name == "qmt_r1" {
		options += " -DQ_IMG"
	}
	return options, name, rb, cb
}

// qmm launches a checked, non-empty product.
func (l *Lib) qmm(g qmm) error {
	g.img = l.qImages(g)
	options, name, rb, cb := l.qprogram(g)
	// The weight's arrays as kernel arguments: buffers, or images over
	// them for the image build.
	var q, p any = g.w.Q.Mem, g.w.P.Mem
	if strings.HasSuffix(options, " -DQ_IMG") {
		qi, err := g.w.Q.Mem.Image1D(opencl.ImageUint32x4)
		var pi *opencl.Image
		if err == nil {
			pi, err = g.w.P.Mem.Image1D(opencl.ImageUint32x4)
		}
		if err != nil {
			// The driver refused: read buffers from now on.
			l.qImgBroken = true
			g.img = false
			options, name, rb, cb = l.qprogram(g)
		} else {
			q, p = qi, pi
		}
	}
	k, err := l.kernel("quant", quantProg(), options, name)
	if err != nil {
		return err
	}
	var global, local []int
	switch name {
	case "qmv_wg":
		global, local = []int{g.n * 64, (g.m + 3) / 4}, []int{64, 1}
	case "qmt_mm":
		global, local = l.cpuGroups([]int{(g.m + rb - 1) / rb, (g.n + cb - 1) / cb})
	case "qmt_r1":
		global, local = []int{(g.n + 3) / 4 * qtLanes, (g.m + rb - 1) / rb}, []int{qtLanes, 1}
	default:
		global = []int{(g.n + cb - 1) / cb, (g.m + rb - 1) / rb}
	}
	bias, hasBias := g.bias, int32(0)
	if g.hasBias {
		hasBias = 1
	} else {
		bias = g.c // a valid placeholder that the kernel never reads
	}
	i32 := func(v int) int32 { return int32(v) }
	return l.dev.Launch(k, global, local,
		q, i32(g.w.Q.Off), i32(g.ldq()), p, i32(g.w.P.Off), i32(g.ldp()),
		g.a.Mem, i32(g.a.Off), i32(g.lda), g.c.Mem, i32(g.c.Off), i32(g.ldc),
		bias.Mem, i32(bias.Off), hasBias, i32(g.m), i32(g.n), i32(g.k))
}

// MatMulQRef is the pure-Go reference for MatMulQ: it dequantizes w (the
// host copy of the packed weight) and multiplies in float64. a, bias and c
// are host copies of the tensors from their offsets on (bias nil for none;
// p.Bias is ignored). It checks p as MatMulQ does and writes only the
// elements MatMulQ writes.
func MatMulQRef(a []float32, w *quant.Packed, bias, c []float32, p QMatMulParams) error {
	if err := w.Validate(); err != nil {
		return fmt.Errorf("kernels: MatMulQRef: %w", err)
	}
	qb := QBuf{Format: w.Format, Group: w.Group, K: w.K, N: w.N}
	g, err := p.resolve(qb, bias != nil)
	if err != nil {
		return fmt.Errorf("kernels: MatMulQRef %dx%dx%d: %w", p.M, p.N, p.K, err)
	}
	if g.empty() {
		return nil
	}
	if need := qEnd(g.m, g.lda, g.k); len(a) < need {
		return fmt.Errorf("kernels: MatMulQRef: A needs %d elements, slice holds %d", need, len(a))
	}
	if need := qEnd(g.m, g.ldc, g.n); len(c) < need {
		return fmt.Errorf("kernels: MatMulQRef: C needs %d elements, slice holds %d", need, len(c))
	}
	if bias != nil && len(bias) < g.n {
		return fmt.Errorf("kernels: MatMulQRef: bias needs %d elements, slice holds %d", g.n, len(bias))
	}
	col := make([]float64, g.k)
	for n := 0; n < g.n; n++ {
		for k := range col {
			col[k] = float64(w.At(k, n))
		}
		for m := 0; m < g.m; m++ {
			var acc float64
			for k, wv := range col {
				acc += float64(a[m*g.lda+k]) * wv
			}
			if bias != nil {
				acc += float64(bias[n])
			}
			c[m*g.ldc+n] = float32(acc)
		}
	}
	return nil
}
