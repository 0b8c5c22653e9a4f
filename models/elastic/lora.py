#!/usr/bin/python3
"""LoRA recovery per level of an elastic model (spec §3a.6), trained and
scored in PyTorch.

    /usr/bin/python3 models/elastic/lora.py --model OUT --calib /work/train7 --levels 20,40,60 \
        --steps 150 --batch 4 --seq 128 --text EVAL.txt [--save OUT/lora]

For each level the reordered model is cut to its sub-model (the inactive
heads' O columns and neurons' down columns zeroed, which is exactly the
prefix the engine runs) and LoRA adapters (rank 8, alpha 16) are trained on
Q, K, V, O, up and down with the base weights frozen, on windows of the
training split (a seed different from the calibration windows'). The O and
down adapters see only the active prefix of their input (their A rows past
it are held at 0). Perplexity on TEXT follows `tl perplexity --sep '\\n%\\n'
--eos` (export_default.score_file): without and with the adapters.

What this is not: the adapters are not run by tlite (no side-branch op in
the engine yet), and the budget is tokens = steps x batch x seq per level,
far below the paper's 50M.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "train"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import elastic  # noqa: E402
import export_default  # noqa: E402

RANK, ALPHA = 8, 16.0
TARGETS = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
           "o": "self_attn.o_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


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


def cut(model, level, head_dim):
    with torch.no_grad():
        for layer, lw in zip(model.layers, level["layers"]):
            layer.self_attn.o_proj.weight[:, lw["q_heads"] * head_dim:] = 0
            layer.mlp.down_proj.weight[:, lw["ffn"]:] = 0


def main():
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
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(os.path.join(a.model, "elastic.json")) as f:
        meta = json.load(f)
    levels = {lv["level"]: lv for lv in meta["levels"]}
    enc, vocab = export_default.load_tokenizer(a.model)
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
        data = elastic.calibration_windows(a.calib, a.steps * a.batch * a.seq, a.seq, seed=777 + pct)
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
        r = {"level": pct, "tokens": a.steps * a.batch * a.seq, "adapter_params": lora.numel(),
             "ppl_without": before["perplexity"], "ppl_with": after["perplexity"],
             "loss_without": before["loss"], "loss_with": after["loss"], "predicted_tokens": after["predicted_tokens"]}
        print("lora:", json.dumps(r), flush=True)
        results.append(r)
        if a.save:
            os.makedirs(a.save, exist_ok=True)
            np.savez(os.path.join(a.save, f"level-{pct:02d}.npz"),
                     **{f"p{i}": p.detach().numpy() for i, p in enumerate(lora.params)})
        lora.remove()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
