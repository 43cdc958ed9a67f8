#!/usr/bin/env python3
"""Summarise ab.sh's raw lines: per case (and numerics mode), each build's
median of the round medians, its ratio to the first build, the rounds'
spread; per build the geomean of those ratios and of x_floor.

    python3 bench/scripts/ab_summary.py ab.txt
"""
import math
import statistics
import sys
from collections import defaultdict


def main(path):
    times = defaultdict(list)  # (build, key) -> median_us per round
    xfl = defaultdict(list)    # (build, key) -> x_floor per round
    bad = []
    builds, keys = [], []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) < 9 or p[0].startswith("#"):
                continue
            build, _rnd, nm, case, layout, med, _floor, xf, check = p[:9]
            key = f"{case} {layout} {nm}"
            if build not in builds:
                builds.append(build)
            if key not in keys:
                keys.append(key)
            times[build, key].append(float(med))
            xfl[build, key].append(float(xf))
            if check != "ok":
                bad.append(line.strip())
    if not builds:
        sys.exit(f"{path}: no lines")
    base = builds[0]
    w = max(len(k) for k in keys)
    print(f"{'case layout numerics':{w}s}  " + "  ".join(f"{b:>22s}" for b in builds))
    ratios = defaultdict(list)
    for k in keys:
        cells = []
        a = times.get((base, k))
        for b in builds:
            t = times.get((b, k))
            if not t:
                cells.append(f"{'-':>22s}")
                continue
            m = statistics.median(t)
            cell = f"{m:8.1f} ({min(t):.1f}-{max(t):.1f})"
            if b != base and a:
                r = m / statistics.median(a)
                ratios[b].append(r)
                cell += f" {r:.3f}"
            cells.append(f"{cell:>22s}")
        print(f"{k:{w}s}  " + "  ".join(cells))
    for b in builds:
        xs = [statistics.median(xfl[b, k]) for k in keys if xfl.get((b, k))]
        line = f"{b}: x_floor geomean {math.exp(sum(map(math.log, xs)) / len(xs)):.3f}"
        if ratios[b]:
            g = math.exp(sum(map(math.log, ratios[b])) / len(ratios[b]))
            line += f", time / {base} geomean {g:.3f} over {len(ratios[b])} cases"
        print(line)
    for line in bad:
        print("CHECK FAILED:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
