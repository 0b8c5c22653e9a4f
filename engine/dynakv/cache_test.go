package dynakv

import "testing"

// TestGDSCacheTieBreak checks that GreedyDual-Size evicts deterministically
// when priorities tie: equal-sized, never re-read clusters are evicted in
// the order they were put, so a cache of four keeps the last four. Without
// the tie-break the victim follows Go's map order and this fails.
func TestGDSCacheTieBreak(t *testing.T) {
	const entry = 256
	for _, tc := range []struct {
		name     string
		capacity int // clusters of one entry the budget holds
		puts     int
	}{
		{"four of eight", 4, 8},
		{"two of nine", 2, 9},
		{"one of five", 1, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Repeat on fresh caches: map order changes between them.
			for round := 0; round < 20; round++ {
				g := newGDSCache(int64(tc.capacity*entry), 0, 1, entry)
				cs := make([]*cluster, tc.puts)
				for i := range cs {
					cs[i] = &cluster{id: i, updated: -100}
					g.put(cs[i], [][]float32{{float32(i)}}, 0)
				}
				for i, c := range cs {
					want := i >= tc.puts-tc.capacity
					if got := g.peek(c) != nil; got != want {
						t.Fatalf("round %d: cluster %d cached = %v, want %v", round, i, got, want)
					}
				}
				if g.bytes() != int64(tc.capacity*entry) {
					t.Fatalf("round %d: cache holds %d bytes, want %d", round, g.bytes(), tc.capacity*entry)
				}
			}
		})
	}
}
