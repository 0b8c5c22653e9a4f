// Builds the small test tokenizers under testdata/tokenizers/ and computes the
// expected token ids for the Go tokenizer tests with Hugging Face's own
// implementation (the npm `tokenizers` package: the Rust library's Node
// binding, so the same code as the Python `tokenizers`).
//
//   mkdir -p /tmp/hftok && (cd /tmp/hftok && npm install tokenizers@0.23.2)
//   NODE_PATH=/tmp/hftok/node_modules node models/train/tokenizer_fixtures.js build testdata/tokenizers
//   NODE_PATH=/tmp/hftok/node_modules node models/train/tokenizer_fixtures.js expect testdata/tokenizers \
//       testdata/default/tokenizer.json testdata/tokenizers/*.tokenizer.json
//
// build: trains two small BPE vocabularies with the HF trainer on a little
// English text (Debian's fortunes: literature and wisdom) plus a few lines of
// other scripts, and writes them in five layouts that real models use:
//   gpt2        ByteLevel pre-tokenizer (GPT-2 regex), ByteLevel decoder, merges as "a b" strings
//   llama3      Split(LLaMA-3 regex) + ByteLevel(use_regex=false), ignore_merges, BOS template
//   qwen2       Split(Qwen2 regex: single digits) + ByteLevel(use_regex=false), non-special added token
//   llama2      SentencePiece style: Prepend/Replace normalizer, no pre-tokenizer, byte fallback,
//               decoder Replace/ByteFallback/Fuse/Strip
//   metaspace   SentencePiece style, newer layout: Metaspace pre-tokenizer (prepend_scheme "first",
//               split) and Metaspace decoder, byte fallback
// The Node binding trains only with the default trainer settings (it cannot
// set a vocabulary size), so the trained merge list is cut to its first
// MERGES entries. BPE learns merges greedily in order, so the cut list is
// what a smaller vocabulary size would have produced; each kept merge's
// parts are bytes, alphabet characters or results of earlier kept merges.
//
// expect: encodes every text in cases.json with each tokenizer and writes
// expected.json: ids with special tokens recognised in the text
// (HF's encode), ids with special tokens treated as text (the same tokenizer
// with its special added tokens removed), ids with add_special_tokens, and
// HF's decode of the ids with and without skip_special_tokens.

"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const hf = require("tokenizers");

const MERGES = 900;
const FORTUNES = "/usr/share/games/fortunes";

// A few lines in other scripts, so the trained alphabets and merges include
// accented Latin, Greek, Cyrillic and CJK, not only ASCII.
const EXTRA = `
Le café est très naïve; the résumé of the señor was déjà vu. Straße, Größe, übermäßig.
Ελληνικά γράμματα και λέξεις. Русский язык и слова, привет мир.
日本語の文章です。中文的句子，你好世界。한국어 문장입니다.
`.repeat(20);

function bytesToUnicode() {
  const keep = new Set();
  for (let b = 0x21; b <= 0x7e; b++) keep.add(b);
  for (let b = 0xa1; b <= 0xac; b++) keep.add(b);
  for (let b = 0xae; b <= 0xff; b++) keep.add(b);
  const table = [];
  let extra = 0;
  for (let b = 0; b < 256; b++) table.push(keep.has(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + extra++));
  return table;
}

function corpusFile() {
  let text = "";
  for (const f of ["literature", "wisdom"]) text += fs.readFileSync(path.join(FORTUNES, f + ".u8"), "utf8");
  text = text.split(/^%$/m).join("\n") + EXTRA;
  const p = path.join(os.tmpdir(), "tlite-tokfixture-corpus.txt");
  fs.writeFileSync(p, text);
  return p;
}

function trainRaw(model, preTokenizer, corpus) {
  const tok = new hf.Tokenizer(model);
  tok.setPreTokenizer(preTokenizer);
  tok.train([corpus]);
  const p = path.join(os.tmpdir(), "tlite-tokfixture-trained.json");
  tok.save(p);
  const j = JSON.parse(fs.readFileSync(p, "utf8"));
  const merges = j.model.merges.slice(0, MERGES).map((m) => (typeof m === "string" ? m.split(" ") : m));
  return { vocab: j.model.vocab, merges };
}

