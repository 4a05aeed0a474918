"""two_phase.py: a CPU (numpy) model of the rounding of the two-phase chunked CUDA forward
(src/cuda/generic/chunk_prepare.cu = phase 1, chunk_state.cu = phase 2), usable as an outside implementation of
kda-verify (docs/verifier_protocol.md):

    kda-verify --suite full --filter stress_near_identical_keys \
        --impl "cmd:python3 scripts/models/two_phase.py --precision ws=3xtf32"

Arithmetic is float32 wherever the kernels compute in fp32 (gate, norms, exponent sums, the diagonal blocks of
A_kk / A_qk, the forward substitution for T, the state), with the kernels' exponent arrangement (every factor is
exp2 of a locally accumulated sum of g in log2 units; the reference-point split of the off-diagonal blocks). Each
tensor-core product is modelled at its rounding points: a tf32 mma as tf32(a) @ tf32(b) with fp32 accumulation
(products of two tf32 values are exact in fp32, so a float32 matmul of the rounded operands is the mma up to the
unspecified fp32 summation order), 3xTF32 as al bh + ah bl + ah bh. ex2.approx is modelled by a float32 exp2.

Products a b (--precision NAME=MODE,...; MODE in tf32, 3xtf32, 3xtf32t (3xTF32 with each small part truncated, not
rounded: a .tf32 register passed as is), 3xtf32mma (3xtf32t as the mma chain accumulates it: each mma's sum rounded
toward zero, mma_chain; 3xtf32mma2: two such chains over the halves of the inner dimension, as S3's off-diagonal
blocks), 3xtf32step (each k-step's three mma summed apart and added in fp32), tf32mma / tf32mma2 (one tf32 mma a
k-step, chained so), fp32, fp64 = exact then rounded to fp32, and the
two-mma splits tf32a = (ah + al) tf32(b), tf32b = tf32(a) (bh + bl): one operand to ~21 bits, the other to 11;
and the bf16 modes a Hopper wgmma path would use (bf16 runs at twice tf32's rate and takes transposed operands):
bf16 = bf16(a) bf16(b), bf16x3 = al bh + ah bl + ah bh with bf16 halves (ah = bf16(a), al = bf16(a - ah)):
~16-bit operands for three bf16 products, 1.5x the cost of one tf32 product where 3xTF32 is 3x):
  phase 1:  akk  off-diagonal blocks of A_kk        (default 3xtf32)
            aqk  off-diagonal blocks of A_qk        (default tf32b, a plain forward's: the query rounded once, the
                 keys split; 3xtf32 models a backward's recompute)
            wu   [W | U] = T [beta exp(Gamma) K | beta V]  (default bf16x3 as a plain forward's S5)
            u    U alone: wu (default: U as wu says), or betaT = (T diag(beta)) V in bf16x3, V the input as it is
                 (for bf16 inputs its lo part is zero: two bf16 products), the form that lets phase 1 keep v as
                 bf16 rows (docs/hopper.md, two CTAs an SM)
            w    W alone: wu (default), or betaT = (T diag(beta)) [exp(Gamma) K] in wu's mode: beta on T's
                 columns instead of X_K's rows, so that one split of T diag(beta) serves W and u=betaT's U
            diag diagonal 16 x 16 blocks (fp32 FMA pairwise: fp32 or fp64; or factored: any product mode,
                 e.g. diag=3xtf32: [q exp2(Gl - S_b / 2)] [k exp2(S_b / 2 - Gl)]^T, Gl the block's local sums of
                 g, S_b its total, where every factored operand is finite and zero or normal; pairwise fp32 where
                 not; or s3, the kernel's: Kr / Qr against Ksuf exp2(-S_b) in akk's / aqk's modes where every
                 |S_b| <= 96, no g > 0 and q, k are normalized, pairwise fp32 elsewhere; s3-MODE: both in MODE;
                 s3-MK+MQ: A_kk's in MK, A_qk's in MQ)
                 (default s3)
            tinv T = (I + A_kk)^-1 forward substitution (fp32 or fp64)  (default fp32); or blocked-MODE: the
                 kernel's blocked form (diagonal 16 x 16 blocks by fp32 substitution, then rounds of
                 X_IJ = sum_K A_IK T_KJ and T_IJ = -T_II X_IJ) with those block products in MODE; or stages-MODE:
                 the kernel's since d5b4910 (the 2 x 2 block inverse twice, chunk_map.h tri2_task)
  phase 2:  ws   W S^T       in V_new = U - W S^T   (default bf16x3)
            qs   Qg S^T      in o                   (default bf16x3)
            av   A_qk V_new  in o                   (default bf16x3)
            upd  V_new^T Kd  in S = S decay + ...   (default bf16x3)
(phase 1 stores W, Qg, Kd and A_qk as the bf16 hi / lo split phase 2's bf16x3 takes, which is exactly the split
bf16x3 applies to the fp32 values here)

--segments S: phase 2 of each sequence as docs/hopper.md's chain split ("Few heads, long sequences"): its chunks
cut into S segments; segment 0 runs from the initial state; each later segment j first runs from a zero state with
the K x K transition M_j carried as K more state rows that start as the identity and take U = 0 (the same products,
in ws / upd's modes), giving its end B_j; the hand-off X_{j+1} = X_j M_j + B_j (product mode `handoff`, default fp32,
X_1 the end of segment 0); then segment j again from X_j, writing its outputs.

--chunk N: chunks of N tokens (16, 32, 48 or 64: whole 16-token sub-blocks; default 64, the kernels' kChunk), to
price another chunk length's rounding before building it (docs/hopper.md, "Chunks of 32 tokens").

--coupled: 64-token chunks whose phase 1 inverts only the halves' blocks, and whose phase 2 takes the second half's
V_new from the chunk-start state through a 32 x 32 coupling (docs/hopper.md, "Chunks of 32 tokens", the fallback):
W_h, U_h, Kd_h and decay_h of each 32-token half (phase 1 at C = 32), Qg, Kd, decay and A_qk of the 64-token chunk;
X = [W_a; W_b decay_a] S^T (ws's mode; W_b decay_a rounded to fp32 first), M = W_b Kd_a^T (product mode `m`, default
bf16x3), V_new_a = U_a - X_a, V_new_b = U_b - X_b - M V_new_a (mode `mv`, default bf16x3), then the 64-token output
and update.

usage: two_phase.py [--precision SPEC] [--segments S] [--chunk N] [--coupled] DIR"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "verify_impls"))
from kda_protocol import read_case, write_output  # noqa: E402

F32 = np.float32
C = 64  # chunk length (kChunk)
LOG2E = F32(1.4426950408889634)
DEFAULTS = {"akk": "3xtf32", "aqk": "tf32b", "wu": "bf16x3", "u": "wu", "w": "wu", "diag": "s3", "tinv": "fp32",
            "ws": "bf16x3", "qs": "bf16x3", "av": "bf16x3", "upd": "bf16x3", "handoff": "fp32", "m": "bf16x3",
            "mv": "bf16x3"}
# The kernels before the state pass's 3xTF32 commits (the H200's failing figures): --precision
# ws=tf32,qs=tf32,av=tf32,upd=tf32; the 3xTF32 state pass: ws=3xtf32,qs=tf32,av=3xtf32,upd=3xtf32.
FACTORED = [0, 0]  # diagonal blocks factored / all (diag = a product mode), reported on stderr
MODES = ("tf32", "3xtf32", "3xtf32t", "3xtf32mma", "3xtf32mma2", "3xtf32step", "tf32mma", "tf32mma2", "tf32a", "tf32b",
         "bf16", "bf16x3", "fp32", "fp64")


def tf32(x):
    """cvt.rna.tf32.f32: round the low 13 mantissa bits to nearest, ties away from zero (on the magnitude)."""
    u = np.ascontiguousarray(x, dtype=F32).view(np.uint32)
    r = (u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    finite = (u & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    return np.where(finite, r, u).view(F32)


def bf16(x):
    """cvt.rn.bf16.f32 (round to nearest even), returned as float32."""
    u = np.ascontiguousarray(x, dtype=F32).view(np.uint32)
    r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    finite = (u & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    return np.where(finite, r, u).view(F32)


def split3(x):
    """chunk_common.cuh split(): hi = tf32(x), lo = tf32(x - hi)."""
    x = np.asarray(x, dtype=F32)
    hi = tf32(x)
    return hi, tf32(x - hi)


def trunc_tf32(x):
    """An fp32 register read as a .tf32 operand unrounded: the tensor cores ignore its low 13 bits (truncation)."""
    u = np.ascontiguousarray(x, dtype=F32).view(np.uint32)
    return (u & np.uint32(0xFFFFE000)).view(F32)


def split3t(x):
    """split() with the small part passed unrounded (CUTLASS's 3xTF32 big + small): hi = tf32(x), lo truncated."""
    x = np.asarray(x, dtype=F32)
    hi = tf32(x)
    return hi, trunc_tf32(x - hi)


def rz32(x):
    """float64 -> float32 rounded toward zero."""
    y = x.astype(F32)
    over = np.abs(y.astype(np.float64)) > np.abs(x)
    y[over] = np.nextafter(y[over], F32(0))
    return y


def mma_chain(a, b, per_step, parts=1, single=False):
    """3xTF32 as chunk_common.cuh mma3 runs it on mma.m16n8k8 (small parts unrounded, as split3t): per k-step of 8,
    c += al bh, c += ah bl, c += ah bh, each mma's 8 products summed exactly with c and the result rounded toward zero
    to fp32 (a first-order model of the tensor cores' fp32 accumulation, which does not round to nearest: Fasi et al.,
    PeerJ CS 7:e330). per_step: each k-step's three mma into a fresh accumulator, added to the sum in fp32 (RN), as a
    backward's factored diagonal blocks run since session 23. parts: the inner dimension cut into that many equal
    chains, summed in fp32 in order (S3's off-diagonal blocks: two warps, each over half of the channels). single:
    one tf32 mma a k-step on rounded operands (a forward's A_qk, s3_kstep's !kWide branch)."""
    ah, al = split3t(a)
    bh, bl = split3t(b)
    f = lambda x: x.astype(np.float64)  # noqa: E731
    ah, al, bh, bl = f(ah), f(al), f(bh), f(bl)
    passes = ((ah, bh),) if single else ((al, bh), (ah, bl), (ah, bh))
    n = a.shape[-1] // parts
    out = None
    for p0 in range(0, a.shape[-1], n):
        c = np.zeros(a.shape[:-1] + b.shape[-1:], F32)
        for k0 in range(p0, p0 + n, 8):
            ks = slice(k0, k0 + 8)
            t = np.zeros_like(c) if per_step else c
            for x, y in passes:
                t = rz32(t.astype(np.float64) + np.matmul(x[..., ks], y[..., ks, :]))
            c = (c + t).astype(F32) if per_step else t
        out = c if out is None else (out + c).astype(F32)
    return out


def prod(a, b, mode):
    """a @ b (batched, float32 inputs) as the kernel's product of the given precision, fp32 result."""
    a = np.asarray(a, dtype=F32)
    b = np.asarray(b, dtype=F32)
    if mode in ("3xtf32mma", "3xtf32mma2", "3xtf32step", "tf32mma", "tf32mma2"):
        return mma_chain(a, b, mode == "3xtf32step", 2 if mode.endswith("2") else 1, mode.startswith("tf32"))
    if mode == "tf32":
        return np.matmul(tf32(a), tf32(b))
    if mode in ("3xtf32", "3xtf32t"):  # mma3: c += al bh; c += ah bl; c += ah bh (3xtf32t: small parts truncated)
        sp = split3 if mode == "3xtf32" else split3t
        ah, al = sp(a)
        bh, bl = sp(b)
        c = np.matmul(al, bh)
        c += np.matmul(ah, bl)
        c += np.matmul(ah, bh)
        return c
    if mode == "bf16":
        return np.matmul(bf16(a), bf16(b))
    if mode == "bf16x3":
        ah, bh = bf16(a), bf16(b)
        al, bl = bf16(a - ah), bf16(b - bh)
        c = np.matmul(al, bh)
        c += np.matmul(ah, bl)
        c += np.matmul(ah, bh)
        return c
    if mode == "tf32a":  # only a split: c += al bh; c += ah bh (2 mma); b rounded once
        ah, al = split3(a)
        bh = tf32(b)
        c = np.matmul(al, bh)
        c += np.matmul(ah, bh)
        return c
    if mode == "tf32b":  # only b split: c += ah bl; c += ah bh (2 mma); a rounded once
        ah = tf32(a)
        bh, bl = split3(b)
        c = np.matmul(ah, bl)
        c += np.matmul(ah, bh)
        return c
    if mode == "fp32":
        return np.matmul(a, b)
    if mode == "fp64":
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(F32)
    raise ValueError(mode)


def parse_precision(spec):
    p = dict(DEFAULTS)
    for item in filter(None, (spec or "").split(",")):
        name, mode = item.split("=")
        blocked = name == "tinv" and mode.split("-", 1)[0] in ("blocked", "stages") and mode.split("-", 1)[-1] in MODES
        s3 = name == "diag" and (mode == "s3" or (mode[:3] == "s3-" and all(x in MODES for x in mode[3:].split("+"))))
        if name in ("u", "w") and mode not in ("wu", "betaT"):
            raise SystemExit(f"two_phase.py: {name} is wu or betaT, not {mode!r}")
        if name not in p or (mode not in MODES and not blocked and not s3 and name not in ("u", "w")):
            raise SystemExit(f"two_phase.py: bad precision item {item!r} (names {sorted(p)}, modes {MODES})")
        if name == "tinv" and mode not in ("fp32", "fp64") and not blocked:
            raise SystemExit(f"two_phase.py: {name} is fp32, fp64, blocked-MODE or stages-MODE")
        p[name] = mode
    return p


def ex2(x):
    return np.exp2(np.asarray(x, dtype=F32)).astype(F32)


def gate_log2(m, t, g):
    """The gate in log2 units, float32, as gate_log_decay<float>(...) * kLog2e ([..., HV, K])."""
    HV, K = m["HV"], m["K"]
    g = g.astype(F32)
    if m["gate"] == "log_decay":
        lg = g
    else:
        x = g + t["dt_bias"].astype(F32).reshape(HV, K)
        a_log = t["A_log"].astype(F32).reshape(HV, 1) if "A_log" in t else None
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            if m["gate"] == "softplus":
                thr = F32(20)
                ls = np.where(x > thr, np.log(np.maximum(x, F32(1e-30))),
                              np.where(x < -thr, x, np.log(np.log1p(np.exp(np.minimum(x, thr))))))
                lg = -np.exp((a_log if a_log is not None else F32(0)) + ls.astype(F32))
            else:
                if a_log is not None:
                    x = np.where(x != 0, x * np.exp(a_log), x)
                # chunk_common.cuh bounded_gate_log2: lb log2(e) / (1 + exp2(-x log2(e))), already in log2 units
                lb2 = (F32(m["lower_bound"]) * LOG2E).astype(F32)
                return (lb2 * (F32(1) / (F32(1) + ex2(-(x * LOG2E).astype(F32))))).astype(F32)
    return (lg.astype(F32) * LOG2E).astype(F32)


def l2norm(x):
    ss = np.einsum("...d,...d->...", x, x, dtype=F32)
    return (x * (F32(1) / np.sqrt(ss + F32(1e-6)))[..., None]).astype(F32)


def phase1(q, k, g, beta, vb, prec, keep=False, normalized=True, v=None):
    """One batch of chunks. q, k, g: [N, C, K] (g in log2 units, rows past the chunk's length zero), beta [N, C],
    vb = beta v [N, C, V] (and v itself for u=betaT). Returns the workspace tiles Qg, Kd [N, C, K], decay [N, K], Aqk [N, C, C], W, U; with
    keep, also what the chunked backward keeps (BackwardSaves): A' (not scaled by beta) and T [N, C, C]. normalized:
    q and k are L2-normalized rows (diag=s3 factors only then)."""
    N, _, K = q.shape
    Ap = np.zeros((N, C, C), F32)
    # S1: diagonal blocks. (r, c), r >= c in one 16-block: sum_d x_r[d] k_c[d] exp2(sum of g over c+1 .. r).
    Akk = np.zeros((N, C, C), F32)
    Aqk = np.zeros((N, C, C), F32)
    for bk in range(C // 16):
        base = 16 * bk
        for c in range(16):
            rows = slice(base + c, base + 16)
            e = np.zeros((N, 16 - c, K), F32)
            acc = np.zeros((N, K), F32)
            for i, r in enumerate(range(base + c, base + 16)):
                if r > base + c:
                    acc = acc + g[:, r]
                e[:, i] = acc
            w = ex2(e) * k[:, base + c][:, None, :]
            if prec["diag"] not in ("fp32", "s3"):  # fp64, and the factored modes' pairwise fallback exactly
                vq = np.einsum("nrd,nrd->nr", q[:, rows].astype(np.float64), w.astype(np.float64)).astype(F32)
                vk = np.einsum("nrd,nrd->nr", k[:, rows].astype(np.float64), w.astype(np.float64)).astype(F32)
            else:
                vq = np.einsum("nrd,nrd->nr", q[:, rows], w, dtype=F32)
                vk = np.einsum("nrd,nrd->nr", k[:, rows], w, dtype=F32)
            Aqk[:, rows, base + c] = vq
            Akk[:, base + c + 1:base + 16, base + c] = beta[:, base + c + 1:base + 16] * vk[:, 1:]
            Ap[:, base + c + 1:base + 16, base + c] = vk[:, 1:]
    # S2: per-channel factors.
    Kd = np.zeros_like(k)
    Ksuf = np.zeros_like(k)
    suf = np.zeros((N, K), F32)
    bsuf = np.zeros((N, K), F32)
    for t in range(C - 1, -1, -1):
        Kd[:, t] = k[:, t] * ex2(suf)
        Ksuf[:, t] = k[:, t] * ex2(bsuf)
        suf = suf + g[:, t]
        bsuf = np.zeros_like(bsuf) if t % 16 == 0 else bsuf + g[:, t]
    Qg = np.zeros_like(q)
    Qr = np.zeros_like(q)
    Kr = np.zeros_like(k)
    gam = np.zeros((N, K), F32)
    gl = np.zeros((N, K), F32)
    P = [None] * (C // 16)
    for t in range(C):
        gam = gam + g[:, t]
        gl = g[:, t].copy() if t % 16 == 0 else gl + g[:, t]
        el = ex2(gl)
        Qg[:, t] = q[:, t] * ex2(gam)
        Qr[:, t] = q[:, t] * el
        Kr[:, t] = k[:, t] * el
        if t % 16 == 15:
            P[t // 16] = el
    decay = ex2(gam)
    pre = [np.ones((N, K), F32)]  # P_0 .. P_{b-1}, in the kernel's order of products
    for b in range(1, C // 16):
        pre.append(P[0] if b == 1 else pre[-1] * P[b - 1])
    fac = {}  # F_IJ = P_{J+1} .. P_{I-1} for I - J >= 2, in the kernel's order at C = 64
    for I in range(2, C // 16):
        for J in range(I - 1):
            f = P[J + 1]
            for b in range(J + 2, I):
                f = f * P[b]
            fac[(I, J)] = f
    # S3: off-diagonal blocks through the reference point.
    for I in range(1, C // 16):
        for J in range(I):
            bI, bJ = slice(16 * I, 16 * I + 16), slice(16 * J, 16 * J + 16)
            B = Ksuf[:, bJ] if I - J == 1 else Ksuf[:, bJ] * fac[(I, J)][:, None, :]
            Bt = np.swapaxes(B, 1, 2)
            Ap[:, bI, bJ] = prod(Kr[:, bI], Bt, prec["akk"])
            Akk[:, bI, bJ] = beta[:, bI, None] * Ap[:, bI, bJ]
            Aqk[:, bI, bJ] = prod(Qr[:, bI], Bt, prec["aqk"])
    # The factored diagonal blocks (diag = a product mode): exp2(sum over c+1 .. r) = exp2(Gl_r - S_b / 2)
    # exp2((S_b - Gl_c) - S_b / 2), with Gl the block's inclusive local sum of g and S_b its total: the reference point
    # is mid-block, so each operand q exp2(Gl_r - S_b / 2), k exp2(..) spans at most 2^(|S_b| / 2) either way. They are
    # formed from q and k directly (not from Qr / Ksuf: those underflow first where |S_b| is large, and a zero
    # operand times 2^(|S_b| / 2) loses a term of size 1; that variant failed the 1000-bit softplus probe: out 5.0e-2,
    # state 2.7e-3). Blocks whose operands leave the finite normal range (or flush a nonzero q or k) keep the pairwise
    # result.
    if prec["diag"] == "s3" or prec["diag"].startswith("s3-"):
        # The kernel's factored diagonal blocks (chunk_prepare.cu S2a / S3): Kr / Qr against Ksuf exp2(-S_b), A' in
        # akk's mode and A_qk in aqk's, where every channel's S_b >= -96, no g > 0 and q, k are normalized; S1's
        # pairwise fp32 result elsewhere.
        lower = np.tril(np.ones((16, 16), bool))
        strict = np.tril(np.ones((16, 16), bool), -1)
        for bk in range(C // 16):
            sl = slice(16 * bk, 16 * bk + 16)
            sb = np.zeros(g.shape[::2], F32)
            for i in range(16):
                sb = (sb + g[:, 16 * bk + i]).astype(F32)
            with np.errstate(invalid="ignore"):
                ok = (sb >= F32(-96)).all(axis=1) & (g[:, sl] <= 0).all(axis=(1, 2)) & normalized
            FACTORED[1] += len(ok)
            FACTORED[0] += int(ok.sum())
            if not ok.any():
                continue
            Bt = np.swapaxes(Ksuf[ok][:, sl] * ex2(-sb[ok])[:, None, :], 1, 2)
            dm = prec["diag"][3:].split("+")  # s3-MODE: both products in MODE, s3-MK+MQ: A' in MK, A_qk in MQ
            ak = prod(Kr[ok][:, sl], Bt, dm[0] or prec["akk"])
            aq = prod(Qr[ok][:, sl], Bt, dm[-1] or prec["aqk"])
            Aqk[ok, sl, sl] = np.where(lower, aq, F32(0))
            Akk[ok, sl, sl] = np.where(strict, beta[ok][:, sl, None] * ak, F32(0))
            Ap[ok, sl, sl] = np.where(strict, ak, F32(0))
    elif prec["diag"] not in ("fp32", "fp64"):
        tiny = np.finfo(F32).tiny
        lower = np.tril(np.ones((16, 16), bool))
        strict = np.tril(np.ones((16, 16), bool), -1)
        for bk in range(C // 16):
            sl = slice(16 * bk, 16 * bk + 16)
            gl = np.cumsum(g[:, sl], axis=1, dtype=F32)  # sequential fp32 sums, as the kernel's scan
            sb = gl[:, -1:, :]
            with np.errstate(over="ignore", invalid="ignore", under="ignore"):
                half = F32(0.5) * sb
                ops = [(q[:, sl] * ex2(gl - half)).astype(F32), (k[:, sl] * ex2(gl - half)).astype(F32),
                       (k[:, sl] * ex2((sb - gl) - half)).astype(F32)]
            raw = [q[:, sl], k[:, sl], k[:, sl]]
            ok = np.ones(N, bool)
            for o, r0 in zip(ops, raw):
                bad = ~np.isfinite(o) | ((np.abs(o) < tiny) & (r0 != 0))
                ok &= ~bad.reshape(N, -1).any(axis=1)
            FACTORED[1] += N
            if not ok.any():
                continue
            FACTORED[0] += int(ok.sum())
            Bt = np.swapaxes(ops[2][ok], 1, 2)
            aq = prod(ops[0][ok], Bt, prec["diag"])
            ak = prod(ops[1][ok], Bt, prec["diag"])
            Aqk[ok, sl, sl] = np.where(lower, aq, F32(0))
            Akk[ok, sl, sl] = np.where(strict, beta[ok][:, sl, None] * ak, F32(0))
            Ap[ok, sl, sl] = np.where(strict, ak, F32(0))
    # S4: T = (I + A_kk)^-1 by forward substitution.
    if prec["tinv"].startswith(("blocked-", "stages-")):
        if C != 64:
            raise SystemExit("two_phase.py: tinv=blocked- / stages- model the kernel's 64-token chunk (--chunk 64)")
        form, mode = prec["tinv"].split("-", 1)
        Tm = np.zeros((N, C, C), F32)
        for b in range(4):  # round 0: the diagonal blocks by forward substitution
            o = 16 * b
            for r in range(16):
                Tm[:, o + r, o:o + 16] = -np.einsum("nj,njc->nc", Akk[:, o + r, o:o + r], Tm[:, o:o + r, o:o + 16],
                                                    dtype=F32)
                Tm[:, o + r, o + r] = F32(1)
        def blk(i):
            return slice(16 * i, 16 * i + 16)
        if form == "blocked":  # the distance rounds: T_IJ for I - J = 1, 2, 3 in turn
            for sdist in range(1, 4):
                for J in range(4 - sdist):
                    I = J + sdist
                    Xb = prod(Akk[:, blk(I), 16 * J:16 * I], Tm[:, 16 * J:16 * I, blk(J)], mode)
                    Tm[:, blk(I), blk(J)] = -prod(Tm[:, blk(I), blk(I)], Xb, mode)
        else:  # the stages (chunk_map.h tri2_task): the 2 x 2 block inverse twice
            for i, j in ((1, 0), (3, 2)):
                Xb = prod(Akk[:, blk(i), blk(j)], Tm[:, blk(j), blk(j)], mode)
                Tm[:, blk(i), blk(j)] = -prod(Tm[:, blk(i), blk(i)], Xb, mode)
            Xs = {(i, j): prod(Akk[:, blk(i), 16 * j:32], Tm[:, 16 * j:32, blk(j)], mode)
                  for i in (2, 3) for j in (0, 1)}
            for i in (2, 3):
                for j in (0, 1):
                    Xcat = np.concatenate([Xs[(k, j)] for k in range(2, i + 1)], axis=1)
                    Tm[:, blk(i), blk(j)] = -prod(Tm[:, blk(i), 32:16 * (i + 1)], Xcat, mode)
    elif prec["tinv"] == "fp64":
        A64 = Akk.astype(np.float64)
        T64 = np.zeros((N, C, C))
        for r in range(C):
            T64[:, r] = -np.einsum("nj,njc->nc", A64[:, r, :r], T64[:, :r])
            T64[:, r, r] = 1.0
        Tm = T64.astype(F32)
    else:
        Tm = np.zeros((N, C, C), F32)
        for r in range(C):
            Tm[:, r] = -np.einsum("nj,njc->nc", Akk[:, r, :r], Tm[:, :r], dtype=F32)
            Tm[:, r, r] = F32(1)
    Aqk = np.tril(Aqk)
    # S5: [W | U] = T [beta exp(Gamma) K | beta V]; exp(Gamma_t) K_t = P_0 .. P_{b-1} Kr_t.
    X = np.empty_like(Kr)
    for b in range(C // 16):
        sl = slice(16 * b, 16 * b + 16)
        X[:, sl] = Kr[:, sl] * pre[b][:, None, :]
        if prec["w"] != "betaT":
            X[:, sl] *= beta[:, sl, None]
    W = prod((Tm * beta[:, None, :]).astype(F32), X, prec["wu"]) if prec["w"] == "betaT" else prod(Tm, X, prec["wu"])
    if prec["u"] == "betaT":  # bf16x3 of (T diag(beta)) and v: v's lo part is zero for bf16 inputs (two products)
        U = prod((Tm * beta[:, None, :]).astype(F32), v, "bf16x3")
    else:
        U = prod(Tm, vb, prec["wu"])
    if keep:
        return Qg, Kd, decay, Aqk, W, U, Ap, Tm
    return Qg, Kd, decay, Aqk, W, U


def run(m, t, prec, segments=1, coupled=False):
    global C  # --coupled runs phase 1 at 32 tokens too
    B, T, H, HV, K, V, N = (m[x] for x in ("B", "T", "H", "HV", "K", "V", "N"))
    group = HV // H
    hmap = np.arange(HV) // group
    q = t["q"].astype(F32)[:, :, hmap]  # [B, T, HV, K]
    k = t["k"].astype(F32)[:, :, hmap]
    v = t["v"].astype(F32)
    if m["use_qk_l2norm"]:
        q, k = l2norm(q), l2norm(k)
    g = gate_log2(m, t, t["g"])
    beta = t["beta"].astype(F32)
    if m["beta_is_logits"]:
        beta = (F32(1) / (F32(1) + np.exp(-beta))).astype(F32)
    if m["allow_neg_eigval"]:
        beta = F32(2) * beta
    vb = (beta[..., None] * v).astype(F32)
    if "cu_seqlens" in t:
        cu = t["cu_seqlens"].astype(np.int64)
        seqs = [(0, int(cu[n]), int(cu[n + 1])) for n in range(N)]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    # The chunk list: (sequence, batch row, start, length), sequence major.
    chunks = [(n, b, s, min(C, t1 - s)) for n, (b, t0, t1) in enumerate(seqs) for s in range(t0, t1, C)]
    out = np.zeros((B, T, HV, V), F32)
    final = np.zeros((N, HV, V, K), F32)
    if "initial_state" in t:
        h0 = t["initial_state"].astype(F32)
        final[:] = h0 if m["state_v_first"] else np.swapaxes(h0, 2, 3)
    scale = F32(m["scale"])
    kept = {}  # chunk index -> its phase-1 tiles, where phase 2 runs in segments

    def advance(S, tiles, write=None):
        """Phase 2 of one chunk on the state rows S [HV, rows, K] (tiles' U as wide as the rows)."""
        Qg, Kd, dec, Aqk, W, U = tiles
        St = np.swapaxes(S, 1, 2)  # [HV, K, rows]
        Vn = U - prod(W, St, prec["ws"])
        if write is not None:
            b, s, L = write
            acc = prod(Qg, St, prec["qs"])
            acc = acc + prod(Aqk, Vn, prec["av"])
            out[b, s:s + L] = np.swapaxes(scale * acc[:, :L], 0, 1)
        S[:] = S * dec[:, None, :] + prod(np.swapaxes(Vn, 1, 2), Kd, prec["upd"])

    def advance_coupled(S, tiles, half_tiles, write):
        """Phase 2 of one 64-token chunk in the coupled form (--coupled) on S [HV, V, K]."""
        Qg, Kd, dec, Aqk, _, _ = tiles
        Kdh, dech, Wh, Uh = half_tiles  # [HV, 2, 32, .], decay [HV, 2, K]
        St = np.swapaxes(S, 1, 2)
        Wp = np.concatenate([Wh[:, 0], (Wh[:, 1] * dech[:, 0][:, None, :]).astype(F32)], axis=1)
        X = prod(Wp, St, prec["ws"])
        Mc = prod(Wh[:, 1], np.swapaxes(Kdh[:, 0], 1, 2), prec["m"])  # [HV, 32, 32]
        Va = Uh[:, 0] - X[:, :32]
        Vb = Uh[:, 1] - X[:, 32:] - prod(Mc, Va, prec["mv"])
        Vn = np.concatenate([Va, Vb], axis=1)
        b, s0, L = write
        acc = prod(Qg, St, prec["qs"]) + prod(Aqk, Vn, prec["av"])
        out[b, s0:s0 + L] = np.swapaxes(scale * acc[:, :L], 0, 1)
        S[:] = S * dec[:, None, :] + prod(np.swapaxes(Vn, 1, 2), Kd, prec["upd"])

    nb = max(1, 4096 // HV)  # chunks per phase-1 batch
    for i0 in range(0, len(chunks), nb):
        part = chunks[i0:i0 + nb]
        M = len(part)

        def gather(x, width):
            y = np.zeros((M, C, HV, width), F32)
            for j, (_, b, s, L) in enumerate(part):
                y[j, :L] = x[b, s:s + L]
            return y.transpose(0, 2, 1, 3).reshape(M * HV, C, width)  # [(chunk, hv), C, width]

        qc, kc, gc, vbc = gather(q, K), gather(k, K), gather(g, K), gather(vb, V)
        bc = gather(beta[..., None], 1)[..., 0]
        Qg, Kd, dec, Aqk, W, U = phase1(qc, kc, gc, bc, vbc, prec, normalized=bool(m["use_qk_l2norm"]),
                                        v=gather(v, V))
        shp = lambda x: x.reshape((M, HV) + x.shape[1:])  # noqa: E731
        Qg, Kd, dec, Aqk, W, U = map(shp, (Qg, Kd, dec, Aqk, W, U))
        if coupled:  # each half as a 32-token chunk of its own: its W, U, Kd and decay
            halves = lambda x: x.reshape((M * HV * 2, 32) + x.shape[2:])  # noqa: E731
            vh = halves(gather(v, V))
            C = 32
            _, Kdh, dech, _, Wh, Uh = phase1(halves(qc), halves(kc), halves(gc), halves(bc), halves(vbc), prec,
                                             normalized=bool(m["use_qk_l2norm"]), v=vh)
            C = 64
            hs = lambda x: x.reshape((M, HV, 2) + x.shape[1:])  # noqa: E731
            Kdh, dech, Wh, Uh = map(hs, (Kdh, dech, Wh, Uh))
        # Phase 2, in chunk order (the chunks of one sequence are consecutive in the list).
        for j, (n, b, s, L) in enumerate(part):
            tiles = (Qg[j], Kd[j], dec[j], Aqk[j], W[j], U[j])
            if coupled:
                advance_coupled(final[n], tiles, (Kdh[j], dech[j], Wh[j], Uh[j]), (b, s, L))
                continue
            if segments > 1:
                kept[i0 + j] = tiles
            else:
                advance(final[n], tiles, (b, s, L))  # final[n]: [HV, V, K], updated in place
    if segments > 1:
        for n in range(N):
            idx = [i for i, c in enumerate(chunks) if c[0] == n]
            parts = [x for x in np.array_split(np.array(idx, dtype=np.int64), segments) if len(x)]
            ends = []  # (B_j, M_j) of segments 1..: pass 1, from a zero state, M_j as K rows from the identity
            for part in parts[1:]:
                Sx = np.concatenate([np.zeros((HV, V, K), F32), np.broadcast_to(np.eye(K, dtype=F32), (HV, K, K))],
                                    axis=1)
                for i in part:
                    Qg, Kd, dec, Aqk, W, U = kept[i]
                    Ux = np.concatenate([U, np.zeros(U.shape[:2] + (K,), F32)], axis=2)
                    advance(Sx, (Qg, Kd, dec, Aqk, W, Ux))
                ends.append((Sx[:, :V].copy(), Sx[:, V:].copy()))
            X = final[n]  # segment 0 from the initial state: its end is X_1
            for i in parts[0]:
                advance(X, kept[i], chunks[i][1:])
            starts = [X.copy()]  # X_1, X_2 = X_1 M_1 + B_1, ...
            for Bj, Mj in ends[:-1]:
                starts.append(prod(starts[-1], Mj, prec["handoff"]) + Bj)
            for part, Xj in zip(parts[1:], starts):  # pass 2: segment j from X_j, with its outputs
                X[:] = Xj
                for i in part:
                    advance(X, kept[i], chunks[i][1:])
    return out, final


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--precision", default="")
    ap.add_argument("--segments", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--coupled", action="store_true")
    ap.add_argument("dir")
    a = ap.parse_args(argv)
    if a.chunk not in (16, 32, 48, 64):
        raise SystemExit("two_phase.py: --chunk is 16, 32, 48 or 64 (16-token sub-blocks)")
    if a.coupled and (a.chunk != 64 or a.segments != 1):
        raise SystemExit("two_phase.py: --coupled takes 64-token chunks in one segment")
    global C
    C = a.chunk
    prec = parse_precision(a.precision)
    m, t = read_case(a.dir)
    with np.errstate(under="ignore"):
        out, final = run(m, t, prec, a.segments, a.coupled)
    write_output(a.dir, m, "out", out)
    if FACTORED[1]:
        print(f"two_phase.py: {FACTORED[0]} of {FACTORED[1]} diagonal blocks factored", file=sys.stderr)
    if m["output_final_state"]:
        write_output(a.dir, m, "final_state", final if m["state_v_first"] else final.transpose(0, 1, 3, 2))


if __name__ == "__main__":
    main(sys.argv[1:])
