package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// component is the common head of every normalizer, pre-tokenizer and
// decoder object in tokenizer.json.
type component struct {
	Type string `json:"type"`
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// pattern is tokenizer.json's {"String": "..."} or {"Regex": "..."}.
type pattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// ---------------------------------------------------------------- normalizers

type normalizer interface {
	normalize(s string) (string, error)
}

type normSequence []normalizer

func (q normSequence) normalize(s string) (string, error) {
	var err error
	for _, n := range q {
		if s, err = n.normalize(s); err != nil {
			return "", err
		}
	}
	return s, nil
}

// normPrepend adds a prefix to non-empty text (LLaMA-2's "▁").
type normPrepend string

func (p normPrepend) normalize(s string) (string, error) {
	if s == "" {
		return s, nil
	}
	return string(p) + s, nil
}

type normReplace struct{ from, to string }

func (r normReplace) normalize(s string) (string, error) {
	return strings.ReplaceAll(s, r.from, r.to), nil
}

type normStrip struct{ left, right bool }

func (p normStrip) normalize(s string) (string, error) {
	if p.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if p.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s, nil
}

// normLowercase uses Go's per-character lowercase mapping. Rust's
// str::to_lowercase, which the reference uses, differs in two places: it
// maps U+0130 to "i\u0307" and a word-final capital sigma to "ς".
type normLowercase struct{}

func (normLowercase) normalize(s string) (string, error) { return strings.ToLower(s), nil }

// normalizerNFC applies Unicode NFC. The standard library has no Unicode
// normalization tables, so this implements only the common case exactly:
// text in which no character can change under NFC is returned unchanged,
// and text that contains a character that might (combining marks, Hangul
// jamo, and the characters whose NFC_Quick_Check is No, taken here as
// whole ranges, a superset) is rejected with an error rather than
// tokenized differently from the reference.
type normalizerNFC struct{}

// nfcUnstable holds ranges containing every NFC_Quick_Check=No character
// (singleton and excluded decompositions) and the Hangul jamo that compose.
var nfcUnstable = [][2]rune{
	{0x0340, 0x0344}, {0x0374, 0x0374}, {0x037E, 0x037E}, {0x0387, 0x0387},
	{0x0958, 0x095F}, {0x09DC, 0x09DF}, {0x0A33, 0x0A5E}, {0x0B5C, 0x0B5D},
	{0x0F43, 0x0FB9}, {0x1100, 0x11FF}, {0x1F71, 0x1FFD}, {0x2000, 0x2001},
	{0x2126, 0x2126}, {0x212A, 0x212B}, {0x2329, 0x232A}, {0x2ADC, 0x2ADC},
	{0xA960, 0xA97F}, {0xD7B0, 0xD7FF}, {0xF900, 0xFAFF}, {0xFB1D, 0xFB4E},
	{0x1D15E, 0x1D1C0}, {0x2F800, 0x2FA1F},
}

func (normalizerNFC) normalize(s string) (string, error) {
	for i := 0; i < len(s); {
		r, w := decodeAt(s, i)
		i += w
		if r < 0x300 {
			continue
		}
		if unicode.In(r, unicode.Mn, unicode.Mc, unicode.Me) {
			return "", fmt.Errorf("tokenizer: NFC normalizer: text has combining mark %U, which this implementation cannot compose", r)
		}
		for _, rg := range nfcUnstable {
			if rg[0] <= r && r <= rg[1] {
				return "", fmt.Errorf("tokenizer: NFC normalizer: text has %U, which NFC may change and this implementation cannot", r)
			}
		}
	}
	return s, nil
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		var j struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("normalizer Sequence: %w", err)
		}
		var q normSequence
		for i, r := range j.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, fmt.Errorf("normalizer Sequence[%d]: %w", i, err)
			}
			if n != nil {
				q = append(q, n)
			}
		}
		return q, nil
	case "Prepend":
		var j struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("normalizer Prepend: %w", err)
		}
		return normPrepend(j.Prepend), nil
	case "Replace":
		var j struct {
			Pattern pattern `json:"pattern"`
			Content string  `json:"content"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		if j.Pattern.String == nil || *j.Pattern.String == "" {
			return nil, fmt.Errorf("normalizer Replace: only non-empty String patterns are supported, got %s", raw)
		}
		return normReplace{*j.Pattern.String, j.Content}, nil
	case "Strip":
		var j struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("normalizer Strip: %w", err)
		}
		return normStrip{j.Left, j.Right}, nil
	case "Lowercase":
		return normLowercase{}, nil
	case "NFC":
		return normalizerNFC{}, nil
	}
	return nil, fmt.Errorf("normalizer type %q is not supported", c.Type)
}

// ---------------------------------------------------------------- pre-tokenizers

// word is a piece of normalized text on its way to the model. first marks
// the piece that starts the whole input.
type word struct {
	text  string
	first bool
}

// preTokenizer splits a word into smaller words, calling fn for each in
// order. Words stream through callbacks rather than slices so that a long
// input is never materialized as a list of words.
type preTokenizer interface {
	each(w word, fn func(word))
}

type preSequence []preTokenizer

func (q preSequence) each(w word, fn func(word)) { q.from(0, w, fn) }

func (q preSequence) from(i int, w word, fn func(word)) {
	if i == len(q) {
		fn(w)
		return
	}
	q[i].each(w, func(x word) { q.from(i+1, x, fn) })
}

// byteLevelPre is the ByteLevel pre-tokenizer. The byte-to-character
// mapping itself happens in the model (bpeModel.byteLevel), which works on
// raw bytes directly.
type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
}

func (b *byteLevelPre) each(w word, fn func(word)) {
	text := w.text
	if b.addPrefixSpace && !strings.HasPrefix(text, " ") {
		text = " " + text
	}
	if !b.useRegex {
		fn(word{text, w.first})
		return
	}
	eachMatch(schemeGPT2, text, w.first, fn)
}

func eachMatch(sc *splitScheme, text string, first bool, fn func(word)) {
	for i := 0; i < len(text); {
		n := sc.match(text, i)
		fn(word{text[i : i+n], first && i == 0})
		i += n
	}
}

// preSplitRegex is Split with one of the known GPT-2-family regexes and
// behavior Isolated: every match is a word (the regexes match every
// character, so there is nothing between matches).
type preSplitRegex struct{ scheme *splitScheme }

func (p preSplitRegex) each(w word, fn func(word)) { eachMatch(p.scheme, w.text, w.first, fn) }

// delimBehavior is tokenizers' SplitDelimiterBehavior.
type delimBehavior int

const (
	delimRemoved delimBehavior = iota
	delimIsolated
	delimMergedWithPrevious
	delimMergedWithNext
	delimContiguous
)

var delimBehaviors = map[string]delimBehavior{
	"Removed": delimRemoved, "Isolated": delimIsolated, "MergedWithPrevious": delimMergedWithPrevious,
	"MergedWithNext": delimMergedWithNext, "Contiguous": delimContiguous,
}

// splitDelims splits s at the spans that isDelim finds (as [start, end)
// pairs, in order, non-overlapping) according to behavior.
func splitDelims(s string, spans [][2]int, behavior delimBehavior, first bool, fn func(word)) {
	type piece struct {
		a, b  int
		delim bool
	}
	var pieces []piece
	last := 0
	for _, sp := range spans {
		if sp[0] > last {
			pieces = append(pieces, piece{last, sp[0], false})
		}
		pieces = append(pieces, piece{sp[0], sp[1], true})
		last = sp[1]
	}
	if last < len(s) {
		pieces = append(pieces, piece{last, len(s), false})
	}
	var merged []piece
	switch behavior {
	case delimRemoved:
		for _, p := range pieces {
			if !p.delim {
				merged = append(merged, p)
			}
		}
	case delimIsolated:
		merged = pieces
	case delimContiguous:
		for _, p := range pieces {
			if n := len(merged); n > 0 && p.delim && merged[n-1].delim {
				merged[n-1].b = p.b
			} else {
				merged = append(merged, p)
			}
		}
	case delimMergedWithPrevious:
		prevDelim := false
		for _, p := range pieces {
			if n := len(merged); n > 0 && p.delim && !prevDelim {
				merged[n-1].b = p.b
			} else {
				merged = append(merged, p)
			}
			prevDelim = p.delim
		}
	case delimMergedWithNext:
		prevDelim := false
		for _, p := range pieces {
			if n := len(merged); n > 0 && !p.delim && prevDelim {
				merged[n-1].b = p.b
			} else {
				merged = append(merged, p)
			}
			prevDelim = p.delim
		}
	}
	for _, p := range merged {
		fn(word{s[p.a:p.b], first && p.a == 0})
	}
}

// preSplitString is Split with a literal String pattern.
type preSplitString struct {
	delim    string
	behavior delimBehavior
}

func (p preSplitString) each(w word, fn func(word)) {
	splitDelims(w.text, literalSpans(w.text, p.delim), p.behavior, w.first, fn)
}

// literalSpans are the non-overlapping occurrences of delim in s.
func literalSpans(s, delim string) [][2]int {
	var spans [][2]int
	for i := 0; ; {
		k := strings.Index(s[i:], delim)
		if k < 0 {
			return spans
		}
		spans = append(spans, [2]int{i + k, i + k + len(delim)})
		i += k + len(delim)
	}
}

// preDigits is the Digits pre-tokenizer: ASCII digits split off, one per
// word (individual_digits) or in runs.
type preDigits struct{ individual bool }

func (p preDigits) each(w word, fn func(word)) {
	var spans [][2]int
	for i := 0; i < len(w.text); i++ {
		if c := w.text[i]; c >= '0' && c <= '9' {
			spans = append(spans, [2]int{i, i + 1})
		}
	}
	b := delimContiguous
	if p.individual {
		b = delimIsolated
	}
	splitDelims(w.text, spans, b, w.first, fn)
}

// prependScheme is Metaspace's rule for adding the replacement character
// in front of a word.
type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst                // only in front of the start of the input
	prependNever
)

// metaspaceJSON covers both the current fields and the older
// add_prefix_space flag, which meant "always" or "never".
type metaspaceJSON struct {
	Replacement    string  `json:"replacement"`
	PrependScheme  *string `json:"prepend_scheme"`
	AddPrefixSpace *bool   `json:"add_prefix_space"`
	Split          *bool   `json:"split"`
}

func (j metaspaceJSON) parse(what string) (rune, prependScheme, bool, error) {
	rs := []rune(j.Replacement)
	if len(rs) != 1 {
		return 0, 0, false, fmt.Errorf("%s: replacement %q must be one character", what, j.Replacement)
	}
	scheme := prependAlways
	if j.PrependScheme != nil {
		switch *j.PrependScheme {
		case "always":
		case "first":
			scheme = prependFirst
		case "never":
			scheme = prependNever
		default:
			return 0, 0, false, fmt.Errorf("%s: unknown prepend_scheme %q", what, *j.PrependScheme)
		}
	} else if j.AddPrefixSpace != nil && !*j.AddPrefixSpace {
		scheme = prependNever
	}
	split := true
	if j.Split != nil {
		split = *j.Split
	}
	return rs[0], scheme, split, nil
}

// preMetaspace replaces spaces by the replacement character ("▁"), adds one
// in front per the prepend scheme, and optionally splits before each.
type preMetaspace struct {
	repl     string
	scheme   prependScheme
	splitOff bool
}

func (p preMetaspace) each(w word, fn func(word)) {
	text := strings.ReplaceAll(w.text, " ", p.repl)
	if !strings.HasPrefix(text, p.repl) && (p.scheme == prependAlways || p.scheme == prependFirst && w.first) {
		text = p.repl + text
	}
	if !p.splitOff {
		fn(word{text, w.first})
		return
	}
	splitDelims(text, literalSpans(text, p.repl), delimMergedWithNext, w.first, fn)
}

func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		var j struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Sequence: %w", err)
		}
		var q preSequence
		for i, r := range j.PreTokenizers {
			p, err := parsePreTokenizer(r)
			if err != nil {
				return nil, fmt.Errorf("pre_tokenizer Sequence[%d]: %w", i, err)
			}
			if p != nil {
				q = append(q, p)
			}
		}
		return q, nil
	case "ByteLevel":
		j := struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}{}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("pre_tokenizer ByteLevel: %w", err)
		}
		return &byteLevelPre{addPrefixSpace: j.AddPrefixSpace, useRegex: j.UseRegex == nil || *j.UseRegex}, nil
	case "Split":
		var j struct {
			Pattern  pattern `json:"pattern"`
			Behavior string  `json:"behavior"`
			Invert   bool    `json:"invert"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		b, ok := delimBehaviors[j.Behavior]
		if !ok {
			return nil, fmt.Errorf("pre_tokenizer Split: unknown behavior %q", j.Behavior)
		}
		if j.Invert {
			return nil, errors.New("pre_tokenizer Split: invert=true is not supported")
		}
		switch {
		case j.Pattern.Regex != nil:
			sc, ok := knownPatterns[*j.Pattern.Regex]
			if !ok {
				return nil, fmt.Errorf("pre_tokenizer Split: regex %q is not one of the supported GPT-2/LLaMA-3/Qwen2 patterns", *j.Pattern.Regex)
			}
			if b != delimIsolated {
				return nil, fmt.Errorf("pre_tokenizer Split: behavior %q with a regex is not supported (only Isolated)", j.Behavior)
			}
			return preSplitRegex{sc}, nil
		case j.Pattern.String != nil && *j.Pattern.String != "":
			return preSplitString{*j.Pattern.String, b}, nil
		}
		return nil, fmt.Errorf("pre_tokenizer Split: pattern %s is empty", raw)
	case "Metaspace":
		var j metaspaceJSON
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Metaspace: %w", err)
		}
		r, scheme, split, err := j.parse("pre_tokenizer Metaspace")
		if err != nil {
			return nil, err
		}
		return preMetaspace{string(r), scheme, split}, nil
	case "Digits":
		var j struct {
			Individual bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("pre_tokenizer Digits: %w", err)
		}
		return preDigits{j.Individual}, nil
	}
	return nil, fmt.Errorf("pre_tokenizer type %q is not supported", c.Type)
}

// lastPreTokenizer is the pre-tokenizer that runs last.
func lastPreTokenizer(p preTokenizer) preTokenizer {
	if q, ok := p.(preSequence); ok {
		if len(q) == 0 {
			return nil
		}
		return lastPreTokenizer(q[len(q)-1])
	}
	return p
}

func containsByteLevel(p preTokenizer) bool {
	switch v := p.(type) {
	case *byteLevelPre:
		return true
	case preSequence:
		for _, c := range v {
			if containsByteLevel(c) {
				return true
			}
		}
	}
	return false
}
