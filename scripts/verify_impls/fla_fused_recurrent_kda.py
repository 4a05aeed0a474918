"""fla_fused_recurrent_kda.py: FLA's fused_recurrent_kda (the decode kernel vLLM calls) as an outside implementation
for kda-verify's decode requests (docs/verifier_protocol.md), on the GPU machine with the FLA wheel:
`kda-verify --suite decode-full --impl "cmd:python3 scripts/verify_impls/fla_fused_recurrent_kda.py"`.

FLA's continuous-batching form (fla-core 0.6.0, fla/ops/kda/fused_recurrent.py): the pool is initial_state with
inplace_final_state=True and ssm_state_indices; with 2-D indices and num_accepted_tokens the state is read from the
slot of the last accepted token and the state after token t written to indices[n, t], as the protocol asks. What
its kernel has no form for is refused (exit 1, the reason in the case's row), never emulated here: padding slots
(it loads a negative index), 1-D indices with more than one token (it reads indices[n + t]), the fused short conv
and gated RMSNorm, and the softplus gate without A_log (it takes exp(1) for the missing A_log). usage: DIR"""
import sys

import numpy as np
import torch

from kda_protocol import read_case, write_output


def main(directory):
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    m, t = read_case(directory)
    if m.get("request") != "decode":
        sys.exit("fla_fused_recurrent_kda.py answers decode requests only (use fla_chunk_kda.py for the others)")
    T, slots = m["T"], m["slots"]
    idx = t["state_indices"].astype(np.int64)
    acc = t.get("num_accepted_tokens")
    if m["conv"] or m["out_norm"]:
        raise NotImplementedError("FLA's fused_recurrent_kda has no fused short conv or gated RMSNorm")
    if not m["indices_per_token"] and T > 1:
        raise NotImplementedError("FLA reads 1-D indices as indices[n + t] for T > 1 tokens")
    start = idx[np.arange(idx.shape[0]), acc.astype(np.int64) - 1] if (m["indices_per_token"] and acc is not None) \
        else (idx[:, 0] if m["indices_per_token"] else idx)
    if ((start < 0) | (start >= slots)).any() or (m["indices_per_token"] and ((idx < 0) | (idx >= slots)).any()):
        raise NotImplementedError("FLA's kernel has no padding slots (negative or out-of-range indices)")
    if m["gate"] == "softplus" and "A_log" not in t:
        raise NotImplementedError("FLA's softplus gate without A_log uses exp(1) for it")

    tdt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

    def gpu(name, dtype=None):
        x = torch.from_numpy(np.ascontiguousarray(t[name])).cuda()
        return x.to(dtype if dtype is not None else tdt[m["tensors"][name]["dtype"]])

    pool = gpu("state_pool")  # float32 or bf16, either layout: updated in place
    kwargs = dict(scale=m["scale"], initial_state=pool, inplace_final_state=True, state_v_first=m["state_v_first"],
                  ssm_state_indices=gpu("state_indices", torch.int32),
                  use_qk_l2norm_in_kernel=m["use_qk_l2norm"], use_beta_sigmoid_in_kernel=m["beta_is_logits"],
                  allow_neg_eigval=m["allow_neg_eigval"])
    if acc is not None:
        kwargs["num_accepted_tokens"] = gpu("num_accepted_tokens", torch.int32)
    if m["gate"] != "log_decay":
        kwargs["use_gate_in_kernel"] = True
        kwargs["dt_bias"] = gpu("dt_bias", torch.float32).reshape(-1)
        kwargs["A_log"] = gpu("A_log", torch.float32) if "A_log" in t else None
        if m["gate"] == "bounded":
            kwargs["lower_bound"] = m["lower_bound"]
    q, k, v, g, beta = (gpu(x) for x in ("q", "k", "v", "g", "beta"))
    out, _ = fused_recurrent_kda_fwd(q, k, v, g, beta, **kwargs)
    write_output(directory, m, "out", out.float().cpu().numpy())
    write_output(directory, m, "state_pool", pool.float().cpu().numpy())


if __name__ == "__main__":
    main(sys.argv[1])
