package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEncode: encoding never panics on any input (including invalid UTF-8),
// byte-level BPE round-trips every valid UTF-8 text exactly, and streamed
// decoding equals full decoding.
//
//	go test ./engine/tokenizer/ -run '^$' -fuzz FuzzEncode -fuzztime 60s
func FuzzEncode(f *testing.F) {
	byteLevel := loadTok(f, "default/tokenizer.json")
	llama3 := loadTok(f, "tokenizers/llama3.tokenizer.json")
	sentencePiece := loadTok(f, "tokenizers/llama2.tokenizer.json")
	for _, c := range loadExpected(f).Tokenizers["default/tokenizer.json"].Cases {
		f.Add(c.Text, true)
	}
	f.Add("\xff\xfe<|eos|>\xe4\xb8", false)
	f.Fuzz(func(t *testing.T, text string, allow bool) {
		opts := EncodeOptions{AllowSpecial: allow}
		for _, tok := range []*Tokenizer{byteLevel, llama3} {
			ids, err := tok.Encode(text, opts)
			if err != nil {
				t.Fatalf("Encode(%+q): %v", text, err)
			}
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("Encode(%+q) produced id %d outside [0, %d)", text, id, tok.VocabSize())
				}
			}
			full := tok.Decode(ids)
			if utf8.ValidString(text) && full != text {
				t.Fatalf("round trip of %+q gave %+q (ids %v)", text, full, ids)
			}
			if s := streamDecode(tok, ids); s != full {
				t.Fatalf("stream decode %+q != decode %+q (ids %v)", s, full, ids)
			}
		}
		ids, err := sentencePiece.Encode(text, opts)
		if err != nil {
			t.Fatalf("SentencePiece Encode(%+q): %v", text, err)
		}
		full := sentencePiece.Decode(ids)
		if utf8.ValidString(text) && !allow && !strings.Contains(text, "▁") && !strings.HasPrefix(text, " ") && full != text {
			// Lossless apart from the "▁" in the input and the leading
			// space that the decoder's Strip removes after Prepend.
			t.Fatalf("SentencePiece round trip of %+q gave %+q", text, full)
		}
		if s := streamDecode(sentencePiece, ids); s != full {
			t.Fatalf("SentencePiece stream decode %+q != decode %+q", s, full)
		}
	})
}

// FuzzDecodeStream: for arbitrary id sequences (unknown ids, lone byte
// tokens, specials), streaming decode concatenates to the full decode.
func FuzzDecodeStream(f *testing.F) {
	toks := []*Tokenizer{loadTok(f, "default/tokenizer.json"), loadTok(f, "tokenizers/llama2.tokenizer.json"),
		loadTok(f, "tokenizers/metaspace.tokenizer.json")}
	f.Add([]byte{1, 2, 3, 200, 7}, false)
	f.Fuzz(func(t *testing.T, raw []byte, skip bool) {
		for _, tok := range toks {
			ids := make([]int, 0, len(raw)/2)
			for i := 0; i+1 < len(raw); i += 2 {
				ids = append(ids, (int(raw[i])<<8|int(raw[i+1]))%(tok.VocabSize()+3)-1)
			}
			opts := DecodeOptions{SkipSpecial: skip}
			d := tok.DecodeStreamWith(opts)
			var sb strings.Builder
			for _, id := range ids {
				sb.WriteString(d.Add(id))
			}
			sb.WriteString(d.Flush())
			if full := tok.DecodeWith(ids, opts); sb.String() != full {
				t.Fatalf("ids %v: stream %+q, full %+q", ids, sb.String(), full)
			}
		}
	})
}
