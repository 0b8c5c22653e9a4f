#!/usr/bin/python3
"""Compares the unit orders of two scores files (tl elastic importance's
proxy, elastic.py taylor): per layer the Spearman rank correlation of the
query-head, KV-group and neuron scores, the overlap of the top halves
(the units a 50% prefix keeps), whether the descending orders are the same,
and the largest relative difference of the scores themselves (for two runs
of one method: backends, repeats).

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


def max_rel_diff(a, b):
    """max |a - b| / |b| over the units (0 where both are 0)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    d = np.abs(a - b)
    den = np.abs(b)
    rel = np.where(den > 0, d / np.where(den > 0, den, 1), np.where(d > 0, np.inf, 0))
    return float(rel.max()) if len(rel) else 0.0


def same_order(a, b):
    return bool((np.argsort(-np.asarray(a), kind="stable") == np.argsort(-np.asarray(b), kind="stable")).all())


def compare(a, b):
    if (a["n_layers"], a["n_heads"], a["n_kv_heads"], a["ffn"]) != (b["n_layers"], b["n_heads"], b["n_kv_heads"], b["ffn"]):
        raise SystemExit("compare: the files describe different models")
    rows = []
    for l, (x, y) in enumerate(zip(a["layers"], b["layers"])):
        row = {"layer": l}
        for key in ("q_heads", "kv_groups", "neurons"):
            row[key] = {"spearman": spearman(x[key], y[key]), "top_half_overlap": top_half_overlap(x[key], y[key]),
                        "same_order": same_order(x[key], y[key]), "max_rel_diff": max_rel_diff(x[key], y[key])}
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
    keys = ("q_heads", "kv_groups", "neurons")
    same = sum(all(r[k]["same_order"] for k in keys) for r in rows)
    rel = max(r[k]["max_rel_diff"] for r in rows for k in keys)
    print(f"same order (heads, groups, neurons) in {same} of {len(rows)} layers; largest relative score difference {rel:.3g}")
    ra, rb = a.get("layer_removal_loss_increase"), b.get("layer_removal_loss_increase")
    if ra and rb and len(ra) == len(rb):
        d = max(abs(x - y) for x, y in zip(ra, rb))
        print(f"layer removal loss increases: A {[round(x, 4) for x in ra]}, B {[round(x, 4) for x in rb]}; largest |difference| {d:.3g}")


if __name__ == "__main__":
    main()
