package kernels

import (
	_ "embed"
	"fmt"
)

//go:embed convtranspose.cl
var convTransposeSrc string

// ConvTransposeParams describes a 2-D transposed convolution (ONNX
// ConvTranspose) of an NCHW input [N, C, H, W] with a weight
// [C, OutC/Groups, KH, KW] into [N, OutC, OH, OW]. A 1-D one is H = KH = 1.
// Zero strides, dilations and groups are taken as 1. Pads are those after
// ConvTransposeAxis has resolved auto_pad and output_shape, and may be
// negative.
type ConvTransposeParams struct {
	N, C, H, W                           int
	OutC, KH, KW                         int
	StrideH, StrideW                     int
	PadTop, PadLeft, PadBottom, PadRight int
	DilationH, DilationW                 int
	// OutPadH and OutPadW are output_padding: extra rows and columns at the
	// end of the output.
	OutPadH, OutPadW int
	Groups           int
	// Bias, when Bias.Mem is set, is an [OutC] vector in Weight storage.
	Bias Buf
	// Weight is the storage of the weight and bias.
	Weight Storage
}

// ConvTransposeAxis resolves one spatial axis of ONNX ConvTranspose: input
// length in, kernel k, stride s, dilation d, output padding op, the pads
// attribute (pb, pe), auto_pad ("" or NOTSET, SAME_UPPER, SAME_LOWER, VALID)
// and output_shape's entry (negative when absent). It returns the pads to
// use and the output length. With output_shape or SAME_*, the total padding
// s*(in-1) + op + dilated kernel - out is split as the ONNX spec says:
// SAME_UPPER puts the odd one at the end, anything else at the start; a
// negative total becomes a negative end pad.
func ConvTransposeAxis(in, k, s, d, op, pb, pe int, autoPad string, outShape int) (padBegin, padEnd, out int, err error) {
	s, d = oneIfZero(s), oneIfZero(d)
	if in < 0 || k <= 0 || s < 0 || d < 0 || op < 0 {
		return 0, 0, 0, fmt.Errorf("ConvTranspose axis: input %d, kernel %d, stride %d, dilation %d, output_padding %d", in, k, s, d, op)
	}
	full := s*(in-1) + op + (k-1)*d + 1
	split := func(total int) (int, int) {
		if autoPad == "SAME_UPPER" {
			return total / 2, total - total/2
		}
		return total - total/2, total / 2
	}
	switch {
	case outShape >= 0:
		// An output_shape beyond the full result adds its extra rows at the
		// end, like output_padding (ONNX's node tests and ONNX Runtime
		// agree): a negative end pad.
		out = outShape
		if full < out {
			padEnd = full - out
		} else {
			padBegin, padEnd = split(full - out)
		}
	case autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER":
		out = in * s
		padBegin, padEnd = split(full - out)
	case autoPad == "VALID":
		out = full
	case autoPad == "" || autoPad == "NOTSET":
		padBegin, padEnd, out = pb, pe, full-pb-pe
	default:
		return 0, 0, 0, fmt.Errorf("ConvTranspose auto_pad %q is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", autoPad)
	}
	if out < 0 {
		return 0, 0, 0, fmt.Errorf("ConvTranspose output length %d (input %d, pads %d+%d) is negative", out, in, padBegin, padEnd)
	}
	return padBegin, padEnd, out, nil
}

func (p ConvTransposeParams) norm() (ConvTransposeParams, error) {
	p.StrideH, p.StrideW = oneIfZero(p.StrideH), oneIfZero(p.StrideW)
	p.DilationH, p.DilationW = oneIfZero(p.DilationH), oneIfZero(p.DilationW)
	p.Groups = oneIfZero(p.Groups)
	for _, v := range []int{p.N, p.C, p.H, p.W, p.OutC, p.OutPadH, p.OutPadW, p.StrideH, p.StrideW, p.DilationH, p.DilationW, p.Groups} {
		if v < 0 {
			return p, fmt.Errorf("negative size, stride, dilation, group count or output padding in %+v", p)
		}
	}
	if err := checkGroups(p.C, p.OutC, p.Groups); err != nil {
		return p, err
	}
	if p.KH <= 0 || p.KW <= 0 {
		return p, fmt.Errorf("empty kernel %dx%d", p.KH, p.KW)
	}
	if oh, ow := p.OutSize(); oh < 0 || ow < 0 {
		return p, fmt.Errorf("pads %d,%d,%d,%d (top, left, bottom, right) leave a negative output %dx%d", p.PadTop, p.PadLeft, p.PadBottom, p.PadRight, oh, ow)
	}
	return p, nil
}

