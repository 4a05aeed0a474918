"""kda for JAX: FLA-compatible `chunk_kda` and `fused_recurrent_kda` (the state-pool decode) over kda's XLA FFI
handlers (python/csrc/jax_ffi.cpp, libkda_jax.so).

`import kda.jax` needs jax; `import kda` does not. The handlers are registered for XLA's CPU platform and, when kda
was built with CUDA, its CUDA platform; `jax.lax.platform_dependent` stages out the one the computation is lowered
for. kda never allocates: each call's workspace is an extra result of its ffi_call, sized when the call is traced
by kda's own workspace query (kda_jax_workspace_size, through ctypes), which validates every argument at that
point too, so a bad argument raises ValueError / NotImplementedError (TypeError for a dtype kda does not take)
naming it before anything runs; a call only one platform refuses (K = 16 under CUDA's chunked backward, say) traces,
and its handler reports kda's error if it runs there (_run). Gradients of q, k, v, g, beta, A_log, dt_bias and
initial_state come from kda's backward (host: float64, the CPU backend's chunked form; CUDA: the chunked one where it
applies, else the exact token-recurrent one) through jax.custom_vjp. The decode updates its state pool in place (its
pool result is aliased to its pool operand) and is inference-only.
"""
from __future__ import annotations

import ctypes
import os
from functools import partial
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ._common import _HOST_BACKENDS, BACKENDS, _backend_id, _check_beta, _check_decode_fusions, _gate_selection

__all__ = ["chunk_kda", "fused_recurrent_kda", "BACKENDS"]

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libkda_jax.so")
if not os.path.exists(_path):
    raise ImportError(
        f"kda.jax: the extension {_path} is missing: kda was installed without jax; install jax, then kda again "
        "(`pip install .` builds the JAX extension when `import jax` works)"
    )
_lib = ctypes.CDLL(_path)
_lib.kda_last_error.restype = ctypes.c_char_p

# XLA FFI targets: (name, CPU handler, CUDA handler); the CUDA ones exist when kda was built with CUDA.
_TARGETS = (("kda_forward", "KdaForwardCpu", "KdaForwardCuda"), ("kda_backward", "KdaBackwardCpu", "KdaBackwardCuda"),
            ("kda_decode", "KdaDecodeCpu", "KdaDecodeCuda"))
_CALLS = [name for name, _, _ in _TARGETS]  # jax_ffi.cpp's Call: the index is the workspace query's `call`
_HAS_CUDA = all(hasattr(_lib, cuda) for _, _, cuda in _TARGETS)
for _name, _cpu, _cuda in _TARGETS:
    jax.ffi.register_ffi_target(_name, jax.ffi.pycapsule(getattr(_lib, _cpu)), platform="cpu")
    if _HAS_CUDA:
        jax.ffi.register_ffi_target(_name, jax.ffi.pycapsule(getattr(_lib, _cuda)), platform="CUDA")

# The buffers of each call in the handlers' order (the workspace, always last, excluded), by their Python names.
_INPUTS = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state", "cu_seqlens")
_BUFFERS = {
    "kda_forward": _INPUTS + ("out", "final_state"),
    "kda_backward": _INPUTS + ("dout", "dfinal_state", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"),
    "kda_decode": _INPUTS[:8] + ("ssm_state_indices", "num_accepted_tokens") + (
        "q_conv_weight", "k_conv_weight", "v_conv_weight", "q_conv_state", "k_conv_state", "v_conv_state",
        "out_norm_weight", "out_gate", "out", "initial_state", "q_conv_state", "k_conv_state", "v_conv_state"),
}
# kda's names of decode's arguments -> the Python API's (as torch_op.cpp's decode_out renames them).
_RENAMES = {"kda_decode": (("state_indices", "ssm_state_indices"), ("state_pool", "initial_state (the state pool)"))}
_KDA_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(jnp.bfloat16): 2,
               np.dtype(np.float64): 3, np.dtype(np.int32): 4, np.dtype(np.int64): 5}  # kda_dtype_t
_MAX_DIMS = 6  # KDA_MAX_DIMS


class _Attrs(ctypes.Structure):
    """jax_ffi.cpp's KdaJaxAttrs: the calls' attributes (also passed to the workspace query)."""
    _fields_ = [("scale", ctypes.c_float), ("gate_mode", ctypes.c_int32), ("lower_bound", ctypes.c_float),
                ("use_qk_l2norm", ctypes.c_int32), ("beta_is_logits", ctypes.c_int32),
                ("allow_neg_eigval", ctypes.c_int32), ("state_v_first", ctypes.c_int32),
                ("chunk_size", ctypes.c_int32), ("backend", ctypes.c_int32), ("present", ctypes.c_int32),
                ("out_norm_eps", ctypes.c_float), ("out_gate_activation", ctypes.c_int32)]


