#!/usr/bin/env bash
# gpu_check.sh: everything one GPU lease runs, in one call. Steps (all by default, or those named as arguments):
#   tests   the GPU test suite (prefill and decode against the fp64 oracle)
#   chunkbwd  the chunked backward (not in the default set): its GPU tests, kda-verify --suite backward-full on
#           cuda-chunked, and train-h64-fixed / train-h96-fixed with the chunked forward and backward
#   verify  kda-verify --suite full, --suite decode-full and --suite backward-full on the CUDA path
#   bench   kda-bench on the prefill workloads and the decode batch sweep (verified, then timed)
#   fla     kda and FLA side by side in one process (scripts/bench_torch.py, the carried libkda_torch.so and the
#           wheels in .whl): decode batch sweep and the six prefill workloads, each verified, then timed, the floor
#           measured in the same run
#   train   training steps: kda-bench train-* (the six standard workloads' forward + the CUDA backward, gradients
#           verified against the fp64 reference backward, then timed), then kda's torch op and FLA's forward +
#           backward side by side in one process (bench_torch.py --part train)
#   flaverify  kda-verify --suite full and --suite backward-full judging FLA's chunk_kda through the external
#           protocol, --suite decode-full judging its fused_recurrent_kda, then backward-full on cuda-generic with
#           FLA as --baseline (each gradient no worse than FLA's)
#   python  the PyTorch package: the extension gpu_build.sh --python built (torch's stable ABI: it loads into this
#           machine's torch), else built here with CUDA (plain CMake, no network needed); installs the carried wheels
#           (.whl: fla-core, einops, pytest; flash-linear-attention too, the package with fla.layers, or FLA's
#           KimiDeltaAttention test skips: session 42) into /tmp/site, runs python/tests (CPU + CUDA + that layer with
#           kda substituted)
#   profile Nsight Compute (--clock-control none) on the chunked forward's two kernels (h64-fixed) and the decode
#           kernel (H = 32, B = 256): duration, occupancy, warp stall reasons, executed instructions
# Each step's logs and JSON are appended to $OUT/results.tar as soon as the step ends (the device returns at most 8
# files, and a step cut off by the time limit must not cost the earlier ones); check.log is the summary. Every tool
# run has its own `timeout` below the 600 s a device call may last, so a slow step ends, and what its log holds so
# far is archived (a train step given 250 s once returned nothing: the log was archived only when kda-bench ended). Uses the
# binaries carried in .carry/bin (built by scripts/gpu_build.sh); builds on
# the device only if they will not start there.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kda-gpu-out}
mkdir -p "$OUT"
W=$(mktemp -d)  # step outputs, archived per step by done_step
BIN=.carry/bin
# The binaries: .carry/bin.tar.xz (gpu_build.sh), or the A/B set's main.tar.xz when only .carry/ab was carried
# (a call carries at most 64 MiB: the A/B archives and .whl fit, a second copy of main's does not).
bins=.carry/bin.tar.xz
[ -f "$bins" ] || bins=.carry/ab/main.tar.xz
[ -f "$bins" ] && mkdir -p "$BIN" && tar -xJf "$bins" -C "$BIN"
COMMIT=$(cat .carry/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
export LD_LIBRARY_PATH="$PWD/$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
# Triton's cache (FLA's compiled kernels and its autotuning picks; scripts/triton_cache.sh): carried in as
# .carry/triton/part-* when a lease left one, handed back as $OUT/triton/part-* after each step that ran FLA, so
# FLA's autotuning (230 s for one training workload) is paid once, not per lease.
source scripts/triton_cache.sh
triton_cache_restore
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests verify bench fla)
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }
rc=0
t_step=$(date +%s)
done_step() {  # done_step NAME FILES...: archive a finished step's files and print its wall time
  local name=$1; shift
  (cd "$W" && tar -rf "$OUT/results.tar" "$@" 2>/dev/null)
  # After a step that ran FLA, its compiled kernels and autotuning picks (session 14: a cache written only at the end
  # of a call that hit the time limit came back truncated).
  case "$name" in fla|train|flaverify*|python) triton_cache_save ;; esac
  echo "-- $name: $(( $(date +%s) - t_step )) s"
  t_step=$(date +%s)
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  | tee "$W/gpu.txt"
if ! "$BIN/kda_gpu_tests" --gtest_list_tests >/dev/null 2>&1; then
  echo "carried binaries do not start here; building on the device" | tee -a "$W/gpu.txt"
  cmake -S . -B build -G Ninja -DKDA_CPU_ARCH=x86-64-v3 >/dev/null && cmake --build build && BIN=build
