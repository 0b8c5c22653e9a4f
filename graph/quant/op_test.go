package quant

import "testing"

func TestParseFormat(t *testing.T) {
	for _, f := range []Format{E0M4, Int4} {
		got, err := ParseFormat(f.String())
		if err != nil || got != f {
			t.Errorf("ParseFormat(%q) = %v, %v; want %v", f.String(), got, err, f)
		}
	}
	for _, s := range []string{"", "E0M4", "nf4", "format(3)"} {
		if _, err := ParseFormat(s); err == nil {
			t.Errorf("ParseFormat(%q): no error", s)
		}
	}
}
