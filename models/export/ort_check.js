// Cross-checks exported models against ONNX Runtime, independently of tlite.
//
// The reference outputs in testdata come from PyTorch, so a run through a
// mature ONNX runtime confirms that the *export* is faithful (that a
// mismatch in tlite is tlite's bug, not the exporter's). Debian packages no
// onnxruntime for Python, so this uses the npm build:
//
//   mkdir -p /tmp/ort && cd /tmp/ort && npm install --ignore-scripts onnxruntime-node
//   NODE_PATH=/tmp/ort/node_modules node models/export/ort_check.js testdata/models
//
// (--ignore-scripts skips the optional CUDA download; the CPU library ships
// inside the package.) For every ref/**/manifest.json it runs the model on
// the case's inputs and prints the largest absolute and relative error per
// output; it exits 1 if any output differs by more than atol + rtol*|ref|.
// Models with a model_ext.onnx variant are run through both files.
"use strict";

const fs = require("fs");
const path = require("path");
const ort = require("onnxruntime-node");

const ATOL = 1e-4;
const RTOL = 1e-3;

// Minimal .npy reader: format 1.x/2.x/3.x, little-endian, C order only,
// which is all exportlib.py writes.
function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString("latin1", 0, 6) !== "\x93NUMPY") throw new Error(`${file}: not an .npy file`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const hstart = major === 1 ? 10 : 12;
  const header = buf.toString("latin1", hstart, hstart + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1]
    .split(",").map((s) => s.trim()).filter((s) => s.length).map(Number);
  const body = buf.subarray(hstart + hlen);
  const bytes = new Uint8Array(body).buffer; // copy: typed arrays need alignment
  const kinds = {
    "<f4": ["float32", Float32Array],
    "<i8": ["int64", BigInt64Array],
    "<i4": ["int32", Int32Array],
    "|b1": ["bool", Uint8Array],
  };
  if (!kinds[descr]) throw new Error(`${file}: unsupported dtype ${descr}`);
  const [type, Arr] = kinds[descr];
  return new ort.Tensor(type, new Arr(bytes), shape);
}

function findManifests(dir, out = []) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) findManifests(p, out);
    else if (e.name === "manifest.json") out.push(p);
  }
  return out;
}

async function main() {
  const root = process.argv[2] || "testdata/models";
  let failed = 0;
  for (const mf of findManifests(root).sort()) {
    const caseDir = path.dirname(mf);
    const manifest = JSON.parse(fs.readFileSync(mf, "utf8"));
    // The model directory is the one holding ref/.
    let modelDir = caseDir;
    while (path.basename(modelDir) !== "ref") modelDir = path.dirname(modelDir);
    modelDir = path.dirname(modelDir);
    const feeds = {};
    for (const i of manifest.inputs) feeds[i.name] = readNpy(path.join(caseDir, i.file));
    const variants = [manifest.onnx];
    if (fs.existsSync(path.join(modelDir, "model_ext.onnx"))) variants.push("model_ext.onnx");
    for (const v of variants) {
      const sess = await ort.InferenceSession.create(path.join(modelDir, v));
      const got = await sess.run(feeds);
      for (const o of manifest.outputs) {
        const ref = readNpy(path.join(caseDir, o.file));
        const g = got[o.name];
        if (g.dims.join(",") !== ref.dims.join(",")) {
          console.log(`FAIL ${mf} ${v} ${o.name}: shape ${g.dims} != ${ref.dims}`);
          failed++;
          continue;
        }
        let maxAbs = 0, maxRel = 0, bad = 0;
        for (let k = 0; k < ref.data.length; k++) {
          const r = Number(ref.data[k]), x = Number(g.data[k]);
          const d = Math.abs(r - x);
          maxAbs = Math.max(maxAbs, d);
          maxRel = Math.max(maxRel, d / Math.max(Math.abs(r), 1e-6));
          if (!(d <= ATOL + RTOL * Math.abs(r))) bad++;
        }
        const tag = bad ? "FAIL" : "ok  ";
        if (bad) failed++;
        console.log(`${tag} ${path.relative(root, caseDir)} ${v} ${o.name}: max abs ${maxAbs.toExponential(2)} max rel ${maxRel.toExponential(2)}${bad ? ` (${bad} elements out of tolerance)` : ""}`);
      }
    }
  }
  console.log(`${failed ? "some outputs FAILED" : "all outputs match"}`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => { console.error(e); process.exit(1); });
