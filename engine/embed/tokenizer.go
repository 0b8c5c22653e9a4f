package embed

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Tokenizer is CLIP's byte-level BPE tokenizer: whitespace collapsed and
// text lowercased, split by CLIP's pattern (contractions, letter runs,
// single digits, punctuation runs), each piece's UTF-8 bytes mapped to
// GPT-2's printable characters, and BPE with "</w>" marking the end of a
// word. Encode wraps the ids in the start and end tokens and pads them to
// the context length, as CLIP's text tower expects.
//
// It reads the vocabulary and merges of a Hugging Face tokenizer.json of
// CLIP's layout (model type BPE, end_of_word_suffix "</w>"); the
// normalisation and splitting are CLIP's, built in, not read from the
// file.
type Tokenizer struct {
	vocab   map[string]int
	ranks   map[[2]string]int
	suffix  string
	unk     int // -1: none
	special []specialToken
	start   int
	end     int
	cache   map[string][]int
}

type specialToken struct {
	content string
	id      int
}

// clipSplit is CLIP's pre-tokenizer pattern; Go's regexp, like Python's
// re, prefers the leftmost alternative, so contractions win over letters.
var clipSplit = regexp.MustCompile(`<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+`)

// whitespace matches runs of Unicode white space (Go's \s is ASCII only).
var whitespace = regexp.MustCompile(`[\t\n\v\f\r \x{85}\p{Z}]+`)

// byteChars is GPT-2's map from bytes to printable characters.
var byteChars = func() [256]string {
	var t [256]string
	extra := 0
	for b := 0; b < 256; b++ {
		if (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			t[b] = string(rune(b))
		} else {
			t[b] = string(rune(256 + extra))
			extra++
		}
	}
	return t
}()

// maxTokenizerFile bounds the tokenizer.json read (CLIP's is 2 MB).
const maxTokenizerFile = 64 << 20

