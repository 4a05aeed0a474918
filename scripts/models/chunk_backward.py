"""chunk_backward.py: the chunked (WY-form) backward of KDA written out by hand, in float64, checked against autograd
of the token recurrence: the formulas a chunked CUDA / CPU backward implements (issue #9), before any of them is
rounded. One value head; value-first state S [V, K]; per-channel log-decay g (natural log, the gate after its
activation), beta as probabilities, q already scaled (and L2-normalized if the caller wants); the activations' and
norms' chain rules are those of the reference backward (src/reference/backward.cpp) and stay outside.

Forward of one chunk (C tokens, rows = tokens; Gam = inclusive cumsum of g over the chunk, E = exp(Gam)):
    KG = K E, KI = K / E, QG = Q E, KD = K exp(Gam_C - Gam)
    A  = diag(beta) strictly_lower(KG KI^T),  T = (I + A)^-1
    U  = T diag(beta) V - T diag(beta) KG S0^T            (V_new)
    O  = QG S0^T + lower(QG KI^T) U
    SC = S0 diag(exp(Gam_C)) + U^T KD
Backward (dO, dSC -> dS0 and the inputs' gradients), in the order chunk_backward() computes it:
    dU   = lower(QG KI^T)^T dO + KD dSC^T
    dS0  = dO^T QG + dSC diag(exp(Gam_C)) - dU^T T diag(beta) KG
    dT   = dU (diag(beta) V)^T - dU S0 (diag(beta) KG)^T,   dA = -strictly_lower(T^T dT T^T)
    then products and elementwise factors back to Q, K, V, beta and Gam; dg = reverse cumsum of dGam in the chunk.
The exp(-Gam) factors here overflow for strong decays, so chunk_forward_safe() / chunk_backward_safe() compute the
same with only pair decays exp(sum of g over c+1 .. r) and chunk decays (all <= 1), the gate gradient assembled
from the decay-aware parts of dq and dk: the form a kernel implements (through the reference points of
docs/algorithm.md for the pair products). This model fixes what is computed, not how it is rounded.

usage: python3 scripts/models/chunk_backward.py [--seed S] [--cases N]   (prints the worst relative errors; exit 1
       if any gradient is off by more than 1e-9 relative)
"""
import argparse
import sys
from functools import partial

import torch

D = torch.float64


def recurrent(q, k, v, g, beta, h0):
    """The token recurrence: S_t = S D_t + beta_t (v_t - S D_t k_t) k_t^T, o_t = S_t q_t. q, k, g [T, K]; v [T, V];
    beta [T]; h0 [V, K]. Returns (o [T, V], S_T)."""
    S = h0
    outs = []
    for t in range(q.shape[0]):
        S = S * torch.exp(g[t])[None, :]
        u = v[t] - S @ k[t]
        S = S + beta[t] * torch.outer(u, k[t])
        outs.append(S @ q[t])
    return torch.stack(outs), S


def chunk_forward(q, k, v, g, beta, h0, C):
    """The chunked form above; returns (o, S_T, the chunk-start states)."""
    T = q.shape[0]
    S = h0
    outs, starts = [], []
    for c0 in range(0, T, C):
        sl = slice(c0, min(c0 + C, T))
        Q, K, Vv, G, B = q[sl], k[sl], v[sl], g[sl], beta[sl]
        n = Q.shape[0]
        gam = torch.cumsum(G, 0)
        E = torch.exp(gam)
        KG, KI, QG, KD = K * E, K / E, Q * E, K * torch.exp(gam[-1] - gam)
        A = B[:, None] * torch.tril(KG @ KI.T, -1)
        Tm = torch.linalg.inv(torch.eye(n, dtype=D) + A)
        U = Tm @ (B[:, None] * Vv) - Tm @ (B[:, None] * KG) @ S.T
        outs.append(QG @ S.T + torch.tril(QG @ KI.T) @ U)
        starts.append(S)
        S = S * torch.exp(gam[-1])[None, :] + U.T @ KD
    return torch.cat(outs), S, starts


