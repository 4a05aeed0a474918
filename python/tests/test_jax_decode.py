"""kda.jax.fused_recurrent_kda's state-pool form (kda_decode through the XLA FFI) against the fp64 numpy oracle:
1-D and 2-D (speculative) slot indices, padding, untouched slots, eagerly and under jax.jit with and without the
pool donated, and its errors. Skipped as test_jax.py is (importing it skips this module too) when jax or kda's JAX
extension is missing."""
import numpy as np
import pytest

from test_jax import GATES, jax, kj, make_case, on_cpu, tol  # noqa: F401 (on_cpu: autouse); skips without jax

import jax.numpy as jnp  # noqa: E402
from reference import assert_close, gated_rmsnorm, short_conv  # noqa: E402
from test_ops import reference_of  # noqa: E402

MODES = ["eager", "jit", "jit_donated"]


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


def pool_case(rng, N, T, slots, dtype=jnp.float32, gate="softplus", state_v_first=False):
    """(arrays q k v g beta, keyword arguments, the pool as numpy fp32) for N sequences of T tokens."""
    t, kw = make_case(rng, B=N, T=T, dtype=dtype, gate=gate, with_h0=False, state_v_first=state_v_first)
    kw.pop("safe_gate", None)  # chunk_kda's; the bounded gate is selected by lower_bound alone
    HV, K, V = t["v"].shape[2], t["q"].shape[3], t["v"].shape[3]
    pool = rng.standard_normal((slots, HV, V, K) if state_v_first else (slots, HV, K, V)).astype(np.float32)
    return t, kw, pool


def decode(mode, t, kw, pool, idx, acc=None):
    """fused_recurrent_kda on a fresh device copy of `pool` (numpy), run as `mode`; returns (o, new pool). Donated,
    the compiled computation must copy nothing and the new pool live in the donated buffer: updated in place."""
    def fn(pool, t):
        return kj.fused_recurrent_kda(**t, **kw, initial_state=pool, ssm_state_indices=idx, num_accepted_tokens=acc)

    x = jnp.asarray(pool)
    if mode == "eager":
        return fn(x, t)
    if mode == "jit":
        o, new = jax.jit(fn)(x, t)
        np.testing.assert_array_equal(x, pool)  # the caller's pool is not touched
        return o, new
    compiled = jax.jit(fn, donate_argnums=0).lower(x, t).compile()
    assert " copy(" not in compiled.as_text(), "the donated pool is copied"
    address = x.unsafe_buffer_pointer()
    o, new = compiled(x, t)
    assert x.is_deleted() and new.unsafe_buffer_pointer() == address, "the donated pool was copied"
    return o, new


def check_untouched(new, before, written):
    untouched = [s for s in range(before.shape[0]) if s not in written]
    np.testing.assert_array_equal(np.asarray(new)[untouched], before[untouched],
                                  err_msg="slots no index names changed")


@pytest.mark.parametrize("mode", MODES)
def test_decode_packed_cu_seqlens(seed, rng, mode):
    """q [1, N*T, ...] with cu_seqlens [0, T, 2T, ...] (vLLM's packed form) gives the [N, T, ...] call's bits."""
    N, T, slots = 3, 2, 5
    t, kw, before = pool_case(rng, N, T, slots)
    idx = jnp.asarray([4, 0, -1], jnp.int32)
    o_ref, pool_ref = decode(mode, t, kw, before, idx)
    flat = {name: x.reshape((1, N * T) + x.shape[2:]) for name, x in t.items()}
    o, pool = decode(mode, flat, dict(kw, cu_seqlens=jnp.arange(0, (N + 1) * T, T, dtype=jnp.int32)), before, idx)
    assert o.shape == flat["v"].shape
    np.testing.assert_array_equal(np.asarray(o).reshape(np.asarray(o_ref).shape), np.asarray(o_ref))
    np.testing.assert_array_equal(np.asarray(pool), np.asarray(pool_ref))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("state_v_first", [False, True])
