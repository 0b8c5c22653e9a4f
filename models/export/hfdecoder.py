"""Shared machinery for the decoder test bed: exports written like the
modeling code people actually export.

tlite's own recipes (llama.py, gpt2.py) are shaped the way tlite wants a
decoder to look. Real ONNX files come from other people's modeling code, most
of it Hugging Face transformers, whose structure differs in ways that matter
to an engine: K/V repeated for GQA with sizes read from `.shape`, rotary
tables cached up to `max_position_embeddings` and gathered by position_ids,
keys transposed before the score product, fused QKV projections split per
head, caches in family-specific layouts (BLOOM's transposed keys,
GPTBigCode's combined key_value). The recipes hf_*.py write those modules
themselves (no transformers code is used or copied); this file holds what
they share:

* `Family`: what a recipe declares (module, graph inputs, cache layout).
* `export_family`: export at opset 17 with named dynamic axes, write the
  ref/prefill and ref/decode cases (exportlib format), a byte-level
  tokenizer.json, and reference.json: a fixed prompt's token ids, the
  PyTorch prefill logits (prompt_logits.npy) and 32 greedy tokens computed
  with the KV cache in PyTorch.

Every family's graph inputs are a subset of input_ids, attention_mask,
position_ids (in that order) followed by the flat per-layer cache inputs
named past_key_values.{i}.<part>, with outputs logits and present.{i}.<part>,
as optimum's ONNX exports of these families name them. No config.json is
written: the context limit must come from the model itself, which is what
issue 9 asks the engine to derive.
"""

import dataclasses
import json
import os

import numpy as np
import torch

import exportlib

PROMPT = "The secret of life is"
GREEDY_TOKENS = 32
BOS, EOS = 256, 257


@dataclasses.dataclass
class Family:
    """What one hf_*.py recipe declares.

    name:        directory under testdata/models
    seed:        torch/numpy seed
    build:       () -> torch module whose forward takes the graph inputs
                 (`inputs`, then the flat cache) and returns (logits, *presents)
    config:      dict written into model.json
    inputs:      which of input_ids/attention_mask/position_ids the graph takes
    cache_parts: names of the per-layer cache tensors ("key", "value", or
                 "key_value")
    cache_shape: (batch, length) -> list of per-part shapes for one layer
    cache_axes:  per part, {axis: "batch" | "past" | other symbol} for the
                 past input; the present output uses "total" for "past"
    n_layers, vocab
    structure:   one line per thing the graph does the way HF does it
    """
    name: str
    seed: int
    build: object
    config: dict
    inputs: tuple
    cache_parts: tuple
    cache_shape: object
    cache_axes: tuple
    n_layers: int
    vocab: int
    structure: tuple = ()
    extra_symbols: object = None  # (batch) -> dict of other cache symbols
    gain: float = 1.0  # multiplies every non-embedding matrix; see apply_gain


def io_names(fam):
    past, present = [], []
    for i in range(fam.n_layers):
        for p in fam.cache_parts:
            past.append(f"past_key_values.{i}.{p}")
            present.append(f"present.{i}.{p}")
    axes = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    if "attention_mask" in fam.inputs:
        axes["attention_mask"] = {0: "batch", 1: "total"}
    if "position_ids" in fam.inputs:
        axes["position_ids"] = {0: "batch", 1: "seq"}
    for i in range(fam.n_layers):
        for p, ax in zip(fam.cache_parts, fam.cache_axes):
            axes[f"past_key_values.{i}.{p}"] = dict(ax)
            axes[f"present.{i}.{p}"] = {k: ("total" if v == "past" else v) for k, v in ax.items()}
    return list(fam.inputs) + past, ["logits"] + present, axes


def step_args(fam, ids, past, past_len, mask_prefix=None):
    """The graph's inputs for ids [b, s] on top of a cache of past_len."""
    b, s = ids.shape
    args = [torch.as_tensor(ids)]
    if "attention_mask" in fam.inputs:
        m = torch.ones(b, past_len + s, dtype=torch.int64)
        if mask_prefix is not None:
            m[:, :mask_prefix.shape[1]] = torch.as_tensor(mask_prefix)
        args.append(m)
    if "position_ids" in fam.inputs:
        args.append(torch.arange(past_len, past_len + s).repeat(b, 1))
    return args + list(past)


def empty_cache(fam, batch, length, randn=False):
    out = []
    for _ in range(fam.n_layers):
        for shape in fam.cache_shape(batch, length):
            out.append(torch.randn(shape) if randn else torch.zeros(shape))
    return out


