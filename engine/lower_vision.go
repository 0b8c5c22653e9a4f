package engine

import (
	"fmt"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
)

// The operators of vision networks beyond 2-D convolution and pooling:
// Resize and Upsample, ConvTranspose, and 3-D Conv and pooling (reached from
// lowerConv and lowerPool by the input's rank), with MaxPool's Indices.

func init() {
	registerLowering(lowerResize, "Resize", "Upsample")
	registerLowering(lowerConvTranspose, "ConvTranspose")
}

// constFloats returns v's contents when they are constants known at Open,
// as float64 whatever the element type.
func (lc *lowerCtx) constFloats(v *vinfo) ([]float64, bool) {
	if v == nil || v.kind != vkConst || v.konst == nil {
		return nil, false
	}
	if v.dt == dtype.Float32 || v.dt == dtype.Float16 || v.dt == dtype.Float64 {
		f, err := v.konst.floats()
		return f, err == nil
	}
	iv, err := v.konst.ints()
	if err != nil {
		return nil, false
	}
	out := make([]float64, len(iv))
	for i, x := range iv {
		out[i] = float64(x)
	}
	return out, true
}

// lowerResize lowers Resize (opsets 10 to 19) and Upsample (7 to 9). Scales,
// sizes and roi must be known at Open (constants, or sizes computed from
// shapes): the output shape depends on them and the plan is made at Open.
func lowerResize(lc *lowerCtx) (*stepDef, error) {
	x, y := lc.in(0), lc.out(0)
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	rank := len(x.shape)
	if rank == 0 {
		return nil, lc.unsupported("a scalar input has nothing to resize")
	}
	n := lc.n
	up := n.OpType == "Upsample"
	old := up || lc.opset < 11 // Resize-10 has Upsample's semantics
	p := kernels.ResizeParams{Coord: kernels.CoordAsymmetric, Nearest: kernels.NearestFloor, CubicA: -0.75}
	modeName := n.AttrString("mode", "nearest")
	if old && modeName == "bilinear" {
		modeName = "linear" // Upsample-7's name for it
	}
	if p.Mode, err = kernels.ParseResizeMode(modeName); err != nil {
		return nil, lc.unsupported("%v", err)
	}
	if old && p.Mode == kernels.ResizeCubic {
		return nil, lc.unsupported("cubic mode before opset 11")
	}
	if !old {
		if p.Coord, err = kernels.ParseResizeCoord(n.AttrString("coordinate_transformation_mode", "half_pixel")); err != nil {
			return nil, lc.unsupported("%v", err)
		}
		if p.Nearest, err = kernels.ParseNearestMode(n.AttrString("nearest_mode", "round_prefer_floor")); err != nil {
			return nil, lc.unsupported("%v", err)
		}
		p.CubicA = float32(n.AttrFloat("cubic_coeff_a", -0.75))
		p.ExcludeOutside = n.AttrInt("exclude_outside", 0) != 0
		p.Extrapolation = float32(n.AttrFloat("extrapolation_value", 0))
		p.Antialias = n.AttrInt("antialias", 0) != 0
	}
	policy := n.AttrString("keep_aspect_ratio_policy", "stretch")
	var axes []int
	if a, ok := n.AttrInts("axes"); ok {
		for _, v := range a {
			axes = append(axes, int(v))
		}
	}
	// The inputs: Upsample-7 has scales as an attribute, Upsample-9 and
	// Resize-10 as input 1; Resize-11 on has roi, scales, sizes.
	var scales []float64
	var sizes []symshape.Expr
	var roi []float64
	switch {
	case up && lc.opset < 9:
		f, ok := n.AttrFloats("scales")
		if !ok {
			return nil, lc.unsupported("no scales attribute")
		}
		for _, v := range f {
			scales = append(scales, float64(v))
		}
	case old:
		f, ok := lc.constFloats(lc.in(1))
		if !ok {
			return nil, lc.unsupported("scales are not constant at Open")
		}
		scales = f
	default:
		if v := lc.in(3); v != nil {
			sz, ok := lc.ints(v)
			if !ok {
				return nil, lc.unsupported("sizes are not known at Open")
			}
			sizes = sz
		}
		if v := lc.in(2); v != nil && len(v.shape) == 1 {
			if k, ok := v.shape[0].Const(); !ok || k > 0 {
				f, ok := lc.constFloats(v)
				if !ok {
					return nil, lc.unsupported("scales are not constant at Open")
				}
				scales = f
			}
		}
		if len(scales) > 0 && len(sizes) > 0 {
			return nil, lc.unsupported("both scales and sizes are given")
		}
		if len(scales) == 0 && sizes == nil {
			return nil, lc.unsupported("neither scales nor sizes is given")
		}
		if p.Coord == kernels.CoordTFCropAndResize {
			f, ok := lc.constFloats(lc.in(1))
			if !ok {
				return nil, lc.unsupported("roi is not constant at Open")
			}
			roi = f
		}
	}
	if old && p.Mode == kernels.ResizeNearest {
		// Upsample and Resize-10 pick the nearest input by truncating
		// x / scale; ONNX's opset-10 cases (and ONNX Runtime) round up
		// instead on axes that shrink. The kernel has one rounding for all
		// axes, so a resize that grows one axis and shrinks another is
		// refused.
		up, down := false, false
		for _, sc := range scales {
			up = up || sc > 1
			down = down || sc < 1
		}
		if up && down {
			return nil, lc.unsupported("nearest resize that grows some axes and shrinks others before opset 11")
		}
		if down {
			p.Nearest = kernels.NearestCeil
		}
	}
	nax := rank
	if axes != nil {
		nax = len(axes)
	}
	if roi != nil {
		if len(roi) != 2*nax {
			return nil, lc.unsupported("roi has %d entries for %d axes", len(roi), nax)
		}
		p.RoiStart, p.RoiEnd = make([]float64, rank), make([]float64, rank)
		for i := range p.RoiEnd {
			p.RoiEnd[i] = 1
		}
		for j := 0; j < nax; j++ {
			a := j
			if axes != nil {
				if a, err = normAxis(int64(axes[j]), rank); err != nil {
					return nil, lc.unsupported("%v", err)
				}
			}
			p.RoiStart[a], p.RoiEnd[a] = roi[j], roi[nax+j]
		}
	}
	// Resolve the geometry once now, to refuse what the kernels refuse at
	// Open rather than at Run, when the input's shape is known.
	// geometry resolves the kernel's params for input shape in and the
	// evaluated sizes sz (nil when scales are given).
	geometry := func(in, sz []int) (kernels.ResizeParams, error) {
		q := p
		var sc []float64
		if sizes == nil {
			sc = scales
		}
		out, scl, err := kernels.ResizeShape(in, sc, sz, axes, policy)
		if err != nil {
			return q, err
		}
		q.In, q.Out, q.Scales = in, out, scl
		return q, nil
	}
	sd := &stepDef{kernel: "resize"}
	esz, _ := lc.esize(x)
	xs, xconst := constShape(x.shape)
	szc, szconst := constShape(sizes)
	if sizes == nil {
		szc = nil
	}
	if xconst && szconst {
		// Refuse at Open what the kernels would refuse at Run.
		q, err := geometry(xs, szc)
		if err != nil {
			return nil, lc.unsupported("%v", err)
		}
		if k := q.ScratchElems(); k > 0 {
			sd.scratch = []symshape.Expr{symshape.Const(int64(k * esz))}
		}
	} else {
		// At most two intermediates, each no larger than the product of the
		// larger of each axis's input and output lengths.
		e := symshape.Const(int64(2 * esz))
		for i := range x.shape {
			e = symshape.Mul(e, symshape.Max(x.shape[i], y.shape[i]))
		}
		sd.scratch = []symshape.Expr{e}
	}
	sd.run = func(ex *exec) error {
		xs, ys := ex.shape(x), ex.shape(y)
		var sz []int
		if sizes != nil {
			v, err := ex.eval(sizes)
			if err != nil {
				return fmt.Errorf("Resize sizes: %w", err)
			}
			for _, k := range v {
				sz = append(sz, int(k))
			}
		}
		q, err := geometry(xs, sz)
		if err != nil {
			return err
		}
		out := q.Out
		for i := range out {
			if out[i] != ys[i] {
				return fmt.Errorf("Resize of %v gives %v; the plan has %v", xs, out, ys)
			}
		}
		var scratch kernels.Buf
		if len(ex.scratch) > 0 {
			scratch = ex.scratch[0].buf()
		}
		return ex.dev.Resize(s, ex.ref(x).buf(), ex.ref(y).buf(), scratch, q)
	}
	return sd, nil
}

