package engine

import (
	"fmt"
	"math"
	"sort"

	"github.com/tlite/tlite/graph/dtype"
)

// Index and selection ops computed on the CPU (OneHot, BitShift, the
// scatters, GatherND, TopK, ReverseSequence, MaxUnpool, TfIdfVectorizer),
// registered in hostops_nn.go, and the shape helpers the host ops share.

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

// split3 splits a shape at axis into outer, the axis, inner.
func split3(shape []int, axis int) (outer, n, inner int) {
	return prod(shape, 0, axis), shape[axis], prod(shape, axis+1, len(shape))
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
	iv, uv, dv, red, err := scatterOperands(hc, data, ix, upd)
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
	iv, uv, dv, red, err := scatterOperands(hc, data, ix, upd)
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

// hostCumSum is CumSum over integer tensors, which the device kernel (float
// only) refuses; decoders build position ids as CumSum(attention_mask)
// (BLOOM, and Hugging Face's position_ids from a padded mask).
func hostCumSum(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	x := ins[0]
	if !x.dt.IsInt() {
		return nil, hc.unsupported("host CumSum takes integer tensors; %v runs on the device", x.dt)
	}
	av, err := ins[1].ints()
	if err != nil || len(av) != 1 {
		return nil, fmt.Errorf("axis: want one integer")
	}
	axis, err := normAxis(av[0], len(x.shape))
	if err != nil {
		return nil, err
	}
	vals, err := x.ints()
	if err != nil {
		return nil, err
	}
	excl, rev := hc.n.AttrInt("exclusive", 0) != 0, hc.n.AttrInt("reverse", 0) != 0
	outer, n, inner := prod(x.shape, 0, axis), x.shape[axis], prod(x.shape, axis+1, len(x.shape))
	out := newHostTensor(x.dt, x.shape)
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			var acc int64
			for k := 0; k < n; k++ {
				j := k
				if rev {
					j = n - 1 - k
				}
				e := (o*n+j)*inner + in
				if excl {
					putInt(x.dt, out.data, e, acc)
					acc += vals[e]
				} else {
					acc += vals[e]
					putInt(x.dt, out.data, e, acc)
				}
			}
		}
	}
	return []*hostTensor{out}, nil
}

// scatterOperands decodes what ScatterElements and ScatterND share: the
// indices, the updates and data as float64, and the reduction attribute.
func scatterOperands(hc *hostCtx, data, ix, upd *hostTensor) (iv []int64, uv, dv []float64, red func(dst []byte, i int, old, upd float64), err error) {
	if iv, err = ix.ints(); err != nil {
		return
	}
	if uv, err = upd.floats(); err != nil {
		return
	}
	if dv, err = data.floats(); err != nil {
		return
	}
	red, err = reducer(data.dt, hc.n.AttrString("reduction", "none"))
	return
}
