package kernels

import (
	_ "embed"
	"fmt"
	"math"
)

//go:embed pool.cl
var poolSrc string

// PoolParams describes ONNX MaxPool / AveragePool over an NCHW input
// [N, C, H, W] (1-D pooling is H = KH = 1). Zero strides and dilations are
// taken as 1.
type PoolParams struct {
	N, C, H, W                           int
	KH, KW                               int
	StrideH, StrideW                     int
	PadTop, PadLeft, PadBottom, PadRight int
	DilationH, DilationW                 int
	// CeilMode rounds the output size up; a window that would start inside
	// the end padding is dropped (PyTorch's rule, which ONNX adopted).
	CeilMode bool
	// CountIncludePad makes AveragePool divide by the window positions
	// inside the padded input rather than inside the input.
	CountIncludePad bool
}

// poolOut is one axis's output length.
func poolOut(in, k, s, d, pb, pe int, ceil bool) int {
	stridedEnd := in + pb + pe - (k-1)*d - 1
	if stridedEnd < 0 {
		return 0
	}
	out := stridedEnd/s + 1
	if ceil && stridedEnd%s != 0 {
		out++
		if (out-1)*s >= in+pb {
			out--
		}
	}
	return out
}

func (p PoolParams) norm() (PoolParams, error) {
	p.StrideH, p.StrideW = oneIfZero(p.StrideH), oneIfZero(p.StrideW)
	p.DilationH, p.DilationW = oneIfZero(p.DilationH), oneIfZero(p.DilationW)
	for _, v := range []int{p.N, p.C, p.H, p.W, p.PadTop, p.PadLeft, p.PadBottom, p.PadRight, p.StrideH, p.StrideW, p.DilationH, p.DilationW} {
		if v < 0 {
			return p, fmt.Errorf("negative size, padding, stride or dilation in %+v", p)
		}
	}
	if p.KH <= 0 || p.KW <= 0 {
		return p, fmt.Errorf("empty window %dx%d", p.KH, p.KW)
	}
	// Larger pads would let a window lie wholly in padding, with no element
	// to take the max or mean of (ONNX and PyTorch forbid it likewise).
	eh, ew := (p.KH-1)*p.DilationH+1, (p.KW-1)*p.DilationW+1
	if 2*p.PadTop > eh || 2*p.PadBottom > eh || 2*p.PadLeft > ew || 2*p.PadRight > ew {
		return p, fmt.Errorf("padding %d,%d,%d,%d (top, left, bottom, right) exceeds half the dilated window %dx%d", p.PadTop, p.PadLeft, p.PadBottom, p.PadRight, eh, ew)
	}
	return p, nil
}

// OutSize is the pooled spatial size.
func (p PoolParams) OutSize() (oh, ow int) {
	return poolOut(p.H, p.KH, oneIfZero(p.StrideH), oneIfZero(p.DilationH), p.PadTop, p.PadBottom, p.CeilMode),
		poolOut(p.W, p.KW, oneIfZero(p.StrideW), oneIfZero(p.DilationW), p.PadLeft, p.PadRight, p.CeilMode)
}

// MaxPool writes the window maxima of x into y ([N, C, OH, OW], OutSize).
func (l *Lib) MaxPool(s Storage, x, y Buf, p PoolParams) error {
	if err := l.pool(s, x, y, p, false); err != nil {
		return fmt.Errorf("kernels: MaxPool %dx%dx%dx%d (window %dx%d): %w", p.N, p.C, p.H, p.W, p.KH, p.KW, err)
	}
	return nil
}

// AvgPool writes the window means of x into y ([N, C, OH, OW], OutSize).
func (l *Lib) AvgPool(s Storage, x, y Buf, p PoolParams) error {
	if err := l.pool(s, x, y, p, true); err != nil {
		return fmt.Errorf("kernels: AvgPool %dx%dx%dx%d (window %dx%d): %w", p.N, p.C, p.H, p.W, p.KH, p.KW, err)
	}
	return nil
}

func (l *Lib) pool(s Storage, x, y Buf, p PoolParams, avg bool) error {
	p, err := p.norm()
	if err != nil {
		return err
	}
	oh, ow := p.OutSize()
	planes := p.N * p.C
	if planes == 0 || oh == 0 || ow == 0 {
		return nil
	}
	if err := checkBufUses([]bufUse{{"input", x, s, planes * p.H * p.W}, {"output", y, s, planes * oh * ow}}); err != nil {
		return err
	}
	name := "pool_max"
	if avg {
		name = "pool_avg"
	}
	k, err := l.kernel("pool", poolSrc, s.define(), name)
	if err != nil {
		return err
	}
	i32 := func(v int) int32 { return int32(v) }
	args := []any{x.Mem, i32(x.Off), y.Mem, i32(y.Off), i32(p.H), i32(p.W), i32(oh), i32(ow),
		i32(p.KH), i32(p.KW), i32(p.StrideH), i32(p.StrideW), i32(p.PadTop), i32(p.PadLeft)}
	if avg {
		cip := int32(0)
		if p.CountIncludePad {
			cip = 1
		}
		args = append(args, i32(p.PadBottom), i32(p.PadRight), i32(p.DilationH), i32(p.DilationW), cip)
	} else {
		args = append(args, i32(p.DilationH), i32(p.DilationW))
	}
	global, local := l.cpuGroups([]int{ow, oh, planes})
	return l.dev.Launch(k, global, local, args...)
}

