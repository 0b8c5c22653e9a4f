package dtype

import (
	"math"
	"testing"
)

// Every half value must survive half->float32->half unchanged; this pins both
// converters against each other over the whole 16-bit space.
func TestHalfRoundTripAllBits(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := HalfToFloat32(h)
		if f != f {
			if back := Float32ToHalf(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back := Float32ToHalf(f); back != h {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
}

func TestHalfRounding(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00},
		{65504, 0x7bff},
		{65520, 0x7c00},                  // rounds up to infinity
		{1 + 1.0/2048, 0x3c00},           // exact tie, even stays
		{1 + 3.0/2048, 0x3c02},           // tie rounds to even
		{float32(math.Ldexp(1, -24)), 1}, // smallest subnormal
		{float32(math.Ldexp(1, -25)), 0}, // tie to even -> zero
		{float32(math.Ldexp(3, -26)), 1}, // above the tie
		{-2, 0xc000},
	}
	for _, c := range cases {
		if got := Float32ToHalf(c.in); got != c.want {
			t.Errorf("Float32ToHalf(%v) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

func TestBFloat16(t *testing.T) {
	if got := Float32ToBFloat16(1.00390625); got != 0x3f80 { // tie, even
		t.Errorf("tie: got %#04x", got)
	}
	if got := BFloat16ToFloat32(0x4049); got != 3.140625 {
		t.Errorf("got %v", got)
	}
	if Size := Float16.Size(); Size != 2 || Int64.Size() != 8 || String.Size() != 0 {
		t.Errorf("sizes wrong")
	}
}

func TestInt(t *testing.T) {
	data := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	cases := []struct {
		t    Type
		want int64
	}{{Int64, -1}, {Int32, -1}, {Uint32, 1<<32 - 1}, {Int16, -1}, {Uint16, 1<<16 - 1}, {Int8, -1}, {Uint8, 255}, {Bool, 1}}
	for _, c := range cases {
		if got, ok := c.t.Int(data, 0); !ok || got != c.want {
			t.Errorf("%v: got %d, %v; want %d", c.t, got, ok, c.want)
		}
	}
	if _, ok := Float32.Int(data, 0); ok {
		t.Errorf("float32 must not read as an integer")
	}
}
