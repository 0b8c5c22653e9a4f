package symshape

import (
	"errors"
	"fmt"
	"math/rand"
	"testing"
)

// tree is an unsimplified expression, evaluated directly as the oracle for
// the canonical forms.
type tree struct {
	op   string // "const", "sym", "+", "-", "*", "/", "%", "ceil", "min", "max", "neg"
	val  int64
	name string
	kids []*tree
}

var errSkip = errors.New("binding outside the expression's domain")

// eval is a deliberately naive evaluator with Python floor semantics and
// small magnitudes; bindings that divide by zero are skipped.
func (t *tree) eval(b Binding) (int64, error) {
	switch t.op {
	case "const":
		return t.val, nil
	case "sym":
		return b[t.name], nil
	}
	v := make([]int64, len(t.kids))
	for i, k := range t.kids {
		x, err := k.eval(b)
		if err != nil {
			return 0, err
		}
		if x > 1<<40 || x < -(1<<40) {
			return 0, errSkip // keep products far from int64 overflow
		}
		v[i] = x
	}
	switch t.op {
	case "+":
		return v[0] + v[1], nil
	case "-":
		return v[0] - v[1], nil
	case "neg":
		return -v[0], nil
	case "*":
		return v[0] * v[1], nil
	case "/", "%", "ceil":
		if v[1] == 0 {
			return 0, errSkip
		}
		q, r := v[0]/v[1], v[0]%v[1]
		if r != 0 && (r < 0) != (v[1] < 0) {
			q--
			r += v[1]
		}
		switch t.op {
		case "/":
			return q, nil
		case "%":
			return r, nil
		}
		if r != 0 {
			q++
		}
		return q, nil
	case "min":
		return min(v[0], v[1]), nil
	case "max":
		return max(v[0], v[1]), nil
	}
	panic("unknown op " + t.op)
}

func (t *tree) String() string {
	switch t.op {
	case "const":
		return fmt.Sprint(t.val)
	case "sym":
		return t.name
	case "neg":
		return fmt.Sprintf("-(%v)", t.kids[0])
	case "min", "max", "ceil":
		return fmt.Sprintf("%s(%v, %v)", t.op, t.kids[0], t.kids[1])
	}
	return fmt.Sprintf("(%v %s %v)", t.kids[0], t.op, t.kids[1])
}

// build constructs the canonical Expr through the public API. With
// shuffle, commutative operands are swapped and sums are rebuilt in a
// different association, which must not change the result.
func (t *tree) build(r *rand.Rand, shuffle bool) Expr {
	switch t.op {
	case "const":
		return Const(t.val)
	case "sym":
		return Sym(t.name)
	}
	k := make([]Expr, len(t.kids))
	for i, kid := range t.kids {
		k[i] = kid.build(r, shuffle)
	}
	swap := shuffle && r.Intn(2) == 0
	switch t.op {
	case "+":
		if swap {
			return Sum(k[1], k[0])
		}
		return Add(k[0], k[1])
	case "-":
		if swap {
			return Add(Neg(k[1]), k[0])
		}
		return Sub(k[0], k[1])
	case "neg":
		if swap {
			return Mul(Const(-1), k[0])
		}
		return Neg(k[0])
	case "*":
		if swap {
			return Product(k[1], k[0])
		}
		return Mul(k[0], k[1])
	case "/":
		return FloorDiv(k[0], k[1])
	case "%":
		return Mod(k[0], k[1])
	case "ceil":
		return CeilDiv(k[0], k[1])
	case "min":
		if swap {
			return Min(k[1], k[0])
		}
		return Min(k[0], k[1])
	case "max":
		if swap {
			return MaxOf(k[1], k[0])
		}
		return Max(k[0], k[1])
	}
	panic("unknown op " + t.op)
}

var propSyms = []string{"a", "b", "c", "d"}

