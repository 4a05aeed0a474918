"""numpy_recurrent.py: a float64 numpy implementation of KDA for kda-verify's external protocol
(`kda-verify --impl "cmd:python3 scripts/verify_impls/numpy_recurrent.py"`): the token recurrence, a decode request
against a state pool (with the fused conv and gated RMSNorm), and for a backward request its reverse pass by hand
(chain rule through the recurrence, the L2 norms, the gate activation and the beta sigmoid), written independently
of the C++ reference, so the protocol and the verifier's judgement of an outside implementation are tested end to
end in CI. --dtype float32 runs the recurrence and its reverse in float32 (the norms', gate's and sigmoid's chain
rules stay float64): what plain fp32 token-by-token arithmetic gives on a case, next to the verifier's fp32 bound
(kda-verify --fp32-grads). usage: numpy_recurrent.py [--dtype float32] DIR"""
import argparse

import numpy as np

from kda_protocol import read_case, write_output


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def preprocess(m, t, dtype=np.float64):
    """The inputs after the L2 norms, the gate activation and the beta sigmoid, in `dtype`, plus what the chain rules
    need: a dict with q0 k0 (raw), q k (normalized), v, g (log-decay), beta, rq rk, x z a (gate), braw, seqs."""
    B, T, HV, K, N = (m[x] for x in ("B", "T", "HV", "K", "N"))
    c = lambda x: x.astype(dtype)  # noqa: E731
    q0, k0, v = (c(t[x]) for x in ("q", "k", "v"))
    graw, braw = c(t["g"]), c(t["beta"])
    q, k, rq, rk, x, z = q0, k0, None, None, None, None
    if m["use_qk_l2norm"]:
        rq = np.sqrt((q0 * q0).sum(-1, keepdims=True) + dtype(1e-6))
        rk = np.sqrt((k0 * k0).sum(-1, keepdims=True) + dtype(1e-6))
        q, k = q0 / rq, k0 / rk
    g = graw
    a = np.exp(c(t["A_log"]))[:, None] if "A_log" in t else None
    if m["gate"] != "log_decay":
        x = graw + c(t["dt_bias"]).reshape(HV, K)
        if m["gate"] == "softplus":
            with np.errstate(over="ignore"):
                sp = np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))
            g = -a * sp
        else:
            z = x * a if a is not None else x
            g = dtype(m["lower_bound"]) * sigmoid(z)
    beta = braw
    if m["beta_is_logits"]:
        beta = sigmoid(braw) * (2 if m["allow_neg_eigval"] else 1)
    if "cu_seqlens" in t:
        cu = t["cu_seqlens"].astype(np.int64)
        seqs = [(0, cu[n], cu[n + 1]) for n in range(N)]
    else:
        seqs = [(b, 0, T) for b in range(B)]
    return dict(q0=q0, k0=k0, q=q, k=k, v=v, g=g, beta=beta, rq=rq, rk=rk, x=x, z=z, a=a, braw=braw, seqs=seqs)


def write_gradients(directory, m, t, pre, dqh, dkh, dv, dglog, dbeta, dh0):
    """Through the grouped heads, the L2 norms, the gate activation and the beta sigmoid; writes the gradients the
    case asks for. dqh, dkh [B, T, HV, K] of the normalized q, k per value head; dglog of the log-decay; dbeta of
    the activated beta; dh0 value-first."""
    B, T, H, HV, K = (m[x] for x in ("B", "T", "H", "HV", "K"))
    group = HV // H
    q0, k0, rq, rk, x, z, a, g = (pre[n] for n in ("q0", "k0", "rq", "rk", "x", "z", "a", "g"))
    dq = dqh.reshape(B, T, H, group, K).sum(3)
    dk = dkh.reshape(B, T, H, group, K).sum(3)
    if m["use_qk_l2norm"]:
        dq = dq / rq - q0 * (q0 * dq).sum(-1, keepdims=True) / rq ** 3
        dk = dk / rk - k0 * (k0 * dk).sum(-1, keepdims=True) / rk ** 3
    grads = {"dq": dq, "dk": dk, "dv": dv}
    if m["gate"] == "log_decay":
        grads["dg"] = dglog
    else:
        if m["gate"] == "softplus":
            dx = dglog * -a * np.where(x > 20, 1.0, sigmoid(x))
            dA = (dglog * g).sum((0, 1, 3))
        else:
            dz = dglog * m["lower_bound"] * sigmoid(z) * sigmoid(-z)  # not s (1 - s): 1 - s cancels near s = 1
            dx = dz * a if a is not None else dz
            dA = (dz * z).sum((0, 1, 3))
        grads["dg"] = dx
        grads["ddt_bias"] = dx.sum((0, 1)).reshape(t["dt_bias"].shape)
        if a is not None:
            grads["dA_log"] = dA
    if m["beta_is_logits"]:
        dbeta = dbeta * (2 if m["allow_neg_eigval"] else 1) * sigmoid(pre["braw"]) * sigmoid(-pre["braw"])
    grads["dbeta"] = dbeta
    if "initial_state" in t:
        grads["dh0"] = dh0 if m["state_v_first"] else dh0.transpose(0, 1, 3, 2)
    for name, value in grads.items():
        if name in m["outputs"]:
            write_output(directory, m, name, value)


