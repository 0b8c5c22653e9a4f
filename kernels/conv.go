package kernels

import (
	_ "embed"
	"fmt"
	"math"

	"github.com/tlite/tlite/opencl"
)

//go:embed conv.cl
var convSrc string

// ConvParams describes a 2-D convolution (ONNX Conv) of an NCHW input
// [N, C, H, W] with a weight [OutC, C/Groups, KH, KW] into [N, OutC, OH, OW].
// A 1-D convolution is H = KH = 1. Zero strides, dilations and groups are
// taken as 1.
type ConvParams struct {
	N, C, H, W                           int
	OutC, KH, KW                         int
	StrideH, StrideW                     int
	PadTop, PadLeft, PadBottom, PadRight int
	DilationH, DilationW                 int
	Groups                               int
	// Bias, when Bias.Mem is set, is an [OutC] vector in Weight storage.
	Bias Buf
	// Weight is the storage of the weight and bias.
	Weight Storage
	// Act is an activation applied to conv + bias before the output is
	// written (ConvActNone: none); ActA and ActB are its parameters.
	Act        ConvAct
	ActA, ActB float32
	// Res, when Res.Mem is set, is a residual of the output's shape
	// [N, OutC, OH, OW] in the activation storage, added to conv + bias
	// before Act: y = Act(conv(x, w) + bias + Res), a ResNet block's Add
	// and ReLU (or a MobileNet block's skip) in the convolution's
	// epilogue. It must not overlap the output. Every route takes it; the
	// GEMM routes (gemm1x1, im2col) add it and Act in a second launch,
	// conv_res, the others in their own epilogue.
	Res Buf
	// Scale, when Scale.Mem is set, is a factor per image and input
	// channel, [N, C] in the activation storage, applied to the input as
	// it is read: y = conv(x * Scale[n, c, 1, 1], w) (squeeze-excite's
	// Mul in front of a projection). Only a 1x1 convolution with stride
	// 1 and no padding takes it, on the conv_pw kernels (CPUs) or
	// conv_tile (elsewhere). It must not overlap the output.
	Scale Buf
	// WinogradWeight says that the weight buffer holds the Winograd
	// route's transformed weight, [16][OutC][C] as WinogradWeights lays it
	// out, in place of [OutC][C][3][3]: an engine transforms a constant
	// weight once at Open instead of on every call. Only for a convolution
	// that takes the route (WinogradRoute); Conv2D then takes it whatever
	// else would be chosen, and needs ScratchElems' smaller scratch (no
	// room for the weight's transform).
	WinogradWeight bool
}

// ConvAct names an activation a convolution applies in its epilogue. The
// values are conv.cl's CONV_ACT_* codes.
type ConvAct int

// The activations a convolution can end with. Parameters: ConvActClip
// clamps to [ActA, ActB]; ConvActHardSigmoid is max(0, min(1, ActA*x +
// ActB)); ConvActLeakyRelu multiplies negatives by ActA; ConvActHardSwish
// is x*max(0, min(1, x/6 + 1/2)); ConvActSiLU is x*sigmoid(x).
const (
	ConvActNone ConvAct = iota
	ConvActRelu
	ConvActClip
	ConvActHardSwish
	ConvActHardSigmoid
	ConvActSiLU
	ConvActLeakyRelu
	convActCount
)

// apply is the activation on the host, in float64 (the reference's).
func (a ConvAct) apply(v float64, pa, pb float32) float64 {
	switch a {
	case ConvActRelu:
		return math.Max(v, 0)
	case ConvActClip:
		return math.Min(math.Max(v, float64(pa)), float64(pb))
	case ConvActHardSwish:
		return v * math.Max(0, math.Min(1, v/6+0.5))
	case ConvActHardSigmoid:
		return math.Max(0, math.Min(1, float64(pa)*v+float64(pb)))
	case ConvActSiLU:
		return v / (1 + math.Exp(-v))
	case ConvActLeakyRelu:
		if v < 0 {
			return float64(pa) * v
		}
	}
	return v
}

// checkGroups says whether c input and outC output channels split into
// groups groups, as a grouped convolution needs.
func checkGroups(c, outC, groups int) error {
	if c%groups != 0 || outC%groups != 0 {
		return fmt.Errorf("channels in %d and out %d must both divide into %d groups", c, outC, groups)
	}
	return nil
}

func oneIfZero(v int) int {
	if v == 0 {
		return 1
	}
	return v
}

// norm fills defaults and validates the geometry.
func (p ConvParams) norm() (ConvParams, error) {
	p.StrideH, p.StrideW = oneIfZero(p.StrideH), oneIfZero(p.StrideW)
	p.DilationH, p.DilationW = oneIfZero(p.DilationH), oneIfZero(p.DilationW)
	p.Groups = oneIfZero(p.Groups)
	for _, v := range []int{p.N, p.C, p.H, p.W, p.OutC, p.KH, p.KW, p.PadTop, p.PadLeft, p.PadBottom, p.PadRight} {
		if v < 0 {
			return p, fmt.Errorf("negative size or padding in %+v", p)
		}
	}
	if p.StrideH < 0 || p.StrideW < 0 || p.DilationH < 0 || p.DilationW < 0 || p.Groups < 0 {
		return p, fmt.Errorf("negative stride, dilation or group count")
	}
	if err := checkGroups(p.C, p.OutC, p.Groups); err != nil {
		return p, err
	}
	if p.KH == 0 || p.KW == 0 {
		return p, fmt.Errorf("empty kernel %dx%d", p.KH, p.KW)
	}
	if p.Act < 0 || p.Act >= convActCount {
		return p, fmt.Errorf("unknown activation %d", p.Act)
	}
	if p.WinogradWeight && !p.WinogradRoute() {
		return p, fmt.Errorf("a Winograd-transformed weight for a convolution that does not take the Winograd route")
	}
	oh, ow := p.OutSize()
	if oh < 0 || ow < 0 {
		return p, fmt.Errorf("kernel %dx%d (dilation %dx%d) larger than the padded input %dx%d", p.KH, p.KW, p.DilationH, p.DilationW, p.H+p.PadTop+p.PadBottom, p.W+p.PadLeft+p.PadRight)
	}
	return p, nil
}

