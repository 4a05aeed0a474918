# phase_ranges.py: --range arguments for chunk_grad.cu's phases, from its "// ---- Pn" markers (each to the line before the next).
import re, sys
lines = open(sys.argv[1]).read().split("\n")
marks = [(i, m.group(1)) for i, l in enumerate(lines, 1) for m in [re.search(r"// ---- (P\d+[ab]?)", l)] if m]
for k, (i, name) in enumerate(marks):
    hi = marks[k + 1][0] - 1 if k + 1 < len(marks) else len(lines)
    print(f"--range {name}=chunk_grad.cu:{i}-{hi}", end=" ")
