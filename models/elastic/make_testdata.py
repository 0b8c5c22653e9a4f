#!/usr/bin/python3
"""Writes testdata/elastic: small reordered models and their PyTorch
references, for the equivalence and level tests of spec §3d.2 (engine's
elastic tests read them).

    /usr/bin/python3 models/elastic/make_testdata.py [--out testdata/elastic]

llama/   a 3-layer llama.py model (RoPE, GQA 4 query / 2 KV heads, SwiGLU,
         FFN 172), random weights and norms; unit importance on random
         calibration tokens (the weights are random, so the order is only a
         permutation to test; quality claims never come from here).
         original.onnx (as llama.py exports it), model.onnx (reordered,
         weights renamed for the binding), elastic.json, and ref.npz-like
         .npy files: input ids, the original model's logits, and per level
         the logits of the truncated sub-model computed in PyTorch by
         zeroing the inactive heads' O columns and neurons' down columns.
llama/proxy_ref.json: calibration windows and the forward-only importance
         proxy of original.onnx on them, computed in PyTorch by hooks
         (engine/elastic/importance checks tlite against it; `--only proxy`).
llama/lora/level-{20,60}.bin and llama/logits_lora_level{020,060}.npy:
         random LoRA adapters (rank 8, alpha 16, nonzero A and B; the O and
         down A rows past the level's prefix zero, as lora.py trains them)
         for two levels of the llama model above, and PyTorch's logits of
         the truncated sub-model with them attached (lora.py's hooks).
         `--only lora` adds just these to an existing llama/ folder.
gpt2/    hf_gpt2.py's GPT-2 (Conv1D, fused c_attn, biases, tied head, learned
         positions), random weights: original.onnx and model.onnx with every
         layer's heads permuted inside each of the Q/K/V thirds of c_attn
         (weights and bias) and the rows of c_proj, and its neurons in c_fc
         (columns and bias) and the MLP's c_proj rows; logits of the original.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import elastic  # noqa: E402  (puts models/export on sys.path)
import exportlib  # noqa: E402
import hf_gpt2  # noqa: E402
import hfdecoder  # noqa: E402
import llama  # noqa: E402

TOL = 1e-5


def save(path, arr):
    np.save(path, np.ascontiguousarray(arr), allow_pickle=False)


def truncated_logits(model, level, ids):
    """Logits of the sub-model at one level: the permuted model with the
    inactive heads' O input columns and inactive neurons' down input columns
    zeroed, which is exactly what a prefix of the units computes."""
    cfg = model.cfg
    hd = cfg.dim // cfg.n_heads
    saved = {}
    with torch.no_grad():
        for layer, lw in zip(model.layers, level["layers"]):
            o, d = layer.self_attn.o_proj.weight, layer.mlp.down_proj.weight
            saved[o] = o.clone()
            saved[d] = d.clone()
            o[:, lw["q_heads"] * hd:] = 0
            d[:, lw["ffn"]:] = 0
        out = elastic.llama_logits(model, ids)
        for p, v in saved.items():
            p.copy_(v)
    return out


def make_llama(out):
    os.makedirs(out, exist_ok=True)
    cfg = llama.Config(vocab=256, dim=64, n_layers=3, n_heads=4, n_kv_heads=2, ffn=172)
    exportlib.seed_everything(4242)
    model = llama.Llama(cfg).eval()
    ids = torch.randint(0, cfg.vocab, (1, 11))
    calib = torch.randint(0, cfg.vocab, (8, 64))
    with torch.no_grad():
        ref = elastic.llama_logits(model, ids)
    elastic.export_llama(model, os.path.join(out, "original.onnx"))
    imps, base = elastic.llama_importance(model, calib)
    removal = elastic.layer_removal(model, calib, base)
    anchors = sorted(sorted(range(cfg.n_layers), key=lambda l: -removal[l])[:1])
    qo, kvo, fo = [], [], []
    for imp in imps:
        q, kv = elastic.gqa_order(imp["q_signed"], imp["kv_signed"], cfg.n_kv_heads)
        elastic.check_gqa_consistent(q, kv, cfg.n_heads // cfg.n_kv_heads)
        qo.append(q)
        kvo.append(kv)
        fo.append(elastic.unit_order(imp["neuron"]))
    # The test must not pass on an identity order.
    if all(q == sorted(q) for q in qo) or all(f == sorted(f) for f in fo):
        raise SystemExit("make_testdata: the importance order is the identity; pick another seed")
    elastic.permute_llama(model, qo, kvo, fo)
    with torch.no_grad():
        got = elastic.llama_logits(model, ids)
    err = (got - ref).abs().max().item()
    print(f"llama: permuted vs original max |diff| {err:.3g} (logits up to {ref.abs().max().item():.3g})")
    assert err <= TOL, err
    elastic.export_llama(model, os.path.join(out, "model.onnx"))
    levels = elastic.plan_levels(cfg, anchors, 32)
    meta = {"format": "tlite.elastic/1", "architecture": "llama", "order": "importance",
            "calibration": {"tokens": int(calib.numel()), "note": "random tokens (random-weight test model)"},
            "n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "n_kv_heads": cfg.n_kv_heads,
            "head_dim": cfg.dim // cfg.n_heads, "ffn": cfg.ffn, "dim": cfg.dim, "vocab": cfg.vocab,
            "group": 32, "anchors": anchors,
            "weights": [{r: f"layers.{l}.{r}.weight" for r in elastic.ROLES} for l in range(cfg.n_layers)],
            "orders": [{"q_heads": q, "kv_heads": kv} for q, kv in zip(qo, kvo)],
            "permuted_equivalence_max_abs": err, "levels": levels}
    elastic._atomic_json(os.path.join(out, "elastic.json"), meta)
    save(os.path.join(out, "input_ids.npy"), ids.numpy())
    save(os.path.join(out, "logits.npy"), ref.numpy())
    for lv in levels:
        save(os.path.join(out, f"logits_level{lv['level']:03d}.npy"), truncated_logits(model, lv, ids).numpy())


LORA_LEVELS = (20, 60)


def make_lora(out):
    """Random adapters for two levels of llama/ and the sub-model's logits
    with them attached, computed by lora.py's own hooks."""
    import json
    import lora
    with open(os.path.join(out, "elastic.json")) as f:
        levels = {lv["level"]: lv for lv in json.load(f)["levels"]}
    ids = torch.from_numpy(np.load(os.path.join(out, "input_ids.npy")))
    for pct in LORA_LEVELS:
        model, cfg = elastic.load_llama_onnx(os.path.join(out, "model.onnx"))
        model.eval()
        hd = cfg.dim // cfg.n_heads
        lora.cut(model, levels[pct], hd)
        ad = lora.LoRA(model, levels[pct], hd, seed=pct)
        g = torch.Generator().manual_seed(1000 + pct)
        with torch.no_grad():
            for b in ad.params[1::2]:
                b.copy_(torch.randn(b.shape, generator=g) * 0.2)
            ad.enforce()
            with_lora = elastic.llama_logits(model, ids)
            ad.remove()
            without = elastic.llama_logits(model, ids)
        moved = (with_lora - without).abs().max().item()
        print(f"lora level {pct}: the adapters move the logits by up to {moved:.3g}")
        assert moved > 1e-2, "the adapters must change the output for the test to mean anything"
        lora.save_bin(os.path.join(out, "lora", f"level-{pct:02d}.bin"), pct, ad.params, cfg.n_layers)
        save(os.path.join(out, f"logits_lora_level{pct:03d}.npy"), with_lora.numpy())