// OutSize is the output's spatial size, floor((in + pads - dilated kernel) /
// stride) + 1 per axis.
func (p ConvParams) OutSize() (oh, ow int) {
	out := func(in, k, s, d, pb, pe int) int {
		stridedEnd := in + pb + pe - (k-1)*oneIfZero(d) - 1
		if stridedEnd < 0 {
			return -1
		}
		return stridedEnd/oneIfZero(s) + 1
	}
	return out(p.H, p.KH, p.StrideH, p.DilationH, p.PadTop, p.PadBottom),
		out(p.W, p.KW, p.StrideW, p.DilationW, p.PadLeft, p.PadRight)
}

// route says how a convolution runs: "gemm1x1" (a 1x1 convolution is a
// product straight on the NCHW input: no gather, no scratch), "depthwise"
// (one input channel per group: on CPUs given the scratch, conv_dwf over
// conv_pad's padded copy; else conv_dw_reg or conv_dw, or conv_tile with a
// channel multiplier), "flat" (every other geometry: the input copied once into
// zero-padded phase planes in scratch, then conv_flat's implicit GEMM with
// every load a vector) or "tile" (a 1x1 convolution with an activation
// epilogue, and "flat" without scratch: conv_tile's implicit GEMM,
// receptive fields read in its loads). "im2col" and "direct", the older
// routes, run only when a test forces them (convForce). With pw (a CPU
// device: strips of 8 or more lanes), every 1x1 convolution with stride 1
// and no padding takes "pw", conv_pw: the same product as gemm1x1 with
// the activation in its epilogue, and no index arithmetic in its loads.
// A 3x3 convolution Winograd computes (Winograd) with at least
// winoMinChannels channels in and out takes "wino": conv_wino_in,
// batched GEMMs and conv_wino_out, on CPUs and GPUs alike.
// Every route but "flat", "wino", "im2col" and "depthwise" (conv_dwf's
// copy) needs no scratch, so ScratchElems asks without pw. The tests'
// "dwf" and "dwfgen" force conv_dwf (fixed-size or generic) on any
// device.
func (p ConvParams) route(pw bool) string {
	if p.WinogradWeight {
		return "wino" // the weight is only usable there
	}
	if convForce != "" {
		return convForce
	}
	g := oneIfZero(p.Groups)
	kc := p.C / g * p.KH * p.KW
	if p.C/g == 1 {
		return "depthwise"
	}
	if p.WinogradRoute() {
		return "wino"
	}
	plain1x1 := p.plain1x1()
	switch {
	case plain1x1 && pw:
		return "pw"
	case plain1x1 && kc >= 16 && p.OutC/g >= 4 && p.Act == ConvActNone:
		return "gemm1x1"
	case plain1x1:
		return "tile"
	}
	return "flat"
}

// biasArg is the bias buffer and has-bias flag the conv kernels take:
// without a bias, w stands in as a buffer the kernel never reads.
func (p ConvParams) biasArg(w Buf) (Buf, int32) {
	if p.Bias.Mem == nil {
		return w, 0
	}
	return p.Bias, 1
}

// plain1x1 reports whether p is a 1x1 convolution with stride 1 and no
// padding: a product of the weight with each image's [C, H*W] planes.
func (p ConvParams) plain1x1() bool {
	return p.KH == 1 && p.KW == 1 && oneIfZero(p.StrideH) == 1 && oneIfZero(p.StrideW) == 1 &&
		p.PadTop == 0 && p.PadLeft == 0 && p.PadBottom == 0 && p.PadRight == 0
}

// flatSlack is how many elements past its last padded plane conv_flat and
// conv_dwf may read: conv_dwf's chunk of 4 strips (up to 16 lanes each)
// beyond the last grid position, shifted by the kernel's width.
func (p ConvParams) flatSlack() int { return 64 + (p.KW-1)*oneIfZero(p.DilationW) }

// dwFlat reports whether conv_dwf can compute p: a depthwise convolution
// with one output channel per input channel.
func (p ConvParams) dwFlat() bool {
	return p.C/oneIfZero(p.Groups) == 1 && p.OutC == oneIfZero(p.Groups)
}

// flatPhase is the size of one phase plane of conv_flat's padded copy.
func (p ConvParams) flatPhase() (hq, wq int) {
	sh, sw := oneIfZero(p.StrideH), oneIfZero(p.StrideW)
	return (p.H + p.PadTop + p.PadBottom + sh - 1) / sh, (p.W + p.PadLeft + p.PadRight + sw - 1) / sw
}

// flatElems is the size of conv_flat's padded copy of the input.
func (p ConvParams) flatElems() int {
	hq, wq := p.flatPhase()
	return p.N*p.C*oneIfZero(p.StrideH)*oneIfZero(p.StrideW)*hq*wq + p.flatSlack()
}

// winoMinChannels is the fewest input and output channels with which a
// 3x3 convolution takes Winograd: below it the GEMMs' reduction (C) or
// width (OutC) is too short to pay for the transforms' traffic.
// BenchmarkConv3x3 (CPU time, loaded machine): 16 -> 16 channels at
// 224x224 cost 17.8 ms against conv_flat's 14.0, 32 -> 16 22.0 against
// 21.1; 32 -> 32 at 112x112 8.8 against 11.5, and ResNet-18's 64-512
// channel layers 1.3-2.8x less than conv_flat.
const winoMinChannels = 32

// Winograd reports whether p is a convolution that Winograd F(2x2, 3x3)
// computes: a 3x3 kernel, stride 1, dilation 1 and one group, any padding
// (the input transform reads zeros outside the input on every side).
// Such a convolution with at least winoMinChannels channels in and out takes the
// "wino" route (WinogradRoute, which an engine sizing scratch at Open
// asks); Conv2D asks this of a route forced by a test.
func (p ConvParams) Winograd() bool {
	return p.KH == 3 && p.KW == 3 && oneIfZero(p.StrideH) == 1 && oneIfZero(p.StrideW) == 1 &&
		oneIfZero(p.DilationH) == 1 && oneIfZero(p.DilationW) == 1 && oneIfZero(p.Groups) == 1
}

// WinogradRoute reports whether p takes the "wino" route: a Winograd
// convolution with at least winoMinChannels channels in and out. It
// depends on the kernel, strides, dilations, groups and channel counts
// only, not on the spatial size, so an engine can ask at Open with the
// input's height and width still unknown.
func (p ConvParams) WinogradRoute() bool {
	return p.Winograd() && p.C >= winoMinChannels && p.OutC >= winoMinChannels
}

