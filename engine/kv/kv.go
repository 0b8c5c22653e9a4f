// Package kv is the host side of a session's in-place KV cache.
//
// A session opened with engine.Options.KVCache owns one device buffer per
// layer's keys and values, sized for Config.MaxContext token slots and
// allocated once at Open; the rewritten model writes each step's new keys
// and values into the slots it is given and attends a prefix of the slots
// in place (see engine/lower_kv.go). What the device does not know is
// which slot holds which position: State keeps that, and builds each
// step's inputs from it, kv_bias above all: token t may attend slot j when
// j holds a position no later than t's. Slots are therefore independent of
// positions and of the order tokens arrive in: a forward may write any
// positions into any free (or reused) slots, which chunked recompute and
// cache eviction need.
//
// The attended length (kv_len) is the highest filled slot plus one, rounded
// up to a multiple of Config.Pad and capped at MaxContext, so a decode
// step changes shapes and kernel arguments only when it crosses a
// boundary; the slots in between are masked.
//
// Stepper adapts State to the generator's interface (engine/generate):
// one sequence whose slots are its positions.
package kv

import (
	"fmt"
	"strings"

	"gorgonia.org/tensor"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/symshape"
)

// Config is the in-place cache's configuration, engine.Options.KVCache.
type Config = engine.KVConfig

// Open opens the exported decoder at path with an in-place cache of cfg
// and returns its state. Closing the state's session (State.Session)
// releases everything.
func Open(path string, opts engine.Options, cfg Config) (*State, error) {
	opts.KVCache = &cfg
	s, err := engine.Open(path, opts)
	if err != nil {
		return nil, err
	}
	st, err := New(s)
	if err != nil {
		s.Close()
		return nil, err
	}
	return st, nil
}

// State is the bookkeeping of a session's in-place cache: which position
// each slot holds. It is not safe for concurrent use.
type State struct {
	s       *engine.Session
	info    engine.KVInfo
	slotPos []int // position held by each slot; -1 when empty
	n       int   // filled slots
	vocab   int
	logits  string
	lastLen int
	// lastRow: the session computes the last row of logits only
	// (engine.Options.LastLogits).
	lastRow bool

	// Per-step host buffers, reused: Run copies what it is given.
	ids, pos, slots []int64
	bias            []float32
	// writer[s] is the token of the running Forward that writes slot s,
	// -1 for none: a slice, not a per-step map (all -1 between calls).
	writer []int
}

// New returns an empty state over s, which must have been opened with
// engine.Options.KVCache.
func New(s *engine.Session) (*State, error) {
	info, ok := s.KVInfo()
	if !ok {
		return nil, fmt.Errorf("kv: the session has no in-place KV cache (open it with engine.Options.KVCache)")
	}
	st := &State{s: s, info: info, slotPos: make([]int, info.MaxContext), writer: make([]int, info.MaxContext)}
	for i := range st.writer {
		st.writer[i] = -1
	}
	// The logits are the output called so, or the only one.
	outs := s.Outputs()
	var lp *engine.Port
	for i, p := range outs {
		if p.Name == "logits" || len(outs) == 1 {
			lp = &outs[i]
		}
	}
	if lp == nil {
		return nil, fmt.Errorf("kv: the session has no output called logits")
	}
	if len(lp.Shape) != 3 {
		return nil, fmt.Errorf("kv: output %q has shape %s; want [1, seq, vocab]", lp.Name, symshape.FormatShape(lp.Shape))
	}
	v, ok := lp.Shape[2].Const()
	if !ok {
		return nil, fmt.Errorf("kv: output %q has shape %s; want a constant vocabulary last", lp.Name, symshape.FormatShape(lp.Shape))
	}
	st.logits, st.vocab = lp.Name, int(v)
	st.lastRow = s.LastLogits()
	st.Reset()
	return st, nil
}

// Session is the session the state drives.
func (st *State) Session() *engine.Session { return st.s }

// Info describes the cache buffers.
func (st *State) Info() engine.KVInfo { return st.info }

// Reset empties every slot. The buffers keep their bytes; masks hide them.
func (st *State) Reset() {
	for i := range st.slotPos {
		st.slotPos[i] = -1
	}
	st.n, st.lastLen = 0, 0
}

// Len is the number of filled slots.
func (st *State) Len() int { return st.n }

// MaxContext is the number of slots.
func (st *State) MaxContext() int { return st.info.MaxContext }

// Vocab is the length of a row of logits.
func (st *State) Vocab() int { return st.vocab }

