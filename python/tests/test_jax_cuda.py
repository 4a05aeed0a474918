"""kda.jax on the GPU: the XLA FFI's CUDA handlers (python/csrc/jax_ffi.cpp) against the float64 references, with
head sizes kda's CUDA kernels take (K = V = 64): the forward on the chunked tensor-core path (bf16) and the exact
token-recurrent one (fp32), every gradient through the chunked CUDA backward, and decode against a state pool on the
device (eager, jit, donated). Skipped without a JAX GPU device (or jax, or kda's JAX extension)."""
import numpy as np
import pytest

from test_jax import jax, kj, make_case, tol  # skips this module too without jax or the extension

import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

import kda  # noqa: E402
from reference import assert_close  # noqa: E402
from test_jax_decode import check_decode_fusions, check_untouched, decode, pool_case  # noqa: E402
from test_ops import reference_of  # noqa: E402

try:
    GPU = jax.devices("gpu")[0]
except RuntimeError:
    GPU = None
pytestmark = pytest.mark.skipif(GPU is None, reason="needs a JAX GPU device")


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


@pytest.fixture(autouse=True)
def on_gpu():
    with jax.default_device(GPU):
        yield


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
@pytest.mark.parametrize("gate", ["softplus", "bounded"])
def test_cuda_forward_matches_reference(seed, rng, dtype, gate):
    """Packed sequences (empty and length-1 ones among them), under jit: bf16 runs the chunked tensor-core path,
    fp32 the exact token-recurrent kernel."""
    lens = [70, 0, 1, 129]
    cu = jnp.asarray(np.concatenate([[0], np.cumsum(lens)]), jnp.int32)
    t, kw = make_case(rng, B=1, T=sum(lens), H=2, HV=4, K=64, V=64, dtype=dtype, gate=gate, N=len(lens))
    kw["cu_seqlens"] = cu
    o, ht = jax.jit(lambda t: kj.chunk_kda(**t, **kw, output_final_state=True))(t)
    assert o.devices() == {GPU} and o.dtype == dtype and ht.dtype == jnp.float32
    ro, rh = reference_of(t, kw, cu_seqlens=cu)
    assert_close("o", o, ro, *tol(dtype), seed)
    assert_close("final_state", ht, rh, 1e-4, 1e-3, seed)


def test_cuda_grads_match_reference_backward(seed, rng):
    """Every gradient of a bf16 packed case (the chunked CUDA backward) against kda's float64 reference backward on
    the same values; the bound covers the bf16 gradients' own rounding and tensor-core products, as the torch op's
    test_cuda_chunked_backward_matches_reference."""
    lens = [70, 1, 129]
    cu = jnp.asarray(np.concatenate([[0], np.cumsum(lens)]), jnp.int32)
    t, kw = make_case(rng, B=1, T=sum(lens), H=2, HV=4, K=64, V=64, dtype=jnp.bfloat16, gate="softplus", N=3)
    kw["cu_seqlens"] = cu
    names = ["q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state"]
    leaves = {n: t[n] if n in t else kw[n] for n in names}
    rest = {n: x for n, x in kw.items() if n not in leaves}
    o, ht = kj.chunk_kda(**leaves, **rest, output_final_state=True)
    w_o, w_s = rng.standard_normal(o.shape), rng.standard_normal(ht.shape)

    def loss(leaves):
        o, ht = kj.chunk_kda(**leaves, **rest, output_final_state=True)
        return (o.astype(jnp.float32) * jnp.asarray(w_o, jnp.float32)).sum() + (ht * jnp.asarray(w_s, ht.dtype)).sum()

    got = jax.jit(jax.grad(loss))(leaves)
    tl = {n: torch.from_numpy(np.asarray(x.astype(jnp.float32), np.float64)).requires_grad_()
          for n, x in leaves.items()}
    trest = {n: torch.from_numpy(np.array(x)) if isinstance(x, jax.Array) else x for n, x in rest.items()}
    ro, rh = kda.chunk_kda(**tl, **trest, output_final_state=True, backend="reference")
    ((ro * torch.from_numpy(w_o)).sum() + (rh * torch.from_numpy(w_s)).sum()).backward()
    for n, x in tl.items():
        a = torch.from_numpy(np.asarray(got[n].astype(jnp.float32), np.float64))
        err = ((a - x.grad).norm() / x.grad.norm().clamp_min(1e-300)).item()
        assert got[n].dtype == leaves[n].dtype and err < 1e-2, f"{n}: relative error {err:.3e} (seed {seed})"


@pytest.mark.parametrize("mode", ["eager", "jit", "jit_donated"])
def test_cuda_decode_state_pool(seed, rng, mode):
    """One token per sequence against a device pool: outputs and written slots against the float64 reference, the
    slots no index names bit for bit untouched, a padding index (-1) writing nothing; donated, updated in place."""
    N, slots = 3, 8
    t, kw, pool = pool_case(rng, N, 1, slots, gate="bounded")
    t = {n: x for n, x in t.items()}
    idx = jnp.asarray([5, -1, 2], jnp.int32)
    o, new = decode(mode, t, kw, pool, idx)
    assert o.devices() == {GPU}
    check_untouched(new, pool, written=[5, 2])
    for n, s in ((0, 5), (2, 2)):
        tn = {k: x[n:n + 1] for k, x in t.items()}
        ro, rh = reference_of(tn, dict(kw, initial_state=jnp.asarray(pool[s:s + 1])))
        assert_close("o", o[n:n + 1], ro, 1e-4, 1e-3, seed)
        assert_close("state", new[s:s + 1], rh, 1e-4, 1e-3, seed)
    np.testing.assert_array_equal(np.asarray(o[1]), 0)


@pytest.mark.parametrize("mode", ["eager", "jit", "jit_donated"])
@pytest.mark.parametrize("T", [1, 2])
def test_cuda_decode_fusions(seed, rng, mode, T):
    """The decode fusions on the GPU (conv kernel, decode kernel, norm kernel in one call), as test_jax_decode checks
    them on the CPU: against their float64 composition, conv states updated, unnamed slots untouched."""
    check_decode_fusions(seed, rng, mode, "silu", T=T)
