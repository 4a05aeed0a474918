"""The hand-written chunked backward (scripts/models/chunk_backward.py) against autograd of the token recurrence, in
float64: the formulas issue #9's chunked kernels implement, and the CUDA kernels' own arrangement of them (the
"kernel " form: padded chunks, the kept tiles, the gradient pass's loops; "blocked ": its block pairs through
reference points; "rowcol ": those block pairs summed as a tensor-core form does; "byblock ": P4 with a thread per
(channel, 16-token block), each writing only its block's rows, docs/backward.md's next form)."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "models"))
import chunk_backward as cb  # noqa: E402


@pytest.mark.parametrize("T,K,V,C", [(37, 8, 6, 16), (64, 16, 8, 16), (50, 4, 4, 64), (33, 8, 8, 8), (1, 4, 4, 16),
                                     (150, 4, 4, 64)])
def test_chunked_backward_matches_autograd_of_the_recurrence(seed, T, K, V, C):
    worst = cb.check(seed, T, K, V, C)
    assert max(worst.values()) < 1e-9, worst


def test_the_safe_form_survives_decays_that_overflow_exp_minus_gamma(seed):
    """30 nats per token over 64-token chunks: exp(-Gamma) reaches e^1900, past float64; the form with only pair and
    chunk decays (<= 1) still matches autograd of the recurrence, where the plain form's K / exp(Gamma) is inf."""
    worst = cb.check(seed, 70, 8, 8, 64, decay=30.0,
                     forms=("safe ", "runs ", "kernel ", "blocked ", "rowcol ", "byblock "))
    assert max(worst.values()) < 1e-9, worst
    plain = cb.check(seed, 70, 8, 8, 64, decay=30.0, forms=("",))
    assert not all(e < 1e-9 for e in plain.values()), plain


def test_a_wrong_gate_gradient_is_caught(seed):
    """The check has teeth: the same backward without the final state's upstream gradient (every path through S_T,
    including each chunk's end decay) is far off in dg."""
    torch.manual_seed(seed)
    T, K, V, C = 40, 8, 8, 16
    D = torch.float64
    q, k, g = torch.randn(T, K, dtype=D), torch.randn(T, K, dtype=D) / 3, -torch.rand(T, K, dtype=D)
    v, beta, h0 = torch.randn(T, V, dtype=D), torch.rand(T, dtype=D), torch.randn(V, K, dtype=D)
    do, dST = torch.randn(T, V, dtype=D), torch.randn(V, K, dtype=D)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta, h0)]
    o, s = cb.recurrent(*leaves)
    ref = torch.autograd.grad((o * do).sum() + (s * dST).sum(), leaves)
    _, _, starts = cb.chunk_forward(q, k, v, g, beta, h0, C)
    good = cb.chunk_backward(q, k, v, g, beta, starts, do, dST, C)
    assert ((good[3] - ref[3]).norm() / ref[3].norm()) < 1e-9
    bad = cb.chunk_backward(q, k, v, g, beta, starts, do, torch.zeros_like(dST), C)  # drops dS_T's paths
    assert ((bad[3] - ref[3]).norm() / ref[3].norm()) > 1e-3


@pytest.mark.parametrize("pairs", ["loop", "blocked", "blockmma:bf16x3"])
def test_the_cuda_kernels_rounding_model_tracks_the_float64_arrangement(seed, pairs):
    """chunk_backward_rounding.py --form kernels (the CUDA chunked backward's arithmetic: bf16x3 reverse pass, fp32
    gradient pass) against the same arrangement in float64, on two chunks with a partial one and near-repeated keys:
    every gradient within 1e-4 relative (measured ~3e-6: bf16x3 keeps ~16 bits per operand; fp32 accumulation).
    blockmma:bf16x3: the block pairs as bf16x3 matrix products, the plan for a tensor-core gradient pass."""
    import numpy as np
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "verify_impls"))
    import chunk_backward_rounding as cbr  # noqa: E402
    g_ = torch.Generator().manual_seed(seed)
    L, K, V = 100, 16, 16
    q = torch.nn.functional.normalize(torch.randn(L, K, generator=g_, dtype=torch.float64), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(1, K, generator=g_, dtype=torch.float64)
                                      + 0.05 * torch.randn(L, K, generator=g_, dtype=torch.float64), dim=-1)
    v = torch.randn(L, V, generator=g_, dtype=torch.float64)
    g = -torch.rand(L, K, generator=g_, dtype=torch.float64) * 2.0
    beta = torch.rand(L, generator=g_, dtype=torch.float64)
    h0 = torch.randn(V, K, generator=g_, dtype=torch.float64)
    do = torch.randn(L, V, generator=g_, dtype=torch.float64)
    dST = torch.randn(V, K, generator=g_, dtype=torch.float64)
    scale = 0.25
    # float32-exact inputs, so both sides see the same values.
    q, k, v, g, beta, h0, do, dST = (x.float().double() for x in (q, k, v, g, beta, h0, do, dST))
    _, _, starts = cb.chunk_forward_safe(scale * q, k, v, g, beta, h0, 64)
    ref = cb.chunk_backward_kernel(scale * q, k, v, g, beta, starts, do, dST, 64)
    f = lambda x: x.numpy().astype(np.float32)  # noqa: E731
    got = cbr.kernels_backward(f(q), f(k), f(v), f(g), f(beta), f(do), f(h0), f(dST), scale, pairs)
    # The model's dq is of the unscaled q; the float64 form's of the scaled one.
    for name, a, b in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), got, (scale * ref[0],) + tuple(ref[1:])):
        err = float(np.linalg.norm(a.astype(np.float64) - b.numpy()) / np.linalg.norm(b.numpy()))
        assert err < 1e-4, f"{name}: {err:.2e} (seed {seed})"


