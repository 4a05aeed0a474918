"""Framework-free pieces shared by kda's PyTorch ops (ops.py) and its JAX binding (jax.py): the backend and gate
enums of include/kda/kda.h and FLA's argument rules. Importing it needs neither torch nor jax, so `import kda.jax`
works where torch is not installed."""
from __future__ import annotations

# kda_backend_t and kda_gate_mode_t of include/kda/kda.h.
BACKENDS = {"auto": 0, "reference": 1, "cpu": 2, "cuda-generic": 3, "cuda-hopper": 4, "cuda-chunked": 5,
            "cuda-recurrent": 6}
_GATE_LOG_DECAY, _GATE_SOFTPLUS, _GATE_BOUNDED = 0, 1, 2
_HOST_BACKENDS = (BACKENDS["auto"], BACKENDS["reference"], BACKENDS["cpu"])


def _backend_id(backend) -> int:
    if isinstance(backend, int):
        return backend
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ValueError(f"kda: backend: unknown value {backend!r}; one of {sorted(BACKENDS)}") from None


def _gate_selection(use_gate_in_kernel, A_log, lower_bound, safe_gate):
    """FLA's gate selection, framework-free (kda.jax uses it too): (gate_mode, lower_bound, whether the gate is
    activated in the kernel, i.e. takes A_log and dt_bias)."""
    if not use_gate_in_kernel:
        # g is the pre-computed log-decay; FLA ignores A_log / dt_bias / lower_bound here (safe_gate only
        # promises the caller's gates are already bounded).
        return _GATE_LOG_DECAY, -5.0, False
    if safe_gate:
        if lower_bound is None:
            raise ValueError("kda: lower_bound: must be specified when safe_gate=True and use_gate_in_kernel=True")
        if not (-5 <= lower_bound < 0):
            raise ValueError(f"kda: lower_bound: must be in the safe range [-5, 0), got {lower_bound}")
    if lower_bound is None and A_log is None:
        raise ValueError("kda: A_log: must be provided when use_gate_in_kernel=True and lower_bound is not set")
    if lower_bound is not None:
        return _GATE_BOUNDED, float(lower_bound), True
    return _GATE_SOFTPLUS, -5.0, True


def _check_beta(use_beta_sigmoid_in_kernel, allow_neg_eigval, beta, v):
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError("kda: allow_neg_eigval: allow_neg_eigval=True requires use_beta_sigmoid_in_kernel=True")
    if beta.ndim == v.ndim:  # .ndim: torch tensors and JAX arrays alike
        raise NotImplementedError(
            "kda: beta: head-wise beta [B, T, HV, V] is not supported; beta must be [B, T, HV]"
        )


# kda_out_gate_activation_t by name (FLA's FusedRMSNormGated: "sigmoid"; "silu" = "swish").
_OUT_GATE_ACTIVATIONS = {"sigmoid": 0, "silu": 1, "swish": 1}


def _check_decode_fusions(ssm_state_indices, conv_weights, conv_states, out_norm_weight, out_gate,
                          out_gate_activation) -> int:
    """fused_recurrent_kda's fusion keywords (torch and JAX alike): the conv's weights and states as (q, k, v)
    triples given together, the norm's weight and gate together, both in the state-pool form only. Returns the
    activation's kda_out_gate_activation_t."""
    if ssm_state_indices is None and any(x is not None for x in (conv_weights, conv_states, out_norm_weight, out_gate)):
        raise NotImplementedError("kda: conv_weights / conv_states / out_norm_weight / out_gate: the fusions are "
                                  "the state-pool form's (pass ssm_state_indices)")
    if (conv_weights is None) != (conv_states is None) or any(
            x is not None and (not isinstance(x, (tuple, list)) or len(x) != 3) for x in (conv_weights, conv_states)):
        raise ValueError("kda: conv_weights, conv_states: give both, each a (q, k, v) triple, or neither")
    if (out_norm_weight is None) != (out_gate is None):
        raise ValueError("kda: out_norm_weight, out_gate: give both or neither")
    if out_gate_activation not in _OUT_GATE_ACTIVATIONS:
        raise ValueError(f"kda: out_gate_activation: one of {sorted(_OUT_GATE_ACTIVATIONS)}, got "
                         f"{out_gate_activation!r}")
    return _OUT_GATE_ACTIVATIONS[out_gate_activation]
