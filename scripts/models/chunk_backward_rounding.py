"""chunk_backward_rounding.py: the chunked backward (scripts/models/chunk_backward.py's safe form, dg summed over the
exponent runs) computed in float32 end to end, as an outside implementation of kda-verify's backward suites
(docs/verifier_protocol.md): how much of the tensor-core bound plain fp32 arithmetic in the chunked arrangement
uses, before a kernel decides which products need bf16x3 (docs/backward.md).

    kda-verify --suite backward-quick --impl "cmd:python3 scripts/models/chunk_backward_rounding.py"

The inputs go through the same preprocessing and chain rules as scripts/verify_impls/numpy_recurrent.py (there in
float64, here in --dtype); every chunk product is a float32 torch matmul / einsum (fp32 accumulation; the
summation order is torch's); pair decays are exp of fp32 sums of g accumulated from the pair's earlier token.

usage: chunk_backward_rounding.py [--dtype float32|float64] DIR"""
import argparse
import os
import sys

import numpy as np
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(_HERE, "..", "verify_impls"))
sys.path.insert(0, _HERE)
import chunk_backward as cb  # noqa: E402
from kda_protocol import read_case, write_output  # noqa: E402
from numpy_recurrent import preprocess, write_gradients  # noqa: E402

C = 64


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
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
