package symshape

import (
	"fmt"
	"testing"
)

func TestUnclamp(t *testing.T) {
	cases := []struct {
		in     Expr
		want   string
		clamps string
	}{
		{Add(seq, c(1)), "seq + 1", "[]"},
		{Min(Add(past, seq), c(256)), "past + seq", "[past + seq <= 256]"},
		// GPT-2's causal-mask rows: rows past..past+seq of a 256-row table.
		{Max(Sub(Min(Add(past, seq), c(256)), Min(past, c(256))), c(0)), "seq",
			"[past + seq <= 256 past <= 256]"},
		{MinOf(x, y, c(7), c(9)), "min(x, y)", "[min(x, y) <= 7]"},
		{Max(x, c(3)), "max(x, 3)", "[]"},
		{FloorDiv(Min(x, c(64)), c(2)), "x/2", "[x <= 64]"},
		{Mul(Min(a, c(4)), Min(b, c(5))), "a*b", "[a <= 4 b <= 5]"},
	}
	for _, tc := range cases {
		got, cl := tc.in.Unclamp()
		if got.String() != tc.want {
			t.Errorf("Unclamp(%s) = %s, want %s", tc.in, got, tc.want)
		}
		var s []string
		for _, k := range cl {
			s = append(s, fmt.Sprintf("%s <= %d", k.Arg, k.Bound))
		}
		if fmt.Sprint(s) != tc.clamps {
			t.Errorf("Unclamp(%s) clamps %v, want %s", tc.in, s, tc.clamps)
		}
	}
	if _, cl := (Expr{}).Unclamp(); cl != nil {
		t.Errorf("an invalid Expr has no clamps")
	}
}
