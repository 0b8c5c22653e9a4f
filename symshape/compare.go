package symshape

import (
	"fmt"
	"math"
	"math/bits"
)

// Relation is what Compare could prove about two expressions.
type Relation int

// Relations, from "nothing proven" to the proven order of a against b.
const (
	Unknown Relation = iota
	Equal
	Less
	LessEq
	Greater
	GreaterEq
)

// String returns "unknown" or the comparison operator.
func (r Relation) String() string {
	switch r {
	case Equal:
		return "=="
	case Less:
		return "<"
	case LessEq:
		return "<="
	case Greater:
		return ">"
	case GreaterEq:
		return ">="
	}
	return "unknown"
}

// Implies reports whether a proof of r is also a proof of q; for example
// Less implies LessEq and Equal implies GreaterEq. Unknown implies nothing.
func (r Relation) Implies(q Relation) bool {
	switch r {
	case Equal:
		return q == Equal || q == LessEq || q == GreaterEq
	case Less:
		return q == Less || q == LessEq
	case Greater:
		return q == Greater || q == GreaterEq
	case LessEq, GreaterEq:
		return q == r
	}
	return false
}

// Bounds gives optional inclusive ranges [lo, hi] (lo <= hi) to symbols.
// A symbol without an entry ranges over [0, +inf). Use Unbounded as hi for
// an open end. A negative lo is honoured by range reasoning, but
// expressions were already simplified assuming symbols are >= 0.
type Bounds map[string][2]int64

// Unbounded as an upper bound means "no upper limit".
const Unbounded int64 = math.MaxInt64

// Compare decides how a relates to b for every assignment of non-negative
// integers to the symbols, or returns Unknown. It works on the difference
// d = a - b: a constant difference decides directly; otherwise d's sign is
// bounded by interval evaluation (a monomial with a non-negative
// coefficient over non-negative atoms is non-negative), by factoring out
// the monomial common to all terms (seq*seq - seq = seq*(seq - 1)), and by
// replacing atoms with symbolic bounds that let terms cancel: k*(n/k) lies
// in [n - k + 1, n], n%k <= n for n >= 0, min(x, y) <= x, max(x, y) >= x
// (so seq/4 <= seq and min(seq, 2048) <= seq). A difference whose range is
// exactly [0, 0] counts as Equal. Use Ratio for a proven constant quotient.
func Compare(a, b Expr) Relation { return CompareIn(a, b, nil) }

// CompareIn is Compare where the symbols named in bounds range over their
// given intervals (for example seq in [1, 2048]) instead of [0, +inf).
func CompareIn(a, b Expr, bounds Bounds) Relation {
	if !a.IsValid() || !b.IsValid() {
		return Unknown
	}
	return compareIn(a, b, bounds)
}

// compareIn never fails: an overflow while forming a - b just means
// nothing is proven, which keeps Min/Max construction from failing on it.
func compareIn(a, b Expr, bounds Bounds) (rel Relation) {
	if a.Equal(b) {
		return Equal
	}
	defer func() {
		if x := recover(); x != nil {
			if _, ok := x.(arithError); !ok {
				panic(x)
			}
			rel = Unknown
		}
	}()
	iv := tightRange(sub(a, b), bounds, boundDepth)
	switch {
	case iv.lo == 0 && iv.hi == 0:
		return Equal
	case iv.lo > 0:
		return Greater
	case iv.lo == 0:
		return GreaterEq
	case iv.hi < 0:
		return Less
	case iv.hi == 0:
		return LessEq
	}
	return Unknown
}

// Ratio reports a proven constant quotient: a*den == b*num holds
// identically, with den > 0 and num/den in lowest terms. It holds when a
// and b have the same monomials with proportional coefficients, e.g.
// Ratio(4*seq, seq) = (4, 1) and Ratio(2*x + 2, 3*x + 3) = (2, 3). When b
// is 0 the ratio is undefined and ok is false.
func Ratio(a, b Expr) (num, den int64, ok bool) {
	if !a.IsValid() || !b.IsValid() {
		return 0, 0, false
	}
	defer func() {
		if x := recover(); x != nil {
			if _, isArith := x.(arithError); !isArith {
				panic(x)
			}
			num, den, ok = 0, 0, false
		}
	}()
	return ratio(a, b)
}

func ratio(a, b Expr) (num, den int64, ok bool) {
	at, bt := a.n.terms, b.n.terms
	if len(bt) == 0 {
		return 0, 0, false
	}
	if len(at) == 0 {
		return 0, 1, true
	}
	if len(at) != len(bt) {
		return 0, 0, false
	}
	reduce := func(x, y int64) (int64, int64) {
		g := gcd(x, y)
		x, y = x/g, y/g
		if y < 0 {
			x, y = negInt(x), negInt(y)
		}
		return x, y
	}
	num, den = reduce(at[0].c, bt[0].c)
	for i := range at {
		if at[i].m.key != bt[i].m.key {
			return 0, 0, false
		}
		if n, d := reduce(at[i].c, bt[i].c); n != num || d != den {
			return 0, 0, false
		}
	}
	return num, den, true
}

