// Package qonnx rewrites an ONNX model's weight products for tlite's compact
// weight storage: it is the model side of `tl quantize`.
//
// # What is a weight product
//
// A MatMul whose second input is a 2-D float32 initializer W = [K, N], and
// a Gemm with transA = 0 and alpha = 1 whose B is one ([K, N], or [N, K]
// with transB = 1, which is how PyTorch's Linear stores it). A MatMul whose
// only reader is an Add of a float32 initializer of shape [N] (a Linear with
// a bias, as torch exports it) is one product with that bias; so is a Gemm
// whose C is such a vector (or [1, N]) with beta = 1. Products of two
// activations (attention scores) are not weight products and are left alone.
//
// # 4-bit formats
//
// For E0M4 and INT4 each weight product whose K is a multiple of the group
// size and whose K*N is at least MinSize becomes one tlite.MatMulQ node
// (tlite.MatMulQ) reading a 1-D uint8 initializer that holds the packed
// weight in quant's binary format (header, codes, parameters, 64-byte
// aligned). Written with external data (graph.Write with a small
// ExternalThreshold), that initializer is a view into the memory-mapped data
// file when the model is loaded again, and the engine hands it to the device
// in one upload. A weight read by several products is packed once. The node
// keeps the replaced node's name and output value, so profiles and graph
// outputs still name what they did.
//
// Embedding tables (a Gather's data) stay float: a row lookup reads a few
// rows per token, so 4-bit storage would save memory but no bandwidth, and
// the engine's Gather kernels move whole elements. A weight shared between
// a product and a Gather keeps its float initializer for the Gather.
//
// # fp16
//
// The float32 weights of the same products (with MinSize, without the group
// rule) become float16 initializers and nothing else changes: the session's
// storage precision decides how they are held on the device (an FP32
// session widens them at Open, an FP16 session keeps them half). Such a
// MatMul has a float32 and a float16 input, which the ONNX checker accepts
// but strict ONNX type inference (and ONNX Runtime) does not; the 4-bit
// formats have no such mix.
package qonnx

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/quant"
	"github.com/tlite/tlite/graph/tlite"
)

// DefaultMinSize is the smallest K*N the command line quantizes by default:
// smaller weights (biases reshaped as matrices, tiny projections) save too
// little to be worth the precision.
const DefaultMinSize = 4096

// Options select what Quantize does.
type Options struct {
	Format quant.Format
	// Group is the 4-bit group size along K (0 = quant.DefaultGroup).
	Group int
	// MinSize is the smallest K*N converted; smaller weights stay float32.
	MinSize int
	// Report compares E0M4 and INT4 on every weight the 4-bit rules accept
	// (whatever Format is) and fills Result.Report.
	Report bool
	// Progress, when set, is called after each weight is converted.
	Progress func(done, total int, w Weight)
}

// Weight is one converted weight initializer.
type Weight struct {
	// Name is the float32 initializer's name; Stored the new initializer's
	// (the same value, retyped, for fp16).
	Name   string `json:"name"`
	Stored string `json:"stored"`
	// Nodes are the products that read it.
	Nodes []string `json:"nodes"`
	// K and N are the product's inner and output sizes; Layout is how the
	// float weight was stored ("KN" for MatMul, "NK" for Gemm transB=1).
	K      int    `json:"k"`
	N      int    `json:"n"`
	Layout string `json:"layout"`
	// FloatBytes and StoredBytes are the sizes before and after.
	FloatBytes  int64 `json:"float_bytes"`
	StoredBytes int64 `json:"stored_bytes"`
	// Saturated counts weights beyond fp16's range clamped to ±65504.
	Saturated int `json:"saturated,omitempty"`
}

// Skipped is a weight product left as it was, and why.
type Skipped struct {
	Node   string `json:"node"`
	Weight string `json:"weight"`
	Reason string `json:"reason"`
}

// Result describes what Quantize did.
type Result struct {
	Format  quant.Format
	Group   int
	MinSize int
	// Weights are the converted weights, in graph order of first use.
	Weights []Weight
	// Skipped are weight products left float, with the reason.
	Skipped []Skipped
	// Activations counts MatMul and Gemm nodes whose B is computed at run
	// time (attention products): not weights, left alone.
	Activations int
	// Embeddings are float initializers read by Gather as data, left float.
	Embeddings []string
	// BytesBefore and BytesAfter total every initializer of the main graph.
	BytesBefore, BytesAfter int64
	// Report compares the 4-bit formats (nil unless Options.Report), one
	// row per weight named after the first product that reads it.
	Report *quant.Report

	reported map[*graph.Value]bool
}

