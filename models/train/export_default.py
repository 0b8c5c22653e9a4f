"""Export step of train_default.py: the trained model and its reference data.

Writes to OUT (testdata/default):

    model.onnx       the decoder, fp32, weights inline, with llama.py's graph
                     interface (input_ids, attention_mask, position_ids,
                     past_key_values.{i}.key/value -> logits, present.{i}.*;
                     dynamic axes batch/seq/past/total), opset 17
    model.json       exportlib's signature and op histogram
    tokenizer.json   the byte-level BPE (Hugging Face format)
    config.json      architecture numbers, special token ids, max context
    reference.json   a prompt, its ids, PyTorch's greedy continuation of 64
                     tokens computed through the KV-cache path, and sampled
                     texts for people to read
    prompt_logits.npy  the prefill's logits [1, prompt_len, vocab]
    ref/prefill, ref/decode  the prefill and first decode step as reference
                     cases in testdata/models' layout (manifest.json + .npy)
    heldout.txt      held-out documents (never trained on), separated by
                     lines holding only "%"
    perplexity.json  PyTorch's perplexity on heldout.txt, and the protocol

Perplexity protocol (what a Go test must reproduce): split heldout.txt on
"\\n%\\n"; each document d is the sequence [BOS] + encode(d) + [EOS], run
alone (batch 1, no cache); the loss is the cross-entropy of predicting
tokens 1..n-1 from their prefixes, summed over all documents and divided by
the number of predicted tokens; perplexity = exp(loss).
"""

import dataclasses
import json
import math
import os
import shutil

import numpy as np
import torch
import torch.nn.functional as F

import bpe
import exportlib
import llama
import train_default as td

PROMPT = "The secret of life is"
GEN_TOKENS = 64
HELDOUT_BYTES = 4096


def load_model(work):
    model = td.build_model()
    model.load_state_dict(torch.load(os.path.join(work, "model_final.pt")))
    return model.eval()


def load_tokenizer(work):
    with open(os.path.join(work, "tokenizer.json"), encoding="utf-8") as f:
        j = json.load(f)
    merges = [tuple(m) for m in j["model"]["merges"]]
    vocab = j["model"]["vocab"]
    return bpe.Encoder(merges, vocab), vocab


def step(model, ids, past, past_len):
    """One forward on new tokens `ids` [1, s] after `past_len` cached ones."""
    s = ids.shape[1]
    mask = torch.ones(1, past_len + s, dtype=torch.int64)
    pos = torch.arange(past_len, past_len + s)[None, :]
    outs = model(ids, mask, pos, *past)
    return outs[0], list(outs[1:]), (ids, mask, pos)


@torch.no_grad()
def greedy(model, prompt_ids, n):
    """Greedy decoding through the KV cache: a prefill, then one token a step."""
    ids = torch.tensor([prompt_ids])
    logits, past, _ = step(model, ids, td.empty_past(1), 0)
    out = []
    total = len(prompt_ids)
    for _ in range(n):
        nxt = int(logits[0, -1].argmax())
        out.append(nxt)
        logits, past, _ = step(model, torch.tensor([[nxt]]), past, total)
        total += 1
    return out


@torch.no_grad()
def sample(model, prompt_ids, n, temperature, seed, eos):
    gen = torch.Generator().manual_seed(seed)
    logits, past, _ = step(model, torch.tensor([prompt_ids]), td.empty_past(1), 0)
    out, total = [], len(prompt_ids)
    for _ in range(n):
        probs = torch.softmax(logits[0, -1] / temperature, dim=-1)
        nxt = int(torch.multinomial(probs, 1, generator=gen))
        if nxt == eos:
            break
        out.append(nxt)
        logits, past, _ = step(model, torch.tensor([[nxt]]), past, total)
        total += 1
    return out


@torch.no_grad()
def doc_nll(model, ids):
    x = torch.tensor([ids])
    logits = td.forward_logits(model, x[:, :-1])
    return float(F.cross_entropy(logits[0], x[0, 1:], reduction="sum"))


