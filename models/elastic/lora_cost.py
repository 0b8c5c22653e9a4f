#!/usr/bin/python3
"""CPU time per decoded token of an elastic model's levels with and without
their LoRA adapters (models/elastic/README.md, "Cost of the side branch").

    cd DIR_WITH_TL && /usr/bin/python3 lora_cost.py TL MODEL LORADIR 20,20+lora,100,100+lora ROUNDS

For each round and configuration it runs `TL bench -p 16 -n 32` and
`-n 160` (one repetition each) and takes the user + system time of the
child (the OpenCL runtime's threads included). The difference over the 128
extra tokens cancels loading, kernel builds and prefill. Wall-clock time
is not used: on a shared, loaded machine it measures the load. Prints each
round's values, the medians and the per-round differences with - without.
"""

import os
import resource
import statistics
import subprocess
import sys


def cpu_of(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    if len(sys.argv) != 6:
        raise SystemExit(__doc__)
    tl, model, lora, cfgs, rounds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(","), int(sys.argv[5])
    per = {c: [] for c in cfgs}
    for r in range(rounds):
        for c in cfgs:
            t = {}
            for n in (32, 160):
                t[n] = cpu_of(["nice", "-n", "10", tl, "bench", "--model", model, "-p", "16", "-n", str(n), "-r", "1",
                               "-w", "0", "--level", c, "--lora", lora, "--json"])
            per[c].append((t[160] - t[32]) / 128 * 1000)
        print(f"round {r}: load {os.getloadavg()}:", {c: round(per[c][-1], 2) for c in cfgs}, flush=True)
    for c in cfgs:
        print(f"{c}: CPU ms/token median {statistics.median(per[c]):.2f} of {['%.2f' % v for v in per[c]]}")
        if not c.endswith("+lora") and c + "+lora" in per:
            d = [b - a for a, b in zip(per[c], per[c + "+lora"])]
            print(f"{c}+lora - {c}: median {statistics.median(d):+.2f}, min {min(d):+.2f}, max {max(d):+.2f}")


if __name__ == "__main__":
    main()
