# lease_lib.sh: helpers for the device-call scripts (.carry/lease/*.sh; copies of the ones that ran sit in
# bench/results): start a call's log, unpack build archives, run checks in parallel each under its own timeout, archive
# their logs, compare builds' verifier figures at one seed, A/B builds with gpu_ab.sh, print an ncu summary of one
# kernel launch or the duration of every launch of a step, and time the training step through the torch op beside FLA.
# Source it from the repository root; lease_begin sets W, the scratch folder for the logs (a script that does not call
# it sets W itself).

# lease_begin NAME: everything the script prints from here on also to $OUT/NAME.log; the time; W a fresh folder.
# (Never a bare `wait` after it: it would wait for the tee too.)
lease_begin() {
  exec > >(tee "$OUT/$1.log") 2>&1
  date -u
  W=$(mktemp -d)
}

# lease_checks_done [NAME]: after the checks' waits, their failures and seeds printed and their logs in
# $OUT/NAME.tgz (checks.tgz without NAME).
lease_checks_done() {
  grep -hE "FAILED|Failure|FAIL |seed" "$W"/*.log | head -20
  (cd "$W" && tar -czf "$OUT/${1:-checks}.tgz" .)
  date -u
}

# lease_passed NAME: whether kda-verify's summary line in $W/NAME.log has no failure.
lease_passed() { grep -qE "kda-verify: [0-9]+ passed, 0 failed" "$W/$1.log"; }

# lease_unpack NAME...: .carry/ab/NAME.tar.xz (scripts/gpu_build.sh's archive) into /tmp/ab/NAME; says so in one line
# and returns 1 when an archive does not unpack whole (session 40: a corrupted one unpacked half its binaries, and
# the call ran on).
lease_unpack() {
  local b rc=0
  for b in "$@"; do
    mkdir -p "/tmp/ab/$b" && tar -xJf ".carry/ab/$b.tar.xz" -C "/tmp/ab/$b" ||
      { echo "lease_unpack: $b.tar.xz did not unpack whole: its runs below are not of that build"; rc=1; }
  done
  return $rc
}

# lease_run NAME BUILD THREADS TIMEOUT CMD...: CMD in BUILD's folder with OMP_NUM_THREADS=THREADS, its output in
# $W/NAME.log; prints "== NAME rc=... <last line>". Start several with & and wait on their pids (never a bare wait
# in a script whose output goes through tee: it would wait for the tee too).
lease_run() {
  local n=$1 b=$2 th=$3 t=$4
  shift 4
  ( cd "/tmp/ab/$b" && OMP_NUM_THREADS=$th LD_LIBRARY_PATH=. timeout "$t" "$@" > "$W/$n.log" 2>&1
    echo "== $n rc=$? $(tail -n 1 "$W/$n.log")" )
}

# lease_bwd_full BUILD [ARGS...]: kda-verify --suite backward-full on BUILD, every case, in four processes each under
# its own timeout (the three 8192-token workloads alone: ~170 s on an H200), their logs $W/bwdfull-{a,b,c,d}.log; run
# it with & and wait on its pid, and check each with lease_passed. Every lease that checks a backward change runs it:
# backward-quick alone missed a regression on near-identical keys at beta = 2 for twelve sessions (session 22).
lease_bwd_full() {
  local b=$1 pids=()
  shift
  local v=(./kda-verify --impl cuda-generic --suite backward-full "$@")
  lease_run bwdfull-a "$b" 3 200 "${v[@]}" --filter standard_recipe & pids+=($!)
  lease_run bwdfull-b "$b" 3 200 "${v[@]}" --filter half_channels & pids+=($!)
  lease_run bwdfull-c "$b" 3 200 "${v[@]}" --filter every_channel & pids+=($!)
  lease_run bwdfull-d "$b" 2 200 "${v[@]}" --filter softplus_,saturated,gates_exactly,dead_and,near_identical,\
beta_near_0,h0_,packed,one_sequence,grouped,k_first,log_decay,fp16_bounded,k128_v64 & pids+=($!)
  wait "${pids[@]}"
}

# lease_bwd_checks BUILD [ARGS...]: what a backward change must pass before it lands, in parallel: the backward and
# stress GPU tests ($W/tests.log) and backward-full whole (lease_bwd_full, ARGS passed on to kda-verify, e.g.
# --input-dtype-grads); then prints each backward-full run's verdict, every case row and gtest's summary. Call it
# without & (it waits for its own runs).
lease_bwd_checks() {
  local b=$1 n pids=()
  shift
  lease_run tests "$b" 2 220 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & pids+=($!)
  lease_bwd_full "$b" "$@" & pids+=($!)
  wait "${pids[@]}"
  for n in bwdfull-a bwdfull-b bwdfull-c bwdfull-d; do
    lease_passed $n && echo "$b: $n passed" || echo "$b: $n FAILED"
  done
  grep -hE "^bwd_" "$W"/bwdfull-*.log | cut -c1-160
  grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
}

# lease_same_figures SUITE BUILD...: kda-verify --suite SUITE --impl cuda-generic on each BUILD at one fresh seed
# (printed), in parallel, their logs $W/same-TAG-BUILD.log (TAG: SUITE with its flags, so two calls keep their logs);
# then says whether each build passed and printed the first build's figures row for row: the check of a change meant
# to keep every operation in its order (the same bits), where the full suites then need running on one build only.
# SUITE may carry kda-verify flags after the suite's name ("backward-quick --input-dtype-grads"). Call it without &
# (it waits for its own runs).
lease_same_figures() {
  local suite=$1 b pids=() tag
  shift
  tag=$(printf '%s' "$suite" | tr -cs 'A-Za-z0-9' '-')
  local seed th=$((12 / $#))
  [ $th -lt 2 ] && th=2
  seed=$(od -An -N8 -tu8 /dev/urandom | tr -d " ")
  echo "lease_same_figures $suite seed: $seed"
  for b in "$@"; do
    # $suite unquoted: its flags become arguments of their own. 12 threads among the builds (the device has 16 cores;
    # a check beside takes the rest): the suite's time is the fp64 oracle's and the inputs' on the CPU, and at 2
    # threads a build two full suites took 170 of their 200 s (session 52)
    lease_run "same-$tag-$b" "$b" "$th" 200 ./kda-verify --impl cuda-generic --suite $suite --seed "$seed" & pids+=($!)
  done
  wait "${pids[@]}"
  for b in "$@"; do
    lease_passed "same-$tag-$b" && echo "$b: $suite passed" || echo "$b: $suite FAILED"
    [ "$b" = "$1" ] && continue
    # the case rows (name, seed, verdict, figures), cut before the run time at their end
    diff <(grep -E " PASS | FAIL " "$W/same-$tag-$1.log" | cut -c1-120) \
      <(grep -E " PASS | FAIL " "$W/same-$tag-$b.log" | cut -c1-120) > /dev/null &&
      echo "$b: the same figures as $1" || echo "$b: figures DIFFER from $1"
  done
}

# lease_ncu BUILD WORKLOAD KERNEL_REGEX: one launch of the kernel under Nsight Compute (clocks as they are), the
# summary sections in $W/ncu-BUILD-WORKLOAD-REGEX.txt; prints duration, DRAM, memory and scheduler figures.
lease_ncu() {
  local f="$W/ncu-$1-$2-$3.txt"
  (cd "/tmp/ab/$1" && LD_LIBRARY_PATH=. timeout 40 ncu --clock-control none -k "regex:$3" -c 1 --section \
    SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section InstructionStats ./kda-bench \
    --workload "$2" --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$f" 2>&1)
  echo "== ncu $1 $2 $3"
  grep -E "Duration|DRAM Throughput|Mem Busy|Eligible Warps|Executed Instructions " "$f" | cut -c1-100
}

# lease_ncu_launches BUILD WORKLOAD KERNEL_REGEX: every matching launch of one kda-bench step (--iters 1, no warm-up)
# under Nsight Compute, SpeedOfLight only (clocks as they are), in $W/ncu-launches-BUILD-WORKLOAD.txt; prints each
# launch's kernel and duration, one line each: where a change's time went, kernel by kernel, for ~15 s a build
# (session 27: the reverse pass that ate the products kernel's gain showed up this way).
lease_ncu_launches() {
  local f="$W/ncu-launches-$1-$2.txt"
  (cd "/tmp/ab/$1" && LD_LIBRARY_PATH=. timeout 100 ncu --clock-control none -k "regex:$3" --section SpeedOfLight \
    ./kda-bench --workload "$2" --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$f" 2>&1)
  echo "== ncu launches $1 $2"
  python3 - "$f" <<'PY'
import re, sys
name = None
for line in open(sys.argv[1]):
    if re.search(r"Context \d+, Stream", line):
        m = re.search(r"(\w+(?:<[^(]*)?)\(", line)  # the name with its template arguments (nested ones too)
        name = m.group(1) if m else line.strip()[:60]
    elif name and line.split()[:1] == ["Duration"]:
        print(name, *line.split()[1:])
        name = None
PY
}

# lease_ncu_bytes BUILD WORKLOAD KERNEL_REGEX [COUNT]: the first COUNT (default 2) matching launches of one kda-bench
# step under Nsight Compute (clocks as they are) with their time, DRAM bytes read and written and L2 hit rate, in
# $W/ncu-BUILD.txt; prints them a launch at a time: where a change moved bytes (session 70: the gradient pipe's tiles
# went through DRAM whatever their L2 policy).
lease_ncu_bytes() {
  local f="$W/ncu-$1.txt"
  (cd "/tmp/ab/$1" && LD_LIBRARY_PATH=. timeout 90 ncu --clock-control none -k "regex:$3" -c "${4:-2}" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
    ./kda-bench --workload "$2" --impl cuda-generic --no-verify --iters 1 --warmup 0 > "$f" 2>&1)
  echo "== ncu $1 $2"
  grep -E "^  [a-z_]+.*\(|gpu__time_duration|dram__bytes|lts__t_sector_hit" "$f" | sed 's/  */ /g' | cut -c1-110
}

