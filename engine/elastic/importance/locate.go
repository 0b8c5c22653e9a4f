// Package importance computes the forward-only importance proxy of an
// elastic build (shared/systems-spec.md §3a.4, issue 11) for a decoder
// exported as ONNX without its PyTorch source: calibration tokens run
// through tlite itself, and each unit is scored by the magnitude of what it
// feeds into the layer's output product times the norm of the weights it
// feeds through.
//
//   - A query head h: Σ over the head's channels j of mean_t |a_tj| ·
//     ||W_o[j, :]||₂, where a is the attention output (the input of the O
//     product, the head's head_dim columns) and W_o the O product's weight
//     as ONNX stores it ([q_dim, dim], so a channel is a row).
//   - An FFN neuron i: mean_t |act(gate)·up|_ti · ||W_down[i, :]||₂.
//   - A KV group: the sum of its query heads' scores (how elastic.py groups
//     the Taylor scores; the proxy has no separate K/V term).
//
// The means run over every calibration token. The scores are written to a
// JSON file (Write) that models/elastic/elastic.py build --importance-from
// consumes in place of its first-order Taylor scores, so the rest of the
// offline step (levels, anchors, permutation, elastic.json) is unchanged.
// The file and elastic.json label the method as a forward-only proxy.
package importance

import (
	"fmt"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/graph"
)

// Layer names one decoder layer's products: the weights (initializer names)
// of Q, K, V, O, gate, up and down, as the engine's elastic binding takes
// them (so a located layer can be bound as it is), and the values the O and
// down products read (their A operands), whose magnitudes the proxy
// averages.
type Layer struct {
	engine.ElasticLayer
	OIn, DownIn string
}

// roles is the forward order of a llama-style layer's products.
var roles = [7]string{"q", "k", "v", "o", "gate", "up", "down"}

// constMatMuls lists the MatMul nodes of g whose B operand is a constant
// matrix, in g's (topological) order.
func constMatMuls(g *graph.Graph) []*graph.Node {
	var out []*graph.Node
	for _, n := range g.Nodes {
		if n.OpType != "MatMul" || n.Domain != "" || len(n.Inputs) != 2 || n.Inputs[1] == nil {
			continue
		}
		if b := n.Inputs[1]; b.Const != nil && b.Producer == nil && len(b.Const.Dims) == 2 {
			out = append(out, n)
		}
	}
	return out
}

// feedsSigmoid reports whether v reaches a Sigmoid directly (SiLU exported
// as x·sigmoid(x)) or is read by a Silu/Swish-like op.
func feedsSigmoid(v *graph.Value) bool {
	for _, c := range v.Consumers {
		switch c.OpType {
		case "Sigmoid", "Silu", "Swish":
			return true
		}
	}
	return false
}

// Locate finds the decoder layers of an exported llama-style graph (the
// structure of models/export/llama.py, which elastic.py's loader reads the
// same way): the MatMuls with a constant weight come seven per layer in the
// forward order q, k, v, o, gate, up, down, followed by the LM head; the
// gate's output must feed the SiLU's Sigmoid. A graph of another shape (a
// quantized model's tlite.MatMulQ, fused QKV, GELU MLP) is refused with the
// reason.
func Locate(g *graph.Graph) ([]Layer, error) {
	if g == nil {
		return nil, fmt.Errorf("importance: no graph")
	}
	mms := constMatMuls(g)
	for _, n := range g.Nodes {
		if n.OpType == "MatMulQ" {
			return nil, fmt.Errorf("importance: the model has 4-bit products (%s); score the fp32 model it was quantized from", n.Name)
		}
	}
	if len(mms) < 8 || (len(mms)-1)%7 != 0 {
		return nil, fmt.Errorf("importance: found %d MatMuls with a constant weight; a llama-style decoder of L layers has 7·L + 1 (q, k, v, o, gate, up, down per layer, then the LM head)", len(mms))
	}
	nl := (len(mms) - 1) / 7
	layers := make([]Layer, nl)
	for l := range layers {
		r := mms[7*l : 7*l+7]
		if !feedsSigmoid(r[4].Outputs[0]) {
			return nil, fmt.Errorf("importance: layer %d: the product taken for gate (%s) does not feed a Sigmoid (SiLU); not a llama-style SwiGLU layer", l, r[4].Name)
		}
		if feedsSigmoid(r[5].Outputs[0]) {
			return nil, fmt.Errorf("importance: layer %d: the product taken for up (%s) feeds a Sigmoid; the layer's order is not q, k, v, o, gate, up, down", l, r[5].Name)
		}
		w := func(i int) string { return r[i].Inputs[1].Name }
		layers[l] = Layer{ElasticLayer: engine.ElasticLayer{Q: w(0), K: w(1), V: w(2), O: w(3), Gate: w(4), Up: w(5), Down: w(6)},
			OIn: r[3].Inputs[0].Name, DownIn: r[6].Inputs[0].Name}
		for i, role := range roles {
			if r[i].Inputs[0] == nil || r[i].Inputs[0].Const != nil {
				return nil, fmt.Errorf("importance: layer %d %s (%s) has a constant input", l, role, r[i].Name)
			}
		}
	}
	return layers, nil
}
