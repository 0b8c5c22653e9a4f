package infer

import (
	"fmt"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape"
)

// tlite.KVWrite(new, slots) -> view, the in-place KV cache write the
// engine's KVCache rewrite makes (engine/lower_kv.go documents it). new
// holds the rows to write, read through the INTS attribute new_perm (the
// axis of new holding batch, heads, seq, head_dim; identity when absent),
// with a batch of 1; slots is an int32 or int64 tensor of seq elements.
// The node owns a cache of capacity (INT) slots of [heads, head_dim] and
// returns a view of its first slots: [1, length, heads, head_dim], length
// being the symbol the STRING attribute length names.

func init() {
	register(tlite.Domain, kvWriteRule, tlite.KVWrite)
}

func kvWriteRule(c *ctx, n *graph.Node) error {
	x, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	if len(x) != 4 {
		return fmt.Errorf("new rows %s: want rank 4 [batch, heads, seq, head_dim] (read through new_perm)", symshape.FormatShape(x))
	}
	perm := []int{0, 1, 2, 3}
	if p, ok := n.AttrInts("new_perm"); ok {
		if len(p) != 4 {
			return fmt.Errorf("new_perm %v: want 4 axes", p)
		}
		seen := [4]bool{}
		for i, a := range p {
			if a < 0 || a > 3 || seen[a] {
				return fmt.Errorf("new_perm %v is not a permutation of 0..3", p)
			}
			seen[a] = true
			perm[i] = int(a)
		}
	}
	capacity := n.AttrInt("capacity", 0)
	if capacity <= 0 {
		return fmt.Errorf("attribute capacity = %d: want the number of cache slots (> 0)", capacity)
	}
	name := n.AttrString("length", "")
	if name == "" {
		return fmt.Errorf("attribute length (the symbol of the attended length) is missing")
	}
	length, err := c.paramExpr(name, symInput)
	if err != nil {
		return fmt.Errorf("attribute length %q: %w", name, err)
	}
	if _, err := c.unify(x[perm[0]], symshape.Const(1), func() string {
		return fmt.Sprintf("new rows %s read through %v have a batch other than 1; the cache holds one sequence", symshape.FormatShape(x), perm)
	}); err != nil {
		return err
	}
	seq := x[perm[2]]
	slots := input(n, 1)
	if slots == nil {
		return fmt.Errorf("input 1 (the slots) is missing")
	}
	if slots.Type != dtype.Int64 && slots.Type != dtype.Int32 {
		return fmt.Errorf("slots %q are %v; want int32 or int64", slots.Name, slots.Type)
	}
	ss, _ := c.shapeOf(n, 1)
	if _, err := c.unify(product(ss), seq, func() string {
		return fmt.Sprintf("slots %q %s against %s new rows", slots.Name, symshape.FormatShape(ss), seq)
	}); err != nil {
		return err
	}
	if k, ok := length.Const(); ok && (k < 0 || k > capacity) {
		return fmt.Errorf("attended length %d outside a cache of %d slots", k, capacity)
	}
	c.setOut(n, 0, []symshape.Expr{symshape.Const(1), length, x[perm[1]], x[perm[3]]}, typeOf(n, 0))
	return nil
}
