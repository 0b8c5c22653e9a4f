package tokenizer

import (
	"strings"
	"unicode"
)

// addedToken is an entry of tokenizer.json's added_tokens: a string that is
// cut out of the text whole, before normalization and BPE, and maps to one id.
type addedToken struct {
	id         int
	content    string
	singleWord bool // match only when not glued to letters/digits on either side
	lstrip     bool // swallow whitespace to the left of the match
	rstrip     bool // swallow whitespace to the right of the match
	normalized bool // matched against normalized text instead of raw text
	special    bool
}

// addedMatcher finds added tokens leftmost-longest, as `tokenizers` does
// with its Aho-Corasick automaton. Added tokens are few and usually share a
// first byte ('<'), so candidates indexed by first byte, longest first, are
// enough.
type addedMatcher struct {
	byFirst [256][]*addedToken
}

// newAddedMatcher returns nil for an empty list, which split treats as
// "no added tokens".
func newAddedMatcher(list []*addedToken) *addedMatcher {
	if len(list) == 0 {
		return nil
	}
	m := &addedMatcher{}
	for _, a := range sortedAdded(list) {
		m.byFirst[a.content[0]] = append(m.byFirst[a.content[0]], a)
	}
	return m
}

// split calls fn for each text span and each matched token of s, in order.
// first is whether s starts the input; each span is told whether it does.
func (m *addedMatcher) split(s string, first bool, fn func(span string, first bool, tok *addedToken)) {
	if m == nil {
		fn(s, first, nil)
		return
	}
	emitted := 0 // end of the last emitted span or token
	for i := 0; i < len(s); {
		var hit *addedToken
		for _, a := range m.byFirst[s[i]] {
			if strings.HasPrefix(s[i:], a.content) {
				hit = a
				break
			}
		}
		if hit == nil {
			i++
			continue
		}
		start, end := i, i+len(hit.content)
		// A single_word token glued to a word is not a match; like the
		// reference, the scan then resumes after it rather than trying a
		// shorter token at the same place.
		if hit.singleWord && (endsWithWordChar(s[:start]) || startsWithWordChar(s[end:])) {
			i = end
			continue
		}
		if hit.lstrip {
			for start > emitted {
				r, w := lastRune(s[:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= w
			}
		}
		next := end
		if hit.rstrip {
			for end < len(s) {
				r, w := decodeAt(s, end)
				if !unicode.IsSpace(r) {
					break
				}
				end += w
			}
			next = end
		}
		if start > emitted {
			fn(s[emitted:start], first && emitted == 0, nil)
		}
		fn(s[start:end], false, hit)
		emitted = end
		i = next
	}
	if emitted < len(s) || len(s) == 0 {
		fn(s[emitted:], first && emitted == 0, nil)
	}
}

func lastRune(s string) (rune, int) {
	w := lastRuneWidth(s)
	r, _ := decodeAt(s, len(s)-w)
	return r, w
}

func isWordChar(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func endsWithWordChar(s string) bool {
	if s == "" {
		return false
	}
	r, _ := lastRune(s)
	return isWordChar(r)
}

func startsWithWordChar(s string) bool {
	if s == "" {
		return false
	}
	r, _ := decodeAt(s, 0)
	return isWordChar(r)
}