def test_the_mma_chain_model_rounds_toward_zero_and_cutting_the_chain_helps(seed):
    """two_phase.py's 3xtf32mma (each mma's sum rounded toward zero, chunk_common.cuh mma3's chain over k-steps):
    exact where every partial sum is representable; on positive dot products (near-identical keys) it falls short of
    the exact value on every entry, and 3xtf32step (the chain cut per k-step, a backward's diagonal blocks since
    session 23) errs less than half as much on average; every mode stays within 2^-17 relative."""
    import numpy as np

    import two_phase as tp

    rng = np.random.default_rng(seed % 2**32)
    ints = rng.integers(-8, 8, size=(2, 16, 128)).astype(np.float32), rng.integers(-8, 8, size=(2, 128, 16))
    exact = np.matmul(ints[0].astype(np.float64), ints[1].astype(np.float64))
    for mode in ("3xtf32mma", "3xtf32mma2", "3xtf32step"):
        assert np.array_equal(tp.prod(ints[0], ints[1].astype(np.float32), mode), exact.astype(np.float32)), mode
    k = (1.0 + 1e-3 * rng.standard_normal((4, 16, 128))).astype(np.float32) / np.sqrt(128)
    ref = np.matmul(k.astype(np.float64), np.swapaxes(k, 1, 2).astype(np.float64))
    err = {m: (tp.prod(k, np.swapaxes(k, 1, 2), m) - ref) / ref for m in ("3xtf32", "3xtf32mma", "3xtf32step")}
    assert (err["3xtf32mma"] <= 0).all() and err["3xtf32mma"].mean() < -2.0**-23
    assert np.abs(err["3xtf32step"]).mean() < 0.5 * np.abs(err["3xtf32mma"]).mean()
    assert max(np.abs(e).max() for e in err.values()) < 2.0**-17