// product is one weight product found in the graph.
type product struct {
	node   *graph.Node // MatMul or Gemm
	add    *graph.Node // the bias Add folded into a MatMul, or nil
	a      *graph.Value
	w      *graph.Value // float32 initializer
	bias   *graph.Value // float32 initializer with N elements, or nil
	out    *graph.Value // what the product computes (the Add's output when folded)
	layout quant.Layout
	k, n   int
}

// Quantize rewrites m's main graph in place as the package comment says and
// imports the tlite operator domain when it adds MatMulQ nodes. A weight
// that cannot be converted (a non-finite value, say) is listed in
// Result.Skipped, not an error; errors are invalid options and graph
// rewrites that fail.
func Quantize(m *graph.Model, o Options) (*Result, error) {
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("qonnx: no model")
	}
	switch o.Format {
	case quant.E0M4, quant.Int4, quant.FP16:
	default:
		return nil, fmt.Errorf("qonnx: unknown format %v (want e0m4, int4 or fp16)", o.Format)
	}
	group := o.Group
	if group == 0 {
		group = quant.DefaultGroup
	}
	if group < 32 || group%32 != 0 {
		return nil, fmt.Errorf("qonnx: group size %d: must be a positive multiple of 32", group)
	}
	if o.MinSize < 0 {
		return nil, fmt.Errorf("qonnx: MinSize %d is negative", o.MinSize)
	}
	g := m.Graph
	res := &Result{Format: o.Format, Group: group, MinSize: o.MinSize, BytesBefore: initBytes(g)}
	if o.Report {
		res.Report = &quant.Report{Group: group}
	}
	prods := res.find(g)
	res.embeddings(g)

	// Which products are converted: a 4-bit product needs whole groups along
	// K; fp16 only the size threshold.
	var todo []*product
	for _, p := range prods {
		if p.k*p.n < o.MinSize {
			res.skip(p, fmt.Sprintf("K*N = %d*%d = %d is below the minimum size %d", p.k, p.n, p.k*p.n, o.MinSize))
			continue
		}
		fourBit := p.k%group == 0
		if !fourBit && o.Format != quant.FP16 {
			res.skip(p, fmt.Sprintf("K = %d is not a multiple of the group size %d", p.k, group))
			continue
		}
		if o.Report && fourBit {
			if err := res.addReport(p); err != nil {
				res.skip(p, err.Error())
				continue
			}
		}
		todo = append(todo, p)
	}
	var err error
	if o.Format == quant.FP16 {
		err = res.toHalf(g, todo, o.Progress)
	} else {
		err = res.toFourBit(m, todo, quant.Options{Format: o.Format, Group: group}, o.Progress)
	}
	if err != nil {
		return nil, err
	}
	dropUnused(g, todo)
	res.BytesAfter = initBytes(g)
	return res, nil
}

// find lists the weight products of g in graph order; products of
// activations are counted, and weight products this package cannot take
// (transA, alpha, a bias of another shape, ...) go to Skipped.
func (r *Result) find(g *graph.Graph) []*product {
	var out []*product
	for _, n := range g.Nodes {
		if n.Domain != "" || (n.OpType != "MatMul" && n.OpType != "Gemm") {
			continue
		}
		if len(n.Inputs) < 2 || n.Inputs[0] == nil || n.Inputs[1] == nil || len(n.Outputs) == 0 || n.Outputs[0] == nil {
			continue
		}
		w := n.Inputs[1]
		if !w.IsInitializer() {
			r.Activations++
			continue
		}
		p := &product{node: n, a: n.Inputs[0], w: w, out: n.Outputs[0]}
		if reason := p.read(g); reason != "" {
			r.Skipped = append(r.Skipped, Skipped{Node: n.Name, Weight: w.Name, Reason: reason})
			continue
		}
		out = append(out, p)
	}
	return out
}