class _Flags(NamedTuple):
    """The static (non-array) arguments of one chunk_kda call."""
    scale: float
    gate_mode: int
    lower_bound: float
    use_qk_l2norm: bool
    beta_is_logits: bool
    allow_neg_eigval: bool
    state_v_first: bool
    chunk_size: int
    backend: int
    output_final_state: bool
    out_norm_eps: float = 1e-5      # decode's gated RMSNorm
    out_gate_activation: int = 0    # kda_out_gate_activation_t


def _raise_for(status, call):
    """A failing kda status as the Python exception kda.chunk_kda raises for it, with kda_last_error()."""
    if status == 0:
        return
    msg = f"{call}: {_lib.kda_last_error().decode()}"
    for c_name, py_name in _RENAMES.get(call, ()):
        msg = msg.replace(f": {c_name}", f": {py_name}", 1)
    if status == 1:  # KDA_STATUS_INVALID_ARGUMENT
        raise ValueError(msg)
    if status in (2, 4):  # KDA_STATUS_NOT_SUPPORTED, KDA_STATUS_BACKEND_UNAVAILABLE
        raise NotImplementedError(msg)
    raise RuntimeError(msg)


def _query(call, cuda, flags, buffers, results):
    """kda's workspace query for one ffi_call of `call` on the CPU (cuda False) or the CUDA platform. `buffers` are
    the operands, `results` the result shapes (jax.ShapeDtypeStruct), both with None for absent tensors. Returns
    (attrs, workspace bytes, None) or, when kda refuses the call on that platform, (attrs, 0, the exception)."""
    names = _BUFFERS[call]
    specs = list(buffers) + list(results)
    attrs = _Attrs(flags.scale, flags.gate_mode, flags.lower_bound, flags.use_qk_l2norm, flags.beta_is_logits,
                   flags.allow_neg_eigval, flags.state_v_first, flags.chunk_size, flags.backend, 0,
                   flags.out_norm_eps, flags.out_gate_activation)
    n = len(names)
    dtypes, ndims, dims = (ctypes.c_int32 * n)(), (ctypes.c_int32 * n)(), (ctypes.c_int64 * (n * _MAX_DIMS))()
    for i, (name, x) in enumerate(zip(names, specs)):
        if x is None:
            continue
        attrs.present |= 1 << i
        if np.dtype(x.dtype) not in _KDA_DTYPES:
            raise TypeError(f"kda: {name}: unsupported dtype {np.dtype(x.dtype)}")
        dtypes[i] = _KDA_DTYPES[np.dtype(x.dtype)]
        ndims[i] = len(x.shape)
        for j, d in enumerate(x.shape[:_MAX_DIMS]):
            dims[i * _MAX_DIMS + j] = d
    nbytes = ctypes.c_uint64()
    try:
        _raise_for(_lib.kda_jax_workspace_size(_CALLS.index(call), int(cuda), dtypes, ndims, dims,
                                               ctypes.byref(attrs), ctypes.byref(nbytes)), call)
    except (ValueError, NotImplementedError, RuntimeError) as e:
        return attrs, 0, e
    return attrs, nbytes.value, None


def _call(call, attrs, nbytes, *buffers, results, aliases):
    """One ffi_call of `call` with the attributes and workspace bytes _query gave; `aliases` its
    input_output_aliases ({operand index: result index}). Returns the results, None where absent."""
    absent = jax.ShapeDtypeStruct((0,), jnp.float32)
    # vmap_method="sequential": under jax.vmap the call runs once per mapped element (the kernels take one batch of
    # their own, [B, T, ...]; a mapped axis is a loop around them), with the workspace sized for one element.
    out = jax.ffi.ffi_call(call, [absent if r is None else r for r in results]
                           + [jax.ShapeDtypeStruct((nbytes,), jnp.uint8)], input_output_aliases=aliases,
                           vmap_method="sequential")(
        *[jnp.zeros((0,), jnp.float32) if x is None else x for x in buffers],
        **{name: (np.float32 if ctype is ctypes.c_float else np.int32)(getattr(attrs, name))
           for name, ctype in _Attrs._fields_})
    return [None if r is None else o for o, r in zip(out[:-1], results)]


