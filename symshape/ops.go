package symshape

import "sort"

// FloorDiv returns floor(a / b), rounding toward negative infinity like
// Python's //. Division by the constant 0 returns an invalid Expr (no
// panic). A symbolic divisor is assumed non-zero.
//
// Simplifications: constants fold; a negative constant divisor is turned
// positive by negating a; every term whose coefficient (and, for a
// monomial divisor, whose monomial) is a multiple of the divisor moves out
// of the quotient, (a*k + b)/k = a + b/k; a common coefficient factor of
// numerator and divisor cancels, (2*x + 2)/4 = (x + 1)/2; nested constant
// divisions merge, (x/4 + c)/8 = (x + 4*c)/32; and a quotient that the
// structural range of the remainder pins to one value folds, (x%4)/4 = 0.
func FloorDiv(a, b Expr) (r Expr) {
	if bad, ok := firstInvalid(a, b); ok {
		return bad
	}
	defer guard(&r)
	return floorDiv(a, b)
}

// Mod returns a - b*floor(a/b): the remainder has the sign of the divisor,
// as with Python's %. Modulo by the constant 0 returns an invalid Expr.
//
// Simplifications mirror FloorDiv: coefficients reduce modulo a constant
// divisor ((5*x + 7)%4 = (x + 3)%4), multiples of the divisor vanish
// ((a*k)%k = 0), a common factor moves out (2*x%4 = 2*(x%2)), (x%8)%4 =
// x%4, and a remainder whose range already lies in [0, k) is returned as is.
func Mod(a, b Expr) (r Expr) {
	if bad, ok := firstInvalid(a, b); ok {
		return bad
	}
	defer guard(&r)
	return mod(a, b)
}

// CeilDiv returns ceil(a / b). For a constant positive divisor k it is
// (a + k - 1)/k; for a symbolic divisor that is non-negative by structure
// (hence >= 1, being non-zero) it is (a + b - 1)/b; otherwise -((-a)/b).
// Division by the constant 0 returns an invalid Expr.
func CeilDiv(a, b Expr) (r Expr) {
	if bad, ok := firstInvalid(a, b); ok {
		return bad
	}
	defer guard(&r)
	return ceilDiv(a, b)
}

// Min returns the smaller of a and b. See MinOf.
func Min(a, b Expr) Expr { return MinOf(a, b) }

// Max returns the larger of a and b. See MaxOf.
func Max(a, b Expr) Expr { return MaxOf(a, b) }

// MinOf returns the minimum of es (invalid for none). Nested minima
// flatten (min is associative and commutative, and c*min(x, y) + r =
// min(c*x + r, c*y + r) for c > 0), duplicates drop, terms common to all
// operands and a common positive factor move outside, and an operand that
// Compare proves no smaller than another one is dropped. What remains, if
// more than one operand, is kept symbolically with operands in canonical
// order.
func MinOf(es ...Expr) (r Expr) { return minmaxEntry(kindMin, es) }

// MaxOf returns the maximum of es (invalid for none); the mirror of MinOf.
func MaxOf(es ...Expr) (r Expr) { return minmaxEntry(kindMax, es) }

func minmaxEntry(kind atomKind, es []Expr) (r Expr) {
	if len(es) == 0 {
		if kind == kindMin {
			return invalid(errorf("MinOf of no operands"))
		}
		return invalid(errorf("MaxOf of no operands"))
	}
	if bad, ok := firstInvalid(es...); ok {
		return bad
	}
	defer guard(&r)
	return minmax(kind, es)
}

func floorDiv(a, b Expr) Expr {
	if k, ok := b.Const(); ok {
		if k == 0 {
			fail("division by zero in (%s)/0", a)
		}
		if c, ok := a.Const(); ok {
			return Const(floorDivInt(c, k))
		}
		if k < 0 {
			return floorDiv(neg(a), Const(negInt(k)))
		}
		if k == 1 {
			return a
		}
		return floorDivConst(a, k)
	}
	return floorDivSym(a, b)
}

