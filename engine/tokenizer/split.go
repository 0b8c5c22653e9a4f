package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenization regexes of GPT-2, LLaMA-3 and Qwen2 use lookahead
// (\s+(?!\S)), which Go's regexp lacks, so they are matched by hand here.
// Each alternative is tried in the regex's order at the current position,
// exactly as a backtracking engine would; the first that matches wins.
//
// GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// LLaMA-3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Qwen2:   the LLaMA-3 pattern with \p{N} instead of \p{N}{1,3}
//
// Character classes follow Oniguruma's Unicode definitions, which is what
// Hugging Face tokenizers uses: \s is White_Space (unicode.IsSpace), \p{L}
// is unicode.IsLetter, \p{N} is unicode.IsNumber.

// splitScheme describes one member of the GPT-2 regex family.
type splitScheme struct {
	name string
	// llamaStyle selects the cl100k-style alternatives: case-insensitive
	// contractions, letters preceded by any one non-letter/number/newline
	// character, digits without a leading space, punctuation runs that take
	// trailing newlines, and whitespace runs that end in a newline.
	llamaStyle bool
	// maxDigits bounds a run of \p{N} (0: unbounded, GPT-2's \p{N}+).
	maxDigits int
}

var (
	schemeGPT2   = &splitScheme{name: "gpt2"}
	schemeLlama3 = &splitScheme{name: "llama3", llamaStyle: true, maxDigits: 3}
	schemeQwen2  = &splitScheme{name: "qwen2", llamaStyle: true, maxDigits: 1}
)

// knownPatterns maps the Split pre-tokenizer regexes found in real
// tokenizer.json files to the hand-written matcher for them.
var knownPatterns = map[string]*splitScheme{
	`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`:                                          schemeGPT2,
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: schemeLlama3,
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:      schemeQwen2,
}

// decodeAt returns the rune at s[i] and its width; invalid UTF-8 reads as
// one U+FFFD per byte, which falls in the "other" class like a symbol.
func decodeAt(s string, i int) (rune, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || '\t' <= r && r <= '\r'
	}
	return unicode.IsSpace(r)
}

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }

// split appends the pieces of s to out and returns it. Every byte of s
// lands in exactly one piece, in order.
func (sc *splitScheme) split(s string, out []string) []string {
	for i := 0; i < len(s); {
		n := sc.match(s, i)
		out = append(out, s[i:i+n])
		i += n
	}
	return out
}

// match returns the length of the piece starting at s[i] (always > 0).
func (sc *splitScheme) match(s string, i int) int {
	if n := contraction(s, i, sc.llamaStyle); n > 0 {
		return n
	}
	r, w := decodeAt(s, i)
	if sc.llamaStyle {
		// [^\r\n\p{L}\p{N}]?\p{L}+
		if !isLetter(r) && !isNumber(r) && r != '\r' && r != '\n' && i+w < len(s) {
			if r2, _ := decodeAt(s, i+w); isLetter(r2) {
				return w + runLen(s, i+w, isLetter, 0)
			}
		}
		if isLetter(r) {
			return runLen(s, i, isLetter, 0)
		}
		// \p{N}{1,k}
		if isNumber(r) {
			return runLen(s, i, isNumber, sc.maxDigits)
		}
		// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
		if n := optSpaceRun(s, i, isOther); n > 0 {
			return n + runLen(s, i+n, isCRLF, 0)
		}
		// \s*[\r\n]+: the longest whitespace prefix that ends in \r or \n.
		if isSpace(r) {
			end := i + runLen(s, i, isSpace, 0)
			last := -1
			for j := i; j < end; {
				c, cw := decodeAt(s, j)
				if c == '\r' || c == '\n' {
					last = j + cw
				}
				j += cw
			}
			if last > 0 {
				return last - i
			}
		}
	} else {
		// ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
		if n := optSpaceRun(s, i, isLetter); n > 0 {
			return n
		}
		if n := optSpaceRun(s, i, isNumber); n > 0 {
			return n
		}
		if n := optSpaceRun(s, i, isOther); n > 0 {
			return n
		}
	}
	// \s+(?!\S) then \s+. Reaching here means s[i] is whitespace: every
	// other character starts one of the alternatives above.
	n := runLen(s, i, isSpace, 0)
	if i+n == len(s) {
		return n
	}
	// Followed by non-space: back off one character so the lookahead sees
	// whitespace; if the run is a single character, \s+ takes it alone.
	if n > w {
		return n - lastRuneWidth(s[i:i+n])
	}
	return n
}

func isCRLF(r rune) bool { return r == '\r' || r == '\n' }

// runLen is the byte length of the run of class characters at s[i], at
// most max characters (0: unbounded).
func runLen(s string, i int, class func(rune) bool, max int) int {
	j, count := i, 0
	for j < len(s) && (max == 0 || count < max) {
		r, w := decodeAt(s, j)
		if !class(r) {
			break
		}
		j += w
		count++
	}
	return j - i
}

// optSpaceRun matches ' ?class+' at s[i] and returns its length (0: no match).
func optSpaceRun(s string, i int, class func(rune) bool) int {
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		if r, _ := decodeAt(s, i+1); class(r) {
			start = i + 1
		}
	}
	n := runLen(s, start, class, 0)
	if n == 0 {
		return 0
	}
	return start - i + n
}

func lastRuneWidth(s string) int {
	_, w := utf8.DecodeLastRuneInString(s)
	return w
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at s[i], case-insensitively
// when fold is set, and returns its length (0: no match).
func contraction(s string, i int, fold bool) int {
	if s[i] != '\'' || i+1 >= len(s) {
		return 0
	}
	lower := func(j int) (byte, int) {
		if j >= len(s) {
			return 0, 0
		}
		c := s[j]
		if fold {
			if 'A' <= c && c <= 'Z' {
				return c + 'a' - 'A', 1
			}
			// Unicode case folding maps U+017F LATIN SMALL LETTER LONG S
			// to 's' and U+212A KELVIN SIGN to 'k'; only the former can
			// complete a contraction.
			if c == 0xC5 && j+1 < len(s) && s[j+1] == 0xBF {
				return 's', 2
			}
		}
		return c, 1
	}
	c1, w1 := lower(i + 1)
	switch c1 {
	case 's', 't', 'm', 'd':
		return 1 + w1
	case 'r', 'v', 'l':
		c2, w2 := lower(i + 1 + w1)
		if c1 == 'r' && c2 == 'e' || c1 == 'v' && c2 == 'e' || c1 == 'l' && c2 == 'l' {
			return 1 + w1 + w2
		}
	}
	return 0
}
