package engine

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/graph"
	"github.com/tlite/tlite/memplan"
	"github.com/tlite/tlite/symshape"
	"github.com/tlite/tlite/symshape/infer"
)

// # Maxima, limits and the plan
//
// Every input symbol gets a maximum at Open, which sizes the memory plan.
// In order of precedence it comes from Options.Max, from the input shapes
// Options.InputShapes returns (the shapes the caller will run with), or
// from DefaultMax/DefaultMaxBatch. A maximum derived from the model (a
// Limit of shape inference: a position table of 256 rows bounds past + seq
// by 256) caps every one of them: the plan never exceeds what the model can
// compute, and Run refuses sizes beyond the limits with the node that
// implies them.

// Where a symbol's maximum came from.
const (
	FromDeclared = "declared" // Options.Max (tl: --max)
	FromInputs   = "inputs"   // the shapes Options.InputShapes returned
	FromDefault  = "default"  // DefaultMax or DefaultMaxBatch
	FromLimit    = "limit"    // a maximum derived from the model
)

// Maximum is one input symbol's maximum and where it came from.
type Maximum struct {
	Value int64
	// From is FromDeclared, FromInputs, FromDefault or FromLimit.
	From string
	// Limit is the derived limit that caps Value when From is FromLimit.
	Limit infer.Limit
}

// String prints "256 (limit: past + seq <= 256 (node ...))" or "1024 (default)".
func (m Maximum) String() string {
	if m.From == FromLimit {
		return fmt.Sprintf("%d (derived from the model: %s)", m.Value, m.Limit)
	}
	return fmt.Sprintf("%d (%s)", m.Value, m.From)
}

// LimitError is an input size or value beyond what the model can compute:
// a derived limit (infer.Limit) the given inputs exceed.
type LimitError struct {
	// Input names the input whose size or values exceed the limit.
	Input string
	// Symbol is the bounded quantity (an expression of symbols, or
	// "values of input_ids").
	Symbol string
	// Value is what the inputs give it.
	Value int64
	// Limit is the limit and the node that implies it.
	Limit infer.Limit
	// Index, for a limit on an input's values, is the position of the
	// first element outside Min..Limit.Max, and Value that element.
	Index []int
	Min   int64
}

// Error names the input, the quantity, its value, the limit and the node.
func (e *LimitError) Error() string {
	if e.Index != nil {
		return fmt.Sprintf("input %q: element %v is %d, outside %d..%d, the values this model can read: node %s: %s",
			e.Input, e.Index, e.Value, e.Min, e.Limit.Max, e.Limit.Node, e.Limit.Why)
	}
	return fmt.Sprintf("input %q: %s = %d exceeds %d, a limit of this model: node %s: %s",
		e.Input, e.Symbol, e.Value, e.Limit.Max, e.Limit.Node, e.Limit.Why)
}

// MemoryError is a plan that cannot fit the device, refused at Open.
type MemoryError struct {
	// Need is what the plan and constants take; Have what the device has.
	Need, Have int64
	// Device names the device.
	Device string
	// Single is set when one allocation exceeds the device's largest.
	Single bool
	// Largest is the largest tensor of the plan and its size.
	Largest      string
	LargestBytes int64
	// Symbols are the symbols its size grows with, with their maxima.
	Symbols map[string]Maximum
}

// Error names the size, the largest tensor, the symbols it grows with and
// where their maxima came from, and the option that bounds them.
func (e *MemoryError) Error() string {
	names := make([]string, 0, len(e.Symbols))
	for s := range e.Symbols {
		names = append(names, s)
	}
	sort.Strings(names)
	var syms []string
	var fix []string
	for _, s := range names {
		m := e.Symbols[s]
		syms = append(syms, fmt.Sprintf("%s = %s", s, m))
		if m.Value > 1 {
			fix = append(fix, s+"=<n>")
		}
	}
	what := "the memory plan and constants need %s, more than the %s device has (%s)"
	if e.Single {
		what = "the memory plan needs one allocation of %s, more than the largest the %s device allows (%s)"
	}
	msg := fmt.Sprintf("engine: "+what+"; the largest tensor is %s (%s)",
		memplan.Bytes(e.Need), e.Device, memplan.Bytes(e.Have), e.Largest, memplan.Bytes(e.LargestBytes))
	if len(syms) > 0 {
		msg += fmt.Sprintf(" at %s", strings.Join(syms, ", "))
		if len(fix) > 0 {
			msg += fmt.Sprintf(": bound the sizes with Options.Max (tl: --max %s) or run smaller inputs", strings.Join(fix, ","))
		}
	}
	return msg
}

