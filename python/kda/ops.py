"""kda's PyTorch ops: FLA-compatible `chunk_kda` / `fused_recurrent_kda` over the `kda::` custom ops.

The C++ extension (python/csrc/torch_op.cpp, loaded from libkda_torch.so) registers on PyTorch's stable ABI:
  kda::chunk_fwd          functional forward: returns (out, final_state) (final_state is [0] when not asked for)
  kda::chunk_fwd_saved    chunk_fwd on the chunked CUDA path that also returns the workspace holding what the backward
                          would recompute (FLA's disable_recompute=True); chunk_bwd(..., saved=workspace) reads it
  kda::chunk_fwd_out      forward into caller-owned out / final_state / workspace (serving, CUDA graphs)
  kda::chunk_fwd_workspace_size   the workspace bytes chunk_fwd_out needs
  kda::decode_out         T tokens per sequence against a state pool updated in place (ssm_state_indices)
  kda::chunk_bwd          gradients of every differentiable input (host backends; CUDA: the chunked CUDA backward
                          where it applies, else the token-recurrent one; backend="cuda-recurrent" forces that)
This module adds their fake (meta) implementations for torch.compile, autograd for chunk_fwd, and FLA's
signatures with FLA's argument meanings. Arguments kda cannot honour raise; nothing silently differs. The stable ABI
hands every C++ exception to Python as RuntimeError: the ops tag their message with the class meant ("[kda:ValueError]
kda: q: ..."), which `_run` raises here (ValueError, NotImplementedError); the ops called directly keep the tag.
"""
from __future__ import annotations

import os
import re
from typing import Optional

import torch

from ._common import _HOST_BACKENDS, BACKENDS, _backend_id, _check_beta, _check_decode_fusions, _gate_selection

__all__ = [
    "chunk_kda",
    "fused_recurrent_kda",
    "chunk_kda_workspace_size",
    "BACKENDS",
]

# ------------------------------------------------------------------------------------------------- loading
_LIB_NAME = "libkda_torch.so"


def _library_path() -> str:
    env = os.environ.get("KDA_TORCH_LIBRARY")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME)


_path = _library_path()
if not os.path.exists(_path):
    raise ImportError(
        f"kda: the extension {_path} is missing; install the package with `pip install .` from the kda "
        "checkout, or point KDA_TORCH_LIBRARY at a built libkda_torch.so"
    )
torch.ops.load_library(_path)

_TAG = re.compile(r"\[kda:(ValueError|NotImplementedError|RuntimeError)\] ")
_CLASSES = {"ValueError": ValueError, "NotImplementedError": NotImplementedError, "RuntimeError": RuntimeError}


def _run(op, *args):
    """op(*args), an exception of a kda:: op raised as the class its tag names, with the op's message."""
    try:
        return op(*args)
    except RuntimeError as e:
        m = _TAG.search(str(e))
        if m is None:
            raise
        raise _CLASSES[m.group(1)](str(e)[m.end():]) from None


# ------------------------------------------------------------------------------------------------- fake impls
def _num_seqs(q, cu_seqlens):
    return q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1


@torch.library.register_fake("kda::chunk_fwd")
def _chunk_fwd_fake(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, scale, gate_mode, lower_bound,
                    use_qk_l2norm, beta_is_logits, allow_neg_eigval, state_v_first, output_final_state, chunk_size,
                    backend):
    out = v.new_empty(v.shape, dtype=q.dtype)
    if output_final_state:
        N, HV, K, V = _num_seqs(q, cu_seqlens), v.shape[2], q.shape[3], v.shape[3]
        shape = (N, HV, V, K) if state_v_first else (N, HV, K, V)
        fs = q.new_empty(shape, dtype=torch.float32)
    else:
        fs = q.new_empty((0,), dtype=torch.float32)
    return out, fs


