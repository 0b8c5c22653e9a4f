#!/usr/bin/python3
"""Writes a random-weight llama.py model for latency measurements only
(spec §0.4: latency does not depend on weight values; never quote quality
from it).

    /usr/bin/python3 models/elastic/random_model.py --out DIR [--dim 512 --layers 8 --heads 8 --kv 4 --ffn 1536]

DIR gets model.onnx (weights named as tl elastic build names them),
config.json (max_context 2048) and the shipped long-context tokenizer
(vocabulary 4096), so tl generate and tl bench --model run it.
"""
import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import elastic  # noqa: E402
import llama  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--seed", type=int, default=99)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    cfg = llama.Config(vocab=4096, dim=a.dim, n_layers=a.layers, n_heads=a.heads, n_kv_heads=a.kv, ffn=a.ffn)
    model = llama.Llama(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.02)
    os.makedirs(a.out, exist_ok=True)
    elastic.export_llama(model, os.path.join(a.out, "model.onnx"))
    src = os.path.join(elastic.REPO, "testdata", "longctx")
    shutil.copyfile(os.path.join(src, "tokenizer.json"), os.path.join(a.out, "tokenizer.json"))
    with open(os.path.join(src, "config.json")) as f:
        conf = json.load(f)
    conf.update({"hidden_size": a.dim, "num_layers": a.layers, "num_heads": a.heads, "num_kv_heads": a.kv,
                 "head_dim": a.dim // a.heads, "intermediate_size": a.ffn,
                 "training": "none: random weights, for latency measurements only"})
    conf.pop("parameters", None)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(conf, f, indent=1)
    print(f"random-weight model {cfg} -> {a.out}")


if __name__ == "__main__":
    main()