// winoTiles is the Winograd route's tiling: th x tw tiles of 2x2 outputs
// per image, t = N*th*tw in all.
func (p ConvParams) winoTiles() (th, tw, t int) {
	oh, ow := p.OutSize()
	th, tw = (oh+1)/2, (ow+1)/2
	return th, tw, p.N * th * tw
}

// winoElems is the Winograd route's scratch: the transformed weight U
// [16][OutC][C] (unless p.WinogradWeight: the weight buffer holds it),
// input V [16][T][C] and products M [16][T][OutC].
func (p ConvParams) winoElems() int {
	_, _, t := p.winoTiles()
	u := p.OutC * p.C
	if p.WinogradWeight {
		u = 0
	}
	return 16 * (u + t*p.C + t*p.OutC)
}

// WinogradWeights transforms a 3x3 weight w [outC][c][3][3] into the
// Winograd route's U [16][outC][c] (U[xi][k][c] = (G w[k][c] G^T)[xi],
// conv.cl's conv_wino_w on the host), for ConvParams.WinogradWeight.
func WinogradWeights(w []float32, outC, c int) ([]float32, error) {
	if outC < 0 || c < 0 {
		return nil, fmt.Errorf("kernels: WinogradWeights: %d x %d channels", outC, c)
	}
	u := make([]float32, 16*outC*c)
	if err := WinogradWeightsInto(u, w, outC, c); err != nil {
		return nil, err
	}
	return u, nil
}

// WinogradWeightsInto is WinogradWeights into u (16*outC*c values), for a
// caller that writes the transform straight into its destination (an
// engine's upload buffer) without a second copy on the heap.
func WinogradWeightsInto(u, w []float32, outC, c int) error {
	if outC < 0 || c < 0 || len(w) != outC*c*9 || len(u) != 16*outC*c {
		return fmt.Errorf("kernels: WinogradWeights: %d weights and %d outputs for %d x %d x 3 x 3", len(w), len(u), outC, c)
	}
	step := outC * c
	for k := 0; k < outC; k++ {
		for ci := 0; ci < c; ci++ {
			g := w[(k*c+ci)*9 : (k*c+ci)*9+9]
			var t [4][3]float32
			for j := 0; j < 3; j++ {
				g0, g1, g2 := g[j], g[3+j], g[6+j]
				t[0][j], t[1][j], t[2][j], t[3][j] = g0, 0.5*(g0+g1+g2), 0.5*(g0-g1+g2), g2
			}
			o := k*c + ci
			for i := 0; i < 4; i++ {
				u[(4*i)*step+o] = t[i][0]
				u[(4*i+1)*step+o] = 0.5 * (t[i][0] + t[i][1] + t[i][2])
				u[(4*i+2)*step+o] = 0.5 * (t[i][0] - t[i][1] + t[i][2])
				u[(4*i+3)*step+o] = t[i][2]
			}
		}
	}
	return nil
}

// convForce, set by tests, names the route every convolution takes.
var convForce string

// convPXForce, set by tests, overrides conv_tile's strip width (4, 8 or
// 16), so every width runs on any device.
var convPXForce int

// ScratchElems is how many elements (in the activation storage) of scratch
// Conv2D can use to gather receptive fields for a GEMM; 0 when it needs none.
// Less scratch still works: Conv2D gathers as many images at a time as fit,
// and falls back to the direct kernel when not even one does.
func (p ConvParams) ScratchElems() int {
	p, err := p.norm()
	if err != nil {
		return 0
	}
	switch p.route(false) {
	case "flat":
		return p.flatElems()
	case "depthwise", "dwf", "dwfgen":
		if p.dwFlat() {
			return p.flatElems() // conv_dwf's padded copy (CPUs)
		}
	case "wino":
		if p.WinogradWeight {
			return p.winoElems() // no other route can use the weight
		}
		// Enough for "flat" too, which Conv2D falls back to when given
		// less than winoElems.
		return max(p.winoElems(), p.flatElems())
	case "im2col":
		oh, ow := p.OutSize()
		return p.N * p.C * p.KH * p.KW * oh * ow
	}
	return 0
}

// Conv2D computes y = conv(x, w) + bias as p describes; x and y are stored
// in s, the weight and bias in p.Weight. scratch (Mem nil for none) is
// working space for the GEMM route, ScratchElems elements for the whole
// batch; without it the direct kernel runs, correct but slower on large
// convolutions. An empty output launches nothing.
func (l *Lib) Conv2D(s Storage, x, w, y, scratch Buf, p ConvParams) error {
	if err := l.conv2D(s, x, w, y, scratch, p); err != nil {
		return fmt.Errorf("kernels: Conv2D %dx%dx%dx%d -> %d (kernel %dx%d): %w", p.N, p.C, p.H, p.W, p.OutC, p.KH, p.KW, err)
	}
	return nil
}

