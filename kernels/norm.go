package kernels

import (
	_ "embed"
	"fmt"
	"math"
)

//go:embed norm.cl
var normSrc string

// NormParams describes a normalisation over the last dimension of a
// [Rows, Cols] tensor (the engine folds leading dimensions into Rows).
type NormParams struct {
	Storage Storage // x, residual, sum and out
	Weights Storage // scale and bias, which may be stored differently
	Rows    int
	Cols    int
	Eps     float32
}

// GroupNormParams describes GroupNormalization / InstanceNormalization over
// an [N, C, Spatial] tensor (Spatial = product of the dims after C).
type GroupNormParams struct {
	Storage Storage
	Weights Storage
	N       int
	C       int
	Groups  int // C for InstanceNormalization
	Spatial int
	Eps     float32
	// ScalePerGroup selects opset-18 GroupNormalization, whose scale and
	// bias have one entry per group; otherwise they have one per channel
	// (InstanceNormalization, GroupNormalization from opset 21).
	ScalePerGroup bool
}

// Flag bits shared with norm.cl.
const (
	nfRes     = 1
	nfSum     = 2
	nfBias    = 4
	nfRMS     = 8
	nfScale   = 16
	nfChannel = 32
)

// normCall is one launch of norm_rows/norm_group, and the reference's input.
type normCall struct {
	s, ws            Storage
	rows, cols       int
	eps              float32
	flags            int32
	wmod, wmul, wdiv int
	nw               int // weight elements the call reads
}

// rowCall is a LayerNorm/RMSNorm launch: weights per column.
func rowCall(p NormParams, flags int32) normCall {
	return normCall{s: p.Storage, ws: p.Weights, rows: p.Rows, cols: p.Cols, eps: p.Eps,
		flags: flags, wmod: 1, wmul: 0, wdiv: 1, nw: p.Cols}
}

// groupCall maps GroupNorm onto rows of (batch, group) with per-channel (or
// per-group) weights.
func groupCall(p GroupNormParams) (normCall, error) {
	if p.Groups <= 0 || p.C%p.Groups != 0 {
		return normCall{}, fmt.Errorf("kernels: GroupNorm: %d channels do not split into %d groups", p.C, p.Groups)
	}
	if p.N < 0 || p.Spatial < 0 {
		return normCall{}, fmt.Errorf("kernels: GroupNorm: negative size (N %d, spatial %d)", p.N, p.Spatial)
	}
	cg := p.C / p.Groups
	c := normCall{s: p.Storage, ws: p.Weights, rows: p.N * p.Groups, cols: cg * p.Spatial, eps: p.Eps,
		flags: nfChannel | nfScale | nfBias, wmod: p.Groups}
	if p.ScalePerGroup {
		c.wmul, c.wdiv, c.nw = 1, max(c.cols, 1), p.Groups
	} else {
		c.wmul, c.wdiv, c.nw = cg, max(p.Spatial, 1), p.C
	}
	return c, nil
}

// LayerNorm computes ONNX LayerNormalization over the last axis:
// out = (x - mean) / sqrt(var + eps) * scale + bias, per row. bias.Mem may be
// nil for no bias. out may alias x.
func (l *Lib) LayerNorm(p NormParams, x, scale, bias, out Buf) error {
	return l.AddLayerNorm(p, x, Buf{}, Buf{}, scale, bias, out)
}

// AddLayerNorm computes LayerNorm(x + res) and, when sum.Mem is non-nil, stores
// x + res to sum (the residual stream a decoder block carries on). sum may
// alias x or res and out may alias any input: each row is read before it is
// overwritten. With F16 storage the statistics are taken over the rounded sum,
// as a separate add then norm would see it.
func (l *Lib) AddLayerNorm(p NormParams, x, res, sum, scale, bias, out Buf) error {
	f := int32(nfScale)
	if bias.Mem != nil {
		f |= nfBias
	}
	return l.normLaunch("LayerNorm", rowCall(p, f|resFlags(res, sum)), x, res, sum, scale, bias, out, preferGroups(l))
}

// RMSNorm computes out = x / sqrt(mean(x^2) + eps) * scale per row; scale.Mem
// may be nil for no scale.
func (l *Lib) RMSNorm(p NormParams, x, scale, out Buf) error {
	return l.AddRMSNorm(p, x, Buf{}, Buf{}, scale, out)
}

