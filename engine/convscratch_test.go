package engine

import (
	"fmt"
	"testing"

	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/symshape"
)

// TestConvScratchCoversRoute checks that the scratch a Conv step asks of
// the memory plan at Open is at least what kernels.Conv2D's route needs
// (ScratchElems) for the geometry, in fp32 and fp16 storage: the Winograd
// route's transforms (ResNet's 3x3 layers, odd and asymmetric padding,
// SAME and VALID), conv_flat's copy (too few channels for Winograd,
// stride 2, groups) and conv_dwf's (depthwise). Scratch short of Winograd's would silently run
// conv_flat instead.
func TestConvScratchCoversRoute(t *testing.T) {
	for _, c := range []struct {
		name         string
		x            [4]int // N, C, H, W
		k            int    // output channels
		kh, kw       int
		sh, dh       int
		pads         [4]int
		autoPad      string
		groups       int
		wantWinograd bool
	}{
		{"resnet 64@56", [4]int{1, 64, 56, 56}, 64, 3, 3, 1, 1, [4]int{1, 1, 1, 1}, "NOTSET", 1, true},
		{"resnet 512@7 b2", [4]int{2, 512, 7, 7}, 512, 3, 3, 1, 1, [4]int{1, 1, 1, 1}, "NOTSET", 1, true},
		{"odd asym", [4]int{2, 37, 13, 5}, 33, 3, 3, 1, 1, [4]int{0, 2, 1, 0}, "NOTSET", 1, true},
		{"same upper", [4]int{1, 32, 9, 7}, 32, 3, 3, 1, 1, [4]int{}, "SAME_UPPER", 1, true},
		{"valid", [4]int{1, 32, 6, 11}, 40, 3, 3, 1, 1, [4]int{5, 5, 5, 5}, "VALID", 1, true},
		{"few channels", [4]int{1, 3, 32, 32}, 64, 3, 3, 1, 1, [4]int{1, 1, 1, 1}, "NOTSET", 1, false},
		{"16 channels", [4]int{1, 16, 32, 32}, 64, 3, 3, 1, 1, [4]int{1, 1, 1, 1}, "NOTSET", 1, false},
		{"stride 2", [4]int{1, 64, 56, 56}, 128, 3, 3, 2, 1, [4]int{1, 1, 1, 1}, "NOTSET", 1, false},
		{"dilation 2", [4]int{1, 64, 20, 20}, 64, 3, 3, 1, 2, [4]int{2, 2, 2, 2}, "NOTSET", 1, false},
		{"groups 2", [4]int{1, 64, 20, 20}, 64, 3, 3, 1, 1, [4]int{1, 1, 1, 1}, "NOTSET", 2, false},
		// Depthwise: conv_dwf's padded copy (kernels' ScratchElems asks it
		// whatever the device; CPUs use it).
		{"depthwise 3x3 s2", [4]int{1, 72, 56, 56}, 72, 3, 3, 2, 1, [4]int{1, 1, 1, 1}, "NOTSET", 72, false},
		{"depthwise 5x5 odd b2", [4]int{2, 13, 7, 9}, 13, 5, 5, 1, 1, [4]int{2, 2, 2, 2}, "NOTSET", 13, false},
		{"depthwise same s2", [4]int{1, 24, 15, 15}, 24, 5, 5, 2, 1, [4]int{}, "SAME_UPPER", 24, false},
	} {
		for _, esz := range []int{4, 2} {
			sp := spatial{kh: c.kh, kw: c.kw, sh: c.sh, sw: c.sh, dh: c.dh, dw: c.dh, pads: c.pads, autoPad: c.autoPad}
			if c.autoPad == "VALID" {
				sp.pads = [4]int{}
			}
			shape := func(d ...int) []symshape.Expr {
				var s []symshape.Expr
				for _, v := range d {
					s = append(s, symshape.Const(int64(v)))
				}
				return s
			}
			x := &vinfo{shape: shape(c.x[:]...)}
			w := &vinfo{shape: shape(c.k, c.x[1]/c.groups, c.kh, c.kw)}
			e, ok := convScratch(x, w, nil, sp, c.groups, esz, false)
			if !ok {
				t.Fatalf("%s: no scratch asked", c.name)
			}
			got, ok := e.Const()
			if !ok {
				t.Fatalf("%s: scratch %v not constant for constant shapes", c.name, e)
			}
			pads := sp.padsFor(c.x[2], c.x[3])
			p := kernels.ConvParams{N: c.x[0], C: c.x[1], H: c.x[2], W: c.x[3], OutC: c.k, KH: c.kh, KW: c.kw,
				StrideH: c.sh, StrideW: c.sh, DilationH: c.dh, DilationW: c.dh,
				PadTop: pads[0], PadLeft: pads[1], PadBottom: pads[2], PadRight: pads[3], Groups: c.groups}
			what := fmt.Sprintf("%s/esz %d", c.name, esz)
			if p.WinogradRoute() != c.wantWinograd {
				t.Errorf("%s: WinogradRoute %v, want %v", what, p.WinogradRoute(), c.wantWinograd)
			}
			if need := int64(p.ScratchElems() * esz); got < need {
				t.Errorf("%s: scratch %d bytes, the route needs %d", what, got, need)
			}
			if !c.wantWinograd {
				continue
			}
			// The weight stored transformed at Open (winogradWeight): the
			// route then needs no room for U, and has no fallback.
			e, ok = convScratch(x, w, nil, sp, c.groups, esz, true)
			if !ok {
				t.Fatalf("%s: no scratch asked with a transformed weight", what)
			}
			got, ok = e.Const()
			if !ok {
				t.Fatalf("%s: scratch %v not constant for constant shapes", what, e)
			}
			p.WinogradWeight = true
			if need := int64(p.ScratchElems() * esz); got < need {
				t.Errorf("%s/transformed weight: scratch %d bytes, the route needs %d", what, got, need)
			}
		}
	}
}
