// Package tokenizer reads Hugging Face tokenizer.json files and encodes and
// decodes text with them, matching the `tokenizers` library id for id.
//
// Supported: the BPE model in its two common forms, byte-level BPE (GPT-2,
// LLaMA-3, Qwen2: ByteLevel pre-tokenizer or Split with their regex, bytes
// mapped to printable characters) and SentencePiece-style BPE (LLaMA-2,
// Mistral: Metaspace or Prepend/Replace normalizers, byte fallback to <0xNN>
// tokens); added and special tokens; the normalizers Sequence, Prepend,
// Replace (string patterns), Strip, Lowercase and NFC (see normalizerNFC);
// the pre-tokenizers Sequence, ByteLevel, Split (the GPT-2, LLaMA-3 and Qwen2
// regexes, or a plain string), Metaspace and Digits; the decoders Sequence,
// ByteLevel, Metaspace, Replace, ByteFallback, Fuse and Strip. Anything else
// is reported by Parse as unsupported, naming the component, rather than
// tokenizing differently from the reference.
//
// Pipeline, as in `tokenizers`: added tokens are split out of the raw text
// first; each remaining span is normalized, pre-tokenized into words, and
// each word is encoded by BPE merges in rank order. Decoding maps ids back
// to token strings and runs the decoder chain.
//
// A Tokenizer is safe for concurrent use.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
)

// Tokenizer encodes text to token ids and back. Create one with Load or Parse.
type Tokenizer struct {
	normalizer normalizer
	preTok     preTokenizer
	model      *bpeModel
	decoder    decoder

	added      []addedToken // every added token, special or not
	addedByID  map[int]*addedToken
	addedIndex [2]*addedMatcher // [0]: non-special only, [1]: all; raw-text (normalized=false) tokens
	normIndex  [2]*addedMatcher // same, for normalized=true tokens, matched after normalization

	idToToken []string // model vocabulary and added tokens by id ("" where unused)
	vocabSize int

	special SpecialTokens

	// fallbackToken marks the <0xNN> ids when the decoder has ByteFallback
	// (nil otherwise); the stream decoder holds back runs of them.
	fallbackToken map[int]bool

	cacheMu sync.RWMutex
	cache   map[string][]int32
}

// SpecialTokens are the ids a generation loop needs. -1 means absent.
type SpecialTokens struct {
	BOS int // prepended by EncodeOptions.AddBOS
	EOS int // end of sequence: generation stops here
}

// EncodeOptions control Encode.
type EncodeOptions struct {
	// AddBOS prepends the BOS token. It is an error when the tokenizer has
	// none (see Special and SetSpecial).
	AddBOS bool
	// AllowSpecial recognises special tokens written in the text (e.g.
	// "<|eos|>" becomes the EOS id). When false they are encoded as plain
	// text, so untrusted input cannot inject control tokens. Added tokens
	// that are not special are always recognised, as in `tokenizers`.
	AllowSpecial bool
}

// DecodeOptions control DecodeWith.
type DecodeOptions struct {
	// SkipSpecial leaves special tokens out of the text.
	SkipSpecial bool
}

// Load reads a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