// read fills p from its node and returns why it cannot be converted ("" when
// it can).
func (p *product) read(g *graph.Graph) string {
	n, t := p.node, p.w.Const
	if t.Type != dtype.Float32 {
		return fmt.Sprintf("weight is %v, not float32", t.Type)
	}
	if len(t.Dims) != 2 {
		return fmt.Sprintf("weight has rank %d, not 2", len(t.Dims))
	}
	rows, cols := int(t.Dims[0]), int(t.Dims[1])
	if rows == 0 || cols == 0 {
		return fmt.Sprintf("weight [%d, %d] is empty", rows, cols)
	}
	p.k, p.n, p.layout = rows, cols, quant.LayoutKN
	if n.OpType == "MatMul" {
		p.foldBias(g)
		return ""
	}
	if n.AttrInt("transA", 0) != 0 {
		return "Gemm with transA = 1"
	}
	if a := n.AttrFloat("alpha", 1); a != 1 {
		return fmt.Sprintf("Gemm with alpha = %g", a)
	}
	if n.AttrInt("transB", 0) != 0 {
		p.k, p.n, p.layout = cols, rows, quant.LayoutNK
	}
	if len(n.Inputs) > 2 && n.Inputs[2] != nil {
		c := n.Inputs[2]
		if b := n.AttrFloat("beta", 1); b != 1 {
			return fmt.Sprintf("Gemm with beta = %g and a C input", b)
		}
		if !isBias(c, p.n) {
			return fmt.Sprintf("C %q is not a float32 initializer of shape [%d] or [1, %d]", c.Name, p.n, p.n)
		}
		p.bias = c
	}
	return ""
}

// isBias reports whether v is a float32 initializer of shape [n] or [1, n].
func isBias(v *graph.Value, n int) bool {
	if v == nil || !v.IsInitializer() || v.Const.Type != dtype.Float32 {
		return false
	}
	d := v.Const.Dims
	return (len(d) == 1 && d[0] == int64(n)) || (len(d) == 2 && d[0] == 1 && d[1] == int64(n))
}

// foldBias takes the Add of a [N] initializer that is the MatMul's only
// reader as the product's bias. [1, N] is not taken: for a 1-D A it would
// change the output's rank.
func (p *product) foldBias(g *graph.Graph) {
	y := p.node.Outputs[0]
	if len(y.Consumers) != 1 || isOutput(g, y) {
		return
	}
	add := y.Consumers[0]
	if add.Domain != "" || add.OpType != "Add" || len(add.Inputs) != 2 || len(add.Outputs) != 1 || add.Outputs[0] == nil {
		return
	}
	other := add.Inputs[1]
	if add.Inputs[1] == y {
		other = add.Inputs[0]
	}
	if other == y || !isBias(other, p.n) || len(other.Const.Dims) != 1 {
		return
	}
	p.add, p.bias, p.out = add, other, add.Outputs[0]
}

func isOutput(g *graph.Graph, v *graph.Value) bool {
	for _, o := range g.Outputs {
		if o == v {
			return true
		}
	}
	return false
}

func (r *Result) skip(p *product, reason string) {
	r.Skipped = append(r.Skipped, Skipped{Node: p.node.Name, Weight: p.w.Name, Reason: reason})
}

// embeddings lists float initializers that Gathers read as their data.
func (r *Result) embeddings(g *graph.Graph) {
	seen := map[*graph.Value]bool{}
	for _, n := range g.Nodes {
		if n.Domain != "" || n.OpType != "Gather" || len(n.Inputs) == 0 {
			continue
		}
		v := n.Inputs[0]
		if v != nil && !seen[v] && v.IsInitializer() && v.Const.Type.IsFloat() {
			seen[v] = true
			r.Embeddings = append(r.Embeddings, v.Name)
		}
	}
}

// addReport compares both 4-bit formats on p's weight (once per weight).
func (r *Result) addReport(p *product) error {
	if r.reported[p.w] {
		return nil
	}
	if r.reported == nil {
		r.reported = map[*graph.Value]bool{}
	}
	r.reported[p.w] = true
	w, err := p.w.Const.Float32s()
	if err != nil {
		return fmt.Errorf("reading weight: %v", err)
	}
	t := p.w.Const
	return r.Report.Add(p.node.Name, w, int(t.Dims[0]), int(t.Dims[1]), p.layout)
}

// weightKey identifies one conversion: a weight read in one layout.
type weightKey struct {
	w      *graph.Value
	layout quant.Layout
}

