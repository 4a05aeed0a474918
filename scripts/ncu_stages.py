#!/usr/bin/env python3
"""ncu_stages.py: where a kernel's time goes, stage by stage, from an Nsight Compute source-page CSV.

Reads the gzipped per-SASS-instruction CSV that scripts/gpu_ab.sh --ncu writes (ncu-src-BUILD.csv.gz) and splits
each kernel's SASS at its BAR.SYNC instructions: in kernels built as barrier-separated stages (chunk_prepare.cu
S0..S5, chunk_state.cu) a segment is roughly a stage, so the table says which stage holds the warp-stall samples,
the executed instructions, the top opcodes and the top stall reasons. Segments under --min percent of both are
left out. SASS order follows the source's only roughly (loops with barriers repeat segments).

--sass FILE names the CUDA source line of every instruction: FILE is `nvdisasm -gi -c` of the profiled build's
cubin (`cuobjdump -xelf all libkda.so` extracts it; both tools are in the nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm wheels on PyPI). The profile's instructions are matched to the disassembly by offset from the
kernel's first instruction, and every opcode is compared, so a build that is not the profiled one is refused rather
than misattributed. Then the --top lines by samples are listed with their source text (from --source-dir, e.g. the
archive's source/ folder), innermost line first and, for code inlined from a helper, the kernel-file line it was
inlined at. (ncu's own per-CUDA-line export, `--print-source cuda`, came back with no metric columns.)
--range NAME=FILE:LO-HI (repeatable, with --sass) then sums samples and instructions over each range of lines of FILE
(a kernel's phases, say), an instruction inlined from a helper counted at the line it was inlined at.
--static KERNEL, with --sass and no profile: the code itself, each function whose mangled name contains KERNEL, its
SASS instructions counted in all and per --range (static, not executed; session 28 found the gradient pass's time
tracking its code size).

usage: python3 scripts/ncu_stages.py bench/results/.../ncu-src-bf16x3.csv.gz [--min 1.0]
       python3 scripts/ncu_stages.py ncu-src-B.csv.gz --sass prepare.sass --source-dir /tmp/ab/B/source [--top 40]
         [--range P4=chunk_grad.cu:230-294 --range P6=chunk_grad.cu:495-560 ...]
       python3 scripts/ncu_stages.py --static grad_kernelILi128ELi128 --sass grad.sass [--range ...]
"""
import argparse
import collections
import csv
import gzip
import os
import re
import sys


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


LINE = re.compile(r'//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')
INST = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;')


def disassembly(path):
    """{mangled function: [(offset, instruction text, (file, line), (inlined-at file, line) or None)]} from
    `nvdisasm -gi -c`."""
    funcs, cur, where, at = {}, None, None, None
    for raw in open(path):
        m = re.match(r"\.text\.(\S+):", raw)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        m = LINE.search(raw)
        if m:
            where = (m.group(1), int(m.group(2)))
            at = (m.group(3), int(m.group(4))) if m.group(3) else None
            continue
        m = INST.search(raw)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(2).strip(), where, at))
    return funcs


def opcode(text):
    words = text.split()
    op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")
    return op


