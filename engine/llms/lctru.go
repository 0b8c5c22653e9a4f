package llms

import "container/list"

// ChunkKey names one chunk of one context.
type ChunkKey struct {
	Ctx   string
	Index int
}

// LCTRU is the paper's least-compression-tolerable-recently-used queue
// (§3.4 ii): a concatenation of sub-queues, one per level. Eviction pops
// from the heaviest (least compressed) non-empty sub-queue first, and
// within a sub-queue the least recently used chunk first. Chunks of locked
// contexts (the working set of a call in flight, §3.4) are never popped.
// It is not safe for concurrent use.
type LCTRU struct {
	queues map[Level]*list.List
	where  map[ChunkKey]*list.Element
	level  map[ChunkKey]Level
	locked map[string]bool
	// lru makes every level one queue (the "no lifecycle" ablation and the
	// VLLM baselines' plain LRU).
	lru bool
}

// NewLCTRU returns an empty queue; plainLRU ignores levels.
func NewLCTRU(plainLRU bool) *LCTRU {
	return &LCTRU{queues: map[Level]*list.List{}, where: map[ChunkKey]*list.Element{}, level: map[ChunkKey]Level{}, locked: map[string]bool{}, lru: plainLRU}
}

// heavyFirst is the order sub-queues are popped in.
var heavyFirst = []Level{LevelFP, Level8, Level4, Level2}

func (q *LCTRU) sub(l Level) *list.List {
	if q.lru {
		l = LevelFP
	}
	s := q.queues[l]
	if s == nil {
		s = list.New()
		q.queues[l] = s
	}
	return s
}

// Touch puts k, at level l, at the most-recently-used end of its level's
// sub-queue (inserting it, or moving it when its level changed).
func (q *LCTRU) Touch(k ChunkKey, l Level) {
	q.Remove(k)
	q.where[k] = q.sub(l).PushBack(k)
	q.level[k] = l
}

// Remove takes k out of the queue (no-op when absent).
func (q *LCTRU) Remove(k ChunkKey) {
	if e, ok := q.where[k]; ok {
		q.sub(q.level[k]).Remove(e)
		delete(q.where, k)
		delete(q.level, k)
	}
}

// Len is the number of queued chunks.
func (q *LCTRU) Len() int { return len(q.where) }

// Lock protects ctx's chunks from Pop until Unlock.
func (q *LCTRU) Lock(ctx string) { q.locked[ctx] = true }

// Unlock releases ctx's chunks.
func (q *LCTRU) Unlock(ctx string) { delete(q.locked, ctx) }

// Pop removes and returns the next victim, ok false when every queued
// chunk is locked or the queue is empty.
func (q *LCTRU) Pop() (ChunkKey, bool) {
	order := heavyFirst
	if q.lru {
		order = heavyFirst[:1]
	}
	for _, l := range order {
		s := q.queues[l]
		if s == nil {
			continue
		}
		for e := s.Front(); e != nil; e = e.Next() {
			k := e.Value.(ChunkKey)
			if q.locked[k.Ctx] {
				continue
			}
			q.Remove(k)
			return k, true
		}
	}
	return ChunkKey{}, false
}