// setMaxima decides every input symbol's maximum (see the section comment).
func (s *Session) setMaxima(res *infer.Result, opts *Options) error {
	used := map[string]bool{}
	for _, sym := range res.Symbols {
		used[sym] = true
	}
	s.max = map[string]int64{}
	s.maxFrom = map[string]Maximum{}
	set := func(sym string, v int64, from string) {
		s.max[sym] = v
		s.maxFrom[sym] = Maximum{Value: v, From: from}
	}
	// Declared maxima of symbols the model does not use are dropped, so
	// that Maxima and the reports show what the plan is sized for.
	for k, v := range opts.Max {
		if used[k] {
			set(k, v, FromDeclared)
		}
	}
	if opts.InputShapes != nil {
		shapes, err := opts.InputShapes(append([]Port(nil), s.inputs...))
		if err != nil {
			return err
		}
		if len(shapes) > 0 {
			bind, err := bindShapes(s.inputs, shapes, nil)
			if err == nil {
				err = s.checkLimits(bind, shapes)
			}
			if err == nil {
				_, err = bindShapes(s.inputs, shapes, s.max)
			}
			if err != nil {
				return fmt.Errorf("engine: the input shapes to plan for: %w", err)
			}
			for sym, v := range bind {
				if _, ok := s.max[sym]; !ok {
					set(sym, v, FromInputs)
				}
			}
		}
	}
	for _, p := range s.inputs {
		for _, d := range p.Shape {
			for _, sym := range d.Symbols() {
				if _, ok := s.max[sym]; ok {
					continue
				}
				if strings.Contains(strings.ToLower(sym), "batch") {
					set(sym, DefaultMaxBatch, FromDefault)
				} else {
					set(sym, DefaultMax, FromDefault)
				}
			}
		}
	}
	// Derived limits cap every maximum: a symbol is at most what any limit
	// on an expression at least as large allows (seq <= past + seq <= 256).
	for sym, v := range s.max {
		lim, from, ok := res.ExprMax(symshape.Sym(sym))
		if ok && lim < v {
			s.max[sym] = lim
			s.maxFrom[sym] = Maximum{Value: lim, From: FromLimit, Limit: from}
		}
	}
	return nil
}

// MaximaFrom returns every input symbol's maximum with where it came from.
func (s *Session) MaximaFrom() map[string]Maximum {
	out := make(map[string]Maximum, len(s.maxFrom))
	for k, v := range s.maxFrom {
		out[k] = v
	}
	return out
}

// Limits returns the maxima the model's derived shapes rely on (see
// infer.Limit): Run refuses inputs beyond them.
func (s *Session) Limits() []infer.Limit {
	if s.res == nil {
		return nil
	}
	return append([]infer.Limit(nil), s.res.Limits...)
}

// ExprLimit returns the tightest derived maximum of e (for a decoder's
// context, past + seq) and the limit it comes from; false when no limit
// bounds e.
func (s *Session) ExprLimit(e symshape.Expr) (int64, infer.Limit, bool) {
	if s.res == nil {
		return 0, infer.Limit{}, false
	}
	return s.res.ExprMax(e)
}

// checkLimits refuses a binding beyond a derived limit, naming the input
// whose shape carries the bounded symbols.
func (s *Session) checkLimits(bind symshape.Binding, shapes map[string][]int) error {
	if s.res == nil {
		return nil
	}
	for _, l := range s.res.Limits {
		if l.Input != "" || !l.Expr.IsValid() {
			continue
		}
		v, err := l.Expr.Eval(bind)
		if err != nil || v <= l.Max {
			continue // unbound symbols (data-dependent) are checked where computed
		}
		return &LimitError{Input: s.inputOf(l.Expr, shapes), Symbol: fmt.Sprintf("%s (at %s)", l.Expr, atBinding(l.Expr, bind)), Value: v, Limit: l}
	}
	if err := s.res.Check(bind); err != nil {
		return fmt.Errorf("engine: the input shapes are outside what this model's shapes are valid for: %w", err)
	}
	return nil
}

