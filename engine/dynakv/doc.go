// Package dynakv keeps a decoder's KV cache on flash and, at every decoding
// step, reads only the clusters of keys the current query needs (DynaKV,
// paper 001; systems-spec §2). It plugs into a session through the
// engine's attention hook (engine.Session.SetAttentionHook, hooks H2 and
// H7): the prompt runs with the fused kernel and is then clustered and
// written out; each later step's attention is computed on the host over the
// retrieved entries, the delayed-split buffers of the retrieved clusters
// and the new entry, and replaces the kernel's.
//
// Mechanisms, with the parameters the paper leaves open marked [ours]:
//
//   - Per (layer, KV head) k-means++ of the prompt's keys, 10 iterations,
//     M₀ = ⌈L₀/25⌉ [ours]; centroids, counts and running variances
//     (Welford, σ² the mean squared L2 distance) in DRAM.
//   - Retrieval: the score of a cluster is the mean over the GQA group's
//     query heads of q_h·r_j [ours]; clusters are taken by descending score
//     until the retrieved entries reach ρ·|K_t| [ours]. No sink or recent
//     tokens are forced in (the new entry is always attended).
//   - Updates (Alg. 1): the new key joins its nearest centroid (L2); if the
//     tentative variance stays under τ_h = λ·p90 of the head's initial
//     cluster variances [ours] it is appended; otherwise the cluster splits
//     in two (2-means, 5 iterations [ours]) when it was retrieved this step,
//     else the entry goes to the cluster's buffer and the split waits until
//     the cluster is retrieved, or until the head's buffers reach B_max = 16
//     [paper] (the largest is then loaded and split). A cluster reaching
//     S_max = 64 entries [ours] is split (loaded first when not resident).
//     Buffered entries are attended iff their cluster is selected
//     (Config.AttendAllBuffers attends all) [ours].
//   - Layout (§5): one file per layer of dual-head pools, 2·S_max slots each;
//     the prompt's clusters are paired by co-retrieval counted from the
//     prompt's own queries over P₀ (greedy max-weight pairing [ours]) and the
//     pools chained so that a pool's second cluster sits next to the most
//     co-retrieved first cluster of the next [ours]. A split keeps one child
//     on the parent's side, rewritten in place, and puts the other on a free
//     partner side or a new pool. Writes are whole 4 KB pages of one
//     cluster: a hot cluster (updated in the last 32 steps [ours], at most
//     64 page buffers per layer [ours]) keeps its last partial page in DRAM
//     and reads merge it; a cold one writes the partial page directly (the
//     write amplification reported).
//   - Reads go through engine/flash (O_DIRECT, reader pool of queue depth
//     ≥ 4): each step's misses for a layer are one batch, adjacent extents
//     coalesced into one block-aligned request.
//   - Cluster cache (§6.2): one byte budget; 25% reserved (FIFO) for
//     clusters updated in the last 16 steps, the rest GreedyDual-Size with
//     H = L + hits/size [ours]; LRU at the same budget for comparison.
//
// Baselines (baseline.go), with honest names: no-cluster (exact token top-k,
// every key read, selected values fetched), static-update (k-means at
// prefill, appends to the nearest cluster forever, sequence-order storage;
// not PQCache: no product quantization) and local-update (ClusterKV-style:
// new entries wait, always attended, in a DRAM window of W = 64 and are
// clustered on their own when it fills).
//
// Pipelines (§6.1), both options: Pipeline 2 (Config.Prefetch,
// prefetch.go) reads the next layer's likely clusters (its selection at
// the previous step, then recently updated clusters [ours]) at the end of
// each layer's hook, bounded at 1.25× the layer's retrieval budget in
// bytes [ours]; the next hook waits for it after scoring and reads the
// rest on demand. Pipeline 1 (Config.CentroidsOnFlash, reps.go) keeps the
// scoring representatives in a per-layer file, written back per step and
// read one layer ahead; the Welford statistics (float64 means included)
// stay in DRAM for the updates, so its DRAM saving is computed for the
// scoring arrays, not measured.
//
// Device memory: the hook owns every decode step's attention, so the
// session's in-place cache need only hold the prompt (for the prompt's
// fused attention) and each step's new row until the hook reads it back:
// DeviceSlots sizes it, and Evaluate and Continuation reuse its slots as
// a ring (position p in slot p mod size); the hook names entries by
// position (engine.AttentionCall.Positions). The retrieved clusters and
// the recent window are attended on the host, from DRAM, not from the
// device cache.
//
// Layout counterfactuals (layout.go) count what the same selections and
// splits would cost in sequence order and in a packed cluster-by-cluster
// layout.
//
// Invariants (CheckInvariant, run after every step by the tests): every
// entry of every (layer, head) is in exactly one place (a cluster's flash
// extent, its page buffer, or its delayed-split buffer), pool sides never
// overlap, no cluster exceeds S_max, and a step attends exactly its
// selected clusters with their buffers.
package dynakv
