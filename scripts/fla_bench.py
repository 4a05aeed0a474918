"""fla_bench.py: times FLA's Triton chunk_kda (safe_gate=True, its faster setting) on the standard workloads with
the standard input recipe, and its fused_recurrent_kda decode against an fp32 value-first state pool (the form
vLLM calls: ssm_state_indices, state updated in place), on the GPU of this run, for the ledger's peer column.
CUDA-graph replay between CUDA events after warm-up (autotuning runs in the warm-up), median of --iters replays,
one JSON record per workload in the same schema kda-bench writes. Decode rotates input sets (pools) like
kda-bench: one graph of R calls on R different pools, R = ceil(3 x 60 MB L2 / bytes per call) capped at 32.

Until kda-bench times FLA in its own process (the Python binding lands), this script runs in the same GPU lease
as kda-bench, right after it, so both see the same card in the same state.
"""
import argparse
import json
import math
import os
import statistics
import time
import sys

import torch

from bench_common import WORKLOADS, capture, make_inputs, time_events, time_graph

DECODE = [(32, b) for b in (1, 8, 32, 128, 256, 512)] + [(12, b) for b in (1, 32, 256)]


def decode_inputs(H, B, gen):
    """kda-bench's decode workloads: one token per sequence, standard recipe, pool of B + B/2 + 1 slots
    [slots, H, V, K] fp32 (value-first), distinct random slots per sequence."""
    K, dev = 128, "cuda"
    def n(*shape, std=0.5, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=gen, device=dev) * std).to(dtype)
    q, k, v, g = (n(1, B, H, K) for _ in range(4))
    beta = n(1, B, H)
    A_log = torch.log(1 + 15 * torch.rand(H, generator=gen, device=dev))
    dt = torch.exp(math.log(1e-3) + (math.log(0.1) - math.log(1e-3)) * torch.rand(H * K, generator=gen, device=dev))
    dt_bias = torch.log(torch.expm1(dt))
    slots = B + B // 2 + 1
    pool = n(slots, H, K, K, std=0.25, dtype=torch.float32)
    idx = torch.randperm(slots, generator=gen, device=dev)[:B].to(torch.int32)
    cu = torch.arange(B + 1, dtype=torch.int64, device=dev)
    return q, k, v, g, beta, A_log, dt_bias, pool, idx, cu


