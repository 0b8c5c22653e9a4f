package symshape

import (
	"fmt"
	"math/bits"
)

// Binding assigns integer values to symbols.
type Binding map[string]int64

// Eval computes e's value under b. It fails, naming the cause and the
// expression, on an unbound symbol, int64 overflow, or division or modulo
// by zero.
func (e Expr) Eval(b Binding) (int64, error) {
	if !e.IsValid() {
		return 0, fmt.Errorf("symshape: eval of invalid expression: %w", e.Err())
	}
	v, err := evalExpr(e, b)
	if err != nil {
		return 0, fmt.Errorf("%w (evaluating %s)", err, e)
	}
	return v, nil
}

func evalExpr(e Expr, b Binding) (int64, error) {
	var acc int64
	for _, t := range e.n.terms {
		v := t.c
		for _, f := range t.m.fs {
			x, err := evalAtom(f.a, b)
			if err != nil {
				return 0, err
			}
			for p := 0; p < f.pow; p++ {
				var ok bool
				if v, ok = mulChecked(v, x); !ok {
					return 0, fmt.Errorf("symshape: int64 overflow multiplying by %s = %d", f.a.str, x)
				}
			}
		}
		s := acc + v
		if (s > acc) != (v > 0) {
			return 0, fmt.Errorf("symshape: int64 overflow adding %d + %d", acc, v)
		}
		acc = s
	}
	return acc, nil
}

func mulChecked(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	hi, lo := bits.Mul64(abs64(a), abs64(b))
	neg := (a < 0) != (b < 0)
	if hi != 0 || (!neg && lo > 1<<63-1) || (neg && lo > 1<<63) {
		return 0, false
	}
	if neg {
		return int64(-lo), true
	}
	return int64(lo), true
}

func evalAtom(a *atom, b Binding) (int64, error) {
	if a.kind == kindSym {
		v, ok := b[a.name]
		if !ok {
			return 0, fmt.Errorf("symshape: unbound symbol %q", a.name)
		}
		return v, nil
	}
	vals := make([]int64, len(a.args))
	for i, x := range a.args {
		v, err := evalExpr(x, b)
		if err != nil {
			return 0, err
		}
		vals[i] = v
	}
	switch a.kind {
	case kindFloorDiv, kindMod:
		n, d := vals[0], vals[1]
		if d == 0 {
			return 0, fmt.Errorf("symshape: division by zero in %s (divisor %s = 0)", a.str, a.args[1])
		}
		if a.kind == kindMod {
			return floorModInt(n, d), nil
		}
		if d == -1 && n == -1<<63 {
			return 0, fmt.Errorf("symshape: int64 overflow in %s", a.str)
		}
		return floorDivInt(n, d), nil
	case kindMin:
		return minOf(vals), nil
	case kindMax:
		return maxOf(vals), nil
	}
	return 0, fmt.Errorf("symshape: internal error: unknown atom kind %d", a.kind)
}

func minOf(v []int64) int64 {
	m := v[0]
	for _, x := range v[1:] {
		m = min(m, x)
	}
	return m
}

func maxOf(v []int64) int64 {
	m := v[0]
	for _, x := range v[1:] {
		m = max(m, x)
	}
	return m
}

// Substitute replaces symbols by expressions and re-canonicalises, so
// substituting constants folds as far as the rules allow. Symbols not in m
// stay. An invalid replacement (or e.g. a substitution that makes a
// divisor the constant 0) gives an invalid Expr.
func (e Expr) Substitute(m map[string]Expr) (r Expr) {
	if !e.IsValid() {
		return e
	}
	if len(m) == 0 {
		return e
	}
	for name, x := range m {
		if !x.IsValid() {
			if x.n == nil {
				return invalid(errorf("substitute %s: zero Expr", name))
			}
			return invalid(fmt.Errorf("substitute %s: %w", name, x.n.err))
		}
	}
	defer guard(&r)
	return substExpr(e, m)
}

func substExpr(e Expr, m map[string]Expr) Expr {
	if !mentions(e, m) {
		return e
	}
	acc := fromTerms(nil)
	for _, t := range e.n.terms {
		v := Const(t.c)
		for _, f := range t.m.fs {
			x := substAtom(f.a, m)
			for p := 0; p < f.pow; p++ {
				v = mul(v, x)
			}
		}
		acc = add(acc, v)
	}
	return acc
}

func substAtom(a *atom, m map[string]Expr) Expr {
	switch a.kind {
	case kindSym:
		if x, ok := m[a.name]; ok {
			return x
		}
		return atomExpr(a)
	case kindFloorDiv:
		return floorDiv(substExpr(a.args[0], m), substExpr(a.args[1], m))
	case kindMod:
		return mod(substExpr(a.args[0], m), substExpr(a.args[1], m))
	}
	args := make([]Expr, len(a.args))
	for i, x := range a.args {
		args[i] = substExpr(x, m)
	}
	return minmax(a.kind, args)
}

// mentions reports whether e contains any symbol that m replaces.
func mentions(e Expr, m map[string]Expr) bool {
	for _, t := range e.n.terms {
		for _, f := range t.m.fs {
			if f.a.kind == kindSym {
				if _, ok := m[f.a.name]; ok {
					return true
				}
				continue
			}
			for _, x := range f.a.args {
				if mentions(x, m) {
					return true
				}
			}
		}
	}
	return false
}
