package symshape

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

var (
	seq   = Sym("seq")
	past  = Sym("past")
	heads = Sym("heads")
	x     = Sym("x")
	y     = Sym("y")
	a     = Sym("a")
	b     = Sym("b")
)

func c(v int64) Expr { return Const(v) }

// TestSimplificationRules checks each rewrite the package promises, with
// the expected canonical form written out by hand.
func TestSimplificationRules(t *testing.T) {
	cases := []struct {
		name string
		got  Expr
		want string
	}{
		{"exact division by constant", FloorDiv(Mul(seq, c(4096)), c(4096)), "seq"},
		{"exact division by product of constants", FloorDiv(Mul(seq, c(4096)), Mul(c(32), c(128))), "seq"},
		{"exact division leaves quotient", FloorDiv(Mul(seq, c(4096)), c(128)), "32*seq"},
		{"pull out multiples of k", FloorDiv(Add(Mul(a, c(4)), b), c(4)), "a + b/4"},
		{"pull out multiples keeps others", FloorDiv(Sum(Mul(a, c(8)), Mul(b, c(3)), c(5)), c(4)), "2*a + (3*b + 5)/4"},
		{"mod of multiple", Mod(Mul(a, c(4)), c(4)), "0"},
		{"mod drops multiples", Mod(Add(Mul(a, c(4)), b), c(4)), "b%4"},
		{"mod reduces coefficients", Mod(Add(Mul(x, c(5)), c(7)), c(4)), "(x + 3)%4"},
		{"div by one", FloorDiv(x, c(1)), "x"},
		{"mod by one", Mod(x, c(1)), "0"},
		{"div by minus one", FloorDiv(x, c(-1)), "-x"},
		{"nested division", FloorDiv(FloorDiv(x, c(4)), c(8)), "x/32"},
		{"nested division with offset", FloorDiv(Add(FloorDiv(x, c(4)), c(1)), c(8)), "(x + 4)/32"},
		{"nested mod", Mod(Mod(x, c(8)), c(4)), "x%4"},
		{"mod of mod in range", Mod(Mod(x, c(4)), c(8)), "x%4"},
		{"div of small remainder", FloorDiv(Mod(x, c(4)), c(4)), "0"},
		{"common factor in division", FloorDiv(Add(Mul(x, c(2)), c(2)), c(4)), "(x + 1)/2"},
		{"common factor in mod", Mod(Mul(x, c(2)), c(4)), "2*(x%2)"},
		{"min of same", Min(x, x), "x"},
		{"max decided", Max(Add(a, c(1)), a), "a + 1"},
		{"min decided", Min(Add(a, c(1)), a), "a"},
		{"min undecidable stays", Min(x, c(5)), "min(x, 5)"},
		{"min with zero", Min(x, c(0)), "0"},
		{"max with zero", Max(x, c(0)), "x"},
		{"min pulls common terms", Min(Add(x, c(1)), Add(y, c(1))), "min(x, y) + 1"},
		{"max pulls common factor", Max(Mul(x, c(2)), Add(Mul(y, c(2)), c(2))), "2*max(x, y + 1)"},
		{"min flattens", Min(x, Min(Add(y, c(1)), Add(b, c(1)))), "min(b + 1, x, y + 1)"},
		{"cancellation", Sub(Add(past, seq), past), "seq"},
		{"like terms", Add(Mul(c(2), seq), Mul(c(3), seq)), "5*seq"},
		{"const div neg", FloorDiv(c(-7), c(2)), "-4"},
		{"const mod neg", Mod(c(-7), c(2)), "1"},
		{"const div neg divisor", FloorDiv(c(7), c(-2)), "-4"},
		{"const mod neg divisor", Mod(c(7), c(-2)), "-1"},
		{"const mod both neg", Mod(c(-7), c(-2)), "-1"},
		{"symbolic exact division", FloorDiv(Mul(seq, heads), heads), "seq"},
		{"symbolic exact division with coefficient", FloorDiv(Mul(Mul(seq, heads), c(6)), Mul(heads, c(3))), "2*seq"},
		{"symbolic division pulls out", FloorDiv(Add(Mul(seq, heads), past), heads), "seq + past/heads"},
		{"symbolic division stays", FloorDiv(seq, heads), "seq/heads"},
		{"symbolic exact polynomial ratio", FloorDiv(Mul(c(3), Add(seq, past)), Add(seq, past)), "3"},
		{"symbolic mod of multiple", Mod(Mul(seq, heads), heads), "0"},
		{"symbolic mod stays", Mod(seq, heads), "seq%heads"},
		{"symbolic nested mod", Mod(Mod(seq, heads), heads), "seq%heads"},
		{"ceil by constant", CeilDiv(seq, c(16)), "(seq + 15)/16"},
		{"ceil exact", CeilDiv(Mul(seq, c(16)), c(16)), "seq"},
		{"ceil const", CeilDiv(c(-7), c(2)), "-3"},
		{"ceil by symbol", CeilDiv(Mul(seq, heads), heads), "seq"},
		{"expansion", Mul(Add(seq, past), Add(seq, past)), "past*past + 2*past*seq + seq*seq"},
		{"difference of squares", Mul(Add(seq, past), Sub(seq, past)), "-past*past + seq*seq"},
		{"negative leading div", Neg(FloorDiv(x, c(4))), "-(x/4)"},
		{"scaled div", Mul(c(2), FloorDiv(x, c(4))), "2*(x/4)"},
		{"product with div", Mul(y, FloorDiv(x, c(4))), "y*(x/4)"},
	}
	for _, tc := range cases {
		if !tc.got.IsValid() {
			t.Errorf("%s: invalid result: %v", tc.name, tc.got.Err())
			continue
		}
		if tc.got.String() != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestPrintParseRoundTrip(t *testing.T) {
	srcs := []string{
		"0", "7", "-7", "seq", "past + seq", "seq - 1", "-seq + 1", "2*seq*seq - 3*past + 5",
		"x/4", "(x + 1)/4", "-x/4", "-(x/4)", "2*(x/4)", "y*(x/4)", "x%4", "(x + 3)%4", "2*(x%2)",
		"x/heads", "x/(heads + 1)", "x/(2*heads)", "x%(heads + 1)", "min(x, 5)", "max(x, y + 1)",
		"2*min(x, y) + 1", "min(a, b, x)", "(x + y)/min(x, 3)", "x/4/y", "x%4/y", "(x/4)%y",
		"-9223372036854775808", "9223372036854775807*x", "min(x, y)*max(x, y)", "x/(y/3)",
		"-2*x/4", "x // 4", "max(x/4, y%3, 7)", "min(max(x, 3), y)", "-min(x, y)", "-(x%5)/y",
	}
	for _, s := range srcs {
		e, err := Parse(s)
		if err != nil {
			t.Errorf("Parse(%q): %v", s, err)
			continue
		}
		f, err := Parse(e.String())
		if err != nil {
			t.Errorf("Parse(String(%q) = %q): %v", s, e, err)
			continue
		}
		if !f.Equal(e) {
			t.Errorf("round trip of %q: %q reparsed as %q", s, e, f)
		}
	}
}

func TestParseSemantics(t *testing.T) {
	bind := Binding{"x": 7, "y": 3}
	cases := []struct {
		src  string
		want int64
	}{
		{"-x/2", -4},     // unary minus binds tighter: (-7)//2
		{"-(x/2)", -3},   // explicit grouping
		{"x - 7/2", 4},   // binary minus applies to the quotient
		{"2*x/4", 3},     // left associative: (14)//4
		{"2*(x/4)", 2},   //
		{"x % y * 2", 2}, // (7%3)*2
		{"x//2", 3},
		{"min(x, y, 5)", 3},
		{"max(x, y, 5)", 7},
		{"x - y - 1", 3},
		{"+x", 7},
	}
	for _, tc := range cases {
		e, err := Parse(tc.src)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.src, err)
			continue
		}
		got, err := e.Eval(bind)
		if err != nil || got != tc.want {
			t.Errorf("%q (canonical %q) = %d, %v; want %d", tc.src, e, got, err, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, s := range []string{"", "x +", "(x", "x)", "min(x)", "min", "3 $ 4", "x/0", "x%(2-2)",
		"99999999999999999999", "max(x,", "x y", "min(x,y"} {
		if e, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %q, want error", s, e)
		}
	}
}

func TestInvalid(t *testing.T) {
	var zero Expr
	if zero.IsValid() || zero.Err() == nil {
		t.Fatal("zero Expr must be invalid with a reason")
	}
	dz := FloorDiv(x, c(0))
	if dz.IsValid() || !strings.Contains(dz.Err().Error(), "division by zero") {
		t.Fatalf("x/0: valid=%v err=%v", dz.IsValid(), dz.Err())
	}
	if Mod(x, c(0)).IsValid() || CeilDiv(x, c(0)).IsValid() {
		t.Fatal("modulo and ceil division by 0 must be invalid")
	}
	// Invalidity propagates and keeps the first reason.
	p := Add(Mul(dz, x), c(1))
	if p.IsValid() || p.Err() != dz.Err() {
		t.Fatalf("propagation: %v", p.Err())
	}
	if dz.Equal(dz) {
		t.Fatal("invalid expressions must not be Equal")
	}
	if Add(zero, x).IsValid() {
		t.Fatal("zero operand must give invalid")
	}
	ov := Mul(Const(math.MaxInt64), Const(2))
	if ov.IsValid() || !strings.Contains(ov.Err().Error(), "overflow") {
		t.Fatalf("overflow: %v", ov.Err())
	}
	if Add(Const(math.MaxInt64), Const(1)).IsValid() || Neg(Const(math.MinInt64)).IsValid() {
		t.Fatal("overflowing add/neg must be invalid")
	}
	if Sym("2x").IsValid() || Sym("min").IsValid() || Sym("").IsValid() || Sym("a-b").IsValid() {
		t.Fatal("bad symbol names must be invalid")
	}
	if MinOf().IsValid() {
		t.Fatal("MinOf() must be invalid")
	}
	if !Sym("_a9").IsValid() {
		t.Fatal("_a9 is a valid name")
	}
}

func TestConstAndSymbols(t *testing.T) {
	if v, ok := Add(c(3), c(4)).Const(); !ok || v != 7 {
		t.Fatalf("3+4 = %d, %v", v, ok)
	}
	if _, ok := seq.Const(); ok {
		t.Fatal("seq is not a constant")
	}
	if v, ok := Sub(seq, seq).Const(); !ok || v != 0 {
		t.Fatal("seq - seq must be constant 0")
	}
	e := MustParse("min(seq, 2048)*heads + past/b + seq")
	if got, want := e.Symbols(), []string{"b", "heads", "past", "seq"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Symbols = %v, want %v", got, want)
	}
	if n, ok := seq.SymName(); !ok || n != "seq" {
		t.Fatal("SymName(seq)")
	}
	if _, ok := Add(seq, c(1)).SymName(); ok {
		t.Fatal("seq+1 is not a symbol")
	}
}

func TestEval(t *testing.T) {
	e := MustParse("(seq + past)*heads/4 + seq%3 - min(seq, 5) + max(past, 2)")
	got, err := e.Eval(Binding{"seq": 10, "past": 6, "heads": 3})
	if err != nil {
		t.Fatal(err)
	}
	// (16*3)//4 + 10%3 - 5 + 6 = 12 + 1 - 5 + 6
	if got != 14 {
		t.Fatalf("got %d, want 14", got)
	}
	if _, err := e.Eval(Binding{"seq": 1, "heads": 1}); err == nil || !strings.Contains(err.Error(), `"past"`) {
		t.Fatalf("unbound symbol error should name past: %v", err)
	}
	if _, err := MustParse("x/y").Eval(Binding{"x": 1, "y": 0}); err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("division by zero: %v", err)
	}
	if _, err := MustParse("x*x").Eval(Binding{"x": 1 << 32}); err == nil || !strings.Contains(err.Error(), "overflow") {
		t.Fatalf("overflow: %v", err)
	}
	if _, err := MustParse("x + 1").Eval(Binding{"x": math.MaxInt64}); err == nil {
		t.Fatal("add overflow must fail")
	}
	if v, err := MustParse("x/(0 - y)").Eval(Binding{"x": 7, "y": 2}); err != nil || v != -4 {
		t.Fatalf("7//-2 = %d, %v", v, err)
	}
}

func TestSubstitute(t *testing.T) {
	e := MustParse("(seq*heads + past)/heads")
	if got := e.Substitute(map[string]Expr{"heads": c(32)}).String(); got != "seq + past/32" {
		t.Fatalf("got %q", got)
	}
	if got := e.Substitute(map[string]Expr{"heads": c(4), "seq": c(3), "past": c(9)}).String(); got != "5" {
		t.Fatalf("got %q", got)
	}
	if got := MustParse("min(seq, 2048)").Substitute(map[string]Expr{"seq": MustParse("x + 4096")}).String(); got != "2048" {
		t.Fatalf("got %q", got)
	}
	if e.Substitute(map[string]Expr{"heads": c(0)}).IsValid() {
		t.Fatal("substituting a zero divisor must be invalid")
	}
	if !e.Substitute(map[string]Expr{"other": c(1)}).Equal(e) {
		t.Fatal("unrelated substitution must be identity")
	}
}

func TestCompare(t *testing.T) {
	cases := []struct {
		a, b string
		want Relation
	}{
		{"seq", "seq", Equal},
		{"seq + 1", "seq", Greater},
		{"seq", "seq + 1", Less},
		{"past + seq", "seq", GreaterEq},
		{"seq", "past + seq", LessEq},
		{"4*seq", "seq", GreaterEq},
		{"seq*seq", "seq", Unknown},
		{"seq", "past", Unknown},
		{"seq%4", "4", Less},
		{"seq%4", "3", LessEq},
		{"seq/4", "seq", LessEq},
		{"min(seq, 2048)", "2048", LessEq},
		{"max(seq, 1)", "0", Greater},
		{"seq - past", "0", Unknown},
		{"3", "5", Less},
		{"(seq + 3)/4", "0", GreaterEq},
		{"seq*heads + 1", "0", Greater},
	}
	for _, tc := range cases {
		if got := Compare(MustParse(tc.a), MustParse(tc.b)); got != tc.want {
			t.Errorf("Compare(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	bounds := Bounds{"seq": {1, 2048}, "past": {0, 4096}}
	in := []struct {
		a, b string
		want Relation
	}{
		{"seq", "2048", LessEq},
		{"seq", "4096", Less},
		{"seq*seq", "seq", GreaterEq},
		{"seq", "0", Greater},
		{"past + seq", "6144", LessEq},
		{"seq - past", "2049", Less},
		{"seq", "past", Unknown},
		{"x", "0", GreaterEq}, // unbounded symbols keep the default [0, inf)
	}
	for _, tc := range in {
		if got := CompareIn(MustParse(tc.a), MustParse(tc.b), bounds); got != tc.want {
			t.Errorf("CompareIn(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	if Compare(Expr{}, seq) != Unknown {
		t.Error("invalid operands compare Unknown")
	}
}

func TestRelation(t *testing.T) {
	if !Less.Implies(LessEq) || !Equal.Implies(GreaterEq) || LessEq.Implies(Less) || Unknown.Implies(Unknown) {
		t.Fatal("Implies")
	}
	names := map[Relation]string{Unknown: "unknown", Equal: "==", Less: "<", LessEq: "<=", Greater: ">", GreaterEq: ">="}
	for r, s := range names {
		if r.String() != s {
			t.Errorf("%d.String() = %q, want %q", r, r.String(), s)
		}
	}
}

func TestRatio(t *testing.T) {
	cases := []struct {
		a, b     string
		num, den int64
		ok       bool
	}{
		{"4*seq", "seq", 4, 1, true},
		{"seq", "4*seq", 1, 4, true},
		{"2*x + 2", "3*x + 3", 2, 3, true},
		{"-2*x", "x", -2, 1, true},
		{"x", "-2*x", -1, 2, true},
		{"0", "seq", 0, 1, true},
		{"seq", "0", 0, 0, false},
		{"seq + 1", "seq", 0, 0, false},
		{"2*x + 2", "2*x + 3", 0, 0, false},
		{"seq*heads*4096", "seq*heads*128", 32, 1, true},
		{"7", "3", 7, 3, true},
	}
	for _, tc := range cases {
		n, d, ok := Ratio(MustParse(tc.a), MustParse(tc.b))
		if ok != tc.ok || (ok && (n != tc.num || d != tc.den)) {
			t.Errorf("Ratio(%s, %s) = %d/%d %v, want %d/%d %v", tc.a, tc.b, n, d, ok, tc.num, tc.den, tc.ok)
		}
	}
}

func TestRangeAndMaxValue(t *testing.T) {
	bounds := Bounds{"seq": {1, 2048}, "past": {0, 2047}, "heads": {32, 32}}
	cases := []struct {
		src    string
		lo, hi int64
		ok     bool
	}{
		{"seq", 1, 2048, true},
		{"seq*heads*128", 4096, 2048 * 32 * 128, true},
		{"past + seq", 1, 4095, true},
		{"seq - past", 1 - 2047, 2048, true},
		{"(seq + 15)/16", 1, 128, true},
		{"seq%16", 0, 15, true},
		{"min(seq, 100)", 1, 100, true},
		{"max(seq, 4000)", 4000, 4000, true},
		{"seq*x", 0, math.MaxInt64, false},
		{"-x", math.MinInt64, 0, false},
		{"seq*seq - 2*seq + 1", 1 - 2*2048 + 1, 2048*2048 + 1 - 2, true},
	}
	for _, tc := range cases {
		lo, hi, ok := MustParse(tc.src).Range(bounds)
		if lo != tc.lo || hi != tc.hi || ok != tc.ok {
			t.Errorf("Range(%s) = [%d, %d] %v, want [%d, %d] %v", tc.src, lo, hi, ok, tc.lo, tc.hi, tc.ok)
		}
	}
	kv := MustParse("2*heads*(past + seq)*128*2") // K and V, fp16
	if v, ok := kv.MaxValue(bounds); !ok || v != 2*32*4095*128*2 {
		t.Fatalf("MaxValue = %d, %v", v, ok)
	}
	if _, ok := MustParse("seq*y").MaxValue(bounds); ok {
		t.Fatal("unbounded y has no max")
	}
	if _, _, ok := (Expr{}).Range(nil); ok {
		t.Fatal("invalid Range must not be ok")
	}
}

// TestOrderIndependence builds the same expressions in different orders.
func TestOrderIndependence(t *testing.T) {
	pairs := [][2]Expr{
		{Add(a, b), Add(b, a)},
		{Mul(a, b), Mul(b, a)},
		{Add(Add(a, b), x), Add(a, Add(b, x))},
		{Mul(Mul(a, b), x), Mul(a, Mul(b, x))},
		{Mul(a, Add(b, x)), Add(Mul(a, b), Mul(x, a))},
		{Sum(a, b, x, c(3)), Sum(c(3), x, b, a)},
		{Product(a, c(2), b), Product(b, a, c(2))},
		{Min(a, b), Min(b, a)},
		{Max(Max(a, b), x), Max(a, Max(x, b))},
		{Min(Min(a, Add(b, c(1))), Add(x, c(1))), Min(a, Min(Add(b, c(1)), Add(x, c(1))))},
		{FloorDiv(Add(a, b), c(4)), FloorDiv(Add(b, a), c(4))},
		{Mod(Add(Mul(a, c(3)), b), c(5)), Mod(Add(b, Mul(c(3), a)), c(5))},
		{Min(Add(a, x), Add(b, x)), Add(Min(b, a), x)},
		{Mul(Sub(a, b), Sub(a, b)), Sum(Mul(a, a), Mul(b, b), Mul(c(-2), Mul(b, a)))},
	}
	for i, p := range pairs {
		if !p[0].Equal(p[1]) {
			t.Errorf("pair %d: %q != %q", i, p[0], p[1])
		}
	}
}
