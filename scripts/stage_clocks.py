#!/usr/bin/env python3
"""stage_clocks.py: phase 1's critical path, stage by stage, from the per-warp barrier stamps of one forward.

Reads the file `kda-bench --stage-clocks PATH` writes in a build with -DKDA_STAGE_CLOCKS=ON (scripts/gpu_build.sh
--stage-clocks; layout in src/cuda/generic/stage_clocks.h): for each CTA, warp and the CTA's first tasks, the SM clock
at the task's start and at each warp's arrival at the task loop's nine CTA barriers. A stage is the span between two
barriers. For each stage it prints, as medians over the recorded tasks:
  - cycles: the stage's length, from the barrier before's release to its own's, a barrier's release being its
    last warp's arrival (the first stage starts at the task's first stamp, the last, S5c, runs to the next task's
    first stamp). There are no departure stamps (stage_clocks.h): a clock read after BAR.SYNC.DEFER_BLOCKING issues
    before the barrier releases, and the first format's (KDACLK1), read as departures, had put warps with no work in
    S4 leaving its barrier thousands of cycles before its last arrival (session 59);
  - last warp: the warp that most often arrives last at the stage's barrier (how often, in percent), and its lead:
    how many cycles after the second-to-last arrival it comes, the most that balancing that stage could save;
  - busy: the mean over warps of the share of the stage each spends before arriving (the rest waits at the barrier).
Then the marks inside stages (MARKS; files with them: 14 stamps a warp, 10 without): for each, the median cycles from
its stage's start to the last warp's stamp, that warp (most often) and how many warps stamp it.
ncu's stall samples say where warps wait; this says whose work each barrier waited for. Stamps are SM-local
cycles, compared only within a CTA. Standard library only, so it runs on the device machine beside the file.

usage: python3 scripts/stage_clocks.py PATH [--skip N]   (--skip: each CTA's first N tasks left out, default 1)
"""
import argparse
import array
import collections
import statistics
import struct
import sys

# The stages ending at each of chunk_prepare.cu's cta_barrier(0 .. 8), then the tail to the next task.
STAGES = ["S0 rows staged", "S0b gates", "S2a sums", "S1 diag pairs", "S2b scans", "S3 products", "S4 inverse",
          "S5a T planes", "S5b [W|U]", "S5c copies"]
# chunk_prepare.cu's mark(0 .. 3) (stage_clocks.h kMarks): (name, index of the stage it lies in).
MARKS = [("S4 round 0 done", 6), ("S0 rows staged", 0), ("S0 copies read", 0), ("S5c rows issued", 9)]
MAGIC = b"KDACLK3\0"  # stage_clocks.h kMagic
# Earlier formats, refused with the reason: their stamps meant other things.
OLD = {b"KDACLK1\0": "KDACLK1: departure stamps, read before their barrier's release",
       b"KDACLK2\0": "KDACLK2: marks 1-2 were S4's stage 1 and 2 ends, not S0's"}


def read(path):
    """(ctas, warps, tasks, stamps, values): the header's four sizes and the flat uint64 stamps."""
    with open(path, "rb") as f:
        magic = f.read(8)
        if magic in OLD:
            raise SystemExit(f"stage_clocks.py: {path} is not a stage-clock file of this format ({OLD[magic]}); "
                             "record it again with a current build")
        if magic != MAGIC:
            raise SystemExit(f"stage_clocks.py: {path} is not a stage-clock file (no {MAGIC!r} header)")
        ctas, warps, tasks, stamps = struct.unpack("<4i", f.read(16))
        values = array.array("Q")
        values.frombytes(f.read())
    if len(values) != ctas * warps * tasks * stamps:
        raise SystemExit(f"stage_clocks.py: {path} holds {len(values)} stamps, its header says "
                         f"{ctas} x {warps} x {tasks} x {stamps}")
    return ctas, warps, tasks, stamps, values