// Range returns an interval [lo, hi] containing every value of e when the
// symbols range over bounds (default [0, +inf)), computed as for Compare.
// The interval is sound but may be wider than the true range. ok is false when an end is unbounded,
// in which case that end is math.MinInt64 or math.MaxInt64; it is also
// false for an invalid e.
func (e Expr) Range(bounds Bounds) (lo, hi int64, ok bool) {
	if !e.IsValid() {
		return 0, 0, false
	}
	iv := tightRange(e, bounds, boundDepth)
	return iv.lo, iv.hi, iv.finite()
}

// MaxValue returns an upper bound of e over bounds, for sizing buffers at
// the declared maximum shapes. For polynomials with non-negative
// coefficients in symbols with declared ranges it is the exact maximum.
// ok is false when no finite bound is known.
func (e Expr) MaxValue(bounds Bounds) (int64, bool) {
	if !e.IsValid() {
		return 0, false
	}
	iv := tightRange(e, bounds, boundDepth)
	if iv.hi == posInf {
		return 0, false
	}
	return iv.hi, true
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("symshape: "+format, args...)
}

// Interval arithmetic over int64 with math.MinInt64 and math.MaxInt64
// standing for -inf and +inf. Every operation rounds outward (saturates) on
// overflow, so a computed interval always contains the true range.

const (
	negInf = math.MinInt64
	posInf = math.MaxInt64
)

type interval struct{ lo, hi int64 }

var fullInterval = interval{negInf, posInf}

func (iv interval) finite() bool { return iv.lo != negInf && iv.hi != posInf }

// satAdd adds two bounds; hiSide picks the answer for +inf + -inf.
func satAdd(a, b int64, hiSide bool) int64 {
	aInf, bInf := a == negInf || a == posInf, b == negInf || b == posInf
	switch {
	case aInf && bInf && a != b:
		if hiSide {
			return posInf
		}
		return negInf
	case aInf:
		return a
	case bInf:
		return b
	}
	s := a + b
	if (s > a) != (b > 0) { // overflow: saturate in the direction of b
		if b > 0 {
			return posInf
		}
		return negInf
	}
	if s == negInf || s == posInf { // the sentinels are not finite values
		if hiSide && s == negInf {
			return negInf + 1
		}
		if !hiSide && s == posInf {
			return posInf - 1
		}
	}
	return s
}

// satMul multiplies two bounds; 0 times an infinite bound is 0 because the
// bound stands for finite values.
func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	neg := (a < 0) != (b < 0)
	if a == negInf || a == posInf || b == negInf || b == posInf {
		if neg {
			return negInf
		}
		return posInf
	}
	hi, lo := bits.Mul64(abs64(a), abs64(b))
	if hi != 0 || lo >= 1<<63-1 {
		if neg {
			return negInf
		}
		return posInf
	}
	if neg {
		return -int64(lo)
	}
	return int64(lo)
}

func satNeg(a int64) int64 {
	switch a {
	case negInf:
		return posInf
	case posInf:
		return negInf
	}
	return -a
}

func addIv(x, y interval) interval {
	return interval{satAdd(x.lo, y.lo, false), satAdd(x.hi, y.hi, true)}
}

func mulIv(x, y interval) interval {
	c := [4]int64{satMul(x.lo, y.lo), satMul(x.lo, y.hi), satMul(x.hi, y.lo), satMul(x.hi, y.hi)}
	r := interval{c[0], c[0]}
	for _, v := range c[1:] {
		r.lo = min(r.lo, v)
		r.hi = max(r.hi, v)
	}
	return r
}

func negIv(x interval) interval { return interval{satNeg(x.hi), satNeg(x.lo)} }

func powIv(x interval, p int) interval {
	r := x
	for i := 1; i < p; i++ {
		r = mulIv(r, x)
	}
	if p%2 == 0 && r.lo < 0 {
		r.lo = 0
	}
	return r
}

// fdInterval bounds floor(n/d). A divisor range touching 0 from one side is
// narrowed to exclude 0, since a zero divisor is an evaluation error; one
// that contains both signs gives no information.
func fdInterval(n, d interval) interval {
	switch {
	case d.lo >= 0:
		d.lo = max(d.lo, 1)
		if d.hi < d.lo {
			return fullInterval
		}
	case d.hi <= 0:
		d.hi = min(d.hi, -1)
		if d.lo > d.hi {
			return fullInterval
		}
		return fdInterval(negIv(n), negIv(d))
	default:
		return fullInterval
	}
	lo := min(fdCorner(n.lo, d.lo, false), fdCorner(n.lo, d.hi, false))
	hi := max(fdCorner(n.hi, d.lo, true), fdCorner(n.hi, d.hi, true))
	return interval{lo, hi}
}

