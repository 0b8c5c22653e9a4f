package kernels

import (
	"math"
	"math/bits"
	"testing"
)

// The half path of norm_group (norm.cl under halfmath.cl): statistics in
// float, then per element t = half(half(v - mean) * half(inv)) and
// y = half(t * w + b), each half operation rounded once. These tests
// bit-compare its exact emulation (-DHALF_EMU) on PoCL with a Go emulation
// and hold that emulation to an error bound derived from the roundings.

// normHalfCase is one norm_group launch: rows of cols fp16 values around
// offset, LayerNorm or RMSNorm, with or without a residual (added in
// float, no sum stored), a scale and a bias (fp16 weights).
type normHalfCase struct {
	name                  string
	rows, cols            int
	rms, res, scale, bias bool
	offset, spread        float32
}

// data returns the case's inputs as fp16 storage holds them; res, w and b
// are nil where the case has none.
func (c normHalfCase) data(seed int64) (x, res, w, b []float32) {
	n := c.rows * c.cols
	x = randVec(seed, n)
	for i := range x {
		x[i] = roundTrip(F16, x[i]*c.spread+c.offset)
	}
	if c.res {
		res = stored(F16, randVec(seed+1, n))
	}
	if c.scale {
		w = stored(F16, randVec(seed+2, c.cols))
	}
	if c.bias {
		b = stored(F16, randVec(seed+3, c.cols))
	}
	return x, res, w, b
}

// groupSumSim is group_sum's tree over the g partial sums, in float.
func groupSumSim(sc []float32) float32 {
	for h := len(sc) / 2; h > 0; h >>= 1 {
		for i := 0; i < h; i++ {
			sc[i] = float32(sc[i] + sc[i+h])
		}
	}
	return sc[0]
}

// normStatsSim is norm_group's float statistics of one row (v already
// holds x + res as the kernel forms it): item lid of g sums columns lid,
// lid+g, ..., the tree adds the items' sums; the same for the squared
// deviations by float fma; inv is 1/sqrt(var + eps) correctly rounded.
func normStatsSim(v []float32, g int, eps float32, rms bool) (mean, inv float32) {
	sc := make([]float32, g)
	for lid := range sc {
		var a float32
		for j := lid; j < len(v); j += g {
			a = float32(a + v[j])
		}
		sc[lid] = a
	}
	tot := groupSumSim(sc)
	if !rms {
		mean = float32(tot / float32(len(v)))
	}
	for lid := range sc {
		var a float32
		for j := lid; j < len(v); j += g {
			d := float32(v[j] - mean)
			a = ffma(d, d, a)
		}
		sc[lid] = a
	}
	z := float32(float32(groupSumSim(sc)/float32(len(v))) + eps)
	return mean, float32(1 / math.Sqrt(float64(z)))
}

// normHalfSim is norm_group's half path on the rows of x, cols wide, with
// a group of g items; res, w and b may be nil. Column j of row r takes
// weight wi(r, j) (nil: j).
func normHalfSim(x, res, w, b []float32, cols, g int, eps float32, rms bool, wi func(r, j int) int) []float32 {
	out := make([]float32, len(x))
	v := make([]float32, cols)
	for r := 0; r*cols < len(x); r++ {
		for j := range v {
			v[j] = x[r*cols+j]
			if res != nil {
				v[j] = float32(v[j] + res[r*cols+j])
			}
		}
		mean, inv := normStatsSim(v, g, eps, rms)
		hinv := hcvt(inv)
		for j := range v {
			t := hfma(hcvt(float32(v[j]-mean)), hinv, 0)
			k := j
			if wi != nil {
				k = wi(r, j)
			}
			wj, bj := 1.0, 0.0
			if w != nil {
				wj = float64(w[k])
			}
			if b != nil {
				bj = float64(b[k])
			}
			out[r*cols+j] = float32(hfma(t, wj, bj))
		}
	}
	return out
}

