package symshape

import (
	"fmt"
	"strconv"
)

// Parse reads an expression in the syntax String prints, a subset of
// Python: integers, names [A-Za-z_][A-Za-z0-9_]*, + - * , / and // (both
// floor division), % (floor modulo), parentheses, unary minus, and
// min(a, b, ...) / max(a, b, ...). Precedence is Python's: unary minus
// binds tighter than * / %, which bind tighter than + -, all left
// associative. The result is canonical, so Parse(e.String()) is Equal to e.
// Division by a constant 0 is a parse error.
func Parse(s string) (Expr, error) {
	p := &parser{src: s}
	p.next()
	e, err := p.expr()
	if err != nil {
		return Expr{}, err
	}
	if p.tok.kind != tokEOF {
		return Expr{}, p.errorf("unexpected %q after expression", p.tok.text)
	}
	if !e.IsValid() {
		return Expr{}, fmt.Errorf("symshape: parse %q: %w", s, e.Err())
	}
	return e, nil
}

// MustParse is Parse for expressions known to be well-formed (tests,
// tables); it panics on error.
func MustParse(s string) Expr {
	e, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return e
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokInt
	tokIdent
	tokOp // + - * / // % ( ) ,
	tokBad
)

type token struct {
	kind tokKind
	text string
	pos  int
}

type parser struct {
	src string
	pos int
	tok token
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("symshape: parse %q at offset %d: %s", p.src, p.tok.pos, fmt.Sprintf(format, args...))
}

func (p *parser) next() {
	for p.pos < len(p.src) && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t') {
		p.pos++
	}
	start := p.pos
	if p.pos >= len(p.src) {
		p.tok = token{kind: tokEOF, pos: start}
		return
	}
	c := p.src[p.pos]
	switch {
	case c >= '0' && c <= '9':
		for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
			p.pos++
		}
		p.tok = token{kind: tokInt, text: p.src[start:p.pos], pos: start}
	case c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		for p.pos < len(p.src) {
			c := p.src[p.pos]
			if c != '_' && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') {
				break
			}
			p.pos++
		}
		p.tok = token{kind: tokIdent, text: p.src[start:p.pos], pos: start}
	case c == '/' && p.pos+1 < len(p.src) && p.src[p.pos+1] == '/':
		p.pos += 2
		p.tok = token{kind: tokOp, text: "/", pos: start}
	case c == '+' || c == '-' || c == '*' || c == '/' || c == '%' || c == '(' || c == ')' || c == ',':
		p.pos++
		p.tok = token{kind: tokOp, text: string(c), pos: start}
	default:
		p.pos++
		p.tok = token{kind: tokBad, text: string(c), pos: start}
	}
}

func (p *parser) isOp(s string) bool { return p.tok.kind == tokOp && p.tok.text == s }

func (p *parser) expr() (Expr, error) {
	acc, err := p.term()
	if err != nil {
		return Expr{}, err
	}
	for p.isOp("+") || p.isOp("-") {
		op := p.tok.text
		p.next()
		t, err := p.term()
		if err != nil {
			return Expr{}, err
		}
		if op == "+" {
			acc = Add(acc, t)
		} else {
			acc = Sub(acc, t)
		}
	}
	return acc, nil
}

func (p *parser) term() (Expr, error) {
	acc, err := p.unary()
	if err != nil {
		return Expr{}, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("%") {
		op := p.tok.text
		p.next()
		f, err := p.unary()
		if err != nil {
			return Expr{}, err
		}
		switch op {
		case "*":
			acc = Mul(acc, f)
		case "/":
			acc = FloorDiv(acc, f)
		default:
			acc = Mod(acc, f)
		}
	}
	return acc, nil
}

func (p *parser) unary() (Expr, error) {
	if p.isOp("-") {
		p.next()
		if p.tok.kind == tokInt {
			// Read "-digits" as one literal so math.MinInt64 round-trips;
			// the value is the same as negating the literal.
			v, err := strconv.ParseInt("-"+p.tok.text, 10, 64)
			if err != nil {
				return Expr{}, p.errorf("integer -%s out of int64 range", p.tok.text)
			}
			p.next()
			return Const(v), nil
		}
		x, err := p.unary()
		if err != nil {
			return Expr{}, err
		}
		return Neg(x), nil
	}
	if p.isOp("+") {
		p.next()
		return p.unary()
	}
	return p.primary()
}

func (p *parser) primary() (Expr, error) {
	switch p.tok.kind {
	case tokInt:
		v, err := strconv.ParseInt(p.tok.text, 10, 64)
		if err != nil {
			return Expr{}, p.errorf("integer %s out of int64 range", p.tok.text)
		}
		p.next()
		return Const(v), nil
	case tokIdent:
		name := p.tok.text
		p.next()
		if (name == "min" || name == "max") && p.isOp("(") {
			p.next()
			var args []Expr
			for {
				a, err := p.expr()
				if err != nil {
					return Expr{}, err
				}
				args = append(args, a)
				if p.isOp(",") {
					p.next()
					continue
				}
				break
			}
			if !p.isOp(")") {
				return Expr{}, p.errorf("expected ',' or ')' in %s(...), got %q", name, p.tok.text)
			}
			p.next()
			if len(args) < 2 {
				return Expr{}, p.errorf("%s needs at least 2 arguments, got %d", name, len(args))
			}
			if name == "min" {
				return MinOf(args...), nil
			}
			return MaxOf(args...), nil
		}
		if name == "min" || name == "max" {
			return Expr{}, p.errorf("%s must be called as %s(a, b)", name, name)
		}
		return Sym(name), nil
	case tokOp:
		if p.tok.text == "(" {
			p.next()
			e, err := p.expr()
			if err != nil {
				return Expr{}, err
			}
			if !p.isOp(")") {
				return Expr{}, p.errorf("expected ')', got %q", p.tok.text)
			}
			p.next()
			return e, nil
		}
	case tokEOF:
		return Expr{}, p.errorf("unexpected end of expression")
	}
	return Expr{}, p.errorf("unexpected %q", p.tok.text)
}