fi
cuobjdump --dump-resource-usage "$BIN/kda-bench" 2>&1 | grep -E "Function|REG" > "$W/resources.txt"
done_step setup gpu.txt resources.txt

if want tests; then
  echo "== GPU tests"
  timeout 500 "$BIN/kda_gpu_tests" --gtest_output=json:"$W/gpu_tests.json" > "$W/gpu_tests.log" 2>&1 || rc=1
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure" "$W/gpu_tests.log" | head -40
  done_step tests gpu_tests.json gpu_tests.log
fi
if want chunkbwd; then
  # The chunked backward first (issue #9): its GPU tests, the backward verifier on it, then training steps on the
  # two fixed workloads (the chunked forward + the chunked backward, gradients verified, then timed).
  echo "== chunked backward"
  timeout 200 "$BIN/kda_gpu_tests" --gtest_filter='*CudaChunkedBackward*:*CudaBackwardDeterminism*' \
    --gtest_output=json:"$W/chunkbwd_tests.json" > "$W/chunkbwd_tests.log" 2>&1 || rc=1
  grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure" "$W/chunkbwd_tests.log" | head -30
  timeout 150 "$BIN/kda-verify" --suite backward-full --impl cuda-chunked --json "$W/verify_chunkbwd.json" \
    > "$W/verify_chunkbwd.log" 2>&1 || rc=1
  grep -E "FAIL|kda-verify:|passed" "$W/verify_chunkbwd.log" | head -30
  timeout 200 "$BIN/kda-bench" --commit "$COMMIT" --impl cuda-chunked --iters 20 --workload train-h64-fixed \
    --workload train-h96-fixed --json "$W/train_chunked.json" > "$W/train_chunked.log" 2>&1 || rc=1
  grep -E "^[a-z0-9-]+:|median|WRONG|ERROR" "$W/train_chunked.log" | sed 's/ (seed.*//'
  done_step chunkbwd chunkbwd_tests.json chunkbwd_tests.log verify_chunkbwd.json verify_chunkbwd.log \
    train_chunked.json train_chunked.log
fi
if want verify; then
  echo "== kda-verify full"
  timeout 300 "$BIN/kda-verify" --suite full --impl cuda-generic --json "$W/verify.json" > "$W/verify.log" 2>&1 || rc=1
  grep -E "FAIL|kda-verify:" "$W/verify.log" | head -30
  timeout 200 "$BIN/kda-verify" --suite decode-full --impl cuda-generic --json "$W/verify_decode.json" \
    > "$W/verify_decode.log" 2>&1 || rc=1
  grep -E "FAIL|kda-verify:" "$W/verify_decode.log" | head -30
  timeout 300 "$BIN/kda-verify" --suite backward-full --impl cuda-generic --json "$W/verify_backward.json" \
    > "$W/verify_backward.log" 2>&1 || rc=1
  grep -E "FAIL|kda-verify:" "$W/verify_backward.log" | head -30
  done_step verify verify.json verify.log verify_decode.json verify_decode.log verify_backward.json verify_backward.log
