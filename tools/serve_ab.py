#!/usr/bin/env python3
"""A/B of tl serve's context stores on one machine (issue 10, spec §1).

Part 1, switch latency: for each store (alternating the order every
repetition), start tl serve, create N contexts, give each a prompt of about
--ctx-tokens tokens (a slice of the model's held-out text), then call the
contexts in turn for --rounds rounds with a short prompt and report the
calls' switch_ms and its parts (from the API's timings).

Part 2, decode speed with and without the service: on one context of the
same length, tl generate (no service) against a call through tl serve
(--store llms and --store device), alternating, --decode-rounds rounds.

Usage: tools/serve_ab.py --tl /tmp/tl --model testdata/longctx/model.onnx
Writes one JSON object to stdout; progress to stderr. Quote `uptime`.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Daemon:
    def __init__(self, tl, model, state, extra):
        args = [tl, "serve", "--model", model, "--state-dir", state, "--addr", "127.0.0.1:0", "--app-contexts", "0"] + extra
        self.p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        self.url = None
        for line in self.p.stderr:
            if "listening on " in line:
                self.url = line.split("listening on ")[1].split()[0]
                break
        if self.url is None:
            raise RuntimeError("tl serve did not start: %s" % " ".join(args))

    def req(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        r = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(r, timeout=600) as resp:
            b = resp.read()
            return json.loads(b) if b else None

    def close(self):
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def text_slices(path, n, chars):
    with open(path, encoding="utf-8") as f:
        t = f.read()
    if len(t) < n * chars:
        raise SystemExit("%s has %d characters: %d prompts of %d need more (give --text)" % (path, len(t), n, chars))
    return [t[i * chars:(i + 1) * chars] for i in range(n)]


def switch_run(a, store, n, rounds, prompts):
    state = tempfile.mkdtemp(prefix="serveab-")
    d = Daemon(a.tl, a.model, state, ["--store", store, "--kv-budget", a.budget] + (["--device", a.device] if a.device else []))
    try:
        ids = [d.req("POST", "/v1/contexts", {"system": ""})["id"] for _ in range(n)]
        for i, cid in enumerate(ids):
            d.req("POST", "/v1/contexts/%s/call" % cid, {"prompt": prompts[i], "max_tokens": 4})
        rows = []
        for r in range(rounds):
            for cid in ids:
                rep = d.req("POST", "/v1/contexts/%s/call" % cid, {"prompt": " And then", "max_tokens": 4})
                t = rep["timings"]
                rows.append({k: t[k] for k in ("switch_ms", "reclaim_ms", "io_ms", "recompute_ms", "upload_ms", "other_ms")})
        tokens = d.req("GET", "/v1/contexts/%s" % ids[0])["tokens"]
        stats = d.req("GET", "/v1/stats")["store"]
    finally:
        d.close()
    sw = [r["switch_ms"] for r in rows]
    parts = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
    return {"store": store, "contexts": n, "context_tokens": tokens, "calls": len(rows), "switch_ms_mean": statistics.mean(sw),
            "switch_ms_median": statistics.median(sw), "switch_ms_max": max(sw), "parts_ms_mean": parts,
            "recomputed_chunks": stats.get("recomputed_chunks"), "io_read_bytes": stats.get("io_read_bytes"),
            "chunks_by_level": stats.get("chunks_by_level"), "load": loadavg()}


def decode_generate(a, prompt, n):
    args = [a.tl, "generate", "--model", a.model, "--prompt", "-", "-n", str(n), "--ignore-eos", "--json"] + (["--device", a.device] if a.device else [])
    out = subprocess.run(args, input=prompt, capture_output=True, text=True, check=True).stdout
    s = json.loads(out)["stats"]
    return s["decode_steps"] / (s["decode_ms"] / 1e3), s["prompt_tokens"]


def decode_serve(a, store, prompt, n):
    state = tempfile.mkdtemp(prefix="serveab-")
    d = Daemon(a.tl, a.model, state, ["--store", store] + (["--device", a.device] if a.device else []))
    try:
        # BOS as the system prompt, then the same text as tl generate's.
        cid = d.req("POST", "/v1/contexts", {"system": ""})["id"]
        rep = d.req("POST", "/v1/contexts/%s/call" % cid, {"prompt": prompt, "max_tokens": n})
    finally:
        d.close()
    t = rep["timings"]
    steps = rep["tokens"] - 1
    return steps / (t["decode_ms"] / 1e3), rep["context_tokens"], rep["tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tl", required=True)
    ap.add_argument("--model", default="testdata/longctx/model.onnx")
    ap.add_argument("--text", default="")
    ap.add_argument("--device", default="")
    ap.add_argument("--stores", default="llms,lmk")
    ap.add_argument("--contexts", default="2,4")
    ap.add_argument("--chars", type=int, default=2900, help="characters per context prompt (about 1000 tokens of the longctx tokenizer)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--budget", default="0.5ctx")
    ap.add_argument("--decode-rounds", type=int, default=3)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--decode-stores", default="llms,device", help="stores whose decode speed is compared with tl generate's")
    ap.add_argument("--skip-switch", action="store_true")
    a = ap.parse_args()
    text = a.text or os.path.join(os.path.dirname(a.model), "heldout_split.txt")
    stores = a.stores.split(",")
    ns = [int(x) for x in a.contexts.split(",")]
    out = {"model": a.model, "budget": a.budget, "load_start": loadavg(), "switch": [], "decode": []}
    if not a.skip_switch:
        for rep in range(a.reps):
            for n in ns:
                prompts = text_slices(text, n, a.chars)
                order = stores if rep % 2 == 0 else stores[::-1]
                for s in order:
                    r = switch_run(a, s, n, a.rounds, prompts)
                    r["rep"] = rep
                    log(json.dumps(r))
                    out["switch"].append(r)
    prompt = text_slices(text, 1, a.chars)[0]
    for rd in range(a.decode_rounds):
        row = {"round": rd, "load": loadavg()}
        row["generate_tok_s"], row["generate_prompt_tokens"] = decode_generate(a, prompt, a.decode_tokens)
        for s in a.decode_stores.split(","):
            row["serve_%s_tok_s" % s], row["serve_context_tokens"], row["serve_%s_tokens" % s] = decode_serve(a, s, prompt, a.decode_tokens)
        log(json.dumps(row))
        out["decode"].append(row)
    out["load_end"] = loadavg()
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