def decode(directory, m, t):
    """A decode request: N sequences of T tokens each against the state pool, updated as kda.h documents it: the
    start slot from state_indices ([N], or [N, T] with num_accepted_tokens), negative or out-of-range slots
    padding (zero outputs, nothing touched); the state after each token to that token's write slot (1-D indices:
    after the last token, to the start slot). With "conv" the causal short conv (width 4, SiLU) of the raw q, k, v,
    its per-channel conv state (oldest input first) read at the start slot and written with the pool; with
    "out_norm" out = o / sqrt(mean(o^2) + eps) * weight * act(out_gate)."""
    N, T, H, HV, K, V, slots = (m[x] for x in ("B", "T", "H", "HV", "K", "V", "slots"))
    idx = t["state_indices"].astype(np.int64)
    acc = t["num_accepted_tokens"].astype(np.int64) if "num_accepted_tokens" in t else None

    def read_slot(n):
        if not m["indices_per_token"]:
            r = idx[n]
        else:
            a = acc[n] if acc is not None else 1
            r = idx[n, a - 1] if 1 <= a <= T else -1
        return r if 0 <= r < slots else -1

    def write_slot(n, tt):
        w = idx[n, tt] if m["indices_per_token"] else (idx[n] if tt == T - 1 else -1)
        return w if 0 <= w < slots else -1

    t = dict(t)
    conv_out = {}
    if m["conv"]:  # the conv'd q, k, v first (they do not depend on the state), and the conv states they leave
        for name in ("q", "k", "v"):
            x = t[name].astype(np.float64).reshape(N, T, -1)
            w = t["conv_weight_" + name].astype(np.float64)
            cs = t["conv_state_" + name]
            new_cs = cs.astype(np.float64).copy()
            y = np.zeros_like(x)
            for n in range(N):
                r = read_slot(n)
                if r < 0:
                    continue
                st = cs[r].astype(np.float64).copy()  # [dim, 3]
                for tt in range(T):
                    a = (w[:, :3] * st).sum(1) + w[:, 3] * x[n, tt]
                    y[n, tt] = a / (1 + np.exp(-a))
                    st = np.concatenate([st[:, 1:], x[n, tt][:, None]], axis=1)
                    ws = write_slot(n, tt)
                    if ws >= 0:
                        new_cs[ws] = st
            t[name] = y.reshape(t[name].shape)
            conv_out["conv_state_" + name] = new_cs
    pre = preprocess(m, t)
    q, k, v, g, beta = (pre[n] for n in ("q", "k", "v", "g", "beta"))
    pool = t["state_pool"].astype(np.float64)
    if not m["state_v_first"]:
        pool = pool.transpose(0, 1, 3, 2)
    new_pool = pool.copy()
    out = np.zeros((N, T, HV, V))
    group = HV // H
    for n in range(N):
        r = read_slot(n)
        if r < 0:
            continue
        for hv in range(HV):
            h = hv // group
            S = pool[r, hv].copy()
            for tt in range(T):
                S = S * np.exp(g[n, tt, hv])[None, :]
                u = beta[n, tt, hv] * (v[n, tt, hv] - S @ k[n, tt, h])
                S = S + np.outer(u, k[n, tt, h])
                out[n, tt, hv] = m["scale"] * (S @ q[n, tt, h])
                ws = write_slot(n, tt)
                if ws >= 0:
                    new_pool[ws, hv] = S
        if m["out_norm"]:
            o = out[n]
            gate = t["out_gate"][n].astype(np.float64)
            act = 1 / (1 + np.exp(-gate))
            if m["norm_activation"] == "silu":
                act = gate * act
            rs = 1 / np.sqrt((o * o).mean(-1, keepdims=True) + m["norm_eps"])
            out[n] = o * rs * t["out_norm_weight"].astype(np.float64) * act
    write_output(directory, m, "out", out)
    write_output(directory, m, "state_pool", new_pool if m["state_v_first"] else new_pool.transpose(0, 1, 3, 2))
    for name, value in conv_out.items():
        write_output(directory, m, name, value)