@torch.library.register_fake("kda::chunk_fwd_saved")
def _chunk_fwd_saved_fake(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, scale, gate_mode, lower_bound,
                          use_qk_l2norm, beta_is_logits, allow_neg_eigval, state_v_first, output_final_state,
                          chunk_size, backend):
    out, fs = _chunk_fwd_fake(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, scale, gate_mode,
                              lower_bound, use_qk_l2norm, beta_is_logits, allow_neg_eigval, state_v_first,
                              output_final_state, chunk_size, backend)
    # The workspace's size is the C ABI's answer for these shapes (and a host cu_seqlens' values): data-dependent here.
    return out, fs, q.new_empty((torch.library.get_ctx().new_dynamic_size(),), dtype=torch.uint8)


@torch.library.register_fake("kda::chunk_fwd_out")
def _chunk_fwd_out_fake(*args):
    return None


@torch.library.register_fake("kda::decode_out")
def _decode_out_fake(*args):
    return None


@torch.library.register_fake("kda::chunk_bwd")
def _chunk_bwd_fake(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, *rest):
    def like(t):
        return torch.empty_like(t) if t is not None else q.new_empty((0,), dtype=torch.float32)

    return [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), torch.empty_like(g),
            torch.empty_like(beta), like(A_log), like(dt_bias), like(initial_state)]


# ------------------------------------------------------------------------------------------------- autograd
def _setup_context(ctx, inputs, output):
    """chunk_fwd's and chunk_fwd_saved's: the tensor inputs (and chunk_fwd_saved's workspace, its third output) and
    the flags the backward call repeats."""
    (q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, scale, gate_mode, lower_bound, use_qk_l2norm,
     beta_is_logits, allow_neg_eigval, state_v_first, output_final_state, chunk_size) = inputs[:18]
    saved = (output[2],) if len(output) == 3 else ()
    # No zero tensors for gradients nobody sent: autograd would otherwise hand _backward a zero-filled uint8 twin of
    # chunk_fwd_saved's workspace (6.4 GB at h96-fixed: session 10 measured the saving step's peak at 2x the
    # workspace) and of an unused output or final state; _backward takes None for each.
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, *saved)
    ctx.flags = (scale, gate_mode, lower_bound, use_qk_l2norm, beta_is_logits, allow_neg_eigval, state_v_first)
    ctx.output_final_state = output_final_state
    ctx.chunk_size = chunk_size
    ctx.backend = inputs[18]
    ctx.n_inputs = len(inputs)


def _backward(ctx, dout, dfinal_state, *_dworkspace):
    q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, *saved = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(v, dtype=q.dtype)
    if not ctx.output_final_state or (dfinal_state is not None and dfinal_state.numel() == 0):
        dfinal_state = None
    # chunk_fwd_saved's workspace: the chunked CUDA backward on the forward's backend reads what the forward kept, no
    # recompute (the same gradients, bit for bit: the saving forward computes them as the recompute does). Otherwise
    # CPU tensors: the host backward (float64: the CPU backend's chunked form, or the reference's reverse recurrence).
    # CUDA tensors: "cuda-chunked", "cuda-hopper" and "cuda-recurrent" as asked; every other CUDA backend the default
    # (AUTO): the chunked CUDA backward wherever it applies (its sm_90a state passes where they apply), the exact
    # token-recurrent one elsewhere.
    if saved:
        backend = ctx.backend
    elif q.device.type == "cpu":
        backend = ctx.backend if ctx.backend in _HOST_BACKENDS else BACKENDS["cpu"]
    elif ctx.backend in (BACKENDS["cuda-chunked"], BACKENDS["cuda-hopper"], BACKENDS["cuda-recurrent"]):
        backend = ctx.backend
    else:
        backend = BACKENDS["auto"]
    grads = _run(torch.ops.kda.chunk_bwd, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, *ctx.flags,
                 ctx.chunk_size, backend, dout, dfinal_state, *saved)
    dq, dk, dv, dg, dbeta, dA, ddt, dh0 = grads
    return (dq, dk, dv, dg, dbeta,
            dA if A_log is not None else None,
            ddt if dt_bias is not None else None,
            dh0 if initial_state is not None else None) + (None,) * (ctx.n_inputs - 8)


