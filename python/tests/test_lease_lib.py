"""scripts/lease_lib.sh, run here on stand-in builds (scripts in /tmp/ab/NAME, where lease_unpack puts builds):
lease_same_figures (kda-verify at one seed on several builds, each build's rows compared with the first's; the stand-ins
print a row whose figure, or whose verdict, differs by build; flags after the suite's name reach kda-verify, and two
calls keep their logs) and lease_bwd_checks (the GPU tests and the four backward-full runs of one build, each run's
verdict reported)."""
import pathlib
import shutil
import subprocess
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]


def stand_in(name, scripts):
    """/tmp/ab/NAME holding each of scripts ({file: text}) as an executable, where lease_unpack puts a build."""
    d = pathlib.Path("/tmp/ab") / name
    d.mkdir(parents=True)
    for f, text in scripts.items():
        (d / f).write_text(text)
        (d / f).chmod(0o755)


def run_lease(script):
    """stdout of bash running SCRIPT after sourcing lease_lib.sh with a fresh W."""
    full = "source scripts/lease_lib.sh; W=$(mktemp -d); " + script
    return subprocess.run(["bash", "-c", full], cwd=ROOT, capture_output=True, text=True, check=True).stdout

FAKE = """#!/bin/bash
printf 'kda-verify  suite x  run seed %s\\n' "$6"
printf '%-46s %-9s %20s  {verdict}  worst dk       rmse {rmse} (0.005 of bound)  elem  0.004   %s.7s (oracle\\n' \\
  bwd_standard_recipe_h64 workload 17086586353568781967 "$RANDOM"
echo 'kda-verify: {passed} passed, {failed} failed, 0 skipped'
"""


def test_same_figures_differ_and_failed():
    tag = uuid.uuid4().hex[:8]
    builds = {f"a{tag}": ("PASS", "9.408e-06"), f"b{tag}": ("PASS", "9.408e-06"),
              f"c{tag}": ("PASS", "9.409e-06"), f"d{tag}": ("FAIL", "9.408e-06")}
    try:
        for name, (verdict, rmse) in builds.items():
            passed, failed = (1, 0) if verdict == "PASS" else (0, 1)
            stand_in(name, {"kda-verify": FAKE.format(verdict=verdict, rmse=rmse, passed=passed, failed=failed)})
        a, b, c, d = builds
        out = run_lease(f"lease_same_figures backward-quick {a} {b} {c} {d}")
        assert "lease_same_figures backward-quick seed: " in out
        assert f"{a}: backward-quick passed" in out
        assert f"{b}: the same figures as {a}" in out  # the run time at the row's end is not compared
        assert f"{c}: figures DIFFER from {a}" in out
        assert f"{d}: backward-quick FAILED" in out and f"{d}: figures DIFFER from {a}" in out
    finally:
        for name in builds:
            shutil.rmtree(pathlib.Path("/tmp/ab") / name, ignore_errors=True)


ARGS_ROW = """#!/bin/bash
for a in "$@"; do [ "$prev" = --seed ] && seed=$a; prev=$a; done
printf 'kda-verify  suite x  run seed %s  args %s\\n' "$seed" "$*"
printf 'bwd_x %40s workload  1  PASS  worst dk       rmse 9.4e-06 (0.005 of bound)\\n' ''
echo 'kda-verify: 1 passed, 0 failed, 0 skipped'
"""


def test_same_figures_passes_flags_and_keeps_each_calls_logs():
    name = f"f{uuid.uuid4().hex[:8]}"
    try:
        stand_in(name, {"kda-verify": ARGS_ROW})
        out = run_lease(f"lease_same_figures backward-quick {name}; "
                        f"lease_same_figures 'backward-quick --input-dtype-grads' {name}; cat $W/same-*-{name}.log")
        assert f"{name}: backward-quick --input-dtype-grads passed" in out
        # both calls' logs are there, the second with the flag as an argument of its own
        assert "args --impl cuda-generic --suite backward-quick --seed" in out
        assert "args --impl cuda-generic --suite backward-quick --input-dtype-grads --seed" in out
    finally:
        shutil.rmtree(pathlib.Path("/tmp/ab") / name, ignore_errors=True)


VERIFY_BY_FILTER = """#!/bin/bash
f=""
for a in "$@"; do [ "$prev" = --filter ] && f=$a; prev=$a; done
printf 'bwd_%-42s workload  1  PASS  worst dk       rmse 9.4e-06 (0.005 of bound)  elem  0.004   1.0s (oracle\\n' \
  "${f%%,*}"
case "$f" in {failing}*) echo 'kda-verify: 0 passed, 1 failed, 0 skipped' ;;
  *) echo 'kda-verify: 1 passed, 0 failed, 0 skipped' ;; esac
"""
GTEST = """#!/bin/bash
echo "[==========] 2 tests ran. (filter $1)"
echo '[  PASSED  ] 2 tests.'
"""


def test_bwd_checks_reports_every_run():
    name = f"bc{uuid.uuid4().hex[:8]}"
    try:
        stand_in(name, {"kda-verify": VERIFY_BY_FILTER.replace("{failing}", "half_channels"), "kda_gpu_tests": GTEST})
        out = run_lease(f"lease_bwd_checks {name}")
        assert f"{name}: bwdfull-a passed" in out and f"{name}: bwdfull-c passed" in out
        assert f"{name}: bwdfull-b FAILED" in out  # the half_channels run
        assert f"{name}: bwdfull-d passed" in out
        assert "bwd_standard_recipe" in out and "bwd_softplus_" in out  # every run's rows
        assert "[  PASSED  ] 2 tests." in out and "--gtest_filter=*Backward*:*Stress*" in out
    finally:
        shutil.rmtree(pathlib.Path("/tmp/ab") / name, ignore_errors=True)
