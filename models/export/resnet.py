"""Small ResNet, exported twice for tlite: `resnet` and `resnet_bn`.

What this recipe demonstrates
-----------------------------
* The classic CNN stem: Conv 7x7 stride 2 pad 3, BatchNorm, ReLU, MaxPool
  3x3 stride 2 pad 1.
* Basic residual blocks (two 3x3 convs). Each of the two stages starts with
  a stride-2 block whose shortcut is a 1x1 stride-2 Conv + BatchNorm.
* GlobalAveragePool (from AdaptiveAvgPool2d(1)), Flatten, and a Linear
  head, which exports as Gemm (transB=1) rather than MatMul + Add.
* Channel counts (13, 21, 37) and the class count (11) are odd on purpose
  so that no kernel can assume multiples of 4 or 8.

The two exports hold the same weights and share one reference:
* `resnet` uses the exporter's default (do_constant_folding=True). In eval
  mode torch folds every BatchNorm into the preceding Conv's weight and
  bias, so the graph has only Conv/Relu/MaxPool/Add/GlobalAveragePool/
  Flatten/Gemm. This is what most exported CNNs look like.
* `resnet_bn` keeps explicit BatchNormalization nodes (inference form:
  training_mode=0, one output, scale/bias/mean/var as initializer inputs).
  An engine must either fold them itself or run them. It takes two export
  switches, because torch 1.13 folds BN in two places: the eval peephole
  pass, which runs whenever training=TrainingMode.EVAL (so this export uses
  TrainingMode.PRESERVE with the module already in eval mode), and constant
  folding (so do_constant_folding=False). Without constant folding the
  graph also keeps shape arithmetic the default export would have folded.

BatchNorm parameters and running statistics are randomized (see
exportlib.randomize_norms), so folding mistakes change the output.

Graph interface
---------------
inputs:
    pixel_values  float32 [batch, 3, 64, 64]
outputs:
    logits        float32 [batch, 11]

Only batch is dynamic.
"""

import dataclasses
import os
import types

import torch
from torch import nn

import exportlib

NAME = "resnet"
SEED = 1006


@dataclasses.dataclass
class Config:
    image: int = 64
    stem: int = 13
    stages: tuple = (21, 37)
    classes: int = 11


SIZES = {"test": Config()}


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + shortcut)


class ResNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.conv1 = nn.Conv2d(3, cfg.stem, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(cfg.stem)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        blocks = []
        cin = cfg.stem
        for cout in cfg.stages:
            blocks += [BasicBlock(cin, cout, 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, cfg.classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        x = self.blocks(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


IN_NAMES = ["pixel_values"]
OUT_NAMES = ["logits"]
AXES = {"pixel_values": {0: "batch"}, "logits": {0: "batch"}}


def export(out_dir, size="test", keep_batchnorm=False):
    """Exports the model (BN folded unless keep_batchnorm) and its reference."""
    cfg = SIZES[size]
    name = "resnet_bn" if keep_batchnorm else NAME
    rng = exportlib.seed_everything(SEED)
    model = ResNet(cfg)
    exportlib.randomize_norms(model)
    model.eval()
    os.makedirs(out_dir, exist_ok=True)

    ex_args = (torch.randn(2, 3, cfg.image, cfg.image),)
    path = os.path.join(out_dir, "model.onnx")
    if keep_batchnorm:
        onnx_model = exportlib.export_onnx(model, ex_args, path, IN_NAMES, OUT_NAMES, AXES,
                                           do_constant_folding=False,
                                           training=torch.onnx.TrainingMode.PRESERVE)
    else:
        onnx_model = exportlib.export_onnx(model, ex_args, path, IN_NAMES, OUT_NAMES, AXES)

    b = 3
    pixels = rng.standard_normal((b, 3, cfg.image, cfg.image)).astype("float32")
    with torch.no_grad():
        logits = model(torch.from_numpy(pixels))
    ins = [("pixel_values", pixels)]
    outs = [("logits", logits)]
    symbols = {"batch": b}
    exportlib.write_case(os.path.join(out_dir, "ref"), name, onnx_model, "default", symbols, ins, outs)
    status = ["default: " + exportlib.try_onnxruntime(path, ins, outs)]
    cfg_dict = dataclasses.asdict(cfg)
    cfg_dict["stages"] = list(cfg.stages)
    exportlib.write_model_json(out_dir, name, cfg_dict, onnx_model,
                               {"batchnorm": "kept" if keep_batchnorm else "folded into Conv"})
    return onnx_model, status


# export_all.py treats the BatchNormalization-preserving export as its own
# recipe so that `--only resnet_bn` works.
BN_VARIANT = types.SimpleNamespace(
    NAME="resnet_bn", SIZES=SIZES,
    export=lambda out_dir, size="test": export(out_dir, size, keep_batchnorm=True))