torch.library.register_autograd("kda::chunk_fwd", _backward, setup_context=_setup_context)
torch.library.register_autograd("kda::chunk_fwd_saved", _backward, setup_context=_setup_context)


# ------------------------------------------------------------------------------------------------- FLA's API
def _gate_mode(use_gate_in_kernel, A_log, dt_bias, lower_bound, safe_gate, like):
    """FLA's gate selection: (gate_mode, lower_bound, A_log, dt_bias) for the op."""
    gate_mode, lb, in_kernel = _gate_selection(use_gate_in_kernel, A_log, lower_bound, safe_gate)
    if not in_kernel:
        return gate_mode, lb, None, None
    if dt_bias is None:
        # FLA's dt_bias is optional (no bias): the same as a zero bias, which the kda kernels take explicitly.
        HV, K = like.shape[2], like.shape[3]
        dt_bias = torch.zeros(HV * K, dtype=torch.float32, device=like.device)
    return gate_mode, lb, A_log, dt_bias


def _check_common(q, v, cu_seqlens, initial_state):
    if q.dim() != 4:
        raise ValueError(f"kda: q: must be [B, T, H, K], got shape {tuple(q.shape)}")
    if v.dim() != 4:
        raise ValueError(f"kda: v: must be [B, T, HV, V], got shape {tuple(v.shape)}")
    if cu_seqlens is not None:
        if q.shape[0] != 1:
            raise ValueError(
                f"kda: cu_seqlens: the batch size must be 1 with cu_seqlens (flatten the sequences), got "
                f"B = {q.shape[0]}"
            )
        if cu_seqlens.dim() != 1:
            raise ValueError(f"kda: cu_seqlens: must be 1-D [N + 1], got shape {tuple(cu_seqlens.shape)}")
        if initial_state is not None and initial_state.shape[0] != cu_seqlens.shape[0] - 1:
            raise ValueError(
                f"kda: initial_state: one state per sequence expected, i.e. {cu_seqlens.shape[0] - 1} rather "
                f"than {initial_state.shape[0]}"
            )


def _any_requires_grad(*ts):
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


