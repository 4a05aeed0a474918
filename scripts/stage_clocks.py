#!/usr/bin/env python3
"""stage_clocks.py: phase 1's (or the state pass's) critical path, stage by stage, from one forward's per-warp stamps.

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

A state-pass file (PATH.state, stage_clocks.h's state::kMagic: the sm_90a state pass's two warpgroups, chain and
output, stamping seven points of each chunk step) gets, as medians over the recorded steps: the step's length and
its three spans (to phase A's barrier's release, to phase B's, then to the next step's first stamp), which
warpgroup arrives last at each barrier and by how much, and for each warpgroup the parts of its phases: the wait for
a group's copies (from its work's end to its arrival: the fence and the mbarrier's wait), its products (from the
barrier's release to their end) and the work after them.

usage: python3 scripts/stage_clocks.py PATH [--skip N]   (--skip: each CTA's first N tasks or steps left out, default 1)
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


STATE_MAGIC = b"KDASTC1\0"  # stage_clocks.h state::kMagic
# state::kStamps's points of a step, and the warps of each warpgroup (state_wgmma.cu: warps 0-3 chain, 4-7 output).
STATE_POINTS = ["start", "A arrival", "A products", "A work", "B arrival", "B products", "B work"]
GROUPS = [("chain", range(0, 4)), ("output", range(4, 8))]


def read_any(path):
    """(kind, ctas, warps, tasks, stamps, values), kind "phase1" or "state" from the file's magic."""
    with open(path, "rb") as f:
        if f.read(8) != STATE_MAGIC:
            return ("phase1",) + read(path)
        ctas, warps, steps, stamps, values = _sizes_and_stamps(path, f)
    if warps != 8 or stamps != len(STATE_POINTS):
        raise SystemExit(f"stage_clocks.py: {path}: {warps} warps x {stamps} stamps, not the state pass's 8 x "
                         f"{len(STATE_POINTS)}")
    return "state", ctas, warps, steps, stamps, values


def summarize_state(ctas, warps, steps, stamps, values, skip=1):
    """(spans, parts): the step's spans as one dict each (name, cycles, n; for the barriers the warpgroup last there,
    how often, and its lead over the other's last warp), and each warpgroup's parts (dicts of name -> median cycles,
    None where that warpgroup stamps no products)."""
    def at(c, w, t, s):
        return values[((c * warps + w) * steps + t) * stamps + s]

    span = collections.defaultdict(list)
    last = {"A": [], "B": []}
    lead = {"A": [], "B": []}
    parts = {g: collections.defaultdict(list) for g, _ in GROUPS}
    for c in range(ctas):
        for t in range(skip, steps - 1):
            rows = [[at(c, w, t, s) for s in range(stamps)] for w in range(warps)]
            nxt = [at(c, w, t + 1, 0) for w in range(warps)]
            if any(row[s] == 0 for row in rows for s in (0, 1, 3, 4, 6)) or any(v == 0 for v in nxt):
                continue  # a step not recorded whole (the chain's last, or past the recorded ones)
            start, end = min(row[0] for row in rows), min(nxt)
            rel_a, rel_b = max(row[1] for row in rows), max(row[4] for row in rows)
            span["A: to its barrier"].append(rel_a - start)
            span["B: to its barrier"].append(rel_b - rel_a)
            span["tail: to the next step"].append(end - rel_b)
            span["step"].append(end - start)
            for bar, s in (("A", 1), ("B", 4)):
                arrive = {g: max(rows[w][s] for w in ws) for g, ws in GROUPS}
                g_last = max(arrive, key=arrive.get)
                last[bar].append(g_last)
                lead[bar].append(arrive[g_last] - min(arrive.values()))
            for g, ws in GROUPS:
                def gmax(s):
                    return max(rows[w][s] for w in ws)
                d = parts[g]
                d["A: copies' wait"].append(gmax(1) - min(rows[w][0] for w in ws))
                d["B: copies' wait"].append(gmax(4) - gmax(3))
                if all(rows[w][2] for w in ws):
                    d["A: products"].append(gmax(2) - rel_a)
                    d["A: work after"].append(gmax(3) - gmax(2))
                else:
                    d["A: work"].append(gmax(3) - rel_a)
                if all(rows[w][5] for w in ws):
                    d["B: products"].append(gmax(5) - rel_b)
                    d["B: work after"].append(gmax(6) - gmax(5))
                else:
                    d["B: work"].append(gmax(6) - rel_b)
    spans = []
    for name in ("A: to its barrier", "B: to its barrier", "tail: to the next step", "step"):
        v = span[name]
        r = {"name": name, "n": len(v), "cycles": statistics.median(v) if v else None}
        bar = name[0] if name[:2] in ("A:", "B:") else None
        if bar and last[bar]:
            g, k = collections.Counter(last[bar]).most_common(1)[0]
            r.update(last_group=g, last_share=k / len(last[bar]), lead=statistics.median(lead[bar]))
        spans.append(r)
    out = {g: {k: statistics.median(v) for k, v in d.items() if v} for g, d in parts.items()}
    return spans, out


def print_state(path, ctas, steps, spans, parts):
    print(f"{path}: the state pass, {ctas} CTAs x 8 warps, up to {steps} steps a CTA; medians over the complete steps")
    print(f"{'span':<24} {'steps':>6} {'cycles':>8}  {'last at the barrier':>20} {'(how often)':>11} {'lead':>6}")
    for r in spans:
        if not r["n"]:
            print(f"{r['name']:<24} {0:>6}  (no complete step)")
            continue
        tail = (f"  {r['last_group']:>20} {100 * r['last_share']:>10.0f}% {r['lead']:>6.0f}"
                if "last_group" in r else "")
        print(f"{r['name']:<24} {r['n']:>6} {r['cycles']:>8.0f}{tail}")
    names = ["A: copies' wait", "A: products", "A: work after", "A: work", "B: copies' wait", "B: products",
             "B: work after", "B: work"]
    print(f"{'part (cycles)':<20} " + " ".join(f"{g:>8}" for g, _ in GROUPS))
    for n in names:
        if any(n in parts[g] for g, _ in GROUPS):
            print(f"{n:<20} " + " ".join(f"{parts[g][n]:>8.0f}" if n in parts[g] else f"{'-':>8}" for g, _ in GROUPS))


def read(path):
    """(ctas, warps, tasks, stamps, values): the header's four sizes and the flat uint64 stamps."""
    with open(path, "rb") as f:
        magic = f.read(8)
        if magic in OLD:
            raise SystemExit(f"stage_clocks.py: {path} is not a stage-clock file of this format ({OLD[magic]}); "
                             "record it again with a current build")
        if magic != MAGIC:
            raise SystemExit(f"stage_clocks.py: {path} is not a stage-clock file (no {MAGIC!r} header)")
        return _sizes_and_stamps(path, f)


def _sizes_and_stamps(path, f):
    """The rest of a file after its magic: four int32 sizes (CTAs, warps, tasks or steps, stamps) and the uint64
    stamps, whose count must be their product."""
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
    kind, ctas, warps, tasks, stamps, values = read_any(a.path)
    if kind == "state":
        print_state(a.path, ctas, tasks, *summarize_state(ctas, warps, tasks, stamps, values, a.skip))
        return 0
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
