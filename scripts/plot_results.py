"""plot_results.py: draws benchmark results (bench/results/*.json) as a PNG: per prefill workload, kda's median time,
the peers' (FLA measured in the same lease where the files have them, FlashKDA's published H200 figure as a fixed
reference, labelled as such) and the memory floor measured in the same run; and, when the files have decode
workloads, kda's decode time (and FLA's) against the floor per batch size.

usage: python3 scripts/plot_results.py RESULTS.json [RESULTS.json ...] [--peers bench_torch.json] [--out PNG]
  RESULTS: kda-bench's JSON, or scripts/bench_torch.py's (kda's torch op and FLA in one file: its FLA records are the
           peers); several files (bench_torch's prefill and decode parts, say) draw as one figure, beside the first
           unless --out says otherwise.
  --peers: scripts/bench_torch.py's JSON from the same lease as a kda-bench file (its FLA records are drawn); its
           records are stored in that results file under "peers" (with its command), so the committed file holds
           both sides of every ratio.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# FlashKDA's published H200 figures (a fixed column) and FLA's (only where the file has no FLA figure of its own).
from published import FLA_SPEC_MS, FLASHKDA_MS  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+")
    ap.add_argument("--out", default="")
    ap.add_argument("--peers", default="")
    args = ap.parse_args()
    files = []
    for path in args.results:
        with open(path) as f:
            files.append(json.load(f))
    d = files[0]
    if args.peers:
        with open(args.peers) as f:
            pj = json.load(f)
        d["peers"] = pj["results"]
        d["peers_command"] = pj.get("command", "")
        with open(args.results[0], "w") as f:
            json.dump(d, f, indent=1)
    records = [r for x in files for r in x["results"] if r.get("median_us")]
    is_fla = lambda r: r.get("impl", "").startswith("fla")  # noqa: E731
    # kda's own rows: not FLA's, and not the training-only saved variant.
    ours = [r for r in records if not is_fla(r) and not r.get("impl", "").endswith("-saved")]
    prefill = [r for r in ours if r["workload"] in FLASHKDA_MS]
    decode = [r for r in ours if r["workload"].startswith("decode-")]
    peers = [p for x in files for p in x.get("peers", []) if p.get("impl", "fla").startswith("fla")
             and p.get("median_us")] + [r for r in records if is_fla(r)]
    fla = {p["workload"]: p["median_us"] / 1000 for p in peers}
    fla_decode = {p["workload"]: p["median_us"] for p in peers if p["workload"].startswith("decode-")}

    panels = (1 if prefill else 0) + (1 if decode else 0)
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.5), squeeze=False)
    ax_i = 0
    if prefill:
        ax = axes[0][ax_i]
        ax_i += 1
        names = [r["workload"] for r in prefill]
        x = range(len(names))
        w = 0.2
        ours = [r["median_us"] / 1000 for r in prefill]
        floor = [r["floor_us"] / 1000 for r in prefill]
        fla_ms = [fla.get(n, FLA_SPEC_MS[n]) for n in names]
        ax.bar([i - 1.5 * w for i in x], ours, w, label=f"kda {prefill[0]['impl']} (this run)")
        ax.bar([i - 0.5 * w for i in x], fla_ms, w, label="FLA chunk_kda (same lease where measured, else spec)")
        ax.bar([i + 0.5 * w for i in x], [FLASHKDA_MS[n] for n in names], w, label="FlashKDA (published H200, fixed)")
        ax.bar([i + 1.5 * w for i in x], floor, w, label="memory floor (copy rate measured in this run)")
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=20)
        ax.set_ylabel("ms (median)")
        ax.set_title(f"prefill, {prefill[0]['gpu']}, commit {prefill[0].get('commit', d['commit'])}")
        ax.legend(fontsize=7)
    if decode:
        ax = axes[0][ax_i]
        for h in sorted({r["workload"].split("-")[1] for r in decode}):
            rows = sorted((r for r in decode if r["workload"].split("-")[1] == h),
                          key=lambda r: int(r["workload"].split("-b")[1]))
            b = [int(r["workload"].split("-b")[1]) for r in rows]
            ax.plot(b, [r["median_us"] for r in rows], "o-", label=f"kda decode {h}")
            ax.plot(b, [r["floor_us"] for r in rows], "k:", label=f"floor {h}")
            fb = [(x, fla_decode[r["workload"]]) for x, r in zip(b, rows) if r["workload"] in fla_decode]
            if fb:
                ax.plot([x for x, _ in fb], [y for _, y in fb], "s--", label=f"FLA fused_recurrent_kda {h} (same lease)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch")
        ax.set_ylabel("us (median of graph replays)")
        ax.set_title("decode against the state-traffic floor")
        ax.legend(fontsize=7)
    fig.tight_layout()
    out = args.out or os.path.splitext(args.results[0])[0] + ".png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
