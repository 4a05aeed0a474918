"""chunk_backward_rounding.py: the chunked backward (scripts/models/chunk_backward.py's safe form, dg summed over the
exponent runs) computed in float32 end to end, as an outside implementation of kda-verify's backward suites
(docs/verifier_protocol.md): how much of the tensor-core bound plain fp32 arithmetic in the chunked arrangement
uses, before a kernel decides which products need bf16x3 (docs/backward.md).

    kda-verify --suite backward-quick --impl "cmd:python3 scripts/models/chunk_backward_rounding.py"

The inputs go through the same preprocessing and chain rules as scripts/verify_impls/numpy_recurrent.py (there in
float64, here in --dtype); every chunk product is a float32 torch matmul / einsum (fp32 accumulation; the
summation order is torch's); pair decays are exp of fp32 sums of g accumulated from the pair's earlier token.

--form kernels models the CUDA chunked backward itself (src/cuda/generic/backward_chunked.cu): phase 1 and the state
pass of the forward as scripts/models/two_phase.py rounds them (the tiles and what the backward keeps: A', T, S0,
V_new), the reverse state pass with its four products in bf16x3 (chunk_reverse.cu), and the gradient pass in fp32
with W read back from its bf16 hi / lo planes (chunk_grad.cu); --pairs loop | blocked | blockmma:MODE picks its pair
products (main's per-channel loop, branch gradblk's 16-token blocks, or those with the block pairs as MODE products);
--precision changes one stage's products at a time (kernels_backward), which is how session 8 found [W | U] = T [.]
to be the largest error (bench/LEDGER.md).

The verifier asks outside implementations for gradients in the inputs' dtype (bf16), whose rounding (~1.7e-3
relative RMSE) hides the chunked arithmetic's; kda-verify --fp32-grads (a study option) asks for fp32 gradients and
judges them as fp32 tensors, as it judges our CUDA backward.

usage: chunk_backward_rounding.py [--dtype float32|float64] [--form safe|kernels] [--pairs loop|blocked|blockmma:MODE]
                                  [--products MODE] [--precision SPEC] DIR"""
import argparse
import os
import sys

import numpy as np
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "verify_impls"))
sys.path.insert(0, _HERE)
import chunk_backward as cb  # noqa: E402
import two_phase as tp  # noqa: E402
from kda_protocol import read_case, write_output  # noqa: E402
from numpy_recurrent import preprocess, write_gradients  # noqa: E402

C = 64
F32 = np.float32


def _ex2(x):
    return np.exp2(x).astype(F32)


def _pairs_loop(Q, K, G, dM, dAp):
    """chunk_grad.cu P4's pair loop over a batch of chunks (or of 16-token blocks) [M, n, K] (G in log2 units): see
    chunk_backward.py pair_terms_loop. Returns (dq, dk, dg) parts."""
    dq, dk, dg, X = (np.zeros_like(Q) for _ in range(4))
    for r in range(Q.shape[1]):
        qr, kr = Q[:, r], K[:, r]
        dqr, dkr, ex = (np.zeros_like(qr) for _ in range(3))
        for c in range(r, -1, -1):
            D = _ex2(ex)
            wm, wa = dM[:, r, c, None], dAp[:, r, c, None]
            dqr = dqr + wm * K[:, c] * D
            dkr = dkr + wa * K[:, c] * D
            z = (wm * qr + wa * kr) * D
            dk[:, c] += z
            X[:, c] = z * K[:, c]
            ex = ex + G[:, c]
        dq[:, r] += dqr
        dk[:, r] += dkr
        pre = np.zeros_like(qr)
        for c in range(r):
            pre = pre + X[:, c]
            dg[:, c + 1] += pre
    return dq, dk, dg


