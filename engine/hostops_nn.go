package engine

import (
	"fmt"
	"math"
	"sort"

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

// strides returns row-major strides of shape.
func strides(shape []int) []int {
	s := make([]int, len(shape))
	st := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = st
		st *= shape[i]
	}
	return s
}

// broadcaster maps flat indices of out onto flat indices of an input of
// shape in that broadcasts to it numpy-style (aligned on the right).
func broadcaster(out, in []int) (func(i int) int, error) {
	if len(in) > len(out) {
		return nil, fmt.Errorf("shape %v does not broadcast to %v", in, out)
	}
	off := len(out) - len(in)
	is := strides(in)
	os := strides(out)
	for j, d := range in {
		if d != 1 && d != out[off+j] {
			return nil, fmt.Errorf("shape %v does not broadcast to %v", in, out)
		}
	}
	return func(i int) int {
		k := 0
		for j, d := range in {
			if d != 1 {
				k += (i / os[off+j] % out[off+j]) * is[j]
			}
		}
		return k
	}, nil
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

// split3 splits a shape at axis into outer, the axis, inner.
func split3(shape []int, axis int) (outer, n, inner int) {
	return prod(shape, 0, axis), shape[axis], prod(shape, axis+1, len(shape))
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

// hostOneHot writes values[1] where an index (negative ones counting from
// depth) names the position along the new axis, values[0] elsewhere.
func hostOneHot(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 3); err != nil {
		return nil, err
	}
	idx, err := ins[0].floats()
	if err != nil {
		return nil, err
	}
	dv, err := scalar(ins[1])
	if err != nil {
		return nil, fmt.Errorf("depth: %w", err)
	}
	depth := int(dv)
	if depth < 1 {
		return nil, fmt.Errorf("depth %v", dv)
	}
	vals := ins[2]
	if numel(vals.shape) != 2 {
		return nil, fmt.Errorf("values has %d elements; want [off, on]", numel(vals.shape))
	}
	axis, err := normAxisHost(hc.n.AttrInt("axis", -1), len(ins[0].shape)+1)
	if err != nil {
		return nil, err
	}
	shape := append(append(append([]int(nil), ins[0].shape[:axis]...), depth), ins[0].shape[axis:]...)
	esz := hostSize(vals.dt)
	off, on := vals.data[:esz], vals.data[esz:2*esz]
	y := newHostTensor(vals.dt, shape)
	outer, inner := prod(ins[0].shape, 0, axis), prod(ins[0].shape, axis, len(ins[0].shape))
	for o := 0; o < outer; o++ {
		for k := 0; k < inner; k++ {
			t := int(idx[o*inner+k])
			if t < 0 {
				t += depth
			}
			for j := 0; j < depth; j++ {
				src := off
				if j == t {
					src = on
				}
				copy(y.data[((o*depth+j)*inner+k)*esz:], src)
			}
		}
	}
	return []*hostTensor{y}, nil
}

// hostBitShift shifts unsigned integers left or right, broadcasting.
func hostBitShift(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	x, s := ins[0], ins[1]
	shape, err := broadcastShapes(x.shape, s.shape)
	if err != nil {
		return nil, err
	}
	xi, err := broadcaster(shape, x.shape)
	if err != nil {
		return nil, err
	}
	si, err := broadcaster(shape, s.shape)
	if err != nil {
		return nil, err
	}
	xv, err := x.ints()
	if err != nil {
		return nil, err
	}
	sv, err := s.ints()
	if err != nil {
		return nil, err
	}
	left := hc.n.AttrString("direction", "") == "LEFT"
	bits := uint(8 * x.dt.Size())
	y := newHostTensor(x.dt, shape)
	for i := 0; i < numel(shape); i++ {
		a, k := uint64(xv[xi(i)]), uint64(sv[si(i)])
		if bits < 64 {
			a &= 1<<bits - 1
		}
		var r uint64
		if k < 64 {
			if left {
				r = a << k
			} else {
				r = a >> k
			}
		}
		putInt(x.dt, y.data, i, int64(r))
	}
	return []*hostTensor{y}, nil
}

// broadcastShapes is the numpy broadcast of two shapes.
func broadcastShapes(a, b []int) ([]int, error) {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := i - (n - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			db = b[j]
		}
		switch {
		case da == db || db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast", a, b)
		}
	}
	return out, nil
}

