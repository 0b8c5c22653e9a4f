package fuse

// In-place KV cache for exported decoders (Transformer-Lite style): the
// graph rewrite. The engine runs it for Options.KVCache and owns the cache.
//
// An exported decoder takes its cache as inputs and returns it grown: per
// layer, present = Concat(past, new, axis=seq) feeds attention and is a
// graph output. Run then uploads the whole past, copies it into present and
// reads present back, every step. With Options.KVCache the session owns one
// device buffer per cache tensor instead, sized for KVConfig.MaxContext
// tokens and allocated once at Open, and the graph is rewritten (after the
// fusion passes, by KVCache below) so that
//
//   - each Concat becomes ("tlite", "KVWrite")(new, kv_slots): it writes only
//     the new rows into the buffer, at the slots kv_slots names (any slots,
//     in any order), and its output is a view of the buffer's first kv_len
//     rows;
//   - fused attention reads that view in place (through k_perm/v_perm) with
//     the additive kv_bias input as its mask, instead of the model's own
//     causal and padding mask;
//   - the past inputs, the present outputs, and what only served them (the
//     mask computation, GPT-2's positions from the past length) go away.
//
// The buffer is [MaxContext, kv_heads, head_dim]: the sequence is the
// outer axis, so the rows attended (slots [0, kv_len)) are one contiguous
// prefix, read as [1, kv_len, kv_heads, head_dim] through a permutation,
// and no step copies it. The export's [1, kv_heads, seq, head_dim] new rows
// are transposed by the write itself.
//
// What the export does with its cache besides attention is taken over
// where it is only bookkeeping: Shape reads of the cache die with the mask
// and repeat_kv they served; positions computed from the past length
// (Range(past, past + seq)) become position_ids; constant tables cut to
// past + seq rows and read by position (rotary caches, also through
// Expand/Tile into GatherElements) are read whole or cut at the capacity;
// a combined [batch, total, 2*head_dim] key_value cache split for
// multi-query attention becomes two caches. The model's own mask must be
// the same for every head (kv_bias replaces it).
//
// A cache tensor some node still reads otherwise (a reader the rewrite
// does not know, an attention that did not fuse, an attention adding a
// per-head bias such as ALiBi) falls back alone: it is still written in
// place, and a Transpose copies its buffer into the export's layout for
// those readers every step (KVCacheResult.Fallbacks says which tensor,
// node and why, one line each). Such readers may compute with the past
// length (the model's own mask), so the past length becomes kv_len - seq
// and the KVWrites record that the cache must be filled in slot order with
// no padding ("ordered", pad 1). What the rewrite cannot take over at all
// is refused with the node named, and engine/generate's Open then runs the
// model with its cache as exported.
//
// The rewritten model takes input_ids [1, seq], position_ids [1, seq]
// (added when the export derived positions from the past length), kv_slots
// [1, seq] and kv_bias [1, 1, seq, kv_len], and returns its other outputs
// (the logits). Which slots hold which positions is the caller's
// bookkeeping (package engine/kv keeps it and builds kv_bias).

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/graph/tlite"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// Names of the rewritten model's cache inputs and of the attended length.
const (
	// KVSlotsInput names the int64 [1, seq] input holding the cache slot
	// each token's keys and values are written to.
	KVSlotsInput = "kv_slots"
	// KVBiasInput names the float [1, 1, seq, kv_len] additive attention
	// mask over the cache slots: 0 where token t may attend slot j, a large
	// negative number where not (an empty slot, a later position).
	KVBiasInput = "kv_bias"
	// KVPositionsInput names the int64 [1, seq] position ids (RoPE angles or
	// learned position rows).
	KVPositionsInput = "position_ids"
	// KVLengthSymbol is the symbol of the attended length: the slots [0,
	// kv_len) attention reads. Padding it to a multiple of KVConfig.Pad keeps
	// shapes and kernel arguments fixed between boundaries.
	KVLengthSymbol = "kv_len"
)

// kvConcat is one Concat(past, new, axis=2) growing a cache tensor.
type kvConcat struct {
	node    *graph.Node
	past    *graph.Value // the Concat's past operand
	src     *graph.Value // the graph input past comes from
	name    string       // names the cache: src, with the index gathered from a stacked input
	new     *graph.Value
	present *graph.Value
	// fallback, when set, says why some reader of present cannot read
	// the cache in place (naming the node).
	fallback string
	// combined: a rank-3 [batch, past, 2*head_dim] cache holding keys and
	// values side by side (GPTBigCode's multi-query key_value), split
	// into two caches by splitCombined.
	combined bool
	// order is the permutation attention must read present through:
	// identity for [batch, heads, seq, head_dim]; [0, 2, 1, 3] for the
	// halves of a combined cache, viewed as [batch, seq, 1, head_dim].
	order [4]int64
}

// findKVConcats finds the Concats growing a cache: Concat(past, new) along
// axis 2 of rank-4 [batch, heads, seq, head_dim] tensors, past being a
// graph input or a Gather (axis 0, constant index) from a stacked graph
// input (GPT-2's [2, batch, heads, past, head_dim]). All pasts must share
// one length symbol, which is returned.
func findKVConcats(g *graph.Graph) ([]*kvConcat, string, error) {
	inputs := map[*graph.Value]bool{}
	for _, v := range g.Inputs {
		inputs[v] = true
	}
	var out []*kvConcat
	past := ""
	for _, n := range g.Nodes {
		if n.Domain != "" || n.OpType != "Concat" || len(n.Inputs) != 2 || len(n.Outputs) != 1 {
			continue
		}
		p, nw, pr := n.Inputs[0], n.Inputs[1], n.Outputs[0]
		if p == nil || nw == nil || pr == nil {
			continue
		}
		rank := len(pr.Shape)
		if (rank != 4 && rank != 3) || len(p.Shape) != rank || len(nw.Shape) != rank {
			continue
		}
		if a := n.AttrInt("axis", 0); a != int64(rank-2) && a != -2 {
			continue
		}
		sym, ok := p.Shape[rank-2].SymName()
		if !ok {
			continue
		}
		c := &kvConcat{node: n, past: p, new: nw, present: pr, combined: rank == 3, order: [4]int64{0, 1, 2, 3}}
		switch {
		case rank == 3 && !inputs[p]:
			continue
		case inputs[p]:
			c.src, c.name = p, p.Name
		default:
			src, idx, ok := gatheredInput(p, inputs)
			if !ok {
				continue
			}
			c.src, c.name = src, fmt.Sprintf("%s[%d]", src.Name, idx)
		}
		if past != "" && sym != past {
			return nil, "", fmt.Errorf("cache Concats %q and %q grow pasts of different lengths (%s and %s)", out[0].node.Name, n.Name, past, sym)
		}
		past = sym
		out = append(out, c)
	}
	return out, past, nil
}