@pytest.mark.parametrize("T", [1, 3])
def test_decode_state_pool(seed, rng, mode, dtype, state_v_first, T):
    """1-D ssm_state_indices: sequence n starts from pool[idx[n]] and its last state goes back there; negative
    indices are padding (zero outputs, no slot touched)."""
    N, slots = 6, 9
    t, kw, before = pool_case(rng, N, T, slots, dtype, state_v_first=state_v_first)
    idx = jnp.asarray([3, -1, 0, 7, -5, 5], jnp.int32)
    o, new = decode(mode, t, kw, before, idx)
    assert o.dtype == dtype and o.shape == t["v"].shape
    assert new.dtype == jnp.float32 and new.shape == before.shape
    for n, i in enumerate(np.asarray(idx).tolist()):
        if i < 0:
            assert not np.asarray(o[n]).any(), f"o[{n}]: padding outputs must be zero (seed {seed})"
            continue
        ro, rh = reference_of({name: x[n: n + 1] for name, x in t.items()}, dict(kw, initial_state=before[i: i + 1]))
        assert_close(f"o[{n}]", o[n: n + 1], ro, *tol(dtype), seed)
        assert_close(f"pool[{i}]", new[i: i + 1], rh, 1e-4, 1e-3, seed)
    check_untouched(new, before, {i for i in np.asarray(idx).tolist() if i >= 0})


@pytest.mark.parametrize("mode", MODES)
def test_decode_bf16_state_pool(seed, rng, mode):
    """A bf16 pool: the result is a bf16 pool, its written states within bf16's rounding of the fp64 reference from
    the same bf16 values, the outputs as with an fp32 pool; padding and untouched slots as always."""
    N, slots, T = 6, 9, 1
    t, kw, pool = pool_case(rng, N, T, slots, state_v_first=True)
    before = np.asarray(jnp.asarray(pool, jnp.bfloat16))
    idx = jnp.asarray([3, -1, 0, 7, -5, 5], jnp.int32)
    o, new = decode(mode, t, kw, before, idx)
    assert new.dtype == jnp.bfloat16 and new.shape == before.shape
    start = before.astype(np.float32)
    for n, i in enumerate(np.asarray(idx).tolist()):
        if i < 0:
            assert not np.asarray(o[n]).any(), f"o[{n}]: padding outputs must be zero (seed {seed})"
            continue
        ro, rh = reference_of({name: x[n: n + 1] for name, x in t.items()}, dict(kw, initial_state=start[i: i + 1]))
        assert_close(f"o[{n}]", o[n: n + 1], ro, *tol(jnp.float32), seed)
        assert_close(f"pool[{i}]", np.asarray(new[i: i + 1]).astype(np.float32), rh, 1e-4, 2.0 ** -8 + 1e-3, seed)
    check_untouched(new, before, {i for i in np.asarray(idx).tolist() if i >= 0})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("state_v_first", [False, True])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_decode_speculative(seed, rng, mode, state_v_first, dtype):
    """2-D ssm_state_indices with num_accepted_tokens: sequence n starts from pool[idx[n, a - 1]] and its state
    after token t goes to pool[idx[n, t]]; a negative write slot skips that write, a negative start slot pads."""
    N, T, slots = 4, 3, 14
    t, kw, before = pool_case(rng, N, T, slots, dtype, state_v_first=state_v_first)
    idx = rng.permutation(slots)[: N * T].reshape(N, T).astype(np.int32)
    acc = np.array([1, 3, 2, 2], np.int32)
    idx[0, 2] = -1  # sequence 0 keeps no state after its token 2
    idx[3, acc[3] - 1] = -1  # sequence 3 starts from no slot: padding, its other slots untouched too
    o, new = decode(mode, t, kw, before, jnp.asarray(idx), jnp.asarray(acc))
    written = set()
    for n in range(N):
        start = idx[n, acc[n] - 1]
        if start < 0:
            assert not np.asarray(o[n]).any(), f"o[{n}]: padding outputs must be zero (seed {seed})"
            continue
        for tt in range(T):
            tn = {name: x[n: n + 1, : tt + 1] for name, x in t.items()}
            ro, rh = reference_of(tn, dict(kw, initial_state=before[start: start + 1]))
            if idx[n, tt] >= 0:
                written.add(int(idx[n, tt]))
                assert_close(f"pool[idx[{n}, {tt}]]", new[idx[n, tt]][None], rh, 1e-4, 1e-3, seed)
        assert_close(f"o[{n}]", o[n: n + 1], ro, *tol(dtype), seed)
    check_untouched(new, before, written)


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_decode_gates_and_backends(seed, rng, gate, backend):
    N, T, slots = 3, 2, 4
    t, kw, before = pool_case(rng, N, T, slots, gate=gate)
    kw["backend"] = backend
    idx = jnp.asarray([2, 0, 3], jnp.int32)
    o, new = decode("jit_donated", t, kw, before, idx)
    exact = (1e-6, 1e-5) if backend == "reference" else (1e-4, 1e-3)
    for n, i in enumerate(np.asarray(idx).tolist()):
        ro, rh = reference_of({name: x[n: n + 1] for name, x in t.items()}, dict(kw, initial_state=before[i: i + 1]))
        assert_close(f"o[{n}]", o[n: n + 1], ro, *exact, seed)
        assert_close(f"pool[{i}]", new[i: i + 1], rh, *exact, seed)
    check_untouched(new, before, set(np.asarray(idx).tolist()))


