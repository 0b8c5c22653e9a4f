package infer

import (
	"fmt"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Convolutions and pooling over [N, C, spatial...] tensors.

func init() {
	register("", convRule, "Conv", "ConvInteger")
	register("", convTransposeRule, "ConvTranspose")
	register("", poolRule, "MaxPool", "AveragePool", "LpPool")
	register("", globalPoolRule, "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
	register("", maxUnpoolRule, "MaxUnpool")
	register("", roiAlignRule, "RoiAlign")
	register("", gridSampleRule, "GridSample")
}

// window describes a sliding window over the spatial dims.
type window struct {
	kernel, strides, dilations, pads []int64
	autoPad                          string
	ceil                             bool
}

// readWindow reads the window attributes for r spatial dims; kernel comes
// from the attribute or, for convolutions, the weight's trailing dims.
func readWindow(n *graph.Node, r int, kernel []int64) (window, error) {
	w := window{kernel: attrInts(n, "kernel_shape", kernel)}
	if w.kernel == nil {
		return w, fmt.Errorf("kernel_shape is absent and the kernel size is not known from a constant weight shape")
	}
	if len(w.kernel) != r {
		return w, fmt.Errorf("kernel_shape %v does not have %d spatial dims", w.kernel, r)
	}
	ones := make([]int64, r)
	for i := range ones {
		ones[i] = 1
	}
	w.strides = attrInts(n, "strides", ones)
	w.dilations = attrInts(n, "dilations", ones)
	w.pads = attrInts(n, "pads", make([]int64, 2*r))
	w.autoPad = n.AttrString("auto_pad", "NOTSET")
	w.ceil = n.AttrInt("ceil_mode", 0) != 0
	if len(w.strides) != r || len(w.dilations) != r || len(w.pads) != 2*r {
		return w, fmt.Errorf("strides %v, dilations %v or pads %v do not fit %d spatial dims", w.strides, w.dilations, w.pads, r)
	}
	for i := 0; i < r; i++ {
		if w.strides[i] <= 0 || w.dilations[i] <= 0 || w.kernel[i] <= 0 {
			return w, fmt.Errorf("kernel_shape %v, strides %v and dilations %v must be positive", w.kernel, w.strides, w.dilations)
		}
	}
	return w, nil
}

// outDim is the number of window positions along spatial axis i of size d.
func (w window) outDim(c *ctx, i int, d symshape.Expr) (symshape.Expr, error) {
	s := symshape.Const(w.strides[i])
	ext := (w.kernel[i]-1)*w.dilations[i] + 1
	switch w.autoPad {
	case "SAME_UPPER", "SAME_LOWER":
		return symshape.CeilDiv(d, s), nil
	case "VALID":
		return symshape.CeilDiv(symshape.Sub(d, symshape.Const(ext-1)), s), nil
	case "NOTSET", "":
	default:
		return symshape.Expr{}, fmt.Errorf("auto_pad %q is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", w.autoPad)
	}
	pb := w.pads[i]
	span := symshape.Sub(symshape.Add(d, symshape.Const(pb+w.pads[i+len(w.strides)])), symshape.Const(ext))
	if !w.ceil {
		return symshape.Add(symshape.FloorDiv(span, s), symshape.Const(1)), nil
	}
	out := symshape.Add(symshape.CeilDiv(span, s), symshape.Const(1))
	// A last window that would start inside the end padding is dropped
	// (PyTorch's rule, adopted by ONNX's reference): (out-1)*s >= d + pb.
	// When the algebra cannot decide it for a symbolic d, the window is kept:
	// the derived size may then be one too large for some sizes of d.
	last := symshape.Mul(symshape.Sub(out, symshape.Const(1)), s)
	switch c.cmp(last, symshape.Add(d, symshape.Const(pb))) {
	case symshape.GreaterEq, symshape.Greater, symshape.Equal:
		out = symshape.Sub(out, symshape.Const(1))
	}
	return out, nil
}

// convRule: [N, M, out spatial...], M = W[0].
func convRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	w, err := c.shapeOf(n, 1)
	if err != nil {
		return err
	}
	out, err := convShape(c, n, x, w)
	if err != nil {
		return err
	}
	t := typeOf(n, 0)
	if n.OpType == "ConvInteger" {
		t = dtype.Int32
	}
	c.setOut(n, 0, out, t)
	return nil
}

// convShape is the output shape of a convolution of input x by weight w
// ([M, C/group, k...]): the rule Conv, ConvInteger and QLinearConv share.
func convShape(c *ctx, n *graph.Node, x, w []symshape.Expr) ([]symshape.Expr, error) {
	if len(x) < 3 || len(w) != len(x) {
		return nil, fmt.Errorf("input %s and weight %s must both be [N, C, spatial...] of one rank", symshape.FormatShape(x), symshape.FormatShape(w))
	}
	group := n.AttrInt("group", 1)
	if _, err := c.unify(x[1], symshape.Mul(w[1], symshape.Const(group)), func() string {
		return fmt.Sprintf("input %s channels against weight %s with group %d", symshape.FormatShape(x), symshape.FormatShape(w), group)
	}); err != nil {
		return nil, err
	}
	r := len(x) - 2
	kd, ok := constDims(w[2:])
	if !ok {
		kd = nil
	}
	win, err := readWindow(n, r, kd)
	if err != nil {
		return nil, err
	}
	win.ceil = false
	out := []symshape.Expr{x[0], w[0]}
	for i := 0; i < r; i++ {
		d, err := win.outDim(c, i, x[2+i])
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// convTransposeRule: [N, W[1]*group, out spatial...].
func convTransposeRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	w, err := c.shapeOf(n, 1)
	if err != nil {
		return err
	}
	if len(x) < 3 || len(w) != len(x) {
		return fmt.Errorf("input %s and weight %s must both be [N, C, spatial...] of one rank", symshape.FormatShape(x), symshape.FormatShape(w))
	}
	group := n.AttrInt("group", 1)
	if _, err := c.unify(x[1], w[0], func() string {
		return fmt.Sprintf("input %s channels against weight %s", symshape.FormatShape(x), symshape.FormatShape(w))
	}); err != nil {
		return err
	}
	r := len(x) - 2
	kd, ok := constDims(w[2:])
	if !ok {
		kd = nil
	}
	win, err := readWindow(n, r, kd)
	if err != nil {
		return err
	}
	outPad := attrInts(n, "output_padding", make([]int64, r))
	if len(outPad) != r {
		return fmt.Errorf("output_padding %v does not have %d entries", outPad, r)
	}
	out := []symshape.Expr{x[0], symshape.Mul(w[1], symshape.Const(group))}
	if os, ok := n.AttrInts("output_shape"); ok && len(os) >= r {
		out = append(out, consts(os[len(os)-r:]...)...)
		c.setOut(n, 0, out, typeOf(n, 0))
		return nil
	}
	for i := 0; i < r; i++ {
		s := symshape.Const(win.strides[i])
		switch win.autoPad {
		case "SAME_UPPER", "SAME_LOWER":
			out = append(out, symshape.Mul(x[2+i], s))
			continue
		}
		ext := (win.kernel[i]-1)*win.dilations[i] + 1
		d := symshape.Add(symshape.Mul(s, symshape.Sub(x[2+i], symshape.Const(1))), symshape.Const(outPad[i]+ext-win.pads[i]-win.pads[i+r]))
		if win.autoPad == "VALID" {
			d = symshape.Add(symshape.Mul(s, symshape.Sub(x[2+i], symshape.Const(1))), symshape.Const(outPad[i]+ext))
		}
		out = append(out, d)
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	return nil
}

// poolRule: [N, C, out spatial...]; MaxPool's optional indices share it.
func poolRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(x) < 3 {
		return fmt.Errorf("input %s must be [N, C, spatial...]", symshape.FormatShape(x))
	}
	r := len(x) - 2
	win, err := readWindow(n, r, nil)
	if err != nil {
		return err
	}
	out := copyShape(x[:2])
	for i := 0; i < r; i++ {
		d, err := win.outDim(c, i, x[2+i])
		if err != nil {
			return err
		}
		out = append(out, d)
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	c.setOut(n, 1, out, dtype.Int64)
	return nil
}

// globalPoolRule: [N, C, 1, ...].
func globalPoolRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(x) < 2 {
		return fmt.Errorf("input %s must be [N, C, spatial...]", symshape.FormatShape(x))
	}
	out := copyShape(x[:2])
	for range x[2:] {
		out = append(out, symshape.Const(1))
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	return nil
}

// maxUnpoolRule: output_shape input when given, else the inverse of pooling.
func maxUnpoolRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(x) < 3 {
		return fmt.Errorf("input %s must be [N, C, spatial...]", symshape.FormatShape(x))
	}
	if input(n, 2) != nil {
		s, err := c.shapeVector(n, 2, output(n, 0))
		if err != nil {
			return err
		}
		c.setOut(n, 0, s, typeOf(n, 0))
		return nil
	}
	r := len(x) - 2
	win, err := readWindow(n, r, nil)
	if err != nil {
		return err
	}
	out := copyShape(x[:2])
	for i := 0; i < r; i++ {
		d := symshape.Add(symshape.Mul(symshape.Sub(x[2+i], symshape.Const(1)), symshape.Const(win.strides[i])),
			symshape.Const(win.kernel[i]-win.pads[i]-win.pads[i+r]))
		out = append(out, d)
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	return nil
}

// roiAlignRule: [num_rois, C, output_height, output_width].
func roiAlignRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	rois, err := c.shapeOf(n, 1)
	if err != nil {
		return err
	}
	if len(x) != 4 || len(rois) != 2 {
		return fmt.Errorf("X %s must be 4-D and rois %s 2-D", symshape.FormatShape(x), symshape.FormatShape(rois))
	}
	oh, ow := n.AttrInt("output_height", 1), n.AttrInt("output_width", 1)
	c.setOut(n, 0, []symshape.Expr{rois[0], x[1], symshape.Const(oh), symshape.Const(ow)}, typeOf(n, 0))
	return nil
}

// gridSampleRule: [N, C, grid spatial...].
func gridSampleRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	grid, err := c.shapeOf(n, 1)
	if err != nil {
		return err
	}
	if len(x) < 3 || len(grid) != len(x) {
		return fmt.Errorf("X %s and grid %s must be [N, C, spatial...] and [N, spatial..., r]", symshape.FormatShape(x), symshape.FormatShape(grid))
	}
	out := append([]symshape.Expr{x[0], x[1]}, grid[1:len(grid)-1]...)
	c.setOut(n, 0, out, typeOf(n, 0))
	return nil
}