@pytest.mark.parametrize("dead", [False, True])
def test_the_difference_form_of_dg_needs_the_runs_only_where_a_decay_is_steep(seed, dead):
    """chunk_backward_rounding.py --dg difference (a study, docs/backward.md): dg as FLA forms it, the reverse
    cumulative sum of q dq - k dk, in fp32. Where every token's decay is >= 2^-12 it tracks the float64 arrangement as
    the kernels' form does (within 1e-4); with a dead channel (one token's decay e^-60) its cancellation leaves a
    residue far above that, and keeping the runs' form for that chunk's channel (min_bits = -12) restores it."""
    import numpy as np
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "verify_impls"))
    import chunk_backward_rounding as cbr  # noqa: E402
    g_ = torch.Generator().manual_seed(seed)
    L, K, V = 100, 16, 16
    D = torch.float64
    q = torch.nn.functional.normalize(torch.randn(L, K, generator=g_, dtype=D), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(L, K, generator=g_, dtype=D), dim=-1)
    v, beta = torch.randn(L, V, generator=g_, dtype=D), torch.rand(L, generator=g_, dtype=D)
    g = -torch.rand(L, K, generator=g_, dtype=D) * 2.0
    if dead:
        g[30, 3] = -60.0  # channel 3 forgets everything before token 30
    h0, do, dST = torch.randn(V, K, generator=g_, dtype=D), torch.randn(L, V, generator=g_, dtype=D), \
        torch.randn(V, K, generator=g_, dtype=D)
    scale = 0.25
    q, k, v, g, beta, h0, do, dST = (x.float().double() for x in (q, k, v, g, beta, h0, do, dST))
    _, _, starts = cb.chunk_forward_safe(scale * q, k, v, g, beta, h0, 64)
    ref = cb.chunk_backward_kernel(scale * q, k, v, g, beta, starts, do, dST, 64)[3].numpy()
    f = lambda x: x.numpy().astype(np.float32)  # noqa: E731
    args = (f(q), f(k), f(v), f(g), f(beta), f(do), f(h0), f(dST), scale, "loop")
    # Channel 3's dg, relative to the whole channel, and at token 30 relative to itself: there the true dg holds only
    # the pairs spanning token 30, all through its e^-60, ~1e-26 against terms of order 1.
    err = lambda got: (float(np.abs(got[3].astype(np.float64) - ref)[:, 3].max() / np.abs(ref[:, 3]).max()),  # noqa
                       float(abs(got[3][30, 3] - ref[30, 3]) / abs(ref[30, 3])))
    # Without a dead token, token 30 is nothing special and its dg may by chance be tiny against the channel's (seed
    # 1727501124: 4.5e-4 of it, so fp32 rounding read 1.8e-4 of itself): there the channel-relative figure is the test.
    kept = err(cbr.kernels_backward(*args, dg_form="difference", min_bits=-12.0))
    plain = err(cbr.kernels_backward(*args, dg_form="difference"))
    # With the dead token: the difference form keeps no digit of token 30's dg (its residue is 1e3-1e21 times the
    # value, or the difference rounds to exactly 0: relative error 1, seed 174231), the runs' form keeps it. That value
    # is itself a cancelling sum of e^-60 products, so fp32 reaches it to u times its own condition: over seeds 0-399
    # kept[1] was at most 9.6e-4 (99% under 3.2e-5; seed 300935: 1.04e-4), the channel-relative kept[0] 1.1e-5.
    if dead:
        assert kept[0] < 1e-4 and kept[1] < 1e-2, f"{kept} (seed {seed})"
        assert plain[0] < 1e-4 and plain[1] >= 0.5, f"{plain} (seed {seed}): the cancellation did not show at token 30"
    else:
        assert kept[0] < 1e-4 and plain[0] < 1e-4, f"{kept}, {plain} (seed {seed})"


def test_the_tensor_core_pair_terms_factor_the_decays_exactly(seed):
    """chunk_backward_rounding.tc_pair_terms (the plan's block-factored products, docs/backward.md): in fp32 products,
    each side's pair terms equal the direct sums over (r, c) with D = 2^(Gam_r - Gam_c) in float64, to fp32 rounding,
    with every token's decay down to 2^-8 (diagonal blocks' factors then reach 2^+-64). Both take Gam as the fp32
    cumulative sum the kernel forms: its own rounding (~|Gam| 2^-24 ln 2 of a term, 1.4e-5 of the largest at Gam ~ -256
    bits: seed 889005614 against a float64 sum) is common to every arrangement of the products and not what this
    judges; the end-to-end backward tests carry it. Over 2000 seeds the factoring's error peaked at 2.4e-6."""
    import numpy as np
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "verify_impls"))
    import chunk_backward_rounding as cbr  # noqa: E402
    rng = np.random.default_rng(seed)
    M, C, K = 2, 64, 8
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    Q, Kk, dM, dA = f(M, C, K), f(M, C, K), f(M, C, C), f(M, C, C)
    B = rng.random((M, C)).astype(np.float32)
    G = (-8.0 * rng.random((M, C, K))).astype(np.float32)  # log2 units, down to the fast path's -8 bits a token
    got = cbr.tc_pair_terms(Q, Kk, G, B, dM, dA, "fp32")
    gc = np.cumsum(G, axis=1, dtype=np.float32).astype(np.float64)
    D = np.exp2(gc[:, :, None, :] - gc[:, None, :, :])
    incl, strict = np.tril(np.ones((C, C))), np.tril(np.ones((C, C)), -1)
    wm, wa = dM * incl, (B[:, :, None] * dA) * strict
    Qd, Kd = Q.astype(np.float64), Kk.astype(np.float64)
    want = (np.einsum("mrc,mrcd,mcd->mrd", wm, D, Kd), np.einsum("mrc,mrcd,mrd->mcd", wm, D, Qd),
            np.einsum("mrc,mrcd,mcd->mrd", wa, D, Kd), np.einsum("mrc,mrcd,mrd->mcd", wa, D, Kd))
    for name, a, b in zip(("dq_M", "dk_M", "dk_Arow", "dk_Acol"), got, want):
        err = float(np.abs(a - b).max() / np.abs(b).max())
        assert err < 1e-5, f"{name}: {err:.2e} (seed {seed})"
