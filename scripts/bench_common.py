"""bench_common.py: what bench_torch.py shares with its tests: the standard prefill and decode workloads and input
recipe of the workloads spec, the floor models of kda-bench (tools/common/workloads.cpp: minimum bytes, FLOPs),
the floor rates measured on the device, and CUDA-event / CUDA-graph timing (median of many calls)."""
import math

import torch

WORKLOADS = {
    "h96-fixed": (96, [8192]),
    "h96-mixed": (96, [1300, 547, 2048, 963, 271, 3063]),
    "h96-uniform": (96, [1024] * 8),
    "h64-fixed": (64, [8192]),
    "h64-mixed": (64, [1300, 547, 2048, 963, 271, 3063]),
    "h64-uniform": (64, [1024] * 8),
    "h4-32k": (4, [32768]),  # few chains, long ones: 32 heads at 8-way tensor parallelism (docs/hopper.md)
    "h16-32k": (16, [32768]),  # 32 heads at 2-way tensor parallelism: fewer chains than SMs (docs/hopper.md)
}
# Decode: (H, batch), one token per sequence against an fp32 value-first pool (kda-bench's decode-h{H}-b{B}); the
# batches >= 256 last: FLA's decode hit an illegal address at H = 32, B = 256 once (2026-11-29), which ends the
# process's CUDA context for every later shape. The same twelve as kda-bench (issue #7 asks "faster than FLA at every
# batch size"; H = 12 at B = 8, 128 and 512 were missing until session 14).
DECODE = ([(32, b) for b in (1, 8, 32, 128)] + [(12, b) for b in (1, 8, 32, 128)] +
          [(32, 256), (12, 256), (32, 512), (12, 512)])
K = V = 128
CHUNK = 64


def prefill_min_bytes(H, seqlens):
    """kda-bench's workload_min_bytes for the standard recipe: bf16 q, k, v, g, beta in and o out once, the fp32
    initial and final states once."""
    tokens = sum(seqlens)
    return tokens * (2 * H * K * 2 + H * V * 2 + H * K * 2 + H * 2 + H * V * 2) + 2 * len(seqlens) * H * K * V * 4


def prefill_flops(H, seqlens):
    """kda-bench's workload_flops: the chunked algorithm's arithmetic at C = 64 per token and head."""
    C = CHUNK
    return (6 * C * K + 4 * C * V + 6 * K * V + C * C / 3) * sum(seqlens) * H


def decode_min_bytes(H, B):
    """kda-bench's decode_min_bytes: one token's inputs and output per sequence, its state read and written."""
    return B * (2 * H * K * 2 + H * V * 2 + H * K * 2 + H * 2 + H * V * 2) + 2 * B * H * K * V * 4


def floor_rates():
    """(copy rate, bf16 matrix rate) of this device, measured as kda-bench measures them: a 2 GiB device-to-device
    copy counted read + write, and an 8192^3 bf16 product with fp32 accumulation; medians of 10 after 3 warm-ups."""
    def median_ms(run):
        for _ in range(3):
            run()
        ms = []
        for _ in range(10):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            run()
            e1.record()
            e1.synchronize()
            ms.append(e0.elapsed_time(e1))
        return sorted(ms)[5]
    n = 2 << 30
    a, b = torch.ones(n, dtype=torch.uint8, device="cuda"), torch.empty(n, dtype=torch.uint8, device="cuda")
    copy = 2 * n / (median_ms(lambda: b.copy_(a)) * 1e-3)
    del a, b
    m = 8192
    x = torch.full((m, m), 0.0115, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    mm = 2 * m ** 3 / (median_ms(lambda: torch.matmul(x, x, out=y)) * 1e-3)
    del x, y
    torch.cuda.empty_cache()
    return copy, mm


def _recipe(H, tokens, seqs, gen, dev, pool_slots=0):
    """The standard recipe's tensors: q, k, v, g, beta ~ N(0, 0.5^2) bf16 [1, tokens, H, .]; A_log = log U(1, 16);
    dt log-uniform in [1e-3, 0.1], dt_bias = softplus^-1(dt); states ~ N(0, 0.25^2) fp32, one per sequence (or
    pool_slots of them)."""
    def n(*shape, std=0.5, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=gen, device=dev) * std).to(dtype)

    q, k, v, g = (n(1, tokens, H, K) for _ in range(4))
    beta = n(1, tokens, H)
    A_log = torch.log(1 + 15 * torch.rand(H, generator=gen, device=dev))
    dt = torch.exp(math.log(1e-3) + (math.log(0.1) - math.log(1e-3)) * torch.rand(H * K, generator=gen, device=dev))
    states = n(pool_slots or seqs, H, K, V, std=0.25, dtype=torch.float32)
    return dict(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=torch.log(torch.expm1(dt)), initial_state=states)


def make_inputs(H, seqlens, gen, dev):
    """The standard prefill inputs (h0 in FLA's key-first layout [N, H, K, V]; K = V): chunk_kda's keyword
    arguments."""
    x = _recipe(H, sum(seqlens), len(seqlens), gen, dev)
    x["cu_seqlens"] = None
    if len(seqlens) > 1:
        x["cu_seqlens"] = torch.tensor([0] + list(torch.tensor(seqlens).cumsum(0)), dtype=torch.int64, device=dev)
    return x


def decode_inputs(H, B, gen, dev):
    """kda-bench's decode workloads: one token per sequence, the standard recipe, a pool of B + B / 2 + 1 slots
    [slots, H, V, K] fp32 (value-first), distinct random slots per sequence (int32). Returns fused_recurrent_kda's
    arguments (q, k, v, g, beta and keywords)."""
    slots = B + B // 2 + 1
    x = _recipe(H, B, B, gen, dev, pool_slots=slots)
    x["ssm_state_indices"] = torch.randperm(slots, generator=gen, device=dev)[:B].to(torch.int32)
    x["cu_seqlens"] = torch.arange(B + 1, dtype=torch.int64, device=dev)
    return x


def time_events(run, iters, per=1):
    """Sorted per-call times (us) of `iters` runs, each between two CUDA events, after 20 warm-up runs; a run that
    holds `per` calls counts per call."""
    for _ in range(20):
        run()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ev[0].record()
    for i in range(iters):
        run()
        ev[i + 1].record()
    torch.cuda.synchronize()
    return sorted(ev[i].elapsed_time(ev[i + 1]) * 1000 / per for i in range(iters))


def capture(calls):
    """A CUDA graph holding every call in order (each run once on a side stream first)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for c in calls:
            c()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for c in calls:
            c()
    return graph


def time_graph(calls, iters):
    """Per-call times (us) of `iters` replays of one graph holding every call (rotated input sets)."""
    graph = capture(calls)
    return time_events(graph.replay, iters, per=len(calls))
