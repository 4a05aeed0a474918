"""Experiment: is the fp32 recurrence's backward error on near-identical keys at beta 2 the key norm's rounding?
FD tangent (float64, k_hat scaled by 1 +- h in the recurrence) of the pre-chain-rule gradients, per-head fit."""
import json
import os
import sys
import numpy as np
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts", "verify_impls"))
from kda_protocol import read_case
import numpy_recurrent as nr

def grads(m, t, pre, dtype, ks=1.0):
    B, T, H, HV, K, V, N = (m[x] for x in ("B", "T", "H", "HV", "K", "V", "N"))
    c = lambda x: x.astype(dtype)
    q, k, v, g, beta, seqs = c(pre["q"]), c(pre["k"]) * dtype(ks), c(pre["v"]), c(pre["g"]), c(pre["beta"]), pre["seqs"]
    scale = dtype(m["scale"]); group = HV // H
    dout = t["dout"].astype(dtype)
    dfinal = t["dfinal_state"].astype(dtype) if "dfinal_state" in t else None
    if dfinal is not None and not m["state_v_first"]: dfinal = dfinal.transpose(0, 1, 3, 2)
    out = {n: [] for n in ("dq", "dk", "dv", "dg", "db", "dh0")}
    res = {}
    for n, (b, t0, t1) in enumerate(seqs):
        for hv in range(HV):
            h = hv // group
            S = np.zeros((V, K), dtype)
            if "initial_state" in t:
                h0 = t["initial_state"][n, hv].astype(dtype)
                S = h0.copy() if m["state_v_first"] else h0.T.copy()
            states = [S]
            for tt in range(t0, t1):
                S = S * np.exp(g[b, tt, hv])[None, :]
                u = beta[b, tt, hv] * (v[b, tt, hv] - S @ k[b, tt, h])
                S = S + np.outer(u, k[b, tt, h]); states.append(S)
            G = dfinal[n, hv].copy() if dfinal is not None else np.zeros((V, K), dtype)
            L = t1 - t0
            dq = np.zeros((L, K)); dk = np.zeros((L, K)); dv = np.zeros((L, V)); dg = np.zeros((L, K)); db = np.zeros(L)
            for i in range(L - 1, -1, -1):
                tt = t0 + i
                S_prev, S_t = states[i], states[i + 1]
                al = np.exp(g[b, tt, hv]); kt, qt, bt = k[b, tt, h], q[b, tt, h], beta[b, tt, hv]
                Sp = S_prev * al[None, :]; p = Sp @ kt; u = bt * (v[b, tt, hv] - p)
                G = G + scale * np.outer(dout[b, tt, hv], qt)
                dq[i] = scale * (S_t.T @ dout[b, tt, hv])
                du = G @ kt; dk_t = G.T @ u
                db[i] = du @ (v[b, tt, hv] - p); dv[i] = bt * du
                dp = -bt * du; dSp = G + np.outer(dp, kt)
                dk[i] = dk_t + Sp.T @ dp
                dg[i] = (dSp * S_prev).sum(0) * al
                G = dSp * al[None, :]
            res[(n, hv)] = dict(dq=dq, dk=dk, dv=dv, dg=dg, db=db, dh0=G)
    return res

def main(d, log):
    m, t = read_case(d)
    nr.main(d, np.float32)  # the implementation's answer (files)
    p64 = nr.preprocess(m, t); p32 = nr.preprocess(m, t, np.float32)
    ref = grads(m, t, p64, np.float64)
    f32 = grads(m, t, p32, np.float32)
    h = 2.0 ** -20
    gp = grads(m, t, p64, np.float64, 1 + h); gm = grads(m, t, p64, np.float64, 1 - h)
    out = {}
    for key in ref:
        num = den = 0.0
        names = ("dq", "dk", "dv", "dg", "db", "dh0")
        tan = {nm: (gp[key][nm] - gm[key][nm]) / (2 * h) for nm in names}
        for nm in names:
            r = ref[key][nm]; e = f32[key][nm].astype(np.float64) - r; w = 1.0 / max((r * r).mean(), 1e-300)
            num += w * (e * tan[nm]).sum(); den += w * (tan[nm] ** 2).sum()
        dl = num / den
        row = {"delta_u": dl / 2 ** -24}
        for nm in names:
            r = ref[key][nm]; e = f32[key][nm].astype(np.float64) - r
            nr_ = np.sqrt((r * r).sum())
            row[nm] = (float(np.sqrt((e * e).sum()) / nr_), float(np.sqrt(((e - dl * tan[nm]) ** 2).sum()) / nr_))
        out[str(key)] = row
    with open(log, "a") as f:
        f.write(json.dumps({"T": m["T"], "heads": out}) + "\n")

if __name__ == "__main__":
    main(sys.argv[2], sys.argv[1])