def _cuda_visible():
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def _run(call, flags, buffers, results, aliases=None):
    """`call` on the platform the computation is lowered for (CUDA only when kda has it and JAX sees a GPU).

    platform_dependent traces a branch for every platform, but runs only the one lowered. So a call kda refuses on
    one platform but takes on another (K = 16 on the CPU of a GPU machine; backend="reference" there) must not fail
    when traced: its refused branch is staged with no workspace and its handler reports kda's error if that branch
    is the one that runs. A call every platform refuses raises here, before anything runs, with the error of JAX's
    default platform."""
    platforms = {"cpu": False}
    if _HAS_CUDA and _cuda_visible():
        platforms["cuda"] = True
    queries = {name: _query(call, cuda, flags, buffers, results) for name, cuda in platforms.items()}
    if all(err is not None for _, _, err in queries.values()):
        default = "cuda" if jax.default_backend() in ("gpu", "cuda") and "cuda" in queries else "cpu"
        raise queries[default][2]
    branches = {name: partial(_call, call, attrs, nbytes, results=results, aliases=aliases)
                for name, (attrs, nbytes, _) in queries.items()}
    return jax.lax.platform_dependent(*buffers, **branches)


def _like(x):
    return None if x is None else jax.ShapeDtypeStruct(x.shape, x.dtype)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _chunk(flags, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens):
    N = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    HV, K, V = v.shape[2], q.shape[3], v.shape[3]
    state = (N, HV, V, K) if flags.state_v_first else (N, HV, K, V)
    results = [jax.ShapeDtypeStruct(v.shape, q.dtype),
               jax.ShapeDtypeStruct(state, jnp.float32) if flags.output_final_state else None]
    o, final_state = _run("kda_forward", flags, [q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens],
                          results)
    return o, final_state


def _chunk_fwd(flags, *inputs):
    return _chunk(flags, *inputs), inputs


def _chunk_bwd(flags, inputs, cotangents):
    dout, dfinal_state = cotangents
    # The host backends' backward as asked (AUTO on the CPU is the CPU backend); on CUDA "cuda-chunked" and
    # "cuda-recurrent" as asked, the others AUTO (the chunked backward where it applies, else the token-recurrent one).
    keep = _HOST_BACKENDS + (BACKENDS["cuda-chunked"], BACKENDS["cuda-recurrent"])
    flags = flags._replace(backend=flags.backend if flags.backend in keep else BACKENDS["auto"])
    grads = _run("kda_backward", flags, list(inputs) + [dout, dfinal_state], [_like(x) for x in inputs[:8]])
    return tuple(grads) + (None,)  # cu_seqlens: integer offsets, no gradient


_chunk.defvjp(_chunk_fwd, _chunk_bwd)


def _prepare(q, v, beta, scale, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
             allow_neg_eigval, safe_gate, lower_bound, A_log, dt_bias, state_v_first, backend, chunk_size,
             output_final_state):
    """The checks and the flags chunk_kda and fused_recurrent_kda share: (flags, A_log, dt_bias), the gate's arrays
    None when the gate is not activated in the kernel, a missing dt_bias a zero bias."""
    for name, x in (("q", q), ("v", v)):
        if x.ndim != 4:
            raise ValueError(f"kda: {name}: must be 4-D [B, T, heads, dim], got shape {tuple(x.shape)}")
    _check_beta(use_beta_sigmoid_in_kernel, allow_neg_eigval, beta, v)
    gate_mode, lb, in_kernel = _gate_selection(use_gate_in_kernel, A_log, lower_bound, safe_gate)
    if not in_kernel:
        A_log = dt_bias = None
    elif dt_bias is None:
        dt_bias = jnp.zeros(v.shape[2] * q.shape[3], jnp.float32)
    flags = _Flags(float(q.shape[-1] ** -0.5 if scale is None else scale), gate_mode, lb,
                   bool(use_qk_l2norm_in_kernel), bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval),
                   bool(state_v_first), chunk_size, _backend_id(backend), bool(output_final_state))
    return flags, A_log, dt_bias