// toFourBit packs each weight once and replaces every product with a
// MatMulQ node.
func (r *Result) toFourBit(m *graph.Model, todo []*product, qo quant.Options, progress func(int, int, Weight)) error {
	g := m.Graph
	packed := map[weightKey]*graph.Value{}
	index := map[weightKey]int{}
	total := countWeights(todo)
	for _, p := range todo {
		key := weightKey{p.w, p.layout}
		if i, ok := index[key]; ok {
			r.Weights[i].Nodes = append(r.Weights[i].Nodes, p.node.Name)
			if err := replace(g, p, packed[key], qo); err != nil {
				return err
			}
			continue
		}
		vals, err := p.w.Const.Float32s()
		if err != nil {
			r.skip(p, fmt.Sprintf("reading weight: %v", err))
			continue
		}
		t := p.w.Const
		pk, err := quant.Quantize(vals, int(t.Dims[0]), int(t.Dims[1]), quant.Options{Format: qo.Format, Group: qo.Group, Layout: p.layout})
		if err != nil {
			r.skip(p, err.Error())
			continue
		}
		blob, err := pk.MarshalBinary()
		if err != nil {
			return fmt.Errorf("qonnx: packing %q: %w", p.w.Name, err)
		}
		v := g.NewValue(p.w.Name + "." + qo.Format.String())
		qt, err := graph.NewTensor(v.Name, dtype.Uint8, []int64{int64(len(blob))}, blob)
		if err != nil {
			return fmt.Errorf("qonnx: packed weight %q: %w", v.Name, err)
		}
		v.Type, v.Const, v.Declared = dtype.Uint8, qt, []graph.Dim{{Value: int64(len(blob))}}
		g.Initializers = append(g.Initializers, v)
		packed[key], index[key] = v, len(r.Weights)
		r.Weights = append(r.Weights, Weight{Name: p.w.Name, Stored: v.Name, Nodes: []string{p.node.Name},
			K: p.k, N: p.n, Layout: p.layout.String(), FloatBytes: int64(len(t.Data)), StoredBytes: int64(len(blob))})
		if err := replace(g, p, v, qo); err != nil {
			return err
		}
		if progress != nil {
			progress(len(r.Weights), total, r.Weights[len(r.Weights)-1])
		}
	}
	if len(r.Weights) > 0 {
		if m.Opsets == nil {
			m.Opsets = map[string]int64{}
		}
		if v, ok := m.Opsets[tlite.Domain]; ok && v != tlite.Version {
			return fmt.Errorf("qonnx: the model imports domain %q at version %d; MatMulQ is version %d", tlite.Domain, v, tlite.Version)
		}
		m.Opsets[tlite.Domain] = tlite.Version
	}
	return nil
}

func countWeights(todo []*product) int {
	seen := map[weightKey]bool{}
	for _, p := range todo {
		seen[weightKey{p.w, p.layout}] = true
	}
	return len(seen)
}

// replace swaps p's node (and folded Add) for a MatMulQ reading wq. The new
// node takes over the old node's name and the output value, so readers and
// graph outputs need no rewiring.
func replace(g *graph.Graph, p *product, wq *graph.Value, qo quant.Options) error {
	name := p.node.Name
	ins := []*graph.Value{p.a, wq}
	if p.bias != nil {
		b, err := biasVector(g, p.bias, p.n)
		if err != nil {
			return err
		}
		ins = append(ins, b)
	}
	// The Add goes first, so that the MatMul's output loses its last reader
	// and leaves the graph's scope with the MatMul.
	if p.add != nil {
		if err := g.RemoveNode(p.add); err != nil {
			return fmt.Errorf("qonnx: %w", err)
		}
	}
	if err := g.RemoveNode(p.node); err != nil {
		return fmt.Errorf("qonnx: %w", err)
	}
	q := &graph.Node{Name: name, OpType: tlite.MatMulQ, Domain: tlite.Domain, Inputs: ins, Outputs: []*graph.Value{p.out},
		Doc: fmt.Sprintf("%s weight %s [K=%d, N=%d], group %d", qo.Format, p.w.Name, p.k, p.n, qo.Group)}
	q.SetAttr(&graph.Attr{Name: "format", Kind: graph.KindString, S: qo.Format.String()})
	q.SetAttr(&graph.Attr{Name: "group", Kind: graph.KindInt, I: int64(qo.Group)})
	q.SetAttr(&graph.Attr{Name: "K", Kind: graph.KindInt, I: int64(p.k)})
	q.SetAttr(&graph.Attr{Name: "N", Kind: graph.KindInt, I: int64(p.n)})
	if err := g.AddNode(q); err != nil {
		return fmt.Errorf("qonnx: replacing node %q: %w", name, err)
	}
	return nil
}

