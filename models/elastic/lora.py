#!/usr/bin/python3
"""LoRA recovery per level of an elastic model (spec §3a.6), trained and
scored in PyTorch, and saved for the engine.

    /usr/bin/python3 models/elastic/lora.py --model OUT --calib /work/train7 --levels 20,40,60 \
        --steps 150 --batch 4 --seq 128 --text EVAL.txt [--save OUT/lora]
    /usr/bin/python3 models/elastic/lora.py convert --npz OUT/lora/level-20.npz --level 20 --layers 6
    /usr/bin/python3 models/elastic/lora.py untrained --model OUT --save DIR [--levels 20,...,100]

--save writes OUT/lora/level-XX.bin (the engine's format, below; tlite
attaches them with --lora or finds them beside the model) and the older
level-XX.npz; `convert` turns such an .npz into the .bin.

For each level the reordered model is cut to its sub-model (the inactive
heads' O columns and neurons' down columns zeroed, which is exactly the
prefix the engine runs) and LoRA adapters (rank 8, alpha 16) are trained on
Q, K, V, O, up and down with the base weights frozen, on windows of the
training split (a seed different from the calibration windows'). The O and
down adapters see only the active prefix of their input (their A rows past
it are held at 0). Perplexity on TEXT follows `tl perplexity --sep '\\n%\\n'
--eos` (export_default.score_file): without and with the adapters.

The budget is tokens = steps x batch x seq per level, far below the
paper's 50M. The windows come in turn from the training streams named by
--sources (default fortunes,pydoc,debref: plain text); naming a task
stream too (recall_dense) puts that task's documents, every token of them
weighted alike, into the adapters' training.

File format of level-XX.bin (little-endian; engine/elastic reads it):

    magic "TLLORA\\0\\0" (8 bytes), u32 version (1), u32 level (percent),
    u32 rank, f32 alpha, u32 n_layers, u32 n_targets,
    n_targets names of 8 bytes (ASCII, NUL-padded: q k v o up down),
    n_layers x n_targets x (u32 in, u32 out),
    then per layer, per target: A [in, rank] f32 row-major, B [rank, out],
    u32 CRC-32 (IEEE, zlib's) of every byte before it.

The branch adds (x A) B alpha/rank to the target product's output.
"""

import argparse
import json
import os
import struct
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "train"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import bpe  # noqa: E402
import elastic  # noqa: E402
import export_default  # noqa: E402

RANK, ALPHA = 8, 16.0
TARGETS = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
           "o": "self_attn.o_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


MAGIC = b"TLLORA\0\0"
VERSION = 1


def write_bin(path, level, rank, alpha, targets, mats):
    """Writes adapters in the engine's format (module doc), atomically.
    mats[layer][t] = (A [in, rank], B [rank, out]) for targets[t]."""
    head = MAGIC + struct.pack("<IIIfII", VERSION, level, rank, alpha, len(mats), len(targets))
    for t in targets:
        if len(t.encode()) > 8:
            raise ValueError(f"target name {t!r} is longer than 8 bytes")
        head += t.encode().ljust(8, b"\0")
    body = []
    for layer in mats:
        if len(layer) != len(targets):
            raise ValueError(f"a layer has {len(layer)} adapters for {len(targets)} targets")
        for a, b in layer:
            if a.shape[1] != rank or b.shape[0] != rank:
                raise ValueError(f"adapter shapes {a.shape} {b.shape} for rank {rank}")
            head += struct.pack("<II", a.shape[0], b.shape[1])
            body.append(np.ascontiguousarray(a, dtype="<f4").tobytes())
            body.append(np.ascontiguousarray(b, dtype="<f4").tobytes())
    raw = head + b"".join(body)
    raw += struct.pack("<I", zlib.crc32(raw) & 0xFFFFFFFF)
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_bin(path, level, lora_params, n_layers):
    """Saves LoRA.params (a, b per target in TARGETS order, layer by layer)."""
    ps = [p.detach().numpy() if hasattr(p, "detach") else p for p in lora_params]
    nt = len(TARGETS)
    if len(ps) != 2 * nt * n_layers:
        raise ValueError(f"{len(ps)} arrays for {n_layers} layers of {nt} targets")
    mats = [[(ps[2 * (l * nt + t)], ps[2 * (l * nt + t) + 1]) for t in range(nt)] for l in range(n_layers)]
    write_bin(path, level, RANK, ALPHA, list(TARGETS), mats)


class LoRA:
    """Side branches y += (x A) B alpha/r on the target Linears (forward
    hooks; the base weights are not touched)."""

    def __init__(self, model, level, head_dim, seed):
        g = torch.Generator().manual_seed(seed)
        self.params, self.masks, self.hooks = [], [], []
        for layer, lw in zip(model.layers, level["layers"]):
            for role, path in TARGETS.items():
                lin = layer.get_submodule(path)
                a = torch.randn(lin.in_features, RANK, generator=g) / lin.in_features ** 0.5
                mask = torch.ones(lin.in_features, 1)
                if role == "o":
                    mask[lw["q_heads"] * head_dim:] = 0
                elif role == "down":
                    mask[lw["ffn"]:] = 0
                a = torch.nn.Parameter(a * mask)
                b = torch.nn.Parameter(torch.zeros(RANK, lin.out_features))
                self.params += [a, b]
                self.masks.append((a, mask))
                self.hooks.append(lin.register_forward_hook(self._hook(a, b)))

    @staticmethod
    def _hook(a, b):
        def fn(mod, inp, out):
            return out + (inp[0] @ a) @ b * (ALPHA / RANK)
        return fn

    def enforce(self):
        with torch.no_grad():
            for a, m in self.masks:
                a.mul_(m)

    def remove(self):
        for h in self.hooks:
            h.remove()

    def numel(self):
        return sum(p.numel() for p in self.params)