// splitMultiples separates the terms of a divisible by the monomial c*m
// (quotient terms, already divided) from the rest.
func splitMultiples(a Expr, c int64, m *mono) (q, r []term) {
	for _, t := range a.n.terms {
		if t.c%c == 0 {
			if qm, ok := divMono(t.m, m); ok {
				q = append(q, term{c: t.c / c, m: qm})
				continue
			}
		}
		r = append(r, t)
	}
	if m.deg > 0 {
		q = normalize(q)
	}
	return q, r
}

func floorDivConst(a Expr, k int64) Expr {
	qt, rt := splitMultiples(a, k, unitMono)
	q := fromTerms(qt)
	if len(rt) == 0 {
		return q
	}
	r := fromTerms(rt)
	if g := gcd(contentGCD(r), k); g > 1 {
		r, k = divExact(r, g), k/g
	}
	if c, ok := r.Const(); ok {
		return add(q, Const(floorDivInt(c, k)))
	}
	// (y/m + c)/k = (y + m*c)/(m*k) for positive m, k: both sides are
	// floor((y + m*c)/(m*k)) since floor(floor(u)/k) = floor(u/k).
	if y, m, c, ok := nestedConstDiv(r); ok {
		return add(q, floorDiv(add(y, Const(mulInt(m, c))), Const(mulInt(m, k))))
	}
	if iv := exprRange(r, nil); iv.finite() {
		if lo, hi := floorDivInt(iv.lo, k), floorDivInt(iv.hi, k); lo == hi {
			return add(q, Const(lo))
		}
	}
	return add(q, atomExpr(newAtom(kindFloorDiv, []Expr{r, Const(k)})))
}

// nestedConstDiv matches r = y/m + c with a positive constant m.
func nestedConstDiv(r Expr) (y Expr, m, c int64, ok bool) {
	ts := r.n.terms
	if len(ts) == 2 && ts[1].m.deg == 0 {
		c = ts[1].c
	} else if len(ts) != 1 {
		return Expr{}, 0, 0, false
	}
	t := ts[0]
	if t.c != 1 || len(t.m.fs) != 1 || t.m.fs[0].pow != 1 || t.m.fs[0].a.kind != kindFloorDiv {
		return Expr{}, 0, 0, false
	}
	a := t.m.fs[0].a
	m, ok = a.args[1].Const()
	if !ok {
		return Expr{}, 0, 0, false
	}
	return a.args[0], m, c, true
}

func floorDivSym(a, b Expr) Expr {
	if len(a.n.terms) == 0 {
		return a
	}
	if leadingNegative(b) {
		a, b = neg(a), neg(b)
	}
	if g := contentGCD(a, b); g > 1 {
		a, b = divExact(a, g), divExact(b, g)
	}
	q, r := fromTerms(nil), a
	if len(b.n.terms) == 1 {
		bt := b.n.terms[0]
		qt, rt := splitMultiples(a, bt.c, bt.m)
		if len(rt) == 0 {
			return fromTerms(qt)
		}
		q, r = fromTerms(qt), fromTerms(rt)
	}
	if num, den, ok := ratio(r, b); ok && den == 1 {
		return add(q, Const(num))
	}
	if iv := fdInterval(exprRange(r, nil), exprRange(b, nil)); iv.finite() && iv.lo == iv.hi {
		return add(q, Const(iv.lo))
	}
	return add(q, atomExpr(newAtom(kindFloorDiv, []Expr{r, b})))
}

func mod(a, b Expr) Expr {
	if k, ok := b.Const(); ok {
		if k == 0 {
			fail("modulo by zero in (%s)%%0", a)
		}
		if c, ok := a.Const(); ok {
			return Const(floorModInt(c, k))
		}
		if k < 0 {
			// a % k = -((-a) % -k): both remainders carry the divisor's sign.
			return neg(mod(neg(a), Const(negInt(k))))
		}
		if k == 1 {
			return fromTerms(nil)
		}
		return modConst(a, k)
	}
	return modSym(a, b)
}