// reducer combines an existing element with an update per ScatterND's and
// ScatterElements' reduction attribute.
func reducer(dt dtype.Type, red string) (func(dst []byte, i int, old, upd float64), error) {
	var f func(a, b float64) float64
	switch red {
	case "", "none":
		f = func(_, b float64) float64 { return b }
	case "add":
		f = func(a, b float64) float64 { return a + b }
	case "mul":
		f = func(a, b float64) float64 { return a * b }
	case "max":
		f = math.Max
	case "min":
		f = math.Min
	default:
		return nil, fmt.Errorf("reduction %q", red)
	}
	return func(dst []byte, i int, old, upd float64) { putFloat(dt, dst, i, f(old, upd)) }, nil
}

// hostScatterElements writes updates into a copy of data at the positions
// indices name along the axis (Scatter is its opset 9-10 name).
func hostScatterElements(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 3); err != nil {
		return nil, err
	}
	data, ix, upd := ins[0], ins[1], ins[2]
	r := len(data.shape)
	axis, err := normAxisHost(hc.n.AttrInt("axis", 0), max(r, 1))
	if err != nil {
		return nil, err
	}
	if len(ix.shape) != r || !equalInts(ix.shape, upd.shape) {
		return nil, fmt.Errorf("indices %v and updates %v must have data %v's rank and one shape", ix.shape, upd.shape, data.shape)
	}
	iv, err := ix.ints()
	if err != nil {
		return nil, err
	}
	uv, err := upd.floats()
	if err != nil {
		return nil, err
	}
	dv, err := data.floats()
	if err != nil {
		return nil, err
	}
	red, err := reducer(data.dt, hc.n.AttrString("reduction", "none"))
	if err != nil {
		return nil, err
	}
	y := &hostTensor{dt: data.dt, shape: data.shape, data: append([]byte(nil), data.data...)}
	ds, is := strides(data.shape), strides(ix.shape)
	for i := range iv {
		t := iv[i]
		if t < 0 {
			t += int64(data.shape[axis])
		}
		if t < 0 || t >= int64(data.shape[axis]) {
			return nil, fmt.Errorf("index %d out of range for axis %d of %v", iv[i], axis, data.shape)
		}
		off := 0
		for a := 0; a < r; a++ {
			c := i / is[a] % ix.shape[a]
			if a == axis {
				c = int(t)
			}
			off += c * ds[a]
		}
		red(y.data, off, dv[off], uv[i])
		dv[off], _ = readFloat(y, off)
	}
	return []*hostTensor{y}, nil
}

// readFloat decodes element i of h.
func readFloat(h *hostTensor, i int) (float64, error) {
	t := &hostTensor{dt: h.dt, shape: []int{1}, data: h.data[i*hostSize(h.dt) : (i+1)*hostSize(h.dt)]}
	f, err := t.floats()
	if err != nil {
		return 0, err
	}
	return f[0], nil
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// hostScatterND writes slices of updates into a copy of data at the index
// tuples of indices' last axis.
func hostScatterND(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 3); err != nil {
		return nil, err
	}
	data, ix, upd := ins[0], ins[1], ins[2]
	if len(ix.shape) == 0 {
		return nil, fmt.Errorf("indices is a scalar")
	}
	k := ix.shape[len(ix.shape)-1]
	if k > len(data.shape) {
		return nil, fmt.Errorf("index tuples of %d for data of rank %d", k, len(data.shape))
	}
	iv, err := ix.ints()
	if err != nil {
		return nil, err
	}
	uv, err := upd.floats()
	if err != nil {
		return nil, err
	}
	dv, err := data.floats()
	if err != nil {
		return nil, err
	}
	red, err := reducer(data.dt, hc.n.AttrString("reduction", "none"))
	if err != nil {
		return nil, err
	}
	slice := prod(data.shape, k, len(data.shape))
	tuples := numel(ix.shape) / max(k, 1)
	if k == 0 {
		tuples = numel(ix.shape[:len(ix.shape)-1])
	}
	if len(uv) != tuples*slice {
		return nil, fmt.Errorf("updates %v do not fit %d slices of %d", upd.shape, tuples, slice)
	}
	ds := strides(data.shape)
	y := &hostTensor{dt: data.dt, shape: data.shape, data: append([]byte(nil), data.data...)}
	for t := 0; t < tuples; t++ {
		off := 0
		for a := 0; a < k; a++ {
			c := iv[t*k+a]
			if c < 0 {
				c += int64(data.shape[a])
			}
			if c < 0 || c >= int64(data.shape[a]) {
				return nil, fmt.Errorf("index %d out of range for axis %d of %v", iv[t*k+a], a, data.shape)
			}
			off += int(c) * ds[a]
		}
		for j := 0; j < slice; j++ {
			red(y.data, off+j, dv[off+j], uv[t*slice+j])
			dv[off+j], _ = readFloat(y, off+j)
		}
	}
	return []*hostTensor{y}, nil
}

