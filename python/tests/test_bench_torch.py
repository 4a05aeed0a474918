"""scripts/bench_torch.py, the peer benchmark, on the CPU: every part (prefill, decode, train) runs kda's CPU backend
on its small workload, verifies it against the float64 reference and times it; the JSON holds a verified, timed record
per part. (On the GPU the same script times FLA beside kda; this keeps the script itself from rotting between leases.)
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
    recs = {x["workload"]: x for x in d["results"]}
    assert set(recs) == {"cpu-smoke", "decode-h2-b3", "train-cpu-smoke"}, r.stdout
    for name, rec in recs.items():
        assert rec["impl"] == "kda-torch" and rec["verified"], (name, rec)
        assert rec["median_us"] > 0 and rec["iters"] >= 3, (name, rec)
    assert recs["cpu-smoke"]["out_rel_rmse"] < 4e-3 and recs["decode-h2-b3"]["state_rel_rmse"] < 2e-3
    assert all(v < 8e-3 for v in recs["train-cpu-smoke"]["grad_rel_rmse"].values())
    assert "WRONG" not in r.stdout
