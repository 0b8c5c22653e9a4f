package engine

import (
	"fmt"
	"strings"

	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/kernels"
	"github.com/tlite/tlite/opencl"
)

// Elastic sub-models (shared/systems-spec.md §3, hook H5).
//
// A model whose attention heads and MLP neurons were reordered offline by
// importance (models/elastic) runs a smaller sub-model as a prefix of each
// weight. The choice made here is an engine-side override of the step
// arguments rather than head counts fed to the graph as run-time inputs:
// the exported graph reshapes the projections to [b, s, n_heads, head_dim]
// with n_heads a constant, and shape inference, the memory plan and the
// fused attention's layout are all derived from those full shapes. The
// binding leaves every shape (and so every buffer, stride and plan) at its
// 100% size and changes only the active sizes the products and attention
// are launched with: N of the Q, K, V, gate and up products, K of the O and
// down products (their operands keep the full row strides), and the query
// and KV head counts of attention. A sub-model therefore reads the first
// columns of each activation row and the top-left corner of each weight;
// the columns past the prefix hold whatever the buffer held and are never
// read by a product or attention.
//
// What still runs at full width: the element-wise work between the
// products (RoPE on the whole Q/K rows, SiLU(gate)·up over the whole FFN
// row), the transposes of Q/K/V and the KV-cache write of every KV head.
// These are a small share of the time next to the products; the cache rows
// of inactive KV heads are stale, so a level may only be raised at the
// start of a sequence (a new prompt), which is how ELMS switches.

// ElasticLayer names one decoder layer's elastic weights: the initializer
// names of the Q, K, V, O, gate, up and down products' B operands (a
// weight quantized by qonnx is found through its packed "<name>.<format>").
type ElasticLayer struct {
	Q, K, V, O, Gate, Up, Down string
}

// ElasticWidth is a layer's active size: query heads, KV heads and FFN
// width. QHeads/KVHeads must be the model's group size (heads per KV head).
type ElasticWidth struct {
	QHeads, KVHeads, FFN int
}

// unitLimit is one step's active-size override; zero fields mean the full
// size. The session's exec carries the current instruction's limit to its
// lowering (see Session.exec).
type unitLimit struct {
	n, k           int // products: active N (output columns) and K
	heads, kvHeads int // attention
}

// matmul shrinks a product launched at its full size to the active N and
// K, keeping the full row strides so that the same buffers are read and
// written in place.
func (u *unitLimit) matmul(p *kernels.MatMulParams) {
	if u == nil || (u.n == 0 && u.k == 0) {
		return
	}
	if p.LDA == 0 {
		if p.TransA {
			p.LDA = p.M
		} else {
			p.LDA = p.K
		}
	}
	if p.LDB == 0 {
		if p.TransB {
			p.LDB = p.K
		} else {
			p.LDB = p.N
		}
	}
	if p.LDC == 0 {
		p.LDC = p.N
	}
	if u.n > 0 && u.n < p.N {
		p.N = u.n
	}
	if u.k > 0 && u.k < p.K {
		p.K = u.k
	}
}

// matmulQ is matmul for the 4-bit product.
func (u *unitLimit) matmulQ(p *kernels.QMatMulParams) {
	if u == nil || (u.n == 0 && u.k == 0) {
		return
	}
	if p.LDA == 0 {
		p.LDA = p.K
	}
	if p.LDC == 0 {
		p.LDC = p.N
	}
	if u.n > 0 && u.n < p.N {
		p.N = u.n
	}
	if u.k > 0 && u.k < p.K {
		p.K = u.k
	}
}

// attention runs the first heads query heads over the first kvHeads KV
// heads; the layouts keep the full strides.
func (u *unitLimit) attention(p *kernels.AttentionParams) {
	if u == nil || u.heads == 0 {
		return
	}
	if u.heads < p.Heads {
		p.Heads, p.KVHeads = u.heads, u.kvHeads
	}
}

// elasticStep is a bound product: its instruction's limit and its role.
type elasticStep struct {
	in    *instr
	lim   *unitLimit
	group int // 4-bit group along K (0: not quantized)
	full  int // the stored size along the elastic axis
	// kFull and nFull are the product's stored K and N (a LoRA adapter's
	// shape).
	kFull, nFull int
}

type elasticBound struct {
	q, k, v, o, gate, up, down elasticStep
	attn                       *unitLimit
}

