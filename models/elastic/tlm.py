#!/usr/bin/python3
"""Dual-head TLM of ElastiLM (spec §3a.7-8, §3c), scaled down, with its
labels and tasks.

    tlm.py tasks  --model EL --out W [--n-train 160 --n-eval 60]
    tlm.py grid   --model EL --work W --split train           (PyTorch; labels' raw material)
    tlm.py train  --model EL --work W --profile EL/profile.json
    tlm.py grid   --model EL --work W --split eval --tlm W/tlm.pt   (oracle table)

EL is an elastic model folder (`tl elastic build`), W a work folder. The
pipeline that runs all of it, profile and trace included, is tlm_pipeline.sh.

Tasks (spec §3c substitutes), built from the local corpus and split by
document hash (models/train/corpus.py: split_of): the *train* split of the
documents feeds the TLM's labels, the *held* split the evaluation.

* continuation: 4-way multiple choice, the true next 8 tokens of a prose
  document (after 24-64 tokens of it) against 8-token spans of three other documents of the same
  split, scored by the LM's summed log-likelihood (ARC-style).
* lookup: key -> value in-context lookup ("select the right item"): four
  facts "The code for K is V.", 10-30 filler tokens of the split, then the
  question; the 4 candidates are values of the listed facts. Train and
  evaluation keys are disjoint (the key's own hash picks its split).

Every prompt has a *tail* that compression never drops (the question, or
the last 4 tokens of a continuation context).

Score-head labels: **self-information** (LLMLingua-style): retain = the
token is in the top 50% of the compressible part by -log p(token | prefix)
under the full (100%) LM. The first token has no prefix and is retained.

Decision labels: self-induced on the train split. `grid` runs the LM at every
(model level m, prompt level p) of the grid (GRID below) with the prompt
compressed to p of its compressible tokens (kept in their original order,
ranked by self-information in the train grid, by the score head in the eval
grid) and records whether the LM's top candidate is the answer. `train`
labels each (prompt, SLO) with the lightest decision (smallest profiled
TTFT, ties by model level) that is feasible by the measured profile and
answers correctly; with none correct, a random feasible one (the paper's
default); with none feasible, the lightest.

TLM: a post-LN BERT encoder (models/export/bert.py's blocks), 6 layers of
dim 64: 3 shared bottom layers, then 3 layers per head (9 layer passes,
about 5% of the LM's linear MACs per token, the paper's TLM budget). The input is
[CLS] [TTFT-k] [TPOT-k] prompt tokens (the LM's own tokenizer, so scores
map one-to-one to the LM's tokens), the SLO as special tokens with
orthogonally initialised embeddings (k = round(10 * fraction)). Pretrained
by masked-token prediction on the train split, then the score head (bottom
frozen), then the decision head (bottom frozen).

Deviations, named: the grid is by default 3 x 3 levels (20, 60, 100 for
the model and the prompt; `tasks --grid` changes it), not 9 x 9, to keep the
labelling within minutes of CPU on a shared 2-core machine; the TLM has 6 layers of dim 64 per path (~0.3M parameters besides its
embedding), not MobileBERT's 24 layers and 40M.
"""

