"""kda for JAX: FLA-compatible `chunk_kda` over kda's XLA FFI handlers (python/csrc/jax_ffi.cpp, libkda_jax.so).

`import kda.jax` needs jax; `import kda` does not. The handlers are registered for XLA's CPU platform and, when kda
was built with CUDA, its CUDA platform; `jax.lax.platform_dependent` stages out the one the computation is lowered
for. kda never allocates: each call's workspace is an extra result of its ffi_call, sized when the call is traced
by kda's own workspace query (kda_jax_workspace_size, through ctypes), which validates every argument at that
point too, so a bad argument raises ValueError / NotImplementedError (TypeError for a dtype kda does not take)
naming it before anything runs. Gradients of q, k, v, g, beta, A_log, dt_bias and initial_state come from kda's
backward (host: the float64 reverse recurrence; CUDA: the exact token-recurrent one) through jax.custom_vjp.
"""
from __future__ import annotations

import ctypes
import os
from functools import partial
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .ops import _HOST_BACKENDS, BACKENDS, _backend_id, _check_beta, _gate_selection

__all__ = ["chunk_kda", "BACKENDS"]

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libkda_jax.so")
if not os.path.exists(_path):
    raise ImportError(
        f"kda.jax: the extension {_path} is missing: kda was installed without jax; install jax, then kda again "
        "(`pip install .` builds the JAX extension when `import jax` works)"
    )
_lib = ctypes.CDLL(_path)
_lib.kda_last_error.restype = ctypes.c_char_p

# XLA FFI targets: (name, CPU handler, CUDA handler); the CUDA ones exist when kda was built with CUDA.
_TARGETS = (("kda_forward", "KdaForwardCpu", "KdaForwardCuda"), ("kda_backward", "KdaBackwardCpu", "KdaBackwardCuda"))
_HAS_CUDA = all(hasattr(_lib, cuda) for _, _, cuda in _TARGETS)
for _name, _cpu, _cuda in _TARGETS:
    jax.ffi.register_ffi_target(_name, jax.ffi.pycapsule(getattr(_lib, _cpu)), platform="cpu")
    if _HAS_CUDA:
        jax.ffi.register_ffi_target(_name, jax.ffi.pycapsule(getattr(_lib, _cuda)), platform="CUDA")

# The buffers of each call in the handlers' order (the workspace, always last, excluded).
_INPUTS = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state", "cu_seqlens")
_BUFFERS = {
    "kda_forward": _INPUTS + ("out", "final_state"),
    "kda_backward": _INPUTS + ("dout", "dfinal_state", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"),
}
_KDA_DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(jnp.bfloat16): 2,
               np.dtype(np.float64): 3, np.dtype(np.int32): 4, np.dtype(np.int64): 5}  # kda_dtype_t
_MAX_DIMS = 6  # KDA_MAX_DIMS


class _Attrs(ctypes.Structure):
    """jax_ffi.cpp's KdaJaxAttrs: the calls' attributes (also passed to the workspace query)."""
    _fields_ = [("scale", ctypes.c_float), ("gate_mode", ctypes.c_int32), ("lower_bound", ctypes.c_float),
                ("use_qk_l2norm", ctypes.c_int32), ("beta_is_logits", ctypes.c_int32),
                ("allow_neg_eigval", ctypes.c_int32), ("state_v_first", ctypes.c_int32),
                ("chunk_size", ctypes.c_int32), ("backend", ctypes.c_int32), ("present", ctypes.c_int32)]


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


def _raise_for(status, call):
    """A failing kda status as the Python exception torch_op.cpp raises for it, with kda_last_error()."""
    if status == 0:
        return
    msg = f"{call}: {_lib.kda_last_error().decode()}"
    if status == 1:  # KDA_STATUS_INVALID_ARGUMENT
        raise ValueError(msg)
    if status in (2, 4):  # KDA_STATUS_NOT_SUPPORTED, KDA_STATUS_BACKEND_UNAVAILABLE
        raise NotImplementedError(msg)
    raise RuntimeError(msg)


def _call(call, cuda, flags, *buffers, results):
    """One ffi_call of `call` on the CPU or the CUDA platform. `buffers` are the operands, `results` the result
    shapes (jax.ShapeDtypeStruct), both with None for absent tensors; returns the results, None where absent."""
    names = _BUFFERS[call]
    specs = list(buffers) + list(results)
    attrs = _Attrs(flags.scale, flags.gate_mode, flags.lower_bound, flags.use_qk_l2norm, flags.beta_is_logits,
                   flags.allow_neg_eigval, flags.state_v_first, flags.chunk_size, flags.backend, 0)
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
    _raise_for(_lib.kda_jax_workspace_size(int(call == "kda_backward"), int(cuda), dtypes, ndims, dims,
                                           ctypes.byref(attrs), ctypes.byref(nbytes)), call)

    absent = jax.ShapeDtypeStruct((0,), jnp.float32)
    out = jax.ffi.ffi_call(call, [absent if r is None else r for r in results]
                           + [jax.ShapeDtypeStruct((nbytes.value,), jnp.uint8)])(
        *[jnp.zeros((0,), jnp.float32) if x is None else x for x in buffers],
        **{name: (np.float32 if ctype is ctypes.c_float else np.int32)(getattr(attrs, name))
           for name, ctype in _Attrs._fields_})
    return [None if r is None else o for o, r in zip(out[:-1], results)]


def _cuda_visible():
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def _run(call, flags, buffers, results):
    """`call` on the platform the computation is lowered for (CUDA only when kda has it and JAX sees a GPU)."""
    branches = {"cpu": partial(_call, call, False, flags, results=results)}
    if _HAS_CUDA and _cuda_visible():
        branches["cuda"] = partial(_call, call, True, flags, results=results)
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
    # The host backends' backward as asked (AUTO on the CPU is the CPU backend); the CUDA ones: AUTO, kda's CUDA
    # backward (the chunked forward has none of its own).
    flags = flags._replace(backend=flags.backend if flags.backend in _HOST_BACKENDS else BACKENDS["auto"])
    grads = _run("kda_backward", flags, list(inputs) + [dout, dfinal_state], [_like(x) for x in inputs[:8]])
    return tuple(grads) + (None,)  # cu_seqlens: integer offsets, no gradient


_chunk.defvjp(_chunk_fwd, _chunk_bwd)


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
    for name, x in (("q", q), ("v", v)):
        if x.ndim != 4:
            raise ValueError(f"kda: {name}: must be 4-D [B, T, heads, dim], got shape {tuple(x.shape)}")
    _check_beta(use_beta_sigmoid_in_kernel, allow_neg_eigval, beta, v)
    if chunk_size is not None and chunk_size not in (16, 32, 64):
        raise ValueError(f"kda: chunk_size: must be 16, 32 or 64, got {chunk_size}")
    gate_mode, lb, in_kernel = _gate_selection(use_gate_in_kernel, A_log, lower_bound, safe_gate)
    if not in_kernel:
        A_log = dt_bias = None
    elif dt_bias is None:
        dt_bias = jnp.zeros(v.shape[2] * q.shape[3], jnp.float32)
    flags = _Flags(float(q.shape[-1] ** -0.5 if scale is None else scale), gate_mode, lb,
                   bool(use_qk_l2norm_in_kernel), bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval),
                   bool(state_v_first), chunk_size or 0, _backend_id(backend), bool(output_final_state))
    return _chunk(flags, q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens)