// biasVector returns b as a [n] initializer: b itself, or for Gemm's [1, n]
// a new initializer over the same bytes.
func biasVector(g *graph.Graph, b *graph.Value, n int) (*graph.Value, error) {
	if len(b.Const.Dims) == 1 {
		return b, nil
	}
	v := g.NewValue(b.Name + ".vector")
	t, err := graph.NewTensor(v.Name, dtype.Float32, []int64{int64(n)}, b.Const.Data)
	if err != nil {
		return nil, fmt.Errorf("qonnx: bias %q: %w", b.Name, err)
	}
	v.Type, v.Const, v.Declared = dtype.Float32, t, []graph.Dim{{Value: int64(n)}}
	g.Initializers = append(g.Initializers, v)
	return v, nil
}

// toHalf converts the weights of todo to float16 initializers in place. A
// weight also read by something other than a product being converted (a
// Gather, an element-wise op) stays float32, so that no other op sees a
// changed type.
func (r *Result) toHalf(g *graph.Graph, todo []*product, progress func(int, int, Weight)) error {
	users := map[*graph.Value][]*product{}
	var order []*graph.Value
	for _, p := range todo {
		if users[p.w] == nil {
			order = append(order, p.w)
		}
		users[p.w] = append(users[p.w], p)
	}
	for _, w := range order {
		ps := users[w]
		if len(w.Consumers) != len(ps) {
			for _, p := range ps {
				r.skip(p, fmt.Sprintf("weight %q is also read by a node other than a weight product; it stays float32", w.Name))
			}
			delete(users, w)
		}
	}
	total := len(users)
	for _, w := range order {
		ps := users[w]
		if ps == nil {
			continue
		}
		t := w.Const
		vals, err := t.Float32s()
		if err != nil {
			for _, p := range ps {
				r.skip(p, fmt.Sprintf("reading weight: %v", err))
			}
			continue
		}
		data := make([]byte, 2*len(vals))
		sat := 0
		for i, x := range vals {
			if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
				// Kept as they are: fp16 has both.
			} else if x > 65504 || x < -65504 {
				x = float32(math.Copysign(65504, float64(x)))
				sat++
			}
			binary.LittleEndian.PutUint16(data[2*i:], dtype.Float32ToHalf(x))
		}
		ht, err := graph.NewTensor(w.Name, dtype.Float16, t.Dims, data)
		if err != nil {
			return fmt.Errorf("qonnx: fp16 weight %q: %w", w.Name, err)
		}
		w.Const, w.Type = ht, dtype.Float16
		for i := range w.Declared {
			w.Declared[i] = graph.Dim{Value: t.Dims[i]}
		}
		wt := Weight{Name: w.Name, Stored: w.Name, K: ps[0].k, N: ps[0].n, Layout: ps[0].layout.String(),
			FloatBytes: int64(len(t.Data)), StoredBytes: int64(len(data)), Saturated: sat}
		for _, p := range ps {
			wt.Nodes = append(wt.Nodes, p.node.Name)
		}
		r.Weights = append(r.Weights, wt)
		if progress != nil {
			progress(len(r.Weights), total, wt)
		}
	}
	return nil
}

// dropUnused removes the weights and biases of converted products that
// nothing reads any more (the float weights replaced by packed ones).
// Initializers the model never used are not this package's business and
// stay.
func dropUnused(g *graph.Graph, done []*product) {
	was := map[*graph.Value]bool{}
	for _, p := range done {
		was[p.w] = true
		if p.bias != nil {
			was[p.bias] = true
		}
	}
	kept := g.Initializers[:0]
	for _, v := range g.Initializers {
		if !was[v] || len(v.Consumers) > 0 || isOutput(g, v) {
			kept = append(kept, v)
		}
	}
	clear(g.Initializers[len(kept):])
	g.Initializers = kept
}

// initBytes totals the bytes of g's initializers.
func initBytes(g *graph.Graph) int64 {
	var n int64
	for _, v := range g.Initializers {
		if v.Const != nil {
			n += int64(len(v.Const.Data))
		}
	}
	return n
}
