package kernels

import "fmt"

// ConvTranspose3DParams describes a 3-D transposed convolution (ONNX
// ConvTranspose on a 5-D input) of [N, C, D, H, W] with a weight
// [C, OutC/Groups, KD, KH, KW] into [N, OutC, OD, OH, OW]. Per-axis arrays
// are in (D, H, W) order, pads resolved by ConvTransposeAxis (they may be
// negative); zero strides, dilations and groups are taken as 1.
type ConvTranspose3DParams struct {
	N, C, D, H, W    int
	OutC             int
	Kernel           [3]int
	Stride, Dilation [3]int
	PadBegin, PadEnd [3]int
	// OutPad is output_padding: extra positions at the end of each axis.
	OutPad [3]int
	Groups int
	// Bias, when Bias.Mem is set, is an [OutC] vector in Weight storage.
	Bias Buf
	// Weight is the storage of the weight and bias.
	Weight Storage
}

func (p ConvTranspose3DParams) norm() (ConvTranspose3DParams, error) {
	p.Groups = oneIfZero(p.Groups)
	for i := 0; i < 3; i++ {
		p.Stride[i], p.Dilation[i] = oneIfZero(p.Stride[i]), oneIfZero(p.Dilation[i])
		if p.Stride[i] < 0 || p.Dilation[i] < 0 || p.OutPad[i] < 0 {
			return p, fmt.Errorf("negative stride, dilation or output padding in %+v", p)
		}
		if p.Kernel[i] <= 0 {
			return p, fmt.Errorf("empty kernel %v", p.Kernel)
		}
	}
	if p.N < 0 || p.C < 0 || p.D < 0 || p.H < 0 || p.W < 0 || p.OutC < 0 || p.Groups < 0 {
		return p, fmt.Errorf("negative size or group count in %+v", p)
	}
	if err := checkGroups(p.C, p.OutC, p.Groups); err != nil {
		return p, err
	}
	if o := p.OutSize(); o[0] < 0 || o[1] < 0 || o[2] < 0 {
		return p, fmt.Errorf("pads %v..%v leave a negative output %v", p.PadBegin, p.PadEnd, o)
	}
	return p, nil
}

// OutSize is the output's spatial size (OD, OH, OW).
func (p ConvTranspose3DParams) OutSize() [3]int {
	in := [3]int{p.D, p.H, p.W}
	var o [3]int
	for i := range o {
		o[i] = oneIfZero(p.Stride[i])*(in[i]-1) + p.OutPad[i] + (p.Kernel[i]-1)*oneIfZero(p.Dilation[i]) + 1 - p.PadBegin[i] - p.PadEnd[i]
	}
	return o
}

func (p ConvTranspose3DParams) useGEMM() bool {
	g := oneIfZero(p.Groups)
	return p.C/g >= 8 && p.OutC/g*p.Kernel[0]*p.Kernel[1]*p.Kernel[2] >= 4
}

// ScratchElems is how many float32 elements (4 bytes each, whatever the
// activation storage) of scratch ConvTranspose3D can use for its GEMM route, N*OutC*KD*KH*KW*D*H*W; 0 when
// it gathers directly. Less scratch works, as for ConvTranspose2D.
func (p ConvTranspose3DParams) ScratchElems() int {
	p, err := p.norm()
	if err != nil || !p.useGEMM() {
		return 0
	}
	return p.N * p.OutC * p.Kernel[0] * p.Kernel[1] * p.Kernel[2] * p.D * p.H * p.W
}

// ConvTranspose3D is ConvTranspose2D with a depth axis: y =
// conv_transpose3d(x, w) + bias, through the GEMM route when scratch
// (ScratchElems float32 elements) is given, else a direct kernel.
func (l *Lib) ConvTranspose3D(s Storage, x, w, y, scratch Buf, p ConvTranspose3DParams) error {
	if err := l.convTranspose3D(s, x, w, y, scratch, p); err != nil {
		return fmt.Errorf("kernels: ConvTranspose3D %dx%dx%dx%dx%d -> %d (kernel %v): %w", p.N, p.C, p.D, p.H, p.W, p.OutC, p.Kernel, err)
	}
	return nil
}

func (l *Lib) convTranspose3D(s Storage, x, w, y, scratch Buf, p ConvTranspose3DParams) error {
	p, err := p.norm()
	if err != nil {
		return err
	}
	o := p.OutSize()
	i32 := func(v int) int32 { return int32(v) }
	return l.convTransposeRun(convtJob{
		s: s, x: x, w: w, y: y, scratch: scratch, weight: p.Weight, bias: p.Bias,
		n: p.N, c: p.C, outC: p.OutC, groups: p.Groups,
		kvol: p.Kernel[0] * p.Kernel[1] * p.Kernel[2], inVol: p.D * p.H * p.W, outVol: o[0] * o[1] * o[2],
		grid: [3]int{o[2], o[1], p.OutC * o[0]}, gemm: p.useGEMM(),
		direct: "convt3d_direct", col2im: "convt3d_col2im",
		geo: []any{i32(p.D), i32(p.H), i32(p.W), i32(p.OutC), i32(o[0]), i32(o[1]), i32(o[2]),
			i32(p.Kernel[0]), i32(p.Kernel[1]), i32(p.Kernel[2]), i32(p.Stride[0]), i32(p.Stride[1]), i32(p.Stride[2]),
			i32(p.PadBegin[0]), i32(p.PadBegin[1]), i32(p.PadBegin[2]),
			i32(p.Dilation[0]), i32(p.Dilation[1]), i32(p.Dilation[2]), i32(p.Groups)},
	})
}

// ConvTranspose3DRef is the pure-Go reference for ConvTranspose3D on host
// tensors (bias nil for none; p.Bias is ignored): a scatter, accumulated in
// float64.
func ConvTranspose3DRef(x, w, bias, y []float32, p ConvTranspose3DParams) error {
	p, err := p.norm()
	if err != nil {
		return fmt.Errorf("kernels: ConvTranspose3DRef: %w", err)
	}
	o := p.OutSize()
	in := [3]int{p.D, p.H, p.W}
	cg, ocg := p.C/p.Groups, p.OutC/p.Groups
	kvol := p.Kernel[0] * p.Kernel[1] * p.Kernel[2]
	vin, vout := in[0]*in[1]*in[2], o[0]*o[1]*o[2]
	if len(x) < p.N*p.C*vin || len(w) < p.C*ocg*kvol || len(y) < p.N*p.OutC*vout || bias != nil && len(bias) < p.OutC {
		return fmt.Errorf("kernels: ConvTranspose3DRef: a slice is shorter than %+v needs", p)
	}
	acc := make([]float64, p.N*p.OutC*vout)
	for n := 0; n < p.N; n++ {
		for c := 0; c < p.C; c++ {
			g := c / cg
			for v := 0; v < vin; v++ {
				pos := [3]int{v / (in[1] * in[2]), v / in[2] % in[1], v % in[2]}
				xv := float64(x[(n*p.C+c)*vin+v])
				for j := 0; j < ocg; j++ {
					oc := g*ocg + j
					for t := 0; t < kvol; t++ {
						q, ok := windowPos(t, p.Kernel, pos, p.Stride, p.PadBegin, p.Dilation, o)
						if ok {
							acc[(n*p.OutC+oc)*vout+(q[0]*o[1]+q[1])*o[2]+q[2]] += xv * float64(w[(c*ocg+j)*kvol+t])
						}
					}
				}
			}
		}
	}
	for i := range acc {
		if bias != nil {
			acc[i] += float64(bias[(i/vout)%p.OutC])
		}
		y[i] = float32(acc[i])
	}
	return nil
}
