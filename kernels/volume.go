package kernels

import (
	_ "embed"
	"fmt"
	"math"
)

//go:embed volume.cl
var volumeSrc string

// Conv3DParams describes a 3-D convolution (ONNX Conv on a 5-D input) of an
// NCDHW input [N, C, D, H, W] with a weight [OutC, C/Groups, KD, KH, KW]
// into [N, OutC, OD, OH, OW]. Per-axis arrays are in (D, H, W) order; zero
// strides, dilations and groups are taken as 1. auto_pad is resolved by the
// caller into PadBegin and PadEnd (as for 2-D Conv).
type Conv3DParams struct {
	N, C, D, H, W    int
	OutC             int
	Kernel           [3]int
	Stride, Dilation [3]int
	PadBegin, PadEnd [3]int
	Groups           int
	// Bias, when Bias.Mem is set, is an [OutC] vector in Weight storage.
	Bias Buf
	// Weight is the storage of the weight and bias.
	Weight Storage
}

func (p Conv3DParams) norm() (Conv3DParams, error) {
	for i := 0; i < 3; i++ {
		p.Stride[i], p.Dilation[i] = oneIfZero(p.Stride[i]), oneIfZero(p.Dilation[i])
		if p.Stride[i] < 0 || p.Dilation[i] < 0 || p.PadBegin[i] < 0 || p.PadEnd[i] < 0 {
			return p, fmt.Errorf("negative stride, dilation or padding in %+v", p)
		}
		if p.Kernel[i] <= 0 {
			return p, fmt.Errorf("empty kernel %v", p.Kernel)
		}
	}
	p.Groups = oneIfZero(p.Groups)
	if p.N < 0 || p.C < 0 || p.D < 0 || p.H < 0 || p.W < 0 || p.OutC < 0 || p.Groups < 0 {
		return p, fmt.Errorf("negative size or group count in %+v", p)
	}
	if err := checkGroups(p.C, p.OutC, p.Groups); err != nil {
		return p, err
	}
	if o := p.OutSize(); o[0] < 0 || o[1] < 0 || o[2] < 0 {
		return p, fmt.Errorf("kernel %v (dilation %v) larger than the padded input", p.Kernel, p.Dilation)
	}
	return p, nil
}

// OutSize is the output's spatial size (OD, OH, OW).
func (p Conv3DParams) OutSize() [3]int {
	in := [3]int{p.D, p.H, p.W}
	var o [3]int
	for i := range o {
		end := in[i] + p.PadBegin[i] + p.PadEnd[i] - (p.Kernel[i]-1)*oneIfZero(p.Dilation[i]) - 1
		if end < 0 {
			o[i] = -1
			continue
		}
		o[i] = end/oneIfZero(p.Stride[i]) + 1
	}
	return o
}

// conv3DGEMM says whether the GEMM route pays (Conv2D's rule).
func (p Conv3DParams) conv3DGEMM() bool {
	g := oneIfZero(p.Groups)
	return p.C/g*p.Kernel[0]*p.Kernel[1]*p.Kernel[2] >= 16 && p.OutC/g >= 4
}

// ScratchElems is how many elements (in the activation storage) of scratch
// Conv3D can use to gather receptive fields for a GEMM, N*C*KD*KH*KW*OD*OH*OW;
// 0 when it gathers nothing (depthwise and other thin convolutions). Less
// scratch still works: Conv3D gathers as many images at a time as fit, and
// runs the direct kernel when not even one does.
func (p Conv3DParams) ScratchElems() int {
	p, err := p.norm()
	if err != nil || !p.conv3DGEMM() {
		return 0
	}
	o := p.OutSize()
	return p.N * p.C * p.Kernel[0] * p.Kernel[1] * p.Kernel[2] * o[0] * o[1] * o[2]
}

// Conv3D computes y = conv3d(x, w) + bias as p describes; x and y are stored
// in s, the weight and bias in p.Weight. With scratch (ScratchElems
// elements; Mem nil for none) it gathers receptive fields and multiplies on
// the GEMM kernels; without, a direct kernel runs, correct but slower. An
// empty output launches nothing.
func (l *Lib) Conv3D(s Storage, x, w, y, scratch Buf, p Conv3DParams) error {
	if err := l.conv3D(s, x, w, y, scratch, p); err != nil {
		return fmt.Errorf("kernels: Conv3D %dx%dx%dx%dx%d -> %d (kernel %v): %w", p.N, p.C, p.D, p.H, p.W, p.OutC, p.Kernel, err)
	}
	return nil
}

