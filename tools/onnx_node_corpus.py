#!/usr/bin/python3
"""Generates ONNX's own backend test corpus (node and simple cases) from
Debian's python3-onnx 1.12 into a cache directory.

Usage (Debian's python3):

    /usr/bin/python3 tools/onnx_node_corpus.py [--out DIR]

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
import os
import sys

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=default_out(), help="output directory (default %(default)s)")
    args = ap.parse_args()
    import onnx.backend.test.cmd_tools as cmd_tools
    sys.argv = ["cmd_tools", "generate-data", "-o", args.out]
    cmd_tools.main()
    kinds = count(args.out)
    print(", ".join(f"{k}: {n}" for k, n in kinds.items()) + f"; total {sum(kinds.values())} cases in {args.out}")


if __name__ == "__main__":
    main()
