#!/usr/bin/python3
"""Does a trained checkpoint copy from its context? Two probes in PyTorch.

    /usr/bin/python3 models/train/induction.py --work WORK [--ckpt WORK/model_final.pt]

repeat: passages of held-out-free validation text (fortunes_val) and of
random tokens, each shown twice; a model with induction heads predicts the
second showing far better than the first, one without scores them alike.
answer pieces: recall questions with no filler (training names, 6 facts);
the loss on each piece of the 4-digit answer. Once the first piece is
chosen the rest is a copy, so pieces 2-3 near zero mean copying works even
when the choice of fact (piece 1) does not.

These are diagnostics for the model card, not the card's figures (those
are measured with tlite by card.sh).
"""
import argparse
import os
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "export"))
import corpus  # noqa: E402
import train_default as td  # noqa: E402


def nll(model, ids):
    x = torch.tensor([ids])
    with torch.no_grad():
        lp = F.log_softmax(td.forward_logits(model, x[:, :-1])[0], -1)
    y = x[0, 1:]
    return -lp[torch.arange(len(y)), y]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--ckpt", help="state dict or training checkpoint (default WORK/model_final.pt)")
    ap.add_argument("--n", type=int, default=8, help="passages per probe")
    a = ap.parse_args()
    torch.set_num_threads(1)
    ck = torch.load(a.ckpt or os.path.join(a.work, "model_final.pt"))
    model = td.build_model()
    model.load_state_dict(ck["model"] if "model" in ck else ck)
    model.eval()
    enc, vocab = td.load_encoder(a.work)
    bos = vocab[td.BOS]
    val = np.load(os.path.join(a.work, "fortunes_val.npy")).astype(np.int64)
    rng = random.Random(3)  # the repeat passages, then the recall items
    for kind, (first, second) in td.repeat_probe(model, val, a.n, rng).items():
        print(f"repeat {kind}: first showing {first:.2f}, second {second:.2f} nats/token")
    train_names, _ = corpus.split_names(random.Random(td.SEED))
    pieces, n = np.zeros(4), 0
    for _ in range(30):
        keys = rng.sample(train_names, 6)
        vals = [str(rng.randint(1000, 9999)) for _ in keys]
        ids = [bos] + enc.encode("Remember these codes. " + " ".join(f"The code for {k} is {v}." for k, v in zip(keys, vals)) + "\n\n")
        i = rng.randrange(len(keys))
        ids += enc.encode(f"Question: What is the code for {keys[i]}?\nAnswer:")
        ans = enc.encode(f" {vals[i]}.")
        if len(ans) != 4:
            continue
        l = nll(model, ids + ans)
        pieces += l[len(ids) - 1:].numpy()
        n += 1
    print(f"recall answer pieces (n={n}): " + ", ".join(f"{x:.2f}" for x in pieces / n) + " nats")


if __name__ == "__main__":
    main()