// OutSize is the output's spatial size, stride*(in-1) + output_padding +
// dilated kernel - pads per axis.
func (p ConvTransposeParams) OutSize() (oh, ow int) {
	out := func(in, k, s, d, op, pb, pe int) int {
		return oneIfZero(s)*(in-1) + op + (k-1)*oneIfZero(d) + 1 - pb - pe
	}
	return out(p.H, p.KH, p.StrideH, p.DilationH, p.OutPadH, p.PadTop, p.PadBottom),
		out(p.W, p.KW, p.StrideW, p.DilationW, p.OutPadW, p.PadLeft, p.PadRight)
}

// useGEMM says whether the GEMM route pays: a reduction over input channels
// long enough for the product kernels' blocking (depthwise and thin
// transposed convolutions gather directly).
func (p ConvTransposeParams) useGEMM() bool {
	g := oneIfZero(p.Groups)
	return p.C/g >= 8 && p.OutC/g*p.KH*p.KW >= 4
}

// ScratchElems is how many float32 elements (4 bytes each, whatever the
// activation storage) of scratch ConvTranspose2D can use for its GEMM
// route, the whole batch's W^T X products (N * OutC*KH*KW * H*W); 0 when
// the direct kernel is the route.
// Less scratch still works: ConvTranspose2D takes as many images at a time
// as fit, and gathers directly when not even one does.
func (p ConvTransposeParams) ScratchElems() int {
	p, err := p.norm()
	if err != nil || !p.useGEMM() {
		return 0
	}
	return p.N * p.OutC * p.KH * p.KW * p.H * p.W
}

// ConvTranspose2D computes y = conv_transpose(x, w) + bias as p describes; x
// and y are stored in s, the weight and bias in p.Weight. With scratch
// (ScratchElems float32 elements; Mem nil for none) it runs as a GEMM, W^T X per
// image and group, followed by a gather of each output's taps; without, the
// direct kernel runs, correct but much slower on wide layers. An empty output
// launches nothing.
func (l *Lib) ConvTranspose2D(s Storage, x, w, y, scratch Buf, p ConvTransposeParams) error {
	if err := l.convTranspose2D(s, x, w, y, scratch, p); err != nil {
		return fmt.Errorf("kernels: ConvTranspose2D %dx%dx%dx%d -> %d (kernel %dx%d): %w", p.N, p.C, p.H, p.W, p.OutC, p.KH, p.KW, err)
	}
	return nil
}

func (l *Lib) convTranspose2D(s Storage, x, w, y, scratch Buf, p ConvTransposeParams) error {
	p, err := p.norm()
	if err != nil {
		return err
	}
	oh, ow := p.OutSize()
	i32 := func(v int) int32 { return int32(v) }
	return l.convTransposeRun(convtJob{
		s: s, x: x, w: w, y: y, scratch: scratch, weight: p.Weight, bias: p.Bias,
		n: p.N, c: p.C, outC: p.OutC, groups: p.Groups,
		kvol: p.KH * p.KW, inVol: p.H * p.W, outVol: oh * ow,
		grid: [3]int{ow, oh, p.OutC}, gemm: p.useGEMM(),
		direct: "convt_direct", col2im: "convt_col2im",
		geo: []any{i32(p.H), i32(p.W), i32(p.OutC), i32(oh), i32(ow),
			i32(p.KH), i32(p.KW), i32(p.StrideH), i32(p.StrideW), i32(p.PadTop), i32(p.PadLeft),
			i32(p.DilationH), i32(p.DilationW), i32(p.Groups)},
	})
}

// convtJob is one transposed convolution after its parameters are checked,
// in the terms its 2-D and 3-D forms share: volumes of the spatial axes,
// the kernels to run and the geometry arguments both kernels take last.
type convtJob struct {
	s                   Storage
	x, w, y, scratch    Buf
	weight              Storage
	bias                Buf
	n, c, outC, groups  int
	kvol, inVol, outVol int
	// grid is one image's work-items; its last entry is multiplied by the
	// images a launch covers.
	grid           [3]int
	gemm           bool
	direct, col2im string
	geo            []any
}

