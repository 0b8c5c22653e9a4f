package infer

import (
	"fmt"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape"
)

// tlite.MatMulQ(A, Wq[, bias]) -> Y, the 4-bit weight product `tl quantize`
// writes (graph/quant documents it): A is [..., K], Wq a 1-D uint8 tensor
// holding a packed [K, N] weight, bias [N]; Y is [..., N] of A's type
// (graph/tlite has the schema).

func init() {
	register(tlite.Domain, matMulQRule, tlite.MatMulQ)
}

// packedHeader is the size of the packed weight's header (quant.HeaderSize);
// a Wq shorter than the header plus the codes cannot hold a [K, N] weight.
const packedHeader = 64

func matMulQRule(c *ctx, n *graph.Node) error {
	a, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(a) == 0 {
		return fmt.Errorf("A is a scalar; MatMulQ needs A of rank >= 1 ([..., K])")
	}
	k, nn := n.AttrInt("K", 0), n.AttrInt("N", 0)
	if k <= 0 || nn <= 0 {
		return fmt.Errorf("attributes K = %d and N = %d must be positive", k, nn)
	}
	group := n.AttrInt("group", 0)
	if group < 32 || group%32 != 0 || k%group != 0 {
		return fmt.Errorf("attribute group = %d must be a positive multiple of 32 that divides K = %d", group, k)
	}
	if f := n.AttrString("format", ""); f != "e0m4" && f != "int4" {
		return fmt.Errorf("attribute format = %q, want \"e0m4\" or \"int4\"", f)
	}
	w := input(n, 1)
	if w == nil {
		return fmt.Errorf("input 1 (the packed weight) is missing")
	}
	if w.Type != dtype.Uint8 {
		return fmt.Errorf("packed weight %q is %v, want uint8", w.Name, w.Type)
	}
	if len(w.Shape) != 1 {
		return fmt.Errorf("packed weight %q has shape %s, want one dimension", w.Name, symshape.FormatShape(w.Shape))
	}
	if size, ok := w.Shape[0].Const(); ok && size < packedHeader+k*nn/2 {
		return fmt.Errorf("packed weight %q holds %d bytes, too few for a [%d, %d] 4-bit weight (at least %d)", w.Name, size, k, nn, packedHeader+k*nn/2)
	}
	last := len(a) - 1
	if _, err := c.unify(a[last], symshape.Const(k), func() string {
		return fmt.Sprintf("A %s does not end in K = %d", symshape.FormatShape(a), k)
	}); err != nil {
		return err
	}
	if b := input(n, 2); b != nil {
		bs, _ := c.shapeOf(n, 2)
		if len(bs) != 1 {
			return fmt.Errorf("bias %q has shape %s, want [%d]", b.Name, symshape.FormatShape(bs), nn)
		}
		if _, err := c.unify(bs[0], symshape.Const(nn), func() string {
			return fmt.Sprintf("bias %q has shape %s, want [%d]", b.Name, symshape.FormatShape(bs), nn)
		}); err != nil {
			return err
		}
	}
	out := append(copyShape(a[:last]), symshape.Const(nn))
	c.setOut(n, 0, out, typeOf(n, 0))
	return nil
}
