"""The gradient pass in fragment layout (scripts/models/grad_fragments.py, docs/backward.md's design for #9's next
step), in float64: lane by lane it must give the direct sums of the difference form, and those the runs form of the
kernels' P4 (chunk_backward.py p4_by_channel), for tame chunks; a wrong fragment rule must be caught."""
import math
import os
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "models"))
import chunk_backward as cb  # noqa: E402
import grad_fragments as gf  # noqa: E402


def _worst(ref, got):
    return max(float(np.max(np.abs(r - g)) / np.max(np.abs(r))) for r, g in zip(ref, got))


@pytest.mark.parametrize("Kc,L", [(128, 64), (64, 64), (128, 45), (64, 1)])
def test_fragment_pass_equals_the_direct_sums(seed, Kc, L):
    x = gf.tame_chunk(np.random.default_rng(seed), Kc, L)
    *got, tb = gf.fragment_pass(*x)
    assert not any(np.isnan(a).any() for a in got + [tb]), "an output element no lane wrote"
    assert _worst(gf.direct(*x), got) < 1e-12
    Q, K, G, B, dM, dA, QS, BK, KD, CS = x
    terms = BK * K * 2.0 ** np.cumsum(G, 0)  # dbeta's third term, per 32 channels as chunk_grad_rows.cu adds them
    want = terms.reshape(gf.C, Kc // 32, 32).sum(2).T
    assert np.max(np.abs(tb - want)) <= 1e-12 * np.max(np.abs(want))


@pytest.mark.parametrize("Kc,L", [(128, 64), (64, 64), (128, 45)])
def test_finishing_dq_dk_equals_the_norms_backward(seed, Kc, L):
    """chunk_grad_tc.cu's dq / dk finishing (grad_tc_finishes_qk): the rows' dots gathered from the lanes' partials,
    the warps' and the halves', equal the L2 norm's backward of the direct dq_hat, dk_hat: (d - x (x . d)) / |x|."""
    rng = np.random.default_rng(seed)
    x = gf.tame_chunk(rng, Kc, L)
    inv = (rng.uniform(0.5, 4.0, gf.C), rng.uniform(0.5, 4.0, gf.C))
    *_, dqn, dkn = gf.fragment_pass(*x, inv_norms=inv)
    assert not (np.isnan(dqn).any() or np.isnan(dkn).any()), "an output element no lane wrote"
    Q, K = x[0], x[1]
    dq, dk, _ = gf.direct(*x)
    want = [(d - xh * (xh * d).sum(1, keepdims=True)) * iv[:, None] for d, xh, iv in ((dq, Q, inv[0]), (dk, K, inv[1]))]
    assert _worst(want, [dqn, dkn]) < 1e-12


def test_the_direct_difference_form_equals_the_runs_form(seed):
    """direct() against P4 as the kernels run it (dg summed over the runs each decay spans, never a difference), in
    float64 on a tame chunk: the difference form is the same function where nothing cancels badly."""
    Q, K, G, B, dM, dA, QS, BK, KD, CS = gf.tame_chunk(np.random.default_rng(seed), 16, 50)
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    runs = cb.p4_by_channel(t(Q), t(K), t(G * math.log(2.0)), t(B), t(QS), t(BK), t(KD), t(CS), t(dM),
                            t(B[:, None] * dA), gf.C)
    assert _worst([r.numpy() for r in runs[:3]], gf.direct(Q, K, G, B, dM, dA, QS, BK, KD, CS)) < 1e-12


def test_a_wrong_fragment_rule_is_caught(seed, monkeypatch):
    x = gf.tame_chunk(np.random.default_rng(seed), 64, 64)
    right = gf.mma

    def b_transposed(a, b):  # b_j read as B[grp][tig + 4 j]: the rule of a row-major B
        A, Bm = np.zeros((16, 8)), np.zeros((8, 8))
        for i in range(4):
            A[gf.GRP + 8 * (i & 1), gf.TIG + 4 * (i >> 1)] = a[i]
        for j in range(2):
            Bm[gf.GRP, gf.TIG + 4 * j] = b[j]
        Cm = A @ Bm
        return np.stack([Cm[gf.GRP + 8 * (i >> 1), 2 * gf.TIG + (i & 1)] for i in range(4)])

    monkeypatch.setattr(gf, "mma", b_transposed)
    assert _worst(gf.direct(*x), gf.fragment_pass(*x)[:3]) > 1e-3
    monkeypatch.setattr(gf, "mma", right)
    assert _worst(gf.direct(*x), gf.fragment_pass(*x)[:3]) < 1e-12
