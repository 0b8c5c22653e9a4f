package importance

import (
	"fmt"
	"math"
	"strings"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/graph/dtype"
	"github.com/tlite/tlite/symshape"
)

// Method is the label the proxy's scores carry (in the scores file and in
// the elastic.json built from them), as opposed to elastic.py's "taylor".
const Method = "proxy: activation x weight magnitude, forward only"

// Options configures a Collector.
type Options struct {
	// Engine opens the session (Device: "go" for the pure-Go backend, ""
	// for OpenCL). Max is overwritten with the window shape below.
	Engine engine.Options
	// HeadDim is the attention head size (config.json's head_dim).
	HeadDim int
	// Batch and Seq are the largest window shape Add is given: the memory
	// plan is sized for them.
	Batch, Seq int
	// Remove lists layers whose blocks are replaced by their residual
	// passthrough, for layer importance by removal: their O and down
	// weights are zeroed, so attention and MLP add exactly 0 to the
	// residual stream.
	Remove []int
	// lossOnly makes a collector that measures the loss alone
	// (LayerRemoval's passes): the O and down inputs stay internal values,
	// so no run copies them back to the host.
	lossOnly bool
}

// Collector runs calibration windows through a tlite session of a
// llama-style decoder and accumulates the proxy's statistics.
type Collector struct {
	s       *engine.Session
	layers  []Layer
	logits  string // the logits output ("" when the graph has none named so)
	headDim int
	nHeads  int
	nKV     int
	ffn     int
	batch   int
	seq     int
	// oNorm[l][j] is ||W_o[j, :]||₂ of layer l's O weight (a row, ONNX's
	// [in, out] layout), dNorm[l][i] that of W_down.
	oNorm, dNorm [][]float64
	// oSum[l][j] and dSum[l][i] are Σ_t |a_tj| of the O and down products'
	// inputs over every token seen.
	oSum, dSum [][]float64
	tokens     int
	windows    int
	lossOnly   bool   // no statistics: see Options.lossOnly
	backend    string // the session's backend, "opencl" or "go"
	lossSum    float64
	lossN      int
}

// New locates m's layers, reads the O and down weights' row norms, makes
// the O and down products' inputs graph outputs (dropping the present
// key/value outputs, which the proxy does not need) and opens a session on
// m. m is annotated in place and must stay open until Close.
func New(m *graph.Model, opts Options) (*Collector, error) {
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("importance: no model")
	}
	if opts.HeadDim <= 0 {
		return nil, fmt.Errorf("importance: head_dim %d; give the model's head size (config.json head_dim)", opts.HeadDim)
	}
	if opts.Batch <= 0 || opts.Seq < 2 {
		return nil, fmt.Errorf("importance: window shape %dx%d; want a batch ≥ 1 and ≥ 2 tokens per window", opts.Batch, opts.Seq)
	}
	g := m.Graph
	layers, err := Locate(g)
	if err != nil {
		return nil, err
	}
	c := &Collector{layers: layers, headDim: opts.HeadDim, batch: opts.Batch, seq: opts.Seq, lossOnly: opts.lossOnly}
	for _, l := range opts.Remove {
		if l < 0 || l >= len(layers) {
			return nil, fmt.Errorf("importance: cannot remove layer %d of %d", l, len(layers))
		}
		for _, w := range []string{layers[l].O, layers[l].Down} {
			if err := zeroWeight(g.Value(w)); err != nil {
				return nil, fmt.Errorf("importance: removing layer %d: %w", l, err)
			}
		}
	}
	for l, ly := range layers {
		q, k := g.Value(ly.Q).Const.Dims, g.Value(ly.K).Const.Dims
		o, gate, down := g.Value(ly.O).Const.Dims, g.Value(ly.Gate).Const.Dims, g.Value(ly.Down).Const.Dims
		if q[1]%int64(opts.HeadDim) != 0 || k[1]%int64(opts.HeadDim) != 0 {
			return nil, fmt.Errorf("importance: layer %d: Q width %d or K width %d is not a multiple of head_dim %d", l, q[1], k[1], opts.HeadDim)
		}
		heads, kv := int(q[1])/opts.HeadDim, int(k[1])/opts.HeadDim
		if kv == 0 || heads%kv != 0 {
			return nil, fmt.Errorf("importance: layer %d: %d query heads over %d KV heads", l, heads, kv)
		}
		if o[0] != q[1] || down[0] != gate[1] {
			return nil, fmt.Errorf("importance: layer %d: O weight %v does not read Q's %d columns or down weight %v the FFN's %d", l, o, q[1], down, gate[1])
		}
		if l == 0 {
			c.nHeads, c.nKV, c.ffn = heads, kv, int(gate[1])
		} else if heads != c.nHeads || kv != c.nKV || int(gate[1]) != c.ffn {
			return nil, fmt.Errorf("importance: layer %d has %d/%d heads and FFN %d; layer 0 has %d/%d and %d", l, heads, kv, gate[1], c.nHeads, c.nKV, c.ffn)
		}
		if c.lossOnly {
			continue
		}
		on, err := rowNorms(g.Value(ly.O).Const)
		if err != nil {
			return nil, fmt.Errorf("importance: layer %d O weight: %w", l, err)
		}
		dn, err := rowNorms(g.Value(ly.Down).Const)
		if err != nil {
			return nil, fmt.Errorf("importance: layer %d down weight: %w", l, err)
		}
		c.oNorm, c.dNorm = append(c.oNorm, on), append(c.dNorm, dn)
		c.oSum, c.dSum = append(c.oSum, make([]float64, len(on))), append(c.dSum, make([]float64, len(dn)))
	}
	// The graph's outputs become the logits (for the calibration loss) and
	// the two inputs per layer the statistics read.
	var outs []*graph.Value
	for _, v := range g.Outputs {
		if strings.Contains(strings.ToLower(v.Name), "logits") {
			outs = append(outs, v)
			c.logits = v.Name
			break
		}
	}
	if c.lossOnly && c.logits == "" {
		return nil, fmt.Errorf("importance: the model has no output named like logits, so no loss to measure")
	}
	seen := map[*graph.Value]bool{}
	for _, ly := range c.statLayers() {
		for _, name := range []string{ly.OIn, ly.DownIn} {
			v := g.Value(name)
			if v == nil || seen[v] {
				return nil, fmt.Errorf("importance: value %q is missing or read by two layers' products", name)
			}
			seen[v] = true
			outs = append(outs, v)
		}
	}
	g.Outputs = outs
	eo := opts.Engine
	eo.Max = map[string]int64{"batch": int64(opts.Batch), "seq": int64(opts.Seq), "past": 0, "total": int64(opts.Seq)}
	eo.KVCache = nil
	s, err := engine.OpenModel(m, eo)
	if err != nil {
		return nil, fmt.Errorf("importance: %w", err)
	}
	c.s, c.backend = s, s.Device().Backend
	return c, nil
}