func (l *Lib) conv3D(s Storage, x, w, y, scratch Buf, p Conv3DParams) error {
	p, err := p.norm()
	if err != nil {
		return err
	}
	o := p.OutSize()
	ny := p.N * p.OutC * o[0] * o[1] * o[2]
	if ny == 0 {
		return nil
	}
	kvol := p.Kernel[0] * p.Kernel[1] * p.Kernel[2]
	ops := []bufUse{{"output", y, s, ny}}
	if p.C > 0 {
		ops = append(ops, bufUse{"input", x, s, p.N * p.C * p.D * p.H * p.W},
			bufUse{"weight", w, p.Weight, p.OutC * p.C / p.Groups * kvol})
	} else {
		x, w = y, y // never read: no input channels
	}
	hasBias := p.Bias.Mem != nil
	if hasBias {
		ops = append(ops, bufUse{"bias", p.Bias, p.Weight, p.OutC})
	}
	if err := checkBufUses(ops); err != nil {
		return err
	}
	opts := s.define() + " " + weightDefine(p.Weight)
	i32 := func(v int) int32 { return int32(v) }
	cg := p.C / p.Groups
	kc, np := cg*kvol, o[0]*o[1]*o[2]
	imgs := 0
	if p.conv3DGEMM() && scratch.Mem != nil && p.C > 0 {
		if scratch.Off < 0 {
			return fmt.Errorf("scratch: negative offset")
		}
		imgs = min(p.N, (scratch.Mem.Size()/s.Size()-scratch.Off)/(p.Groups*kc*np))
	}
	if imgs == 0 {
		k, err := l.kernel("volume", volumeSrc, opts, "conv3d_direct")
		if err != nil {
			return err
		}
		bias, hb := p.Bias, int32(1)
		if !hasBias {
			bias, hb = w, 0 // placeholder, never read
		}
		global, local := l.cpuGroups([]int{o[2], o[1], p.N * p.OutC * o[0]})
		return l.dev.Launch(k, global, local,
			x.Mem, i32(x.Off), w.Mem, i32(w.Off), bias.Mem, i32(bias.Off), hb, y.Mem, i32(y.Off),
			i32(p.C), i32(p.D), i32(p.H), i32(p.W), i32(p.OutC), i32(o[0]), i32(o[1]), i32(o[2]),
			i32(p.Kernel[0]), i32(p.Kernel[1]), i32(p.Kernel[2]), i32(p.Stride[0]), i32(p.Stride[1]), i32(p.Stride[2]),
			i32(p.PadBegin[0]), i32(p.PadBegin[1]), i32(p.PadBegin[2]),
			i32(p.Dilation[0]), i32(p.Dilation[1]), i32(p.Dilation[2]), i32(p.Groups))
	}
	// As Conv2D's im2col route.
	g := convProduct(s, w, y, p.Weight, p.Bias, p.OutC, p.Groups, kc, np)
	gather, err := l.kernel("volume", volumeSrc, opts, "conv3d_im2col")
	if err != nil {
		return err
	}
	return l.im2colRun(g, s, scratch, p.N, p.OutC, p.Groups, kc, np, imgs, gather, func(n0, cp, ck int) []any {
		return []any{x.Mem, i32(x.Off), scratch.Mem, i32(scratch.Off), i32(n0), i32(p.C), i32(p.D), i32(p.H), i32(p.W),
			i32(o[0]), i32(o[1]), i32(o[2]), i32(p.Kernel[0]), i32(p.Kernel[1]), i32(p.Kernel[2]),
			i32(p.Stride[0]), i32(p.Stride[1]), i32(p.Stride[2]), i32(p.PadBegin[0]), i32(p.PadBegin[1]), i32(p.PadBegin[2]),
			i32(p.Dilation[0]), i32(p.Dilation[1]), i32(p.Dilation[2]), i32(p.Groups), i32(cp), i32(ck)}
	})
}

