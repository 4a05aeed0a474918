"""bench_torch.py: kda and its peer FLA side by side in ONE process on the SAME inputs (issue #5's peer column):
  prefill  the six standard workloads: kda.chunk_kda against FLA's Triton chunk_kda (safe_gate=True, its faster
           setting), CUDA-graph replay
  decode   H = 32 and 12, batch 1 to 512, one token per sequence against an fp32 value-first state pool:
           kda.fused_recurrent_kda against FLA's fused_recurrent_kda (the form vLLM calls), graph replay rotating
           input sets so L2 does not hold the pools (R = ceil(3 x 60 MB / bytes per call), at most 32)
  fusions  the decode fusions (issue #7: what each saves), H = 32 and 12: the causal short conv of q, k, v (width 4,
           SiLU, conv-state pools through the same slots) and the gated RMSNorm of the output, each fused into
           kda.fused_recurrent_kda or composed around it in eager PyTorch as a user would (vLLM's
           causal_conv1d_update and FusedRMSNormGated written as torch ops): unfused, conv fused, norm fused, both;
           with --impl fla also FLA's Triton causal_conv1d_update and rms_norm_gated around kda's call, with neither
           fusion or one (each fusion's saving against FLA's kernel for its part)
  train    forward + backward of the six through autograd (upstream gradients for the output and the final state),
           eager calls between CUDA events, with each step's peak extra memory (saved tensors + temporaries); kda
           twice: recomputing in the backward (FLA's default) and with disable_recompute=True (kda-saved)
Every result is first checked against the float64 reference on the same (rounded) values, kda's REFERENCE backend
on CPU copies: a kda result outside the tensor-core class bounds of docs/numerics.md (output relative RMSE
<= 2^-8/sqrt(3) + 2^-9, final state <= 2^-9; for gradients the sanity gate GRAD_GATE) gets no time. A peer's result
between kda's bound and PEER_GATE (FLA's own loosest test tolerance) is timed and labelled, so the ledger shows its
speed and that it misses kda's bound; over PEER_GATE (or GRAD_GATE) it is wrong and gets no time either (a harness
that misfeeds the peer then fails loudly instead of timing garbage). (The per-element bounds are kda-verify's: this
tool checks that what it times is the right answer, kda-verify judges how right.)
The floor comes from the same run: the device's copy rate and bf16 8192^3 matrix rate measured here, each
workload's minimum bytes and FLOPs from kda-bench's models (bench_common.py); per implementation it prints TB/s,
TFLOP/s and percent of the floor. FlashKDA (not on PyPI) appears as its published H200 figure, a fixed column.
Ratios come from this one run; one JSON record per (workload, impl) in kda-bench's schema, rewritten after every
workload so a run cut off by a time limit keeps what it measured.

usage: python3 scripts/bench_torch.py [--part prefill|decode|fusions|train]... [--workload NAME]...
                                      [--impl kda|kda-saved|fla]... [--backend cuda-generic|cuda-chunked]
                                      [--iters N] [--json PATH] [--commit SHA]
Without CUDA it runs kda's CPU backend on small workloads of each part (a smoke test of the script; FLA needs a GPU).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

import bench_common as bc
from published import FLASHKDA_MS

OUT_BOUND = 2.0 ** -8 / math.sqrt(3.0) + 2.0 ** -9  # tensor-core class, bf16 output
STATE_BOUND = 2.0 ** -9
# Gradients: FLA's own test-suite tolerances (relative RMSE 8e-3 for dq / dk / dv, 2e-2 for the rest), a sanity gate
# on what gets timed; the derived bounds are kda-verify --suite backward-full's.
GRAD_GATE = {"q": 8e-3, "k": 8e-3, "v": 8e-3}
GRAD_GATE_REST = 2e-2
PEER_GATE = 2e-2  # a peer's output / state relative RMSE beyond this is a wrong answer (FLA's loosest test tolerance)
FLAGS = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, lower_bound=-5.0)
CPU_PREFILL = {"cpu-smoke": (2, [200, 57])}
CPU_DECODE = [(2, 3)]
FUSIONS = [(32, 1), (32, 32), (32, 256), (12, 32)]  # (H, B); on the CPU, CPU_DECODE
# Where each part runs: inside kda's call, composed around it in eager PyTorch, or (with FLA) FLA's Triton kernels.
FUSION_VARIANTS = {"unfused": ("eager", "eager"), "conv-fused": ("kda", "eager"), "norm-fused": ("eager", "kda"),
                   "fused": ("kda", "kda"), "unfused-fla": ("fla", "fla"), "conv-fused-fla": ("kda", "fla"),
                   "norm-fused-fla": ("fla", "kda")}


def rel_rmse(x, ref):
    x, ref = x.double().cpu(), ref.double().cpu()
    return ((x - ref).pow(2).sum() / ref.pow(2).sum().clamp_min(1e-300)).sqrt().item()


def host(x, dtype=torch.float64):
    """CPU copies of a call's tensors, floating ones in dtype (integer tensors kept): what the oracle reads. The
    decode entry takes float32 at most: every input there is bf16 or fp32, so float32 holds them exactly too."""
    def one(t):
        if not isinstance(t, torch.Tensor):
            return t
        return t.to("cpu", dtype, copy=True) if t.is_floating_point() else t.cpu()  # a copy even on the CPU
    return {k: one(t) for k, t in x.items()}


def timed_at_all(impl, within, eo, es):
    """Whether a verified result gets a time: kda's inside the tensor-core bound, a peer's inside PEER_GATE."""
    if within or (impl != "kda" and eo <= PEER_GATE and es <= PEER_GATE):
        return True
    gate = "the tensor-core bound" if impl == "kda" else f"the peer gate {PEER_GATE:g}"
    print(f"  {impl:5s} WRONG: out {eo:.2e} state {es:.2e} (outside {gate}; no time given)")
    return False


def time_host(call, iters):
    us = []
    for _ in range(iters):
        t0 = time.perf_counter()
        call()
        us.append((time.perf_counter() - t0) * 1e6)
    return sorted(us)


def timing(us, kind):
    return {"timing": kind, "median_us": us[len(us) // 2], "mean_us": statistics.fmean(us), "min_us": us[0],
            "max_us": us[-1], "iters": len(us)}


class Run:
    """One process's shared state: the device, the floor rates, the records and the JSON they go to."""

    def __init__(self, args):
        self.args, self.cuda = args, torch.cuda.is_available()
        self.dev = "cuda" if self.cuda else "cpu"
        self.seed = int.from_bytes(os.urandom(8), "little") >> 1
        self.gen = torch.Generator(device=self.dev)
        self.gen.manual_seed(self.seed)
        self.gpu = torch.cuda.get_device_name() if self.cuda else "cpu"
        self.backend = args.backend if self.cuda else "cpu"
        self.copy_rate, self.mm_rate = bc.floor_rates() if self.cuda else (0.0, 0.0)
        self.records = []

    def record(self, workload, impl, **fields):
        rec = {"workload": workload, "impl": impl, "gpu": self.gpu, "commit": self.args.commit, "seed": self.seed}
        rec.update(fields)
        self.records.append(rec)
        return rec

    def floor(self, rec, nbytes, flops):
        """Adds the floor figures to a timed record and returns its line's tail."""
        floor_us = max(nbytes / self.copy_rate, flops / self.mm_rate) * 1e6 if self.cuda else 0.0
        rec.update(bytes=nbytes, flops=flops, floor_us=floor_us)
        if not self.cuda or "median_us" not in rec:
            return ""
        s = rec["median_us"] * 1e-6
        rec["pct_of_floor"] = 100 * floor_us / rec["median_us"]
        return f"  {nbytes / s / 1e12:.2f} TB/s  {flops / s / 1e12:.1f} TFLOP/s  {rec['pct_of_floor']:.0f}% of floor"

    def dump(self):
        if self.args.json:
            with open(self.args.json, "w") as f:
                json.dump({"tool": "scripts/bench_torch.py", "command": " ".join(sys.argv), "commit": self.args.commit,
                           "gpu": self.gpu, "seed": self.seed, "copy_bytes_per_s": self.copy_rate,
                           "bf16_matmul_flops": self.mm_rate, "results": self.records}, f, indent=1)