// zeroWeight replaces an initializer's contents by zeros of the same
// shape (the loaded tensor is a read-only view into the file).
func zeroWeight(v *graph.Value) error {
	t := v.Const
	if t.Type != dtype.Float32 {
		return fmt.Errorf("weight %s is %s; want float32", v.Name, t.Type)
	}
	v.Const = &graph.Tensor{Name: t.Name, Type: t.Type, Dims: t.Dims, Data: make([]byte, 4*t.NumElements())}
	return nil
}

// rowNorms returns the L2 norm of each row of a float32 matrix.
func rowNorms(t *graph.Tensor) ([]float64, error) {
	x, err := t.Float32s()
	if err != nil {
		return nil, err
	}
	rows, cols := int(t.Dims[0]), int(t.Dims[1])
	out := make([]float64, rows)
	for r := range out {
		var s float64
		for _, v := range x[r*cols : (r+1)*cols] {
			s += float64(v) * float64(v)
		}
		out[r] = math.Sqrt(s)
	}
	return out, nil
}

// Close releases the session.
func (c *Collector) Close() error {
	if c.s == nil {
		return nil
	}
	err := c.s.Close()
	c.s = nil
	return err
}

// statLayers is the layers whose O and down inputs are read back: all of
// them, or none for a loss-only collector.
func (c *Collector) statLayers() []Layer {
	if c.lossOnly {
		return nil
	}
	return c.layers
}

// Layers is the number of decoder layers found.
func (c *Collector) Layers() int { return len(c.layers) }

// Add runs windows (each a row of token ids, all the same length, at most
// the Options' Batch rows of Seq tokens) through the model and accumulates
// the statistics and the mean next-token loss.
func (c *Collector) Add(windows [][]int) error {
	if c.s == nil {
		return fmt.Errorf("importance: Add on a closed collector")
	}
	b := len(windows)
	if b == 0 || b > c.batch {
		return fmt.Errorf("importance: %d windows in one call; want 1..%d", b, c.batch)
	}
	sl := len(windows[0])
	if sl < 2 || sl > c.seq {
		return fmt.Errorf("importance: windows of %d tokens; want 2..%d", sl, c.seq)
	}
	ids := make([]int64, 0, b*sl)
	for i, w := range windows {
		if len(w) != sl {
			return fmt.Errorf("importance: window %d has %d tokens, window 0 has %d", i, len(w), sl)
		}
		for _, t := range w {
			ids = append(ids, int64(t))
		}
	}
	feeds, err := c.feeds(b, sl, ids)
	if err != nil {
		return err
	}
	out, err := c.s.Run(feeds)
	if err != nil {
		return fmt.Errorf("importance: %w", err)
	}
	for l, ly := range c.statLayers() {
		if err := addAbs(c.oSum[l], out[ly.OIn], b*sl); err != nil {
			return fmt.Errorf("importance: layer %d attention output: %w", l, err)
		}
		if err := addAbs(c.dSum[l], out[ly.DownIn], b*sl); err != nil {
			return fmt.Errorf("importance: layer %d FFN activation: %w", l, err)
		}
	}
	if c.logits != "" {
		if err := c.addLoss(out[c.logits], windows); err != nil {
			return err
		}
	}
	c.tokens += b * sl
	c.windows += b
	return nil
}

