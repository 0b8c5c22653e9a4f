package dynakv

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/tlite/tlite/engine"
	"github.com/tlite/tlite/engine/flash"
	"github.com/tlite/tlite/engine/hostattn"
)

// Config holds DynaKV's parameters. The zero value of a field means the
// default named beside it; paper values are marked [paper], ours [ours].
type Config struct {
	// Dir holds the per-layer pool files (on a file system with O_DIRECT).
	Dir string
	// Budget is ρ: clusters are taken by descending score until the
	// retrieved entries reach Budget·|K_t| [ours; default 0.10].
	Budget float64
	// Lambda scales the head's split threshold τ_h = λ·p90 of the initial
	// cluster variances [ours; default 1]. +Inf never splits on variance
	// (the "static-update" ablation; S_max still forces splits).
	Lambda float64
	// SMax is the most entries a cluster holds; reaching it forces a
	// split, and a pool holds 2·SMax slots [ours; default 64].
	SMax int
	// BMax caps a head's delayed-split buffers [paper: 16].
	BMax int
	// InitDiv sets M₀ = ⌈L₀/InitDiv⌉ [ours; default 25].
	InitDiv int
	// KMeansIters and SplitIters are the Lloyd iterations of the initial
	// clustering [ours; 10] and of a 2-way split [ours; 5].
	KMeansIters, SplitIters int
	// QueueDepth is the reader pool's depth (≥ 4) [ours; default 4].
	QueueDepth int
	// CacheBytes is the cluster cache's DRAM budget (0: no cache).
	CacheBytes int64
	// CachePolicy is "gds" (§6.2 with our reserved region; default) or
	// "lru" (the comparison).
	CachePolicy string
	// ReservedFrac is the cache share kept for recently updated clusters
	// [ours; 0.25]; RecentSteps is T_u [ours; 16].
	ReservedFrac float64
	RecentSteps  int
	// HotSteps: a cluster updated within it keeps a page buffer [ours;
	// 32]; MaxHot caps page buffers per layer [ours; 64].
	HotSteps, MaxHot int
	// NoPairing lays pools out in cluster order, one cluster per pool side
	// as it comes, instead of by co-retrieval (the layout ablation).
	NoPairing bool
	// NoDelay splits an over-threshold cluster at once, loading it when it
	// is not resident, instead of buffering the entry (the ablation that
	// measures delayed splitting's I/O saving).
	NoDelay bool
	// AttendAllBuffers attends every delayed-split buffer each step, not
	// only those of selected clusters [option; default off].
	AttendAllBuffers bool
	// Recent always attends the last Recent entries of each head from a
	// DRAM window (those the selected clusters did not bring), as the
	// local-update baseline attends its window [option; default 0, the
	// paper names no such window].
	Recent int
	// Prefetch turns on Pipeline 2 (prefetch.go): at the end of each
	// layer's hook the next layer's likely clusters are read ahead.
	Prefetch bool
	// PrefetchFactor bounds a layer's prefetch at this multiple of its
	// retrieval budget in bytes [ours; default 1.25]; PrefetchRecent
	// names the steps within which an updated cluster is a candidate
	// [ours; default 2].
	PrefetchFactor float64
	PrefetchRecent int
	// PrefetchByQuery picks the prefetch candidates by scoring the next
	// layer's representatives with this layer's query (GQA group mean)
	// instead of repeating the next layer's previous selection [ours].
	PrefetchByQuery bool
	// CentroidsOnFlash keeps the representatives used for scoring in a
	// per-layer file, read one layer ahead (Pipeline 1, reps.go).
	CentroidsOnFlash bool
	// Shadow keeps every key in DRAM, outside the system, to measure
	// attention recall against full attention.
	Shadow bool
	// Debug records each step's attended positions for CheckInvariant.
	Debug bool
	Seed  int64
}

func (c Config) withDefaults() (Config, error) {
	if c.Budget == 0 {
		c.Budget = 0.10
	}
	if c.Budget < 0 || c.Budget > 1 {
		return c, fmt.Errorf("dynakv: budget %v; want a fraction in (0, 1]", c.Budget)
	}
	if c.Lambda == 0 {
		c.Lambda = 1
	}
	if c.Lambda < 0 || math.IsNaN(c.Lambda) {
		return c, fmt.Errorf("dynakv: lambda %v; want > 0", c.Lambda)
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.SMax, 64)
	def(&c.BMax, 16)
	def(&c.InitDiv, 25)
	def(&c.KMeansIters, 10)
	def(&c.SplitIters, 5)
	def(&c.QueueDepth, 4)
	def(&c.RecentSteps, 16)
	def(&c.HotSteps, 32)
	def(&c.MaxHot, 64)
	def(&c.PrefetchRecent, 2)
	if c.PrefetchFactor == 0 {
		c.PrefetchFactor = 1.25
	}
	if c.PrefetchFactor < 0 || math.IsNaN(c.PrefetchFactor) {
		return c, fmt.Errorf("dynakv: prefetch factor %v; want > 0", c.PrefetchFactor)
	}
	if c.ReservedFrac == 0 {
		c.ReservedFrac = 0.25
	}
	if c.CachePolicy == "" {
		c.CachePolicy = "gds"
	}
	if c.CachePolicy != "gds" && c.CachePolicy != "lru" {
		return c, fmt.Errorf("dynakv: cache policy %q; want gds or lru", c.CachePolicy)
	}
	if c.SMax < 2 || c.BMax < 1 || c.QueueDepth < 1 || c.CacheBytes < 0 {
		return c, fmt.Errorf("dynakv: S_max %d, B_max %d, queue depth %d, cache %d bytes: out of range", c.SMax, c.BMax, c.QueueDepth, c.CacheBytes)
	}
	if c.Dir == "" {
		return c, fmt.Errorf("dynakv: no directory for the pool files")
	}
	return c, nil
}