// LoadTokenizer reads a CLIP tokenizer.json; start and end name the
// start- and end-of-text tokens ("" for CLIP's <|startoftext|> and
// <|endoftext|>).
func LoadTokenizer(path, start, end string) (*Tokenizer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxTokenizerFile {
		return nil, fmt.Errorf("embed: %s is %d bytes, more than a tokenizer (%d)", path, fi.Size(), maxTokenizerFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := ParseTokenizer(b, start, end)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ParseTokenizer is LoadTokenizer on the file's bytes.
func ParseTokenizer(data []byte, start, end string) (*Tokenizer, error) {
	var j struct {
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Model struct {
			Type     string            `json:"type"`
			Vocab    map[string]int    `json:"vocab"`
			Merges   []json.RawMessage `json:"merges"`
			Unk      *string           `json:"unk_token"`
			Suffix   *string           `json:"end_of_word_suffix"`
			Continue *string           `json:"continuing_subword_prefix"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("embed: tokenizer: %w", err)
	}
	if j.Model.Type != "BPE" {
		return nil, fmt.Errorf("embed: tokenizer model %q: want CLIP's BPE", j.Model.Type)
	}
	if j.Model.Suffix == nil || *j.Model.Suffix == "" {
		return nil, fmt.Errorf("embed: tokenizer has no end_of_word_suffix: not CLIP's layout (want \"</w>\")")
	}
	if j.Model.Continue != nil && *j.Model.Continue != "" {
		return nil, fmt.Errorf("embed: tokenizer has continuing_subword_prefix %q: not CLIP's layout", *j.Model.Continue)
	}
	t := &Tokenizer{vocab: j.Model.Vocab, ranks: map[[2]string]int{}, suffix: *j.Model.Suffix, unk: -1, cache: map[string][]int{}}
	if len(t.vocab) == 0 {
		return nil, fmt.Errorf("embed: tokenizer has an empty vocabulary")
	}
	for i, raw := range j.Model.Merges {
		var pair [2]string
		var s string
		if json.Unmarshal(raw, &s) == nil {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("embed: tokenizer merge %d %q: want two parts", i, s)
			}
			pair = [2]string{a, b}
		} else {
			var arr []string
			if err := json.Unmarshal(raw, &arr); err != nil || len(arr) != 2 {
				return nil, fmt.Errorf("embed: tokenizer merge %d: want \"a b\" or [\"a\", \"b\"]", i)
			}
			pair = [2]string{arr[0], arr[1]}
		}
		if _, ok := t.vocab[pair[0]+pair[1]]; !ok {
			return nil, fmt.Errorf("embed: tokenizer merge %d (%q %q) makes a token not in the vocabulary", i, pair[0], pair[1])
		}
		if _, dup := t.ranks[pair]; !dup {
			t.ranks[pair] = i
		}
	}
	for _, a := range j.AddedTokens {
		if a.Content != "" {
			t.special = append(t.special, specialToken{a.Content, a.ID})
			t.vocab[a.Content] = a.ID
		}
	}
	if j.Model.Unk != nil {
		id, ok := t.vocab[*j.Model.Unk]
		if !ok {
			return nil, fmt.Errorf("embed: tokenizer unk_token %q is not in the vocabulary", *j.Model.Unk)
		}
		t.unk = id
	}
	if start == "" {
		start = "<|startoftext|>"
	}
	if end == "" {
		end = "<|endoftext|>"
	}
	var ok bool
	if t.start, ok = t.vocab[start]; !ok {
		return nil, fmt.Errorf("embed: tokenizer has no start token %q", start)
	}
	if t.end, ok = t.vocab[end]; !ok {
		return nil, fmt.Errorf("embed: tokenizer has no end token %q", end)
	}
	return t, nil
}

// Start and End are the ids that wrap every encoded text.
func (t *Tokenizer) Start() int { return t.start }

// End is the end-of-text id; CLIP's text tower pools at it.
func (t *Tokenizer) End() int { return t.end }

// Tokens encodes text without the start and end tokens. Special tokens
// written in the text ("<|endoftext|>") are recognised, as Hugging Face's
// encode does.
func (t *Tokenizer) Tokens(text string) ([]int, error) {
	if !utf8.ValidString(text) {
		return nil, fmt.Errorf("embed: text is not valid UTF-8")
	}
	var ids []int
	for len(text) > 0 {
		at, sp := len(text), -1
		for i, s := range t.special {
			if k := strings.Index(text, s.content); k >= 0 && (k < at || (k == at && len(s.content) > len(t.special[sp].content))) {
				at, sp = k, i
			}
		}
		seg, err := t.segment(text[:at])
		if err != nil {
			return nil, err
		}
		ids = append(ids, seg...)
		if sp < 0 {
			break
		}
		ids = append(ids, t.special[sp].id)
		text = text[at+len(t.special[sp].content):]
	}
	return ids, nil
}

// segment tokenizes text that holds no special token.
func (t *Tokenizer) segment(text string) ([]int, error) {
	for _, r := range text {
		if r >= 0x300 && unicode.In(r, unicode.Mn, unicode.Me) {
			return nil, fmt.Errorf("embed: text has the combining mark %U; give it composed (NFC), e.g. \"é\" rather than \"e\" + U+0301", r)
		}
	}
	text = strings.ToLower(whitespace.ReplaceAllString(text, " "))
	var ids []int
	for _, piece := range clipSplit.FindAllString(text, -1) {
		ids = append(ids, t.word(piece)...)
	}
	return ids, nil
}

// word runs BPE on one piece.
func (t *Tokenizer) word(piece string) []int {
	if ids, ok := t.cache[piece]; ok {
		return ids
	}
	syms := make([]string, 0, len(piece))
	for i := 0; i < len(piece); i++ {
		syms = append(syms, byteChars[piece[i]])
	}
	syms[len(syms)-1] += t.suffix
	for len(syms) > 1 {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := t.ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if best < 0 {
			break
		}
		a, b := syms[at], syms[at+1]
		out := syms[:0:0]
		for i := 0; i < len(syms); i++ {
			if i+1 < len(syms) && syms[i] == a && syms[i+1] == b {
				out = append(out, a+b)
				i++
			} else {
				out = append(out, syms[i])
			}
		}
		syms = out
	}
	ids := make([]int, 0, len(syms))
	for _, s := range syms {
		if id, ok := t.vocab[s]; ok {
			ids = append(ids, id)
		} else if t.unk >= 0 {
			ids = append(ids, t.unk)
		}
	}
	if len(t.cache) < 1<<16 {
		t.cache[piece] = ids
	}
	return ids
}

// Encode is CLIP's tokenize: start token, the text's ids, end token,
// cut to context ids (the last kept id becomes the end token, as OpenAI's
// clip.tokenize(truncate=True) does) and padded with pad to context.
func (t *Tokenizer) Encode(text string, context, pad int) ([]int64, error) {
	ids, _, err := t.EncodeMask(text, context, pad)
	return ids, err
}

// EncodeMask is Encode with the attention mask: 1 for the start token,
// the text and the end token, 0 for the padding.
func (t *Tokenizer) EncodeMask(text string, context, pad int) (ids, mask []int64, err error) {
	if context < 2 {
		return nil, nil, fmt.Errorf("embed: context length %d: want at least 2", context)
	}
	toks, err := t.Tokens(text)
	if err != nil {
		return nil, nil, err
	}
	all := append(append([]int{t.start}, toks...), t.end)
	if len(all) > context {
		all = all[:context]
		all[context-1] = t.end
	}
	ids, mask = make([]int64, context), make([]int64, context)
	for i := range ids {
		ids[i] = int64(pad)
	}
	for i, id := range all {
		ids[i], mask[i] = int64(id), 1
	}
	return ids, mask, nil
}
