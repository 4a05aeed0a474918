"""scripts/stage_clocks.py on a hand-made stamp file: each stage's length (between its barriers' last arrivals), its
last warp and that warp's lead, the warps' busy share, a task with a missing stamp left out, the marks inside stages
(stamped by some warps), and a file whose size disagrees with its header, whose stamp count is neither form's, or
whose header is an earlier format's (KDACLK1 with departure stamps, KDACLK2 with S4's marks), refused."""
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
STAMPS = 1 + BARS
LENGTHS = [100 * (k + 1) for k in range(BARS + 1)]  # stage k's cycles; the last is S5c's tail


# The marks of the file with them: (mark, the warps that stamp it, cycles into its stage of warp w's stamp).
MARKED = [(0, range(4), lambda w: 30 + w), (1, range(WARPS), lambda w: 100 + 2 * w), (2, range(6), lambda w: 200 + w),
          (3, range(WARPS), lambda w: 5 + w)]


def make_file(path, hole=None, marks=False):
    stamps = STAMPS + (len(sc.MARKS) if marks else 0)
    v = array.array("Q", [0] * (CTAS * WARPS * TASKS * stamps))

    def put(c, w, t, s, x):
        v[((c * WARPS + w) * TASKS + t) * stamps + s] = x

    for c in range(CTAS):
        start = 5000 + 777 * c
        for t in range(TASKS):
            begin = start
            for w in range(WARPS):
                put(c, w, t, 0, start)
            begins = []
            for k in range(BARS):
                begins.append(begin)
                release = begin + LENGTHS[k]
                for w in range(WARPS):
                    # stage 3 waits on warp 5 (150 cycles after the next); elsewhere warp 0 comes last, 1 ahead
                    arrive = (release if w == 5 else release - 150 - w) if k == 3 else release - w
                    put(c, w, t, 1 + k, arrive)
                begin = release
            begins.append(begin)
            if marks:
                for i, ws, at in MARKED:
                    for w in ws:
                        put(c, w, t, STAMPS + i, begins[sc.MARKS[i][1]] + at(w))
            start = begin + LENGTHS[BARS]
    if hole:
        put(*hole, 0)
    with open(path, "wb") as f:
        f.write(sc.MAGIC + struct.pack("<4i", CTAS, WARPS, TASKS, stamps) + v.tobytes())


def test_stages_last_warp_and_busy():
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "clk"
        make_file(p, hole=(1, 3, 2, 7))  # CTA 1, warp 3, task 2: one stamp missing
        rows, marks = sc.summarize(*sc.read(p), skip=1)
        assert marks == []
        assert [r["name"] for r in rows] == sc.STAGES
        for k, r in enumerate(rows):
            assert r["n"] == 3  # tasks 1 and 2 of each CTA (task 3 has no next), less the one with the hole
            assert r["cycles"] == LENGTHS[k]
            if k == 3:
                assert (r["last_warp"], r["last_share"], r["lead"]) == (5, 1.0, 150)
            elif k < BARS:
                assert (r["last_warp"], r["lead"]) == (0, 1)
        # stage 0's warps arrive w cycles before its release at 100: busy (100 - w) / 100 on average
        assert abs(rows[0]["busy"] - sum((100 - w) / 100 for w in range(WARPS)) / WARPS) < 1e-12
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "stage_clocks.py"), str(p)], check=True,
                             capture_output=True, text=True).stdout
        assert "S3 products" in out and "sum of medians" in out


def refused(magic, stamps, values):
    """stage_clocks.py's stderr on a file of `magic`, a header of one CTA x 16 warps x 2 tasks x `stamps` and `values`
    zero stamps; it must exit with an error."""
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "clk"
        with open(p, "wb") as f:
            f.write(magic + struct.pack("<4i", 1, 16, 2, stamps) + bytes(8 * values))
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "stage_clocks.py"), str(p)],
                           capture_output=True, text=True)
        assert r.returncode != 0
        return r.stderr


def test_size_mismatch_refused():
    assert "header says" in refused(sc.MAGIC, STAMPS, 10)


