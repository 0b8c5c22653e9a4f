// ONNX Runtime (CPU) as the speed peer for decoder language models, measured
// the way `tl bench --model` measures tlite: prefill of p tokens from an
// empty cache (pp), then n decode steps of one token each from that prefilled
// context (tg n @ d p), the present KV fed back as the next step's past.
//
//   node tools/ortbench/llm.js model.onnx -p 128 -n 32 [-r 3] [-w 1] [--threads 2] [--json]
//
// The KV inputs are found by name, the way the recipes and Hugging Face
// exports name them: inputs containing "past" pair with outputs containing
// "present" in order. input_ids get seeded ids below the vocabulary (the
// last axis of the logits), attention_mask ones over past + new tokens,
// position_ids past..past+seq-1.
"use strict";

const ort = require("onnxruntime-node");

function parseArgs(argv) {
  const a = { p: 128, n: 32, runs: 3, warmup: 1, threads: 0, json: false, model: null };
  for (let i = 0; i < argv.length; i++) {
    const x = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${x} needs a value`);
      return argv[++i];
    };
    if (x === "-p") a.p = Number(next());
    else if (x === "-n") a.n = Number(next());
    else if (x === "-r") a.runs = Number(next());
    else if (x === "-w") a.warmup = Number(next());
    else if (x === "--threads") a.threads = Number(next());
    else if (x === "--json") a.json = true;
    else if (x === "-h" || x === "--help") {
      console.log("usage: llm.js model.onnx -p 128 -n 32 [-r 3] [-w 1] [--threads N] [--json]");
      process.exit(0);
    } else if (!a.model) a.model = x;
    else throw new Error(`unexpected argument ${x}`);
  }
  if (!a.model) throw new Error("usage: llm.js model.onnx -p 128 -n 32 [-r 3] [-w 1] [--threads N] [--json]");
  for (const k of ["p", "n", "runs"]) {
    if (!Number.isInteger(a[k]) || a[k] < 1) throw new Error(`-${k === "runs" ? "r" : k} must be a positive integer`);
  }
  return a;
}

function median(xs) {
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.floor(s.length / 2)];
}

class Decoder {
  constructor(sess) {
    this.sess = sess;
    const ins = sess.inputMetadata;
    this.pastNames = ins.filter((m) => /past/.test(m.name)).map((m) => m.name);
    this.presentNames = sess.outputMetadata.filter((m) => /present/.test(m.name)).map((m) => m.name);
    if (this.pastNames.length !== this.presentNames.length) {
      throw new Error(`${this.pastNames.length} past inputs but ${this.presentNames.length} present outputs`);
    }
    this.meta = Object.fromEntries(ins.map((m) => [m.name, m]));
    this.logitsName = sess.outputMetadata.find((m) => /logits/.test(m.name)) ? "logits" : sess.outputNames[0];
    this.seed = 12345;
  }

  ids(n, vocab) {
    const v = new BigInt64Array(n);
    for (let i = 0; i < n; i++) {
      this.seed = (this.seed * 1103515245 + 12345) % 2147483648;
      v[i] = BigInt(this.seed % vocab);
    }
    return v;
  }

  emptyPast() {
    const past = {};
    for (const name of this.pastNames) {
      const shape = this.meta[name].shape.map((d, i) => (i === 0 ? 1 : typeof d === "number" ? d : 0));
      past[name] = new ort.Tensor("float32", new Float32Array(0), shape);
    }
    return past;
  }

  async step(past, depth, seq, vocab) {
    const feeds = { ...past };
    for (const name of this.sess.inputNames) {
      if (name in feeds) continue;
      if (/input_ids/.test(name)) feeds[name] = new ort.Tensor("int64", this.ids(seq, vocab), [1, seq]);
      else if (/mask/.test(name)) feeds[name] = new ort.Tensor("int64", new BigInt64Array(depth + seq).fill(1n), [1, depth + seq]);
      else if (/position/.test(name)) {
        const v = new BigInt64Array(seq);
        for (let i = 0; i < seq; i++) v[i] = BigInt(depth + i);
        feeds[name] = new ort.Tensor("int64", v, [1, seq]);
      } else throw new Error(`input ${name}: not an id, mask, position or past input`);
    }
    const out = await this.sess.run(feeds);
    const next = {};
    this.pastNames.forEach((name, i) => { next[name] = out[this.presentNames[i]]; });
    return { out, past: next };
  }
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const opts = { graphOptimizationLevel: "all" };
  if (a.threads > 0) opts.intraOpNumThreads = a.threads;
  const t0 = process.hrtime.bigint();
  const sess = await ort.InferenceSession.create(a.model, opts);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const dec = new Decoder(sess);
  // The vocabulary is the logits' last axis: one single-token run reads it.
  const probe = await dec.step(dec.emptyPast(), 0, 1, 2);
  const vocab = probe.out[dec.logitsName].dims.at(-1);
  const pp = [], tg = [];
  for (let r = 0; r < a.warmup + a.runs; r++) {
    let t = process.hrtime.bigint();
    let { past } = await dec.step(dec.emptyPast(), 0, a.p, vocab);
    const ppMs = Number(process.hrtime.bigint() - t) / 1e6;
    t = process.hrtime.bigint();
    for (let i = 0; i < a.n; i++) ({ past } = await dec.step(past, a.p + i, 1, vocab));
    const tgMs = Number(process.hrtime.bigint() - t) / 1e6;
    if (r >= a.warmup) { pp.push(ppMs); tg.push(tgMs); }
  }
  const res = {
    runtime: `onnxruntime-node ${require("onnxruntime-node/package.json").version} (CPU)`,
    model: a.model, runs: a.runs, load_ms: loadMs, vocab,
    pp: { tokens: a.p, median_ms: median(pp), tok_per_sec: (a.p * 1000) / median(pp), min_ms: Math.min(...pp), max_ms: Math.max(...pp) },
    tg: { tokens: a.n, depth: a.p, median_ms: median(tg), tok_per_sec: (a.n * 1000) / median(tg), min_ms: Math.min(...tg), max_ms: Math.max(...tg) },
    rss_mib: process.memoryUsage().rss / (1 << 20),
    max_rss_mib: process.resourceUsage().maxRSS / 1024,
  };
  if (a.json) console.log(JSON.stringify(res, null, 2));
  else {
    console.log(`${res.runtime}  ${a.model}`);
    console.log(`pp${a.p}: ${res.pp.tok_per_sec.toFixed(1)} tok/s (${res.pp.median_ms.toFixed(1)} ms)`);
    console.log(`tg${a.n} @ d${a.p}: ${res.tg.tok_per_sec.toFixed(1)} tok/s (${res.tg.median_ms.toFixed(1)} ms)`);
    console.log(`load ${loadMs.toFixed(0)} ms; RSS ${res.rss_mib.toFixed(0)} MiB`);
  }
}

main().catch((e) => { console.error(e.message || e); process.exit(1); });