def proxy_reference(model, windows):
    """The forward-only importance proxy computed independently in PyTorch
    (hooks on the O and down projections' inputs), the reference of
    engine/elastic/importance: per query head the sum over its channels of
    mean |attention output| times the norm of o_proj's input column, per
    neuron mean |act(gate)*up| times the norm of down_proj's input column,
    per KV group the sum of its heads."""
    cfg = model.cfg
    hd = cfg.dim // cfg.n_heads
    sums = {}

    def hook(key):
        def f(mod, inp):
            x = inp[0].detach().double()
            sums[key] = sums.get(key, 0) + x.abs().reshape(-1, x.shape[-1]).sum(0)
        return f

    hs = []
    for l, layer in enumerate(model.layers):
        hs.append(layer.self_attn.o_proj.register_forward_pre_hook(hook(("o", l))))
        hs.append(layer.mlp.down_proj.register_forward_pre_hook(hook(("down", l))))
    with torch.no_grad():
        elastic.llama_logits(model, windows)
    for h in hs:
        h.remove()
    n = windows.numel()
    g = cfg.n_heads // cfg.n_kv_heads
    out = []
    for l, layer in enumerate(model.layers):
        on = layer.self_attn.o_proj.weight.detach().double().norm(dim=0)
        dn = layer.mlp.down_proj.weight.detach().double().norm(dim=0)
        ch = sums[("o", l)] / n * on
        q = ch.reshape(cfg.n_heads, hd).sum(1)
        kv = q.reshape(cfg.n_kv_heads, g).sum(1)
        neur = sums[("down", l)] / n * dn
        out.append({"q_heads": q.tolist(), "kv_groups": kv.tolist(), "neurons": neur.tolist()})
    return out