// gatheredInput recognises v = Gather(x, k, axis=0) of a graph input x one
// rank above v with a constant scalar k.
func gatheredInput(v *graph.Value, inputs map[*graph.Value]bool) (*graph.Value, int64, bool) {
	p := v.Producer
	if p == nil || p.Domain != "" || p.OpType != "Gather" || len(p.Inputs) != 2 || p.AttrInt("axis", 0) != 0 {
		return nil, 0, false
	}
	x, idx := p.Inputs[0], p.Inputs[1]
	if x == nil || idx == nil || !inputs[x] || len(x.Shape) != len(v.Shape)+1 || len(idx.Shape) != 0 {
		return nil, 0, false
	}
	var k int64
	switch {
	case len(idx.Elems) == 1:
		var ok bool
		if k, ok = idx.Elems[0].Const(); !ok {
			return nil, 0, false
		}
	case idx.Const != nil:
		vals, err := idx.Const.Int64s()
		if err != nil || len(vals) != 1 {
			return nil, 0, false
		}
		k = vals[0]
	default:
		return nil, 0, false
	}
	return x, k, true
}

// KVCacheResult is what the KV-cache pass found, for the session's maxima:
// the symbol names of the batch, the new rows and the past length ("" when
// a dim is not a bare symbol).
type KVCacheResult struct {
	Batch, Seq, Past string
	// Fallbacks has one line per cache tensor that some reader cannot
	// take in place: the tensor, the node and why. Such a tensor is
	// still kept in its buffer, and copied into the export's layout for
	// its readers every step.
	Fallbacks []string
}

