"""CLIP ViT-B/32 image encoder architecture, exported for tlite.

What this recipe demonstrates
-----------------------------
* Patch embedding as a Conv with kernel = stride = 32 and no bias: a
  [batch, 3, 224, 224] image becomes [batch, width, 7, 7], flattened and
  transposed to 49 patch tokens (Conv, Reshape/Flatten, Transpose).
* A learned class token expanded over the batch and concatenated in front
  (Expand + Concat), then a learned position embedding for all 50 tokens.
* Pre-LN transformer layers with QuickGELU (see clip_encoder.py), no mask.
* pre_layrnorm before the first layer (the name is CLIP's own typo, kept so
  weights from real checkpoints map by name), post_layernorm on the class
  token only, then a bias-free projection to the joint embedding space.

The test size keeps the real token count (224 / 32 = 7, 7 * 7 + 1 = 50
tokens) but shrinks the width; --size full builds the real ViT-B/32 shape
(width 768, 12 layers, 12 heads, projection 512, about 88M parameters) with
random weights and saves it with external data, the way any model past
protobuf's 2 GB limit must be stored (the format is the same below the
limit, so the small file exercises the same loader path).

Graph interface
---------------
inputs:
    pixel_values       float32 [batch, 3, 224, 224]
outputs:
    image_embeds       float32 [batch, proj]
    last_hidden_state  float32 [batch, 50, width]

Only batch is dynamic: the image size is baked in by the position table.
"""

import dataclasses
import os

import onnx
import torch
from torch import nn

import clip_encoder
import exportlib

NAME = "clip_vision"
SEED = 1004


@dataclasses.dataclass
class Config:
    image: int = 224
    patch: int = 32
    width: int = 64
    n_layers: int = 2
    n_heads: int = 4
    mlp: int = 256
    proj: int = 32


SIZES = {
    "test": Config(),
    "full": Config(width=768, n_layers=12, n_heads=12, mlp=3072, proj=512),
}


class ClipVision(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        n_tokens = (cfg.image // cfg.patch) ** 2 + 1
        self.patch_embedding = nn.Conv2d(3, cfg.width, cfg.patch, stride=cfg.patch, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(cfg.width) * cfg.width ** -0.5)
        self.position_embedding = nn.Parameter(torch.randn(n_tokens, cfg.width) * cfg.width ** -0.5)
        self.pre_layrnorm = nn.LayerNorm(cfg.width)
        self.layers = nn.ModuleList(
            clip_encoder.EncoderLayer(cfg.width, cfg.n_heads, cfg.mlp) for _ in range(cfg.n_layers))
        self.post_layernorm = nn.LayerNorm(cfg.width)
        self.visual_projection = nn.Linear(cfg.width, cfg.proj, bias=False)

    def forward(self, pixel_values):
        b = pixel_values.shape[0]
        x = self.patch_embedding(pixel_values)           # [b, width, 7, 7]
        x = x.flatten(2).transpose(1, 2)                 # [b, 49, width]
        cls = self.class_embedding.expand(b, 1, -1)      # [b, 1, width]
        x = torch.cat([cls, x], dim=1) + self.position_embedding
        x = self.pre_layrnorm(x)
        for layer in self.layers:
            x = layer(x)
        pooled = self.post_layernorm(x[:, 0, :])
        return self.visual_projection(pooled), x


IN_NAMES = ["pixel_values"]
OUT_NAMES = ["image_embeds", "last_hidden_state"]
AXES = {"pixel_values": {0: "batch"}, "image_embeds": {0: "batch"}, "last_hidden_state": {0: "batch"}}


def export(out_dir, size="test"):
    """Exports the model and one reference case (batch 2; batch 1 for full)."""
    cfg = SIZES[size]
    rng = exportlib.seed_everything(SEED)
    model = ClipVision(cfg)
    exportlib.randomize_norms(model)
    model.eval()
    os.makedirs(out_dir, exist_ok=True)

    ex_args = (torch.randn(3, 3, cfg.image, cfg.image),)
    path = os.path.join(out_dir, "model.onnx")
    onnx_model = exportlib.export_onnx(model, ex_args, path, IN_NAMES, OUT_NAMES, AXES)
    extra = {}
    if size == "full":
        # torch.onnx.export wrote the weights inline (88M params < 2 GB);
        # move them to model.onnx.data as a >2 GB model would need.
        exportlib.save_external(onnx_model, path, "model.onnx.data")
        onnx_model = onnx.load(path, load_external_data=False)
        extra["external_data"] = "model.onnx.data"

    b = 2 if size == "test" else 1
    pixels = rng.standard_normal((b, 3, cfg.image, cfg.image)).astype("float32")
    with torch.no_grad():
        outs = model(torch.from_numpy(pixels))
    ins = [("pixel_values", pixels)]
    outs_ = list(zip(OUT_NAMES, outs))
    symbols = {"batch": b}
    exportlib.write_case(os.path.join(out_dir, "ref"), NAME, onnx_model, "default", symbols, ins, outs_)
    status = ["default: " + exportlib.try_onnxruntime(path, ins, outs_)]
    exportlib.write_model_json(out_dir, NAME, dataclasses.asdict(cfg), onnx_model, extra)
    return onnx_model, status
