package symshape

// Clamp is a min(x, C) term with a constant C: x is cut off at C. Shape
// rules produce them where ONNX clamps an index into a fixed-size axis
// (slicing rows past..past+seq out of a 256-row table gives
// min(past + seq, 256) - min(past, 256) rows).
type Clamp struct {
	Arg   Expr  // the clamped expression (the other operands of the min)
	Bound int64 // the constant it is clamped at
}

// Unclamp returns e with every min(..., C) term whose operands include a
// constant C replaced by the min of its other operands, that is, e as it
// is when no clamp binds, and the clamps removed, innermost first. Where
// the clamps do not bind (every Arg <= Bound) the result equals e.
func (e Expr) Unclamp() (r Expr, clamps []Clamp) {
	if !e.IsValid() {
		return e, nil
	}
	defer guard(&r)
	r = unclampExpr(e, &clamps)
	return r, clamps
}

func unclampExpr(e Expr, out *[]Clamp) Expr {
	if !hasMin(e) {
		return e
	}
	acc := fromTerms(nil)
	for _, t := range e.n.terms {
		v := Const(t.c)
		for _, f := range t.m.fs {
			x := unclampAtom(f.a, out)
			for p := 0; p < f.pow; p++ {
				v = mul(v, x)
			}
		}
		acc = add(acc, v)
	}
	return acc
}

func unclampAtom(a *atom, out *[]Clamp) Expr {
	switch a.kind {
	case kindSym:
		return atomExpr(a)
	case kindFloorDiv:
		return floorDiv(unclampExpr(a.args[0], out), unclampExpr(a.args[1], out))
	case kindMod:
		return mod(unclampExpr(a.args[0], out), unclampExpr(a.args[1], out))
	}
	args := make([]Expr, 0, len(a.args))
	bound, hasBound := int64(0), false
	for _, x := range a.args {
		x = unclampExpr(x, out)
		if c, ok := x.Const(); ok && a.kind == kindMin {
			if !hasBound || c < bound {
				bound = c
			}
			hasBound = true
			continue
		}
		args = append(args, x)
	}
	if !hasBound || len(args) == 0 {
		if hasBound {
			args = append(args, Const(bound))
		}
		return minmax(a.kind, args)
	}
	arg := minmax(kindMin, args)
	*out = append(*out, Clamp{Arg: arg, Bound: bound})
	return arg
}

// hasMin reports whether e contains a min atom anywhere.
func hasMin(e Expr) bool {
	for _, t := range e.n.terms {
		for _, f := range t.m.fs {
			if f.a.kind == kindMin {
				return true
			}
			for _, x := range f.a.args {
				if hasMin(x) {
					return true
				}
			}
		}
	}
	return false
}
