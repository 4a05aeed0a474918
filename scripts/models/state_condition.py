"""state_condition.py: the study behind docs/numerics.md, "The key norm's rounding" (how ill-conditioned a case's final state is), as
an outside implementation of kda-verify (`--impl "cmd:python3 scripts/models/state_condition.py --log FILE"`). It
answers with the float64 recurrence (so the verifier passes it) and appends to FILE, per case, three first-order
measures of how errors of relative size u = 2^-24 reach the final state, computed in float64 from the case alone
(no implementation's summation order in them), each as u |.| / |S_T| over every (sequence, head), Frobenius norms:
  random     sqrt(tr P_T), P_t = A_t^T P_{t-1} A_t + diag(colsum S_t^2): every state element rounded at every token,
             independent signs (the random walk the fp32 class's c_rms models)
  coherent   X_T, X_t = X_{t-1} A_t + S_t: every token's state scaled by (1 + u), all errors one sign
  keyscale   Y_T = d S_T / d eps with every key k (1 + eps): Y_t = Y_{t-1} A_t + (beta v - 2 beta S_{t-1} D k) k^T.
             An implementation normalizes k in finite precision, and near-identical keys round alike, so this error
             is made with one sign at every token
with A_t = D (I - beta k k^T), D = diag(exp g_t), the token's transition (S value-first: S_t = S_{t-1} A_t +
beta v k^T). usage: state_condition.py --log FILE DIR"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "verify_impls"))
from kda_protocol import read_case, write_output  # noqa: E402
from numpy_recurrent import preprocess  # noqa: E402

U = 2.0 ** -24


def head_measures(S, k, v, g, beta, q=None, scale=1.0):
    """One (sequence, head): S [V, K] the initial state, k / g [L, K], v [L, V], beta [L], q [L, K] (optional, for
    the outputs). Returns (S_T, X_T, Y_T, P_T, out [L, V]) in float64."""
    V, K = S.shape
    S = S.astype(np.float64).copy()
    X, Y, P = S.copy(), np.zeros((V, K)), np.diag((S * S).sum(0))
    out = np.zeros((len(k), V))
    for t in range(len(k)):
        a, kt, bt = np.exp(g[t]), k[t], beta[t]
        S = S * a[None, :]
        sk = S @ kt
        Y = Y * a[None, :]
        Y = Y - bt * np.outer(Y @ kt, kt) + np.outer(bt * v[t] - 2 * bt * sk, kt)
        S = S + np.outer(bt * (v[t] - sk), kt)
        X = X * a[None, :]
        X = X - bt * np.outer(X @ kt, kt) + S
        # A^T P A = R (D P D) R with R = I - beta k k^T expanded: O(K^2) a token.
        P = P * np.outer(a, a)
        pk = P @ kt
        P = P - bt * (np.outer(kt, pk) + np.outer(pk, kt)) + bt * bt * (kt @ pk) * np.outer(kt, kt)
        P[np.diag_indices(K)] += (S * S).sum(0)
        if q is not None:
            out[t] = scale * (S @ q[t])
    return S, X, Y, P, out


def main(directory, log):
    m, t = read_case(directory)
    B, T, H, HV, K, V, N = (m[x] for x in ("B", "T", "H", "HV", "K", "V", "N"))
    pre = preprocess(m, t)
    q, k, v, g, beta, seqs = (pre[n] for n in ("q", "k", "v", "g", "beta", "seqs"))
    group = HV // H
    out = np.zeros((B, T, HV, V))
    final = np.zeros((N, HV, V, K))
    s2 = x2 = y2 = p2 = 0.0
    for n, (b, t0, t1) in enumerate(seqs):
        for hv in range(HV):
            h = hv // group
            S = np.zeros((V, K))
            if "initial_state" in t:
                h0 = t["initial_state"][n, hv].astype(np.float64)
                S = h0 if m["state_v_first"] else h0.T
            r = slice(t0, t1)
            S, X, Y, P, out[b, r, hv] = head_measures(S, k[b, r, h], v[b, r, hv], g[b, r, hv], beta[b, r, hv],
                                                      q[b, r, h], m["scale"])
            final[n, hv] = S
            s2, x2, y2, p2 = s2 + (S * S).sum(), x2 + (X * X).sum(), y2 + (Y * Y).sum(), p2 + np.trace(P)
    write_output(directory, m, "out", out)
    if m["output_final_state"]:
        write_output(directory, m, "final_state", final if m["state_v_first"] else final.transpose(0, 1, 3, 2))
    with open(log, "a") as f:
        f.write(json.dumps({"T": T, "HV": HV, "K": K, "random": U * np.sqrt(p2 / s2),
                            "coherent": U * np.sqrt(x2 / s2), "keyscale": U * np.sqrt(y2 / s2)}) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log", required=True, help="a file each case's three measures are appended to (a JSON line)")
    ap.add_argument("dir")
    a = ap.parse_args()
    main(a.dir, a.log)