// GlobalAvgPool writes the mean of each of the planes planes of hw elements
// of x to y (ONNX GlobalAveragePool: planes = N*C, hw = H*W).
func (l *Lib) GlobalAvgPool(s Storage, x, y Buf, planes, hw int) error {
	if err := l.globalPool(s, x, y, planes, hw, "pool_global_avg"); err != nil {
		return fmt.Errorf("kernels: GlobalAvgPool %d planes of %d: %w", planes, hw, err)
	}
	return nil
}

// GlobalMaxPool writes the maximum of each plane of x to y, like
// GlobalAvgPool.
func (l *Lib) GlobalMaxPool(s Storage, x, y Buf, planes, hw int) error {
	if err := l.globalPool(s, x, y, planes, hw, "pool_global_max"); err != nil {
		return fmt.Errorf("kernels: GlobalMaxPool %d planes of %d: %w", planes, hw, err)
	}
	return nil
}

func (l *Lib) globalPool(s Storage, x, y Buf, planes, hw int, name string) error {
	if planes < 0 || hw < 0 {
		return fmt.Errorf("negative size")
	}
	if planes == 0 {
		return nil
	}
	if hw == 0 {
		return fmt.Errorf("empty planes have no mean or maximum")
	}
	if err := checkBufUses([]bufUse{{"input", x, s, planes * hw}, {"output", y, s, planes}}); err != nil {
		return err
	}
	k, err := l.kernel("pool", poolSrc, s.define(), name)
	if err != nil {
		return err
	}
	global, local := l.cpuGroups([]int{planes})
	return l.dev.Launch(k, global, local, x.Mem, int32(x.Off), y.Mem, int32(y.Off), int32(hw), int32(planes))
}

// PoolRef is the pure-Go reference for MaxPool (avg false) and AvgPool on
// host tensors.
func PoolRef(x, y []float32, p PoolParams, avg bool) error {
	p, err := p.norm()
	if err != nil {
		return fmt.Errorf("kernels: PoolRef: %w", err)
	}
	oh, ow := p.OutSize()
	planes := p.N * p.C
	if len(x) < planes*p.H*p.W || len(y) < planes*oh*ow {
		return fmt.Errorf("kernels: PoolRef: a slice is shorter than %+v needs", p)
	}
	for z := 0; z < planes; z++ {
		for i := 0; i < oh; i++ {
			for j := 0; j < ow; j++ {
				sum, m := 0.0, math.Inf(-1)
				cnt := 0
				for kh := 0; kh < p.KH; kh++ {
					ih := i*p.StrideH - p.PadTop + kh*p.DilationH
					for kw := 0; kw < p.KW; kw++ {
						iw := j*p.StrideW - p.PadLeft + kw*p.DilationW
						inside := ih >= 0 && ih < p.H && iw >= 0 && iw < p.W
						if inside || p.CountIncludePad && ih < p.H+p.PadBottom && iw < p.W+p.PadRight {
							cnt++
						}
						if !inside {
							continue
						}
						v := float64(x[(z*p.H+ih)*p.W+iw])
						sum += v
						if v > m || math.IsNaN(v) {
							m = v
						}
					}
				}
				out := m
				if avg {
					out = sum / float64(cnt)
				}
				y[(z*oh+i)*ow+j] = float32(out)
			}
		}
	}
	return nil
}

// GlobalPoolRef is the pure-Go reference for GlobalAvgPool (avg true) and
// GlobalMaxPool.
func GlobalPoolRef(x, y []float32, planes, hw int, avg bool) error {
	if planes < 0 || hw <= 0 && planes > 0 || len(x) < planes*hw || len(y) < planes {
		return fmt.Errorf("kernels: GlobalPoolRef: bad sizes %d planes of %d for slices of %d and %d", planes, hw, len(x), len(y))
	}
	for z := 0; z < planes; z++ {
		sum, m := 0.0, math.Inf(-1)
		for _, v := range x[z*hw : (z+1)*hw] {
			f := float64(v)
			sum += f
			if f > m || math.IsNaN(f) {
				m = f
			}
		}
		if avg {
			m = sum / float64(hw)
		}
		y[z] = float32(m)
	}
	return nil
}