def load_tokenizer(model_dir):
    """The BPE encoder and vocabulary of tokenizer.json in model_dir (read
    here: the training scripts' loader has moved between modules)."""
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    vocab = j["model"]["vocab"]
    return bpe.Encoder([tuple(m) for m in j["model"]["merges"]], vocab), vocab


def cut(model, level, head_dim):
    with torch.no_grad():
        for layer, lw in zip(model.layers, level["layers"]):
            layer.self_attn.o_proj.weight[:, lw["q_heads"] * head_dim:] = 0
            layer.mlp.down_proj.weight[:, lw["ffn"]:] = 0


def convert(argv):
    ap = argparse.ArgumentParser(prog="lora.py convert", description="level-XX.npz (older --save) to level-XX.bin")
    ap.add_argument("--npz", required=True)
    ap.add_argument("--level", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True, help="the model's layer count")
    ap.add_argument("--out", help="default: the .npz path with .bin")
    a = ap.parse_args(argv)
    z = np.load(a.npz)
    ps = [z[f"p{i}"] for i in range(len(z.files))]
    out = a.out or os.path.splitext(a.npz)[0] + ".bin"
    save_bin(out, a.level, ps, a.layers)
    print(f"lora: wrote {out}")


def untrained(argv):
    """Writes each level's adapters as initialised and not trained (A random,
    B zero: they add nothing): files of exactly the shapes and bytes of
    trained ones, for memory and cost measurements without the training."""
    ap = argparse.ArgumentParser(prog="lora.py untrained", description=untrained.__doc__)
    ap.add_argument("--model", required=True, help="an elastic model folder")
    ap.add_argument("--levels", default="20,30,40,50,60,70,80,90,100")
    ap.add_argument("--save", required=True, help="folder for level-XX.bin")
    a = ap.parse_args(argv)
    with open(os.path.join(a.model, "elastic.json")) as f:
        meta = json.load(f)
    levels = {lv["level"]: lv for lv in meta["levels"]}
    model, cfg = elastic.load_llama_onnx(os.path.join(a.model, "model.onnx"))
    hd = cfg.dim // cfg.n_heads
    os.makedirs(a.save, exist_ok=True)
    for pct in [int(x) for x in a.levels.split(",")]:
        if pct not in levels:
            raise SystemExit(f"lora: {a.model} has no level {pct}%")
        ad = LoRA(model, levels[pct], hd, seed=pct)
        save_bin(os.path.join(a.save, f"level-{pct:02d}.bin"), pct, ad.params, cfg.n_layers)
        ad.remove()
        print(f"lora: level {pct}%: {ad.numel()} untrained adapter parameters -> {a.save}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "convert":
        return convert(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "untrained":
        return untrained(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="an elastic model folder (tl elastic build)")
    ap.add_argument("--calib", required=True, help="training work dir with {fortunes,pydoc,debref}_train.npy")
    ap.add_argument("--levels", default="20,40,60")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--text", required=True, help="held-out text, documents split by \\n%%\\n")
    ap.add_argument("--save", help="folder for lora/level-XX.npz")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sources", default=",".join(elastic.CALIB_SOURCES),
                    help="training streams (NAME_train.npy in --calib) the windows are drawn from in turn, "
                         "e.g. fortunes,pydoc,debref,recall_dense to keep a task in the adapters")
    a = ap.parse_args()
    sources = tuple(x for x in a.sources.split(",") if x)
    torch.set_num_threads(a.threads)
    with open(os.path.join(a.model, "elastic.json")) as f:
        meta = json.load(f)
    levels = {lv["level"]: lv for lv in meta["levels"]}
    enc, vocab = load_tokenizer(a.model)
    bos, eos = vocab[export_default.td.BOS], vocab[export_default.td.EOS]
    results = []
    for pct in [int(x) for x in a.levels.split(",")]:
        model, cfg = elastic.load_llama_onnx(os.path.join(a.model, "model.onnx"))
        hd = cfg.dim // cfg.n_heads
        cut(model, levels[pct], hd)
        for p in model.parameters():
            p.requires_grad_(False)
        before = export_default.score_file(model, enc, bos, eos, a.text)
        lora = LoRA(model, levels[pct], hd, seed=pct)
        opt = torch.optim.AdamW(lora.params, lr=a.lr, weight_decay=0.0)
        data = elastic.calibration_windows(a.calib, a.steps * a.batch * a.seq, a.seq, seed=777 + pct, sources=sources)
        model.train()
        for step in range(a.steps):
            x = data[step * a.batch:(step + 1) * a.batch]
            loss = elastic.lm_loss(elastic.llama_logits(model, x), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            lora.enforce()
            if step % 50 == 0 or step == a.steps - 1:
                print(f"lora: level {pct}% step {step} loss {loss.item():.4f}", flush=True)
        model.eval()
        after = export_default.score_file(model, enc, bos, eos, a.text)
        r = {"level": pct, "tokens": a.steps * a.batch * a.seq, "sources": list(sources), "adapter_params": lora.numel(),
             "ppl_without": before["perplexity"], "ppl_with": after["perplexity"],
             "loss_without": before["loss"], "loss_with": after["loss"], "predicted_tokens": after["predicted_tokens"]}
        print("lora:", json.dumps(r), flush=True)
        results.append(r)
        if a.save:
            os.makedirs(a.save, exist_ok=True)
            np.savez(os.path.join(a.save, f"level-{pct:02d}.npz"),
                     **{f"p{i}": p.detach().numpy() for i, p in enumerate(lora.params)})
            save_bin(os.path.join(a.save, f"level-{pct:02d}.bin"), pct, lora.params, cfg.n_layers)
        lora.remove()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
