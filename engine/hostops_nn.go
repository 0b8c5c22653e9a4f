package engine

import (
	"fmt"
	"math"

	"github.com/tlite/tlite/graph/dtype"
)

// Operators computed on the CPU because no network this engine targets runs
// them in its hot path, and a kernel family each would cost more than it
// saves: losses a training export keeps, index scatters and gathers,
// Hardmax, TopK, OneHot and the like. They read device inputs back, compute
// in float64 or int64, and upload what a device step reads next. Ops that
// also have a device lowering (LayerNormalization) come here only for the
// uses the lowering refuses.

func init() {
	registerHost(hostLoss, "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
	registerHost(hostLayerNorm, "LayerNormalization")
	registerHost(hostHardmax, "Hardmax")
	registerHost(hostOneHot, "OneHot")
	registerHost(hostCumSum, "CumSum")
	registerHost(hostBitShift, "BitShift")
	registerHost(hostScatterElements, "ScatterElements", "Scatter")
	registerHost(hostScatterND, "ScatterND")
	registerHost(hostGatherND, "GatherND")
	registerHost(hostTopK, "TopK")
	registerHost(hostReverseSequence, "ReverseSequence")
	registerHost(hostUnaryFloat(math.Acos), "Acos")
	registerHost(hostUnaryFloat(math.Asin), "Asin")
	registerHost(hostUnaryFloat(math.Atan), "Atan")
	registerHost(hostDet, "Det")
	registerHost(hostLRN, "LRN")
	registerHost(hostMVN, "MeanVarianceNormalization")
}

// normAxisHost is normAxis with the op's context in the error.
func normAxisHost(a int64, rank int) (int, error) {
	ax, err := normAxis(a, rank)
	if err != nil {
		return 0, err
	}
	return ax, nil
}

// hostLoss computes NegativeLogLikelihoodLoss on log-probabilities, and
// SoftmaxCrossEntropyLoss as the same over LogSoftmax of the scores along
// axis 1 (with the log-probabilities as its optional second output).
func hostLoss(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	x, tgt := ins[0], ins[1]
	if !x.dt.IsFloat() {
		return nil, fmt.Errorf("input of type %v", x.dt)
	}
	xs := x.shape
	if len(xs) < 2 || len(tgt.shape) != len(xs)-1 {
		return nil, fmt.Errorf("input %v and target %v: want [N, C, d...] and [N, d...]", xs, tgt.shape)
	}
	n, c, d := xs[0], xs[1], prod(xs, 2, len(xs))
	if tgt.shape[0] != n || numel(tgt.shape) != n*d {
		return nil, fmt.Errorf("target %v does not fit input %v", tgt.shape, xs)
	}
	in, err := x.floats()
	if err != nil {
		return nil, err
	}
	labels, err := tgt.ints()
	if err != nil {
		return nil, err
	}
	var weight []float64
	if len(ins) > 2 && ins[2] != nil {
		if weight, err = ins[2].floats(); err != nil {
			return nil, err
		}
		if len(weight) != c {
			return nil, fmt.Errorf("weight of %d elements for %d classes", len(weight), c)
		}
	}
	sce := hc.n.OpType == "SoftmaxCrossEntropyLoss"
	if sce {
		// Log-softmax over the classes, in float32 like the reference.
		lp := make([]float64, len(in))
		for i := 0; i < n; i++ {
			for k := 0; k < d; k++ {
				m := math.Inf(-1)
				for j := 0; j < c; j++ {
					m = math.Max(m, in[(i*c+j)*d+k])
				}
				var s float64
				for j := 0; j < c; j++ {
					s += math.Exp(in[(i*c+j)*d+k] - m)
				}
				for j := 0; j < c; j++ {
					lp[(i*c+j)*d+k] = in[(i*c+j)*d+k] - m - math.Log(s)
				}
			}
		}
		in = lp
	}
	ignore, hasIgnore := int64(0), false
	if a := hc.n.Attr("ignore_index"); a != nil {
		ignore, hasIgnore = a.I, true
	}
	loss := make([]float64, n*d)
	wsum := 0.0
	for i := 0; i < n; i++ {
		for k := 0; k < d; k++ {
			t := labels[i*d+k]
			if hasIgnore && t == ignore {
				continue
			}
			if t < 0 || t >= int64(c) {
				return nil, fmt.Errorf("target %d at [%d, %d] is outside the %d classes", t, i, k, c)
			}
			w := 1.0
			if weight != nil {
				w = weight[t]
			}
			loss[i*d+k] = -in[(i*c+int(t))*d+k] * w
			wsum += w
		}
	}
	red := hc.n.AttrString("reduction", "mean")
	var out *hostTensor
	switch red {
	case "none":
		out = newHostTensor(x.dt, tgt.shape)
		for i, v := range loss {
			putFloat(x.dt, out.data, i, v)
		}
	case "sum", "mean":
		var s float64
		for _, v := range loss {
			s += v
		}
		if red == "mean" {
			if weight == nil && !hasIgnore {
				wsum = float64(len(loss))
			}
			s /= wsum
		}
		out = newHostTensor(x.dt, nil)
		putFloat(x.dt, out.data, 0, s)
	default:
		return nil, fmt.Errorf("reduction %q is not none, mean or sum", red)
	}
	outs := []*hostTensor{out}
	if sce && len(hc.n.Outputs) > 1 && hc.n.Outputs[1] != nil {
		lp := newHostTensor(x.dt, xs)
		for i, v := range in {
			putFloat(x.dt, lp.data, i, v)
		}
		outs = append(outs, lp)
	}
	return outs, nil
}

// hostLayerNorm is LayerNormalization with its Mean and InvStdDev outputs,
// which the device kernel does not write.
func hostLayerNorm(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	x := ins[0]
	axis, err := normAxisHost(hc.n.AttrInt("axis", -1), len(x.shape))
	if err != nil {
		return nil, err
	}
	eps := float64(hc.n.AttrFloat("epsilon", 1e-5))
	rows, cols := prod(x.shape, 0, axis), prod(x.shape, axis, len(x.shape))
	xv, err := x.floats()
	if err != nil {
		return nil, err
	}
	norm := x.shape[axis:]
	scale, err := ins[1].floats()
	if err != nil {
		return nil, err
	}
	sidx, err := broadcaster(norm, ins[1].shape)
	if err != nil {
		return nil, fmt.Errorf("scale: %w", err)
	}
	var bias []float64
	bidx := sidx
	if len(ins) > 2 && ins[2] != nil {
		if bias, err = ins[2].floats(); err != nil {
			return nil, err
		}
		if bidx, err = broadcaster(norm, ins[2].shape); err != nil {
			return nil, fmt.Errorf("bias: %w", err)
		}
	}
	stat := append(append([]int(nil), x.shape[:axis]...), make([]int, len(x.shape)-axis)...)
	for i := axis; i < len(stat); i++ {
		stat[i] = 1
	}
	y := newHostTensor(x.dt, x.shape)
	mean := newHostTensor(dtype.Float32, stat)
	inv := newHostTensor(dtype.Float32, stat)
	for r := 0; r < rows; r++ {
		row := xv[r*cols : (r+1)*cols]
		var m, v float64
		for _, e := range row {
			m += e
		}
		m /= float64(cols)
		for _, e := range row {
			v += (e - m) * (e - m)
		}
		v /= float64(cols)
		is := 1 / math.Sqrt(v+eps)
		for j, e := range row {
			o := (e - m) * is * scale[sidx(j)]
			if bias != nil {
				o += bias[bidx(j)]
			}
			putFloat(x.dt, y.data, r*cols+j, o)
		}
		putFloat(dtype.Float32, mean.data, r, m)
		putFloat(dtype.Float32, inv.data, r, is)
	}
	return []*hostTensor{y, mean, inv}, nil
}

// hostHardmax writes 1 at the first maximum along the axis (opset 13), or
// of each row flattened from the axis on (earlier opsets), 0 elsewhere.
func hostHardmax(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	x := ins[0]
	def := int64(-1)
	if hc.opset < 13 {
		def = 1
	}
	axis, err := normAxisHost(hc.n.AttrInt("axis", def), max(len(x.shape), 1))
	if err != nil {
		return nil, err
	}
	v, err := x.floats()
	if err != nil {
		return nil, err
	}
	outer, n, inner := split3(x.shape, axis)
	if hc.opset < 13 {
		n, inner = prod(x.shape, axis, len(x.shape)), 1
	}
	y := newHostTensor(x.dt, x.shape)
	for o := 0; o < outer; o++ {
		for k := 0; k < inner; k++ {
			best := 0
			for j := 1; j < n; j++ {
				if v[(o*n+j)*inner+k] > v[(o*n+best)*inner+k] {
					best = j
				}
			}
			if n > 0 {
				putFloat(x.dt, y.data, (o*n+best)*inner+k, 1)
			}
		}
	}
	return []*hostTensor{y}, nil
}

// hostUnaryFloat applies f to every element of a float tensor.
func hostUnaryFloat(f func(float64) float64) hostFn {
	return func(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
		if err := needIns(ins, 1); err != nil {
			return nil, err
		}
		x := ins[0]
		if !x.dt.IsFloat() {
			return nil, fmt.Errorf("input of type %v", x.dt)
		}
		v, err := x.floats()
		if err != nil {
			return nil, err
		}
		y := newHostTensor(x.dt, x.shape)
		for i, e := range v {
			putFloat(x.dt, y.data, i, float64(float32(f(e))))
		}
		return []*hostTensor{y}, nil
	}
}

// hostDet is the determinant of each trailing square matrix, by Gaussian
// elimination with partial pivoting in float64.
func hostDet(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	x := ins[0]
	r := len(x.shape)
	if r < 2 || x.shape[r-1] != x.shape[r-2] {
		return nil, fmt.Errorf("input %v is not [*, M, M]", x.shape)
	}
	m := x.shape[r-1]
	v, err := x.floats()
	if err != nil {
		return nil, err
	}
	y := newHostTensor(x.dt, x.shape[:r-2])
	a := make([]float64, m*m)
	for b := 0; b < numel(x.shape[:r-2]); b++ {
		copy(a, v[b*m*m:(b+1)*m*m])
		det := 1.0
		for c := 0; c < m; c++ {
			p := c
			for i := c + 1; i < m; i++ {
				if math.Abs(a[i*m+c]) > math.Abs(a[p*m+c]) {
					p = i
				}
			}
			if a[p*m+c] == 0 {
				det = 0
				break
			}
			if p != c {
				for j := 0; j < m; j++ {
					a[p*m+j], a[c*m+j] = a[c*m+j], a[p*m+j]
				}
				det = -det
			}
			det *= a[c*m+c]
			for i := c + 1; i < m; i++ {
				f := a[i*m+c] / a[c*m+c]
				for j := c; j < m; j++ {
					a[i*m+j] -= f * a[c*m+j]
				}
			}
		}
		putFloat(x.dt, y.data, b, det)
	}
	return []*hostTensor{y}, nil
}

// hostLRN normalises each element by the sum of squares over a window of
// size channels around it: x / (bias + alpha/size * sum)^beta.
func hostLRN(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	x := ins[0]
	if len(x.shape) < 2 {
		return nil, fmt.Errorf("input of rank %d", len(x.shape))
	}
	size := int(hc.n.AttrInt("size", 0))
	if size <= 0 {
		return nil, fmt.Errorf("size %d", size)
	}
	alpha := float64(hc.n.AttrFloat("alpha", 1e-4))
	beta := float64(hc.n.AttrFloat("beta", 0.75))
	bias := float64(hc.n.AttrFloat("bias", 1))
	v, err := x.floats()
	if err != nil {
		return nil, err
	}
	n, c, sp := x.shape[0], x.shape[1], prod(x.shape, 2, len(x.shape))
	lo, hi := (size-1)/2, (size-1)-(size-1)/2
	y := newHostTensor(x.dt, x.shape)
	for b := 0; b < n; b++ {
		for ch := 0; ch < c; ch++ {
			for s := 0; s < sp; s++ {
				var sum float64
				for j := max(0, ch-lo); j <= min(c-1, ch+hi); j++ {
					e := v[(b*c+j)*sp+s]
					sum += e * e
				}
				i := (b*c+ch)*sp + s
				putFloat(x.dt, y.data, i, v[i]/math.Pow(bias+alpha/float64(size)*sum, beta))
			}
		}
	}
	return []*hostTensor{y}, nil
}

// hostMVN normalises to zero mean and unit variance over the axes
// (default 0, 2, 3).
func hostMVN(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	x := ins[0]
	r := len(x.shape)
	axes, ok := hc.n.AttrInts("axes")
	if !ok {
		axes = []int64{0, 2, 3}
	}
	in := make([]bool, r)
	for _, a := range axes {
		ax, err := normAxisHost(a, r)
		if err != nil {
			return nil, err
		}
		in[ax] = true
	}
	v, err := x.floats()
	if err != nil {
		return nil, err
	}
	st := strides(x.shape)
	// key is an element's position with the reduced axes zeroed.
	key := func(i int) int {
		k := 0
		for a := 0; a < r; a++ {
			if !in[a] {
				k += i / st[a] % x.shape[a] * st[a]
			}
		}
		return k
	}
	sum, sq, cnt := map[int]float64{}, map[int]float64{}, map[int]float64{}
	for i, e := range v {
		k := key(i)
		sum[k] += e
		sq[k] += e * e
		cnt[k]++
	}
	y := newHostTensor(x.dt, x.shape)
	for i, e := range v {
		k := key(i)
		m := sum[k] / cnt[k]
		va := sq[k]/cnt[k] - m*m
		putFloat(x.dt, y.data, i, (e-m)/(math.Sqrt(va)+1e-9))
	}
	return []*hostTensor{y}, nil
}

func init() {
	registerHost(hostGridSample, "GridSample")
}

// hostGridSample samples X [N, C, H, W] at the normalised (x, y) points of
// grid [N, Ho, Wo, 2], as PyTorch's grid_sample does (whose outputs ONNX's
// cases are): bilinear, nearest (ties to even) or bicubic (A = -0.75), with
// zeros, border or reflection padding.
func hostGridSample(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	x, grid := ins[0], ins[1]
	if len(x.shape) != 4 || len(grid.shape) != 4 || grid.shape[3] != 2 || grid.shape[0] != x.shape[0] {
		return nil, hc.unsupported("X %v and grid %v: 2-D sampling only", x.shape, grid.shape)
	}
	xv, err := x.floats()
	if err != nil {
		return nil, err
	}
	gv, err := grid.floats()
	if err != nil {
		return nil, err
	}
	mode := hc.n.AttrString("mode", "bilinear")
	pad := hc.n.AttrString("padding_mode", "zeros")
	align := hc.n.AttrInt("align_corners", 0) != 0
	if mode != "bilinear" && mode != "nearest" && mode != "bicubic" {
		return nil, hc.unsupported("mode %q", mode)
	}
	if pad != "zeros" && pad != "border" && pad != "reflection" {
		return nil, hc.unsupported("padding_mode %q", pad)
	}
	n, c, h, w := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	ho, wo := grid.shape[1], grid.shape[2]
	unnorm := func(v float64, size int) float64 {
		if align {
			return (v + 1) / 2 * float64(size-1)
		}
		return ((v+1)*float64(size) - 1) / 2
	}
	reflect := func(v float64, lo2, hi2 float64) float64 {
		if lo2 == hi2 {
			return 0
		}
		lo, span := lo2/2, (hi2-lo2)/2
		v = math.Abs(v - lo)
		extra := math.Mod(v, span)
		if int(math.Floor(v/span))%2 == 0 {
			return extra + lo
		}
		return span - extra + lo
	}
	pad1 := func(v float64, size int) float64 {
		switch pad {
		case "border":
			return math.Min(math.Max(v, 0), float64(size-1))
		case "reflection":
			if align {
				v = reflect(v, 0, 2*float64(size-1))
			} else {
				v = reflect(v, -1, 2*float64(size)-1)
			}
			return math.Min(math.Max(v, 0), float64(size-1))
		}
		return v
	}
	y := newHostTensor(x.dt, []int{n, c, ho, wo})
	for b := 0; b < n; b++ {
		for ch := 0; ch < c; ch++ {
			plane := xv[(b*c+ch)*h*w : (b*c+ch+1)*h*w]
			at := func(yy, xx int) float64 {
				if yy < 0 || yy >= h || xx < 0 || xx >= w {
					return 0
				}
				return plane[yy*w+xx]
			}
			for i := 0; i < ho; i++ {
				for j := 0; j < wo; j++ {
					g := ((b*ho+i)*wo + j) * 2
					ix, iy := unnorm(gv[g], w), unnorm(gv[g+1], h)
					var v float64
					switch mode {
					case "bilinear":
						ix, iy = pad1(ix, w), pad1(iy, h)
						x0, y0 := math.Floor(ix), math.Floor(iy)
						tx, ty := ix-x0, iy-y0
						xi, yi := int(x0), int(y0)
						v = at(yi, xi)*(1-tx)*(1-ty) + at(yi, xi+1)*tx*(1-ty) + at(yi+1, xi)*(1-tx)*ty + at(yi+1, xi+1)*tx*ty
					case "nearest":
						ix, iy = pad1(ix, w), pad1(iy, h)
						v = at(int(math.RoundToEven(iy)), int(math.RoundToEven(ix)))
					case "bicubic":
						x0, y0 := math.Floor(ix), math.Floor(iy)
						tx, ty := ix-x0, iy-y0
						cx, cy := cubicCoeffs(tx), cubicCoeffs(ty)
						for a := 0; a < 4; a++ {
							for k := 0; k < 4; k++ {
								px := pad1(x0-1+float64(k), w)
								py := pad1(y0-1+float64(a), h)
								v += at(int(py), int(px)) * cx[k] * cy[a]
							}
						}
					}
					putFloat(x.dt, y.data, ((b*c+ch)*ho+i)*wo+j, v)
				}
			}
		}
	}
	return []*hostTensor{y}, nil
}

// cubicCoeffs are the four bicubic tap weights at fraction t, A = -0.75.
func cubicCoeffs(t float64) [4]float64 {
	const a = -0.75
	c1 := func(x float64) float64 { return ((a+2)*x-(a+3))*x*x + 1 }
	c2 := func(x float64) float64 { return ((a*x-5*a)*x+8*a)*x - 4*a }
	return [4]float64{c2(t + 1), c1(t), c1(1 - t), c2(2 - t)}
}

func init() {
	registerHost(hostPow, "Pow")
	registerHost(hostMaxUnpool, "MaxUnpool")
	registerHost(hostTfIdf, "TfIdfVectorizer")
}

// hostPow is Pow for the operand types the element-wise chain lacks
// (unsigned exponents), broadcasting, in the base's type.
func hostPow(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	x, e := ins[0], ins[1]
	shape, err := broadcastShapes(x.shape, e.shape)
	if err != nil {
		return nil, err
	}
	xi, err := broadcaster(shape, x.shape)
	if err != nil {
		return nil, err
	}
	ei, err := broadcaster(shape, e.shape)
	if err != nil {
		return nil, err
	}
	xv, err := x.floats()
	if err != nil {
		return nil, err
	}
	ev, err := e.floats()
	if err != nil {
		return nil, err
	}
	y := newHostTensor(x.dt, shape)
	for i := 0; i < numel(shape); i++ {
		putFloat(x.dt, y.data, i, math.Pow(xv[xi(i)], ev[ei(i)]))
	}
	return []*hostTensor{y}, nil
}

func init() {
	registerHost(hostDFT, "DFT")
	registerHost(hostRoiAlign, "RoiAlign")
}

// hostRoiAlign pools each region of interest into output_height x
// output_width bins, averaging (or taking the maximum of) bilinear samples
// on a sampling_ratio grid per bin, as ONNX Runtime does.
func hostRoiAlign(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 3); err != nil {
		return nil, err
	}
	x, rois, bidx := ins[0], ins[1], ins[2]
	if len(x.shape) != 4 || len(rois.shape) != 2 || rois.shape[1] != 4 || numel(bidx.shape) != rois.shape[0] {
		return nil, fmt.Errorf("X %v, rois %v, batch_indices %v", x.shape, rois.shape, bidx.shape)
	}
	n := hc.n
	oh, ow := int(n.AttrInt("output_height", 1)), int(n.AttrInt("output_width", 1))
	ratio := int(n.AttrInt("sampling_ratio", 0))
	scale := float64(n.AttrFloat("spatial_scale", 1))
	half := n.AttrString("coordinate_transformation_mode", "half_pixel") == "half_pixel"
	if hc.opset < 16 {
		half = false
	}
	maxMode := n.AttrString("mode", "avg") == "max"
	xv, err := x.floats()
	if err != nil {
		return nil, err
	}
	rv, err := rois.floats()
	if err != nil {
		return nil, err
	}
	bv, err := bidx.ints()
	if err != nil {
		return nil, err
	}
	N, C, H, W := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	nr := rois.shape[0]
	y := newHostTensor(x.dt, []int{nr, C, oh, ow})
	off := 0.0
	if half {
		off = 0.5
	}
	for r := 0; r < nr; r++ {
		b := int(bv[r])
		if b < 0 || b >= N {
			return nil, fmt.Errorf("batch index %d of roi %d outside batch %d", b, r, N)
		}
		x1, y1 := rv[r*4]*scale-off, rv[r*4+1]*scale-off
		x2, y2 := rv[r*4+2]*scale-off, rv[r*4+3]*scale-off
		rw, rh := x2-x1, y2-y1
		if !half {
			rw, rh = math.Max(rw, 1), math.Max(rh, 1)
		}
		bh, bw := rh/float64(oh), rw/float64(ow)
		gh, gw := ratio, ratio
		if ratio <= 0 {
			gh, gw = int(math.Ceil(rh/float64(oh))), int(math.Ceil(rw/float64(ow)))
		}
		count := float64(max(gh*gw, 1))
		for c := 0; c < C; c++ {
			plane := xv[(b*C+c)*H*W : (b*C+c+1)*H*W]
			for ph := 0; ph < oh; ph++ {
				for pw := 0; pw < ow; pw++ {
					var acc float64
					first := true
					for iy := 0; iy < gh; iy++ {
						yy := y1 + float64(ph)*bh + (float64(iy)+0.5)*bh/float64(gh)
						for ix := 0; ix < gw; ix++ {
							xx := x1 + float64(pw)*bw + (float64(ix)+0.5)*bw/float64(gw)
							var ws [4]float64
							var vs [4]float64
							if !(yy < -1 || yy > float64(H) || xx < -1 || xx > float64(W)) {
								sy, sx := math.Max(yy, 0), math.Max(xx, 0)
								yl, xl := int(sy), int(sx)
								yh, xh := yl+1, xl+1
								if yl >= H-1 {
									yl, yh, sy = H-1, H-1, float64(H-1)
								}
								if xl >= W-1 {
									xl, xh, sx = W-1, W-1, float64(W-1)
								}
								ly, lx := sy-float64(yl), sx-float64(xl)
								ws = [4]float64{(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx}
								vs = [4]float64{plane[yl*W+xl], plane[yl*W+xh], plane[yh*W+xl], plane[yh*W+xh]}
							}
							if maxMode {
								m := math.Max(math.Max(ws[0]*vs[0], ws[1]*vs[1]), math.Max(ws[2]*vs[2], ws[3]*vs[3]))
								if first || m > acc {
									acc = m
								}
								first = false
							} else {
								acc += ws[0]*vs[0] + ws[1]*vs[1] + ws[2]*vs[2] + ws[3]*vs[3]
							}
						}
					}
					if !maxMode {
						acc /= count
					}
					putFloat(x.dt, y.data, ((r*C+c)*oh+ph)*ow+pw, acc)
				}
			}
		}
	}
	return []*hostTensor{y}, nil
}

func init() {
	registerHost(hostDropout, "Dropout")
}

// hostDropout is inference-mode Dropout when its mask is read: the input
// unchanged and a mask of all true. Training mode draws random numbers and
// is refused.
func hostDropout(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	if len(ins) > 2 && ins[2] != nil {
		tm, err := ins[2].ints()
		if err != nil {
			return nil, err
		}
		if len(tm) == 1 && tm[0] != 0 {
			return nil, hc.unsupported("training_mode draws a random mask")
		}
	}
	x := ins[0]
	y := &hostTensor{dt: x.dt, shape: x.shape, data: append([]byte(nil), x.data...)}
	mask := newHostTensor(dtype.Bool, x.shape)
	for i := range mask.data {
		mask.data[i] = 1
	}
	return []*hostTensor{y, mask}, nil
}

func init() {
	registerHost(hostPool, "MaxPool", "AveragePool")
	registerHost(hostPad, "Pad")
}

// hostPool is MaxPool and AveragePool over any number of spatial axes and
// any element type, for the uses the pooling kernels refuse (integer
// tensors, padding wider than half the window).
func hostPool(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	n := hc.n
	if len(n.Outputs) > 1 && n.Outputs[1] != nil {
		return nil, hc.unsupported("the Indices output on the host")
	}
	x := ins[0]
	r := len(x.shape) - 2
	if r < 1 {
		return nil, fmt.Errorf("input %v: want [N, C, spatial...]", x.shape)
	}
	get := func(name string, def, size int) ([]int, error) {
		out := make([]int, size)
		for i := range out {
			out[i] = def
		}
		if v, ok := n.AttrInts(name); ok {
			if len(v) != size {
				return nil, fmt.Errorf("%s %v for %d spatial dims", name, v, r)
			}
			for i, k := range v {
				out[i] = int(k)
			}
		}
		return out, nil
	}
	k, err := get("kernel_shape", 0, r)
	if err != nil {
		return nil, err
	}
	st, err := get("strides", 1, r)
	if err != nil {
		return nil, err
	}
	dl, err := get("dilations", 1, r)
	if err != nil {
		return nil, err
	}
	pd, err := get("pads", 0, 2*r)
	if err != nil {
		return nil, err
	}
	ap := n.AttrString("auto_pad", "NOTSET")
	ceil := n.AttrInt("ceil_mode", 0) != 0
	avg := n.OpType == "AveragePool"
	incl := n.AttrInt("count_include_pad", 0) != 0
	in := x.shape[2:]
	out := make([]int, r)
	for i := 0; i < r; i++ {
		if k[i] <= 0 || st[i] <= 0 || dl[i] <= 0 {
			return nil, fmt.Errorf("kernel_shape %v, strides %v, dilations %v", k, st, dl)
		}
		ext := (k[i]-1)*dl[i] + 1
		switch ap {
		case "SAME_UPPER", "SAME_LOWER":
			out[i] = (in[i] + st[i] - 1) / st[i]
			tot := max(0, (out[i]-1)*st[i]+ext-in[i])
			if ap == "SAME_UPPER" {
				pd[i], pd[r+i] = tot/2, tot-tot/2
			} else {
				pd[i], pd[r+i] = tot-tot/2, tot/2
			}
		case "VALID":
			pd[i], pd[r+i] = 0, 0
			fallthrough
		default:
			span := in[i] + pd[i] + pd[r+i] - ext
			if span < 0 {
				return nil, fmt.Errorf("window %d larger than the padded axis %d", ext, in[i]+pd[i]+pd[r+i])
			}
			if ceil {
				out[i] = (span+st[i]-1)/st[i] + 1
				if (out[i]-1)*st[i] >= in[i]+pd[i] {
					out[i]--
				}
			} else {
				out[i] = span/st[i] + 1
			}
		}
	}
	v, err := x.floats()
	if err != nil {
		return nil, err
	}
	shape := append(append([]int(nil), x.shape[:2]...), out...)
	y := newHostTensor(x.dt, shape)
	ist, ost := strides(in), strides(out)
	planes, ivol, ovol := x.shape[0]*x.shape[1], numel(in), numel(out)
	kvol := numel(k)
	kst := strides(k)
	pos := make([]int, r)
	for p := 0; p < planes; p++ {
		for o := 0; o < ovol; o++ {
			acc, cnt, best, seen := 0.0, 0, math.Inf(-1), false
			for t := 0; t < kvol; t++ {
				inside, off := true, 0
				padded := true
				for a := 0; a < r; a++ {
					pos[a] = o/ost[a]%out[a]*st[a] - pd[a] + t/kst[a]%k[a]*dl[a]
					if pos[a] < 0 || pos[a] >= in[a] {
						inside = false
					}
					if pos[a] < -pd[a] || pos[a] >= in[a]+pd[r+a] {
						padded = false
					}
					off += pos[a] * ist[a]
				}
				if !inside {
					if avg && incl && padded {
						cnt++
					}
					continue
				}
				e := v[p*ivol+off]
				acc += e
				cnt++
				if !seen || e > best {
					best, seen = e, true
				}
			}
			res := best
			if avg {
				res = acc / float64(max(cnt, 1))
			}
			putFloat(x.dt, y.data, p*ovol+o, res)
		}
	}
	return []*hostTensor{y}, nil
}

// hostPad is Pad on the host, for the uses the device kernel refuses (pads
// or a constant_value computed at run time), in every mode.
func hostPad(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	n := hc.n
	mode := n.AttrString("mode", "constant")
	switch mode {
	case "constant", "edge", "reflect", "wrap":
	default:
		return nil, fmt.Errorf("mode %q", mode)
	}
	x := ins[0]
	r := len(x.shape)
	var pads []int64
	if hc.opset < 11 {
		pads, _ = n.AttrInts("pads")
	} else if len(ins) > 1 && ins[1] != nil {
		p, err := ins[1].ints()
		if err != nil {
			return nil, err
		}
		pads = p
	}
	axes := make([]int, r)
	for i := range axes {
		axes[i] = i
	}
	if len(ins) > 3 && ins[3] != nil {
		a, err := ins[3].ints()
		if err != nil {
			return nil, err
		}
		axes = axes[:0]
		for _, v := range a {
			ax, err := normAxis(v, r)
			if err != nil {
				return nil, err
			}
			axes = append(axes, ax)
		}
	}
	if len(pads) != 2*len(axes) {
		return nil, fmt.Errorf("pads %v for %d axes", pads, len(axes))
	}
	pb, pe := make([]int, r), make([]int, r)
	for j, a := range axes {
		pb[a], pe[a] = int(pads[j]), int(pads[len(axes)+j])
	}
	val := 0.0
	if hc.opset < 11 {
		val = float64(n.AttrFloat("value", 0))
	} else if len(ins) > 2 && ins[2] != nil {
		c, err := scalar(ins[2])
		if err != nil {
			return nil, fmt.Errorf("constant_value: %w", err)
		}
		val = c
	}
	shape := make([]int, r)
	for a := range shape {
		shape[a] = x.shape[a] + pb[a] + pe[a]
		if shape[a] < 0 {
			return nil, fmt.Errorf("pads %v leave axis %d of %v negative", pads, a, x.shape)
		}
		if shape[a] > 0 && x.shape[a] == 0 && mode != "constant" {
			return nil, fmt.Errorf("mode %q cannot pad empty axis %d", mode, a)
		}
		if mode == "reflect" && (pb[a] >= x.shape[a] || pe[a] >= x.shape[a]) && (pb[a] > 0 || pe[a] > 0) {
			return nil, fmt.Errorf("reflect pads %v need axis %d longer than the pad (%d)", pads, a, x.shape[a])
		}
	}
	// src maps coordinate c of an output axis to the input's, or -1.
	src := func(c, a int) int {
		m := x.shape[a]
		c -= pb[a]
		if c >= 0 && c < m {
			return c
		}
		switch mode {
		case "edge":
			return min(max(c, 0), m-1)
		case "wrap":
			return ((c % m) + m) % m
		case "reflect":
			if m == 1 {
				return 0
			}
			p := 2 * (m - 1)
			c = ((c % p) + p) % p
			if c >= m {
				c = p - c
			}
			return c
		}
		return -1
	}
	esz := hostSize(x.dt)
	y := newHostTensor(x.dt, shape)
	ist, ost := strides(x.shape), strides(shape)
	for o := 0; o < numel(shape); o++ {
		off := 0
		for a := 0; a < r; a++ {
			c := src(o/ost[a]%shape[a], a)
			if c < 0 {
				off = -1
				break
			}
			off += c * ist[a]
		}
		if off < 0 {
			putFloat(x.dt, y.data, o, val)
			continue
		}
		copy(y.data[o*esz:(o+1)*esz], x.data[off*esz:(off+1)*esz])
	}
	return []*hostTensor{y}, nil
}