def _reject_kwargs(fn, kwargs):
    if kwargs:
        raise TypeError(f"kda.{fn}: unsupported argument(s) {sorted(kwargs)} (kda does not implement them)")


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    lower_bound: Optional[float] = None,
    disable_recompute: bool = False,
    return_intermediate_states: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
    cp_context=None,
    use_graph: bool = False,
    max_num_seqs: Optional[int] = None,
    *,
    A_log: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    chunk_size: Optional[int] = None,
    out: Optional[torch.Tensor] = None,
    final_state: Optional[torch.Tensor] = None,
    workspace: Optional[torch.Tensor] = None,
    backend: str = "auto",
    **kwargs,
):
    """Drop-in for `fla.ops.kda.chunk_kda` with FLA's argument meanings; returns (o, final_state or None).

    kda extras (keyword-only): `out` / `final_state` / `workspace` (caller-owned buffers: the serving and
    CUDA-graph form; workspace of at least `chunk_kda_workspace_size(...)` bytes, allocated by torch when absent),
    `chunk_size` (16, 32 or 64; default: the backend's choice), `backend` ("auto", "reference" (fp64 CPU
    oracle), "cpu", "cuda-generic", "cuda-hopper" (the chunked path with its sm_90a state passes: K = 128 on sm_90),
    "cuda-chunked" (the chunked path on mma.sync throughout), "cuda-recurrent").
    `disable_recompute=True` (FLA's meaning: keep the forward's intermediates instead of recomputing them in the
    backward): on CUDA tensors that need gradients, where the chunked CUDA path applies and the backend is "auto",
    "cuda-generic", "cuda-hopper" or "cuda-chunked", the forward keeps its chunk products and chunk-start states in a
    workspace held until the backward (the chunked backward's workspace: ~4.3 GB at 8192 tokens x 64 heads), and the
    backward skips its recompute of the forward (phase 1 and the state pass); elsewhere it changes nothing. Both run
    the backend's chunked path (its sm_90a state passes where they apply, as without it). Its forward computes
    [W | U] as the backward's recompute does (3xTF32), so the output may differ from a plain forward's in the last
    bits; gradients are the same either way. `use_graph`, `max_num_seqs` and `cu_seqlens_cpu` are accepted and change
    nothing (kda is graph-safe as is and reads cu_seqlens itself).
    """
    if "transpose_state_layout" in kwargs:
        if state_v_first:
            raise ValueError("kda: cannot pass both state_v_first and the deprecated transpose_state_layout")
        state_v_first = bool(kwargs.pop("transpose_state_layout"))
    _reject_kwargs("chunk_kda", kwargs)
    if return_intermediate_states:
        raise NotImplementedError(
            "kda: return_intermediate_states: not supported (kda's prefix-cache checkpoints are the C ABI's "
            "state_checkpoints)"
        )
    if cp_context is not None:
        raise NotImplementedError("kda: cp_context: context parallelism is not supported")
    _check_common(q, v, cu_seqlens, initial_state)
    _check_beta(use_beta_sigmoid_in_kernel, allow_neg_eigval, beta, v)
    if chunk_size is None:
        chunk_size = 0
    elif chunk_size not in (16, 32, 64):
        raise ValueError(f"kda: chunk_size: must be 16, 32 or 64, got {chunk_size}")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    gate_mode, lb, A_log, dt_bias = _gate_mode(use_gate_in_kernel, A_log, dt_bias, lower_bound, safe_gate, g)
    be = _backend_id(backend)
    flags = (float(scale), gate_mode, lb, bool(use_qk_l2norm_in_kernel), bool(use_beta_sigmoid_in_kernel),
             bool(allow_neg_eigval), bool(state_v_first))

    if out is not None or final_state is not None or workspace is not None:
        # Caller-owned buffers: no allocation by kda (besides the workspace when not given), no autograd.
        if _any_requires_grad(q, k, v, g, beta, A_log, dt_bias, initial_state):
            raise NotImplementedError("kda: out: the caller-owned-buffer form is inference-only (no autograd)")
        if output_final_state and final_state is None:
            raise ValueError("kda: final_state: output_final_state=True with a caller-owned out needs final_state")
        if out is None:
            out = torch.empty(v.shape, dtype=q.dtype, device=q.device)
        _run(torch.ops.kda.chunk_fwd_out, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, *flags,
             chunk_size, be, out, final_state, workspace)
        return out, final_state

    if (disable_recompute and q.is_cuda and torch.is_grad_enabled()
            and be in (BACKENDS["auto"], BACKENDS["cuda-generic"], BACKENDS["cuda-chunked"], BACKENDS["cuda-hopper"])
            and _any_requires_grad(q, k, v, g, beta, A_log, dt_bias, initial_state)):
        try:
            o, fs, _ = _run(torch.ops.kda.chunk_fwd_saved, q, k, v, g, beta, A_log, dt_bias, initial_state,
                            cu_seqlens, *flags, bool(output_final_state), chunk_size, be)
            return o, (fs if output_final_state else None)
        except NotImplementedError:
            if be in (BACKENDS["cuda-chunked"], BACKENDS["cuda-hopper"]):
                raise
            # The chunked CUDA path does not take these inputs: the default path, whose backward recomputes.
    o, fs = _run(torch.ops.kda.chunk_fwd, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens, *flags,
                 bool(output_final_state), chunk_size, be)
    return o, (fs if output_final_state else None)


