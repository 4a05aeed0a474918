"""scripts/lease_lib.sh lease_same_figures: kda-verify at one seed on several builds, each build's rows compared with
the first's; run here on stand-in kda-verify scripts (in /tmp/ab/NAME, where lease_unpack puts builds) that print a
row whose figure, or whose verdict, differs by build."""
import pathlib
import shutil
import subprocess
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]

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
            d = pathlib.Path("/tmp/ab") / name
            d.mkdir(parents=True)
            passed, failed = (1, 0) if verdict == "PASS" else (0, 1)
            (d / "kda-verify").write_text(FAKE.format(verdict=verdict, rmse=rmse, passed=passed, failed=failed))
            (d / "kda-verify").chmod(0o755)
        a, b, c, d = builds
        script = f"source scripts/lease_lib.sh; W=$(mktemp -d); lease_same_figures backward-quick {a} {b} {c} {d}"
        out = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        assert "lease_same_figures backward-quick seed: " in out
        assert f"{a}: backward-quick passed" in out
        assert f"{b}: the same figures as {a}" in out  # the run time at the row's end is not compared
        assert f"{c}: figures DIFFER from {a}" in out
        assert f"{d}: backward-quick FAILED" in out and f"{d}: figures DIFFER from {a}" in out
    finally:
        for name in builds:
            shutil.rmtree(pathlib.Path("/tmp/ab") / name, ignore_errors=True)
