#!/usr/bin/python3
"""Vision test bed: torchvision 0.14 architectures exported to a cache.

Usage (Debian's python3 with python3-torchvision 0.14 installed):

    /usr/bin/python3 models/export/vision.py                      # all, to the default cache
    /usr/bin/python3 models/export/vision.py --out DIR --only resnet50,unet
    /usr/bin/python3 models/export/vision.py --list

Each network gets random weights (seeded) and is written to OUT/NAME/ in the
layout of testdata/models (model.onnx, model.json, ref/manifest.json with
input/output .npy), so the same tools read it. The models are large
(resnet50 and fcn_resnet50 are about 100 MB each) and are never committed:
the default OUT is $TLITE_CACHE/vision, else ~/.cache/tlite/vision.

BatchNorm statistics are calibrated, not left at their init (mean 0, var
1): a network with random convolution weights and identity BatchNorm grows
or shrinks its activations by orders of magnitude layer after layer, so the
reference would test float overflow or zeros, not the operators. Each net
is run in training mode over a few random batches with cumulative averaging
(momentum None), which sets every BN layer's running statistics to what its
inputs actually are, then exported in eval mode: the activations keep unit
scale all the way through. The export folds BatchNorm into the convolutions
(TrainingMode.EVAL), as people's exports do.

The input is 1x3xHxW (H = W = --size, 96 by default) with a dynamic batch
axis named "batch"; the reference case is batch 1 from a seeded normal
distribution. Outputs come from the PyTorch module itself. With
--dynamic-hw the height and width axes are dynamic too (symbols "height"
and "width", also on 4-D outputs) and the nets go to OUT/NAME_hw: the case
of a classifier whose plan must be sized from the input given, not a worst
case.

Nets (torchvision.models names, plus one written here):
  mobilenet_v3_small, mobilenet_v3_large  HardSwish/HardSigmoid, SE blocks
  efficientnet_b0                         SiLU, SE, depthwise
  shufflenet_v2_x1_0                      channel shuffle (Reshape/Transpose), Split
  squeezenet1_1                           Concat of fire modules, ceil-mode MaxPool
  resnet50, densenet121                   bottlenecks, dense Concat, AvgPool
  resnet18                                basic blocks of 3x3 convs (the convolution benchmark)
  convnext_tiny                           7x7 depthwise, LayerNorm over channels, layer scale
  lraspp_mobilenet_v3_large               Resize (bilinear) back to the input size
  deeplabv3_mobilenet_v3_large            ASPP with dilations, Resize
  fcn_resnet50                            dilated ResNet, Resize
  unet                                    small UNet (written here): ConvTranspose2d upsampling, skip Concat
"""

import argparse
import os
import sys
import time

sys.dont_write_bytecode = True

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import exportlib  # noqa: E402

SEED = 3001


class UNet(nn.Module):
    """A small UNet: two downsamplings, ConvTranspose2d upsamplings with
    skip connections concatenated on channels, BN+ReLU double convs."""

    def __init__(self, in_ch=3, classes=5, w=16):
        super().__init__()

        def double(a, b):
            return nn.Sequential(nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True),
                                 nn.Conv2d(b, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True))

        self.enc1, self.enc2, self.mid = double(in_ch, w), double(w, 2 * w), double(2 * w, 4 * w)
        self.pool = nn.MaxPool2d(2)
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.dec2 = double(4 * w, 2 * w)
        # A second kind of ConvTranspose: kernel 3, stride 2, padding 1,
        # output_padding 1 (the "same"-size doubling).
        self.up1 = nn.ConvTranspose2d(2 * w, w, 3, stride=2, padding=1, output_padding=1)
        self.dec1 = double(2 * w, w)
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        m = self.mid(self.pool(e2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], dim=1))
        return self.head(d1)


class SegOut(nn.Module):
    """torchvision's segmentation models return a dict; export its "out"."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)["out"]


def build(name):
    import torchvision.models as tvm
    import torchvision.models.segmentation as seg
    if name == "unet":
        return UNet()
    if name in ("lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large", "fcn_resnet50"):
        net = getattr(seg, name)(weights=None, weights_backbone=None, num_classes=7, aux_loss=False)
        return SegOut(net)
    return getattr(tvm, name)(weights=None)


NETS = ["mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "shufflenet_v2_x1_0",
        "squeezenet1_1", "resnet50", "resnet18", "densenet121", "convnext_tiny", "lraspp_mobilenet_v3_large",
        "deeplabv3_mobilenet_v3_large", "fcn_resnet50", "unet"]


def calibrate(model, size, batches=4, batch=8):
    """Sets every BatchNorm's running statistics to those of its real inputs
    on random data (cumulative average over `batches` batches)."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(batch, 3, size, size))
    model.eval()
    return len(bns)


def export(name, out_root, size, dynamic_hw=False):
    out_dir = os.path.join(out_root, name + ("_hw" if dynamic_hw else ""))
    os.makedirs(out_dir, exist_ok=True)
    rng = exportlib.seed_everything(SEED)
    model = build(name)
    n_bn = calibrate(model, size)
    path = os.path.join(out_dir, "model.onnx")
    x = torch.from_numpy(rng.standard_normal((1, 3, size, size)).astype(np.float32))
    with torch.no_grad():
        y = model(x)
    axes = {"pixel_values": {0: "batch"}, "output": {0: "batch"}}
    symbols = {"batch": 1}
    if dynamic_hw:
        axes["pixel_values"].update({2: "height", 3: "width"})
        if y.dim() == 4:
            axes["output"].update({2: "height", 3: "width"})
        symbols.update({"height": size, "width": size})
    onnx_model = exportlib.export_onnx(model, (x,), path, ["pixel_values"], ["output"], axes)
    exportlib.write_case(os.path.join(out_dir, "ref"), name, onnx_model, "batch1",
                         symbols, [("pixel_values", x)], [("output", y)],
                         f"random weights, {n_bn} BatchNorm layers calibrated on random batches")
    params = sum(p.numel() for p in model.parameters())
    exportlib.write_model_json(out_dir, name, {"input_size": size, "parameters": params,
                                               "batchnorm_layers": n_bn}, onnx_model)
    return onnx_model, float(y.abs().max()), float(y.std())


def default_out():
    base = os.environ.get("TLITE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tlite")
    return os.path.join(base, "vision")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=default_out(), help="cache directory (default %(default)s)")
    ap.add_argument("--only", help="comma-separated subset of the nets")
    ap.add_argument("--size", type=int, default=96, help="input height and width")
    ap.add_argument("--dynamic-hw", action="store_true", help="also make height and width dynamic (to OUT/NAME_hw)")
    ap.add_argument("--list", action="store_true", help="list the nets and exit")
    args = ap.parse_args()
    if args.list:
        print("\n".join(NETS))
        return
    names = args.only.split(",") if args.only else NETS
    bad = [n for n in names if n not in NETS]
    if bad:
        sys.exit(f"unknown nets {bad}; known: {', '.join(NETS)}")
    torch.set_num_threads(1)
    for name in names:
        t0 = time.time()
        m, amax, std = export(name, args.out, args.size, args.dynamic_hw)
        ops = exportlib.op_histogram(m)
        print(f"{name}: {len(m.graph.node)} nodes, output max |y| {amax:.3g} std {std:.3g}, "
              f"{time.time() - t0:.1f}s -> {os.path.join(args.out, name + ('_hw' if args.dynamic_hw else ''))}")
        print("  ops: " + ", ".join(f"{k}:{v}" for k, v in ops.items()))


if __name__ == "__main__":
    main()
