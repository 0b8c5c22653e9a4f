package kernels

import (
	_ "embed"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/tlite/tlite/opencl"
)

//go:embed resize.cl
var resizeSrc string

// ResizeMode is ONNX Resize's interpolation mode.
type ResizeMode int

const (
	ResizeNearest ResizeMode = iota // "nearest"
	ResizeLinear                    // "linear" (bilinear, trilinear, ... by axis count)
	ResizeCubic                     // "cubic"
)

// ResizeCoord is ONNX Resize's coordinate_transformation_mode.
type ResizeCoord int

const (
	CoordHalfPixel          ResizeCoord = iota // "half_pixel" (the default)
	CoordHalfPixelSymmetric                    // "half_pixel_symmetric" (opset 19)
	CoordPytorchHalfPixel                      // "pytorch_half_pixel"
	CoordAlignCorners                          // "align_corners"
	CoordAsymmetric                            // "asymmetric" (Resize-10 and Upsample)
	CoordTFCropAndResize                       // "tf_crop_and_resize"
	CoordTFHalfPixelForNN                      // "tf_half_pixel_for_nn" (opsets 11 and 12)
)

// NearestMode is ONNX Resize's nearest_mode.
type NearestMode int

const (
	NearestRoundPreferFloor NearestMode = iota // "round_prefer_floor" (the default)
	NearestRoundPreferCeil                     // "round_prefer_ceil"
	NearestFloor                               // "floor"
	NearestCeil                                // "ceil"
)

var (
	resizeModeNames  = map[string]ResizeMode{"nearest": ResizeNearest, "linear": ResizeLinear, "cubic": ResizeCubic}
	resizeCoordNames = map[string]ResizeCoord{"half_pixel": CoordHalfPixel, "half_pixel_symmetric": CoordHalfPixelSymmetric,
		"pytorch_half_pixel": CoordPytorchHalfPixel, "align_corners": CoordAlignCorners, "asymmetric": CoordAsymmetric,
		"tf_crop_and_resize": CoordTFCropAndResize, "tf_half_pixel_for_nn": CoordTFHalfPixelForNN}
	nearestModeNames = map[string]NearestMode{"round_prefer_floor": NearestRoundPreferFloor,
		"round_prefer_ceil": NearestRoundPreferCeil, "floor": NearestFloor, "ceil": NearestCeil}
)

// ParseResizeMode maps ONNX's mode attribute to a ResizeMode.
func ParseResizeMode(s string) (ResizeMode, error) {
	if m, ok := resizeModeNames[s]; ok {
		return m, nil
	}
	return 0, fmt.Errorf("Resize mode %q is not nearest, linear or cubic", s)
}

// ParseResizeCoord maps ONNX's coordinate_transformation_mode attribute to a
// ResizeCoord.
func ParseResizeCoord(s string) (ResizeCoord, error) {
	if m, ok := resizeCoordNames[s]; ok {
		return m, nil
	}
	return 0, fmt.Errorf("Resize coordinate_transformation_mode %q is not supported", s)
}

// ParseNearestMode maps ONNX's nearest_mode attribute to a NearestMode.
func ParseNearestMode(s string) (NearestMode, error) {
	if m, ok := nearestModeNames[s]; ok {
		return m, nil
	}
	return 0, fmt.Errorf("Resize nearest_mode %q is not round_prefer_floor, round_prefer_ceil, floor or ceil", s)
}

