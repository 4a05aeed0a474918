"""The fp64 oracle of the Python tests: operator.md's token-by-token recurrence in numpy, with FLA's flags.

Independent of the library (it does not call kda's reference backend), so it also checks how kda.chunk_kda maps
FLA's arguments onto the C ABI.
"""
import numpy as np
import torch


def _np(t):
    """float64 numpy of a torch tensor or of any array (numpy, JAX)."""
    if t is None:
        return None
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().double().numpy()
    return np.asarray(t).astype(np.float64)


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def short_conv(x, state, w):
    """kda's fused causal short convolution for one sequence in float64 (kda.h): inputs x [T, dim], its conv state
    [dim, 3] (oldest input first) and weights [dim, 4] (column 3 on the current token). Returns (silu of the conv
    [T, dim], the new state [dim, 3]: the last three inputs)."""
    x, state, w = _np(x), _np(state), _np(w)
    seq = np.concatenate([state.T, x])  # [3 + T, dim]
    y = np.stack([sum(w[:, j] * seq[t + j] for j in range(4)) for t in range(len(x))])
    return y * sigmoid(y), seq[-3:].T


def gated_rmsnorm(o, weight, gate, eps, activation):
    """kda's fused gated RMSNorm of the output over its last axis in float64: o rsqrt(mean(o^2) + eps) weight
    act(gate), act = sigmoid or silu."""
    o, weight, gate = _np(o), _np(weight), _np(gate)
    act = sigmoid(gate) if activation == "sigmoid" else gate * sigmoid(gate)
    return o / np.sqrt((o ** 2).mean(-1, keepdims=True) + eps) * weight * act


def kda_reference(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None, use_qk_l2norm=False,
                  use_gate_in_kernel=False, A_log=None, dt_bias=None, lower_bound=None, beta_sigmoid=False,
                  allow_neg_eigval=False, state_v_first=False):
    """Returns (o [B, T, HV, V], final_state [N, HV, K, V] or [N, HV, V, K]) in float64 numpy."""
    q, k, v, g, beta = map(_np, (q, k, v, g, beta))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    G = HV // H
    scale = K ** -0.5 if scale is None else scale
    if use_qk_l2norm:
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    if use_gate_in_kernel:
        bias = np.zeros((HV, K)) if dt_bias is None else _np(dt_bias).reshape(HV, K)
        x = g + bias[None, None]
        if lower_bound is not None:
            a = np.ones(HV) if A_log is None else np.exp(_np(A_log))
            gl = lower_bound * sigmoid(a[None, None, :, None] * x)
        else:
            gl = -np.exp(_np(A_log))[None, None, :, None] * softplus(x)
    else:
        gl = g
    if beta_sigmoid:
        beta = sigmoid(beta) * (2.0 if allow_neg_eigval else 1.0)
    if cu_seqlens is None:
        seqs = [(b, 0, T) for b in range(B)]
    else:
        cu = cu_seqlens.tolist()
        seqs = [(0, cu[n], cu[n + 1]) for n in range(len(cu) - 1)]
    h0 = _np(initial_state)
    o = np.zeros((B, T, HV, V))
    finals = []
    for n, (b, t0, t1) in enumerate(seqs):
        fin = np.zeros((HV, V, K))
        for hv in range(HV):
            h = hv // G
            if h0 is None:
                S = np.zeros((V, K))
            else:
                S = h0[n, hv].copy() if state_v_first else h0[n, hv].T.copy()
            for t in range(t0, t1):
                S = S * np.exp(gl[b, t, hv])[None, :]
                u = beta[b, t, hv] * (v[b, t, hv] - S @ k[b, t, h])
                S = S + np.outer(u, k[b, t, h])
                o[b, t, hv] = scale * (S @ q[b, t, h])
            fin[hv] = S
        finals.append(fin if state_v_first else fin.transpose(0, 2, 1))
    return o, np.stack(finals)


def assert_close(name, got, ref, atol, rtol, seed):
    """Element-wise |got - ref| <= atol + rtol * |ref| on every element, plus no NaN/Inf."""
    got = _np(got)
    assert got.shape == ref.shape, f"{name}: shape {got.shape} != reference {ref.shape} (seed {seed})"
    assert np.isfinite(got).all(), f"{name}: non-finite values (seed {seed})"
    err = np.abs(got - ref)
    bound = atol + rtol * np.abs(ref)
    bad = err > bound
    if bad.any():
        i = np.unravel_index(np.argmax(err - bound), err.shape)
        raise AssertionError(f"{name}: {bad.sum()} of {bad.size} elements out of bounds; worst at {i}: got "
                             f"{got[i]:.6g}, ref {ref[i]:.6g} (atol {atol}, rtol {rtol}); replay with KDA_SEED={seed}")
