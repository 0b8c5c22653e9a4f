package quant

import "testing"

func TestParseFormat(t *testing.T) {
	for _, f := range []Format{E0M4, Int4, FP16} {
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

// TestFourBit: FP16 is a format of the quantizer but no packed one, so a
// packed weight or a MatMulQ node may not carry it.
func TestFourBit(t *testing.T) {
	for f, want := range map[Format]bool{E0M4: true, Int4: true, FP16: false, 0: false} {
		if f.FourBit() != want {
			t.Errorf("%v.FourBit() = %v, want %v", f, f.FourBit(), want)
		}
	}
	if _, err := Quantize(make([]float32, 64), 32, 2, Options{Format: FP16, Group: 32}); err == nil {
		t.Error("Quantize to FP16 packed: no error")
	}
}