def main(directory, dtype=np.float64):
    m, t = read_case(directory)
    if m.get("request") == "decode":
        decode(directory, m, t)
        return
    backward = m.get("request", "forward") == "backward"
    B, T, H, HV, K, V, N = (m[x] for x in ("B", "T", "H", "HV", "K", "V", "N"))
    pre = preprocess(m, t, dtype)
    q, k, v, g, beta, seqs = (pre[n] for n in ("q", "k", "v", "g", "beta", "seqs"))
    scale = dtype(m["scale"])
    out = np.zeros((B, T, HV, V), dtype)
    final = np.zeros((N, HV, V, K), dtype)
    group = HV // H
    if backward:
        dout = t["dout"].astype(dtype)
        dfinal = None
        if "dfinal_state" in t:
            dfinal = t["dfinal_state"].astype(dtype)
            if not m["state_v_first"]:
                dfinal = dfinal.transpose(0, 1, 3, 2)
        dqh, dkh = np.zeros((B, T, HV, K), dtype), np.zeros((B, T, HV, K), dtype)
        dv, dglog, dbeta = np.zeros((B, T, HV, V), dtype), np.zeros((B, T, HV, K), dtype), np.zeros((B, T, HV), dtype)
        dh0 = np.zeros((N, HV, V, K), dtype)
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
                S = S + np.outer(u, k[b, tt, h])
                out[b, tt, hv] = scale * (S @ q[b, tt, h])
                states.append(S)
            final[n, hv] = S
            if not backward:
                continue
            G = dfinal[n, hv].copy() if dfinal is not None else np.zeros((V, K), dtype)
            for i in range(t1 - t0 - 1, -1, -1):
                tt = t0 + i
                S_prev, S_t = states[i], states[i + 1]
                al = np.exp(g[b, tt, hv])
                kt, qt, bt = k[b, tt, h], q[b, tt, h], beta[b, tt, hv]
                Sp = S_prev * al[None, :]
                p = Sp @ kt
                u = bt * (v[b, tt, hv] - p)
                G = G + scale * np.outer(dout[b, tt, hv], qt)
                dqh[b, tt, hv] = scale * (S_t.T @ dout[b, tt, hv])
                du = G @ kt
                dk_t = G.T @ u
                dbeta[b, tt, hv] = du @ (v[b, tt, hv] - p)
                dv[b, tt, hv] = bt * du
                dp = -bt * du
                dSp = G + np.outer(dp, kt)
                dk_t = dk_t + Sp.T @ dp
                dkh[b, tt, hv] = dk_t
                dglog[b, tt, hv] = (dSp * S_prev).sum(0) * al
                G = dSp * al[None, :]
            dh0[n, hv] = G
    if not backward:
        write_output(directory, m, "out", out)
        if m["output_final_state"]:
            write_output(directory, m, "final_state", final if m["state_v_first"] else final.transpose(0, 1, 3, 2))
        return
    if dtype != np.float64:  # the chain rules through the norms, the gate and the sigmoid in float64
        pre = preprocess(m, t)
        dqh, dkh, dv, dglog, dbeta, dh0 = (x.astype(np.float64) for x in (dqh, dkh, dv, dglog, dbeta, dh0))
    write_gradients(directory, m, t, pre, dqh, dkh, dv, dglog, dbeta, dh0)

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                    help="the recurrence's and its reverse's arithmetic")
    ap.add_argument("dir")
    a = ap.parse_args()
    main(a.dir, np.dtype(a.dtype).type)
