package tokenizer

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func loadTok(t testing.TB, rel string) *Tokenizer {
	t.Helper()
	tok, err := Load(filepath.Join(testdataRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// The expectations are the Unicode standard's own examples of "U+FFFD
// substitution of maximal subparts" (chapter 3.9), the rule Rust's
// from_utf8_lossy implements.
func TestLossyUTF8MaximalSubparts(t *testing.T) {
	cases := []struct {
		in   []byte
		want string
	}{
		{[]byte{0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2, 0x62, 0x80, 0x63, 0x80, 0xBF, 0x64},
			"a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd"},
		{[]byte{0xED, 0xA0, 0x80}, "\uFFFD\uFFFD\uFFFD"},             // surrogate: ED then A0 is ill-formed
		{[]byte{0xE4, 0xB8}, "\uFFFD"},                               // truncated 3-byte character
		{[]byte{0xF4, 0x90, 0x80, 0x80}, "\uFFFD\uFFFD\uFFFD\uFFFD"}, // above U+10FFFF
		{[]byte("ok \xe4\xb8\xad"), "ok 中"},
	}
	for _, c := range cases {
		if got := lossyUTF8(c.in); got != c.want {
			t.Errorf("lossyUTF8(% x) = %+q, want %+q", c.in, got, c.want)
		}
	}
}

func TestByteFallbackDecoder(t *testing.T) {
	got := strings.Join(decByteFallback{}.decode([]string{"<0xE4>", "<0xB8>", "<0xAD>", "a", "<0xE4>", "b", "<0x41>", "<0xzz>"}), "")
	// A valid run becomes its text; an invalid run one U+FFFD per byte;
	// "<0xzz>" is not a byte token and stays as it is.
	if want := "中a\uFFFDbA<0xzz>"; got != want {
		t.Errorf("decoded %+q, want %+q", got, want)
	}
}

// withComponent returns the gpt2 fixture with one top-level field replaced.
func withComponent(t *testing.T, field string, value any) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testdataRoot, "tokenizers", "gpt2.tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(field, "model.") {
		m["model"].(map[string]any)[strings.TrimPrefix(field, "model.")] = value
	} else {
		m[field] = value
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseRejectsUnsupported(t *testing.T) {
	cases := []struct {
		field   string
		value   any
		errHas  string
		comment string
	}{
		{"normalizer", map[string]any{"type": "NFKC"}, `normalizer type "NFKC"`, "no compatibility tables"},
		{"normalizer", map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": " +"}, "content": " "}, "Replace", "regex replace"},
		{"pre_tokenizer", map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\w+`}, "behavior": "Isolated", "invert": false}, "regex", "unknown regex"},
		{"pre_tokenizer", map[string]any{"type": "Whitespace"}, `"Whitespace"`, "unsupported pre-tokenizer"},
		{"pre_tokenizer", map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
			map[string]any{"type": "Digits", "individual_digits": true}}}, "ByteLevel must be the last", "byte mapping in the middle"},
		{"decoder", map[string]any{"type": "WordPiece"}, `decoder type "WordPiece"`, "unsupported decoder"},
		{"model.type", "WordPiece", `"WordPiece"`, "unsupported model"},
		{"model.merges", []any{"Ġ zzzz"}, "merge 0", "merge of an unknown token"},
		{"model.dropout", 0.1, "dropout", "random encoding"},
		{"model.unk_token", "<nope>", "unk_token", "unk not in vocabulary"},
	}
	for _, c := range cases {
		_, err := Parse(withComponent(t, c.field, c.value))
		if err == nil || !strings.Contains(err.Error(), c.errHas) {
			t.Errorf("%s (%s): err = %v, want one mentioning %q", c.field, c.comment, err, c.errHas)
		}
	}
	if _, err := Parse([]byte(`{"model": null}`)); err == nil {
		t.Error("a file without a model parsed")
	}
	if _, err := Parse([]byte(`{`)); err == nil {
		t.Error("truncated JSON parsed")
	}
}

func TestNFCNormalizer(t *testing.T) {
	plain := loadTok(t, "tokenizers/gpt2.tokenizer.json")
	nfc, err := Parse(withComponent(t, "normalizer", map[string]any{"type": "NFC"}))
	if err != nil {
		t.Fatal(err)
	}
	// Already-composed text is NFC: the normalizer must not change it.
	for _, s := range []string{"café naïve 日本語 🤗 Ελληνικά", "plain ascii"} {
		a, _ := plain.Encode(s, EncodeOptions{})
		b, err := nfc.Encode(s, EncodeOptions{})
		if err != nil || !slices.Equal(a, b) {
			t.Errorf("NFC tokenizer on %q: %v, %v; without NFC %v", s, b, err, a)
		}
	}
	// A combining sequence needs composition, which is not implemented:
	// it must be an error, not a silently different tokenization.
	if _, err := nfc.Encode("cafe\u0301", EncodeOptions{}); err == nil {
		t.Error("NFC tokenizer accepted a combining mark it cannot compose")
	}
}

// mergeLong (the heap) must agree with mergeShort (the quadratic loop) on
// every word; each is used for a different word length in encode.
func TestMergeLongMatchesShort(t *testing.T) {
	for _, rel := range []string{"default/tokenizer.json", "tokenizers/llama2.tokenizer.json"} {
		tok := loadTok(t, rel)
		e := loadExpected(t)
		rng := rand.New(rand.NewSource(1))
		var texts []string
		for _, c := range e.Tokenizers[rel].Cases {
			texts = append(texts, c.Text)
		}
		for i := 0; i < 300; i++ {
			s := texts[rng.Intn(len(texts))]
			if s == "" {
				continue
			}
			a := rng.Intn(len(s))
			b := a + rng.Intn(len(s)-a) + 1
			w := s[a:b]
			short := tok.model.mergeShort(tok.model.initial(w))
			long := tok.model.initial(w)
			if len(long) > 1 {
				long = tok.model.mergeLong(long)
			}
			if !slices.Equal(short, long) {
				t.Fatalf("%s: word %q: quadratic merge %v, heap merge %v", rel, w, short, long)
			}
		}
	}
}

func TestDecodeStreamHoldsPartialCharacters(t *testing.T) {
	tok := loadTok(t, "default/tokenizer.json")
	text := "日本語 🤗 👨\u200d👩\u200d👧 done"
	ids, err := tok.Encode(text, EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) <= utf8.RuneCountInString(text) {
		t.Fatalf("expected rare characters to be split into byte tokens, got %d ids for %d runes", len(ids), utf8.RuneCountInString(text))
	}
	d := tok.DecodeStream()
	var sb strings.Builder
	empty := 0
	for _, id := range ids {
		piece := d.Add(id)
		if strings.ContainsRune(piece, utf8.RuneError) {
			t.Fatalf("stream emitted a broken character: %+q", piece)
		}
		if piece == "" {
			empty++
		}
		sb.WriteString(piece)
	}
	if rest := d.Flush(); rest != "" {
		t.Errorf("Flush after complete text returned %+q", rest)
	}
	if sb.String() != text {
		t.Errorf("stream = %+q, want %+q", sb.String(), text)
	}
	if empty == 0 {
		t.Error("no Add call held back a partial character; the test text does not exercise the stream")
	}
	// An incomplete character at the end comes out of Flush as U+FFFD,
	// as the full decode renders it.
	partial := ids[:1]
	if got, want := streamDecode(tok, partial), tok.Decode(partial); got != want {
		t.Errorf("stream of a partial character = %+q, decode = %+q", got, want)
	}
}

func TestSpecialTokens(t *testing.T) {
	tok := loadTok(t, "default/tokenizer.json")
	bos, okB := tok.TokenID("<|bos|>")
	eos, okE := tok.TokenID("<|eos|>")
	if !okB || !okE || tok.Special() != (SpecialTokens{BOS: bos, EOS: eos}) {
		t.Fatalf("Special() = %+v, TokenID gives bos %d %v, eos %d %v", tok.Special(), bos, okB, eos, okE)
	}
	if !tok.IsSpecial(eos) || tok.IsSpecial(0) {
		t.Error("IsSpecial wrong")
	}
	if s, ok := tok.Token(eos); !ok || s != "<|eos|>" {
		t.Errorf("Token(eos) = %q %v", s, ok)
	}
	if _, ok := tok.Token(tok.VocabSize()); ok {
		t.Error("Token beyond the vocabulary succeeded")
	}
	if id, ok := tok.TokenID("Ġthe"); !ok || tok.Decode([]int{id}) != " the" {
		t.Errorf("TokenID(Ġthe) = %d %v", id, ok)
	}
	// Out-of-range ids are skipped by Decode, as the reference does.
	if got := tok.Decode([]int{-5, tok.VocabSize() + 3, bos}); got != "<|bos|>" {
		t.Errorf("Decode with invalid ids = %q", got)
	}
	gpt2 := loadTok(t, "tokenizers/gpt2.tokenizer.json")
	if gpt2.Special().BOS != -1 {
		t.Errorf("gpt2 BOS = %d, want none", gpt2.Special().BOS)
	}
	if err := gpt2.SetSpecial(SpecialTokens{BOS: 5000, EOS: -1}); err == nil {
		t.Error("SetSpecial accepted an id outside the vocabulary")
	}
	eot, _ := gpt2.TokenID("<|endoftext|>")
	if err := gpt2.SetSpecial(SpecialTokens{BOS: eot, EOS: eot}); err != nil {
		t.Fatal(err)
	}
	ids, err := gpt2.Encode("hi", EncodeOptions{AddBOS: true})
	if err != nil || len(ids) == 0 || ids[0] != eot {
		t.Errorf("AddBOS after SetSpecial: %v %v", ids, err)
	}
}

// TestDefaultModelReference ties the tokenizer to the shipped model's
// reference data, which PyTorch produced from ids made by the Python
// encoder in models/train/bpe.py: the Go tokenizer must give the same ids.
func TestDefaultModelReference(t *testing.T) {
	dir := filepath.Join(testdataRoot, "default")
	tok := loadTok(t, "default/tokenizer.json")
	var cfg struct {
		VocabSize int `json:"vocab_size"`
		BOS       int `json:"bos_token_id"`
		EOS       int `json:"eos_token_id"`
		MaxCtx    int `json:"max_context"`
	}
	var ref struct {
		Prompt     string `json:"prompt"`
		PromptIDs  []int  `json:"prompt_ids"`
		GreedyIDs  []int  `json:"greedy_ids"`
		GreedyText string `json:"greedy_text"`
	}
	var ppl struct {
		Documents   int `json:"documents"`
		PerDocument []struct {
			Tokens int `json:"tokens"`
		} `json:"per_document"`
	}
	for name, v := range map[string]any{"config.json": &cfg, "reference.json": &ref, "perplexity.json": &ppl} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if tok.VocabSize() != cfg.VocabSize || tok.Special() != (SpecialTokens{BOS: cfg.BOS, EOS: cfg.EOS}) {
		t.Errorf("tokenizer vocab %d special %+v; config.json vocab %d bos %d eos %d",
			tok.VocabSize(), tok.Special(), cfg.VocabSize, cfg.BOS, cfg.EOS)
	}
	ids, err := tok.Encode(ref.Prompt, EncodeOptions{AddBOS: true})
	if err != nil || !slices.Equal(ids, ref.PromptIDs) {
		t.Errorf("prompt ids %v (%v), reference %v", ids, err, ref.PromptIDs)
	}
	if got := tok.DecodeWith(ref.GreedyIDs, DecodeOptions{SkipSpecial: true}); got != ref.GreedyText {
		t.Errorf("greedy text %q, reference %q", got, ref.GreedyText)
	}
	held, err := os.ReadFile(filepath.Join(dir, "heldout.txt"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(held), "\n%\n")
	if len(docs) != ppl.Documents || len(docs) != len(ppl.PerDocument) {
		t.Fatalf("heldout.txt has %d documents, perplexity.json %d", len(docs), ppl.Documents)
	}
	for i, d := range docs {
		ids, err := tok.Encode(d, EncodeOptions{AddBOS: true})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cfg.EOS)
		if len(ids) != ppl.PerDocument[i].Tokens || len(ids) > cfg.MaxCtx {
			t.Errorf("held-out document %d: %d tokens, perplexity.json says %d (max context %d)",
				i, len(ids), ppl.PerDocument[i].Tokens, cfg.MaxCtx)
		}
	}
}

// LLaMA-3's tokenizer.json nests its BOS template in a Sequence
// post-processor; BOS must still be found there.
func TestBOSFromSequencePostProcessor(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testdataRoot, "tokenizers", "llama3.tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	tmpl := m["post_processor"]
	m["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{
		map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}, tmpl}}
	// Rename the BOS token so that only the template can identify it.
	added := m["added_tokens"].([]any)
	added[0].(map[string]any)["content"] = "<|start|>"
	vocab := m["model"].(map[string]any)["vocab"].(map[string]any)
	vocab["<|start|>"] = vocab["<|begin_of_text|>"]
	delete(vocab, "<|begin_of_text|>")
	st := tmpl.(map[string]any)["special_tokens"].(map[string]any)
	st["<|start|>"] = st["<|begin_of_text|>"]
	delete(st, "<|begin_of_text|>")
	for _, p := range tmpl.(map[string]any)["single"].([]any) {
		if sp, ok := p.(map[string]any)["SpecialToken"]; ok {
			sp.(map[string]any)["id"] = "<|start|>"
		}
	}
	out, _ := json.Marshal(m)
	tok, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := tok.TokenID("<|start|>"); tok.Special().BOS != id || id == 0 {
		t.Errorf("BOS = %d, want %d (<|start|>)", tok.Special().BOS, id)
	}
}
