// Package symshape is tlite's symbolic integer algebra for tensor shapes.
//
// An Expr is an immutable integer expression over named symbols (sequence
// length, past length, batch, ...). Every constructor returns the expression
// in a canonical form, in the spirit of TVM's canonical simplifier and SymPy's
// automatic simplification: a sum of monomials with int64 coefficients, each
// monomial a product of powers of atoms, an atom being either a symbol or an
// irreducible non-polynomial term (floor division, modulo, min, max) over
// canonical subexpressions. Monomials are ordered deterministically, equal
// monomials are merged, zero terms dropped and constants folded, so two
// expressions that the rules can prove equal have the identical form and
// Equal is a string comparison.
//
// Symbols denote integers >= 0 (they stand for tensor dimensions). The
// simplifier uses that fact, for example to decide min(seq, 0) = 0, so
// evaluating at a negative value may disagree with the formula as written
// (but never with its meaning over shapes). Divisors
// are assumed to be non-zero wherever they are symbolic: (seq*heads)/heads
// simplifies to seq even though heads = 0 would be a division by zero at
// evaluation time; Eval reports such a division as an error.
//
// Errors never panic. Division or modulo by the constant 0 and int64
// overflow while folding constants produce an invalid Expr (IsValid false,
// Err says why); every operation on an invalid Expr returns an invalid Expr
// carrying the first reason.
package symshape

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Expr is an immutable symbolic integer expression in canonical form. The
// zero value is invalid. Expr values are safe to share between goroutines.
type Expr struct{ n *node }

// node is the shared, immutable payload of an Expr.
type node struct {
	terms []term // sorted by monoCmp; at most one constant term, always last
	err   error  // non-nil for invalid expressions
	// The printed form is built on first use: most intermediate
	// expressions of shape derivation are never printed.
	once sync.Once
	str  string
}

func (n *node) string() string {
	n.once.Do(func() { n.str = formatTerms(n.terms) })
	return n.str
}

// term is coefficient * monomial; the constant term has the unit monomial.
type term struct {
	c int64
	m *mono
}

// mono is a product of atom powers, factors sorted by atom key.
type mono struct {
	fs  []factor
	key string // identity and ordering key; "" for the unit monomial
	deg int
}

type factor struct {
	a   *atom
	pow int
}

type atomKind uint8

const (
	kindSym atomKind = iota
	kindFloorDiv
	kindMod
	kindMin
	kindMax
)

// atom is a symbol or an irreducible operation over canonical operands.
type atom struct {
	kind atomKind
	name string // symbol name for kindSym
	args []Expr // FloorDiv/Mod: numerator, divisor. Min/Max: >= 2 operands sorted by String
	str  string // printed form when standing alone
	key  string // ordering key: symbols sort before compound atoms
	rng  interval
}

var unitMono = &mono{}

// arithError carries a reason out of deeply nested canonicalisation code
// (overflow, division by zero) to the exported entry point, which turns it
// into an invalid Expr. It never escapes the package as a panic.
type arithError struct{ err error }

func fail(format string, args ...any) {
	panic(arithError{fmt.Errorf("symshape: "+format, args...)})
}

// guard converts an arithError panic into an invalid result; other panics
// are bugs and keep propagating.
func guard(r *Expr) {
	if x := recover(); x != nil {
		ae, ok := x.(arithError)
		if !ok {
			panic(x)
		}
		*r = invalid(ae.err)
	}
}

func invalid(err error) Expr { return Expr{&node{err: err}} }

var errZero = errors.New("symshape: zero Expr (not constructed)")

// Err reports why e is invalid, or nil for a valid expression.
func (e Expr) Err() error {
	if e.n == nil {
		return errZero
	}
	return e.n.err
}

// IsValid reports whether e is a well-formed expression.
func (e Expr) IsValid() bool { return e.n != nil && e.n.err == nil }

// firstInvalid returns the first invalid operand, so failures keep their
// original reason through later arithmetic.
func firstInvalid(es ...Expr) (Expr, bool) {
	for _, e := range es {
		if !e.IsValid() {
			if e.n == nil {
				return invalid(errZero), true
			}
			return e, true
		}
	}
	return Expr{}, false
}