def chunk_backward(q, k, v, g, beta, starts, do, dST, C):
    """Gradients of (q, k, v, g, beta, h0) given dO [T, V] and dS_T [V, K], chunk by chunk from the last."""
    T = q.shape[0]
    dq, dk, dv, dg, db = (torch.zeros_like(x) for x in (q, k, v, g, beta))
    dS = dST
    for ci in reversed(range(len(starts))):
        c0 = ci * C
        sl = slice(c0, min(c0 + C, T))
        Q, K, Vv, G, B, S0, dO = q[sl], k[sl], v[sl], g[sl], beta[sl], starts[ci], do[sl]
        n = Q.shape[0]
        # Recompute the chunk's forward quantities.
        gam = torch.cumsum(G, 0)
        E, Ei, eC = torch.exp(gam), torch.exp(-gam), torch.exp(gam[-1])
        KG, KI, QG, KD = K * E, K * Ei, Q * E, K * (eC[None, :] * Ei)
        Ap = torch.tril(KG @ KI.T, -1)
        Tm = torch.linalg.inv(torch.eye(n, dtype=D) + B[:, None] * Ap)
        BV, BK = B[:, None] * Vv, B[:, None] * KG
        W = Tm @ BK
        U = Tm @ BV - W @ S0.T
        M = torch.tril(QG @ KI.T)
        # Reverse.
        dU = M.T @ dO + KD @ dS.T
        dM = torch.tril(dO @ U.T)
        dQG = dO @ S0 + dM @ KI
        dKI = dM.T @ QG
        dS0 = dO.T @ QG + dS * eC[None, :] - dU.T @ W
        deC = (S0 * dS).sum(0)
        dKD = U @ dS
        dW = -dU @ S0
        dT = dU @ BV.T + dW @ BK.T
        dBV, dBK = Tm.T @ dU, Tm.T @ dW
        dA = -torch.tril(Tm.T @ dT @ Tm.T, -1)
        dbeta = (dA * Ap).sum(1) + (dBV * Vv).sum(1) + (dBK * KG).sum(1)
        dAp = B[:, None] * dA
        dKG = dAp @ KI + B[:, None] * dBK
        dKI = dKI + dAp.T @ KG
        dE = dQG * Q + dKG * K
        dEi = dKI * K + dKD * K * eC[None, :]
        deC = deC + (dKD * K * Ei).sum(0)
        dq[sl] = dQG * E
        dk[sl] = dKG * E + dKI * Ei + dKD * eC[None, :] * Ei
        dv[sl] = B[:, None] * dBV
        db[sl] = dbeta
        dgam = dE * E - dEi * Ei
        dgam[-1] += deC * eC
        dg[sl] = torch.flip(torch.cumsum(torch.flip(dgam, [0]), 0), [0])
        dS = dS0
    return dq, dk, dv, dg, db, dS


def pair_decays(G):
    """For one chunk's gates G [n, K]: Dp [n, n, K] = exp(sum of g over c+1 .. r) for r >= c (0 above the diagonal),
    E = exp(Gam) and Esuf = exp(sum over t+1 .. n-1): every factor is exp of a sum of g between two tokens, <= 1."""
    n, dt = G.shape[0], G.dtype
    ex = torch.zeros(n, n, G.shape[1], dtype=dt)
    for c in range(n):
        ex[c + 1:, c] = torch.cumsum(G[c + 1:], 0)
    Dp = torch.exp(ex) * torch.tril(torch.ones(n, n, dtype=dt))[:, :, None]
    suf = torch.flip(torch.cumsum(torch.flip(G, [0]), 0), [0]) - G  # a kernel accumulates it backwards instead
    return Dp, torch.exp(torch.cumsum(G, 0)), torch.exp(suf)


def chunk_forward_safe(q, k, v, g, beta, h0, C):
    """chunk_forward() through pair_decays (no exp(-Gam)): what a kernel computes for any decay."""
    T = q.shape[0]
    S = h0
    outs, starts = [], []
    for c0 in range(0, T, C):
        sl = slice(c0, min(c0 + C, T))
        Q, K, Vv, G, B = q[sl], k[sl], v[sl], g[sl], beta[sl]
        n = Q.shape[0]
        Dp, E, Esuf = pair_decays(G)
        M = torch.einsum("rd,cd,rcd->rc", Q, K, Dp)
        Ap = torch.einsum("rd,cd,rcd->rc", K, K, Dp) * torch.tril(torch.ones(n, n, dtype=q.dtype), -1)
        Tm = torch.linalg.inv(torch.eye(n, dtype=q.dtype) + B[:, None] * Ap)
        U = Tm @ (B[:, None] * Vv) - Tm @ (B[:, None] * K * E) @ S.T
        outs.append((Q * E) @ S.T + M @ U)
        starts.append(S)
        S = S * E[-1][None, :] + U.T @ (K * Esuf)
    return torch.cat(outs), S, starts