// Conv3DRef is the pure-Go reference for Conv3D on host tensors (bias nil for
// none; p.Bias is ignored), accumulated in float64.
func Conv3DRef(x, w, bias, y []float32, p Conv3DParams) error {
	p, err := p.norm()
	if err != nil {
		return fmt.Errorf("kernels: Conv3DRef: %w", err)
	}
	o := p.OutSize()
	in := [3]int{p.D, p.H, p.W}
	cg, ocg := p.C/p.Groups, p.OutC/p.Groups
	kvol := p.Kernel[0] * p.Kernel[1] * p.Kernel[2]
	if len(x) < p.N*p.C*in[0]*in[1]*in[2] || len(w) < p.OutC*cg*kvol || len(y) < p.N*p.OutC*o[0]*o[1]*o[2] ||
		bias != nil && len(bias) < p.OutC {
		return fmt.Errorf("kernels: Conv3DRef: a slice is shorter than %+v needs", p)
	}
	eachOutput(p.N*p.OutC, o, func(i, z int, out [3]int) {
		n, oc := z/p.OutC, z%p.OutC
		g := oc / ocg
		var acc float64
		for ic := 0; ic < cg; ic++ {
			for t := 0; t < kvol; t++ {
				pos, inside := windowPos(t, p.Kernel, out, p.Stride, p.PadBegin, p.Dilation, in)
				if !inside {
					continue
				}
				xv := x[(((n*p.C+g*cg+ic)*in[0]+pos[0])*in[1]+pos[1])*in[2]+pos[2]]
				acc += float64(xv) * float64(w[(oc*cg+ic)*kvol+t])
			}
		}
		if bias != nil {
			acc += float64(bias[oc])
		}
		y[i] = float32(acc)
	})
	return nil
}

// eachOutput calls f for each output position out of planes planes of
// spatial size o, in row-major order, with its flat index i and plane z.
func eachOutput(planes int, o [3]int, f func(i, z int, out [3]int)) {
	i := 0
	for z := 0; z < planes; z++ {
		for od := 0; od < o[0]; od++ {
			for oh := 0; oh < o[1]; oh++ {
				for ow := 0; ow < o[2]; ow++ {
					f(i, z, [3]int{od, oh, ow})
					i++
				}
			}
		}
	}
}

// windowPos is where tap t of kernel k (taps row-major) in the window at
// output position out reads: out*stride - padBegin + tap*dilation on each
// axis, and whether that lies inside an input of size in. A transposed
// convolution's scatter is the same map from input to output positions.
func windowPos(t int, k, out, stride, padBegin, dil, in [3]int) (pos [3]int, inside bool) {
	tap := [3]int{t / (k[1] * k[2]), t / k[2] % k[1], t % k[2]}
	inside = true
	for a := range pos {
		pos[a] = out[a]*stride[a] - padBegin[a] + tap[a]*dil[a]
		inside = inside && pos[a] >= 0 && pos[a] < in[a]
	}
	return pos, inside
}

// Pool3DParams describes ONNX MaxPool / AveragePool over an NCDHW input
// [N, C, D, H, W]. Per-axis arrays are in (D, H, W) order; zero strides and
// dilations are taken as 1. CeilMode and CountIncludePad follow PoolParams.
type Pool3DParams struct {
	N, C, D, H, W    int
	Kernel           [3]int
	Stride, Dilation [3]int
	PadBegin, PadEnd [3]int
	CeilMode         bool
	CountIncludePad  bool
}

func (p Pool3DParams) norm() (Pool3DParams, error) {
	if p.N < 0 || p.C < 0 || p.D < 0 || p.H < 0 || p.W < 0 {
		return p, fmt.Errorf("negative size in %+v", p)
	}
	for i := 0; i < 3; i++ {
		p.Stride[i], p.Dilation[i] = oneIfZero(p.Stride[i]), oneIfZero(p.Dilation[i])
		if p.Stride[i] < 0 || p.Dilation[i] < 0 || p.PadBegin[i] < 0 || p.PadEnd[i] < 0 {
			return p, fmt.Errorf("negative stride, dilation or padding in %+v", p)
		}
		if p.Kernel[i] <= 0 {
			return p, fmt.Errorf("empty window %v", p.Kernel)
		}
		// As for 2-D pools: a window wholly in padding has nothing to pool.
		if e := (p.Kernel[i]-1)*p.Dilation[i] + 1; 2*p.PadBegin[i] > e || 2*p.PadEnd[i] > e {
			return p, fmt.Errorf("padding %v..%v exceeds half the dilated window on axis %d", p.PadBegin, p.PadEnd, i)
		}
	}
	return p, nil
}

