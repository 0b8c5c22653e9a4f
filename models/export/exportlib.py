"""Shared machinery for the tlite export recipes.

Every recipe (llama.py, gpt2.py, ...) builds a small random-weight PyTorch
module, exports it with `export_onnx`, and writes reference cases with
`write_case`. This module holds the parts that are the same for all of them,
so that the recipes themselves read as "what a model engineer has to do".

Layout written for a model NAME under the output root (testdata/models):

    NAME/model.onnx            the exported graph, weights inline
    NAME/model.json            config, graph signature (dims as ints or
                               symbol names), op histogram
    NAME/ref/[CASE/]manifest.json
    NAME/ref/[CASE/]input.<onnx input name>.npy
    NAME/ref/[CASE/]output.<onnx output name>.npy

Every manifest.json describes exactly one reference case: the symbol values
it binds (e.g. {"batch": 2, "seq": 7, "past": 0, "total": 7}), and for each
graph input and output its file, dtype and shape. Reference outputs are
computed by the PyTorch module itself in fp32, never by an ONNX runtime, so
they also catch exporter mistakes.

Determinism: weights come from torch.manual_seed(seed) and inputs from
numpy.random.RandomState(seed), so reruns give bit-identical input files.
The .npy files are numpy.save output: format 1.0, little-endian, C order.
"""

import collections
import json
import os
import re

import numpy as np
import onnx
import torch

# tlite targets opset 17: it is the newest opset torch 1.13 can emit, and the
# first with LayerNormalization, so LayerNorm arrives as one node instead of
# a ReduceMean/Sub/Pow/Sqrt/Div chain.
OPSET = 17


def seed_everything(seed):
    """Seeds torch (weights) and returns a numpy RandomState (inputs)."""
    torch.manual_seed(seed)
    return np.random.RandomState(seed)


def randomize_norms(module, scale=0.1):
    """Moves norm parameters away from their identity init.

    Fresh LayerNorm/BatchNorm layers have weight=1, bias=0 and BatchNorm has
    running_mean=0, running_var=1. A kernel that ignored gamma/beta or the
    running statistics would still match such a reference, so every recipe
    perturbs them.
    """
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (torch.nn.LayerNorm, torch.nn.BatchNorm2d)):
                if m.weight is not None:
                    m.weight.copy_(1.0 + scale * torch.randn_like(m.weight))
                if m.bias is not None:
                    m.bias.copy_(scale * torch.randn_like(m.bias))
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(scale * torch.randn_like(m.running_mean))
                m.running_var.copy_(1.0 + 0.5 * torch.rand_like(m.running_var))


def export_onnx(module, args, path, input_names, output_names, dynamic_axes,
                do_constant_folding=True, training=torch.onnx.TrainingMode.EVAL):
    """Exports `module` in eval mode at opset 17 and validates the result.

    dynamic_axes maps each input/output name to {axis: symbol name}; naming
    the axes (instead of listing axis numbers) is what makes the exporter
    write dim_param strings that tlite binds at run time.

    training=EVAL (the default) lets torch 1.13 run its eval peephole pass,
    which among other things folds BatchNorm into the preceding Conv.
    training=PRESERVE with the module in eval mode skips that pass: the
    graph is still an inference graph, but BatchNormalization survives.
    """
    module.eval()
    with torch.no_grad():
        torch.onnx.export(
            module,
            args,
            path,
            opset_version=OPSET,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            do_constant_folding=do_constant_folding,
            training=training,
        )
    check_model(path)
    return onnx.load(path)


def check_model(path):
    """Runs the ONNX checker with full shape inference on a model file.

    The path form (not the in-memory proto) is used so that models with
    external data are checked too.
    """
    onnx.checker.check_model(path, full_check=True)


def save_external(model, path, data_name):
    """Re-saves `model` with its large initializers in one side file.

    Tensors of 1 KiB or more go to `data_name` (next to `path`); smaller ones
    stay inline, so a loader must handle both forms in one model.
    """
    data_path = os.path.join(os.path.dirname(path), data_name)
    if os.path.exists(data_path):
        # onnx appends to an existing data file; start clean so reruns are
        # byte-identical.
        os.remove(data_path)
    onnx.save_model(model, path, save_as_external_data=True,
                    all_tensors_to_one_file=True, location=data_name,
                    size_threshold=1024)
    check_model(path)


def op_histogram(model):
    """Counts nodes per op type ("domain::Op" for non-default domains)."""
    hist = collections.Counter()
    for node in model.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        hist[key] += 1
    return dict(sorted(hist.items()))


def split_histogram(model):
    """Splits the op histogram into data ops and shape/constant ops.

    A node is a data op when any input depends on a graph input's *values*.
    Shape's output depends only on a shape, and Constant nodes and
    initializers on nothing, so nodes fed only by those compute from symbol
    bindings alone: an engine can evaluate them on the CPU (or fold them)
    instead of launching device kernels. Returns (data_ops, shape_ops).
    """
    data_values = {v.name for v in model.graph.input}
    data_values -= {i.name for i in model.graph.initializer}
    data, shape = collections.Counter(), collections.Counter()
    for node in model.graph.node:  # ONNX requires topological order
        is_data = node.op_type != "Shape" and any(i in data_values for i in node.input)
        (data if is_data else shape)[node.op_type] += 1
        if is_data:
            data_values.update(node.output)
    return dict(sorted(data.items())), dict(sorted(shape.items()))


def _value_sig(vi):
    t = vi.type.tensor_type
    dims = []
    for d in t.shape.dim:
        if d.HasField("dim_param"):
            dims.append(d.dim_param)
        elif d.HasField("dim_value"):
            dims.append(d.dim_value)
        else:
            dims.append(None)
    return {
        "name": vi.name,
        "dtype": np.dtype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[t.elem_type]).name,
        "dims": dims,
    }


