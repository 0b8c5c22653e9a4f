#!/usr/bin/python3
"""Trains and exports tlite's shipped default model (testdata/default/).

A LLaMA-style decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU; the
module is models/export/llama.py's, so the exported graph has exactly the
interface documented there): dim 256, 6 layers, 8 query / 4 KV heads of 32,
FFN 768, vocabulary 4096, untied head, 6.8M parameters, context 2048. Trained
on CPU on Debian English text plus synthetic in-context tasks (corpus.py),
with a byte-level BPE trained on the same text (bpe.py).

Steps (from the repository root, Debian's python3: torch 1.13, onnx 1.12,
python3-regex, OpenBLAS; see README.md for the packages):

    /usr/bin/python3 models/train/train_default.py prepare --work W
    nohup /usr/bin/python3 models/train/train_default.py train --work W > W/train.log 2>&1 &
    /usr/bin/python3 models/train/train_default.py export  --work W --out testdata/default

prepare  builds the corpus and its splits (corpus.py), trains the BPE on the
         train split, writes one token stream per source (each document is
         <|bos|> text <|eos|>) and the eval sets (evals/*.jsonl).
train    runs the schedule in TrainArgs (fixed seeds and data order, two
         threads), logging to stdout, checkpointing to WORK/ckpt.pt, and
         keeping WORK/ckpt_stable.pt, the last checkpoint before the LR decay,
         from which a longer run can continue (raise --stable-steps). A rerun
         resumes from WORK/ckpt.pt. --time-budget is a safety stop only.
export   writes model.onnx, tokenizer.json, config.json and the reference
         data the Go tests compare against (export_default.py).

Schedule: warmup-stable-decay. Phase A trains at sequence 512, from
--task-from on with a larger share of synthetic tasks (MIX_TASKS; dense
recall from prepare-tasks); phase B, the last --long-steps steps, at 2048
with the same tokens per step, so RoPE and the recall task see the full
context. The decay covers the last --decay-steps steps.

Reproducibility: weights from torch.manual_seed; every training window from a
seeded torch.Generator whose state is checkpointed. The same torch build and
thread count give the same weights; another build may drift in the last bits.
"""

import argparse
import dataclasses
import json
import math
import os
import random
import re
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "export"))

# On a shared machine, OpenMP threads that spin at barriers while another
# process holds the core made training 2-3x slower (measured: 61 vs 148
# tokens/s with 2 threads at load 10); passive waiting yields the core.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bpe  # noqa: E402
import corpus  # noqa: E402
import llama  # noqa: E402

SEED = 20261123
BOS, EOS = "<|bos|>", "<|eos|>"
VOCAB = 4096
MAX_CONTEXT = 2048

CONFIG = llama.Config(vocab=VOCAB, dim=256, n_layers=6, n_heads=8, n_kv_heads=4, ffn=768,
                      rope_theta=10000.0, eps=1e-5)

TEXT_SOURCES = ["fortunes", "pydoc", "debref"]
# Sampling weights per phase: the share of training windows each source
# gives. Fortunes lead (sentences people recognise); the long documents carry
# the long-range structure; the synthetic tasks stay a small share.
MIX_SHORT = {"fortunes": 0.50, "pydoc": 0.27, "debref": 0.13, "recall_short": 0.06, "mc": 0.04}
# The task stage (from --task-from to the long phase) raises the synthetic
# share: at 6% recall and 4% choice the first 1200 steps showed about 290
# recall windows, and recall and choice stayed at chance. Dense recall packs
# many questions per window, so the in-context lookup gets a gradient on
# every few tokens instead of twice per 450.
MIX_TASKS = {"fortunes": 0.42, "pydoc": 0.20, "debref": 0.08, "recall_dense": 0.14, "recall_short": 0.08,
             "mc": 0.08}
MIX_LONG = {"fortunes": 0.25, "pydoc": 0.25, "debref": 0.08, "recall_long": 0.12, "recall_far": 0.22,
            "mc": 0.08}
# The text rows next to induct's copy windows (C1, C1s, C1f).
MIX_COPY_TEXT = {"fortunes": 0.5, "pydoc": 0.35, "debref": 0.15}
TASK_SOURCES = ("recall_short", "recall_long", "mc", "recall_dense", "recall_far")


@dataclasses.dataclass
class TrainArgs:
    short_seq: int = 512
    long_seq: int = MAX_CONTEXT
    tokens_per_step: int = 2048
    task_from: int = 1200       # MIX_TASKS replaces MIX_SHORT from here
    stable_steps: int = 1900    # warmup + stable phase end here
    decay_steps: int = 400      # linear decay to min_lr over the last steps
    long_steps: int = 250       # final steps at long_seq (inside the decay)
    lr: float = 2.5e-3
    min_lr: float = 1e-4
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 60
    ckpt_every: int = 10

    @property
    def max_steps(self):
        return self.stable_steps + self.decay_steps


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def setup_torch(threads):
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)


# ---------------------------------------------------------------- prepare

def build_filler(rng, docs, doc_tokens, target):
    """Joins random documents until about `target` tokens (by the given counts)."""
    parts, n = [], 0
    while n < target:
        i = rng.randrange(len(docs))
        parts.append(docs[i])
        n += doc_tokens[i] + 2
    return "\n\n".join(parts)


