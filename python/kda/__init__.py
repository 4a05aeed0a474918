"""kda: Kimi Delta Attention for PyTorch (FLA-compatible chunk_kda / fused_recurrent_kda over the kda library)."""
import torch  # noqa: F401  (loads libc10 / libtorch before the extension)

from .ops import BACKENDS, chunk_kda, chunk_kda_workspace_size, fused_recurrent_kda

__version__ = "0.1.0"
library_version = torch.ops.kda.library_version

__all__ = ["chunk_kda", "fused_recurrent_kda", "chunk_kda_workspace_size", "BACKENDS", "library_version"]