type fileJSON struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// Parse reads the contents of a tokenizer.json file.
func Parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parsing tokenizer.json: %w", err)
	}
	if len(f.Model) == 0 || string(f.Model) == "null" {
		return nil, errors.New("tokenizer.json has no model")
	}
	t := &Tokenizer{addedByID: map[int]*addedToken{}, cache: map[string][]int32{}}
	var err error
	if t.normalizer, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.preTok, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if t.decoder, err = parseDecoder(f.Decoder); err != nil {
		return nil, err
	}
	_, byteLevel := lastPreTokenizer(t.preTok).(*byteLevelPre)
	if !byteLevel && containsByteLevel(t.preTok) {
		return nil, errors.New("pre_tokenizer: ByteLevel must be the last pre-tokenizer of a Sequence")
	}
	if t.model, err = parseBPE(f.Model, byteLevel); err != nil {
		return nil, err
	}

	maxID := -1
	for _, id := range t.model.vocab {
		maxID = max(maxID, int(id))
	}
	for _, a := range f.AddedTokens {
		if a.Content == "" {
			return nil, fmt.Errorf("added token id %d has empty content", a.ID)
		}
		if a.ID < 0 {
			return nil, fmt.Errorf("added token %q has negative id %d", a.Content, a.ID)
		}
		maxID = max(maxID, a.ID)
	}
	// Ids index a dense table; a stray huge id in a damaged file must not
	// turn into a huge allocation.
	if limit := 4*(len(t.model.vocab)+len(f.AddedTokens)) + 1024; maxID >= limit {
		return nil, fmt.Errorf("token id %d is far beyond the %d tokens defined", maxID, len(t.model.vocab)+len(f.AddedTokens))
	}
	t.idToToken = make([]string, maxID+1)
	for s, id := range t.model.vocab {
		t.idToToken[id] = s
	}
	t.added = make([]addedToken, len(f.AddedTokens))
	for i, a := range f.AddedTokens {
		t.added[i] = addedToken{id: a.ID, content: a.Content, singleWord: a.SingleWord, lstrip: a.LStrip,
			rstrip: a.RStrip, normalized: a.Normalized, special: a.Special}
		t.addedByID[a.ID] = &t.added[i]
		t.idToToken[a.ID] = a.Content
	}
	t.vocabSize = maxID + 1
	for allow := 0; allow < 2; allow++ {
		var raw, norm []*addedToken
		for i := range t.added {
			a := &t.added[i]
			if a.special && allow == 0 {
				continue
			}
			// Without a normalizer, "normalized" tokens see the same text.
			if a.normalized && t.normalizer != nil {
				norm = append(norm, a)
			} else {
				raw = append(raw, a)
			}
		}
		t.addedIndex[allow] = newAddedMatcher(raw)
		t.normIndex[allow] = newAddedMatcher(norm)
	}
	t.special = t.inferSpecial(f.PostProcessor)
	if hasByteFallback(t.decoder) {
		t.fallbackToken = map[int]bool{}
		for b := 0; b < 256; b++ {
			if id := t.model.fallbackID[b]; id >= 0 {
				t.fallbackToken[int(id)] = true
			}
		}
	}
	return t, nil
}

