package quant

import "fmt"

// The packed weight is what tlite.MatMulQ reads (graph/tlite documents the
// operator): one uint8 initializer as MarshalBinary encodes it.

// ParseFormat reads a format name as reports, the command line and
// MatMulQ's format attribute spell it ("e0m4", "int4", "fp16"). A MatMulQ
// reader must also check FourBit.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "e0m4":
		return E0M4, nil
	case "int4":
		return Int4, nil
	case "fp16":
		return FP16, nil
	}
	return 0, fmt.Errorf("quant: unknown weight format %q (want e0m4, int4 or fp16)", s)
}
