#!/usr/bin/env bash
# bisect_build.sh COMMIT: that commit's kda-verify (CUDA on, Release) for session 22's backward-full bisect, packed
# into .carry/bis/bis-COMMIT.tar.xz (s23_l1_prepared.sh runs them). Kept: 0fce9af c8be2aa 8d8eec1 5f9980a 7bc5ffd
# e5ba7d9 1829c28 2115ac2 feb64fa, and the diagnostics e745d19 (diagpw), 2a0e674 (diagaqk3) (~1 minute each here).
set -euo pipefail
c=$1
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
root=$PWD
mkdir -p .carry/bis
rm -rf /tmp/bis-wt-$c; git worktree add -q --detach /tmp/bis-wt-$c $c
cd /tmp/bis-wt-$c
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKDA_ENABLE_CUDA=ON -DKDA_CPU_ARCH=x86-64-v3 \
  -DKDA_BUILD_PYTHON=OFF >/dev/null
cmake --build build-gpu --target kda-verify > /tmp/bis-build-$c.log 2>&1
stage=$(mktemp -d)
cp build-gpu/kda-verify build-gpu/libkda.so "$stage/" 2>/dev/null || cp build-gpu/kda-verify "$stage/"
strip "$stage"/*
cp "$(g++ -print-file-name=libgomp.so.1)" "$stage/"
tar -cf - -C "$stage" . | xz -T1 --lzma2=preset=9,dict=192MiB > $root/.carry/bis/bis-$c.tar.xz
git rev-parse HEAD > $root/.carry/bis/bis-$c.COMMIT
rm -rf "$stage" build-gpu
cd "$root" && git worktree remove --force /tmp/bis-wt-$c
echo "built $c $(date)"