// Const returns the constant expression v.
func Const(v int64) Expr {
	if v == 0 {
		return fromTerms(nil)
	}
	return fromTerms([]term{{c: v, m: unitMono}})
}

// Sym returns the symbol name. Names must match [A-Za-z_][A-Za-z0-9_]* and
// must not be "min" or "max" (so that every expression prints in a form
// Parse reads back); other names give an invalid Expr.
func Sym(name string) Expr {
	if !isIdent(name) || name == "min" || name == "max" {
		return invalid(fmt.Errorf("symshape: invalid symbol name %q (want [A-Za-z_][A-Za-z0-9_]*, not min/max)", name))
	}
	a := &atom{kind: kindSym, name: name, str: name, key: "0" + name, rng: interval{lo: 0, hi: posInf}}
	return atomExpr(a)
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
		case i > 0 && r >= '0' && r <= '9':
		default:
			return false
		}
	}
	return true
}

// atomExpr wraps a single atom as the expression 1*a.
func atomExpr(a *atom) Expr {
	m := &mono{fs: []factor{{a: a, pow: 1}}, deg: 1}
	m.key = monoKey(m.fs)
	return fromTerms([]term{{c: 1, m: m}})
}

// fromTerms builds the node for already sorted, merged, non-zero terms.
func fromTerms(ts []term) Expr {
	return Expr{&node{terms: ts}}
}

// Const returns the value of e when e is a constant.
func (e Expr) Const() (int64, bool) {
	if !e.IsValid() {
		return 0, false
	}
	switch len(e.n.terms) {
	case 0:
		return 0, true
	case 1:
		if t := e.n.terms[0]; t.m.deg == 0 {
			return t.c, true
		}
	}
	return 0, false
}

// SymName returns the symbol's name when e is exactly one symbol.
func (e Expr) SymName() (string, bool) {
	if a, ok := e.asAtom(); ok && a.kind == kindSym {
		return a.name, true
	}
	return "", false
}

// asAtom returns the atom when e is exactly 1*atom.
func (e Expr) asAtom() (*atom, bool) {
	if !e.IsValid() || len(e.n.terms) != 1 {
		return nil, false
	}
	t := e.n.terms[0]
	if t.c != 1 || len(t.m.fs) != 1 || t.m.fs[0].pow != 1 {
		return nil, false
	}
	return t.m.fs[0].a, true
}

// Equal reports whether e and f have the identical canonical form. Invalid
// expressions are equal to nothing, themselves included.
func (e Expr) Equal(f Expr) bool {
	if !e.IsValid() || !f.IsValid() {
		return false
	}
	if e.n == f.n {
		return true
	}
	return termsEqual(e.n.terms, f.n.terms)
}

// termsEqual compares canonical term lists; monomial keys embed the atoms'
// printed forms, so this is the same test as comparing printed forms.
func termsEqual(x, y []term) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i].c != y[i].c || (x[i].m != y[i].m && x[i].m.key != y[i].m.key) {
			return false
		}
	}
	return true
}

// String prints e so that Parse(e.String()) is Equal to e: terms in
// canonical order ("past + seq", "2*seq + 1"), floor division as "/",
// modulo as "%", min and max as calls. Invalid expressions print as
// "<invalid>".
func (e Expr) String() string {
	if !e.IsValid() {
		return "<invalid>"
	}
	return e.n.string()
}

// Symbols returns the sorted, distinct symbol names that e mentions.
func (e Expr) Symbols() []string {
	if !e.IsValid() {
		return nil
	}
	set := map[string]bool{}
	e.collectSymbols(set)
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func (e Expr) collectSymbols(set map[string]bool) {
	for _, t := range e.n.terms {
		for _, f := range t.m.fs {
			if f.a.kind == kindSym {
				set[f.a.name] = true
				continue
			}
			for _, x := range f.a.args {
				x.collectSymbols(set)
			}
		}
	}
}

// monoKey builds the identity key of a factor list. NUL cannot occur in
// printed atoms, so the concatenation is unambiguous.
func monoKey(fs []factor) string {
	if len(fs) == 1 && fs[0].pow == 1 {
		return fs[0].a.key
	}
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(f.a.key)
		if f.pow != 1 {
			b.WriteByte('^')
			b.WriteString(strconv.Itoa(f.pow))
		}
	}
	return b.String()
}