// randTree draws a small random tree; divisors are mostly small non-zero
// constants (including negative ones), sometimes whole subtrees.
func randTree(r *rand.Rand, depth int) *tree {
	if depth == 0 || r.Intn(4) == 0 {
		if r.Intn(3) == 0 {
			return &tree{op: "const", val: int64(r.Intn(9) - 3)}
		}
		return &tree{op: "sym", name: propSyms[r.Intn(len(propSyms))]}
	}
	ops := []string{"+", "+", "-", "*", "/", "/", "%", "%", "ceil", "min", "max", "neg"}
	op := ops[r.Intn(len(ops))]
	if op == "neg" {
		return &tree{op: op, kids: []*tree{randTree(r, depth-1)}}
	}
	left := randTree(r, depth-1)
	var right *tree
	switch {
	case (op == "/" || op == "%" || op == "ceil") && r.Intn(4) != 0:
		d := int64(r.Intn(8) + 1)
		if r.Intn(5) == 0 {
			d = -d
		}
		right = &tree{op: "const", val: d}
	case op == "*" && r.Intn(2) == 0:
		right = &tree{op: "const", val: int64(r.Intn(13) - 4)}
	default:
		right = randTree(r, depth-1)
	}
	return &tree{op: op, kids: []*tree{left, right}}
}

func randBinding(r *rand.Rand, hi int) Binding {
	b := Binding{}
	for _, s := range propSyms {
		b[s] = int64(r.Intn(hi + 1))
	}
	return b
}

// TestPropertyEval checks that canonicalisation preserves values, that
// printing round-trips, and that operand order does not matter.
func TestPropertyEval(t *testing.T) { checkPropertyEval(t, 1) }

func checkPropertyEval(t *testing.T, seed int64) {
	r := rand.New(rand.NewSource(seed))
	const trees, bindings = 3000, 40
	checked := 0
	for i := 0; i < trees; i++ {
		tr := randTree(r, 4)
		e := tr.build(r, false)
		if !e.IsValid() {
			// Only a divisor that is identically zero may invalidate a tree,
			// and then the naive evaluation must fail too.
			if _, err := tr.eval(randBinding(r, 50)); err == nil {
				t.Fatalf("%v: invalid (%v) but evaluates", tr, e.Err())
			}
			continue
		}
		if f := tr.build(r, true); !f.Equal(e) {
			t.Errorf("%v: order-dependent canonical form: %q vs %q", tr, e, f)
		}
		p, err := Parse(e.String())
		if err != nil || !p.Equal(e) {
			t.Errorf("%v: round trip of %q gave %q, %v", tr, e, p, err)
		}
		for j := 0; j < bindings; j++ {
			bind := randBinding(r, 50)
			want, err := tr.eval(bind)
			if err != nil {
				continue
			}
			got, err := e.Eval(bind)
			if err != nil || got != want {
				t.Fatalf("%v at %v: canonical %q = %d (%v), naive %d", tr, bind, e, got, err, want)
			}
			checked++
		}
	}
	if checked < trees*bindings/2 {
		t.Fatalf("only %d evaluations checked; generator skips too much", checked)
	}
}

// TestPropertySubstitute checks Substitute against evaluating the
// replacement first.
func TestPropertySubstitute(t *testing.T) { checkPropertySubstitute(t, 2) }

func checkPropertySubstitute(t *testing.T, seed int64) {
	r := rand.New(rand.NewSource(seed))
	for i := 0; i < 500; i++ {
		tr, rep := randTree(r, 3), randTree(r, 2)
		e, re := tr.build(r, false), rep.build(r, false)
		s := e.Substitute(map[string]Expr{"a": re})
		for j := 0; j < 20; j++ {
			bind := randBinding(r, 30)
			av, err := rep.eval(bind)
			if err != nil || av < 0 {
				continue // symbols stand for non-negative values
			}
			inner := Binding{"a": av, "b": bind["b"], "c": bind["c"], "d": bind["d"]}
			want, err := tr.eval(inner)
			if err != nil {
				continue
			}
			if !s.IsValid() {
				t.Fatalf("%v with a=%v: invalid %v", tr, rep, s.Err())
			}
			got, err := s.Eval(bind)
			if err != nil || got != want {
				t.Fatalf("%v with a=%v at %v: %q = %d (%v), want %d", tr, rep, bind, s, got, err, want)
			}
		}
	}
}

// relHolds reports whether rel is consistent with the values x and y.
func relHolds(rel Relation, x, y int64) bool {
	switch rel {
	case Equal:
		return x == y
	case Less:
		return x < y
	case LessEq:
		return x <= y
	case Greater:
		return x > y
	case GreaterEq:
		return x >= y
	}
	return true
}