// hostGatherND gathers the slices of data that indices' last axis names,
// the first batch_dims axes shared.
func hostGatherND(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	data, ix := ins[0], ins[1]
	b := int(hc.n.AttrInt("batch_dims", 0))
	if len(ix.shape) == 0 || b < 0 || b >= len(ix.shape) || b > len(data.shape) {
		return nil, fmt.Errorf("indices %v, batch_dims %d for data %v", ix.shape, b, data.shape)
	}
	k := ix.shape[len(ix.shape)-1]
	if b+k > len(data.shape) {
		return nil, fmt.Errorf("index tuples of %d after %d batch dims for data of rank %d", k, b, len(data.shape))
	}
	iv, err := ix.ints()
	if err != nil {
		return nil, err
	}
	shape := append(append([]int(nil), ix.shape[:len(ix.shape)-1]...), data.shape[b+k:]...)
	esz := hostSize(data.dt)
	slice := prod(data.shape, b+k, len(data.shape))
	batch := prod(data.shape, 0, b)
	perBatch := prod(ix.shape, b, len(ix.shape)-1)
	ds := strides(data.shape)
	y := newHostTensor(data.dt, shape)
	for bi := 0; bi < batch; bi++ {
		for t := 0; t < perBatch; t++ {
			off := bi * prod(data.shape, b, len(data.shape))
			tup := iv[(bi*perBatch+t)*k : (bi*perBatch+t+1)*k]
			for a, c := range tup {
				dim := data.shape[b+a]
				if c < 0 {
					c += int64(dim)
				}
				if c < 0 || c >= int64(dim) {
					return nil, fmt.Errorf("index %d out of range for axis %d of %v", tup[a], b+a, data.shape)
				}
				off += int(c) * ds[b+a]
			}
			dst := (bi*perBatch + t) * slice
			copy(y.data[dst*esz:(dst+slice)*esz], data.data[off*esz:(off+slice)*esz])
		}
	}
	return []*hostTensor{y}, nil
}