// checkValueLimits refuses integer inputs whose values exceed a derived
// limit (token ids beyond the embedding table), or lie below minus the
// table size (out of range even for Gather's negative indices).
func (s *Session) checkValueLimits(inputs map[string]*tensor.Dense) error {
	if s.res == nil {
		return nil
	}
	for _, p := range s.inputs {
		lim, from, ok := s.res.InputLimit(p.Name)
		if !ok {
			continue
		}
		t := inputs[p.Name]
		if t == nil {
			continue
		}
		lo, hi, ok := intRange(t)
		if !ok {
			continue
		}
		// Gather counts a negative index from the end; a constant table
		// (an embedding) is read with ids >= 0 only.
		least := -(lim + 1)
		why := " (a negative index counts from the end)"
		if from.NonNegative {
			least = 0
			why = " (a negative id would read a row from the table's end; the exported nn.Embedding refuses it)"
		}
		if hi <= lim && lo >= least {
			continue
		}
		e := &LimitError{Input: p.Name, Symbol: "values of " + p.Name, Limit: from, Min: least}
		e.Index, e.Value = firstOutside(t, least, lim)
		if e.Value < 0 {
			e.Limit.Why += why
		}
		return e
	}
	return nil
}

// firstOutside is the position and the value of t's first element outside
// lo..hi (t is an integer tensor with some).
func firstOutside(t *tensor.Dense, lo, hi int64) ([]int, int64) {
	var flat int
	var v int64
	switch d := t.Data().(type) {
	case []int64:
		for i, x := range d {
			if x < lo || x > hi {
				flat, v = i, x
				break
			}
		}
	case []int32:
		for i, x := range d {
			if int64(x) < lo || int64(x) > hi {
				flat, v = i, int64(x)
				break
			}
		}
	case int64:
		return []int{}, d
	case int32:
		return []int{}, int64(d)
	}
	shape := t.Shape()
	idx := make([]int, len(shape))
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] > 0 {
			idx[i] = flat % shape[i]
			flat /= shape[i]
		}
	}
	return idx, v
}

// intRange is the smallest and largest element of an integer tensor.
func intRange(t *tensor.Dense) (lo, hi int64, ok bool) {
	if !t.Shape().IsScalar() && t.Shape().TotalSize() == 0 {
		return 0, 0, false // Data panics on an empty tensor
	}
	switch d := t.Data().(type) {
	case []int64:
		if len(d) == 0 {
			return 0, 0, false
		}
		lo, hi = d[0], d[0]
		for _, x := range d {
			lo, hi = min(lo, x), max(hi, x)
		}
		return lo, hi, true
	case []int32:
		if len(d) == 0 {
			return 0, 0, false
		}
		lo, hi = int64(d[0]), int64(d[0])
		for _, x := range d {
			lo, hi = min(lo, int64(x)), max(hi, int64(x))
		}
		return lo, hi, true
	case int64:
		return d, d, true
	case int32:
		return int64(d), int64(d), true
	}
	return 0, 0, false
}

// inputOf names the first input whose shape uses a symbol of e.
func (s *Session) inputOf(e symshape.Expr, shapes map[string][]int) string {
	want := map[string]bool{}
	for _, sym := range e.Symbols() {
		want[sym] = true
	}
	for _, p := range s.inputs {
		if _, given := shapes[p.Name]; !given && shapes != nil {
			continue
		}
		for _, d := range p.Shape {
			for _, sym := range d.Symbols() {
				if want[sym] {
					return p.Name
				}
			}
		}
	}
	return "?"
}