// lowerConvTranspose lowers a 1-D, 2-D or 3-D transposed convolution.
func lowerConvTranspose(lc *lowerCtx) (*stepDef, error) {
	x, w, bias, y := lc.in(0), lc.in(1), lc.in(2), lc.out(0)
	if x == nil || w == nil {
		return nil, lc.unsupported("needs X and W")
	}
	s, err := lc.floatStorage(x)
	if err != nil {
		return nil, err
	}
	if _, err := lc.floatStorage(w); err != nil {
		return nil, err
	}
	rank := len(x.shape)
	if rank < 3 || rank > 5 {
		return nil, lc.unsupported("input of rank %d; only 1-D, 2-D and 3-D transposed convolutions are supported", rank)
	}
	if len(w.shape) != rank {
		return nil, lc.unsupported("weight of rank %d for input of rank %d", len(w.shape), rank)
	}
	nd := rank - 2
	n := lc.n
	attr := func(name string, def int, size int) ([]int, error) {
		out := make([]int, size)
		for i := range out {
			out[i] = def
		}
		v, ok := n.AttrInts(name)
		if !ok {
			return out, nil
		}
		if len(v) != size {
			return nil, lc.unsupported("%s %v for %d spatial dims", name, v, nd)
		}
		for i, k := range v {
			out[i] = int(k)
		}
		return out, nil
	}
	strides, err := attr("strides", 1, nd)
	if err != nil {
		return nil, err
	}
	dil, err := attr("dilations", 1, nd)
	if err != nil {
		return nil, err
	}
	outPad, err := attr("output_padding", 0, nd)
	if err != nil {
		return nil, err
	}
	pads, err := attr("pads", 0, 2*nd)
	if err != nil {
		return nil, err
	}
	outShape, err := attr("output_shape", -1, nd)
	if err != nil {
		return nil, err
	}
	if os, ok := n.AttrInts("output_shape"); ok && len(os) == nd+2 {
		// Some exporters give the whole shape; the spatial part is what counts.
		for i := range outShape {
			outShape[i] = int(os[i+2])
		}
	}
	autoPad := n.AttrString("auto_pad", "NOTSET")
	groups := int(n.AttrInt("group", 1))
	if groups <= 0 {
		return nil, lc.unsupported("group %d", groups)
	}
	// geometry turns the input's and weight's shapes into kernel params, in
	// 3-D form (1-D and 2-D as leading axes of size one).
	geometry := func(xs, ws []int) (kernels.ConvTranspose3DParams, error) {
		p := kernels.ConvTranspose3DParams{N: xs[0], C: xs[1], OutC: ws[1] * groups, Groups: groups, Weight: s}
		if ws[0] != xs[1] {
			return p, fmt.Errorf("weight %v does not take %d input channels", ws, xs[1])
		}
		in := [3]int{1, 1, 1}
		off := 3 - nd
		p.Kernel, p.Stride, p.Dilation = [3]int{1, 1, 1}, [3]int{1, 1, 1}, [3]int{1, 1, 1}
		for i := 0; i < nd; i++ {
			a := off + i
			in[a], p.Kernel[a], p.Stride[a], p.Dilation[a], p.OutPad[a] = xs[2+i], ws[2+i], strides[i], dil[i], outPad[i]
			b, e, _, err := kernels.ConvTransposeAxis(xs[2+i], ws[2+i], strides[i], dil[i], outPad[i], pads[i], pads[nd+i], autoPad, outShape[i])
			if err != nil {
				return p, err
			}
			p.PadBegin[a], p.PadEnd[a] = b, e
		}
		p.D, p.H, p.W = in[0], in[1], in[2]
		return p, nil
	}
	// flat is the 2-D kernel's params for a 1-D or 2-D transposed convolution.
	flat := func(p kernels.ConvTranspose3DParams) kernels.ConvTransposeParams {
		return kernels.ConvTransposeParams{N: p.N, C: p.C, H: p.H, W: p.W, OutC: p.OutC, KH: p.Kernel[1], KW: p.Kernel[2],
			StrideH: p.Stride[1], StrideW: p.Stride[2], PadTop: p.PadBegin[1], PadLeft: p.PadBegin[2],
			PadBottom: p.PadEnd[1], PadRight: p.PadEnd[2], DilationH: p.Dilation[1], DilationW: p.Dilation[2],
			OutPadH: p.OutPad[1], OutPadW: p.OutPad[2], Groups: p.Groups, Bias: p.Bias, Weight: p.Weight}
	}
	scratchElems := func(p kernels.ConvTranspose3DParams) int {
		if nd == 3 {
			return p.ScratchElems()
		}
		return flat(p).ScratchElems()
	}
	sd := &stepDef{kernel: "conv"}
	// The GEMM route's columns are float32 whatever the activation storage.
	const colBytes = 4
	if xs, ok := constShape(x.shape); ok {
		if ws, ok := constShape(w.shape); ok {
			p, err := geometry(xs, ws)
			if err != nil {
				return nil, lc.unsupported("%v", err)
			}
			if k := scratchElems(p); k > 0 {
				sd.scratch = []symshape.Expr{symshape.Const(int64(k * colBytes))}
			}
		}
	} else if ws, ok := constShape(w.shape); ok {
		// N * OutC*K * input spatial elements.
		kvol := ws[1] * groups
		for _, k := range ws[2:] {
			kvol *= k
		}
		e := symshape.Mul(x.shape[0], symshape.Const(int64(kvol*colBytes)))
		for _, d := range x.shape[2:] {
			e = symshape.Mul(e, d)
		}
		sd.scratch = []symshape.Expr{e}
	}
	sd.run = func(ex *exec) error {
		xs, ws, ys := ex.shape(x), ex.shape(w), ex.shape(y)
		p, err := geometry(xs, ws)
		if err != nil {
			return err
		}
		o := p.OutSize()
		want := append([]int{p.N, p.OutC}, o[3-nd:]...)
		if !equalInts(want, ys) {
			return fmt.Errorf("ConvTranspose of %v by %v gives %v; the plan has %v", xs, ws, want, ys)
		}
		if bias != nil {
			p.Bias = ex.ref(bias).buf()
		}
		var scratch kernels.Buf
		if len(ex.scratch) > 0 {
			scratch = ex.scratch[0].buf()
		}
		if nd == 3 {
			return ex.dev.ConvTranspose3D(s, ex.ref(x).buf(), ex.ref(w).buf(), ex.ref(y).buf(), scratch, p)
		}
		return ex.dev.ConvTranspose2D(s, ex.ref(x).buf(), ex.ref(w).buf(), ex.ref(y).buf(), scratch, flat(p))
	}
	return sd, nil
}

