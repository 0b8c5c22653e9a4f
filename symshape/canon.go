package symshape

import (
	"math"
	"math/bits"
	"sort"
)

// Checked int64 arithmetic. Overflow while folding coefficients makes the
// whole expression invalid rather than silently wrapping a buffer size.

func addInt(a, b int64) int64 {
	s := a + b
	if (s > a) != (b > 0) {
		fail("int64 overflow in %d + %d", a, b)
	}
	return s
}

func mulInt(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	hi, lo := bits.Mul64(abs64(a), abs64(b))
	neg := (a < 0) != (b < 0)
	if hi != 0 || (!neg && lo > 1<<63-1) || (neg && lo > 1<<63) {
		fail("int64 overflow in %d * %d", a, b)
	}
	if neg {
		return int64(-lo)
	}
	return int64(lo)
}

func negInt(a int64) int64 {
	if a == -1<<63 {
		fail("int64 overflow negating %d", a)
	}
	return -a
}

// floorDivInt and floorModInt follow Python: the quotient rounds toward
// negative infinity and the remainder takes the divisor's sign.
func floorDivInt(a, b int64) int64 {
	if b == -1 {
		return negInt(a)
	}
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func floorModInt(a, b int64) int64 {
	if b == -1 {
		return 0
	}
	r := a % b
	if r != 0 && ((r < 0) != (b < 0)) {
		r += b
	}
	return r
}

func gcd(a, b int64) int64 {
	ua, ub := abs64(a), abs64(b)
	for ub != 0 {
		ua, ub = ub, ua%ub
	}
	if ua > 1<<63-1 {
		fail("int64 overflow in gcd(%d, %d)", a, b)
	}
	return int64(ua)
}

// Polynomial arithmetic on sorted term lists.

// addTerms merges two canonical term lists.
func addTerms(a, b []term) []term {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]term, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := monoCmp(a[i].m, b[j].m); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			if s := addInt(a[i].c, b[j].c); s != 0 {
				out = append(out, term{c: s, m: a[i].m})
			}
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// normalize sorts an arbitrary term list and merges equal monomials.
func normalize(ts []term) []term {
	sort.SliceStable(ts, func(i, j int) bool { return monoCmp(ts[i].m, ts[j].m) < 0 })
	out := ts[:0]
	for _, t := range ts {
		if n := len(out); n > 0 && out[n-1].m.key == t.m.key {
			out[n-1].c = addInt(out[n-1].c, t.c)
			continue
		}
		out = append(out, t)
	}
	k := 0
	for _, t := range out {
		if t.c != 0 {
			out[k] = t
			k++
		}
	}
	return out[:k]
}

func scaleTerms(ts []term, k int64) []term {
	if k == 0 {
		return nil
	}
	if k == 1 {
		return ts
	}
	out := make([]term, len(ts))
	for i, t := range ts {
		out[i] = term{c: mulInt(t.c, k), m: t.m}
	}
	return out
}

// mulMono multiplies two monomials by merging their sorted factor lists.
func mulMono(a, b *mono) *mono {
	if a.deg == 0 {
		return b
	}
	if b.deg == 0 {
		return a
	}
	fs := make([]factor, 0, len(a.fs)+len(b.fs))
	i, j := 0, 0
	for i < len(a.fs) && j < len(b.fs) {
		x, y := a.fs[i], b.fs[j]
		switch {
		case x.a.key < y.a.key:
			fs = append(fs, x)
			i++
		case x.a.key > y.a.key:
			fs = append(fs, y)
			j++
		default:
			fs = append(fs, factor{a: x.a, pow: x.pow + y.pow})
			i++
			j++
		}
	}
	fs = append(fs, a.fs[i:]...)
	fs = append(fs, b.fs[j:]...)
	return &mono{fs: fs, key: monoKey(fs), deg: a.deg + b.deg}
}

// divMono returns a/b when every factor of b divides a.
func divMono(a, b *mono) (*mono, bool) {
	if b.deg == 0 {
		return a, true
	}
	if b.deg > a.deg {
		return nil, false
	}
	fs := make([]factor, 0, len(a.fs))
	j := 0
	for _, x := range a.fs {
		if j < len(b.fs) && b.fs[j].a.key == x.a.key {
			y := b.fs[j]
			j++
			if y.pow > x.pow {
				return nil, false
			}
			if x.pow > y.pow {
				fs = append(fs, factor{a: x.a, pow: x.pow - y.pow})
			}
			continue
		}
		if j < len(b.fs) && b.fs[j].a.key < x.a.key {
			return nil, false
		}
		fs = append(fs, x)
	}
	if j < len(b.fs) {
		return nil, false
	}
	if len(fs) == 0 {
		return unitMono, true
	}
	return &mono{fs: fs, key: monoKey(fs), deg: a.deg - b.deg}, true
}

func mulTerms(a, b []term) []term {
	if len(a) == 0 || len(b) == 0 {
		return nil
	}
	out := make([]term, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			out = append(out, term{c: mulInt(x.c, y.c), m: mulMono(x.m, y.m)})
		}
	}
	return normalize(out)
}

