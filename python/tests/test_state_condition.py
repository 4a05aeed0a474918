"""scripts/models/state_condition.py's three first-order measures (docs/numerics.md, the open question of
ill-conditioned cases), each against what it claims on a small random head in float64: keyscale is the derivative of
the final state when every key is scaled by (1 + eps) (central differences), coherent is every token's state carried
to the end (the direct sum of S_s times the later transitions), random is the sum of those transitions' quadratic
forms of each token's diag(colsum S_s^2); and the recurrence's final state is numpy_recurrent.py's."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "models"))
import state_condition as sc  # noqa: E402


def _head(rng, L, K, V, beta_max):
    k = rng.standard_normal((L, K))
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    return dict(S=rng.standard_normal((V, K)), k=k, v=rng.standard_normal((L, V)),
                g=-rng.uniform(0.0, 0.3, (L, K)), beta=rng.uniform(0.0, beta_max, L))


def _transition(k, g, beta):
    return np.diag(np.exp(g)) @ (np.eye(len(k)) - beta * np.outer(k, k))


@pytest.mark.parametrize("beta_max", [1.0, 2.0])
def test_measures_equal_their_definitions(seed, beta_max):
    rng = np.random.default_rng(seed)
    L, K, V = 9, 6, 5
    x = _head(rng, L, K, V, beta_max)
    S_T, X, Y, P, _ = sc.head_measures(x["S"], x["k"], x["v"], x["g"], x["beta"])

    # The plain recurrence, value-first, as numpy_recurrent.py runs it.
    def run(scale_k):
        S = x["S"].copy()
        for t in range(L):
            kt = x["k"][t] * scale_k
            S = S * np.exp(x["g"][t])[None, :]
            S = S + np.outer(x["beta"][t] * (x["v"][t] - S @ kt), kt)
        return S

    np.testing.assert_allclose(S_T, run(1.0), rtol=1e-12, atol=1e-12)
    eps = 1e-6
    np.testing.assert_allclose(Y, (run(1 + eps) - run(1 - eps)) / (2 * eps), rtol=1e-6, atol=1e-8)

    # Every token's state (the initial one too) through the later transitions, directly.
    A = [_transition(x["k"][t], x["g"][t], x["beta"][t]) for t in range(L)]
    states, S = [x["S"]], x["S"]
    for t in range(L):
        S = S @ A[t]
        S = S + x["beta"][t] * np.outer(x["v"][t], x["k"][t])
        states.append(S)
    X_direct, P_direct = np.zeros((V, K)), np.zeros((K, K))
    for s, Ss in enumerate(states):
        Q = np.eye(K)
        for t in range(s, L):
            Q = Q @ A[t]
        X_direct += Ss @ Q
        P_direct += Q.T @ np.diag((Ss * Ss).sum(0)) @ Q
    np.testing.assert_allclose(X, X_direct, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(P, P_direct, rtol=1e-10, atol=1e-10)


def keyscale_ratios(seed, V=64):
    """The keyscale measure's ratios the test below judges, for one seed: near-identical keys at beta 1.999 against
    the same keys at beta 0.999, and against random keys at beta 1.999 (also run over many seeds by
    bench/results/2026-12-07-cpu-session65/keyscale_ratios.py)."""
    rng = np.random.default_rng(seed)
    L, K = 512, 64
    base = rng.standard_normal(K)
    near = base[None, :] + 1e-3 * rng.standard_normal((L, K))
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    rand = rng.standard_normal((L, K))
    rand /= np.linalg.norm(rand, axis=1, keepdims=True)
    v, g, S = rng.standard_normal((L, V)), np.full((L, K), -1e-3), np.zeros((V, K))

    def keyscale(k, b):
        S_T, _, Y, _, _ = sc.head_measures(S, k, v, g, np.full(L, b))
        return np.linalg.norm(Y) / np.linalg.norm(S_T)

    hostile = keyscale(near, 1.999)
    return hostile / keyscale(near, 0.999), hostile / keyscale(rand, 1.999)


def test_keyscale_grows_with_near_identical_keys_at_beta_2(seed):
    """What the measure is for: near-identical keys at beta near 2 (the probe every fp32 implementation here misses,
    docs/numerics.md) against the same keys at beta near 1 and random keys at beta near 2. The V value rows are
    independent heads on the same keys, so the ratios are over V of them: with V = 8 one seed in a few hundred fell
    under the first margin (seed 1359463752: 87x, CI of session 64); with V = 64 seeds 0-2299 all clear both margins
    by at least 2.4x (256-647x the first, 1% under 286; 37-64x the second)."""
    against_beta_1, against_random_keys = keyscale_ratios(seed)
    assert against_beta_1 > 100, against_beta_1
    assert against_random_keys > 15, against_random_keys
