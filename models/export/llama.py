"""LLaMA-style decoder with a KV cache, exported for tlite.

What this recipe demonstrates
-----------------------------
* RMSNorm written as plain PyTorch (x * rsqrt(mean(x^2) + eps) * w). ONNX
  opset 17 has no RMSNorm op, so it exports as Pow/ReduceMean/Add/Sqrt/Div/Mul;
  tlite's rewrites fuse that chain back into one kernel.
* Rotary position embeddings computed *inside* the graph from the
  `position_ids` input: cos/sin come from an `inv_freq` buffer, and
  rotate_half is a Slice/Neg/Concat. Taking positions as an input (instead of
  deriving them from the cache length) lets the engine run with arbitrary
  positions: left padding, chunked recompute, cache eviction.
* Grouped-query attention (4 query heads share 2 KV heads). The KV heads are
  repeated with unsqueeze/expand/reshape, which exports as
  Unsqueeze/Expand/Reshape with shapes computed in-graph.
* SwiGLU MLP: down(silu(gate(x)) * up(x)), silu exporting as Sigmoid*Mul.
* An explicit KV cache: per layer, `past_key_values.{i}.key` / `.value` in
  and `present.{i}.key` / `.value` out. The cache stores keys *after* rotary
  embedding and *before* the GQA repeat, so it holds n_kv_heads heads.

Graph interface (names are what tlite looks up)
-----------------------------------------------
inputs:
    input_ids                 int64   [batch, seq]
    attention_mask            int64   [batch, total]        1 = attend, 0 = padding
    position_ids              int64   [batch, seq]
    past_key_values.{i}.key   float32 [batch, n_kv_heads, past, head_dim]
    past_key_values.{i}.value float32 [batch, n_kv_heads, past, head_dim]
outputs:
    logits                    float32 [batch, seq, vocab]
    present.{i}.key           float32 [batch, n_kv_heads, total, head_dim]
    present.{i}.value         float32 [batch, n_kv_heads, total, head_dim]

Dynamic axes are *named* (batch, seq, past, total) so the exporter writes
them as dim_param strings. ONNX cannot express "total = past + seq" in a
dim, so attention_mask's second axis and the present length are both called
"total": tlite's shape inference proves from the Concat that builds the
present that total == past + seq, and checks the bound attention_mask
against it. A prefill is simply past = 0 (empty past tensors).

Masking: the additive bias is 0 where a key may be attended and
float32-min where it may not (causal triangle AND attention_mask). Using the
finite minimum instead of -inf keeps fully masked rows (queries at padded
positions) finite: they come out as a uniform average, not NaN.
"""

import dataclasses
import math
import os

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from torch import nn

import exportlib

NAME = "llama"
SEED = 1001


@dataclasses.dataclass
class Config:
    vocab: int = 256
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn: int = 172  # not a multiple of 8 on purpose: exercises kernel tails
    rope_theta: float = 10000.0
    eps: float = 1e-5


SIZES = {
    "test": Config(),
    # Issue 13's benchmark LLM (245.9M parameters, random weights): only its
    # speed is measured, so nothing is trained. --size full writes it with
    # its weights in model.onnx.data.
    "full": Config(vocab=32000, dim=1024, n_layers=16, n_heads=16, n_kv_heads=4, ffn=2816),
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv = cfg.n_kv_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)

    def repeat_kv(self, x):
        # [b, kv, t, d] -> [b, kv * rep, t, d]; head h uses kv head h // rep.
        rep = self.n_heads // self.n_kv
        b, kv, t, d = x.shape
        return x[:, :, None, :, :].expand(b, kv, rep, t, d).reshape(b, kv * rep, t, d)

    def forward(self, x, cos, sin, bias, past_k, past_v):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.n_kv, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = torch.cat((past_k, k), dim=2)
        v = torch.cat((past_v, v), dim=2)
        present = (k, v)
        scores = torch.matmul(q, self.repeat_kv(k).transpose(2, 3)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores + bias, dim=-1)
        out = torch.matmul(probs, self.repeat_kv(v))
        out = out.transpose(1, 2).reshape(b, s, self.n_heads * self.head_dim)
        return self.o_proj(out), present


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn, bias=False)
        self.down_proj = nn.Linear(cfg.ffn, cfg.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, bias, past_k, past_v):
        h, present = self.self_attn(self.input_layernorm(x), cos, sin, bias, past_k, past_v)
        x = x + h
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x, present


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        head_dim = cfg.dim // cfg.n_heads
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq)
        # fp32 scalar constants for the mask. Python scalars passed to
        # torch.where export as double in torch 1.13 and would silently turn
        # the attention into fp64, so they are buffers instead.
        self.register_buffer("zero", torch.tensor(0.0))
        self.register_buffer("mask_min", torch.tensor(torch.finfo(torch.float32).min))

    def forward(self, input_ids, attention_mask, position_ids, *past):
        # past is flat: (layer0.key, layer0.value, layer1.key, ...), because
        # torch.onnx.export maps positional tensor args 1:1 to graph inputs.
        s = input_ids.shape[1]
        past_len = past[0].shape[2]
        total = attention_mask.shape[1]  # == past_len + s

        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos()[:, None, :, :]  # [b, 1, s, head_dim]
        sin = emb.sin()[:, None, :, :]

        # Query i sits at cache slot past_len + i and may see slots <= that.
        q_slot = torch.arange(s) + past_len
        k_slot = torch.arange(total)
        causal = k_slot[None, :] <= q_slot[:, None]  # [s, total]
        allowed = causal[None, None, :, :] & attention_mask[:, None, None, :].bool()
        bias = torch.where(allowed, self.zero, self.mask_min)  # [b, 1, s, total]

        x = self.embed_tokens(input_ids)
        presents = []
        for i, layer in enumerate(self.layers):
            x, (k, v) = layer(x, cos, sin, bias, past[2 * i], past[2 * i + 1])
            presents += [k, v]
        logits = self.lm_head(self.norm(x))
        return (logits, *presents)