// volume reads the 3-D geometry attributes of a convolution or pooling node
// (per-axis arrays in D, H, W order).
type volume struct {
	kernel, strides, dil [3]int
	pb, pe               [3]int
	autoPad              string
	haveKernel           bool
}

func readVolume(lc *lowerCtx) (volume, error) {
	var v volume
	n := lc.n
	get := func(name string, def int, dst []int) error {
		for i := range dst {
			dst[i] = def
		}
		a, ok := n.AttrInts(name)
		if !ok {
			return nil
		}
		if len(a) != len(dst) {
			return lc.unsupported("%s %v for 3 spatial dims", name, a)
		}
		for i, k := range a {
			dst[i] = int(k)
		}
		return nil
	}
	_, v.haveKernel = n.AttrInts("kernel_shape")
	pads := make([]int, 6)
	for _, e := range []error{get("kernel_shape", 0, v.kernel[:]), get("strides", 1, v.strides[:]),
		get("dilations", 1, v.dil[:]), get("pads", 0, pads)} {
		if e != nil {
			return v, e
		}
	}
	copy(v.pb[:], pads[:3])
	copy(v.pe[:], pads[3:])
	v.autoPad = n.AttrString("auto_pad", "NOTSET")
	switch v.autoPad {
	case "NOTSET", "SAME_UPPER", "SAME_LOWER":
	case "VALID":
		v.pb, v.pe = [3]int{}, [3]int{}
	default:
		return v, lc.unsupported("auto_pad %q", v.autoPad)
	}
	return v, nil
}