func modConst(a Expr, k int64) Expr {
	rt := make([]term, 0, len(a.n.terms))
	var inner []Expr // (x%m) with k | m contributes x: x%m and x agree modulo k
	for _, t := range a.n.terms {
		c := floorModInt(t.c, k)
		if c == 0 {
			continue
		}
		if len(t.m.fs) == 1 && t.m.fs[0].pow == 1 && t.m.fs[0].a.kind == kindMod {
			at := t.m.fs[0].a
			if m, ok := at.args[1].Const(); ok && m%k == 0 {
				inner = append(inner, scale(at.args[0], c))
				continue
			}
		}
		rt = append(rt, term{c: c, m: t.m})
	}
	if len(inner) > 0 {
		return modConst(add(fromTerms(rt), sumExprs(inner)), k)
	}
	if len(rt) == 0 {
		return fromTerms(nil)
	}
	r := fromTerms(rt)
	if g := gcd(contentGCD(r), k); g > 1 {
		return scale(modConst(divExact(r, g), k/g), g)
	}
	if _, ok := r.Const(); ok {
		return r
	}
	if iv := exprRange(r, nil); iv.finite() {
		if lo, hi := floorDivInt(iv.lo, k), floorDivInt(iv.hi, k); lo == hi {
			return sub(r, Const(mulInt(lo, k)))
		}
	}
	return atomExpr(newAtom(kindMod, []Expr{r, Const(k)}))
}

func sumExprs(es []Expr) Expr {
	acc := fromTerms(nil)
	for _, e := range es {
		acc = add(acc, e)
	}
	return acc
}

func modSym(a, b Expr) Expr {
	if len(a.n.terms) == 0 {
		return a
	}
	if leadingNegative(b) {
		return neg(modSym(neg(a), neg(b)))
	}
	if g := contentGCD(a, b); g > 1 {
		return scale(modSym(divExact(a, g), divExact(b, g)), g)
	}
	r := a
	if len(b.n.terms) == 1 {
		bt := b.n.terms[0]
		_, rt := splitMultiples(a, bt.c, bt.m)
		if len(rt) == 0 {
			return fromTerms(nil)
		}
		r = fromTerms(rt)
	}
	if _, den, ok := ratio(r, b); ok && den == 1 {
		return fromTerms(nil)
	}
	if at, ok := r.asAtom(); ok && at.kind == kindMod && at.args[1].Equal(b) {
		return r
	}
	ri, bi := exprRange(r, nil), exprRange(b, nil)
	if bi.lo >= 0 && ri.lo >= 0 && ri.hi < max(bi.lo, 1) {
		return r
	}
	return atomExpr(newAtom(kindMod, []Expr{r, b}))
}

func ceilDiv(a, b Expr) Expr {
	if k, ok := b.Const(); ok {
		if k == 0 {
			fail("division by zero in ceil((%s)/0)", a)
		}
		if k < 0 {
			return ceilDiv(neg(a), Const(negInt(k)))
		}
		return floorDiv(add(a, Const(k-1)), b)
	}
	if exprRange(b, nil).lo >= 0 {
		return floorDiv(add(a, sub(b, Const(1))), b)
	}
	return neg(floorDiv(neg(a), b))
}

// minmax canonicalises min/max over operands; see MinOf.
func minmax(kind atomKind, es []Expr) Expr {
	var flat []Expr
	for _, e := range es {
		flat = appendFlattened(flat, kind, e)
	}
	flat = dedupe(flat)
	if len(flat) == 1 {
		return flat[0]
	}
	common := commonTerms(flat)
	if len(common.n.terms) > 0 {
		again := false
		for i := range flat {
			flat[i] = sub(flat[i], common)
			again = again || flattenable(kind, flat[i])
		}
		if again {
			// Removing a shared same-kind atom can leave an operand with a
			// single one, which must flatten to stay canonical.
			return add(common, minmax(kind, flat))
		}
	}
	g := contentGCD(flat...)
	if g > 1 {
		for i := range flat {
			flat[i] = divExact(flat[i], g)
		}
	}
	n := len(flat)
	keep := prune(kind, dedupe(flat))
	if len(keep) > 1 && len(keep) < n {
		// The survivors may share terms the dropped operands did not.
		return add(common, scale(minmax(kind, keep), g))
	}
	var res Expr
	if len(keep) == 1 {
		res = keep[0]
	} else {
		res = atomExpr(newAtom(kind, keep))
	}
	return add(common, scale(res, g))
}

