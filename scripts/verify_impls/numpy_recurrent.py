"""numpy_recurrent.py: a float64 numpy implementation of KDA for kda-verify's external protocol
(`kda-verify --impl "cmd:python3 scripts/verify_impls/numpy_recurrent.py"`): the token recurrence written
independently of the C++ reference, so the protocol and the verifier's judgement of an outside implementation are
tested end to end in CI. usage: numpy_recurrent.py DIR"""
import sys

import numpy as np

from kda_protocol import read_case, write_output


def main(directory):
    m, t = read_case(directory)
    B, T, H, HV, K, V, N = (m[x] for x in ("B", "T", "H", "HV", "K", "V", "N"))
    q, k, v = (t[x].astype(np.float64) for x in ("q", "k", "v"))
    g, beta = t["g"].astype(np.float64), t["beta"].astype(np.float64)
    if m["use_qk_l2norm"]:
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    if m["gate"] != "log_decay":
        x = g + t["dt_bias"].astype(np.float64).reshape(HV, K)
        a = np.exp(t["A_log"].astype(np.float64))[:, None] if "A_log" in t else None
        if m["gate"] == "softplus":
            sp = np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))
            g = -a * sp
        else:
            z = x * a if a is not None else x
            g = m["lower_bound"] / (1 + np.exp(-z))
    if m["beta_is_logits"]:
        beta = 1 / (1 + np.exp(-beta))
        if m["allow_neg_eigval"]:
            beta = 2 * beta
    if "cu_seqlens" in t:
        cu = t["cu_seqlens"].astype(np.int64)
        seqs = [(0, cu[n], cu[n + 1]) for n in range(N)]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    out = np.zeros((B, T, HV, V))
    final = np.zeros((N, HV, V, K))
    group = HV // H
    for n, (b, t0, t1) in enumerate(seqs):
        for hv in range(HV):
            h = hv // group
            S = np.zeros((V, K))
            if "initial_state" in t:
                h0 = t["initial_state"][n, hv].astype(np.float64)
                S = h0 if m["state_v_first"] else h0.T.copy()
            for tt in range(t0, t1):
                S = S * np.exp(g[b, tt, hv])[None, :]
                u = beta[b, tt, hv] * (v[b, tt, hv] - S @ k[b, tt, h])
                S = S + np.outer(u, k[b, tt, h])
                out[b, tt, hv] = m["scale"] * (S @ q[b, tt, h])
            final[n, hv] = S
    write_output(directory, m, "out", out)
    if m["output_final_state"]:
        write_output(directory, m, "final_state", final if m["state_v_first"] else final.transpose(0, 1, 3, 2))


if __name__ == "__main__":
    main(sys.argv[1])