def prepare(work):
    os.makedirs(os.path.join(work, "evals"), exist_ok=True)
    splits = corpus.build_text_splits(REPO, log)
    train_docs = [d for s in TEXT_SOURCES for d in splits[s]["train"]]
    merges = bpe.train(train_docs, VOCAB - 256 - 2, log=log)
    specials = [BOS, EOS]
    bpe.save_tokenizer(os.path.join(work, "tokenizer.json"), merges, specials)
    vocab = bpe.build_vocab(merges, specials)
    if len(vocab) != VOCAB:
        raise SystemExit(f"prepare: vocabulary has {len(vocab)} tokens, want {VOCAB}")
    enc = bpe.Encoder(merges, vocab)
    bos, eos = vocab[BOS], vocab[EOS]

    def stream_of(docs):
        ids, starts = [], []
        for d in docs:
            starts.append(len(ids))
            ids += [bos] + enc.encode(d) + [eos]
        return np.array(ids, dtype=np.int16), np.array(starts, dtype=np.int64)

    stats = {}
    for src in TEXT_SOURCES:
        for part in ("train", "val", "held"):
            ids, starts = stream_of(splits[src][part])
            np.save(os.path.join(work, f"{src}_{part}.npy"), ids)
            stats[f"{src}_{part}"] = {"docs": len(starts), "tokens": int(len(ids)),
                                      "bytes": sum(len(d.encode("utf-8")) for d in splits[src][part])}
            log(f"prepare: {src} {part}: {len(starts)} docs, {len(ids)} tokens")

    # Synthetic tasks. Filler for training comes from train documents, for
    # eval from held-out ones; train and eval recall keys are disjoint.
    rng = random.Random(SEED)
    train_names, eval_names = corpus.split_names(rng)
    fill_docs = splits["fortunes"]["train"] + splits["pydoc"]["train"]
    fill_tok = [len(enc.encode(d)) for d in fill_docs]
    for name, n_docs, lo, hi in (("recall_short", 2500, 20, 400), ("recall_long", 700, 300, 1950)):
        docs = [corpus.recall_doc(rng, train_names, build_filler(rng, fill_docs, fill_tok, rng.randint(lo, hi)))
                for _ in range(n_docs)]
        ids, starts = stream_of(docs)
        np.save(os.path.join(work, f"{name}_train.npy"), ids)
        np.save(os.path.join(work, f"{name}_starts.npy"), starts)
        stats[name] = {"docs": n_docs, "tokens": int(len(ids))}
        log(f"prepare: {name}: {n_docs} docs, {len(ids)} tokens")
    docs = [corpus.mc_doc(rng) for _ in range(6000)]
    ids, starts = stream_of(docs)
    np.save(os.path.join(work, "mc_train.npy"), ids)
    np.save(os.path.join(work, "mc_starts.npy"), starts)
    stats["mc"] = {"docs": len(docs), "tokens": int(len(ids))}
    log(f"prepare: mc: {len(docs)} docs, {len(ids)} tokens")

    write_evals(work, splits, enc, eval_names)
    with open(os.path.join(work, "corpus_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    prepare_tasks(work)
    for part in ("val", "held"):
        with open(os.path.join(work, f"{part}_docs.json"), "w", encoding="utf-8") as f:
            json.dump({s: splits[s][part] for s in TEXT_SOURCES}, f, ensure_ascii=False, indent=0)


def prepare_tasks(work):
    """Builds the task-stage sources from an existing work directory.

    recall_dense: 4-10 facts, 0-150 tokens of filler, then a question for
    most facts; recall_far: 6 facts, 200-1800 tokens of filler, 4 questions,
    for the 2048 phase. Filler is whole training documents taken from the
    token streams, names are the training names only (the eval names stay
    unseen), and the rng is its own, so prepare's other outputs are
    unchanged and a work directory from before this stage can be extended.
    """
    enc, vocab = load_encoder(work)
    bos, eos = vocab[BOS], vocab[EOS]
    rng = random.Random(SEED + 2)
    train_names, _ = corpus.split_names(random.Random(SEED))
    docs = text_documents(work)
    sep = enc.encode("\n\n")

    def filler(target):
        out = []
        while len(out) < target:
            if out:
                out += sep
            out += docs[rng.randrange(len(docs))]
        return out

    def doc(n_facts, n_q, lo, hi):
        keys = rng.sample(train_names, n_facts)
        vals = [str(rng.randint(1000, 9999)) for _ in keys]
        head = "Remember these codes. " + " ".join(f"The code for {k} is {v}." for k, v in zip(keys, vals))
        ids = [bos] + enc.encode(head) + sep
        n = rng.randint(lo, hi)
        if n > 0:
            ids += filler(n) + sep
        qs = rng.sample(range(n_facts), n_q)
        tail = "\n\n".join(f"Question: What is the code for {keys[i]}?\nAnswer: {vals[i]}." for i in qs)
        return ids + enc.encode(tail) + [eos]

    stats = {}
    def dense():
        n_facts = rng.randint(4, 10)
        n_q = rng.randint(max(2, n_facts - 3), n_facts)
        return doc(n_facts, n_q, 0 if rng.random() < 0.3 else 1, 150)

    for name, n_docs, make in (("recall_dense", 6000, dense),
                               ("recall_far", 800, lambda: doc(6, 4, 200, 1800))):
        ids, starts = [], []
        for _ in range(n_docs):
            starts.append(len(ids))
            ids += make()
        np.save(os.path.join(work, f"{name}_train.npy"), np.array(ids, dtype=np.int16))
        np.save(os.path.join(work, f"{name}_starts.npy"), np.array(starts, dtype=np.int64))
        stats[name] = {"docs": n_docs, "tokens": len(ids)}
        log(f"prepare: {name}: {n_docs} docs, {len(ids)} tokens")
    path = os.path.join(work, "corpus_stats.json")
    with open(path) as f:
        all_stats = json.load(f)
    all_stats.update(stats)
    with open(path + ".tmp", "w") as f:
        json.dump(all_stats, f, indent=1)
    os.replace(path + ".tmp", path)


def load_encoder(work):
    with open(os.path.join(work, "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    return bpe.Encoder([tuple(m) for m in j["model"]["merges"]], j["model"]["vocab"]), j["model"]["vocab"]


# Recall eval templates: (intro, fact, question). "trained" is the wording
# of every training row (corpus.recall_doc, LookupRows); the others reword
# the question, the facts, or all three, to tell a learned lookup from a
# memorised sentence frame. Candidates are " NNNN." in every template.
RECALL_TEMPLATES = {
    "trained": ("Remember these codes. ", "The code for {k} is {v}.", "Question: What is the code for {k}?\nAnswer:"),
    "question": ("Remember these codes. ", "The code for {k} is {v}.", "Q: Which code goes with {k}?\nA:"),
    "facts": ("Here is a list. ", "{k} has the code {v}.", "Question: What is the code for {k}?\nAnswer:"),
    "both": ("Keep these in mind: ", "{k}'s number is {v}.", "Which number does {k} have? It is"),
}


def recall_items(rng, enc, held, held_tok, eval_names, dist, n, template="trained", lead=0):
    """n recall eval items at distance dist: 4 facts, held-out filler, one
    question, the 4 codes as candidates, worded by RECALL_TEMPLATES[template].
    lead > 0 puts that many tokens of held-out filler before the facts as
    well, so that they sit inside the context rather than at its start (a
    KV policy that merely favours early chunks then keeps the lead filler,
    not the facts); the distance is still from the asked fact to the
    answer. lead 0 draws nothing more from rng, so such sets are the same
    bytes as before the option existed."""
    if lead < 0:
        raise ValueError(f"recall_items: lead {lead} < 0")
    intro, fact, ask = RECALL_TEMPLATES[template]
    items = []
    misses = 0
    while len(items) < n:
        # An item that cannot fit MAX_CONTEXT is redrawn; a distance and
        # lead that never fit would otherwise loop for ever.
        if misses >= 50:
            raise ValueError(f"recall_items: distance {dist} with {lead} lead tokens does not fit "
                             f"a {MAX_CONTEXT}-token context (50 draws in a row too long)")
        keys, vals, head = corpus.recall_parts(rng, eval_names)
        if template != "trained":
            head = intro + " ".join(fact.format(k=k, v=v) for k, v in zip(keys, vals))
        qi = rng.randrange(len(keys))
        # Distance = tokens from the end of the asked fact to the answer.
        after_fact = len(enc.encode(" ".join(fact.format(k=k, v=v) for k, v in
                                           zip(keys[qi + 1:], vals[qi + 1:]))))
        question = ask.format(k=keys[qi])
        qtok = len(enc.encode(question))
        filler = build_filler(rng, held, held_tok, max(1, dist - after_fact - qtok - 4))
        # Trim the filler from the end, in whole tokens, to hit the distance.
        ftoks = enc.encode(filler)
        want = dist - after_fact - qtok - 4
        filler = enc.decode(ftoks[:want])
        ctx = head + "\n\n" + filler + "\n\n" + question
        if lead > 0:
            before = build_filler(rng, held, held_tok, lead)
            ctx = enc.decode(enc.encode(before)[:lead]) + "\n\n" + ctx
        ids = [0] + enc.encode(ctx)
        if len(ids) + 4 > MAX_CONTEXT:
            misses += 1
            continue
        misses = 0
        item = {"task": "recall", "distance": dist, "context": ctx,
                "candidates": [f" {v}." for v in vals], "answer": qi}
        if lead > 0:
            item["lead"] = lead
        if template != "trained":
            # Only the reworded sets say so, so that prepare's eval files
            # stay byte-identical to those of earlier runs.
            item["template"] = template
        items.append(item)
    return items


RECALL_DISTANCES = (256, 1024, 2000)


def write_evals(work, splits, enc, eval_names):
    """Eval sets: recall at fixed distances, synthetic MC, continuation MC."""
    rng = random.Random(SEED + 1)
    held = splits["fortunes"]["held"] + splits["pydoc"]["held"] + splits["debref"]["held"]
    held_tok = [len(enc.encode(d)) for d in held]
    for dist in RECALL_DISTANCES:
        items = recall_items(rng, enc, held, held_tok, eval_names, dist, 40)
        write_jsonl(os.path.join(work, "evals", f"recall_{dist}.jsonl"), items)
    items = []
    for _ in range(200):
        ctx, cands, ans = corpus.mc_parts(rng)
        items.append({"task": "mc", "context": ctx, "candidates": cands, "answer": ans})
    write_jsonl(os.path.join(work, "evals", "mc.jsonl"), items)
    # Continuation MC on held-out prose: the true next ~24 tokens against
    # three taken from other held-out documents.
    prose = [d for d in splits["pydoc"]["held"] + splits["debref"]["held"] if len(enc.encode(d)) > 120]
    items = []
    for _ in range(100):
        i = rng.randrange(len(prose))
        toks = enc.encode(prose[i])
        cut = rng.randint(64, min(len(toks) - 30, 400))
        ctx = enc.decode(toks[:cut])
        cands = [enc.decode(toks[cut:cut + 24])]
        while len(cands) < 4:
            j = rng.randrange(len(prose))
            if j == i:
                continue
            tj = enc.encode(prose[j])
            c = rng.randint(64, len(tj) - 30)
            cands.append(enc.decode(tj[c:c + 24]))
        ans = rng.randrange(4)
        cands[0], cands[ans] = cands[ans], cands[0]
        items.append({"task": "continuation", "context": ctx, "candidates": cands, "answer": ans})
    write_jsonl(os.path.join(work, "evals", "continuation.jsonl"), items)


def write_jsonl(path, items):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    os.replace(path + ".tmp", path)
    log(f"prepare: {os.path.basename(path)}: {len(items)} items")


# ---------------------------------------------------------------- model

def build_model():
    torch.manual_seed(SEED)
    model = llama.Llama(CONFIG)
    # GPT-2-style init: small normal weights, residual output projections
    # scaled down by depth, norms at 1 (llama.py perturbs them for testing).
    std = 0.02
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "norm.weight":
                p.fill_(1.0)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                p.normal_(0.0, std / math.sqrt(2 * CONFIG.n_layers))
            else:
                p.normal_(0.0, std)
    return model


def empty_past(batch):
    return llama.empty_past(CONFIG, batch, 0)


def forward_logits(model, ids):
    """Full-sequence forward (no cache), as training and perplexity use it."""
    b, s = ids.shape
    mask = torch.ones(b, s, dtype=torch.int64)
    pos = torch.arange(s).repeat(b, 1)
    return model(ids, mask, pos, *empty_past(b))[0]


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    if step < a.stable_steps:
        return a.lr
    t = min(1.0, (step - a.stable_steps + 1) / max(1, a.decay_steps))
    return a.lr + (a.min_lr - a.lr) * t


def seq_at(step, a):
    return a.long_seq if step >= a.max_steps - a.long_steps else a.short_seq


def mix_at(step, a):
    if seq_at(step, a) == a.long_seq:
        return MIX_LONG
    return MIX_TASKS if step >= a.task_from else MIX_SHORT


class Data:
    def __init__(self, work):
        load = lambda n: torch.from_numpy(np.load(os.path.join(work, n + ".npy")).astype(np.int64))  # noqa: E731
        self.streams = {s: load(f"{s}_train") for s in TEXT_SOURCES}
        self.starts = {}
        for s in TASK_SOURCES:
            if not os.path.exists(os.path.join(work, f"{s}_train.npy")):
                continue  # checked against the mixes in train()
            self.streams[s] = load(f"{s}_train")
            self.starts[s] = load(f"{s}_starts")
        self.val = {s: load(f"{s}_val") for s in TEXT_SOURCES}

    def window(self, src, gen, seq):
        st = self.streams[src]
        if src in self.starts:
            # Synthetic documents are read from their start, so every fact
            # the questions ask about is inside the window.
            starts = self.starts[src]
            ok = int((starts < len(st) - seq - 1).sum())
            s = int(starts[torch.randint(0, ok, (1,), generator=gen)])
        else:
            s = int(torch.randint(0, len(st) - seq - 1, (1,), generator=gen))
        return st[s:s + seq + 1]

    def batch(self, gen, seq, n, mix):
        names = list(mix)
        cum = np.cumsum([mix[k] for k in names])
        rows = []
        for _ in range(n):
            u = float(torch.rand(1, generator=gen)) * cum[-1]
            src = names[int(np.searchsorted(cum, u, side="right"))]
            rows.append(self.window(src, gen, seq))
        x = torch.stack(rows)
        return x[:, :-1], x[:, 1:]


@torch.no_grad()
def evaluate(model, data, seq, n_windows=8):
    """Mean loss per text source on fixed, evenly spaced validation windows."""
    model.eval()
    out = {}
    for src, st in data.val.items():
        n = len(st) - seq - 1
        if n <= 0:
            continue
        starts = [int(i * n / n_windows) for i in range(n_windows)]
        x = torch.stack([st[s:s + seq + 1] for s in starts])
        total = 0.0
        for k in range(0, n_windows, 4):
            logits = forward_logits(model, x[k:k + 4, :-1])
            total += F.cross_entropy(logits.reshape(-1, CONFIG.vocab), x[k:k + 4, 1:].reshape(-1),
                                     reduction="sum").item()
        out[src] = total / (n_windows * seq)
    model.train()
    return out


def require_sources(cmd, work, data, *mixes):
    """Stops with the command to run when a mix names a source WORK lacks."""
    for mix in mixes:
        missing = [k for k in mix if k not in data.streams]
        if missing:
            raise SystemExit(f"{cmd}: {work} lacks the sources {missing}; run prepare-tasks --work {work}")


def make_optimizer(model, a):
    """AdamW with weight decay on the matrices only (not norms' gains)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))


def save_atomic(obj, path):
    """torch.save through a temporary file, so a kill leaves the old file or
    the new one, never half of one."""
    torch.save(obj, path + ".tmp")
    os.replace(path + ".tmp", path)


def resume(path, model, opt, gen, rng=None):
    """Loads a stage's checkpoint into model, opt, gen (and rng) when path
    exists; returns it (None when there is none), so the caller can take
    its own extra state from it."""
    if not os.path.exists(path):
        return None
    ck = torch.load(path)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    gen.set_state(ck["gen"])
    if rng is not None:
        rng.setstate(ck["rng"])
    return ck


def stage_state(model, opt, gen, rng, step, tokens, elapsed, a):
    """The checkpoint fields every stage writes (rng: None for train)."""
    ck = {"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(), "step": step,
          "tokens": tokens, "elapsed": elapsed, "config": dataclasses.asdict(CONFIG), "args": dataclasses.asdict(a)}
    if rng is not None:
        ck["rng"] = rng.getstate()
    return ck


def record_of(ck):
    """A finished stage's record, as the stages after it keep it."""
    return {"step": ck["step"], "tokens": ck["tokens"], "elapsed": ck["elapsed"], "args": ck["args"]}


def optimizer_step(model, opt, loss, clip):
    """One update: gradients of loss, clipped to norm clip, then AdamW."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()


def train(work, a, time_budget):
    data = Data(work)
    require_sources("train", work, data, MIX_SHORT, MIX_TASKS, MIX_LONG)
    model = build_model()
    n_params = sum(p.numel() for p in model.parameters())
    opt = make_optimizer(model, a)
    gen = torch.Generator().manual_seed(SEED)
    step, tokens, elapsed_before = 0, 0, 0.0
    ckpt_path = os.path.join(work, "ckpt.pt")
    ck = resume(ckpt_path, model, opt, gen)
    if ck is not None:
        step, tokens, elapsed_before = ck["step"], ck["tokens"], ck["elapsed"]
        log(f"train: resumed at step {step}")
    log(f"train: {n_params} parameters, config {dataclasses.asdict(CONFIG)}, args {dataclasses.asdict(a)}, "
        f"max_steps {a.max_steps}, threads {torch.get_num_threads()}")
    log(f"train: sources {{{', '.join(f'{k}: {len(v)}' for k, v in data.streams.items())}}} tokens")

    def save(path, tag):
        save_atomic(stage_state(model, opt, gen, None, step, tokens, elapsed_before + time.time() - t0, a), path)
        log(f"train: checkpoint ({tag}) at step {step}")

    model.train()
    t0 = time.time()
    t_last, tok_last = t0, tokens
    smooth = None
    while step < a.max_steps:
        if time_budget and elapsed_before + time.time() - t0 > time_budget:
            log(f"train: time budget {time_budget:.0f}s reached at step {step} (run cut short)")
            break
        seq = seq_at(step, a)
        mix = mix_at(step, a)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        x, y = data.batch(gen, seq, a.tokens_per_step // seq, mix)
        logits = forward_logits(model, x)
        loss = F.cross_entropy(logits.reshape(-1, CONFIG.vocab), y.reshape(-1))
        optimizer_step(model, opt, loss, a.grad_clip)
        step += 1
        tokens += x.numel()
        smooth = loss.item() if smooth is None else 0.9 * smooth + 0.1 * loss.item()
        if step % 5 == 0 or step == 1:
            now = time.time()
            el = elapsed_before + now - t0
            log(f"step {step}/{a.max_steps} seq {seq} loss {loss.item():.4f} smooth {smooth:.4f} "
                f"lr {lr_at(step - 1, a):.2e} tokens {tokens} elapsed {el:.0f}s "
                f"{(tokens - tok_last) / max(now - t_last, 1e-9):.0f} tok/s")
            t_last, tok_last = now, tokens
        if step % a.eval_every == 0 or step == a.max_steps:
            v = evaluate(model, data, 512)
            log(f"eval step {step} val loss (seq 512) " + " ".join(f"{k} {l:.4f}" for k, l in v.items()))
        if step == a.stable_steps:
            save(os.path.join(work, "ckpt_stable.pt"), "end of stable phase")
        if step % a.ckpt_every == 0:
            save(ckpt_path, "periodic")
    save(ckpt_path, "final")
    if step == a.max_steps:
        v = evaluate(model, data, a.long_seq, n_windows=4)
        log(f"eval final val loss (seq {a.long_seq}) " + " ".join(f"{k} {l:.4f}" for k, l in v.items()))
        save_atomic(model.state_dict(), os.path.join(work, "model_final.pt"))
        log(f"train: done, {step} steps, {tokens} tokens, {elapsed_before + time.time() - t0:.0f}s")


# ---------------------------------------------------------------- induct

@dataclasses.dataclass
class InductArgs:
    """The induction stage, run after train from WORK/model_final.pt.

    train's 4.7M tokens left the model without induction heads: it does not
    copy from its context (a passage shown twice costs as much the second
    time), so recall and multiple choice stayed at chance. Phase C1 trains
    on windows of segments each shown twice, where only copying predicts the
    second showing, until heads that find an earlier occurrence and copy
    what followed it form; C2 returns to train's task mix at 512 with a copy
    row kept in every step; C3 repeats train's 2048 phase as the LR decays.

    C1 alone did not do it: after 2400 steps no head attended to the token
    after an earlier occurrence. Two phases were added between C1 and C2,
    at late_lr. C1s draws the copied segments from a sub-vocabulary of
    sub_vocab tokens, shown again at once (near_window): copying then beats
    the best guess by ln(sub_vocab) nats, where the full vocabulary's random
    segments cost 8+ nats either way while nothing copies. Induction formed
    there within 500 steps, but only for repeats within about 20 tokens.
    C1f (far_window) then shows segments of the sub-vocabulary, the whole
    vocabulary and text again after up to 400 tokens, in rows of 512. Both
    phases draw from generators of their own (sub_seed, far_seed), so C2
    and C3 continue C1's.
    """
    copy_steps: int = 2400      # C1: copy_rows of copy_seq copy windows + text rows
    copy_seq: int = 256
    copy_rows: int = 7          # of tokens_per_step // copy_seq rows; the rest is text
    dense_from: int = 900       # from this step on, C1's segments are shown 2 or 3 times
    sub_steps: int = 500        # C1s: 7 rows of near_window (sub-vocabulary) + 1 text row, at 256
    sub_vocab: int = 256
    sub_seed: int = 11
    far_steps: int = 250        # C1f: 3 rows of far_window + 1 text row, at 512
    far_seed: int = 511
    task_steps: int = 250       # C2: MIX_TASKS at short_seq, one row of it a copy window
    long_steps: int = 100       # C3: MIX_LONG at 2048
    decay_steps: int = 250      # linear decay over the last steps (C2's end and C3)
    short_seq: int = 512
    long_seq: int = MAX_CONTEXT
    tokens_per_step: int = 2048
    lr: float = 2e-3            # C1
    late_lr: float = 1e-3       # C1s on, until the decay
    min_lr: float = 1e-4
    warmup: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    probe_every: int = 50
    ckpt_every: int = 10

    @property
    def max_steps(self):
        return self.copy_steps + self.sub_steps + self.far_steps + self.task_steps + self.long_steps

    def phase(self, step):
        """The phase a step belongs to: c1, c1s, c1f, c2 or c3."""
        ends = [("c1", self.copy_steps), ("c1s", self.sub_steps), ("c1f", self.far_steps), ("c2", self.task_steps)]
        for name, n in ends:
            if step < n:
                return name
            step -= n
        return "c3"


def induct_lr(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    lr = a.lr if step < a.copy_steps else a.late_lr
    start = a.max_steps - a.decay_steps
    if step < start:
        return lr
    return lr + (a.min_lr - lr) * min(1.0, (step - start + 1) / max(1, a.decay_steps))


def show_again(ids, w, seg, gap):
    """Appends gap and a repeat of seg (its first showing already in ids),
    weighting the repeat after its first token: from there on only copying
    predicts it."""
    ids += gap + seg
    w += [0.0] * (len(gap) + 1) + [1.0] * (len(seg) - 1)


def maybe_gap(rng, data):
    """Half the time 1-64 tokens of python docs to put between two showings,
    else none."""
    if rng.random() >= 0.5:
        return []
    st = data.streams["pydoc"]
    g0 = rng.randrange(len(st) - 64)
    return st[g0:g0 + rng.randint(1, 64)].tolist()


def copy_window(rng, data, seq, bos, showings=2):
    """A window of segments each shown twice, and the loss weight per target.

    Half the segments are random tokens (no prior helps), half are spans of
    training text (the copy must beat the language model's guess); half the
    pairs have up to 64 tokens of other text between the showings. Only the
    second showing after its first token is weighted: nothing else in the
    window is predictable by copying. With showings 3, half the segments
    come a third time (after another gap), weighted alike: more of each
    window's tokens then teach copying.
    """
    ids, w = [bos], [0.0]
    while len(ids) < seq + 1:
        n = rng.randint(6, 40)
        if rng.random() < 0.5:
            seg = [rng.randrange(256, VOCAB - 2) for _ in range(n)]
        else:
            st = data.streams["fortunes" if rng.random() < 0.6 else "pydoc"]
            s0 = rng.randrange(len(st) - n)
            seg = st[s0:s0 + n].tolist()
        ids += seg
        w += [0.0] * n
        show_again(ids, w, seg, maybe_gap(rng, data))
        if showings > 2 and rng.random() < 0.5:
            show_again(ids, w, seg, maybe_gap(rng, data))
    return torch.tensor(ids[:seq + 1]), torch.tensor(w[1:seq + 1])


def sub_vocabulary(a):
    """C1s's tokens: sub_vocab ids drawn once, with a fixed seed."""
    return random.Random(5).sample(range(256, VOCAB - 2), a.sub_vocab)


def near_window(rng, seq, bos, pool):
    """Segments of 6-30 tokens of pool, each shown twice in a row; weights as
    copy_window's."""
    ids, w = [bos], [0.0]
    while len(ids) < seq + 1:
        n = rng.randint(6, 30)
        seg = [rng.choice(pool) for _ in range(n)]
        ids += seg
        w += [0.0] * n
        show_again(ids, w, seg, [])
    return torch.tensor(ids[:seq + 1]), torch.tensor(w[1:seq + 1])


def far_window(rng, data, seq, bos, pool):
    """Segments of 6-40 tokens, a third each from pool, from the whole
    vocabulary and from fortunes, shown again after 0, 1-40 or 40-400
    tokens of python docs (a third each); weights as copy_window's."""
    ids, w = [bos], [0.0]
    while len(ids) < seq + 1:
        n = rng.randint(6, 40)
        k = rng.randrange(3)
        if k == 0:
            seg = [rng.choice(pool) for _ in range(n)]
        elif k == 1:
            seg = [rng.randrange(256, VOCAB - 2) for _ in range(n)]
        else:
            st = data.streams["fortunes"]
            s0 = rng.randrange(len(st) - n)
            seg = st[s0:s0 + n].tolist()
        st = data.streams["pydoc"]
        g = rng.choice([0, rng.randint(1, 40), rng.randint(40, 400)])
        g0 = rng.randrange(len(st) - g - 1)
        ids += seg
        w += [0.0] * n
        show_again(ids, w, seg, st[g0:g0 + g].tolist())
    return torch.tensor(ids[:seq + 1]), torch.tensor(w[1:seq + 1])


@torch.no_grad()
def repeat_probe(model, val, n=8, rng=None):
    """Mean loss on the first and second showing of repeated passages.

    Returns {"text": (first, second), "random": (first, second)} in nats per
    token: 100-token spans of `val` and 60 random tokens, each shown twice.
    Without induction both showings cost alike; with it the second is far
    cheaper. The passages come from rng (default: a fresh Random(3), the
    same passages every call).
    """
    was = model.training
    model.eval()
    rng = rng or random.Random(3)
    sums = {"text": [0.0, 0.0], "random": [0.0, 0.0]}
    for _ in range(n):
        s0 = rng.randrange(len(val) - 100)
        for kind, toks in (("text", val[s0:s0 + 100].tolist()),
                           ("random", [rng.randrange(100, 4000) for _ in range(60)])):
            ids = torch.tensor([[VOCAB - 2] + toks + toks])
            lp = F.log_softmax(forward_logits(model, ids[:, :-1])[0], -1)
            y = ids[0, 1:]
            l = -lp[torch.arange(len(y)), y]
            m = len(toks)
            sums[kind][0] += l[1:m].mean().item() / n
            sums[kind][1] += l[m + 1:].mean().item() / n
    model.train(was)
    return {k: tuple(v) for k, v in sums.items()}


def log_probe(stage, step, model, data, val):
    """Logs the repeat probe and the validation loss at 512 (the line
    induct_log.txt and recall_log.txt quote)."""
    p = repeat_probe(model, val)
    v = evaluate(model, data, 512, n_windows=4)
    log(f"{stage} probe step {step} repeat " + " ".join(f"{k} {x:.3f}->{y:.3f}" for k, (x, y) in p.items()) +
        " | val (seq 512) " + " ".join(f"{k} {x:.4f}" for k, x in v.items()))


def induct(work, a, time_budget):
    data = Data(work)
    val = data.val["fortunes"]
    require_sources("induct", work, data, MIX_TASKS, MIX_LONG)
    model = build_model()
    model.load_state_dict(torch.load(os.path.join(work, "model_final.pt")))
    opt = make_optimizer(model, a)
    gen = torch.Generator().manual_seed(SEED + 7)
    rng = random.Random(SEED + 8)
    base = torch.load(os.path.join(work, "ckpt.pt"))
    step, tokens, elapsed_before = 0, 0, 0.0
    prng, pgen, pname = None, None, None  # C1s's or C1f's own generators
    pool = sub_vocabulary(a)
    ckpt_path = os.path.join(work, "ckpt_induct.pt")
    ck = resume(ckpt_path, model, opt, gen, rng)
    if ck is not None:
        step, tokens, elapsed_before = ck["step"], ck["tokens"], ck["elapsed"]
        if "phase_rng" in ck:
            prng, pgen, pname = random.Random(), torch.Generator(), ck["phase"]
            prng.setstate(ck["phase_rng"])
            pgen.set_state(ck["phase_gen"])
        log(f"induct: resumed at step {step}")
    else:
        p = repeat_probe(model, val)
        log("induct: probe before " + " ".join(f"{k} {x:.3f}->{y:.3f}" for k, (x, y) in p.items()))
    log(f"induct: args {dataclasses.asdict(a)}, max_steps {a.max_steps}, threads {torch.get_num_threads()}, "
        f"from train's step {base['step']} ({base['tokens']} tokens)")

    def save(path, tag):
        ck = stage_state(model, opt, gen, rng, step, tokens, elapsed_before + time.time() - t0, a)
        ck["train"] = record_of(base)
        if prng is not None:
            ck.update(phase=pname, phase_rng=prng.getstate(), phase_gen=pgen.get_state())
        save_atomic(ck, path)
        log(f"induct: checkpoint ({tag}) at step {step}")

    model.train()
    t0 = time.time()
    t_last, tok_last = t0, tokens
    while step < a.max_steps:
        if time_budget and elapsed_before + time.time() - t0 > time_budget:
            log(f"induct: time budget {time_budget:.0f}s reached at step {step} (run cut short)")
            break
        for g in opt.param_groups:
            g["lr"] = induct_lr(step, a)
        ph = a.phase(step)
        if ph in ("c1s", "c1f") and pname != ph:
            seed = a.sub_seed if ph == "c1s" else a.far_seed
            prng, pgen, pname = random.Random(seed), torch.Generator().manual_seed(seed + 88), ph
        if ph == "c1":
            seq, mix = a.copy_seq, MIX_COPY_TEXT
            showings = 3 if step >= a.dense_from else 2
            cw = [copy_window(rng, data, seq, VOCAB - 2, showings) for _ in range(a.copy_rows)]
        elif ph == "c1s":
            seq, mix = a.copy_seq, MIX_COPY_TEXT
            cw = [near_window(prng, seq, VOCAB - 2, pool) for _ in range(a.tokens_per_step // seq - 1)]
        elif ph == "c1f":
            seq, mix = a.short_seq, MIX_COPY_TEXT
            cw = [far_window(prng, data, seq, VOCAB - 2, pool) for _ in range(a.tokens_per_step // seq - 1)]
        elif ph == "c2":
            seq, mix = a.short_seq, MIX_TASKS
            cw = [copy_window(rng, data, seq, VOCAB - 2)]
        else:
            seq, mix, cw = a.long_seq, MIX_LONG, []
        n_copy = len(cw)
        rows = a.tokens_per_step // seq
        x, y = data.batch(pgen if ph in ("c1s", "c1f") else gen, seq, rows - n_copy, mix)
        if n_copy:
            xc = torch.stack([c[0] for c in cw])
            x, y = torch.cat([xc[:, :-1], x]), torch.cat([xc[:, 1:], y])
        l = F.cross_entropy(forward_logits(model, x).reshape(-1, CONFIG.vocab), y.reshape(-1),
                            reduction="none").reshape(y.shape)
        text = l[n_copy:].mean()
        if n_copy:
            wc = torch.stack([c[1] for c in cw])
            copy = (l[:n_copy] * wc).sum() / wc.sum()
            loss = copy + text
        else:
            copy, loss = None, text
        optimizer_step(model, opt, loss, a.grad_clip)
        step += 1
        tokens += x.numel()
        if step % 5 == 0 or step == 1:
            now = time.time()
            log(f"induct step {step}/{a.max_steps} {ph} seq {seq} copy {copy.item() if copy is not None else float('nan'):.4f} "
                f"text {text.item():.4f} lr {induct_lr(step - 1, a):.2e} tokens {tokens} "
                f"elapsed {elapsed_before + now - t0:.0f}s {(tokens - tok_last) / max(now - t_last, 1e-9):.0f} tok/s")
            t_last, tok_last = now, tokens
        if step % a.probe_every == 0 or step == a.max_steps:
            log_probe("induct", step, model, data, val)
        if step % a.ckpt_every == 0:
            save(ckpt_path, "periodic")
    save(ckpt_path, "final")
    if step == a.max_steps:
        save_atomic(model.state_dict(), os.path.join(work, "model_induct.pt"))
        log(f"induct: done, {step} steps, {tokens} tokens, {elapsed_before + time.time() - t0:.0f}s")


# The recall stage's rows next to its copy row: recall_dense leads (many
# questions a window), text keeps the language model from drifting.
MIX_RECALL = {"recall_dense": 0.45, "recall_short": 0.1, "fortunes": 0.2, "pydoc": 0.15, "debref": 0.1}
MIX_RECALL_LONG = {"recall_far": 0.5, "recall_long": 0.2, "fortunes": 0.15, "pydoc": 0.15}


@dataclasses.dataclass
class RecallArgs:
    """The recall stage, run after induct from WORK/model_induct.pt.

    induct left a model that copies a repeated passage but cannot answer
    "What is the code for NAME?": the answer is keyed on a multi-token
    name, not on the previous token. A 400-step experiment on MIX_RECALL
    rows alone (session 11) moved recall off chance at short range and
    brought text back, but copying faded without copy rows. This stage
    weights the answer tokens of the recall rows answer_weight times (the
    lookup is a few tokens of each window; the rest is filler the model
    already predicts), makes every long_every-th step one row of long_seq,
    so answers at distances up to ~2000 get a gradient too, and can keep
    one copy_window row in every short step (copy_weight > 0).

    The copy loss is weighted copy_weight against the rest; at 0 no copy
    row is drawn. At 1 (as in induct's C2) the first try broke text within
    100 steps: the probe's first showing of text went from 4.70 to 7.18
    nats and fortunes' validation loss from 4.52 to 5.17. At 0.1 (a copied
    token weighing about what a text token does) it was 6.69 and 4.93 at
    step 100, 6.48 and 4.89 at step 200, where the session-11 experiment
    without copy rows was at 4.46 and 4.41: copy windows start with BOS
    and random segments, and text after BOS is what the probe and much of
    the corpus look like. The default is therefore 0.
    """
    steps: int = 800
    short_seq: int = 512
    short_rows: int = 4         # MIX_RECALL rows a short step, next to its copy row
    long_seq: int = MAX_CONTEXT
    long_every: int = 4
    answer_weight: float = 4.0
    copy_weight: float = 0.0
    data_seed: int = SEED + 9   # the row draw's generator; the copy rows' rng is data_seed + 1
    lr: float = 5e-4
    min_lr: float = 5e-5
    decay_steps: int = 400      # linear decay over the last steps
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    probe_every: int = 100
    ckpt_every: int = 10


def recall_lr(step, a):
    start = a.steps - a.decay_steps
    if step < start:
        return a.lr
    return a.lr + (a.min_lr - a.lr) * min(1.0, (step - start + 1) / max(1, a.decay_steps))


def answer_weights(x, y, cue, stop, weight):
    """Per-target loss weights for rows x -> y: weight on the tokens of each
    answer (from after the cue, e.g. "\nAnswer:", through the stop token,
    at most 8 tokens), 1 elsewhere. Also returns the answer mask."""
    ids = torch.cat([x, y[:, -1:]], dim=1)
    n, L = ids.shape
    k = len(cue)
    mask = torch.zeros_like(y, dtype=torch.bool)
    hits = (ids.unfold(1, k, 1) == torch.tensor(cue)).all(dim=2).nonzero().tolist()
    for r, s in hits:
        t = s + k  # first answer token, as an index of ids; target index t-1
        for j in range(t, min(t + 8, L)):
            mask[r, j - 1] = True
            if int(ids[r, j]) == stop:
                break
    return torch.where(mask, torch.tensor(weight), torch.tensor(1.0)), mask


def recall(work, a, time_budget):
    data = Data(work)
    val = data.val["fortunes"]
    require_sources("recall", work, data, MIX_RECALL, MIX_RECALL_LONG)
    enc, _ = load_encoder(work)
    cue, stop = enc.encode("\nAnswer:"), enc.encode(".")[0]
    model = build_model()
    model.load_state_dict(torch.load(os.path.join(work, "model_induct.pt")))
    opt = make_optimizer(model, a)
    gen = torch.Generator().manual_seed(a.data_seed)
    rng = random.Random(a.data_seed + 1)
    base = torch.load(os.path.join(work, "ckpt_induct.pt"))
    step, tokens, elapsed_before = 0, 0, 0.0
    ckpt_path = os.path.join(work, "ckpt_recall.pt")
    ck = resume(ckpt_path, model, opt, gen, rng)
    if ck is not None:
        step, tokens, elapsed_before = ck["step"], ck["tokens"], ck["elapsed"]
        log(f"recall: resumed at step {step}")
    log(f"recall: args {dataclasses.asdict(a)}, threads {torch.get_num_threads()}, "
        f"from induct's step {base['step']}")

    def save(path, tag):
        ck = stage_state(model, opt, gen, rng, step, tokens, elapsed_before + time.time() - t0, a)
        ck.update(train=base["train"], induct=record_of(base))
        save_atomic(ck, path)
        log(f"recall: checkpoint ({tag}) at step {step}")

    model.train()
    t0 = time.time()
    t_last, tok_last = t0, tokens
    ans_sum, ans_n = 0.0, 0
    while step < a.steps:
        if time_budget and elapsed_before + time.time() - t0 > time_budget:
            log(f"recall: time budget {time_budget:.0f}s reached at step {step} (run cut short)")
            break
        for g in opt.param_groups:
            g["lr"] = recall_lr(step, a)
        long = (step + 1) % a.long_every == 0
        if long:
            seq, cw = a.long_seq, []
            x, y = data.batch(gen, seq, 1, MIX_RECALL_LONG)
        else:
            seq = a.short_seq
            cw = [copy_window(rng, data, seq, VOCAB - 2)] if a.copy_weight > 0 else []
            x, y = data.batch(gen, seq, a.short_rows, MIX_RECALL)
            if cw:
                xc = torch.stack([c[0] for c in cw])
                x, y = torch.cat([xc[:, :-1], x]), torch.cat([xc[:, 1:], y])
        n_copy = len(cw)
        l = F.cross_entropy(forward_logits(model, x).reshape(-1, CONFIG.vocab), y.reshape(-1),
                            reduction="none").reshape(y.shape)
        w, am = answer_weights(x[n_copy:], y[n_copy:], cue, stop, a.answer_weight)
        task = (l[n_copy:] * w).sum() / w.sum()
        loss = task
        copy = None
        if n_copy:
            wc = torch.stack([c[1] for c in cw])
            copy = (l[:n_copy] * wc).sum() / wc.sum()
            loss = loss + a.copy_weight * copy
        if am.any():
            ans_sum += l[n_copy:][am].sum().item()
            ans_n += int(am.sum())
        optimizer_step(model, opt, loss, a.grad_clip)
        step += 1
        tokens += x.numel()
        if step % 5 == 0 or step == 1:
            now = time.time()
            log(f"recall step {step}/{a.steps} seq {seq} copy {copy.item() if copy is not None else float('nan'):.4f} "
                f"task {task.item():.4f} answer {ans_sum / max(ans_n, 1):.4f} ({ans_n} tokens) "
                f"lr {recall_lr(step - 1, a):.2e} tokens {tokens} elapsed {elapsed_before + now - t0:.0f}s "
                f"{(tokens - tok_last) / max(now - t_last, 1e-9):.0f} tok/s")
            t_last, tok_last = now, tokens
            ans_sum, ans_n = 0.0, 0
        if step % a.probe_every == 0 or step == a.steps:
            log_probe("recall", step, model, data, val)
        if step % a.ckpt_every == 0:
            save(ckpt_path, "periodic")
    save(ckpt_path, "final")
    if step == a.steps:
        save_atomic(model.state_dict(), os.path.join(work, "model_recall.pt"))
        log(f"recall: done, {step} steps, {tokens} tokens, {elapsed_before + time.time() - t0:.0f}s")


@dataclasses.dataclass
class LookupArgs:
    """The lookup stage, run after recall from WORK/model_recall.pt.

    recall left the model choosing among the codes in context at chance,
    even with no filler and two facts: it had learned to copy a code's
    later pieces once the first was given, never which code a name asks
    for. Its rows mixed recall documents of 4-10 facts with long filler,
    where the choice is a few tokens in hundreds. This stage generates its
    lookup rows on the fly (training names only, 4-digit codes) as a
    curriculum: phase A packs short documents with no filler, from 2 facts
    up to 8, every fact asked once in shuffled order; phase B puts 0 to
    b_filler tokens of training text between facts and questions at
    b_seq; phase C does the same at long_seq with up to c_filler, so the
    eval distances (256, 1024, 2000) are inside what was trained. The
    codes in the fact list get loss weight 0 (random digits teach
    nothing), the answers answer_weight; a quarter of each step's rows
    (every text_every-th step in phase C) is plain text.

    A 300-step probe of phase A alone (2026-11-24, from model_recall.pt at
    1e-3) stayed at chance for 100 steps, then reached 0.74 with two
    training names and 0.54 / 0.50 with four training / unseen names at
    step 200.
    """
    a_steps: int = 400
    b_steps: int = 500
    c_steps: int = 300
    a_seq: int = 256
    b_seq: int = 512
    long_seq: int = MAX_CONTEXT
    tokens_per_step: int = 2048
    grow_facts: int = 130       # phase A: max facts rises from 2 to 8 over these steps
    max_facts: int = 8
    b_filler: int = 400
    c_filler: int = 1900
    text_every: int = 4
    answer_weight: float = 4.0
    data_seed: int = SEED + 21
    lr: float = 1e-3
    min_lr: float = 5e-5
    decay_steps: int = 300      # linear decay over the last steps
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    probe_every: int = 100
    ckpt_every: int = 10
    wordings: bool = False      # draw each document's wording from TRAIN_WORDINGS
    copy_every: int = 0         # every copy_every-th step's text rows are copy windows (0: never)
    text_div: int = 4           # phases A and B: 1/text_div of a step's rows are text
    text_share: float = 0.0     # phases A and B: if > 0, this share of the rows (rounded) instead
    prose_share: float = 0.0    # share of documents with filler whose facts are spread through it
    frames: str = "train"       # wording table when wordings is set: "train" (TRAIN_WORDINGS) or "prose" (PROSE_WORDINGS)
    scaffold_weight: float = 1.0  # loss weight of the task's own words (intro, fact frames, questions)

    @property
    def steps(self):
        return self.a_steps + self.b_steps + self.c_steps


@dataclasses.dataclass
class WordingArgs(LookupArgs):
    """The wording stage, run after lookup from WORK/model_lookup.pt.

    lookup's retrieval is bound to its one sentence frame: with the
    question reworded, recall fell from 0.80 / 0.90 / 0.55 to 0.43 / 0.53 /
    0.30 (256 / 1024 / 2000, 60 items), and with the facts reworded it was
    at chance (session 14, recall-evals --template). This stage trains the
    same curriculum, shorter and at a lower rate, on documents whose intro,
    fact frame and question frame are drawn from TRAIN_WORDINGS, which
    shares no frame with the eval templates ("question", "facts", "both"),
    so those measure a lookup learned across wordings. Every other step's
    text rows are copy windows, to win back the copy of arbitrary tokens
    that lookup lost.
    """
    a_steps: int = 200
    b_steps: int = 300
    c_steps: int = 200
    lr: float = 5e-4
    decay_steps: int = 200
    data_seed: int = SEED + 31
    wordings: bool = True
    copy_every: int = 2


@dataclasses.dataclass
class ProseArgs(LookupArgs):
    """The prose stage, run after wording from WORK/model_wording.pt.

    wording made the question side of recall transfer to an unseen frame
    (0.43 -> 0.88 at 256) but not the fact side (0.23 -> 0.32), and its
    samples drifted into "The code for NAME is" (session 14). This stage
    draws fact frames from PROSE_WORDINGS, four times as many as
    TRAIN_WORDINGS and with the name in other places (two put the code
    before the name), and spreads half the documents' facts through their
    filler as sentences between the paragraphs, so a fact is not always
    the head of a list. Half of every step's rows are text (a quarter
    before), and the task's own words (intro, fact frames, questions) carry
    no loss, only the answers do: a first try that trained them drifted
    into the format in 0.375 of its samples at step 140 (leak-probe;
    wording 0.156), because facts inside prose teach that a fact may
    follow any sentence.
    """
    a_steps: int = 100
    b_steps: int = 200
    c_steps: int = 120
    lr: float = 4e-4
    decay_steps: int = 150
    data_seed: int = SEED + 41
    wordings: bool = True
    copy_every: int = 2
    text_div: int = 2
    text_every: int = 2
    prose_share: float = 0.5
    frames: str = "prose"
    probe_every: int = 140
    scaffold_weight: float = 0.0


@dataclasses.dataclass
class FarArgs(ProseArgs):
    """The far stage, run after prose from WORK/model_prose.pt: prose's
    sequence-2048 phase alone, longer and with more list documents.

    prose left recall at distance 2000 at 0.460 (200 items; lookup 0.610):
    its 2048 phase had 60 lookup rows, half of them prose documents whose
    facts sit anywhere in the filler, so few questions were asked 1,900
    tokens after their fact. Here 200 steps at 2048, two of three rows
    lookup documents of which three quarters keep their facts at the head.
    """
    a_steps: int = 0
    b_steps: int = 0
    c_steps: int = 200
    lr: float = 2e-4
    decay_steps: int = 200
    data_seed: int = SEED + 51
    text_every: int = 3
    prose_share: float = 0.25
    probe_every: int = 100


@dataclasses.dataclass
class PolishArgs(ProseArgs):
    """The polish stage, run after prose from WORK/model_prose.pt: 150 steps
    of 8 rows of 512, three quarters plain text (MIX_COPY_TEXT), a quarter
    prose's lookup documents, at a low rate. prose left the old held-out
    fortunes at 2.028 bits per byte against the 2.0 target.
    """
    a_steps: int = 0
    b_steps: int = 150
    c_steps: int = 0
    tokens_per_step: int = 4096
    text_share: float = 0.75
    lr: float = 1.5e-4
    min_lr: float = 2e-5
    decay_steps: int = 150
    copy_every: int = 0
    data_seed: int = SEED + 61
    probe_every: int = 150


@dataclasses.dataclass
class MendArgs(FarArgs):
    """The mend stage, run after polish from WORK/model_polish.pt: 100
    steps at 2048, three of four rows lookup documents, at a low rate.
    polish reached 1.994 bits per byte on the old held-out fortunes but
    recall at distance 2000 fell to 0.325 (200 items; prose 0.460): its
    512-token rows never asked a question far from its fact.
    """
    c_steps: int = 100
    text_every: int = 4
    lr: float = 1e-4
    min_lr: float = 2e-5
    decay_steps: int = 100
    data_seed: int = SEED + 71


# Training wordings for the wording stage: (intros, fact frames around the
# code, question frames). None of them is, or shares its distinctive words
# with, a RECALL_TEMPLATES entry other than "trained".
TRAIN_WORDINGS = (
    ("Remember these codes.", "Codes to remember:", "Note the numbers below.", ""),
    (("The code for {k} is", "."), ("{k}:", "."), ("The number of {k} is", "."),
     ("{k} was given", "."), ("Code of {k} =", "."), ("For {k}, write", ".")),
    ("Question: What is the code for {k}?\nAnswer:", "Q: What is {k}'s code?\nA:", "The code for {k} is",
     "Which code belongs to {k}? It is", "Look up {k}.\nResult:", "{k} ->"),
)

# Fact frames are (before, after) the code and may name {k} on either side.
# Like TRAIN_WORDINGS they avoid the eval templates' frames: no "has the
# code", no "'s number is", no "Which code goes with", no "Which number".
PROSE_WORDINGS = (
    TRAIN_WORDINGS[0] + ("Some codes follow.", "Keep track of these.", "A few people and their codes:", "", ""),
    TRAIN_WORDINGS[1] + (
        ("{k} uses", "."), ("{k} got", "."), ("{k} picked", " as a code."), ("{k} was assigned", "."),
        ("{k}'s code is", "."), ("{k}'s pin is", "."), ("The pin of {k} is", "."), ("The key for {k} is", "."),
        ("{k} is listed under", "."), ("{k} wrote down", "."), ("On {k}'s card it says", "."),
        ("{k} keeps the code", "."), ("The locker of {k} opens with", "."), ("{k} signed in with", "."),
        ("{k} (code", ")."), ("Code", " belongs to {k}."), ("The code", " is {k}'s."),
        ("{k} chose", " and kept it."),
    ),
    TRAIN_WORDINGS[2] + (
        "What code did {k} get?\nAnswer:", "Tell me {k}'s code:", "{k}'s code is", "Find {k}.\nFound:",
        "Which code does {k} use? Answer:", "The code of {k}? That is", "Question: {k}'s code?\nAnswer:",
    ),
)
WORDING_TABLES = {"train": TRAIN_WORDINGS, "prose": PROSE_WORDINGS}


def text_documents(work):
    """The token lists of WORK's fortunes and pydoc training documents
    (without BOS/EOS): the filler prepare_tasks and lookup draw from."""
    _, vocab = load_encoder(work)
    bos, eos = vocab[BOS], vocab[EOS]
    docs = []
    for src in ("fortunes", "pydoc"):
        st = np.load(os.path.join(work, f"{src}_train.npy")).astype(np.int64)
        cut = np.flatnonzero(st == bos)
        for a, b in zip(cut, list(cut[1:]) + [len(st)]):
            body = st[a + 1:b]
            if len(body) and body[-1] == eos:
                body = body[:-1]
            docs.append(body.tolist())
    return docs


class LookupRows:
    """Generates lookup rows: (ids of seq + 1 tokens, target weights of seq)."""

    def __init__(self, work, rng, answer_weight, wordings=False, frames="train", prose_share=0.0, scaffold=1.0):
        self.wordings = WORDING_TABLES[frames] if wordings else None
        self.prose_share, self.scaffold = prose_share, scaffold
        self.enc, vocab = load_encoder(work)
        self.bos, self.eos = vocab[BOS], vocab[EOS]
        self.names, _ = corpus.split_names(random.Random(SEED))
        self.docs = text_documents(work)
        self.rng, self.aw = rng, answer_weight
        self.sep = self.enc.encode("\n\n")
        # A fact sentence goes into prose filler after a token that ends a
        # sentence or line and before one that starts with white space.
        text = {i: self.enc.decode([i]) for i in vocab.values()}
        self.ends = {i for i, t in text.items() if t.endswith((".", "!", "?", "\n"))}
        self.lines = {i for i, t in text.items() if t.endswith("\n")}
        self.starts = {i for i, t in text.items() if t[:1].isspace()}

    def filler(self, n):
        out = []
        while len(out) < n:
            out += (self.sep if out else []) + self.docs[self.rng.randrange(len(self.docs))]
        return out[:n]

    def document(self, n_facts, filler):
        rng, enc = self.rng, self.enc
        keys = rng.sample(self.names, n_facts)
        vals = [str(rng.randint(1000, 9999)) for _ in keys]
        ids, w = [self.bos], [1.0]
        def put(text, weight):
            e = enc.encode(text)
            ids.extend(e)
            w.extend([weight] * len(e))
        sw = self.scaffold
        intro, frame, asks = "Remember these codes.", ("The code for {k} is", "."), None
        if self.wordings:
            intros, frames, asks = self.wordings
            intro, frame = rng.choice(intros), rng.choice(frames)

        def fact(k, v, lead, frame):
            put(lead + frame[0].format(k=k), sw)
            put(f" {v}", 0.0)
            put(frame[1].format(k=k), sw)

        if filler and self.prose_share and rng.random() < self.prose_share:
            # Facts as sentences between the filler's own, in order, each
            # in a frame of its own.
            f = self.filler(filler)
            cuts = [j + 1 for j in range(len(f) - 1) if f[j] in self.ends and f[j + 1] in self.starts]
            at = sorted(rng.sample(cuts, n_facts)) if len(cuts) >= n_facts else [len(f)] * n_facts
            last = 0
            for k, v, a in zip(keys, vals, at):
                ids.extend(f[last:a])
                w.extend([1.0] * (a - last))
                last = a
                fact(k, v, "" if a == 0 or f[a - 1] in self.lines else " ", rng.choice(self.wordings[1]))
            ids.extend(f[last:])
            w.extend([1.0] * (len(f) - last))
        else:
            put(intro, sw)
            for i, (k, v) in enumerate(zip(keys, vals)):
                fact(k, v, "" if i == 0 and not intro else " ", frame)
            if filler:
                put("\n\n", sw)
                f = self.filler(filler)
                ids.extend(f)
                w.extend([1.0] * len(f))
        for qi in rng.sample(range(n_facts), n_facts):
            ask = rng.choice(asks) if asks else "Question: What is the code for {k}?\nAnswer:"
            put("\n\n" + ask.format(k=keys[qi]), sw)
            put(f" {vals[qi]}.", self.aw)
        ids.append(self.eos)
        w.append(sw)
        return ids, w  # w[i] weighs the prediction of ids[i] (from ids[i - 1])

    def row(self, seq, max_facts, max_filler):
        ids, w = [], []
        while len(ids) < seq + 1:
            n = self.rng.randint(2, max_facts)
            d, dw = self.document(n, self.rng.randint(0, max_filler) if max_filler else 0)
            ids += d
            w += dw
        return torch.tensor(ids[:seq + 1]), torch.tensor(w[1:seq + 1], dtype=torch.float32)


@torch.no_grad()
def lookup_accuracy(model, rows, names, n_facts, n=50, seed=5, template="trained"):
    """Share of n zero-distance questions (n_facts facts, then one question,
    worded by RECALL_TEMPLATES[template]) whose true code scores highest
    among the document's codes."""
    was = model.training
    model.eval()
    rng, enc, ok = random.Random(seed), rows.enc, 0
    intro, fact, ask = RECALL_TEMPLATES[template]
    for _ in range(n):
        keys, vals, head = corpus.recall_parts(rng, names, n_facts)
        if template != "trained":
            head = intro + " ".join(fact.format(k=k, v=v) for k, v in zip(keys, vals))
        qi = rng.randrange(n_facts)
        ids = [rows.bos] + enc.encode(head + "\n\n" + ask.format(k=keys[qi]))
        cands = [enc.encode(f" {v}.") for v in vals]
        scores = []
        for c in cands:
            lp = F.log_softmax(forward_logits(model, torch.tensor([ids + c[:-1]]))[0, len(ids) - 1:], -1)
            scores.append(sum(lp[j, c[j]].item() for j in range(len(c))))
        ok += max(range(n_facts), key=scores.__getitem__) == qi
    model.train(was)
    return ok / n


LEAK = re.compile(r"\bcodes?\b|\b\d{4}\.|Answer:", re.IGNORECASE)


@torch.no_grad()
def leak_rate(model, data, enc, n=64, prompt=24, gen=40, temperature=0.8, seed=9):
    """Share of n sampled continuations of held fortunes that drift into the
    recall task's format (LEAK: "code", a 4-digit number ending a sentence,
    "Answer:"), counted only where the prompt itself has no such match.
    The prompts are the first `prompt` tokens of validation fortunes."""
    was = model.training
    model.eval()
    st = data.val["fortunes"]
    bos = int(st[0])
    cut = torch.nonzero(st == bos).flatten().tolist() + [len(st)]
    heads = [st[a:a + 1 + prompt] for a, b in zip(cut, cut[1:]) if b - a > prompt + 1]
    heads = [h for h in heads if not LEAK.search(enc.decode(h[1:].tolist()))][:n]
    g = torch.Generator().manual_seed(seed)
    x = torch.stack(heads)
    for _ in range(gen):
        p = F.softmax(forward_logits(model, x)[:, -1] / temperature, -1)
        x = torch.cat([x, torch.multinomial(p, 1, generator=g)], 1)
    texts = [enc.decode([t for t in row[1 + prompt:].tolist() if t < VOCAB - 2]) for row in x]
    hits = sum(bool(LEAK.search(t)) for t in texts)
    model.train(was)
    return hits / max(1, len(texts)), hits, texts


def lookup_phase(step, a):
    """(seq, lookup rows, text rows, max facts, max filler) of a step."""
    if step < a.a_steps:
        facts = min(a.max_facts, 2 + (a.max_facts - 2) * step // max(1, a.grow_facts))
        n = a.tokens_per_step // a.a_seq
        t = round(n * a.text_share) if a.text_share else n // a.text_div
        return a.a_seq, n - t, t, facts, 0
    if step < a.a_steps + a.b_steps:
        n = a.tokens_per_step // a.b_seq
        t = round(n * a.text_share) if a.text_share else n // a.text_div
        grow = min(1.0, (step - a.a_steps + 1) / (a.b_steps / 2))
        return a.b_seq, n - t, t, a.max_facts, int(a.b_filler * grow)
    text = (step + 1) % a.text_every == 0
    return a.long_seq, 0 if text else 1, 1 if text else 0, a.max_facts, a.c_filler


def lookup(work, a, time_budget, stage="lookup"):
    """The lookup stage (from recall) or, with stage "wording" and
    WordingArgs, the wording stage (from lookup): the same loop."""
    prev = {"lookup": "recall", "wording": "lookup", "prose": "wording", "far": "prose", "polish": "prose",
            "mend": "polish"}[stage]
    data = Data(work)
    val = data.val["fortunes"]
    model = build_model()
    model.load_state_dict(torch.load(os.path.join(work, f"model_{prev}.pt")))
    opt = make_optimizer(model, a)
    gen = torch.Generator().manual_seed(a.data_seed)
    rng = random.Random(a.data_seed + 1)
    rows = LookupRows(work, rng, a.answer_weight, a.wordings, a.frames, a.prose_share, a.scaffold_weight)
    train_names, eval_names = corpus.split_names(random.Random(SEED))
    base = torch.load(os.path.join(work, f"ckpt_{prev}.pt"))
    step, tokens, elapsed_before = 0, 0, 0.0
    ckpt_path = os.path.join(work, f"ckpt_{stage}.pt")
    ck = resume(ckpt_path, model, opt, gen, rng)
    if ck is not None:
        step, tokens, elapsed_before = ck["step"], ck["tokens"], ck["elapsed"]
        log(f"{stage}: resumed at step {step}")
    log(f"{stage}: args {dataclasses.asdict(a)}, threads {torch.get_num_threads()}, from {prev}'s step {base['step']}")

    def save(path, tag):
        ck = stage_state(model, opt, gen, rng, step, tokens, elapsed_before + time.time() - t0, a)
        # Each stage carries the records of all before it.
        ck.update({k: base[k] for k in ("train", "induct", "recall", "lookup", "wording", "prose", "polish") if k in base})
        ck[prev] = record_of(base)
        save_atomic(ck, path)
        log(f"{stage}: checkpoint ({tag}) at step {step}")

    def probe():
        log_probe(stage, step, model, data, val)
        line = (f"{stage} probe step {step} zero-distance accuracy: 2 training names "
                f"{lookup_accuracy(model, rows, train_names, 2):.2f}, 4 training "
                f"{lookup_accuracy(model, rows, train_names, 4):.2f}, 4 unseen {lookup_accuracy(model, rows, eval_names, 4):.2f}")
        if a.wordings:
            line += ", 4 unseen reworded (" + ", ".join(
                f"{t} {lookup_accuracy(model, rows, eval_names, 4, template=t):.2f}" for t in ("question", "facts", "both")) + ")"
        if a.prose_share:
            line += f", leak {leak_rate(model, data, rows.enc)[0]:.3f}"
        log(line)

    model.train()
    t0 = time.time()
    t_last, tok_last = t0, tokens
    while step < a.steps:
        if time_budget and elapsed_before + time.time() - t0 > time_budget:
            log(f"lookup: time budget {time_budget:.0f}s reached at step {step} (run cut short)")
            break
        for g in opt.param_groups:
            g["lr"] = recall_lr(step, a)
        seq, n_look, n_text, facts, fill = lookup_phase(step, a)
        xs, ys, ws = [], [], []
        for _ in range(n_look):
            ids, w = rows.row(seq, facts, fill)
            xs.append(ids[:-1])
            ys.append(ids[1:])
            ws.append(w)
        if n_text and a.copy_every and step % a.copy_every == 0:
            for _ in range(n_text):
                ids, w = copy_window(rng, data, seq, rows.bos)
                xs.append(ids[:-1])
                ys.append(ids[1:])
                ws.append(w.float())
        elif n_text:
            xt, yt = data.batch(gen, seq, n_text, MIX_COPY_TEXT)
            xs += list(xt)
            ys += list(yt)
            ws += [torch.ones(seq)] * n_text
        x, y, w = torch.stack(xs), torch.stack(ys), torch.stack(ws)
        l = F.cross_entropy(forward_logits(model, x).reshape(-1, CONFIG.vocab), y.reshape(-1),
                            reduction="none").reshape(y.shape)
        loss = (l * w).sum() / w.sum()
        optimizer_step(model, opt, loss, a.grad_clip)
        step += 1
        tokens += x.numel()
        if step % 10 == 0 or step == 1:
            now = time.time()
            am = w[:n_look] == a.answer_weight
            ans = l[:n_look][am].mean().item() if am.any() else float("nan")
            txt = l[n_look:].mean().item() if n_text else float("nan")
            log(f"{stage} step {step}/{a.steps} seq {seq} facts {facts} filler {fill} answer {ans:.4f} "
                f"text {txt:.4f} lr {recall_lr(step - 1, a):.2e} tokens {tokens} "
                f"elapsed {elapsed_before + now - t0:.0f}s {(tokens - tok_last) / max(now - t_last, 1e-9):.0f} tok/s")
            t_last, tok_last = now, tokens
        if step % a.probe_every == 0 or step == a.steps:
            probe()
        if step % a.ckpt_every == 0:
            save(ckpt_path, "periodic")
    save(ckpt_path, "final")
    if step == a.steps:
        save_atomic(model.state_dict(), os.path.join(work, f"model_{stage}.pt"))
        log(f"{stage}: done, {step} steps, {tokens} tokens, {elapsed_before + time.time() - t0:.0f}s")


def distance_list(s):
    """argparse type for --distances: positive token counts, comma-separated."""
    try:
        out = tuple(int(x) for x in s.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"distances {s!r}: want comma-separated integers")
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"distances {s!r}: each must be at least 1")
    return out


def recall_evals(work, out, n, template="trained", distances=RECALL_DISTANCES, lead=0):
    """Writes a larger recall set than prepare's 40 items a distance, for a
    tighter estimate (one standard error at 40 items is ~0.07): n items a
    distance, drawn from a seed of its own (the same eval names and
    held-out filler as the shipped set, so an item can coincide with one
    of its 40 only by chance). lead puts that many filler tokens before
    the facts (recall_items); the default sets (all distances, lead 0)
    are the same bytes as before distances and lead existed, and a
    shorter distances list gives the same items as the full list up to
    the first distance left out."""
    enc, _ = load_encoder(work)
    with open(os.path.join(work, "held_docs.json"), encoding="utf-8") as f:
        hd = json.load(f)
    held = hd["fortunes"] + hd["pydoc"] + hd["debref"]
    held_tok = [len(enc.encode(d)) for d in held]
    _, eval_names = corpus.split_names(random.Random(SEED))
    rng = random.Random(SEED + 11)
    os.makedirs(out, exist_ok=True)
    for dist in distances:
        items = recall_items(rng, enc, held, held_tok, eval_names, dist, n, template, lead)
        write_jsonl(os.path.join(out, f"recall_{dist}.jsonl"), items)
        log(f"recall-evals: {len(items)} items at distance {dist}, {lead} lead tokens -> {out}")


def compact(src, dst):
    """Writes a checkpoint small enough to commit: the weights stay fp32, the
    Adam moments become bfloat16 (torch casts them back to fp32 on load).
    A run resumed from it is not bit-identical to one that never stopped."""
    ck = torch.load(src)
    for st in ck["opt"]["state"].values():
        for k in ("exp_avg", "exp_avg_sq"):
            st[k] = st[k].to(torch.bfloat16)
    ck["compact"] = "Adam moments stored as bfloat16"
    save_atomic(ck, dst)
    log(f"compact: {src} step {ck['step']} -> {dst} ({os.path.getsize(dst)} bytes)")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--work", required=True)
    p = sub.add_parser("prepare-tasks", help="add the task-stage sources to a prepared work directory")
    p.add_argument("--work", required=True)
    p = sub.add_parser("train")
    p.add_argument("--work", required=True)
    p.add_argument("--task-from", type=int, default=TrainArgs.task_from)
    p.add_argument("--stable-steps", type=int, default=TrainArgs.stable_steps)
    p.add_argument("--decay-steps", type=int, default=TrainArgs.decay_steps)
    p.add_argument("--long-steps", type=int, default=TrainArgs.long_steps)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--time-budget", type=float, default=0, help="seconds; safety stop, 0 = none")
    p = sub.add_parser("induct", help="the induction stage after train (from WORK/model_final.pt)")
    p.add_argument("--work", required=True)
    p.add_argument("--copy-steps", type=int, default=InductArgs.copy_steps)
    p.add_argument("--dense-from", type=int, default=InductArgs.dense_from)
    p.add_argument("--sub-steps", type=int, default=InductArgs.sub_steps)
    p.add_argument("--far-steps", type=int, default=InductArgs.far_steps)
    p.add_argument("--task-steps", type=int, default=InductArgs.task_steps)
    p.add_argument("--long-steps", type=int, default=InductArgs.long_steps)
    p.add_argument("--decay-steps", type=int, default=InductArgs.decay_steps)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--time-budget", type=float, default=0, help="seconds; safety stop, 0 = none")
    p = sub.add_parser("recall", help="the recall stage after induct (from WORK/model_induct.pt)")
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, default=RecallArgs.steps)
    p.add_argument("--decay-steps", type=int, default=RecallArgs.decay_steps)
    p.add_argument("--answer-weight", type=float, default=RecallArgs.answer_weight)
    p.add_argument("--copy-weight", type=float, default=RecallArgs.copy_weight)
    p.add_argument("--data-seed", type=int, default=RecallArgs.data_seed,
                   help="seed of the row draw (another seed to continue a finished stage on other windows)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--time-budget", type=float, default=0, help="seconds; safety stop, 0 = none")
    for name, args_cls, help_ in (("lookup", LookupArgs, "the lookup stage after recall (from WORK/model_recall.pt)"),
                                  ("wording", WordingArgs, "the wording stage after lookup (from WORK/model_lookup.pt)"),
                                  ("prose", ProseArgs, "the prose stage after wording (from WORK/model_wording.pt)"),
                                  ("far", FarArgs, "the far stage after prose (from WORK/model_prose.pt)"),
                                  ("polish", PolishArgs, "the polish stage after prose (from WORK/model_prose.pt)"),
                                  ("mend", MendArgs, "the mend stage after polish (from WORK/model_polish.pt)")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--work", required=True)
        for flag in ("a_steps", "b_steps", "c_steps", "decay_steps"):
            p.add_argument("--" + flag.replace("_", "-"), type=int, default=getattr(args_cls, flag))
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--time-budget", type=float, default=0, help="seconds; safety stop, 0 = none")
    p = sub.add_parser("export")
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--stage", choices=("train", "induct", "recall", "lookup", "wording", "prose", "far", "polish", "mend"), default="train",
                   help="whose weights: train's (model_final.pt) or a later stage's (model_STAGE.pt)")
    p = sub.add_parser("recall-evals", help="a larger recall eval set than prepare's, for tighter estimates")
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--items", type=int, default=200)
    p.add_argument("--template", choices=sorted(RECALL_TEMPLATES), default="trained",
                   help="the wording of facts and question (trained: the training rows')")
    p.add_argument("--distances", type=distance_list, default=RECALL_DISTANCES,
                   help="comma-separated fact-to-answer distances in tokens (default 256,1024,2000)")
    p.add_argument("--lead", type=int, default=0,
                   help="filler tokens before the facts, to put them mid-context (default 0: facts first)")
    p = sub.add_parser("leak-probe", help="how often sampled text drifts into the recall task's format")
    p.add_argument("--work", required=True)
    p.add_argument("--stage", choices=("train", "induct", "recall", "lookup", "wording", "prose", "far", "polish", "mend"), default="lookup")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p = sub.add_parser("compact", help="shrink a checkpoint to commit it (Adam moments in bfloat16)")
    p.add_argument("src")
    p.add_argument("dst")
    args = ap.parse_args()
    setup_torch(getattr(args, "threads", 2))
    if args.cmd == "prepare":
        prepare(args.work)
    elif args.cmd == "prepare-tasks":
        prepare_tasks(args.work)
    elif args.cmd == "train":
        a = TrainArgs(task_from=args.task_from, stable_steps=args.stable_steps, decay_steps=args.decay_steps, long_steps=args.long_steps)
        train(args.work, a, args.time_budget)
    elif args.cmd == "induct":
        a = InductArgs(copy_steps=args.copy_steps, dense_from=args.dense_from, sub_steps=args.sub_steps,
                       far_steps=args.far_steps, task_steps=args.task_steps, long_steps=args.long_steps,
                       decay_steps=args.decay_steps)
        induct(args.work, a, args.time_budget)
    elif args.cmd == "recall":
        a = RecallArgs(steps=args.steps, decay_steps=args.decay_steps, answer_weight=args.answer_weight,
                       copy_weight=args.copy_weight, data_seed=args.data_seed)
        recall(args.work, a, args.time_budget)
    elif args.cmd in ("lookup", "wording", "prose", "far", "polish", "mend"):
        cls = {"lookup": LookupArgs, "wording": WordingArgs, "prose": ProseArgs, "far": FarArgs, "polish": PolishArgs,
               "mend": MendArgs}[args.cmd]
        a = cls(a_steps=args.a_steps, b_steps=args.b_steps, c_steps=args.c_steps, decay_steps=args.decay_steps)
        lookup(args.work, a, args.time_budget, args.cmd)
    elif args.cmd == "export":
        import export_default
        export_default.export(args.work, args.out, args.stage)
    elif args.cmd == "recall-evals":
        recall_evals(args.work, args.out, args.items, args.template, args.distances, args.lead)
    elif args.cmd == "leak-probe":
        import export_default
        model = export_default.load_model(args.work, args.stage)
        rate, hits, samples = leak_rate(model, Data(args.work), load_encoder(args.work)[0], n=args.prompts)
        print(f"{args.stage}: {hits}/{len(samples)} samples leak the task format ({rate:.3f})")
        for t in samples[:4]:
            print("  ---", repr(t))
    elif args.cmd == "compact":
        compact(args.src, args.dst)


if __name__ == "__main__":
    main()