// fdCorner is floor(x/y) for y >= 1 at an interval corner, with the limits
// for infinite ends; floor(x/y) is monotone in each argument on that
// domain, so corners bound it.
func fdCorner(x, y int64, hiSide bool) int64 {
	if y == posInf {
		switch {
		case x == posInf:
			if hiSide {
				return posInf
			}
			return 0
		case x == negInf:
			if hiSide {
				return -1
			}
			return negInf
		case x >= 0:
			return 0
		default:
			return -1
		}
	}
	if x == posInf || x == negInf {
		return x
	}
	return floorDivInt(x, y)
}

// symRange is a symbol's declared range, [0, +inf) by default.
func symRange(name string, bounds Bounds) interval {
	if b, ok := bounds[name]; ok {
		return interval{b[0], b[1]}
	}
	return interval{0, posInf}
}

func exprRange(e Expr, bounds Bounds) interval {
	acc := interval{0, 0}
	for _, t := range e.n.terms {
		ti := interval{t.c, t.c}
		for _, f := range t.m.fs {
			ai := f.a.rng
			if bounds != nil {
				ai = atomRange(f.a, bounds)
			}
			ti = mulIv(ti, powIv(ai, f.pow))
		}
		acc = addIv(acc, ti)
	}
	return acc
}

func atomRange(a *atom, bounds Bounds) interval {
	switch a.kind {
	case kindSym:
		return symRange(a.name, bounds)
	case kindFloorDiv:
		return fdInterval(exprRange(a.args[0], bounds), exprRange(a.args[1], bounds))
	case kindMod:
		n, d := exprRange(a.args[0], bounds), exprRange(a.args[1], bounds)
		switch {
		case d.lo >= 0:
			d.lo = max(d.lo, 1)
			if d.hi < d.lo {
				return fullInterval
			}
			if n.lo >= 0 && n.hi < d.lo {
				return n // the remainder is the numerator itself
			}
			r := interval{0, satAdd(d.hi, -1, true)}
			if n.lo >= 0 {
				r.hi = min(r.hi, n.hi)
			}
			return r
		case d.hi <= 0:
			d.hi = min(d.hi, -1)
			if d.lo > d.hi {
				return fullInterval
			}
			if n.hi <= 0 && n.lo > d.hi {
				return n
			}
			r := interval{satAdd(d.lo, 1, false), 0}
			if n.hi <= 0 {
				r.lo = max(r.lo, n.lo)
			}
			return r
		}
		return fullInterval
	case kindMin, kindMax:
		r := exprRange(a.args[0], bounds)
		for _, x := range a.args[1:] {
			xi := exprRange(x, bounds)
			if a.kind == kindMin {
				r = interval{min(r.lo, xi.lo), min(r.hi, xi.hi)}
			} else {
				r = interval{max(r.lo, xi.lo), max(r.hi, xi.hi)}
			}
		}
		return r
	}
	return fullInterval
}

// boundDepth limits how many times symbolic bounding recurses into the
// numerators and operands it substitutes.
const boundDepth = 2

// maxBoundCandidates caps the operand choices combined per bounding step.
const maxBoundCandidates = 32

func intersect(x, y interval) interval { return interval{max(x.lo, y.lo), min(x.hi, y.hi)} }

// tightRange is exprRange sharpened by factoring and symbolic bounds; it
// is used where a sign decision matters (Compare, Range), not inside the
// simplifier's own cheap range checks.
func tightRange(e Expr, bounds Bounds, depth int) interval {
	if c, ok := e.Const(); ok {
		return interval{c, c}
	}
	iv := intersect(exprRange(e, bounds), factoredRange(e, bounds))
	if depth == 0 || len(e.n.terms) < 2 {
		return iv
	}
	if iv.hi > 0 {
		if ub, l, ok := symbolicBound(e, true, bounds, depth); ok && ub != posInf {
			iv.hi = min(iv.hi, floorDivInt(ub, l))
		}
	}
	if iv.lo < 0 {
		if lb, l, ok := symbolicBound(e, false, bounds, depth); ok && lb != negInf {
			iv.lo = max(iv.lo, -floorDivInt(-lb, l))
		}
	}
	return iv
}