// ResizeParams describes ONNX Resize (opsets 10 to 19) of a row-major tensor
// of shape In into shape Out, every axis resizable. ResizeShape turns
// Resize's inputs (scales or sizes, axes, keep_aspect_ratio_policy) into In,
// Out and Scales.
type ResizeParams struct {
	In, Out []int
	// Scales are the per-axis scales of the coordinate transformation: the
	// given scales, or Out/In when sizes were given.
	Scales []float64
	// RoiStart and RoiEnd are tf_crop_and_resize's region per axis, in
	// normalised coordinates; nil means [0, 1] on every axis.
	RoiStart, RoiEnd []float64
	Mode             ResizeMode
	Coord            ResizeCoord
	Nearest          NearestMode
	// CubicA is cubic_coeff_a (ONNX's default is -0.75; the zero value is
	// taken literally).
	CubicA float32
	// ExcludeOutside gives taps outside the input zero weight and
	// renormalises the rest.
	ExcludeOutside bool
	// Extrapolation is the value tf_crop_and_resize writes where the sampled
	// coordinate lies outside the input.
	Extrapolation float32
	// Antialias widens the linear or cubic filter by 1/scale when
	// downscaling (opset 18).
	Antialias bool
}

// ResizeShape computes ONNX Resize's output shape and coordinate scales for an
// input of shape in from either scales or sizes (the other nil), given for
// axes (nil: every axis, in order; negative axes count from the end) with
// keep_aspect_ratio_policy policy ("" or "stretch", "not_larger",
// "not_smaller"; sizes only). Axes not listed keep their size and scale 1.
func ResizeShape(in []int, scales []float64, sizes []int, axes []int, policy string) (out []int, sc []float64, err error) {
	r := len(in)
	if axes == nil {
		for i := 0; i < r; i++ {
			axes = append(axes, i)
		}
	}
	seen := make([]bool, r)
	norm := make([]int, len(axes))
	for i, a := range axes {
		if a < -r || a >= r {
			return nil, nil, fmt.Errorf("Resize axis %d out of range for rank %d", a, r)
		}
		if a < 0 {
			a += r
		}
		if seen[a] {
			return nil, nil, fmt.Errorf("Resize axis %d repeated in %v", a, axes)
		}
		seen[a], norm[i] = true, a
	}
	out, sc = append([]int(nil), in...), make([]float64, r)
	for i := range sc {
		sc[i] = 1
	}
	switch {
	case (scales == nil) == (sizes == nil):
		return nil, nil, fmt.Errorf("Resize needs exactly one of scales and sizes")
	case scales != nil:
		if len(scales) != len(norm) {
			return nil, nil, fmt.Errorf("Resize scales %v has %d entries for %d axes", scales, len(scales), len(norm))
		}
		for i, a := range norm {
			s := scales[i]
			if !(s > 0) || math.IsInf(s, 0) {
				return nil, nil, fmt.Errorf("Resize scale %g on axis %d is not a positive finite number", s, a)
			}
			v := math.Floor(s * float64(in[a]))
			if v > math.MaxInt32 {
				return nil, nil, fmt.Errorf("Resize scale %g makes axis %d of %d too large", s, a, in[a])
			}
			out[a], sc[a] = int(v), s
		}
	default:
		if len(sizes) != len(norm) {
			return nil, nil, fmt.Errorf("Resize sizes %v has %d entries for %d axes", sizes, len(sizes), len(norm))
		}
		for i, a := range norm {
			if sizes[i] < 0 {
				return nil, nil, fmt.Errorf("Resize size %d on axis %d is negative", sizes[i], a)
			}
			if in[a] == 0 {
				if sizes[i] != 0 {
					return nil, nil, fmt.Errorf("Resize cannot grow empty axis %d to %d", a, sizes[i])
				}
				continue
			}
			out[a], sc[a] = sizes[i], float64(sizes[i])/float64(in[a])
		}
		switch policy {
		case "", "stretch":
		case "not_larger", "not_smaller":
			s := 0.0
			for i, a := range norm {
				if i == 0 || policy == "not_larger" && sc[a] < s || policy == "not_smaller" && sc[a] > s {
					s = sc[a]
				}
			}
			for _, a := range norm {
				// ONNX rounds half up here, not to even.
				out[a], sc[a] = int(s*float64(in[a])+0.5), s
			}
		default:
			return nil, nil, fmt.Errorf("Resize keep_aspect_ratio_policy %q is not stretch, not_larger or not_smaller", policy)
		}
	}
	return out, sc, nil
}