def test_decode_jit_matches_eager(seed, rng):
    t, kw, before = pool_case(rng, 4, 2, 6, jnp.bfloat16, gate="bounded")
    idx = jnp.asarray([5, 1, -1, 2], jnp.int32)
    results = [decode(mode, t, kw, before, idx) for mode in MODES]
    for o, new in results[1:]:
        np.testing.assert_array_equal(o, results[0][0])
        np.testing.assert_array_equal(new, results[0][1])


def test_unaliased_pool_result_is_copied_first(seed, rng):
    """Should XLA give the pool result a buffer of its own (here: the ffi_call without input_output_aliases), the
    handler copies the pool into it before the update, so the result is the same and the operand untouched."""
    t, kw, before = pool_case(rng, 3, 2, 5)
    idx = jnp.asarray([4, -1, 1], jnp.int32)
    o, new = decode("jit", t, kw, before, idx)
    flags, A_log, dt_bias = kj._prepare(t["q"], t["v"], t["beta"], None, True, True, True, False, False, None,
                                        kw["A_log"], kw["dt_bias"], False, "auto", 0, True)
    pool = jnp.asarray(before)
    results = [jax.ShapeDtypeStruct(t["v"].shape, t["q"].dtype), jax.ShapeDtypeStruct(pool.shape, pool.dtype),
               None, None, None]
    buffers = [t["q"], t["k"], t["v"], t["g"], t["beta"], A_log, dt_bias, pool, idx, None] + [None] * 8
    o2, new2, *_ = jax.jit(lambda b: kj._run("kda_decode", flags, b, results))(buffers)
    np.testing.assert_array_equal(o2, o)
    np.testing.assert_array_equal(new2, new)
    np.testing.assert_array_equal(pool, before)
    # The conv-state pools the same way (the fusions' in-place results): unaliased, each is copied first.
    H, K, HV, V = t["q"].shape[2], t["q"].shape[3], t["v"].shape[2], t["v"].shape[3]
    cw = [jnp.asarray(rng.standard_normal((d, 4)), jnp.float32) for d in (H * K, H * K, HV * V)]
    cs = [jnp.asarray(rng.standard_normal((5, d, 3)), jnp.float32) for d in (H * K, H * K, HV * V)]
    res = results[:2] + [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in cs]
    buf = buffers[:10] + cw + cs + [None, None]
    run = lambda b, aliases: kj._run("kda_decode", flags, b, res, aliases=aliases)  # noqa: E731
    aliased = jax.jit(lambda b: run(b, {7: 1, 13: 2, 14: 3, 15: 4}))(buf)
    copied = jax.jit(lambda b: run(b, None))(buf)
    for a, b in zip(aliased, copied):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(copied[2], cs[0])  # the conv state was updated (slots 4 and 1)


def test_without_indices_is_chunk_kda(seed, rng):
    t, kw = make_case(rng, gate="softplus")
    o, ht = kj.fused_recurrent_kda(**t, **kw, output_final_state=True)
    o2, ht2 = kj.chunk_kda(**t, **kw, output_final_state=True)
    np.testing.assert_array_equal(o, o2)
    np.testing.assert_array_equal(ht, ht2)


