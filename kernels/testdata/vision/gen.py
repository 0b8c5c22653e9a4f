#!/usr/bin/python3
"""Writes the vision kernels' fixtures (run with Debian's python3: torch 1.13,
onnx 1.12):

  onnx_cases.json   ONNX's own node test cases for Resize, Upsample,
                    ConvTranspose and MaxPool with Indices (inputs,
                    attributes, expected outputs), as
                    the onnx package's backend test generator defines them.
  torch_cases.json  PyTorch 1.13 outputs on small odd shapes: interpolate
                    (nearest, nearest-exact, bilinear/bicubic/trilinear with
                    and without align_corners, antialias), conv_transpose2d,
                    conv_transpose3d, conv3d, max_pool3d, avg_pool3d, prelu.

Usage: /usr/bin/python3 kernels/testdata/vision/gen.py  (from the repository root)
"""
import inspect
import json
import os

import numpy as np

# onnx 1.12's test cases still use aliases that numpy removed.
for _name, _t in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if _name not in np.__dict__:
        setattr(np, _name, _t)

import torch
import torch.nn.functional as F
from onnx import helper
from onnx.backend.test.case.base import Base
import onnx.backend.test.case.node.convtranspose as ct_cases
import onnx.backend.test.case.node.maxpool as maxpool_cases
import onnx.backend.test.case.node.resize as resize_cases
import onnx.backend.test.case.node.upsample as upsample_cases

HERE = os.path.dirname(os.path.abspath(__file__))


def flat(a):
    a = np.asarray(a)
    if a.dtype == np.float32:
        # The shortest decimal that reads back as the same float32.
        data = [float(str(v)) for v in a.ravel()]
    else:
        data = [float(v) for v in a.astype(np.float64).ravel()]
    return {"shape": list(a.shape), "data": data}


def onnx_cases():
    out = []

    def capture(node, inputs, outputs, name, **kw):
        attrs = {}
        for a in node.attribute:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, (list, tuple)):
                v = [float(x) if isinstance(x, float) else int(x) for x in v]
            elif isinstance(v, float):
                v = float(v)
            attrs[a.name] = v
        named = {}
        # Inputs are given in the order of the node's non-empty input names.
        names = [n for n in node.input if n]
        for n, v in zip(names, inputs):
            named[n] = flat(v)
        slots = list(node.input)
        if node.op_type == "MaxPool" and len(outputs) < 2:
            return  # only the cases with Indices; the others are 2-D pools
        out.append({"name": name, "op": node.op_type, "inputs": slots, "values": named,
                    "attrs": attrs, "output": flat(outputs[0]),
                    "outputs": [flat(o) for o in outputs]})

    for mod in (resize_cases, ct_cases, upsample_cases, maxpool_cases):
        mod.expect = capture
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if issubclass(cls, Base) and cls is not Base:
                for fn in sorted(dir(cls)):
                    if fn.startswith("export"):
                        getattr(cls, fn)()
    return out


def rnd(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) * 2 - 1