def summarize(ctas, warps, tasks, stamps, values, skip=1):
    """(stages, marks): one dict a stage (name, cycles, last_warp, last_share, lead, busy, n) over tasks whose barrier
    stamps are complete, and one a mark (name, cycles from its stage's start to the last warp's stamp, last_warp,
    warps, n) over the same tasks."""
    nbar = len(STAGES) - 1
    nmarks = stamps - 1 - nbar
    if nmarks not in (0, len(MARKS)):
        raise SystemExit(f"stage_clocks.py: {stamps} stamps a warp, neither {1 + nbar} (barriers) nor "
                         f"{1 + nbar + len(MARKS)} (barriers and marks)")

    def at(c, w, t, s):
        return values[((c * warps + w) * tasks + t) * stamps + s]

    per_stage = [collections.defaultdict(list) for _ in STAGES]
    per_mark = [collections.defaultdict(list) for _ in range(nmarks)]
    for c in range(ctas):
        for t in range(skip, tasks - 1):
            rows = [[at(c, w, t, s) for s in range(stamps)] for w in range(warps)]
            nxt = [at(c, w, t + 1, 0) for w in range(warps)]
            if any(v == 0 for row in rows for v in row[:1 + nbar]) or any(v == 0 for v in nxt):
                continue  # a task not recorded whole (past the CTA's last, or a barrier this path does not stamp)
            start = min(row[0] for row in rows)
            # barrier k's release: its last arrival
            release = [max(row[1 + k] for row in rows) for k in range(nbar)]
            for i in range(nmarks):
                k = MARKS[i][1]
                begin = start if k == 0 else release[k - 1]
                stamped = [(row[1 + nbar + i], w) for w, row in enumerate(rows) if row[1 + nbar + i]]
                if stamped:
                    last, w = max(stamped)
                    per_mark[i]["cycles"].append(last - begin)
                    per_mark[i]["last"].append(w)
                    per_mark[i]["warps"].append(len(stamped))
            for k in range(nbar + 1):
                if k < nbar:
                    arrive = [row[1 + k] for row in rows]
                    end = release[k]
                else:
                    arrive = nxt
                    end = min(nxt)
                begin = start if k == 0 else release[k - 1]
                before = [row[0] for row in rows] if k == 0 else [begin] * warps  # each warp's start of the stage
                length = end - begin
                if length <= 0:
                    continue
                order = sorted(range(warps), key=lambda w: arrive[w])
                d = per_stage[k]
                d["cycles"].append(length)
                d["last"].append(order[-1])
                d["lead"].append(arrive[order[-1]] - arrive[order[-2]])
                d["busy"].append(statistics.fmean(min(1.0, max(0.0, (arrive[w] - before[w]) / length))
                                                  for w in range(warps)))
    out = []
    for name, d in zip(STAGES, per_stage):
        if not d["cycles"]:
            out.append({"name": name, "n": 0})
            continue
        last, count = collections.Counter(d["last"]).most_common(1)[0]
        out.append({"name": name, "n": len(d["cycles"]), "cycles": statistics.median(d["cycles"]),
                    "last_warp": last, "last_share": count / len(d["last"]), "lead": statistics.median(d["lead"]),
                    "busy": statistics.fmean(d["busy"])})
    marks = []
    for (name, k), d in zip(MARKS, per_mark):
        if not d["cycles"]:
            marks.append({"name": name, "stage": STAGES[k], "n": 0})
            continue
        last, _ = collections.Counter(d["last"]).most_common(1)[0]
        marks.append({"name": name, "stage": STAGES[k], "n": len(d["cycles"]),
                      "cycles": statistics.median(d["cycles"]), "last_warp": last,
                      "warps": statistics.median(d["warps"])})
    return out, marks


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path")
    ap.add_argument("--skip", type=int, default=1, help="each CTA's first N tasks left out (cold caches)")
    a = ap.parse_args(argv)
    ctas, warps, tasks, stamps, values = read(a.path)
    rows, marks = summarize(ctas, warps, tasks, stamps, values, a.skip)
    total = sum(r.get("cycles", 0) for r in rows)
    print(f"{a.path}: {ctas} CTAs x {warps} warps, up to {tasks} tasks a CTA; medians over the complete tasks")
    print(f"{'stage':<16} {'tasks':>6} {'cycles':>8} {'share':>6}  {'last warp':>9} {'(how often)':>11} "
          f"{'lead':>6} {'busy':>5}")
    for r in rows:
        if not r["n"]:
            print(f"{r['name']:<16} {0:>6}  (no complete task)")
            continue
        print(f"{r['name']:<16} {r['n']:>6} {r['cycles']:>8.0f} {100 * r['cycles'] / total:>5.1f}%  "
              f"{r['last_warp']:>9} {100 * r['last_share']:>10.0f}% {r['lead']:>6.0f} {100 * r['busy']:>4.0f}%")
    print(f"{'sum of medians':<16} {'':>6} {total:>8.0f}")
    if marks:
        print(f"{'mark':<16} {'tasks':>6} {'cycles':>8}  {'into stage':<16} {'last warp':>9} {'warps':>6}")
        for m in marks:
            if not m["n"]:
                print(f"{m['name']:<16} {0:>6}  (not stamped)")
                continue
            print(f"{m['name']:<16} {m['n']:>6} {m['cycles']:>8.0f}  {m['stage']:<16} {m['last_warp']:>9} "
                  f"{m['warps']:>6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