def make_proxy(out):
    """llama/proxy_ref.json: calibration windows, the PyTorch proxy scores
    of original.onnx on them, its mean loss and the layer-removal loss
    increases (elastic.layer_removal)."""
    import json
    model, cfg = elastic.load_llama_onnx(os.path.join(out, "original.onnx"))
    windows = torch.from_numpy(np.random.RandomState(77).randint(0, cfg.vocab, (3, 24)))
    model = model.double()
    layers = proxy_reference(model, windows)
    base = elastic.mean_loss(model, windows)
    removal = elastic.layer_removal(model, windows, base)
    elastic._atomic_json(os.path.join(out, "proxy_ref.json"),
                         {"head_dim": cfg.dim // cfg.n_heads, "windows": windows.tolist(), "layers": layers,
                          "loss": base, "layer_removal_loss_increase": removal})
    print(f"proxy: layer 0 head scores {[round(x, 4) for x in layers[0]['q_heads']]}")


def gpt2_permute(model, cfg, rng):
    """Permutes heads (inside each Q/K/V third of c_attn) and neurons."""
    d, h = cfg.dim, cfg.n_heads
    hd = d // h
    with torch.no_grad():
        for blk in model.h:
            perm = [int(i) for i in rng.permutation(h)]
            cols = [p * hd + j for p in perm for j in range(hd)]
            full = torch.tensor([t * d + c for t in range(3) for c in cols])
            at = blk.attn
            at.c_attn.weight.copy_(at.c_attn.weight[:, full])  # Conv1D weight [nx, nf]
            at.c_attn.bias.copy_(at.c_attn.bias[full])
            at.c_proj.weight.copy_(at.c_proj.weight[torch.tensor(cols), :])
            nf = blk.mlp.c_fc.weight.shape[1]
            fi = torch.from_numpy(rng.permutation(nf))
            blk.mlp.c_fc.weight.copy_(blk.mlp.c_fc.weight[:, fi])
            blk.mlp.c_fc.bias.copy_(blk.mlp.c_fc.bias[fi])
            blk.mlp.c_proj.weight.copy_(blk.mlp.c_proj.weight[fi, :])


def make_gpt2(out):
    os.makedirs(out, exist_ok=True)
    fam = hf_gpt2.GPT2
    exportlib.seed_everything(fam.seed)
    model = fam.build()
    exportlib.randomize_norms(model)
    hfdecoder.apply_gain(model, fam.gain)
    model.eval()
    cfg = model.cfg
    ids = torch.randint(0, cfg.vocab, (1, 9))
    in_names, out_names, axes = hfdecoder.io_names(fam)
    args = hfdecoder.step_args(fam, ids, hfdecoder.empty_cache(fam, 1, 0), 0)
    with torch.no_grad():
        ref = model(*args)[0]
    ex = tuple(hfdecoder.step_args(fam, torch.randint(0, cfg.vocab, (2, 5)), hfdecoder.empty_cache(fam, 2, 3, randn=True), 3))
    exportlib.export_onnx(model, ex, os.path.join(out, "original.onnx"), in_names, out_names, axes)
    gpt2_permute(model, cfg, np.random.RandomState(7))
    with torch.no_grad():
        got = model(*args)[0]
    err = (got - ref).abs().max().item()
    print(f"gpt2: permuted vs original max |diff| {err:.3g} (logits up to {ref.abs().max().item():.3g})")
    assert err <= TOL, err
    exportlib.export_onnx(model, ex, os.path.join(out, "model.onnx"), in_names, out_names, axes)
    save(os.path.join(out, "input_ids.npy"), ids.numpy())
    save(os.path.join(out, "logits.npy"), ref.numpy())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(elastic.REPO, "testdata", "elastic"))
    ap.add_argument("--only", choices=["lora", "proxy"],
                    help="add only the LoRA files (or the importance-proxy reference) to an existing llama/")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.only is None:
        make_llama(os.path.join(a.out, "llama"))
        make_gpt2(os.path.join(a.out, "gpt2"))
    if a.only in (None, "lora"):
        make_lora(os.path.join(a.out, "llama"))
    if a.only in (None, "proxy"):
        make_proxy(os.path.join(a.out, "llama"))


if __name__ == "__main__":
    main()
