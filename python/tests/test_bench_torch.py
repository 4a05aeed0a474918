"""scripts/bench_torch.py, the peer benchmark, on the CPU: every part (prefill, decode, fusions, train) runs kda's CPU
backend on its small workload, verifies it against the float64 reference and times it; the JSON holds a verified, timed
record per part. (On the GPU the same script times FLA beside kda; this keeps the script itself from rotting between leases.)
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU smoke run; on a GPU the lease runs the real one")
def test_bench_torch_cpu_smoke(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "scripts")] + sys.path))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_torch.py"), "--iters", "5", "--json", str(out),
                        "--commit", "test"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(out.read_text())
    recs = {(x["workload"], x["impl"]): x for x in d["results"]}
    fusions = {("fusions-h2-b3", "kda-torch-" + v) for v in ("unfused", "conv-fused", "norm-fused", "fused")}
    assert set(recs) == {("cpu-smoke", "kda-torch"), ("decode-h2-b3", "kda-torch"),
                         ("train-cpu-smoke", "kda-torch"), ("train-cpu-smoke", "kda-torch-saved")} | fusions, r.stdout
    for key, rec in recs.items():
        assert rec["verified"], (key, rec)
        assert rec["median_us"] > 0 and rec["iters"] >= 3, (key, rec)
    assert recs["cpu-smoke", "kda-torch"]["out_rel_rmse"] < 4e-3
    assert recs["decode-h2-b3", "kda-torch"]["state_rel_rmse"] < 2e-3
    for impl in ("kda-torch", "kda-torch-saved"):
        assert all(v < 8e-3 for v in recs["train-cpu-smoke", impl]["grad_rel_rmse"].values())
    assert "WRONG" not in r.stdout


def test_bench_torch_refuses_a_workload_no_part_runs():
    """A prefill name under --part train times nothing: an error naming it, not an empty run that exits 0."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "scripts")] + sys.path))
    name = "h64-fixed" if torch.cuda.is_available() else "cpu-smoke"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_torch.py"), "--part", "train", "--workload", name],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and f"'{name}'" in r.stderr and "train-" in r.stderr, r.stdout + r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU smoke run; on a GPU the lease runs the real one")
def test_plot_results_draws_bench_torch_files(tmp_path):
    """plot_results.py draws bench_torch's files (kda and FLA records in one file, prefill and decode in two) as one
    PNG; the records here are a real GPU run's shape, written by hand, so the script's reading of them is checked."""
    pytest.importorskip("matplotlib")

    def rec(workload, impl, us, floor):
        return dict(workload=workload, impl=impl, gpu="NVIDIA H200", commit="abc1234", median_us=us, floor_us=floor)

    prefill = tmp_path / "prefill.json"
    decode = tmp_path / "decode.json"
    prefill.write_text(json.dumps(dict(commit="abc1234", results=[
        rec("h64-fixed", "kda-torch", 3000.0, 160.0), rec("h64-fixed", "fla-chunk_kda", 1750.0, 160.0)])))
    decode.write_text(json.dumps(dict(commit="abc1234", results=[
        rec(f"decode-h32-b{b}", impl, us * b, 0.7 * b) for b in (1, 8) for impl, us in
        (("kda-torch", 6.5), ("fla-fused_recurrent_kda", 5.2))])))
    out = tmp_path / "peers.png"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "scripts")] + sys.path))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "plot_results.py"), str(prefill), str(decode),
                        "--out", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.stat().st_size > 10_000


def test_a_wrong_answer_gets_no_time(monkeypatch):
    """kda is timed only inside the tensor-core bound; a peer also between that bound and PEER_GATE (labelled), never
    beyond it: FLA's decode once 'missed' by 0.2 because the harness fed it a pool kda's timing had advanced."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import bench_torch as bt
    assert bt.timed_at_all("kda", True, 1e-3, 1e-5)
    assert not bt.timed_at_all("kda", False, 5e-3, 4e-3)
    assert bt.timed_at_all("fla", False, 5e-3, 4e-3)
    assert not bt.timed_at_all("fla", False, 0.2, 0.15)
    assert not bt.timed_at_all("fla", False, 1e-3, 0.15)
