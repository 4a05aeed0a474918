#!/usr/bin/env bash
# run.sh: the main job of the README: installs what is missing, builds, and runs kda-bench's default workload
# (h64-fixed on the GPU when one is present, else cpu-8k-h8 on the CPU backend), verified against the fp64
# reference before it is timed. Extra arguments go to kda-bench (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
exec build/kda-bench --commit "$commit" "$@"
