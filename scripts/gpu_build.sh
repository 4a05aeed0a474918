#!/usr/bin/env bash
# gpu_build.sh: builds, on this (CPU) machine, the binaries a GPU lease runs and stages them in .carry/bin
# (git-ignored, named in the device call's `carry`): host code for x86-64-v3 so it starts on any H200 host, the
# CUDA runtime and libstdc++ linked statically, libgomp copied beside them. Each binary holds every kernel, so the set
# travels as .carry/bin.tar.xz (~8 MB instead of ~65 MB: a device call carries at most 64 MiB); gpu_check.sh
# unpacks it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKDA_ENABLE_CUDA=ON -DKDA_CPU_ARCH=x86-64-v3 >/dev/null
cmake --build build-gpu
stage=$(mktemp -d)
cp build-gpu/kda_gpu_tests build-gpu/kda-bench build-gpu/kda-verify build-gpu/libkda.so "$stage/"
strip "$stage"/*
cp "$(g++ -print-file-name=libgomp.so.1)" "$stage/"
rm -rf .carry/bin
mkdir -p .carry
tar -cJf .carry/bin.tar.xz -C "$stage" .
rm -rf "$stage"
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo -dirty)" > .carry/COMMIT
du -sh .carry