func (l *Lib) conv2D(s Storage, x, w, y, scratch Buf, p ConvParams) error {
	p, err := p.norm()
	if err != nil {
		return err
	}
	oh, ow := p.OutSize()
	if p.N == 0 || p.OutC == 0 || oh == 0 || ow == 0 {
		return nil
	}
	cg := p.C / p.Groups
	kc, np := cg*p.KH*p.KW, oh*ow
	wElems := p.OutC * kc
	if p.WinogradWeight {
		wElems = 16 * p.OutC * p.C
	}
	ops := []bufUse{
		{"input", x, s, p.N * p.C * p.H * p.W},
		{"weight", w, p.Weight, wElems},
		{"output", y, s, p.N * p.OutC * np},
	}
	hasBias := p.Bias.Mem != nil
	if hasBias {
		ops = append(ops, bufUse{"bias", p.Bias, p.Weight, p.OutC})
	}
	if p.Res.Mem != nil {
		ops = append(ops, bufUse{"residual", p.Res, s, p.N * p.OutC * np})
	}
	if p.Scale.Mem != nil {
		if !p.plain1x1() {
			return fmt.Errorf("an input scale needs a 1x1 convolution with stride 1 and no padding")
		}
		ops = append(ops, bufUse{"scale", p.Scale, s, p.N * p.C})
	}
	if p.C == 0 {
		ops = ops[1:] // nothing is read from an empty input
	}
	if err := checkBufUses(ops); err != nil {
		return err
	}
	if overlaps(p.Res, p.N*p.OutC*np, y, p.N*p.OutC*np) {
		return fmt.Errorf("the residual overlaps the output")
	}
	if overlaps(p.Scale, p.N*p.C, y, p.N*p.OutC*np) {
		return fmt.Errorf("the input scale overlaps the output")
	}
	route := p.route(l.convPXDevice() >= 8)
	if p.Scale.Mem != nil && route != "pw" && route != "tile" {
		route = "tile" // the kernels that read a scale
	}
	if route == "pw" {
		if p.C > 0 && p.plain1x1() {
			return l.convPW(s, x, w, y, p, oh*ow)
		}
		route = "tile" // forced by a test onto another geometry
	}
	if route == "wino" {
		if p.C > 0 && p.Winograd() && scratch.Mem != nil && scratch.Off >= 0 && scratch.Mem.Size()/s.Size()-scratch.Off >= p.winoElems() {
			return l.convWino(s, x, w, y, scratch, p, oh, ow)
		}
		if p.WinogradWeight { // C >= winoMinChannels: norm checked WinogradRoute
			return fmt.Errorf("scratch short of the Winograd route's %d elements, the only route a transformed weight can take", p.winoElems())
		}
		route = "flat"
	}
	perImage := p.Groups * kc * np
	imgs := 0
	if route == "im2col" && scratch.Mem != nil {
		if scratch.Off < 0 {
			return fmt.Errorf("scratch: negative offset")
		}
		imgs = min(p.N, (scratch.Mem.Size()/s.Size()-scratch.Off)/perImage)
	}
	if route == "depthwise" && l.info().Type != "GPU" || route == "dwf" || route == "dwfgen" {
		if p.C > 0 && p.dwFlat() && scratch.Mem != nil && scratch.Off >= 0 && scratch.Mem.Size()/s.Size()-scratch.Off >= p.flatElems() {
			return l.convDWFlat(s, x, w, y, scratch, p, oh, ow)
		}
		route = "depthwise" // no scratch: conv_dw_reg or conv_dw
	}
	if route == "flat" {
		if p.C > 0 && scratch.Mem != nil && scratch.Off >= 0 && scratch.Mem.Size()/s.Size()-scratch.Off >= p.flatElems() {
			return l.convFlat(s, x, w, y, scratch, p, oh, ow)
		}
		route = "tile"
	}
	switch {
	case route == "tile" || route == "depthwise" || route == "dw" || route == "dwgen" || route == "dwfgen" || p.C == 0:
		return l.convTile(s, x, w, y, p, oh, ow)
	case route == "direct" || route == "im2col" && imgs == 0:
		return l.convDirect(s, x, w, y, p, oh, ow)
	}
	g := convProduct(s, w, y, p.Weight, p.Bias, p.OutC, p.Groups, kc, np)
	if route == "gemm1x1" {
		g.b, g.bt, g.bk, g.bn = x, s, np, 1
		g.sB = [2]int{p.C * np, cg * np}
		g.nb0 = p.N
		if err := l.gemm(g); err != nil {
			return err
		}
		return l.convRes(s, y, p, np)
	}
	gather, err := l.kernel("conv", convSrc, l.convOptions(s, p.Weight), "conv_im2col")
	if err != nil {
		return err
	}
	i32 := func(v int) int32 { return int32(v) }
	if err := l.im2colRun(g, s, scratch, p.N, p.OutC, p.Groups, kc, np, imgs, gather, func(n0, cp, ck int) []any {
		return []any{x.Mem, i32(x.Off), scratch.Mem, i32(scratch.Off), i32(n0), i32(p.C), i32(p.H), i32(p.W),
			i32(oh), i32(ow), i32(p.KH), i32(p.KW), i32(p.StrideH), i32(p.StrideW),
			i32(p.PadTop), i32(p.PadLeft), i32(p.DilationH), i32(p.DilationW), i32(p.Groups),
			i32(cp), i32(ck)}
	}); err != nil {
		return err
	}
	return l.convRes(s, y, p, np)
}

// convRes is the GEMM routes' epilogue past the bias: conv_res adds the
// residual and applies the activation in place, one launch over the
// output; nothing when there is neither.
func (l *Lib) convRes(s Storage, y Buf, p ConvParams, np int) error {
	if p.Res.Mem == nil && p.Act == ConvActNone {
		return nil
	}
	k, err := l.kernel("conv", convSrc, l.convOptions(s, p.Weight), "conv_res")
	if err != nil {
		return err
	}
	n := p.N * p.OutC * np
	global, local := l.cpuGroups([]int{n})
	args := append([]any{y.Mem, int32(y.Off)}, p.resArgs(y)...)
	return l.dev.Launch(k, global, local, append(args, int32(n), int32(p.Act), p.ActA, p.ActB)...)
}

// resArgs are the conv kernels' residual arguments (conv.cl's
// CONV_RES_PARAMS): p.Res, or y standing in as a buffer never read.
func (p ConvParams) resArgs(y Buf) []any {
	if p.Res.Mem == nil {
		return []any{y.Mem, int32(y.Off), int32(0)}
	}
	return []any{p.Res.Mem, int32(p.Res.Off), int32(1)}
}

// scaleArgs are the input-scale arguments of conv_tile and conv_pw: p.Scale,
// or y standing in as a buffer never read.
func (p ConvParams) scaleArgs(y Buf) []any {
	if p.Scale.Mem == nil {
		return []any{y.Mem, int32(y.Off), int32(0)}
	}
	return []any{p.Scale.Mem, int32(p.Scale.Off), int32(1)}
}

// overlaps reports whether a (an elements, Mem nil for none) and b (bn
// elements) share a buffer and some element of it.
func overlaps(a Buf, an int, b Buf, bn int) bool {
	return a.Mem != nil && a.Mem == b.Mem && a.Off < b.Off+bn && b.Off < a.Off+an
}

// convProduct is a convolution's product, per (image, group) C[oc, pix] =
// W[oc, kc] * B[kc, pix], with the weight as the A operand; the caller sets
// B, the input itself (1x1) or its gathered fields.
func convProduct(s Storage, w, y Buf, weight Storage, bias Buf, outC, groups, kc, np int) gemm {
	ocg := outC / groups
	g := gemm{a: w, at: weight, c: y, ct: s, bias: bias, biasT: weight, hasBias: bias.Mem != nil,
		am: kc, ak: 1, cm: np, cn: 1, brm: 1, brn: 0,
		m: ocg, n: np, k: kc, nb1: groups, alpha: 1,
		sA: [2]int{0, ocg * kc}, sC: [2]int{outC * np, ocg * np}, sD: [2]int{0, ocg}}
	if g.hasBias {
		g.beta = 1
	}
	return g
}

