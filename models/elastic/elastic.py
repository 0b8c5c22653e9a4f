#!/usr/bin/python3
"""Offline step of elastic sub-models (ELMS / ElastiLM, spec §3a-3c).

Every smaller model is a prefix of each weight: attention heads and MLP
neurons are reordered inside each layer by importance, so that a level
keeps the first units of every elastic layer and switching level changes
only the active sizes the kernels are given (tlite's Session.SetLevel).

    /usr/bin/python3 models/elastic/elastic.py build --model testdata/longctx \
        --calib /work/train7 --out OUT [--order importance|random|none] [--anchors 0.2]

reads the model's weights back from its ONNX initializers into
models/export/llama.py's module (no training checkpoint needed), computes

* unit importance, first-order Taylor |sum over the unit's weights of
  dL/dW * W| (spec §3a.4) on calibration tokens from the model's *training*
  split (disjoint from the held-out text perplexity is measured on);
  an attention unit is a query head (its Q columns and O rows); with
  grouped-query attention the KV groups are ordered by the summed
  importance of their members plus their own K and V columns, then the
  query heads inside each group; an MLP unit is a neuron (gate and up
  column, down row);
* layer importance by removal (loss increase with the block replaced by
  its residual passthrough); the top `anchors` fraction are anchors, kept
  at 100% in every level;
* levels 20..100% in steps of 10%: non-anchor retention
  r_na = (R*L - A)/(L - A), clamped to >= one KV group and >= G neurons;
  the FFN width is a multiple of G (the 4-bit group) below 100%; query heads
  come in whole KV groups (tlite's fused GQA kernel derives the group size
  as heads/kv_heads, so a partial group is not a prefix it can run);

and writes OUT/model.onnx (the permuted model, weights renamed
layers.{i}.{role}.weight), OUT/elastic.json, tokenizer.json and config.json.

Unit importance from a file (`--importance-from FILE`): the scores written
by `tl elastic importance` (engine/elastic/importance), a forward-only
proxy computed by tlite itself for an ONNX file without its PyTorch source:
per query head mean |attention output| x the norm of W_o's rows of that
head, per neuron mean |act(gate)*up| x the norm of W_down's row, KV groups
by their heads' summed score. Everything after the scores (layer removal,
anchors, levels, permutation, export) is the same code; elastic.json's
"importance" says which method ordered the units. `elastic.py calib` writes
the calibration windows build draws, so that both methods can see the same
tokens.

Orders: importance (the method), random (seeded permutation: the ablation
"without reordering" that keeps the same level sizes), none (the original
order, prefixes of the unpermuted weights).
"""

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "models", "export"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import exportlib  # noqa: E402
import llama  # noqa: E402

LEVELS = [20, 30, 40, 50, 60, 70, 80, 90, 100]
ROLES = ("q", "k", "v", "o", "gate", "up", "down")
# The training streams the calibration tokens come from (train split only).
CALIB_SOURCES = ("fortunes", "pydoc", "debref")


# ---------------------------------------------------------------- loading

def _consumers(graph):
    out = {}
    for n in graph.node:
        for i in n.input:
            out.setdefault(i, []).append(n)
    return out


def llama_weight_nodes(graph, n_layers):
    """Returns, per layer, {role: MatMul node} plus the LM head node, from the
    structure of an exported llama.py graph: per layer the MatMuls with a
    constant B come in forward order q, k, v, o, gate, up, down, and the
    gate's output feeds a Sigmoid (SiLU), which is checked."""
    inits = {i.name for i in graph.initializer}
    mms = [n for n in graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    if len(mms) != 7 * n_layers + 1:
        raise ValueError(f"found {len(mms)} MatMuls with a constant weight; a {n_layers}-layer "
                         f"llama.py graph has {7 * n_layers + 1}")
    cons = _consumers(graph)
    layers = []
    for l in range(n_layers):
        roles = dict(zip(ROLES, mms[7 * l:7 * l + 7]))
        if not any(c.op_type == "Sigmoid" for c in cons.get(roles["gate"].output[0], [])):
            raise ValueError(f"layer {l}: the MatMul taken for gate does not feed a Sigmoid")
        layers.append(roles)
    return layers, mms[-1]


def load_llama_onnx(path):
    """Loads an ONNX file exported from llama.Llama back into that module.
    Returns (model, cfg). The config is read from the graph's shapes."""
    m = onnx.load(path)
    g = m.graph
    w = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    emb = w["embed_tokens.weight"]
    vocab, dim = emb.shape
    n_layers = len([k for k in w if k.endswith("input_layernorm.weight")])
    layers, head = llama_weight_nodes(g, n_layers)
    q = w[layers[0]["q"].input[1]]
    kw = w[layers[0]["k"].input[1]]
    ffn = w[layers[0]["gate"].input[1]].shape[1]
    inv = [v for k, v in w.items() if v.ndim == 3 and v.shape[:2] == (1, 1)]
    if len(inv) != 1:
        raise ValueError("cannot find the rotary inv_freq buffer")
    head_dim = 2 * inv[0].shape[2]
    inv_freq = inv[0].reshape(-1).astype(np.float64)
    theta = float(round(1.0 / inv_freq[1] ** (head_dim / 2.0))) if len(inv_freq) > 1 else 10000.0
    cfg = llama.Config(vocab=vocab, dim=dim, n_layers=n_layers, n_heads=q.shape[1] // head_dim,
                       n_kv_heads=kw.shape[1] // head_dim, ffn=ffn, rope_theta=theta)
    model = llama.Llama(cfg)
    sd = {"embed_tokens.weight": emb, "norm.weight": w["norm.weight"],
          "lm_head.weight": w[head.input[1]].T}
    names = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
             "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
    for l, roles in enumerate(layers):
        for r in ("input_layernorm", "post_attention_layernorm"):
            sd[f"layers.{l}.{r}.weight"] = w[f"layers.{l}.{r}.weight"]
        for role, node in roles.items():
            sd[f"layers.{l}.{names[role]}.weight"] = w[node.input[1]].T
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)).float() for k, v in sd.items()}
    sd["inv_freq"] = torch.from_numpy(inv[0].reshape(-1).copy()).float()
    sd["zero"] = torch.tensor(0.0)
    sd["mask_min"] = torch.tensor(torch.finfo(torch.float32).min)
    model.load_state_dict(sd, strict=True)
    return model.eval(), cfg


