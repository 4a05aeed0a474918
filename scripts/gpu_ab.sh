#!/usr/bin/env bash
# gpu_ab.sh: an A/B of two or more builds in ONE GPU lease, interleaved so clock or thermal drift hits every build
# alike. Each build is a binary archive made by scripts/gpu_build.sh in its own checkout and copied to
# .carry/ab/NAME.tar.xz here (the device call carries the checkout the session started in, so every archive must
# sit in this checkout's .carry). Runs, per build: the GPU tests named by --tests (a gtest filter), then --rounds
# rounds of kda-bench on the given workloads, every build once per round; logs and JSON go to $OUT/results.tar
# ($OUT/results-2.tar, -3, ... when an earlier run in the same call left one: the files' names repeat across runs).
# --builds a,b,c picks archives (default: every one in .carry/ab); --verify SUITE runs kda-verify --suite SUITE
# --impl IMPL for every build (after the tests, before the timing; --verify-filter narrows it; --impl a,b runs several
# implementations of each build side by side, e.g. cuda-chunked,cuda-hopper of one build); --ncu REGEX profiles
# the kernels matching REGEX on the first workload per build (Nsight Compute, full set with source, clocks as they
# are; the first --ncu-count launches, default 2): the details page as text and the source page per SASS instruction
# as gzipped CSV, to read here offline (scripts/ncu_stages.py; with --sass, by CUDA line).
#
# usage (device): bash scripts/gpu_ab.sh --impl cuda-generic --tests '*Decode*' --rounds 2 \
#                   --workload decode-h32-b1 --workload decode-h32-b256 ...
#                 bash scripts/gpu_ab.sh --builds main,prep2 --impl cuda-chunked --verify full --workload h64-fixed
# usage (here):   scripts/gpu_build.sh --ab NAME   (once per build: this checkout's HEAD; a build of another checkout
#                   is copied in as OTHER_CHECKOUT/.carry/bin.tar.xz -> .carry/ab/NAME.tar.xz)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kda-gpu-out}
mkdir -p "$OUT"
impl=cuda-generic tests="" rounds=2 w=() pick="" verify="" vfilter="" ncu_re="" ncu_count=2
while [ $# -gt 0 ]; do
  case "$1" in
    --impl) impl=$2; shift 2 ;;
    --tests) tests=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --builds) pick=$2; shift 2 ;;
    --verify) verify=$2; shift 2 ;;
    --verify-filter) vfilter=$2; shift 2 ;;
    --ncu) ncu_re=$2; shift 2 ;;
    --ncu-count) ncu_count=$2; shift 2 ;;
    --workload) w+=(--workload "$2"); shift 2 ;;
    *) echo "gpu_ab.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