# lease_bwd_quick BUILD: BUILD's backward / stress GPU tests beside backward-quick (both ~60 s), their verdicts, and
# the logs archived (lease_checks_done): the first check of a build a call then times.
lease_bwd_quick() {
  local b=$1 p1 p2
  lease_run tests "$b" 4 120 ./kda_gpu_tests --gtest_filter='*Backward*:*Stress*' & p1=$!
  lease_run bq "$b" 4 120 ./kda-verify --impl cuda-generic --suite backward-quick & p2=$!
  wait $p1 $p2
  grep -hE "^bwd_|kda-verify:" "$W/bq.log" | cut -c1-200
  grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/tests.log" | head -20
  lease_checks_done
}

# lease_py_tests BUILD LIMIT FILTER: the Python package's tests selected by pytest -k FILTER (e.g. "cuda or fla_layer":
# the rest run in CI) with BUILD's libkda_torch.so and libkda_jax.so (gpu_build.sh --python), the carried .whl
# installed into /tmp/site, under LIMIT seconds; the log as $OUT/py/python_tests.log as it goes, then its summary.
# Correctness only: it may share the GPU with checks, never with timing.
lease_py_tests() {
  local b=$1 lim=$2 filter=$3
  mkdir -p "$OUT/py"
  lease_wheels
  cp "/tmp/ab/$b/libkda_jax.so" python/kda/ 2>/dev/null
  LD_LIBRARY_PATH="/tmp/ab/$b" KDA_TORCH_LIBRARY="/tmp/ab/$b/libkda_torch.so" PYTHONPATH="/tmp/site:$PWD/python" \
    XLA_PYTHON_CLIENT_PREALLOCATE=false timeout "$lim" python3 -m pytest -q -rs -p no:cacheprovider python/tests \
    -k "$filter" > "$OUT/py/python_tests.log" 2>&1
  echo "python tests ($b) rc=$?"
  grep -E "passed|failed|FAILED|SKIPPED|Error" "$OUT/py/python_tests.log" | head -30
}