def chunk_backward_safe(q, k, v, g, beta, starts, do, dST, C, dg_runs=False):
    """chunk_backward() with no exp(-Gam) anywhere: every factor is exp of a sum of g between two tokens (<= 1), as a
    kernel can form it. The pair decays D[r, c] = exp(sum of g over c+1 .. r) (r >= c) replace KI in the intra-chunk
    products, and the gate gradient is assembled from the decay-aware parts of dq and dk (each exponent's derivative
    is +x dx for the factor's later end and -x dx for its earlier end):
        dGam = q dq - k (dk_M + dk_Acol + dk_KD) + k (dk_Arow + dk_KG),   dGam_C += S0 . dS exp(Gam_C) + sum_t k dk_KD
    with dq = dq_QG + dq_M the two paths into q, and dk split by the product it came through. dg_runs: dg as the
    sum, for each token s, of the coefficients of the exponent runs that contain s (what src/cpu/backward_cpu.cpp
    does: no reverse cumsum of dGam, whose cancelled pairs swamp a dead channel's gradient in finite precision)."""
    T = q.shape[0]
    dq, dk, dv, dg, db = (torch.zeros_like(x) for x in (q, k, v, g, beta))
    dS = dST
    for ci in reversed(range(len(starts))):
        c0 = ci * C
        sl = slice(c0, min(c0 + C, T))
        Q, K, Vv, G, B, S0, dO = q[sl], k[sl], v[sl], g[sl], beta[sl], starts[ci], do[sl]
        n = Q.shape[0]
        Dp, E, Esuf = pair_decays(G)
        eC = E[-1]
        QG, KG, KD = Q * E, K * E, K * Esuf
        M = torch.einsum("rd,cd,rcd->rc", Q, K, Dp)                       # lower(QG KI^T), diagonal included
        Ap = torch.einsum("rd,cd,rcd->rc", K, K, Dp) * torch.tril(torch.ones(n, n, dtype=q.dtype), -1)
        Tm = torch.linalg.inv(torch.eye(n, dtype=q.dtype) + B[:, None] * Ap)
        BV, BK = B[:, None] * Vv, B[:, None] * KG
        W = Tm @ BK
        U = Tm @ BV - W @ S0.T
        # Reverse, as chunk_backward() down to dA.
        dU = M.T @ dO + KD @ dS.T
        dM = torch.tril(dO @ U.T)
        dS0 = dO.T @ QG + dS * eC[None, :] - dU.T @ W
        dKD = U @ dS
        dW = -dU @ S0
        dBV, dBK = Tm.T @ dU, Tm.T @ dW  # a kernel: one transposed unit-triangular solve, two right-hand sides
        dA = -torch.tril(dBV @ (U + W @ S0.T).T + dBK @ W.T, -1)  # = -T^T dT T^T without T itself
        dbeta = (dA * Ap).sum(1) + (dBV * Vv).sum(1) + (dBK * KG).sum(1)
        dAp = B[:, None] * dA
        # The decay-aware parts of dq and dk, each a product with the pair decays (never with exp(-Gam)).
        dq_QG = (dO @ S0) * E
        dq_M = torch.einsum("rc,cd,rcd->rd", dM, K, Dp)
        dk_M = torch.einsum("rc,rd,rcd->cd", dM, Q, Dp)                  # column end of M's pairs
        dk_Arow = torch.einsum("rc,cd,rcd->rd", dAp, K, Dp)             # row end of A's pairs
        dk_Acol = torch.einsum("rc,rd,rcd->cd", dAp, K, Dp)             # column end
        dk_KG = (B[:, None] * dBK) * E
        dk_KD = dKD * Esuf
        dq[sl] = dq_QG + dq_M
        dk[sl] = dk_M + dk_Arow + dk_Acol + dk_KG + dk_KD
        dv[sl] = B[:, None] * dBV
        db[sl] = dbeta
        if dg_runs:
            head = Q * dq_QG + K * dk_KG                      # runs 0 .. t
            tail = K * dk_KD                                  # runs t+1 .. end
            X = (dM[:, :, None] * Q[:, None, :] + dAp[:, :, None] * K[:, None, :]) * K[None, :, :] * Dp  # pairs c+1 .. r
            X = X * torch.tril(torch.ones(n, n, dtype=q.dtype), -1)[:, :, None]
            pre = torch.cumsum(X, 1)                          # pre[r, c] = sum over c' <= c of X[r, c']
            dgs = torch.flip(torch.cumsum(torch.flip(head, [0]), 0), [0])
            dgs[1:] += torch.cumsum(tail, 0)[:-1]
            dgs += ((S0 * dS).sum(0) * eC)[None, :]
            for s_ in range(1, n):                            # pairs with c < s <= r
                dgs[s_] += pre[s_:, s_ - 1].sum(0)
            dg[sl] = dgs
        else:
            dgam = Q * (dq_QG + dq_M) - K * (dk_M + dk_Acol + dk_KD) + K * (dk_Arow + dk_KG)
            dgam[-1] += (S0 * dS).sum(0) * eC + (K * dk_KD).sum(0)
            dg[sl] = torch.flip(torch.cumsum(torch.flip(dgam, [0]), 0), [0])
        dS = dS0
    return dq, dk, dv, dg, db, dS


