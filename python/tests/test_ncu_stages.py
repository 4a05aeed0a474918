"""scripts/ncu_stages.py: a profile's SASS rows attributed to CUDA lines through the build's disassembly, and a
disassembly of another build refused (an opcode that differs at an offset), on a hand-made three-instruction kernel."""
import gzip
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

CSV = '''"Kernel Name","void k(int)",
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_barrier"
"0x7f0000001000","      LDC R1, c[0x0][0x28]","10","4","0"
"0x7f0000001010","      BAR.SYNC.DEFER_BLOCKING 0x0","60","4","55"
"0x7f0000001020","      EXIT","30","4","0"
'''

SASS = '''.text._Z1ki:
	//## File "/b/src/cuda/k.cu", line 7
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "/b/src/cuda/h.cuh", line 3 inlined at "/b/src/cuda/k.cu", line 9
        /*0010*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
	//## File "/b/src/cuda/k.cu", line 12
        /*0020*/                   {OP} ;
'''


def run(tmp_path, last_op, *extra):
    csv = tmp_path / "p.csv.gz"
    with gzip.open(csv, "wt") as f:
        f.write(CSV)
    sass = tmp_path / "p.sass"
    sass.write_text(SASS.replace("{OP}", last_op))
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "ncu_stages.py"), str(csv), "--sass", str(sass),
                           *extra],
                          capture_output=True, text=True, timeout=60)


def test_lines_attributed(tmp_path):
    r = run(tmp_path, "EXIT")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if ".cu" in x and "samples" in x]
    assert lines[0].split()[0] == "h.cuh:3" and "(in k.cu:9)" in lines[0] and "samples  60.0%" in lines[0], r.stdout
    assert lines[1].split()[0] == "k.cu:12" and "samples  30.0%" in lines[1], r.stdout
    assert lines[2].split()[0] == "k.cu:7" and "instructions  33.3%" in lines[2], r.stdout


def test_other_build_refused(tmp_path):
    r = run(tmp_path, "RET.REL.NODEC R20 0x0")
    assert r.returncode != 0 and "no function of the disassembly matches" in (r.stdout + r.stderr)


def test_ranges_sum_lines_inlined_at_their_call(tmp_path):
    # k.cu 7-9 holds line 7 and, through h.cuh:3 inlined at k.cu:9, the barrier; k.cu 10-12 the EXIT.
    r = run(tmp_path, "EXIT", "--range", "head=k.cu:7-9", "--range", "tail=k.cu:10-12", "--range", "none=h.cuh:1-9")
    assert r.returncode == 0, r.stderr
    assert "range head: samples  70.0%  instructions  66.7%" in r.stdout, r.stdout
    assert "range tail: samples  30.0%  instructions  33.3%" in r.stdout, r.stdout
    assert "range none: samples   0.0%" in r.stdout, r.stdout  # inlined code counts at its call line


def test_static_counts_the_code_of_the_named_kernel_per_range(tmp_path):
    sass = tmp_path / "p.sass"
    sass.write_text(SASS.replace("{OP}", "EXIT"))
    cmd = [sys.executable, str(ROOT / "scripts" / "ncu_stages.py"), "--static", "_Z1k", "--sass", str(sass),
           "--range", "head=k.cu:7-9", "--range", "tail=k.cu:10-12"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "3 SASS instructions" in r.stdout and "range head: 2 instructions" in r.stdout, r.stdout
    assert "range tail: 1 instructions" in r.stdout, r.stdout
    r = subprocess.run(cmd[:3] + ["_Z9other"] + cmd[4:6], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "no function of the disassembly" in (r.stdout + r.stderr)