def export(work, out):
    os.makedirs(out, exist_ok=True)
    cfg = td.CONFIG
    model = load_model(work)
    enc, vocab = load_tokenizer(work)
    inv = {i: s for s, i in vocab.items()}
    bos, eos = vocab[td.BOS], vocab[td.EOS]
    ck = torch.load(os.path.join(work, "ckpt.pt"))
    max_ctx = td.TrainArgs.seq_len

    # The graph: traced as llama.py does (batch 2, seq 5, past 3, all
    # different), so every dynamic axis gets its own symbol.
    in_names, out_names, axes = llama.io_names(cfg)
    torch.manual_seed(0)
    ex = (torch.randint(0, cfg.vocab, (2, 5)), torch.ones(2, 8, dtype=torch.int64),
          torch.arange(3, 8).repeat(2, 1), *[torch.randn(t.shape) for t in llama.empty_past(cfg, 2, 3)])
    path = os.path.join(out, "model.onnx")
    onnx_model = exportlib.export_onnx(model, ex, path, in_names, out_names, axes)
    shutil.copy(os.path.join(work, "tokenizer.json"), os.path.join(out, "tokenizer.json"))

    # Reference generation through the cache path, cross-checked against a
    # full forward without cache.
    prompt_ids = [bos] + enc.encode(PROMPT)
    gen = greedy(model, prompt_ids, GEN_TOKENS)
    with torch.no_grad():
        full = td.forward_logits(model, torch.tensor([prompt_ids + gen]))
    nocache = [int(full[0, i].argmax()) for i in range(len(prompt_ids) - 1, len(prompt_ids) + GEN_TOKENS - 1)]
    if nocache != gen:
        raise SystemExit(f"export: cached greedy {gen} != uncached {nocache}")

    # Prefill and first decode step as standard reference cases.
    with torch.no_grad():
        logits, past, ins = step(model, torch.tensor([prompt_ids]), td.empty_past(1), 0)
        np.save(os.path.join(out, "prompt_logits.npy"), logits.numpy().astype("<f4"), allow_pickle=False)
        n = len(prompt_ids)
        exportlib.write_case(os.path.join(out, "ref", "prefill"), "default", onnx_model, "prefill",
                             {"batch": 1, "seq": n, "past": 0, "total": n},
                             list(zip(in_names, [*ins, *td.empty_past(1)])),
                             list(zip(out_names, [logits, *past])),
                             f"prompt {PROMPT!r} with BOS")
        logits2, past2, ins2 = step(model, torch.tensor([[gen[0]]]), past, n)
        exportlib.write_case(os.path.join(out, "ref", "decode"), "default", onnx_model, "decode",
                             {"batch": 1, "seq": 1, "past": n, "total": n + 1},
                             list(zip(in_names, [*ins2, *past])),
                             list(zip(out_names, [logits2, *past2])),
                             "first greedy token on top of the prefill's cache")
    exportlib.write_model_json(out, "default", dataclasses.asdict(cfg), onnx_model)

    # Held-out documents that fit the context, about HELDOUT_BYTES of them.
    with open(os.path.join(work, "heldout_docs.json"), encoding="utf-8") as f:
        held = json.load(f)
    chosen, size = [], 0
    for d in held:
        ids = [bos] + enc.encode(d) + [eos]
        if len(ids) > max_ctx or "\n%\n" in d:
            continue
        chosen.append((d, ids))
        size += len(d.encode("utf-8")) + 3
        if size >= HELDOUT_BYTES:
            break
    with open(os.path.join(out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write("\n%\n".join(d for d, _ in chosen))
    per_doc = [{"tokens": len(ids), "nll_sum": doc_nll(model, ids)} for _, ids in chosen]
    predicted = sum(p["tokens"] - 1 for p in per_doc)
    loss = sum(p["nll_sum"] for p in per_doc) / predicted

    # The whole held-out set (755 documents, each cut to the context) for
    # the record; not part of the test protocol.
    all_nll, all_pred = 0.0, 0
    for d in held:
        ids = ([bos] + enc.encode(d) + [eos])[:max_ctx]
        all_nll += doc_nll(model, ids)
        all_pred += len(ids) - 1
    with open(os.path.join(out, "perplexity.json"), "w") as f:
        json.dump({
            "file": "heldout.txt",
            "protocol": "documents = text.split('\\n%\\n'); each is [BOS] + encode(doc) + [EOS], run alone "
                        "without cache; loss = sum of next-token cross-entropies over tokens 1..n-1 of every "
                        "document / number of predicted tokens; perplexity = exp(loss)",
            "documents": len(chosen),
            "predicted_tokens": predicted,
            "loss": loss,
            "perplexity": math.exp(loss),
            "per_document": per_doc,
            "whole_heldout_set": {"documents": len(held), "predicted_tokens": all_pred,
                                  "loss": all_nll / all_pred, "perplexity": math.exp(all_nll / all_pred),
                                  "note": "every held-out document, cut to max_context tokens"},
        }, f, indent=1)
        f.write("\n")

    samples = []
    for seed in range(4):
        s = sample(model, prompt_ids, 48, 0.8, seed, eos)
        samples.append(PROMPT + enc.decode(s, inv))
    with open(os.path.join(out, "reference.json"), "w", encoding="utf-8") as f:
        json.dump({
            "prompt": PROMPT,
            "prompt_ids": prompt_ids,
            "add_bos": True,
            "greedy_ids": gen,
            "greedy_text": enc.decode([i for i in gen if i not in (bos, eos)], inv),
            "greedy_note": f"{GEN_TOKENS} greedy steps through the KV cache (prefill, then one token per step), "
                           "not stopping at EOS; identical to argmax of a full forward without cache",
            "first_eos_index": gen.index(eos) if eos in gen else None,
            "prompt_logits": "prompt_logits.npy",
            "samples": samples,
            "samples_note": "temperature 0.8, torch.Generator seeds 0..3, stopped at EOS; for reading, not testing",
        }, f, ensure_ascii=False, indent=1)
        f.write("\n")

    n_params = sum(p.numel() for p in model.parameters())
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({
            "architecture": "llama",
            "onnx": "model.onnx",
            "tokenizer": "tokenizer.json",
            "vocab_size": cfg.vocab,
            "hidden_size": cfg.dim,
            "num_layers": cfg.n_layers,
            "num_heads": cfg.n_heads,
            "num_kv_heads": cfg.n_kv_heads,
            "head_dim": cfg.dim // cfg.n_heads,
            "intermediate_size": cfg.ffn,
            "rope_theta": cfg.rope_theta,
            "rms_norm_eps": cfg.eps,
            "max_context": max_ctx,
            "bos_token_id": bos,
            "eos_token_id": eos,
            "dtype": "float32",
            "parameters": n_params,
            "training": {
                "corpus": "Debian package fortunes (fortune files except ascii-art and translate-me), "
                          "documents split on '%' lines, deduplicated, 5% held out",
                "recipe": "models/train/train_default.py",
                "steps": ck["step"],
                "tokens_seen": ck["step"] * ck["args"]["batch"] * ck["args"]["seq_len"],
                "train_seconds": round(ck["elapsed"]),
                "args": ck["args"],
            },
        }, f, indent=1)
        f.write("\n")
    print(f"export: {path} ({os.path.getsize(path)} bytes), {n_params} parameters")
    print(f"export: heldout.txt {len(chosen)} docs, loss {loss:.4f} ppl {math.exp(loss):.2f}; "
          f"whole held-out set loss {all_nll / all_pred:.4f} ppl {math.exp(all_nll / all_pred):.2f}")
    print("export: greedy:", repr(enc.decode(gen, inv)))
    for s in samples:
        print("export: sample:", repr(s))