def test_decode_is_not_differentiable(seed, rng):
    t, kw, before = pool_case(rng, 2, 1, 3)
    idx = jnp.asarray([0, 2], jnp.int32)

    def loss(q):
        return kj.fused_recurrent_kda(**dict(t, q=q), **kw, initial_state=jnp.asarray(before),
                                      ssm_state_indices=idx)[0].sum()

    with pytest.raises(NotImplementedError, match=r"inference-only"):
        jax.grad(loss)(t["q"])


def test_decode_errors_name_the_argument(seed, rng):
    N, T, slots = 2, 3, 4
    t, kw, before = pool_case(rng, N, T, slots)
    pool = jnp.asarray(before)
    idx1, idx2 = jnp.asarray([0, 1], jnp.int32), jnp.arange(N * T, dtype=jnp.int32).reshape(N, T) % slots

    def expect(exc, match, **changes):
        args = {**t, **kw, "initial_state": pool, "ssm_state_indices": idx1, **changes}
        with pytest.raises(exc, match=match):
            kj.fused_recurrent_kda(**args)

    expect(ValueError, r"initial_state: the state pool is required", initial_state=None)
    expect(ValueError, r"initial_state \(the state pool\): expected shape", initial_state=pool[:, :, :8])
    expect(ValueError, r"initial_state \(the state pool\)", initial_state=pool.astype(jnp.float16))
    expect(ValueError, r"ssm_state_indices: expected shape", ssm_state_indices=jnp.zeros(N + 1, jnp.int32))
    expect(ValueError, r"ssm_state_indices", ssm_state_indices=idx1.astype(jnp.float32))
    expect(ValueError, r"num_accepted_tokens: needs 2-D", num_accepted_tokens=jnp.ones(N, jnp.int32))
    expect(ValueError, r"num_accepted_tokens", ssm_state_indices=idx2, num_accepted_tokens=jnp.ones(N + 1, jnp.int32))
    expect(ValueError, r"num_accepted_tokens: needs ssm_state_indices", ssm_state_indices=None,
           num_accepted_tokens=jnp.ones(N, jnp.int32))
    expect(ValueError, r"v: expected shape", v=t["v"][:, :1])
    expect(ValueError, r"q: must be 4-D", q=t["q"][0])
    expect(ValueError, r"A_log", A_log=None)
    expect(ValueError, r"backend", backend="tpu")
    expect(ValueError, r"cu_seqlens: the batch size must be 1", cu_seqlens=jnp.asarray([0, T, 2 * T], jnp.int32))
    flat = {name: x.reshape((1, N * T) + x.shape[2:]) for name, x in t.items()}
    expect(NotImplementedError, r"cu_seqlens: with ssm_state_indices kda runs the same number of tokens", **flat,
           cu_seqlens=jnp.asarray([0, 1, N * T], jnp.int32))
    expect(NotImplementedError, r"do not split evenly", **flat, cu_seqlens=jnp.asarray([0, 1, 2, 3, 6], jnp.int32),
           ssm_state_indices=jnp.asarray([0, 1, 2, 3], jnp.int32))
    expect(TypeError, r"q_conv_weight", q_conv_weight=jnp.zeros((32, 4)))  # the C name is not a keyword
    expect(ValueError, r"conv_weights, conv_states: give both", conv_weights=(jnp.zeros((32, 4)),) * 3)
    expect(ValueError, r"out_norm_weight, out_gate: give both", out_norm_weight=jnp.ones(32))
    expect(ValueError, r"out_gate_activation", out_norm_weight=jnp.ones(32), out_gate=t["v"],
           out_gate_activation="relu")
    expect(NotImplementedError, r"state-pool form", ssm_state_indices=None, out_norm_weight=jnp.ones(32),
           out_gate=t["v"])
    H, K, HV, V = t["q"].shape[2], t["q"].shape[3], t["v"].shape[2], t["v"].shape[3]
    w3 = (jnp.zeros((H * K, 4)), jnp.zeros((H * K, 4)), jnp.zeros((HV * V, 4)))
    s3 = (jnp.zeros((slots, H * K, 3)), jnp.zeros((slots, H * K, 3)), jnp.zeros((slots, HV * V, 2)))
    expect(ValueError, r"v_conv_state", conv_weights=w3, conv_states=s3)
    expect(TypeError, r"not_an_argument", not_an_argument=1)
    expect(TypeError, r"ssm_state_indices: unsupported dtype", ssm_state_indices=idx1.astype(jnp.uint8))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("activation", ["sigmoid", "silu"])
