"""FLA's own KDA layer (fla.layers.KimiDeltaAttention) run with FLA's kernels, then with kda's substituted.

Needs CUDA (FLA's kernels are Triton) and the FLA wheels (fla-core + flash-linear-attention + einops, carried in
.whl/ and installed with `pip install --no-deps`); skipped otherwise. transformers is only needed by FLA for
logging / activation tables at import time; when it is absent a minimal stand-in is installed for the import.
"""
import importlib
import sys
import types

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (FLA's kernels are Triton)")


def _stub_transformers():
    try:
        import transformers  # noqa: F401
        return
    except ImportError:
        pass
    import logging

    tf = types.ModuleType("transformers")
    utils = types.ModuleType("transformers.utils")
    utils.logging = types.SimpleNamespace(get_logger=logging.getLogger)
    act = types.ModuleType("transformers.activations")
    nn = torch.nn
    act.ACT2FN = {"silu": nn.SiLU(), "swish": nn.SiLU(), "gelu": nn.GELU(), "relu": nn.ReLU(),
                  "sigmoid": nn.Sigmoid(), "tanh": nn.Tanh()}
    tf.utils, tf.activations = utils, act
    sys.modules.update({"transformers": tf, "transformers.utils": utils, "transformers.activations": act})


def _fla_kda_layer_module():
    _stub_transformers()
    try:
        return importlib.import_module("fla.layers.kda")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"FLA's KDA layer is not importable: {e!r}")


@pytest.mark.parametrize("mode", ["chunk", "fused_recurrent"])
@pytest.mark.parametrize("lower_bound", [None, -5.0])
def test_fla_layer_with_kda_substituted(seed, monkeypatch, mode, lower_bound):
    import kda

    mod = _fla_kda_layer_module()
    torch.manual_seed(seed)
    layer = mod.KimiDeltaAttention(hidden_size=512, head_dim=128, num_heads=4, mode=mode,
                                   safe_gate=lower_bound is not None, lower_bound=lower_bound)
    layer = layer.to(device="cuda", dtype=torch.bfloat16).eval()
    # A_log / dt_bias stay fp32 as in FLA's models.
    layer.A_log.data = layer.A_log.data.float()
    layer.dt_bias.data = layer.dt_bias.data.float()
    T = 200 if mode == "chunk" else 48
    x = torch.randn(2, T, 512, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        ref = layer(x)[0].float()
        monkeypatch.setattr(mod, "chunk_kda", kda.chunk_kda)
        monkeypatch.setattr(mod, "fused_recurrent_kda", kda.fused_recurrent_kda)
        ours = layer(x)[0].float()
    err = (ours - ref).norm() / ref.norm()
    print(f"FLA layer ({mode}, lower_bound={lower_bound}): relative RMSE kda vs FLA = {err:.3e}")
    assert torch.isfinite(ours).all()
    # FLA's chunk kernel runs bf16 intermediates; kda's is fp32: agreement at bf16 level is the expectation.
    assert err < 2e-2, f"kda vs FLA relative error {err:.3e} (seed {seed})"
