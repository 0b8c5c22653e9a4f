package dynakv

import (
	"math"
	"math/rand"
	"testing"

	"github.com/tlite/tlite/engine/flash"
)

// synth drives a System with random GQA data whose key distribution
// drifts: keys come from a mixture whose centres move with the step.
type synth struct {
	layers, heads, kvh, dim int
	rng                     *rand.Rand
	centres                 [][]float32
	kv                      map[[3]int][]float32 // (layer, head, pos) -> [k|v]
}

func newSynth(seed int64, layers, heads, kvh, dim int) *synth {
	s := &synth{layers: layers, heads: heads, kvh: kvh, dim: dim, rng: rand.New(rand.NewSource(seed)), kv: map[[3]int][]float32{}}
	for i := 0; i < 6; i++ {
		c := make([]float32, dim)
		for d := range c {
			c[d] = float32(s.rng.NormFloat64() * 3)
		}
		s.centres = append(s.centres, c)
	}
	return s
}

// rows returns q [n][heads][dim], k, v [n][kvh][dim] for positions
// pos..pos+n-1 of layer, recording the entries.
func (s *synth) rows(layer, pos, n int, drift float32) (q, k, v []float32) {
	q = make([]float32, n*s.heads*s.dim)
	k = make([]float32, n*s.kvh*s.dim)
	v = make([]float32, n*s.kvh*s.dim)
	for i := range q {
		q[i] = float32(s.rng.NormFloat64())
	}
	for i := 0; i < n; i++ {
		for h := 0; h < s.kvh; h++ {
			c := s.centres[s.rng.Intn(len(s.centres))]
			e := make([]float32, 2*s.dim)
			for d := 0; d < s.dim; d++ {
				x := c[d] + float32(s.rng.NormFloat64()) + drift*float32(pos+i)*float32(d%3-1)/100
				k[(i*s.kvh+h)*s.dim+d] = x
				v[(i*s.kvh+h)*s.dim+d] = float32(s.rng.NormFloat64())
				e[d], e[s.dim+d] = x, v[(i*s.kvh+h)*s.dim+d]
			}
			s.kv[[3]int{layer, h, pos + i}] = e
		}
	}
	return q, k, v
}

func seqInts(lo, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = lo + i
	}
	return out
}

// TestInvariantUnderDrift runs a prompt and many drifting decode steps with
// small S_max and B_max, so that variance splits, delayed splits, buffer-cap
// splits and forced splits all happen, and checks after every step that
// each entry is in exactly one place, that each step attended exactly the
// selected clusters with their buffers, and at the end that every entry
// reads back from flash (or its buffer) as written.
func TestInvariantUnderDrift(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cache   int64
		pol     string
		noDelay bool
	}{{"nocache", 0, "", false}, {"gds", 64 << 10, "gds", false}, {"lru", 64 << 10, "lru", false}, {"nodelay", 0, "", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const L, H, KVH, D, L0, steps = 2, 4, 2, 32, 64, 60
			sys, err := New(Config{Dir: t.TempDir(), Budget: 0.2, SMax: 32, BMax: 8, InitDiv: 12, Lambda: 0.7,
				HotSteps: 8, MaxHot: 6, CacheBytes: tc.cache, CachePolicy: tc.pol, NoDelay: tc.noDelay, Debug: true, Shadow: true}, L, H, KVH, D)
			if err != nil {
				t.Fatal(err)
			}
			defer sys.Close()
			sy := newSynth(1, L, H, KVH, D)
			for l := 0; l < L; l++ {
				q, k, v := sy.rows(l, 0, L0, 1)
				if err := sys.Prefill(l, seqInts(0, L0), q, k, v); err != nil {
					t.Fatal(err)
				}
			}
			if err := sys.CheckInvariant(); err != nil {
				t.Fatalf("after prefill: %v", err)
			}
			for st := 0; st < steps; st++ {
				pos := L0 + st
				for l := 0; l < L; l++ {
					q, k, v := sy.rows(l, pos, 1, 1)
					if _, err := sys.Step(l, pos, q, k, v, 0.2); err != nil {
						t.Fatalf("step %d layer %d: %v", st, l, err)
					}
				}
				if err := sys.CheckInvariant(); err != nil {
					t.Fatalf("after step %d: %v", st, err)
				}
			}
			if err := sys.VerifyData(func(l, h, p int) []float32 { return sy.kv[[3]int{l, h, p}] }); err != nil {
				t.Fatal(err)
			}
			r := sys.Report()
			if tc.noDelay {
				if r.Buffered != 0 || r.SplitsVariance == 0 {
					t.Fatalf("without delay: %d entries buffered, %d variance splits", r.Buffered, r.SplitsVariance)
				}
			} else if r.SplitsVariance == 0 || r.SplitsDelayed+r.SplitsBMax == 0 || r.Buffered == 0 {
				t.Fatalf("the workload did not exercise splitting: %d variance, %d delayed, %d cap splits, %d buffered", r.SplitsVariance, r.SplitsDelayed, r.SplitsBMax, r.Buffered)
			}
			if r.Recall <= 0 || r.Recall >= 1 {
				t.Fatalf("recall %v at ρ = 0.2; want in (0, 1)", r.Recall)
			}
			if tc.cache > 0 && r.HitRate == 0 {
				t.Fatalf("cache of %d bytes never hit", tc.cache)
			}
		})
	}
}