// KVCache rewrites an inferred (and usually fused) decoder graph for an
// in-place cache of maxContext slots per layer, recording pad (the multiple
// the caller rounds kv_len up to) on each KVWrite; see the top of this
// file. It replaces the past length symbol by kv_len in res.Symbols.
func KVCache(g *graph.Graph, res *infer.Result, maxContext, pad int) (KVCacheResult, error) {
	var rw KVCacheResult
	if maxContext <= 0 {
		return rw, fmt.Errorf("a cache of %d slots", maxContext)
	}
	ids := inputNamed(g, "input_ids")
	if ids == nil || len(ids.Shape) != 2 {
		return rw, fmt.Errorf("the model has no input_ids input of shape [batch, seq]")
	}
	for _, name := range []string{KVSlotsInput, KVBiasInput} {
		if g.Value(name) != nil {
			return rw, fmt.Errorf("the model already has a value named %q", name)
		}
	}
	concats, past, err := findKVConcats(g)
	if err != nil {
		return rw, err
	}
	if len(concats) == 0 {
		return rw, fmt.Errorf("found no Concat(past, new, axis=2) of rank-4 [batch, kv_heads, seq, head_dim] tensors growing a KV cache from the graph inputs")
	}
	rw.Past = past
	if b, ok := ids.Shape[0].SymName(); ok {
		rw.Batch = b
	} else if k, _ := ids.Shape[0].Const(); k != 1 {
		return rw, fmt.Errorf("input_ids has shape %s; the in-place cache holds one sequence (batch 1)", symshape.FormatShape(ids.Shape))
	}
	seqOf := func(c *kvConcat) symshape.Expr { return c.new.Shape[len(c.new.Shape)-2] }
	seq := seqOf(concats[0])
	rw.Seq, _ = seq.SymName()
	for _, c := range concats {
		if !seqOf(c).Equal(seq) {
			return rw, fmt.Errorf("cache Concat %q appends %s rows, %q appends %s", concats[0].node.Name, seq, c.node.Name, seqOf(c))
		}
		axes := []int{1, 3}
		if c.combined {
			axes = []int{2}
		}
		for _, a := range axes {
			if _, ok := c.new.Shape[a].Const(); !ok {
				return rw, fmt.Errorf("cache Concat %q: new rows %s have a symbolic head count or head size", c.node.Name, symshape.FormatShape(c.new.Shape))
			}
		}
	}

	// The present outputs go, with whatever only computed them (GPT-2
	// stacks keys and values with Unsqueeze and Concat).
	presents := map[*graph.Value]bool{}
	for _, c := range concats {
		presents[c.present] = true
	}
	var keep []*graph.Value
	for _, v := range g.Outputs {
		if !fromPresents(v, presents, 0) {
			keep = append(keep, v)
		}
	}
	if len(keep) == 0 {
		return rw, fmt.Errorf("every graph output is a cache tensor; nothing would be left to return")
	}
	g.Outputs = keep
	g.RemoveDeadNodes()

	// Attention must read the presents fused, so that it can read a view.
	if !allReadByAttention(concats) {
		if err := Attention(g, res); err != nil {
			return rw, err
		}
		g.RemoveDeadNodes()
	}
	var expanded []*kvConcat
	for _, c := range concats {
		if !c.combined || c.node.Graph() == nil {
			expanded = append(expanded, c)
			continue
		}
		halves, err := splitCombined(g, c)
		if err != nil {
			return rw, err
		}
		expanded = append(expanded, halves...)
	}
	concats = expanded
	var live []*kvConcat
	for _, c := range concats {
		if c.node.Graph() == nil {
			continue // read only by the dropped outputs
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return rw, fmt.Errorf("no attention reads the cache tensors")
	}
	atts, err := classifyReads(live)
	if err != nil {
		return rw, err
	}
	fallback := false
	for _, c := range live {
		if c.fallback != "" {
			fallback = true
			rw.Fallbacks = append(rw.Fallbacks, fmt.Sprintf("cache tensor %q (from %s) is copied into the export's layout every step: %s", c.present.Name, c.name, c.fallback))
		}
	}
	if fallback {
		// Layers that read the cache in the export's layout may mask
		// with the model's own mask, computed from the past length: it
		// is right only when the cache holds positions 0..kv_len-1 in
		// slot order, with no padding.
		pad = 1
	}

	slots, err := addInput(g, KVSlotsInput, dtype.Int64, []symshape.Expr{ids.Shape[0], seq})
	if err != nil {
		return rw, err
	}
	biasT := dtype.Float32
	if len(atts) > 0 {
		if q := atts[0].Inputs[0]; q != nil && q.Type == dtype.Float16 {
			biasT = dtype.Float16
		}
	} else if live[0].new.Type == dtype.Float16 {
		biasT = dtype.Float16
	}
	kvLen := symshape.Sym(KVLengthSymbol)
	bias, err := addInput(g, KVBiasInput, biasT, []symshape.Expr{ids.Shape[0], symshape.Const(1), seq, kvLen})
	if err != nil {
		return rw, err
	}

	inPlace := map[*graph.Value]bool{}
	for _, c := range live {
		src, perm := c.new, [4]int64{0, 1, 2, 3}
		// Read the new rows before a Transpose nothing else needs: the
		// write transposes them anyway.
		for p := src.Producer; p != nil && p.Domain == "" && p.OpType == "Transpose" && len(src.Consumers) == 1 && !isOutput(g, src); p = src.Producer {
			tp, ok := p.AttrInts("perm")
			if !ok || len(tp) != 4 || p.Inputs[0] == nil || len(p.Inputs[0].Shape) != 4 {
				break
			}
			perm = [4]int64{tp[perm[0]], tp[perm[1]], tp[perm[2]], tp[perm[3]]}
			src = p.Inputs[0]
		}
		view := g.NewValue(c.present.Name + "_cache")
		view.Type = c.new.Type
		view.Shape = []symshape.Expr{symshape.Const(1), kvLen, c.new.Shape[1], c.new.Shape[3]}
		ordered := int64(0)
		if fallback {
			ordered = 1
		}
		w := &graph.Node{Name: c.node.Name + "_kvwrite", OpType: "KVWrite", Domain: tlite.Domain,
			Inputs: []*graph.Value{src, slots}, Outputs: []*graph.Value{view},
			Attrs: map[string]*graph.Attr{
				"capacity": {Name: "capacity", Kind: graph.KindInt, I: int64(maxContext)},
				"pad":      {Name: "pad", Kind: graph.KindInt, I: int64(pad)},
				"length":   {Name: "length", Kind: graph.KindString, S: KVLengthSymbol},
				"cache":    {Name: "cache", Kind: graph.KindString, S: c.name},
				"new_perm": {Name: "new_perm", Kind: graph.KindInts, Ints: perm[:]},
				"ordered":  {Name: "ordered", Kind: graph.KindInt, I: ordered},
			}}
		if c.fallback != "" {
			w.Attrs["fallback"] = &graph.Attr{Name: "fallback", Kind: graph.KindString, S: c.fallback}
		}
		if err := g.AddNode(w); err != nil {
			return rw, err
		}
		read := view
		if c.fallback == "" {
			inPlace[view] = true
		} else {
			// The copy into the export's [batch, kv_heads, kv_len,
			// head_dim], which its readers take for the present.
			read = g.NewValue(c.present.Name + "_copy")
			read.Type = c.new.Type
			read.Shape = []symshape.Expr{c.new.Shape[0], c.new.Shape[1], kvLen, c.new.Shape[3]}
			tr := &graph.Node{Name: c.node.Name + "_kvcopy", OpType: "Transpose", Inputs: []*graph.Value{view}, Outputs: []*graph.Value{read},
				Attrs: map[string]*graph.Attr{"perm": {Name: "perm", Kind: graph.KindInts, Ints: []int64{0, 2, 1, 3}}}}
			if err := g.AddNode(tr); err != nil {
				return rw, err
			}
		}
		if err := g.ReplaceAllUses(c.present, read); err != nil {
			return rw, err
		}
		if err := g.RemoveNode(c.node); err != nil {
			return rw, err
		}
	}
	seqFirst := []int64{0, 2, 1, 3}
	for _, a := range atts {
		if err := g.RemoveNode(a); err != nil {
			return rw, err
		}
		for len(a.Inputs) < 4 {
			a.Inputs = append(a.Inputs, nil)
		}
		a.Inputs[3] = bias
		// K or V read from a fallback copy (or computed from one) keep
		// the permutation they had.
		if inPlace[in(a, 1)] {
			a.Attrs["k_perm"] = &graph.Attr{Name: "k_perm", Kind: graph.KindInts, Ints: append([]int64(nil), seqFirst...)}
		}
		if inPlace[in(a, 2)] {
			a.Attrs["v_perm"] = &graph.Attr{Name: "v_perm", Kind: graph.KindInts, Ints: append([]int64(nil), seqFirst...)}
		}
		// kv_bias says who sees whom; the slots need not be in order.
		delete(a.Attrs, "causal")
		if err := g.AddNode(a); err != nil {
			return rw, err
		}
	}
	g.RemoveDeadNodes()
	if err := replacePastPositions(g, ids, past, seq); err != nil {
		return rw, err
	}
	if err := unsliceGatheredTables(g); err != nil {
		return rw, err
	}
	g.RemoveDeadNodes()
	sources := map[*graph.Value]bool{}
	for _, c := range concats {
		sources[c.src] = true
	}
	if fallback {
		if err := pastFromLength(g, res, ids, bias, sources, past, seq); err != nil {
			return rw, fmt.Errorf("%w (while falling back: %s)", err, strings.Join(rw.Fallbacks, "; "))
		}
		g.RemoveDeadNodes()
	}
	if err := boundTablesByCapacity(g, res, ids, sources, past, maxContext); err != nil {
		return rw, err
	}
	g.RemoveDeadNodes()

	// Inputs nothing reads any more: the pasts, the padding mask.
	var ins []*graph.Value
	for _, v := range g.Inputs {
		if len(v.Consumers) == 0 && (sources[v] || v.Name == "attention_mask") {
			continue
		}
		ins = append(ins, v)
	}
	g.Inputs = ins
	if err := checkNoPast(g, past); err != nil {
		if fallback {
			return rw, fmt.Errorf("%w (while falling back: %s)", err, strings.Join(rw.Fallbacks, "; "))
		}
		return rw, err
	}
	if err := g.Validate(); err != nil {
		return rw, err
	}
	syms := map[string]bool{KVLengthSymbol: true}
	for _, sym := range res.Symbols {
		if sym != rw.Past {
			syms[sym] = true
		}
	}
	res.Symbols = res.Symbols[:0]
	for sym := range syms {
		res.Symbols = append(res.Symbols, sym)
	}
	sort.Strings(res.Symbols)
	return rw, nil
}

// splitCombined turns a combined [batch, total, 2*head_dim] cache into two
// caches, keys and values: present must be read only by a Split of its last
// axis into two halves, each read only by a Reshape to [batch, total, 1,
// head_dim] (what fused attention reads; see attentionFolded). The new rows
// are split the same way, so that each half is written to its own buffer.
func splitCombined(g *graph.Graph, c *kvConcat) ([]*kvConcat, error) {
	refuse := func(why string, args ...any) ([]*kvConcat, error) {
		return nil, fmt.Errorf("cache tensor %q (from %s): %s", c.present.Name, c.name, fmt.Sprintf(why, args...))
	}
	if len(c.present.Consumers) != 1 {
		return refuse("read by %d nodes; a rank-3 cache is served when it holds keys and values side by side and one Split parts them for fused attention", len(c.present.Consumers))
	}
	sp := c.present.Consumers[0]
	if sp.Domain != "" || sp.OpType != "Split" || len(sp.Outputs) != 2 || in(sp, 0) != c.present {
		return refuse("read by node %v, not as K or V of fused attention (a rank-3 cache is served when it holds keys and values side by side and one Split parts them)", sp)
	}
	if a := sp.AttrInt("axis", 0); a != 2 && a != -1 {
		return refuse("split along axis %d; want the last", a)
	}
	w, _ := c.new.Shape[2].Const()
	b, total := c.present.Shape[0], c.present.Shape[1]
	var out []*kvConcat
	for i, half := range sp.Outputs {
		if half == nil || len(half.Shape) != 3 || len(half.Consumers) != 1 {
			return refuse("its %s half is not read by exactly one node", []string{"key", "value"}[i])
		}
		d, ok := half.Shape[2].Const()
		if !ok || 2*d != w {
			return refuse("split into %s; want two halves of %d", symshape.FormatShape(half.Shape), w/2)
		}
		rs := half.Consumers[0]
		if rs.Domain != "" || rs.OpType != "Reshape" || len(rs.Outputs) != 1 ||
			!shapeEqual(rs.Outputs[0].Shape, []symshape.Expr{b, total, symshape.Const(1), symshape.Const(d)}) {
			return refuse("its %s half is read by node %v, not as K or V of fused attention (%s.Attention)", []string{"key", "value"}[i], rs, tlite.Domain)
		}
		out = append(out, &kvConcat{node: rs, past: c.past, src: c.src, name: c.name + []string{"[key]", "[value]"}[i],
			present: rs.Outputs[0], order: [4]int64{0, 2, 1, 3}})
	}
	// The new rows, split alike, as [batch, 1, seq, head_dim].
	seq := c.new.Shape[1]
	d := w / 2
	var halves []*graph.Value
	for i := range out {
		h := g.NewValue(c.node.Name + []string{"_new_key", "_new_value"}[i])
		h.Type, h.Shape = c.new.Type, []symshape.Expr{b, seq, symshape.Const(d)}
		halves = append(halves, h)
	}
	split := &graph.Node{Name: c.node.Name + "_new_split", OpType: "Split", Inputs: append([]*graph.Value(nil), sp.Inputs...), Outputs: halves, Attrs: map[string]*graph.Attr{}}
	split.Inputs[0] = c.new
	for k, a := range sp.Attrs {
		split.Attrs[k] = a
	}
	if err := g.AddNode(split); err != nil {
		return nil, err
	}
	for i, h := range halves {
		// [batch, seq, d] -> [batch, seq, 1, d] (a view), then to the
		// logical order the cache write reads through.
		h4 := g.NewValue(h.Name + "_rows")
		h4.Type, h4.Shape = h.Type, []symshape.Expr{b, seq, symshape.Const(1), symshape.Const(d)}
		sh4, err := graph.Int64Tensor(h.Name+"_rows_shape", []int64{4}, []int64{0, 0, 1, d})
		if err != nil {
			return nil, err
		}
		sv := g.NewValue(h.Name + "_rows_shape")
		sv.Const, sv.Type, sv.Shape = sh4, dtype.Int64, []symshape.Expr{symshape.Const(4)}
		sv.Elems = append([]symshape.Expr(nil), h4.Shape...)
		g.Initializers = append(g.Initializers, sv)
		if err := g.AddNode(&graph.Node{Name: h.Name + "_rows", OpType: "Reshape", Inputs: []*graph.Value{h, sv}, Outputs: []*graph.Value{h4}}); err != nil {
			return nil, err
		}
		nw := g.NewValue(h.Name + "_heads")
		nw.Type, nw.Shape = h.Type, []symshape.Expr{b, symshape.Const(1), seq, symshape.Const(d)}
		if err := g.AddNode(&graph.Node{Name: h.Name + "_heads", OpType: "Transpose", Inputs: []*graph.Value{h4}, Outputs: []*graph.Value{nw},
			Attrs: map[string]*graph.Attr{"perm": {Name: "perm", Kind: graph.KindInts, Ints: []int64{0, 2, 1, 3}}}}); err != nil {
			return nil, err
		}
		out[i].new = nw
	}
	return out, nil
}

// fromPresents reports whether v is a cache tensor or is assembled from
// them by data movement alone (GPT-2's stacked present).
func fromPresents(v *graph.Value, presents map[*graph.Value]bool, depth int) bool {
	if presents[v] {
		return true
	}
	p := v.Producer
	if p == nil || p.Domain != "" || depth > 8 {
		return false
	}
	switch p.OpType {
	case "Concat":
		for _, in := range p.Inputs {
			if in == nil || !fromPresents(in, presents, depth+1) {
				return false
			}
		}
		return len(p.Inputs) > 0
	case "Unsqueeze", "Reshape", "Identity", "Squeeze", "Transpose":
		return len(p.Inputs) > 0 && p.Inputs[0] != nil && fromPresents(p.Inputs[0], presents, depth+1)
	}
	return false
}

// classifyReads sets the fallback reason of every cache tensor of live
// that some node cannot read in place, and returns the fused attentions
// that read the others in place (and will mask with kv_bias). An attention
// that adds a bias differing per head (ALiBi) keeps its own mask, so the
// caches it reads fall back too.
func classifyReads(live []*kvConcat) ([]*graph.Node, error) {
	perHead := func(a *graph.Node) string {
		// kv_bias takes the place of the model's own mask, which must
		// therefore be a mask: the same for every head. A bias that
		// differs per head (ALiBi) is more than who-sees-whom.
		if m := in(a, 3); m != nil && len(m.Shape) == 4 && !isOne(m.Shape[1]) {
			return fmt.Sprintf("attention %v adds %q %s, a bias that differs per head (ALiBi?), which kv_bias cannot replace", a, m.Name, symshape.FormatShape(m.Shape))
		}
		return ""
	}
	for _, c := range live {
		// Name a reader that computes with the cache rather than a Shape
		// read, which only stays because the attention it served did not
		// fuse.
		readers := append([]*graph.Node(nil), c.present.Consumers...)
		sort.SliceStable(readers, func(i, j int) bool { return readers[i].OpType != "Shape" && readers[j].OpType == "Shape" })
		for _, m := range readers {
			if m.Domain != tlite.Domain || m.OpType != "Attention" {
				c.fallback = fmt.Sprintf("read by node %v, not as K or V of fused attention (%s.Attention)", m, tlite.Domain)
				break
			}
			if err := checkAttentionRead(m, c.present, c.order); err != nil {
				c.fallback = err.Error()
				break
			}
			if why := perHead(m); why != "" {
				c.fallback = why
				break
			}
		}
		if c.fallback != "" && c.order != [4]int64{0, 1, 2, 3} {
			// The halves of a combined cache have no export layout of
			// their own to copy into.
			return nil, fmt.Errorf("cache tensor %q (from %s): %s", c.present.Name, c.name, c.fallback)
		}
	}
	var atts []*graph.Node
	seen := map[*graph.Node]bool{}
	for _, c := range live {
		if c.fallback != "" {
			continue
		}
		for _, m := range c.present.Consumers {
			if !seen[m] {
				seen[m] = true
				atts = append(atts, m)
			}
		}
	}
	return atts, nil
}

func allReadByAttention(concats []*kvConcat) bool {
	for _, c := range concats {
		if c.node.Graph() == nil {
			continue
		}
		for _, m := range c.present.Consumers {
			if m.Domain != tlite.Domain || m.OpType != "Attention" {
				return false
			}
		}
	}
	return true
}

// checkAttentionRead checks that attention node a reads present only as K
// or V, through permutation order (identity: present is [batch, heads,
// seq, head_dim]).
func checkAttentionRead(a *graph.Node, present *graph.Value, order [4]int64) error {
	for i, v := range a.Inputs {
		if v != present {
			continue
		}
		if i != 1 && i != 2 {
			return fmt.Errorf("attention %v reads cache tensor %q as input %d; want K (1) or V (2)", a, present.Name, i)
		}
		attr := []string{"", "k_perm", "v_perm"}[i]
		p, ok := a.AttrInts(attr)
		if !ok {
			p = []int64{0, 1, 2, 3}
		}
		if !(len(p) == 4 && p[0] == order[0] && p[1] == order[1] && p[2] == order[2] && p[3] == order[3]) {
			return fmt.Errorf("attention %v reads cache tensor %q through %s %v; want %v", a, present.Name, attr, p, order)
		}
	}
	return nil
}

// replacePastPositions gives the positions an export derives from the past
// length, Range(past, past + seq, 1) (GPT-2), from position_ids instead,
// adding that input when the model has none.
func replacePastPositions(g *graph.Graph, ids *graph.Value, past string, seq symshape.Expr) error {
	pastE := symshape.Sym(past)
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Domain != "" || n.OpType != "Range" || len(n.Inputs) != 3 || len(n.Outputs) != 1 {
			continue
		}
		start, limit, delta := scalarElem(n.Inputs[0]), scalarElem(n.Inputs[1]), scalarElem(n.Inputs[2])
		if !start.IsValid() || !limit.IsValid() || !delta.IsValid() ||
			!start.Equal(pastE) || !limit.Equal(symshape.Add(pastE, seq)) || !delta.Equal(symshape.Const(1)) {
			continue
		}
		pos := inputNamed(g, KVPositionsInput)
		if pos == nil {
			var err error
			if pos, err = addInput(g, KVPositionsInput, dtype.Int64, []symshape.Expr{ids.Shape[0], seq}); err != nil {
				return err
			}
		}
		if len(pos.Shape) != 2 || !pos.Type.IsInt() {
			return fmt.Errorf("input %q has shape %s (%v); want integer [batch, seq]", pos.Name, symshape.FormatShape(pos.Shape), pos.Type)
		}
		out := n.Outputs[0]
		shape := g.NewValue(out.Name + "_shape")
		t, err := graph.Int64Tensor(shape.Name, []int64{1}, []int64{-1})
		if err != nil {
			return err
		}
		shape.Const, shape.Type = t, dtype.Int64
		shape.Shape, shape.Elems = []symshape.Expr{symshape.Const(1)}, []symshape.Expr{symshape.Const(-1)}
		g.Initializers = append(g.Initializers, shape)
		flat := g.NewValue(out.Name + "_positions")
		flat.Type, flat.Shape = pos.Type, []symshape.Expr{seq}
		r := &graph.Node{Name: n.Name + "_positions", OpType: "Reshape", Inputs: []*graph.Value{pos, shape}, Outputs: []*graph.Value{flat}}
		if err := g.AddNode(r); err != nil {
			return err
		}
		if flat.Type != out.Type {
			// Positions feed a Gather, which takes int32 or int64 alike;
			// anything else reading them must see the Range's own type.
			for _, m := range out.Consumers {
				if m.OpType != "Gather" && m.OpType != "Unsqueeze" && m.OpType != "Reshape" {
					return fmt.Errorf("positions %q (%v) are read by %v; position_ids is %v", out.Name, out.Type, m, flat.Type)
				}
			}
		}
		if err := g.ReplaceAllUses(out, flat); err != nil {
			return err
		}
		if err := g.RemoveNode(n); err != nil {
			return err
		}
	}
	return nil
}