// im2colRun is a convolution's im2col route, imgs images at a time: the
// gather kernel (args gives its arguments for a first image and the
// columns' pixel and K strides) fills scratch, and g multiplies it.
func (l *Lib) im2colRun(g gemm, s Storage, scratch Buf, n, outC, groups, kc, np, imgs int, gather *opencl.Kernel, args func(n0, cp, ck int) []any) error {
	// Pixel-major columns suit the CPU's dot kernel (K contiguous in both
	// operands); on GPUs, K-major keeps the gather's writes and the tiled
	// kernel's reads of B coalesced along pixels.
	cp, ck := kc, 1
	if l.info().Type == "GPU" || convKMajor {
		cp, ck = 1, np
	}
	for n0 := 0; n0 < n; n0 += imgs {
		cnt := min(imgs, n-n0)
		global, local := l.cpuGroups([]int{np, kc, cnt * groups})
		if ck == 1 {
			global, local = l.cpuGroups([]int{kc, np, cnt * groups})
		}
		if err := l.dev.Launch(gather, global, local, args(n0, cp, ck)...); err != nil {
			return err
		}
		gi := g
		gi.b, gi.bt, gi.bk, gi.bn = scratch, s, ck, cp
		gi.sB = [2]int{groups * kc * np, kc * np}
		gi.nb0 = cnt
		gi.c.Off += n0 * outC * np
		if err := l.gemm(gi); err != nil {
			return err
		}
	}
	return nil
}

// convKMajor, set by tests, gathers in the GPU layout on any device.
var convKMajor bool

// weightDefine is the build option for weights stored in w.
func weightDefine(w Storage) string {
	if w == F16 {
		return "-DWEIGHT_F16"
	}
	return ""
}

// convPX is the strip width of conv_tile on the device: one native vector
// on a CPU (16 lanes, a 512-bit register, with AVX-512; 8 with AVX2, whose
// 16 registers could not hold 8 rows of 16-lane accumulators, and spilled),
// 4 on a GPU, where registers per work-item are what limits occupancy.
func (l *Lib) convPX() int {
	if convPXForce != 0 {
		return convPXForce
	}
	return l.convPXDevice()
}

// convPXDevice is the device's own strip width, whatever a test forces.
func (l *Lib) convPXDevice() int {
	inf := l.info()
	switch {
	case inf.Type == "GPU":
		return 4
	case inf.NativeFloatWidth == 8:
		return 8
	}
	return 16
}

// convPXFlat is conv_flat's strip width: 16 lanes on every CPU. With
// AVX2, 16-lane strips of 8 channels spill, and still cost 15-30% less
// CPU time than 8-lane ones on ResNet-18's 3x3 layers (BenchmarkConvRoutes,
// cpu-us/op): the long reductions (C*9 of 64 to 4608) amortise the spills
// over twice the pixels per weight load. 4 on a GPU, as convPX.
func (l *Lib) convPXFlat() int {
	if convPXForce != 0 || l.info().Type == "GPU" {
		return l.convPX()
	}
	return 16
}

// convOptions are the build options of the conv program with the strip
// width convPX.
func (l *Lib) convOptions(s Storage, w Storage) string {
	return convOptionsPX(s, w, l.convPX())
}

// convOptionsPX are the build options of the conv program with strips of
// px lanes.
func convOptionsPX(s Storage, w Storage, px int) string {
	return fmt.Sprintf("%s %s -DCONV_PX=%d", s.define(), weightDefine(w), px)
}

// convTile runs conv_tile: rb output channels per work-item (8 with
// 16-lane strips where a group has that many, 1 on GPUs, else 4; 1 for
// depthwise).
func (l *Lib) convTile(s Storage, x, w, y Buf, p ConvParams, oh, ow int) error {
	if p.KH == 1 && p.KW == 1 && p.StrideH == 1 && p.StrideW == 1 && p.DilationH == 1 && p.DilationW == 1 &&
		p.PadTop == 0 && p.PadLeft == 0 && p.PadBottom == 0 && p.PadRight == 0 {
		// A plain 1x1 convolution reads each plane as one long row: strips
		// then run across output rows, and only a plane's last strip is
		// partial.
		p.W, p.H = p.H*p.W, 1
		ow, oh = oh*ow, 1
	}
	if p.C/p.Groups == 1 && p.OutC == p.Groups && p.C > 0 && convForce != "tile" && p.Scale.Mem == nil {
		return l.convDW(s, x, w, y, p, oh, ow)
	}
	ocg := p.OutC / p.Groups
	rb := 4
	switch {
	case p.C/p.Groups == 1 && ocg < 4:
		rb = 1
	case ocg >= 8 && l.convPX() >= 8:
		rb = 8
	case l.convPXDevice() == 4:
		// On the register gate's GPU, conv_tile with 2 or 4 channels kept
		// its accumulators in scratch memory (not yet understood; conv_flat,
		// with the same arrays, does not). One channel per work-item
		// passes; the GPU takes this route only for a 1x1 convolution with
		// an activation and when given no scratch.
		rb = 1
	}
	k, err := l.kernel("conv", convSrc, l.convOptions(s, p.Weight), fmt.Sprintf("conv_tile_%d", rb))
	if err != nil {
		return err
	}
	bias, hasBias := p.biasArg(w)
	if p.C == 0 {
		x = y // nothing is read; any buffer will do
	}
	px := l.convPX()
	i32 := func(v int) int32 { return int32(v) }
	global, local := l.cpuGroups([]int{oh * ((ow + px - 1) / px), (ocg + rb - 1) / rb, p.N * p.Groups})
	args := []any{x.Mem, i32(x.Off), w.Mem, i32(w.Off), bias.Mem, i32(bias.Off), hasBias,
		y.Mem, i32(y.Off), i32(p.C), i32(p.H), i32(p.W), i32(p.OutC), i32(oh), i32(ow),
		i32(p.KH), i32(p.KW), i32(p.StrideH), i32(p.StrideW), i32(p.PadTop), i32(p.PadLeft),
		i32(p.DilationH), i32(p.DilationW), i32(p.Groups), int32(p.Act), p.ActA, p.ActB}
	args = append(append(args, p.resArgs(y)...), p.scaleArgs(y)...)
	return l.dev.Launch(k, global, local, args...)
}