import argparse
import hashlib
import json
import math
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "models", "train"))
sys.path.insert(0, os.path.join(REPO, "models", "export"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import bert  # noqa: E402
import bpe  # noqa: E402
import corpus  # noqa: E402
import elastic  # noqa: E402
import exportlib  # noqa: E402
import llama  # noqa: E402

GRID = [20, 60, 100]  # tasks --grid sets it; the other steps read it from tasks.json
SEED = 1111
MAX_TLM = 320  # TLM positions: 3 SLO/CLS slots + the prompt
N_FACTS = 4
CONT_TOKENS = 8
# The six SLO classes of the trace (spec §3b, Table 3): <TTFT, TPOT>.
SLO_CLASSES = [(1.0, 1.0), (0.8, 0.9), (0.6, 0.8), (0.4, 0.7), (0.2, 0.6), (0.2, 0.5)]


def log(msg):
    print(f"tlm: {msg}", flush=True)


def atomic_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
    os.replace(tmp, path)


def write_jsonl(path, items):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def load_encoder(model_dir):
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    return bpe.Encoder([tuple(m) for m in j["model"]["merges"]], j["model"]["vocab"])


def model_config(model_dir):
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        return json.load(f)


# ------------------------------------------------------------------ tasks

def key_split(name):
    """'train' or 'held' from the key's own hash (disjoint key sets)."""
    return "held" if int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % 2 == 0 else "train"


def load_grid(work):
    """Sets GRID from W/tasks.json."""
    global GRID
    with open(os.path.join(work, "tasks.json"), encoding="utf-8") as f:
        GRID = json.load(f)["grid"]


def make_tasks(model_dir, out, n_train, n_eval, log=log):
    enc = load_encoder(model_dir)
    bos = model_config(model_dir)["bos_token_id"]
    splits = corpus.build_text_splits(REPO, log)
    os.makedirs(out, exist_ok=True)
    mlm_stream(enc, splits, out, log)
    meta = {"bos": bos, "grid": GRID, "splits": {}}
    for part, n, name in (("train", n_train, "train"), ("held", n_eval, "eval")):
        rng = random.Random(SEED + (0 if part == "train" else 1))
        prose = [d for s in ("pydoc", "debref", "fortunes") for d in splits[s][part]]
        toks = [enc.encode(d) for d in prose]
        long_ = [i for i, t in enumerate(toks) if len(t) >= 120]
        fill = [i for i, t in enumerate(toks) if len(t) >= 60]
        keys = [k for k in corpus.NAMES if key_split(k) == part]
        items = []
        while len(items) < n:
            if len(items) % 2 == 0:
                i = rng.choice(long_)
                t = toks[i]
                cut = rng.randint(24, min(len(t) - CONT_TOKENS, 64))
                cands = [t[cut:cut + CONT_TOKENS]]
                while len(cands) < 4:
                    j = rng.choice(long_)
                    if j == i:
                        continue
                    c = rng.randint(20, len(toks[j]) - CONT_TOKENS)
                    cands.append(toks[j][c:c + CONT_TOKENS])
                ans = rng.randrange(4)
                cands[0], cands[ans] = cands[ans], cands[0]
                ids = [bos] + t[:cut]
                items.append({"task": "continuation", "doc": corpus.doc_hash(prose[i])[:16], "ids": ids,
                              "tail": 4, "candidates": cands, "answer": ans})
            else:
                ks = rng.sample(keys, N_FACTS)
                vals = [str(rng.randint(1000, 9999)) for _ in ks]
                facts = " ".join(f"The code for {k} is {v}." for k, v in zip(ks, vals))
                j = rng.choice(fill)
                filler = enc.decode(toks[j][:rng.randint(10, 30)])
                qi = rng.randrange(N_FACTS)
                head = "Remember these codes. " + facts + "\n\n" + filler + "\n\n"
                question = f"Question: What is the code for {ks[qi]}?\nAnswer:"
                others = rng.sample([x for x in range(N_FACTS) if x != qi], 3)
                ans = rng.randrange(4)
                order = others[:ans] + [qi] + others[ans:]
                hids, qids = enc.encode(head), enc.encode(question)
                items.append({"task": "lookup", "doc": corpus.doc_hash(prose[j])[:16], "ids": [bos] + hids + qids,
                              "tail": len(qids), "candidates": [enc.encode(f" {vals[x]}.") for x in order],
                              "answer": ans})
        docs = sorted({it["doc"] for it in items})
        meta["splits"][name] = {"corpus_split": part, "items": len(items), "documents": len(docs)}
        write_jsonl(os.path.join(out, f"tasks_{name}.jsonl"), items)
        log(f"tasks: {name}: {len(items)} items from {len(docs)} documents of the {part} split")
    tr = {it["doc"] for it in read_jsonl(os.path.join(out, "tasks_train.jsonl"))}
    ev = {it["doc"] for it in read_jsonl(os.path.join(out, "tasks_eval.jsonl"))}
    if tr & ev:
        raise SystemExit(f"tasks: {len(tr & ev)} documents in both splits")
    atomic_json(os.path.join(out, "tasks.json"), meta)


# ------------------------------------------------------------------- LM side

class LevelModel:
    """The elastic LM in PyTorch, cut to a level by zeroing the inactive
    heads' O columns and neurons' down columns (exactly the prefix the
    engine runs; lora.py's cut)."""

    def __init__(self, model_dir):
        self.model, self.cfg = elastic.load_llama_onnx(os.path.join(model_dir, "model.onnx"))
        with open(os.path.join(model_dir, "elastic.json"), encoding="utf-8") as f:
            self.spec = json.load(f)
        self.head_dim = self.spec["head_dim"]
        self.full = {k: v.clone() for k, v in self.model.state_dict().items()}
        self.level = 100

    def set_level(self, pct):
        lv = next(x for x in self.spec["levels"] if x["level"] == pct)
        self.model.load_state_dict(self.full)
        with torch.no_grad():
            for layer, lw in zip(self.model.layers, lv["layers"]):
                layer.self_attn.o_proj.weight[:, lw["q_heads"] * self.head_dim:] = 0
                layer.mlp.down_proj.weight[:, lw["ffn"]:] = 0
        self.level = pct

    @torch.no_grad()
    def logits(self, ids):
        return elastic.llama_logits(self.model, torch.tensor([ids]))[0]

    @torch.no_grad()
    def choose(self, prompt, cands):
        """Index of the candidate with the largest summed log-likelihood. The
        prompt runs once; the candidates run as a batch on its KV cache."""
        cfg = self.cfg
        n = len(prompt)
        outs = self.model(torch.tensor([prompt]), torch.ones(1, n, dtype=torch.int64),
                          torch.arange(n)[None, :], *llama.empty_past(cfg, 1, 0))
        last = F.log_softmax(outs[0][0, -1], -1)
        b, width = len(cands), max(len(c) for c in cands)
        past = [t.expand(b, *t.shape[1:]).contiguous() for t in outs[1:]]
        batch = torch.zeros(b, width, dtype=torch.int64)
        for i, c in enumerate(cands):
            batch[i, :len(c)] = torch.tensor(c)
        mask = torch.ones(b, n + width, dtype=torch.int64)
        pos = torch.arange(n, n + width).repeat(b, 1)
        lp = F.log_softmax(self.model(batch, mask, pos, *past)[0], -1)
        scores = []
        for i, c in enumerate(cands):
            s = last[c[0]].item()
            for j in range(1, len(c)):
                s += lp[i, j - 1, c[j]].item()
            scores.append(s)
        return int(np.argmax(scores))


def self_information(lm, ids):
    """-log p(token | prefix) under the current level; the first token +inf."""
    lp = F.log_softmax(lm.logits(ids), -1)
    si = [float("inf")]
    for i in range(1, len(ids)):
        si.append(-lp[i - 1, ids[i]].item())
    return si


def compress(ids, tail, scores, pct):
    """Keeps the first token, the tail and the top pct% of the rest by score,
    in their original order."""
    body = list(range(1, len(ids) - tail))
    keep_n = int(math.floor(len(body) * pct / 100.0 + 0.5))  # Go's math.Round
    ranked = sorted(body, key=lambda i: (-scores[i], i))[:keep_n]
    keep = sorted(set([0] + ranked + list(range(len(ids) - tail, len(ids)))))
    return [ids[i] for i in keep]


def retention_labels(si, tail):
    """1 for the top half of the compressible tokens by self-information."""
    n = len(si)
    body = list(range(1, n - tail))
    top = set(sorted(body, key=lambda i: (-si[i], i))[:len(body) // 2])
    return [1 if (i == 0 or i >= n - tail or i in top) else 0 for i in range(n)]


def run_grid(model_dir, work, split, tlm_path=None, limit=0, shard=None, log=log):
    """Writes grid_SPLIT.jsonl: each item with its correctness at every
    decision. shard (k, n) takes every n-th item from the k-th into
    grid_SPLIT.k.jsonl, so that n processes share the work; concatenated,
    the shards hold every item (in another order, which nothing depends on)."""
    items = read_jsonl(os.path.join(work, f"tasks_{split}.jsonl"))
    if limit:
        items = items[:limit]
    if shard:
        items = items[shard[0]::shard[1]]
    lm = LevelModel(model_dir)
    tlm = None
    if tlm_path:
        tlm = load_tlm(tlm_path)
    lm.set_level(100)
    t0 = time.time()
    ranks = []
    for it in items:
        ids = it["ids"]
        if tlm is not None:  # the evaluation grid: compression by the score head
            ranks.append(tlm_scores(tlm, ids))
            continue
        si = self_information(lm, ids)
        it["self_information"] = [round(x, 4) if math.isfinite(x) else 99.0 for x in si]
        it["retain"] = retention_labels(si, it["tail"])
        ranks.append(si)
    table = []
    for m in GRID:
        lm.set_level(m)
        for k, it in enumerate(items):
            row = table[k] if m != GRID[0] else None
            if row is None:
                row = {}
                table.append(row)
            for p in GRID:
                prompt = compress(it["ids"], it["tail"], ranks[k], p)
                row[f"{m},{p}"] = int(lm.choose(prompt, it["candidates"]) == it["answer"])
        acc = {p: sum(r[f"{m},{p}"] for r in table) / len(items) for p in GRID}
        log(f"grid {split}: model level {m}%: accuracy by prompt level {acc} ({time.time() - t0:.0f} s)")
    for it, row in zip(items, table):
        it["correct"] = row
    name = f"grid_{split}.jsonl" if not shard else f"grid_{split}.{shard[0]}.jsonl"
    write_jsonl(os.path.join(work, name), items)
    log(f"grid {split}: wrote {name} ({len(items)} items, ranking by {'the score head' if tlm else 'self-information'})")


# ---------------------------------------------------------------- the TLM

class TLMConfig:
    def __init__(self, vocab):
        self.lm_vocab = vocab
        self.ttft0 = vocab          # TTFT-k, k = 0..10
        self.tpot0 = vocab + 11     # TPOT-k
        self.cls = vocab + 22
        self.mask = vocab + 23
        self.vocab = vocab + 24
        self.max_positions = MAX_TLM
        self.type_vocab = 1
        self.dim = 64
        self.n_heads = 4
        self.ffn = 128
        self.eps = 1e-12
        self.shared = 3
        self.per_head = 3
        self.n_model = len(GRID)
        self.n_prompt = len(GRID)

    def as_dict(self):
        return dict(self.__dict__)


class TLM(nn.Module):
    """Shared bottom, a score branch (per-token retain logit) and a decision
    branch (model-level and prompt-level logits from the CLS position)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embeddings = bert.Embeddings(cfg)
        self.shared = nn.ModuleList(bert.Layer(cfg) for _ in range(cfg.shared))
        self.score_layers = nn.ModuleList(bert.Layer(cfg) for _ in range(cfg.per_head))
        self.decision_layers = nn.ModuleList(bert.Layer(cfg) for _ in range(cfg.per_head))
        self.score = nn.Linear(cfg.dim, 1)
        self.mlm = nn.Linear(cfg.dim, cfg.vocab)
        self.model_head = nn.Linear(cfg.dim, cfg.n_model)
        self.prompt_head = nn.Linear(cfg.dim, cfg.n_prompt)
        with torch.no_grad():
            w = torch.empty(22, cfg.dim)
            nn.init.orthogonal_(w)
            self.embeddings.word_embeddings.weight[cfg.ttft0:cfg.ttft0 + 22] = w * 0.5

    def bottom(self, ids):
        x = self.embeddings(ids, torch.zeros_like(ids))
        for layer in self.shared:
            x = layer(x, 0.0)
        return x

    def forward(self, ids):
        x = self.bottom(ids)
        s = x
        for layer in self.score_layers:
            s = layer(s, 0.0)
        d = x
        for layer in self.decision_layers:
            d = layer(d, 0.0)
        pooled = torch.tanh(d[:, 0])
        return self.score(s)[..., 0], self.model_head(pooled), self.prompt_head(pooled)


def slo_token(cfg, ttft, tpot):
    k1 = min(10, max(0, int(math.floor(ttft * 10 + 0.5))))
    k2 = min(10, max(0, int(math.floor(tpot * 10 + 0.5))))
    return [cfg.cls, cfg.ttft0 + k1, cfg.tpot0 + k2]


def tlm_input(cfg, ids, ttft, tpot):
    """[CLS, TTFT, TPOT] + the prompt (its BOS dropped), cut to MAX_TLM from the end."""
    body = ids[1:][-(cfg.max_positions - 3):]
    return slo_token(cfg, ttft, tpot) + body


def tlm_scores(tlm, ids):
    """Retain logits per LM token of ids (the BOS gets +inf)."""
    with torch.no_grad():
        s, _, _ = tlm(torch.tensor([tlm_input(tlm.cfg, ids, 1.0, 1.0)]))
    s = s[0, 3:].tolist()
    pad = len(ids) - 1 - len(s)  # tokens cut from the front keep the lowest rank
    return [float("inf")] + [-1e9] * pad + s


def load_tlm(path):
    ck = torch.load(path)
    cfg = TLMConfig(ck["lm_vocab"])
    m = TLM(cfg)
    m.load_state_dict(ck["state"])
    return m.eval()


class Profile:
    """profile.json (`tl elastic profile`): measured TTFT by prompt length
    and level, TPOT by level, TLM time by length."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            p = json.load(f)
        self.lengths = p["prompt_lengths"]
        self.ttft = {int(k): v for k, v in p["ttft_ms"].items()}
        self.tpot = {int(k): v for k, v in p["tpot_ms"].items()}
        self.tlm_lengths = p.get("tlm_lengths", [])
        self.tlm_ms = p.get("tlm_ms", [])
        self.switch_ms = p.get("switch_ms", 0.0)

    @staticmethod
    def interp(xs, ys, x):
        if x <= xs[0]:
            return ys[0] * x / xs[0]
        for i in range(1, len(xs)):
            if x <= xs[i]:
                t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
                return ys[i - 1] + t * (ys[i] - ys[i - 1])
        return ys[-1] * x / xs[-1]

    def ttft_of(self, n, m):
        return self.interp(self.lengths, self.ttft[m], n)

    def tlm_of(self, n):
        return self.interp(self.tlm_lengths, self.tlm_ms, n) if self.tlm_ms else 0.0

    def feasible(self, n, tail, ttft, tpot):
        """Feasible (m, p) pairs with their predicted cost (TTFT ms) for a
        prompt of n tokens: TLM + switch + TTFT(p, m) within ttft x the full
        model's TTFT(n, 100), and TPOT(m) within tpot x TPOT(100)."""
        budget = ttft * self.ttft_of(n, 100)
        out = []
        for m in GRID:
            if self.tpot[m] > tpot * self.tpot[100]:
                continue
            for p in GRID:
                k = kept_len(n, tail, p)
                cost = self.tlm_of(n) + self.switch_ms + self.ttft_of(k, m)
                if cost <= budget:
                    out.append((cost, m, p))
        return sorted(out)


def kept_len(n, tail, p):
    body = n - 1 - tail
    return 1 + tail + int(math.floor(body * p / 100.0 + 0.5))


def slo_samples(rng):
    """SLOs a decision label is computed for: the six trace classes and a
    spread around them."""
    out = list(SLO_CLASSES)
    for _ in range(6):
        out.append((rng.choice([0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]),
                    rng.choice([0.5, 0.6, 0.7, 0.8, 0.9, 1.0])))
    return out


def decision_label(prof, it, ttft, tpot, rng):
    n, tail = len(it["ids"]), it["tail"]
    feas = prof.feasible(n, tail, ttft, tpot)
    if not feas:
        return GRID[0], GRID[0], "infeasible"
    for cost, m, p in feas:  # sorted by cost, then model level
        if it["correct"][f"{m},{p}"]:
            return m, p, "correct"
    _, m, p = rng.choice(feas)
    return m, p, "default"


def pretrain_mlm(tlm, work, steps, rng, t0, log=log):
    """Masked-token prediction (15% of positions) on the train split's
    token stream, through the shared bottom and the score branch."""
    cfg = tlm.cfg
    stream = np.load(os.path.join(work, "mlm_train.npy"))
    opt = torch.optim.AdamW(tlm.parameters(), lr=1e-3, weight_decay=0.01)
    seq, bs = 128, 16
    tlm.train()
    for step in range(steps):
        starts = [rng.randrange(len(stream) - seq) for _ in range(bs)]
        x = torch.tensor(np.stack([stream[s:s + seq] for s in starts]).astype(np.int64))
        x = torch.cat([torch.full((bs, 3), cfg.cls), x], 1)
        sel = (torch.rand(x.shape) < 0.15)
        sel[:, :3] = False
        inp = x.clone()
        inp[sel] = cfg.mask
        h = tlm.bottom(inp)
        for layer in tlm.score_layers:
            h = layer(h, 0.0)
        loss = F.cross_entropy(tlm.mlm(h[sel]), x[sel])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == steps - 1:
            log(f"pretrain: mlm step {step} loss {loss.item():.3f} ({time.time() - t0:.0f} s)")


def pretrain(model_dir, work, steps, log=log):
    torch.manual_seed(SEED)
    tlm = TLM(TLMConfig(model_config(model_dir)["vocab_size"]))
    pretrain_mlm(tlm, work, steps, random.Random(SEED + 7), time.time())
    torch.save(tlm.state_dict(), os.path.join(work, "tlm_mlm.pt.tmp"))
    os.replace(os.path.join(work, "tlm_mlm.pt.tmp"), os.path.join(work, "tlm_mlm.pt"))


def train(model_dir, work, profile_path, mlm_steps, head_steps, log=log):
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    lm_vocab = model_config(model_dir)["vocab_size"]
    cfg = TLMConfig(lm_vocab)
    tlm = TLM(cfg)
    n_params = sum(p.numel() for p in tlm.parameters())
    items = read_jsonl(os.path.join(work, "grid_train.jsonl"))
    prof = Profile(profile_path)
    t0 = time.time()
    # 1. Masked-token pretraining (tlm.py pretrain), unless done before.
    pre = os.path.join(work, "tlm_mlm.pt")
    if os.path.exists(pre):
        tlm.load_state_dict(torch.load(pre))
        log(f"train: masked-token pretraining loaded from {pre}")
    else:
        pretrain_mlm(tlm, work, mlm_steps, rng, t0)
    # 2. Score head on the retention labels, bottom frozen.
    for p in list(tlm.embeddings.parameters()) + list(tlm.shared.parameters()):
        p.requires_grad_(False)
    params = list(tlm.score_layers.parameters()) + list(tlm.score.parameters())
    opt = torch.optim.AdamW(params, lr=5e-4)
    for step in range(head_steps):
        it = rng.choice(items)
        ttft, tpot = rng.choice(SLO_CLASSES)
        x = torch.tensor([tlm_input(cfg, it["ids"], ttft, tpot)])
        y = torch.tensor([it["retain"][1:][-(cfg.max_positions - 3):]], dtype=torch.float32)
        s, _, _ = tlm(x)
        loss = F.binary_cross_entropy_with_logits(s[:, 3:], y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == head_steps - 1:
            log(f"train: score head step {step} loss {loss.item():.3f} ({time.time() - t0:.0f} s)")
    for p in params:
        p.requires_grad_(False)
    # 3. Decision head on self-induced labels.
    examples, kinds = [], {}
    for it in items:
        for ttft, tpot in slo_samples(rng):
            m, p, kind = decision_label(prof, it, ttft, tpot, rng)
            kinds[kind] = kinds.get(kind, 0) + 1
            examples.append((it["ids"], ttft, tpot, GRID.index(m), GRID.index(p)))
    log(f"train: {len(examples)} decision labels: {kinds}")
    params = list(tlm.decision_layers.parameters()) + list(tlm.model_head.parameters()) + \
        list(tlm.prompt_head.parameters())
    opt = torch.optim.AdamW(params, lr=5e-4)
    for step in range(head_steps):
        ids, ttft, tpot, ym, yp = rng.choice(examples)
        x = torch.tensor([tlm_input(cfg, ids, ttft, tpot)])
        _, lm_, lp_ = tlm(x)
        loss = F.cross_entropy(lm_, torch.tensor([ym])) + F.cross_entropy(lp_, torch.tensor([yp]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == head_steps - 1:
            log(f"train: decision head step {step} loss {loss.item():.3f} ({time.time() - t0:.0f} s)")
    tlm.eval()
    # Fit on the training labels (a sanity figure, not an evaluation).
    hit = 0
    with torch.no_grad():
        for ids, ttft, tpot, ym, yp in examples[:300]:
            _, lm_, lp_ = tlm(torch.tensor([tlm_input(cfg, ids, ttft, tpot)]))
            hit += int(lm_.argmax().item() == ym and lp_.argmax().item() == yp)
    fit = hit / min(300, len(examples))
    log(f"train: decision fit on training labels {fit:.3f}; {n_params} parameters; {time.time() - t0:.0f} s")
    torch.save({"lm_vocab": lm_vocab, "state": tlm.state_dict()}, os.path.join(work, "tlm.pt.tmp"))
    os.replace(os.path.join(work, "tlm.pt.tmp"), os.path.join(work, "tlm.pt"))
    export(tlm, work, {"parameters": n_params, "labels": kinds, "train_fit": fit, "mlm_steps": mlm_steps,
                       "head_steps": head_steps, "train_seconds": time.time() - t0})


class Exported(nn.Module):
    def __init__(self, tlm):
        super().__init__()
        self.tlm = tlm

    def forward(self, input_ids):
        s, m, p = self.tlm(input_ids)
        return s, m, p


def export(tlm, work, info, sub="tlm"):
    """Writes W/tlm/model.onnx and tlm.json (token ids of the SLO slots, the
    grid) and a reference case for the engine test."""
    out = os.path.join(work, sub) if sub else work
    os.makedirs(out, exist_ok=True)
    ex = torch.tensor([tlm_input(tlm.cfg, [0] + list(range(5, 25)), 0.4, 0.7)])
    path = os.path.join(out, "model.onnx")
    exportlib.export_onnx(Exported(tlm).eval(), (ex,), path, ["input_ids"],
                          ["retain_logits", "model_logits", "prompt_logits"],
                          {"input_ids": {1: "seq"}, "retain_logits": {1: "seq"}})
    with torch.no_grad():
        s, m, p = tlm(ex)
    cfg = tlm.cfg
    meta = {"format": "tlite.tlm/1", "grid": GRID, "max_positions": cfg.max_positions, "cls": cfg.cls,
            "ttft0": cfg.ttft0, "tpot0": cfg.tpot0, "slo_steps": 10, "prefix": 3,
            "reference": {"input_ids": ex[0].tolist(), "retain_logits": s[0].tolist(),
                          "model_logits": m[0].tolist(), "prompt_logits": p[0].tolist()},
            **info}
    atomic_json(os.path.join(out, "tlm.json"), meta)
    log(f"export: {path} and tlm.json")


def fixture(out):
    """A random-weight TLM of the same structure, small (LM vocabulary 256, as
    testdata/elastic/llama,
    dim 32), exported with its reference outputs for the engine test."""
    torch.manual_seed(SEED)
    cfg = TLMConfig(256)
    cfg.dim, cfg.ffn, cfg.max_positions = 32, 64, 48
    tlm = TLM(cfg).eval()
    exportlib.randomize_norms(tlm)
    os.makedirs(out, exist_ok=True)
    export(tlm, out, {"fixture": "random weights (tlm.py fixture); structure of the trained TLM"}, sub="")


def mlm_stream(enc, splits, work, log=log):
    """The train split's documents, tokenized, as the MLM stream."""
    ids = []
    for s in ("pydoc", "debref", "fortunes"):
        for d in splits[s]["train"][:150]:
            ids += enc.encode(d)
    np.save(os.path.join(work, "mlm_train.npy"), np.array(ids, dtype=np.int32))
    log(f"mlm stream: {len(ids)} tokens of the train split")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tasks")
    t.add_argument("--model", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--n-train", type=int, default=160)
    t.add_argument("--n-eval", type=int, default=60)
    t.add_argument("--grid", default="20,60,100", help="model and prompt levels of the decision (percent)")
    g = sub.add_parser("grid")
    g.add_argument("--model", required=True)
    g.add_argument("--work", required=True)
    g.add_argument("--split", choices=["train", "eval"], required=True)
    g.add_argument("--tlm")
    g.add_argument("--limit", type=int, default=0)
    g.add_argument("--shard", help="K/N: every N-th item from the K-th (run N in parallel, cat the outputs)")
    r = sub.add_parser("train")
    r.add_argument("--model", required=True)
    r.add_argument("--work", required=True)
    r.add_argument("--profile", required=True)
    r.add_argument("--mlm-steps", type=int, default=300)
    r.add_argument("--head-steps", type=int, default=600)
    q = sub.add_parser("pretrain", help="masked-token pretraining of the TLM alone (train reuses W/tlm_mlm.pt)")
    q.add_argument("--model", required=True)
    q.add_argument("--work", required=True)
    q.add_argument("--steps", type=int, default=150)
    i = sub.add_parser("init", help="export an untrained TLM of the real size (for timing it before training)")
    i.add_argument("--model", required=True)
    i.add_argument("--work", required=True)
    x = sub.add_parser("fixture", help="a small random-weight TLM for the engine's test (testdata/elastic/tlm)")
    x.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    global GRID
    if a.cmd == "tasks":
        GRID = [int(x) for x in a.grid.split(",")]
        make_tasks(a.model, a.out, a.n_train, a.n_eval)
    elif a.cmd == "grid":
        load_grid(a.work)
        shard = tuple(int(x) for x in a.shard.split("/")) if a.shard else None
        if shard and not (len(shard) == 2 and 0 <= shard[0] < shard[1]):
            raise SystemExit(f"--shard {a.shard}: want K/N with 0 <= K < N")
        run_grid(a.model, a.work, a.split, a.tlm, a.limit, shard)
    elif a.cmd == "train":
        load_grid(a.work)
        train(a.model, a.work, a.profile, a.mlm_steps, a.head_steps)
    elif a.cmd == "pretrain":
        load_grid(a.work)
        pretrain(a.model, a.work, a.steps)
    elif a.cmd == "init":
        torch.manual_seed(SEED)
        export(TLM(TLMConfig(model_config(a.model)["vocab_size"])).eval(), a.work, {"untrained": True})
    elif a.cmd == "fixture":
        fixture(a.out)


if __name__ == "__main__":
    main()