// unsliceGatheredTables lets Gathers read whole constant tables that the
// export first cuts to the current length: Hugging Face's rotary caches
// cos_cached[:seq_len] with seq_len = past + seq, then gathered by
// position_ids. Gathering rows of the whole table gives the same rows, and
// the cut was the only thing tying the table to the past length.
func unsliceGatheredTables(g *graph.Graph) error {
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		if n.Graph() != g || n.Domain != "" || n.OpType != "Slice" || len(n.Inputs) < 3 || len(n.Outputs) != 1 {
			continue
		}
		table, out := n.Inputs[0], n.Outputs[0]
		if table == nil || out == nil || table.Const == nil || len(table.Shape) == 0 || isOutput(g, out) || len(out.Consumers) == 0 {
			continue
		}
		starts, ok := knownInts(in(n, 1))
		if !ok || len(starts) != 1 || !starts[0].Equal(symshape.Const(0)) {
			continue
		}
		if a := in(n, 3); a != nil {
			axes, ok := knownInts(a)
			if !ok || len(axes) != 1 {
				continue
			}
			if k, ok := axes[0].Const(); !ok || (k != 0 && k != -int64(len(table.Shape))) {
				continue
			}
		}
		if st := in(n, 4); st != nil {
			steps, ok := knownInts(st)
			if !ok || len(steps) != 1 || !steps[0].Equal(symshape.Const(1)) {
				continue
			}
		}
		gathers := true
		for _, m := range out.Consumers {
			if m.Domain != "" || m.OpType != "Gather" || m.AttrInt("axis", 0) != 0 || in(m, 0) != out || in(m, 1) == out {
				gathers = false
			}
		}
		if !gathers {
			continue
		}
		for _, m := range append([]*graph.Node(nil), out.Consumers...) {
			m.Inputs[0] = table
		}
		g.Relink()
		if err := g.RemoveNode(n); err != nil {
			return err
		}
	}
	return nil
}