# ------------------------------------------------------------- forwarding

def llama_logits(model, ids, skip=()):
    """Full-sequence logits without a cache; layers in skip are replaced by
    their residual passthrough (for layer importance by removal)."""
    cfg = model.cfg
    b, s = ids.shape
    mask = torch.ones(b, s, dtype=torch.int64)
    pos = torch.arange(s).repeat(b, 1)
    hd = cfg.dim // cfg.n_heads

    def empty(layers):
        # each layer's own KV head count (an extracted level's layers differ)
        return [torch.zeros(b, ly.self_attn.n_kv, 0, hd, dtype=model.embed_tokens.weight.dtype)
                for ly in layers for _ in (0, 1)]

    if not skip:
        return model(ids, mask, pos, *empty(model.layers))[0]
    saved = model.layers
    try:
        kept = torch.nn.ModuleList(layer for i, layer in enumerate(saved) if i not in skip)
        model.layers = kept
        return model(ids, mask, pos, *empty(kept))[0]
    finally:
        model.layers = saved


def lm_loss(logits, ids):
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def calibration_windows(calib_dir, tokens, seq, seed, sources=CALIB_SOURCES):
    """tokens/seq windows of seq tokens drawn evenly (round robin) from the
    training streams (sources' *_train.npy in calib_dir), seeded."""
    if not sources:
        raise ValueError("calibration_windows: no source streams")
    rng = np.random.RandomState(seed)
    streams = []
    for s in sources:
        path = os.path.join(calib_dir, f"{s}_train.npy")
        if not os.path.exists(path):
            raise FileNotFoundError(f"calibration_windows: no training stream {path}")
        st = np.load(path).astype(np.int64)
        if st.ndim != 1 or len(st) < seq + 2:
            raise ValueError(f"calibration_windows: {path} is not a 1-D stream longer than {seq + 1} tokens")
        streams.append(st)
    n = max(1, tokens // seq)
    rows = []
    for i in range(n):
        st = streams[i % len(streams)]
        o = rng.randint(0, len(st) - seq - 1)
        rows.append(st[o:o + seq])
    return torch.from_numpy(np.stack(rows))


# ------------------------------------------------------------- importance

def llama_importance(model, calib, batch=4):
    """Taylor importance per query head, per KV head and per neuron, and the
    base calibration loss. Gradients are those of the mean next-token loss
    over the whole calibration set."""
    model.zero_grad()
    n = calib.shape[0]
    total = 0.0
    for i in range(0, n, batch):
        x = calib[i:i + batch]
        loss = lm_loss(llama_logits(model, x), x) * (x.shape[0] / n)
        loss.backward()
        total += loss.item()
    cfg = model.cfg
    hd = cfg.dim // cfg.n_heads
    out = []
    for layer in model.layers:
        a, m = layer.self_attn, layer.mlp
        gw = lambda p: (p.grad * p.data).double()  # noqa: E731
        # nn.Linear weight is [out, in]: Q/K/V rows are output units, O's
        # columns are its inputs.
        qh = gw(a.q_proj.weight).reshape(cfg.n_heads, hd, -1).sum(dim=(1, 2))
        oh = gw(a.o_proj.weight).reshape(cfg.dim, cfg.n_heads, hd).sum(dim=(0, 2))
        kh = gw(a.k_proj.weight).reshape(cfg.n_kv_heads, hd, -1).sum(dim=(1, 2))
        vh = gw(a.v_proj.weight).reshape(cfg.n_kv_heads, hd, -1).sum(dim=(1, 2))
        neur = gw(m.gate_proj.weight).sum(1) + gw(m.up_proj.weight).sum(1) + gw(m.down_proj.weight).sum(0)
        out.append({"q_signed": (qh + oh), "kv_signed": (kh + vh), "neuron": neur.abs()})
    model.zero_grad()
    return out, total


IMPORTANCE_FORMAT = "tlite.importance/1"


def load_importance(path, cfg):
    """Reads a scores file of `tl elastic importance` and returns the
    per-layer dicts llama_importance returns (the proxy has no separate K/V
    term: a KV group's score is its heads' sum), plus the file's header."""
    with open(path) as f:
        d = json.load(f)
    if d.get("format") != IMPORTANCE_FORMAT:
        raise SystemExit(f"elastic: {path}: format {d.get('format')!r}; want {IMPORTANCE_FORMAT!r}")
    want = {"n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads, "ffn": cfg.ffn,
            "head_dim": cfg.dim // cfg.n_heads}
    for k, v in want.items():
        if d.get(k) != v:
            raise SystemExit(f"elastic: {path}: {k} {d.get(k)} but the model has {v}")
    layers = d.get("layers") or []
    if len(layers) != cfg.n_layers:
        raise SystemExit(f"elastic: {path}: {len(layers)} layers of scores for {cfg.n_layers}")
    out = []
    for l, ly in enumerate(layers):
        q, n = ly.get("q_heads") or [], ly.get("neurons") or []
        if len(q) != cfg.n_heads or len(n) != cfg.ffn:
            raise SystemExit(f"elastic: {path}: layer {l} has {len(q)} head and {len(n)} neuron scores")
        g = cfg.n_heads // cfg.n_kv_heads
        kv = ly.get("kv_groups") or [sum(q[k * g:(k + 1) * g]) for k in range(cfg.n_kv_heads)]
        vals = q + n + kv
        if len(kv) != cfg.n_kv_heads or any(not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0 for x in vals):
            raise SystemExit(f"elastic: {path}: layer {l} has a negative or non-finite score, or {len(kv)} KV groups")
        qt = torch.tensor(q, dtype=torch.float64)
        # gqa_order ranks a group by |sum of its heads + kv_signed|: this
        # kv_signed makes that the file's group score.
        kvt = torch.tensor(kv, dtype=torch.float64) - qt.reshape(cfg.n_kv_heads, g).sum(1)
        out.append({"q_signed": qt, "kv_signed": kvt, "neuron": torch.tensor(n, dtype=torch.float64)})
    header = {k: d.get(k) for k in ("method", "tokens", "windows", "calibration_loss", "source", "backend")}
    header["file"] = os.path.abspath(path)
    removal = d.get("layer_removal_loss_increase")
    if removal is not None:
        if len(removal) != cfg.n_layers or any(not isinstance(x, (int, float)) or not math.isfinite(x) for x in removal):
            raise SystemExit(f"elastic: {path}: layer_removal_loss_increase must be {cfg.n_layers} finite numbers")
        header["layer_removal_loss_increase"] = removal
    return out, header


def mean_loss(model, calib, batch=8, skip=()):
    """Mean next-token loss over the calibration windows (with the layers in
    skip removed)."""
    with torch.no_grad():
        return sum(lm_loss(llama_logits(model, calib[i:i + batch], skip), calib[i:i + batch]).item() * calib[i:i + batch].shape[0]
                   for i in range(0, calib.shape[0], batch)) / calib.shape[0]


def gqa_order(q_signed, kv_signed, n_kv, rng=None, order="importance"):
    """Query-head and KV-head orders. KV groups sorted by the absolute value
    of their unit's summed Taylor term (members' Q/O plus the group's K/V),
    then query heads within each group by their own |Taylor|."""
    h = q_signed.shape[0]
    g = h // n_kv
    if order == "none":
        return list(range(h)), list(range(n_kv))
    if order == "random":
        kv = list(rng.permutation(n_kv))
        return [int(k) * g + int(j) for k in kv for j in rng.permutation(g)], [int(k) for k in kv]
    group_imp = [abs(float(q_signed[k * g:(k + 1) * g].sum() + kv_signed[k])) for k in range(n_kv)]
    kv = sorted(range(n_kv), key=lambda k: -group_imp[k])
    q = []
    for k in kv:
        members = list(range(k * g, (k + 1) * g))
        q += sorted(members, key=lambda j: -abs(float(q_signed[j])))
    return q, kv


def unit_order(imp, rng=None, order="importance"):
    n = imp.shape[0]
    if order == "none":
        return list(range(n))
    if order == "random":
        return [int(i) for i in rng.permutation(n)]
    return [int(i) for i in torch.argsort(-imp, stable=True)]


def layer_removal(model, calib, base, batch=8):
    """Loss increase on the calibration set when each layer is removed."""
    return [mean_loss(model, calib, batch, skip={l}) - base for l in range(model.cfg.n_layers)]


# ------------------------------------------------------------ permutation

def permute_llama(model, q_orders, kv_orders, ffn_orders):
    """Reorders every layer's units in place. Within a head the order of its
    head_dim rows is kept (RoPE pairs dimensions inside the head)."""
    cfg = model.cfg
    hd = cfg.dim // cfg.n_heads
    with torch.no_grad():
        for layer, qo, kvo, fo in zip(model.layers, q_orders, kv_orders, ffn_orders):
            a, m = layer.self_attn, layer.mlp
            qi = torch.tensor([h * hd + d for h in qo for d in range(hd)])
            ki = torch.tensor([h * hd + d for h in kvo for d in range(hd)])
            fi = torch.tensor(fo)
            a.q_proj.weight.copy_(a.q_proj.weight[qi])
            a.o_proj.weight.copy_(a.o_proj.weight[:, qi])
            a.k_proj.weight.copy_(a.k_proj.weight[ki])
            a.v_proj.weight.copy_(a.v_proj.weight[ki])
            m.gate_proj.weight.copy_(m.gate_proj.weight[fi])
            m.up_proj.weight.copy_(m.up_proj.weight[fi])
            m.down_proj.weight.copy_(m.down_proj.weight[:, fi])


def check_gqa_consistent(q_order, kv_order, g):
    """New query head j must belong to new KV head j // g."""
    for j, h in enumerate(q_order):
        if h // g != kv_order[j // g]:
            raise AssertionError(f"query head {h} at {j} is not in KV group {kv_order[j // g]}")


# ----------------------------------------------------------------- levels

def plan_levels(cfg, anchors, group, levels=LEVELS):
    """Per level and layer: active query heads, KV heads and FFN width, with
    the realized fractions (spec §3a.5)."""
    L, A = cfg.n_layers, len(anchors)
    g = cfg.n_heads // cfg.n_kv_heads
    hd = cfg.dim // cfg.n_heads
    d = cfg.dim

    def layer_params(q, kv, f):
        return d * q * hd * 2 + d * kv * hd * 2 + 3 * d * f

    full_layer = layer_params(cfg.n_heads, cfg.n_kv_heads, cfg.ffn)
    emb_head = 2 * cfg.vocab * d  # untied embedding + LM head
    out = []
    for R in levels:
        r = R / 100.0
        r_na = 1.0 if R == 100 else max(0.0, min(1.0, (r * L - A) / (L - A))) if L > A else 1.0
        layers = []
        for l in range(L):
            if l in anchors or R == 100:
                kv, f = cfg.n_kv_heads, cfg.ffn
            else:
                kv = max(1, min(cfg.n_kv_heads, int(round(r_na * cfg.n_kv_heads))))
                f = max(group, min(cfg.ffn, int(round(r_na * cfg.ffn / group)) * group))
                if f >= cfg.ffn:
                    f = cfg.ffn
            layers.append({"q_heads": kv * g, "kv_heads": kv, "ffn": f, "anchor": l in anchors})
        p = sum(layer_params(x["q_heads"], x["kv_heads"], x["ffn"]) for x in layers)
        # MACs per token of the linear layers equal their parameter counts
        # (one multiply-add per weight); attention scores are left out, they
        # grow with the context (report separately).
        out.append({"level": R, "r_non_anchor": round(r_na, 6), "layers": layers,
                    "param_fraction_layers": p / (L * full_layer),
                    "param_fraction_total": (p + emb_head) / (L * full_layer + emb_head),
                    "mac_fraction_layers": p / (L * full_layer),
                    "mac_fraction_with_lm_head": (p + cfg.vocab * d) / (L * full_layer + cfg.vocab * d)})
    return out


# ----------------------------------------------------------------- export

def export_llama(model, path, kv_heads=None):
    """Exports the module as llama.py does and renames each layer's MatMul
    weight to layers.{i}.{role}.weight (and lm_head.weight), names the
    engine's elastic binding looks up. kv_heads gives each layer's KV head
    count when they differ (an extracted sub-model)."""
    cfg = model.cfg
    in_names, out_names, axes = llama.io_names(cfg)
    hd = cfg.dim // cfg.n_heads
    heads = kv_heads or [cfg.n_kv_heads] * cfg.n_layers
    past = [torch.randn(2, h, 3, hd) for h in heads for _ in (0, 1)]
    ex_args = (torch.randint(0, cfg.vocab, (2, 5)), torch.ones(2, 8, dtype=torch.int64),
               torch.arange(3, 8).repeat(2, 1), *past)
    tmp = path + ".tmp"
    m = exportlib.export_onnx(model, ex_args, tmp, in_names, out_names, axes)
    layers, head = llama_weight_nodes(m.graph, cfg.n_layers)
    rename = {head.input[1]: "lm_head.weight"}
    for l, roles in enumerate(layers):
        for role, node in roles.items():
            rename[node.input[1]] = f"layers.{l}.{role}.weight"
    if len(set(rename)) != len(rename.values()):
        raise ValueError("a weight is shared between two roles")
    for init in m.graph.initializer:
        init.name = rename.get(init.name, init.name)
    for n in m.graph.node:
        for i, x in enumerate(n.input):
            if x in rename:
                n.input[i] = rename[x]
    onnx.save(m, tmp)
    exportlib.check_model(tmp)
    os.replace(tmp, path)
    return m


def _atomic_json(path, obj):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def build(model_dir, out_dir, calib_dir, order="importance", anchor_frac=0.2, group=32,
          calib_tokens=6400, seq=256, seed=1234, importance_from=None, log=print):
    src = os.path.join(model_dir, "model.onnx")
    model, cfg = load_llama_onnx(src)
    calib = calibration_windows(calib_dir, calib_tokens, seq, seed)
    log(f"elastic: {cfg}; calibration {calib.shape[0]}x{calib.shape[1]} = {calib.numel()} tokens "
        f"from the training split of {', '.join(CALIB_SOURCES)}")
    ids = calibration_windows(calib_dir, 512, 64, seed + 1)[:2]
    with torch.no_grad():
        ref = llama_logits(model, ids)
        ref64 = llama_logits(model.double(), ids)
    model.float()
    if importance_from:
        imps, imp_meta = load_importance(importance_from, cfg)
        base = mean_loss(model, calib)
        log(f"elastic: unit importance from {importance_from}: {imp_meta['method']} "
            f"({imp_meta['tokens']} tokens, calibration loss {imp_meta['calibration_loss']} from {imp_meta.get('backend') or 'pytorch'})")
    else:
        imps, base = llama_importance(model, calib)
        imp_meta = {"method": "taylor: first-order |sum dL/dW * W| (PyTorch)", "tokens": int(calib.numel())}
    if importance_from and imp_meta.get("layer_removal_loss_increase") is not None:
        removal = imp_meta["layer_removal_loss_increase"]
        removal_by = "tlite (tl elastic importance --layers)"
    else:
        removal = layer_removal(model, calib, base)
        removal_by = "pytorch"
    if order != "importance":
        imp_meta = {"method": f"none: {order} order"}
    n_anchor = int(round(anchor_frac * cfg.n_layers))
    anchors = sorted(sorted(range(cfg.n_layers), key=lambda l: -removal[l])[:n_anchor])
    log(f"elastic: base calibration loss {base:.4f}; removal loss increase {[round(x, 4) for x in removal]}; "
        f"anchors {anchors}")
    rng = np.random.RandomState(seed)
    g = cfg.n_heads // cfg.n_kv_heads
    q_orders, kv_orders, ffn_orders = [], [], []
    for imp in imps:
        q, kv = gqa_order(imp["q_signed"], imp["kv_signed"], cfg.n_kv_heads, rng, order)
        check_gqa_consistent(q, kv, g)
        q_orders.append(q)
        kv_orders.append(kv)
        ffn_orders.append(unit_order(imp["neuron"], rng, order))
    permute_llama(model, q_orders, kv_orders, ffn_orders)
    with torch.no_grad():
        got = llama_logits(model, ids)
        got64 = llama_logits(model.double(), ids)
    model.float()
    err = (got - ref).abs().max().item()
    err64 = (got64 - ref64).abs().max().item()
    log(f"elastic: permuted 100% model vs original, max |logit difference| fp32 {err:.3g}, fp64 {err64:.3g} "
        f"(logits up to {ref.abs().max().item():.3g})")
    # In fp64 a permutation of the units changes only the order of the
    # O and down sums: the difference must be at rounding level. In fp32
    # that reordering alone moves logits of magnitude ~10 by ~1e-5.
    if err64 > 1e-9 or err > 1e-4:
        raise SystemExit(f"elastic: the permuted model differs from the original by {err64} (fp64), {err} (fp32)")
    os.makedirs(out_dir, exist_ok=True)
    export_llama(model, os.path.join(out_dir, "model.onnx"))
    for f in ("tokenizer.json", "config.json"):
        if os.path.exists(os.path.join(model_dir, f)):
            shutil.copyfile(os.path.join(model_dir, f), os.path.join(out_dir, f))
    levels = plan_levels(cfg, anchors, group)
    meta = {
        "format": "tlite.elastic/1",
        "source": os.path.relpath(src, REPO) if src.startswith(REPO) else src,
        "architecture": "llama",
        "order": order, "seed": seed, "group": group,
        "n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
        "head_dim": cfg.dim // cfg.n_heads, "ffn": cfg.ffn, "dim": cfg.dim, "vocab": cfg.vocab,
        "anchor_fraction": anchor_frac, "anchors": anchors,
        "calibration": {"tokens": int(calib.numel()), "windows": int(calib.shape[0]), "seq": seq,
                        "sources": [f"{s}_train.npy" for s in CALIB_SOURCES],
                        "loss": base},
        "importance": imp_meta,
        "layer_removal_loss_increase": removal, "layer_removal_by": removal_by,
        "permuted_equivalence_max_abs": err, "permuted_equivalence_max_abs_fp64": err64,
        "weights": [{r: f"layers.{l}.{r}.weight" for r in ROLES} for l in range(cfg.n_layers)],
        "orders": [{"q_heads": q, "kv_heads": kv, "ffn_head": f[:8]}
                   for q, kv, f in zip(q_orders, kv_orders, ffn_orders)],
        "levels": levels,
        "notes": ["query heads are elastic in whole KV groups (the fused GQA kernel's group is heads/kv_heads)",
                  "mac fractions count linear layers only (one MAC per weight per token)"],
    }
    _atomic_json(os.path.join(out_dir, "elastic.json"), meta)
    for lv in levels:
        log(f"elastic: level {lv['level']:3d}% r_na {lv['r_non_anchor']:.3f} "
            f"params(layers) {lv['param_fraction_layers']:.3f} params(total) {lv['param_fraction_total']:.3f} "
            f"heads {[x['q_heads'] for x in lv['layers']]} ffn {[x['ffn'] for x in lv['layers']]}")
    return meta


def drop_layers(model_dir, out_dir, calib_dir, drop, calib_tokens=6400, seq=256, seed=1234, removal_from=None,
                log=print):
    """The whole-layer dropping baseline (LE / ShortGPT-like, spec §3c):
    removes the `drop` layers whose removal raises the calibration loss
    least, and writes the shallower model (same calibration tokens). With
    removal_from (an elastic.json of the same model) the removal losses
    measured there are reused."""
    model, cfg = load_llama_onnx(os.path.join(model_dir, "model.onnx"))
    if removal_from:
        with open(removal_from) as f:
            removal = json.load(f)["layer_removal_loss_increase"]
    else:
        calib = calibration_windows(calib_dir, calib_tokens, seq, seed)
        with torch.no_grad():
            base = sum(lm_loss(llama_logits(model, calib[i:i + 8]), calib[i:i + 8]).item() * calib[i:i + 8].shape[0]
                       for i in range(0, calib.shape[0], 8)) / calib.shape[0]
        removal = layer_removal(model, calib, base)
    gone = sorted(sorted(range(cfg.n_layers), key=lambda l: removal[l])[:drop])
    model.layers = torch.nn.ModuleList(l for i, l in enumerate(model.layers) if i not in gone)
    model.cfg = dataclasses.replace(cfg, n_layers=cfg.n_layers - drop)
    os.makedirs(out_dir, exist_ok=True)
    export_llama(model, os.path.join(out_dir, "model.onnx"))
    for f in ("tokenizer.json", "config.json"):
        if os.path.exists(os.path.join(model_dir, f)):
            shutil.copyfile(os.path.join(model_dir, f), os.path.join(out_dir, f))
    L = cfg.n_layers
    d, hd = cfg.dim, cfg.dim // cfg.n_heads
    layer = 2 * d * cfg.n_heads * hd + 2 * d * cfg.n_kv_heads * hd + 3 * d * cfg.ffn
    emb = 2 * cfg.vocab * d
    info = {"dropped": gone, "removal_loss_increase": removal,
            "param_fraction_layers": (L - drop) / L,
            "param_fraction_total": ((L - drop) * layer + emb) / (L * layer + emb)}
    _atomic_json(os.path.join(out_dir, "dropped.json"), info)
    log(f"elastic: dropped layers {gone} -> {info}")


def replan(src_dir, out_dir, anchor_frac, group=None, log=print):
    """Writes out_dir with src_dir's reordered model (hard-linked, or copied)
    and its elastic.json re-planned for another anchor fraction: the
    no-anchor ablation with the same unit order and calibration."""
    with open(os.path.join(src_dir, "elastic.json")) as f:
        meta = json.load(f)
    cfg = llama.Config(vocab=meta["vocab"], dim=meta["dim"], n_layers=meta["n_layers"], n_heads=meta["n_heads"],
                       n_kv_heads=meta["n_kv_heads"], ffn=meta["ffn"])
    removal = meta["layer_removal_loss_increase"]
    n_anchor = int(round(anchor_frac * cfg.n_layers))
    anchors = sorted(sorted(range(cfg.n_layers), key=lambda l: -removal[l])[:n_anchor])
    meta.update({"anchor_fraction": anchor_frac, "anchors": anchors,
                 "levels": plan_levels(cfg, anchors, group or meta["group"]),
                 "replanned_from": os.path.abspath(src_dir)})
    os.makedirs(out_dir, exist_ok=True)
    for f in ("model.onnx", "tokenizer.json", "config.json"):
        src, dst = os.path.join(src_dir, f), os.path.join(out_dir, f)
        if os.path.exists(src):
            if os.path.exists(dst):
                os.remove(dst)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)
    _atomic_json(os.path.join(out_dir, "elastic.json"), meta)
    log(f"elastic: re-planned {src_dir} with anchors {anchors} -> {out_dir}")


def reorder_like(src_dir, model_dir, out_dir, order, seed=1234, log=print):
    """The ordering ablations without a second importance pass: the original
    model of src_dir's elastic.json (model_dir) is reordered by `order`
    (random: a seeded permutation of KV groups, heads within groups and
    neurons; none: the original order) and written with src_dir's levels and
    anchors, so that only the order differs from src_dir."""
    with open(os.path.join(src_dir, "elastic.json")) as f:
        meta = json.load(f)
    model, cfg = load_llama_onnx(os.path.join(model_dir, "model.onnx"))
    rng = np.random.RandomState(seed)
    g = cfg.n_heads // cfg.n_kv_heads
    zero_q, zero_kv = torch.zeros(cfg.n_heads), torch.zeros(cfg.n_kv_heads)
    qo, kvo, fo = [], [], []
    for _ in range(cfg.n_layers):
        q, kv = gqa_order(zero_q, zero_kv, cfg.n_kv_heads, rng, order)
        check_gqa_consistent(q, kv, g)
        qo.append(q)
        kvo.append(kv)
        fo.append(unit_order(torch.zeros(cfg.ffn), rng, order))
    ids = torch.from_numpy(np.random.RandomState(seed + 1).randint(0, cfg.vocab, (2, 64)))
    with torch.no_grad():
        ref64 = llama_logits(model.double(), ids)
    model.float()
    permute_llama(model, qo, kvo, fo)
    with torch.no_grad():
        got64 = llama_logits(model.double(), ids)
    model.float()
    err64 = (got64 - ref64).abs().max().item()
    if err64 > 1e-9:
        raise SystemExit(f"elastic: the reordered model differs from the original by {err64} (fp64)")
    os.makedirs(out_dir, exist_ok=True)
    export_llama(model, os.path.join(out_dir, "model.onnx"))
    for f in ("tokenizer.json", "config.json"):
        if os.path.exists(os.path.join(model_dir, f)):
            shutil.copyfile(os.path.join(model_dir, f), os.path.join(out_dir, f))
    meta.update({"order": order, "seed": seed, "permuted_equivalence_max_abs_fp64": err64,
                 "orders": [{"q_heads": q, "kv_heads": kv, "ffn_head": f[:8]} for q, kv, f in zip(qo, kvo, fo)],
                 "levels_from": os.path.abspath(src_dir)})
    meta.pop("permuted_equivalence_max_abs", None)
    _atomic_json(os.path.join(out_dir, "elastic.json"), meta)
    log(f"elastic: {order} order with the levels of {src_dir} -> {out_dir} (fp64 equivalence {err64:.3g})")


def taylor_scores(model_dir, calib_dir, out, calib_tokens=6400, seq=256, seed=1234, layers=False, log=print):
    """Writes the Taylor scores build computes in the scores-file format of
    `tl elastic importance` (method "taylor"): per head |its Q/O term|, per
    KV group |members + the group's K/V| (the value gqa_order ranks by), per
    neuron its term; for comparing the two methods' orders. With layers,
    also build's layer-removal loss increases (PyTorch), to compare with
    `tl elastic importance --layers`."""
    model, cfg = load_llama_onnx(os.path.join(model_dir, "model.onnx"))
    calib = calibration_windows(calib_dir, calib_tokens, seq, seed)
    imps, base = llama_importance(model, calib)
    g = cfg.n_heads // cfg.n_kv_heads
    scores = []
    for imp in imps:
        q = imp["q_signed"]
        kv = [abs(float(q[k * g:(k + 1) * g].sum() + imp["kv_signed"][k])) for k in range(cfg.n_kv_heads)]
        scores.append({"q_heads": q.abs().tolist(), "kv_groups": kv, "neurons": imp["neuron"].tolist()})
    doc = {"format": IMPORTANCE_FORMAT, "method": "taylor: first-order |sum dL/dW * W| (PyTorch)",
           "n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
           "head_dim": cfg.dim // cfg.n_heads, "ffn": cfg.ffn, "tokens": int(calib.numel()),
           "windows": int(calib.shape[0]), "calibration_loss": base,
           "source": os.path.join(model_dir, "model.onnx"), "layers": scores}
    if layers:
        doc["layer_removal_loss_increase"] = layer_removal(model, calib, base)
    _atomic_json(out, doc)
    log(f"elastic: Taylor scores ({calib.numel()} tokens, loss {base:.4f}) -> {out}")


def write_calib(calib_dir, out, calib_tokens=6400, seq=256, seed=1234):
    """Writes the calibration windows build draws (same seed, same order)
    as an int64 [windows, seq] .npy, for `tl elastic importance --tokens`."""
    calib = calibration_windows(calib_dir, calib_tokens, seq, seed)
    tmp = out + ".tmp.npy"
    np.save(tmp, calib.numpy().astype(np.int64), allow_pickle=False)
    os.replace(tmp, out)
    print(f"elastic: {calib.shape[0]} windows x {calib.shape[1]} tokens -> {out}")


def extract_level(src_dir, out_dir, pct, log=print):
    """Writes one level of an elastic model as a model of its own: each
    layer's weights cut to the level's prefix (gathered into smaller
    matrices), for comparing one elastic copy against separate models kept
    resident. The sub-model is checked against the elastic model with the
    inactive units' O and down inputs zeroed (what the prefix computes)."""
    with open(os.path.join(src_dir, "elastic.json")) as f:
        meta = json.load(f)
    lv = next((x for x in meta["levels"] if x["level"] == pct), None)
    if lv is None:
        raise SystemExit(f"elastic: {src_dir} has no level {pct}% (levels {[x['level'] for x in meta['levels']]})")
    model, cfg = load_llama_onnx(os.path.join(src_dir, "model.onnx"))
    hd = cfg.dim // cfg.n_heads
    ids = torch.from_numpy(np.random.RandomState(5).randint(0, cfg.vocab, (2, 33)))
    with torch.no_grad():
        saved = [(p, p.clone()) for layer in model.layers for p in (layer.self_attn.o_proj.weight, layer.mlp.down_proj.weight)]
        for layer, w in zip(model.layers, lv["layers"]):
            layer.self_attn.o_proj.weight[:, w["q_heads"] * hd:] = 0
            layer.mlp.down_proj.weight[:, w["ffn"]:] = 0
        ref = llama_logits(model, ids)
        for p, v in saved:
            p.copy_(v)

        def cut(lin, n_out, n_in):
            new = torch.nn.Linear(n_in, n_out, bias=False)
            new.weight.copy_(lin.weight[:n_out, :n_in])
            return new

        for layer, w in zip(model.layers, lv["layers"]):
            a, m = layer.self_attn, layer.mlp
            q, kv, f = w["q_heads"] * hd, w["kv_heads"] * hd, w["ffn"]
            a.q_proj, a.k_proj = cut(a.q_proj, q, cfg.dim), cut(a.k_proj, kv, cfg.dim)
            a.v_proj, a.o_proj = cut(a.v_proj, kv, cfg.dim), cut(a.o_proj, cfg.dim, q)
            a.n_heads, a.n_kv = w["q_heads"], w["kv_heads"]
            m.gate_proj, m.up_proj, m.down_proj = cut(m.gate_proj, f, cfg.dim), cut(m.up_proj, f, cfg.dim), cut(m.down_proj, cfg.dim, f)
        got = llama_logits(model, ids)
    err = (got - ref).abs().max().item()
    if err > 1e-4:
        raise SystemExit(f"elastic: the extracted level {pct}% differs from the elastic prefix by {err}")
    os.makedirs(out_dir, exist_ok=True)
    export_llama(model, os.path.join(out_dir, "model.onnx"), kv_heads=[w["kv_heads"] for w in lv["layers"]])
    for f in ("tokenizer.json", "config.json"):
        if os.path.exists(os.path.join(src_dir, f)):
            shutil.copyfile(os.path.join(src_dir, f), os.path.join(out_dir, f))
    n_params = sum(p.numel() for n, p in model.named_parameters())
    _atomic_json(os.path.join(out_dir, "level.json"),
                 {"level": pct, "from": os.path.abspath(src_dir), "layers": lv["layers"], "parameters": n_params,
                  "max_abs_vs_elastic_prefix": err})
    log(f"elastic: level {pct}% -> {out_dir}: {n_params} parameters, max |logit diff| vs the elastic prefix {err:.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="reorder a llama.py-exported model and write OUT/model.onnx + elastic.json")
    b.add_argument("--model", required=True, help="model folder (model.onnx, tokenizer.json, config.json)")
    b.add_argument("--out", required=True)
    b.add_argument("--calib", required=True, help="training work dir with {fortunes,pydoc,debref}_train.npy")
    b.add_argument("--order", choices=("importance", "random", "none"), default="importance")
    b.add_argument("--anchors", type=float, default=0.2, help="fraction of layers locked at 100%% (0: none)")
    b.add_argument("--group", type=int, default=32, help="FFN width granularity (the 4-bit group G)")
    b.add_argument("--calib-tokens", type=int, default=6400)
    b.add_argument("--seed", type=int, default=1234)
    b.add_argument("--threads", type=int, default=1)
    b.add_argument("--importance-from", help="unit scores of `tl elastic importance` (forward-only proxy) "
                   "instead of the Taylor scores computed here")
    c = sub.add_parser("calib", help="write the calibration windows build uses, as .npy")
    c.add_argument("--calib", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--calib-tokens", type=int, default=6400)
    c.add_argument("--seq", type=int, default=256)
    c.add_argument("--seed", type=int, default=1234)
    t = sub.add_parser("taylor", help="write the Taylor unit scores in the format of tl elastic importance")
    t.add_argument("--model", required=True)
    t.add_argument("--calib", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--calib-tokens", type=int, default=6400)
    t.add_argument("--seed", type=int, default=1234)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--layers", action="store_true", help="also the layer-removal loss increases (one more forward pass per layer)")
    x = sub.add_parser("extract", help="write one level as a separate model (its prefix gathered)")
    x.add_argument("--from", dest="src", required=True, help="an elastic model folder")
    x.add_argument("--out", required=True)
    x.add_argument("--level", type=int, required=True)
    d = sub.add_parser("droplayers", help="baseline: drop the least important whole layers")
    d.add_argument("--model", required=True)
    d.add_argument("--out", required=True)
    d.add_argument("--calib", required=True)
    d.add_argument("--drop", type=int, required=True)
    d.add_argument("--seed", type=int, default=1234)
    d.add_argument("--threads", type=int, default=1)
    d.add_argument("--removal-from", help="elastic.json of the same model whose layer-removal losses to reuse")
    r = sub.add_parser("replan", help="same reordered model, levels re-planned for another anchor fraction")
    r.add_argument("--from", dest="src", required=True, help="an elastic model folder")
    r.add_argument("--out", required=True)
    r.add_argument("--anchors", type=float, required=True)
    o = sub.add_parser("reorder", help="ablation: random or no order with the levels and anchors of an elastic model")
    o.add_argument("--from", dest="src", required=True, help="the elastic model whose levels to keep")
    o.add_argument("--model", required=True, help="the original model folder")
    o.add_argument("--out", required=True)
    o.add_argument("--order", choices=("random", "none"), required=True)
    o.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    if a.cmd == "calib":
        write_calib(a.calib, a.out, a.calib_tokens, a.seq, a.seed)
        return
    if a.cmd == "taylor":
        torch.set_num_threads(a.threads)
        taylor_scores(a.model, a.calib, a.out, a.calib_tokens, seed=a.seed, layers=a.layers)
        return
    if a.cmd == "extract":
        extract_level(a.src, a.out, a.level)
        return
    if a.cmd == "reorder":
        reorder_like(a.src, a.model, a.out, a.order, a.seed)
        return
    if a.cmd == "replan":
        replan(a.src, a.out, a.anchors)
        return
    torch.set_num_threads(a.threads)
    if a.cmd == "droplayers":
        drop_layers(a.model, a.out, a.calib, a.drop, seed=a.seed, removal_from=a.removal_from)
        return
    if a.importance_from and a.order != "importance":
        raise SystemExit("elastic: --importance-from gives the importance order; it cannot go with --order " + a.order)
    build(a.model, a.out, a.calib, a.order, a.anchors, a.group, a.calib_tokens, seed=a.seed,
          importance_from=a.importance_from)


if __name__ == "__main__":
    main()
