package infer

import (
	"fmt"
	"math"
	"math/big"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Normalisations, dropout, resizing and the detection ops of the ONNX corpus.

func init() {
	register("", batchNormRule, "BatchNormalization")
	register("", sameAsDataRule, "InstanceNormalization", "GroupNormalization", "RMSNormalization")
	register("", layerNormRule, "LayerNormalization")
	register("", dropoutRule, "Dropout")
	register("", resizeRule, "Resize")
	register("", upsampleRule, "Upsample")
	register("", nmsRule, "NonMaxSuppression")
	register("", tfIdfRule, "TfIdfVectorizer")
	register("", randomRule, "RandomNormal", "RandomUniform")
}

// batchNormRule: Y like X; training outputs (running and saved mean and
// variance) are [C].
func batchNormRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(x) < 2 {
		return fmt.Errorf("input %s must be [N, C, ...]", symshape.FormatShape(x))
	}
	for i := 1; i <= 4; i++ {
		if p := input(n, i); p != nil && len(p.Shape) == 1 {
			if _, err := c.unify(x[1], p.Shape[0], func() string {
				return fmt.Sprintf("channels of %s against input %d %s", symshape.FormatShape(x), i, symshape.FormatShape(p.Shape))
			}); err != nil {
				return err
			}
		}
	}
	t := typeOf(n, 0)
	c.setOut(n, 0, x, t)
	for i := 1; i < len(n.Outputs); i++ {
		c.setOut(n, i, []symshape.Expr{x[1]}, typeOf(n, 1))
	}
	return nil
}

// layerNormRule: Y like X; Mean and InvStdDev keep the leading dims and have
// 1 from axis on.
func layerNormRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	axis, err := normAxis(n.AttrInt("axis", -1), len(x))
	if err != nil {
		return err
	}
	c.setOut(n, 0, x, typeOf(n, 0))
	stat := copyShape(x)
	for i := axis; i < len(stat); i++ {
		stat[i] = symshape.Const(1)
	}
	st := dtype.Type(n.AttrInt("stash_type", int64(dtype.Float32)))
	c.setOut(n, 1, stat, st)
	c.setOut(n, 2, stat, st)
	return nil
}

// dropoutRule: output like the input; the mask is bool of the same shape.
func dropoutRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	c.setOut(n, 0, x, typeOf(n, 0))
	mt := dtype.Bool
	if c.opset() < 10 {
		mt = typeOf(n, 0)
	}
	c.setOut(n, 1, x, mt)
	if e, ok := c.elems(n, 0); ok {
		c.setElems(n, 0, e)
	}
	return nil
}

// scaleDim returns floor(d * scale) exactly: constants directly, symbolic
// dims when scale is a fraction p/q with a small denominator (0.5, 2, 1.5).
func scaleDim(d symshape.Expr, scale float64) (symshape.Expr, bool) {
	if scale <= 0 || math.IsInf(scale, 0) || math.IsNaN(scale) {
		return symshape.Expr{}, false
	}
	if k, ok := d.Const(); ok {
		return symshape.Const(int64(math.Floor(float64(k) * scale))), true
	}
	r := new(big.Rat)
	r.SetFloat64(scale)
	if !r.Denom().IsInt64() || r.Denom().Int64() > 1<<20 || !r.Num().IsInt64() {
		return symshape.Expr{}, false
	}
	p, q := r.Num().Int64(), r.Denom().Int64()
	return symshape.FloorDiv(symshape.Mul(d, symshape.Const(p)), symshape.Const(q)), true
}

// resizeRule: sizes when given, else floor(dim * scale). Opset 10 has
// (X, scales); 11+ (X, roi, scales, sizes); 18 adds axes and
// keep_aspect_ratio_policy.
func resizeRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	out := output(n, 0)
	scalesIdx, sizesIdx := 2, 3
	if c.opset() < 11 {
		scalesIdx, sizesIdx = 1, -1
	}
	axes := make([]int, len(x))
	for i := range axes {
		axes[i] = i
	}
	if a, ok := n.AttrInts("axes"); ok {
		if axes, err = normAxes(a, len(x)); err != nil {
			return err
		}
	}
	res := copyShape(x)
	if sizesIdx > 0 && input(n, sizesIdx) != nil {
		sz, ok := c.elems(n, sizesIdx)
		if !ok {
			for _, a := range axes {
				res[a] = c.fresh(out, a, "Resize sizes are only known at run time")
			}
			c.setOut(n, 0, res, typeOf(n, 0))
			return nil
		}
		if len(sz) != len(axes) {
			return fmt.Errorf("sizes %s has %d entries for %d axes of %s", symshape.FormatShape(sz), len(sz), len(axes), symshape.FormatShape(x))
		}
		if pol := n.AttrString("keep_aspect_ratio_policy", "stretch"); pol != "stretch" {
			return c.resizeKeepAspect(n, x, axes, sz, pol)
		}
		for j, a := range axes {
			res[a] = sz[j]
		}
		c.setOut(n, 0, res, typeOf(n, 0))
		return nil
	}
	if input(n, scalesIdx) == nil {
		return fmt.Errorf("neither scales nor sizes is given")
	}
	sc, ok := c.floats(n, scalesIdx)
	if !ok {
		for _, a := range axes {
			res[a] = c.fresh(out, a, "Resize scales are only known at run time")
		}
		c.setOut(n, 0, res, typeOf(n, 0))
		return nil
	}
	if len(sc) != len(axes) {
		return fmt.Errorf("scales %v has %d entries for %d axes of %s", sc, len(sc), len(axes), symshape.FormatShape(x))
	}
	for j, a := range axes {
		d, ok := scaleDim(x[a], sc[j])
		if !ok {
			d = c.fresh(out, a, fmt.Sprintf("floor(%s * %g) has no exact symbolic form", x[a], sc[j]))
		}
		res[a] = d
	}
	c.setOut(n, 0, res, typeOf(n, 0))
	return nil
}