def pair_terms_loop(Q, K, G, dM, dAp, n):
    """The pair products of chunk_grad.cu's P4, one channel per thread (vectorized here): for each row r, c from the
    diagonal down with D = exp of the locally accumulated sum; dq += (dM . D) K, dk += (dAp . D) K (row side) and
    (dM^T . D) Q + (dAp^T . D) K (column side); each pair's log-decay coefficient X[r, c] added to every token it
    spans (c < s <= r) through a prefix sum over c. Returns (dq, dk, dg) parts [C, K]."""
    dq, dk, dg, X = (torch.zeros_like(Q) for _ in range(4))
    for r in range(n):
        dqr, dkr, ex = (torch.zeros_like(Q[0]) for _ in range(3))
        for c in range(r, -1, -1):
            D = torch.exp(ex)
            wm, wa = dM[r, c], dAp[r, c]
            dqr = dqr + wm * K[c] * D
            dkr = dkr + wa * K[c] * D
            z = (wm * Q[r] + wa * K[r]) * D
            dk[c] += z
            X[c] = z * K[c]
            ex = ex + G[c]
        dq[r] += dqr
        dk[r] += dkr
        pre = torch.zeros_like(Q[0])
        for c in range(r):
            pre = pre + X[c]
            dg[c + 1] += pre
    return dq, dk, dg


def diagonal_blocks(Q, K, G, dM, dAp, n, S):
    """What the block forms share: the pairs inside each block of S tokens, pairwise as pair_terms_loop, and the block
    pairs' reference-point factors a (exp of g summed from the block's start to t), e (from t + 1 to the block's end)
    and P (each block's whole decay), every one a sum accumulated in order. Returns (dq, dk, dg, a, e, P, S)."""
    C, Kd = Q.shape
    S = min(S, C)
    assert C % S == 0, "blocks tile the chunk"
    nb = C // S
    dq, dk, dg = (torch.zeros_like(Q) for _ in range(3))
    for b in range(nb):
        sl = slice(b * S, (b + 1) * S)
        m = max(0, min(S, n - b * S))
        q_, k_, g_ = pair_terms_loop(Q[sl], K[sl], G[sl], dM[sl, sl], dAp[sl, sl], m)
        dq[sl] += q_
        dk[sl] += k_
        dg[sl] += g_
    a, e, P = torch.zeros_like(Q), torch.zeros_like(Q), torch.zeros(nb, Kd, dtype=Q.dtype)
    for b in range(nb):
        acc = torch.zeros(Kd, dtype=Q.dtype)
        for t in range(b * S, (b + 1) * S):
            acc = acc + G[t]
            a[t] = torch.exp(acc)
        P[b] = torch.exp(acc)
        acc = torch.zeros(Kd, dtype=Q.dtype)
        for t in reversed(range(b * S, (b + 1) * S)):
            e[t] = torch.exp(acc)
            acc = acc + G[t]
    return dq, dk, dg, a, e, P, S


def pair_terms_blocked(Q, K, G, dM, dAp, n, S=16):
    """pair_terms_loop() by blocks of S tokens: the pairs inside a block as there (pairwise, S (S + 1) / 2 of them);
    a block pair I > J through its reference points, D[r, c] = a_r P_IJ e_c with a_r = exp(sum of g from the start
    of I to r), e_c = exp(sum from c + 1 to the end of J), P_IJ = the blocks strictly between (every factor <= 1):
        dq_I += a P (dM_IJ (K e)_J),   dk_I += a P (dAp_IJ (K e)_J)                      (row side)
        dk_J += e P (dM_IJ^T (Q a)_I + dAp_IJ^T (K a)_I)                                    (column side)
    three small matrix products per block pair (the tensor-core form). The log-decay coefficients of the pairs
    (X[r, c] = (dM q_r + dAp k_r) k_c D) reach each spanned token s (c < s <= r) as sums of those products' rows, never
    as a difference: s in I: the suffix over r >= s in I of q . dq_IJ + k . dk_IJ (row side); s in J: the prefix
    over c < s in J of k . dk_IJ (column side); s strictly between J and I: the whole pair's sum."""
    dq, dk, dg, a, e, P, S = diagonal_blocks(Q, K, G, dM, dAp, n, S)
    Kd, nb = Q.shape[1], Q.shape[0] // S
    for I in range(1, nb):
        for J in range(I):
            rI, cJ = slice(I * S, (I + 1) * S), slice(J * S, (J + 1) * S)
            PIJ = torch.ones(Kd, dtype=Q.dtype)
            for b in range(J + 1, I):
                PIJ = PIJ * P[b]
            Ke = K[cJ] * e[cJ]
            rq = a[rI] * PIJ * (dM[rI, cJ] @ Ke)               # row side into dq
            rk = a[rI] * PIJ * (dAp[rI, cJ] @ Ke)              # row side into dk
            ck = e[cJ] * PIJ * (dM[rI, cJ].T @ (Q[rI] * a[rI]) + dAp[rI, cJ].T @ (K[rI] * a[rI]))  # column side
            dq[rI] += rq
            dk[rI] += rk
            dk[cJ] += ck
            row = Q[rI] * rq + K[rI] * rk                       # sum over c in J of X[r, c]
            col = K[cJ] * ck                                    # sum over r in I of X[r, c]
            dg[rI] += torch.flip(torch.cumsum(torch.flip(row, [0]), 0), [0])    # s in I: r >= s
            dg[cJ.start + 1:cJ.stop] += torch.cumsum(col, 0)[:-1]               # s in J: c < s
            if J + 1 < I:
                dg[(J + 1) * S:I * S] += row.sum(0)                             # s strictly between
    return dq, dk, dg