// resizeAxis is one axis's 1-D resize, in the terms of resize.cl.
type resizeAxis struct {
	in, out              int
	cform                int
	scale, num, den, off float32
	extrap               bool
	m                    int
	kscale               float32
	norm                 bool
	identity             bool
}

func (p ResizeParams) validate() error {
	r := len(p.In)
	if len(p.Out) != r || len(p.Scales) != r {
		return fmt.Errorf("shapes %v -> %v and scales %v differ in rank", p.In, p.Out, p.Scales)
	}
	if p.RoiStart != nil || p.RoiEnd != nil {
		if len(p.RoiStart) != r || len(p.RoiEnd) != r {
			return fmt.Errorf("roi %v..%v does not have %d axes", p.RoiStart, p.RoiEnd, r)
		}
	}
	for i := range p.In {
		if p.In[i] < 0 || p.Out[i] < 0 {
			return fmt.Errorf("negative size in %v -> %v", p.In, p.Out)
		}
		if p.In[i] == 0 && p.Out[i] != 0 {
			return fmt.Errorf("axis %d: cannot resize an empty axis to %d", i, p.Out[i])
		}
		if s := p.Scales[i]; !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("axis %d: scale %g is not a positive finite number", i, s)
		}
	}
	if p.Mode < ResizeNearest || p.Mode > ResizeCubic || p.Coord < CoordHalfPixel || p.Coord > CoordTFHalfPixelForNN ||
		p.Nearest < NearestRoundPreferFloor || p.Nearest > NearestCeil {
		return fmt.Errorf("mode %d, coordinate mode %d or nearest mode %d out of range", p.Mode, p.Coord, p.Nearest)
	}
	if p.Antialias && p.Mode == ResizeNearest {
		return fmt.Errorf("antialias applies to linear and cubic modes only")
	}
	if math.IsNaN(float64(p.CubicA)) || math.IsInf(float64(p.CubicA), 0) {
		return fmt.Errorf("cubic_coeff_a %g is not finite", p.CubicA)
	}
	return nil
}

// axis folds axis a's coordinate mode into resize.cl's terms. Float64 here
// follows ONNX's reference; the kernel then computes in float32.
func (p ResizeParams) axis(a int) resizeAxis {
	in, out, s := p.In[a], p.Out[a], p.Scales[a]
	outLen := s * float64(in) // ONNX's reference uses the unrounded length
	r0, r1 := 0.0, 1.0
	if p.RoiStart != nil {
		r0, r1 = p.RoiStart[a], p.RoiEnd[a]
	}
	ax := resizeAxis{in: in, out: out, scale: float32(s), kscale: 1}
	switch p.Coord {
	case CoordHalfPixel:
		ax.cform = 0
	case CoordHalfPixelSymmetric:
		ax.cform = 0
		adj := float64(out) / outLen
		ax.off = float32(float64(in) / 2 * (1 - adj))
	case CoordPytorchHalfPixel:
		if outLen == 1 {
			ax.cform, ax.off = 3, -0.5
		}
	case CoordAlignCorners:
		ax.cform, ax.num, ax.den = 2, float32(in-1), float32(outLen-1)
		if outLen == 1 {
			ax.cform, ax.off = 3, 0
		}
	case CoordAsymmetric:
		ax.cform = 1
	case CoordTFHalfPixelForNN:
		ax.cform = 4
	case CoordTFCropAndResize:
		ax.extrap = true
		ax.cform, ax.num, ax.den, ax.off = 2, float32((r1-r0)*float64(in-1)), float32(outLen-1), float32(r0*float64(in-1))
		if outLen == 1 {
			ax.cform, ax.off = 3, float32((r1-r0)*float64(in-1)/2+r0*float64(in-1))
		}
	}
	switch p.Mode {
	case ResizeLinear:
		ax.m = 1
	case ResizeCubic:
		ax.m = 2
	}
	if p.Antialias {
		ax.norm = true
		ks := math.Min(s, 1)
		ax.kscale = float32(ks)
		ax.m = int(-math.Floor(-float64(ax.m) / ks))
	}
	// An axis that keeps its size under scale 1 maps every coordinate to
	// itself (tf_crop_and_resize only over the whole axis; never
	// tf_half_pixel_for_nn, which samples x + 0.5): the launcher skips it.
	ax.identity = in == out && s == 1 && p.Coord != CoordTFHalfPixelForNN &&
		(p.Coord != CoordTFCropAndResize || r0 == 0 && r1 == 1)
	return ax
}

