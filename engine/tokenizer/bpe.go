package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
)

// byteToChar is GPT-2's table from bytes to printable characters: printable
// Latin-1 bytes stand for themselves, the other 68 (controls, space, DEL,
// NBSP, soft hyphen) map to U+0100 onwards in byte order. Byte-level
// vocabularies are spelled in these characters ("Ġthe" is " the").
var byteToChar [256]string

// charToByte inverts byteToChar.
var charToByte = map[rune]byte{}

func init() {
	extra := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = rune(256 + extra)
			extra++
		}
		byteToChar[b] = string(r)
		charToByte[r] = byte(b)
	}
}

// bpeModel is the BPE model of tokenizer.json.
type bpeModel struct {
	vocab  map[string]int32
	merges map[uint64]mergeRule // key: left id << 32 | right id

	byteLevel  bool       // words are raw bytes, spelled with byteToChar in the vocabulary
	byteID     [256]int32 // byte-level: id of each byte's character (-1: missing)
	fallbackID [256]int32 // byte fallback: id of "<0xNN>" (-1: missing)

	byteFallback bool
	fuseUnk      bool
	ignoreMerges bool // a word that is itself in the vocabulary is one token
	unk          int32
}

type mergeRule struct {
	rank int32
	id   int32 // the merged token
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

type bpeJSON struct {
	Type                    string           `json:"type"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Dropout                 *float64         `json:"dropout"`
}

func parseBPE(raw json.RawMessage, byteLevel bool) (*bpeModel, error) {
	var j bpeJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if j.Type != "" && j.Type != "BPE" {
		return nil, fmt.Errorf("model: type %q is not supported (only BPE)", j.Type)
	}
	if j.ContinuingSubwordPrefix != nil && *j.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("model: continuing_subword_prefix %q is not supported", *j.ContinuingSubwordPrefix)
	}
	if j.EndOfWordSuffix != nil && *j.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("model: end_of_word_suffix %q is not supported", *j.EndOfWordSuffix)
	}
	if j.Dropout != nil && *j.Dropout != 0 {
		return nil, fmt.Errorf("model: BPE dropout %v is not supported (encoding would be random)", *j.Dropout)
	}
	if len(j.Vocab) == 0 {
		return nil, fmt.Errorf("model: empty vocabulary")
	}
	m := &bpeModel{vocab: j.Vocab, byteLevel: byteLevel, byteFallback: j.ByteFallback, fuseUnk: j.FuseUnk,
		ignoreMerges: j.IgnoreMerges, unk: -1}
	for s, id := range j.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("model: token %q has negative id %d", s, id)
		}
	}
	if j.UnkToken != nil {
		id, ok := j.Vocab[*j.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model: unk_token %q is not in the vocabulary", *j.UnkToken)
		}
		m.unk = id
	}
	for b := 0; b < 256; b++ {
		m.byteID[b], m.fallbackID[b] = -1, -1
		if id, ok := j.Vocab[byteToChar[b]]; ok {
			m.byteID[b] = id
		}
		if id, ok := j.Vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.fallbackID[b] = id
		}
	}
	pairs, err := parseMerges(j.Merges)
	if err != nil {
		return nil, err
	}
	m.merges = make(map[uint64]mergeRule, len(pairs))
	for rank, p := range pairs {
		a, okA := j.Vocab[p[0]]
		b, okB := j.Vocab[p[1]]
		c, okC := j.Vocab[p[0]+p[1]]
		if !okA || !okB || !okC {
			return nil, fmt.Errorf("model: merge %d (%q, %q) uses or makes a token missing from the vocabulary", rank, p[0], p[1])
		}
		k := pairKey(a, b)
		if _, dup := m.merges[k]; !dup { // the first (best) rank wins
			m.merges[k] = mergeRule{rank: int32(rank), id: c}
		}
	}
	return m, nil
}

// parseMerges accepts both spellings: ["a b", ...] (older files) and
// [["a", "b"], ...] (newer files, which allow spaces inside tokens).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		out := make([][2]string, len(strs))
		for i, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return nil, fmt.Errorf("model: merge %d %q is not two space-separated tokens", i, s)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("model: merges are neither strings nor pairs: %w", err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("model: merge %d has %d parts, want 2", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

// encode returns the ids of one pre-tokenized word.
func (m *bpeModel) encode(w string, out []int32) []int32 {
	if m.ignoreMerges {
		key := w
		if m.byteLevel {
			key = byteLevelSpelling(w)
		}
		if id, ok := m.vocab[key]; ok {
			return append(out, id)
		}
	}
	syms := m.initial(w)
	if len(syms) > 1 {
		if len(syms) <= shortWord {
			syms = m.mergeShort(syms)
		} else {
			syms = m.mergeLong(syms)
		}
	}
	return append(out, syms...)
}

// shortWord is the length up to which the quadratic merge loop beats the
// heap (most words); longer ones, such as a whole SentencePiece-style input
// without pre-tokenization, take the O(n log n) path.
const shortWord = 24

func byteLevelSpelling(w string) string {
	var sb strings.Builder
	for i := 0; i < len(w); i++ {
		sb.WriteString(byteToChar[w[i]])
	}
	return sb.String()
}

// initial splits a word into its starting symbols: bytes (byte-level) or
// characters, with byte fallback and unknown-token handling as in
// `tokenizers`: a character missing from the vocabulary becomes its <0xNN>
// byte tokens when byte_fallback is on and all exist, else <unk> (runs of
// unknowns fused into one when fuse_unk is on), else it is dropped.
func (m *bpeModel) initial(w string) []int32 {
	syms := make([]int32, 0, len(w))
	pendingUnk := false
	flushUnk := func() {
		if pendingUnk {
			syms = append(syms, m.unk)
			pendingUnk = false
		}
	}
	unknown := func() {
		if m.unk < 0 {
			return
		}
		if pendingUnk && !m.fuseUnk {
			syms = append(syms, m.unk)
		}
		pendingUnk = true
	}
	if m.byteLevel {
		for i := 0; i < len(w); i++ {
			if id := m.byteID[w[i]]; id >= 0 {
				flushUnk()
				syms = append(syms, id)
			} else {
				unknown()
			}
		}
		flushUnk()
		return syms
	}
	for i := 0; i < len(w); {
		_, n := decodeAt(w, i)
		if id, ok := m.vocab[w[i:i+n]]; ok {
			flushUnk()
			syms = append(syms, id)
			i += n
			continue
		}
		if m.byteFallback {
			all := true
			for k := i; k < i+n; k++ {
				if m.fallbackID[w[k]] < 0 {
					all = false
				}
			}
			if all {
				// The reference adds byte tokens without first flushing a
				// pending <unk>; with byte fallback every byte token normally
				// exists, so there is no pending one.
				for k := i; k < i+n; k++ {
					syms = append(syms, m.fallbackID[w[k]])
				}
				i += n
				continue
			}
		}
		unknown()
		i += n
	}
	flushUnk()
	return syms
}

// mergeShort applies merges by repeatedly merging the best-ranked adjacent
// pair, leftmost first. Merging all occurrences of one rule before moving
// on is what the rank order implies: a merge's result only takes part in
// later-ranked rules.
func (m *bpeModel) mergeShort(syms []int32) []int32 {
	for len(syms) > 1 {
		best, bestRank := -1, int32(-1)
		var bestID int32
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := m.merges[pairKey(syms[i], syms[i+1])]; ok && (best < 0 || r.rank < bestRank) {
				best, bestRank, bestID = i, r.rank, r.id
			}
		}
		if best < 0 {
			break
		}
		syms[best] = bestID
		syms = append(syms[:best+1], syms[best+2:]...)
	}
	return syms
}

// mergeLong is mergeShort with a linked list and a heap of candidate pairs
// ordered by (rank, position), as the reference implements it; stale heap
// entries are skipped when popped.
func (m *bpeModel) mergeLong(ids []int32) []int32 {
	n := len(ids)
	prev := make([]int32, n)
	next := make([]int32, n)
	alive := make([]bool, n)
	for i := range ids {
		prev[i], next[i], alive[i] = int32(i-1), int32(i+1), true
	}
	next[n-1] = -1
	h := make(pairHeap, 0, n)
	push := func(i int32) {
		j := next[i]
		if j < 0 {
			return
		}
		if r, ok := m.merges[pairKey(ids[i], ids[j])]; ok {
			h.push(pairCand{rank: r.rank, pos: i, id: r.id})
		}
	}
	for i := 0; i+1 < n; i++ {
		push(int32(i))
	}
	for len(h) > 0 {
		c := h.pop()
		i := c.pos
		if !alive[i] || next[i] < 0 {
			continue
		}
		j := next[i]
		if r, ok := m.merges[pairKey(ids[i], ids[j])]; !ok || r.id != c.id {
			continue // one side changed since this candidate was pushed
		}
		ids[i] = c.id
		alive[j] = false
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		if prev[i] >= 0 {
			push(prev[i])
		}
		push(i)
	}
	out := ids[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, ids[i])
	}
	return out
}

type pairCand struct {
	rank, pos, id int32
}

// pairHeap is a binary min-heap on (rank, pos), written out rather than
// through container/heap to avoid boxing each candidate in an interface.
type pairHeap []pairCand

func (c pairCand) less(d pairCand) bool {
	if c.rank != d.rank {
		return c.rank < d.rank
	}
	return c.pos < d.pos
}

func (h *pairHeap) push(c pairCand) {
	*h = append(*h, c)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a[i].less(a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *pairHeap) pop() pairCand {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(a) && a[l].less(a[m]) {
			m = l
		}
		if r < len(a) && a[r].less(a[m]) {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}
