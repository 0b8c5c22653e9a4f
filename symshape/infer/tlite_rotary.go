package infer

import (
	"fmt"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape"
)

// tlite.Rotary(x, cos, sin[, x2]) -> y[, y2], the rotary position embedding
// engine/fuse writes (graph/tlite has the schema): y is shaped like x and
// y2 like x2. Tables whose known dims cannot broadcast to x cut to
// rotary_dim are refused here; symbolic ones are checked when they run.

func init() {
	register(tlite.Domain, rotaryRule, tlite.Rotary)
}

func rotaryRule(c *ctx, n *graph.Node) error {
	rd := n.AttrInt("rotary_dim", 0)
	if len(n.Inputs) < 3 || len(n.Inputs) > 4 || len(n.Outputs) != len(n.Inputs)-2 {
		return fmt.Errorf("Rotary takes (x, cos, sin) -> y or (x, cos, sin, x2) -> (y, y2); have %d inputs and %d outputs", len(n.Inputs), len(n.Outputs))
	}
	cos, err := c.shapeOf(n, 1)
	if err != nil {
		return err
	}
	sin, err := c.shapeOf(n, 2)
	if err != nil {
		return err
	}
	for i, out := range []int{0, 3}[:len(n.Outputs)] {
		x, err := c.shapeOf(n, out)
		if err != nil {
			return err
		}
		if len(x) < 1 || len(x) > 4 {
			return fmt.Errorf("input %d has rank %d; Rotary takes 1 to 4", out, len(x))
		}
		if d, ok := x[len(x)-1].Const(); rd <= 0 || rd%2 != 0 || ok && rd > d {
			return fmt.Errorf("rotary_dim %d: want an even number from 2 to the last axis of %s", rd, symshape.FormatShape(x))
		}
		rot := append(copyShape(x[:len(x)-1]), symshape.Const(rd))
		for _, tab := range [][]symshape.Expr{cos, sin} {
			if !mayBroadcast(tab, rot) {
				return fmt.Errorf("table %s does not broadcast to %s (input %d cut to rotary_dim)", symshape.FormatShape(tab), symshape.FormatShape(rot), out)
			}
		}
		c.setOut(n, i, copyShape(x), typeOf(n, out))
	}
	return nil
}

// mayBroadcast reports whether tab, aligned on the right, may broadcast to
// s without enlarging it: no longer than s, and no dim known to be neither
// 1 nor s's (known) dim.
func mayBroadcast(tab, s []symshape.Expr) bool {
	if len(tab) == 0 || len(tab) > len(s) {
		return false
	}
	off := len(s) - len(tab)
	for i, d := range tab {
		k, ok := d.Const()
		w, wok := s[off+i].Const()
		if ok && k != 1 && wok && k != w {
			return false
		}
	}
	return true
}