// hostTopK returns the k largest (or smallest) elements along the axis and
// their indices, ties broken toward the lower index.
func hostTopK(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	x := ins[0]
	var k int
	if hc.opset < 10 {
		k = int(hc.n.AttrInt("k", 0))
	} else {
		if err := needIns(ins, 2); err != nil {
			return nil, err
		}
		kv, err := ins[1].ints()
		if err != nil || len(kv) != 1 {
			return nil, fmt.Errorf("K must be one integer")
		}
		k = int(kv[0])
	}
	axis, err := normAxisHost(hc.n.AttrInt("axis", -1), max(len(x.shape), 1))
	if err != nil {
		return nil, err
	}
	outer, n, inner := split3(x.shape, axis)
	if k < 0 || k > n {
		return nil, fmt.Errorf("K %d for an axis of %d", k, n)
	}
	largest := hc.n.AttrInt("largest", 1) != 0
	v, err := x.floats()
	if err != nil {
		return nil, err
	}
	shape := append([]int(nil), x.shape...)
	shape[axis] = k
	vals := newHostTensor(x.dt, shape)
	idxs := newHostTensor(dtype.Int64, shape)
	order := make([]int, n)
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			at := func(j int) float64 { return v[(o*n+j)*inner+in] }
			for j := range order {
				order[j] = j
			}
			sort.SliceStable(order, func(a, b int) bool {
				if largest {
					return at(order[a]) > at(order[b])
				}
				return at(order[a]) < at(order[b])
			})
			for j := 0; j < k; j++ {
				dst := (o*k+j)*inner + in
				putFloat(x.dt, vals.data, dst, at(order[j]))
				if x.dt.IsInt() {
					src := (o*n+order[j])*inner + in
					esz := hostSize(x.dt)
					copy(vals.data[dst*esz:(dst+1)*esz], x.data[src*esz:(src+1)*esz])
				}
				putInt(dtype.Int64, idxs.data, dst, int64(order[j]))
			}
		}
	}
	return []*hostTensor{vals, idxs}, nil
}

