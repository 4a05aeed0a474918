#!/usr/bin/env bash
# setup.sh: installs what building kda needs on a fresh Debian/Ubuntu machine (skips what is already there).
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/eigen3/Eigen/Dense ] || [ -n "${Eigen3_DIR:-}" ] || need+=(libeigen3-dev)
[ -f /usr/include/gtest/gtest.h ] || [ -n "${GTest_DIR:-}" ] || need+=(libgtest-dev)
command -v python3 >/dev/null || need+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Python packages from PyPI, each only when missing (repeated runs cost nothing). A Debian-managed Python refuses
# pip (PEP 668): retry with PIP_BREAK_SYSTEM_PACKAGES, as these are build/test tools of this checkout.
pip_install() { python3 -m pip install -q "$@" || PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q "$@"; }
# numpy: the external-implementation test of the verifier runs a numpy implementation.
python3 -c "import numpy" 2>/dev/null || pip_install numpy
# torch + pytest: the Python package (pip install .) and its tests. PyPI's torch is the CUDA build; its nvidia-*
# wheels are needed for `import torch` even on a CPU-only machine (about 1.5 min, 3 GB here).
if ! python3 -c "import torch" 2>/dev/null; then
  echo "setup: installing torch from PyPI"
  pip_install torch
fi
# jax (PyPI's CPU build: jax, jaxlib and their scipy / ml_dtypes / opt_einsum, about 15 s and 0.5 GB here): the JAX
# binding (python/kda/jax.py) and its tests; jaxlib ships the XLA FFI headers the binding is built against.
if ! python3 -c "import jax" 2>/dev/null; then
  echo "setup: installing jax from PyPI"
  pip_install jax
fi
python3 -c "import pytest" 2>/dev/null || pip_install pytest
# matplotlib: scripts/plot_results.py draws the benchmark's figures; its test skipped on a fresh machine without it.
python3 -c "import matplotlib" 2>/dev/null || pip_install matplotlib
# CUTLASS / CuTe headers (the nvidia-cutlass wheel, headers only; its Python dependencies are not needed) for the
# CUDA build's Hopper code, when nvcc is there.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  python3 -c "import importlib.util as u; assert u.find_spec('cutlass_library')" 2>/dev/null ||
    pip_install --no-deps nvidia-cutlass==4.2.0.0
fi
