package dynakv

import "container/list"

// clusterCache holds clusters' on-flash entries in DRAM (§6.2). A cached
// copy covers the cluster's first n flushed entries; entries flushed since
// are read as a delta. Sizes are in bytes, one budget for every policy
// (§2d.9).
type clusterCache interface {
	// get returns the cached entries of c, nil when absent, and counts the
	// access for the policy.
	get(c *cluster, step int) [][]float32
	// put caches c's flushed entries kv (replacing any copy) unless the
	// policy has no room; recent says c was updated in the last T_u steps.
	put(c *cluster, kv [][]float32, step int)
	// peek returns the cached entries of c without counting an access.
	peek(c *cluster) [][]float32
	// drop forgets c (after a split).
	drop(c *cluster)
	// bytes is the DRAM the cache holds.
	bytes() int64
}

type cacheItem struct {
	c      *cluster
	kv     [][]float32
	size   int64
	h      float64 // GreedyDual-Size priority
	hits   int
	recent bool // in the reserved region
	elem   *list.Element
	seq    uint64 // insertion order: GreedyDual-Size's tie-break
}

// gdsCache is the policy of §6.2 with our parameters: a reserved fraction
// of the bytes for clusters updated in the last T_u steps (FIFO, principle
// 2), and GreedyDual-Size over the rest, H = L + hits/size, which favours
// small clusters (principle 1).
type gdsCache struct {
	budget, reserved int64
	tu               int
	entry            int64
	items            map[*cluster]*cacheItem
	fifo             *list.List // reserved region, oldest first
	resBytes         int64
	gdsBytes         int64
	clock            float64
	seq              uint64 // items put so far
}

func newGDSCache(budget int64, reservedFrac float64, tu, entry int) *gdsCache {
	return &gdsCache{budget: budget, reserved: int64(float64(budget) * reservedFrac), tu: tu, entry: int64(entry),
		items: map[*cluster]*cacheItem{}, fifo: list.New()}
}

func (g *gdsCache) bytes() int64 { return g.resBytes + g.gdsBytes }

func (g *gdsCache) get(c *cluster, step int) [][]float32 {
	it := g.items[c]
	if it == nil {
		return nil
	}
	it.hits++
	if !it.recent {
		it.h = g.clock + float64(it.hits)/float64(it.size)
	}
	return it.kv
}

func (g *gdsCache) peek(c *cluster) [][]float32 {
	if it := g.items[c]; it != nil {
		return it.kv
	}
	return nil
}

func (g *gdsCache) drop(c *cluster) {
	it := g.items[c]
	if it == nil {
		return
	}
	delete(g.items, c)
	if it.recent {
		g.fifo.Remove(it.elem)
		g.resBytes -= it.size
	} else {
		g.gdsBytes -= it.size
	}
}

func (g *gdsCache) put(c *cluster, kv [][]float32, step int) {
	hits := 0
	if old := g.items[c]; old != nil {
		hits = old.hits
		g.drop(c)
	}
	size := int64(len(kv)) * g.entry
	if size == 0 || size > g.budget {
		return
	}
	g.seq++
	it := &cacheItem{c: c, kv: kv, size: size, hits: max(hits, 1), seq: g.seq}
	if step-c.updated < g.tu && size <= g.reserved {
		it.recent = true
		it.elem = g.fifo.PushBack(it)
		g.items[c] = it
		g.resBytes += size
		// The reserved region keeps the most recently updated clusters;
		// the oldest move to the general region.
		for g.resBytes > g.reserved {
			old := g.fifo.Remove(g.fifo.Front()).(*cacheItem)
			g.resBytes -= old.size
			old.recent = false
			old.h = g.clock + float64(old.hits)/float64(old.size)
			g.gdsBytes += old.size
		}
	} else {
		it.h = g.clock + float64(it.hits)/float64(size)
		g.items[c] = it
		g.gdsBytes += size
	}
	g.evict(it)
}

// evict removes the general region's lowest-priority items until the
// cache fits its budget, never evicting keep unless nothing else is left.
// Equal priorities are common (equal sizes and hits at the same clock), so
// ties go to the item put first: without a tie-break the victim would
// follow Go's randomised map order and runs would not be repeatable.
func (g *gdsCache) evict(keep *cacheItem) {
	for g.bytes() > g.budget {
		var victim *cacheItem
		for _, it := range g.items {
			if it.recent || it == keep && len(g.items) > 1 {
				continue
			}
			if victim == nil || it.h < victim.h || it.h == victim.h && it.seq < victim.seq {
				victim = it
			}
		}
		if victim == nil {
			victim = keep
		}
		g.clock = victim.h
		g.drop(victim.c)
	}
}

// lruCache is the comparison policy: least recently used, same budget.
type lruCache struct {
	budget, used, entry int64
	items               map[*cluster]*cacheItem
	order               *list.List // least recent first
}

func newLRUCache(budget int64, entry int) *lruCache {
	return &lruCache{budget: budget, entry: int64(entry), items: map[*cluster]*cacheItem{}, order: list.New()}
}

func (l *lruCache) bytes() int64 { return l.used }

func (l *lruCache) get(c *cluster, step int) [][]float32 {
	it := l.items[c]
	if it == nil {
		return nil
	}
	l.order.MoveToBack(it.elem)
	return it.kv
}

func (l *lruCache) peek(c *cluster) [][]float32 {
	if it := l.items[c]; it != nil {
		return it.kv
	}
	return nil
}

func (l *lruCache) drop(c *cluster) {
	if it := l.items[c]; it != nil {
		l.order.Remove(it.elem)
		l.used -= it.size
		delete(l.items, c)
	}
}

func (l *lruCache) put(c *cluster, kv [][]float32, step int) {
	l.drop(c)
	size := int64(len(kv)) * l.entry
	if size == 0 || size > l.budget {
		return
	}
	it := &cacheItem{c: c, kv: kv, size: size}
	it.elem = l.order.PushBack(it)
	l.items[c] = it
	l.used += size
	for l.used > l.budget {
		l.drop(l.order.Front().Value.(*cacheItem).c)
	}
}

// noCache caches nothing.
type noCache struct{}

func (noCache) get(*cluster, int) [][]float32  { return nil }
func (noCache) put(*cluster, [][]float32, int) {}
func (noCache) drop(*cluster)                  {}
func (noCache) peek(*cluster) [][]float32      { return nil }
func (noCache) bytes() int64                   { return 0 }