// runNormHalf launches the case on testLib (norm_group, whatever the
// build options) and returns the output.
func runNormHalf(t *testing.T, c normHalfCase, x, res, w, b []float32, eps float32) []float32 {
	t.Helper()
	n := c.rows * c.cols
	p := NormParams{Storage: F16, Weights: F16, Rows: c.rows, Cols: c.cols, Eps: eps}
	xb, ob := upload(t, F16, x), alloc(t, F16, n)
	var rb, wb, bb Buf
	if res != nil {
		rb = upload(t, F16, res)
	}
	if w != nil {
		wb = upload(t, F16, w)
	}
	if b != nil {
		bb = upload(t, F16, b)
	}
	var err error
	if c.rms {
		err = testLib.AddRMSNorm(p, xb, rb, Buf{}, wb, ob)
	} else {
		err = testLib.AddLayerNorm(p, xb, rb, Buf{}, wb, bb, ob)
	}
	if err != nil {
		t.Fatal(err)
	}
	return download(t, F16, ob, n)
}

// TestNormHalfBitExact runs norm_group's half path in halfmath.cl's float
// emulation on PoCL and compares every output bit for bit with the Go
// emulation. Odd row lengths (not multiples of the group or of any
// vector), a mean far from zero (where half(v - mean) must be formed in
// float), a residual added in float, every weight combination, and
// GroupNorm's per-channel weights.
func TestNormHalfBitExact(t *testing.T) {
	old := styleOverride
	styleOverride = 2
	defer func() { styleOverride = old }()
	g := groupSize(testLib)
	withHalfEmu(t, func() {
		for i, c := range []normHalfCase{
			{name: "LayerNorm", rows: 3, cols: 771, scale: true, bias: true, offset: 3, spread: 2},
			{name: "LayerNorm large mean", rows: 2, cols: 257, scale: true, bias: true, offset: 300, spread: 4},
			{name: "LayerNorm no bias", rows: 2, cols: 33, scale: true, offset: -1, spread: 1},
			{name: "RMSNorm", rows: 4, cols: 37, rms: true, scale: true, spread: 1},
			{name: "RMSNorm no scale", rows: 2, cols: 129, rms: true, spread: 3},
			{name: "AddLayerNorm", rows: 2, cols: 131, res: true, scale: true, offset: 1, spread: 1},
		} {
			x, res, w, b := c.data(int64(70 + 5*i))
			got := runNormHalf(t, c, x, res, w, b, 1e-5)
			want := normHalfSim(x, res, w, b, c.cols, g, 1e-5, c.rms, nil)
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					t.Fatalf("%s %dx%d: output %d: kernel %g, Go emulation %g", c.name, c.rows, c.cols, j, got[j], want[j])
				}
			}
		}
		// GroupNorm (the same kernel with per-channel weights): 2 images,
		// 4 channels in 2 groups, 13 positions.
		p := GroupNormParams{Storage: F16, Weights: F16, N: 2, C: 4, Groups: 2, Spatial: 13, Eps: 1e-5}
		x := stored(F16, randVec(99, 2*4*13))
		w, b := stored(F16, randVec(100, 4)), stored(F16, randVec(101, 4))
		ob := alloc(t, F16, len(x))
		if err := testLib.GroupNorm(p, upload(t, F16, x), upload(t, F16, w), upload(t, F16, b), ob); err != nil {
			t.Fatal(err)
		}
		got := download(t, F16, ob, len(x))
		want := normHalfSim(x, nil, w, b, 2*13, g, 1e-5, false, func(r, j int) int { return (r%2)*2 + j/13 })
		for j := range got {
			if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
				t.Fatalf("GroupNorm: output %d: kernel %g, Go emulation %g", j, got[j], want[j])
			}
		}
	})
}

