#!/usr/bin/env bash
# gpu_build.sh: builds, on this (CPU) machine, the binaries a GPU lease runs and stages them in .carry/bin
# (git-ignored, named in the device call's `carry`): host code for x86-64-v3 so it starts on any H200 host, device
# code for sm_90a alone (the lent GPUs are H100 / H200; CI's build compiles sm_80 too), the CUDA runtime and libstdc++
# linked statically, libgomp copied beside them. Each binary holds every kernel, so the set travels as one
# .carry/bin.tar.xz (below; a device call carries at most 64 MiB); gpu_check.sh unpacks it.
# --python: also libkda_torch.so, the PyTorch extension, built against this machine's torch: it uses only PyTorch's
# stable ABI (python/CMakeLists.txt), so it loads into the GPU machine's torch (2.11) too, and the lease's python step
# does not compile the library there. With it, libkda_jax.so (the XLA FFI handlers, CUDA ones included) too when this
# machine's Python imports jax: the handlers use only the FFI's C API, which newer jaxlibs keep accepting, so the
# device image's jax loads them.
# --ab NAME: also stage the result as an A/B build, .carry/ab/NAME.tar.xz and .carry/ab/NAME.COMMIT (what gpu_ab.sh and
# lease_lib.sh's lease_unpack read), so a build of this checkout's HEAD needs no copying by hand.
# --stage-clocks: phase 1 and the state pass with their per-warp stamps (-DKDA_STAGE_CLOCKS=ON: kda-bench
# --stage-clocks, scripts/stage_clocks.py), built in build-gpu-clk so that build-gpu's objects stay those of the
# kernels as they run, and staged only as the --ab build it needs, never as .carry/bin (a lease's build to test and
# time).
# usage: scripts/gpu_build.sh [--python] [--stage-clocks] [--ab NAME]
set -euo pipefail
cd "$(dirname "$0")/.."
# One build of this checkout at a time: two at once both write .carry/bin.tar.xz (session 40: two interleaved xz
# streams made an archive that unpacked half of its binaries on the GPU and cost a device call).
mkdir -p .carry
exec 9> .carry/.build.lock
flock -n 9 || { echo "gpu_build.sh: another build of this checkout is running" >&2; exit 1; }
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
with_python="" ab="" bdir=build-gpu clocks=OFF
while [ $# -gt 0 ]; do
  case $1 in
    --python) with_python=1 ;;
    --stage-clocks) bdir=build-gpu-clk clocks=ON ;;
    --ab)
      [[ ${2:-} =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "gpu_build.sh: --ab needs a NAME of letters, digits, . _ -" >&2; exit 2; }
      ab=$2
      shift ;;
    *) echo "gpu_build.sh: unknown argument '$1' (usage: scripts/gpu_build.sh [--python] [--stage-clocks]" \
            "[--ab NAME])" >&2; exit 2 ;;
  esac
  shift
done
if [ $clocks = ON ] && [ -z "$ab" ]; then
  echo "gpu_build.sh: --stage-clocks needs --ab NAME (a measuring build is never .carry/bin)" >&2
  exit 2
fi
if [ -n "$with_python" ]; then
  python=(-DKDA_BUILD_PYTHON=ON -DKDA_BUILD_JAX=AUTO)
else
  python=(-DKDA_BUILD_PYTHON=OFF)
fi
cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKDA_ENABLE_CUDA=ON -DKDA_CPU_ARCH=x86-64-v3 \
  -DKDA_CUDA_ARCHITECTURES=90a-real -DKDA_STAGE_CLOCKS="$clocks" "${python[@]}" >/dev/null
# Only what a lease runs (the CPU test binary is CI's, and compiling it doubled a build on this 2-core machine).
targets=(kda kda_gpu_tests kda-bench kda-verify)
[ -n "$with_python" ] && targets+=(kda_torch)
[ -n "$with_python" ] && grep -q '^kda_jax:' <(ninja -C "$bdir" -t targets all 2>/dev/null) && targets+=(kda_jax)
cmake --build "$bdir" --target "${targets[@]}"
stage=$(mktemp -d)
cp "$bdir"/kda_gpu_tests "$bdir"/kda-bench "$bdir"/kda-verify "$bdir"/libkda.so "$stage/"
[ -n "$with_python" ] && cp "$bdir"/python/libkda_torch.so "$stage/"
[ -n "$with_python" ] && [ -f "$bdir"/python/libkda_jax.so ] && cp "$bdir"/python/libkda_jax.so "$stage/"
strip "$stage"/*
cp "$(g++ -print-file-name=libgomp.so.1)" "$stage/"
# The kernels' sources (~90 KB compressed) and the path they were compiled at: the line info (-lineinfo) names that
# path, so gpu_ab.sh --ncu links it to these copies and ncu attributes samples to CUDA lines of this very build.
mkdir -p "$stage/source" && cp -r src include "$stage/source/" && echo "$PWD" > "$stage/SOURCE_DIR"
# One xz stream with a dictionary larger than a binary: the six binaries hold the same kernels (each links the library
# statically), so a 192 MiB window stores them about once (~11 MB in session 40 with sm_80 code too, 8.7 MB at sm_90a
# alone in session 54, a full build 4.2 min here; a device call carries at most 64 MiB).
# Unpacking needs ~200 MB of memory. Written beside and renamed: a copy of .carry/bin.tar.xz is never a partial one.
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo -dirty)"
if [ $clocks = ON ]; then
  mkdir -p .carry/ab
  tar -cf - -C "$stage" . | xz -T1 --lzma2=preset=9,dict=192MiB > ".carry/ab/$ab.tar.xz.part"
  mv ".carry/ab/$ab.tar.xz.part" ".carry/ab/$ab.tar.xz"
  echo "$commit" > ".carry/ab/$ab.COMMIT"
  echo "gpu_build.sh: the measuring build staged as .carry/ab/$ab.tar.xz ($commit)"
else
  rm -rf .carry/bin
  tar -cf - -C "$stage" . | xz -T1 --lzma2=preset=9,dict=192MiB > .carry/bin.tar.xz.part
  mv .carry/bin.tar.xz.part .carry/bin.tar.xz
  echo "$commit" > .carry/COMMIT
  if [ -n "$ab" ]; then
    mkdir -p .carry/ab
    cp .carry/bin.tar.xz ".carry/ab/$ab.tar.xz.part" && mv ".carry/ab/$ab.tar.xz.part" ".carry/ab/$ab.tar.xz"
    cp .carry/COMMIT ".carry/ab/$ab.COMMIT"
    echo "gpu_build.sh: staged as .carry/ab/$ab.tar.xz ($(cat .carry/COMMIT))"
  fi
fi
rm -rf "$stage"
du -sh .carry