def byte_tokenizer(vocab):
    """A byte-level BPE tokenizer.json with no merges: ids 0-255 are bytes
    (in GPT-2's byte-to-unicode spelling), 256 BOS, 257 EOS, and ids up to
    the model's vocabulary are placeholder tokens so every logit decodes."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    byte_char, extra = {}, 0
    for bt in range(256):
        if bt in printable:
            byte_char[bt] = chr(bt)
        else:
            byte_char[bt] = chr(256 + extra)
            extra += 1
    v = {byte_char[bt]: bt for bt in range(256)}
    v["<|bos|>"], v["<|eos|>"] = BOS, EOS
    for i in range(EOS + 1, vocab):
        v[f"<|x{i}|>"] = i
    special = lambda i, c: {"id": i, "content": c, "single_word": False, "lstrip": False,
                            "rstrip": False, "normalized": False, "special": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(BOS, "<|bos|>"), special(EOS, "<|eos|>")],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [BOS], "tokens": ["<|bos|>"]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": v, "merges": []},
    }


def greedy(fam, model, prompt_ids, n):
    """PyTorch greedy decoding with the KV cache, batch 1. Returns the
    prefill logits, the generated ids and the smallest top-1/top-2 logit gap
    seen (a small gap would make the reference fragile)."""
    ids = np.array([prompt_ids], dtype=np.int64)
    past = empty_cache(fam, 1, 0)
    past_len = 0
    out_ids, gap, prompt_logits = [], float("inf"), None
    with torch.no_grad():
        for step in range(n):
            outs = model(*step_args(fam, ids, past, past_len))
            logits = outs[0]
            if step == 0:
                prompt_logits = logits[0].numpy().copy()
            last = logits[0, -1]
            top = torch.topk(last, 2).values
            gap = min(gap, float(top[0] - top[1]))
            tok = int(torch.argmax(last))
            out_ids.append(tok)
            past_len += ids.shape[1]
            past = list(outs[1:])
            ids = np.array([[tok]], dtype=np.int64)
    return prompt_logits, out_ids, gap


def apply_gain(model, gain):
    """Scales every 2-D weight except embedding tables by gain.

    At default init a small random decoder falls into a fixed point: the
    residual stream is dominated by the current token's embedding, so
    greedy decoding repeats one token whatever the cache holds, and a
    reference of 32 equal tokens would pass an engine that ignored its
    cache. Larger projections make the blocks (and so the cache) decide the
    next token; each family's gain was chosen so its 32 greedy tokens vary
    and the top-2 logit gap stays well above float32 noise.
    """
    if gain == 1.0:
        return
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2 and id(p) not in embeddings:
                p.mul_(gain)


def export_family(fam, out_dir):
    """Exports `fam` to out_dir with its reference data; returns
    (onnx model, status lines) like every recipe's export()."""
    rng = exportlib.seed_everything(fam.seed)
    model = fam.build()
    exportlib.randomize_norms(model)
    apply_gain(model, fam.gain)
    model.eval()
    in_names, out_names, axes = io_names(fam)
    os.makedirs(out_dir, exist_ok=True)

    # Trace with batch 2, seq 5, past 3: all different, past non-empty.
    ex_ids = torch.randint(0, fam.vocab, (2, 5))
    ex = step_args(fam, ex_ids, empty_cache(fam, 2, 3, randn=True), 3)
    path = os.path.join(out_dir, "model.onnx")
    onnx_model = exportlib.export_onnx(model, tuple(ex), path, in_names, out_names, axes)

    def symbols(b, s, p):
        sym = {"batch": b, "seq": s, "past": p, "total": p + s}
        if fam.extra_symbols:
            sym.update(fam.extra_symbols(b))
        return sym

    b, s = 2, 7
    ids = rng.randint(0, fam.vocab, size=(b, s)).astype(np.int64)
    ins = step_args(fam, ids, empty_cache(fam, b, 0), 0)
    with torch.no_grad():
        outs = model(*ins)
    ids2 = rng.randint(0, fam.vocab, size=(b, 1)).astype(np.int64)
    ins2 = step_args(fam, ids2, list(outs[1:]), s)
    with torch.no_grad():
        outs2 = model(*ins2)
    status = []
    for case, sym, i_, o_, notes in (
            ("prefill", symbols(b, s, 0), ins, outs, ""),
            ("decode", symbols(b, 1, s), ins2, outs2,
             "continues the prefill case: past_key_values are the prefill's present outputs")):
        i_ = list(zip(in_names, i_))
        o_ = list(zip(out_names, o_))
        exportlib.write_case(os.path.join(out_dir, "ref", case), fam.name, onnx_model, case,
                             sym, i_, o_, notes)
        status.append(f"{case}: " + exportlib.try_onnxruntime(path, i_, o_))

    prompt_ids = [BOS] + list(PROMPT.encode())
    prompt_logits, greedy_ids, gap = greedy(fam, model, prompt_ids, GREEDY_TOKENS)
    np.save(os.path.join(out_dir, "prompt_logits.npy"), prompt_logits.astype("<f4"), allow_pickle=False)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump({"prompt": PROMPT, "prompt_ids": prompt_ids, "add_bos": True,
                   "greedy_ids": greedy_ids, "min_top2_gap": round(gap, 6),
                   "computed_by": "PyTorch, batch 1, KV cache, greedy (argmax)"}, f, indent=1)
        f.write("\n")
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump(byte_tokenizer(fam.vocab), f, ensure_ascii=False)
        f.write("\n")
    status.append(f"greedy: {GREEDY_TOKENS} tokens, smallest top-2 logit gap {gap:.4f}")
    exportlib.write_model_json(out_dir, fam.name, fam.config, onnx_model,
                               {"structure": list(fam.structure), "weight_gain": fam.gain})
    return onnx_model, status


class Recipe:
    """Adapts a Family to export_all.py's recipe interface."""

    SIZES = {"test": None}

    def __init__(self, fam):
        self.fam = fam

    def export(self, out_dir, size="test"):
        return export_family(self.fam, out_dir)