def ratios(times, name):
    if "kda" in times and "fla" in times:
        line = f"  kda / fla = {times['kda'] / times['fla']:.3f}"
        if name in FLASHKDA_MS and "kda" in times:
            line += f"   kda / FlashKDA (published) = {times['kda'] / (1000 * FLASHKDA_MS[name]):.3f}"
        print(line)


def fla_chunk_kda(impls):
    """FLA's chunk_kda when it is one of the implementations (imported only then: FLA needs a GPU)."""
    if "fla" not in impls:
        return None
    from fla.ops.kda import chunk_kda
    return chunk_kda


def prefill_cases(run, names):
    """(name, H, lengths, inputs) of each standard workload named (the CPU smoke workload without CUDA)."""
    table = bc.WORKLOADS if run.cuda else CPU_PREFILL
    for name in names:
        H, seqlens = table[name]
        yield name, H, seqlens, bc.make_inputs(H, seqlens, run.gen, run.dev)


def bench_prefill(run, impls, names):
    import kda
    fla = fla_chunk_kda(impls)
    for name, H, seqlens, x in prefill_cases(run, names):
        ref_o, ref_s = kda.chunk_kda(**host(x), **FLAGS, safe_gate=True, output_final_state=True, backend="reference")
        nbytes, flops = bc.prefill_min_bytes(H, seqlens), bc.prefill_flops(H, seqlens)
        fl = max(nbytes / run.copy_rate, flops / run.mm_rate) * 1e6 if run.cuda else 0.0
        print(f"{name}: H={H}, lengths {seqlens}" + (f"  floor {fl:.1f} us" if run.cuda else ""))
        times = {}
        for impl in impls:
            if impl == "kda":
                def call():
                    return kda.chunk_kda(**x, **FLAGS, safe_gate=True, output_final_state=True, backend=run.backend)
            else:
                def call():
                    return fla(**x, **FLAGS, safe_gate=True, output_final_state=True)
            o, s = call()
            eo, es = rel_rmse(o, ref_o), rel_rmse(s, ref_s)
            within = eo <= OUT_BOUND and es <= STATE_BOUND
            rec = run.record(name, "kda-torch" if impl == "kda" else "fla-chunk_kda", out_rel_rmse=eo,
                             state_rel_rmse=es, within_tensor_core_bound=within, verified=within)
            if not timed_at_all(impl, within, eo, es):
                continue
            # One input set: each standard workload's inputs (>= 0.4 GB) are far above the 60 MB L2.
            rec.update(timing(bc.time_graph([call], run.args.iters) if run.cuda else time_host(call, 5),
                              "graph" if run.cuda else "host"))
            times[impl] = rec["median_us"]
            tail = run.floor(rec, nbytes, flops)
            note = "" if within else "  (outside the tensor-core bound)"
            print(f"  {impl:5s} median {rec['median_us']:10.1f} us  out {eo:.2e}  state {es:.2e}{tail}{note}")
        if name in FLASHKDA_MS and run.cuda:
            us = 1000 * FLASHKDA_MS[name]
            print(f"  FlashKDA (published H200 figure, fixed) {us:8.1f} us  {100 * fl / us:.0f}% of floor")
        ratios(times, name)
        run.dump()


