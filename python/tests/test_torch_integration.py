"""The kda:: ops as PyTorch ops: opcheck, torch.compile(fullgraph=True), autograd against finite differences; the
extension on PyTorch's stable ABI only."""
import re
import shutil
import subprocess

import pytest
import torch

import kda
import kda.ops  # loads the extension (kda imports it lazily)
from test_ops import make_case

GATE_OF = {0: "log_decay", 1: "softplus", 2: "bounded"}


def _op_args(t, kw, output_final_state=True, backend=0):
    """Positional args of kda::chunk_fwd for a make_case() case (as kda.chunk_kda builds them)."""
    gate = 0
    lb = -5.0
    if kw.get("use_gate_in_kernel"):
        gate = 2 if kw.get("lower_bound") is not None else 1
        lb = kw.get("lower_bound") or -5.0
    K = t["q"].shape[-1]
    return (t["q"], t["k"], t["v"], t["g"], t["beta"], kw.get("A_log") if gate else None,
            kw.get("dt_bias") if gate else None, kw.get("initial_state"), None, K ** -0.5, gate, lb,
            True, kw.get("use_beta_sigmoid_in_kernel", False), False, kw.get("state_v_first", False),
            output_final_state, 0, backend)


@pytest.mark.parametrize("gate", ["log_decay", "softplus", "bounded"])
def test_opcheck_chunk_fwd(seed, device, gate):
    t, kw = make_case(B=1, T=9, H=1, HV=2, device=device, gate=gate)
    for output_final_state in (True, False):
        torch.library.opcheck(torch.ops.kda.chunk_fwd.default, _op_args(t, kw, output_final_state))


def test_opcheck_chunk_fwd_autograd(seed):
    t, kw = make_case(B=1, T=9, H=1, HV=2, gate="softplus")
    for name in ("q", "k", "v", "g", "beta"):
        t[name].requires_grad_()
    for name in ("A_log", "dt_bias", "initial_state"):
        kw[name].requires_grad_()
    torch.library.opcheck(torch.ops.kda.chunk_fwd.default, _op_args(t, kw, True))


def test_opcheck_out_and_decode(seed, device):
    t, kw = make_case(B=2, T=5, H=1, HV=2, device=device, gate="bounded")
    args = _op_args(t, kw)[:16] + (0, 0)
    out = torch.empty(t["v"].shape, dtype=t["q"].dtype, device=device)
    fs = torch.empty_like(kw["initial_state"])
    torch.library.opcheck(torch.ops.kda.chunk_fwd_out.default, args + (out, fs, None))
    pool = torch.randn(5, 2, 16, 32, device=device)
    idx = torch.tensor([4, -1], dtype=torch.int32, device=device)
    a = _op_args(t, kw)
    dargs = a[:7] + (pool, idx, None) + a[9:16] + (0, out)
    torch.library.opcheck(torch.ops.kda.decode_out.default, dargs + (None,) * 8 + (1e-5, 0))
    # With the fusions: conv weights and the conv-state pools (mutated), the norm weight and gate.
    H, K, HV, V = t["q"].shape[2], t["q"].shape[3], t["v"].shape[2], t["v"].shape[3]
    conv = (torch.randn(H * K, 4, device=device), torch.randn(H * K, 4, device=device),
            torch.randn(HV * V, 4, device=device), torch.randn(5, H * K, 3, device=device),
            torch.randn(5, H * K, 3, device=device), torch.randn(5, HV * V, 3, device=device))
    norm = (torch.ones(V, device=device), torch.randn(t["v"].shape, device=device))
    torch.library.opcheck(torch.ops.kda.decode_out.default, dargs + conv + norm + (1e-5, 1))


def test_torch_compile_fullgraph(seed, device):
    t, kw = make_case(device=device, gate="softplus")
    kw.pop("safe_gate", None)

    def layer(q, k, v, g, beta, A_log, dt_bias, h0):
        o, ht = kda.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                              use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                              use_beta_sigmoid_in_kernel=True, A_log=A_log, dt_bias=dt_bias)
        return (o * 2).sum(-1), ht + 1

    args = (t["q"], t["k"], t["v"], t["g"], t["beta"], kw["A_log"], kw["dt_bias"], kw["initial_state"])
    eager = layer(*args)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")(*args)
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(a, b)