// LastRowOnly reports whether Forward returns the last token's logits only
// (the session was opened with engine.Options.LastLogits).
func (st *State) LastRowOnly() bool { return st.lastRow }

// AttendedLen is the kv_len of the last Forward: the slots attention read.
func (st *State) AttendedLen() int { return st.lastLen }

// Position returns the position slot holds, ok false when it is empty or
// outside the cache.
func (st *State) Position(slot int) (int, bool) {
	if slot < 0 || slot >= len(st.slotPos) || st.slotPos[slot] < 0 {
		return 0, false
	}
	return st.slotPos[slot], true
}

// Free empties slots (eviction): later tokens no longer attend them, and
// a later Forward may fill them again.
func (st *State) Free(slots ...int) error {
	for _, s := range slots {
		if s < 0 || s >= len(st.slotPos) {
			return fmt.Errorf("kv: Free: slot %d outside the cache's %d slots", s, len(st.slotPos))
		}
	}
	for _, s := range slots {
		if st.slotPos[s] >= 0 {
			st.slotPos[s] = -1
			st.n--
		}
	}
	return nil
}

// Forward runs the model on tokens at positions, writing token i's keys and
// values into slots[i], and returns the logits, row-major [len(tokens),
// Vocab()] (only the last token's row when the session was opened with
// engine.Options.LastLogits: see LastRowOnly). Token i attends every filled slot (those written before and by
// this call) whose position is at most positions[i]; neither positions nor
// slots need be contiguous or ordered, and a filled slot may be written
// again (its old contents are replaced). On error the bookkeeping is
// unchanged, but slots this call was writing may hold new bytes.
func (st *State) Forward(tokens, positions, slots []int) ([]float32, error) {
	n := len(tokens)
	if n == 0 {
		return nil, fmt.Errorf("kv: Forward of no tokens")
	}
	if len(positions) != n || len(slots) != n {
		return nil, fmt.Errorf("kv: Forward of %d tokens with %d positions and %d slots", n, len(positions), len(slots))
	}
	ctx := len(st.slotPos)
	hi := 0
	for j := ctx - 1; j >= 0; j-- {
		if st.slotPos[j] >= 0 {
			hi = j + 1
			break
		}
	}
	// Every slot checked so far is marked in st.writer; unmark them on
	// the way out, whatever happens.
	marked := 0
	defer func() {
		for _, s := range slots[:marked] {
			st.writer[s] = -1
		}
	}()
	for i := range tokens {
		if tokens[i] < 0 || tokens[i] >= st.vocab {
			return nil, fmt.Errorf("kv: token %d is %d, outside the vocabulary of %d", i, tokens[i], st.vocab)
		}
		if positions[i] < 0 {
			return nil, fmt.Errorf("kv: token %d has position %d", i, positions[i])
		}
		s := slots[i]
		if s < 0 || s >= ctx {
			return nil, fmt.Errorf("kv: token %d goes to slot %d, outside the cache's %d slots: %w", i, s, ctx, engine.ErrContextFull)
		}
		if k := st.writer[s]; k >= 0 {
			return nil, fmt.Errorf("kv: tokens %d and %d both go to slot %d", k, i, s)
		}
		st.writer[s] = i
		marked = i + 1
		hi = max(hi, s+1)
	}
	if st.info.Ordered {
		// A layer reads its cache through a copy in the export's layout
		// and may mask with the model's own mask, which knows only
		// "the past, then the new tokens": the cache must be filled in
		// order, slot = position (engine.KVInfo.Ordered).
		filled := st.n
		for i := range tokens {
			if slots[i] != filled+i || positions[i] != slots[i] || hi > filled+n {
				return nil, fmt.Errorf("kv: token %d goes to slot %d at position %d; a layer of this model falls back to the export's cache layout (%s), so tokens must fill slots %d.. in order at their slot's position", i, slots[i], positions[i], strings.Join(st.info.Fallbacks(), "; "), filled)
			}
		}
	}
	pad := max(st.info.Pad, 1)
	kvLen := min((hi+pad-1)/pad*pad, ctx)
	st.ids, st.pos, st.slots = grow(st.ids, n), grow(st.pos, n), grow(st.slots, n)
	for i := range tokens {
		st.ids[i], st.pos[i], st.slots[i] = int64(tokens[i]), int64(positions[i]), int64(slots[i])
	}
	if cap(st.bias) < n*kvLen {
		st.bias = make([]float32, n*kvLen)
	}
	bias := st.bias[:n*kvLen]
	for j := 0; j < kvLen; j++ {
		held := st.slotPos[j]
		if i := st.writer[j]; i >= 0 {
			held = positions[i]
		}
		for t := 0; t < n; t++ {
			v := float32(0)
			if held < 0 || held > positions[t] {
				v = engine.KVBiasMasked
			}
			bias[t*kvLen+j] = v
		}
	}
	out, err := st.s.Run(map[string]*tensor.Dense{
		"input_ids":             tensor.New(tensor.WithShape(1, n), tensor.WithBacking(st.ids)),
		engine.KVPositionsInput: tensor.New(tensor.WithShape(1, n), tensor.WithBacking(st.pos)),
		engine.KVSlotsInput:     tensor.New(tensor.WithShape(1, n), tensor.WithBacking(st.slots)),
		engine.KVBiasInput:      tensor.New(tensor.WithShape(1, 1, n, kvLen), tensor.WithBacking(bias)),
	})
	if err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	rows := n
	if st.lastRow {
		rows = 1
	}
	logits, ok := out[st.logits].Data().([]float32)
	if !ok || len(logits) != rows*st.vocab {
		return nil, fmt.Errorf("kv: output %q is %v; want %d float32 logits", st.logits, out[st.logits].Shape(), rows*st.vocab)
	}
	for i, s := range slots {
		if st.slotPos[s] < 0 {
			st.n++
		}
		st.slotPos[s] = positions[i]
	}
	st.lastLen = kvLen
	return logits, nil
}