// convPW runs conv_pw on a 1x1 convolution with stride 1 and no padding
// over planes of np pixels (pwKernel picks the tile).
func (l *Lib) convPW(s Storage, x, w, y Buf, p ConvParams, np int) error {
	ocg := p.OutC / p.Groups
	px := l.convPX()
	name, rb, vb := pwKernel(ocg, np, px)
	k, err := l.kernel("conv", convSrc, l.convOptions(s, p.Weight), name)
	if err != nil {
		return err
	}
	bias, hasBias := p.biasArg(w)
	i32 := func(v int) int32 { return int32(v) }
	tail := append(p.resArgs(y), p.scaleArgs(y)...)
	if name == "conv_pwdot" {
		global, local := l.cpuGroups([]int{(ocg + 3) / 4, p.N * p.Groups})
		return l.dev.Launch(k, global, local, append([]any{
			x.Mem, i32(x.Off), w.Mem, i32(w.Off), bias.Mem, i32(bias.Off), hasBias,
			y.Mem, i32(y.Off), i32(p.C), i32(p.OutC), i32(p.Groups), int32(p.Act), p.ActA, p.ActB}, tail...)...)
	}
	global, local := l.cpuGroups([]int{(np + vb*px - 1) / (vb * px), (ocg + rb - 1) / rb, p.N * p.Groups})
	return l.dev.Launch(k, global, local, append([]any{
		x.Mem, i32(x.Off), w.Mem, i32(w.Off), bias.Mem, i32(bias.Off), hasBias,
		y.Mem, i32(y.Off), i32(p.C), i32(np), i32(p.OutC), i32(p.Groups), int32(p.Act), p.ActA, p.ActB}, tail...)...)
}

// convPWForce, set by tests and benchmarks, names the conv_pw kernel.
var convPWForce string

// pwKernel picks conv_pw's tile for ocg output channels a group over
// planes of np pixels with px-lane vectors: rb channels x vb vectors a
// work-item, never more channels than a group has (a work-item's block
// is shifted back to end at the group's last channel, so rb <= ocg).
// With 8- and 16-lane vectors (CPUs), 6 channels x 2 vectors where the
// plane holds two vectors, 8 x 1 on narrower planes; else 4 x 1 or 1 x 1.
// A 1x1 plane (squeeze-excite) takes conv_pwdot, dot products along the
// channels.
func pwKernel(ocg, np, px int) (name string, rb, vb int) {
	switch {
	case np == 1 && convPWForce == "":
		return "conv_pwdot", 4, 1
	case convPWForce != "":
		fmt.Sscanf(convPWForce, "conv_pw%d_%d", &vb, &rb)
		if vb == 0 {
			vb = 1
			fmt.Sscanf(convPWForce, "conv_pw_%d", &rb)
		}
		return convPWForce, rb, vb
	case px >= 8 && ocg >= 6 && np >= 2*px:
		return "conv_pw2_6", 6, 2
	case px >= 8 && ocg >= 4 && np >= 2*px:
		return "conv_pw2_4", 4, 2
	case px >= 8 && ocg >= 8:
		return "conv_pw_8", 8, 1
	case ocg >= 4:
		return "conv_pw_4", 4, 1
	}
	return "conv_pw_1", 1, 1
}

// convDWFlat runs conv_pad into scratch, then conv_dwf on the padded phase
// planes: conv_dwf_K_S where the kernel is K x K (3 or 5) at stride S (1 or
// 2) without dilation, else conv_dwf.
func (l *Lib) convDWFlat(s Storage, x, w, y, scratch Buf, p ConvParams, oh, ow int) error {
	px := l.convPX()
	opts := convOptionsPX(s, p.Weight, px)
	pad, err := l.kernel("conv", convSrc, opts, "conv_pad")
	if err != nil {
		return err
	}
	name := "conv_dwf"
	if p.KH == p.KW && (p.KH == 3 || p.KH == 5) && p.StrideH == p.StrideW && p.StrideH <= 2 &&
		p.DilationH == 1 && p.DilationW == 1 && convForce != "dwfgen" {
		name = fmt.Sprintf("conv_dwf_%d_%d", p.KH, p.StrideH)
	}
	k, err := l.kernel("conv", convSrc, opts, name)
	if err != nil {
		return err
	}
	hq, wq := p.flatPhase()
	i32 := func(v int) int32 { return int32(v) }
	if err := l.convPad(pad, s, x, scratch, p, hq, wq); err != nil {
		return err
	}
	bias, hasBias := p.biasArg(w)
	// conv.cl's CONV_DWF_VB vectors of px grid positions a work-item.
	vb := 2
	if px >= 8 {
		vb = 4
	}
	chunks, nc := (oh*wq+vb*px-1)/(vb*px), p.N*p.C
	chanFirst, dims := int32(0), []int{chunks, nc}
	if l.info().Type != "GPU" {
		// A work-group of neighbouring channels at one chunk, which a
		// small map fills too (as conv_dw_reg).
		chanFirst, dims = 1, []int{nc, chunks}
	}
	global, local := l.cpuGroups(dims)
	return l.dev.Launch(k, global, local, append([]any{
		scratch.Mem, i32(scratch.Off), w.Mem, i32(w.Off), bias.Mem, i32(bias.Off), hasBias,
		y.Mem, i32(y.Off), i32(p.C), i32(hq), i32(wq), i32(oh), i32(ow),
		i32(p.KH), i32(p.KW), i32(p.StrideH), i32(p.StrideW), i32(p.DilationH), i32(p.DilationW),
		int32(p.Act), p.ActA, p.ActB, chanFirst, i32(nc)}, p.resArgs(y)...)...)
}

