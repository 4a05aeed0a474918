#!/usr/bin/env bash
# build.sh: configures and builds kda into ./build (CUDA kernels too when nvcc is found, for sm_80 and sm_90a).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build
