"""GPT-2-style decoder with a KV cache, exported for tlite.

What this recipe demonstrates (and how it differs from llama.py)
----------------------------------------------------------------
* Learned absolute position embeddings. Positions are not an input: they
  are arange(past, past + seq), computed in-graph from the cache length, so
  the export contains a Range whose bounds come from Shape ops. tlite's
  shape inference evaluates such shape-computing subgraphs on the CPU.
* The causal mask is a slice of a constant lower-triangular bool buffer,
  bias[past:past+seq, :past+seq], as GPT-2 does: a Slice with symbolic
  starts/ends on an initializer, followed by Where.
* LayerNorm (exports as one LayerNormalization node at opset 17).
* One fused QKV projection (Linear dim -> 3*dim) split into q, k, v.
* GELU with the tanh approximation written out, exactly as GPT-2 defines it:
  0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
* The LM head is tied to the token embedding (logits = h @ wte^T). ONNX
  has no notion of tied weights: with constant folding the exporter
  materializes the transposed matrix as a second initializer, so the file
  holds the embedding twice. A loader must not assume one copy.
* Combined per-layer cache tensors, the older GPT-2 convention: key and
  value stacked on a leading axis of size 2.

Graph interface
---------------
inputs:
    input_ids           int64   [batch, seq]
    past_key_values.{i} float32 [2, batch, n_heads, past, head_dim]   ([0]=key, [1]=value)
outputs:
    logits              float32 [batch, seq, vocab]
    present.{i}         float32 [2, batch, n_heads, total, head_dim]

Named dynamic axes: batch, seq, past, total. As in llama.py, "total" is
past + seq; ONNX cannot say so, tlite's shape inference proves it. The
position table limits past + seq to n_positions (128); beyond that the
model is undefined, as in GPT-2 itself. There is no attention_mask input:
every row of a batch has the same length.
"""

import dataclasses
import math
import os

import numpy as np
import torch
from torch import nn

import exportlib

NAME = "gpt2"
SEED = 1002


@dataclasses.dataclass
class Config:
    vocab: int = 256
    n_positions: int = 128
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    eps: float = 1e-5


SIZES = {"test": Config()}


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.dim = cfg.dim
        self.c_attn = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.c_proj = nn.Linear(cfg.dim, cfg.dim)
        tril = torch.tril(torch.ones(cfg.n_positions, cfg.n_positions, dtype=torch.bool))
        self.register_buffer("bias", tril)
        # A buffer, not a Python float: scalars passed to torch.where export
        # as double in torch 1.13.
        self.register_buffer("masked_bias", torch.tensor(torch.finfo(torch.float32).min))

    def split_heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.n_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, past):
        b, s, _ = x.shape
        q, k, v = self.c_attn(x).split(self.dim, dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        k = torch.cat((past[0], k), dim=2)
        v = torch.cat((past[1], v), dim=2)
        present = torch.stack((k, v))
        total = k.shape[2]
        past_len = total - s
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        causal = self.bias[past_len:total, :total]
        w = torch.where(causal, w, self.masked_bias)
        w = torch.softmax(w, dim=-1)
        out = torch.matmul(w, v).permute(0, 2, 1, 3).reshape(b, s, self.dim)
        return self.c_proj(out), present


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.dim, 4 * cfg.dim)
        self.c_proj = nn.Linear(4 * cfg.dim, cfg.dim)

    def forward(self, x):
        return self.c_proj(gelu_tanh(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x, past):
        h, present = self.attn(self.ln_1(x), past)
        x = x + h
        x = x + self.mlp(self.ln_2(x))
        return x, present


class GPT2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab, cfg.dim)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.dim)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        with torch.no_grad():
            # GPT-2's init scale; N(0, 1) embeddings would swamp the blocks.
            self.wte.weight.normal_(0.0, 0.1)
            self.wpe.weight.normal_(0.0, 0.05)

    def forward(self, input_ids, *past):
        s = input_ids.shape[1]
        past_len = past[0].shape[3]
        position_ids = torch.arange(past_len, past_len + s)[None, :]
        x = self.wte(input_ids) + self.wpe(position_ids)
        presents = []
        for i, block in enumerate(self.h):
            x, present = block(x, past[i])
            presents.append(present)
        logits = torch.matmul(self.ln_f(x), self.wte.weight.t())
        return (logits, *presents)


def io_names(cfg):
    past = [f"past_key_values.{i}" for i in range(cfg.n_layers)]
    present = [f"present.{i}" for i in range(cfg.n_layers)]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    for n in past:
        axes[n] = {1: "batch", 3: "past"}
    for n in present:
        axes[n] = {1: "batch", 3: "total"}
    return ["input_ids"] + past, ["logits"] + present, axes


def empty_past(cfg, batch, past_len):
    hd = cfg.dim // cfg.n_heads
    return [torch.zeros(2, batch, cfg.n_heads, past_len, hd) for _ in range(cfg.n_layers)]


def export(out_dir, size="test"):
    """Exports the model and its prefill/decode reference cases to out_dir."""
    cfg = SIZES[size]
    rng = exportlib.seed_everything(SEED)
    model = GPT2(cfg)
    exportlib.randomize_norms(model)
    model.eval()
    in_names, out_names, axes = io_names(cfg)
    os.makedirs(out_dir, exist_ok=True)

    ex_b, ex_s, ex_p = 2, 5, 3
    ex_args = (torch.randint(0, cfg.vocab, (ex_b, ex_s)),
               *[torch.randn(t.shape) for t in empty_past(cfg, ex_b, ex_p)])
    path = os.path.join(out_dir, "model.onnx")
    onnx_model = exportlib.export_onnx(model, ex_args, path, in_names, out_names, axes)

    b, s = 2, 7
    ids = rng.randint(0, cfg.vocab, size=(b, s)).astype(np.int64)
    past = empty_past(cfg, b, 0)
    with torch.no_grad():
        outs = model(torch.from_numpy(ids), *past)
    ids2 = rng.randint(0, cfg.vocab, size=(b, 1)).astype(np.int64)
    past2 = list(outs[1:])
    with torch.no_grad():
        outs2 = model(torch.from_numpy(ids2), *past2)
    cases = [
        ("prefill", {"batch": b, "seq": s, "past": 0, "total": s}, [ids, *past], outs, ""),
        ("decode", {"batch": b, "seq": 1, "past": s, "total": s + 1}, [ids2, *past2], outs2,
         "continues the prefill case: past_key_values are the prefill's present outputs"),
    ]
    status = []
    for case, symbols, ins, outs_, notes in cases:
        ins = list(zip(in_names, ins))
        outs_ = list(zip(out_names, outs_))
        exportlib.write_case(os.path.join(out_dir, "ref", case), NAME, onnx_model, case,
                             symbols, ins, outs_, notes)
        status.append(f"{case}: " + exportlib.try_onnxruntime(path, ins, outs_))
    exportlib.write_model_json(out_dir, NAME, dataclasses.asdict(cfg), onnx_model)
    return onnx_model, status