// AddRMSNorm is RMSNorm(x + res), storing x + res to sum when sum.Mem is
// non-nil, with AddLayerNorm's aliasing rules.
func (l *Lib) AddRMSNorm(p NormParams, x, res, sum, scale, out Buf) error {
	f := int32(nfRMS)
	if scale.Mem != nil {
		f |= nfScale
	}
	return l.normLaunch("RMSNorm", rowCall(p, f|resFlags(res, sum)), x, res, sum, scale, Buf{}, out, preferGroups(l))
}

// GroupNorm computes GroupNormalization on [N, C, Spatial]: each (n, group)
// is normalised over its C/Groups channels and all spatial positions, then
// scaled and shifted per channel (or per group, see ScalePerGroup).
func (l *Lib) GroupNorm(p GroupNormParams, x, scale, bias, out Buf) error {
	c, err := groupCall(p)
	if err != nil {
		return err
	}
	return l.normLaunch("GroupNorm", c, x, Buf{}, Buf{}, scale, bias, out, preferGroups(l))
}

// InstanceNorm computes InstanceNormalization on [N, C, Spatial]: GroupNorm
// with one group per channel; scale and bias have C entries.
func (l *Lib) InstanceNorm(p GroupNormParams, x, scale, bias, out Buf) error {
	p.Groups, p.ScalePerGroup = p.C, false
	return l.GroupNorm(p, x, scale, bias, out)
}

// resFlags are the residual flags for device operands present or absent.
func resFlags(res, sum Buf) int32 {
	var f int32
	if res.Mem != nil {
		f |= nfRes
		if sum.Mem != nil {
			f |= nfSum
		}
	}
	return f
}

// normProg is the norm family's program text: halfmath.cl's half
// arithmetic layer (for norm_group's half path), then norm.cl.
func normProg() string { return normProgSrc }

// normProgSrc is joined once (see matmulProgSrc).
var normProgSrc = halfMathSrc + "\n" + normSrc

// normMinHalfEps is the smallest eps norm_group's half path takes: the
// path rounds 1/sqrt(var + eps) to half, which stays finite (at most
// 31623, below half's 65504) for a constant row only when eps >= 1e-9.
const normMinHalfEps = 1e-9

// halfOptions are norm_group's extra build options: its half path (with
// -cl-mad-enable) where the device has cl_khr_fp16, the activations are
// fp16 and so are the weights it reads (a float weight rounded to half
// would lose what the model stored), and eps keeps 1/sigma finite in
// half; or the path's exact emulation when a test asks (halfEmu).
func (c normCall) halfOptions(fp16 bool) string {
	weightsHalf := c.ws == F16 || c.flags&(nfScale|nfBias) == 0
	if c.s != F16 || !weightsHalf || !(c.eps >= normMinHalfEps) {
		return ""
	}
	switch {
	case halfEmu:
		return " -DHALF_EMU"
	case fp16:
		return " -DHALF_MATH -cl-mad-enable"
	}
	return ""
}

// normLaunch checks c's buffers and launches one norm kernel; groups picks
// the work-group-per-row style.
func (l *Lib) normLaunch(op string, c normCall, x, res, sum, scale, bias, out Buf, groups bool) error {
	if c.rows < 0 || c.cols < 0 {
		return fmt.Errorf("kernels: %s: negative size %dx%d", op, c.rows, c.cols)
	}
	n := c.rows * c.cols
	if n == 0 {
		return nil
	}
	if err := checkSpan(op, "x", x, n, c.s.Size()); err != nil {
		return err
	}
	if err := checkSpan(op, "out", out, n, c.s.Size()); err != nil {
		return err
	}
	if c.flags&nfRes != 0 {
		if err := checkSpan(op, "residual", res, n, c.s.Size()); err != nil {
			return err
		}
	}
	if c.flags&nfSum != 0 {
		if err := checkSpan(op, "sum", sum, n, c.s.Size()); err != nil {
			return err
		}
	}
	if c.flags&nfScale != 0 {
		if err := checkSpan(op, "scale", scale, c.nw, c.ws.Size()); err != nil {
			return err
		}
	}
	if c.flags&nfBias != 0 {
		if err := checkSpan(op, "bias", bias, c.nw, c.ws.Size()); err != nil {
			return err
		}
	}
	// Absent operands are bound to x: the kernel never touches them, but
	// every buffer argument needs a valid object.
	for _, b := range []*Buf{&res, &sum, &scale, &bias} {
		if b.Mem == nil {
			*b = x
		}
	}
	// GROUP is always defined so that both styles share one program.
	g := groupSize(l)
	opts := fmt.Sprintf("%s -DGROUP=%d", c.s.define(), g)
	if c.ws == F16 {
		opts += " -DWEIGHT_F16"
	}
	name, global, local := "norm_rows", 0, rowLocal(l, c.rows)
	if groups {
		name, global, local = "norm_group", c.rows*g, g
		opts += c.halfOptions(l.info().FP16)
	} else {
		global = roundUp(c.rows, local)
	}
	k, err := l.kernel("norm", normProg(), opts, name)
	if err != nil {
		return err
	}
	return l.dev.Launch(k, []int{global}, []int{local},
		x.Mem, int32(x.Off), res.Mem, int32(res.Off), sum.Mem, int32(sum.Off),
		scale.Mem, int32(scale.Off), bias.Mem, int32(bias.Off), out.Mem, int32(out.Off),
		int32(c.rows), int32(c.cols), c.eps, c.flags, int32(c.wmod), int32(c.wmul), int32(c.wdiv))
}