// cluster is one cluster of one (layer, KV head): its statistics in DRAM,
// its entries (members, in pool-slot order: the first flushed are on
// flash, the rest in the page buffer), and its delayed-split buffer.
type cluster struct {
	id      int
	w       welford
	members []int
	flushed int
	// tail is the kv of members[tailBase():], the last, incomplete page:
	// the page buffer of a hot cluster (members[flushed:] live only here),
	// and for a cold one the copy a whole-page write needs.
	tail    [][]float32
	buf     []int
	bufKV   [][]float32
	flag    bool
	pool    *pool
	side    int
	updated int
	// selAt is the step this cluster (or the parent it split from) was
	// last selected, selRank its rank in that selection: the prefetcher's
	// candidates.
	selAt, selRank int
	pfRank         int // rank by the previous layer's query (PrefetchByQuery)
	// repSlot is 1 + the cluster's slot in the layer's representative
	// file (CentroidsOnFlash), 0 for none.
	repSlot int
}

func (c *cluster) size() int { return len(c.members) + len(c.buf) }

type headState struct {
	clusters []*cluster
	tau      float64
	p0       [][]float64
	total    int
	shadow   [][]float32 // every key, when Config.Shadow
	// recent is the last Config.Recent entries ([k|v]) and their positions.
	recent    [][]float32
	recentPos []int
	// Debug: the last step's attended positions and selected clusters'
	// entries at selection.
	attended, selected []int
}

type layerState struct {
	idx        int
	heads, kvh int
	dim        int
	store      *store
	hs         []*headState
	free       []poolSide // pool sides without a cluster
	prefilled  bool
	hot        map[*cluster]bool
	// pf is the layer's prefetch (Pipeline 2); lastSel the step of its
	// last selection.
	pf      *prefetch
	lastSel int
	reps    *repStore // CentroidsOnFlash
}

type poolSide struct {
	p    *pool
	side int
}

// System is DynaKV over one sequence: an engine.AttentionHook for a
// session opened with an in-place KV cache (the hook receives the prompt
// in one run, then one token per run).
type System struct {
	cfg    Config
	layers []*layerState
	fstats *flash.Stats
	rd     *flash.Pool
	cache  clusterCache
	step   int
	nextID int
	rng    *rand.Rand
	st     Stats
}

// New returns a system for a model with the given layers, query heads, KV
// heads and head size; its files go in cfg.Dir.
func New(cfg Config, layers, heads, kvHeads, dim int) (*System, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if layers <= 0 || kvHeads <= 0 || heads%kvHeads != 0 || dim <= 0 {
		return nil, fmt.Errorf("dynakv: %d layers, %d heads, %d KV heads of %d: not a GQA model", layers, heads, kvHeads, dim)
	}
	s := &System{cfg: cfg, fstats: flash.NewStats(), rng: rand.New(rand.NewSource(cfg.Seed + 1))}
	if s.rd, err = flash.NewPool(max(cfg.QueueDepth, 4)); err != nil {
		return nil, err
	}
	entry := 2 * dim * 4
	switch {
	case cfg.CacheBytes == 0:
		s.cache = noCache{}
	case cfg.CachePolicy == "lru":
		s.cache = newLRUCache(cfg.CacheBytes, entry)
	default:
		s.cache = newGDSCache(cfg.CacheBytes, cfg.ReservedFrac, cfg.RecentSteps, entry)
	}
	for l := 0; l < layers; l++ {
		st, err := newStore(filepath.Join(cfg.Dir, fmt.Sprintf("dynakv-layer%02d.pool", l)), dim, cfg.SMax, s.fstats)
		if err != nil {
			s.Close()
			return nil, err
		}
		ls := &layerState{idx: l, heads: heads, kvh: kvHeads, dim: dim, store: st, hot: map[*cluster]bool{}}
		if cfg.CentroidsOnFlash {
			if ls.reps, err = newRepStore(cfg.Dir, l, dim, s.fstats); err != nil {
				st.close()
				s.Close()
				return nil, err
			}
		}
		for h := 0; h < kvHeads; h++ {
			ls.hs = append(ls.hs, &headState{})
		}
		s.layers = append(s.layers, ls)
	}
	s.st.init(cfg)
	return s, nil
}

