package infer

import (
	"fmt"
	"github.com/tlite/tlite/graph/dtype"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/symshape"
)

// Loss functions an exported training graph may keep (their forward value
// is computable at inference), and Det.

func init() {
	register("", lossRule, "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
	register("", detRule, "Det")
}

// lossRule: the loss is the target's shape with reduction "none", else a
// scalar; SoftmaxCrossEntropyLoss's optional second output, log_prob, has
// the scores' shape.
func lossRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	t, err := c.shapeOf(n, 1)
	if err != nil {
		return err
	}
	if len(x) < 2 || len(t) != len(x)-1 {
		return fmt.Errorf("input %s and target %s: want [N, C, d...] and [N, d...]", symshape.FormatShape(x), symshape.FormatShape(t))
	}
	switch red := n.AttrString("reduction", "mean"); red {
	case "none":
		c.setOut(n, 0, copyShape(t), typeOf(n, 0))
	case "mean", "sum":
		c.setOut(n, 0, []symshape.Expr{}, typeOf(n, 0))
	default:
		return fmt.Errorf("reduction %q is not none, mean or sum", red)
	}
	if n.OpType == "SoftmaxCrossEntropyLoss" && output(n, 1) != nil {
		c.setOut(n, 1, copyShape(x), typeOf(n, 0))
	}
	return nil
}

// detRule: [*, M, M] -> [*].
func detRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(x) < 2 {
		return fmt.Errorf("input of rank %d; want [*, M, M]", len(x))
	}
	c.setOut(n, 0, copyShape(x[:len(x)-2]), typeOf(n, 0))
	return nil
}

func init() {
	register("", windowRule, "HannWindow", "HammingWindow", "BlackmanWindow")
	register("", dynQuantRule, "DynamicQuantizeLinear")
	register("", qlinearMatMulRule, "QLinearMatMul")
	register("", qlinearConvRule, "QLinearConv")
	register("", rnnRule, "RNN", "GRU", "LSTM")
}

// windowRule: a 1-D window of the size input's length, of output_datatype
// (float by default).
func windowRule(c *ctx, n *graph.Node) error {
	t := dtype.Type(n.AttrInt("output_datatype", int64(dtype.Float32)))
	sz, ok := c.elems(n, 0)
	var d symshape.Expr
	if ok && len(sz) == 1 {
		d = sz[0]
	} else {
		d = c.fresh(output(n, 0), 0, n.OpType+" size is only known at run time")
	}
	c.setOut(n, 0, []symshape.Expr{d}, t)
	return nil
}

// dynQuantRule: y has x's shape in uint8, with a float scale and a uint8
// zero point as scalars.
func dynQuantRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	c.setOut(n, 0, copyShape(x), dtype.Uint8)
	c.setOut(n, 1, []symshape.Expr{}, dtype.Float32)
	c.setOut(n, 2, []symshape.Expr{}, dtype.Uint8)
	return nil
}

// qlinearMatMulRule: MatMul's shape rule over inputs 0 and 3, in the
// output zero point's type.
func qlinearMatMulRule(c *ctx, n *graph.Node) error {
	a, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	b, err := c.shapeOf(n, 3)
	if err != nil {
		return err
	}
	if len(a) < 2 || len(b) < 2 {
		return fmt.Errorf("inputs %s and %s: want rank >= 2", symshape.FormatShape(a), symshape.FormatShape(b))
	}
	batch := a[:len(a)-2]
	if len(b) > len(a) {
		batch = b[:len(b)-2]
	}
	out := append(copyShape(batch), a[len(a)-2], b[len(b)-1])
	c.setOut(n, 0, out, typeOf(n, 7))
	return nil
}

// qlinearConvRule: Conv's output shape (input 0, weight input 3), in the
// output zero point's type.
func qlinearConvRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	w, err := c.shapeOf(n, 3)
	if err != nil {
		return err
	}
	out, err := convShape(c, n, x, w)
	if err != nil {
		return err
	}
	c.setOut(n, 0, out, typeOf(n, 7))
	return nil
}

