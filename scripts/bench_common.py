"""bench_common.py: what the Python benchmark scripts share (fla_bench.py, bench_torch.py): the standard prefill
workloads and input recipe of the workloads spec, and CUDA-event / CUDA-graph timing (median of many calls)."""
import math

import torch

WORKLOADS = {
    "h96-fixed": (96, [8192]),
    "h96-mixed": (96, [1300, 547, 2048, 963, 271, 3063]),
    "h96-uniform": (96, [1024] * 8),
    "h64-fixed": (64, [8192]),
    "h64-mixed": (64, [1300, 547, 2048, 963, 271, 3063]),
    "h64-uniform": (64, [1024] * 8),
}


def make_inputs(H, seqlens, gen, dev):
    """The standard recipe: q, k, v, g, beta ~ N(0, 0.5^2) bf16; A_log = log U(1, 16); dt log-uniform in
    [1e-3, 0.1], dt_bias = softplus^-1(dt); h0 ~ N(0, 0.25^2) fp32 in FLA's key-first layout [N, H, K, V].
    Returns chunk_kda's keyword arguments."""
    T, K = sum(seqlens), 128

    def n(*shape, std=0.5, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=gen, device=dev) * std).to(dtype)

    q, k, v, g = (n(1, T, H, K) for _ in range(4))
    beta = n(1, T, H)
    A_log = torch.log(1 + 15 * torch.rand(H, generator=gen, device=dev))
    dt = torch.exp(math.log(1e-3) + (math.log(0.1) - math.log(1e-3)) * torch.rand(H * K, generator=gen, device=dev))
    dt_bias = torch.log(torch.expm1(dt))
    h0 = n(len(seqlens), H, K, K, std=0.25, dtype=torch.float32)
    cu = None
    if len(seqlens) > 1:
        cu = torch.tensor([0] + list(torch.tensor(seqlens).cumsum(0)), dtype=torch.int64, device=dev)
    return dict(q=q, k=k, v=v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, initial_state=h0, cu_seqlens=cu)


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
