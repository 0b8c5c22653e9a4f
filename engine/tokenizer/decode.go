package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// decoder turns token strings into text. Like `tokenizers`' decode_chain,
// each decoder maps a list of strings to a list of strings, and the final
// list is concatenated.
type decoder interface {
	decode(toks []string) []string
}

type decSequence []decoder

func (q decSequence) decode(toks []string) []string {
	for _, d := range q {
		toks = d.decode(toks)
	}
	return toks
}

// decByteLevel maps each character back to its byte and joins everything
// into one string. A token with a character outside the byte table (an
// added token such as "<|eos|>" never has one, but "日" would) contributes
// its own UTF-8 bytes. Invalid UTF-8 becomes U+FFFD as in Rust's
// String::from_utf8_lossy.
type decByteLevel struct{}

func (decByteLevel) decode(toks []string) []string {
	var buf []byte
	for _, t := range toks {
		start := len(buf)
		ok := true
		for _, r := range t {
			b, found := charToByte[r]
			if !found {
				ok = false
				break
			}
			buf = append(buf, b)
		}
		if !ok {
			buf = append(buf[:start], t...)
		}
	}
	return []string{lossyUTF8(buf)}
}

// lossyUTF8 converts bytes to a string, replacing each maximal ill-formed
// subsequence with one U+FFFD, the rule Rust's from_utf8_lossy follows (Go's
// own conversions replace byte by byte instead).
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			sb.Write(b[i : i+w])
			i += w
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += maximalPrefix(b[i:])
	}
	return sb.String()
}

// maximalPrefix is the length (at least 1) of the longest prefix of b that
// is the start of some well-formed UTF-8 sequence, per the Unicode
// standard's table of well-formed byte sequences.
func maximalPrefix(b []byte) int {
	c := b[0]
	var n int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		n = 2
	case c == 0xE0:
		n, lo = 3, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		n = 3
	case c == 0xED:
		n, hi = 3, 0x9F
	case c == 0xF0:
		n, lo = 4, 0x90
	case c >= 0xF1 && c <= 0xF3:
		n = 4
	case c == 0xF4:
		n, hi = 4, 0x8F
	default:
		return 1
	}
	k := 1
	for ; k < n && k < len(b); k++ {
		if k == 1 {
			if b[k] < lo || b[k] > hi {
				break
			}
		} else if b[k] < 0x80 || b[k] > 0xBF {
			break
		}
	}
	return k
}

// decMetaspace turns the replacement character back into spaces; in the
// first token, replacement characters are dropped instead (they were
// prepended by the pre-tokenizer) unless the prepend scheme is "never".
type decMetaspace struct {
	repl   rune
	scheme prependScheme
}

func (d decMetaspace) decode(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		var sb strings.Builder
		for _, r := range t {
			if r == d.repl {
				if i == 0 && d.scheme != prependNever {
					continue
				}
				r = ' '
			}
			sb.WriteRune(r)
		}
		out[i] = sb.String()
	}
	return out
}

type decReplace struct{ from, to string }

func (d decReplace) decode(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = strings.ReplaceAll(t, d.from, d.to)
	}
	return out
}

// decByteFallback turns runs of <0xNN> tokens into text: a run that is
// valid UTF-8 becomes one string, otherwise each of its bytes becomes
// U+FFFD (the reference's rule, different from from_utf8_lossy).
type decByteFallback struct{}