def bench_decode(args, gen, gpu, seed, records, t0):
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd
    for H, B in DECODE:
        name = f"decode-h{H}-b{B}"
        per_call = 2 * B * H * 128 * 128 * 4 + B * H * 128 * 2 * 5
        R = min(32, max(1, math.ceil(3 * 60e6 / per_call)))
        calls = []
        for _ in range(R):
            q, k, v, g, beta, A_log, dt_bias, pool, idx, cu = decode_inputs(H, B, gen)
            out = torch.empty_like(v)
            def call(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, pool=pool, idx=idx, cu=cu,
                     out=out):
                fused_recurrent_kda_fwd(q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, initial_state=pool,
                                        inplace_final_state=True, state_v_first=True, cu_seqlens=cu,
                                        ssm_state_indices=idx, use_qk_l2norm_in_kernel=True,
                                        use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                        lower_bound=-5.0, out=out)
            calls.append(call)
        us = time_graph(calls, args.iters)
        rec = {"workload": name, "impl": "fla-fused_recurrent_kda", "gpu": gpu, "commit": args.commit,
               "seed": seed, "timing": "graph", "mean_us": statistics.fmean(us), "median_us": us[len(us) // 2],
               "min_us": us[0], "max_us": us[-1], "iters": args.iters, "input_sets": R}
        records.append(rec)
        print(f"  {name:16s} median {rec['median_us']:9.2f} us  ({R} input sets, {time.time() - t0:.0f} s in)")


def picked(args):
    """The standard workloads --workload names (all six without it)."""
    unknown = [w for w in args.workload if w not in WORKLOADS]
    if unknown:
        raise SystemExit(f"fla_bench.py: unknown workload(s) {unknown}; known: {list(WORKLOADS)}")
    return [(n, w) for n, w in WORKLOADS.items() if not args.workload or n in args.workload]


def bench_train(args, gen, gpu, seed, records, t0, chunk_kda, dump):
    """train-NAME: FLA's chunk_kda forward + backward (every input a leaf, upstream gradients for the output and the
    final state), timed eagerly between CUDA events; the gradients are reset (not accumulated) before each step."""
    import fla
    for name, (H, seqlens) in picked(args):
        x = make_inputs(H, seqlens, gen, "cuda")
        leaves = [t.requires_grad_() for key, t in x.items() if key != "cu_seqlens" and t is not None]
        do = torch.randn(x["v"].shape, generator=gen, device="cuda").to(x["v"].dtype)
        dht = 0.1 * torch.randn(x["initial_state"].shape, generator=gen, device="cuda")

        def step():
            for t in leaves:
                t.grad = None
            o, ht = chunk_kda(**x, output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                              use_beta_sigmoid_in_kernel=True, safe_gate=True, lower_bound=-5.0)
            torch.autograd.backward([o, ht], [do, dht])

        us = time_events(step, max(20, args.iters // 4))
        # Peak extra memory of one step: what the forward saves for the backward plus the backward's temporaries,
        # above the inputs and upstream gradients already allocated (kda-bench prints its backward workspace).
        # The gradient tensors themselves are outputs (kda writes them into caller tensors too): not counted.
        for t in leaves:
            t.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        grad_bytes = sum(t.grad.numel() * t.grad.element_size() for t in leaves if t.grad is not None)
        extra_mib = (torch.cuda.max_memory_allocated() - base - grad_bytes) / 2 ** 20
        mean = statistics.fmean(us)
        rec = {"workload": "train-" + name, "impl": "fla-chunk_kda", "gpu": gpu, "commit": args.commit, "seed": seed,
               "timing": "eager", "mean_us": mean, "median_us": us[len(us) // 2], "min_us": us[0], "max_us": us[-1],
               "iters": len(us), "fla_version": fla.__version__, "peak_extra_mib": extra_mib}
        records.append(rec)
        print(f"  train-{name:12s} median {rec['median_us']:9.1f} us  mean {mean:9.1f} us  (forward + backward, eager, "
              f"peak extra memory {extra_mib:.1f} MiB, {time.time() - t0:.0f} s in)")
        dump()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--json", default="")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--part", choices=["all", "prefill", "decode", "train"], default="all")
    ap.add_argument("--workload", action="append", default=[],
                    help="a prefill workload (e.g. h64-fixed; train runs train-NAME); repeatable; default: all six")
    args = ap.parse_args()
    from fla.ops.kda import chunk_kda
    import fla

    gen = torch.Generator(device="cuda")
    seed = int.from_bytes(os.urandom(8), "little") >> 1
    gen.manual_seed(seed)
    gpu = torch.cuda.get_device_name()
    records = []
    t0 = time.time()
    print(f"fla_bench: FLA {fla.__version__}, torch {torch.__version__}, {gpu}, seed {seed}")
    def dump():
        if args.json:  # rewritten after every workload: a run cut off by a time limit keeps what it measured
            with open(args.json, "w") as f:
                json.dump({"tool": "scripts/fla_bench.py", "command": " ".join(sys.argv), "commit": args.commit,
                           "results": records}, f, indent=1)
    if args.part in ("all", "decode"):
        try:
            bench_decode(args, gen, gpu, seed, records, t0)
        except Exception as e:  # untested on a GPU before its first lease: keep the prefill figures coming
            print(f"  decode: FAILED {type(e).__name__}: {e}")
        dump()
    if args.part in ("all", "train"):
        bench_train(args, gen, gpu, seed, records, t0, chunk_kda, dump)
    for name, (H, seqlens) in (picked(args) if args.part in ("all", "prefill") else []):
        x = make_inputs(H, seqlens, gen, "cuda")

        def call():
            return chunk_kda(**x, output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                             use_beta_sigmoid_in_kernel=True, safe_gate=True, lower_bound=-5.0)

        for _ in range(5):
            call()
        torch.cuda.synchronize()
        graph = None
        try:
            graph = capture([call])
            run = graph.replay
            method = "graph"
        except Exception as e:  # FLA's varlen path may read cu_seqlens on the host: fall back to events
            print(f"  {name}: graph capture failed ({type(e).__name__}); timing eager calls")
            run = call
            method = "eager"
        us = time_events(run, args.iters)
        mean = statistics.fmean(us)
        rec = {"workload": name, "impl": "fla-chunk_kda", "gpu": gpu, "commit": args.commit, "seed": seed,
               "timing": method, "mean_us": mean, "median_us": us[len(us) // 2], "min_us": us[0],
               "max_us": us[-1], "iters": args.iters, "fla_version": fla.__version__}
        records.append(rec)
        print(f"  {name:12s} median {rec['median_us']:9.1f} us  mean {mean:9.1f} us  ({method}, {time.time() - t0:.0f} s in)")
        del graph
        dump()


if __name__ == "__main__":
    main()