// atBinding prints "past=250, seq=10" for e's symbols.
func atBinding(e symshape.Expr, b symshape.Binding) string {
	var parts []string
	for _, sym := range e.Symbols() {
		parts = append(parts, fmt.Sprintf("%s=%d", sym, b[sym]))
	}
	return strings.Join(parts, ", ")
}

// checkFit refuses, at Open, a plan and constants that cannot fit the
// device: a slot beyond its largest allocation, or a total beyond its
// memory (Options.MemoryLimit when set).
func (s *Session) checkFit(limit int64) error {
	total, maxAlloc, name := deviceMemory(s)
	if limit > 0 && (total <= 0 || limit < total) {
		total = limit
	}
	if limit > 0 && (maxAlloc <= 0 || limit < maxAlloc) {
		maxAlloc = limit
	}
	if total <= 0 && maxAlloc <= 0 {
		return nil
	}
	// The constants are uploaded after this check: count them here.
	var need int64
	bigConst, bigConstName := int64(0), ""
	for _, r := range s.c.vals {
		if r.root != r || r.kind != vkConst || !r.devUse || r.konst == nil {
			continue
		}
		_, esz, err := storeFor(r.dt, s.c.fs)
		if err != nil {
			continue
		}
		b := int64(numel(r.konst.shape)) * int64(esz)
		need += b
		if b > bigConst {
			bigConst, bigConstName = b, r.name
		}
	}
	var big int64
	bigReq := -1
	for i, sl := range s.plan.Slots {
		need += sl.Max
		if sl.Max > big && len(sl.Tenants) > 0 {
			big, bigReq = sl.Max, i
		}
	}
	if maxAlloc > 0 && bigConst > maxAlloc && bigConst > big {
		return &MemoryError{Need: bigConst, Have: maxAlloc, Device: name, Single: true, Largest: "constant " + bigConstName, LargestBytes: bigConst}
	}
	tooBig := maxAlloc > 0 && big > maxAlloc
	if !tooBig && (total <= 0 || need <= total) {
		return nil
	}
	have := total
	if tooBig {
		have, need = maxAlloc, big
	}
	e := &MemoryError{Need: need, Have: have, Device: name, Largest: "a constant", Symbols: map[string]Maximum{}}
	if bigReq >= 0 {
		sl := s.plan.Slots[bigReq]
		for _, sym := range sl.Bytes.Symbols() {
			if m, ok := s.maxFrom[sym]; ok {
				e.Symbols[sym] = m
			}
		}
		// Name the tenant that sized the slot, not the first one.
		e.Largest, e.LargestBytes = s.reqName(sl.Tenants), big
		var most int64 = -1
		for _, t := range sl.Tenants {
			if t < len(s.reqs) {
				if b, ok := s.reqs[t].Bytes.MaxValue(s.bounds()); ok && b > most {
					most, e.Largest = b, s.reqs[t].Name
				}
			}
		}
	}
	e.Single = tooBig
	return e
}

// deviceMemory is the session device's memory and largest allocation in
// bytes (0 when unknown) and its name for messages. The host device has
// the memory the system reports available.
func deviceMemory(s *Session) (total, maxAlloc int64, name string) {
	if s.cl != nil {
		inf := s.cl.Info()
		return inf.GlobalMem, inf.MaxAlloc, "OpenCL " + inf.Name
	}
	avail := hostAvailable()
	return avail, avail, s.dev.Name()
}

// hostAvailable is MemAvailable from /proc/meminfo in bytes, 0 where there
// is none (the check is then skipped).
func hostAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb * 1024
				}
			}
		}
	}
	return 0
}

