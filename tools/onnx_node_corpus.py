#!/usr/bin/python3
"""Generates ONNX's own backend test corpus (node and simple cases) from
Debian's python3-onnx 1.12 into a cache directory.

Usage (Debian's python3):

    /usr/bin/python3 tools/onnx_node_corpus.py [--out DIR]
    /usr/bin/python3 tools/onnx_node_corpus.py [--out DIR] --run-tl ./tl [--device go]

The second form (until a Go runner exists) also runs every node/simple case
through `tl run`, one process per data set, and prints each case's outcome
(pass, error: tl refused or failed with exit 1, crash: a Go panic or
runtime abort, differ: wrong shape or values beyond rtol 1e-3 + atol 1e-5,
skip: a sequence/map/optional or string input tl run cannot be given) and
the totals.

The default DIR is $TLITE_CACHE/onnx-node-tests, else
~/.cache/tlite/onnx-node-tests. The data (about 945 cases, a few MB) is
generated, never committed. It runs

    python3 -m onnx.backend.test.cmd_tools generate-data -o DIR

in-process after restoring the numpy aliases (np.float, np.int, np.bool,
np.object) that numpy 1.24 removed and onnx 1.12's case generators still
use. Layout written by onnx:

    DIR/node/test_<case>/model.onnx
    DIR/node/test_<case>/test_data_set_<k>/input_<j>.pb   one TensorProto each
    DIR/node/test_<case>/test_data_set_<k>/output_<j>.pb  (SequenceProto,
                                                          MapProto or
                                                          OptionalProto when
                                                          the graph's value
                                                          is not a tensor)
    DIR/simple/test_<case>/...                            same layout

    DIR/real/test_<net>/data.json                         9 cases that only
                                                          name a download URL
                                                          (no data; skip them)

onnx 1.12 writes 922 node and 23 simple cases (945 with data), 2,927 .pb
files. input_j/output_j follow the order of graph.input (onnx 1.12 writes no
initializer-backed inputs) / graph.output. The .pb files are bare
serialized protos with no framing: a TensorProto when the graph's value is a
tensor (graph.ParseTensor in Go decodes one), otherwise a SequenceProto,
MapProto or OptionalProto, which a TensorProto decoder misreads (their field
numbers overlap: expect errors such as "segmented tensors are not
supported"), so a runner must pick the decoder from the graph value's type.
Of the 2,927 files, graph.ParseTensor decodes 2,844; the 83 others belong to
42 cases (sequence/optional values, string tensors, one undefined-type
optional).
"""

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True

import numpy as np  # noqa: E402

for _alias, _type in (("float", float), ("int", int), ("bool", bool), ("object", object)):
    if _alias not in np.__dict__:
        setattr(np, _alias, _type)


def default_out():
    base = os.environ.get("TLITE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tlite")
    return os.path.join(base, "onnx-node-tests")


def count(out):
    per_kind = {}
    for kind in sorted(os.listdir(out)):
        d = os.path.join(out, kind)
        if os.path.isdir(d):
            per_kind[kind] = len([c for c in os.listdir(d) if os.path.isdir(os.path.join(d, c))])
    return per_kind


def run_case(case, tl, extra, tmp):
    """Runs one case's data sets through `tl run`; returns (outcome, detail)."""
    import onnx
    from onnx import numpy_helper
    m = onnx.load(os.path.join(case, "model.onnx"))
    inits = {x.name for x in m.graph.initializer}
    inputs = [i for i in m.graph.input if i.name not in inits]
    for d in sorted(glob.glob(os.path.join(case, "test_data_set_*"))):
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(os.path.join(tmp, "in"))
        cmd = [tl, "run", os.path.join(case, "model.onnx"), "--out", os.path.join(tmp, "out")] + extra
        for j, vi in enumerate(inputs):
            if not vi.type.HasField("tensor_type"):
                return "skip", f"input {vi.name} is not a tensor"
            t = onnx.TensorProto()
            with open(os.path.join(d, f"input_{j}.pb"), "rb") as f:
                t.ParseFromString(f.read())
            a = numpy_helper.to_array(t)
            if a.dtype == object:
                return "skip", f"input {vi.name} is a string tensor"
            p = os.path.join(tmp, "in", f"{j}.npy")
            np.save(p, a)
            cmd += ["--input", f"{vi.name}={p}"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return "error", "timed out after 120 s"
        if r.returncode != 0:
            crashed = "panic:" in r.stderr or "fatal error:" in r.stderr
            lines = [l for l in r.stderr.strip().splitlines() if l.startswith("tl run:") or "panic" in l or "fatal" in l]
            return ("crash" if crashed else "error"), (lines or ["exit %d" % r.returncode])[0][:300]
        for j, vo in enumerate(m.graph.output):
            t = onnx.TensorProto()
            with open(os.path.join(d, f"output_{j}.pb"), "rb") as f:
                t.ParseFromString(f.read())
            want = numpy_helper.to_array(t)
            fn = os.path.join(tmp, "out", re.sub(r"[/:]", "_", vo.name) + ".npy")
            if not os.path.exists(fn):
                return "differ", f"no output {vo.name}"
            got = np.load(fn)
            if got.shape != want.shape:
                return "differ", f"{vo.name}: shape {got.shape}, want {want.shape}"
            if want.size and not np.allclose(got.astype(np.float64), want.astype(np.float64),
                                             rtol=1e-3, atol=1e-5, equal_nan=True):
                return "differ", f"{vo.name}: values differ"
    return "pass", ""


def run_all(out, tl, extra):
    tmp = tempfile.mkdtemp(prefix="tlite-corpus-")
    totals = collections.Counter()
    try:
        for kind in ("node", "simple"):
            for case in sorted(glob.glob(os.path.join(out, kind, "test_*"))):
                outcome, detail = run_case(case, tl, extra, tmp)
                totals[outcome] += 1
                print(f"{outcome:6} {kind}/{os.path.basename(case)} {detail}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(", ".join(f"{k} {totals[k]}" for k in ("pass", "error", "crash", "differ", "skip"))
          + f"; {sum(totals.values())} cases")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=default_out(), help="output directory (default %(default)s)")
    ap.add_argument("--run-tl", metavar="TL", help="also run every case through this tl binary")
    ap.add_argument("--device", help="passed to tl run --device")
    args = ap.parse_args()
    import onnx.backend.test.cmd_tools as cmd_tools
    sys.argv = ["cmd_tools", "generate-data", "-o", args.out]
    cmd_tools.main()
    kinds = count(args.out)
    print(", ".join(f"{k}: {n}" for k, n in kinds.items()) + f"; total {sum(kinds.values())} cases in {args.out}")
    if args.run_tl:
        run_all(args.out, os.path.abspath(args.run_tl), ["--device", args.device] if args.device else [])


if __name__ == "__main__":
    main()
