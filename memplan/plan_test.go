package memplan

import (
	"math/rand"
	"testing"

	"github.com/tlite/tlite/symshape"
)

var (
	seq   = symshape.Sym("seq")
	past  = symshape.Sym("past")
	bound = symshape.Bounds{"seq": {1, 512}, "past": {0, 1024}}
)

func c(v int64) symshape.Expr { return symshape.Const(v) }

func TestReuseProvablyEqual(t *testing.T) {
	// a -> b -> c: a dies when b is written at step 1, so c (step 2) reuses a.
	reqs := []Request{
		{Name: "a", Bytes: symshape.Mul(seq, c(256)), Def: 0, LastUse: 1},
		{Name: "b", Bytes: symshape.Mul(seq, c(256)), Def: 1, LastUse: 2},
		{Name: "c", Bytes: symshape.Mul(c(256), seq), Def: 2, LastUse: Forever},
	}
	p, err := Build(reqs, Options{Bounds: bound})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Slots) != 2 || p.Slot(0) != p.Slot(2) || p.Slot(0) == p.Slot(1) {
		t.Fatalf("want a and c to share a slot apart from b; got %v", p.Assign)
	}
	if got, want := p.Allocated(), int64(2*512*256); got != want {
		t.Errorf("allocated %d, want %d", got, want)
	}
}

func TestGrowOnlyWhenProvable(t *testing.T) {
	reqs := []Request{
		{Name: "small", Bytes: symshape.Mul(seq, c(64)), Def: 0, LastUse: 0},
		{Name: "big", Bytes: symshape.Mul(seq, c(128)), Def: 1, LastUse: 1},
		{Name: "other", Bytes: symshape.Mul(past, c(4)), Def: 2, LastUse: 2},
	}
	p, err := Build(reqs, Options{Bounds: bound})
	if err != nil {
		t.Fatal(err)
	}
	if p.Slot(0) != p.Slot(1) {
		t.Errorf("big should grow small's slot")
	}
	if !p.Slots[p.Slot(1)].Bytes.Equal(symshape.Mul(seq, c(128))) {
		t.Errorf("grown slot size %v", p.Slots[p.Slot(1)].Bytes)
	}
	// seq*128 vs past*4 is undecidable, so "other" gets its own slot.
	if p.Slot(2) == p.Slot(1) {
		t.Errorf("undecidable sizes must not share")
	}
}

func TestInPlace(t *testing.T) {
	reqs := []Request{
		{Name: "x", Bytes: symshape.Mul(seq, c(16)), Def: 0, LastUse: 1},
		{Name: "y", Bytes: symshape.Mul(seq, c(16)), Def: 1, LastUse: 2, InPlace: []int{0}},
		{Name: "z", Bytes: symshape.Mul(seq, c(16)), Def: 2, LastUse: 3, InPlace: []int{0}},
	}
	p, err := Build(reqs, Options{Bounds: bound})
	if err != nil {
		t.Fatal(err)
	}
	if p.Slot(0) != p.Slot(1) {
		t.Errorf("y should overwrite x in place")
	}
	if p.Slot(2) == p.Slot(1) {
		t.Errorf("z may not take y's live slot")
	}
}

func TestUnboundedIsAnError(t *testing.T) {
	_, err := Build([]Request{{Name: "kv", Bytes: symshape.Sym("total"), Def: 0, LastUse: 0}}, Options{Bounds: bound})
	if err == nil {
		t.Fatal("want an error naming the unbounded symbol")
	}
}

// Property: on random lifetimes and sizes, tenants of one slot never overlap
// in time, and each fits its slot at random bindings within the bounds.
func TestRandomPlansAreSafe(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	sizes := []symshape.Expr{
		symshape.Mul(seq, c(64)), symshape.Mul(seq, c(128)), symshape.Add(seq, past),
		symshape.Mul(symshape.Add(seq, past), c(8)), c(4096), symshape.Mul(past, c(2)),
	}
	for trial := 0; trial < 200; trial++ {
		n := 1 + r.Intn(30)
		reqs := make([]Request, n)
		for i := range reqs {
			last := i + r.Intn(5)
			if r.Intn(10) == 0 {
				last = Forever
			}
			reqs[i] = Request{Name: "t", Bytes: sizes[r.Intn(len(sizes))], Def: i, LastUse: last}
			if i > 0 && r.Intn(3) == 0 {
				reqs[i].InPlace = []int{i - 1}
			}
		}
		p, err := Build(reqs, Options{Bounds: bound, Align: 64})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Slots {
			for a := 1; a < len(s.Tenants); a++ {
				prev, cur := reqs[s.Tenants[a-1]], reqs[s.Tenants[a]]
				if prev.LastUse > cur.Def {
					t.Fatalf("trial %d: overlapping tenants %d..%d and %d..", trial, prev.Def, prev.LastUse, cur.Def)
				}
			}
			for k := 0; k < 10; k++ {
				b := symshape.Binding{"seq": 1 + r.Int63n(512), "past": r.Int63n(1025)}
				slot, _ := s.Bytes.Eval(b)
				if slot > s.Max {
					t.Fatalf("slot size %d above its allocation %d at %v", slot, s.Max, b)
				}
				for _, ten := range s.Tenants {
					v, _ := reqs[ten].Bytes.Eval(b)
					if v > slot {
						t.Fatalf("trial %d: tenant %v (%d) exceeds slot %v (%d) at %v", trial, reqs[ten].Bytes, v, s.Bytes, slot, b)
					}
				}
			}
		}
		b := symshape.Binding{"seq": 100, "past": 300}
		peak, _ := p.Peak(b)
		sum, _ := p.Unshared(b)
		if peak > sum {
			t.Fatalf("peak %d above unshared %d", peak, sum)
		}
	}
}
