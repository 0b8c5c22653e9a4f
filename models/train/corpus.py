"""The default model's corpus: Debian English text plus synthetic in-context tasks.

Everything here is rebuilt byte for byte from installed Debian packages and
fixed seeds (`apt-get install fortunes python3.11-doc debian-reference-en`).

Sources, and why these:

* fortunes (`/usr/share/games/fortunes/*.u8`): short English quotations and
  jokes. Whole sentences in plain English; a small model that imitates them
  writes text a person recognises. The old default model's held-out file
  (testdata/default/heldout.txt) is fortunes, so its documents are forced
  into the held-out split and never trained on.
* python3.11-doc prose (`html/_sources/{tutorial,howto,faq,reference,using}`
  and the glossary, reST source): long, well-edited explanatory English. The
  documents are reST sections of hundreds to thousands of tokens, which is
  what a 2048-token context needs to learn long-range use; fortunes alone are
  a few dozen tokens each.
* debian-reference-en (the plain-text edition): long technical prose split
  by numbered section.
* Not dict-gcide: dictionary entries (headword, pronunciation, etymology
  markup, numbered senses) do not read as sentences when imitated.
  Not the python library reference: mostly API signatures and tables.

Splits are by document hash (sha256 of the cleaned text): 2% validation, 2%
held-out, the rest train; identical documents are deduplicated first, so a
document and its copy cannot land on both sides.

Synthetic tasks (their own train and eval sets, never sharing a key set with
eval, see `recall_doc` and `mc_doc`):

* key->value recall: four "The code for NAME is NNNN." facts up front,
  filler text (real train documents) of a chosen length, then questions
  "What is the code for NAME?" / "Answer: NNNN.". The distance between a
  fact and its answer runs up to ~2000 tokens in the long-context phase.
* 4-way multiple choice: a short story sentence sets three attributes
  (colour, object, place) of a person; the question asks one of them with
  four options, "Answer: (X) word".

Eval sets (JSONL, one item per line: context, candidates, answer index) are
scored by tlite (models/train/tleval): each candidate's log-likelihood after
the context, argmax against the answer. Chance is 1/len(candidates).
"""

import glob
import gzip
import hashlib
import json
import os
import random
import re

FORTUNES = "/usr/share/games/fortunes"
FORTUNE_SKIP = {"ascii-art", "translate-me"}
PYDOC = "/usr/share/doc/python3.11/html/_sources"
PYDOC_PARTS = ["tutorial", "howto", "faq", "reference", "using"]
PYDOC_FILES = ["glossary.rst.txt"]
DEBREF = "/usr/share/debian-reference/debian-reference.en.txt.gz"

SEED = 20261123
VAL_PCT, HELD_PCT = 2, 2

NAMES = """Alder Amber Ash Aspen Basil Birch Brook Cedar Clover Coral Daisy Dawn Ebony Elm Fern Finch Flint
Gale Garnet Ginger Hazel Heath Holly Iris Ivy Jade Jasper Juniper Kestrel Lark Laurel Linden Lotus Maple
Marsh Meadow Moss Myrtle Oak Olive Onyx Opal Orchid Pearl Pepper Pine Plum Poppy Quartz Raven Reed Robin
Rose Rowan Ruby Rush Sage Slate Sorrel Sparrow Spruce Stone Storm Thistle Thorn Tulip Violet Willow Wren
Yarrow Zinnia""".split()
COLOURS = "red blue green yellow black white brown grey orange purple pink silver".split()
OBJECTS = "box lamp book cup hat key ball coat bell drum kite clock".split()
PLACES = "kitchen garden cellar attic library garage office barn hall shed porch studio".split()
PEOPLE = "Tom Anna Paul Maria John Lucy Peter Emma Mark Sara David Nina".split()