# lease_fwd_checks BUILD: what a forward change must pass before it is timed, in parallel: kda-verify --suite full
# under cuda-generic ($W/fwdfull.log) and the GPU tests but the backward, stress and decode ones ($W/gtests.log:
# those are other kernels, and the decode serving cases alone outran a 280 s limit in session 48); prints the
# verdicts and the probe's row, archives the logs ($OUT/checks-BUILD.tgz); returns 0 when both passed. Call it
# without & (it waits for its own runs).
lease_fwd_checks() {
  local b=$1 pf pg
  lease_run fwdfull "$b" 6 280 ./kda-verify --impl cuda-generic --suite full & pf=$!
  lease_run gtests "$b" 4 280 ./kda_gpu_tests --gtest_filter='-*Backward*:*Stress*:*Decode*' & pg=$!
  wait $pf $pg
  lease_passed fwdfull && echo "$b: forward full passed" || echo "$b: forward full FAILED"
  grep -hE " FAIL |kda-verify:|near_identical_keys_beta_at_2" "$W/fwdfull.log" | head
  grep -hE "^\[  (FAILED|PASSED) |tests? ran" "$W/gtests.log" | head
  lease_checks_done "checks-$b"
  lease_passed fwdfull && grep -q "^\[  PASSED  \]" "$W/gtests.log" && ! grep -q "^\[  FAILED  \]" "$W/gtests.log"
}