// feeds makes the inputs of one run: input_ids, an all-ones attention mask,
// positions 0..sl-1, and every past key/value input empty (past length 0).
func (c *Collector) feeds(b, sl int, ids []int64) (map[string]*tensor.Dense, error) {
	bind := symshape.Binding{}
	feeds := map[string]*tensor.Dense{}
	mk := func(fill func(i, j int) int64) *tensor.Dense {
		d := make([]int64, b*sl)
		for i := 0; i < b; i++ {
			for j := 0; j < sl; j++ {
				d[i*sl+j] = fill(i, j)
			}
		}
		return tensor.New(tensor.WithShape(b, sl), tensor.WithBacking(d))
	}
	ports := c.s.Inputs()
	for _, p := range ports {
		var t *tensor.Dense
		switch p.Name {
		case "input_ids":
			t = tensor.New(tensor.WithShape(b, sl), tensor.WithBacking(ids))
		case "attention_mask":
			t = mk(func(int, int) int64 { return 1 })
		case "position_ids":
			t = mk(func(_, j int) int64 { return int64(j) })
		default:
			continue
		}
		if len(p.Shape) != 2 {
			return nil, fmt.Errorf("importance: input %s has rank %d; want [batch, seq]", p.Name, len(p.Shape))
		}
		for i, d := range p.Shape {
			if name, bare := d.SymName(); bare {
				bind[name] = int64(t.Shape()[i])
			}
		}
		feeds[p.Name] = t
	}
	if feeds["input_ids"] == nil {
		return nil, fmt.Errorf("importance: the model has no input_ids input")
	}
	for _, p := range ports {
		if feeds[p.Name] != nil {
			continue
		}
		if !strings.Contains(strings.ToLower(p.Name), "past") || p.Type != "float32" {
			return nil, fmt.Errorf("importance: input %s (%s) is neither a token input nor a float past key/value", p.Name, p.Type)
		}
		bb := symshape.Binding{}
		for k, v := range bind {
			bb[k] = v
		}
		shape := make([]int, len(p.Shape))
		n := 1
		for i, d := range p.Shape {
			for _, s := range d.Symbols() {
				if _, ok := bb[s]; !ok {
					bb[s] = 0
				}
			}
			v, err := d.Eval(bb)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("importance: input %s: cannot size dimension %d (%s) for an empty past", p.Name, i, d)
			}
			shape[i] = int(v)
			n *= int(v)
		}
		if n != 0 {
			return nil, fmt.Errorf("importance: input %s has shape %v with an empty past; want a past axis", p.Name, shape)
		}
		feeds[p.Name] = tensor.New(tensor.WithShape(shape...), tensor.Of(tensor.Float32))
	}
	return feeds, nil
}

// addAbs adds Σ over rows of |x| per column to sum; x is [.., rows, cols]
// with rows·cols elements.
func addAbs(sum []float64, t *tensor.Dense, rows int) error {
	if t == nil {
		return fmt.Errorf("no output")
	}
	x, ok := t.Data().([]float32)
	if !ok {
		return fmt.Errorf("output of type %s; want float32", t.Dtype())
	}
	cols := len(sum)
	if len(x) != rows*cols {
		return fmt.Errorf("%d values; want %d rows of %d", len(x), rows, cols)
	}
	for r := 0; r < rows; r++ {
		for j, v := range x[r*cols : (r+1)*cols] {
			sum[j] += math.Abs(float64(v))
		}
	}
	return nil
}

// addLoss adds the next-token cross-entropy of every window position but
// the last.
func (c *Collector) addLoss(t *tensor.Dense, windows [][]int) error {
	x, ok := t.Data().([]float32)
	b, sl := len(windows), len(windows[0])
	if !ok || len(x)%(b*sl) != 0 {
		return fmt.Errorf("importance: logits of %v; want [%d, %d, vocab] float32", t.Shape(), b, sl)
	}
	vocab := len(x) / (b * sl)
	for i, w := range windows {
		for j := 0; j+1 < sl; j++ {
			row := x[(i*sl+j)*vocab : (i*sl+j+1)*vocab]
			next := w[j+1]
			if next < 0 || next >= vocab {
				return fmt.Errorf("importance: token %d outside the vocabulary of %d", next, vocab)
			}
			mx := math.Inf(-1)
			for _, v := range row {
				mx = math.Max(mx, float64(v))
			}
			var z float64
			for _, v := range row {
				z += math.Exp(float64(v) - mx)
			}
			c.lossSum += mx + math.Log(z) - float64(row[next])
			c.lossN++
		}
	}
	return nil
}

