#!/usr/bin/python3
"""Compares the unit orders of two scores files (tl elastic importance's
proxy, elastic.py taylor): per layer the Spearman rank correlation of the
query-head, KV-group and neuron scores, and the overlap of the top halves
(the units a 50% prefix keeps).

    /usr/bin/python3 models/elastic/compare_importance.py A.json B.json [--json]
"""

import argparse
import json

import numpy as np


def ranks(x):
    """Average ranks (ties share the mean rank)."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x), dtype=np.float64)
    for v in np.unique(x):
        m = x == v
        if m.sum() > 1:
            r[m] = r[m].mean()
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def top_half_overlap(a, b):
    k = max(1, len(a) // 2)
    ta = set(np.argsort(-np.asarray(a), kind="stable")[:k].tolist())
    tb = set(np.argsort(-np.asarray(b), kind="stable")[:k].tolist())
    return len(ta & tb) / k


def compare(a, b):
    if (a["n_layers"], a["n_heads"], a["n_kv_heads"], a["ffn"]) != (b["n_layers"], b["n_heads"], b["n_kv_heads"], b["ffn"]):
        raise SystemExit("compare: the files describe different models")
    rows = []
    for l, (x, y) in enumerate(zip(a["layers"], b["layers"])):
        row = {"layer": l}
        for key in ("q_heads", "kv_groups", "neurons"):
            row[key] = {"spearman": spearman(x[key], y[key]), "top_half_overlap": top_half_overlap(x[key], y[key])}
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with open(args.a) as f:
        a = json.load(f)
    with open(args.b) as f:
        b = json.load(f)
    rows = compare(a, b)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"A: {a.get('method')}\nB: {b.get('method')}")
    print("layer | heads rho (top-half overlap) | KV groups rho (overlap) | neurons rho (overlap)")
    for r in rows:
        cells = [f"{r[k]['spearman']:+.3f} ({r[k]['top_half_overlap']:.2f})" for k in ("q_heads", "kv_groups", "neurons")]
        print(f"{r['layer']} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