def test_marks():
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "clk"
        make_file(p, marks=True)
        rows, marks = sc.summarize(*sc.read(p), skip=1)
        assert [r["cycles"] for r in rows] == LENGTHS  # the marks leave the stages as they were
        assert [m["name"] for m in marks] == [name for name, _ in sc.MARKS]
        for m, (i, ws, at) in zip(marks, MARKED):
            assert m["n"] == 4  # tasks 1 and 2 of each CTA
            assert (m["cycles"], m["last_warp"], m["warps"]) == (at(ws[-1]), ws[-1], len(ws))
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "stage_clocks.py"), str(p)], check=True,
                             capture_output=True, text=True).stdout
        assert "S4 round 0 done" in out and "S5c rows issued" in out


def test_stamp_count_refused():
    assert "stamps a warp" in refused(sc.MAGIC, STAMPS + 1, 16 * 2 * (STAMPS + 1))


def test_old_formats_refused():
    assert "KDACLK1: departure stamps" in refused(b"KDACLK1\0", 1 + 2 * BARS, 16 * 2 * (1 + 2 * BARS))
    assert "KDACLK2: marks 1-2" in refused(b"KDACLK2\0", STAMPS + 4, 16 * 2 * (STAMPS + 4))


# The state pass's file (stage_clocks.h state::): 8 warps, 7 stamps a step. Each warpgroup's points, in cycles from
# the step's start (stamps 0 and 1), phase A's release (2, 3, 4) or phase B's (5, 6); each group's warp 0 stamps
# last, the others 1-3 cycles before it. Phase A's barrier releases at 100 (the chain last, 40 after the output), B's
# at A's + 1000 (the output last, 250 after the chain), the next step starts at B's + 950.
STATE_AT = {"chain": [0, 100, 500, 700, 750, 600, 900], "output": [0, 60, 300, 300, 1000, 200, 600]}


def make_state_file(path, products=True):
    ctas, warps, steps, stamps = 2, 8, 4, 7
    v = array.array("Q", [0] * (ctas * warps * steps * stamps))
    for c in range(ctas):
        start = 9000 + 333 * c
        for t in range(steps):
            rel_a, rel_b = start + 100, start + 1100
            for w in range(warps):
                g = "chain" if w < 4 else "output"
                x = STATE_AT[g]
                base = [start, start, rel_a, rel_a, rel_a, rel_b, rel_b]
                for s in range(stamps):
                    if not products and g == "output" and s in (2, 5):
                        continue
                    jitter = 0 if s == 0 else w % 4
                    v[((c * warps + w) * steps + t) * stamps + s] = base[s] + x[s] - jitter
            start = rel_b + 950
    with open(path, "wb") as f:
        f.write(sc.STATE_MAGIC + struct.pack("<4i", ctas, warps, steps, stamps) + v.tobytes())


def test_state_pass_spans_and_parts():
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "clk.state"
        make_state_file(p)
        kind, *rest = sc.read_any(p)
        assert kind == "state"
        spans, parts = sc.summarize_state(*rest, skip=1)
        got = {r["name"]: r for r in spans}
        assert [got[k]["cycles"] for k in ("A: to its barrier", "B: to its barrier", "tail: to the next step",
                                            "step")] == [100, 1000, 950, 2050]
        assert all(r["n"] == 4 for r in spans)  # steps 1 and 2 of each CTA (step 3 has no next)
        assert (got["A: to its barrier"]["last_group"], got["A: to its barrier"]["lead"]) == ("chain", 40)
        assert (got["B: to its barrier"]["last_group"], got["B: to its barrier"]["lead"]) == ("output", 250)
        assert parts["chain"] == {"A: copies' wait": 100, "A: products": 500, "A: work after": 200,
                                  "B: copies' wait": 50, "B: products": 600, "B: work after": 300}
        assert parts["output"] == {"A: copies' wait": 60, "A: products": 300, "A: work after": 0,
                                   "B: copies' wait": 700, "B: products": 200, "B: work after": 400}
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "stage_clocks.py"), str(p)], check=True,
                             capture_output=True, text=True).stdout
        assert "the state pass" in out and "B: copies' wait" in out


def test_state_pass_without_output_products():
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "clk.state"
        make_state_file(p, products=False)
        _, *rest = sc.read_any(p)
        _, parts = sc.summarize_state(*rest, skip=1)
        assert parts["output"] == {"A: copies' wait": 60, "A: work": 300, "B: copies' wait": 700, "B: work": 600}