// convPad launches conv_pad, copying x into scratch as hq x wq phase
// planes. On a GPU a work-item copies one row; on a CPU enough rows that
// about 64 work-items share the copy (a row of a small map is less work
// than a work-item's indexing).
func (l *Lib) convPad(pad *opencl.Kernel, s Storage, x, scratch Buf, p ConvParams, hq, wq int) error {
	planes := p.N * p.C * p.StrideH * p.StrideW
	rows := 1
	if l.info().Type != "GPU" {
		rows = max(1, min(hq, hq*planes/64))
	}
	i32 := func(v int) int32 { return int32(v) }
	global, local := l.cpuGroups([]int{(hq + rows - 1) / rows, planes})
	return l.dev.Launch(pad, global, local, x.Mem, i32(x.Off), scratch.Mem, i32(scratch.Off),
		i32(p.H), i32(p.W), i32(hq), i32(wq), i32(p.PadTop), i32(p.PadLeft), i32(p.StrideH), i32(p.StrideW), i32(rows))
}

// convFlat runs conv_pad into scratch, then conv_flat on the padded phase
// planes.
func (l *Lib) convFlat(s Storage, x, w, y, scratch Buf, p ConvParams, oh, ow int) error {
	px := l.convPXFlat()
	opts := convOptionsPX(s, p.Weight, px)
	pad, err := l.kernel("conv", convSrc, opts, "conv_pad")
	if err != nil {
		return err
	}
	ocg := p.OutC / p.Groups
	rb := 4
	if ocg >= 8 && px >= 8 {
		rb = 8
	}
	k, err := l.kernel("conv", convSrc, opts, fmt.Sprintf("conv_flat_%d", rb))
	if err != nil {
		return err
	}
	hq, wq := p.flatPhase()
	i32 := func(v int) int32 { return int32(v) }
	if err := l.convPad(pad, s, x, scratch, p, hq, wq); err != nil {
		return err
	}
	bias, hasBias := p.biasArg(w)
	global, local := l.cpuGroups([]int{(oh*wq + px - 1) / px, (ocg + rb - 1) / rb, p.N * p.Groups})
	return l.dev.Launch(k, global, local, append([]any{
		scratch.Mem, i32(scratch.Off), w.Mem, i32(w.Off), bias.Mem, i32(bias.Off), hasBias,
		y.Mem, i32(y.Off), i32(p.C), i32(hq), i32(wq), i32(p.OutC), i32(oh), i32(ow),
		i32(p.KH), i32(p.KW), i32(p.StrideH), i32(p.StrideW), i32(p.DilationH), i32(p.DilationW),
		i32(p.Groups), int32(p.Act), p.ActA, p.ActB}, p.resArgs(y)...)...)
}

// convWino runs Winograd F(2x2, 3x3) (conv.cl's conv_wino_*): the weight
// and the input transformed into scratch, the 16 products as one batched
// GEMM (transposed B, so CPUs take their dot kernels and GPUs mm_reg),
// and the output transform with the bias and activation. The weight is
// transformed on every call (Conv2D cannot know that a weight buffer
// stays constant) unless p.WinogradWeight says the caller did it once.
func (l *Lib) convWino(s Storage, x, w, y, scratch Buf, p ConvParams, oh, ow int) error {
	opts := l.convOptions(s, p.Weight)
	var ks [3]*opencl.Kernel
	for i, name := range []string{"conv_wino_w", "conv_wino_in", "conv_wino_out"} {
		k, err := l.kernel("conv", convSrc, opts, name)
		if err != nil {
			return err
		}
		ks[i] = k
	}
	th, tw, t := p.winoTiles()
	c, k := p.C, p.OutC
	u, ut, v := scratch, s, Buf{Mem: scratch.Mem, Off: scratch.Off + 16*k*c}
	if p.WinogradWeight {
		u, ut, v = w, p.Weight, scratch
	}
	m := Buf{Mem: scratch.Mem, Off: v.Off + 16*t*c}
	// conv.cl's WV: channels per transform work-item.
	wv := 1
	if l.convPX() >= 8 {
		wv = 8
	}
	i32 := func(v int) int32 { return int32(v) }
	if !p.WinogradWeight {
		global, local := l.cpuGroups([]int{(c + wv - 1) / wv, k})
		if err := l.dev.Launch(ks[0], global, local, w.Mem, i32(w.Off), u.Mem, i32(u.Off), i32(c), i32(k)); err != nil {
			return err
		}
	}
	global, local := l.cpuGroups([]int{(c + wv - 1) / wv, t})
	if err := l.dev.Launch(ks[1], global, local, x.Mem, i32(x.Off), v.Mem, i32(v.Off), i32(c), i32(p.H), i32(p.W),
		i32(th), i32(tw), i32(t), i32(p.PadTop), i32(p.PadLeft)); err != nil {
		return err
	}
	g := gemm{a: v, at: s, b: u, bt: ut, c: m, ct: s, biasT: s,
		am: c, ak: 1, bk: 1, bn: c, cm: k, cn: 1,
		m: t, n: k, k: c, nb0: 16, nb1: 1, alpha: 1,
		sA: [2]int{t * c, 0}, sB: [2]int{k * c, 0}, sC: [2]int{t * k, 0}}
	if err := l.gemm(g); err != nil {
		return err
	}
	bias, hasBias := p.biasArg(w)
	global, local = l.cpuGroups([]int{(k + wv - 1) / wv, t})
	return l.dev.Launch(ks[2], global, local, append([]any{m.Mem, i32(m.Off), bias.Mem, i32(bias.Off), hasBias,
		y.Mem, i32(y.Off), i32(k), i32(oh), i32(ow), i32(th), i32(tw), i32(t), int32(p.Act), p.ActA, p.ActB},
		p.resArgs(y)...)...)
}

// convDWOneBlock, set by benchmarks, gives conv_dw one block of rows per
// work-item on a CPU too.
var convDWOneBlock bool

// convDWRows is how many output rows a conv_dw work-item computes per
// block (conv.cl's CONV_DW_ROWS).
func (l *Lib) convDWRows() int {
	if l.convPX() >= 8 {
		return 4
	}
	return 2
}

// dwKernel picks the depthwise kernel for p (one input and one output
// channel per group): conv_dw_reg, which cuts every kw's window from one
// load of the row, where the window fits its registers (kernel width up to
// 5, stride 1 or 2 and no dilation along the width), else conv_dw. Tests
// force conv_dw with convForce "dwgen". GPUs always take conv_dw: the
// register windows of conv_dw_reg held 86-89 VGPRs on the register gate's
// 64-register target.
func dwKernel(p ConvParams, gpu bool) string {
	if !gpu && convForce != "dwgen" && p.KW <= 5 && p.StrideW <= 2 && p.DilationW == 1 {
		return "conv_dw_reg"
	}
	return "conv_dw"
}

