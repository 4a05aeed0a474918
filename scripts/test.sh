#!/usr/bin/env bash
# test.sh: the test command of the README: installs what is missing, builds, runs every test suite through CTest
# (GPU suites skip themselves where no GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
