// Package trace replays a workload of calls against a system on a virtual
// clock while timing every operation for real (systems-spec §0.3, hook H8).
//
// Arrivals come from a seeded Poisson process; each names a context, chosen
// by one of the LLMS paper's switching patterns (random, markov, gaussian;
// spec §1b–1c), and the number of tokens the call adds. The gap between
// arrivals is virtual: a trace of 72 hours at one call per five minutes
// replays in the time its operations take. Each operation (the switch that
// installs the context, the call itself, the background work after it) is
// run and measured on the real clock, and its duration advances the virtual
// one. Background work — LLMS's ahead-of-time swap-out — is placed in the
// gap after its call; if it has not finished by the next arrival, that call
// waits, and the wait is recorded and counted in its switch latency, so a
// trace with short gaps exposes a hidden AoT cost (spec §1d risk 6).
//
// How the systems use it: `tl bench serve` wraps LLMS and each baseline
// (LMK, whole-context swap, VLLM-S, VLLM-SQ) in a [System] sharing one
// engine and one flash I/O layer, generates one arrival list per context
// count with [Generate], replays it against every system with [Run], and
// prints [Report] as a table or JSON ({"systems": {"llms": {"4": {...}}}}
// with switch_ms_mean and switch_ms_p95). A system names the parts of its
// switch latency ("reclaim", "io", "recompute", "upload") in [Parts] and
// reports its flash traffic through [IOCounter]. ELMS replays its request
// traces the same way. The package imports nothing from the engine.
package trace