def io_names(cfg):
    past = [f"past_key_values.{i}.{kv}" for i in range(cfg.n_layers) for kv in ("key", "value")]
    present = [f"present.{i}.{kv}" for i in range(cfg.n_layers) for kv in ("key", "value")]
    inputs = ["input_ids", "attention_mask", "position_ids"] + past
    outputs = ["logits"] + present
    axes = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "seq"},
        "logits": {0: "batch", 1: "seq"},
    }
    for n in past:
        axes[n] = {0: "batch", 2: "past"}
    for n in present:
        axes[n] = {0: "batch", 2: "total"}
    return inputs, outputs, axes


def empty_past(cfg, batch, past_len):
    hd = cfg.dim // cfg.n_heads
    return [torch.zeros(batch, cfg.n_kv_heads, past_len, hd) for _ in range(2 * cfg.n_layers)]


def export(out_dir, size="test"):
    """Exports the model and its prefill/decode reference cases to out_dir."""
    cfg = SIZES[size]
    rng = exportlib.seed_everything(SEED)
    model = Llama(cfg).eval()
    in_names, out_names, axes = io_names(cfg)
    os.makedirs(out_dir, exist_ok=True)

    # Trace with sizes that differ from each other (batch 2, seq 5, past 3)
    # so no two symbolic dims are confused, and with a non-empty past so the
    # cache Concat is traced as a real concatenation.
    ex_b, ex_s, ex_p = 2, 5, 3
    ex_args = (
        torch.randint(0, cfg.vocab, (ex_b, ex_s)),
        torch.ones(ex_b, ex_p + ex_s, dtype=torch.int64),
        torch.arange(ex_p, ex_p + ex_s).repeat(ex_b, 1),
        *[torch.randn(t.shape) for t in empty_past(cfg, ex_b, ex_p)],
    )
    path = os.path.join(out_dir, "model.onnx")
    onnx_model = exportlib.export_onnx(model, ex_args, path, in_names, out_names, axes)
    extra = {"external_data_variant": "model_ext.onnx"}
    if size == "test":
        # The same graph with its weights in a side file, to exercise the
        # external-data loader on a model small enough to commit.
        exportlib.save_external(onnx_model, os.path.join(out_dir, "model_ext.onnx"), "model_ext.onnx.data")
    else:
        # A large model keeps its weights beside the graph, as a >2 GB one
        # must; no second copy.
        exportlib.save_external(onnx_model, path, "model.onnx.data")
        onnx_model = onnx.load(path, load_external_data=False)
        extra = {"external_data": "model.onnx.data"}

    # Prefill: batch 2, seq 7, empty cache. Row 1 is left-padded by 2 tokens;
    # its position_ids count only real tokens (padded slots get 1, as HF does).
    b, s = 2, 7
    ids = rng.randint(0, cfg.vocab, size=(b, s)).astype(np.int64)
    mask = np.ones((b, s), dtype=np.int64)
    mask[1, :2] = 0
    pos = np.cumsum(mask, axis=1) - 1
    pos[mask == 0] = 1
    past = empty_past(cfg, b, 0)
    cases = []
    with torch.no_grad():
        outs = model(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(pos), *past)
    cases.append(("prefill", {"batch": b, "seq": s, "past": 0, "total": s},
                  [ids, mask, pos, *past], outs,
                  "row 1 is left-padded by 2 tokens (attention_mask 0, position_ids 1); "
                  "its padded query rows are fully masked and come out as a uniform average"))

    # Decode: one new token per row on top of the prefill's cache.
    ids2 = rng.randint(0, cfg.vocab, size=(b, 1)).astype(np.int64)
    mask2 = np.concatenate([mask, np.ones((b, 1), dtype=np.int64)], axis=1)
    pos2 = (pos.max(axis=1, keepdims=True) + 1).astype(np.int64)
    past2 = list(outs[1:])
    with torch.no_grad():
        outs2 = model(torch.from_numpy(ids2), torch.from_numpy(mask2), torch.from_numpy(pos2), *past2)
    cases.append(("decode", {"batch": b, "seq": 1, "past": s, "total": s + 1},
                  [ids2, mask2, pos2, *past2], outs2,
                  "continues the prefill case: past_key_values are the prefill's present outputs"))

    status = []
    for case, symbols, ins, outs_, notes in cases:
        ins = list(zip(in_names, ins))
        outs_ = list(zip(out_names, outs_))
        exportlib.write_case(os.path.join(out_dir, "ref", case), NAME, onnx_model, case,
                             symbols, ins, outs_, notes)
        status.append(f"{case}: " + exportlib.try_onnxruntime(path, ins, outs_))
    exportlib.write_model_json(out_dir, NAME, dataclasses.asdict(cfg), onnx_model, extra)
    return onnx_model, status
