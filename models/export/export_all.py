#!/usr/bin/python3
"""Regenerates tlite's test models and their PyTorch reference data.

Usage (from the repository root, with Debian's python3, which has torch 1.13
and onnx 1.12):

    /usr/bin/python3 models/export/export_all.py --out testdata/models
    /usr/bin/python3 models/export/export_all.py --out testdata/models --only llama
    /usr/bin/python3 models/export/export_all.py --out /tmp/big --only clip_vision --size full

--size test (the default) writes the small committed models to OUT/NAME.
--size full builds the real architecture size with random weights (only for
recipes that define one: clip_vision is ViT-B/32, clip_text is the CLIP
ViT-B/32 text tower), saves it with external data, and writes it to
OUT/NAME_full, which testdata/models/.gitignore keeps out of the repository.

Runs are deterministic: each recipe seeds torch and numpy itself, and torch
runs single-threaded so reference outputs do not depend on the machine's core
count. Reference .npy inputs are bit-identical across runs; the .onnx bytes
are too, apart from producer metadata when the torch version changes.
"""

import argparse
import os
import sys
import time

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree

import torch  # noqa: E402

import bert  # noqa: E402
import clip_text  # noqa: E402
import clip_vision  # noqa: E402
import exportlib  # noqa: E402
import gpt2  # noqa: E402
import hf_gpt2  # noqa: E402
import hf_llama  # noqa: E402
import hf_neox  # noqa: E402
import hfdecoder  # noqa: E402
import llama  # noqa: E402
import resnet  # noqa: E402

RECIPES = {
    "llama": llama,
    "gpt2": gpt2,
    "bert": bert,
    "clip_vision": clip_vision,
    "clip_text": clip_text,
    "resnet": resnet,
    "resnet_bn": resnet.BN_VARIANT,
}
# The decoder test bed: decoders shaped like Hugging Face modeling code.
for _fam in (hf_llama.LLAMA, hf_llama.QWEN2, hf_llama.GQA_INTERLEAVE, hf_gpt2.GPT2,
             hf_gpt2.BIGCODE, hf_neox.NEOX, hf_neox.BLOOM):
    RECIPES[_fam.name] = hfdecoder.Recipe(_fam)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", required=True, help="output root, e.g. testdata/models")
    ap.add_argument("--only", choices=sorted(RECIPES), help="export just this model")
    ap.add_argument("--size", choices=["test", "full"], default="test")
    args = ap.parse_args()

    torch.set_num_threads(1)
    names = [args.only] if args.only else list(RECIPES)
    if args.size == "full":
        missing = [n for n in names if "full" not in RECIPES[n].SIZES]
        if args.only and missing:
            sys.exit(f"{args.only} has no full size; recipes with one: "
                     + ", ".join(n for n in RECIPES if "full" in RECIPES[n].SIZES))
        names = [n for n in names if n not in missing]

    for name in names:
        recipe = RECIPES[name]
        out_dir = os.path.join(args.out, name if args.size == "test" else name + "_full")
        t0 = time.time()
        model, status = recipe.export(out_dir, args.size)
        ops = exportlib.op_histogram(model)
        print(f"{name} ({args.size}): {len(model.graph.node)} nodes, "
              f"{time.time() - t0:.1f}s -> {out_dir}")
        data_ops, shape_ops = exportlib.split_histogram(model)
        print("  ops: " + ", ".join(f"{k}:{v}" for k, v in ops.items()))
        print("  data ops: " + ", ".join(f"{k}:{v}" for k, v in data_ops.items()))
        print("  shape/constant ops: " + ", ".join(f"{k}:{v}" for k, v in shape_ops.items()))
        for s in status:
            print("  " + s)


if __name__ == "__main__":
    main()