// convTransposeRun checks the buffers and runs j: as a GEMM, W^T X per
// image and group into scratch, and a gather of each output's taps, for as
// many images at a time as scratch holds; else the direct kernel.
func (l *Lib) convTransposeRun(j convtJob) error {
	ny := j.n * j.outC * j.outVol
	if ny == 0 {
		return nil
	}
	x, w := j.x, j.w
	ops := []bufUse{{"output", j.y, j.s, ny}}
	if j.c > 0 && j.inVol > 0 {
		ops = append(ops, bufUse{"input", x, j.s, j.n * j.c * j.inVol}, bufUse{"weight", w, j.weight, j.c * j.outC / j.groups * j.kvol})
	} else {
		x, w = j.y, j.y // nothing is read from an empty input or its weight
	}
	hasBias := j.bias.Mem != nil
	if hasBias {
		ops = append(ops, bufUse{"bias", j.bias, j.weight, j.outC})
	}
	if err := checkBufUses(ops); err != nil {
		return err
	}
	opts := j.s.define() + " " + weightDefine(j.weight)
	bias, hb := j.bias, int32(1)
	if !hasBias {
		bias, hb = w, 0 // placeholder, never read
	}
	i32 := func(v int) int32 { return int32(v) }
	grid := func(imgs int) []int { return []int{j.grid[0], j.grid[1], imgs * j.grid[2]} }
	cg, ocg := j.c/j.groups, j.outC/j.groups
	mk, vol := ocg*j.kvol, j.inVol
	scratch := j.scratch
	imgs := 0
	if j.gemm && scratch.Mem != nil && vol > 0 {
		if scratch.Off < 0 {
			return fmt.Errorf("scratch: negative offset")
		}
		imgs = min(j.n, (scratch.Mem.Size()/F32.Size()-scratch.Off)/(j.groups*mk*vol))
	}
	if imgs == 0 {
		k, err := l.kernel("convtranspose", convTransposeSrc, opts, j.direct)
		if err != nil {
			return err
		}
		global, local := l.cpuGroups(grid(j.n))
		args := append([]any{x.Mem, i32(x.Off), w.Mem, i32(w.Off), bias.Mem, i32(bias.Off), hb, j.y.Mem, i32(j.y.Off), i32(j.c)}, j.geo...)
		return l.dev.Launch(k, global, local, args...)
	}
	// Per (image, group): Col[m, pix] = sum over k of W[k, m] X[k, pix],
	// m = (ocg, kernel tap), k an input channel of the group.
	g := gemm{a: w, at: j.weight, b: x, bt: j.s, c: scratch, ct: F32,
		am: 1, ak: mk, bk: vol, bn: 1, cm: vol, cn: 1,
		m: mk, n: vol, k: cg, nb1: j.groups, alpha: 1,
		sA: [2]int{0, cg * mk}, sB: [2]int{j.c * vol, cg * vol}, sC: [2]int{j.groups * mk * vol, mk * vol}}
	gather, err := l.kernel("convtranspose", convTransposeSrc, opts, j.col2im)
	if err != nil {
		return err
	}
	for n0 := 0; n0 < j.n; n0 += imgs {
		cnt := min(imgs, j.n-n0)
		gi := g
		gi.nb0 = cnt
		gi.b.Off += n0 * j.c * vol
		if err := l.gemm(gi); err != nil {
			return err
		}
		global, local := l.cpuGroups(grid(cnt))
		args := append([]any{scratch.Mem, i32(scratch.Off), bias.Mem, i32(bias.Off), hb, j.y.Mem, i32(j.y.Off), i32(n0)}, j.geo...)
		if err := l.dev.Launch(gather, global, local, args...); err != nil {
			return err
		}
	}
	return nil
}

// ConvTranspose2DRef is the pure-Go reference for ConvTranspose2D on host
// tensors (bias nil for none; p.Bias is ignored). It scatters, the way the
// operation is defined, accumulating in float64.
func ConvTranspose2DRef(x, w, bias, y []float32, p ConvTransposeParams) error {
	p, err := p.norm()
	if err != nil {
		return fmt.Errorf("kernels: ConvTranspose2DRef: %w", err)
	}
	oh, ow := p.OutSize()
	cg, ocg := p.C/p.Groups, p.OutC/p.Groups
	if len(x) < p.N*p.C*p.H*p.W || len(w) < p.C*ocg*p.KH*p.KW || len(y) < p.N*p.OutC*oh*ow ||
		bias != nil && len(bias) < p.OutC {
		return fmt.Errorf("kernels: ConvTranspose2DRef: a slice is shorter than %+v needs", p)
	}
	acc := make([]float64, p.N*p.OutC*oh*ow)
	for n := 0; n < p.N; n++ {
		for c := 0; c < p.C; c++ {
			g := c / cg
			for i := 0; i < p.H; i++ {
				for j := 0; j < p.W; j++ {
					xv := float64(x[((n*p.C+c)*p.H+i)*p.W+j])
					for o := 0; o < ocg; o++ {
						oc := g*ocg + o
						for kh := 0; kh < p.KH; kh++ {
							r := i*p.StrideH - p.PadTop + kh*p.DilationH
							if r < 0 || r >= oh {
								continue
							}
							for kw := 0; kw < p.KW; kw++ {
								q := j*p.StrideW - p.PadLeft + kw*p.DilationW
								if q < 0 || q >= ow {
									continue
								}
								acc[((n*p.OutC+oc)*oh+r)*ow+q] += xv * float64(w[((c*ocg+o)*p.KH+kh)*p.KW+kw])
							}
						}
					}
				}
			}
		}
	}
	for i := range acc {
		if bias != nil {
			acc[i] += float64(bias[(i/(oh*ow))%p.OutC])
		}
		y[i] = float32(acc[i])
	}
	return nil
}