// padsFor resolves SAME padding for the spatial sizes in, as padsFor of
// spatial does for 2-D.
func (v volume) padsFor(in [3]int, kernel [3]int) (pb, pe [3]int) {
	if v.autoPad != "SAME_UPPER" && v.autoPad != "SAME_LOWER" {
		return v.pb, v.pe
	}
	for i := range in {
		s := v.strides[i]
		out := (in[i] + s - 1) / s
		total := max(0, (out-1)*s+(kernel[i]-1)*v.dil[i]+1-in[i])
		if v.autoPad == "SAME_UPPER" {
			pb[i], pe[i] = total/2, total-total/2
		} else {
			pb[i], pe[i] = total-total/2, total/2
		}
	}
	return pb, pe
}

// lowerConv3D lowers Conv on a 5-D input.
func lowerConv3D(lc *lowerCtx, s kernels.Storage) (*stepDef, error) {
	x, w, bias, y := lc.in(0), lc.in(1), lc.in(2), lc.out(0)
	if len(w.shape) != 5 {
		return nil, lc.unsupported("weight of rank %d for a 3-D convolution", len(w.shape))
	}
	v, err := readVolume(lc)
	if err != nil {
		return nil, err
	}
	groups := int(lc.n.AttrInt("group", 1))
	if groups <= 0 {
		return nil, lc.unsupported("group %d", groups)
	}
	geometry := func(xs, ws []int) kernels.Conv3DParams {
		k := [3]int{ws[2], ws[3], ws[4]}
		pb, pe := v.padsFor([3]int{xs[2], xs[3], xs[4]}, k)
		return kernels.Conv3DParams{N: xs[0], C: xs[1], D: xs[2], H: xs[3], W: xs[4], OutC: ws[0],
			Kernel: k, Stride: v.strides, Dilation: v.dil, PadBegin: pb, PadEnd: pe, Groups: groups, Weight: s}
	}
	_, esz, _ := storeFor(x.dt, lc.fs)
	sd := &stepDef{kernel: "conv"}
	if ws, ok := constShape(w.shape); ok {
		// The GEMM route's receptive fields: N*C*KD*KH*KW*OD*OH*OW elements,
		// when kernels.Conv3DParams routes there.
		if q := (kernels.Conv3DParams{C: ws[1] * groups, OutC: ws[0], Groups: groups, Kernel: [3]int{ws[2], ws[3], ws[4]}}); q.C/groups*ws[2]*ws[3]*ws[4] >= 16 && ws[0]/groups >= 4 {
			e := symshape.Mul(x.shape[0], symshape.Const(int64(ws[1]*groups*ws[2]*ws[3]*ws[4]*esz)))
			for _, d := range y.shape[2:] {
				e = symshape.Mul(e, d)
			}
			sd.scratch = []symshape.Expr{e}
		}
	}
	sd.run = func(ex *exec) error {
		p := geometry(ex.shape(x), ex.shape(w))
		if bias != nil {
			p.Bias = ex.ref(bias).buf()
		}
		var scratch kernels.Buf
		if len(ex.scratch) > 0 {
			scratch = ex.scratch[0].buf()
		}
		return ex.dev.Conv3D(s, ex.ref(x).buf(), ex.ref(w).buf(), ex.ref(y).buf(), scratch, p)
	}
	return sd, nil
}

