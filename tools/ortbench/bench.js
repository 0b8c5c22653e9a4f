// ONNX Runtime (CPU, onnxruntime-node) as tlite's speed peer: runs a model on
// synthetic inputs of the given shapes, the same way `tl bench` does, and
// prints the median latency with min/max after warm-up.
//
//   (cd tools/ortbench && ONNXRUNTIME_NODE_INSTALL=skip npm install)
//   node tools/ortbench/bench.js model.onnx --shape pixel_values=1x3x224x224 [-r 20] [-w 3] [--threads 2] [--json]
//
// Integer inputs get small non-negative values (token ids, masks of ones);
// float inputs get uniform values in [-1, 1). Inputs not given a shape must
// have fully static shapes in the model.
"use strict";

const ort = require("onnxruntime-node");

function parseArgs(argv) {
  const a = { shapes: {}, runs: 20, warmup: 3, threads: 0, json: false, model: null };
  for (let i = 0; i < argv.length; i++) {
    const x = argv[i];
    const next = () => argv[++i];
    if (x === "--shape") {
      const [name, dims] = next().split("=");
      a.shapes[name] = dims.split("x").map(Number);
    } else if (x === "-r") a.runs = Number(next());
    else if (x === "-w") a.warmup = Number(next());
    else if (x === "--threads") a.threads = Number(next());
    else if (x === "--json") a.json = true;
    else if (!a.model) a.model = x;
    else throw new Error(`unexpected argument ${x}`);
  }
  if (!a.model) throw new Error("usage: bench.js model.onnx --shape name=1x3x224x224 ... [-r 20] [-w 3] [--threads N] [--json]");
  return a;
}

function makeInput(type, shape, name) {
  const n = shape.reduce((p, d) => p * d, 1);
  let seed = 12345;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  switch (type) {
    case "float32": {
      const v = new Float32Array(n);
      for (let i = 0; i < n; i++) v[i] = rnd() * 2 - 1;
      return new ort.Tensor("float32", v, shape);
    }
    case "int64": {
      const v = new BigInt64Array(n);
      const mask = /mask/.test(name);
      const segment = /type/.test(name); // token_type_ids index a 2-row table
      for (let i = 0; i < n; i++) v[i] = mask ? 1n : segment ? 0n : BigInt(Math.floor(rnd() * 100));
      return new ort.Tensor("int64", v, shape);
    }
    case "int32": {
      const v = new Int32Array(n);
      for (let i = 0; i < n; i++) v[i] = Math.floor(rnd() * 100);
      return new ort.Tensor("int32", v, shape);
    }
  }
  throw new Error(`input ${name}: unsupported type ${type}`);
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const opts = { graphOptimizationLevel: "all" };
  if (a.threads > 0) opts.intraOpNumThreads = a.threads;
  const t0 = process.hrtime.bigint();
  const sess = await ort.InferenceSession.create(a.model, opts);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const feeds = {};
  for (const meta of sess.inputMetadata) {
    let shape = a.shapes[meta.name];
    if (!shape) {
      if (!meta.shape.every((d) => typeof d === "number")) {
        throw new Error(`input ${meta.name} has symbolic shape [${meta.shape}]: give --shape ${meta.name}=...`);
      }
      shape = meta.shape;
    }
    feeds[meta.name] = makeInput(meta.type, shape, meta.name);
  }
  for (let i = 0; i < a.warmup; i++) await sess.run(feeds);
  const times = [];
  for (let i = 0; i < a.runs; i++) {
    const t = process.hrtime.bigint();
    await sess.run(feeds);
    times.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  times.sort((x, y) => x - y);
  const res = {
    runtime: `onnxruntime-node ${require("onnxruntime-node/package.json").version} (CPU)`,
    model: a.model, runs: a.runs, load_ms: loadMs,
    median_ms: times[Math.floor(times.length / 2)], min_ms: times[0], max_ms: times[times.length - 1],
    rss_mib: process.memoryUsage().rss / (1 << 20),
    max_rss_mib: process.resourceUsage().maxRSS / 1024,
  };
  if (a.json) console.log(JSON.stringify(res, null, 2));
  else console.log(`${res.runtime}  ${a.model}: median ${res.median_ms.toFixed(3)} ms (min ${res.min_ms.toFixed(3)}, max ${res.max_ms.toFixed(3)}) over ${a.runs} runs; load ${loadMs.toFixed(0)} ms; RSS ${res.rss_mib.toFixed(0)} MiB`);
}

main().catch((e) => { console.error(e.message || e); process.exit(1); });