def chunk_kda_workspace_size(q, k, v, g, beta, out, final_state=None, *, scale=None, initial_state=None,
                             use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                             use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, lower_bound=None,
                             state_v_first=False, cu_seqlens=None, A_log=None, dt_bias=None, chunk_size=None,
                             backend="auto") -> int:
    """Bytes of workspace `chunk_kda(..., out=..., workspace=...)` needs (validates every argument)."""
    if scale is None:
        scale = q.shape[-1] ** -0.5
    gate_mode, lb, A_log, dt_bias = _gate_mode(use_gate_in_kernel, A_log, dt_bias, lower_bound, False, g)
    return _run(
        torch.ops.kda.chunk_fwd_workspace_size, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens,
        float(scale), gate_mode, lb, bool(use_qk_l2norm_in_kernel), bool(use_beta_sigmoid_in_kernel),
        bool(allow_neg_eigval), bool(state_v_first), chunk_size or 0, _backend_id(backend), out, final_state)


def _check_equal_lengths(cu_seqlens, N, T1):
    """The state-pool form runs T1 tokens per sequence: cu_seqlens must be [0, T1, 2*T1, ...]."""
    if torch.compiler.is_compiling():
        return
    if cu_seqlens.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    expect = torch.arange(0, (N + 1) * T1, T1, dtype=cu_seqlens.dtype, device=cu_seqlens.device)
    if not torch.equal(cu_seqlens, expect):
        raise NotImplementedError(
            "kda: cu_seqlens: with ssm_state_indices kda runs the same number of tokens per sequence "
            f"(here {T1}: cu_seqlens = [0, {T1}, {2 * T1}, ...]); got {cu_seqlens.tolist()}"
        )