# Triton's cache for the FLA steps: scripts/triton_cache.sh's triton_cache_restore once, triton_cache_save after each
# FLA step (carried in as .carry/triton/part-*, handed back as $OUT/triton/part-*).
source scripts/triton_cache.sh

# lease_wheels: the carried wheels (.whl: fla-core and its pure-Python dependencies, pytest) into /tmp/site.
lease_wheels() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
}

# lease_torch_prefill BUILD LIMIT [WORKLOAD...]: issue #6's prefill workloads (none named: every one of
# scripts/bench_common.py's) through the torch op beside FLA (scripts/bench_torch.py --part prefill, kda and FLA, 100
# iterations) with BUILD's libkda_torch.so, one workload a process, each under what is left of LIMIT seconds (skipped
# under 60), its JSON and log as prefill-WORKLOAD.* in $OUT/prefill.tgz, and Triton's cache handed back after each
# (triton_cache_save): a call cut off by FLA's compiling (sessions 55-56: all eight in one process ran past 400 s)
# keeps what it measured and compiled. One archive rewritten after each workload, not two files a workload: the
# device tool returns at most 8 files (session 64: six workloads' files, the log and the cache's parts were 15, and
# h96-uniform's figures came back only in the output's tail). The call carries .whl, .carry/ab/BUILD.COMMIT and,
# where there is one, .carry/triton.
lease_torch_prefill() {
  local b=$1 lim=$2 commit w left t0=$SECONDS wls
  shift 2
  lease_wheels
  triton_cache_restore
  commit=$(cut -c1-7 ".carry/ab/$b.COMMIT")
  local d="$W/prefill"
  mkdir -p "$d"
  wls=("$@")
  [ ${#wls[@]} -gt 0 ] ||
    read -r -a wls <<< "$(python3 -c 'import sys; sys.path.insert(0, "scripts"); import bench_common; print(*bench_common.WORKLOADS)')"
  for w in "${wls[@]}"; do
    left=$((lim - (SECONDS - t0)))
    [ "$left" -gt 60 ] || { echo "skip $w: $left s left"; continue; }
    LD_LIBRARY_PATH="/tmp/ab/$b" KDA_TORCH_LIBRARY="/tmp/ab/$b/libkda_torch.so" PYTHONPATH="/tmp/site:$PWD/python" \
      timeout "$left" python3 scripts/bench_torch.py --part prefill --workload "$w" --impl kda --impl fla --iters 100 \
      --commit "$commit" --json "$d/prefill-$w.json" > "$d/prefill-$w.log" 2>&1
    echo "bench_torch prefill $w rc=$? at $SECONDS s"
    grep -hE "median|WRONG|FAILED|Error| / " "$d/prefill-$w.log" | head -20
    (cd "$d" && tar -czf "$OUT/prefill.tgz" .)
    triton_cache_save
  done
  date -u
}

# lease_torch_train BUILD WORKLOAD LIMIT: issue #9's training step through the torch op beside FLA in one process
# (scripts/bench_torch.py --part train, FLA, kda and kda-saved, 20 iterations) with BUILD's libkda_torch.so, its JSON
# and log as $OUT/peers_train_WORKLOAD.*, under LIMIT seconds (FLA's Triton compile: triton_cache_restore).
# The call carries .whl (fla-core and its pure-Python dependencies) and .carry/ab/BUILD.COMMIT.
lease_torch_train() {
  local b=$1 wl=$2 lim=$3 commit
  lease_wheels 2>/dev/null
  commit=$(cut -c1-7 ".carry/ab/$b.COMMIT")
  LD_LIBRARY_PATH="/tmp/ab/$b" KDA_TORCH_LIBRARY="/tmp/ab/$b/libkda_torch.so" PYTHONPATH="/tmp/site:$PWD/python" \
    timeout "$lim" python3 scripts/bench_torch.py --part train --workload "train-$wl" --impl fla --impl kda \
    --impl kda-saved --iters 20 --commit "$commit" --json "$OUT/peers_train_$wl.json" > "$OUT/peers_train_$wl.log" 2>&1
  echo "bench_torch train-$wl rc=$?"
  grep -hE "^train|median|WRONG|FAILED|Error|/ fla" "$OUT/peers_train_$wl.log" | head -12
  date -u
}

# lease_clocks BUILD WORKLOAD...: one forward of each WORKLOAD on BUILD (a --stage-clocks archive) with phase 1's
# and the state pass's stamps on; stage_clocks.py's tables of each printed, and the tables, stamp files and logs of
# every lease_clocks call so far in $OUT/clocks.tgz.
lease_clocks() {
  local b=$1 w
  shift
  mkdir -p /tmp/clocks
  for w in "$@"; do
    lease_run "clk-$b-$w" "$b" 4 60 ./kda-bench --workload "$w" --impl cuda-generic --iters 10 \
      --stage-clocks "/tmp/clk-$b"
    cp "$W/clk-$b-$w.log" /tmp/clocks/
    python3 scripts/stage_clocks.py "/tmp/clk-$b.cuda-generic.$w" | tee "/tmp/clocks/stages-$b-$w.txt"
    [ -f "/tmp/clk-$b.cuda-generic.$w.state" ] &&
      python3 scripts/stage_clocks.py "/tmp/clk-$b.cuda-generic.$w.state" | tee "/tmp/clocks/state-$b-$w.txt"
    gzip -c "/tmp/clk-$b.cuda-generic.$w.state" > "/tmp/clocks/clk-$b-$w.state.gz" 2>/dev/null
  done
  tar -czf "$OUT/clocks.tgz" -C /tmp clocks
}

# lease_ab BUILDS LIMIT [--rounds N] [--dir NAME] WORKLOAD...: scripts/gpu_ab.sh on the comma-separated BUILDS
# (cuda-generic, N rounds, 2 by default) over the workloads under LIMIT seconds, its logs and JSON in
# $OUT/NAME/results.tar (NAME ab by default; gpu_ab.sh numbers a second tarball in the same folder); prints its rc and
# the time.
lease_ab() {
  local builds=$1 lim=$2 rounds=2 dir=ab wl=()
  shift 2
  while [ $# -gt 0 ]; do
    case "$1" in
      --rounds) rounds=$2; shift 2 ;;
      --dir) dir=$2; shift 2 ;;
      *) wl+=(--workload "$1"); shift ;;
    esac
  done
  mkdir -p "$OUT/$dir"
  OUT=$OUT/$dir timeout "$lim" bash scripts/gpu_ab.sh --builds "$builds" --impl cuda-generic --rounds "$rounds" "${wl[@]}"
  echo "gpu_ab rc=$?"
  date -u
}
