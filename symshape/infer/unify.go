package infer

import (
	"fmt"

	"github.com/tlite/tlite/symshape"
)

// unify makes a and b equal: it returns the common expression when they are
// provably equal, eliminates a solvable symbol when they are not (see the
// package comment for which), and records an Assumption when nothing can be
// solved. Two different constants are an error naming what had to agree.
func (c *ctx) unify(a, b symshape.Expr, what func() string) (symshape.Expr, error) {
	a, b = c.resolve(a), c.resolve(b)
	if a.Equal(b) {
		return a, nil
	}
	ca, okA := a.Const()
	cb, okB := b.Const()
	if okA && okB {
		return symshape.Expr{}, fmt.Errorf("%s: %d vs %d", what(), ca, cb)
	}
	if c.cmp(a, b) == symshape.Equal {
		return simpler(a, b), nil
	}
	if s, e, ok := c.solve(a, b); ok {
		c.eliminate(s, e)
		return c.resolve(a), nil
	}
	// A proof that they differ is a real mismatch, not something to assume.
	switch c.cmp(a, b) {
	case symshape.Less, symshape.Greater:
		return symshape.Expr{}, fmt.Errorf("%s: %s vs %s can never be equal", what(), a, b)
	}
	if neverEqual(a, b) {
		return symshape.Expr{}, fmt.Errorf("%s: %s == %s has no solution in integers", what(), a, b)
	}
	kept := simpler(a, b)
	w := what()
	limited := c.clampLimits(a, b, w)
	c.res.Assumptions = append(c.res.Assumptions, Assumption{A: a, B: b, Kept: kept, Node: c.nodeName(), What: w, Limited: limited})
	return kept, nil
}

// simpler picks the expression with the shorter printed form, so an
// assumption keeps "seq" over "min(seq, 2048)".
func simpler(a, b symshape.Expr) symshape.Expr {
	if len(b.String()) < len(a.String()) {
		return b
	}
	return a
}

// solve finds a symbol s with a - b = ±s + rest, rest free of s, and returns
// s with its solution; among several candidates it picks the one the
// elimination rule prefers.
func (c *ctx) solve(a, b symshape.Expr) (string, symshape.Expr, bool) {
	d := symshape.Sub(a, b)
	if !d.IsValid() {
		return "", symshape.Expr{}, false
	}
	var best string
	var bestExpr symshape.Expr
	for _, s := range d.Symbols() {
		rest := d.Substitute(map[string]symshape.Expr{s: symshape.Const(0)})
		if !rest.IsValid() {
			continue
		}
		lin := symshape.Sub(d, rest)
		sym := symshape.Sym(s)
		var sol symshape.Expr
		switch {
		case lin.Equal(sym): // s + rest = 0
			sol = symshape.Neg(rest)
		case lin.Equal(symshape.Neg(sym)): // -s + rest = 0
			sol = rest
		default:
			continue
		}
		if containsSym(sol, s) {
			continue
		}
		if best == "" || c.eliminateFirst(s, best) {
			best, bestExpr = s, sol
		}
	}
	return best, bestExpr, best != ""
}

func containsSym(e symshape.Expr, s string) bool {
	for _, x := range e.Symbols() {
		if x == s {
			return true
		}
	}
	return false
}

// eliminateFirst reports whether symbol s is a better candidate for
// elimination than t.
func (c *ctx) eliminateFirst(s, t string) bool {
	is, it := c.info(s), c.info(t)
	if is.kind != it.kind {
		// Output-only names go first, then data-dependent, then fresh axes;
		// named input symbols last.
		return rank(is.kind) > rank(it.kind)
	}
	if is.uses != it.uses {
		return is.uses < it.uses
	}
	if is.first != it.first {
		return is.first > it.first
	}
	return s > t
}

func rank(k symKind) int {
	switch k {
	case symOutput:
		return 4
	case symUnplanned:
		return 3
	case symData:
		return 2
	case symAxis:
		return 1
	}
	return 0
}

func (c *ctx) info(s string) *symInfo {
	if i := c.syms[s]; i != nil {
		return i
	}
	i := &symInfo{kind: symUnplanned, first: 1 << 30}
	c.syms[s] = i
	return i
}

// eliminate records s = e and substitutes it into every value derived so
// far and every earlier equality.
func (c *ctx) eliminate(s string, e symshape.Expr) {
	e = c.resolve(e)
	one := map[string]symshape.Expr{s: e}
	for k, v := range c.subst {
		c.subst[k] = v.Substitute(one)
	}
	c.subst[s] = e
	for i := range c.res.Equalities {
		c.res.Equalities[i].Expr = c.res.Equalities[i].Expr.Substitute(one)
	}
	c.res.Equalities = append(c.res.Equalities, Equality{Sym: s, Expr: e, Node: c.nodeName()})
	for _, v := range c.vals {
		for i, d := range v.Shape {
			if containsSym(d, s) {
				v.Shape[i] = d.Substitute(one)
			}
		}
		for i, d := range v.Elems {
			if containsSym(d, s) {
				v.Elems[i] = d.Substitute(one)
			}
		}
	}
}

// broadcast applies ONNX multidirectional broadcasting to shapes, unifying
// dims that must agree.
func (c *ctx) broadcast(what string, shapes ...[]symshape.Expr) ([]symshape.Expr, error) {
	rank := 0
	for _, s := range shapes {
		if len(s) > rank {
			rank = len(s)
		}
	}
	out := make([]symshape.Expr, rank)
	for i := 0; i < rank; i++ {
		var cur symshape.Expr
		have := false
		for _, s := range shapes {
			j := i - (rank - len(s))
			if j < 0 {
				continue
			}
			d := c.resolve(s[j])
			if !have {
				cur, have = d, true
				continue
			}
			if isOne(d) {
				continue
			}
			if isOne(cur) {
				cur = d
				continue
			}
			u, err := c.unify(cur, d, func() string {
				return fmt.Sprintf("%s: shapes %s do not broadcast at axis %d", what, fmtShapes(shapes), i)
			})
			if err != nil {
				return nil, err
			}
			cur = u
		}
		out[i] = cur
	}
	// An elimination during this call may have rewritten earlier dims.
	for i := range out {
		out[i] = c.resolve(out[i])
	}
	return out, nil
}

func isOne(e symshape.Expr) bool {
	v, ok := e.Const()
	return ok && v == 1
}

func fmtShapes(shapes [][]symshape.Expr) string {
	s := ""
	for i, sh := range shapes {
		if i > 0 {
			s += " and "
		}
		s += symshape.FormatShape(sh)
	}
	return s
}

// cmp compares under Options.Bounds.
func (c *ctx) cmp(a, b symshape.Expr) symshape.Relation {
	return symshape.CompareIn(a, b, c.opts.Bounds)
}