// Loss is the mean next-token loss over the windows added so far,
// computed from the engine's logits.
func (c *Collector) Loss() (float64, error) {
	if c.logits == "" {
		return 0, fmt.Errorf("importance: the model has no output named like logits")
	}
	if c.lossN == 0 {
		return 0, fmt.Errorf("importance: no calibration tokens were run")
	}
	return c.lossSum / float64(c.lossN), nil
}

// LayerRemoval returns, per layer, the increase of the mean next-token loss
// over windows when that layer's block is replaced by its residual
// passthrough (Options.Remove), relative to base, the intact model's loss.
// open loads a fresh copy of the model for each layer (New annotates and
// changes the one it is given).
func LayerRemoval(open func() (*graph.Model, error), opts Options, layers int, windows [][]int, base float64) ([]float64, error) {
	out := make([]float64, layers)
	for l := range out {
		m, err := open()
		if err != nil {
			return nil, err
		}
		o := opts
		o.Remove, o.lossOnly = []int{l}, true
		loss, err := func() (float64, error) {
			defer m.Close()
			c, err := New(m, o)
			if err != nil {
				return 0, err
			}
			defer c.Close()
			for i := 0; i < len(windows); i += o.Batch {
				if err := c.Add(windows[i:min(i+o.Batch, len(windows))]); err != nil {
					return 0, err
				}
			}
			return c.Loss()
		}()
		if err != nil {
			return nil, fmt.Errorf("importance: layer %d removed: %w", l, err)
		}
		out[l] = loss - base
	}
	return out, nil
}

// Scores are the proxy's unit scores of every layer, what Write stores.
type Scores struct {
	Format   string        `json:"format"`
	Method   string        `json:"method"`
	NLayers  int           `json:"n_layers"`
	NHeads   int           `json:"n_heads"`
	NKVHeads int           `json:"n_kv_heads"`
	HeadDim  int           `json:"head_dim"`
	FFN      int           `json:"ffn"`
	Tokens   int           `json:"tokens"`
	Windows  int           `json:"windows"`
	Loss     float64       `json:"calibration_loss,omitempty"`
	Source   string        `json:"source,omitempty"`
	Backend  string        `json:"backend,omitempty"`
	Layers   []LayerScores `json:"layers"`
	// LayerRemoval is each layer's loss increase when removed (LayerRemoval),
	// when computed.
	LayerRemoval []float64 `json:"layer_removal_loss_increase,omitempty"`
}

// LayerScores is one layer's unit scores in the model's original order.
type LayerScores struct {
	QHeads   []float64 `json:"q_heads"`
	KVGroups []float64 `json:"kv_groups"`
	Neurons  []float64 `json:"neurons"`
}

// FormatName is the version of the scores file.
const FormatName = "tlite.importance/1"

// Scores returns the scores from every window added so far.
func (c *Collector) Scores() (*Scores, error) {
	if c.tokens == 0 {
		return nil, fmt.Errorf("importance: no calibration tokens were run")
	}
	if c.lossOnly {
		return nil, fmt.Errorf("importance: a loss-only collector has no unit scores")
	}
	out := &Scores{Format: FormatName, Method: Method, NLayers: len(c.layers), NHeads: c.nHeads, NKVHeads: c.nKV,
		HeadDim: c.headDim, FFN: c.ffn, Tokens: c.tokens, Windows: c.windows, Backend: c.backend}
	if c.lossN > 0 {
		out.Loss = c.lossSum / float64(c.lossN)
	}
	n := float64(c.tokens)
	g := c.nHeads / c.nKV
	for l := range c.layers {
		ls := LayerScores{QHeads: make([]float64, c.nHeads), KVGroups: make([]float64, c.nKV), Neurons: make([]float64, c.ffn)}
		for h := range ls.QHeads {
			for j := h * c.headDim; j < (h+1)*c.headDim; j++ {
				ls.QHeads[h] += c.oSum[l][j] / n * c.oNorm[l][j]
			}
			ls.KVGroups[h/g] += ls.QHeads[h]
		}
		for i := range ls.Neurons {
			ls.Neurons[i] = c.dSum[l][i] / n * c.dNorm[l][i]
		}
		out.Layers = append(out.Layers, ls)
	}
	return out, nil
}