// Close releases the reader pool and removes the pool files.
func (s *System) Close() error {
	for _, l := range s.layers {
		s.endPrefetch(l)
		if l.reps != nil && l.reps.batch != nil {
			l.reps.batch.Wait()
		}
	}
	if s.rd != nil {
		s.rd.Close()
	}
	var first error
	for _, l := range s.layers {
		if err := l.store.close(); err != nil && first == nil {
			first = err
		}
		if l.reps != nil {
			err := l.reps.f.Close()
			if rerr := os.Remove(l.reps.f.Path()); err == nil {
				err = rerr
			}
			if err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// FlashStats is the statistics of every read and write of the pool files.
func (s *System) FlashStats() *flash.Stats { return s.fstats }

// Hook is the engine hook: a multi-row call is the prompt (clustered,
// laid out, fused attention kept), a one-row call a decoding step
// (retrieval attention replaces the fused one).
func (s *System) Hook() engine.AttentionHook {
	return func(c *engine.AttentionCall) error {
		if err := checkCall(c, len(s.layers), func(i int) (int, int, int) {
			l := s.layers[i]
			return l.heads, l.kvh, l.dim
		}); err != nil {
			return err
		}
		pos, err := positionsOf(c)
		if err != nil {
			return err
		}
		if !s.layers[c.Layer].prefilled {
			return s.Prefill(c.Layer, pos, c.Q, c.KNew, c.VNew)
		}
		if err := decodeRow(c); err != nil {
			return err
		}
		out, err := s.Step(c.Layer, pos[0], c.Q, c.KNew, c.VNew, c.Scale)
		if err != nil {
			return err
		}
		c.Out = out
		return nil
	}
}

// Prefill clusters the prompt's keys of layer (positions, queries
// [n][heads][dim], keys and values [n][kvh][dim]), sets the heads'
// thresholds, counts co-retrieval from the prompt's queries and writes
// the pools.
func (s *System) Prefill(layer int, positions []int, q, k, v []float32) error {
	l := s.layers[layer]
	if l.prefilled {
		return fmt.Errorf("dynakv: layer %d already holds a prompt", layer)
	}
	n, D, G := len(positions), l.dim, l.heads/l.kvh
	if len(q) != n*l.heads*D || len(k) != n*l.kvh*D || len(v) != len(k) {
		return fmt.Errorf("dynakv: prefill of %d rows with %d/%d/%d floats", n, len(q), len(k), len(v))
	}
	var chain []*cluster
	for h, hs := range l.hs {
		keys := make([][]float32, n)
		kvs := make([][]float32, n)
		for i := 0; i < n; i++ {
			keys[i] = k[(i*l.kvh+h)*D : (i*l.kvh+h+1)*D]
			kv := make([]float32, 2*D)
			copy(kv, keys[i])
			copy(kv[D:], v[(i*l.kvh+h)*D:(i*l.kvh+h+1)*D])
			kvs[i] = kv
			if s.cfg.Shadow {
				hs.shadow = append(hs.shadow, kv[:D])
			}
		}
		m0 := (n + s.cfg.InitDiv - 1) / s.cfg.InitDiv
		labels := kmeans(keys, m0, s.cfg.KMeansIters, s.rng)
		groups := map[int][]int{}
		for i, lb := range labels {
			groups[lb] = append(groups[lb], i)
		}
		var vars []float64
		var made []*cluster
		for g := 0; g < len(groups); g++ {
			idx := groups[g]
			var pos []int
			var data [][]float32
			for _, i := range idx {
				pos = append(pos, positions[i])
				data = append(data, kvs[i])
			}
			w := statsOf(keysOf(data, D))
			vars = append(vars, w.variance())
			hs.p0 = append(hs.p0, w.mean)
			made = append(made, s.carve(pos, data, D)...)
		}
		sort.Float64s(vars)
		hs.tau = s.cfg.Lambda * vars[int(0.9*float64(len(vars)-1)+0.5)]
		hs.clusters = made
		hs.total = n
		s.st.initialClusters += len(made)
		chain = append(chain, s.arrange(l, hs, made, q, n, h, G)...)
	}
	// Write the pools in chain order.
	for i := 0; i < len(chain); i += 2 {
		p := l.store.newPool()
		for side := 0; side < 2; side++ {
			if i+side >= len(chain) || chain[i+side] == nil {
				l.free = append(l.free, poolSide{p, side})
				continue
			}
			if err := s.place(l, chain[i+side], poolSide{p, side}, chain[i+side].tail, false); err != nil {
				return err
			}
		}
	}
	if l.reps != nil {
		w, err := l.reps.flush()
		if err != nil {
			return err
		}
		s.st.prefillWritten += w
	}
	s.st.prefillWritten += l.store.written
	l.store.written = 0
	l.prefilled = true
	return nil
}

// carve makes clusters of at most S_max entries from one group (2-means
// halving when it is larger). Their entries are in tail until placed.
func (s *System) carve(pos []int, data [][]float32, D int) []*cluster {
	if len(pos) > s.cfg.SMax {
		labels := split2(keysOf(data, D), s.cfg.SplitIters)
		var p [2][]int
		var d [2][][]float32
		for i, lb := range labels {
			p[lb] = append(p[lb], pos[i])
			d[lb] = append(d[lb], data[i])
		}
		return append(s.carve(p[0], d[0], D), s.carve(p[1], d[1], D)...)
	}
	c := &cluster{id: s.nextID, w: statsOf(keysOf(data, D)), members: pos, tail: data, updated: s.step}
	s.nextID++
	return []*cluster{c}
}

// arrange pairs a head's clusters by co-retrieval over the prompt's
// queries (greedy max-weight pairing) and chains the pairs (greedy, each
// pool's second cluster next to the most correlated first cluster of the
// next pool). It returns the clusters in file order, two per pool, nil
// for an empty side.
func (s *System) arrange(l *layerState, hs *headState, cs []*cluster, q []float32, n, h, G int) []*cluster {
	if s.cfg.NoPairing {
		out := append([]*cluster(nil), cs...)
		if len(out)%2 == 1 {
			out = append(out, nil)
		}
		return out
	}
	M := len(cs)
	f := make([][]float64, M)
	for i := range f {
		f[i] = make([]float64, M)
	}
	D := l.dim
	qbar := make([]float32, D)
	for i := 0; i < n; i++ {
		groupMean(qbar, q[(i*l.heads+h*G)*D:(i*l.heads+(h+1)*G)*D], G, D)
		sel := s.selectClusters(cs, qbar, n, nil)
		for a := 0; a < len(sel); a++ {
			for b := a + 1; b < len(sel); b++ {
				f[sel[a]][sel[b]]++
				f[sel[b]][sel[a]]++
			}
		}
	}
	type pair struct {
		a, b int
		w    float64
	}
	var pairs []pair
	for a := 0; a < M; a++ {
		for b := a + 1; b < M; b++ {
			if f[a][b] > 0 {
				pairs = append(pairs, pair{a, b, f[a][b]})
			}
		}
	}
	sort.SliceStable(pairs, func(i, j int) bool { return pairs[i].w > pairs[j].w })
	used := make([]bool, M)
	var pools [][2]int
	for _, p := range pairs {
		if !used[p.a] && !used[p.b] {
			used[p.a], used[p.b] = true, true
			pools = append(pools, [2]int{p.a, p.b})
		}
	}
	for a := 0; a < M; a++ {
		if !used[a] {
			pools = append(pools, [2]int{a, -1})
		}
	}
	// Chain: start with the first (heaviest) pool; next, the pool whose
	// side is most correlated with the current pool's second cluster,
	// oriented so that side comes first.
	var out []*cluster
	placed := make([]bool, len(pools))
	cur := 0
	for range pools {
		placed[cur] = true
		pp := pools[cur]
		for _, c := range pp {
			if c < 0 {
				out = append(out, nil)
			} else {
				out = append(out, cs[c])
			}
		}
		last := pp[1]
		if last < 0 {
			last = pp[0]
		}
		best, bw, flip := -1, -1.0, false
		for j, cand := range pools {
			if placed[j] {
				continue
			}
			for side := 0; side < 2; side++ {
				if cand[side] < 0 {
					continue
				}
				if w := f[last][cand[side]]; w > bw {
					best, bw, flip = j, w, side == 1
				}
			}
		}
		if best < 0 {
			break
		}
		if flip && pools[best][1] >= 0 {
			pools[best][0], pools[best][1] = pools[best][1], pools[best][0]
		}
		cur = best
	}
	return out
}

// place puts c (entries in c.tail, flushed 0) on a pool side and writes
// it: whole pages, and the last partial page too unless hot.
func (s *System) place(l *layerState, c *cluster, ps poolSide, kv [][]float32, hot bool) error {
	c.pool, c.side = ps.p, ps.side
	ps.p.owner[ps.side] = c
	if l.reps != nil {
		l.reps.assign(c)
	}
	n := len(c.members)
	per := l.store.perPage
	full := n - n%per
	if err := l.store.writePages(ps.p, ps.side, 0, kv, 0, full); err != nil {
		return err
	}
	c.flushed = full
	c.tail = append([][]float32(nil), kv[full:]...)
	if !hot && full < n {
		if err := l.store.writePages(ps.p, ps.side, full, c.tail, full, n); err != nil {
			return err
		}
		c.flushed = n
	}
	if hot {
		l.hot[c] = true
	}
	ps.p.used[ps.side] = c.flushed
	return nil
}

// tailBase is the first member of c's last, incomplete page.
func (l *layerState) tailBase(c *cluster) int {
	n := len(c.members)
	return n - n%l.store.perPage
}

// freeSide returns a pool side for a new cluster: an empty partner slot,
// else a new pool.
func (l *layerState) freeSide() poolSide {
	if k := len(l.free); k > 0 {
		ps := l.free[k-1]
		l.free = l.free[:k-1]
		return ps
	}
	p := l.store.newPool()
	l.free = append(l.free, poolSide{p, 1})
	return poolSide{p, 0}
}

func keysOf(data [][]float32, D int) [][]float32 {
	out := make([][]float32, len(data))
	for i, kv := range data {
		out[i] = kv[:D]
	}
	return out
}

// groupMean writes the mean of G query heads (q: [G][D]) into dst.
func groupMean(dst, q []float32, G, D int) {
	for d := 0; d < D; d++ {
		var s float32
		for g := 0; g < G; g++ {
			s += q[g*D+d]
		}
		dst[d] = s / float32(G)
	}
}

// selectClusters takes clusters by descending score q̄·r_j until their
// entries reach the budget of total; it returns their indices.
func (s *System) selectClusters(cs []*cluster, qbar []float32, total int, reps []float32) []int {
	type sc struct {
		i int
		v float64
	}
	scores := make([]sc, len(cs))
	for i, c := range cs {
		var dot float64
		if reps != nil {
			r := reps[(c.repSlot-1)*len(qbar) : c.repSlot*len(qbar)]
			for d, x := range qbar {
				dot += float64(x) * float64(r[d])
			}
		} else {
			for d, x := range qbar {
				dot += float64(x) * c.w.mean[d]
			}
		}
		scores[i] = sc{i, dot}
	}
	sort.Slice(scores, func(a, b int) bool { return scores[a].v > scores[b].v })
	need := int(math.Ceil(s.cfg.Budget * float64(total)))
	var out []int
	got := 0
	for _, x := range scores {
		if got >= need && len(out) > 0 {
			break
		}
		out = append(out, x.i)
		got += cs[x.i].size()
	}
	return out
}

// Step runs one decoding step at layer: retrieval, the reads, attention
// over the retrieved entries and the new one, then Alg. 1's updates. q is
// [heads][dim], k and v [kvh][dim]; it returns the attention output
// [heads][dim].
func (s *System) Step(layer, pos int, q, k, v []float32, scale float32) ([]float32, error) {
	l := s.layers[layer]
	if !l.prefilled {
		return nil, fmt.Errorf("dynakv: step at layer %d before its prompt", layer)
	}
	D, G := l.dim, l.heads/l.kvh
	if len(q) != l.heads*D || len(k) != l.kvh*D || len(v) != len(k) {
		return nil, fmt.Errorf("dynakv: step with %d/%d/%d floats", len(q), len(k), len(v))
	}
	if layer == 0 {
		s.step++
		s.st.steps++
	}
	// 0. The representatives: from DRAM, or (Pipeline 1) the array read
	// ahead from flash.
	var reps []float32
	if l.reps != nil {
		var wait time.Duration
		var err error
		if reps, wait, err = s.repsFor(l); err != nil {
			return nil, err
		}
		s.st.tRepsWait += wait
		s.st.tIO += wait
		if s.cfg.Debug {
			if err := checkReps(l, reps); err != nil {
				return nil, err
			}
		}
	}
	t0 := time.Now()
	// 1–2. Score the representatives and select clusters per head.
	sel := make([][]*cluster, l.kvh)
	qbars := make([][]float32, l.kvh)
	for h, hs := range l.hs {
		qbar := make([]float32, D)
		qbars[h] = qbar
		groupMean(qbar, q[h*G*D:(h+1)*G*D], G, D)
		for r, i := range s.selectClusters(hs.clusters, qbar, hs.total, reps) {
			c := hs.clusters[i]
			c.selAt, c.selRank = s.step, r
			sel[h] = append(sel[h], c)
		}
		s.st.seqOrder(l, hs, sel[h])
	}
	l.lastSel = s.step
	t1 := time.Now()
	wait, err := s.joinPrefetch(l)
	if err != nil {
		return nil, err
	}
	s.st.tPfWait += wait
	// 3. Read what the cache does not hold, in one batch.
	var all []*cluster
	for _, cs := range sel {
		all = append(all, cs...)
	}
	data, err := s.load(l, all)
	if err != nil {
		return nil, err
	}
	t2 := time.Now()
	// 5. Attention over the retrieved entries, their buffers and k_new.
	out := make([]float32, l.heads*D)
	for h, hs := range l.hs {
		var kv [][]float32
		var att []int
		seen := map[*cluster]bool{}
		for _, c := range sel[h] {
			seen[c] = true
			kv = append(kv, data[c]...)
			kv = append(kv, c.bufKV...)
			if s.cfg.Debug {
				att = append(att, c.members...)
				att = append(att, c.buf...)
			}
		}
		if s.cfg.AttendAllBuffers {
			for _, c := range hs.clusters {
				if !seen[c] {
					kv = append(kv, c.bufKV...)
				}
			}
		}
		nRet := len(kv)
		if len(hs.recent) > 0 {
			got := map[int]bool{}
			for _, c := range sel[h] {
				for _, p := range c.members {
					got[p] = true
				}
				for _, p := range c.buf {
					got[p] = true
				}
			}
			if s.cfg.AttendAllBuffers {
				for _, c := range hs.clusters {
					for _, p := range c.buf {
						got[p] = true
					}
				}
			}
			for i, p := range hs.recentPos {
				if !got[p] {
					kv = append(kv, hs.recent[i])
					s.st.recentExtra++
				}
			}
		}
		newKV := make([]float32, 2*D)
		copy(newKV, k[h*D:(h+1)*D])
		copy(newKV[D:], v[h*D:(h+1)*D])
		kv = append(kv, newKV)
		keys := make([]float32, 0, len(kv)*D)
		vals := make([]float32, 0, len(kv)*D)
		for _, e := range kv {
			keys = append(keys, e[:D]...)
			vals = append(vals, e[D:]...)
		}
		lse := make([]float64, G)
		lo, hi := h*G*D, (h+1)*G*D
		if err := hostattn.Group(out[lo:hi], q[lo:hi], D, keys, vals, scale, lse); err != nil {
			return nil, err
		}
		s.st.retrieved += int64(nRet)
		s.st.entriesTotal += int64(hs.total)
		if s.cfg.Shadow {
			hs.shadow = append(hs.shadow, newKV[:D])
			all := make([]float32, 0, len(hs.shadow)*D)
			for _, e := range hs.shadow {
				all = append(all, e...)
			}
			sc := make([]float32, len(hs.shadow))
			for g := 0; g < G; g++ {
				hostattn.Scores(sc, q[lo+g*D:lo+(g+1)*D], all, scale)
				mx := math.Inf(-1)
				for _, x := range sc {
					mx = math.Max(mx, float64(x))
				}
				var sum float64
				for _, x := range sc {
					sum += math.Exp(float64(x) - mx)
				}
				s.st.recallSum += math.Exp(lse[g] - (mx + math.Log(sum)))
				s.st.recallN++
			}
		}
		if s.cfg.Debug {
			hs.attended, hs.selected = att, nil
			for _, c := range sel[h] {
				hs.selected = append(hs.selected, c.members...)
				hs.selected = append(hs.selected, c.buf...)
			}
		}
		s.st.drift(s.step, hs.p0, k[h*D:(h+1)*D])
	}
	t3 := time.Now()
	// 4. Alg. 1's updates (after attention, so the new entry is attended
	// exactly once).
	for h, hs := range l.hs {
		resident := map[*cluster]bool{}
		for _, c := range sel[h] {
			resident[c] = true
		}
		newKV := make([]float32, 2*D)
		copy(newKV, k[h*D:(h+1)*D])
		copy(newKV[D:], v[h*D:(h+1)*D])
		if err := s.update(l, hs, pos, newKV, resident, data); err != nil {
			return nil, err
		}
		if s.cfg.Recent > 0 {
			hs.recent = append(hs.recent, newKV)
			hs.recentPos = append(hs.recentPos, pos)
			if k := len(hs.recent) - s.cfg.Recent; k > 0 {
				hs.recent, hs.recentPos = hs.recent[k:], hs.recentPos[k:]
			}
		}
	}
	if err := s.coolDown(l); err != nil {
		return nil, err
	}
	s.endPrefetch(l)
	if l.reps != nil {
		s.dropReps(l)
		w, err := l.reps.flush()
		if err != nil {
			return nil, err
		}
		s.st.repsWritten += w
		if next := s.layers[(layer+1)%len(s.layers)]; next.prefilled {
			s.startRepsRead(next)
		}
	}
	s.startPrefetch((layer+1)%len(s.layers), qbars)
	t4 := time.Now()
	s.st.tScore += t1.Sub(t0)
	s.st.tIO += t2.Sub(t1)
	s.st.tAttn += t3.Sub(t2)
	s.st.tUpdate += t4.Sub(t3)
	return out, nil
}

// load returns the members' entries (flash part from the cache or the
// pool file, then the page buffer) of each cluster, issuing the reads of
// every cache miss as one batch, runs of adjacent extents coalesced.
func (s *System) load(l *layerState, cs []*cluster) (map[*cluster][][]float32, error) {
	out := make(map[*cluster][][]float32, len(cs))
	var wants []*readWant
	for _, c := range cs {
		if _, dup := out[c]; dup {
			continue
		}
		out[c] = nil
		if kv, ok := s.takePrefetched(l, c); ok {
			s.cache.put(c, kv, s.step)
			out[c] = append(make([][]float32, 0, c.flushed), kv...)
			continue
		}
		cached := s.cache.get(c, s.step)
		if len(cached) > c.flushed {
			cached = cached[:c.flushed]
		}
		if c.flushed == 0 || len(cached) == c.flushed {
			if c.flushed > 0 {
				s.st.hits++
			}
			// Kept now: the batch's own insertions may evict it.
			out[c] = append(make([][]float32, 0, c.flushed), cached...)
			continue
		}
		if len(cached) > 0 {
			s.st.partialHits++
		} else {
			s.st.misses++
		}
		w := l.want(c, cached)
		wants = append(wants, w)
		s.st.usefulRead += w.hi - w.lo
	}
	runs, reqs := l.plan(wants)
	for _, r := range runs {
		s.st.plannedRead += r.hi - r.lo
	}
	if len(reqs) > 0 {
		if err := s.rd.Read(reqs); err != nil {
			return nil, err
		}
	}
	l.scatter(runs, reqs, func(c *cluster, full [][]float32) {
		s.cache.put(c, full, s.step)
		out[c] = full
	})
	for c := range out {
		if len(out[c]) != c.flushed {
			return nil, fmt.Errorf("dynakv: cluster %d: %d of its %d flushed entries loaded", c.id, len(out[c]), c.flushed)
		}
		// Merge the page buffer.
		base := l.tailBase(c)
		out[c] = append(out[c][:c.flushed:c.flushed], c.tail[c.flushed-base:]...)
	}
	return out, nil
}

// update applies Alg. 1 to the new entry of one head.
func (s *System) update(l *layerState, hs *headState, pos int, kv []float32, resident map[*cluster]bool, data map[*cluster][][]float32) error {
	D := l.dim
	key := kv[:D]
	best, bd := -1, math.Inf(1)
	for i, c := range hs.clusters {
		if d := dist2(key, c.w.mean); d < bd {
			best, bd = i, d
		}
	}
	c := hs.clusters[best]
	tent := c.w.add(key)
	hs.total++
	switch {
	case tent.variance() <= hs.tau && len(c.members) < s.cfg.SMax:
		if err := s.appendEntry(l, c, pos, kv); err != nil {
			return err
		}
		s.st.packedAppend(hs, best, l.store.entry)
		if resident[c] {
			data[c] = append(data[c], kv)
		}
	case resident[c]:
		if tent.variance() > hs.tau {
			s.st.splitsVariance++
		} else {
			s.st.splitsForced++
		}
		if err := s.split(l, hs, c, data[c], pos, kv); err != nil {
			return err
		}
	case len(c.members) >= s.cfg.SMax && tent.variance() <= hs.tau, s.cfg.NoDelay:
		// Full but not resident: load it and split (forced).
		d, err := s.load(l, []*cluster{c})
		if err != nil {
			return err
		}
		if tent.variance() > hs.tau {
			s.st.splitsVariance++
		} else {
			s.st.splitsForced++
		}
		if err := s.split(l, hs, c, d[c], pos, kv); err != nil {
			return err
		}
	default:
		c.buf = append(c.buf, pos)
		c.bufKV = append(c.bufKV, kv)
		c.flag = true
		s.st.buffered++
	}
	// Delayed splits of flagged clusters resident this step.
	for _, r := range append([]*cluster(nil), hs.clusters...) {
		if r.flag && resident[r] && data[r] != nil {
			s.st.splitsDelayed++
			if err := s.split(l, hs, r, data[r], -1, nil); err != nil {
				return err
			}
		}
	}
	// The buffer cap: load and split the largest buffer.
	total, big := 0, (*cluster)(nil)
	for _, r := range hs.clusters {
		total += len(r.buf)
		if len(r.buf) > 0 && (big == nil || len(r.buf) > len(big.buf)) {
			big = r
		}
	}
	if total >= s.cfg.BMax && big != nil {
		d, err := s.load(l, []*cluster{big})
		if err != nil {
			return err
		}
		s.st.splitsBMax++
		if err := s.split(l, hs, big, d[big], -1, nil); err != nil {
			return err
		}
	}
	return nil
}

// appendEntry appends kv to c through its page buffer.
func (s *System) appendEntry(l *layerState, c *cluster, pos int, kv []float32) error {
	st := l.store
	hot := l.hot[c] || (s.step-c.updated < s.cfg.HotSteps && len(l.hot) < s.cfg.MaxHot)
	base := l.tailBase(c)
	c.members = append(c.members, pos)
	c.w = c.w.add(kv[:l.dim])
	c.tail = append(c.tail, kv)
	c.updated = s.step
	if l.reps != nil {
		l.reps.assign(c)
	}
	n := len(c.members)
	s.st.appended += int64(st.entry)
	if n%st.perPage == 0 || !hot {
		if err := st.writePages(c.pool, c.side, base, c.tail, base, n); err != nil {
			return err
		}
		c.flushed = n
		if n%st.perPage == 0 {
			c.tail = nil
		}
	}
	if hot {
		l.hot[c] = true
	}
	c.pool.used[c.side] = c.flushed
	return nil
}

// coolDown flushes the page buffers of clusters not updated for HotSteps.
func (s *System) coolDown(l *layerState) error {
	for c := range l.hot {
		if s.step-c.updated < s.cfg.HotSteps {
			continue
		}
		delete(l.hot, c)
		if c.flushed < len(c.members) {
			base := l.tailBase(c)
			if err := l.store.writePages(c.pool, c.side, base, c.tail, base, len(c.members)); err != nil {
				return err
			}
			c.flushed = len(c.members)
			c.pool.used[c.side] = c.flushed
		}
	}
	return nil
}

// split divides c ∪ Buf_c (∪ the new entry when kv is not nil) in two
// (more when a half exceeds S_max): the first child keeps c's pool side,
// rewritten in place; the others take free sides.
func (s *System) split(l *layerState, hs *headState, c *cluster, members [][]float32, pos int, kv []float32) error {
	D := l.dim
	if len(members) != len(c.members) {
		return fmt.Errorf("dynakv: splitting cluster %d with %d of its %d entries", c.id, len(members), len(c.members))
	}
	posAll := append(append([]int(nil), c.members...), c.buf...)
	kvAll := append(append([][]float32(nil), members...), c.bufKV...)
	if kv != nil {
		posAll = append(posAll, pos)
		kvAll = append(kvAll, kv)
	}
	labels := split2(keysOf(kvAll, D), s.cfg.SplitIters)
	var p [2][]int
	var d [2][][]float32
	for i, lb := range labels {
		p[lb] = append(p[lb], posAll[i])
		d[lb] = append(d[lb], kvAll[i])
	}
	kids := append(s.carve(p[0], d[0], D), s.carve(p[1], d[1], D)...)
	s.st.packedSplit(hs, c, len(posAll), l.store.entry)
	w0 := l.store.written
	defer func() { s.st.dualSplit(l.store.written-w0, kids, l.store.entry) }()
	s.cache.drop(c)
	delete(l.hot, c)
	c.pool.owner[c.side] = nil
	if l.reps != nil {
		// The first child takes the parent's slot.
		kids[0].repSlot = c.repSlot
		c.repSlot = 0
	}
	home := poolSide{c.pool, c.side}
	for i, kid := range kids {
		ps := home
		if i > 0 {
			ps = l.freeSide()
		}
		kid.updated = s.step
		kid.selAt, kid.selRank = c.selAt, c.selRank
		hot := len(l.hot) < s.cfg.MaxHot
		entries := kid.tail
		if err := s.place(l, kid, ps, entries, hot); err != nil {
			return err
		}
		s.cache.put(kid, entries[:kid.flushed], s.step)
	}
	// Replace c by its children in the head's list.
	for i, x := range hs.clusters {
		if x == c {
			hs.clusters = append(append(hs.clusters[:i:i], kids...), hs.clusters[i+1:]...)
			break
		}
	}
	return nil
}

// checkCall refuses a hook call for a layer the store does not have, or
// whose head counts differ from those the store was made for (shape
// gives layer i's query heads, KV heads and head size).
func checkCall(c *engine.AttentionCall, layers int, shape func(i int) (heads, kvh, dim int)) error {
	if c.Layer < 0 || c.Layer >= layers {
		return fmt.Errorf("dynakv: layer %d of %d", c.Layer, layers)
	}
	heads, kvh, dim := shape(c.Layer)
	if c.KVHeads != kvh || c.HeadDim != dim || c.Heads != heads {
		return fmt.Errorf("dynakv: layer %d has %d heads / %d KV heads of %d; the store was made for %d / %d of %d", c.Layer, c.Heads, c.KVHeads, c.HeadDim, heads, kvh, dim)
	}
	return nil
}

// positionsOf returns the positions of the call's rows: Positions, or
// the slots for a call built without them (the engine sets them, to the
// slots when the model has no position ids).
func positionsOf(c *engine.AttentionCall) ([]int, error) {
	pos := c.Positions
	if pos == nil {
		pos = c.Slots
	}
	if len(pos) != c.Rows {
		return nil, fmt.Errorf("dynakv: layer %d: %d positions for %d rows", c.Layer, len(pos), c.Rows)
	}
	return pos, nil
}

// decodeRow refuses a call after the prompt that is not one token: the
// prompt is clustered once, and decoding goes one token at a time.
func decodeRow(c *engine.AttentionCall) error {
	if c.Rows != 1 {
		return fmt.Errorf("dynakv: a run of %d tokens after the prompt; decoding goes one token at a time", c.Rows)
	}
	return nil
}