// convDW runs the depthwise kernel dwKernel picks.
func (l *Lib) convDW(s Storage, x, w, y Buf, p ConvParams, oh, ow int) error {
	name := dwKernel(p, l.info().Type == "GPU")
	k, err := l.kernel("conv", convSrc, l.convOptions(s, p.Weight), name)
	if err != nil {
		return err
	}
	bias, hasBias := p.biasArg(w)
	px := l.convPX()
	i32 := func(v int) int32 { return int32(v) }
	blocks := (oh + l.convDWRows() - 1) / l.convDWRows()
	cpu := l.info().Type != "GPU"
	nblk := 1
	if cpu && !convDWOneBlock {
		nblk = blocks
	}
	tiles := (blocks + nblk - 1) / nblk * ((ow + px - 1) / px)
	args := []any{x.Mem, i32(x.Off), w.Mem, i32(w.Off), bias.Mem, i32(bias.Off), hasBias,
		y.Mem, i32(y.Off), i32(p.C), i32(p.H), i32(p.W), i32(p.OutC), i32(oh), i32(ow),
		i32(p.KH), i32(p.KW), i32(p.StrideH), i32(p.StrideW), i32(p.PadTop), i32(p.PadLeft),
		i32(p.DilationH), i32(p.DilationW), i32(p.Groups), int32(p.Act), p.ActA, p.ActB}
	args = append(append(append(args, p.resArgs(y)...), p.scaleArgs(y)...), i32(nblk))
	if name == "conv_dw" {
		global, local := l.cpuGroups([]int{tiles, 1, p.N * p.C})
		return l.dev.Launch(k, global, local, args...)
	}
	// On a CPU, channels along dimension 0: a work-group then holds
	// cpuGroup channels of one strip, where strips along it left a 7x7
	// map's groups three quarters empty. Strips along it would suit a GPU
	// (neighbouring work-items reading neighbouring columns), which
	// dwKernel does not give this kernel today.
	chanFirst := int32(0)
	dims := []int{tiles, p.N * p.C}
	if cpu {
		chanFirst, dims = 1, []int{p.N * p.C, tiles}
	}
	global, local := l.cpuGroups(dims)
	return l.dev.Launch(k, global, local, append(args, chanFirst, i32(p.N*p.C))...)
}

func (l *Lib) convDirect(s Storage, x, w, y Buf, p ConvParams, oh, ow int) error {
	k, err := l.kernel("conv", convSrc, l.convOptions(s, p.Weight), "conv_direct")
	if err != nil {
		return err
	}
	bias, hasBias := p.biasArg(w)
	i32 := func(v int) int32 { return int32(v) }
	global, local := l.cpuGroups([]int{ow, oh, p.N * p.OutC})
	return l.dev.Launch(k, global, local, append([]any{
		x.Mem, i32(x.Off), w.Mem, i32(w.Off), bias.Mem, i32(bias.Off), hasBias,
		y.Mem, i32(y.Off), i32(p.C), i32(p.H), i32(p.W), i32(p.OutC), i32(oh), i32(ow),
		i32(p.KH), i32(p.KW), i32(p.StrideH), i32(p.StrideW), i32(p.PadTop), i32(p.PadLeft),
		i32(p.DilationH), i32(p.DilationW), i32(p.Groups), int32(p.Act), p.ActA, p.ActB}, p.resArgs(y)...)...)
}

// Conv2DRef is the pure-Go reference for Conv2D on host tensors (bias nil
// for none; p.Bias, p.Res and p.Scale are ignored), accumulated in
// float64, then p.Act. It takes the original weight only (not
// p.WinogradWeight's).
func Conv2DRef(x, w, bias, y []float32, p ConvParams) error {
	return Conv2DResRef(x, w, bias, nil, nil, y, p)
}

// Conv2DResRef is Conv2DRef with a residual res of the output's shape
// added before the activation and each input channel of image n scaled
// by scale[n*C + c] (nil for none; p.Res and p.Scale are ignored): the
// reference for ConvParams.Res and ConvParams.Scale.
func Conv2DResRef(x, w, bias, res, scale, y []float32, p ConvParams) error {
	p, err := p.norm()
	if err != nil {
		return fmt.Errorf("kernels: Conv2DRef: %w", err)
	}
	if p.WinogradWeight {
		return fmt.Errorf("kernels: Conv2DRef: a Winograd-transformed weight; the reference takes the original")
	}
	oh, ow := p.OutSize()
	cg, ocg := p.C/p.Groups, p.OutC/p.Groups
	if len(x) < p.N*p.C*p.H*p.W || len(w) < p.OutC*cg*p.KH*p.KW || len(y) < p.N*p.OutC*oh*ow ||
		bias != nil && len(bias) < p.OutC || res != nil && len(res) < p.N*p.OutC*oh*ow ||
		scale != nil && len(scale) < p.N*p.C {
		return fmt.Errorf("kernels: Conv2DRef: a slice is shorter than %+v needs", p)
	}
	for n := 0; n < p.N; n++ {
		for oc := 0; oc < p.OutC; oc++ {
			g := oc / ocg
			for i := 0; i < oh; i++ {
				for j := 0; j < ow; j++ {
					var acc float64
					for ic := 0; ic < cg; ic++ {
						for kh := 0; kh < p.KH; kh++ {
							ih := i*p.StrideH - p.PadTop + kh*p.DilationH
							if ih < 0 || ih >= p.H {
								continue
							}
							for kw := 0; kw < p.KW; kw++ {
								iw := j*p.StrideW - p.PadLeft + kw*p.DilationW
								if iw < 0 || iw >= p.W {
									continue
								}
								xv := float64(x[((n*p.C+g*cg+ic)*p.H+ih)*p.W+iw])
								if scale != nil {
									xv *= float64(scale[n*p.C+g*cg+ic])
								}
								wv := w[((oc*cg+ic)*p.KH+kh)*p.KW+kw]
								acc += xv * float64(wv)
							}
						}
					}
					if bias != nil {
						acc += float64(bias[oc])
					}
					o := ((n*p.OutC+oc)*oh+i)*ow + j
					if res != nil {
						acc += float64(res[o])
					}
					y[o] = float32(p.Act.apply(acc, p.ActA, p.ActB))
				}
			}
		}
	}
	return nil
}