// factoredRange bounds e as m*q where m is the monomial common to all
// terms, which keeps the correlation interval evaluation loses:
// seq*seq - seq = seq*(seq - 1) >= 0 when seq >= 1.
func factoredRange(e Expr, bounds Bounds) interval {
	ts := e.n.terms
	if len(ts) < 2 {
		return fullInterval
	}
	common := ts[0].m.fs
	for _, t := range ts[1:] {
		common = commonFactors(common, t.m.fs)
		if len(common) == 0 {
			return fullInterval
		}
	}
	m := &mono{fs: common, key: monoKey(common)}
	for _, f := range common {
		m.deg += f.pow
	}
	qt := make([]term, len(ts))
	for i, t := range ts {
		qm, _ := divMono(t.m, m)
		qt[i] = term{c: t.c, m: qm}
	}
	q := fromTerms(normalize(qt))
	mi := interval{1, 1}
	for _, f := range common {
		ai := f.a.rng
		if bounds != nil {
			ai = atomRange(f.a, bounds)
		}
		mi = mulIv(mi, powIv(ai, f.pow))
	}
	return mulIv(mi, intersect(exprRange(q, bounds), factoredRange(q, bounds)))
}

// commonFactors returns the factors shared by two sorted factor lists, with
// the smaller power.
func commonFactors(a, b []factor) []factor {
	var out []factor
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i].a.key < b[j].a.key:
			i++
		case a[i].a.key > b[j].a.key:
			j++
		default:
			out = append(out, factor{a: a[i].a, pow: min(a[i].pow, b[j].pow)})
			i++
			j++
		}
	}
	return out
}

// symbolicBound returns a bound on l*e from above (upper) or below, for a
// positive l, found by replacing atoms that occur linearly with symbolic
// bounds so that terms can cancel: for a constant k > 0, k*(n/k) is in
// [n - k + 1, n]; n%k <= n when n >= 0; min(x, ...) <= x; max(x, ...) >=
// x. Each replacement is a valid one-sided bound only in the direction the
// term's sign allows; the best bound over all combinations of choices is
// returned. ok is false when no atom could be replaced or arithmetic
// overflowed.
func symbolicBound(e Expr, upper bool, bounds Bounds, depth int) (bound, l int64, ok bool) {
	defer func() {
		if x := recover(); x != nil {
			if _, isArith := x.(arithError); !isArith {
				panic(x)
			}
			bound, l, ok = 0, 0, false
		}
	}()
	l = 1
	useful := false
	for _, t := range e.n.terms {
		a, lin := linearAtom(t)
		if !lin || a.kind == kindSym {
			continue
		}
		useful = true
		if a.kind == kindFloorDiv {
			if k, isConst := a.args[1].Const(); isConst {
				l = mulInt(l/gcd(l, k), k)
			}
		}
	}
	if !useful {
		return 0, 0, false
	}
	options := make([][]Expr, 0, len(e.n.terms))
	combos := 1
	for _, t := range e.n.terms {
		cl := mulInt(t.c, l)
		base := fromTerms([]term{{c: cl, m: t.m}})
		opts := []Expr{base}
		// needUpper: this term is bounded from above when the atom is.
		needUpper := upper == (t.c > 0)
		if a, lin := linearAtom(t); lin {
			switch a.kind {
			case kindFloorDiv:
				if k, isConst := a.args[1].Const(); isConst && k > 0 {
					n := a.args[0]
					if !needUpper {
						n = sub(n, Const(k-1))
					}
					opts = []Expr{scale(n, cl/k)}
				}
			case kindMod:
				if n := a.args[0]; needUpper && exprRange(n, bounds).lo >= 0 {
					opts = append(opts, scale(n, cl))
				}
			case kindMin, kindMax:
				if needUpper == (a.kind == kindMin) {
					for _, x := range a.args {
						opts = append(opts, scale(x, cl))
					}
				}
			}
		}
		if combos*len(opts) > maxBoundCandidates {
			opts = opts[:1]
		}
		combos *= len(opts)
		options = append(options, opts)
	}
	if upper {
		bound = posInf
	} else {
		bound = negInf
	}
	idx := make([]int, len(options))
	for {
		parts := make([]Expr, len(options))
		for i, o := range options {
			parts[i] = o[idx[i]]
		}
		r := tightRange(sumExprs(parts), bounds, depth-1)
		if upper {
			bound = min(bound, r.hi)
		} else {
			bound = max(bound, r.lo)
		}
		i := 0
		for ; i < len(idx); i++ {
			idx[i]++
			if idx[i] < len(options[i]) {
				break
			}
			idx[i] = 0
		}
		if i == len(idx) {
			break
		}
	}
	return bound, l, true
}

// linearAtom returns the atom of a term that is c*atom.
func linearAtom(t term) (*atom, bool) {
	if len(t.m.fs) == 1 && t.m.fs[0].pow == 1 {
		return t.m.fs[0].a, true
	}
	return nil, false
}