def fused_recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    A_log: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    lower_bound: Optional[float] = None,
    state_v_first: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    ssm_state_indices: Optional[torch.Tensor] = None,
    num_accepted_tokens: Optional[torch.Tensor] = None,
    *,
    out: Optional[torch.Tensor] = None,
    backend: str = "auto",
    conv_weights: Optional[tuple] = None,
    conv_states: Optional[tuple] = None,
    out_norm_weight: Optional[torch.Tensor] = None,
    out_gate: Optional[torch.Tensor] = None,
    out_norm_eps: float = 1e-5,
    out_gate_activation: str = "sigmoid",
    **kwargs,
):
    """Drop-in for `fla.ops.kda.fused_recurrent_kda`; returns (o, final_state or None).

    Without `ssm_state_indices` it computes what `chunk_kda` computes (same op). With `ssm_state_indices` (int32,
    [N] or [N, T] for speculative verify with `num_accepted_tokens`), `initial_state` is the state pool
    [slots, HV, K, V] (or [slots, HV, V, K] with state_v_first), read and written in place: sequence n starts
    from pool[idx[n]] (or pool[idx[n, num_accepted[n] - 1]]) and its state goes back to pool[idx[n]] (or after
    token t to pool[idx[n, t]]); a negative index marks padding (outputs zero, no slot touched). Returns
    (o, initial_state). Every sequence has the same token count: q is [N, T, H, K], or [1, N*T, H, K] with
    cu_seqlens = [0, T, 2T, ...].

    kda's fusions, state-pool form only (kda.h, kda_decode_args_t): `conv_weights=(wq, wk, wv)` ([H*K, 4],
    [H*K, 4], [HV*V, 4]) with `conv_states=(sq, sk, sv)` ([slots, H*K, 3], [slots, H*K, 3], [slots, HV*V, 3],
    updated in place through the same slots as the pool): the causal short convolution (width 4, SiLU) of the raw
    q, k, v before everything else, as vLLM's causal_conv1d_update. `out_norm_weight` [V] with `out_gate`
    [N, T, HV, V] (v's shape): the gated RMSNorm of the output (FLA's FusedRMSNormGated; `out_gate_activation`
    "sigmoid" or "silu"), so o is the normed output.
    """
    if "transpose_state_layout" in kwargs:
        if state_v_first:
            raise ValueError("kda: cannot pass both state_v_first and the deprecated transpose_state_layout")
        state_v_first = bool(kwargs.pop("transpose_state_layout"))
    _reject_kwargs("fused_recurrent_kda", kwargs)
    activation = _check_decode_fusions(ssm_state_indices, conv_weights, conv_states, out_norm_weight, out_gate,
                                       out_gate_activation)

    if ssm_state_indices is None:
        if num_accepted_tokens is not None:
            raise ValueError("kda: num_accepted_tokens: needs ssm_state_indices (the state-pool form)")
        return chunk_kda(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                         output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                         use_gate_in_kernel=use_gate_in_kernel,
                         use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                         lower_bound=lower_bound, state_v_first=state_v_first, cu_seqlens=cu_seqlens,
                         A_log=A_log, dt_bias=dt_bias, out=out, backend=backend,
                         final_state=None)

    # The state-pool (continuous batching / speculative verify) form.
    if initial_state is None:
        raise ValueError("kda: initial_state: the state pool is required with ssm_state_indices")
    if q.dim() != 4 or v.dim() != 4:
        raise ValueError(f"kda: q: must be [B, T, H, K] (v [B, T, HV, V]), got q {tuple(q.shape)}, v {tuple(v.shape)}")
    _check_beta(use_beta_sigmoid_in_kernel, allow_neg_eigval, beta, v)
    if _any_requires_grad(q, k, v, g, beta, A_log, dt_bias, initial_state):
        raise NotImplementedError("kda: ssm_state_indices: the state-pool form is inference-only (no autograd)")
    B, T = q.shape[0], q.shape[1]
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"kda: cu_seqlens: the batch size must be 1 with cu_seqlens, got B = {B}")
        N = cu_seqlens.shape[0] - 1
        if N <= 0 or T % N != 0:
            raise NotImplementedError(
                f"kda: cu_seqlens: with ssm_state_indices every sequence has the same token count; {T} tokens do "
                f"not split evenly into {N} sequences")
        T1 = T // N
        _check_equal_lengths(cu_seqlens, N, T1)
        shape4 = lambda x: x.reshape(N, T1, *x.shape[2:])  # noqa: E731
        qn, kn, vn, gn, bn = map(shape4, (q, k, v, g, beta))
    else:
        qn, kn, vn, gn, bn = q, k, v, g, beta
    if scale is None:
        scale = q.shape[-1] ** -0.5
    gate_mode, lb, A_log, dt_bias = _gate_mode(use_gate_in_kernel, A_log, dt_bias, lower_bound, False, g)
    if out is None:
        out = torch.empty(v.shape, dtype=q.dtype, device=q.device)
    elif tuple(out.shape) != tuple(v.shape):
        raise ValueError(f"kda: out: must have v's shape {tuple(v.shape)}, got {tuple(out.shape)}")
    out_n = out if cu_seqlens is None else out.view(qn.shape[0], qn.shape[1], *v.shape[2:])
    gate_n = out_gate if out_gate is None or cu_seqlens is None else shape4(out_gate)
    cw = tuple(conv_weights) if conv_weights is not None else (None,) * 3
    cs = tuple(conv_states) if conv_states is not None else (None,) * 3
    _run(torch.ops.kda.decode_out, qn, kn, vn, gn, bn, A_log, dt_bias, initial_state, ssm_state_indices,
         num_accepted_tokens, float(scale), gate_mode, lb, bool(use_qk_l2norm_in_kernel),
         bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval), bool(state_v_first), _backend_id(backend), out_n,
         *cw, *cs, out_norm_weight, gate_n, float(out_norm_eps), activation)
    return out, initial_state
