package quant

import "fmt"

// The ONNX operator `tl quantize` writes and the engine runs:
//
//	Y = tlite.MatMulQ(A, Wq[, bias])
//
// A is float [..., K]; Wq is a 1-D uint8 initializer holding one packed
// weight as MarshalBinary encodes it (header, codes, parameters, all
// 64-byte aligned, so a memory-mapped file hands the arrays to a device
// without a copy); bias, when present, is float [N]. Y is [..., N] of A's
// element type: Y = A * W + bias with W the [K, N] weight Wq dequantizes to.
// The attributes repeat what the header says, so that tools reading the
// graph alone (shape inference, viewers) know the product's shape:
// format ("e0m4" or "int4"), group, K and N. A reader must check that they
// agree with the header.
const (
	// OpDomain is the operator domain of tlite's own operators; a model
	// using one imports it at OpDomainVersion.
	OpDomain = "tlite"
	// OpDomainVersion is the opset version of OpDomain.
	OpDomainVersion = 1
	// OpMatMulQ is the 4-bit weight product.
	OpMatMulQ = "MatMulQ"
)

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
