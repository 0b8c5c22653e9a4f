package engine

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tlite/tlite/symshape"
)

// Port describes one graph input or output: its name, element type and
// symbolic shape (after shape inference, so it may read "past + seq").
type Port struct {
	Name  string
	Type  string
	Shape []symshape.Expr
}

// InputError is a bad input to Run: what is wrong, which input, what the
// model declares and what was given.
type InputError struct {
	Input    string
	Expected string
	Got      string
	Problem  string
}

// Error formats the input, the problem, and expected versus given.
func (e *InputError) Error() string {
	msg := fmt.Sprintf("input %q: %s", e.Input, e.Problem)
	if e.Expected != "" || e.Got != "" {
		msg += fmt.Sprintf(" (expected %s, got %s)", e.Expected, e.Got)
	}
	return msg
}

// bindShapes finds the value of every symbol from the concrete shapes given
// for ports. Bare symbols are bound directly; a dim that is linear in one
// still-unbound symbol (past + seq, once seq is known) is solved for it; then
// every dim is checked against its evaluation, so a symbol given two values
// by two inputs, or a constant dim that does not match, is reported with both
// inputs named. max holds declared maxima; a value above one is an error.
func bindShapes(ports []Port, shapes map[string][]int, max map[string]int64) (symshape.Binding, error) {
	b := symshape.Binding{}
	from := map[string]string{} // symbol -> "input[axis]" that bound it
	for _, p := range ports {
		got, ok := shapes[p.Name]
		if !ok {
			continue
		}
		if len(got) != len(p.Shape) {
			return nil, &InputError{Input: p.Name, Problem: fmt.Sprintf("rank %d, the model declares rank %d", len(got), len(p.Shape)),
				Expected: symshape.FormatShape(p.Shape), Got: fmt.Sprint(got)}
		}
	}
	// Bind dims that are a bare symbol first, so that a conflict is reported
	// against the direct reading, then solve until nothing changes: each pass
	// binds what the last made solvable.
	for pass, changed := 0, true; changed || pass == 1; pass++ {
		changed = false
		for _, p := range ports {
			got, ok := shapes[p.Name]
			if !ok {
				continue
			}
			for axis, d := range p.Shape {
				free := unbound(d, b)
				if len(free) != 1 {
					continue
				}
				s := free[0]
				if name, bare := d.SymName(); pass == 0 && (!bare || name != s) {
					continue
				}
				v, ok := solveLinear(d, s, b, int64(got[axis]))
				if !ok {
					continue
				}
				if v < 0 {
					return nil, &InputError{Input: p.Name, Expected: symshape.FormatShape(p.Shape), Got: fmt.Sprint(got),
						Problem: fmt.Sprintf("axis %d gives %s = %d, which is negative", axis, s, v)}
				}
				b[s] = v
				from[s] = fmt.Sprintf("%s[%d]", p.Name, axis)
				changed = true
			}
		}
	}
	for _, p := range ports {
		got, ok := shapes[p.Name]
		if !ok {
			continue
		}
		for axis, d := range p.Shape {
			want, err := d.Eval(b)
			if err != nil {
				return nil, &InputError{Input: p.Name, Expected: symshape.FormatShape(p.Shape), Got: fmt.Sprint(got),
					Problem: fmt.Sprintf("axis %d (%s) cannot be solved from the inputs given", axis, d)}
			}
			if want != int64(got[axis]) {
				why := fmt.Sprintf("axis %d is %d but %s = %d", axis, got[axis], d, want)
				if _, isConst := d.Const(); isConst {
					why = fmt.Sprintf("axis %d is %d, the model requires %d", axis, got[axis], want)
				}
				if syms := d.Symbols(); len(syms) > 0 {
					var src []string
					for _, s := range syms {
						src = append(src, fmt.Sprintf("%s=%d from %s", s, b[s], from[s]))
					}
					why += " (" + strings.Join(src, ", ") + ")"
				}
				return nil, &InputError{Input: p.Name, Expected: symshape.FormatShape(p.Shape), Got: fmt.Sprint(got), Problem: why}
			}
		}
	}
	names := make([]string, 0, len(b))
	for s := range b {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		if m, ok := max[s]; ok && b[s] > m {
			in := strings.SplitN(from[s], "[", 2)[0]
			e := &InputError{Input: in,
				Problem: fmt.Sprintf("%s = %d (from %s) is above the declared maximum %d; reopen the session with a larger --max %s=", s, b[s], from[s], m, s)}
			for _, p := range ports {
				if p.Name == in {
					e.Expected, e.Got = symshape.FormatShape(p.Shape), fmt.Sprint(shapes[in])
				}
			}
			return nil, e
		}
	}
	return b, nil
}

// unbound lists the symbols of d that b does not bind.
func unbound(d symshape.Expr, b symshape.Binding) []string {
	var out []string
	for _, s := range d.Symbols() {
		if _, ok := b[s]; !ok {
			out = append(out, s)
		}
	}
	return out
}

// solveLinear solves d = target for symbol s when d is a*s + r with a
// constant a != 0 and r evaluable under b, and the division is exact.
func solveLinear(d symshape.Expr, s string, b symshape.Binding, target int64) (int64, bool) {
	r0 := d.Substitute(map[string]symshape.Expr{s: symshape.Const(0)})
	r1 := d.Substitute(map[string]symshape.Expr{s: symshape.Const(1)})
	r2 := d.Substitute(map[string]symshape.Expr{s: symshape.Const(2)})
	v0, err0 := r0.Eval(b)
	v1, err1 := r1.Eval(b)
	v2, err2 := r2.Eval(b)
	if err0 != nil || err1 != nil || err2 != nil {
		return 0, false
	}
	a := v1 - v0
	if a == 0 || v2-v1 != a { // not linear in s (a floor division, a product of symbols)
		return 0, false
	}
	if (target-v0)%a != 0 {
		return 0, false
	}
	v := (target - v0) / a
	// Confirm: d may be linear only on the points sampled.
	if got, err := d.Eval(withSym(b, s, v)); err != nil || got != target {
		return 0, false
	}
	return v, true
}

func withSym(b symshape.Binding, s string, v int64) symshape.Binding {
	out := make(symshape.Binding, len(b)+1)
	for k, x := range b {
		out[k] = x
	}
	out[s] = v
	return out
}