def torch_cases():
    cases = []

    def add(kind, params, inputs, y):
        cases.append({"kind": kind, "params": params,
                      "inputs": {k: flat(v.numpy()) for k, v in inputs.items()},
                      "output": flat(y.detach().numpy())})

    seed = 100
    # interpolate: ONNX's torch exporter maps these to Resize as noted.
    for mode, size, scale, ac, aa in [
        ("nearest", (7, 11), None, None, False),          # asymmetric + floor
        ("nearest", None, (0.6, 1.7), None, False),
        ("nearest-exact", (7, 4), None, None, False),     # half_pixel + round_prefer_ceil... (see test)
        ("bilinear", (9, 4), None, False, False),         # pytorch_half_pixel
        ("bilinear", (9, 4), None, True, False),          # align_corners
        ("bilinear", (1, 3), None, False, False),         # one-row output
        ("bicubic", (8, 3), None, False, False),
        ("bicubic", (4, 10), None, True, False),
        ("bilinear", (3, 2), None, False, True),          # antialias
        ("bicubic", (2, 3), None, False, True),
        ("bilinear", (4, 9), None, False, True),          # antialias when upscaling is plain
    ]:
        seed += 1
        x = rnd(2, 3, 5, 7, seed=seed)
        kw = {"mode": mode}
        if size is not None:
            kw["size"] = size
        else:
            kw["scale_factor"] = scale
        if ac is not None:
            kw["align_corners"] = ac
        if aa:
            kw["antialias"] = True
        y = F.interpolate(x, **kw)
        add("interpolate", {"mode": mode, "size": list(size) if size else None,
                            "scale": list(scale) if scale else None, "align_corners": bool(ac), "antialias": aa},
            {"x": x}, y)
    for mode, size, ac in [("trilinear", (5, 3, 6), False), ("trilinear", (2, 7, 3), True), ("nearest", (5, 2, 7), None),
                           ("linear", (9,), False)]:
        seed += 1
        x = rnd(1, 2, 3, 4, 5, seed=seed) if mode != "linear" else rnd(2, 3, 6, seed=seed)
        kw = {"mode": mode, "size": size}
        if ac is not None:
            kw["align_corners"] = ac
        add("interpolate", {"mode": mode, "size": list(size), "scale": None, "align_corners": bool(ac), "antialias": False},
            {"x": x}, F.interpolate(x, **kw))

    # conv_transpose2d with asymmetric ONNX pads: run without padding, append
    # output_padding rows/columns of zeros, crop the pads, add the bias.
    for (n, c, h, w, oc, kh, kw_, s, d, pads, op, g) in [
        (2, 4, 5, 6, 6, 3, 3, (2, 2), (1, 1), (1, 1, 1, 1), (1, 1), 2),
        (1, 3, 4, 7, 5, 3, 2, (2, 3), (2, 1), (0, 2, 1, 0), (1, 2), 1),
        (1, 6, 3, 5, 6, 4, 4, (2, 2), (1, 1), (1, 1, 1, 1), (0, 0), 6),
        (2, 2, 6, 5, 3, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0), (0, 0), 1),
        (1, 3, 5, 4, 4, 2, 3, (3, 2), (1, 2), (2, 0, 0, 1), (2, 1), 1),
    ]:
        seed += 1
        x = rnd(n, c, h, w, seed=seed)
        wt = rnd(c, oc // g, kh, kw_, seed=seed + 1000)
        b = rnd(oc, seed=seed + 2000)
        full = F.conv_transpose2d(x, wt, None, stride=s, groups=g, dilation=d)
        full = F.pad(full, (0, op[1], 0, op[0]))
        H, W = full.shape[2], full.shape[3]
        y = full[:, :, pads[0]:H - pads[2], pads[1]:W - pads[3]] + b.view(1, -1, 1, 1)
        add("conv_transpose2d", {"strides": list(s), "dilations": list(d), "pads": list(pads),
                                 "output_padding": list(op), "group": g},
            {"x": x, "w": wt, "b": b}, y)

    for (n, c, dd, h, w, oc, k, s, dl, pads, op, g) in [
        (1, 8, 3, 4, 5, 4, (2, 2, 2), (2, 2, 2), (1, 1, 1), (0, 0, 0, 0, 0, 0), (0, 0, 0), 1),
        (2, 6, 3, 3, 4, 6, (3, 2, 3), (2, 1, 2), (1, 2, 1), (1, 0, 1, 0, 1, 2), (1, 0, 1), 2),
    ]:
        seed += 1
        x = rnd(n, c, dd, h, w, seed=seed)
        wt = rnd(c, oc // g, *k, seed=seed + 1000)
        b = rnd(oc, seed=seed + 2000)
        full = F.conv_transpose3d(x, wt, None, stride=s, groups=g, dilation=dl)
        full = F.pad(full, (0, op[2], 0, op[1], 0, op[0]))
        D, H, W = full.shape[2:]
        y = full[:, :, pads[0]:D - pads[3], pads[1]:H - pads[4], pads[2]:W - pads[5]] + b.view(1, -1, 1, 1, 1)
        add("conv_transpose3d", {"strides": list(s), "dilations": list(dl), "pads": list(pads),
                                 "output_padding": list(op), "group": g},
            {"x": x, "w": wt, "b": b}, y)

    for (n, c, dd, h, w, oc, k, s, p, dl, g) in [
        (1, 3, 5, 6, 7, 4, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
        (2, 4, 4, 5, 6, 6, (2, 3, 2), (2, 1, 2), (0, 1, 1), (1, 2, 1), 2),
        (1, 2, 3, 7, 5, 2, (1, 3, 3), (1, 2, 2), (0, 1, 1), (1, 1, 1), 2),
    ]:
        seed += 1
        x = rnd(n, c, dd, h, w, seed=seed)
        wt = rnd(oc, c // g, *k, seed=seed + 1000)
        b = rnd(oc, seed=seed + 2000)
        y = F.conv3d(x, wt, b, stride=s, padding=p, dilation=dl, groups=g)
        add("conv3d", {"kernel": list(k), "strides": list(s), "pads": list(p), "dilations": list(dl), "group": g},
            {"x": x, "w": wt, "b": b}, y)

    for (shape, k, s, p, dl, ceil) in [
        ((1, 2, 5, 6, 7), (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), False),
        ((2, 3, 6, 5, 7), (3, 3, 2), (2, 1, 2), (1, 1, 1), (1, 1, 1), True),
        ((1, 2, 7, 6, 5), (2, 3, 2), (1, 2, 2), (1, 0, 1), (2, 1, 2), True),
    ]:
        seed += 1
        x = rnd(*shape, seed=seed)
        y = F.max_pool3d(x, k, s, p, dilation=dl, ceil_mode=ceil)
        add("max_pool3d", {"kernel": list(k), "strides": list(s), "pads": list(p), "dilations": list(dl),
                           "ceil_mode": ceil}, {"x": x}, y)
        if dl == (1, 1, 1):
            for cip in (False, True):
                y = F.avg_pool3d(x, k, s, p, ceil_mode=ceil, count_include_pad=cip)
                add("avg_pool3d", {"kernel": list(k), "strides": list(s), "pads": list(p), "dilations": [1, 1, 1],
                                   "ceil_mode": ceil, "count_include_pad": cip}, {"x": x}, y)
    seed += 1
    x = rnd(2, 3, 4, 5, seed=seed)
    slope = rnd(3, 1, 1, seed=seed + 1)
    add("prelu", {}, {"x": x, "slope": slope}, F.prelu(x, slope.view(3)))
    return cases


def main():
    with open(os.path.join(HERE, "onnx_cases.json"), "w") as f:
        json.dump(onnx_cases(), f, separators=(",", ":"))
    with open(os.path.join(HERE, "torch_cases.json"), "w") as f:
        json.dump(torch_cases(), f, separators=(",", ":"))


if __name__ == "__main__":
    main()