// LayerNormRef is the reference for LayerNorm on host slices; bias may be nil.
func LayerNormRef(p NormParams, x, scale, bias, out []float32) {
	AddLayerNormRef(p, x, nil, nil, scale, bias, out)
}

// AddLayerNormRef is the reference for AddLayerNorm; res and sum may be nil.
func AddLayerNormRef(p NormParams, x, res, sum, scale, bias, out []float32) {
	f := int32(nfScale)
	if bias != nil {
		f |= nfBias
	}
	normRef(rowCall(p, f|sliceResFlags(res, sum)), x, res, sum, scale, bias, out)
}

// RMSNormRef is the reference for RMSNorm; scale may be nil.
func RMSNormRef(p NormParams, x, scale, out []float32) {
	AddRMSNormRef(p, x, nil, nil, scale, out)
}

// AddRMSNormRef is the reference for AddRMSNorm; res, sum and scale may be nil.
func AddRMSNormRef(p NormParams, x, res, sum, scale, out []float32) {
	f := int32(nfRMS)
	if scale != nil {
		f |= nfScale
	}
	normRef(rowCall(p, f|sliceResFlags(res, sum)), x, res, sum, scale, nil, out)
}

// GroupNormRef is the reference for GroupNorm.
func GroupNormRef(p GroupNormParams, x, scale, bias, out []float32) error {
	c, err := groupCall(p)
	if err != nil {
		return err
	}
	normRef(c, x, nil, nil, scale, bias, out)
	return nil
}

// InstanceNormRef is the reference for InstanceNorm.
func InstanceNormRef(p GroupNormParams, x, scale, bias, out []float32) error {
	p.Groups, p.ScalePerGroup = p.C, false
	return GroupNormRef(p, x, scale, bias, out)
}

// sliceResFlags are resFlags for host slices.
func sliceResFlags(res, sum []float32) int32 {
	var f int32
	if res != nil {
		f |= nfRes
		if sum != nil {
			f |= nfSum
		}
	}
	return f
}

// normRef mirrors norm.cl in float64 accumulation, rounding what the device
// stores (the sum and the output) to c.s.
func normRef(c normCall, x, res, sum, w, b, out []float32) {
	row := make([]float32, c.cols)
	for r := 0; r < c.rows; r++ {
		base := r * c.cols
		mean := 0.0
		for j := range row {
			v := x[base+j]
			if c.flags&nfRes != 0 {
				v += res[base+j]
			}
			if c.flags&nfSum != 0 {
				v = storeAs(c.s, v)
				sum[base+j] = v
			}
			row[j] = v
			mean += float64(v)
		}
		mean /= float64(c.cols)
		if c.flags&nfRMS != 0 {
			mean = 0
		}
		ss := 0.0
		for _, v := range row {
			d := float64(v) - mean
			ss += d * d
		}
		inv := 1 / math.Sqrt(ss/float64(c.cols)+float64(c.eps))
		for j, v := range row {
			wi := j
			if c.flags&nfChannel != 0 {
				wi = (r%c.wmod)*c.wmul + j/c.wdiv
			}
			y := (float64(v) - mean) * inv
			if c.flags&nfScale != 0 {
				y *= float64(w[wi])
			}
			if c.flags&nfBias != 0 {
				y += float64(b[wi])
			}
			out[base+j] = storeAs(c.s, float32(y))
		}
	}
}
