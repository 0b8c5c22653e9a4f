// Builds the CLIP-format test tokenizer (testdata/embed/tokenizer.json) for
// the small clip_text test model (a vocabulary of 512 ids, start-of-text
// 510 and end-of-text 511, as CLIP puts them last) and computes the
// expected ids of tokens.json's cases with Hugging Face's own
// implementation (the npm `tokenizers` package, the Rust library's Node
// binding).
//
//   mkdir -p /tmp/hftok && (cd /tmp/hftok && npm install tokenizers@0.23.2)
//   NODE_PATH=/tmp/hftok/node_modules node testdata/embed/make_tokenizer.js testdata/embed
//
// The layout is Hugging Face's for openai/clip-vit-*: NFC, whitespace runs
// to one space and lowercase; CLIP's regex split and byte-level mapping;
// BPE with the "</w>" end-of-word suffix and <|endoftext|> as unknown
// token. The full CLIP vocabulary has all 256 bytes in both forms (512
// ids alone), so this one keeps only the characters frequent in the
// training text; others become the unknown token, which the test covers.
// The merges are learned here by plain greedy BPE over word counts.

"use strict";
const fs = require("fs");
const path = require("path");
const hf = require("tokenizers");

const VOCAB = 512;
const SPLIT = "<\\|startoftext\\|>|<\\|endoftext\\|>|'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+";
const FORTUNES = "/usr/share/games/fortunes";

const CAPTIONS = `
a photo of a dog. a photo of a cat. a diagram of a circuit. a red square on a blue background.
a picture of a striped pattern. a black and white photo of a street. an orange circle.
two dogs playing in the snow. a close-up photo of a flower. a drawing of a house with a garden.
`.repeat(30);

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

function main(outDir) {
  let text = CAPTIONS;
  for (const f of ["literature", "wisdom"]) text += fs.readFileSync(path.join(FORTUNES, f + ".u8"), "utf8");
  text = text.normalize("NFC").replace(/\s+/g, " ").toLowerCase();
  const b2u = bytesToUnicode();
  const words = new Map(); // byte-level word -> count
  for (const m of text.matchAll(new RegExp(SPLIT, "gu"))) {
    const w = Array.from(Buffer.from(m[0], "utf8"), (b) => b2u[b]).join("");
    words.set(w, (words.get(w) || 0) + 1);
  }
  // The alphabet: characters seen at least 50 times, in both forms.
  const charCount = new Map();
  for (const [w, c] of words) for (const ch of w) charCount.set(ch, (charCount.get(ch) || 0) + c);
  const alphabet = [...charCount.entries()].filter(([, c]) => c >= 50).map(([ch]) => ch).sort();
  const vocab = {};
  for (const ch of alphabet) vocab[ch] = Object.keys(vocab).length;
  for (const ch of alphabet) vocab[ch + "</w>"] = Object.keys(vocab).length;
  // Words as symbol lists, the last carrying </w>; words with a character
  // outside the alphabet are left out of training.
  let corpus = [];
  for (const [w, c] of words) {
    const syms = Array.from(w);
    if (!syms.every((s) => s in vocab)) continue;
    syms[syms.length - 1] += "</w>";
    corpus.push({ syms, c });
  }
  const merges = [];
  while (Object.keys(vocab).length < VOCAB - 2) {
    const pairs = new Map();
    for (const { syms, c } of corpus) {
      for (let i = 0; i + 1 < syms.length; i++) {
        const k = syms[i] + " " + syms[i + 1];
        pairs.set(k, (pairs.get(k) || 0) + c);
      }
    }
    let best = null, bestC = 0;
    for (const [k, c] of pairs) if (c > bestC || (c === bestC && k < best)) { best = k; bestC = c; }
    if (!best) break;
    const [a, b] = best.split(" ");
    merges.push([a, b]);
    vocab[a + b] = Object.keys(vocab).length;
    for (const w of corpus) {
      const out = [];
      for (let i = 0; i < w.syms.length; i++) {
        if (i + 1 < w.syms.length && w.syms[i] === a && w.syms[i + 1] === b) { out.push(a + b); i++; } else out.push(w.syms[i]);
      }
      w.syms = out;
    }
  }
  vocab["<|startoftext|>"] = VOCAB - 2;
  vocab["<|endoftext|>"] = VOCAB - 1;
  const special = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  const tj = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [special(VOCAB - 2, "<|startoftext|>"), special(VOCAB - 1, "<|endoftext|>")],
    normalizer: { type: "Sequence", normalizers: [{ type: "NFC" }, { type: "Replace", pattern: { Regex: "\\s+" }, content: " " }, { type: "Lowercase" }] },
    pre_tokenizer: {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: SPLIT }, behavior: "Removed", invert: true },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<|startoftext|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "<|endoftext|>", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "<|startoftext|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "<|endoftext|>", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }, { SpecialToken: { id: "<|endoftext|>", type_id: 1 } }],
      special_tokens: {
        "<|startoftext|>": { id: "<|startoftext|>", ids: [VOCAB - 2], tokens: ["<|startoftext|>"] },
        "<|endoftext|>": { id: "<|endoftext|>", ids: [VOCAB - 1], tokens: ["<|endoftext|>"] },
      },
    },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE", dropout: null, unk_token: "<|endoftext|>", continuing_subword_prefix: "", end_of_word_suffix: "</w>",
      fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges,
    },
  };
  const out = path.join(outDir, "tokenizer.json");
  fs.writeFileSync(out, JSON.stringify(tj, null, 1) + "\n");
  return out;
}

async function expect(outDir, tokPath) {
  const tok = hf.Tokenizer.fromFile(tokPath);
  const cases = JSON.parse(fs.readFileSync(path.join(outDir, "texts.json"), "utf8"));
  const out = [];
  for (const text of cases) {
    const ids = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
    out.push({ text, ids });
  }
  fs.writeFileSync(path.join(outDir, "tokens.json"), JSON.stringify(out, null, 1) + "\n");
}

const dir = process.argv[2] || ".";
expect(dir, main(dir)).catch((e) => { console.error(e); process.exit(1); });