// resizeKeepAspect applies not_larger/not_smaller: one scale for all axes,
// the smallest (largest) of sizes/dims; constant dims only.
func (c *ctx) resizeKeepAspect(n *graph.Node, x []symshape.Expr, axes []int, sz []symshape.Expr, pol string) error {
	var s float64
	for j, a := range axes {
		d, ok1 := x[a].Const()
		k, ok2 := sz[j].Const()
		if !ok1 || !ok2 || d == 0 {
			return fmt.Errorf("keep_aspect_ratio_policy %q needs constant dims and sizes, got %s and %s", pol, symshape.FormatShape(x), symshape.FormatShape(sz))
		}
		r := float64(k) / float64(d)
		switch {
		case j == 0:
			s = r
		case pol == "not_larger":
			s = math.Min(s, r)
		case pol == "not_smaller":
			s = math.Max(s, r)
		default:
			return fmt.Errorf("unknown keep_aspect_ratio_policy %q", pol)
		}
	}
	res := copyShape(x)
	for _, a := range axes {
		d, _ := x[a].Const()
		res[a] = symshape.Const(int64(math.Round(s * float64(d))))
	}
	c.setOut(n, 0, res, typeOf(n, 0))
	return nil
}

// upsampleRule: floor(dim * scale), scales an attribute before opset 9.
func upsampleRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	var sc []float64
	if c.opset() < 9 {
		f, ok := n.AttrFloats("scales")
		if !ok {
			return fmt.Errorf("attribute scales is missing")
		}
		for _, v := range f {
			sc = append(sc, float64(v))
		}
	} else {
		var ok bool
		if sc, ok = c.floats(n, 1); !ok {
			res := make([]symshape.Expr, len(x))
			for i := range res {
				res[i] = c.fresh(output(n, 0), i, "Upsample scales are only known at run time")
			}
			c.setOut(n, 0, res, typeOf(n, 0))
			return nil
		}
	}
	if len(sc) != len(x) {
		return fmt.Errorf("scales %v has %d entries for input %s", sc, len(sc), symshape.FormatShape(x))
	}
	res := make([]symshape.Expr, len(x))
	for i := range x {
		d, ok := scaleDim(x[i], sc[i])
		if !ok {
			d = c.fresh(output(n, 0), i, fmt.Sprintf("floor(%s * %g) has no exact symbolic form", x[i], sc[i]))
		}
		res[i] = d
	}
	c.setOut(n, 0, res, typeOf(n, 0))
	return nil
}

// nmsRule: [selected, 3], the count data-dependent.
func nmsRule(c *ctx, n *graph.Node) error {
	c.setOut(n, 0, []symshape.Expr{c.fresh(output(n, 0), 0, "NonMaxSuppression keeps a data-dependent number of boxes"), symshape.Const(3)}, dtype.Int64)
	return nil
}

// tfIdfRule: [max(ngram_indexes)+1], with the batch dim for 2-D input.
func tfIdfRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	idx, _ := n.AttrInts("ngram_indexes")
	m := int64(-1)
	for _, v := range idx {
		m = max(m, v)
	}
	d := symshape.Const(m + 1)
	switch len(x) {
	case 1:
		c.setOut(n, 0, []symshape.Expr{d}, dtype.Float32)
	case 2:
		c.setOut(n, 0, []symshape.Expr{x[0], d}, dtype.Float32)
	default:
		return fmt.Errorf("input %s must be 1-D or 2-D", symshape.FormatShape(x))
	}
	return nil
}

// randomRule: the shape attribute, the dtype attribute (float32 default).
func randomRule(c *ctx, n *graph.Node) error {
	s, ok := n.AttrInts("shape")
	if !ok {
		return fmt.Errorf("attribute shape is missing")
	}
	c.setOut(n, 0, consts(s...), dtype.Type(n.AttrInt("dtype", int64(dtype.Float32))))
	return nil
}