// mentions reports whether any expression of es uses symbol sym.
func mentions(es []symshape.Expr, sym string) bool {
	for _, e := range es {
		for _, s := range e.Symbols() {
			if s == sym {
				return true
			}
		}
	}
	return false
}

// boundTablesByCapacity handles the last legitimate use of the past length
// once attention reads the cache: cutting constant tables to past + seq
// rows before reading rows of them by position (GPT-NeoX's cos_cached[:seq_len]
// expanded, tiled and read with GatherElements). The cut length only has
// to cover every position, so past becomes capacity - seq (the cut covers
// the whole cache) and the reads of the past inputs' shapes are given
// those sizes. Any other use of the past length that is still live (data
// computed from it, an output sized by it) is left for checkNoPast to
// name.
func boundTablesByCapacity(g *graph.Graph, res *infer.Result, ids *graph.Value, sources map[*graph.Value]bool, past string, capacity int) error {
	vals := func(n *graph.Node) []*graph.Value {
		return append(append([]*graph.Value(nil), n.Inputs...), n.Outputs...)
	}
	uses := false
	for _, n := range g.Nodes {
		for _, v := range vals(n) {
			if v != nil && (mentions(v.Shape, past) || mentions(v.Elems, past)) {
				uses = true
			}
		}
	}
	if !uses {
		return nil
	}
	folded := func(n *graph.Node) bool {
		c, ok := res.Class[n]
		return ok && c == infer.Folded
	}
	// Values holding rows of a cut constant table.
	cut := map[*graph.Value]bool{}
	for _, n := range g.Nodes {
		if n.Domain != "" || len(n.Outputs) != 1 || n.Outputs[0] == nil || folded(n) {
			continue
		}
		x := in(n, 0)
		switch n.OpType {
		case "Slice":
			// Only the end may follow the past length: a start that
			// does would shift the rows read.
			starts, ok := knownInts(in(n, 1))
			if !ok || !constElems(starts) {
				continue
			}
			if x != nil && (x.Const != nil || cut[x]) {
				cut[n.Outputs[0]] = true
			}
		case "Expand", "Tile", "Unsqueeze", "Reshape", "Transpose", "Squeeze", "Identity":
			if x != nil && cut[x] {
				cut[n.Outputs[0]] = true
			}
		}
	}
	for _, n := range g.Nodes {
		if folded(n) {
			continue
		}
		tainted := false
		for _, v := range n.Inputs {
			if v != nil && (mentions(v.Shape, past) || mentions(v.Elems, past)) {
				tainted = true
			}
		}
		if !tainted {
			continue
		}
		ok := n.Domain == "" && len(n.Outputs) == 1 && cut[n.Outputs[0]]
		if n.Domain == "" && (n.OpType == "Gather" || n.OpType == "GatherElements") && cut[in(n, 0)] &&
			in(n, 1) != nil && !mentions(in(n, 1).Shape, past) && !mentions(in(n, 1).Elems, past) &&
			len(n.Outputs) == 1 && !mentions(n.Outputs[0].Shape, past) {
			ok = true
		}
		if !ok {
			return nil // not only table cuts: checkNoPast names the node
		}
	}
	for _, v := range g.Outputs {
		if mentions(v.Shape, past) {
			return nil
		}
	}
	// The past inputs' shapes, with past = capacity - seq.
	seq := ids.Shape[1]
	repl := map[string]symshape.Expr{past: symshape.Sub(symshape.Const(int64(capacity)), seq)}
	for _, n := range append([]*graph.Node(nil), g.Nodes...) {
		x := in(n, 0)
		if x == nil || !sources[x] {
			continue
		}
		if !folded(n) || n.Domain != "" || n.OpType != "Shape" || len(n.Outputs) != 1 {
			return nil
		}
		if err := pastShape(g, res, n, ids, repl); err != nil {
			return err
		}
	}
	for _, n := range g.Nodes {
		for _, v := range vals(n) {
			if v == nil {
				continue
			}
			for i, e := range v.Shape {
				v.Shape[i] = e.Substitute(repl)
			}
			for i, e := range v.Elems {
				v.Elems[i] = e.Substitute(repl)
			}
		}
	}
	return nil
}

