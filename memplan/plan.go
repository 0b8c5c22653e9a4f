// Package memplan assigns tensors to reusable device buffers ("slots") from
// their lifetimes and symbolic sizes. Two tensors share a slot only when their
// lifetimes do not overlap and the slot's symbolic size is provably large
// enough for both, so a plan made once at load holds for every binding of the
// model's symbols within the declared maxima: nothing is allocated while
// tokens flow.
package memplan

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tlite/tlite/symshape"
)

// Forever is a LastUse for tensors that must outlive the run (graph outputs),
// so their slots are never handed to another tensor.
const Forever = int(^uint(0) >> 1)

// Request is one tensor that needs device memory.
type Request struct {
	// Name identifies the tensor in reports and errors.
	Name string
	// Bytes is the tensor's size in bytes as a symbolic expression.
	Bytes symshape.Expr
	// Def is the index of the step that writes the tensor.
	Def int
	// LastUse is the index of the last step that reads it; Forever pins it.
	LastUse int
	// InPlace names requests (by index) whose buffer this tensor may take over
	// when their last use is this tensor's Def: an element-wise kernel that
	// reads and writes the same index can overwrite its input.
	InPlace []int
}

// Options control planning.
type Options struct {
	// Bounds gives each symbol's declared range; the upper ends size the slots.
	Bounds symshape.Bounds
	// Align rounds every slot up to a multiple of this many bytes (0 = 1).
	Align int64
}

// Slot is one device buffer of the plan.
type Slot struct {
	// Bytes is the symbolic size: provably at least every tenant's size.
	Bytes symshape.Expr
	// Max is Bytes at the declared maxima, rounded to the alignment: what is
	// allocated.
	Max int64
	// Tenants are the indices of the requests placed in this slot, in order.
	Tenants []int
	lastUse int
}

// Plan is the result: which slot each request lives in.
type Plan struct {
	Slots []Slot
	// Assign maps a request's index to its slot's index.
	Assign []int
	reqs   []Request
	opts   Options
}

// Build plans reqs. Requests are placed in order of Def; a request reuses the
// smallest free slot that provably fits it, else grows a free slot that it
// provably contains (the old tenants still fit), else opens a new slot.
// Every size must be bounded by opts.Bounds, or Build says which is not.
func Build(reqs []Request, opts Options) (*Plan, error) {
	if opts.Align <= 0 {
		opts.Align = 1
	}
	p := &Plan{Assign: make([]int, len(reqs)), reqs: reqs, opts: opts}
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
		r := reqs[i]
		if !r.Bytes.IsValid() {
			return nil, fmt.Errorf("memplan: %s has no size", r.Name)
		}
		if r.LastUse < r.Def {
			return nil, fmt.Errorf("memplan: %s is last used at step %d before its definition at step %d", r.Name, r.LastUse, r.Def)
		}
		if _, ok := r.Bytes.MaxValue(opts.Bounds); !ok {
			return nil, fmt.Errorf("memplan: size of %s (%v bytes) is unbounded: declare a maximum for %s",
				r.Name, r.Bytes, strings.Join(r.Bytes.Symbols(), ", "))
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return reqs[order[a]].Def < reqs[order[b]].Def })
	for _, i := range order {
		r := reqs[i]
		s := p.inPlace(i)
		if s < 0 {
			s = p.fit(r)
		}
		if s < 0 {
			p.Slots = append(p.Slots, Slot{Bytes: r.Bytes})
			s = len(p.Slots) - 1
		}
		sl := &p.Slots[s]
		sl.Tenants = append(sl.Tenants, i)
		sl.lastUse = r.LastUse
		p.Assign[i] = s
	}
	for i := range p.Slots {
		m, _ := p.Slots[i].Bytes.MaxValue(opts.Bounds)
		p.Slots[i].Max = (m + opts.Align - 1) / opts.Align * opts.Align
	}
	return p, nil
}

