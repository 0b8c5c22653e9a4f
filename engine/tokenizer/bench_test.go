package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchText is about 64 KiB of English prose with some punctuation and
// whitespace structure: the default model's held-out text, repeated.
func benchText(b *testing.B) string {
	data, err := os.ReadFile(filepath.Join(testdataRoot, "default", "heldout.txt"))
	if err != nil {
		b.Fatal(err)
	}
	return strings.Repeat(string(data), 1+(64<<10)/len(data))
}

func benchEncode(b *testing.B, rel string, fresh bool) {
	tok := loadTok(b, rel)
	text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		if fresh {
			// Measure BPE itself, not the word cache.
			b.StopTimer()
			tok.cacheMu.Lock()
			clear(tok.cache)
			tok.cacheMu.Unlock()
			b.StartTimer()
		}
		if _, err := tok.Encode(text, EncodeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// Byte-level BPE (GPT-2 regex, 2048 tokens), with a warm word cache.
func BenchmarkEncodeByteLevel(b *testing.B) { benchEncode(b, "default/tokenizer.json", false) }

// The same with the cache cleared before every pass.
func BenchmarkEncodeByteLevelNoCache(b *testing.B) { benchEncode(b, "default/tokenizer.json", true) }

// LLaMA-3 regex split.
func BenchmarkEncodeLlama3(b *testing.B) { benchEncode(b, "tokenizers/llama3.tokenizer.json", false) }

// SentencePiece-style without pre-tokenizer: the whole text is one word,
// merged through the heap.
func BenchmarkEncodeLlama2(b *testing.B) { benchEncode(b, "tokenizers/llama2.tokenizer.json", false) }

func BenchmarkDecodeStream(b *testing.B) {
	tok := loadTok(b, "default/tokenizer.json")
	text := benchText(b)
	ids, err := tok.Encode(text, EncodeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		d := tok.DecodeStream()
		for _, id := range ids {
			d.Add(id)
		}
	}
}
