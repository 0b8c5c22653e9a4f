"""Byte-level BPE: training, encoding, and writing a Hugging Face tokenizer.json.

Why a trainer of our own: the Hugging Face `tokenizers` Python wheel cannot be
installed here (no PyPI), and the Node binding (npm `tokenizers`) trains only
with its default trainer settings (30000 tokens, no initial alphabet). The
algorithm is the one GPT-2 and `tokenizers` use:

1. Pre-tokenize with the GPT-2 pattern (contractions, letter runs, digit
   runs, other-symbol runs, each with an optional leading space; whitespace
   runs that give their last space to the next word).
2. Map every byte of each piece to a printable character (GPT-2's
   bytes_to_unicode table), so a token is a string and no byte is unknown.
3. Start from the 256 byte symbols and repeatedly merge the most frequent
   adjacent pair, counting pairs inside pre-tokenized words only.

The resulting tokenizer.json is a standard `tokenizers` file (model BPE,
pre_tokenizer ByteLevel, decoder ByteLevel), so Hugging Face's
implementation, tlite's Go tokenizer, and `Encoder` below all read it; the
tests check that they agree id for id.

Ties between equally frequent pairs go to the lexicographically smallest
pair, so training is deterministic.
"""

import collections
import json

import regex  # Debian: python3-regex; `re` has no \p{L} classes

# The GPT-2 pre-tokenization pattern, exactly as `tokenizers` applies it in
# its ByteLevel pre-tokenizer.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_SPLIT = regex.compile(GPT2_PATTERN)


def bytes_to_unicode():
    """GPT-2's byte -> printable character table.

    Printable Latin-1 bytes map to themselves; the other 68 bytes (controls,
    space, DEL, NBSP, soft hyphen) map to U+0100 onwards in byte order, so
    every token is a string of visible characters.
    """
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def pretokenize(text):
    """Splits text into GPT-2 pieces, each mapped to byte-level characters."""
    return ["".join(BYTE_TO_CHAR[b] for b in piece.encode("utf-8")) for piece in _SPLIT.findall(text)]


def train(texts, num_merges, log=None):
    """Learns `num_merges` merges from an iterable of documents.

    Returns the merges as a list of (left, right) symbol strings, best first.
    """
    word_freq = collections.Counter()
    for t in texts:
        word_freq.update(pretokenize(t))
    words = [list(w) for w in word_freq]
    freqs = [word_freq[w] for w in word_freq]

    pair_count = collections.Counter()
    where = collections.defaultdict(set)  # pair -> indices of words containing it
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += freqs[i]
            where[(a, b)].add(i)

    merges = []
    for step in range(num_merges):
        if not pair_count:
            break
        top = max(pair_count.values())
        best = min(p for p, c in pair_count.items() if c == top)
        if top < 2:
            break  # remaining pairs occur once: merging them only memorizes
        merges.append(best)
        a, b = best
        merged = a + b
        for i in list(where[best]):
            w = words[i]
            f = freqs[i]
            # Remove this word's old pair counts, rewrite it, add them back.
            for p in zip(w, w[1:]):
                pair_count[p] -= f
                if pair_count[p] <= 0:
                    del pair_count[p]
                where[p].discard(i)
            out = []
            j = 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pair_count[p] += f
                where[p].add(i)
        where.pop(best, None)
        if log and (step + 1) % 250 == 0:
            log(f"bpe: {step + 1} merges, last {merged!r}")
    return merges


def build_vocab(merges, specials):
    """Vocabulary: 256 byte symbols (in byte order), merge results, specials."""
    vocab = {}
    for b in range(256):
        vocab[BYTE_TO_CHAR[b]] = len(vocab)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    for s in specials:
        vocab[s] = len(vocab)
    return vocab


def tokenizer_json(merges, specials):
    """A `tokenizers` tokenizer.json (as a dict) for a GPT-2-style byte-level BPE."""
    vocab = build_vocab(merges, specials)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": vocab[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for s in specials
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        # add_special_tokens=True puts the first special token (BOS) in front,
        # as the training documents start with it.
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": specials[0], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": specials[0], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {specials[0]: {"id": specials[0], "ids": [vocab[specials[0]]], "tokens": [specials[0]]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[a, b] for a, b in merges],
        },
    }


def save_tokenizer(path, merges, specials):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(merges, specials), f, ensure_ascii=False, indent=1)
        f.write("\n")


class Encoder:
    """Encodes text with a byte-level BPE given as merges + vocab.

    Plain text only: special tokens are added by the caller as ids, never
    recognised inside text, which is what training data needs.
    """

    def __init__(self, merges, vocab):
        self.rank = {tuple(m): i for i, m in enumerate(merges)}
        self.vocab = vocab
        self.cache = {}

    def _word(self, w):
        ids = self.cache.get(w)
        if ids is not None:
            return ids
        sym = list(w)
        while len(sym) > 1:
            best, best_rank = -1, None
            for i in range(len(sym) - 1):
                r = self.rank.get((sym[i], sym[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best < 0:
                break
            # Merge every occurrence of the best pair, left to right, as BPE
            # applies one merge rule at a time.
            a, b = sym[best], sym[best + 1]
            out, i = [], 0
            while i < len(sym):
                if i + 1 < len(sym) and sym[i] == a and sym[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            sym = out
        ids = [self.vocab[s] for s in sym]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for w in pretokenize(text):
            out.extend(self._word(w))
        return out

    def decode(self, ids, inv=None):
        inv = inv or {i: s for s, i in self.vocab.items()}
        data = bytes(CHAR_TO_BYTE[c] for i in ids for c in inv[i] if c in CHAR_TO_BYTE)
        return data.decode("utf-8", errors="replace")
