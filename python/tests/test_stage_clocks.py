"""scripts/stage_clocks.py on a hand-made stamp file: each stage's length, its last warp and that warp's lead, the
warps' busy share, a task with a missing stamp left out, and a file whose size disagrees with its header refused."""
import array
import importlib.util
import pathlib
import struct
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("stage_clocks", ROOT / "scripts" / "stage_clocks.py")
sc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sc)

CTAS, WARPS, TASKS, BARS = 2, 16, 4, 9
STAMPS = 1 + 2 * BARS
LENGTHS = [100 * (k + 1) for k in range(BARS + 1)]  # stage k's cycles; the last is S5c's tail


def make_file(path, hole=None):
    v = array.array("Q", [0] * (CTAS * WARPS * TASKS * STAMPS))

    def put(c, w, t, s, x):
        v[((c * WARPS + w) * TASKS + t) * STAMPS + s] = x

    for c in range(CTAS):
        start = 5000 + 777 * c
        for t in range(TASKS):
            begin = start
            for w in range(WARPS):
                put(c, w, t, 0, start)
            for k in range(BARS):
                depart = begin + LENGTHS[k]
                for w in range(WARPS):
                    # stage 3 waits on warp 5 (150 cycles after the next); elsewhere warp 0 comes last, 1 ahead
                    arrive = (depart - 1 if w == 5 else depart - 151 - w) if k == 3 else depart - 10 - w
                    put(c, w, t, 1 + 2 * k, arrive)
                    put(c, w, t, 2 + 2 * k, depart)
                begin = depart
            start = begin + LENGTHS[BARS]
    if hole:
        put(*hole, 0)
    with open(path, "wb") as f:
        f.write(sc.MAGIC + struct.pack("<4i", CTAS, WARPS, TASKS, STAMPS) + v.tobytes())


def test_stages_last_warp_and_busy():
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "clk"
        make_file(p, hole=(1, 3, 2, 7))  # CTA 1, warp 3, task 2: one stamp missing
        rows = sc.summarize(*sc.read(p), skip=1)
        assert [r["name"] for r in rows] == sc.STAGES
        for k, r in enumerate(rows):
            assert r["n"] == 3  # tasks 1 and 2 of each CTA (task 3 has no next), less the one with the hole
            assert r["cycles"] == LENGTHS[k]
            if k == 3:
                assert (r["last_warp"], r["last_share"], r["lead"]) == (5, 1.0, 150)
            elif k < BARS:
                assert (r["last_warp"], r["lead"]) == (0, 1)
        # stage 0's warps arrive 10 + w cycles before the departure at 100: busy (90 - w) / 100 on average
        assert abs(rows[0]["busy"] - sum((90 - w) / 100 for w in range(WARPS)) / WARPS) < 1e-12
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "stage_clocks.py"), str(p)], check=True,
                             capture_output=True, text=True).stdout
        assert "S3 products" in out and "sum of medians" in out


def test_size_mismatch_refused():
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "clk"
        with open(p, "wb") as f:
            f.write(sc.MAGIC + struct.pack("<4i", 1, 16, 2, STAMPS) + bytes(8 * 10))
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "stage_clocks.py"), str(p)],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "header says" in r.stderr