func negTerms(ts []term) []term {
	out := make([]term, len(ts))
	for i, t := range ts {
		out[i] = term{c: negInt(t.c), m: t.m}
	}
	return out
}

// Internal operations assume valid operands and may fail(); the exported
// wrappers check validity and install guard.

func add(a, b Expr) Expr { return fromTerms(addTerms(a.n.terms, b.n.terms)) }
func sub(a, b Expr) Expr { return fromTerms(addTerms(a.n.terms, negTerms(b.n.terms))) }
func mul(a, b Expr) Expr { return fromTerms(mulTerms(a.n.terms, b.n.terms)) }
func neg(a Expr) Expr    { return fromTerms(negTerms(a.n.terms)) }
func scale(a Expr, k int64) Expr {
	if k == 1 {
		return a
	}
	return fromTerms(scaleTerms(a.n.terms, k))
}

// Add returns a + b.
func Add(a, b Expr) (r Expr) {
	if bad, ok := firstInvalid(a, b); ok {
		return bad
	}
	defer guard(&r)
	return add(a, b)
}

// Sub returns a - b.
func Sub(a, b Expr) (r Expr) {
	if bad, ok := firstInvalid(a, b); ok {
		return bad
	}
	defer guard(&r)
	return sub(a, b)
}

// Mul returns a * b, expanded into a sum of monomials.
func Mul(a, b Expr) (r Expr) {
	if bad, ok := firstInvalid(a, b); ok {
		return bad
	}
	defer guard(&r)
	return mul(a, b)
}

// Neg returns -a.
func Neg(a Expr) (r Expr) {
	if bad, ok := firstInvalid(a); ok {
		return bad
	}
	defer guard(&r)
	return neg(a)
}

// Sum returns the sum of es (0 for none).
func Sum(es ...Expr) (r Expr) {
	if bad, ok := firstInvalid(es...); ok {
		return bad
	}
	defer guard(&r)
	n := 0
	for _, e := range es {
		n += len(e.n.terms)
	}
	ts := make([]term, 0, n)
	for _, e := range es {
		ts = append(ts, e.n.terms...)
	}
	return fromTerms(normalize(ts))
}

// Product returns the product of es (1 for none).
func Product(es ...Expr) (r Expr) {
	if bad, ok := firstInvalid(es...); ok {
		return bad
	}
	defer guard(&r)
	acc := Const(1)
	for _, e := range es {
		acc = mul(acc, e)
	}
	return acc
}

// contentGCD is the gcd of all coefficients of all expressions (0 if all
// are zero).
func contentGCD(es ...Expr) int64 {
	var g int64
	for _, e := range es {
		for _, t := range e.n.terms {
			g = gcd(g, t.c)
			if g == 1 {
				return 1
			}
		}
	}
	return g
}

// divExact divides every coefficient by k, which the caller knows divides.
func divExact(e Expr, k int64) Expr {
	if k == 1 {
		return e
	}
	out := make([]term, len(e.n.terms))
	for i, t := range e.n.terms {
		out[i] = term{c: t.c / k, m: t.m}
	}
	return fromTerms(out)
}

// leadingNegative reports whether the first canonical term is negative;
// used to pick one sign representative for divisors.
func leadingNegative(e Expr) bool {
	return len(e.n.terms) > 0 && e.n.terms[0].c < 0
}

// CoefficientGCD returns the greatest common divisor g of the coefficients
// of e's non-constant terms (0 when e is a constant) and e's constant term
// k. Atoms take integer values, so e can be 0 only when g divides k. ok is
// false for an invalid e.
func (e Expr) CoefficientGCD() (g, k int64, ok bool) {
	if !e.IsValid() {
		return 0, 0, false
	}
	for _, t := range e.n.terms {
		if t.m == unitMono || t.m.key == "" {
			k = t.c
			continue
		}
		c := t.c
		if c < 0 {
			if c == math.MinInt64 {
				return 0, 0, false
			}
			c = -c
		}
		g = gcd(g, c)
	}
	return g, k, true
}