// inPlace returns the slot of an in-place candidate of request i that dies
// exactly where i is defined and provably holds i, or -1.
func (p *Plan) inPlace(i int) int {
	r := p.reqs[i]
	for _, j := range r.InPlace {
		if j < 0 || j >= len(p.reqs) || j == i {
			continue
		}
		in := p.reqs[j]
		s := p.Assign[j]
		sl := &p.Slots[s]
		if in.LastUse != r.Def || sl.lastUse != r.Def || !sl.has(j) {
			continue
		}
		if rel := symshape.CompareIn(sl.Bytes, r.Bytes, p.opts.Bounds); rel == symshape.Equal || rel == symshape.Greater || rel == symshape.GreaterEq {
			return s
		}
	}
	return -1
}

func (s *Slot) has(i int) bool {
	return len(s.Tenants) > 0 && s.Tenants[len(s.Tenants)-1] == i
}

// fit finds a free slot for r, growing one if that is provably safe.
func (p *Plan) fit(r Request) int {
	best, bestMax := -1, int64(0)
	grow, growMax := -1, int64(0)
	for s := range p.Slots {
		sl := &p.Slots[s]
		if sl.lastUse >= r.Def {
			continue // a tenant is still live when r is written
		}
		m, _ := sl.Bytes.MaxValue(p.opts.Bounds)
		switch symshape.CompareIn(sl.Bytes, r.Bytes, p.opts.Bounds) {
		case symshape.Equal, symshape.Greater, symshape.GreaterEq:
			if best < 0 || m < bestMax {
				best, bestMax = s, m
			}
		case symshape.Less, symshape.LessEq:
			if grow < 0 || m > growMax {
				grow, growMax = s, m
			}
		}
	}
	if best >= 0 {
		return best
	}
	if grow >= 0 {
		p.Slots[grow].Bytes = r.Bytes
	}
	return grow
}

// Slot returns the slot index of request i.
func (p *Plan) Slot(i int) int { return p.Assign[i] }

// Allocated is the total of every slot's Max: the device memory the plan
// takes at load, sized for the declared maxima.
func (p *Plan) Allocated() int64 {
	var n int64
	for _, s := range p.Slots {
		n += s.Max
	}
	return n
}

// Peak is the memory the plan needs at binding b: the sum of its slots' sizes.
func (p *Plan) Peak(b symshape.Binding) (int64, error) {
	var n int64
	for i, s := range p.Slots {
		v, err := s.Bytes.Eval(b)
		if err != nil {
			return 0, fmt.Errorf("memplan: slot %d: %w", i, err)
		}
		n += v
	}
	return n, nil
}

// Unshared is what the tensors would need at binding b with no reuse at all.
func (p *Plan) Unshared(b symshape.Binding) (int64, error) {
	var n int64
	for _, r := range p.reqs {
		v, err := r.Bytes.Eval(b)
		if err != nil {
			return 0, fmt.Errorf("memplan: %s: %w", r.Name, err)
		}
		n += v
	}
	return n, nil
}

// Report describes the plan at binding b: one line per slot and the totals.
func (p *Plan) Report(b symshape.Binding) string {
	var sb strings.Builder
	peak, err1 := p.Peak(b)
	sum, err2 := p.Unshared(b)
	if err1 != nil || err2 != nil {
		fmt.Fprintf(&sb, "memplan: cannot evaluate at %v\n", b)
	} else {
		saved := 0.0
		if sum > 0 {
			saved = 100 * float64(sum-peak) / float64(sum)
		}
		fmt.Fprintf(&sb, "%d tensors in %d slots: %s at %v vs %s unshared (%.0f%% saved); %s allocated for the declared maxima\n",
			len(p.reqs), len(p.Slots), Bytes(peak), b, Bytes(sum), saved, Bytes(p.Allocated()))
	}
	for i, s := range p.Slots {
		names := make([]string, 0, len(s.Tenants))
		for _, t := range s.Tenants {
			names = append(names, p.reqs[t].Name)
		}
		list := strings.Join(names, ", ")
		if len(names) > 4 {
			list = strings.Join(names[:4], ", ") + fmt.Sprintf(", … (%d more)", len(names)-4)
		}
		fmt.Fprintf(&sb, "  slot %3d  %-24s max %10s  %s\n", i, s.Bytes.String(), Bytes(s.Max), list)
	}
	return sb.String()
}

// Bytes formats a byte count for people: 1.5 MiB, 312 B.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
