"""grad_fragments.py: the gradient pass in fragment layout (docs/backward.md, "The gradient pass in fragment layout",
kernel A; not built yet), modelled lane by lane for one tame chunk: which (token, channel) each lane's mma.m16n8k8
fragments hold, the operands it forms, the accumulators' epilogue with the exponent terms added elementwise, and dg as
the difference form's reverse sum, by shuffles inside a 16-token block and by the blocks' totals across warps. In
float64 it must equal the direct sums (`direct`, the CPU study's `chunk_backward_rounding.py --dg difference` form) to
rounding: the check of a kernel's index math before the kernel is written (python/tests/test_grad_fragments.py).

CTA layout modelled: a CTA per 64-channel half of a (chunk, value head), 8 warps; warp w owns block I = w // 2 (rows
16 I .. 16 I + 15) and 32 channels n0 .. n0 + 31 (4 n8 tiles). Fragments (PTX ISA, m16n8k8 .tf32, lane = 4 grp + tig):
a_i = A[grp + 8 (i & 1)][tig + 4 (i >> 1)], b_j = B[tig + 4 j][grp], c_i = C[grp + 8 (i >> 1)][2 tig + (i & 1)].
"""
import numpy as np

C, S, LANES = 64, 16, 32
GRP, TIG = np.arange(LANES) >> 2, np.arange(LANES) & 3


def direct(Q, K, G, B, dM, dA, QS, BK, KD, CS):
    """dq, dk, dg [C, Kc] of one chunk in float64 by the difference form. Q, K [C, Kc] (normalized), G [C, Kc] the
    per-token log2 decays, B [C] beta, dM [C, C] lower (with its diagonal), dA [C, C] strictly lower (not scaled by
    beta), QS = dO' S0, BK = T^T dW, KD = V_new dS [C, Kc], CS = colsum(S0 . dS) [Kc]."""
    gc = np.cumsum(G, 0)
    D = 2.0 ** (gc[:, None, :] - gc[None, :, :]) * np.tril(np.ones((C, C)))[:, :, None]  # [r, c, Kc]
    dAp = B[:, None] * dA
    dq_m = np.einsum("rc,rcd,cd->rd", dM, D, K)
    dk_mc = np.einsum("rc,rcd,rd->cd", dM, D, Q)
    dk_ar = np.einsum("rc,rcd,cd->rd", dAp, D, K)
    dk_ac = np.einsum("rc,rcd,rd->cd", dAp, D, K)
    e, esuf = 2.0 ** gc, 2.0 ** (gc[-1] - gc)
    dq = QS * e + dq_m
    dk_kg, dk_kd = B[:, None] * BK * e, KD * esuf
    dgam = Q * dq - K * (dk_mc + dk_ac + dk_kd) + K * (dk_ar + dk_kg)
    dgam[-1] += CS * e[-1] + (K * dk_kd).sum(0)
    dg = np.flip(np.cumsum(np.flip(dgam, 0), 0), 0)
    return dq, dk_kg + dk_kd + dk_mc + dk_ar + dk_ac, dg


def mma(a, b):
    """One warp's m16n8k8: a [4, 32] and b [2, 32] fragments -> c [4, 32], through the full matrices they stand for
    (so a wrong fragment rule gives a wrong product)."""
    A, Bm = np.zeros((16, 8)), np.zeros((8, 8))
    for i in range(4):
        A[GRP + 8 * (i & 1), TIG + 4 * (i >> 1)] = a[i]
    for j in range(2):
        Bm[TIG + 4 * j, GRP] = b[j]
    Cm = A @ Bm
    return np.stack([Cm[GRP + 8 * (i >> 1), 2 * TIG + (i & 1)] for i in range(4)])


def shfl_down_suffix(v):
    """Each lane's sum of v over the lanes grp' >= grp with its tig (a reverse sum over a block's 8 rows): the
    kernel's three __shfl_down_sync steps by 4, 8, 16 lanes, each lane adding only what lies inside the warp."""
    v = v.copy()
    for off in (4, 8, 16):
        y = np.where(np.arange(LANES) + off < LANES, np.roll(v, -off), 0.0)
        v = v + y
    return v


