"""scripts/triton_cache.sh and triton_cache_slim.py on a stand-in Triton cache: the save drops the intermediate forms
and rewrites each group file to name only the files kept (a group naming a missing file is a cache miss to Triton),
keeps the binary, the metadata and the autotuner's picks, hands the cache back in parts of at most 15 MiB, and the
restore from those parts gives the slimmed cache back at the same path with autotuning picks switched on."""
import json
import os
import pathlib
import shutil
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORMS = ["k.ttir", "k.ttgir", "k.llir", "k.ptx", "k.source", "k.cubin", "k.json"]


def test_save_slims_and_restore_round_trips():
    tmp = pathlib.Path(tempfile.mkdtemp())
    try:
        cache, out, work = tmp / "cache", tmp / "out", tmp / "work"
        kdir = cache / "abc"
        kdir.mkdir(parents=True)
        out.mkdir()
        for f in FORMS:
            (kdir / f).write_bytes(os.urandom(4096))  # incompressible: the parts' sizes mean something
        (kdir / "__grp__k.json").write_text(json.dumps({"child_paths": {f: str(kdir / f) for f in FORMS}}))
        (kdir / "pick.autotune.json").write_text('{"best": 1}')
        (cache / "big").mkdir()
        (cache / "big" / "large.cubin").write_bytes(os.urandom(17 << 20))  # over one part
        env = dict(os.environ, OUT=str(out), TRITON_CACHE_DIR=str(cache))
        subprocess.run(["bash", "-c", "source scripts/triton_cache.sh; triton_cache_save"], cwd=ROOT, env=env,
                       check=True, capture_output=True, text=True)
        assert sorted(p.name for p in kdir.iterdir()) == ["__grp__k.json", "k.cubin", "k.json", "pick.autotune.json"]
        group = json.loads((kdir / "__grp__k.json").read_text())["child_paths"]
        assert group == {"k.cubin": str(kdir / "k.cubin"), "k.json": str(kdir / "k.json")}
        parts = sorted((out / "triton").iterdir())
        assert len(parts) == 2 and all(p.stat().st_size <= 15 << 20 for p in parts)
        assert not (out / "triton-part").exists()
        # The next call: the parts carried as .carry/triton, the cache restored where it was.
        want = {p.relative_to(cache): p.read_bytes() for p in cache.rglob("*") if p.is_file()}
        shutil.rmtree(cache)
        (work / ".carry" / "triton").mkdir(parents=True)
        for p in parts:
            shutil.copy(p, work / ".carry" / "triton" / p.name)
        r = subprocess.run(["bash", "-c", f"source {ROOT}/scripts/triton_cache.sh; triton_cache_restore; "
                            "echo $TRITON_CACHE_DIR $TRITON_CACHE_AUTOTUNING"],
                           cwd=work, env=env, check=True, capture_output=True, text=True)
        assert r.stdout.split() == [str(cache), "1"]
        got = {p.relative_to(cache): p.read_bytes() for p in cache.rglob("*") if p.is_file()}
        assert got == want
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