fi
if want bench; then
  echo "== kda-bench"
  w=()
  for x in h96-fixed h96-mixed h96-uniform h64-fixed h64-mixed h64-uniform kimi-8k serve-256x32 serve-64x100 \
           decode-h32-b1 decode-h32-b8 decode-h32-b32 decode-h32-b128 decode-h32-b256 decode-h32-b512 \
           decode-h12-b1 decode-h12-b32 decode-h12-b256; do w+=(--workload "$x"); done
  timeout 400 "$BIN/kda-bench" --commit "$COMMIT" --impl cuda-generic --iters 100 "${w[@]}" --json "$W/bench.json" \
    > "$W/bench.log" 2>&1 || rc=1
  grep -E "^[a-z0-9-]+:|median|WRONG|ERROR|copy" "$W/bench.log" | sed 's/ (seed.*//'
  done_step bench bench.json bench.log
fi
if want train; then
  echo "== training steps"
  w=()
  for x in h96-fixed h96-mixed h96-uniform h64-fixed h64-mixed h64-uniform; do w+=(--workload "train-$x"); done
  timeout 400 "$BIN/kda-bench" --commit "$COMMIT" --impl cuda-generic --iters 20 "${w[@]}" --json "$W/train.json" \
    > "$W/train.log" 2>&1 || rc=1
  grep -E "^[a-z0-9-]+:|median|WRONG|ERROR" "$W/train.log" | sed 's/ (seed.*//'
  if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    KDA_TORCH_LIBRARY="$PWD/$BIN/libkda_torch.so" PYTHONPATH="/tmp/site:$PWD/python" timeout 300 \
      python3 scripts/bench_torch.py --part train --iters 80 --commit "$COMMIT" \
      --json "$W/peers_train.json" > "$W/peers_train.log" 2>&1
    grep -h -E "median|WRONG|FAILED|Error| / " "$W/peers_train.log"
  fi
  done_step train train.json train.log peers_train.json peers_train.log
