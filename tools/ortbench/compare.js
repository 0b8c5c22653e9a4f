// compare.js: tlite against ONNX Runtime (CPU) on a list of models, run
// alternately in one window, printed as a ratio table.
//
//   node tools/ortbench/compare.js [--suite tools/ortbench/suite.json] [--dir DIR]
//        [--tl bin/tl] [--rounds 3] [--only a,b] [--threads 2] [--json] [--out FILE]
//
// Each case runs once per round in each runtime, as separate processes, and
// the order flips every round (tlite first in odd rounds, ORT first in even
// ones), so a slow phase of the shared machine lands on both. A run reports
// its own median over -r timed runs after warm-up; the table gives the
// median of the round medians and the time ratio tlite/ORT per round as
// median (min-max). The load average is read before and after each case.
//
// A suite is a JSON list of cases:
//   {"name": "resnet18 b2", "model": "vision/resnet18/model.onnx",
//    "shapes": {"pixel_values": "2x3x224x224"}, "runs": 10}
//   {"name": "llm 245.9M", "model": "llm/e0m4.onnx", "ort_model": "llm/model.onnx",
//    "llm": {"p": 128, "n": 32}}
// Paths are relative to --dir (default $TLITE_BENCH, else /work/bench13), or
// to the repository when they start with testdata/. A
// case whose model is missing is reported as missing, not skipped silently.
// For language models the time is per token: prefill (pp) and decode (tg at
// depth p) are separate rows.
"use strict";

const { spawnSync } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const usage = "usage: compare.js [--suite FILE] [--dir DIR] [--tl PATH] [--rounds N] [--only a,b] [--threads N] [--json] [--out FILE]";

function parseArgs(argv) {
  const a = {
    suite: path.join(__dirname, "suite.json"),
    dir: process.env.TLITE_BENCH || "/work/bench13",
    tl: "bin/tl", rounds: 3, only: null, threads: 2, json: false, out: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const x = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${x} needs a value`);
      return argv[++i];
    };
    if (x === "--suite") a.suite = next();
    else if (x === "--dir") a.dir = next();
    else if (x === "--tl") a.tl = next();
    else if (x === "--rounds") a.rounds = Number(next());
    else if (x === "--only") a.only = next().split(",");
    else if (x === "--threads") a.threads = Number(next());
    else if (x === "--json") a.json = true;
    else if (x === "--out") a.out = next();
    else if (x === "-h" || x === "--help") {
      console.log(usage);
      process.exit(0);
    } else throw new Error(`unexpected argument ${x}\n${usage}`);
  }
  if (!Number.isInteger(a.rounds) || a.rounds < 1) throw new Error("--rounds must be a positive integer");
  if (!fs.existsSync(a.tl)) throw new Error(`${a.tl}: no tl binary (build it: go build -o bin/tl ./tools/tl, or pass --tl)`);
  return a;
}

// where resolves a suite path: testdata/... is the repository's own, the
// rest lives under --dir.
function where(a, m) {
  if (m.startsWith("testdata/")) return path.resolve(__dirname, "..", "..", m);
  return path.resolve(a.dir, m);
}

function loadavg() {
  return os.loadavg()[0];
}

// run starts one measurement process and returns its parsed --json output.
function run(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 64 << 20 });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")}: exit ${r.status}: ${(r.stderr || "").trim().split("\n").slice(-3).join(" | ")}`);
  const s = r.stdout;
  const start = s.indexOf("{");
  if (start < 0) throw new Error(`${cmd}: no JSON in its output`);
  return JSON.parse(s.slice(start));
}

// measure runs one case once in one runtime and returns {rows: {label: ms}, rss, load}.
function measure(a, c, runtime) {
  const model = where(a, runtime === "ort" && c.ort_model ? c.ort_model : c.model);
  const runs = String(c.runs || 10);
  if (c.llm) {
    const { p, n } = c.llm;
    if (runtime === "tlite") {
      const j = run(a.tl, ["bench", "--model", model, "-p", String(p), "-n", String(n), "-r", String(c.runs || 3), "--json"]);
      const pp = j.tests.find((t) => t.name === `pp${p}`);
      const tg = j.tests.find((t) => t.name.startsWith(`tg${n}`));
      if (!pp || !tg) throw new Error(`${c.name}: tl bench gave no pp${p}/tg${n} rows`);
      return { rows: { [`pp${p}`]: 1000 / pp.tok_per_sec.median, [`tg${n} @ d${p}`]: 1000 / tg.tok_per_sec.median }, rss: j.peak_rss_mib };
    }
    const j = run("node", [path.join(__dirname, "llm.js"), model, "-p", String(p), "-n", String(n), "-r", String(c.runs || 3), "--threads", String(a.threads), "--json"]);
    return { rows: { [`pp${p}`]: 1000 / j.pp.tok_per_sec, [`tg${n} @ d${p}`]: 1000 / j.tg.tok_per_sec }, rss: j.max_rss_mib || j.rss_mib };
  }
  const shapeArgs = [];
  for (const [k, v] of Object.entries(c.shapes || {})) shapeArgs.push("--shape", `${k}=${v}`);
  if (runtime === "tlite") {
    const j = run(a.tl, ["bench", model, ...shapeArgs, "-r", runs, "--json"]);
    return { rows: { "": j.median_ms }, rss: j.peak_rss_mib };
  }
  const j = run("node", [path.join(__dirname, "bench.js"), model, ...shapeArgs, "-r", runs, "--threads", String(a.threads), "--json"]);
  return { rows: { "": j.median_ms }, rss: j.max_rss_mib || j.rss_mib };
}

