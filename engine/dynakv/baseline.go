package dynakv

import (
	"fmt"
	"math"
	"math/rand"
	"path/filepath"
	"sort"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/flash"
	"github.com/tlite/tlite/engine/hostattn"
)

// Baseline modes (systems-spec §2c, with honest names).
const (
	// NoCluster is exact token top-k: every key of the head is read
	// sequentially, the ρ·|K_t| best tokens are selected, and their values
	// fetched scattered in sequence order.
	NoCluster = "nocluster"
	// Static is a PQCache-style update without product quantization:
	// K-Means at prefill, each new entry appended to its nearest cluster
	// forever, entries stored in sequence order.
	Static = "static"
	// Local is a ClusterKV-style update: new entries wait in a DRAM window
	// (always attended) and are clustered on their own every Window steps;
	// entries stored in sequence order.
	Local = "local"
)

// BaselineConfig configures a Baseline.
type BaselineConfig struct {
	Mode       string
	Dir        string
	Budget     float64
	MaxContext int
	// Window is W for Local [ours: 64].
	Window      int
	InitDiv     int
	KMeansIters int
	QueueDepth  int
	Shadow      bool
	Seed        int64
}

// Baseline is one of the comparison systems over the same hook, reads
// and statistics as System.
type Baseline struct {
	cfg    BaselineConfig
	layers []*seqLayer
	fstats *flash.Stats
	rd     *flash.Pool
	rng    *rand.Rand
	step   int
	st     Stats
}

type seqLayer struct {
	heads, kvh, dim int
	f               *flash.File
	path            string
	hs              []*seqHead
	written         int64
	prefilled       bool
}

type seqCluster struct {
	w   welford
	pos []int
}

type seqHead struct {
	clusters []*seqCluster
	window   []int
	p0       [][]float64
	total    int
	flushed  int         // positions below are on flash
	pend     [][]float32 // [k|v] of positions flushed.. (DRAM page buffer)
	shadow   [][]float32
}

// NewBaseline returns a baseline system.
func NewBaseline(cfg BaselineConfig, layers, heads, kvHeads, dim int) (*Baseline, error) {
	switch cfg.Mode {
	case NoCluster, Static, Local:
	default:
		return nil, fmt.Errorf("dynakv: baseline %q; want %s, %s or %s", cfg.Mode, NoCluster, Static, Local)
	}
	if cfg.Budget <= 0 || cfg.Budget > 1 || cfg.MaxContext <= 0 || cfg.Dir == "" {
		return nil, fmt.Errorf("dynakv: baseline budget %v, context %d, dir %q", cfg.Budget, cfg.MaxContext, cfg.Dir)
	}
	if layers <= 0 || kvHeads <= 0 || heads%kvHeads != 0 || dim <= 0 || flash.PageSize%(2*dim*4) != 0 {
		return nil, fmt.Errorf("dynakv: %d layers, %d heads, %d KV heads of %d: not supported", layers, heads, kvHeads, dim)
	}
	if cfg.Window == 0 {
		cfg.Window = 64
	}
	if cfg.InitDiv == 0 {
		cfg.InitDiv = 25
	}
	if cfg.KMeansIters == 0 {
		cfg.KMeansIters = 10
	}
	b := &Baseline{cfg: cfg, fstats: flash.NewStats(), rng: rand.New(rand.NewSource(cfg.Seed + 1))}
	b.st.init(Config{Budget: cfg.Budget})
	var err error
	if b.rd, err = flash.NewPool(max(cfg.QueueDepth, 4)); err != nil {
		return nil, err
	}
	for l := 0; l < layers; l++ {
		path := filepath.Join(cfg.Dir, fmt.Sprintf("%s-layer%02d.seq", cfg.Mode, l))
		f, err := flash.OpenRW(path, flash.Options{Stats: b.fstats})
		if err == nil {
			err = f.Truncate(0)
		}
		if err != nil {
			b.Close()
			return nil, err
		}
		sl := &seqLayer{heads: heads, kvh: kvHeads, dim: dim, f: f, path: path}
		for h := 0; h < kvHeads; h++ {
			sl.hs = append(sl.hs, &seqHead{})
		}
		b.layers = append(b.layers, sl)
	}
	return b, nil
}