def bench_decode(run, impls, shapes):
    import kda
    fla = None
    if "fla" in impls:
        from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd as fla
    for H, B in shapes:
        name = f"decode-h{H}-b{B}"
        nbytes = bc.decode_min_bytes(H, B)
        R = min(32, max(1, math.ceil(3 * 60e6 / nbytes))) if run.cuda else 1
        sets = [bc.decode_inputs(H, B, run.gen, run.dev) for _ in range(R)]
        # The oracle: outputs and pool after one step (float64 inside) of a set of its own, from CPU copies (updated
        # in place). Not one of the timed sets: timing advances their pools in place, so an implementation verified
        # after another was timed would be judged against a pool it never saw (session 10: FLA's decode "missed" by
        # 0.2 that way, right under Triton's interpreter on the CPU).
        x0 = bc.decode_inputs(H, B, run.gen, run.dev)
        ref_o, ref_pool = kda.fused_recurrent_kda(**host(x0, torch.float32), **FLAGS, state_v_first=True,
                                                  backend="reference")
        print(f"{name}: H={H}, batch {B}, {R} input set(s)")
        times = {}
        for impl in impls:
            def make(x, out):
                if impl == "kda":
                    return lambda: kda.fused_recurrent_kda(**x, **FLAGS, state_v_first=True, out=out,
                                                           backend=run.backend)
                args = {k: x[k] for k in ("A_log", "dt_bias", "initial_state", "cu_seqlens", "ssm_state_indices")}
                return lambda: fla(x["q"], x["k"], x["v"], x["g"], x["beta"], **args, **FLAGS,
                                   inplace_final_state=True, state_v_first=True, out=out)
            try:
                x = dict(x0, initial_state=x0["initial_state"].clone())
                out = torch.empty_like(x["v"])
                make(x, out)()
                eo, es = rel_rmse(out, ref_o), rel_rmse(x["initial_state"], ref_pool)
                within = eo <= OUT_BOUND and es <= STATE_BOUND
                rec = run.record(name, "kda-torch" if impl == "kda" else "fla-fused_recurrent_kda", out_rel_rmse=eo,
                                 state_rel_rmse=es, within_tensor_core_bound=within, verified=within, input_sets=R)
                if not timed_at_all(impl, within, eo, es):
                    continue
                calls = [make(s, torch.empty_like(s["v"])) for s in sets]
                us = bc.time_graph(calls, run.args.iters) if run.cuda else time_host(calls[0], 5)
            except Exception as e:  # a peer's failure (FLA's decode once hit an illegal address) costs only its row
                print(f"  {impl:5s} FAILED {type(e).__name__}: {e}")
                if run.cuda:
                    torch.cuda.synchronize()
                continue
            rec.update(timing(us, "graph" if run.cuda else "host"))
            times[impl] = rec["median_us"]
            tail = run.floor(rec, nbytes, 0.0)
            note = "" if within else "  (outside the tensor-core bound)"
            print(f"  {impl:5s} median {rec['median_us']:9.2f} us  out {eo:.2e}  pool {es:.2e}{tail}{note}")
        ratios(times, name)
        run.dump()