function median(xs) {
  const s = [...xs].sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function main() {
  const a = parseArgs(process.argv.slice(2));
  let suite = JSON.parse(fs.readFileSync(a.suite, "utf8"));
  if (a.only) suite = suite.filter((c) => a.only.includes(c.name));
  const results = [];
  for (const c of suite) {
    const res = { name: c.name, model: c.model, rounds: [], error: null };
    const need = [c.model, c.ort_model].filter(Boolean).map((m) => where(a, m));
    const missing = need.filter((m) => !fs.existsSync(m));
    if (missing.length) {
      res.error = `missing ${missing.join(", ")}`;
      results.push(res);
      process.stderr.write(`${c.name}: ${res.error}\n`);
      continue;
    }
    const load0 = loadavg();
    try {
      for (let r = 0; r < a.rounds; r++) {
        const order = r % 2 === 0 ? ["tlite", "ort"] : ["ort", "tlite"];
        const got = {};
        for (const rt of order) got[rt] = measure(a, c, rt);
        res.rounds.push(got);
        process.stderr.write(`${c.name}: round ${r + 1}/${a.rounds} done (load ${loadavg().toFixed(1)})\n`);
      }
    } catch (e) {
      res.error = e.message;
      process.stderr.write(`${c.name}: ${e.message}\n`);
    }
    res.load = [load0, loadavg()];
    results.push(res);
  }
  const table = [];
  for (const res of results) {
    if (!res.rounds.length) {
      table.push({ case: res.name, error: res.error });
      continue;
    }
    for (const label of Object.keys(res.rounds[0].tlite.rows)) {
      const tl = res.rounds.map((g) => g.tlite.rows[label]);
      const ort = res.rounds.map((g) => g.ort.rows[label]);
      const ratio = res.rounds.map((g) => g.tlite.rows[label] / g.ort.rows[label]);
      table.push({
        case: label ? `${res.name} ${label}` : res.name,
        tlite_ms: median(tl), ort_ms: median(ort),
        ratio: median(ratio), ratio_min: Math.min(...ratio), ratio_max: Math.max(...ratio),
        tlite_rss_mib: median(res.rounds.map((g) => g.tlite.rss)),
        ort_rss_mib: median(res.rounds.map((g) => g.ort.rss)),
        load: res.load, rounds: res.rounds.length, error: res.error,
      });
    }
  }
  const doc = { date: new Date().toISOString(), host: os.hostname(), cpus: os.cpus().length, threads: a.threads, rounds: a.rounds, table };
  if (a.out) {
    fs.writeFileSync(a.out + ".tmp", JSON.stringify(doc, null, 2));
    fs.renameSync(a.out + ".tmp", a.out);
  }
  if (a.json) {
    console.log(JSON.stringify(doc, null, 2));
    return;
  }
  const f = (x, d = 2) => (x === undefined || x === null || Number.isNaN(x) ? "-" : x.toFixed(d));
  const rows = [["case", "tlite ms", "ORT ms", "tlite/ORT time", "RSS tlite/ORT MiB", "load"]];
  for (const t of table) {
    if (t.error && t.tlite_ms === undefined) {
      rows.push([t.case, "-", "-", t.error, "-", "-"]);
      continue;
    }
    rows.push([t.case, f(t.tlite_ms), f(t.ort_ms), `${f(t.ratio)} (${f(t.ratio_min)}-${f(t.ratio_max)})`,
      `${f(t.tlite_rss_mib, 0)} / ${f(t.ort_rss_mib, 0)}`, `${f(t.load[0], 1)}-${f(t.load[1], 1)}`]);
  }
  const w = rows[0].map((_, i) => Math.max(...rows.map((r) => String(r[i]).length)));
  rows.forEach((r, k) => {
    console.log(r.map((x, i) => String(x).padEnd(w[i])).join("  ").trimEnd());
    if (k === 0) console.log(w.map((n) => "-".repeat(n)).join("  "));
  });
  console.log(`\n${a.rounds} rounds alternated, ${a.threads} ORT threads; ms per run (language models: per token); ` +
    "ratio < 1 means tlite is faster; load = 1-minute load average before-after the case");
}

try {
  main();
} catch (e) {
  console.error(e.message || e);
  process.exit(1);
}