// rnnRule: X is [seq, batch, input] ([batch, seq, input] with layout 1);
// Y is [seq, dirs, batch, hidden] ([batch, seq, dirs, hidden]), Y_h and
// Y_c are [dirs, batch, hidden] ([batch, dirs, hidden]).
func rnnRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(x) != 3 {
		return fmt.Errorf("X %s: want rank 3", symshape.FormatShape(x))
	}
	h := n.AttrInt("hidden_size", 0)
	if h <= 0 {
		return fmt.Errorf("hidden_size %d", h)
	}
	dirs := int64(1)
	if n.AttrString("direction", "forward") == "bidirectional" {
		dirs = 2
	}
	seq, batch := x[0], x[1]
	layout := n.AttrInt("layout", 0)
	if layout != 0 {
		seq, batch = x[1], x[0]
	}
	H, D := symshape.Const(h), symshape.Const(dirs)
	t := typeOf(n, 0)
	if layout == 0 {
		c.setOut(n, 0, []symshape.Expr{seq, D, batch, H}, t)
		c.setOut(n, 1, []symshape.Expr{D, batch, H}, t)
		c.setOut(n, 2, []symshape.Expr{D, batch, H}, t)
	} else {
		c.setOut(n, 0, []symshape.Expr{batch, seq, D, H}, t)
		c.setOut(n, 1, []symshape.Expr{batch, D, H}, t)
		c.setOut(n, 2, []symshape.Expr{batch, D, H}, t)
	}
	return nil
}

func init() {
	register("", dftRule, "DFT")
}

// dftRule: the input's shape with a last axis of 2 (complex), the signal
// axis dft_length long (when given) and halved plus one when onesided.
func dftRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(x) < 3 {
		return fmt.Errorf("input %s: want [batch, signal..., 1 or 2]", symshape.FormatShape(x))
	}
	axis, err := normAxis(n.AttrInt("axis", 1), len(x))
	if err != nil {
		return err
	}
	if axis == 0 || axis == len(x)-1 {
		return fmt.Errorf("axis %d is the batch or the complex axis", axis)
	}
	out := copyShape(x)
	out[len(out)-1] = symshape.Const(2)
	if input(n, 1) != nil {
		l, ok := c.elems(n, 1)
		if !ok || len(l) != 1 {
			out[axis] = c.fresh(output(n, 0), axis, "DFT dft_length is only known at run time")
		} else {
			out[axis] = l[0]
		}
	}
	if n.AttrInt("onesided", 0) != 0 {
		out[axis] = symshape.Add(symshape.FloorDiv(out[axis], symshape.Const(2)), symshape.Const(1))
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	return nil
}

func init() {
	register("", stftRule, "STFT")
	register("", melRule, "MelWeightMatrix")
}

// stftRule: [batch, frames, bins, 2], frames = (length - frame) / step + 1
// and bins = frame / 2 + 1 when onesided (the default); the frame length is
// frame_length's value, else the window's length.
func stftRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(x) != 3 {
		return fmt.Errorf("signal %s: want [batch, length, 1 or 2]", symshape.FormatShape(x))
	}
	step, ok := c.elems(n, 1)
	if !ok || len(step) != 1 {
		return fmt.Errorf("frame_step is not known")
	}
	var frame symshape.Expr
	if l, ok := c.elems(n, 3); ok && len(l) == 1 {
		frame = l[0]
	} else if input(n, 2) != nil {
		w, err := c.shapeOf(n, 2)
		if err != nil {
			return err
		}
		if len(w) != 1 {
			return fmt.Errorf("window %s is not 1-D", symshape.FormatShape(w))
		}
		frame = w[0]
	} else {
		return fmt.Errorf("neither frame_length nor a window gives the frame length")
	}
	frames := symshape.Add(symshape.FloorDiv(symshape.Sub(x[1], frame), step[0]), symshape.Const(1))
	bins := frame
	if n.AttrInt("onesided", 1) != 0 {
		bins = symshape.Add(symshape.FloorDiv(frame, symshape.Const(2)), symshape.Const(1))
	}
	c.setOut(n, 0, []symshape.Expr{x[0], frames, bins, symshape.Const(2)}, typeOf(n, 0))
	return nil
}

// melRule: [dft_length / 2 + 1, num_mel_bins] of output_datatype.
func melRule(c *ctx, n *graph.Node) error {
	bins, ok1 := c.elems(n, 0)
	dft, ok2 := c.elems(n, 1)
	if !ok1 || !ok2 || len(bins) != 1 || len(dft) != 1 {
		return fmt.Errorf("num_mel_bins and dft_length are not known")
	}
	t := dtype.Type(n.AttrInt("output_datatype", int64(dtype.Float32)))
	c.setOut(n, 0, []symshape.Expr{symshape.Add(symshape.FloorDiv(dft[0], symshape.Const(2)), symshape.Const(1)), bins[0]}, t)
	return nil
}