fi
if { want fla || want flaverify; } && [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
if want fla && [ -d .whl ]; then
  echo "== kda and FLA side by side (scripts/bench_torch.py: one process, the same inputs, verified, then timed)"
  # Decode and prefill in separate processes: a CUDA error in one (FLA's decode hit an illegal address at B = 256
  # on 2026-11-29) must not cost the other its figures.
  for part in decode prefill; do
    KDA_TORCH_LIBRARY="$PWD/$BIN/libkda_torch.so" PYTHONPATH="/tmp/site:$PWD/python" timeout 300 \
      python3 scripts/bench_torch.py --part $part --commit "$COMMIT" --json "$W/peers_$part.json" \
      > "$W/peers_$part.log" 2>&1
  done
  grep -h -E "median|WRONG|FAILED|Error| / |floor" "$W/peers_decode.log" "$W/peers_prefill.log"
  done_step fla peers_decode.json peers_decode.log peers_prefill.json peers_prefill.log
fi
if want flaverify && [ -d .whl ]; then
  echo "== kda-verify full on FLA"
  PYTHONPATH=/tmp/site "$BIN/kda-verify" --suite full --impl "cmd:python3 scripts/verify_impls/fla_chunk_kda.py" \
    --json "$W/verify_fla.json" > "$W/verify_fla.log" 2>&1
  grep -E "FAIL|kda-verify:" "$W/verify_fla.log" | head -30
  # FLA's decode (fused_recurrent_kda) on the decode suite: the cases its kernel has no form for fail with the reason.
  PYTHONPATH=/tmp/site timeout 300 "$BIN/kda-verify" --suite decode-full \
    --impl "cmd:python3 scripts/verify_impls/fla_fused_recurrent_kda.py" \
    --json "$W/verify_fla_decode.json" > "$W/verify_fla_decode.log" 2>&1
  grep -E "FAIL|kda-verify:" "$W/verify_fla_decode.log" | head -30
  # Archived now: the backward runs below may hit the time limit.
  done_step flaverify verify_fla.json verify_fla.log verify_fla_decode.json verify_fla_decode.log
  echo "== kda-verify backward-full on FLA, and cuda-generic against FLA as the baseline"
  PYTHONPATH=/tmp/site "$BIN/kda-verify" --suite backward-full \
    --impl "cmd:python3 scripts/verify_impls/fla_chunk_kda.py" \
    --json "$W/verify_fla_backward.json" > "$W/verify_fla_backward.log" 2>&1
  grep -E "FAIL|not provided|kda-verify:" "$W/verify_fla_backward.log" | head -30
  PYTHONPATH=/tmp/site "$BIN/kda-verify" --suite backward-full --impl cuda-generic \
    --baseline "cmd:python3 scripts/verify_impls/fla_chunk_kda.py" \
    --json "$W/verify_backward_vs_fla.json" > "$W/verify_backward_vs_fla.log" 2>&1 || rc=1
  grep -E "FAIL|kda-verify:" "$W/verify_backward_vs_fla.log" | head -30
  done_step flaverify_backward verify_fla_backward.json verify_fla_backward.log verify_backward_vs_fla.json \
    verify_backward_vs_fla.log
fi
if want python; then
  echo "== Python package"
  [ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  # The extension gpu_build.sh --python built (PyTorch's stable ABI: any torch >= 2.10), or built here (minutes).
  ext="$PWD/$BIN/libkda_torch.so"
  if [ -f "$ext" ]; then
    echo "carried $BIN/libkda_torch.so" > "$W/python_build.log"
  else
    { cmake -S . -B build-torch -G Ninja -DCMAKE_BUILD_TYPE=Release -DKDA_ENABLE_CUDA=ON -DKDA_BUILD_TESTS=OFF \
        -DKDA_BUILD_TOOLS=OFF -DKDA_BUILD_PYTHON=ON -DKDA_TORCH_PYTHON="$(command -v python3)" \
      && cmake --build build-torch; } > "$W/python_build.log" 2>&1 || { rc=1; tail -30 "$W/python_build.log"; }
    ext="$PWD/build-torch/python/libkda_torch.so"
  fi
  # kda.jax loads libkda_jax.so from beside itself: the carried one (gpu_build.sh builds it where jax imports).
  [ -f "$BIN/libkda_jax.so" ] && cp "$BIN/libkda_jax.so" python/kda/
  KDA_TORCH_LIBRARY="$ext" PYTHONPATH="/tmp/site:$PWD/python" XLA_PYTHON_CLIENT_PREALLOCATE=false \
    timeout 400 python3 -m pytest -q -rs -p no:cacheprovider python/tests -s > "$W/python_tests.log" 2>&1 || rc=1
  grep -E "passed|failed|FAILED|SKIPPED|relative RMSE" "$W/python_tests.log" | head -40
  done_step python python_build.log python_tests.log
fi
if want profile; then
  echo "== ncu"
  sec=(--section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats
       --section MemoryWorkloadAnalysis --section InstructionStats --section ComputeWorkloadAnalysis)
  timeout 200 ncu --clock-control none -k regex:'prepare|state_kernel' -c 2 "${sec[@]}" "$BIN/kda-bench" \
    --workload h64-fixed --impl cuda-chunked --no-verify --iters 1 --warmup 0 > "$W/ncu_chunked.log" 2>&1
  timeout 120 ncu --clock-control none -k regex:decode -c 1 "${sec[@]}" "$BIN/kda-bench" \
    --workload decode-h32-b256 --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$W/ncu_decode.log" 2>&1
  grep -h -E "^  [a-z_ ]*void|Duration|Achieved Occupancy|^    Executed Instructions  |Registers Per Thread|DRAM Throughput" \
    "$W/ncu_chunked.log" "$W/ncu_decode.log" | cut -c1-150
  done_step profile ncu_chunked.log ncu_decode.log
fi
echo "gpu_check exit code: $rc"
exit "$rc"