def chunk_kda(
    q,
    k,
    v,
    g,
    beta,
    scale: Optional[float] = None,
    initial_state=None,
    output_final_state: bool = False,
    *,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    lower_bound: Optional[float] = None,
    A_log=None,
    dt_bias=None,
    cu_seqlens=None,
    state_v_first: bool = False,
    chunk_size: Optional[int] = None,
    backend: str = "auto",
):
    """`kda.chunk_kda` for JAX arrays, with FLA's argument meanings; returns (o, final_state or None).

    q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K] (the log-decay, or the raw gate with use_gate_in_kernel);
    beta [B, T, HV] (logits with use_beta_sigmoid_in_kernel); initial_state / final_state [N, HV, K, V] fp32
    ([N, HV, V, K] with state_v_first); cu_seqlens [N + 1] int32 (B = 1, packed sequences); A_log [HV] and
    dt_bias [HV * K] or [HV, K] fp32 for the in-kernel gate (softplus without lower_bound, bounded with it; a
    missing dt_bias is a zero bias). `scale` defaults to K^-0.5. kda extras: `chunk_size` (16, 32 or 64; default:
    the backend's choice) and `backend` ("auto", "reference" (the fp64 oracle, CPU), "cpu", "cuda-generic",
    "cuda-chunked", "cuda-recurrent"). Works under jax.jit; differentiable in every array argument but cu_seqlens.
    """
    if chunk_size is not None and chunk_size not in (16, 32, 64):
        raise ValueError(f"kda: chunk_size: must be 16, 32 or 64, got {chunk_size}")
    flags, A_log, dt_bias = _prepare(q, v, beta, scale, use_qk_l2norm_in_kernel, use_gate_in_kernel,
                                     use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, lower_bound, A_log,
                                     dt_bias, state_v_first, backend, chunk_size or 0, output_final_state)
    return _chunk(flags, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens)


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def _decode(flags, q, k, v, g, beta, A_log, dt_bias, pool, indices, num_accepted, conv_w, conv_s, norm_w, out_gate):
    # In-place results aliased to their operands: the pool (buffer 7 -> result 1) and, with the conv, the q / k / v
    # conv-state pools (buffers 13-15 -> results 2-4); kda updates them in place.
    results = [jax.ShapeDtypeStruct(v.shape, q.dtype), jax.ShapeDtypeStruct(pool.shape, pool.dtype)]
    results += [None if x is None else jax.ShapeDtypeStruct(x.shape, x.dtype) for x in conv_s]
    aliases = {7: 1}
    if conv_s[0] is not None:
        aliases.update({13: 2, 14: 3, 15: 4})
    out, new_pool, *new_conv = _run(
        "kda_decode", flags, [q, k, v, g, beta, A_log, dt_bias, pool, indices, num_accepted, *conv_w, *conv_s,
                              norm_w, out_gate], results, aliases=aliases)
    return out, new_pool, tuple(new_conv)


@_decode.defjvp
def _decode_jvp(flags, primals, tangents):
    raise NotImplementedError("kda: ssm_state_indices: the state-pool form of fused_recurrent_kda is inference-only "
                              "(no gradients); differentiate chunk_kda instead")


