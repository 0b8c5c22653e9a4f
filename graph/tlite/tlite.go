// Package tlite is the one home of tlite's own ONNX operator domain: its
// name, its version, and the schema of each operator in it. The fusion
// passes (engine/fuse), the quantizer (graph/quant/qonnx) and the KV-cache
// rewrite make these nodes; shape inference (symshape/infer/tlite_*.go)
// derives their shapes; the engine lowers them (engine/lower_*.go). All of
// them name the ops through these constants.
//
// The package imports nothing, so every layer may use it.
package tlite

// Domain is the operator domain of tlite's operators; a model that uses
// one imports it at Version.
const Domain = "tlite"

// Version is the opset version of Domain.
const Version = 1

// The operators. Inputs in brackets are optional; "sum?" is an output
// that may be left unread.
const (
	// RMSNorm(x, [scale]) -> y normalises the last axis by its root mean
	// square; attribute epsilon.
	RMSNorm = "RMSNorm"
	// AddRMSNorm(a, b, [scale]) -> sum?, y is y = RMSNorm(a + b), also
	// writing the sum (the residual stream).
	AddRMSNorm = "AddRMSNorm"
	// AddLayerNorm(a, b, scale, [bias]) -> sum?, y is LayerNormalization of
	// a + b; attributes axis, epsilon.
	AddLayerNorm = "AddLayerNorm"
	// MatMulBias(a, b, [bias]) -> y is y = alpha*(a@b) + beta*bias with
	// numpy matmul broadcasting; attributes alpha, beta.
	MatMulBias = "MatMulBias"
	// Attention(q, k, v, [mask]) -> o is scaled-dot-product attention with
	// grouped-query K/V; attributes scale, causal, q_perm, k_perm, v_perm,
	// o_perm (engine/fuse/attention.go documents them).
	Attention = "Attention"
	// ConvAct(x, w, [bias], [residual], [scale]) -> y is an ONNX Conv
	// (same first three inputs and attributes) followed by an activation
	// in the convolution's epilogue: attribute activation ("Relu",
	// "Clip", "HardSwish", "HardSigmoid", "SiLU", "LeakyRelu", or "" for
	// none) with act_alpha and act_beta (Clip's bounds, HardSigmoid's
	// alpha and beta, LeakyRelu's alpha). residual, of y's shape, is added
	// before the activation: y = act(conv(x) + bias + residual). scale,
	// [N, C, 1, 1], multiplies the input's channels before a 1x1
	// convolution: conv(x * scale).
	ConvAct = "ConvAct"
	// FusedElementwise(inputs...) -> outputs runs the GRAPH attribute body,
	// a chain of element-wise ops, as one kernel.
	FusedElementwise = "FusedElementwise"
	// KVWrite(new, slots) -> view writes new K or V rows into a cache the
	// node owns, at the given slots, and returns a view of its first
	// `length` slots as [1, length, heads, head_dim]; attributes capacity,
	// pad, length, cache, new_perm (engine/fuse/kvcache.go).
	KVWrite = "KVWrite"
	// MatMulQ(A, Wq, [bias]) -> Y is the 4-bit weight product `tl quantize`
	// writes: A is float [..., K]; Wq a 1-D uint8 initializer holding one
	// packed weight (graph/quant's header, codes and parameters, each
	// 64-byte aligned, so a memory-mapped file hands the arrays to a device
	// without a copy); bias float [N]. Y is [..., N] of A's type. The
	// attributes format ("e0m4" or "int4"), group, K and N repeat the
	// header, so that tools reading the graph alone know the shape; a
	// reader must check that they agree with it.
	MatMulQ = "MatMulQ"
	// MatMulJoin(x, W_1..W_S, [bias_1..bias_S]) -> y_1..y_S is S products
	// of one activation x [..., K] with constant weights, run as one:
	// y_s = alpha*(x @ W_s) + beta*bias_s. Attributes ns (N of each
	// product), K, and either alpha and beta (W_s float [K, N_s]) or format
	// and group (W_s a MatMulQ packed weight). engine/fuse/matmuljoin.go
	// makes it; the engine concatenates the weights at Open.
	MatMulJoin = "MatMulJoin"
	// Rotary(x, cos, sin, [x2]) -> y, [y2] is the rotary position
	// embedding x*cos + rotate_half(x)*sin over the first rotary_dim
	// elements of x's last axis, rotate_half(v) = concat(-v[h:], v[:h])
	// with h = rotary_dim/2; the rest of each row is copied. cos and sin
	// broadcast to x's shape with its last axis cut to rotary_dim; x has
	// rank 1 to 4. x2, when present, is rotated the same way into y2 (a
	// layer's keys beside its queries). Attribute rotary_dim (even, at
	// most the last axis).
	Rotary = "Rotary"
)

// Key is op as the engine's registries key it: "tlite.<op>".
func Key(op string) string { return Domain + "." + op }