// hostReverseSequence reverses the first sequence_lens[b] steps along the
// time axis of each batch entry.
func hostReverseSequence(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	x := ins[0]
	lens, err := ins[1].ints()
	if err != nil {
		return nil, err
	}
	r := len(x.shape)
	ba, err := normAxisHost(hc.n.AttrInt("batch_axis", 1), r)
	if err != nil {
		return nil, err
	}
	ta, err := normAxisHost(hc.n.AttrInt("time_axis", 0), r)
	if err != nil {
		return nil, err
	}
	if ba == ta || len(lens) != x.shape[ba] {
		return nil, fmt.Errorf("batch_axis %d, time_axis %d, %d sequence lengths for shape %v", ba, ta, len(lens), x.shape)
	}
	esz := hostSize(x.dt)
	st := strides(x.shape)
	y := &hostTensor{dt: x.dt, shape: x.shape, data: append([]byte(nil), x.data...)}
	for i := 0; i < numel(x.shape); i++ {
		b, t := i/st[ba]%x.shape[ba], i/st[ta]%x.shape[ta]
		l := int(lens[b])
		if l < 0 || l > x.shape[ta] {
			return nil, fmt.Errorf("sequence length %d for a time axis of %d", l, x.shape[ta])
		}
		if t < l {
			src := i + (l-1-2*t)*st[ta]
			copy(y.data[i*esz:(i+1)*esz], x.data[src*esz:(src+1)*esz])
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

// hostMaxUnpool scatters X's values to the flat positions I names in a
// zeroed output of the rule's shape.
func hostMaxUnpool(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	x, ix := ins[0], ins[1]
	out := hc.n.Outputs[0]
	shape := make([]int, len(out.Shape))
	for i, d := range out.Shape {
		k, err := d.Eval(hc.bind)
		if err != nil {
			return nil, fmt.Errorf("output shape: %w", err)
		}
		shape[i] = int(k)
	}
	if len(ins) > 2 && ins[2] != nil {
		s, err := ins[2].ints()
		if err != nil {
			return nil, err
		}
		for i := range shape {
			if i < len(s) {
				shape[i] = int(s[i])
			}
		}
	}
	iv, err := ix.ints()
	if err != nil {
		return nil, err
	}
	if numel(ix.shape) != numel(x.shape) || len(shape) != len(x.shape) {
		return nil, fmt.Errorf("indices %v for X %v into %v", ix.shape, x.shape, shape)
	}
	// Indices count positions in the output the pooling came from (the
	// shape the attributes give); an output_shape beyond it keeps each
	// element's coordinates.
	r := len(x.shape) - 2
	ks, _ := hc.n.AttrInts("kernel_shape")
	st, _ := hc.n.AttrInts("strides")
	pd, _ := hc.n.AttrInts("pads")
	if len(ks) != r {
		return nil, fmt.Errorf("kernel_shape %v for %d spatial dims", ks, r)
	}
	def := append([]int(nil), shape[:2]...)
	for i := 0; i < r; i++ {
		s, pb, pe := 1, 0, 0
		if i < len(st) {
			s = int(st[i])
		}
		if len(pd) == 2*r {
			pb, pe = int(pd[i]), int(pd[i+r])
		}
		def = append(def, (x.shape[2+i]-1)*s+int(ks[i])-pb-pe)
	}
	dplane, oplane := prod(def, 2, len(def)), prod(shape, 2, len(shape))
	dst, ost := strides(def[2:]), strides(shape[2:])
	esz := hostSize(x.dt)
	y := newHostTensor(x.dt, shape)
	for i, t := range iv {
		if t < 0 || t >= int64(numel(def)) {
			return nil, fmt.Errorf("index %d outside the %v the pooling came from", t, def)
		}
		plane, within := int(t)/dplane, int(t)%dplane
		o := plane * oplane
		for a := 0; a < r; a++ {
			c := within / dst[a] % def[2+a]
			if c >= shape[2+a] {
				return nil, fmt.Errorf("index %d lies outside output_shape %v", t, shape)
			}
			o += c * ost[a]
		}
		copy(y.data[o*esz:(o+1)*esz], x.data[i*esz:(i+1)*esz])
	}
	return []*hostTensor{y}, nil
}

// hostTfIdf counts the n-grams of pool_int64s in each row of an integer
// input (TF, IDF or TFIDF weighting), ONNX's TfIdfVectorizer.
func hostTfIdf(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	n := hc.n
	x := ins[0]
	xv, err := x.ints()
	if err != nil {
		return nil, hc.unsupported("input of type %v (string pools are not supported)", x.dt)
	}
	pool, ok := n.AttrInts("pool_int64s")
	if !ok {
		return nil, hc.unsupported("pool_strings")
	}
	counts, _ := n.AttrInts("ngram_counts")
	indexes, _ := n.AttrInts("ngram_indexes")
	weights, hasW := n.AttrFloats("weights")
	minN, maxN := int(n.AttrInt("min_gram_length", 1)), int(n.AttrInt("max_gram_length", 1))
	maxSkip := int(n.AttrInt("max_skip_count", 0))
	mode := n.AttrString("mode", "TF")
	width := 0
	for _, i := range indexes {
		width = max(width, int(i)+1)
	}
	// ngram key -> output column; pool entries of length L start at
	// ngram_counts[L-1].
	cols := map[string]int{}
	idx := 0
	for l := 1; l <= len(counts); l++ {
		start := int(counts[l-1])
		end := len(pool)
		if l < len(counts) {
			end = int(counts[l])
		}
		for p := start; p+l <= end; p += l {
			if idx >= len(indexes) {
				return nil, fmt.Errorf("more n-grams than ngram_indexes")
			}
			cols[fmt.Sprint(l, pool[p:p+l])] = int(indexes[idx])
			idx++
		}
	}
	rows, rowLen := 1, len(xv)
	if len(x.shape) == 2 {
		rows, rowLen = x.shape[0], x.shape[1]
	}
	out := make([]float64, rows*width)
	for r := 0; r < rows; r++ {
		row := xv[r*rowLen : (r+1)*rowLen]
		for l := minN; l <= maxN; l++ {
			for skip := 0; skip <= maxSkip; skip++ {
				if l == 1 && skip > 0 {
					break
				}
				step := skip + 1
				for s := 0; s+(l-1)*step < len(row); s++ {
					g := make([]int64, l)
					for k := range g {
						g[k] = row[s+k*step]
					}
					if c, ok := cols[fmt.Sprint(l, g)]; ok {
						out[r*width+c]++
					}
				}
			}
		}
	}
	for i, v := range out {
		if v == 0 {
			continue
		}
		w := 1.0
		if hasW {
			w = float64(weights[i%width])
		}
		switch mode {
		case "TF":
		case "IDF":
			out[i] = w
		case "TFIDF":
			out[i] = v * w
		default:
			return nil, fmt.Errorf("mode %q", mode)
		}
	}
	shape := []int{width}
	if len(x.shape) == 2 {
		shape = []int{rows, width}
	}
	y := newHostTensor(dtype.Float32, shape)
	for i, v := range out {
		putFloat(dtype.Float32, y.data, i, v)
	}
	return []*hostTensor{y}, nil
}

func init() {
	registerHost(hostDFT, "DFT")
	registerHost(hostRoiAlign, "RoiAlign")
}

// hostDFT is the discrete Fourier transform along one axis of a real
// ([..., 1]) or complex ([..., 2]) signal, forward or inverse (scaled by
// 1/n), optionally one-sided, in float64 by the definition (O(n^2)).
func hostDFT(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	x := ins[0]
	r := len(x.shape)
	if r < 3 || (x.shape[r-1] != 1 && x.shape[r-1] != 2) {
		return nil, fmt.Errorf("input %v: want [batch, signal..., 1 or 2]", x.shape)
	}
	axis, err := normAxisHost(hc.n.AttrInt("axis", 1), r)
	if err != nil {
		return nil, err
	}
	if axis == 0 || axis == r-1 {
		return nil, fmt.Errorf("axis %d is the batch or the complex axis", axis)
	}
	v, err := x.floats()
	if err != nil {
		return nil, err
	}
	n := x.shape[axis]
	if len(ins) > 1 && ins[1] != nil {
		l, err := scalar(ins[1])
		if err != nil {
			return nil, fmt.Errorf("dft_length: %w", err)
		}
		if n = int(l); n < 1 {
			return nil, fmt.Errorf("dft_length %d", n)
		}
	}
	inverse := hc.n.AttrInt("inverse", 0) != 0
	outLen := n
	if hc.n.AttrInt("onesided", 0) != 0 {
		outLen = n/2 + 1
	}
	cplx := x.shape[r-1]
	outer, inLen := prod(x.shape, 0, axis), x.shape[axis]
	inner := prod(x.shape, axis+1, r-1)
	shape := append([]int(nil), x.shape...)
	shape[axis], shape[r-1] = outLen, 2
	y := newHostTensor(x.dt, shape)
	sign := -1.0
	if inverse {
		sign = 1
	}
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			for k := 0; k < outLen; k++ {
				var re, im float64
				for j := 0; j < min(n, inLen); j++ {
					base := ((o*inLen+j)*inner + in) * cplx
					a, b := v[base], 0.0
					if cplx == 2 {
						b = v[base+1]
					}
					ang := sign * 2 * math.Pi * float64(j*k%n) / float64(n)
					c, s := math.Cos(ang), math.Sin(ang)
					re += a*c - b*s
					im += a*s + b*c
				}
				if inverse {
					re, im = re/float64(n), im/float64(n)
				}
				dst := ((o*outLen+k)*inner + in) * 2
				putFloat(x.dt, y.data, dst, re)
				putFloat(x.dt, y.data, dst+1, im)
			}
		}
	}
	return []*hostTensor{y}, nil
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

// hostPad is constant-mode Pad with a constant_value computed at run time
// (the device kernel takes it at Open); other modes are the kernel's.
func hostPad(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	n := hc.n
	if m := n.AttrString("mode", "constant"); m != "constant" {
		return nil, hc.unsupported("mode %q on the host", m)
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
	}
	esz := hostSize(x.dt)
	y := newHostTensor(x.dt, shape)
	for i := 0; i < numel(shape); i++ {
		putFloat(x.dt, y.data, i, val)
	}
	ist, ost := strides(x.shape), strides(shape)
	for i := 0; i < numel(x.shape); i++ {
		o, ok := 0, true
		for a := 0; a < r; a++ {
			c := i/ist[a]%x.shape[a] + pb[a]
			if c < 0 || c >= shape[a] {
				ok = false
				break
			}
			o += c * ost[a]
		}
		if ok {
			copy(y.data[o*esz:(o+1)*esz], x.data[i*esz:(i+1)*esz])
		}
	}
	return []*hostTensor{y}, nil
}