def conv_step(x, w, states, idx):
    """The causal short conv of one token a sequence as a user composes it in eager PyTorch (vLLM's
    causal_conv1d_update): x [B, dim], w [dim, 4] (column 3 on the current token), states [slots, dim, 3] (oldest input
    first), updated in place at idx; silu of the conv in fp32, returned in x's dtype."""
    seq = torch.cat([states[idx], x.float().unsqueeze(-1)], dim=-1)  # [B, dim, 4]
    states[idx] = seq[..., 1:]
    return torch.nn.functional.silu((seq * w).sum(-1)).to(x.dtype)


def gated_rmsnorm(o, w, gate, eps):
    """FusedRMSNormGated (sigmoid gate) as torch ops, in fp32, returned in o's dtype."""
    of = o.float()
    return (of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + eps) * w * torch.sigmoid(gate.float())).to(o.dtype)


def fla_conv_step(conv, x, w, states4, idx):
    """FLA's causal_conv1d_update (Triton) on one token a sequence. Its cache has no slot indices, so the pool's
    windows are gathered and scattered around it; its windows are 4 wide (the oldest dropped as it reads)."""
    y, cache = conv(x, states4[idx], weight=w, activation="silu")
    states4[idx] = cache
    return y


def bench_fusions(run, shapes, with_fla):
    """fusions-hH-bB: the arrangements of FUSION_VARIANTS on the same inputs (those with a part of FLA's with FLA only),
    each verified against kda's REFERENCE backend with both fusions (outputs, pool and conv states), then timed as
    decode is (graph replay over rotated input sets, conv states included); prints what each fusion saves against the
    unfused compositions."""
    import kda
    fla_conv = fla_norm = None
    if with_fla:
        from fla.modules.causal_conv1d.ops import causal_conv1d_update as fla_conv
        from fla.modules.norm.fused_norm_gate import rms_norm_gated as fla_norm
    for H, B in shapes:
        name = f"fusions-h{H}-b{B}"
        K, V = bc.K, bc.V
        dims = {"q": H * K, "k": H * K, "v": H * V}
        nbytes = bc.decode_min_bytes(H, B) + B * (2 * 3 * 4 * sum(dims.values()) + H * V * 2)  # conv states, gate
        R = min(32, max(1, math.ceil(3 * 60e6 / nbytes))) if run.cuda else 1
        cw = {n: 0.5 * torch.randn(d, 4, generator=run.gen, device=run.dev) for n, d in dims.items()}
        nw = 1 + 0.1 * torch.randn(V, generator=run.gen, device=run.dev)

        def inputs():
            x = bc.decode_inputs(H, B, run.gen, run.dev)
            slots = x["initial_state"].shape[0]
            cs = {n: torch.randn(slots, d, 3, generator=run.gen, device=run.dev) for n, d in dims.items()}
            gate = torch.randn(x["v"].shape, generator=run.gen, device=run.dev).to(torch.bfloat16)
            return x, cs, gate

        def fresh(x, cs, gate, conv):
            """A copy of a set's pool and conv states (4-wide windows for FLA's conv, the oldest input a zero)."""
            if conv == "fla":
                cs = {n: torch.nn.functional.pad(t, (1, 0)) for n, t in cs.items()}
            return dict(x, initial_state=x["initial_state"].clone()), {n: t.clone() for n, t in cs.items()}, gate

        x0, cs0, gate0 = inputs()
        hx = host(x0, torch.float32)
        ref_cs = tuple(cs0[n].cpu().clone() for n in "qkv")
        ref_o, ref_pool = kda.fused_recurrent_kda(
            **hx, **FLAGS, state_v_first=True, backend="reference", conv_weights=tuple(cw[n].cpu() for n in "qkv"),
            conv_states=ref_cs, out_norm_weight=nw.cpu(), out_gate=gate0.cpu().float(), out_norm_eps=1e-5)
        sets = [inputs() for _ in range(R)]
        print(f"{name}: H={H}, batch {B}, {R} input set(s)")
        times = {}
        for variant, (conv, norm) in FUSION_VARIANTS.items():
            if "fla" in (conv, norm) and not with_fla:
                continue

            def make(x, cs, gate):
                idx = x["ssm_state_indices"].long()
                fused = dict(out_norm_weight=nw, out_gate=gate, out_norm_eps=1e-5) if norm == "kda" else {}
                if conv == "kda":
                    fused.update(conv_weights=(cw["q"], cw["k"], cw["v"]), conv_states=(cs["q"], cs["k"], cs["v"]))
                step = conv_step if conv == "eager" else lambda *a: fla_conv_step(fla_conv, *a)

                def call():
                    y = x if conv == "kda" else dict(x, **{n: step(x[n].reshape(B, -1), cw[n], cs[n], idx).reshape(
                        x[n].shape) for n in "qkv"})
                    o = kda.fused_recurrent_kda(**y, **FLAGS, state_v_first=True, backend=run.backend, **fused)[0]
                    if norm == "eager":
                        return gated_rmsnorm(o, nw, gate, 1e-5)
                    return o if norm == "kda" else fla_norm(o, gate, nw, None, activation="sigmoid", eps=1e-5)
                return call

            x, cs, gate = fresh(x0, cs0, gate0, conv)
            o = make(x, cs, gate)()
            eo, es = rel_rmse(o, ref_o), rel_rmse(x["initial_state"], ref_pool)
            ec = max(rel_rmse(cs[n][..., -3:], ref_cs[i]) for i, n in enumerate("qkv"))
            within = eo <= OUT_BOUND and es <= STATE_BOUND and ec <= STATE_BOUND
            rec = run.record(name, "kda-torch-" + variant, out_rel_rmse=eo, state_rel_rmse=es, conv_state_rel_rmse=ec,
                             verified=within, input_sets=R)
            # A composition with FLA's kernels is judged as a peer (PEER_GATE), kda's arrangements by kda's bound.
            if not timed_at_all("fla" if "fla" in (conv, norm) else "kda", within, eo, max(es, ec)):
                continue
            calls = [make(*fresh(*s, conv)) for s in sets]
            us = bc.time_graph(calls, run.args.iters) if run.cuda else time_host(calls[0], 5)
            rec.update(timing(us, "graph" if run.cuda else "host"))
            times[variant] = rec["median_us"]
            tail = run.floor(rec, nbytes, 0.0)
            note = "" if within else "  (outside the tensor-core bound)"
            print(f"  {variant:14s} median {rec['median_us']:9.2f} us  out {eo:.2e}  pool {es:.2e}  conv {ec:.2e}{tail}"
                  f"{note}")
        # What each fusion saves against the same call with its part composed around it: in eager PyTorch
        # (unfused), and as FLA's Triton kernels (unfused-fla; the fused arrangements whose other part is FLA's).
        for base, other in (("unfused", "eager"), ("unfused-fla", "fla")):
            if base in times:
                print(f"  saved against {base}: " + ", ".join(
                    f"{v} {times[base] - t:+.2f} us" for v, t in times.items()
                    if v != base and "kda" in FUSION_VARIANTS[v] and set(FUSION_VARIANTS[v]) <= {"kda", other}))
        run.dump()