// appendFlattened expands an operand c*M + rest, where M is the only
// same-kind atom in it and c > 0, into c*x + rest for every operand x of M.
func appendFlattened(out []Expr, kind atomKind, e Expr) []Expr {
	idx := flatIndex(kind, e)
	if idx < 0 {
		return append(out, e)
	}
	t := e.n.terms[idx]
	rest := make([]term, 0, len(e.n.terms)-1)
	rest = append(rest, e.n.terms[:idx]...)
	rest = append(rest, e.n.terms[idx+1:]...)
	re := fromTerms(rest)
	for _, x := range t.m.fs[0].a.args {
		out = appendFlattened(out, kind, add(scale(x, t.c), re))
	}
	return out
}

// flatIndex returns the index of the term c*M (c > 0, M a same-kind atom)
// when it is the only term of e mentioning a same-kind atom at top level,
// else -1.
func flatIndex(kind atomKind, e Expr) int {
	idx := -1
	for i, t := range e.n.terms {
		for _, f := range t.m.fs {
			if f.a.kind == kind {
				if idx >= 0 {
					return -1
				}
				idx = i
				break
			}
		}
	}
	if idx < 0 {
		return -1
	}
	t := e.n.terms[idx]
	if t.c <= 0 || len(t.m.fs) != 1 || t.m.fs[0].pow != 1 {
		return -1
	}
	return idx
}

func flattenable(kind atomKind, e Expr) bool { return flatIndex(kind, e) >= 0 }

// argLess orders min/max operands: symbolic ones by canonical string,
// constants last, so min(seq, 2048) reads naturally.
func argLess(x, y Expr) bool {
	_, xc := x.Const()
	_, yc := y.Const()
	if xc != yc {
		return yc
	}
	return x.n.string() < y.n.string()
}

// dedupe sorts operands canonically and removes duplicates.
func dedupe(es []Expr) []Expr {
	sort.Slice(es, func(i, j int) bool { return argLess(es[i], es[j]) })
	out := es[:0]
	for _, e := range es {
		if len(out) > 0 && termsEqual(out[len(out)-1].n.terms, e.n.terms) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// commonTerms returns the terms (same monomial, same coefficient) present
// in every operand.
func commonTerms(es []Expr) Expr {
	var ct []term
outer:
	for _, t := range es[0].n.terms {
		for _, e := range es[1:] {
			found := false
			for _, u := range e.n.terms {
				if u.m.key == t.m.key {
					found = u.c == t.c
					break
				}
			}
			if !found {
				continue outer
			}
		}
		ct = append(ct, t)
	}
	return fromTerms(ct)
}

// prune drops operands that another operand provably dominates. It is a
// single sorted pass so that at least one operand always survives, even
// if interval reasoning claimed a ≤ b ≤ a for structurally different
// operands.
func prune(kind atomKind, es []Expr) []Expr {
	beats := func(x, y Expr) bool { // x makes y redundant
		rel := compareIn(x, y, nil)
		if kind == kindMin {
			return rel == Less || rel == LessEq || rel == Equal
		}
		return rel == Greater || rel == GreaterEq || rel == Equal
	}
	var keep []Expr
	for _, c := range es {
		dominated := false
		for _, k := range keep {
			if beats(k, c) {
				dominated = true
				break
			}
		}
		if dominated {
			continue
		}
		n := 0
		for _, k := range keep {
			if !beats(c, k) {
				keep[n] = k
				n++
			}
		}
		keep = append(keep[:n], c)
	}
	return keep
}
