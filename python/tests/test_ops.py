"""kda.chunk_kda / kda.fused_recurrent_kda against the fp64 numpy oracle, on the CPU (and on CUDA when present)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kda
from reference import assert_close, gated_rmsnorm, kda_reference, short_conv

GATES = ["log_decay", "softplus", "bounded", "bounded_no_A"]


def make_case(B=2, T=37, H=2, HV=4, K=16, V=32, dtype=torch.float32, device="cpu", gate="softplus",
              with_h0=True, N=None, state_v_first=False, beta_logits=True):
    N = B if N is None else N
    q = torch.randn(B, T, H, K)
    k = torch.randn(B, T, H, K)
    v = torch.randn(B, T, HV, V)
    kw = dict(use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=beta_logits)
    A_log = dt_bias = None
    if gate == "log_decay":
        g = F.logsigmoid(torch.randn(B, T, HV, K) + 2.0)
    else:
        g = torch.randn(B, T, HV, K)
        dt_bias = 0.5 * torch.randn(HV * K)
        kw["use_gate_in_kernel"] = True
        if gate == "softplus":
            A_log = torch.log(torch.empty(HV).uniform_(1, 16))
        elif gate == "bounded":
            A_log = 0.5 * torch.randn(HV)
            kw["lower_bound"] = -5.0
            kw["safe_gate"] = True
        else:
            kw["lower_bound"] = -3.0
    beta = torch.randn(B, T, HV) if beta_logits else torch.rand(B, T, HV)
    h0 = None
    if with_h0:
        h0 = torch.randn(N, HV, V, K) if state_v_first else torch.randn(N, HV, K, V)
    to = lambda t, dt=None: None if t is None else t.to(device=device, dtype=dt or t.dtype)  # noqa: E731
    tensors = dict(q=to(q, dtype), k=to(k, dtype), v=to(v, dtype), g=to(g, dtype), beta=to(beta, dtype))
    kw.update(A_log=to(A_log), dt_bias=to(dt_bias), initial_state=to(h0), state_v_first=state_v_first)
    return tensors, kw


def reference_of(t, kw, cu_seqlens=None):
    return kda_reference(t["q"], t["k"], t["v"], t["g"], t["beta"], scale=kw.get("scale"),
                         initial_state=kw.get("initial_state"), cu_seqlens=cu_seqlens,
                         use_qk_l2norm=kw.get("use_qk_l2norm_in_kernel", False),
                         use_gate_in_kernel=kw.get("use_gate_in_kernel", False), A_log=kw.get("A_log"),
                         dt_bias=kw.get("dt_bias"), lower_bound=kw.get("lower_bound"),
                         beta_sigmoid=kw.get("use_beta_sigmoid_in_kernel", False),
                         allow_neg_eigval=kw.get("allow_neg_eigval", False),
                         state_v_first=kw.get("state_v_first", False))


def tol(dtype):
    return (1e-2, 1.6e-2) if dtype in (torch.bfloat16, torch.float16) else (1e-4, 1e-3)


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("state_v_first", [False, True])
def test_chunk_kda_matches_fp64_reference(seed, device, gate, dtype, state_v_first):
    t, kw = make_case(dtype=dtype, device=device, gate=gate, state_v_first=state_v_first)
    o, ht = kda.chunk_kda(**t, **kw, output_final_state=True)
    ro, rh = reference_of(t, kw)
    assert o.dtype == dtype and ht.dtype == torch.float32
    assert_close("o", o, ro, *tol(dtype), seed)
    assert_close("final_state", ht, rh, 1e-4, 1e-3, seed)


@pytest.mark.parametrize("flags", ["plain", "neg_eigval", "no_l2norm", "scale", "no_h0", "beta_probs"])
def test_chunk_kda_flags(seed, device, flags):
    t, kw = make_case(device=device, gate="softplus", with_h0=flags != "no_h0", beta_logits=flags != "beta_probs")
    if flags == "neg_eigval":
        kw["allow_neg_eigval"] = True
    if flags == "no_l2norm":
        kw["use_qk_l2norm_in_kernel"] = False
        t["q"], t["k"] = F.normalize(t["q"], dim=-1), F.normalize(t["k"], dim=-1)
    if flags == "scale":
        kw["scale"] = 0.37
    o, ht = kda.chunk_kda(**t, **kw, output_final_state=True)
    ro, rh = reference_of(t, kw)
    assert_close("o", o, ro, 1e-4, 1e-3, seed)
    assert_close("final_state", ht, rh, 1e-4, 1e-3, seed)
    o2, none = kda.chunk_kda(**t, **kw)
    assert none is None
    torch.testing.assert_close(o2, o, rtol=0, atol=0)


@pytest.mark.parametrize("cu_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("state_v_first", [False, True])
def test_chunk_kda_varlen(seed, device, cu_dtype, state_v_first):
    lens = [int(x) for x in torch.randint(0, 40, (5,))] + [0, 1, 65]
    cu = torch.tensor([0] + list(np.cumsum(lens)), dtype=cu_dtype, device=device)
    T = int(cu[-1])
    t, kw = make_case(B=1, T=T, device=device, gate="bounded", N=len(lens), state_v_first=state_v_first)
    o, ht = kda.chunk_kda(**t, **kw, output_final_state=True, cu_seqlens=cu)
    ro, rh = reference_of(t, kw, cu_seqlens=cu.cpu())
    assert_close("o", o, ro, 1e-4, 1e-3, seed)
    assert_close("final_state", ht, rh, 1e-4, 1e-3, seed)


def test_fused_recurrent_kda_matches_chunk(seed, device):
    t, kw = make_case(device=device, gate="softplus")
    kw.pop("safe_gate", None)
    o, ht = kda.fused_recurrent_kda(**t, **kw, output_final_state=True)
    ro, rh = reference_of(t, kw)
    assert_close("o", o, ro, 1e-4, 1e-3, seed)
    assert_close("final_state", ht, rh, 1e-4, 1e-3, seed)


def test_reference_backend(seed):
    t, kw = make_case(gate="bounded")
    o, ht = kda.chunk_kda(**t, **kw, output_final_state=True, backend="reference")
    ro, rh = reference_of(t, kw)
    assert_close("o", o, ro, 1e-6, 1e-5, seed)
    assert_close("final_state", ht, rh, 1e-6, 1e-5, seed)


def test_strided_inputs(seed, device):
    """Non-contiguous views (as FLA's rearranges produce) are passed by stride, not copied."""
    t, kw = make_case(device=device, gate="softplus")
    wide = {n: torch.cat([x, torch.zeros_like(x)], dim=-1)[..., : x.shape[-1]] for n, x in t.items()}
    assert not wide["q"].is_contiguous()
    o, ht = kda.chunk_kda(**wide, **kw, output_final_state=True)
    o2, ht2 = kda.chunk_kda(**t, **kw, output_final_state=True)
    torch.testing.assert_close(o, o2)
    torch.testing.assert_close(ht, ht2)


def test_out_and_workspace_form(seed, device):
    t, kw = make_case(device=device, gate="bounded")
    o_ref, ht_ref = kda.chunk_kda(**t, **kw, output_final_state=True)
    out = torch.full_like(o_ref, float("nan"))
    fs = torch.full_like(ht_ref, float("nan"))
    ws_kw = {n: kw[n] for n in ("initial_state", "use_qk_l2norm_in_kernel", "use_gate_in_kernel",
                                "use_beta_sigmoid_in_kernel", "lower_bound", "A_log", "dt_bias")}
    nbytes = kda.chunk_kda_workspace_size(*t.values(), out, fs, **ws_kw)
    assert nbytes >= 0
    ws = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
    o, ht = kda.chunk_kda(**t, **kw, output_final_state=True, out=out, final_state=fs, workspace=ws)
    assert o is out and ht is fs
    torch.testing.assert_close(out, o_ref, rtol=0, atol=0)
    torch.testing.assert_close(fs, ht_ref, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------ decode / state pool
def _pool_case(device, N, T1, slots, state_v_first, gate="softplus"):
    t, kw = make_case(B=N, T=T1, device=device, gate=gate, with_h0=False, state_v_first=state_v_first)
    kw.pop("safe_gate", None)
    kw.pop("initial_state")
    HV, K, V = t["v"].shape[2], t["q"].shape[3], t["v"].shape[3]
    pool = torch.randn(slots, HV, V, K) if state_v_first else torch.randn(slots, HV, K, V)
    return t, kw, pool.to(device)


def check_pool_decode(o, pool, before, idx, t, kw, seed, pool_rtol=1e-3):
    """One token per sequence against pool `before`, indices idx: each named sequence's output and written state
    against the float64 reference from its start slot's values; padding rows zero; unnamed slots bitwise unchanged."""
    for n in range(len(idx)):
        i = int(idx[n])
        if i < 0:
            assert torch.all(o[n] == 0), "padding rows must be zero"
            continue
        tn = {name: x[n: n + 1] for name, x in t.items()}
        ro, rh = reference_of(tn, dict(kw, initial_state=before[i: i + 1].float()))
        assert_close(f"o[{n}]", o[n: n + 1], ro, 1e-4, 1e-3, seed)
        assert_close(f"pool[{i}]", pool[i: i + 1].float(), rh, 1e-4, pool_rtol, seed)
    untouched = [s for s in range(pool.shape[0]) if s not in {int(i) for i in idx if i >= 0}]
    assert torch.equal(pool[untouched], before[untouched]), "slots not named by ssm_state_indices changed"


@pytest.mark.parametrize("state_v_first", [False, True])
@pytest.mark.parametrize("packed", [False, True])
def test_fused_recurrent_state_pool(seed, device, state_v_first, packed):
    N, T1, slots = 6, 1, 9
    t, kw, pool = _pool_case(device, N, T1, slots, state_v_first)
    idx = torch.tensor([3, -1, 0, 7, -5, 5], dtype=torch.int32, device=device)  # negative: padding
    before = pool.clone()
    if packed:  # vLLM's form: [1, N, ...] with cu_seqlens = [0, 1, ..., N]
        tp = {n: x.reshape(1, N * T1, *x.shape[2:]) for n, x in t.items()}
        cu = torch.arange(N + 1, dtype=torch.int32, device=device)
        o, st = kda.fused_recurrent_kda(**tp, **kw, initial_state=pool, ssm_state_indices=idx, cu_seqlens=cu)
        o = o.reshape(N, T1, *o.shape[2:])
    else:
        o, st = kda.fused_recurrent_kda(**t, **kw, initial_state=pool, ssm_state_indices=idx)
    assert st is pool
    check_pool_decode(o, pool, before, idx, t, kw, seed)


def test_fused_recurrent_bf16_state_pool(seed, device):
    """A bf16 state pool (vLLM's and SGLang's mamba_ssm_cache_dtype option): read as is, updated in fp32, each
    written state rounded once to bf16. Against the float64 reference from the same bf16 values: outputs as for an
    fp32 pool, states within bf16's rounding (2^-8 relative) plus the fp32 allowance; padding rows zero; slots no
    index names bitwise unchanged. K = 64: a form the CUDA row-split kernel takes."""
    N, slots = 5, 8
    t, kw = make_case(B=N, T=1, K=64, V=32, device=device, with_h0=False, state_v_first=True)
    kw.pop("safe_gate", None)
    kw.pop("initial_state")
    HV, K, V = t["v"].shape[2], t["q"].shape[3], t["v"].shape[3]
    pool = torch.randn(slots, HV, V, K).to(torch.bfloat16).to(device)
    idx = torch.tensor([6, 0, -1, 3, 2], dtype=torch.int32, device=device)
    before = pool.clone()
    o, st = kda.fused_recurrent_kda(**t, **kw, initial_state=pool, ssm_state_indices=idx)
    assert st is pool and pool.dtype == torch.bfloat16
    check_pool_decode(o, pool, before, idx, t, kw, seed, pool_rtol=2.0 ** -8 + 1e-3)  # + bf16's one rounding


@pytest.mark.parametrize("activation", ["sigmoid", "silu"])
@pytest.mark.parametrize("packed", [False, True])
def test_fused_recurrent_conv_and_norm(seed, device, activation, packed):
    """kda's decode fusions through the torch op: the causal short conv (width 4, SiLU) of the raw q, k, v with
    conv-state pools updated in place through the same slots, and the gated RMSNorm of the output, against their
    composition here in float64 (the conv, the fp64 oracle on its result, the norm). Padding rows are zero; conv-state
    slots no sequence names are untouched."""
    N, T1, slots = 4, 2, 7
    t, kw, pool = _pool_case(device, N, T1, slots, True)
    H, K, HV, V = t["q"].shape[2], t["q"].shape[3], t["v"].shape[2], t["v"].shape[3]
    idx = torch.tensor([5, -1, 0, 3], dtype=torch.int32, device=device)
    dims = {"q": H * K, "k": H * K, "v": HV * V}
    cw = {n: 0.5 * torch.randn(d, 4, device=device) for n, d in dims.items()}
    cs = {n: torch.randn(slots, d, 3, device=device) for n, d in dims.items()}
    nw = 1 + 0.1 * torch.randn(V, device=device)
    gate = torch.randn(t["v"].shape, device=device)
    before, cs_before = pool.clone(), {n: x.clone() for n, x in cs.items()}
    fusions = dict(conv_weights=(cw["q"], cw["k"], cw["v"]), conv_states=(cs["q"], cs["k"], cs["v"]),
                   out_norm_weight=nw, out_gate=gate, out_norm_eps=1e-5, out_gate_activation=activation)
    if packed:  # vLLM's form: [1, N T, ...] with cu_seqlens
        tp = {n: x.reshape(1, N * T1, *x.shape[2:]) for n, x in t.items()}
        cu = torch.arange(0, N * T1 + 1, T1, dtype=torch.int32, device=device)
        fusions["out_gate"] = gate.reshape(1, N * T1, HV, V)
        o, _ = kda.fused_recurrent_kda(**tp, **kw, initial_state=pool, ssm_state_indices=idx, cu_seqlens=cu,
                                       **fusions)
        o = o.reshape(N, T1, HV, V)
    else:
        o, _ = kda.fused_recurrent_kda(**t, **kw, initial_state=pool, ssm_state_indices=idx, **fusions)
    for n in range(N):
        s = int(idx[n])
        if s < 0:
            assert torch.all(o[n] == 0), "padding rows must be zero"
            continue
        conv = {}
        for name, d in dims.items():
            y, state = short_conv(t[name][n].reshape(T1, d), cs_before[name][s], cw[name])
            conv[name] = y.reshape(t[name][n].shape)[None]
            assert_close(f"{name}_conv_state[{s}]", cs[name][s], state, 1e-6, 1e-6, seed)
        tn = dict(q=conv["q"], k=conv["k"], v=conv["v"], g=t["g"][n: n + 1].double().cpu(),
                  beta=t["beta"][n: n + 1].double().cpu())
        ro, rh = reference_of(tn, dict(kw, initial_state=before[s: s + 1]))
        normed = gated_rmsnorm(ro, nw, gate[n: n + 1], 1e-5, activation)
        assert_close(f"o[{n}]", o[n: n + 1], normed, 1e-4, 1e-3, seed)
        assert_close(f"pool[{s}]", pool[s: s + 1], rh, 1e-4, 1e-3, seed)
    untouched = [x for x in range(slots) if x not in {int(i) for i in idx if i >= 0}]
    for name in dims:
        assert torch.equal(cs[name][untouched], cs_before[name][untouched]), f"{name}_conv_state: unnamed slots"
    assert torch.equal(pool[untouched], before[untouched])


def test_fused_recurrent_fusion_errors(seed):
    t, kw, pool = _pool_case("cpu", 2, 1, 3, True)
    idx = torch.tensor([0, 2], dtype=torch.int32)
    H, K, HV, V = t["q"].shape[2], t["q"].shape[3], t["v"].shape[2], t["v"].shape[3]
    w3 = (torch.zeros(H * K, 4), torch.zeros(H * K, 4), torch.zeros(HV * V, 4))
    s3 = (torch.zeros(3, H * K, 3), torch.zeros(3, H * K, 3), torch.zeros(3, HV * V, 3))
    base = dict(**t, **kw, initial_state=pool, ssm_state_indices=idx)
    with pytest.raises(ValueError, match="conv_weights, conv_states: give both"):
        kda.fused_recurrent_kda(**base, conv_weights=w3)
    with pytest.raises(ValueError, match="out_norm_weight, out_gate: give both"):
        kda.fused_recurrent_kda(**base, out_norm_weight=torch.ones(V))
    with pytest.raises(ValueError, match="out_gate_activation"):
        kda.fused_recurrent_kda(**base, out_norm_weight=torch.ones(V), out_gate=torch.zeros_like(t["v"]),
                                out_gate_activation="relu")
    with pytest.raises(NotImplementedError, match="state-pool form"):
        kda.fused_recurrent_kda(**{k: v for k, v in base.items() if k != "ssm_state_indices"},
                                out_norm_weight=torch.ones(V), out_gate=torch.zeros_like(t["v"]))
    # kda's own validation names the argument (here a conv state of the wrong width).
    with pytest.raises(ValueError, match="v_conv_state"):
        kda.fused_recurrent_kda(**base, conv_weights=w3, conv_states=s3[:2] + (torch.zeros(3, HV * V, 2),))


def test_fused_recurrent_spec_decode(seed, device):
    """2-D ssm_state_indices + num_accepted_tokens: start from idx[n, a-1], state after token t to idx[n, t]."""
    N, T1, slots = 3, 3, 12
    t, kw, pool = _pool_case(device, N, T1, slots, False)
    idx = torch.arange(N * T1, dtype=torch.int32, device=device).reshape(N, T1)
    acc = torch.tensor([1, 3, 2], dtype=torch.int32, device=device)
    before = pool.clone()
    o, _ = kda.fused_recurrent_kda(**t, **kw, initial_state=pool, ssm_state_indices=idx, num_accepted_tokens=acc)
    for n in range(N):
        start = int(idx[n, int(acc[n]) - 1])
        for tt in range(T1):
            tn = {name: x[n: n + 1, : tt + 1] for name, x in t.items()}
            ro, rh = reference_of(tn, dict(kw, initial_state=before[start: start + 1]))
            assert_close(f"pool[idx[{n},{tt}]]", pool[int(idx[n, tt])][None], rh, 1e-4, 1e-3, seed)
        assert_close(f"o[{n}]", o[n: n + 1], ro, 1e-4, 1e-3, seed)


# ------------------------------------------------------------------------------------------ errors
def _expect(exc, match, fn):
    with pytest.raises(exc, match=match):
        fn()


def test_errors_name_the_argument(seed):
    t, kw = make_case(gate="softplus")
    kw.pop("safe_gate", None)
    bad_v = dict(t, v=t["v"][:, :5])
    _expect(ValueError, r"v: expected shape", lambda: kda.chunk_kda(**bad_v, **kw))
    _expect(ValueError, r"A_log", lambda: kda.chunk_kda(**t, **dict(kw, A_log=None)))
    _expect(ValueError, r"allow_neg_eigval",
            lambda: kda.chunk_kda(**t, **dict(kw, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=True)))
    _expect(ValueError, r"lower_bound", lambda: kda.chunk_kda(**t, **kw, safe_gate=True))
    _expect(ValueError, r"lower_bound: must be in the safe range",
            lambda: kda.chunk_kda(**t, **kw, safe_gate=True, lower_bound=-7.0))
    _expect(ValueError, r"cu_seqlens: the batch size must be 1",
            lambda: kda.chunk_kda(**t, **kw, cu_seqlens=torch.tensor([0, 37])))
    t1, kw1 = make_case(B=1, gate="log_decay", with_h0=False)
    kw1.pop("safe_gate", None)
    _expect(ValueError, r"cu_seqlens", lambda: kda.chunk_kda(**t1, **kw1, cu_seqlens=torch.tensor([0, 10, 36])))
    _expect(ValueError, r"initial_state", lambda: kda.chunk_kda(
        **t1, **dict(kw1, initial_state=torch.zeros(2, 4, 16, 32)), cu_seqlens=torch.tensor([0, 37])))
    _expect(ValueError, r"initial_state",
            lambda: kda.chunk_kda(**t, **dict(kw, initial_state=kw["initial_state"].double())))
    _expect(ValueError, r"g", lambda: kda.chunk_kda(**dict(t, g=t["g"][..., :8]), **kw))
    _expect(ValueError, r"dt_bias", lambda: kda.chunk_kda(**t, **dict(kw, dt_bias=torch.zeros(3))))
    _expect(ValueError, r"beta", lambda: kda.chunk_kda(**dict(t, beta=t["beta"].half()), **kw))
    _expect(NotImplementedError, r"K = 8", lambda: kda.chunk_kda(
        **{n: (x[..., :8] if n in ("q", "k", "g") else x) for n, x in t.items()}, **dict(kw, initial_state=None,
                                                                                          dt_bias=None)))
    _expect(NotImplementedError, r"head-wise beta",
            lambda: kda.chunk_kda(**dict(t, beta=t["v"].clone()), **kw))
    _expect(NotImplementedError, r"return_intermediate_states",
            lambda: kda.chunk_kda(**t, **kw, return_intermediate_states=True))
    _expect(TypeError, r"unsupported argument", lambda: kda.chunk_kda(**t, **kw, not_an_argument=1))
    _expect(ValueError, r"backend", lambda: kda.chunk_kda(**t, **kw, backend="tpu"))
    _expect(ValueError, r"chunk_size", lambda: kda.chunk_kda(**t, **kw, chunk_size=48))
    # state pool form
    pool = torch.zeros(4, 4, 16, 32)
    _expect(ValueError, r"initial_state", lambda: kda.fused_recurrent_kda(
        **t, **dict(kw, initial_state=None), ssm_state_indices=torch.zeros(2, dtype=torch.int32)))
    kwp = dict(kw, initial_state=pool)
    _expect(ValueError, r"ssm_state_indices",
            lambda: kda.fused_recurrent_kda(**t, **kwp, ssm_state_indices=torch.zeros(2, dtype=torch.int64)))
    _expect(NotImplementedError, r"cu_seqlens", lambda: kda.fused_recurrent_kda(
        **{n: x[:1] for n, x in t.items()}, **kwp, ssm_state_indices=torch.arange(2, dtype=torch.int32),
        cu_seqlens=torch.tensor([0, 10, 37], dtype=torch.int32)))
    qg = dict(t, q=t["q"].clone().requires_grad_())
    _expect(NotImplementedError, r"inference-only", lambda: kda.fused_recurrent_kda(
        **qg, **kwp, ssm_state_indices=torch.arange(2, dtype=torch.int32)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_backward_matches_reference(seed):
    """Autograd on CUDA tensors runs kda's CUDA backward (token-recurrent, fp32): every gradient against the
    float64 reference backward on CPU copies of the same inputs."""
    t, kw = make_case(B=1, T=100, H=2, HV=4, K=64, V=64, gate="softplus")
    w_o = torch.randn(1, 100, 4, 64, dtype=torch.float64)
    w_s = torch.randn(1, 4, 64, 64, dtype=torch.float64)
    names = ["q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state"]

    def grads(device, dtype, backend):
        tt = {n: x.to(device=device, dtype=dtype).requires_grad_() for n, x in t.items()}
        kk = dict(kw)
        for n in ("A_log", "dt_bias", "initial_state"):
            kk[n] = kk[n].to(device=device, dtype=dtype).requires_grad_()
        o, ht = kda.chunk_kda(**tt, **kk, output_final_state=True, backend=backend)
        loss = (o.double() * w_o.to(device)).sum() + (ht.double() * w_s.to(device)).sum()
        leaves = [tt[n] if n in tt else kk[n] for n in names]
        return [x.double().cpu() for x in torch.autograd.grad(loss, leaves)]

    ref = grads("cpu", torch.float64, "reference")
    got = grads("cuda", torch.float32, "auto")
    for n, a, b in zip(names, got, ref):
        err = ((a - b).norm() / b.norm().clamp_min(1e-300)).item()
        assert err < 1e-4, f"{n}: relative error {err:.3e} (seed {seed})"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_chunked_backward_matches_reference(seed):
    """backend="cuda-chunked" runs the chunked forward and the chunked CUDA backward (bf16 inputs, the chunked path's
    dtypes): every gradient against the float64 reference backward on the same bf16 values, packed sequences across
    chunk boundaries, grouped value heads. The bound covers the bf16 gradients' own rounding (2^-9) and tensor-core
    products."""
    t, kw = make_case(B=1, T=200, H=2, HV=4, K=64, V=64, gate="softplus")
    cu = torch.tensor([0, 70, 71, 200], dtype=torch.int32)
    w_o = torch.randn(1, 200, 4, 64, dtype=torch.float64)
    w_s = torch.randn(3, 4, 64, 64, dtype=torch.float64)
    names = ["q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state"]
    kw["initial_state"] = torch.randn(3, 4, 64, 64)

    def grads(device, backend):
        tt = {n: x.to(torch.bfloat16).to(device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float64)
              .requires_grad_() for n, x in t.items()}
        kk = dict(kw)
        for n in ("A_log", "dt_bias", "initial_state"):
            kk[n] = kk[n].to(device=device, dtype=torch.float32 if device == "cuda" else torch.float64).requires_grad_()
        o, ht = kda.chunk_kda(**tt, **kk, cu_seqlens=cu.to(device), output_final_state=True, backend=backend)
        loss = (o.double() * w_o.to(device)).sum() + (ht.double() * w_s.to(device)).sum()
        leaves = [tt[n] if n in tt else kk[n] for n in names]
        return [x.double().cpu() for x in torch.autograd.grad(loss, leaves)]

    ref = grads("cpu", "reference")
    got = grads("cuda", "cuda-chunked")
    for n, a, b in zip(names, got, ref):
        err = ((a - b).norm() / b.norm().clamp_min(1e-300)).item()
        assert err < 1e-2, f"{n}: relative error {err:.3e} (seed {seed})"


def test_disable_recompute_changes_nothing_on_cpu(seed):
    """disable_recompute=True (FLA's: keep the forward's intermediates for the backward) is a CUDA chunked-path option:
    on CPU tensors the results and gradients are those of the default call, and the saving op itself is refused
    with the C ABI's message (the chunked CUDA backend needs CUDA tensors)."""
    t, kw = make_case(B=1, T=70, H=2, HV=2, K=64, V=64, gate="bounded")

    def run(flag):
        tt = {n: x.clone().requires_grad_() for n, x in t.items()}
        o, ht = kda.chunk_kda(**tt, **kw, output_final_state=True, disable_recompute=flag)
        (o.sum() + ht.sum()).backward()
        return [o, ht] + [tt[n].grad for n in sorted(tt)]

    for a, b in zip(run(True), run(False)):
        assert torch.equal(a, b)
    flags = (64 ** -0.5, 2, -5.0, True, True, False, False)
    args = (t["q"], t["k"], t["v"], t["g"], t["beta"], kw["A_log"], kw["dt_bias"], kw["initial_state"], None, *flags,
            True, 0)
    # The op itself raises RuntimeError (the stable ABI's only class) tagged with the class kda.ops._run raises.
    with pytest.raises(RuntimeError, match=r"^\[kda:ValueError\] .*CUDA_CHUNKED needs CUDA tensors"):
        torch.ops.kda.chunk_fwd_saved(*args, kda.ops.BACKENDS["cuda-chunked"])
    with pytest.raises(ValueError, match=r"^kda_forward_workspace_size: .*CUDA_CHUNKED needs CUDA tensors"):
        kda.ops._run(torch.ops.kda.chunk_fwd_saved, *args, kda.ops.BACKENDS["cuda-chunked"])
    # AUTO on CPU tensors is the CPU backend, which keeps nothing for a backward.
    with pytest.raises(NotImplementedError, match="save_for_backward: only the chunked CUDA forward"):
        kda.ops._run(torch.ops.kda.chunk_fwd_saved, *args, kda.ops.BACKENDS["auto"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kv", [64, 128])
def test_cuda_disable_recompute_same_gradients(seed, kv):
    """disable_recompute=True on CUDA: the forward keeps its chunk products for the backward (chunk_fwd_saved), the
    backward reads them instead of recomputing; every gradient equals the recomputing backward's bit for bit (the
    saving forward computes [W | U] exactly as the recompute does), the output matches the plain forward's to the
    contract, and an input the chunked path does not take (fp32 q) falls back to the default path. K = V = 128 on
    sm_90 runs both on the sm_90a state passes (HOPPER), 64 on mma.sync."""
    t, kw = make_case(B=1, T=200, H=2, HV=4, K=kv, V=kv, gate="softplus")
    cu = torch.tensor([0, 70, 71, 200], dtype=torch.int32, device="cuda")
    kw["initial_state"] = torch.randn(3, 4, kv, kv)
    w_o = torch.randn(1, 200, 4, kv, device="cuda")
    w_s = torch.randn(3, 4, kv, kv, device="cuda")

    def run(flag, dtype=torch.bfloat16):
        tt = {n: x.to(device="cuda", dtype=dtype).requires_grad_() for n, x in t.items()}
        kk = {n: (x.to("cuda").requires_grad_() if isinstance(x, torch.Tensor) else x) for n, x in kw.items()}
        o, ht = kda.chunk_kda(**tt, **kk, cu_seqlens=cu, output_final_state=True, disable_recompute=flag)
        ((o.float() * w_o).sum() + (ht * w_s).sum()).backward()
        names = sorted(tt) + sorted(n for n, x in kk.items() if isinstance(x, torch.Tensor))
        return o, ht, [(tt[n] if n in tt else kk[n]).grad for n in names]

    o1, h1, g1 = run(True)
    o0, h0, g0 = run(False)
    for a, b in zip(g1, g0):
        assert torch.equal(a, b)
    assert ((o1.float() - o0.float()).norm() / o0.float().norm()).item() < 2 ** -8
    assert ((h1 - h0).norm() / h0.norm()).item() < 2 ** -9
    # fp32 inputs: not the chunked path's; the default (recomputing) path runs instead of raising.
    o2, _, g2 = run(True, torch.float32)
    o3, _, g3 = run(False, torch.float32)
    assert torch.equal(o2, o3) and all(torch.equal(a, b) for a, b in zip(g2, g3))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_disable_recompute_keeps_one_workspace(seed):
    """The saving forward's workspace is the step's one big buffer: autograd must not hand the backward a zero-filled
    twin of it (materialized gradients; session 10 measured twice the workspace at h96-fixed). The backward's peak
    above what the forward left stays well under the workspace."""
    t, kw = make_case(B=1, T=4096, H=2, HV=4, K=128, V=128, gate="softplus")
    tt = {n: x.to(device="cuda", dtype=torch.bfloat16).requires_grad_() for n, x in t.items()}
    kk = {n: (x.to("cuda") if isinstance(x, torch.Tensor) else x) for n, x in kw.items()}
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    o, _ = kda.chunk_kda(**tt, **kk, disable_recompute=True)
    torch.cuda.synchronize()
    after_forward = torch.cuda.memory_allocated()
    ws = after_forward - before - o.numel() * o.element_size()  # the saved workspace (and nothing else big)
    assert ws > 0
    torch.cuda.reset_peak_memory_stats()
    o.float().sum().backward()
    torch.cuda.synchronize()
    grads = sum(x.grad.numel() * x.grad.element_size() for x in tt.values())
    extra = torch.cuda.max_memory_allocated() - after_forward - grads
    assert extra < ws // 2, (extra, ws)


def test_grads_of_the_final_state_alone(seed):
    """A loss of the final state alone (no gradient reaches the output) and of the output alone: the backward takes
    the missing upstream gradient as zero, against the float64 reference backward."""
    t, kw = make_case(B=2, T=37, gate="softplus")
    for use_out in (False, True):
        leaves = {n: x.clone().requires_grad_() for n, x in t.items()}
        o, ht = kda.chunk_kda(**leaves, **kw, output_final_state=True)
        (o.float().sum() if use_out else ht.sum()).backward()
        ref = {n: x.detach().double().requires_grad_() for n, x in t.items()}
        kr = {n: (x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x) for n, x in kw.items()}
        o_r, ht_r = kda.chunk_kda(**ref, **kr, output_final_state=True, backend="reference")
        (o_r.sum() if use_out else ht_r.sum()).backward()
        for n in t:
            err = ((leaves[n].grad.double() - ref[n].grad).norm() / ref[n].grad.norm().clamp_min(1e-300)).item()
            assert err < 1e-3, (use_out, n, err)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_capture(seed):
    t, kw = make_case(device="cuda", gate="bounded", dtype=torch.bfloat16)
    o_ref, ht_ref = kda.chunk_kda(**t, **kw, output_final_state=True)
    out, fs = torch.empty_like(o_ref), torch.empty_like(ht_ref)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the graph
        kda.chunk_kda(**t, **kw, output_final_state=True, out=out, final_state=fs)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kda.chunk_kda(**t, **kw, output_final_state=True, out=out, final_state=fs)
    out.zero_()
    fs.zero_()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, o_ref, rtol=0, atol=0)
    torch.testing.assert_close(fs, ht_ref, rtol=0, atol=0)