def doc_hash(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_of(text):
    """'val', 'held' or 'train' from the document's hash."""
    b = int(doc_hash(text)[:8], 16) % 100
    if b < VAL_PCT:
        return "val"
    if b < VAL_PCT + HELD_PCT:
        return "held"
    return "train"


def clean(text):
    lines = [ln.rstrip() for ln in text.replace("\r", "").split("\n")]
    text = "\n".join(lines).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", text)


def fortune_docs():
    docs = []
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*.u8"))):
        if os.path.basename(path)[:-3] in FORTUNE_SKIP:
            continue
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        docs += split_fortunes(raw)
    return docs


def split_fortunes(raw):
    out, cur = [], []
    for line in raw.split("\n") + ["%"]:
        if line == "%":
            d = clean("\n".join(cur))
            cur = []
            if d.strip():
                out.append(d)
        else:
            cur.append(line)
    return out


_RST_UNDER = re.compile(r"^([=\-~^\"'`#*+])\1{3,}$")


def pydoc_docs():
    """reST files split into sections at heading underlines."""
    paths = []
    for part in PYDOC_PARTS:
        paths += sorted(glob.glob(os.path.join(PYDOC, part, "**", "*.rst.txt"), recursive=True))
    paths += [os.path.join(PYDOC, p) for p in PYDOC_FILES]
    docs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        cur = []
        for i, ln in enumerate(lines):
            # A title line followed by its underline starts a new section.
            if i + 1 < len(lines) and _RST_UNDER.match(lines[i + 1].strip()) and ln.strip() and \
                    not _RST_UNDER.match(ln.strip()) and len(cur) > 1:
                docs.append(clean("\n".join(cur)))
                cur = []
            cur.append(ln)
        docs.append(clean("\n".join(cur)))
    return [d for d in docs if len(d) >= 300]


_DEB_SEC = re.compile(r"^\d+(\.\d+)*\. \S")


def debref_docs():
    with gzip.open(DEBREF, "rt", encoding="utf-8") as f:
        text = f.read()
    # The text edition pads indented lines with no-break spaces
    # ("\xa0 \xa0 \xa0  " where other lines have four spaces).
    text = text.replace("\u00a0 \u00a0 \u00a0  ", "    ").replace("\u00a0", " ")
    lines = text.split("\n")
    docs, cur = [], []
    for ln in lines:
        if _DEB_SEC.match(ln) and cur:
            docs.append(clean("\n".join(cur)))
            cur = []
        cur.append(ln)
    docs.append(clean("\n".join(cur)))
    return [d for d in docs if len(d) >= 300]


def old_heldout_docs(repo):
    with open(os.path.join(repo, "testdata", "default", "heldout.txt"), encoding="utf-8") as f:
        return split_fortunes(f.read())


def build_text_splits(repo, log):
    """{source: {split: [docs]}} with duplicates (within and across sources) removed."""
    forced = set(old_heldout_docs(repo))
    seen = set()
    out = {}
    for name, docs in (("fortunes", fortune_docs()), ("pydoc", pydoc_docs()), ("debref", debref_docs())):
        parts = {"train": [], "val": [], "held": []}
        dropped = 0
        for d in docs:
            if d in seen:
                dropped += 1
                continue
            seen.add(d)
            parts["held" if d in forced else split_of(d)].append(d)
        out[name] = parts
        log(f"corpus: {name}: {len(docs)} docs, {dropped} duplicates dropped, " +
            ", ".join(f"{k} {len(v)} docs {sum(map(len, v))} chars" for k, v in parts.items()))
    missing = forced - seen
    if missing:
        raise SystemExit(f"corpus: {len(missing)} documents of heldout.txt are not in fortunes (package changed?)")
    return out


# ---------------------------------------------------------------- synthetic tasks

def recall_parts(rng, names, n_facts=4):
    keys = rng.sample(names, n_facts)
    vals = [str(rng.randint(1000, 9999)) for _ in keys]
    facts = " ".join(f"The code for {k} is {v}." for k, v in zip(keys, vals))
    return keys, vals, "Remember these codes. " + facts


def recall_doc(rng, names, filler):
    """One training recall document: facts, filler, then two questions."""
    keys, vals, head = recall_parts(rng, names)
    qs = rng.sample(range(len(keys)), 2)
    tail = "\n\n".join(f"Question: What is the code for {keys[i]}?\nAnswer: {vals[i]}." for i in qs)
    return head + "\n\n" + filler + "\n\n" + tail


def mc_parts(rng):
    person = rng.choice(PEOPLE)
    colour, obj, place = rng.choice(COLOURS), rng.choice(OBJECTS), rng.choice(PLACES)
    story = f"{person} keeps a {colour} {obj} in the {place}."
    kind = rng.randrange(3)
    if kind == 0:
        q, right, pool = f"What colour is the {obj} that {person} keeps?", colour, COLOURS
    elif kind == 1:
        q, right, pool = f"What does {person} keep in the {place}?", obj, OBJECTS
    else:
        q, right, pool = f"Where does {person} keep the {colour} {obj}?", place, PLACES
    opts = rng.sample([w for w in pool if w != right], 3)
    ans = rng.randrange(4)
    opts.insert(ans, right)
    letters = "ABCD"
    ctx = f"{story}\nQuestion: {q}\nOptions: " + " ".join(f"({letters[i]}) {o}" for i, o in enumerate(opts)) + "\nAnswer:"
    cands = [f" ({letters[i]}) {o}" for i, o in enumerate(opts)]
    return ctx, cands, ans


def mc_doc(rng):
    ctx, cands, ans = mc_parts(rng)
    return ctx + cands[ans]


def split_names(rng):
    """Train and eval recall keys are disjoint, so eval cannot be memorised."""
    names = NAMES[:]
    rng.shuffle(names)
    return names[16:], names[:16]