// RowBytes is one slot of cache buffer layer (Info().Layers[layer]): its
// keys or its values, in the buffer's store type.
func (st *State) RowBytes(layer int) int {
	if layer < 0 || layer >= len(st.info.Layers) {
		return 0
	}
	return st.info.Layers[layer].RowBytes
}

// SlotBytes is one slot across every cache buffer: the unit of
// ReadAllSlots and WriteAllSlots.
func (st *State) SlotBytes() int {
	n := 0
	for _, l := range st.info.Layers {
		n += l.RowBytes
	}
	return n
}

// ReadSlots copies the rows of slots from cache buffer layer (an index
// into Info().Layers: a model layer's keys and its values are two
// buffers) into dst, len(slots) rows of RowBytes(layer) in the buffer's
// store type. Empty slots read whatever bytes they hold.
func (st *State) ReadSlots(layer int, slots []int, dst []byte) error {
	if err := st.s.ReadKVSlots(layer, slots, dst); err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	return nil
}

// WriteSlots copies src, len(slots) rows of RowBytes(layer), into slots of
// cache buffer layer. It changes bytes only: a slot written this way is
// attended once SetPositions says which position it holds.
func (st *State) WriteSlots(layer int, slots []int, src []byte) error {
	if err := st.s.WriteKVSlots(layer, slots, src); err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	return nil
}

// ReadAllSlots reads slots from every cache buffer into dst, laid out
// buffer-major: buffer 0's len(slots) rows, then buffer 1's, and so on
// (len(slots) * SlotBytes() bytes). The layout keeps one layer of a run of
// slots contiguous, as a layer-major swap file wants. The rows are
// gathered on the device and cross to the host in one copy
// (engine.Session.ReadAllKVSlots).
func (st *State) ReadAllSlots(slots []int, dst []byte) error {
	if err := st.s.ReadAllKVSlots(slots, dst); err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	return nil
}

// WriteAllSlots writes src, laid out as ReadAllSlots returns it, into
// slots of every cache buffer: one host-to-device copy and one scatter per
// buffer. Like WriteSlots it changes bytes only (see SetPositions).
func (st *State) WriteAllSlots(slots []int, src []byte) error {
	if err := st.s.WriteAllKVSlots(slots, src); err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	return nil
}

// SetPositions records that slots hold the keys and values of positions
// (written by WriteSlots, restoring a context): later tokens attend them
// as if a Forward had written them there. A position of -1 empties its
// slot, like Free.
func (st *State) SetPositions(slots, positions []int) error {
	if len(slots) != len(positions) {
		return fmt.Errorf("kv: SetPositions of %d slots and %d positions", len(slots), len(positions))
	}
	seen := make(map[int]bool, len(slots))
	for i, s := range slots {
		if s < 0 || s >= len(st.slotPos) {
			return fmt.Errorf("kv: SetPositions: slot %d outside the cache's %d slots: %w", s, len(st.slotPos), engine.ErrContextFull)
		}
		if positions[i] < -1 {
			return fmt.Errorf("kv: SetPositions: slot %d at position %d", s, positions[i])
		}
		if seen[s] {
			return fmt.Errorf("kv: SetPositions: slot %d given twice", s)
		}
		seen[s] = true
	}
	for i, s := range slots {
		was, now := st.slotPos[s] >= 0, positions[i] >= 0
		switch {
		case now && !was:
			st.n++
		case was && !now:
			st.n--
		}
		st.slotPos[s] = positions[i]
	}
	return nil
}

