"""fla_chunk_kda.py: FLA's chunk_kda (flash-linear-attention, Triton) as an outside implementation for kda-verify's
protocol (docs/verifier_protocol.md), on the GPU machine: the bounded gate through safe_gate=True with lower_bound,
the softplus gate through use_gate_in_kernel, the log-decay gate passed pre-activated. A backward request runs the
same forward under torch autograd with every input a leaf that requires grad, back-propagates dout (and
dfinal_state), and writes each gradient FLA returns (fla_core 0.6.0 returns dq, dk, dv, dg, dbeta, dh0, and with
use_gate_in_kernel dA_log and ddt_bias; a gradient it leaves as None is not written, which the verifier reports as
"not provided"). usage: fla_chunk_kda.py DIR"""
import sys

import numpy as np
import torch

from kda_protocol import read_case, write_output


def tensor(arr, dtype, grad=False):
    """float32/float64/int numpy array -> torch tensor on the GPU in the protocol dtype (bf16 values are exact);
    grad: a leaf that requires grad."""
    t = torch.from_numpy(np.ascontiguousarray(arr)).cuda()
    t = t.to(dtype)
    return t.requires_grad_(True) if grad else t


def main(directory):
    from fla.ops.kda import chunk_kda

    m, t = read_case(directory)
    backward = m.get("request", "forward") == "backward"
    tdt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    dt = tdt[m["tensors"]["q"]["dtype"]]
    leaves = {}

    def leaf(name, arr, dtype):
        x = tensor(arr, dtype, grad=backward)
        leaves[name] = x
        return x

    q, k, v = (leaf("d" + x, t[x], dt) for x in ("q", "k", "v"))
    g = leaf("dg", t["g"], tdt[m["tensors"]["g"]["dtype"]])
    beta = leaf("dbeta", t["beta"], tdt[m["tensors"]["beta"]["dtype"]])
    want_final = m["output_final_state"] or (backward and "dfinal_state" in t)
    kwargs = dict(scale=m["scale"], output_final_state=want_final,
                  use_qk_l2norm_in_kernel=m["use_qk_l2norm"], use_beta_sigmoid_in_kernel=m["beta_is_logits"],
                  allow_neg_eigval=m["allow_neg_eigval"], state_v_first=m["state_v_first"])
    if "initial_state" in t:
        # FLA's state layout follows state_v_first: [N, HV, V, K] or key-first [N, HV, K, V], as the protocol's.
        kwargs["initial_state"] = leaf("dh0", t["initial_state"], torch.float32)
    if "cu_seqlens" in t:
        kwargs["cu_seqlens"] = tensor(t["cu_seqlens"], torch.int64)
    if m["gate"] != "log_decay":
        kwargs["use_gate_in_kernel"] = True
        # FLA takes dt_bias flat [HV * K]; its gradient is written back in the protocol's [HV, K] (same bytes).
        kwargs["dt_bias"] = leaf("ddt_bias", t["dt_bias"].reshape(-1), torch.float32)
        kwargs["A_log"] = leaf("dA_log", t["A_log"], torch.float32) if "A_log" in t else None
        if m["gate"] == "bounded":
            kwargs["safe_gate"] = True
            kwargs["lower_bound"] = m["lower_bound"]
    o, final = chunk_kda(q, k, v, g, beta, **kwargs)
    if not backward:
        write_output(directory, m, "out", o.float().cpu().numpy())
        if m["output_final_state"]:
            write_output(directory, m, "final_state", final.float().cpu().numpy())
        return
    outputs, upstream = [o], [tensor(t["dout"], o.dtype)]
    if "dfinal_state" in t:
        outputs.append(final)
        upstream.append(tensor(t["dfinal_state"], torch.float32))
    torch.autograd.backward(outputs, upstream)
    for name, x in leaves.items():
        if name in m["outputs"] and x.grad is not None:
            write_output(directory, m, name, x.grad.float().cpu().numpy())


if __name__ == "__main__":
    main(sys.argv[1])
