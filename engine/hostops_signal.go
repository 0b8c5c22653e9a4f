package engine

import (
	"fmt"
	"math"

	"github.com/tlite/tlite/graph/dtype"
)

// ONNX's signal operators on the CPU, by their definitions in float64:
// DFT, STFT, MelWeightMatrix and the cosine windows (registered in
// hostops_nn.go and hostops_quant.go).

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

// hostWindow computes the generalized cosine windows of ONNX's signal ops:
// a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N the size (periodic) or
// the size less one (symmetric).
func hostWindow(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 1); err != nil {
		return nil, err
	}
	sz, err := scalar(ins[0])
	if err != nil {
		return nil, err
	}
	size := int(sz)
	if size < 0 {
		return nil, fmt.Errorf("size %d", size)
	}
	a := map[string][3]float64{"HannWindow": {0.5, 0.5, 0}, "HammingWindow": {25.0 / 46, 21.0 / 46, 0},
		"BlackmanWindow": {0.42, 0.5, 0.08}}[hc.n.OpType]
	dt := dtype.Type(hc.n.AttrInt("output_datatype", int64(dtype.Float32)))
	if hostSize(dt) == 0 {
		return nil, hc.unsupported("output_datatype %v", dt)
	}
	den := float64(size)
	if hc.n.AttrInt("periodic", 1) == 0 {
		den = float64(size - 1)
	}
	y := newHostTensor(dt, []int{size})
	for i := 0; i < size; i++ {
		t := 2 * math.Pi * float64(i) / den
		putFloat(dt, y.data, i, a[0]-a[1]*math.Cos(t)+a[2]*math.Cos(2*t))
	}
	return []*hostTensor{y}, nil
}

// hostSTFT is the short-time Fourier transform of [batch, length, 1 or 2]
// signals: frames frame_step apart, each multiplied by the window (when
// given) and transformed by the definition, one-sided by default.
func hostSTFT(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 2); err != nil {
		return nil, err
	}
	x := ins[0]
	if len(x.shape) != 3 || (x.shape[2] != 1 && x.shape[2] != 2) {
		return nil, fmt.Errorf("signal %v: want [batch, length, 1 or 2]", x.shape)
	}
	sv, err := scalar(ins[1])
	if err != nil {
		return nil, fmt.Errorf("frame_step: %w", err)
	}
	step := int(sv)
	var window []float64
	if len(ins) > 2 && ins[2] != nil {
		if window, err = ins[2].floats(); err != nil {
			return nil, err
		}
	}
	frame := len(window)
	if len(ins) > 3 && ins[3] != nil {
		l, err := scalar(ins[3])
		if err != nil {
			return nil, fmt.Errorf("frame_length: %w", err)
		}
		frame = int(l)
	}
	if step < 1 || frame < 1 || frame > x.shape[1] || window != nil && len(window) != frame {
		return nil, fmt.Errorf("frame_step %d, frame_length %d, window of %d for a signal of %d", step, frame, len(window), x.shape[1])
	}
	v, err := x.floats()
	if err != nil {
		return nil, err
	}
	batch, length, cplx := x.shape[0], x.shape[1], x.shape[2]
	frames := (length-frame)/step + 1
	bins := frame
	if hc.n.AttrInt("onesided", 1) != 0 {
		bins = frame/2 + 1
	}
	y := newHostTensor(x.dt, []int{batch, frames, bins, 2})
	for b := 0; b < batch; b++ {
		for f := 0; f < frames; f++ {
			for k := 0; k < bins; k++ {
				var re, im float64
				for j := 0; j < frame; j++ {
					base := (b*length + f*step + j) * cplx
					w := 1.0
					if window != nil {
						w = window[j]
					}
					a, bb := v[base]*w, 0.0
					if cplx == 2 {
						bb = v[base+1] * w
					}
					ang := -2 * math.Pi * float64(j*k%frame) / float64(frame)
					c, s := math.Cos(ang), math.Sin(ang)
					re += a*c - bb*s
					im += a*s + bb*c
				}
				dst := ((b*frames+f)*bins + k) * 2
				putFloat(x.dt, y.data, dst, re)
				putFloat(x.dt, y.data, dst+1, im)
			}
		}
	}
	return []*hostTensor{y}, nil
}

// hostMel builds the triangular mel filter bank of ONNX 1.12's
// MelWeightMatrix: num_mel_bins+2 points evenly spaced in mel between the
// edges (the step dividing by the point count, as onnx 1.12 defines it),
// mapped to DFT bins, each filter rising to 1 at its centre and falling to
// 0 at the next point.
func hostMel(hc *hostCtx, ins []*hostTensor) ([]*hostTensor, error) {
	if err := needIns(ins, 5); err != nil {
		return nil, err
	}
	var v [5]float64
	for i := range v {
		x, err := scalar(ins[i])
		if err != nil {
			return nil, fmt.Errorf("input %d: %w", i, err)
		}
		v[i] = x
	}
	nMel, dft, rate := int(v[0]), int(v[1]), int(v[2])
	if nMel < 1 || dft < 1 || rate < 1 {
		return nil, fmt.Errorf("num_mel_bins %d, dft_length %d, sample_rate %d", nMel, dft, rate)
	}
	nSpec := dft/2 + 1
	mel := func(hz float64) float64 { return 2595 * math.Log10(1+hz/700) }
	lo, hi := mel(float64(float32(v[3]))), mel(float64(float32(v[4])))
	step := (hi - lo) / float64(nMel+2)
	pts := make([]int, nMel+2)
	for i := range pts {
		hz := 700 * (math.Pow(10, (float64(i)*step+lo)/2595) - 1)
		pts[i] = int(math.Floor(float64(dft+1) * hz / float64(rate)))
	}
	dt := dtype.Type(hc.n.AttrInt("output_datatype", int64(dtype.Float32)))
	if hostSize(dt) == 0 {
		return nil, hc.unsupported("output_datatype %v", dt)
	}
	out := make([]float64, nSpec*nMel)
	set := func(j, i int, w float64) error {
		if j < 0 || j >= nSpec {
			return fmt.Errorf("mel point %d outside %d spectrogram bins", j, nSpec)
		}
		out[j*nMel+i] = w
		return nil
	}
	for i := 0; i < nMel; i++ {
		l, c, h := pts[i], pts[i+1], pts[i+2]
		if c == l {
			if err := set(c, i, 1); err != nil {
				return nil, err
			}
		} else {
			for j := l; j <= c; j++ {
				if err := set(j, i, float64(j-l)/float64(c-l)); err != nil {
					return nil, err
				}
			}
		}
		for j := c; j < h; j++ {
			if err := set(j, i, float64(h-j)/float64(h-c)); err != nil {
				return nil, err
			}
		}
	}
	y := newHostTensor(dt, []int{nSpec, nMel})
	for i, w := range out {
		putFloat(dt, y.data, i, w)
	}
	return []*hostTensor{y}, nil
}
