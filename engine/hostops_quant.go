package engine

import (
	"fmt"
	"math"

	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/kernels"
)

// ONNX's linear quantization operators and integer products, computed on
// the CPU (the engine's own quantized weights use kernels.MatMulQ). Integer
// products accumulate exactly in int64. (The signal ops registered here live
// in hostops_signal.go.)

func init() {
	registerHost(hostQuantize, "QuantizeLinear")
	registerHost(hostDequantize, "DequantizeLinear")
	registerHost(hostDynQuantize, "DynamicQuantizeLinear")
	registerHost(hostMatMulInteger, "MatMulInteger")
	registerHost(hostQLinearMatMul, "QLinearMatMul")
	registerHost(hostConvInteger, "ConvInteger", "QLinearConv")
	registerHost(hostWindow, "HannWindow", "HammingWindow", "BlackmanWindow")
}

// perAxis returns, for a scale or zero point of one element or one per
// entry of axis, the value that applies to flat element i of shape.
func perAxis(vals []float64, shape []int, axis int) (func(i int) float64, error) {
	if len(vals) == 1 {
		return func(int) float64 { return vals[0] }, nil
	}
	if axis < 0 || axis >= len(shape) || len(vals) != shape[axis] {
		return nil, fmt.Errorf("%d scale or zero-point values for axis %d of %v", len(vals), axis, shape)
	}
	inner := prod(shape, axis+1, len(shape))
	return func(i int) float64 { return vals[i/inner%shape[axis]] }, nil
}

// quantAxis is the axis attribute of a per-axis scale; a per-tensor one
// (one value) needs none, whatever the attribute says.
func quantAxis(hc *hostCtx, shape []int, nscale int) (int, error) {
	if nscale == 1 {
		return 0, nil
	}
	return normAxis(hc.n.AttrInt("axis", 1), len(shape))
}

// saturate clamps v to the range of integer type dt.
func saturate(dt dtype.Type, v float64) float64 {
	lo, hi := 0.0, 255.0
	switch dt {
	case dtype.Int8:
		lo, hi = -128, 127
	case dtype.Uint16:
		lo, hi = 0, 65535
	case dtype.Int16:
		lo, hi = -32768, 32767
	case dtype.Int32:
		lo, hi = math.MinInt32, math.MaxInt32
	}
	return math.Min(math.Max(v, lo), hi)
}

// optFloats decodes an optional input, nil when absent.
func optFloats(ins []*hostTensor, i int) ([]float64, error) {
	if i >= len(ins) || ins[i] == nil {
		return nil, nil
	}
	return ins[i].floats()
}

// linearQuant is what QuantizeLinear and DequantizeLinear share: x's
// values and the per-element scale and zero point (0 when absent), broadcast
// along the quantization axis.
type linearQuant struct {
	x         *hostTensor
	xv        []float64
	scale, zp func(int) float64
}

func readLinearQuant(hc *hostCtx, ins []*hostTensor) (linearQuant, error) {
	var q linearQuant
	if err := needIns(ins, 2); err != nil {
		return q, err
	}
	q.x = ins[0]
	var err error
	if q.xv, err = q.x.floats(); err != nil {
		return q, err
	}
	sv, err := ins[1].floats()
	if err != nil {
		return q, err
	}
	axis, err := quantAxis(hc, q.x.shape, len(sv))
	if err != nil {
		return q, err
	}
	if q.scale, err = perAxis(sv, q.x.shape, axis); err != nil {
		return q, err
	}
	q.zp = func(int) float64 { return 0 }
	zv, err := optFloats(ins, 2)
	if err != nil {
		return q, err
	}
	if zv != nil {
		if q.zp, err = perAxis(zv, q.x.shape, axis); err != nil {
			return q, err
		}
	}
	return q, nil
}

func hostQuantize(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	q, err := readLinearQuant(hc, ins)
	if err != nil {
		return nil, err
	}
	ot := dtype.Uint8
	if len(ins) > 2 && ins[2] != nil {
		ot = ins[2].dt
	}
	y := newHostTensor(ot, q.x.shape)
	for i, v := range q.xv {
		r := math.RoundToEven(float64(float32(v)/float32(q.scale(i)))) + q.zp(i)
		putInt(ot, y.data, i, int64(saturate(ot, r)))
	}
	return []*hostTensor{y}, nil
}

func hostDequantize(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	q, err := readLinearQuant(hc, ins)
	if err != nil {
		return nil, err
	}
	y := newHostTensor(ins[1].dt, q.x.shape)
	for i, v := range q.xv {
		putFloat(ins[1].dt, y.data, i, float64(float32(v-q.zp(i))*float32(q.scale(i))))
	}
	return []*hostTensor{y}, nil
}

