"""CLIP text encoder, exported for tlite.

What this recipe demonstrates
-----------------------------
* A fixed context of 77 tokens with a dynamic batch: seq is a constant in
  the graph, batch is the only symbol.
* A causal mask built in-graph the way CLIP builds it: a [seq, seq] matrix
  full of float32-min with triu(1), i.e. ConstantOfShape + Trilu, added to
  the attention scores. (CLIP's text tower is causal even though it is an
  encoder.)
* Pre-LN transformer with QuickGELU (clip_encoder.py), final LayerNorm.
* Pooling at the end-of-text token. CLIP's EOT token has the largest id in
  the vocabulary, so its position is argmax(input_ids); the pooled vector is
  last_hidden_state[arange(batch), argmax]. This exports as ArgMax plus
  index arithmetic and a Gather. input_ids are cast to int32 before ArgMax,
  as the Hugging Face port does, because some runtimes lack int64 ArgMax.
* A bias-free projection to the joint embedding space.

Graph interface
---------------
inputs:
    input_ids          int64   [batch, 77]
outputs:
    text_embeds        float32 [batch, proj]
    last_hidden_state  float32 [batch, 77, width]

The reference inputs follow CLIP's tokenizer convention: the sequence ends
with the EOT id (vocab - 1), the rest of the context is padded with 0, and
no other token has the EOT id.
"""

import dataclasses
import os

import numpy as np
import onnx
import torch
from torch import nn

import clip_encoder
import exportlib

NAME = "clip_text"
SEED = 1005


@dataclasses.dataclass
class Config:
    vocab: int = 512
    context: int = 77
    width: int = 64
    n_layers: int = 2
    n_heads: int = 4
    mlp: int = 256
    proj: int = 32


SIZES = {
    "test": Config(),
    "full": Config(vocab=49408, width=512, n_layers=12, n_heads=8, mlp=2048, proj=512),
}


class ClipText(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.token_embedding = nn.Embedding(cfg.vocab, cfg.width)
        self.position_embedding = nn.Embedding(cfg.context, cfg.width)
        self.layers = nn.ModuleList(
            clip_encoder.EncoderLayer(cfg.width, cfg.n_heads, cfg.mlp) for _ in range(cfg.n_layers))
        self.final_layer_norm = nn.LayerNorm(cfg.width)
        self.text_projection = nn.Linear(cfg.width, cfg.proj, bias=False)
        self.register_buffer("position_ids", torch.arange(cfg.context)[None, :])
        with torch.no_grad():
            # CLIP's init scales; N(0, 1) would dominate the residual stream.
            self.token_embedding.weight.normal_(0.0, 0.02)
            self.position_embedding.weight.normal_(0.0, 0.01)

    def forward(self, input_ids):
        b, s = input_ids.shape
        x = self.token_embedding(input_ids) + self.position_embedding(self.position_ids[:, :s])
        mask = torch.full((s, s), torch.finfo(torch.float32).min).triu(1)[None, None, :, :]
        for layer in self.layers:
            x = layer(x, mask)
        x = self.final_layer_norm(x)
        eot = input_ids.to(torch.int32).argmax(dim=-1)
        pooled = x[torch.arange(b), eot]
        return self.text_projection(pooled), x


IN_NAMES = ["input_ids"]
OUT_NAMES = ["text_embeds", "last_hidden_state"]
AXES = {"input_ids": {0: "batch"}, "text_embeds": {0: "batch"}, "last_hidden_state": {0: "batch"}}


def make_ids(rng, cfg, lengths):
    """Token rows ending in EOT (vocab - 1) at length-1, zero-padded after."""
    ids = np.zeros((len(lengths), cfg.context), dtype=np.int64)
    for row, n in enumerate(lengths):
        ids[row, 0] = cfg.vocab - 2  # start-of-text: the second largest id in CLIP
        ids[row, 1:n - 1] = rng.randint(1, cfg.vocab - 2, size=n - 2)
        ids[row, n - 1] = cfg.vocab - 1
    return ids


def export(out_dir, size="test"):
    """Exports the model and one reference case (batch 3; batch 1 for full)."""
    cfg = SIZES[size]
    rng = exportlib.seed_everything(SEED)
    model = ClipText(cfg)
    exportlib.randomize_norms(model)
    model.eval()
    os.makedirs(out_dir, exist_ok=True)

    ex_ids = torch.from_numpy(make_ids(np.random.RandomState(0), cfg, [5, 30]))
    path = os.path.join(out_dir, "model.onnx")
    onnx_model = exportlib.export_onnx(model, (ex_ids,), path, IN_NAMES, OUT_NAMES, AXES)
    extra = {}
    if size == "full":
        exportlib.save_external(onnx_model, path, "model.onnx.data")
        onnx_model = onnx.load(path, load_external_data=False)
        extra["external_data"] = "model.onnx.data"

    lengths = [10, 77, 23] if size == "test" else [12]
    ids = make_ids(rng, cfg, lengths)
    with torch.no_grad():
        outs = model(torch.from_numpy(ids))
    ins = [("input_ids", ids)]
    outs_ = list(zip(OUT_NAMES, outs))
    symbols = {"batch": len(lengths)}
    exportlib.write_case(os.path.join(out_dir, "ref"), NAME, onnx_model, "default", symbols, ins, outs_,
                         f"EOT (id {cfg.vocab - 1}) at positions {[n - 1 for n in lengths]}")
    status = ["default: " + exportlib.try_onnxruntime(path, ins, outs_)]
    exportlib.write_model_json(out_dir, NAME, dataclasses.asdict(cfg), onnx_model, extra)
    return onnx_model, status