// decoderContext is the derived maximum of a decoder's context, past + seq
// (seq alone without past inputs): seq is input_ids' axis 1 and past the
// symbolic axis of the first input named like past_key_values that is not
// input_ids' batch. False when the model is not shaped so, or no limit
// bounds its context.
func decoderContext(g *graph.Graph, res *infer.Result) (int64, infer.Limit, bool) {
	var seq, batch, past symshape.Expr
	for _, v := range g.Inputs {
		if v.Name == "input_ids" && len(v.Shape) == 2 {
			batch, seq = v.Shape[0], v.Shape[1]
		}
	}
	if !seq.IsValid() {
		return 0, infer.Limit{}, false
	}
	for _, v := range g.Inputs {
		if !strings.Contains(strings.ToLower(v.Name), "past") || past.IsValid() {
			continue
		}
		for _, d := range v.Shape {
			if _, isConst := d.Const(); !isConst && !d.Equal(batch) {
				past = d
				break
			}
		}
	}
	ctx := seq
	if past.IsValid() {
		ctx = symshape.Add(past, seq)
	}
	v, l, ok := res.ExprMax(ctx)
	// Positions 0..context-1 given as position_ids index a table (rotary
	// cos/sin cached to max_position_embeddings): its rows bound the
	// context as well.
	if pv, pl, pok := res.InputLimit("position_ids"); pok && pv < math.MaxInt64 && (!ok || pv+1 < v) {
		v, l, ok = pv+1, pl, true
	}
	return v, l, ok
}

// ContextLimit derives the shapes of the decoder m (annotating m, as
// OpenModel would) and returns the most tokens of context its derived
// limits allow (a learned position table of 256 rows: 256) with the limit
// it comes from; false when nothing in the model bounds the context.
func ContextLimit(m *graph.Model) (int64, infer.Limit, bool, error) {
	if m == nil || m.Graph == nil {
		return 0, infer.Limit{}, false, fmt.Errorf("engine: no model")
	}
	res, err := infer.Run(m, infer.Options{})
	if err != nil {
		return 0, infer.Limit{}, false, fmt.Errorf("engine: shape inference: %w", err)
	}
	v, l, ok := decoderContext(m.Graph, res)
	return v, l, ok, nil
}

// checkHostBytes refuses a tensor the host would compute at run time (a
// shape read from data: Range to a given limit, an Expand to a given
// shape) when it needs more bytes than the session allows: its
// MemoryLimit, else the memory available.
func (c *compiler) checkHostBytes(what string, dims []int, esize int) error {
	var n int64 = int64(esize)
	for _, d := range dims {
		if d < 0 {
			return fmt.Errorf("%s: negative dim in %v", what, dims)
		}
		if d != 0 && n > math.MaxInt64/int64(d) {
			return fmt.Errorf("%s of shape %v: the size overflows", what, dims)
		}
		n *= int64(d)
	}
	limit := c.memLimit
	if limit <= 0 {
		limit = hostAvailable()
	}
	if limit > 0 && n > limit {
		return fmt.Errorf("%s of shape %v needs %s, more than the %s of host memory the session may use", what, dims, memplan.Bytes(n), memplan.Bytes(limit))
	}
	return nil
}

// checkBounded refuses, before planning, a device tensor whose size no
// maximum bounds: a size only known from data at run time (a fresh symbol
// of shape inference) with no declared maximum. The error says what the
// symbol is (the node and axis that make it, and why it is not known
// before the run) and the option that bounds it, rather than the bare
// internal name.
func (s *Session) checkBounded(reqs []memplan.Request) error {
	b := s.bounds()
	fresh := map[string]infer.FreshSym{}
	if s.res != nil {
		for _, f := range s.res.Fresh {
			fresh[f.Sym] = f
		}
	}
	for _, r := range reqs {
		if _, ok := r.Bytes.MaxValue(b); ok || !r.Bytes.IsValid() {
			continue
		}
		var what, fix []string
		for _, sym := range r.Bytes.Symbols() {
			if _, ok := b[sym]; ok {
				continue
			}
			desc := sym + ", a size the model's inputs do not give"
			if f, ok := fresh[sym]; ok {
				at := "graph input"
				if f.Node != "" {
					at = fmt.Sprintf("node %q", f.Node)
				}
				desc = fmt.Sprintf("%s, made at %s: %s", sym, at, f.Reason)
			}
			what = append(what, desc)
			fix = append(fix, sym+"=<n>")
		}
		return fmt.Errorf("engine: memory plan: %q needs %v bytes, and nothing bounds %s; declare the most it may be with Options.Max (tl: --max %s), and runs beyond it are refused",
			r.Name, r.Bytes, strings.Join(what, "; "), strings.Join(fix, ","))
	}
	return nil
}
