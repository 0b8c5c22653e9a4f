package infer

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Contractions: MatMul with numpy batch broadcasting, Gemm, Einsum.

func init() {
	register("", matMulRule, "MatMul")
	register("", matMulIntegerRule, "MatMulInteger")
	register("", gemmRule, "Gemm")
	register("", einsumRule, "Einsum")
}

func matMulRule(c *ctx, n *graph.Node) error {
	return c.matMul(n, typeOf(n, 0))
}

func matMulIntegerRule(c *ctx, n *graph.Node) error {
	return c.matMul(n, dtype.Int32)
}

// matMul follows numpy.matmul: 1-D operands gain and then lose a dim, batch
// dims broadcast, K must agree.
func (c *ctx) matMul(n *graph.Node, t dtype.Type) error {
	a, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	b, err := c.shapeOf(n, 1)
	if err != nil {
		return err
	}
	if len(a) == 0 || len(b) == 0 {
		return fmt.Errorf("inputs %s and %s: MatMul needs rank >= 1", symshape.FormatShape(a), symshape.FormatShape(b))
	}
	origA, origB := a, b
	vecA, vecB := len(a) == 1, len(b) == 1
	if vecA {
		a = []symshape.Expr{symshape.Const(1), a[0]}
	}
	if vecB {
		b = []symshape.Expr{b[0], symshape.Const(1)}
	}
	ka, kb := a[len(a)-1], b[len(b)-2]
	k, err := c.unify(ka, kb, func() string {
		return fmt.Sprintf("inputs %s and %s do not agree on K", symshape.FormatShape(origA), symshape.FormatShape(origB))
	})
	if err != nil {
		return err
	}
	_ = k
	batch, err := c.broadcast(fmt.Sprintf("batch dims of %s and %s", symshape.FormatShape(origA), symshape.FormatShape(origB)), a[:len(a)-2], b[:len(b)-2])
	if err != nil {
		return err
	}
	out := copyShape(batch)
	if !vecA {
		out = append(out, a[len(a)-2])
	}
	if !vecB {
		out = append(out, b[len(b)-1])
	}
	c.setOut(n, 0, out, t)
	return nil
}

// gemmRule: [M, N] from A (transA) and B (transB); C must broadcast to it.
func gemmRule(c *ctx, n *graph.Node) error {
	a, err := c.shapeOf(n, 0)
	if err != nil {
		return err
	}
	b, err := c.shapeOf(n, 1)
	if err != nil {
		return err
	}
	if len(a) != 2 || len(b) != 2 {
		return fmt.Errorf("inputs %s and %s must be 2-D", symshape.FormatShape(a), symshape.FormatShape(b))
	}
	m, ka := a[0], a[1]
	if n.AttrInt("transA", 0) != 0 {
		m, ka = a[1], a[0]
	}
	kb, nn := b[0], b[1]
	if n.AttrInt("transB", 0) != 0 {
		kb, nn = b[1], b[0]
	}
	if _, err := c.unify(ka, kb, func() string {
		return fmt.Sprintf("inputs %s and %s do not agree on K", symshape.FormatShape(a), symshape.FormatShape(b))
	}); err != nil {
		return err
	}
	out := []symshape.Expr{c.resolve(m), c.resolve(nn)}
	if input(n, 2) != nil {
		cs, _ := c.shapeOf(n, 2)
		if _, err := c.broadcast(fmt.Sprintf("C %s against the product %s", symshape.FormatShape(cs), symshape.FormatShape(out)), out, cs); err != nil {
			return err
		}
	}
	c.setOut(n, 0, out, typeOf(n, 0))
	return nil
}

// einsumRule handles explicit ("ij,jk->ik") and implicit ("ij,jk") forms
// with an optional ellipsis, unifying the dims a letter names.
func einsumRule(c *ctx, n *graph.Node) error {
	eq := strings.ReplaceAll(n.AttrString("equation", ""), " ", "")
	if eq == "" {
		return fmt.Errorf("attribute equation is missing")
	}
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	var ins []int
	for i, v := range n.Inputs {
		if v != nil {
			ins = append(ins, i)
		}
	}
	if len(terms) != len(ins) {
		return fmt.Errorf("equation %q has %d operands but the node has %d inputs", eq, len(terms), len(ins))
	}
	dims := map[rune]symshape.Expr{}
	count := map[rune]int{}
	var ell [][]symshape.Expr
	for j, term := range terms {
		s, err := c.shapeOf(n, ins[j])
		if err != nil {
			return err
		}
		if strings.Count(term, ".") != 3*strings.Count(term, "...") || strings.Count(term, "...") > 1 {
			return fmt.Errorf("equation %q: operand %d %q has a malformed ellipsis", eq, j, term)
		}
		letters := []rune(strings.Replace(term, "...", ".", 1))
		nell := len(s) - (len(letters) - 1)
		hasEll := strings.Contains(term, "...")
		if !hasEll {
			nell = 0
			if len(letters) != len(s) {
				return fmt.Errorf("operand %d %q has %d letters but shape %s", j, term, len(letters), symshape.FormatShape(s))
			}
		} else if nell < 0 {
			return fmt.Errorf("operand %d %q needs rank >= %d, has shape %s", j, term, len(letters)-1, symshape.FormatShape(s))
		}
		p := 0
		for _, l := range letters {
			if l == '.' {
				ell = append(ell, s[p:p+nell])
				p += nell
				continue
			}
			d := s[p]
			p++
			count[l]++
			if old, ok := dims[l]; ok {
				// A letter's dims broadcast like numpy's einsum: 1 stretches.
				switch {
				case isOne(d):
				case isOne(old):
					dims[l] = d
				default:
					u, err := c.unify(old, d, func() string { return fmt.Sprintf("equation %q: letter %c", eq, l) })
					if err != nil {
						return err
					}
					dims[l] = u
				}
				continue
			}
			dims[l] = d
		}
	}
	var ellOut []symshape.Expr
	if len(ell) > 0 {
		var err error
		if ellOut, err = c.broadcast(fmt.Sprintf("equation %q ellipsis dims", eq), ell...); err != nil {
			return err
		}
	}
	if !explicit {
		var ls []rune
		for l, k := range count {
			if k == 1 {
				ls = append(ls, l)
			}
		}
		sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
		rhs = string(ls)
		if len(ell) > 0 {
			rhs = "..." + rhs
		}
	}
	var out []symshape.Expr
	for _, l := range strings.Replace(rhs, "...", ".", 1) {
		if l == '.' {
			out = append(out, ellOut...)
			continue
		}
		d, ok := dims[l]
		if !ok {
			return fmt.Errorf("equation %q: output letter %c appears in no operand", eq, l)
		}
		out = append(out, d)
	}
	c.setOut(n, 0, out, typeOf(n, ins[0]))
	return nil
}
