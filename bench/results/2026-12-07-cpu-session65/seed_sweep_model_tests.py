# Calls the seeded tests of python/tests modules directly over many seeds (session 65), from the repository root:
# python3 seed_sweep_model_tests.py MODULE[,MODULE...] N FIRST; prints each case's failures with their seeds and its time.
import sys, os, time, inspect, importlib
sys.path.insert(0, "python/tests")
import pytest
mods = sys.argv[1].split(",")
n = int(sys.argv[2]); base = int(sys.argv[3])
class MP:  # minimal monkeypatch
    def __init__(self): self.undo = []
    def setattr(self, obj, name, val, raising=True):
        self.undo.append((obj, name, getattr(obj, name))); setattr(obj, name, val)
    def close(self):
        for o, nme, v in reversed(self.undo): setattr(o, nme, v)
for m in mods:
    mod = importlib.import_module(m)
    for name, fn in inspect.getmembers(mod, inspect.isfunction):
        if not name.startswith("test_") or "seed" not in inspect.signature(fn).parameters: continue
        marks = getattr(fn, "pytestmark", [])
        grids = [dict()]
        for mk in marks:
            if mk.name == "parametrize":
                argn = [a.strip() for a in mk.args[0].split(",")]
                vals = mk.args[1]
                grids = [dict(g, **dict(zip(argn, v if len(argn) > 1 else (v,)))) for g in grids for v in vals]
        for g in grids:
            t = time.time(); fails = []
            for s in range(base, base + n):
                mp = MP()
                if "torch" in sys.modules: sys.modules["torch"].manual_seed(s)
                kw = dict(g, seed=s)
                if "monkeypatch" in inspect.signature(fn).parameters: kw["monkeypatch"] = mp
                try: fn(**kw)
                except pytest.skip.Exception: break
                except Exception as e: fails.append((s, str(e)[:150].replace("\n", " ")))
                finally: mp.close()
            print(f"{m}.{name}{g}: {len(fails)}/{n} failed, {(time.time()-t)/n*1000:.0f} ms each", flush=True)
            for f in fails[:5]: print("   seed", f[0], f[1], flush=True)
