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
    long_logits.npy  the last LONG_ROWS rows of logits of a LONG_TOKENS-token
                     prefill of held-out text (ids in reference.json), so a
                     test checks positions near the 2048 context too
    heldout.txt      the 128-token fortunes model's held-out fortunes, kept
                     as they are (copied from testdata/default when OUT
                     lacks them) so old and new models are judged on the
                     same text; corpus.py keeps its documents out of
                     training
    heldout_split.txt  every document of the corpus's held-out split
                     (fortunes, python docs, debian-reference), separated
                     by lines holding only "%"
    perplexity.json  PyTorch's loss on both files, with bits per byte
    evals/*.jsonl    the in-context task sets (models/train/tleval)

Perplexity protocol (what a Go test must reproduce): split heldout.txt on
"\\n%\\n"; each document d is the sequence [BOS] + encode(d) + [EOS], run
alone (batch 1, no cache); the loss is the cross-entropy of predicting
tokens 1..n-1 from their prefixes, summed over all documents and divided by
the number of predicted tokens; perplexity = exp(loss). A document longer
than max_context is scored in consecutive windows of max_context tokens,
each from an empty context (tl perplexity's --window default). Bits per byte
= summed NLL / ln 2 / UTF-8 bytes of the documents (separators excluded).
"""

import dataclasses
import glob
import json
import math
import os
import re
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
LONG_TOKENS = 2000
LONG_ROWS = 8



# Files in the repository name no package-registry host, and the Python and
# Debian documentation in the corpus link to some; the committed text gets
# every URL's host replaced (the training streams keep the original text).
URL_HOST = re.compile(r"(https?://)[A-Za-z0-9.-]+")


def scrub_hosts(text):
    return URL_HOST.sub(r"\1example.invalid", text)

# The weights and checkpoint each stage leaves in WORK, in training order:
# train, then induct (train_default.py induct), recall, lookup, wording and
# prose, each continuing from the one before; far and polish both continue
# from prose, mend from polish (a checkpoint names the stages it carries).
STAGE_ORDER = ("train", "induct", "recall", "lookup", "wording", "prose", "far", "polish", "mend")
STAGES = {"train": ("model_final.pt", "ckpt.pt")}
STAGES.update({s: (f"model_{s}.pt", f"ckpt_{s}.pt") for s in STAGE_ORDER[1:]})


def load_model(work, stage="train"):
    model = td.build_model()
    model.load_state_dict(torch.load(os.path.join(work, STAGES[stage][0])))
    return model.eval()


def training_record(work, stage):
    """config.json's training numbers: the whole run up to `stage`'s end.
    A stage's checkpoint carries the records of all stages before it."""
    ck = torch.load(os.path.join(work, STAGES[stage][1]))
    if stage == "train":
        return {"steps": ck["step"], "tokens_seen": ck["tokens"], "train_seconds": round(ck["elapsed"]),
                "args": ck["args"]}
    base = ck["train"]
    rec = {"steps": base["step"], "tokens_seen": base["tokens"], "train_seconds": base["elapsed"],
           "args": base["args"]}
    for s in STAGE_ORDER[1:STAGE_ORDER.index(stage) + 1]:
        if s != stage and s not in ck:
            continue  # a branch this stage did not come through
        r = ck if s == stage else ck[s]
        rec["steps"] += r["step"]
        rec["tokens_seen"] += r["tokens"]
        rec["train_seconds"] += r["elapsed"]
        rec.update({f"{s}_steps": r["step"], f"{s}_args": r["args"]})
    rec["train_seconds"] = round(rec["train_seconds"])
    return rec


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
def doc_nll(model, ids, window=td.MAX_CONTEXT):
    """Summed NLL of ids in windows of `window`, as generate.Perplexity does."""
    total = 0.0
    for start in range(0, len(ids) - 1, window):
        w = ids[start:start + window]
        if len(w) < 2:
            break
        x = torch.tensor([w])
        logits = td.forward_logits(model, x[:, :-1])
        total += float(F.cross_entropy(logits[0], x[0, 1:], reduction="sum"))
    return total


def score_file(model, enc, bos, eos, path):
    """perplexity.json's entry for one '%'-separated file."""
    with open(path, encoding="utf-8") as f:
        docs = f.read().split("\n%\n")
    per_doc, nll, pred, nbytes = [], 0.0, 0, 0
    for d in docs:
        ids = [bos] + enc.encode(d) + [eos]
        n = doc_nll(model, ids)
        p = len(ids) - 1 - (len(ids) - 1) // td.MAX_CONTEXT  # each window's first token is not predicted
        per_doc.append({"tokens": len(ids), "nll_sum": n})
        nll, pred, nbytes = nll + n, pred + p, nbytes + len(d.encode("utf-8"))
    return {"file": os.path.basename(path), "documents": len(docs), "predicted_tokens": pred, "bytes": nbytes,
            "loss": nll / pred, "perplexity": math.exp(nll / pred), "bits_per_byte": nll / math.log(2) / nbytes,
            "per_document": per_doc}


def export(work, out, stage="train"):
    os.makedirs(out, exist_ok=True)
    cfg = td.CONFIG
    model = load_model(work, stage)
    enc, vocab = td.load_encoder(work)
    inv = {i: s for s, i in vocab.items()}
    bos, eos = vocab[td.BOS], vocab[td.EOS]
    record = training_record(work, stage)
    max_ctx = td.MAX_CONTEXT

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

    # A long prefill of held-out prose: the last rows' logits.
    with open(os.path.join(work, "held_docs.json"), encoding="utf-8") as f:
        held = json.load(f)
    long_ids = [bos]
    for d in held["pydoc"] + held["debref"]:
        long_ids += enc.encode(d) + [eos]
        if len(long_ids) >= LONG_TOKENS:
            break
    long_ids = long_ids[:LONG_TOKENS]
    with torch.no_grad():
        ll = td.forward_logits(model, torch.tensor([long_ids]))[0, -LONG_ROWS:]
    np.save(os.path.join(out, "long_logits.npy"), ll.numpy().astype("<f4"), allow_pickle=False)

    # The corpus's held-out split as one '%'-separated file.
    docs = [d for src in td.TEXT_SOURCES for d in held[src] if "\n%\n" not in d]
    with open(os.path.join(out, "heldout_split.txt"), "w", encoding="utf-8") as f:
        f.write(scrub_hosts("\n%\n".join(docs)))
    old_path = os.path.join(out, "heldout.txt")
    if not os.path.exists(old_path):
        # Exporting beside the default model: judge on the same fortunes.
        shutil.copy(os.path.join(td.REPO, "testdata", "default", "heldout.txt"), old_path)
    old = score_file(model, enc, bos, eos, old_path)
    new = score_file(model, enc, bos, eos, os.path.join(out, "heldout_split.txt"))
    with open(os.path.join(out, "perplexity.json"), "w") as f:
        json.dump({
            "file": "heldout.txt",
            "protocol": "documents = text.split('\\n%\\n'); each is [BOS] + encode(doc) + [EOS], run alone "
                        "without cache, in windows of max_context tokens each from an empty context; loss = sum "
                        "of next-token cross-entropies of every predicted token / number of predicted tokens; "
                        "perplexity = exp(loss); bits_per_byte = summed NLL / ln 2 / UTF-8 bytes of the documents",
            "documents": old["documents"],
            "predicted_tokens": old["predicted_tokens"],
            "bytes": old["bytes"],
            "loss": old["loss"],
            "perplexity": old["perplexity"],
            "bits_per_byte": old["bits_per_byte"],
            "per_document": old["per_document"],
            "heldout_split": {k: v for k, v in new.items() if k != "per_document"},
        }, f, indent=1)
        f.write("\n")
    os.makedirs(os.path.join(out, "evals"), exist_ok=True)
    for p in sorted(glob.glob(os.path.join(work, "evals", "*.jsonl"))):
        with open(p, encoding="utf-8") as f:
            text = f.read()
        with open(os.path.join(out, "evals", os.path.basename(p)), "w", encoding="utf-8") as f:
            f.write(scrub_hosts(text))

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
            # Special tokens decode to their text, as tlite prints them with --special.
            "greedy_text": enc.decode(gen, inv),
            "greedy_note": f"{GEN_TOKENS} greedy steps through the KV cache (prefill, then one token per step), "
                           "not stopping at EOS; identical to argmax of a full forward without cache",
            "first_eos_index": gen.index(eos) if eos in gen else None,
            "prompt_logits": "prompt_logits.npy",
            "long_ids": long_ids,
            "long_logits": "long_logits.npy",
            "long_note": f"held-out python docs / debian-reference text, {LONG_TOKENS} tokens with BOS; "
                         f"long_logits.npy is the last {LONG_ROWS} rows of a full forward without cache",
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
                "corpus": "models/train/corpus.py: Debian fortunes, python3.11-doc prose, debian-reference-en, "
                          "plus synthetic key-value recall and multiple-choice documents",
                "recipe": "models/train/train_default.py",
                "stage": stage,
                **record,
            },
        }, f, indent=1)
        f.write("\n")
    print(f"export: {path} ({os.path.getsize(path)} bytes), {n_params} parameters")
    for r in (old, new):
        print(f"export: {r['file']}: {r['documents']} docs, loss {r['loss']:.4f} ppl {r['perplexity']:.2f} "
              f"bpb {r['bits_per_byte']:.4f}")
    print("export: greedy:", repr(enc.decode(gen, inv)))
    for s in samples:
        print("export: sample:", repr(s))