def pair_terms_rowcol(Q, K, G, dM, dAp, n, S=16):
    """pair_terms_blocked() with its block pairs summed the way a tensor-core form accumulates them (session 25's P4b,
    bench/results/2026-12-02-h200-session25/patches): the row side of block I summed over J < I before its epilogue,
    the pair decay P_IJ folded into the operand, RQ_I = sum_J dM_IJ (K e P_IJ)_J (RK_I with dAp), then dq_I += a RQ,
    dk_I += a RK and dg += the suffix over r >= s in I of q a RQ + k a RK; the column side of block J summed over I > J,
    CK_J = sum_I dM_IJ^T (Q a P_IJ)_I + dAp_IJ^T (K a P_IJ)_I, then dk_J += e CK and dg += the prefix over c < s in J of
    k e CK; the tokens of a block L strictly between take the row side's partial sums over J < L, summed over I > L.
    The same terms as pair_terms_blocked, re-associated; sums only."""
    dq, dk, dg, a, e, P, S = diagonal_blocks(Q, K, G, dM, dAp, n, S)
    Kd, nb = Q.shape[1], Q.shape[0] // S

    def blk(b):
        return slice(b * S, (b + 1) * S)

    def p_between(I, J):
        p = torch.ones(Kd, dtype=Q.dtype)
        for b in range(J + 1, I):
            p = p * P[b]
        return p

    between = torch.zeros(nb, Kd, dtype=Q.dtype)
    for I in range(1, nb):  # row side
        rI = blk(I)
        qa, ka = Q[rI] * a[rI], K[rI] * a[rI]
        RQ, RK = torch.zeros(S, Kd, dtype=Q.dtype), torch.zeros(S, Kd, dtype=Q.dtype)
        for J in range(I):
            KE = K[blk(J)] * e[blk(J)] * p_between(I, J)
            RQ = RQ + dM[rI, blk(J)] @ KE
            RK = RK + dAp[rI, blk(J)] @ KE
            if J + 1 < I:  # block J + 1 lies strictly between every J' <= J and I
                between[J + 1] += (qa * RQ + ka * RK).sum(0)
        dq[rI] += a[rI] * RQ
        dk[rI] += a[rI] * RK
        dg[rI] += torch.flip(torch.cumsum(torch.flip(qa * RQ + ka * RK, [0]), 0), [0])
    for J in range(nb - 1):  # column side
        cJ = blk(J)
        CK = torch.zeros(S, Kd, dtype=Q.dtype)
        for I in range(J + 1, nb):
            p = p_between(I, J)
            CK = CK + dM[blk(I), cJ].T @ (Q[blk(I)] * a[blk(I)] * p) + dAp[blk(I), cJ].T @ (K[blk(I)] * a[blk(I)] * p)
        z = e[cJ] * CK
        dk[cJ] += z
        dg[cJ] += torch.cat([torch.zeros(1, Kd, dtype=Q.dtype), torch.cumsum(K[cJ] * z, 0)[:-1]]) + between[J]
    return dq, dk, dg


def exponent_terms(t, ex, Q, K, Bt, QS, BK, DQ, DK, TB, DG):
    """P4's terms of row t that carry exp(Gamma_t) = ex: dq = QS e, dk = beta BK e, dbeta's third term BK k e, and
    their log-decay coefficient q dq + k dk (into DG, summed over the runs later)."""
    DQ[t] = QS[t] * ex
    DK[t] = Bt[t] * BK[t] * ex
    TB[t] = BK[t] * K[t] * ex
    DG[t] = Q[t] * DQ[t] + K[t] * DK[t]