function addedToken(id, content, special, normalized = false) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized, special };
}

function template(bos, id) {
  return {
    type: "TemplateProcessing",
    single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
    pair: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
      { SpecialToken: { id: bos, type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
    special_tokens: { [bos]: { id: bos, ids: [id], tokens: [bos] } },
  };
}

function tokenizerJSON(parts) {
  return Object.assign({ version: "1.0", truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: null, post_processor: null, decoder: null }, parts);
}

function bpeModel(vocab, merges, opts) {
  return Object.assign({ type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges }, opts);
}

const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function byteLevel(extra) {
  return Object.assign({ type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true }, extra);
}

function build(outDir) {
  fs.mkdirSync(outDir, { recursive: true });
  const corpus = corpusFile();
  const written = {};

  // Byte-level family: 256 byte symbols in byte order, then merge results.
  const bl = trainRaw(hf.BPE.empty(), hf.byteLevelPreTokenizer(false, true), corpus);
  const vocab = {};
  for (const c of bytesToUnicode()) vocab[c] = Object.keys(vocab).length;
  for (const [a, b] of bl.merges) if (!(a + b in vocab)) vocab[a + b] = Object.keys(vocab).length;
  const n = Object.keys(vocab).length;
  const withSpecials = (names) => {
    const v = Object.assign({}, vocab);
    names.forEach((s, i) => (v[s] = n + i));
    return v;
  };

  // gpt2 also carries added tokens with the matching options: <mask>
  // swallows spaces to its left (RoBERTa's), <R> to its right, and "cat"
  // matches only as a whole word; "日本 x" has characters outside the byte
  // table, which the ByteLevel decoder passes through as UTF-8.
  const opt = (tok, o) => Object.assign(tok, o);
  written.gpt2 = tokenizerJSON({
    added_tokens: [addedToken(n, "<|endoftext|>", true), opt(addedToken(n + 1, "<mask>", true), { lstrip: true }),
      opt(addedToken(n + 2, "<R>", false), { rstrip: true }), opt(addedToken(n + 3, "cat", false), { single_word: true }),
      addedToken(n + 4, "日本 x", false)],
    pre_tokenizer: byteLevel(), post_processor: byteLevel(), decoder: byteLevel(),
    model: bpeModel(withSpecials(["<|endoftext|>", "<mask>", "<R>", "cat", "日本 x"]), bl.merges.map((m) => m.join(" "))),
  });
  written.llama3 = tokenizerJSON({
    added_tokens: [addedToken(n, "<|begin_of_text|>", true), addedToken(n + 1, "<|end_of_text|>", true)],
    pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: LLAMA3_PATTERN }, behavior: "Isolated", invert: false },
      byteLevel({ use_regex: false })] },
    post_processor: template("<|begin_of_text|>", n),
    decoder: byteLevel(),
    model: bpeModel(withSpecials(["<|begin_of_text|>", "<|end_of_text|>"]), bl.merges, { ignore_merges: true }),
  });
  written.qwen2 = tokenizerJSON({
    added_tokens: [addedToken(n, "<|endoftext|>", true), addedToken(n + 1, "<|im_start|>", true),
      addedToken(n + 2, "<|im_end|>", true), addedToken(n + 3, "<think>", false)],
    pre_tokenizer: { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: QWEN2_PATTERN }, behavior: "Isolated", invert: false },
      byteLevel({ use_regex: false })] },
    post_processor: byteLevel(),
    decoder: byteLevel(),
    model: bpeModel(withSpecials(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>"]), bl.merges,
      { ignore_merges: false }),
  });

  // SentencePiece family: <unk> <s> </s>, the 256 <0xNN> byte tokens, the
  // trained alphabet, then merge results.
  const sp = trainRaw(hf.BPE.init({}, [], { byteFallback: true, unkToken: "<unk>", fuseUnk: true }),
    hf.metaspacePreTokenizer("\u2581", "always", true), corpus);
  const spVocab = { "<unk>": 0, "<s>": 1, "</s>": 2 };
  for (let b = 0; b < 256; b++) spVocab["<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">"] = 3 + b;
  const alphabet = Object.entries(sp.vocab).filter(([t]) => [...t].length === 1).sort((x, y) => x[1] - y[1]);
  for (const [t] of alphabet) if (!(t in spVocab)) spVocab[t] = Object.keys(spVocab).length;
  for (const [a, b] of sp.merges) if (!(a + b in spVocab)) spVocab[a + b] = Object.keys(spVocab).length;
  const spAdded = [addedToken(0, "<unk>", true), addedToken(1, "<s>", true), addedToken(2, "</s>", true)];
  const spModel = (merges) => bpeModel(spVocab, merges, { unk_token: "<unk>", fuse_unk: true, byte_fallback: true });

  written.llama2 = tokenizerJSON({
    added_tokens: spAdded,
    normalizer: { type: "Sequence", normalizers: [
      { type: "Prepend", prepend: "\u2581" }, { type: "Replace", pattern: { String: " " }, content: "\u2581" }] },
    post_processor: template("<s>", 1),
    decoder: { type: "Sequence", decoders: [
      { type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" },
      { type: "Strip", content: " ", start: 1, stop: 0 }] },
    model: spModel(sp.merges.map((m) => m.join(" "))),
  });
  written.metaspace = tokenizerJSON({
    added_tokens: spAdded,
    pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: true },
    post_processor: template("<s>", 1),
    decoder: { type: "Sequence", decoders: [
      { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: true },
      { type: "ByteFallback" }, { type: "Fuse" }] },
    model: spModel(sp.merges),
  });

  for (const [name, j] of Object.entries(written)) {
    const p = path.join(outDir, name + ".tokenizer.json");
    fs.writeFileSync(p, JSON.stringify(j, null, 1) + "\n");
    hf.Tokenizer.fromFile(p); // must load in HF as written
    console.log(`wrote ${p}: ${Object.keys(j.model.vocab).length} vocab, ${j.model.merges.length} merges`);
  }
}