builds=()
for a in .carry/ab/*.tar.xz; do
  [ -f "$a" ] || continue
  n=$(basename "$a" .tar.xz)
  [ -z "$pick" ] || [[ ",$pick," == *",$n,"* ]] || continue
  mkdir -p "/tmp/ab/$n" && tar -xJf "$a" -C "/tmp/ab/$n" && builds+=("$n")
done
IFS=, read -r -a impls <<< "$impl"
bench_impls=()
for i in "${impls[@]}"; do bench_impls+=(--impl "$i"); done
[ ${#builds[@]} -ge 2 ] || [ ${#impls[@]} -ge 2 ] || { [ ${#builds[@]} -ge 1 ] && [ -n "$ncu_re" ]; } ||
  { echo "gpu_ab.sh: need two archives in .carry/ab, or two implementations (--impl a,b), or --ncu" >&2; exit 2; }
W=$(mktemp -d)
tarball="$OUT/results.tar"
k=2
while [ -e "$tarball" ]; do tarball="$OUT/results-$k.tar"; k=$((k + 1)); done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$W/gpu.txt"
(cd "$W" && tar -rf "$tarball" gpu.txt)
rc=0
if [ -n "$tests" ]; then
  # The builds' test binaries run side by side: their time is mostly the CPU oracles (the GPU work is small and
  # untimed), and the device host has 16 cores. Bounded: a kernel that hangs (a pipeline waiting on a barrier nobody
  # arrives at) must not eat the lease.
  threads=$(( $(nproc) / ${#builds[@]} ))  # the cores shared out: OpenMP's spinning workers must not oversubscribe them
  for b in "${builds[@]}"; do
    OMP_NUM_THREADS=$(( threads > 0 ? threads : 1 )) LD_LIBRARY_PATH="/tmp/ab/$b" timeout 300 \
      "/tmp/ab/$b/kda_gpu_tests" --gtest_filter="$tests" > "$W/tests-$b.log" 2>&1 &
  done
  wait
  for b in "${builds[@]}"; do
    grep -qE '^\[  PASSED' "$W/tests-$b.log" && ! grep -qE '^\[  FAILED' "$W/tests-$b.log" || rc=1
    echo "== $b tests: $(grep -E '^\[  (PASSED|FAILED)' "$W/tests-$b.log" | tr '\n' ' ')"
    (cd "$W" && tar -rf "$tarball" "tests-$b.log")
  done
fi
if [ -n "$verify" ]; then
  for b in "${builds[@]}"; do
    for i in "${impls[@]}"; do
      LD_LIBRARY_PATH="/tmp/ab/$b" timeout 300 "/tmp/ab/$b/kda-verify" --suite "$verify" --impl "$i" ${vfilter:+--filter "$vfilter"} \
        --json "$W/verify-$b-$i.json" > "$W/verify-$b-$i.log" 2>&1 || rc=1
      echo "== $b $i verify $verify: $(tail -1 "$W/verify-$b-$i.log")"
      grep FAIL "$W/verify-$b-$i.log" | cut -c1-160
      (cd "$W" && tar -rf "$tarball" "verify-$b-$i.log" "verify-$b-$i.json")
    done
  done
fi
if [ -n "$ncu_re" ] && [ ${#w[@]} -gt 0 ]; then
  for b in "${builds[@]}"; do
    src_dir=$(cat "/tmp/ab/$b/SOURCE_DIR" 2>/dev/null || true)  # where the build's line info says its sources are
    if [ -n "$src_dir" ] && [ ! -e "$src_dir" ]; then mkdir -p "$(dirname "$src_dir")" && ln -s "/tmp/ab/$b/source" "$src_dir"; fi
    LD_LIBRARY_PATH="/tmp/ab/$b" timeout 300 ncu --clock-control none --set full --import-source yes -k "regex:$ncu_re" \
      -c "$ncu_count" -f -o "$W/ncu-$b" "/tmp/ab/$b/kda-bench" "${bench_impls[@]}" "${w[@]:0:2}" --no-verify --iters 1 --warmup 0 \
      > "$W/ncu-run-$b.log" 2>&1 || rc=1
    ncu --import "$W/ncu-$b.ncu-rep" --page details > "$W/ncu-$b.txt" 2>&1
    ncu --import "$W/ncu-$b.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$W/ncu-src-$b.csv.gz"
    # CUDA lines come later, off the device: ncu_stages.py --sass maps these SASS rows to the lines of the build's
    # disassembly (`--print-source cuda` exported source text with no metric columns, sessions 11-12).
    echo "== $b ncu"
    grep -E "^  [a-z_ ]*void|Duration|Registers Per Thread|Achieved Occupancy|Executed Instructions  " "$W/ncu-$b.txt" | cut -c1-150
    (cd "$W" && tar -rf "$tarball" "ncu-run-$b.log" "ncu-$b.txt" "ncu-src-$b.csv.gz")
  done
fi
if [ ${#w[@]} -gt 0 ]; then
  for r in $(seq 1 "$rounds"); do
    for b in "${builds[@]}"; do
      LD_LIBRARY_PATH="/tmp/ab/$b" "/tmp/ab/$b/kda-bench" --commit "$b" "${bench_impls[@]}" --iters 100 "${w[@]}" \
        --json "$W/bench-$b-$r.json" > "$W/bench-$b-$r.log" 2>&1 || rc=1
      echo "== $b round $r"
      grep -E "^[a-z0-9-]+:|median|WRONG|ERROR" "$W/bench-$b-$r.log" | sed 's/ (seed.*//'
      (cd "$W" && tar -rf "$tarball" "bench-$b-$r.json" "bench-$b-$r.log")
    done
  done
fi
exit "$rc"
