"""kda: Kimi Delta Attention for PyTorch (FLA-compatible chunk_kda / fused_recurrent_kda over the kda library), and
for JAX in kda.jax. The PyTorch names load torch and the extension on first use (PEP 562), so `import kda.jax`
needs no torch."""
import importlib

__version__ = "0.1.0"
__all__ = ["chunk_kda", "fused_recurrent_kda", "chunk_kda_workspace_size", "BACKENDS", "library_version"]


def __getattr__(name):
    if name in ("chunk_kda", "fused_recurrent_kda", "chunk_kda_workspace_size", "BACKENDS"):
        return getattr(importlib.import_module(".ops", __name__), name)
    if name == "library_version":
        importlib.import_module(".ops", __name__)  # loads torch, then the extension
        import torch

        return torch.ops.kda.library_version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
