#!/usr/bin/env python3
"""ncu_stages.py: where a kernel's time goes, stage by stage, from an Nsight Compute source-page CSV.

Reads the gzipped per-SASS-instruction CSV that scripts/gpu_ab.sh --ncu writes (ncu-src-BUILD.csv.gz) and splits
each kernel's SASS at its BAR.SYNC instructions: in kernels built as barrier-separated stages (chunk_prepare.cu
S0..S5, chunk_state.cu) a segment is roughly a stage, so the table says which stage holds the warp-stall samples,
the executed instructions, the top opcodes and the top stall reasons. Segments under --min percent of both are
left out. SASS order follows the source's only roughly (loops with barriers repeat segments); the per-CUDA-line
CSV (ncu-cu-BUILD.csv.gz) names lines exactly.

usage: python3 scripts/ncu_stages.py bench/results/.../ncu-src-bf16x3.csv.gz [--min 1.0]
"""
import argparse
import collections
import csv
import gzip


def kernels(path):
    """Yields (kernel name, rows as dicts) for every kernel section of the CSV."""
    with gzip.open(path, "rt") as f:
        lines = f.read().split("\n")
    sections, cur = [], None
    for line in lines:
        if line.startswith('"Kernel Name"'):
            cur = [line]
            sections.append(cur)
        elif cur is not None and line:
            cur.append(line)
    for sec in sections:
        name = next(csv.reader([sec[0]]))[1]
        rows = list(csv.reader(sec[1:]))
        header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
        yield name, [dict(zip(header, r)) for r in body]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv_gz")
    ap.add_argument("--min", type=float, default=1.0, help="hide segments under this percent of samples and instructions")
    args = ap.parse_args()
    for name, rows in kernels(args.csv_gz):
        stall_cols = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c] if rows else []
        segs = collections.OrderedDict()
        seg = 0
        for i, r in enumerate(rows):
            d = segs.setdefault(seg, {"first": i, "samples": 0, "inst": 0, "ops": collections.Counter(),
                                      "stalls": collections.Counter()})
            n = int(r["Instructions Executed"] or 0)
            d["samples"] += int(r["Warp Stall Sampling (All Samples)"] or 0)
            d["inst"] += n
            words = r["Source"].split()
            op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")
            d["ops"][op.split(".")[0]] += n
            for c in stall_cols:
                d["stalls"][c[len("stall_"):]] += int(r[c] or 0)
            if "BAR.SYNC" in r["Source"]:
                seg += 1
        tot_s = sum(d["samples"] for d in segs.values()) or 1
        tot_i = sum(d["inst"] for d in segs.values()) or 1
        print(f"{name[:110]}\n  {tot_s} stall samples, {tot_i / 1e6:.1f} M warp instructions, {len(rows)} SASS lines")
        for k, d in segs.items():
            ps, pi = 100 * d["samples"] / tot_s, 100 * d["inst"] / tot_i
            if ps < args.min and pi < args.min:
                continue
            ops = ", ".join(f"{o}:{c / 1e6:.1f}M" for o, c in d["ops"].most_common(5))
            st = sum(d["stalls"].values()) or 1
            stalls = ", ".join(f"{s}:{100 * v / st:.0f}%" for s, v in d["stalls"].most_common(3))
            print(f"  seg {k:3d} (SASS line {d['first']:5d}): samples {ps:5.1f}%  instructions {pi:5.1f}%  "
                  f"| {ops} | {stalls}")


if __name__ == "__main__":
    main()