// relatedPair draws a pair that is often decidable: a tree against itself
// shifted, scaled, divided, clamped or unrelated.
func relatedPair(r *rand.Rand) (*tree, *tree) {
	t := randTree(r, 3)
	u := randTree(r, 2)
	k := &tree{op: "const", val: int64(r.Intn(5))}
	switch r.Intn(8) {
	case 0:
		return t, &tree{op: "+", kids: []*tree{t, k}}
	case 1:
		return t, &tree{op: "*", kids: []*tree{t, {op: "const", val: int64(r.Intn(4) + 1)}}}
	case 2:
		return &tree{op: "/", kids: []*tree{t, {op: "const", val: int64(r.Intn(6) + 1)}}}, t
	case 3:
		return &tree{op: "min", kids: []*tree{t, u}}, t
	case 4:
		return &tree{op: "max", kids: []*tree{t, u}}, u
	case 5:
		return &tree{op: "%", kids: []*tree{t, {op: "const", val: int64(r.Intn(6) + 1)}}}, k
	case 6:
		return &tree{op: "+", kids: []*tree{t, u}}, t
	}
	return t, u
}

// TestPropertyCompare checks that no sampled binding contradicts Compare,
// CompareIn, Ratio or Range.
func TestPropertyCompare(t *testing.T) { checkPropertyCompare(t, 3) }

func checkPropertyCompare(t *testing.T, seed int64) {
	r := rand.New(rand.NewSource(seed))
	decided := 0
	bounds := Bounds{"a": {1, 8}, "b": {0, 3}, "c": {2, 40}}
	for i := 0; i < 3000; i++ {
		ta, tb := relatedPair(r)
		ea, eb := ta.build(r, false), tb.build(r, false)
		rel := Compare(ea, eb)
		relIn := CompareIn(ea, eb, bounds)
		if rel != Unknown {
			decided++
		}
		if rel != Unknown && relIn != Unknown && !rel.Implies(relIn) && !relIn.Implies(rel) {
			// Both are sound, so they must be compatible; e.g. <= and >= are
			// compatible only through ==, which a sound CompareIn would say.
			if !(rel == LessEq && relIn == GreaterEq) && !(rel == GreaterEq && relIn == LessEq) {
				t.Errorf("Compare(%q, %q) = %v but CompareIn = %v", ea, eb, rel, relIn)
			}
		}
		num, den, ratioOK := Ratio(ea, eb)
		lo, hi, _ := Sub(ea, eb).Range(bounds)
		for j := 0; j < 30; j++ {
			bind := randBinding(r, 50)
			va, errA := ta.eval(bind)
			vb, errB := tb.eval(bind)
			if errA != nil || errB != nil {
				continue
			}
			if !relHolds(rel, va, vb) {
				t.Fatalf("Compare(%q, %q) = %v, but at %v values are %d and %d", ea, eb, rel, bind, va, vb)
			}
			if ratioOK && va*den != vb*num {
				t.Fatalf("Ratio(%q, %q) = %d/%d, but at %v values are %d and %d", ea, eb, num, den, bind, va, vb)
			}
			// Resample the bounded symbols inside their bounds.
			for s, bd := range bounds {
				bind[s] = bd[0] + r.Int63n(bd[1]-bd[0]+1)
			}
			va, errA = ta.eval(bind)
			vb, errB = tb.eval(bind)
			if errA != nil || errB != nil {
				continue
			}
			if !relHolds(relIn, va, vb) {
				t.Fatalf("CompareIn(%q, %q) = %v, but at %v values are %d and %d", ea, eb, relIn, bind, va, vb)
			}
			if d := va - vb; d < lo || d > hi {
				t.Fatalf("Range(%q - %q) = [%d, %d], but at %v the difference is %d", ea, eb, lo, hi, bind, d)
			}
		}
	}
	if decided < 600 {
		t.Fatalf("Compare decided only %d of 3000 related pairs", decided)
	}
	t.Logf("Compare decided %d of 3000 pairs", decided)
}

// TestPropertyRatio checks that scaled copies are recognised.
func TestPropertyRatio(t *testing.T) { checkPropertyRatio(t, 4) }

func checkPropertyRatio(t *testing.T, seed int64) {
	r := rand.New(rand.NewSource(seed))
	for i := 0; i < 500; i++ {
		e := randTree(r, 3).build(r, false)
		if v, ok := e.Const(); !e.IsValid() || (ok && v == 0) {
			continue
		}
		p, q := int64(r.Intn(9)+1), int64(r.Intn(9)+1)
		n, d, ok := Ratio(Mul(e, Const(p)), Mul(e, Const(q)))
		g := gcd(p, q)
		if !ok || n != p/g || d != q/g {
			t.Fatalf("Ratio(%d*(%q), %d*(%q)) = %d/%d %v", p, e, q, e, n, d, ok)
		}
	}
}