def parse_range(text):
    """NAME=FILE:LO-HI -> (NAME, FILE, LO, HI)."""
    m = re.fullmatch(r"([^=]+)=([^:]+):(\d+)-(\d+)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"--range: expected NAME=FILE:LO-HI, got {text!r}")
    return m.group(1), m.group(2), int(m.group(3)), int(m.group(4))


def by_line(name, rows, funcs, source_dir, top, ranges=()):
    """Samples and instructions per CUDA source line, the profile matched to the disassembly instruction by
    instruction."""
    # ncu names the kernel demangled; the disassembly mangled: pick the function whose instruction count and opcodes
    # match the profile's.
    base = int(rows[0]["Address"], 16)
    prof = {int(r["Address"], 16) - base: r for r in rows}
    match = None
    for fname, insts in funcs.items():
        if len(insts) < len(rows):
            continue
        offsets = {i[0]: i[1] for i in insts}
        if all(o in offsets and opcode(offsets[o]) == opcode(r["Source"]) for o, r in prof.items()):
            match = (fname, insts)
            break
    if match is None:
        print(f"ncu_stages: no function of the disassembly matches {name[:80]} instruction by instruction (a "
              "different build from the profiled one, or its cubin not given?)", file=sys.stderr)
        return False
    per = collections.defaultdict(lambda: {"samples": 0, "inst": 0, "stalls": collections.Counter(), "at": None})
    ranged = collections.OrderedDict((rg[0], [0, 0]) for rg in ranges)
    stall_cols = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c]
    for off, text, where, at in match[1]:
        r = prof.get(off)
        if r is None or where is None:
            continue
        d = per[where]
        samples, inst = int(r["Warp Stall Sampling (All Samples)"] or 0), int(r["Instructions Executed"] or 0)
        d["samples"] += samples
        d["inst"] += inst
        f, n = at or where
        for rname, rfile, lo, hi in ranges:
            if os.path.basename(f) == rfile and lo <= n <= hi:
                ranged[rname][0] += samples
                ranged[rname][1] += inst
        d["at"] = d["at"] or at
        for c in stall_cols:
            d["stalls"][c[len("stall_"):]] += int(r[c] or 0)
    tot_s = sum(d["samples"] for d in per.values()) or 1
    tot_i = sum(d["inst"] for d in per.values()) or 1
    texts = {}

    def src(f, n):
        if not source_dir:
            return ""
        rel = f.split("/src/", 1)[-1] if "/src/" in f else os.path.basename(f)
        path = os.path.join(source_dir, "src", rel)
        if path not in texts:
            texts[path] = open(path).read().split("\n") if os.path.exists(path) else []
        lines = texts[path]
        return lines[n - 1].strip()[:70] if 0 < n <= len(lines) else ""

    for rname, (samples, inst) in ranged.items():
        print(f"  range {rname}: samples {100 * samples / tot_s:5.1f}%  instructions {100 * inst / tot_i:5.1f}%")
    print(f"  by CUDA line ({match[0][:60]}...), top {top} by samples:")
    for (f, n), d in sorted(per.items(), key=lambda kv: -kv[1]["samples"])[:top]:
        st = sum(d["stalls"].values()) or 1
        stalls = ", ".join(f"{s}:{100 * v / st:.0f}%" for s, v in d["stalls"].most_common(2))
        at = f" (in {os.path.basename(d['at'][0])}:{d['at'][1]})" if d["at"] else ""
        print(f"  {os.path.basename(f)}:{n}{at}  samples {100 * d['samples'] / tot_s:5.1f}%  instructions "
              f"{100 * d['inst'] / tot_i:5.1f}%  | {stalls} | {src(f, n)}")
    return True


def static_count(funcs, key, ranges):
    """Prints the SASS instructions of each function whose name contains key, in all and per range (counted at the
    kernel-file line an inlined helper was inlined at, as by_line's ranges). Returns how many functions matched."""
    n = 0
    for fname, insts in funcs.items():
        if key not in fname:
            continue
        n += 1
        ranged = collections.OrderedDict((rg[0], 0) for rg in ranges)
        for _, _, where, at in insts:
            if where is None:
                continue
            f, line = at or where
            for rname, rfile, lo, hi in ranges:
                if os.path.basename(f) == rfile and lo <= line <= hi:
                    ranged[rname] += 1
        print(f"{fname[:110]}\n  {len(insts)} SASS instructions")
        for rname, c in ranged.items():
            print(f"  range {rname}: {c} instructions")
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv_gz", nargs="?", help="the profile (not with --static)")
    ap.add_argument("--min", type=float, default=1.0, help="hide segments under this percent of samples and instructions")
    ap.add_argument("--sass", action="append", default=[],
                    help="nvdisasm -gi -c output of a cubin of the profiled build (repeatable): attribute lines")
    ap.add_argument("--source-dir", help="the build's source tree (the archive's source/), for the lines' text")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--range", type=parse_range, action="append", default=[], dest="ranges",
                    help="NAME=FILE:LO-HI (repeatable, with --sass): samples and instructions summed over those lines")
    ap.add_argument("--static", metavar="KERNEL", help="count the SASS of the functions whose name contains KERNEL")
    args = ap.parse_args()
    if (args.static is None) == (args.csv_gz is None):
        ap.error("give a profile (csv_gz) or --static KERNEL, not both")
    funcs = {}
    for path in args.sass:
        funcs.update(disassembly(path))
    if args.static is not None:
        if not static_count(funcs, args.static, args.ranges):
            sys.exit(f"ncu_stages: no function of the disassembly has {args.static!r} in its name")
        return
    unmatched = 0
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
        if funcs and rows and not by_line(name, rows, funcs, args.source_dir, args.top, args.ranges):
            unmatched += 1
    if unmatched:
        sys.exit(1)


if __name__ == "__main__":
    main()
