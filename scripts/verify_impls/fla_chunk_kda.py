"""fla_chunk_kda.py: FLA's chunk_kda (flash-linear-attention, Triton) as an outside implementation for kda-verify's
protocol (docs/verifier_protocol.md), on the GPU machine: the bounded gate through safe_gate=True with lower_bound,
the softplus gate through use_gate_in_kernel, the log-decay gate passed pre-activated. usage: fla_chunk_kda.py DIR"""
import sys

import numpy as np
import torch

from kda_protocol import read_case, write_output


def tensor(arr, dtype):
    """float32/float64/int numpy array -> torch tensor on the GPU in the protocol dtype (bf16 values are exact)."""
    t = torch.from_numpy(np.ascontiguousarray(arr)).cuda()
    return t.to(dtype)


def main(directory):
    from fla.ops.kda import chunk_kda

    m, t = read_case(directory)
    tdt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    dt = tdt[m["tensors"]["q"]["dtype"]]
    q, k, v = (tensor(t[x], dt) for x in ("q", "k", "v"))
    g = tensor(t["g"], tdt[m["tensors"]["g"]["dtype"]])
    beta = tensor(t["beta"], tdt[m["tensors"]["beta"]["dtype"]])
    kwargs = dict(scale=m["scale"], output_final_state=m["output_final_state"],
                  use_qk_l2norm_in_kernel=m["use_qk_l2norm"], use_beta_sigmoid_in_kernel=m["beta_is_logits"],
                  allow_neg_eigval=m["allow_neg_eigval"], state_v_first=m["state_v_first"])
    if "initial_state" in t:
        kwargs["initial_state"] = tensor(t["initial_state"], torch.float32)
    if "cu_seqlens" in t:
        kwargs["cu_seqlens"] = tensor(t["cu_seqlens"], torch.int64)
    if m["gate"] != "log_decay":
        kwargs["use_gate_in_kernel"] = True
        kwargs["dt_bias"] = tensor(t["dt_bias"].reshape(-1), torch.float32)
        kwargs["A_log"] = tensor(t["A_log"], torch.float32) if "A_log" in t else None
        if m["gate"] == "bounded":
            kwargs["safe_gate"] = True
            kwargs["lower_bound"] = m["lower_bound"]
    o, final = chunk_kda(q, k, v, g, beta, **kwargs)
    write_output(directory, m, "out", o.float().cpu().numpy())
    if m["output_final_state"]:
        write_output(directory, m, "final_state", final.float().cpu().numpy())


if __name__ == "__main__":
    main(sys.argv[1])