// coord is resize.cl's coordinate computation, in the same float32
// operations and order.
func (ax resizeAxis) coord(x int) float32 {
	xf := float32(x)
	switch ax.cform {
	case 0:
		h := float32(xf+0.5) / ax.scale
		return float32(ax.off+h) - 0.5
	case 1:
		return xf / ax.scale
	case 2:
		pr := float32(xf * ax.num)
		return pr/ax.den + ax.off
	case 4:
		return float32(xf+0.5) / ax.scale
	}
	return ax.off
}

// resizePass is one launch: axis a of a tensor whose other axes have already
// their sizes in shape.
type resizePass struct {
	a                   int // the axis
	ax                  resizeAxis
	outer, inner, elems int // elements of the pass's output
}

// plan orders the non-identity axes, shrinking ones first so that later
// passes work on less, and says what each pass sees.
func (p ResizeParams) plan() []resizePass {
	var axes []int
	for a := range p.In {
		if !p.axis(a).identity {
			axes = append(axes, a)
		}
	}
	sort.SliceStable(axes, func(i, j int) bool {
		ri := float64(p.Out[axes[i]]) / float64(max(1, p.In[axes[i]]))
		rj := float64(p.Out[axes[j]]) / float64(max(1, p.In[axes[j]]))
		return ri < rj
	})
	shape := append([]int(nil), p.In...)
	var passes []resizePass
	for _, a := range axes {
		shape[a] = p.Out[a]
		outer, inner := 1, 1
		for i := 0; i < a; i++ {
			outer *= shape[i]
		}
		for i := a + 1; i < len(shape); i++ {
			inner *= shape[i]
		}
		passes = append(passes, resizePass{a: a, ax: p.axis(a), outer: outer, inner: inner, elems: outer * inner * p.Out[a]})
	}
	return passes
}

func prod(xs []int) int {
	n := 1
	for _, x := range xs {
		n *= x
	}
	return n
}

// fusedHW reports whether passes are exactly the two innermost axes, which
// resize_hw does in one launch.
func (p ResizeParams) fusedHW(passes []resizePass) bool {
	r := len(p.In)
	return !resizeSeparable && len(passes) == 2 && passes[0].a+passes[1].a == 2*r-3
}

// resizeSeparable, set by tests, runs image resizes as two passes too.
var resizeSeparable bool

// ScratchElems is how many elements (in the activation storage) of scratch
// Resize needs between its per-axis passes: 0 when at most one axis really
// changes or the two that do are the innermost (an image resize), else room
// for the intermediates.
func (p ResizeParams) ScratchElems() int {
	if p.validate() != nil || prod(p.Out) == 0 {
		return 0
	}
	passes := p.plan()
	if len(passes) < 2 || p.fusedHW(passes) {
		return 0
	}
	big := 0
	for _, ps := range passes[:len(passes)-1] {
		big = max(big, ps.elems)
	}
	if len(passes) == 2 {
		return big
	}
	return 2 * big
}

// Resize writes ONNX Resize of x (shape p.In) into y (shape p.Out), both
// stored in s. scratch (ScratchElems elements, Mem nil when 0) holds the
// intermediates of a resize along several axes; an axis that keeps its size
// at scale 1 costs nothing, and a resize that changes nothing is a copy. An
// empty output launches nothing.
func (l *Lib) Resize(s Storage, x, y, scratch Buf, p ResizeParams) error {
	if err := l.resize(s, x, y, scratch, p); err != nil {
		return fmt.Errorf("kernels: Resize %v -> %v: %w", p.In, p.Out, err)
	}
	return nil
}