def bench_train(run, impls, names):
    """train-NAME: forward + backward, every input a leaf, gradients reset (not accumulated) before each step."""
    import kda
    fla = fla_chunk_kda(impls)
    for name, H, seqlens, x in prefill_cases(run, names):
        keys = [k for k, t in x.items() if k != "cu_seqlens" and t is not None]
        do = torch.randn(x["v"].shape, generator=run.gen, device=run.dev).to(x["v"].dtype)
        dht = 0.1 * torch.randn(x["initial_state"].shape, generator=run.gen, device=run.dev)
        hx = host(x)
        for k in keys:
            hx[k].requires_grad_()
        o, s = kda.chunk_kda(**hx, **FLAGS, safe_gate=True, output_final_state=True, backend="reference")
        ref = torch.autograd.grad([o, s], [hx[k] for k in keys], [do.cpu().double(), dht.cpu().double()])
        ref = dict(zip(keys, ref))
        print(f"train-{name}: H={H}, lengths {seqlens}")
        times = {}
        for impl in impls:
            leaves = {k: x[k].detach().clone().requires_grad_() for k in keys}
            args = dict(x, **leaves)

            def step():
                for t in leaves.values():
                    t.grad = None
                if impl in ("kda", "kda-saved"):  # kda-saved: disable_recompute=True, the backward reads the forward's
                    o, s = kda.chunk_kda(**args, **FLAGS, safe_gate=True, output_final_state=True, backend=run.backend,
                                         disable_recompute=impl == "kda-saved")
                else:
                    o, s = fla(**args, **FLAGS, safe_gate=True, output_final_state=True)
                torch.autograd.backward([o, s], [do, dht])

            step()
            errs = {k: rel_rmse(leaves[k].grad, ref[k]) for k in keys}
            within = all(e <= GRAD_GATE.get(k, GRAD_GATE_REST) for k, e in errs.items())
            worst = max(errs, key=lambda k: errs[k] / GRAD_GATE.get(k, GRAD_GATE_REST))
            label = {"kda": "kda-torch", "kda-saved": "kda-torch-saved"}.get(impl, "fla-chunk_kda")
            rec = run.record("train-" + name, label, grad_rel_rmse={"d" + k: e for k, e in errs.items()}, verified=within)
            errline = " ".join(f"d{k} {e:.1e}" for k, e in errs.items())
            if not within:
                print(f"  {impl:5s} WRONG: d{worst} {errs[worst]:.2e} over the sanity gate; no time given ({errline})")
                continue
            us = bc.time_events(step, max(20, run.args.iters // 4)) if run.cuda else time_host(step, 3)
            rec.update(timing(us, "eager"))
            times[impl] = rec["median_us"]
            extra = ""
            if run.cuda:  # above the inputs and upstream gradients; the gradient tensors are outputs, not counted
                for t in leaves.values():
                    t.grad = None
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                step()
                torch.cuda.synchronize()
                grads = sum(t.grad.numel() * t.grad.element_size() for t in leaves.values())
                rec["peak_extra_mib"] = (torch.cuda.max_memory_allocated() - base - grads) / 2 ** 20
                extra = f"  peak extra {rec['peak_extra_mib']:.0f} MiB"
            print(f"  {impl:9s} median {rec['median_us']:10.1f} us{extra}  {errline}")
        ratios(times, "train-" + name)
        if "kda-saved" in times and "fla" in times:
            print(f"  kda-saved / fla = {times['kda-saved'] / times['fla']:.3f}")
        run.dump()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", action="append", choices=["prefill", "decode", "fusions", "train"], default=[])
    ap.add_argument("--workload", action="append", default=[],
                    help="a prefill workload (h64-fixed; train-h64-fixed; decode-h32-b128; fusions-h32-b32); default: "
                         "every one")
    ap.add_argument("--impl", action="append", choices=["kda", "kda-saved", "fla"], default=[],
                    help="kda-saved: the train part with disable_recompute=True (elsewhere it is kda)")
    ap.add_argument("--backend", default="cuda-generic")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--json", default="")
    ap.add_argument("--commit", default="unknown")
    args = ap.parse_args()
    run = Run(args)
    parts = args.part or ["prefill", "decode", "fusions", "train"]
    impls = args.impl or (["kda", "kda-saved", "fla"] if run.cuda else ["kda", "kda-saved"])
    base = [i for i in dict.fromkeys("kda" if i == "kda-saved" else i for i in impls)]  # prefill and decode
    if "fla" in impls and not run.cuda:
        sys.exit("bench_torch: FLA needs a GPU")
    prefill = list(bc.WORKLOADS if run.cuda else CPU_PREFILL)
    decode = bc.DECODE if run.cuda else CPU_DECODE
    fusions = FUSIONS if run.cuda else CPU_DECODE
    w = args.workload
    known = (prefill + [f"train-{n}" for n in prefill] + [f"decode-h{H}-b{B}" for H, B in decode] +
             [f"fusions-h{H}-b{B}" for H, B in fusions])
    if [n for n in w if n not in known]:
        sys.exit(f"bench_torch: unknown workload(s) {[n for n in w if n not in known]}; known: {known}")
    # A workload no selected part runs is a mistake, not an empty run (session 12: `--part train --workload
    # h96-fixed` timed nothing and exited 0; the train part's names are train-h96-fixed).
    runs = {"prefill": set(prefill), "train": {f"train-{n}" for n in prefill},
            "decode": {f"decode-h{H}-b{B}" for H, B in decode}, "fusions": {f"fusions-h{H}-b{B}" for H, B in fusions}}
    idle = [n for n in w if not any(n in runs[p] for p in parts)]
    if idle:
        sys.exit(f"bench_torch: workload(s) {idle} belong to no part given ({parts}); a train workload is "
                 "train-<prefill name>, a decode one decode-h<H>-b<B>")
    print(f"bench_torch: torch {torch.__version__}, {run.gpu}, kda backend {run.backend}, seed {run.seed} (inputs "
          "drawn from it)" + (f"; copy {run.copy_rate / 1e12:.2f} TB/s, bf16 matmul {run.mm_rate / 1e12:.0f} "
                              "TFLOP/s (this run)" if run.cuda else ""))
    if "prefill" in parts:
        bench_prefill(run, base, [n for n in prefill if not w or n in w])
    if "decode" in parts:
        bench_decode(run, base, [(H, B) for H, B in decode if not w or f"decode-h{H}-b{B}" in w])
    if "fusions" in parts and "kda" in base:
        bench_fusions(run, [(H, B) for H, B in fusions if not w or f"fusions-h{H}-b{B}" in w], "fla" in impls)
    if "train" in parts:
        bench_train(run, impls, [n for n in prefill if not w or f"train-{n}" in w])
    run.dump()


if __name__ == "__main__":
    main()