def test_decode_fusions(seed, rng, mode, activation):
    check_decode_fusions(seed, rng, mode, activation)


def check_decode_fusions(seed, rng, mode, activation, T=2):
    """The decode fusions (conv of the raw q, k, v with conv-state pools; the gated RMSNorm of the output) against
    their composition in float64: the conv here, the fp64 oracle on its result, the norm here. The conv-state pools
    come back updated (in place when donated), padding and unnamed slots untouched. On JAX's default device (the
    CPU here, the GPU in test_jax_cuda.py)."""
    N, slots = 3, 5
    t, kw, before = pool_case(rng, N, T, slots, state_v_first=True)
    H, K, HV, V = t["q"].shape[2], t["q"].shape[3], t["v"].shape[2], t["v"].shape[3]
    dims = {"q": H * K, "k": H * K, "v": HV * V}
    cw = {n: (0.5 * rng.standard_normal((d, 4))).astype(np.float32) for n, d in dims.items()}
    cs0 = {n: rng.standard_normal((slots, d, 3)).astype(np.float32) for n, d in dims.items()}
    nw = (1 + 0.1 * rng.standard_normal(V)).astype(np.float32)
    gate = rng.standard_normal(t["v"].shape).astype(np.float32)
    idx = jnp.asarray([4, -1, 1], jnp.int32)

    def fn(pool, cs, t):
        return kj.fused_recurrent_kda(**t, **kw, initial_state=pool, ssm_state_indices=idx,
                                      conv_weights=tuple(jnp.asarray(cw[n]) for n in dims), conv_states=cs,
                                      out_norm_weight=jnp.asarray(nw), out_gate=jnp.asarray(gate),
                                      out_gate_activation=activation)

    pool, cs = jnp.asarray(before), tuple(jnp.asarray(cs0[n]) for n in dims)
    if mode == "eager":
        o, new_pool, new_cs = fn(pool, cs, t)
    elif mode == "jit":
        o, new_pool, new_cs = jax.jit(fn)(pool, cs, t)
    else:
        o, new_pool, new_cs = jax.jit(fn, donate_argnums=(0, 1))(pool, cs, t)
    o, new_pool = np.asarray(o, np.float64), np.asarray(new_pool)
    new_cs = {n: np.asarray(x) for n, x in zip(dims, new_cs)}
    for n in range(N):
        s = int(idx[n])
        if s < 0:
            assert np.all(o[n] == 0), "padding rows must be zero"
            continue
        conv = {}
        for name, d in dims.items():
            y, state = short_conv(np.asarray(t[name][n]).reshape(T, d), cs0[name][s], cw[name])
            conv[name] = y.reshape(t[name][n].shape)[None]
            assert_close(f"{name}_conv_state[{s}]", new_cs[name][s], state, 1e-6, 1e-6, seed)
        tn = dict(q=conv["q"], k=conv["k"], v=conv["v"], g=np.asarray(t["g"][n: n + 1], np.float64),
                  beta=np.asarray(t["beta"][n: n + 1], np.float64))
        ro, rh = reference_of(tn, dict(kw, initial_state=before[s: s + 1]))
        normed = gated_rmsnorm(ro, nw, gate[n: n + 1], 1e-5, activation)
        assert_close(f"o[{n}]", o[n: n + 1], normed, *tol(jnp.float32), seed)
        assert_close(f"pool[{s}]", new_pool[s: s + 1], rh, 1e-4, 1e-3, seed)
    for name in dims:
        check_untouched(new_cs[name], cs0[name], {1, 4})
    check_untouched(new_pool, before, {1, 4})