def p4_by_channel(Q, K, G, Bt, QS, BK, KDg, cs, dM, dAp, n, pairs=pair_terms_loop):
    """chunk_grad.cu's P4 as it runs, a thread per channel (vectorized over channels here): the exponent terms with
    the run sums (DG never a difference of cumulated sums), then the pair products by `pairs`. cs = colsum(S0 . dS).
    Returns (DQ, DK, DG, TB) [C, K]."""
    C = Q.shape[0]
    DQ, DK, TB, DG, X = (torch.zeros_like(Q) for _ in range(5))
    gam = torch.zeros_like(G[0])
    for t in range(C):
        gam = gam + G[t]
        exponent_terms(t, torch.exp(gam), Q, K, Bt, QS, BK, DQ, DK, TB, DG)
    whole = cs * torch.exp(gam)
    suf, head = torch.zeros_like(gam), torch.zeros_like(gam)
    for t in reversed(range(C)):
        dkd = KDg[t] * torch.exp(suf)
        DK[t] += dkd
        X[t] = K[t] * dkd
        head = head + DG[t]
        DG[t] = head + whole
        suf = suf + G[t]
    tail = torch.zeros_like(gam)
    for t in range(C):
        DG[t] += tail
        tail = tail + X[t]
    pq, pk, pg = pairs(Q, K, G, dM, dAp, n)
    return DQ + pq, DK + pk, DG + pg, TB


def p4_by_block(Q, K, G, Bt, QS, BK, KDg, cs, dM, dAp, n, S=16):
    """P4 with a thread per (channel, S-token block) (docs/backward.md, session 28's plan): thread B writes only the
    rows of its block, so its dq, dk, dg can live in its registers. Everything a thread needs of the rest of the chunk
    is a per-block total, one value a channel published by its owner and summed in block order: the sums of g (for
    the exponents' prefix and suffix), of the exponent terms' q dq + k dk (dg's suffix) and of k dkd (dg's prefix),
    and each block pair's whole log-decay sum (for the blocks strictly between its two). Block pair I > J: its row
    side (dq_I, dk_I and dg's suffix over r >= s in I) on thread I, its column side (dk_J and dg's prefix over c < s in
    J) on thread J, so thread B runs the row sides of (B, J < B) and the column sides of (I > B, B): nb - 1 pair halves
    each. The same terms as p4_by_channel with pair_terms_blocked, re-associated at block boundaries; sums only.
    Returns (DQ, DK, DG, TB) [C, K]."""
    C, Kd = Q.shape
    S = min(S, C)
    assert C % S == 0, "blocks tile the chunk"
    nb = C // S
    z = torch.zeros(Kd, dtype=Q.dtype)

    def blk(b):
        return slice(b * S, (b + 1) * S)

    def ordered_sum(vals):  # a sum of published per-block totals, in block order
        acc = z.clone()
        for x in vals:
            acc = acc + x
        return acc

    # Round 1 (each thread alone): its block's sum of g, the reference points a (from the block's start) and e (to
    # its end), and its whole decay P.
    gsum = [ordered_sum(G[blk(b)]) for b in range(nb)]
    a, e = torch.zeros_like(Q), torch.zeros_like(Q)
    for b in range(nb):
        acc = z.clone()
        for t in range(b * S, (b + 1) * S):
            acc = acc + G[t]
            a[t] = torch.exp(acc)
        acc = z.clone()
        for t in reversed(range(b * S, (b + 1) * S)):
            e[t] = torch.exp(acc)
            acc = acc + G[t]
    P = [torch.exp(gsum[b]) for b in range(nb)]
    # Round 2: the exponent terms of its rows, with the prefix and suffix of g over the other blocks.
    DQ, DK, TB, DG, X = (torch.zeros_like(Q) for _ in range(5))
    expsum, xsum = [], []
    whole = cs * torch.exp(ordered_sum(gsum))
    for b in range(nb):
        gam = ordered_sum(gsum[:b])
        for t in range(b * S, (b + 1) * S):
            gam = gam + G[t]
            exponent_terms(t, torch.exp(gam), Q, K, Bt, QS, BK, DQ, DK, TB, DG)
        suf = ordered_sum(gsum[b + 1:])
        for t in reversed(range(b * S, (b + 1) * S)):
            dkd = KDg[t] * torch.exp(suf)
            DK[t] += dkd
            X[t] = K[t] * dkd
            suf = suf + G[t]
        expsum.append(ordered_sum(DG[blk(b)]))  # published: this block's q dq + k dk
        xsum.append(ordered_sum(X[blk(b)]))     # and its k dkd
    # Round 3: dg's suffix and prefix over the chunk, from the other blocks' published totals.
    for b in range(nb):
        head = ordered_sum(expsum[b + 1:])
        for t in reversed(range(b * S, (b + 1) * S)):
            head = head + DG[t]
            DG[t] = head + whole
        tail = ordered_sum(xsum[:b])
        for t in range(b * S, (b + 1) * S):
            DG[t] += tail
            tail = tail + X[t]
    # The pairs inside each block: pairwise, as pair_terms_loop, on the block's own thread.
    for b in range(nb):
        m = max(0, min(S, n - b * S))
        pq, pk, pg = pair_terms_loop(Q[blk(b)], K[blk(b)], G[blk(b)], dM[blk(b), blk(b)], dAp[blk(b), blk(b)], m)
        DQ[blk(b)] += pq
        DK[blk(b)] += pk
        DG[blk(b)] += pg

    def p_between(I, J):
        p = torch.ones(Kd, dtype=Q.dtype)
        for b in range(J + 1, I):
            p = p * P[b]
        return p

    # Round 4: block pairs. Thread B: the row sides of (B, J) for J < B, publishing each pair's whole sum; then the
    # column sides of (I, B) for I > B.
    pair_sum = {}
    for B in range(nb):
        rB = blk(B)
        for J in range(B):
            Ke = K[blk(J)] * e[blk(J)]
            rq = a[rB] * p_between(B, J) * (dM[rB, blk(J)] @ Ke)
            rk = a[rB] * p_between(B, J) * (dAp[rB, blk(J)] @ Ke)
            DQ[rB] += rq
            DK[rB] += rk
            row = Q[rB] * rq + K[rB] * rk
            DG[rB] += torch.flip(torch.cumsum(torch.flip(row, [0]), 0), [0])  # s in B: r >= s
            pair_sum[(B, J)] = ordered_sum(row)
        for I in range(B + 1, nb):
            rI = blk(I)
            ck = e[rB] * p_between(I, B) * (dM[rI, rB].T @ (Q[rI] * a[rI]) + dAp[rI, rB].T @ (K[rI] * a[rI]))
            DK[rB] += ck
            DG[rB.start + 1:rB.stop] += torch.cumsum(K[rB] * ck, 0)[:-1]  # s in B: c < s
    # Round 5: thread L adds the whole sums of the pairs (I, J) with J < L < I, in pair order.
    for L in range(1, nb - 1):
        DG[blk(L)] += ordered_sum([pair_sum[(I, J)] for I in range(L + 1, nb) for J in range(L)])
    return DQ, DK, DG, TB