// ElasticBinding sets a session's per-layer active widths. It is made once
// by Session.BindElastic; Set changes only the active sizes the kernels are
// launched with: no allocation, no program build, no weight copied.
type ElasticBinding struct {
	s              *Session
	layers         []elasticBound
	heads, kvHeads int
	headDim, ffn   int
	// lora holds the adapter sets AddLoRA uploaded, loraCur the one in use
	// (-1: none); slotsOn says the products carry their side-branch slots.
	lora    []loraSet
	loraCur int
	slotsOn bool
}

// BindElastic finds each layer's products (by their weight names) and
// attention (the i-th fused attention in program order is layer i's) and
// gives them active-size overrides, initially the full sizes. headDim is
// the model's head dimension. The session must keep its products apart
// (Options.NoJoin): a joined launch has one active size.
func (s *Session) BindElastic(layers []ElasticLayer, headDim int) (*ElasticBinding, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("engine: session is closed")
	}
	if headDim <= 0 || len(layers) == 0 {
		return nil, fmt.Errorf("engine: elastic binding needs layers and a positive head_dim (got %d layers, head_dim %d)", len(layers), headDim)
	}
	byWeight := map[string]*instr{}
	var attns []*instr
	for _, in := range s.c.prog {
		if in.kind != iDevice {
			continue
		}
		n := in.node
		switch opKey(n.Domain, n.OpType) {
		case tlite.Key(tlite.MatMulJoin):
			// Each product's active size is its own launch argument; a
			// joined launch has one.
			return nil, fmt.Errorf("engine: elastic binding: the session joined the products that read one input (%q); open it with Options.NoJoin", n.Name)
		case "MatMul", tlite.Key(tlite.MatMulBias), tlite.Key(tlite.MatMulQ):
			if len(n.Inputs) > 1 && n.Inputs[1] != nil {
				name := n.Inputs[1].Name
				if prev, dup := byWeight[name]; dup && prev != in {
					byWeight[name] = nil // shared weight: not elastic
				} else {
					byWeight[name] = in
				}
			}
		case tlite.Key(tlite.Attention):
			attns = append(attns, in)
		}
	}
	if len(attns) != len(layers) {
		return nil, fmt.Errorf("engine: elastic binding: %d layers named, the program has %d fused attentions", len(layers), len(attns))
	}
	find := func(l int, role, w string) (*instr, error) {
		if in, ok := byWeight[w]; ok {
			if in == nil {
				return nil, fmt.Errorf("engine: elastic layer %d %s: weight %q is read by more than one product", l, role, w)
			}
			return in, nil
		}
		for name, in := range byWeight {
			if in != nil && strings.HasPrefix(name, w+".") && in.node.OpType == tlite.MatMulQ {
				return in, nil
			}
		}
		return nil, fmt.Errorf("engine: elastic layer %d %s: no product reads weight %q", l, role, w)
	}
	b := &ElasticBinding{s: s, headDim: headDim, loraCur: -1}
	seen := map[*instr]bool{}
	type attachment struct {
		in  *instr
		lim *unitLimit
	}
	var attach []attachment
	for l, names := range layers {
		var eb elasticBound
		for _, r := range []struct {
			role string
			w    string
			dst  *elasticStep
			axis int // 0: N elastic, 1: K elastic
		}{
			{"q", names.Q, &eb.q, 0}, {"k", names.K, &eb.k, 0}, {"v", names.V, &eb.v, 0}, {"o", names.O, &eb.o, 1},
			{"gate", names.Gate, &eb.gate, 0}, {"up", names.Up, &eb.up, 0}, {"down", names.Down, &eb.down, 1},
		} {
			in, err := find(l, r.role, r.w)
			if err != nil {
				return nil, err
			}
			if seen[in] || in.lim != nil {
				return nil, fmt.Errorf("engine: elastic layer %d %s: product %q is bound twice", l, r.role, in.node.Name)
			}
			seen[in] = true
			k, n, group, err := s.productSize(in)
			if err != nil {
				return nil, fmt.Errorf("engine: elastic layer %d %s: %w", l, r.role, err)
			}
			full := n
			if r.axis == 1 {
				full = k
			}
			*r.dst = elasticStep{in: in, lim: &unitLimit{}, group: group, full: full, kFull: k, nFull: n}
			attach = append(attach, attachment{in, r.dst.lim})
		}
		if eb.q.full%headDim != 0 || eb.k.full%headDim != 0 || eb.k.full != eb.v.full || eb.o.full != eb.q.full ||
			eb.gate.full != eb.up.full || eb.down.full != eb.gate.full {
			return nil, fmt.Errorf("engine: elastic layer %d: product sizes q %d, k %d, v %d, o %d, gate %d, up %d, down %d do not form a layer of head_dim %d",
				l, eb.q.full, eb.k.full, eb.v.full, eb.o.full, eb.gate.full, eb.up.full, eb.down.full, headDim)
		}
		heads, kvHeads := eb.q.full/headDim, eb.k.full/headDim
		if kvHeads == 0 || heads%kvHeads != 0 {
			return nil, fmt.Errorf("engine: elastic layer %d: %d query heads over %d KV heads", l, heads, kvHeads)
		}
		if l == 0 {
			b.heads, b.kvHeads, b.ffn = heads, kvHeads, eb.gate.full
		} else if heads != b.heads || kvHeads != b.kvHeads || eb.gate.full != b.ffn {
			return nil, fmt.Errorf("engine: elastic layer %d differs from layer 0 in heads or FFN width", l)
		}
		eb.attn = &unitLimit{}
		if attns[l].lim != nil {
			return nil, fmt.Errorf("engine: attention %q is already bound", attns[l].node.Name)
		}
		attach = append(attach, attachment{attns[l], eb.attn})
		b.layers = append(b.layers, eb)
	}
	// Attach only once everything is checked, so a failed binding changes
	// nothing.
	for _, a := range attach {
		a.in.lim = a.lim
	}
	return b, nil
}