def fused_recurrent_kda(
    q,
    k,
    v,
    g,
    beta,
    *,
    A_log=None,
    dt_bias=None,
    scale: Optional[float] = None,
    initial_state=None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    lower_bound: Optional[float] = None,
    state_v_first: bool = False,
    cu_seqlens=None,
    ssm_state_indices=None,
    num_accepted_tokens=None,
    backend: str = "auto",
    conv_weights=None,
    conv_states=None,
    out_norm_weight=None,
    out_gate=None,
    out_norm_eps: float = 1e-5,
    out_gate_activation: str = "sigmoid",
    **kwargs,
):
    """`kda.fused_recurrent_kda` for JAX arrays (every argument after beta keyword-only); returns (o, state).

    Without `ssm_state_indices` it is `chunk_kda` (same op, same result). With `ssm_state_indices` (int32, [N], or
    [N, T] with `num_accepted_tokens` int32 [N] for speculative verify), `initial_state` is the state pool
    [slots, HV, K, V] fp32 ([slots, HV, V, K] with state_v_first) and q is [N, T, H, K]: sequence n starts from
    pool[idx[n]] (or pool[idx[n, num_accepted[n] - 1]]) and its state goes back to pool[idx[n]] (or after token t
    to pool[idx[n, t]]); a negative index marks padding (outputs zero, no slot touched); slots no index names are
    bitwise unchanged. Returns (o, new_pool). JAX arrays are immutable, so the new pool is a new array; inside
    jax.jit with the pool donated (`donate_argnums`) XLA updates the pool's buffer in place, without a copy (not
    donated, XLA copies the pool first). Inference-only: differentiating it raises NotImplementedError. Packed as
    vLLM passes them, q [1, N*T, H, K] with `cu_seqlens` [N + 1] = [0, T, 2T, ...] (every sequence T tokens; the
    values are checked where they are known when the call is traced), the same as q [N, T, H, K].

    kda's decode fusions, as kda.fused_recurrent_kda's (state-pool form): `conv_weights=(wq, wk, wv)` with
    `conv_states=(sq, sk, sv)` (the causal short conv of the raw q, k, v, width 4, SiLU; conv-state pools
    [slots, dim, 3] read and written through the same slots as the pool), and `out_norm_weight` [V] with `out_gate`
    (v's shape) for the gated RMSNorm of the output (`out_gate_activation` "sigmoid" or "silu"). With the conv the
    call returns (o, new_pool, (new_sq, new_sk, new_sv)), the conv-state pools updated as the pool is (in place when
    donated).
    """
    if kwargs:
        raise TypeError(f"kda.fused_recurrent_kda: unsupported argument(s) {sorted(kwargs)}")
    activation = _check_decode_fusions(ssm_state_indices, conv_weights, conv_states, out_norm_weight, out_gate,
                                       out_gate_activation)
    if ssm_state_indices is None:
        if num_accepted_tokens is not None:
            raise ValueError("kda: num_accepted_tokens: needs ssm_state_indices (the state-pool form)")
        return chunk_kda(q, k, v, g, beta, scale, initial_state, output_final_state,
                         use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
                         use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
                         lower_bound=lower_bound, A_log=A_log, dt_bias=dt_bias, cu_seqlens=cu_seqlens,
                         state_v_first=state_v_first, backend=backend)

    if initial_state is None:
        raise ValueError("kda: initial_state: the state pool is required with ssm_state_indices")
    packed = cu_seqlens is not None
    if packed:  # [1, N * T1, ...] as [N, T1, ...]: the decode runs the same token count for every sequence
        if q.ndim != 4 or q.shape[0] != 1:
            raise ValueError(f"kda: cu_seqlens: the batch size must be 1 with cu_seqlens, got q {tuple(q.shape)}")
        N, T = cu_seqlens.shape[0] - 1, q.shape[1]
        if N <= 0 or T % N != 0:
            raise NotImplementedError(f"kda: cu_seqlens: with ssm_state_indices every sequence has the same token "
                                      f"count; {T} tokens do not split evenly into {N} sequences")
        _check_equal_lengths(cu_seqlens, N, T // N)

        def per_sequence(x):
            return None if x is None else x.reshape((N, T // N) + x.shape[2:])

        q, k, v, g, beta, out_gate = map(per_sequence, (q, k, v, g, beta, out_gate))
    # The pool is always returned (output_final_state does not apply); kda's decode has no chunk size.
    flags, A_log, dt_bias = _prepare(q, v, beta, scale, use_qk_l2norm_in_kernel, use_gate_in_kernel,
                                     use_beta_sigmoid_in_kernel, allow_neg_eigval, False, lower_bound, A_log, dt_bias,
                                     state_v_first, backend, 0, True)
    flags = flags._replace(out_norm_eps=float(out_norm_eps), out_gate_activation=activation)
    conv_w = tuple(conv_weights) if conv_weights is not None else (None,) * 3
    conv_s = tuple(conv_states) if conv_states is not None else (None,) * 3
    o, new_pool, new_conv = _decode(flags, q, k, v, g, beta, A_log, dt_bias, initial_state, ssm_state_indices,
                                    num_accepted_tokens, conv_w, conv_s, out_norm_weight, out_gate)
    if packed:
        o = o.reshape((1, -1) + o.shape[2:])
    return (o, new_pool) if conv_states is None else (o, new_pool, new_conv)


def _check_equal_lengths(cu_seqlens, N, T1):
    """cu_seqlens must be [0, T1, 2 T1, ...]: checked where its values are known when the call is traced (a concrete
    array); under jax.jit it is a tracer, whose values kda cannot read then (as the PyTorch op under graph capture)."""
    try:
        values = np.asarray(cu_seqlens)
    except jax.errors.TracerArrayConversionError:
        return
    if not np.array_equal(values, np.arange(0, (N + 1) * T1, T1)):
        raise NotImplementedError(f"kda: cu_seqlens: with ssm_state_indices kda runs the same number of tokens per "
                                  f"sequence (here {T1}: cu_seqlens = [0, {T1}, {2 * T1}, ...]); got {values.tolist()}")