def chunk_backward_kernel(q, k, v, g, beta, starts, do, dST, C, pairs=pair_terms_loop, p4=None):
    """The CUDA chunked backward's arrangement, loop for loop (chunk_reverse.cu and chunk_grad.cu; the CPU-side model
    of their index math): every chunk padded with zero rows to C (the kernels' tiles), the tiles the recompute keeps
    (W, U0, V_new, A_qk, A', T with only its lower triangle read, Qg, Kd, decay), the reverse pass's dU and chunk-end
    dS, then the gradient pass's products P1-P3 and its per-channel P4: the exponent terms with the run sums, and the
    pair products by `pairs` (pair_terms_loop, the pairwise form; pair_terms_blocked, chunk_grad.cu's since session
    6: block pairs through reference points; pair_terms_rowcol, those block pairs as a tensor-core form sums them),
    or, with p4=p4_by_block, P4 with a thread per (channel, block). Vectorized over channels only."""
    T = q.shape[0]
    dq, dk, dv, dg, db = (torch.zeros_like(x) for x in (q, k, v, g, beta))
    dS = dST

    def pad(x, n):
        return torch.cat([x, x.new_zeros((C - n,) + tuple(x.shape[1:]))])

    for ci in reversed(range(len(starts))):
        c0 = ci * C
        sl = slice(c0, min(c0 + C, T))
        n = sl.stop - sl.start
        Q, K, Vv, G, B, dO = (pad(x[sl], n) for x in (q, k, v, g, beta, do))
        S0 = starts[ci]
        # The recompute's tiles (phase 1 and the forward's state pass).
        Dp, E, Esuf = pair_decays(G)
        lower = torch.tril(torch.ones(C, C, dtype=q.dtype))
        Aqk = torch.einsum("rd,cd,rcd->rc", Q, K, Dp) * lower
        Ap = torch.einsum("rd,cd,rcd->rc", K, K, Dp) * torch.tril(torch.ones(C, C, dtype=q.dtype), -1)
        Tm = torch.linalg.inv(torch.eye(C, dtype=q.dtype) + B[:, None] * Ap)
        W = Tm @ (B[:, None] * K * E)
        U0 = Tm @ (B[:, None] * Vv)
        Vn = U0 - W @ S0.T
        Qg, Kd, dec = Q * E, K * Esuf, E[-1]
        # chunk_reverse.cu: steps 0, A, B.
        dsend = dS
        dU = Aqk.T @ dO + Kd @ dS.T
        dS = dS * dec[None, :] + dO.T @ Qg - dU.T @ W
        # chunk_grad.cu P1-P3 (T read on and below its diagonal only).
        dM = torch.tril(dO @ Vn.T)
        QS, KDg, dW = dO @ S0, Vn @ dsend, -dU @ S0
        Tl = Tm * lower
        BV, BK = Tl.T @ dU, Tl.T @ dW
        dA = -torch.tril(BV @ U0.T + BK @ W.T, -1)
        # P4: per channel (or per channel and block).
        cs = (S0 * dsend).sum(0)
        if p4 is None:
            DQ, DK, DG, TB = p4_by_channel(Q, K, G, B, QS, BK, KDg, cs, dM, B[:, None] * dA, n, pairs)
        else:
            DQ, DK, DG, TB = p4(Q, K, G, B, QS, BK, KDg, cs, dM, B[:, None] * dA, n)
        # P5: per row.
        dbeta = (dA * Ap).sum(1) + (BV * Vv).sum(1) + TB.sum(1)
        dq[sl], dk[sl], dv[sl], dg[sl], db[sl] = DQ[:n], DK[:n], (B[:, None] * BV)[:n], DG[:n], dbeta[:n]
    return dq, dk, dv, dg, db, dS