def test_torch_compile_inductor_state_pool(seed):
    """Inductor with the in-place state-pool op (functionalized through its Tensor(a!) annotation)."""
    t, kw = make_case(B=3, T=1, gate="bounded", with_h0=False)
    kw.pop("safe_gate", None)
    kw.pop("initial_state")
    pool = torch.randn(4, 4, 16, 32)
    idx = torch.tensor([2, 0, -1], dtype=torch.int32)

    def step(pool, q, k, v, g, beta):
        o, _ = kda.fused_recurrent_kda(q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx, **kw)
        return o + 0

    p1, p2 = pool.clone(), pool.clone()
    eager = step(p1, *t.values())
    compiled = torch.compile(step, fullgraph=True)(p2, *t.values())
    torch.testing.assert_close(eager, compiled)
    torch.testing.assert_close(p1, p2)


# ------------------------------------------------------------------------------------------ autograd
def _fp32_exact(x, bits=16):
    """Rounds to multiples of 2^-bits so that x +- 2^-7 is exact in fp32 (finite differences see exact inputs)."""
    return torch.round(x * 2**bits) / 2**bits


def _check_jacobian(f, inputs, eps, atol, rtol):
    """Every element of the reverse-mode Jacobian of f against Richardson-extrapolated central differences.

    torch.autograd.gradcheck's plain central difference has a truncation error of eps^2/6 times the third
    derivative: with a bounded gate of gain exp(A_log) ~ 4.3 it reached 1.2e-3 relative in d(state)/d(dt_bias) at
    eps = 2^-7 (CI, seed 812506620), a failure of the difference quotient, not of the gradient (it passes at 2^-9).
    A smaller eps is no cure: the final state is fp32 in every backend, and its rounding (6e-8 |h|) over 2 eps grows
    as eps shrinks. (4 D(eps/2) - D(eps)) / 3 cancels the eps^2 term and leaves eps^4 and ~1e-5 |h| of rounding."""
    analytical = torch.autograd.functional.jacobian(f, inputs)  # [output][input]: output shape + input shape
    with torch.no_grad():
        base = [x.detach() for x in inputs]

        def central(i, e, h):
            plus, minus = base[i].clone().reshape(-1), base[i].clone().reshape(-1)
            plus[e] += h
            minus[e] -= h
            args_p, args_m = list(base), list(base)
            args_p[i], args_m[i] = plus.view_as(base[i]), minus.view_as(base[i])
            return [(a - b) / (2 * h) for a, b in zip(f(*args_p), f(*args_m))]

        for i, x in enumerate(base):
            for e in range(x.numel()):
                numerical = [(4 * b - a) / 3 for a, b in zip(central(i, e, eps), central(i, e, eps / 2))]
                for o, n in enumerate(numerical):
                    a = analytical[o][i].reshape(n.numel(), x.numel())[:, e]
                    torch.testing.assert_close(a, n.reshape(-1), atol=atol, rtol=rtol,
                                               msg=lambda m, o=o, i=i, e=e: f"output {o}, input {i}[{e}]: {m}")


@pytest.mark.parametrize("gate", ["log_decay", "softplus", "bounded", "bounded_no_A"])
@pytest.mark.parametrize("state_v_first", [False, True])
def test_gradcheck_cpu(seed, gate, state_v_first):
    """Gradients of every differentiable input (and through the final state) against finite differences.

    The full Jacobian, element by element (gradcheck's fast mode scales its atol with the number of elements and
    let a 1% error in dg through). The op runs on the fp64 reference backend with fp32 inputs that are exact
    multiples of 2^-16, perturbed by 2^-7 and 2^-8, so the fp64 -> fp32 cast is exact; _check_jacobian says why the
    differences are extrapolated. Two value heads share one q/k head (GVA).
    """
    t, kw = make_case(B=1, T=4, H=1, HV=2, K=16, V=16, gate=gate, state_v_first=state_v_first)
    kw.pop("safe_gate", None)
    if gate == "softplus":  # FLA's A_log init (decay up to 16x softplus) leaves almost no gradient in g: milder
        kw["A_log"] = torch.log(torch.empty(kw["A_log"].shape).uniform_(0.05, 0.5))
    names = ["q", "k", "v", "g", "beta"] + [n for n in ("A_log", "dt_bias", "initial_state") if kw.get(n) is not None]
    src = {**t, **{n: kw[n] for n in names[5:]}}
    inputs = tuple(_fp32_exact(src[n].double()).requires_grad_() for n in names)
    rest = {n: v for n, v in kw.items() if n not in names}

    def f(*xs):
        d = {n: x.float() for n, x in zip(names, xs)}
        o, ht = kda.chunk_kda(d.pop("q"), d.pop("k"), d.pop("v"), d.pop("g"), d.pop("beta"), **d, **rest,
                              output_final_state=True, backend="reference")
        return o.double(), ht.double()

    _check_jacobian(f, inputs, eps=2**-7, atol=1e-4, rtol=1e-3)