// inferSpecial finds BOS and EOS. tokenizer.json does not declare them (that
// is tokenizer_config.json's job), so BOS is the token a TemplateProcessing
// post-processor puts before the sequence, or else an added token with a
// conventional BOS name; EOS is an added token with a conventional EOS name.
func (t *Tokenizer) inferSpecial(post json.RawMessage) SpecialTokens {
	s := SpecialTokens{BOS: -1, EOS: -1}
	// LLaMA-3 wraps its template in a Sequence after a ByteLevel processor.
	var seq struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
	}
	if len(post) > 0 && json.Unmarshal(post, &seq) == nil && seq.Type == "Sequence" {
		for _, p := range seq.Processors {
			var c component
			if json.Unmarshal(p, &c) == nil && c.Type == "TemplateProcessing" {
				post = p
			}
		}
	}
	var tp struct {
		Type   string `json:"type"`
		Single []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *json.RawMessage `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int `json:"ids"`
		} `json:"special_tokens"`
	}
	if len(post) > 0 && json.Unmarshal(post, &tp) == nil && tp.Type == "TemplateProcessing" {
		for _, p := range tp.Single {
			if p.Sequence != nil {
				break
			}
			if p.SpecialToken != nil {
				if st, ok := tp.SpecialTokens[p.SpecialToken.ID]; ok && len(st.IDs) == 1 {
					s.BOS = st.IDs[0]
					break
				}
			}
		}
	}
	find := func(names ...string) int {
		for _, n := range names {
			for i := range t.added {
				if t.added[i].content == n {
					return t.added[i].id
				}
			}
		}
		return -1
	}
	if s.BOS < 0 {
		s.BOS = find("<|bos|>", "<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>")
	}
	s.EOS = find("<|eos|>", "</s>", "<|end_of_text|>", "<eos>", "<|endoftext|>")
	return s
}

// Special returns the BOS and EOS ids found in the file (-1 if absent).
func (t *Tokenizer) Special() SpecialTokens { return t.special }

// SetSpecial overrides BOS and EOS, e.g. with ids from a model's
// config.json; -1 clears one. Not safe to call concurrently with Encode.
func (t *Tokenizer) SetSpecial(s SpecialTokens) error {
	for _, id := range []int{s.BOS, s.EOS} {
		if id < -1 || id >= t.vocabSize {
			return fmt.Errorf("tokenizer: special token id %d outside vocabulary of %d", id, t.vocabSize)
		}
	}
	t.special = s
	return nil
}

// VocabSize is one more than the largest token id (model vocabulary and
// added tokens), i.e. the logits width a matching model produces at least.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenID returns the id of a token string (an added token's content or a
// vocabulary entry in the model's own spelling, e.g. "Ġthe" or "▁the").
func (t *Tokenizer) TokenID(s string) (int, bool) {
	for i := range t.added {
		if t.added[i].content == s {
			return t.added[i].id, true
		}
	}
	id, ok := t.model.vocab[s]
	return int(id), ok
}

// Token returns the token string for an id.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.idToToken) {
		return "", false
	}
	if _, ok := t.addedByID[id]; ok {
		return t.idToToken[id], true
	}
	s := t.idToToken[id]
	if _, ok := t.model.vocab[s]; !ok || s == "" {
		return "", false
	}
	return s, true
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int) bool {
	a, ok := t.addedByID[id]
	return ok && a.special
}

// Encode converts text to token ids.
func (t *Tokenizer) Encode(text string, opts EncodeOptions) ([]int, error) {
	// Byte-level English runs about 3-4 bytes per token.
	out := make([]int, 0, len(text)/3+2)
	if opts.AddBOS {
		if t.special.BOS < 0 {
			return nil, errors.New("tokenizer: AddBOS set but the tokenizer has no BOS token (use SetSpecial)")
		}
		out = append(out, t.special.BOS)
	}
	allow := 0
	if opts.AllowSpecial {
		allow = 1
	}
	var err error
	t.addedIndex[allow].split(text, true, func(span string, first bool, tok *addedToken) {
		if err != nil {
			return
		}
		if tok != nil {
			out = append(out, tok.id)
			return
		}
		var norm string
		if norm, err = t.normalize(span); err != nil {
			return
		}
		t.normIndex[allow].split(norm, first, func(span2 string, first2 bool, tok2 *addedToken) {
			if tok2 != nil {
				out = append(out, tok2.id)
				return
			}
			out = t.encodeNormalized(span2, first2, out)
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (t *Tokenizer) normalize(s string) (string, error) {
	if t.normalizer == nil || s == "" {
		return s, nil
	}
	return t.normalizer.normalize(s)
}

// encodeNormalized pre-tokenizes one normalized span and BPE-encodes each
// word. first tells whether the span starts the input (Metaspace's
// prepend_scheme "first" depends on it).
func (t *Tokenizer) encodeNormalized(s string, first bool, out []int) []int {
	if s == "" {
		return out
	}
	if t.preTok == nil {
		return t.encodeWord(s, out)
	}
	t.preTok.each(word{s, first}, func(w word) {
		if w.text != "" {
			out = t.encodeWord(w.text, out)
		}
	})
	return out
}

// maxCachedWord bounds the words kept in the cache; longer ones are rare
// and would make the cache's memory depend on the input.
const (
	maxCachedWord = 64
	maxCacheSize  = 1 << 16
)

func (t *Tokenizer) encodeWord(w string, out []int) []int {
	if len(w) <= maxCachedWord {
		t.cacheMu.RLock()
		ids, ok := t.cache[w]
		t.cacheMu.RUnlock()
		if ok {
			for _, id := range ids {
				out = append(out, int(id))
			}
			return out
		}
	}
	ids := t.model.encode(w, nil)
	if len(w) <= maxCachedWord {
		t.cacheMu.Lock()
		if len(t.cache) >= maxCacheSize {
			clear(t.cache)
		}
		t.cache[strings.Clone(w)] = ids
		t.cacheMu.Unlock()
	}
	for _, id := range ids {
		out = append(out, int(id))
	}
	return out
}

// Decode converts ids to text, special tokens included. Ids outside the
// vocabulary are skipped, as `tokenizers` does.
func (t *Tokenizer) Decode(ids []int) string {
	return t.DecodeWith(ids, DecodeOptions{})
}

// DecodeWith converts ids to text with options.
func (t *Tokenizer) DecodeWith(ids []int, opts DecodeOptions) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		s, ok := t.Token(id)
		if !ok {
			continue
		}
		if opts.SkipSpecial && t.IsSpecial(id) {
			continue
		}
		toks = append(toks, s)
	}
	if t.decoder == nil {
		return strings.Join(toks, " ")
	}
	return strings.Join(t.decoder.decode(toks), "")
}

// sortedAdded returns added tokens longest first, for matching.
func sortedAdded(list []*addedToken) []*addedToken {
	out := append([]*addedToken(nil), list...)
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].content) > len(out[j].content) })
	return out
}

func hasByteFallback(d decoder) bool {
	switch v := d.(type) {
	case decByteFallback:
		return true
	case decSequence:
		for _, c := range v {
			if hasByteFallback(c) {
				return true
			}
		}
	}
	return false
}