// normHalfBound bounds |y - y*| for one output of the half path, where y*
// is the exact (float64) LayerNorm/RMSNorm of the fp16 inputs: d = v - m
// the exact deviation, inv = 1/sqrt(var + eps) exact, w the weight (1 for
// none), dm the bound on the float mean's error, einv on the float inv's
// relative error. The path rounds v - mean in float then to half, rounds
// inv to half, t = d*inv and y = t*w + b to half: each half rounding errs
// by at most halfU|x| + halfEta, each float one by floatU|x|.
func normHalfBound(d, inv, w, y, dm, einv float64) float64 {
	ad, aw := math.Abs(d), math.Abs(w)
	ed := (dm+ad)*((1+floatU)*(1+halfU)-1) + dm + halfEta // half(float(v - mean)) - d
	e1 := (1+einv)*(1+halfU) - 1 + halfEta/inv            // relative error of half(inv)
	et := ed*inv*(1+e1) + ad*inv*e1                       // d^*hinv - d*inv
	et += halfU*(ad*inv+et) + halfEta                     // t's rounding
	return et*aw + halfU*(math.Abs(y)+et*aw) + halfEta
}

// TestNormHalfAccuracy holds the Go emulation of norm_group's half path
// (tied to the kernel by TestNormHalfBitExact) to normHalfBound against
// the exact LayerNorm/RMSNorm in float64 of the same fp16 inputs, at a
// model's width (4096) and an odd one, with a mean far from zero, and
// logs the largest error as a fraction of the bound and of the outputs'
// scale: the accuracy to expect of the path.
func TestNormHalfAccuracy(t *testing.T) {
	const g, eps = 128, 1e-5
	for i, c := range []normHalfCase{
		{name: "LayerNorm 4096", rows: 2, cols: 4096, scale: true, bias: true, offset: 3, spread: 2},
		{name: "LayerNorm 771, mean 300", rows: 2, cols: 771, scale: true, bias: true, offset: 300, spread: 4},
		{name: "RMSNorm 4096", rows: 2, cols: 4096, rms: true, scale: true, spread: 1},
		{name: "RMSNorm 333, no scale", rows: 2, cols: 333, rms: true, spread: 8},
	} {
		x, _, w, b := c.data(int64(90 + 5*i))
		got := normHalfSim(x, nil, w, b, c.cols, g, eps, c.rms, nil)
		n := c.cols
		// Float roundings per statistic: an item's run of n/g additions,
		// the tree's log2(g), the division and eps.
		k := (n+g-1)/g + bits.Len(uint(g)) - 1
		worst, scale, maxErr := 0.0, 0.0, 0.0
		for r := 0; r < c.rows; r++ {
			row := x[r*n : (r+1)*n]
			m, sabs := 0.0, 0.0
			for _, v := range row {
				m += float64(v)
				sabs += math.Abs(float64(v))
			}
			m /= float64(n)
			dm := 0.0
			if c.rms {
				m = 0
			} else {
				dm = gammaN(k, floatU)*sabs/float64(n)*(1+floatU) + floatU*math.Abs(m)
			}
			ss := 0.0
			for _, v := range row {
				ss += (float64(v) - m) * (float64(v) - m)
			}
			vr := ss/float64(n) + eps
			inv := 1 / math.Sqrt(vr)
			// The float variance errs relatively by theta (k+1 roundings,
			// two more for the squared float deviation) and is taken about
			// the float mean, which adds dm^2; rsqrt is within 2 float ulp.
			theta := gammaN(k+4, floatU)
			lo := (1 - 4*floatU) / math.Sqrt((1+theta)*(1+dm*dm/vr))
			hi := (1 + 4*floatU) / math.Sqrt(1-theta)
			einv := math.Max(1-lo, hi-1)
			for j, v := range row {
				d := float64(v) - m
				wj, bj := 1.0, 0.0
				if w != nil {
					wj = float64(w[j])
				}
				if b != nil {
					bj = float64(b[j])
				}
				y := d*inv*wj + bj
				e := math.Abs(float64(got[r*n+j]) - y)
				bound := normHalfBound(d, inv, wj, y, dm, einv)
				if !(e <= bound) {
					t.Fatalf("%s: row %d col %d: %g, exact %g: error %.3g over the bound %.3g", c.name, r, j, got[r*n+j], y, e, bound)
				}
				worst = math.Max(worst, e/bound)
				scale = math.Max(scale, math.Abs(y))
				maxErr = math.Max(maxErr, e)
			}
		}
		t.Logf("%s: largest error %.3g = %.2g of the output scale %.3g, %.2g of its bound", c.name, maxErr, maxErr/scale, scale, worst)
	}
}