// hostDynQuantize quantizes to uint8 over the range of x extended to 0.
func hostDynQuantize(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	x := ins[0]
	xv, err := x.floats()
	if err != nil {
		return nil, err
	}
	lo, hi := 0.0, 0.0
	for _, v := range xv {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	scale := float32(hi-lo) / 255
	zp := 0.0
	if scale != 0 {
		zp = saturate(dtype.Uint8, math.RoundToEven(float64(float32(-lo)/scale)))
	}
	y := newHostTensor(dtype.Uint8, x.shape)
	for i, v := range xv {
		q := zp
		if scale != 0 {
			q = math.RoundToEven(float64(float32(v)/scale)) + zp
		}
		putInt(dtype.Uint8, y.data, i, int64(saturate(dtype.Uint8, q)))
	}
	s := newHostTensor(dtype.Float32, nil)
	putFloat(dtype.Float32, s.data, 0, float64(scale))
	z := newHostTensor(dtype.Uint8, nil)
	putInt(dtype.Uint8, z.data, 0, int64(zp))
	return []*hostTensor{y, s, z}, nil
}

// intMatMul multiplies a [.., M, K] by b [.., K, N] (batch dims broadcast),
// less the zero points (per row of a, per column of b, or scalars), into
// int64 sums.
func intMatMul(a, b *hostTensor, azv, bzv []float64) ([]int64, []int, error) {
	if len(a.shape) < 2 || len(b.shape) < 2 {
		return nil, nil, fmt.Errorf("operands %v and %v: want rank >= 2", a.shape, b.shape)
	}
	m, k := a.shape[len(a.shape)-2], a.shape[len(a.shape)-1]
	k2, n := b.shape[len(b.shape)-2], b.shape[len(b.shape)-1]
	if k != k2 {
		return nil, nil, fmt.Errorf("operands %v and %v do not share K", a.shape, b.shape)
	}
	batch, err := broadcastShapes(a.shape[:len(a.shape)-2], b.shape[:len(b.shape)-2])
	if err != nil {
		return nil, nil, err
	}
	ai, err := broadcaster(batch, a.shape[:len(a.shape)-2])
	if err != nil {
		return nil, nil, err
	}
	bi, err := broadcaster(batch, b.shape[:len(b.shape)-2])
	if err != nil {
		return nil, nil, err
	}
	av, err := a.ints()
	if err != nil {
		return nil, nil, err
	}
	bv, err := b.ints()
	if err != nil {
		return nil, nil, err
	}
	az := func(int) int64 { return 0 }
	switch len(azv) {
	case 0:
	case 1:
		az = func(int) int64 { return int64(azv[0]) }
	case m:
		az = func(r int) int64 { return int64(azv[r]) }
	default:
		return nil, nil, fmt.Errorf("%d zero points for %d rows of A", len(azv), m)
	}
	bz := func(int) int64 { return 0 }
	switch len(bzv) {
	case 0:
	case 1:
		bz = func(int) int64 { return int64(bzv[0]) }
	case n:
		bz = func(c int) int64 { return int64(bzv[c]) }
	default:
		return nil, nil, fmt.Errorf("%d zero points for %d columns of B", len(bzv), n)
	}
	nb := numel(batch)
	out := make([]int64, nb*m*n)
	for t := 0; t < nb; t++ {
		ao, bo := ai(t)*m*k, bi(t)*k*n
		for r := 0; r < m; r++ {
			for c := 0; c < n; c++ {
				var s int64
				for j := 0; j < k; j++ {
					s += (av[ao+r*k+j] - az(r)) * (bv[bo+j*n+c] - bz(c))
				}
				out[(t*m+r)*n+c] = s
			}
		}
	}
	return out, append(append([]int(nil), batch...), m, n), nil
}

func hostMatMulInteger(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	azv, err := optFloats(ins, 2)
	if err != nil {
		return nil, err
	}
	bzv, err := optFloats(ins, 3)
	if err != nil {
		return nil, err
	}
	sums, shape, err := intMatMul(ins[0], ins[1], azv, bzv)
	if err != nil {
		return nil, err
	}
	return []*hostTensor{hostFromInts(dtype.Int32, shape, sums)}, nil
}

// hostQLinearMatMul is (a - a_zp)(b - b_zp) * a_scale*b_scale/y_scale +
// y_zp, rounded to even and saturated.
func hostQLinearMatMul(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 8); err != nil {
		return nil, err
	}
	var sc [8][]float64
	for _, i := range []int{1, 2, 4, 5, 6, 7} {
		v, err := ins[i].floats()
		if err != nil {
			return nil, err
		}
		sc[i] = v
	}
	if len(sc[1]) != 1 || len(sc[4]) != 1 || len(sc[6]) != 1 || len(sc[7]) != 1 {
		return nil, ins0unsupported(hc, "per-axis scales")
	}
	sums, shape, err := intMatMul(ins[0], ins[3], sc[2], sc[5])
	if err != nil {
		return nil, err
	}
	ot := ins[7].dt
	y := newHostTensor(ot, shape)
	mult := float32(sc[1][0]) * float32(sc[4][0]) / float32(sc[6][0])
	for i, s := range sums {
		q := math.RoundToEven(float64(float32(s)*mult)) + sc[7][0]
		putInt(ot, y.data, i, int64(saturate(ot, q)))
	}
	return []*hostTensor{y}, nil
}