func (decByteFallback) decode(toks []string) []string {
	var out []string
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range toks {
		if b, ok := fallbackByte(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// fallbackByte parses "<0xNN>" (either hex case, as Rust's from_str_radix).
func fallbackByte(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	hex := func(c byte) (byte, bool) {
		switch {
		case c >= '0' && c <= '9':
			return c - '0', true
		case c >= 'a' && c <= 'f':
			return c - 'a' + 10, true
		case c >= 'A' && c <= 'F':
			return c - 'A' + 10, true
		}
		return 0, false
	}
	hi, ok1 := hex(t[3])
	lo, ok2 := hex(t[4])
	return hi<<4 | lo, ok1 && ok2
}

type decFuse struct{}

func (decFuse) decode(toks []string) []string { return []string{strings.Join(toks, "")} }

// decStrip removes up to start leading and stop trailing copies of a
// character from each token (LLaMA-2 strips the space its normalizer
// prepended).
type decStrip struct {
	content     rune
	start, stop int
}

func (d decStrip) decode(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		rs := []rune(t)
		a := 0
		for a < d.start && a < len(rs) && rs[a] == d.content {
			a++
		}
		b := len(rs)
		for k := 0; k < d.stop && b > a && rs[b-1] == d.content; k++ {
			b--
		}
		out[i] = string(rs[a:b])
	}
	return out
}

func parseDecoder(raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	switch c.Type {
	case "Sequence":
		var j struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("decoder Sequence: %w", err)
		}
		var q decSequence
		for i, r := range j.Decoders {
			d, err := parseDecoder(r)
			if err != nil {
				return nil, fmt.Errorf("decoder Sequence[%d]: %w", i, err)
			}
			if d != nil {
				q = append(q, d)
			}
		}
		return q, nil
	case "ByteLevel":
		return decByteLevel{}, nil
	case "Metaspace":
		var j metaspaceJSON
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("decoder Metaspace: %w", err)
		}
		r, scheme, _, err := j.parse("decoder Metaspace")
		if err != nil {
			return nil, err
		}
		return decMetaspace{r, scheme}, nil
	case "Replace":
		var j struct {
			Pattern pattern `json:"pattern"`
			Content string  `json:"content"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("decoder Replace: %w", err)
		}
		if j.Pattern.String == nil || *j.Pattern.String == "" {
			return nil, fmt.Errorf("decoder Replace: only non-empty String patterns are supported, got %s", raw)
		}
		return decReplace{*j.Pattern.String, j.Content}, nil
	case "ByteFallback":
		return decByteFallback{}, nil
	case "Fuse":
		return decFuse{}, nil
	case "Strip":
		var j struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &j); err != nil {
			return nil, fmt.Errorf("decoder Strip: %w", err)
		}
		rs := []rune(j.Content)
		if len(rs) != 1 {
			return nil, fmt.Errorf("decoder Strip: content %q must be one character", j.Content)
		}
		return decStrip{rs[0], j.Start, j.Stop}, nil
	}
	return nil, fmt.Errorf("decoder type %q is not supported", c.Type)
}

// Decoder decodes a stream of ids incrementally, for printing generated
// text as it arrives. Create one with Tokenizer.DecodeStream.
//
// A token can end in the middle of a UTF-8 character (byte-level and
// byte-fallback vocabularies split rare characters into bytes), and some
// decoders treat the first token specially (Strip, Metaspace), so text
// cannot be produced token by token. Like `tokenizers`' DecodeStream, the
// decoder re-decodes a short window that starts with already-printed
// tokens and returns only what the new tokens add, holding it back while
// the window ends in U+FFFD (an incomplete character). Concatenating every
// Add result and the final Flush gives Decode of all ids.
type Decoder struct {
	t           *Tokenizer
	opts        DecodeOptions
	ids         []int
	prefixStart int    // window start: ids before it are done
	readStart   int    // ids[prefixStart:readStart] are printed
	prefix      string // decode of ids[prefixStart:readStart]
}

// DecodeStream returns an incremental decoder (special tokens included).
func (t *Tokenizer) DecodeStream() *Decoder { return &Decoder{t: t} }

// DecodeStreamWith returns an incremental decoder with options.
func (t *Tokenizer) DecodeStreamWith(opts DecodeOptions) *Decoder {
	return &Decoder{t: t, opts: opts}
}

// Add feeds one id and returns the text it completes (often "", e.g. in the
// middle of a multi-byte character).
func (d *Decoder) Add(id int) string {
	d.ids = append(d.ids, id)
	if d.endsInByteRun() {
		return ""
	}
	text := d.t.DecodeWith(d.ids[d.prefixStart:], d.opts)
	if len(text) <= len(d.prefix) || strings.HasSuffix(text, "\uFFFD") || !strings.HasPrefix(text, d.prefix) {
		return ""
	}
	out := text[len(d.prefix):]
	d.prefixStart = d.readStart
	d.readStart = len(d.ids)
	d.prefix = d.t.DecodeWith(d.ids[d.prefixStart:d.readStart], d.opts)
	return out
}

// endsInByteRun reports whether the last token that decoding will see is a
// <0xNN> byte token of a ByteFallback decoder. The reference renders a
// whole run of byte tokens as U+FFFD when any part of it is invalid, so a
// later byte can turn text that looked complete into replacement
// characters; the stream therefore waits until the run ends.
func (d *Decoder) endsInByteRun() bool {
	if d.t.fallbackToken == nil {
		return false
	}
	for i := len(d.ids) - 1; i >= d.readStart; i-- {
		id := d.ids[i]
		if _, ok := d.t.Token(id); !ok || d.opts.SkipSpecial && d.t.IsSpecial(id) {
			continue // invisible to decoding
		}
		return d.t.fallbackToken[id]
	}
	return false
}

// Flush returns any text still held back (e.g. an incomplete character at
// the end, as U+FFFD) and resets the decoder.
func (d *Decoder) Flush() string {
	var out string
	if d.readStart < len(d.ids) {
		text := d.t.DecodeWith(d.ids[d.prefixStart:], d.opts)
		if strings.HasPrefix(text, d.prefix) {
			out = text[len(d.prefix):]
		} else {
			out = text
		}
	}
	*d = Decoder{t: d.t, opts: d.opts}
	return out
}