def signature(model):
    """Graph inputs/outputs with dims as ints (fixed) or symbol names."""
    inits = {i.name for i in model.graph.initializer}
    return {
        "inputs": [_value_sig(v) for v in model.graph.input if v.name not in inits],
        "outputs": [_value_sig(v) for v in model.graph.output],
    }


def write_model_json(model_dir, name, config, model, extra=None):
    """Writes NAME/model.json: config, signature, op histogram."""
    info = {
        "model": name,
        "opset": OPSET,
        "config": config,
        "signature": signature(model),
        "ops": op_histogram(model),
        "data_ops": split_histogram(model)[0],
        "shape_ops": split_histogram(model)[1],
        "num_nodes": len(model.graph.node),
        "num_initializers": len(model.graph.initializer),
        "num_parameters": int(sum(int(np.prod(i.dims)) for i in model.graph.initializer)),
    }
    if extra:
        info.update(extra)
    _write_json(os.path.join(model_dir, "model.json"), info)
    return info


def sanitize(name):
    """Makes an ONNX value name safe as a file name component."""
    return re.sub(r"[/:]", "_", name)


def _np(x):
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.ascontiguousarray(x)
    # Force little-endian storage so the files read the same everywhere.
    return x.astype(x.dtype.newbyteorder("<"), copy=False)


def write_case(case_dir, model_name, model, case_name, symbols, inputs, outputs, notes=""):
    """Writes one reference case for the exported `model` (a ModelProto).

    inputs/outputs are ordered lists of (onnx value name, array or tensor),
    in graph order. `symbols` binds every dim_param the recipe named in
    dynamic_axes. Output dims the exporter could not infer carry invented
    names (e.g. "Addlast_hidden_state_dim_1"); their values are taken from
    the reference arrays and listed separately as "derived_symbols", since a
    caller never binds them: an engine must infer them itself.
    """
    derived = bind_signature(model, symbols, inputs, outputs)
    os.makedirs(case_dir, exist_ok=True)
    manifest = {
        "model": model_name,
        "case": case_name,
        "onnx": "model.onnx",
        "symbols": symbols,
    }
    if derived:
        manifest["derived_symbols"] = derived
    manifest["inputs"] = []
    manifest["outputs"] = []
    if notes:
        manifest["notes"] = notes
    for kind, items in (("input", inputs), ("output", outputs)):
        for name, value in items:
            arr = _np(value)
            fname = f"{kind}.{sanitize(name)}.npy"
            np.save(os.path.join(case_dir, fname), arr, allow_pickle=False)
            manifest[kind + "s"].append({
                "name": name,
                "file": fname,
                "dtype": arr.dtype.name,
                "shape": list(arr.shape),
            })
    _write_json(os.path.join(case_dir, "manifest.json"), manifest)


def bind_signature(model, symbols, inputs, outputs):
    """Checks that the case's arrays have the shapes the graph declares.

    Every dim_param of a graph input must be bound by `symbols`; this catches
    a reference case whose symbol table disagrees with what was fed. Output
    dim_params that `symbols` does not bind are returned with the values the
    reference arrays give them (consistently across outputs).
    """
    sig = signature(model)
    arrays = {n: _np(v) for n, v in list(inputs) + list(outputs)}
    if [v["name"] for v in sig["inputs"]] != [n for n, _ in inputs]:
        raise ValueError(f"inputs {[n for n, _ in inputs]} are not the graph inputs {sig['inputs']}")
    if [v["name"] for v in sig["outputs"]] != [n for n, _ in outputs]:
        raise ValueError(f"outputs {[n for n, _ in outputs]} are not the graph outputs {sig['outputs']}")
    derived = {}
    for kind in ("inputs", "outputs"):
        for v in sig[kind]:
            shape = list(arrays[v["name"]].shape)
            if len(shape) != len(v["dims"]):
                raise ValueError(f"{v['name']}: reference rank {len(shape)} != declared dims {v['dims']}")
            for axis, (d, n) in enumerate(zip(v["dims"], shape)):
                if isinstance(d, str) and d not in symbols:
                    if kind == "inputs":
                        raise ValueError(f"input {v['name']} axis {axis}: symbol {d!r} not bound by {symbols}")
                    if derived.setdefault(d, n) != n:
                        raise ValueError(f"output {v['name']} axis {axis}: derived symbol {d!r} is both {derived[d]} and {n}")
                    continue
                want = symbols[d] if isinstance(d, str) else d
                if want is not None and want != n:
                    raise ValueError(f"{v['name']} axis {axis}: reference has {n}, graph declares {d} = {want}")
    return derived


def try_onnxruntime(path, inputs, outputs, atol=1e-4, rtol=1e-3):
    """Compares an ONNX Runtime run with the PyTorch reference when available.

    Returns a short status string; onnxruntime is optional (Debian does not
    package it), so its absence is reported, not an error.
    """
    try:
        import onnxruntime as ort  # noqa: F401
    except ImportError:
        return "onnxruntime not installed: skipped"
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {n: _np(v) for n, v in inputs}
    names = [n for n, _ in outputs]
    got = sess.run(names, feed)
    worst = 0.0
    for (n, ref), g in zip(outputs, got):
        ref = _np(ref)
        if not np.allclose(g, ref, atol=atol, rtol=rtol):
            raise AssertionError(f"onnxruntime mismatch on {n}: max abs diff {np.abs(g - ref).max()}")
        worst = max(worst, float(np.abs(g - ref).max()))
    return f"onnxruntime ok (max abs diff {worst:.2e})"


def _write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