def fragment_pass(Q, K, G, B, dM, dA, QS, BK, KD, CS, inv_norms=None):
    """dq, dk, dg [C, Kc] as kernel A (src/cuda/generic/chunk_grad_tc.cu) forms them, lane by lane (float64
    arithmetic, the kernel's operand forms and reference points), and tb [Kc / 32, C]: dbeta's third term,
    rowsum(BK . K . E), per warp's 32 channels (ProdLayout TBrow). Every output element is written by exactly one
    lane; unwritten ones stay NaN. With inv_norms = (1 / |q|, 1 / |k|) [C] each, also dq, dk through the L2 norm's
    backward as the kernel finishes them where grad_tc_finishes_qk (the rows' partial dots per warp's 32 channels,
    summed over tig by shuffles, then over the block's two warps and the two halves in the kernel's order), returned
    as (dq, dk, dg, tb, dqn, dkn)."""
    Kc = Q.shape[1]
    gc = np.cumsum(G, 0)
    dq, dk, dg = (np.full((C, Kc), np.nan) for _ in range(3))
    tb = np.full((Kc // 32, C), np.nan)
    part = np.full((Kc // 64, 2, 2, C), np.nan)  # [half][warp & 1][q, k][row]: grad_tc_dot_slot's array a CTA
    lanes = []  # (r, d) of every element, the lane that holds it, for the finishing below
    for half in range(Kc // 64):
        tot = np.zeros((4, 2, 64))  # [block, (dgam, k . dk_KD), channel of the half]: the blocks' totals
        keep = {}
        for w in range(8):
            I, n0 = w // 2, 64 * half + 32 * (w % 2)
            rb, m = S * I, S * I + S // 2 - 1
            rq, rk, ck = (np.zeros((4, 4, LANES)) for _ in range(3))  # [n tile, c_i, lane]
            for ks in range(2 * (I + 1)):  # row side: columns of blocks 0 .. I
                am = np.stack([dM[rb + GRP + 8 * (i & 1), 8 * ks + TIG + 4 * (i >> 1)] for i in range(4)])
                aa = np.stack([dA[rb + GRP + 8 * (i & 1), 8 * ks + TIG + 4 * (i >> 1)] for i in range(4)])
                for n in range(4):
                    d = n0 + 8 * n + GRP
                    b = np.stack([K[8 * ks + TIG + 4 * j, d] * 2.0 ** (gc[m, d] - gc[8 * ks + TIG + 4 * j, d])
                                  for j in range(2)])
                    rq[n] += mma(am, b)
                    rk[n] += mma(aa, b)
            for ks in range(2 * I, C // 8):  # column side: rows of blocks I .. 3, dM / dA transposed
                am = np.stack([dM[8 * ks + TIG + 4 * (i >> 1), rb + GRP + 8 * (i & 1)] for i in range(4)])
                aa = np.stack([dA[8 * ks + TIG + 4 * (i >> 1), rb + GRP + 8 * (i & 1)] for i in range(4)])
                for n in range(4):
                    d = n0 + 8 * n + GRP
                    r = [8 * ks + TIG + 4 * j for j in range(2)]
                    ea = [2.0 ** (gc[r[j], d] - gc[m, d]) for j in range(2)]
                    bq = np.stack([Q[r[j], d] * ea[j] for j in range(2)])
                    bk = np.stack([B[r[j]] * K[r[j], d] * ea[j] for j in range(2)])
                    ck[n] += mma(am, bq) + mma(aa, bk)
            # Epilogue: each lane's c_i is (row rb + grp + 8 h, channel n0 + 8 n + 2 tig + e), i = 2 h + e.
            tbr = np.zeros((2, LANES))  # dbeta's third term over the lane's channels, rows rb + grp + 8 h
            pdot = np.zeros((2, 2, LANES))  # [q, k][h]: the lane's partial dots x_hat . dx_hat, rows rb + grp + 8 h
            for n in range(4):
                for e in range(2):
                    d = n0 + 8 * n + 2 * TIG + e
                    vals = []
                    for h in range(2):
                        i, r = 2 * h + e, rb + GRP + 8 * h
                        g_r, g_m = gc[r, d], gc[m, d]
                        E, Esuf = 2.0 ** g_r, 2.0 ** (gc[-1, d] - g_r)
                        dkr = B[r] * 2.0 ** (g_r - g_m) * rk[n, i]
                        dkc = 2.0 ** (g_m - g_r) * ck[n, i]
                        kg, kd = B[r] * BK[r, d] * E, KD[r, d] * Esuf
                        q_out = QS[r, d] * E + 2.0 ** (g_r - g_m) * rq[n, i]
                        dq[r, d], dk[r, d] = q_out, kg + kd + dkr + dkc
                        pdot[0, h] += Q[r, d] * q_out
                        pdot[1, h] += K[r, d] * dk[r, d]
                        lanes.append((r, d))
                        tbr[h] += BK[r, d] * K[r, d] * E
                        vals.append((Q[r, d] * q_out - K[r, d] * (dkc + kd) + K[r, d] * (dkr + kg), K[r, d] * kd))
                    # Reverse sums inside the block: the upper 8 rows, then the lower ones with the upper total.
                    for which in range(2):
                        hi, lo = shfl_down_suffix(vals[1][which]), shfl_down_suffix(vals[0][which])
                        lo = lo + hi[TIG]  # lane tig (grp 0) holds the upper rows' total
                        if which == 0:
                            keep[(w, n, e)] = (lo, hi)
                        tot[I, which, d - 64 * half] = lo[TIG]  # written by the grp-0 lanes (the same value for all)
            for h in range(2):  # the warp's 32 channels: shuffles by xor 1, 2 over tig; the tig-0 lanes write
                for off in (1, 2):
                    tbr[h] = tbr[h] + tbr[h][np.arange(LANES) ^ off]
                tb[2 * half + w % 2, rb + GRP[TIG == 0] + 8 * h] = tbr[h][TIG == 0]
                for which in range(2):
                    p = pdot[which, h]
                    for off in (1, 2):
                        p = p + p[np.arange(LANES) ^ off]
                    part[half, w % 2, which, rb + GRP[TIG == 0] + 8 * h] = p[TIG == 0]
        # After the CTA's barrier: each block adds the later blocks' totals (last first) and the chunk-end terms.
        for w in range(8):
            I, n0 = w // 2, 64 * half + 32 * (w % 2)
            for n in range(4):
                for e in range(2):
                    d = n0 + 8 * n + 2 * TIG + e
                    carry = np.zeros(LANES)
                    for J in range(3, I, -1):
                        carry = carry + tot[J, 0, d - 64 * half]
                    end = CS[d] * 2.0 ** gc[-1, d] + tot[:, 1, d - 64 * half].sum(0)
                    lo, hi = keep[(w, n, e)]
                    dg[S * I + GRP + 8, d] = hi + carry + end
                    dg[S * I + GRP, d] = lo + carry + end
    if inv_norms is None:
        return dq, dk, dg, tb
    # The finishing: a row's dot, the first half's two warps then the second's, in both halves; d <- (d - x dot) inv.
    dot = part[0, 0] + part[0, 1]
    if Kc == 128:
        dot = dot + (part[1, 0] + part[1, 1])
    dqn, dkn = (np.full((C, Kc), np.nan) for _ in range(2))
    for r, d in lanes:
        dqn[r, d] = (dq[r, d] - Q[r, d] * dot[0, r]) * inv_norms[0][r]
        dkn[r, d] = (dk[r, d] - K[r, d] * dot[1, r]) * inv_norms[1][r]
    return dq, dk, dg, tb, dqn, dkn


def tame_chunk(rng, Kc, L=C, min_bits=-8.0):
    """Random inputs of one chunk whose tokens all decay by at least 2^min_bits a channel (rows past L zero)."""
    Q = rng.standard_normal((C, Kc))
    K = rng.standard_normal((C, Kc))
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    K /= np.linalg.norm(K, axis=1, keepdims=True)
    G = rng.uniform(min_bits, 0.0, (C, Kc))
    B = rng.uniform(0.0, 2.0, C)
    dM = np.tril(rng.standard_normal((C, C)))
    dA = np.tril(rng.standard_normal((C, C)), -1)
    QS, BK, KD = (rng.standard_normal((C, Kc)) for _ in range(3))
    CS = rng.standard_normal(Kc)
    for x in (Q, K, G, QS, BK, KD, dM, dA):
        x[L:] = 0.0
    dM[:, L:] = dA[:, L:] = 0.0
    B[L:] = 0.0
    return Q, K, G, B, dM, dA, QS, BK, KD, CS