// lowerPoolVolume lowers MaxPool and AveragePool on 5-D inputs, and MaxPool
// with its Indices output at any spatial rank up to 3.
func lowerPoolVolume(lc *lowerCtx, s kernels.Storage) (*stepDef, error) {
	x, y := lc.in(0), lc.out(0)
	rank := len(x.shape)
	if rank < 3 || rank > 5 {
		return nil, lc.unsupported("input of rank %d", rank)
	}
	nd := rank - 2
	n := lc.n
	var v volume
	// Read the attributes for nd dims and widen to three, leading axes of
	// size one.
	read := func(name string, def int) ([]int, error) {
		size := nd
		if name == "pads" {
			size = 2 * nd
		}
		out := make([]int, size)
		for i := range out {
			out[i] = def
		}
		a, ok := n.AttrInts(name)
		if !ok {
			return out, nil
		}
		if len(a) != size {
			return nil, lc.unsupported("%s %v for %d spatial dims", name, a, nd)
		}
		for i, k := range a {
			out[i] = int(k)
		}
		return out, nil
	}
	k, err := read("kernel_shape", 0)
	if err != nil {
		return nil, err
	}
	if _, ok := n.AttrInts("kernel_shape"); !ok {
		return nil, lc.unsupported("no kernel_shape")
	}
	st, err := read("strides", 1)
	if err != nil {
		return nil, err
	}
	dl, err := read("dilations", 1)
	if err != nil {
		return nil, err
	}
	pd, err := read("pads", 0)
	if err != nil {
		return nil, err
	}
	off := 3 - nd
	v.kernel, v.strides, v.dil = [3]int{1, 1, 1}, [3]int{1, 1, 1}, [3]int{1, 1, 1}
	for i := 0; i < nd; i++ {
		v.kernel[off+i], v.strides[off+i], v.dil[off+i] = k[i], st[i], dl[i]
		v.pb[off+i], v.pe[off+i] = pd[i], pd[nd+i]
	}
	v.autoPad = n.AttrString("auto_pad", "NOTSET")
	switch v.autoPad {
	case "NOTSET", "SAME_UPPER", "SAME_LOWER":
	case "VALID":
		v.pb, v.pe = [3]int{}, [3]int{}
	default:
		return nil, lc.unsupported("auto_pad %q", v.autoPad)
	}
	for i := 0; i < 3; i++ {
		if e := (v.kernel[i]-1)*v.dil[i] + 1; 2*v.pb[i] > e || 2*v.pe[i] > e {
			return nil, lc.unsupported("pads %v exceed half the dilated window %v", pd, k)
		}
	}
	ceil := n.AttrInt("ceil_mode", 0) != 0
	includePad := n.AttrInt("count_include_pad", 0) != 0
	avg := n.OpType == "AveragePool"
	withIdx := lc.used(1)
	colMajor := n.AttrInt("storage_order", 0) != 0
	if colMajor && !withIdx {
		colMajor = false // storage_order only says how Indices count
	}
	var idx *vinfo
	if withIdx {
		if avg {
			return nil, lc.unsupported("AveragePool has one output")
		}
		idx = lc.out(1)
		if idx.dt != dtype.Int64 {
			return nil, lc.unsupported("Indices of type %v", idx.dt)
		}
	}
	return &stepDef{kernel: "pool", run: func(ex *exec) error {
		xs := ex.shape(x)
		var in [3]int
		in[0], in[1] = 1, 1
		for i := 0; i < nd; i++ {
			in[off+i] = xs[2+i]
		}
		pb, pe := v.padsFor(in, v.kernel)
		if nd < 3 {
			for i := 0; i < off; i++ {
				pb[i], pe[i] = 0, 0
			}
		}
		p := kernels.Pool3DParams{N: xs[0], C: xs[1], D: in[0], H: in[1], W: in[2], Kernel: v.kernel,
			Stride: v.strides, Dilation: v.dil, PadBegin: pb, PadEnd: pe, CeilMode: ceil, CountIncludePad: includePad}
		switch {
		case withIdx:
			return ex.dev.MaxPoolWithIndices(s, ex.ref(x).buf(), ex.ref(y).buf(), ex.ref(idx).buf(), colMajor, p)
		case avg:
			return ex.dev.AvgPool3D(s, ex.ref(x).buf(), ex.ref(y).buf(), p)
		}
		return ex.dev.MaxPool3D(s, ex.ref(x).buf(), ex.ref(y).buf(), p)
	}}, nil
}