func (l *Lib) resize(s Storage, x, y, scratch Buf, p ResizeParams) error {
	if err := p.validate(); err != nil {
		return err
	}
	nIn, nOut := prod(p.In), prod(p.Out)
	if nOut == 0 {
		return nil
	}
	if err := checkBufUses([]bufUse{{"input", x, s, nIn}, {"output", y, s, nOut}}); err != nil {
		return err
	}
	passes := p.plan()
	if len(passes) == 0 {
		return l.Copy(s.Size(), y, ContiguousView(p.Out), x, ContiguousView(p.In))
	}
	if p.fusedHW(passes) {
		return l.resizeHW(s, x, y, p)
	}
	need := p.ScratchElems()
	var half int
	if need > 0 {
		if err := checkBufUses([]bufUse{{"scratch", scratch, s, need}}); err != nil {
			return err
		}
		half = need
		if len(passes) > 2 {
			half = need / 2
		}
	}
	k, err := l.resizeKernel(s, "resize_axis")
	if err != nil {
		return err
	}
	i32 := func(v int) int32 { return int32(v) }
	src := x
	for i, ps := range passes {
		dst := y
		if i < len(passes)-1 {
			dst = Buf{Mem: scratch.Mem, Off: scratch.Off + (i%2)*half}
		}
		ax := ps.ax
		global, local := l.cpuGroups([]int{ax.out * ps.inner, ps.outer})
		if err := l.dev.Launch(k, global, local, src.Mem, i32(src.Off), dst.Mem, i32(dst.Off),
			i32(ax.in), i32(ax.out), i32(ps.inner), i32(ax.cform), ax.scale, ax.num, ax.den, ax.off,
			b2i(ax.extrap), p.Extrapolation, i32(int(p.Mode)), i32(int(p.Nearest)), i32(ax.m), ax.kscale,
			p.CubicA, b2i(p.ExcludeOutside), b2i(ax.norm)); err != nil {
			return err
		}
		src = dst
	}
	return nil
}

// b2i is a kernel's int flag for b.
func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// resizeExactDiv remembers, per device, whether the resize program builds
// with correctly rounded division. Coordinates divide by the scale, and
// nearest rounding agrees with ResizeRef at exact ties only when the
// quotient is correctly rounded; OpenCL allows 2.5 ulp by default and
// refuses the option on devices that cannot honour it, which then build
// without.
var resizeExactDiv sync.Map // *opencl.Device -> bool

func (l *Lib) resizeKernel(s Storage, name string) (*opencl.Kernel, error) {
	const exact = " -cl-fp32-correctly-rounded-divide-sqrt"
	if ok, seen := resizeExactDiv.Load(l.dev); seen {
		if ok.(bool) {
			return l.kernel("resize", resizeSrc, s.define()+exact, name)
		}
		return l.kernel("resize", resizeSrc, s.define(), name)
	}
	k, err := l.kernel("resize", resizeSrc, s.define()+exact, name)
	if err == nil {
		resizeExactDiv.Store(l.dev, true)
		return k, nil
	}
	k, err2 := l.kernel("resize", resizeSrc, s.define(), name)
	if err2 != nil {
		return nil, err2
	}
	resizeExactDiv.Store(l.dev, false)
	return k, nil
}