async function expect(outDir, tokenizerPaths) {
  const cases = JSON.parse(fs.readFileSync(path.join(outDir, "cases.json"), "utf8"));
  const out = { generator: "npm tokenizers " + require("tokenizers/package.json").version, tokenizers: {} };
  for (const p of tokenizerPaths) {
    const raw = JSON.parse(fs.readFileSync(p, "utf8"));
    const tok = hf.Tokenizer.fromString(JSON.stringify(raw));
    // "Special tokens as text": the same tokenizer without its special added
    // tokens (non-special added tokens are matched in text either way).
    const plainRaw = Object.assign({}, raw, { added_tokens: raw.added_tokens.filter((t) => !t.special) });
    if (plainRaw.post_processor && plainRaw.post_processor.type === "TemplateProcessing") plainRaw.post_processor = null;
    const plain = hf.Tokenizer.fromString(JSON.stringify(plainRaw));
    const rows = [];
    for (const text of cases.texts) {
      const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      rows.push({
        text,
        ids,
        ids_special_as_text: (await plain.encode(text, null, { addSpecialTokens: false })).getIds(),
        ids_add_special: (await tok.encode(text, null, { addSpecialTokens: true })).getIds(),
        decoded: await tok.decode(ids, false),
        decoded_skip_special: await tok.decode(ids, true),
      });
    }
    out.tokenizers[path.relative(path.dirname(outDir), p)] = { vocab_size: tok.getVocabSize(true), cases: rows };
    console.log(`${p}: ${rows.length} cases`);
  }
  // One case per line: readable diffs without one line per id.
  let text = `{"generator": ${JSON.stringify(out.generator)}, "tokenizers": {`;
  Object.entries(out.tokenizers).forEach(([name, t], i) => {
    text += `${i ? "," : ""}\n ${JSON.stringify(name)}: {"vocab_size": ${t.vocab_size}, "cases": [\n  `;
    text += t.cases.map((c) => JSON.stringify(c)).join(",\n  ") + "]}";
  });
  fs.writeFileSync(path.join(outDir, "expected.json"), text + "\n}}\n");
}

const [cmd, dir, ...rest] = process.argv.slice(2);
if (cmd === "build") build(dir);
else if (cmd === "expect") expect(dir, rest).catch((e) => { console.error(e); process.exit(1); });
else {
  console.error("usage: tokenizer_fixtures.js build DIR | expect DIR TOKENIZER.json...");
  process.exit(2);
}