def test_cpu_backend_grads_match_reference_backend(seed):
    t, kw = make_case(B=2, T=40, gate="softplus")
    kw.pop("safe_gate", None)
    grads = []
    for backend in ("cpu", "reference"):
        leaves = {n: x.clone().requires_grad_() for n, x in t.items()}
        extra = {n: kw[n].clone().requires_grad_() for n in ("A_log", "dt_bias", "initial_state")}
        rest = {n: v for n, v in kw.items() if n not in extra}
        o, ht = kda.chunk_kda(**leaves, **extra, **rest, output_final_state=True, backend=backend)
        (o.pow(2).sum() + ht.sum()).backward()
        grads.append([x.grad for x in list(leaves.values()) + list(extra.values())])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_backward_bf16_dtypes(seed):
    t, kw = make_case(gate="bounded", dtype=torch.bfloat16)
    kw.pop("safe_gate", None)
    for x in t.values():
        x.requires_grad_()
    o, ht = kda.chunk_kda(**t, **kw, output_final_state=True)
    o.float().sum().backward()
    for n, x in t.items():
        assert x.grad is not None and x.grad.dtype == x.dtype and torch.isfinite(x.grad.float()).all(), n


def test_the_extension_uses_only_the_stable_abi():
    """libkda_torch.so asks libtorch for no C++ symbol (c10::, at::, torch::; their vtables and type infos): only the
    stable ABI's C shims, so one build loads into every torch from its target version on (python/CMakeLists.txt).
    The same check finds the old TORCH_LIBRARY build's c10::Dispatcher / at::Tensor imports."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) not installed")
    undefined = subprocess.run([nm, "-D", "--undefined-only", kda.ops._path], check=True, capture_output=True,
                               text=True).stdout.split()
    cpp = [s for s in undefined if re.match(r"_Z(N|T[IVS]N?)K?(3c10|2at|5torch)", s)]
    assert not cpp, f"C++ symbols of libtorch imported: {cpp[:10]}"
    assert any(s.startswith("aoti_torch_") or s.startswith("torch_") for s in undefined), "no stable-ABI shim used"


def test_op_errors_carry_the_python_class():
    """Through the stable ABI an op's error reaches Python as RuntimeError tagged with the class the Python API raises;
    kda.chunk_kda raises that class with the op's message (here the C ABI's check of beta's shape)."""
    q = torch.randn(1, 8, 2, 16)
    g = -torch.rand(1, 8, 2, 16)
    beta = torch.rand(1, 8, 3)
    flags = (16 ** -0.5, 0, -5.0, False, False, False, False, False, 0, 0)
    with pytest.raises(RuntimeError, match=r"^\[kda:ValueError\] kda_forward_workspace_size: .*beta"):
        torch.ops.kda.chunk_fwd(q, q, q, g, beta, None, None, None, None, *flags)
    with pytest.raises(ValueError, match=r"^kda_forward_workspace_size: .*beta: expected shape \[1, 8, 2\]"):
        kda.chunk_kda(q, q, q, g, beta)
    with pytest.raises(ValueError, match="kda: q: unsupported dtype"):
        kda.chunk_kda(q.to(torch.complex64), q, q, g, beta[..., :2])