def check(seed, T, K, V, C, decay=0.5, forms=("", "safe ", "runs ", "kernel ", "blocked ", "rowcol ", "byblock ")):
    """Worst relative errors of the chunked forward and of the backward forms named in `forms` against autograd of
    the recurrence; g ~ -U(0, decay) nats per token and channel."""
    torch.manual_seed(seed)
    q = torch.randn(T, K, dtype=D) / K ** 0.5
    k = torch.nn.functional.normalize(torch.randn(T, K, dtype=D), dim=-1)
    v = torch.randn(T, V, dtype=D)
    g = -torch.rand(T, K, dtype=D) * decay
    beta = torch.rand(T, dtype=D)
    h0 = 0.3 * torch.randn(V, K, dtype=D)
    do, dST = torch.randn(T, V, dtype=D), 0.1 * torch.randn(V, K, dtype=D)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta, h0)]
    o_ref, s_ref = recurrent(*leaves)
    ref = torch.autograd.grad((o_ref * do).sum() + (s_ref * dST).sum(), leaves)
    worst = {}
    runs = partial(chunk_backward_safe, dg_runs=True)
    for tag, fwd, bwd in (("", chunk_forward, chunk_backward), ("safe ", chunk_forward_safe, chunk_backward_safe),
                          ("runs ", chunk_forward_safe, runs), ("kernel ", chunk_forward_safe, chunk_backward_kernel),
                          ("blocked ", chunk_forward_safe, partial(chunk_backward_kernel, pairs=pair_terms_blocked)),
                          ("rowcol ", chunk_forward_safe, partial(chunk_backward_kernel, pairs=pair_terms_rowcol)),
                          ("byblock ", chunk_forward_safe, partial(chunk_backward_kernel, p4=p4_by_block))):
        if tag not in forms:
            continue
        o, sT, starts = fwd(q, k, v, g, beta, h0, C)
        worst[tag + "out"] = ((o - o_ref.detach()).norm() / o_ref.norm()).item()
        worst[tag + "state"] = ((sT - s_ref.detach()).norm() / s_ref.norm()).item()
        got = bwd(q, k, v, g, beta, starts, do, dST, C)
        for name, a, b in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), got, ref):
            worst[tag + name] = ((a - b).norm() / b.norm()).item()
    return worst


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cases", type=int, default=4)
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else int(torch.randint(0, 2 ** 31 - 1, ()).item())
    print(f"chunk_backward.py seed {seed} (replay: --seed {seed})")
    bad = False
    for i, (T, K, V, C) in enumerate([(37, 8, 6, 16), (64, 16, 8, 16), (50, 4, 4, 64), (33, 8, 8, 8)][:a.cases]):
        w = check(seed + i, T, K, V, C)
        print(f"  T={T} K={K} V={V} C={C}: " + "  ".join(f"{n} {e:.1e}" for n, e in w.items()))
        bad |= any(e > 1e-9 for e in w.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