// OutSize is the pooled spatial size (OD, OH, OW).
func (p Pool3DParams) OutSize() [3]int {
	in := [3]int{p.D, p.H, p.W}
	var o [3]int
	for i := range o {
		o[i] = poolOut(in[i], p.Kernel[i], oneIfZero(p.Stride[i]), oneIfZero(p.Dilation[i]), p.PadBegin[i], p.PadEnd[i], p.CeilMode)
	}
	return o
}

// MaxPool3D writes the window maxima of x into y ([N, C, OD, OH, OW]).
func (l *Lib) MaxPool3D(s Storage, x, y Buf, p Pool3DParams) error {
	if err := l.pool3D(s, x, y, p, false); err != nil {
		return fmt.Errorf("kernels: MaxPool3D %dx%dx%dx%dx%d (window %v): %w", p.N, p.C, p.D, p.H, p.W, p.Kernel, err)
	}
	return nil
}

// AvgPool3D writes the window means of x into y ([N, C, OD, OH, OW]).
func (l *Lib) AvgPool3D(s Storage, x, y Buf, p Pool3DParams) error {
	if err := l.pool3D(s, x, y, p, true); err != nil {
		return fmt.Errorf("kernels: AvgPool3D %dx%dx%dx%dx%d (window %v): %w", p.N, p.C, p.D, p.H, p.W, p.Kernel, err)
	}
	return nil
}

func (l *Lib) pool3D(s Storage, x, y Buf, p Pool3DParams, avg bool) error {
	p, err := p.norm()
	if err != nil {
		return err
	}
	o := p.OutSize()
	planes := p.N * p.C
	if planes*o[0]*o[1]*o[2] == 0 {
		return nil
	}
	if err := checkBufUses([]bufUse{{"input", x, s, planes * p.D * p.H * p.W}, {"output", y, s, planes * o[0] * o[1] * o[2]}}); err != nil {
		return err
	}
	k, err := l.kernel("volume", volumeSrc, s.define(), "pool3d")
	if err != nil {
		return err
	}
	i32 := func(v int) int32 { return int32(v) }
	global, local := l.cpuGroups([]int{o[2], o[1], planes * o[0]})
	return l.dev.Launch(k, global, local, x.Mem, i32(x.Off), y.Mem, i32(y.Off),
		i32(p.D), i32(p.H), i32(p.W), i32(o[0]), i32(o[1]), i32(o[2]),
		i32(p.Kernel[0]), i32(p.Kernel[1]), i32(p.Kernel[2]), i32(p.Stride[0]), i32(p.Stride[1]), i32(p.Stride[2]),
		i32(p.PadBegin[0]), i32(p.PadBegin[1]), i32(p.PadBegin[2]), i32(p.PadEnd[0]), i32(p.PadEnd[1]), i32(p.PadEnd[2]),
		i32(p.Dilation[0]), i32(p.Dilation[1]), i32(p.Dilation[2]), b2i(avg), b2i(p.CountIncludePad))
}

// MaxPoolWithIndices writes MaxPool's values into y and its second output,
// Indices, into idx as int64: each maximum's flat position in the whole
// input, row-major, or column-major within each (n, c) plane with colMajor
// (ONNX storage_order 1). A 2-D pool is D = 1 with a depth-1 window.
func (l *Lib) MaxPoolWithIndices(s Storage, x, y, idx Buf, colMajor bool, p Pool3DParams) error {
	if err := l.maxPoolIdx(s, x, y, idx, colMajor, p); err != nil {
		return fmt.Errorf("kernels: MaxPoolWithIndices %dx%dx%dx%dx%d (window %v): %w", p.N, p.C, p.D, p.H, p.W, p.Kernel, err)
	}
	return nil
}

