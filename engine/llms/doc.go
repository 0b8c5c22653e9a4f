// Package llms is the memory system of LLMS ("LLM as a System Service on
// Mobile Devices", systems-spec §1): persistent contexts whose KV caches
// are kept as 16-token chunks, compressed by attention tolerance, swapped
// to flash ahead of time and restored by a swap–recompute pipeline.
//
// A Manager drives one kv.State (the device working set: the installed
// context, outside the budget). Install makes a context the installed one
// (the switch: reclaim, resident chunks dequantized and uploaded, missing
// chunks read from flash or recomputed from their token ids at their
// global positions); Commit ends a call (density from the engine's
// attention statistics, re-ranking, encoding of changed chunks, the
// ahead-of-time swap-out); Drop deletes a context. State lives in a
// directory: one layer-major swap file and one checksummed
// ctx-<id>.json per context, reloaded by NewManager after a restart.
//
// Mechanisms and where they are:
//
//   - codec.go: base INT8 per token and KV head (asymmetric min/max, fp16
//     scale and zero), channel-wise 4- and 2-bit over a chunk's tokens atop
//     the INT8, packed with shifts; EncodedSize is the exact byte count with
//     metadata and EffectiveBits reports it per value (9, 6 and 4 bits for
//     16 tokens of 32-dim heads). LevelFP stores the buffer's bytes
//     (lossless; exactness tests, VLLM-S).
//   - density.go: information density with the spec's erratum reading
//     (mean of a column over its unmasked rows, averaged over layers and
//     query heads), running sums and counts per token across forwards and
//     calls; Assign is the exact discrete scan (weight a parameter, default
//     the literal 1/ratio_w) or, for other ladders or ratios, enumeration
//     of band splits at or under the global ratio.
//   - lctru.go: LCTRU sub-queues per level, heaviest first, LRU within;
//     working-set locking of the installed context.
//   - store.go, layout.go: layer-major swap files (region l holds a
//     fixed-size slot per chunk, sized for the top level plus metadata and
//     aligned to 512 bytes, so level changes rewrite in place), runs of
//     consecutive chunks coalesced into one O_DIRECT read per region,
//     ctx-<id>.json written atomically (temporary file, sync, rename) with
//     a SHA-256 line; a per-chunk CRC catches torn in-place rewrites.
//   - planner.go: T_re(x) = a·x + b and T_IO = c·bytes + e·reads fitted
//     at NewManager; greedy: recompute heaviest chunks first, scan X.
//   - manager.go, commit.go: Install, Commit, Drop, Stats; the budget
//     counts chunk data with metadata, per-chunk bookkeeping and the
//     contexts' memory-resident fragments (token ids, density sums).
//
// Deviations from the spec, named:
//
//   - The pipeline's execution (gate.go): when a restore both loads and
//     recomputes, reads are submitted region by region (one model layer
//     of the layer-major file each) and the recompute forward starts at
//     once; at each layer's attention a layer gate
//     (engine.Session.SetLayerGate, a narrower H2 that reads nothing back
//     from the device) waits for that layer's reads only and writes that
//     layer's loaded rows. Chunk checksums span every layer, so they are
//     verified after the forward; a bad chunk is recomputed afterwards
//     with the recomputed chunks after it. Config.Ungated keeps the
//     spec's "cheaper variant" as the control: the chunks positioned
//     before the last recomputed one are installed first and only later
//     reads overlap the forward. The planner costs the cheaper variant
//     (IO(pre) + max(T_re, IO(post))) and also reports the paper's
//     max(T_re, T_IO), which is what the gate aims at. Within a level,
//     earlier chunks are recomputed first so more I/O can overlap.
//   - T_IO has a per-read term (our addition; storage here is IOPS-bound).
//   - A run read covers whole slots up to its last chunk: compressed chunks
//     inside a run are read with their slot's padding (one operation
//     instead of several; bytes planned count it).
//   - Recomputed chunks are not put back into the memory pool (their
//     flash copy stays valid); loaded ones are.
//   - Chunks of levels 4 and 2 are quantized from the INT8-dequantized
//     values; a level change re-quantizes from the device's current values.
//   - Density is accumulated from the forwards the caller reports: call
//     Prepare before and Observe after each forward of a call (prefill and
//     every decode step). Restore forwards (recompute) run without
//     statistics and are never counted, to avoid counting rows twice, and
//     neither are the forwards of an Install.
//   - The statistics are added up on the device (kv.State.
//     AccumulateAttentionStats: one small kernel per layer adds each key's
//     probability, summed over the query heads and weighted, into per-slot
//     totals) and Commit reads the totals once per call, so a sampled
//     decode step makes no host read, sync or conversion. Every forward of
//     a call that gathers statistics then counts, announced or not.
//     Config.HostStats reads them back after every observed forward
//     instead (the earlier path; then Commit without Observe takes only the
//     last forward's), the benchmarks' control.
//   - Decode rows are sampled (Config.StatsEvery; tl serve's default 8):
//     statistics cost a second attention-sized kernel per layer, which
//     halved decode speed when gathered at every step. Prefill forwards
//     always gather them; one decode step in StatsEvery does, its rows
//     counted StatsEvery times (Density.AddWeighted) so that decode rows
//     keep their weight against the prefill's in each column's mean. The
//     spec's density is over every row; this is an estimate of it
//     (TestSampledStatsRankChunks bounds how far it ranks chunks from
//     the full one on testdata/longctx).
//   - The literal weight 1/ratio_w is the default, as the spec says; it
//     rewards compressing (flat densities go to the corner n8 = n/3, one
//     dominant chunk keeps everything at 4 bits). WeightRatio is the other.
//   - Ablation modes (llms_nolife: LRU + on-demand swap-out; llms_notol:
//     all chunks INT8; llms_nopipe: restore by I/O only) are LLMS with one
//     mechanism removed.
//   - Baseline modes (lmk, swap, vllm_s, vllm_sq) share the I/O layer and
//     the install path; they swap out on demand (no AoT) and restore by I/O
//     alone (LMK by recompute alone).
//   - No sliding window of its own: Install accepts a history that
//     diverges from the stored one (keeps the chunks wholly inside the
//     common prefix, recomputes the rest), which is how a caller's
//     StreamingLLM window (sink tokens kept, the rest re-positioned) is
//     restored; a history longer than the cache is refused.
//   - Forwards are split at Config.MaxStep tokens in position order (exact:
//     each piece attends what earlier pieces wrote).
//   - A second tolerance statistic, ours: a token's peak, the largest
//     probability any one row, query head and layer gave it (kept beside
//     the sums by both statistics kernels: engine.AttnStats.Peak and
//     AttnStatsTotal.Peak; Density.Peak, persisted with the sums).
//     Config.Tolerance = TolerancePeak keeps the levels density assigns
//     (the same band sizes, so the same bytes) and places them by the
//     chunks' mean peak; the default stays ToleranceDensity, the paper's
//     (tl serve --tolerance density|peak; ParseTolerance).
//     Why: density is a mean over every row that may attend a token, so
//     a fact that only a later question attends, sharply, among hundreds
//     of rows of filler that ignore it, ranks low and is compressed
//     hardest; its peak is high. The quality experiments compare both
//     (PolicyPeak, PolicyPeakRatio, and in Recall the query-peak
//     placements, peaks over the question's rows only); the measurements
//     are in engine/serve/RESULTS.md.
package llms