// AttentionStats returns the attention statistics of the last Forward
// (the state's session opened with Config.AttentionStats): per layer and
// query head, each slot's softmax probability summed over the forward's
// tokens, and per slot the number of those tokens that could attend it.
// Slots beyond AttendedLen are not in it. Accumulating them over forwards
// gives LLMS's information density: a slot's summed probability over its
// summed count, averaged over heads and layers.
func (st *State) AttentionStats() ([]engine.AttnStats, error) {
	a, err := st.s.AttentionStats()
	if err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	return a, nil
}

// SetAttentionStats turns the attention statistics on or off for the
// following Forwards (engine.Session.SetAttentionStats): a Forward without
// them costs what one of a state opened without them costs, and
// AttentionStats after it reports engine.ErrNoAttentionStats. It fails for
// a state opened without Config.AttentionStats.
func (st *State) SetAttentionStats(on bool) error {
	if err := st.s.SetAttentionStats(on); err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	return nil
}

// AccumulateAttentionStats makes the following Forwards that compute
// attention statistics add them, weighted by weight and summed over layers
// and query heads, into per-slot totals kept on the device, read by
// TakeAttentionStats (engine.Session.AccumulateAttentionStats); weight 0
// returns to per-forward statistics (AttentionStats). Take the totals
// before freeing slots or writing other tokens into them.
func (st *State) AccumulateAttentionStats(weight float64) error {
	if err := st.s.AccumulateAttentionStats(weight); err != nil {
		return fmt.Errorf("kv: %w", err)
	}
	return nil
}

// TakeAttentionStats returns the statistics accumulated since the last
// take and zeroes them (engine.Session.TakeAttentionStats).
func (st *State) TakeAttentionStats() (engine.AttnStatsTotal, error) {
	t, err := st.s.TakeAttentionStats()
	if err != nil {
		return t, fmt.Errorf("kv: %w", err)
	}
	return t, nil
}

func grow(b []int64, n int) []int64 {
	if cap(b) < n {
		return make([]int64, n)
	}
	return b[:n]
}

// Stepper runs one sequence whose slots are its positions, with the method
// set of engine/generate's Stepper.
type Stepper struct {
	st *State
	// LastOnly makes Step return only the last token's logits.
	LastOnly bool
}

// NewStepper returns a stepper over s, which must have been opened with
// engine.Options.KVCache.
func NewStepper(s *engine.Session) (*Stepper, error) {
	st, err := New(s)
	if err != nil {
		return nil, err
	}
	return &Stepper{st: st}, nil
}

// State is the stepper's cache bookkeeping.
func (p *Stepper) State() *State { return p.st }

// Step runs tokens at positions, each written to the slot of its position,
// with every token stepped since the last Reset (at an earlier or equal
// position) as context. It returns the logits row-major [len(tokens),
// Vocab()], or the last row when LastOnly. A position beyond MaxContext is
// an error wrapping engine.ErrContextFull. On error the sequence is as it was
// (unless the step was rewriting positions already in it: their slots may
// hold the new keys and values).
func (p *Stepper) Step(tokens []int, positions []int) ([]float32, error) {
	if len(positions) != len(tokens) {
		return nil, fmt.Errorf("kv: Step of %d tokens with %d positions", len(tokens), len(positions))
	}
	for i, pos := range positions {
		if pos >= p.st.MaxContext() {
			return nil, fmt.Errorf("kv: token %d at position %d beyond the cache's %d slots: %w", i, pos, p.st.MaxContext(), engine.ErrContextFull)
		}
	}
	logits, err := p.st.Forward(tokens, positions, positions)
	if err != nil {
		return nil, err
	}
	if p.LastOnly {
		v := p.st.Vocab()
		return logits[len(logits)-v:], nil
	}
	return logits, nil
}

// Reset empties the sequence.
func (p *Stepper) Reset() error {
	p.st.Reset()
	return nil
}

// MaxContext is the most tokens the sequence holds.
func (p *Stepper) MaxContext() int { return p.st.MaxContext() }

// Vocab is the length of one row of logits.
func (p *Stepper) Vocab() int { return p.st.Vocab() }