// pastShape replaces sh = Shape(past input) (start/end attributes
// included) by the same sizes with the past length substituted, computed
// from input_ids' shape: Concat of Shape(input_ids) pieces and constants,
// all folded.
func pastShape(g *graph.Graph, res *infer.Result, sh *graph.Node, ids *graph.Value, repl map[string]symshape.Expr) error {
	out := sh.Outputs[0]
	want := make([]symshape.Expr, len(out.Elems))
	for i, e := range out.Elems {
		want[i] = e.Substitute(repl)
	}
	// input_ids' shape is [batch, seq]: each wanted element is a
	// constant, or batch, or capacity - seq; make them one by one.
	idsShape := g.NewValue(out.Name + "_ids_shape")
	idsShape.Type, idsShape.Shape, idsShape.Elems = dtype.Int64, []symshape.Expr{symshape.Const(2)}, append([]symshape.Expr(nil), ids.Shape...)
	nodes := []*graph.Node{{Name: sh.Name + "_ids", OpType: "Shape", Inputs: []*graph.Value{ids}, Outputs: []*graph.Value{idsShape}}}
	var parts []*graph.Value
	for i, e := range want {
		part := g.NewValue(fmt.Sprintf("%s_%d", out.Name, i))
		part.Type, part.Shape, part.Elems = dtype.Int64, []symshape.Expr{symshape.Const(1)}, []symshape.Expr{e}
		k, isConst := e.Const()
		switch {
		case isConst:
			t, err := graph.Int64Tensor(part.Name, []int64{1}, []int64{k})
			if err != nil {
				return err
			}
			part.Const = t
			part.Type = dtype.Int64
			g.Initializers = append(g.Initializers, part)
		default:
			// e is batch or capacity - seq: Slice input_ids' shape, and
			// for the latter subtract it from the capacity.
			axis := int64(0)
			if !e.Equal(ids.Shape[0]) {
				axis = 1
			}
			idx, err := constInt64(g, fmt.Sprintf("%s_%d_idx", out.Name, i), axis)
			if err != nil {
				return err
			}
			idx2, err := constInt64(g, fmt.Sprintf("%s_%d_end", out.Name, i), axis+1)
			if err != nil {
				return err
			}
			sl := part
			if axis == 1 {
				sl = g.NewValue(part.Name + "_seq")
				sl.Type, sl.Shape, sl.Elems = dtype.Int64, []symshape.Expr{symshape.Const(1)}, []symshape.Expr{ids.Shape[1]}
			}
			nodes = append(nodes, &graph.Node{Name: part.Name + "_slice", OpType: "Slice", Inputs: []*graph.Value{idsShape, idx, idx2}, Outputs: []*graph.Value{sl}})
			if axis == 1 {
				// capacity - seq == e: recover capacity from e.
				k, ok := symshape.Add(e, ids.Shape[1]).Const()
				if !ok {
					return fmt.Errorf("the past length of %q is %s; want batch or capacity - seq", out.Name, e)
				}
				capV, err := constInt64(g, part.Name+"_capacity", k)
				if err != nil {
					return err
				}
				nodes = append(nodes, &graph.Node{Name: part.Name + "_sub", OpType: "Sub", Inputs: []*graph.Value{capV, sl}, Outputs: []*graph.Value{part}})
			}
		}
		parts = append(parts, part)
	}
	shape := g.NewValue(out.Name + "_kv")
	shape.Type, shape.Shape, shape.Elems = dtype.Int64, []symshape.Expr{symshape.Const(int64(len(want)))}, want
	nodes = append(nodes, &graph.Node{Name: sh.Name + "_kv", OpType: "Concat", Inputs: parts, Outputs: []*graph.Value{shape},
		Attrs: map[string]*graph.Attr{"axis": {Name: "axis", Kind: graph.KindInt, I: 0}}})
	for _, n := range nodes {
		if err := g.AddNode(n); err != nil {
			return err
		}
		res.Class[n] = infer.Folded
	}
	if err := g.ReplaceAllUses(out, shape); err != nil {
		return err
	}
	return g.RemoveNode(sh)
}

