"""BERT-style encoder, exported for tlite.

What this recipe demonstrates
-----------------------------
* An encoder with both batch and sequence length dynamic and no cache.
* Word + position + token-type embeddings. Position ids are a slice of a
  constant [1, max_positions] buffer (position_ids[:, :seq]), as BERT
  implementations do, so the graph holds a Slice whose end is a Shape value.
* Post-LN blocks (LayerNorm after each residual add), each LayerNorm one
  LayerNormalization node at opset 17 (eps 1e-12, as in BERT).
* A padding mask broadcast over heads and queries: attention_mask [batch,
  seq] becomes an additive bias (1 - mask) * float32-min of shape
  [batch, 1, 1, seq] (Unsqueeze, Cast, Sub, Mul).
* Exact GELU written out with erf: 0.5 * x * (1 + erf(x / sqrt(2))). Opset
  17 has no Gelu op (it arrived in opset 20), so this is Div/Erf/Add/Mul/Mul
  and tlite fuses it.
* Two outputs, one of them from a row gather: the pooler applies
  tanh(Linear(.)) to the first token's hidden state.

Graph interface
---------------
inputs:
    input_ids          int64   [batch, seq]
    attention_mask     int64   [batch, seq]   1 = token, 0 = padding
    token_type_ids     int64   [batch, seq]
outputs:
    last_hidden_state  float32 [batch, seq, dim]
    pooler_output      float32 [batch, dim]

Named dynamic axes: batch and seq. seq must not exceed max_positions (64
here). Hidden states at padded positions are computed but meaningless;
compare them like any other value (they are deterministic), or mask them.
"""

import dataclasses
import math
import os

import numpy as np
import torch
from torch import nn

import exportlib

NAME = "bert"
SEED = 1003


@dataclasses.dataclass
class Config:
    vocab: int = 307  # odd on purpose
    max_positions: int = 64
    type_vocab: int = 2
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    ffn: int = 128
    eps: float = 1e-12


# "full" is BERT-small's shape (4 layers of 512, 8 heads, FFN 2048, the
# uncased WordPiece vocabulary's 30522 rows): the transformer case of the
# speed comparison (tools/ortbench), random weights.
SIZES = {"test": Config(),
         "full": Config(vocab=30522, max_positions=512, dim=512, n_layers=4, n_heads=8, ffn=2048)}


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class Embeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.dim)
        self.position_embeddings = nn.Embedding(cfg.max_positions, cfg.dim)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab, cfg.dim)
        self.LayerNorm = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.register_buffer("position_ids", torch.arange(cfg.max_positions)[None, :])

    def forward(self, input_ids, token_type_ids):
        s = input_ids.shape[1]
        pos = self.position_ids[:, :s]
        x = (self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
             + self.position_embeddings(pos))
        return self.LayerNorm(x)


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.query = nn.Linear(cfg.dim, cfg.dim)
        self.key = nn.Linear(cfg.dim, cfg.dim)
        self.value = nn.Linear(cfg.dim, cfg.dim)

    def heads(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.n_heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, bias):
        b, s, d = x.shape
        q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + bias
        probs = torch.softmax(scores, dim=-1)
        return torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(b, s, d)


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attention = SelfAttention(cfg)
        self.attention_output = nn.Linear(cfg.dim, cfg.dim)
        self.attention_norm = nn.LayerNorm(cfg.dim, eps=cfg.eps)
        self.intermediate = nn.Linear(cfg.dim, cfg.ffn)
        self.output = nn.Linear(cfg.ffn, cfg.dim)
        self.output_norm = nn.LayerNorm(cfg.dim, eps=cfg.eps)

    def forward(self, x, bias):
        x = self.attention_norm(x + self.attention_output(self.attention(x, bias)))
        return self.output_norm(x + self.output(gelu_erf(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.pooler = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, input_ids, attention_mask, token_type_ids):
        bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            x = layer(x, bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


IN_NAMES = ["input_ids", "attention_mask", "token_type_ids"]
OUT_NAMES = ["last_hidden_state", "pooler_output"]
AXES = {
    "input_ids": {0: "batch", 1: "seq"},
    "attention_mask": {0: "batch", 1: "seq"},
    "token_type_ids": {0: "batch", 1: "seq"},
    "last_hidden_state": {0: "batch", 1: "seq"},
    "pooler_output": {0: "batch"},
}


def export(out_dir, size="test"):
    """Exports the model and its seq9/seq16 reference cases to out_dir."""
    cfg = SIZES[size]
    rng = exportlib.seed_everything(SEED)
    model = Bert(cfg)
    exportlib.randomize_norms(model)
    model.eval()
    os.makedirs(out_dir, exist_ok=True)

    ex_b, ex_s = 3, 6
    ex_args = (torch.randint(0, cfg.vocab, (ex_b, ex_s)),
               torch.ones(ex_b, ex_s, dtype=torch.int64),
               torch.zeros(ex_b, ex_s, dtype=torch.int64))
    path = os.path.join(out_dir, "model.onnx")
    onnx_model = exportlib.export_onnx(model, ex_args, path, IN_NAMES, OUT_NAMES, AXES)

    status = []
    # seq9: two sentence-pair rows, row 1 padded by 3. seq16: row 1 padded by 5.
    for s, n_pad, first_len in ((9, 3, 5), (16, 5, 7)):
        b = 2
        ids = rng.randint(0, cfg.vocab, size=(b, s)).astype(np.int64)
        mask = np.ones((b, s), dtype=np.int64)
        mask[1, s - n_pad:] = 0
        ids[1, s - n_pad:] = 0
        types = np.zeros((b, s), dtype=np.int64)
        types[:, first_len:] = 1
        types[1, s - n_pad:] = 0
        with torch.no_grad():
            outs = model(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types))
        ins = list(zip(IN_NAMES, [ids, mask, types]))
        outs_ = list(zip(OUT_NAMES, outs))
        symbols = {"batch": b, "seq": s}
        case = f"seq{s}"
        exportlib.write_case(os.path.join(out_dir, "ref", case), NAME, onnx_model, case, symbols,
                             ins, outs_, f"row 1 is right-padded by {n_pad} tokens (attention_mask 0)")
        status.append(f"{case}: " + exportlib.try_onnxruntime(path, ins, outs_))
    exportlib.write_model_json(out_dir, NAME, dataclasses.asdict(cfg), onnx_model)
    return onnx_model, status