def _pairs_blocked(Q, K, G, dM, dAp, S=16, mode=None):
    """Branch gradblk's P4 pair products: pairwise inside 16-token blocks, reference points across them (see
    chunk_backward.py pair_terms_blocked), in fp32 and log2 units, in the kernel's order. mode (--pairs blockmma:MODE):
    each block pair's products as matrix products of that precision (two_phase.prod), what a tensor-core gradient pass
    would run: rq = dM_IJ (K e)_J and rk = dA'_IJ (K e)_J as [16 x 16] [16 x K] products, ck = dM_IJ^T (Q a)_I +
    dA'_IJ^T (K a)_I; the scalings, suffixes and prefixes stay fp32 as before."""
    dq, dk, dg = (np.zeros_like(Q) for _ in range(3))
    for b in range(C // S):
        sl = slice(b * S, (b + 1) * S)
        q_, k_, g_ = _pairs_loop(Q[:, sl], K[:, sl], G[:, sl], dM[:, sl, sl], dAp[:, sl, sl])
        dq[:, sl] += q_
        dk[:, sl] += k_
        dg[:, sl] += g_
    a = np.zeros_like(Q)
    P = []
    for b in range(C // S):
        acc = np.zeros_like(Q[:, 0])
        for t in range(b * S, (b + 1) * S):
            acc = acc + G[:, t]
            a[:, t] = _ex2(acc)
        P.append(_ex2(acc))
    for J in range(C // S - 1):
        c0 = J * S
        ev, ke = np.zeros_like(Q[:, :S]), np.zeros_like(Q[:, :S])
        acc = np.zeros_like(Q[:, 0])
        for i in range(S - 1, -1, -1):
            ev[:, i] = _ex2(acc)
            ke[:, i] = K[:, c0 + i] * ev[:, i]
            acc = acc + G[:, c0 + i]
        for I in range(J + 1, C // S):
            r0 = I * S
            pij = np.ones_like(Q[:, 0])
            for bb in range(J + 1, I):
                pij = pij * P[bb]
            ck = np.zeros_like(ke)
            suffix = np.zeros_like(pij)
            if mode:
                rs = slice(r0, r0 + S)
                wmb, wab = dM[:, rs, c0:c0 + S], dAp[:, rs, c0:c0 + S]
                RQ, RK = tp.prod(wmb, ke, mode), tp.prod(wab, ke, mode)
                ck = (tp.prod(np.swapaxes(wmb, 1, 2), Q[:, rs] * a[:, rs], mode) +
                      tp.prod(np.swapaxes(wab, 1, 2), K[:, rs] * a[:, rs], mode)).astype(F32)
            for rr in range(S - 1, -1, -1):
                r = r0 + rr
                ar = a[:, r]
                if mode:
                    rq, rk = RQ[:, rr], RK[:, rr]
                else:
                    qa, ka = Q[:, r] * ar, K[:, r] * ar
                    wm, wa = dM[:, r, c0:c0 + S], dAp[:, r, c0:c0 + S]
                    rq = np.einsum("mc,mcd->md", wm, ke, dtype=F32)
                    rk = np.einsum("mc,mcd->md", wa, ke, dtype=F32)
                    ck += wm[:, :, None] * qa[:, None, :] + wa[:, :, None] * ka[:, None, :]
                sc = ar * pij
                rq, rk = rq * sc, rk * sc
                dq[:, r] += rq
                dk[:, r] += rk
                suffix = suffix + Q[:, r] * rq + K[:, r] * rk
                dg[:, r] += suffix
            dg[:, c0 + S:r0] += suffix[:, None, :]
            prefix = np.zeros_like(pij)
            for cc in range(S):
                dg[:, c0 + cc] += prefix
                z = ck[:, cc] * ev[:, cc] * pij
                dk[:, c0 + cc] += z
                prefix = prefix + K[:, c0 + cc] * z
    return dq, dk, dg


def difference_dg(Q, Kk, G, B, dM, dA, QS, KDg, BK, starts, dsend, min_bits=None, products="fp32"):
    """dg as FLA forms it, a study (--dg difference): every pair product of dq and dk split by side, in fp32 with the
    pair decays exp2 of differences of the chunk's cumulated sums, then dGam_t = q dq - k (dk_M + dk_Acol + dk_KD) +
    k (dk_Arow + dk_KG) (+ the chunk-end terms at C - 1) and dg = its reverse cumulative sum within the chunk: no sum
    over the pairs spanning each token. Where a chunk's channel has a token whose decay is below 2^min_bits (min_bits
    < 0), flags it in `wild` so the caller keeps the spanning form there. Returns (dg [M, C, K], wild [M, K] or None,
    dq, dk [M, C, K]). products: the pair products' operands as a tensor-core product would see them (bf16x3: each
    rounded to its bf16 hi + lo; 3xtf32: its tf32 hi + lo; the decay factors, which a kernel folds into the channel
    operand, are applied exactly: rounding is relative, so where they sit does not change its size)."""
    gc = np.cumsum(G, axis=1, dtype=F32)  # [M, C, K] Gam in log2 units
    dAp = (B[:, :, None] * dA).astype(F32)

    def rnd(x):
        if products == "bf16x3":
            hi = tp.bf16(x)
            return (hi + tp.bf16((x - hi).astype(F32))).astype(F32)
        if products == "3xtf32":
            hi, lo = tp.split3(x)
            return (hi + lo).astype(F32)
        return x
    if products.startswith("tc:"):  # the block-factored tensor-core form (tc_pair_terms)
        dq_m, dk_m, dk_arow, dk_acol = tc_pair_terms(Q, Kk, G, B, dM, dA, products[3:])
    else:
        low = np.tril(np.ones((C, C), F32))
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            D = _ex2(gc[:, :, None, :] - gc[:, None, :, :]) * low[None, :, :, None]  # [M, r, c, K]
        D = np.nan_to_num(D, nan=0.0, posinf=0.0)
        rM, rA, rQ, rK = rnd(dM), rnd(dAp), rnd(Q), rnd(Kk)
        dq_m = np.einsum("mrc,mrcd,mcd->mrd", rM, D, rK, dtype=F32)
        dk_m = np.einsum("mrc,mrcd,mrd->mcd", rM, D, rQ, dtype=F32)
        dk_arow = np.einsum("mrc,mrcd,mcd->mrd", rA, D, rK, dtype=F32)
        dk_acol = np.einsum("mrc,mrcd,mrd->mcd", rA, D, rK, dtype=F32)
    e = _ex2(gc)
    esuf = _ex2(gc[:, -1:, :] - gc)
    dq = QS * e + dq_m
    dk_kg = B[:, :, None] * BK * e
    dk_kd = KDg * esuf
    dgam = Q * dq - Kk * (dk_m + dk_acol + dk_kd) + Kk * (dk_arow + dk_kg)
    dgam[:, -1] += (starts * dsend).sum(1, dtype=F32) * e[:, -1] + (Kk * dk_kd).sum(1, dtype=F32)
    dg = np.flip(np.cumsum(np.flip(dgam, 1), axis=1, dtype=F32), 1)
    wild = None
    if min_bits is not None:
        wild = (G.min(axis=1) < F32(min_bits))  # [M, K]
    dk = (dk_kg + dk_kd + dk_m + dk_arow + dk_acol).astype(F32)
    return dg.astype(F32), wild, dq.astype(F32), dk


def tc_pair_terms(Q, Kk, G, B, dM, dA, products="3xtf32", S=16):
    """The pair products of dq and dk by side as a tensor-core gradient pass would form them (a plan, docs/backward.md
    "Where the spanning sums are needed"): per pair of 16-token blocks I >= J, [16 x 16] by [16 x K] matrix products
    in `products` precision (two_phase.prod) with the pair decays factored per channel: inside a diagonal block
    through its middle (2^(Gam_r - Gam_ref) 2^(Gam_ref - Gam_c), each factor within 2^(8 x 8 bits) where every token's
    decay is >= 2^-8), across blocks through the block ends (2^(Gam_r - Gam_end(I-1)) P_IJ 2^(Gam_end(J) - Gam_c), every
    factor <= 1). G [M, C, K] log2 units. Returns dq_M, dk_M (column side of dM), dk_Arow, dk_Acol, each [M, C, K]."""
    gc = np.cumsum(G, axis=1, dtype=F32)
    dAp = (B[:, :, None] * dA).astype(F32)
    out = [np.zeros_like(Q) for _ in range(4)]
    incl, strict = np.tril(np.ones((S, S), F32)), np.tril(np.ones((S, S), F32), -1)
    pr = lambda a, b: tp.prod(a, b, products)  # noqa: E731
    for I in range(C // S):
        rs = slice(I * S, (I + 1) * S)
        for J in range(I + 1):
            cs = slice(J * S, (J + 1) * S)
            with np.errstate(over="ignore", under="ignore"):
                if I == J:
                    ref = gc[:, I * S + S // 2 - 1][:, None, :]
                    a, b = _ex2(gc[:, rs] - ref), _ex2(ref - gc[:, cs])
                    wm, wa = dM[:, rs, cs] * incl, dAp[:, rs, cs] * strict
                else:
                    a = _ex2(gc[:, rs] - gc[:, I * S - 1][:, None, :])
                    b = _ex2(gc[:, J * S + S - 1][:, None, :] - gc[:, cs])
                    pij = _ex2(gc[:, I * S - 1] - gc[:, J * S + S - 1])[:, None, :]
                    a = (a * pij).astype(F32)
                    wm, wa = dM[:, rs, cs], dAp[:, rs, cs]
            bk, aq, ak = (b * Kk[:, cs]).astype(F32), (a * Q[:, rs]).astype(F32), (a * Kk[:, rs]).astype(F32)
            out[0][:, rs] += a * pr(wm, bk)
            out[1][:, cs] += b * pr(np.swapaxes(wm, 1, 2), aq)
            out[2][:, rs] += a * pr(wa, bk)
            out[3][:, cs] += b * pr(np.swapaxes(wa, 1, 2), ak)
    return out


def kernels_backward(q, k, v, g, beta, dout, S0, dST, scale, pairs, products="fp32", precision="", dg_form="runs",
                     min_bits=None, dg_products="fp32"):
    """One (sequence, value head) through the CUDA chunked backward's arithmetic. q, k [L, K] (normalized, q not
    scaled), v, dout [L, V], g [L, K] (natural-log decay), beta [L] (activated), S0, dST [V, K]. Returns the
    gradients of q_hat, k_hat, v, the log-decay and the activated beta, and of the initial state. products: the
    gradient pass's P1-P3 products in fp32 (SIMT), 3xtf32 (mma.sync, branch gradmma2), bf16x3 or one tf32 product
    (two_phase.prod). precision: two_phase.py's --precision items for the recompute of phase 1 and the forward state
    pass, plus state=MODE (the backward's own forward state pass), reverse=MODE (chunk_reverse.cu's four products)
    and wread=fp32 (the gradient pass reads W in fp32 instead of from its bf16 hi / lo planes), tiles=NAME+... (product
    tiles stored in bf16): where the error comes from, stage by stage."""
    L, Kd_ = q.shape
    V = v.shape[1]
    M = (L + C - 1) // C

    def pad(x):
        y = np.zeros((M * C,) + x.shape[1:], F32)
        y[:L] = x
        return y.reshape((M, C) + x.shape[1:])

    Q, Kk, Vv, B, dO = pad(q), pad(k), pad(v), pad(beta), pad(dout)
    G = pad((g.astype(F32) * tp.LOG2E).astype(F32))
    items = [i.split("=") for i in filter(None, precision.split(","))]
    own = {n: md for n, md in items if n in ("state", "reverse", "wread", "tiles")}
    # The recompute's phase 1 takes [W | U] in 3xTF32 (chunk_prepare.cu S5 for a backward; the forward's is bf16x3)
    # and A_qk in 3xTF32 (the forward's is one TF32 pass; kWide in chunk_prepare.cu). S3's block products as the mma
    # chains accumulate them (two_phase.py mma_chain): the off-diagonal blocks in two chains of 8 k-steps, the
    # diagonal ones cut per k-step. With IEEE sums instead (akk=3xtf32,aqk=3xtf32) this model passed backward-full's
    # near-identical keys at beta = 2 where the H200 failed (dv 1.74x its bound); with the diagonal blocks' whole
    # chain (diag=s3-3xtf32mma, the kernel before session 23) it fails as the H200 did (dv 1.62x; cut: 0.19x).
    prec = tp.parse_precision(",".join(["wu=3xtf32", "akk=3xtf32mma2", "aqk=3xtf32mma2", "diag=s3-3xtf32step"]
                                       + [f"{n}={md}" for n, md in items if n not in own]))
    Qg, Kd, dec, Aqk, W, U, Ap, Tm = tp.phase1(Q, Kk, G, B, (B[..., None] * Vv).astype(F32), prec, keep=True)
    st = lambda a, b: tp.prod(a, b, own.get("state", "bf16x3"))  # noqa: E731
    rev = lambda a, b: tp.prod(a, b, own.get("reverse", "bf16x3"))  # noqa: E731
    # The forward's state pass, keeping the chunk-start states and V_new.
    S = S0.astype(F32)
    starts, Vn = np.zeros((M, V, Kd_), F32), np.zeros((M, C, V), F32)
    for j in range(M):
        starts[j] = S
        Vn[j] = U[j] - st(W[j], S.T)
        S = S * dec[j][None, :] + st(Vn[j].T, Kd[j])
    # chunk_reverse.cu.
    dOp = (F32(scale) * dO).astype(F32)
    dS = dST.astype(F32)
    dsend, dU = np.zeros_like(starts), np.zeros_like(Vn)
    for j in reversed(range(M)):
        dsend[j] = dS
        dU[j] = rev(Kd[j], dS.T) + rev(Aqk[j].T, dOp[j])
        dS = dS * dec[j][None, :] + rev(dOp[j].T, Qg[j]) + rev(-dU[j].T, W[j])
    # chunk_grad.cu, every chunk at once: P1-P3 as fp32 or 3xTF32 products (the two P3 products accumulate in one).
    mm = np.matmul if products == "fp32" else (lambda a, b: tp.prod(a, b, products))  # noqa: E731
    low = np.tril(np.ones((C, C), F32))
    dM = mm(dOp, np.swapaxes(Vn, 1, 2)) * low
    QS, KDg, dW = mm(dOp, starts), mm(Vn, dsend), -mm(dU, starts)
    Tl = np.swapaxes(Tm * low, 1, 2)
    BV, BK = mm(Tl, dU), mm(Tl, dW)
    Wh = tp.bf16(W)
    Wr = W if own.get("wread") == "fp32" else (Wh + tp.bf16(W - Wh)).astype(F32)
    dA = -(mm(BV, np.swapaxes(U, 1, 2)) + mm(BK, np.swapaxes(Wr, 1, 2))) * np.tril(np.ones((C, C), F32), -1)
    # tiles=NAME+NAME...: those product tiles stored in bf16 (one rounding where chunk_products.cu writes them) for
    # the gradient passes that read them; dA is formed from the fp32 BV / BK as above.
    stored = {"QS": QS, "KD": KDg, "BK": BK, "BV": BV, "dM": dM, "dA": dA}
    for name in filter(None, own.get("tiles", "").split("+")):
        if name not in stored:
            raise ValueError(f"tiles: unknown tile {name}")
        stored[name] = tp.bf16(stored[name])
    QS, KDg, BK, BV, dM, dA = (stored[n] for n in ("QS", "KD", "BK", "BV", "dM", "dA"))
    DQ, DK, TB, DG, X = (np.zeros_like(Q) for _ in range(5))
    gam = np.zeros_like(Q[:, 0])
    for t in range(C):
        gam = gam + G[:, t]
        e = _ex2(gam)
        DQ[:, t] = QS[:, t] * e
        DK[:, t] = B[:, t, None] * BK[:, t] * e
        TB[:, t] = BK[:, t] * Kk[:, t] * e
        DG[:, t] = Q[:, t] * DQ[:, t] + Kk[:, t] * DK[:, t]
    whole = (starts * dsend).sum(1, dtype=F32) * _ex2(gam)
    suf, head = np.zeros_like(gam), np.zeros_like(gam)
    for t in reversed(range(C)):
        dkd = KDg[:, t] * _ex2(suf)
        DK[:, t] += dkd
        X[:, t] = Kk[:, t] * dkd
        head = head + DG[:, t]
        DG[:, t] = head + whole
        suf = suf + G[:, t]
    tail = np.zeros_like(gam)
    for t in range(C):
        DG[:, t] += tail
        tail = tail + X[:, t]
    if pairs.startswith("blockmma:"):
        pq, pk, pg = _pairs_blocked(Q, Kk, G, dM, B[:, :, None] * dA, mode=pairs.split(":", 1)[1])
    else:
        pq, pk, pg = (_pairs_blocked if pairs == "blocked" else _pairs_loop)(Q, Kk, G, dM, B[:, :, None] * dA)
    DQ, DK, DG = DQ + pq, DK + pk, DG + pg
    if dg_form == "difference":
        dgd, wild, dqd, dkd = difference_dg(Q, Kk, G, B, dM, dA, QS, KDg, BK, starts, dsend, min_bits, dg_products)
        keep = np.zeros_like(dgd, dtype=bool) if wild is None else np.broadcast_to(wild[:, None, :], dgd.shape)
        DG = np.where(keep, DG, dgd).astype(F32)
        if dg_products.startswith("tc:"):  # the tensor-core pass forms dq and dk too, where it runs
            DQ, DK = np.where(keep, DQ, dqd).astype(F32), np.where(keep, DK, dkd).astype(F32)
    dbeta = (dA * Ap).sum(2, dtype=F32) + (BV * Vv).sum(2, dtype=F32) + TB.sum(2, dtype=F32)
    flat = lambda x: x.reshape((M * C,) + x.shape[2:])[:L]  # noqa: E731
    return flat(DQ), flat(DK), flat(B[..., None] * BV), flat(DG), flat(dbeta), dS


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--form", choices=("safe", "kernels"), default="safe")
    ap.add_argument("--pairs", choices=("loop", "blocked") + tuple("blockmma:" + m for m in tp.MODES), default="loop",
                    help="--form kernels: P4's pair products (blockmma:MODE: the block pairs as products in MODE)")
    ap.add_argument("--products", choices=("fp32", "3xtf32", "bf16x3", "tf32"), default="fp32",
                    help="the gradient pass's P1-P3 products (--form kernels)")
    ap.add_argument("--precision", default="",
                    help="--form kernels: NAME=MODE,... of two_phase.py's products, state=, reverse=, wread=fp32, "
                         "tiles=QS+KD+BK+BV+dM+dA (bf16 product tiles)")
    ap.add_argument("--dg", choices=("runs", "difference"), default="runs",
                    help="--form kernels: dg over the runs spanning each token (the kernels') or, a study, as the "
                         "reverse cumulative sum of q dq - k dk (FLA's form); --dg-min-bits B keeps the runs' form for "
                         "a chunk's channel with a token's decay below 2^B (B < 0)")
    ap.add_argument("--dg-min-bits", type=float, default=None)
    ap.add_argument("--dg-products", choices=("fp32", "bf16x3", "3xtf32", "tc:3xtf32", "tc:bf16x3", "tc:fp32"),
                    default="fp32",
                    help="--dg difference: the precision of the pair products it forms dq and dk from; tc:MODE: as "
                         "block-factored matrix products (tc_pair_terms), whose dq and dk replace the kernels' too")
    ap.add_argument("dir")
    a = ap.parse_args(argv)
    npdt = np.float32 if a.dtype == "float32" else np.float64
    tdt = torch.float32 if a.dtype == "float32" else torch.float64
    m, t = read_case(a.dir)
    backward = m.get("request", "forward") == "backward"
    B, T, H, HV, K, V, N = (m[x] for x in ("B", "T", "H", "HV", "K", "V", "N"))
    pre = preprocess(m, t, npdt)
    q, k, v, g, beta, seqs = (pre[n] for n in ("q", "k", "v", "g", "beta", "seqs"))
    scale = npdt(m["scale"])
    group = HV // H
    out = np.zeros((B, T, HV, V), npdt)
    final = np.zeros((N, HV, V, K), npdt)
    dqh, dkh = np.zeros((B, T, HV, K), npdt), np.zeros((B, T, HV, K), npdt)
    dv, dglog, dbeta = np.zeros((B, T, HV, V), npdt), np.zeros((B, T, HV, K), npdt), np.zeros((B, T, HV), npdt)
    dh0 = np.zeros((N, HV, V, K), npdt)
    dout = t["dout"].astype(npdt) if backward else None
    dfinal = None
    if backward and "dfinal_state" in t:
        dfinal = t["dfinal_state"].astype(npdt)
        if not m["state_v_first"]:
            dfinal = dfinal.transpose(0, 1, 3, 2)
    T_ = lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(tdt)  # noqa: E731
    for n, (b, t0, t1) in enumerate(seqs):
        if t1 <= t0:
            if backward and dfinal is not None:
                dh0[n] = dfinal[n]
            if "initial_state" in t:
                h0 = t["initial_state"][n].astype(npdt)
                final[n] = h0 if m["state_v_first"] else h0.transpose(0, 2, 1)
            continue
        for hv in range(HV):
            h = hv // group
            S0 = np.zeros((V, K), npdt)
            if "initial_state" in t:
                h0 = t["initial_state"][n, hv].astype(npdt)
                S0 = h0 if m["state_v_first"] else h0.T
            if a.form == "kernels" and backward:
                dST = dfinal[n, hv] if dfinal is not None else np.zeros((V, K), F32)
                with np.errstate(under="ignore", over="ignore"):
                    got = kernels_backward(q[b, t0:t1, h].astype(F32), k[b, t0:t1, h].astype(F32),
                                           v[b, t0:t1, hv].astype(F32), g[b, t0:t1, hv], beta[b, t0:t1, hv].astype(F32),
                                           dout[b, t0:t1, hv].astype(F32), S0.astype(F32), dST.astype(F32), scale,
                                           a.pairs, a.products, a.precision, a.dg, a.dg_min_bits,
                                           a.dg_products)
                dqh[b, t0:t1, hv], dkh[b, t0:t1, hv], dv[b, t0:t1, hv], dglog[b, t0:t1, hv] = got[:4]
                dbeta[b, t0:t1, hv], dh0[n, hv] = got[4], got[5]
                continue
            qs = T_(scale * q[b, t0:t1, h])
            kk, vv, gg, bb = T_(k[b, t0:t1, h]), T_(v[b, t0:t1, hv]), T_(g[b, t0:t1, hv]), T_(beta[b, t0:t1, hv])
            o, sT, starts = cb.chunk_forward_safe(qs, kk, vv, gg, bb, T_(S0), C)
            out[b, t0:t1, hv] = o.numpy()
            final[n, hv] = sT.numpy()
            if not backward:
                continue
            dST = T_(dfinal[n, hv]) if dfinal is not None else torch.zeros(V, K, dtype=tdt)
            grads = cb.chunk_backward_safe(qs, kk, vv, gg, bb, starts, T_(dout[b, t0:t1, hv]), dST, C, dg_runs=True)
            dq, dk_, dv_, dg_, db_, dS = (x.numpy() for x in grads)
            dqh[b, t0:t1, hv] = scale * dq
            dkh[b, t0:t1, hv] = dk_
            dv[b, t0:t1, hv] = dv_
            dglog[b, t0:t1, hv] = dg_
            dbeta[b, t0:t1, hv] = db_
            dh0[n, hv] = dS
    if not backward:
        write_output(a.dir, m, "out", out)
        if m["output_final_state"]:
            write_output(a.dir, m, "final_state", final if m["state_v_first"] else final.transpose(0, 1, 3, 2))
        return
    write_gradients(a.dir, m, t, pre, dqh, dkh, dv, dglog, dbeta, dh0)


if __name__ == "__main__":
    main(sys.argv[1:])