// Close releases the reader pool and removes the files.
func (b *Baseline) Close() error {
	if b.rd != nil {
		b.rd.Close()
	}
	var first error
	for _, l := range b.layers {
		st := &store{f: l.f}
		if err := st.close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ReadSnapshot is the files' flash statistics.
func (b *Baseline) ReadSnapshot() flash.Snapshot { return b.fstats.Snapshot() }

// Report summarises the run.
func (b *Baseline) Report() Report {
	clusters := 0
	var written int64
	for _, l := range b.layers {
		for _, h := range l.hs {
			clusters += len(h.clusters)
		}
		written += l.written
	}
	entry := 0
	if len(b.layers) > 0 {
		entry = 2 * b.layers[0].dim * 4
	}
	r := b.st.report(b.fstats.Snapshot(), entry, clusters, written)
	r.Mode = b.cfg.Mode
	return r
}

// Layout: per layer, head h's region holds MaxContext entries [k|v] in
// sequence order; for NoCluster the region is all keys then all values,
// so that the keys read as one run.
func (l *seqLayer) entry() int { return 2 * l.dim * 4 }

func (b *Baseline) regionOff(l *seqLayer, h int) int64 {
	return int64(h) * int64(b.cfg.MaxContext) * int64(l.entry())
}

// flush writes the head's complete pages of pending entries.
func (b *Baseline) flush(l *seqLayer, h int) error {
	hs := l.hs[h]
	D := l.dim
	if b.cfg.Mode == NoCluster {
		per := flash.PageSize / (D * 4)
		for len(hs.pend) >= per {
			for part := 0; part < 2; part++ {
				buf := flash.AlignedBuf(flash.PageSize)
				for i := 0; i < per; i++ {
					putFloats(buf[i*D*4:(i+1)*D*4], hs.pend[i][part*D:(part+1)*D])
				}
				off := b.regionOff(l, h) + int64(part)*int64(b.cfg.MaxContext)*int64(D*4) + int64(hs.flushed)*int64(D*4)
				if err := l.f.WriteAt(buf, off); err != nil {
					return err
				}
				l.written += flash.PageSize
			}
			hs.pend, hs.flushed = hs.pend[per:], hs.flushed+per
		}
		return nil
	}
	per := flash.PageSize / l.entry()
	for len(hs.pend) >= per {
		buf := flash.AlignedBuf(flash.PageSize)
		for i := 0; i < per; i++ {
			putFloats(buf[i*l.entry():(i+1)*l.entry()], hs.pend[i])
		}
		if err := l.f.WriteAt(buf, b.regionOff(l, h)+int64(hs.flushed)*int64(l.entry())); err != nil {
			return err
		}
		l.written += flash.PageSize
		hs.pend, hs.flushed = hs.pend[per:], hs.flushed+per
	}
	return nil
}

// Hook is the engine hook, as System.Hook.
func (b *Baseline) Hook() engine.AttentionHook {
	return func(c *engine.AttentionCall) error {
		if err := checkCall(c, len(b.layers), func(i int) (int, int, int) {
			l := b.layers[i]
			return l.heads, l.kvh, l.dim
		}); err != nil {
			return err
		}
		l := b.layers[c.Layer]
		pos, err := positionsOf(c)
		if err != nil {
			return err
		}
		if !l.prefilled {
			return b.prefill(l, c, pos)
		}
		if err := decodeRow(c); err != nil {
			return err
		}
		out, err := b.stepLayer(c.Layer, pos[0], c.Q, c.KNew, c.VNew, c.Scale)
		if err != nil {
			return err
		}
		c.Out = out
		return nil
	}
}

func (b *Baseline) prefill(l *seqLayer, c *engine.AttentionCall, pos []int) error {
	n, D := c.Rows, l.dim
	for i, p := range pos {
		if p != i {
			return fmt.Errorf("dynakv: the baseline wants the prompt at positions 0..n-1 in order")
		}
	}
	for h, hs := range l.hs {
		var keys [][]float32
		for i := 0; i < n; i++ {
			e := make([]float32, 2*D)
			copy(e, c.KNew[(i*l.kvh+h)*D:(i*l.kvh+h+1)*D])
			copy(e[D:], c.VNew[(i*l.kvh+h)*D:(i*l.kvh+h+1)*D])
			hs.pend = append(hs.pend, e)
			keys = append(keys, e[:D])
			if b.cfg.Shadow {
				hs.shadow = append(hs.shadow, e[:D])
			}
		}
		hs.total = n
		if b.cfg.Mode != NoCluster {
			labels := kmeans(keys, (n+b.cfg.InitDiv-1)/b.cfg.InitDiv, b.cfg.KMeansIters, b.rng)
			groups := map[int][]int{}
			for i, lb := range labels {
				groups[lb] = append(groups[lb], i)
			}
			for g := 0; g < len(groups); g++ {
				var pts [][]float32
				for _, i := range groups[g] {
					pts = append(pts, keys[i])
				}
				w := statsOf(pts)
				hs.clusters = append(hs.clusters, &seqCluster{w: w, pos: groups[g]})
				hs.p0 = append(hs.p0, w.mean)
			}
			b.st.initialClusters += len(groups)
		}
		if err := b.flush(l, h); err != nil {
			return err
		}
	}
	b.st.prefillWritten += l.written
	l.written = 0
	l.prefilled = true
	return nil
}

// readPositions reads the [k|v] entries (or, with part ≥ 0 for
// NoCluster, the keys or values) of sorted positions of one head: runs of
// adjacent positions coalesce into one block-aligned request; pending
// ones come from DRAM.
func (b *Baseline) readPositions(l *seqLayer, h int, pos []int, part int) (map[int][]float32, error) {
	hs := l.hs[h]
	size, base := int64(l.entry()), b.regionOff(l, h)
	if part >= 0 {
		size = int64(l.dim * 4)
		base += int64(part) * int64(b.cfg.MaxContext) * size
	}
	out := make(map[int][]float32, len(pos))
	type run struct {
		lo, hi int64
		ps     []int
	}
	var runs []*run
	for _, p := range pos {
		if p >= hs.flushed {
			e := hs.pend[p-hs.flushed]
			if part >= 0 {
				e = e[part*l.dim : (part+1)*l.dim]
			}
			out[p] = e
			continue
		}
		lo := (base + int64(p)*size) &^ (flash.BlockSize - 1)
		hi := (base + int64(p+1)*size + flash.BlockSize - 1) &^ (flash.BlockSize - 1)
		b.st.usefulRead += size
		if k := len(runs); k > 0 && lo <= runs[k-1].hi {
			runs[k-1].hi = max(runs[k-1].hi, hi)
			runs[k-1].ps = append(runs[k-1].ps, p)
			continue
		}
		runs = append(runs, &run{lo: lo, hi: hi, ps: []int{p}})
	}
	reqs := make([]flash.Request, len(runs))
	for i, r := range runs {
		reqs[i] = flash.Request{File: l.f, Off: r.lo, Dst: flash.AlignedBuf(int(r.hi - r.lo))}
		b.st.plannedRead += r.hi - r.lo
	}
	if len(reqs) > 0 {
		if err := b.rd.Read(reqs); err != nil {
			return nil, err
		}
	}
	n := int(size / 4)
	for i, r := range runs {
		for _, p := range r.ps {
			at := base + int64(p)*size - r.lo
			out[p] = getFloats(reqs[i].Dst[at:at+size], n)
		}
	}
	return out, nil
}

func (b *Baseline) stepLayer(layer, pos int, q, k, v []float32, scale float32) ([]float32, error) {
	l := b.layers[layer]
	D, G := l.dim, l.heads/l.kvh
	if layer == 0 {
		b.step++
		b.st.steps++
	}
	out := make([]float32, l.heads*D)
	qbar := make([]float32, D)
	for h, hs := range l.hs {
		t0 := time.Now()
		groupMean(qbar, q[h*G*D:(h+1)*G*D], G, D)
		var sel []int
		var keys, vals []float32
		var tIO time.Duration
		switch b.cfg.Mode {
		case NoCluster:
			all := make([]int, hs.total)
			for i := range all {
				all[i] = i
			}
			t1 := time.Now()
			kk, err := b.readPositions(l, h, all, 0)
			if err != nil {
				return nil, err
			}
			tIO += time.Since(t1)
			type sc struct {
				p int
				v float32
			}
			scores := make([]sc, hs.total)
			for p := 0; p < hs.total; p++ {
				var dot float32
				for d, x := range qbar {
					dot += x * kk[p][d]
				}
				scores[p] = sc{p, dot}
			}
			sort.Slice(scores, func(a, c int) bool { return scores[a].v > scores[c].v })
			need := int(math.Ceil(b.cfg.Budget * float64(hs.total)))
			for _, s := range scores[:min(need, len(scores))] {
				sel = append(sel, s.p)
			}
			sort.Ints(sel)
			t2 := time.Now()
			vv, err := b.readPositions(l, h, sel, 1)
			if err != nil {
				return nil, err
			}
			tIO += time.Since(t2)
			for _, p := range sel {
				keys = append(keys, kk[p]...)
				vals = append(vals, vv[p]...)
			}
		default:
			scores := make([]float64, len(hs.clusters))
			order := make([]int, len(hs.clusters))
			for i, c := range hs.clusters {
				order[i] = i
				for d, x := range qbar {
					scores[i] += float64(x) * c.w.mean[d]
				}
			}
			sort.Slice(order, func(a, c int) bool { return scores[order[a]] > scores[order[c]] })
			need := int(math.Ceil(b.cfg.Budget * float64(hs.total)))
			got := 0
			for _, i := range order {
				if got >= need && got > 0 {
					break
				}
				sel = append(sel, hs.clusters[i].pos...)
				got += len(hs.clusters[i].pos)
			}
			if b.cfg.Mode == Local {
				got += len(hs.window)
			}
			sort.Ints(sel)
			t1 := time.Now()
			kv, err := b.readPositions(l, h, sel, -1)
			if err != nil {
				return nil, err
			}
			tIO += time.Since(t1)
			for _, p := range sel {
				keys = append(keys, kv[p][:D]...)
				vals = append(vals, kv[p][D:]...)
			}
			for _, p := range hs.window {
				// The window is in DRAM (never flushed while waiting).
				e := hs.pend[p-hs.flushed]
				keys = append(keys, e[:D]...)
				vals = append(vals, e[D:]...)
				sel = append(sel, p)
			}
		}
		keys = append(keys, k[h*D:(h+1)*D]...)
		vals = append(vals, v[h*D:(h+1)*D]...)
		lse := make([]float64, G)
		lo, hi := h*G*D, (h+1)*G*D
		t3 := time.Now()
		if err := hostattn.Group(out[lo:hi], q[lo:hi], D, keys, vals, scale, lse); err != nil {
			return nil, err
		}
		b.st.tAttn += time.Since(t3)
		b.st.retrieved += int64(len(sel))
		b.st.entriesTotal += int64(hs.total)
		e := make([]float32, 2*D)
		copy(e, k[h*D:(h+1)*D])
		copy(e[D:], v[h*D:(h+1)*D])
		if b.cfg.Shadow {
			hs.shadow = append(hs.shadow, e[:D])
			b.st.recall(hs.shadow, q[lo:hi], lse, scale, D)
		}
		b.st.drift(b.step, hs.p0, e[:D])
		// Update.
		t4 := time.Now()
		hs.pend = append(hs.pend, e)
		b.st.appended += int64(l.entry())
		switch b.cfg.Mode {
		case Static:
			best, bd := 0, math.Inf(1)
			for i, c := range hs.clusters {
				if d := dist2(e[:D], c.w.mean); d < bd {
					best, bd = i, d
				}
			}
			c := hs.clusters[best]
			c.w = c.w.add(e[:D])
			c.pos = append(c.pos, pos)
		case Local:
			hs.window = append(hs.window, pos)
			if len(hs.window) >= b.cfg.Window {
				var pts [][]float32
				for _, p := range hs.window {
					pts = append(pts, hs.pend[p-hs.flushed][:D])
				}
				labels := kmeans(pts, (len(pts)+b.cfg.InitDiv-1)/b.cfg.InitDiv, b.cfg.KMeansIters, b.rng)
				groups := map[int][]int{}
				for i, lb := range labels {
					groups[lb] = append(groups[lb], hs.window[i])
				}
				for g := 0; g < len(groups); g++ {
					var gp [][]float32
					for _, p := range groups[g] {
						gp = append(gp, hs.pend[p-hs.flushed][:D])
					}
					hs.clusters = append(hs.clusters, &seqCluster{w: statsOf(gp), pos: groups[g]})
				}
				b.st.splitsVariance++ // a recluster, counted with splits
				hs.window = nil
			}
		}
		hs.total++
		if len(hs.window) == 0 {
			if err := b.flush(l, h); err != nil {
				return nil, err
			}
		}
		b.st.tUpdate += time.Since(t4)
		b.st.tIO += tIO
		b.st.tScore += time.Since(t0) - tIO - time.Since(t3)
	}
	return out, nil
}

// recall records the share of full-attention mass that lse (the attended
// set's log-sum-exp per query head of the group q) holds, against every
// key in shadow.
func (st *Stats) recall(shadow [][]float32, q []float32, lse []float64, scale float32, D int) {
	all := make([]float32, 0, len(shadow)*D)
	for _, e := range shadow {
		all = append(all, e...)
	}
	sc := make([]float32, len(shadow))
	for g := range lse {
		hostattn.Scores(sc, q[g*D:(g+1)*D], all, scale)
		mx := math.Inf(-1)
		for _, x := range sc {
			mx = math.Max(mx, float64(x))
		}
		var sum float64
		for _, x := range sc {
			sum += math.Exp(float64(x) - mx)
		}
		st.recallSum += math.Exp(lse[g] - (mx + math.Log(sum)))
		st.recallN++
	}
}