// resizeHW resizes the two innermost axes in one launch.
func (l *Lib) resizeHW(s Storage, x, y Buf, p ResizeParams) error {
	r := len(p.In)
	h, w := p.axis(r-2), p.axis(r-1)
	k, err := l.resizeKernel(s, "resize_hw")
	if err != nil {
		return err
	}
	i32 := func(v int) int32 { return int32(v) }
	planes := prod(p.Out[:r-2])
	global, local := l.cpuGroups([]int{w.out, h.out, planes})
	return l.dev.Launch(k, global, local, x.Mem, i32(x.Off), y.Mem, i32(y.Off),
		i32(h.in), i32(w.in), i32(h.out), i32(w.out),
		i32(h.cform), h.scale, h.num, h.den, h.off, i32(h.m), h.kscale, b2i(h.norm),
		i32(w.cform), w.scale, w.num, w.den, w.off, i32(w.m), w.kscale, b2i(w.norm),
		b2i(h.extrap), p.Extrapolation, i32(int(p.Mode)), i32(int(p.Nearest)), p.CubicA, b2i(p.ExcludeOutside))
}

// ResizeRef is the pure-Go reference for Resize on host tensors. It follows
// ONNX's definition directly: each output element is a 1-D interpolation
// along axis 0 of 1-D interpolations along axis 1, and so on, accumulated in
// float64; coordinates are computed in float32 exactly as the kernel does.
func ResizeRef(x, y []float32, p ResizeParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("kernels: ResizeRef: %w", err)
	}
	nIn, nOut := prod(p.In), prod(p.Out)
	if len(x) < nIn || len(y) < nOut {
		return fmt.Errorf("kernels: ResizeRef: slices of %d and %d for %v -> %v", len(x), len(y), p.In, p.Out)
	}
	r := len(p.In)
	axes := make([]resizeAxis, r)
	stride := make([]int, r)
	st := 1
	for a := r - 1; a >= 0; a-- {
		axes[a] = p.axis(a)
		stride[a] = st
		st *= p.In[a]
	}
	pos := make([]int, r)
	var interp func(a, off int) float64
	interp = func(a, off int) float64 {
		if a == r {
			return float64(x[off])
		}
		ax := axes[a]
		xo := ax.coord(pos[a])
		if ax.extrap && (xo < 0 || xo > float32(ax.in-1)) {
			return float64(p.Extrapolation)
		}
		fl := float32(math.Floor(float64(xo)))
		base := int(fl)
		if fl == xo {
			base--
		}
		ratio := xo - float32(base)
		clampIdx := func(j int) int { return min(max(j, 0), ax.in-1) }
		if p.Mode == ResizeNearest {
			pick := base
			switch {
			case ratio == 1:
				pick = base + 1
			case p.Nearest == NearestRoundPreferFloor && ratio > 0.5,
				p.Nearest == NearestRoundPreferCeil && ratio >= 0.5,
				p.Nearest == NearestCeil:
				pick = base + 1
			}
			return interp(a+1, off+clampIdx(pick)*stride[a])
		}
		var acc, wsum float64
		for j := base - ax.m + 1; j <= base+ax.m; j++ {
			t := (float64(j-base) - float64(ratio)) * float64(ax.kscale)
			var w float64
			if p.Mode == ResizeLinear {
				w = math.Max(0, 1-math.Abs(t))
			} else {
				w = cubicRef(t, float64(p.CubicA))
			}
			if p.ExcludeOutside && (j < 0 || j >= ax.in) {
				w = 0
			}
			acc += w * interp(a+1, off+clampIdx(j)*stride[a])
			wsum += w
		}
		if ax.norm || p.ExcludeOutside {
			acc /= wsum
		}
		return acc
	}
	for i := 0; i < nOut; i++ {
		rem := i
		for a := r - 1; a >= 0; a-- {
			pos[a] = rem % p.Out[a]
			rem /= p.Out[a]
		}
		y[i] = float32(interp(0, 0))
	}
	return nil
}

// cubicRef is the Keys cubic kernel with coefficient a.
func cubicRef(t, a float64) float64 {
	t = math.Abs(t)
	switch {
	case t <= 1:
		return ((a+2)*t-(a+3))*t*t + 1
	case t < 2:
		return ((a*t-5*a)*t+8*a)*t - 4*a
	}
	return 0
}