// TestReadsAreTheRetrievedSet checks that the bytes read from flash are
// exactly the block-aligned extents of the retrieved clusters' flushed
// entries (no cache), that the aligned reads add little to the entries,
// and that the kernel's own count (/proc/self/io read_bytes) grows by at
// least the bytes read: O_DIRECT reads reach the device.
func TestReadsAreTheRetrievedSet(t *testing.T) {
	const L, H, KVH, D, L0 = 1, 4, 2, 32, 128
	sys, err := New(Config{Dir: t.TempDir(), Budget: 0.05}, L, H, KVH, D)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	sy := newSynth(2, L, H, KVH, D)
	q, k, v := sy.rows(0, 0, L0, 0)
	if err := sys.Prefill(0, seqInts(0, L0), q, k, v); err != nil {
		t.Fatal(err)
	}
	before, err := flash.ReadProcIO()
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	s0 := sys.ReadSnapshot().Read
	for st := 0; st < 50; st++ {
		q, k, v := sy.rows(0, L0+st, 1, 0)
		if _, err := sys.Step(0, L0+st, q, k, v, 0.2); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := flash.ReadProcIO()
	s1 := sys.ReadSnapshot().Read
	read := s1.Bytes - s0.Bytes
	if read != sys.PlannedReadBytes() || read == 0 {
		t.Fatalf("read %d bytes, planned %d", read, sys.PlannedReadBytes())
	}
	if u := sys.UsefulReadBytes(); float64(read) > 1.5*float64(u) {
		t.Fatalf("read %d bytes for %d bytes of entries", read, u)
	}
	if got := after.ReadBytes - before.ReadBytes; got < s1.DeviceBytes-s0.DeviceBytes {
		t.Fatalf("/proc/self/io read_bytes grew by %d, the reads moved %d: served from the page cache?", got, s1.DeviceBytes-s0.DeviceBytes)
	}
	r := sys.Report()
	if r.RetrievedShare > 0.3 {
		t.Fatalf("retrieved %.2f of the entries at ρ = 0.05", r.RetrievedShare)
	}
}

// TestDualHeadPoolProperty drives pools with random appends (through the
// page-write path), in-place rewrites (splits) and reads, and compares
// every read with an in-memory reference: the two sides of a pool never
// overwrite each other.
func TestDualHeadPoolProperty(t *testing.T) {
	const dim, smax = 32, 32
	st, err := newStore(t.TempDir()+"/pool", dim, smax, flash.NewStats())
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	rng := rand.New(rand.NewSource(7))
	type side struct {
		p   *pool
		s   int
		ref [][]float32
	}
	var sides []*side
	for i := 0; i < 3; i++ {
		p := st.newPool()
		sides = append(sides, &side{p: p, s: 0}, &side{p: p, s: 1})
	}
	entry := func() []float32 {
		e := make([]float32, 2*dim)
		for i := range e {
			e[i] = float32(rng.Intn(1000))
		}
		return e
	}
	check := func(op int) {
		for _, sd := range sides {
			n := len(sd.ref)
			if n == 0 {
				continue
			}
			off, length := st.extent(sd.p, sd.s, n)
			buf := make([]byte, length)
			if err := st.f.ReadAt(buf, off); err != nil {
				t.Fatal(err)
			}
			got := st.decode(buf, sd.s, n, dim)
			for i := range got {
				for d := range got[i] {
					if got[i][d] != sd.ref[i][d] {
						t.Fatalf("op %d: pool %d side %d entry %d differs from the reference", op, sd.p.idx, sd.s, i)
					}
				}
			}
		}
		for i := 0; i < len(sides); i += 2 {
			if len(sides[i].ref)+len(sides[i+1].ref) > st.capacity {
				t.Fatalf("op %d: pool %d holds %d + %d > %d", op, i/2, len(sides[i].ref), len(sides[i+1].ref), st.capacity)
			}
		}
	}
	for op := 0; op < 200; op++ {
		sd := sides[rng.Intn(len(sides))]
		n := len(sd.ref)
		switch r := rng.Intn(10); {
		case r < 7 && n < smax: // append one entry: rewrite its page
			sd.ref = append(sd.ref, entry())
			base := n - n%st.perPage
			if err := st.writePages(sd.p, sd.s, base, sd.ref[base:], base, n+1); err != nil {
				t.Fatal(err)
			}
		case r < 9 && n > 1: // split in place: keep a random subset
			var keep [][]float32
			for _, e := range sd.ref {
				if rng.Intn(2) == 0 {
					keep = append(keep, e)
				}
			}
			sd.ref = keep
			if err := st.writePages(sd.p, sd.s, 0, keep, 0, len(keep)); err != nil {
				t.Fatal(err)
			}
		default: // appends past S_max must be refused
			if n == smax {
				if err := st.writePages(sd.p, sd.s, 0, append(sd.ref, entry()), 0, n+1); err == nil {
					t.Fatal("a side grew past S_max")
				}
			}
		}
		check(op)
	}
}

// TestKMeansAndSplit checks the clustering helpers on separable data.
func TestKMeansAndSplit(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var pts [][]float32
	for i := 0; i < 60; i++ {
		c := float32(i%3) * 50
		pts = append(pts, []float32{c + float32(rng.NormFloat64()), c + float32(rng.NormFloat64())})
	}
	labels := kmeans(pts, 3, 10, rng)
	for i := range pts {
		if labels[i] != labels[i%3] {
			t.Fatalf("point %d labelled %d, its group's first point %d", i, labels[i], labels[i%3])
		}
	}
	two := split2(pts[:40], 5)
	ones := 0
	for _, l := range two {
		ones += l
	}
	if ones == 0 || ones == 40 {
		t.Fatal("2-means left a half empty")
	}
	same := [][]float32{{1, 1}, {1, 1}, {1, 1}}
	if l := split2(same, 5); l[0] == l[2] {
		t.Fatal("identical points were not halved")
	}
	w := statsOf(pts[:10])
	var m2 float64
	for _, p := range pts[:10] {
		m2 += dist2(p, w.mean)
	}
	if math.Abs(m2-w.m2) > 1e-6*math.Max(1, m2) {
		t.Fatalf("Welford m2 %v, direct %v", w.m2, m2)
	}
}