// monoCmp orders monomials graded-lexicographically: higher degree first,
// then factor by factor on atom key with the higher power first, so
// past*past comes before past*seq. The unit monomial (degree 0) therefore
// comes last and constants print last.
func monoCmp(a, b *mono) int {
	if a.deg != b.deg {
		if a.deg > b.deg {
			return -1
		}
		return 1
	}
	for i := 0; i < len(a.fs) && i < len(b.fs); i++ {
		x, y := a.fs[i], b.fs[i]
		if x.a != y.a {
			if c := strings.Compare(x.a.key, y.a.key); c != 0 {
				return c
			}
		}
		if x.pow != y.pow {
			if x.pow > y.pow {
				return -1
			}
			return 1
		}
	}
	return len(a.fs) - len(b.fs)
}

// formatTerms prints a canonical term list.
func formatTerms(ts []term) string {
	if len(ts) == 0 {
		return "0"
	}
	var b strings.Builder
	for i, t := range ts {
		c := t.c
		neg := c < 0
		switch {
		case i == 0 && neg:
			b.WriteByte('-')
		case i > 0 && neg:
			b.WriteString(" - ")
		case i > 0:
			b.WriteString(" + ")
		}
		writeTerm(&b, abs64(c), t.m, i == 0 && neg)
	}
	return b.String()
}

// writeTerm prints |c|*m. Floor division and modulo atoms are parenthesised
// whenever another factor or a leading unary minus touches them, because
// "2*x/4" and "-x/4" would parse as (2*x)/4 and (-x)/4.
func writeTerm(b *strings.Builder, c uint64, m *mono, unaryMinus bool) {
	if m.deg == 0 {
		b.WriteString(strconv.FormatUint(c, 10))
		return
	}
	nf := m.deg
	if c != 1 {
		nf++
	}
	wrap := nf > 1 || unaryMinus
	first := true
	if c != 1 {
		b.WriteString(strconv.FormatUint(c, 10))
		first = false
	}
	for _, f := range m.fs {
		s := f.a.str
		if wrap && (f.a.kind == kindFloorDiv || f.a.kind == kindMod) {
			s = "(" + s + ")"
		}
		for p := 0; p < f.pow; p++ {
			if !first {
				b.WriteByte('*')
			}
			b.WriteString(s)
			first = false
		}
	}
}

func abs64(v int64) uint64 {
	if v < 0 {
		return uint64(-(v + 1)) + 1
	}
	return uint64(v)
}

// operandString prints the numerator of "/" or "%": sums need parentheses,
// a single term does not because * / % associate to the left.
func operandString(e Expr) string {
	if len(e.n.terms) > 1 {
		return "(" + e.n.string() + ")"
	}
	return e.n.string()
}

// divisorString prints the right operand of "/" or "%", which must be a
// primary to parse back.
func divisorString(e Expr) string {
	if c, ok := e.Const(); ok && c >= 0 {
		return e.n.string()
	}
	if a, ok := e.asAtom(); ok && a.kind != kindFloorDiv && a.kind != kindMod {
		return e.n.string()
	}
	return "(" + e.n.string() + ")"
}

// newAtom builds a compound atom, its printed form and its structural range.
func newAtom(kind atomKind, args []Expr) *atom {
	a := &atom{kind: kind, args: args}
	switch kind {
	case kindFloorDiv:
		a.str = operandString(args[0]) + "/" + divisorString(args[1])
	case kindMod:
		a.str = operandString(args[0]) + "%" + divisorString(args[1])
	case kindMin, kindMax:
		var b strings.Builder
		if kind == kindMin {
			b.WriteString("min(")
		} else {
			b.WriteString("max(")
		}
		for i, x := range args {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(x.n.string())
		}
		b.WriteByte(')')
		a.str = b.String()
	}
	a.key = "1" + a.str
	a.rng = atomRange(a, nil)
	return a
}

// FormatShape prints a shape as [batch, past + seq, 64], and a nil shape
// (rank unknown) as "?". It is the one shape printer of tlite's messages
// and reports.
func FormatShape(s []Expr) string {
	if s == nil {
		return "?"
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(d.String())
	}
	b.WriteByte(']')
	return b.String()
}