// constInt64 adds a one-element int64 initializer.
func constInt64(g *graph.Graph, name string, k int64) (*graph.Value, error) {
	v := g.NewValue(name)
	t, err := graph.Int64Tensor(v.Name, []int64{1}, []int64{k})
	if err != nil {
		return nil, err
	}
	v.Const, v.Type = t, dtype.Int64
	v.Shape, v.Elems = []symshape.Expr{symshape.Const(1)}, []symshape.Expr{symshape.Const(k)}
	g.Initializers = append(g.Initializers, v)
	return v, nil
}

// scalarElem is the symbolic content of a one-element value.
func scalarElem(v *graph.Value) symshape.Expr {
	if v == nil || len(v.Elems) != 1 {
		return symshape.Expr{}
	}
	return v.Elems[0]
}

// checkNoPast fails when a node the rewrite kept still depends on the past
// length: a use of the cache the rewrite does not know.
func checkNoPast(g *graph.Graph, past string) error {
	mentions := func(es []symshape.Expr) bool {
		for _, e := range es {
			for _, s := range e.Symbols() {
				if s == past {
					return true
				}
			}
		}
		return false
	}
	for _, n := range g.Nodes {
		for _, vs := range [][]*graph.Value{n.Inputs, n.Outputs} {
			for _, v := range vs {
				if v != nil && (mentions(v.Shape) || mentions(v.Elems)) {
					return fmt.Errorf("node %v still depends on the past length %q through %q %s; the rewrite does not know this use of the cache", n, past, v.Name, symshape.FormatShape(v.Shape))
				}
			}
		}
	}
	for _, v := range g.Outputs {
		if mentions(v.Shape) {
			return fmt.Errorf("graph output %q %s depends on the past length %q", v.Name, symshape.FormatShape(v.Shape), past)
		}
	}
	return nil
}

func inputNamed(g *graph.Graph, name string) *graph.Value {
	for _, v := range g.Inputs {
		if v.Name == name {
			return v
		}
	}
	return nil
}

// addInput adds a graph input with a derived shape (and matching declared
// dims, for anything that infers the graph again).
func addInput(g *graph.Graph, name string, t dtype.Type, shape []symshape.Expr) (*graph.Value, error) {
	if g.Value(name) != nil {
		return nil, fmt.Errorf("the model already has a value named %q", name)
	}
	v := g.NewValue(name)
	v.Type, v.Shape = t, shape
	for _, d := range shape {
		if k, ok := d.Const(); ok {
			v.Declared = append(v.Declared, graph.Dim{Value: k})
		} else {
			v.Declared = append(v.Declared, graph.Dim{Value: -1, Param: d.String()})
		}
	}
	g.Inputs = append(g.Inputs, v)
	return v, nil
}

// KVPastSources returns the graph inputs that Concat-grown caches of g
// come from (none when g has no such cache or the pasts disagree).
func KVPastSources(g *graph.Graph) []*graph.Value {
	concats, _, err := findKVConcats(g)
	if err != nil {
		return nil
	}
	out := make([]*graph.Value, len(concats))
	for i, c := range concats {
		out[i] = c.src
	}
	return out
}