// productSize reads a bound product's stored K and N (and its 4-bit group)
// from its weight's shape or packed header attributes.
func (s *Session) productSize(in *instr) (k, n, group int, err error) {
	node := in.node
	if node.OpType == tlite.MatMulQ {
		return int(node.AttrInt("K", 0)), int(node.AttrInt("N", 0)), int(node.AttrInt("group", 0)), nil
	}
	w := s.c.info(node.Inputs[1])
	dims, ok := constShape(w.shape)
	if !ok || len(dims) != 2 {
		return 0, 0, 0, fmt.Errorf("weight %s of %q is not a constant matrix", w.name, node.Name)
	}
	return dims[0], dims[1], 0, nil
}

// Layers is the number of bound layers.
func (b *ElasticBinding) Layers() int { return len(b.layers) }

// Full returns the 100% width of every layer.
func (b *ElasticBinding) Full() ElasticWidth {
	return ElasticWidth{QHeads: b.heads, KVHeads: b.kvHeads, FFN: b.ffn}
}

// Set makes widths[l] layer l's active size. It checks every width before
// changing any (on an error nothing changes) and then only writes integers:
// it allocates nothing, builds nothing and copies no weight. A width whose
// K would cut a 4-bit group is refused. Set must not run concurrently with
// Run (it takes the session's lock).
func (b *ElasticBinding) Set(widths []ElasticWidth) error {
	if len(widths) != len(b.layers) {
		return fmt.Errorf("engine: elastic Set: %d widths for %d layers", len(widths), len(b.layers))
	}
	g := b.heads / b.kvHeads
	for l, w := range widths {
		if w.KVHeads < 1 || w.KVHeads > b.kvHeads || w.QHeads != w.KVHeads*g || w.FFN < 1 || w.FFN > b.ffn {
			return fmt.Errorf("engine: elastic layer %d: width %+v outside 1..%d KV heads (query heads = %d per KV head) and 1..%d FFN",
				l, w, b.kvHeads, g, b.ffn)
		}
		eb := &b.layers[l]
		if gr := eb.o.group; gr > 0 && (w.QHeads*b.headDim)%gr != 0 {
			return fmt.Errorf("engine: elastic layer %d: %d query heads of %d cut the O weight's 4-bit group %d", l, w.QHeads, b.headDim, gr)
		}
		if gr := eb.down.group; gr > 0 && w.FFN != b.ffn && w.FFN%gr != 0 {
			return fmt.Errorf("engine: elastic layer %d: FFN width %d cuts the down weight's 4-bit group %d", l, w.FFN, gr)
		}
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	for l, w := range widths {
		eb := &b.layers[l]
		q, kv := w.QHeads*b.headDim, w.KVHeads*b.headDim
		eb.q.lim.n, eb.k.lim.n, eb.v.lim.n = q, kv, kv
		eb.o.lim.k = q
		eb.gate.lim.n, eb.up.lim.n, eb.down.lim.k = w.FFN, w.FFN, w.FFN
		eb.attn.heads, eb.attn.kvHeads = w.QHeads, w.KVHeads
	}
	return nil
}

// DeviceStats returns the OpenCL device's counters (allocations, bytes
// written, programs built, launches); ok is false on the pure-Go backend,
// which has none.
func (s *Session) DeviceStats() (st opencl.Stats, ok bool) {
	if s.cl == nil {
		return st, false
	}
	return s.cl.Stats(), true
}