func (l *Lib) maxPoolIdx(s Storage, x, y, idx Buf, colMajor bool, p Pool3DParams) error {
	p, err := p.norm()
	if err != nil {
		return err
	}
	o := p.OutSize()
	planes := p.N * p.C
	ny := planes * o[0] * o[1] * o[2]
	if ny == 0 {
		return nil
	}
	if err := checkBufUses([]bufUse{{"input", x, s, planes * p.D * p.H * p.W}, {"output", y, s, ny}}); err != nil {
		return err
	}
	if idx.Mem == nil || idx.Off < 0 || idx.Off+ny > idx.Mem.Size()/8 || idx.Off+ny > math.MaxInt32 {
		return fmt.Errorf("indices: %d int64 elements from offset %d do not fit the buffer", ny, idx.Off)
	}
	k, err := l.kernel("volume", volumeSrc, s.define(), "pool3d_argmax")
	if err != nil {
		return err
	}
	i32 := func(v int) int32 { return int32(v) }
	global, local := l.cpuGroups([]int{o[2], o[1], planes * o[0]})
	return l.dev.Launch(k, global, local, x.Mem, i32(x.Off), y.Mem, i32(y.Off), idx.Mem, i32(idx.Off),
		i32(p.D), i32(p.H), i32(p.W), i32(o[0]), i32(o[1]), i32(o[2]),
		i32(p.Kernel[0]), i32(p.Kernel[1]), i32(p.Kernel[2]), i32(p.Stride[0]), i32(p.Stride[1]), i32(p.Stride[2]),
		i32(p.PadBegin[0]), i32(p.PadBegin[1]), i32(p.PadBegin[2]),
		i32(p.Dilation[0]), i32(p.Dilation[1]), i32(p.Dilation[2]), b2i(colMajor))
}

// MaxPoolIndicesRef is the pure-Go reference for MaxPoolWithIndices' values
// (y) and indices (idx).
func MaxPoolIndicesRef(x, y []float32, idx []int64, colMajor bool, p Pool3DParams) error {
	p, err := p.norm()
	if err != nil {
		return fmt.Errorf("kernels: MaxPoolIndicesRef: %w", err)
	}
	o := p.OutSize()
	in := [3]int{p.D, p.H, p.W}
	planes := p.N * p.C
	vol := in[0] * in[1] * in[2]
	if ny := planes * o[0] * o[1] * o[2]; len(x) < planes*vol || len(y) < ny || len(idx) < ny {
		return fmt.Errorf("kernels: MaxPoolIndicesRef: a slice is shorter than %+v needs", p)
	}
	kvol := p.Kernel[0] * p.Kernel[1] * p.Kernel[2]
	eachOutput(planes, o, func(i, z int, out [3]int) {
		m, at := math.Inf(-1), -1
		for t := 0; t < kvol; t++ {
			pos, inside := windowPos(t, p.Kernel, out, p.Stride, p.PadBegin, p.Dilation, in)
			if !inside {
				continue
			}
			v := float64(x[z*vol+(pos[0]*in[1]+pos[1])*in[2]+pos[2]])
			if v > m || math.IsNaN(v) || at < 0 {
				m = v
				at = (pos[0]*in[1]+pos[1])*in[2] + pos[2]
				if colMajor {
					at = (pos[2]*in[1]+pos[1])*in[0] + pos[0]
				}
			}
		}
		y[i], idx[i] = float32(m), int64(z*vol+at)
	})
	return nil
}

// Pool3DRef is the pure-Go reference for MaxPool3D (avg false) and AvgPool3D
// on host tensors.
func Pool3DRef(x, y []float32, p Pool3DParams, avg bool) error {
	p, err := p.norm()
	if err != nil {
		return fmt.Errorf("kernels: Pool3DRef: %w", err)
	}
	o := p.OutSize()
	in := [3]int{p.D, p.H, p.W}
	planes := p.N * p.C
	if len(x) < planes*in[0]*in[1]*in[2] || len(y) < planes*o[0]*o[1]*o[2] {
		return fmt.Errorf("kernels: Pool3DRef: a slice is shorter than %+v needs", p)
	}
	kvol := p.Kernel[0] * p.Kernel[1] * p.Kernel[2]
	eachOutput(planes, o, func(i, z int, out [3]int) {
		sum, m, cnt := 0.0, math.Inf(-1), 0
		for t := 0; t < kvol; t++ {
			pos, inside := windowPos(t, p.Kernel, out, p.Stride, p.PadBegin, p.Dilation, in)
			padded := true
			for a := range pos {
				padded = padded && pos[a] < in[a]+p.PadEnd[a]
			}
			if inside || p.CountIncludePad && padded {
				cnt++
			}
			if !inside {
				continue
			}
			v := float64(x[((z*in[0]+pos[0])*in[1]+pos[1])*in[2]+pos[2]])
			sum += v
			if v > m || math.IsNaN(v) {
				m = v
			}
		}
		if avg {
			m = sum / float64(cnt)
		}
		y[i] = float32(m)
	})
	return nil
}