// pastFromLength serves the layers that read a cache tensor in the
// export's layout (the fallback copies): they may still compute with the
// past length, the model's own mask above all. With the cache filled in
// slot order and no padding (the KVWrites say so: "ordered", pad 1), the
// past length is kv_len - seq, so it is substituted everywhere, the past
// inputs' Shape reads are rebuilt from kv_bias's shape, and an
// attention_mask still read becomes ones of [batch, kv_len].
func pastFromLength(g *graph.Graph, res *infer.Result, ids, bias *graph.Value, sources map[*graph.Value]bool, past string, seq symshape.Expr) error {
	kvLen := bias.Shape[3]
	repl := map[string]symshape.Expr{past: symshape.Sub(kvLen, seq)}
	// Shape(bias) and the pieces of it the rebuilt values need, folded.
	biasShape := g.NewValue(bias.Name + "_shape")
	biasShape.Type, biasShape.Shape, biasShape.Elems = dtype.Int64, []symshape.Expr{symshape.Const(4)}, append([]symshape.Expr(nil), bias.Shape...)
	var nodes []*graph.Node
	nodes = append(nodes, &graph.Node{Name: bias.Name + "_shape", OpType: "Shape", Inputs: []*graph.Value{bias}, Outputs: []*graph.Value{biasShape}})
	// piece makes the one-element value e out of bias's shape [batch, 1,
	// seq, kv_len]: a constant, a dim of it, or kv_len - seq.
	piece := func(name string, e symshape.Expr) (*graph.Value, error) {
		if k, ok := e.Const(); ok {
			return constInt64(g, name, k)
		}
		dim := func(name string, i int64) (*graph.Value, error) {
			start, err := constInt64(g, name+"_start", i)
			if err != nil {
				return nil, err
			}
			end, err := constInt64(g, name+"_end", i+1)
			if err != nil {
				return nil, err
			}
			v := g.NewValue(name)
			v.Type, v.Shape, v.Elems = dtype.Int64, []symshape.Expr{symshape.Const(1)}, []symshape.Expr{bias.Shape[i]}
			nodes = append(nodes, &graph.Node{Name: name, OpType: "Slice", Inputs: []*graph.Value{biasShape, start, end}, Outputs: []*graph.Value{v}})
			return v, nil
		}
		for i := int64(0); i < 4; i++ {
			if e.Equal(bias.Shape[i]) {
				return dim(name, i)
			}
		}
		if !e.Equal(repl[past]) {
			return nil, fmt.Errorf("the size %s is neither batch, seq, kv_len nor kv_len - seq", e)
		}
		l, err := dim(name+"_kv_len", 3)
		if err != nil {
			return nil, err
		}
		s, err := dim(name+"_seq", 2)
		if err != nil {
			return nil, err
		}
		v := g.NewValue(name)
		v.Type, v.Shape, v.Elems = dtype.Int64, []symshape.Expr{symshape.Const(1)}, []symshape.Expr{e}
		nodes = append(nodes, &graph.Node{Name: name + "_sub", OpType: "Sub", Inputs: []*graph.Value{l, s}, Outputs: []*graph.Value{v}})
		return v, nil
	}
	concat := func(name string, es []symshape.Expr) (*graph.Value, error) {
		var parts []*graph.Value
		for i, e := range es {
			p, err := piece(fmt.Sprintf("%s_%d", name, i), e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			parts = append(parts, p)
		}
		v := g.NewValue(name)
		v.Type, v.Shape, v.Elems = dtype.Int64, []symshape.Expr{symshape.Const(int64(len(es)))}, es
		nodes = append(nodes, &graph.Node{Name: name, OpType: "Concat", Inputs: parts, Outputs: []*graph.Value{v},
			Attrs: map[string]*graph.Attr{"axis": {Name: "axis", Kind: graph.KindInt, I: 0}}})
		return v, nil
	}
	folded := func(n *graph.Node) bool {
		c, ok := res.Class[n]
		return ok && c == infer.Folded
	}
	// The past inputs' Shape reads: the same sizes, from kv_bias.
	var swaps [][2]*graph.Value
	var dead []*graph.Node
	for _, n := range g.Nodes {
		x := in(n, 0)
		if x == nil || !sources[x] {
			continue
		}
		if !folded(n) || n.Domain != "" || n.OpType != "Shape" || len(n.Outputs) != 1 {
			return fmt.Errorf("past input %q is still read by node %v; the rewrite does not know this use of the cache", x.Name, n)
		}
		out := n.Outputs[0]
		want := make([]symshape.Expr, len(out.Elems))
		for i, e := range out.Elems {
			want[i] = e.Substitute(repl)
		}
		v, err := concat(out.Name+"_kv", want)
		if err != nil {
			return err
		}
		swaps = append(swaps, [2]*graph.Value{out, v})
		dead = append(dead, n)
	}
	// The padding mask: every slot below kv_len holds a token.
	var mask *graph.Value
	if m := inputNamed(g, "attention_mask"); m != nil && len(m.Consumers) > 0 {
		if len(m.Shape) != 2 {
			return fmt.Errorf("input attention_mask has shape %s; want [batch, past + seq]", symshape.FormatShape(m.Shape))
		}
		shape, err := concat(m.Name+"_kv_shape", []symshape.Expr{bias.Shape[0], kvLen})
		if err != nil {
			return err
		}
		one := g.NewValue(m.Name + "_one")
		t, err := oneTensor(one.Name, m.Type)
		if err != nil {
			return err
		}
		one.Const, one.Type, one.Shape = t, m.Type, []symshape.Expr{}
		one.Elems = []symshape.Expr{symshape.Const(1)}
		g.Initializers = append(g.Initializers, one)
		mask = g.NewValue(m.Name + "_kv")
		mask.Type, mask.Shape = m.Type, []symshape.Expr{bias.Shape[0], kvLen}
		if err := g.AddNode(&graph.Node{Name: m.Name + "_kv", OpType: "Expand", Inputs: []*graph.Value{one, shape}, Outputs: []*graph.Value{mask}}); err != nil {
			return err
		}
		swaps = append(swaps, [2]*graph.Value{m, mask})
	}
	for _, n := range nodes {
		if err := g.AddNode(n); err != nil {
			return err
		}
		res.Class[n] = infer.Folded
	}
	for _, sw := range swaps {
		if err := g.ReplaceAllUses(sw[0], sw[1]); err != nil {
			return err
		}
	}
	for _, n := range dead {
		if err := g.RemoveNode(n); err != nil {
			return err
		}
	}
	for _, n := range g.Nodes {
		for _, vs := range [][]*graph.Value{n.Inputs, n.Outputs} {
			for _, v := range vs {
				if v == nil {
					continue
				}
				for i, e := range v.Shape {
					v.Shape[i] = e.Substitute(repl)
				}
				for i, e := range v.Elems {
					v.Elems[i] = e.Substitute(repl)
				}
			}
		}
	}
	for i, l := range res.Limits {
		if l.Expr.IsValid() {
			res.Limits[i].Expr = l.Expr.Substitute(repl)
		}
	}
	return nil
}

// oneTensor is a scalar 1 of type t.
func oneTensor(name string, t dtype.Type) (*graph.Tensor, error) {
	switch t {
	case dtype.Int64:
		return graph.Int64Tensor(name, []int64{}, []int64{1})
	case dtype.Float32:
		return graph.Float32Tensor(name, []int64{}, []float32{1})
	case dtype.Int32:
		return graph.NewTensor(name, t, []int64{}, []byte{1, 0, 0, 0})
	case dtype.Bool:
		return graph.NewTensor(name, t, []int64{}, []byte{1})
	}
	return nil, fmt.Errorf("an attention_mask of %v", t)
}
