#!/usr/bin/env bash
# test.sh: the test command of the README: installs what is missing, builds, runs every test suite through CTest
# (GPU suites skip themselves where no GPU is present), then runs the CPU suites again built with AddressSanitizer
# and UndefinedBehaviorSanitizer (host code only), so a memory error or undefined behaviour fails the run, then
# installs the Python package the way users do (`pip install .`, into build-python/site) and runs its pytest suite
# (CUDA and FLA-layer tests skip themselves without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"

san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B build-sanitize -G Ninja -DKDA_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san" >/dev/null
cmake --build build-sanitize
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-sanitize --output-on-failure -j "$(nproc)" -L cpu

# The Python package: pip install . (scikit-build-core; CPU-only unless KDA_ENABLE_CUDA=ON), then pytest.
rm -rf build-python/site
python3 -m pip install -q --no-deps --no-cache-dir --target build-python/site .
PYTHONPATH="$PWD/build-python/site" python3 -m pytest -q -p no:cacheprovider python/tests