func ins0unsupported(hc *hostCtx, what string) error { return hc.unsupported("%s", what) }

// hostConvInteger runs ConvInteger (and QLinearConv, requantizing) through
// the float32 reference convolution on zero-point-shifted integers, exact
// while sums stay below 2^24.
func hostConvInteger(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	ql := hc.n.OpType == "QLinearConv"
	xi, wi, xzi, wzi := 0, 1, 2, 3
	if ql {
		if err := needIns(ins, 8); err != nil {
			return nil, err
		}
		xi, wi, xzi, wzi = 0, 3, 2, 5
	} else if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	x, w := ins[xi], ins[wi]
	if len(x.shape) != 4 || len(w.shape) != 4 {
		return nil, hc.unsupported("input %v and weight %v: 2-D only", x.shape, w.shape)
	}
	xv, err := x.floats()
	if err != nil {
		return nil, err
	}
	wv, err := w.floats()
	if err != nil {
		return nil, err
	}
	xz, err := optFloats(ins, xzi)
	if err != nil {
		return nil, err
	}
	wz, err := optFloats(ins, wzi)
	if err != nil {
		return nil, err
	}
	if len(xz) > 1 || len(wz) > 1 {
		return nil, hc.unsupported("per-channel zero points")
	}
	xf := make([]float32, len(xv))
	for i, v := range xv {
		if len(xz) == 1 {
			v -= xz[0]
		}
		xf[i] = float32(v)
	}
	wf := make([]float32, len(wv))
	for i, v := range wv {
		if len(wz) == 1 {
			v -= wz[0]
		}
		wf[i] = float32(v)
	}
	n := hc.n
	attr := func(name string, def int) []int {
		out := []int{def, def}
		if v, ok := n.AttrInts(name); ok && len(v) >= 2 {
			out = []int{int(v[0]), int(v[1])}
		}
		return out
	}
	st, dl := attr("strides", 1), attr("dilations", 1)
	pads := []int{0, 0, 0, 0}
	if v, ok := n.AttrInts("pads"); ok && len(v) == 4 {
		pads = []int{int(v[0]), int(v[1]), int(v[2]), int(v[3])}
	}
	if ap := n.AttrString("auto_pad", "NOTSET"); ap != "NOTSET" && ap != "VALID" {
		sp := spatial{autoPad: ap, kh: w.shape[2], kw: w.shape[3], sh: st[0], sw: st[1], dh: dl[0], dw: dl[1]}
		p := sp.padsFor(x.shape[2], x.shape[3])
		pads = []int{p[0], p[1], p[2], p[3]}
	}
	p := kernels.ConvParams{N: x.shape[0], C: x.shape[1], H: x.shape[2], W: x.shape[3], OutC: w.shape[0],
		KH: w.shape[2], KW: w.shape[3], StrideH: st[0], StrideW: st[1], DilationH: dl[0], DilationW: dl[1],
		PadTop: pads[0], PadLeft: pads[1], PadBottom: pads[2], PadRight: pads[3], Groups: int(n.AttrInt("group", 1))}
	oh, ow := p.OutSize()
	shape := []int{p.N, p.OutC, oh, ow}
	yf := make([]float32, numel(shape))
	if err := kernels.Conv2DRef(xf, wf, nil, yf, p); err != nil {
		return nil, err
	}
	if !ql {
		y := newHostTensor(dtype.Int32, shape)
		for i, v := range yf {
			putInt(dtype.Int32, y.data, i, int64(math.Round(float64(v))))
		}
		return []*hostTensor{y}, nil
	}
	var sc [8][]float64
	for _, i := range []int{1, 4, 6, 7} {
		if sc[i], err = ins[i].floats(); err != nil {
			return nil, err
		}
	}
	var bias []float64
	if bias, err = optFloats(ins, 8); err != nil {
		return nil, err
	}
	wscale, err := perAxis(sc[4], []int{p.OutC}, 0)
	if err != nil {
		return nil, err
	}
	if len(sc[1]) != 1 || len(sc[6]) != 1 || len(sc[7]) != 1 {
		return nil, hc.unsupported("per-axis input or output scales")
	}
	ot := ins[7].dt
	y := newHostTensor(ot, shape)
	plane := oh * ow
	for i, v := range yf {
		c := i / plane % p.OutC
		acc := float64(v)
		if bias != nil {
			acc += bias[c]
		}
		q := math.RoundToEven(acc*sc[1][0]*wscale(c)/sc[6][0]) + sc[7][0]
		putInt(ot, y.data, i, int64(saturate(ot, q)))
	}
	return []*hostTensor{y}, nil
}

func init() {
	registerHost(hostSTFT, "STFT")
	registerHost(hostMel, "MelWeightMatrix")
}
