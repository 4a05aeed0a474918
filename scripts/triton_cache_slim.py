"""triton_cache_slim.py DIR: drop the intermediate forms (ttir, ttgir, llir, ptx, source) from a Triton cache, keeping
what a cache hit loads: each kernel's binary (cubin), its metadata JSON and the group file naming them (rewritten to
name only the files kept: Triton treats a group naming a missing file as a miss), and the autotuner's saved picks.
FLA's cache after the prefill workloads was over the 16 MiB a device call hands back (session 56), mostly those forms.

usage: python3 scripts/triton_cache_slim.py DIR   (prints the bytes before and after)"""
import json
import os
import sys

DROP = (".ttir", ".ttgir", ".llir", ".ptx", ".source", ".json.tmp")


def size(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        raise SystemExit(__doc__)
    root = sys.argv[1]
    before = size(root)
    for d, _, files in os.walk(root):
        for f in files:
            if not (f.startswith("__grp__") and f.endswith(".json")):
                continue
            path = os.path.join(d, f)
            with open(path) as fh:
                group = json.load(fh)
            children = group.get("child_paths", {})
            keep = {name: p for name, p in children.items() if not name.endswith(DROP)}
            for name, p in children.items():
                if name not in keep and os.path.exists(p):
                    os.remove(p)
            group["child_paths"] = keep
            with open(path + ".part", "w") as fh:
                json.dump(group, fh)
            os.replace(path + ".part", path)
    print(f"triton_cache_slim: {before} -> {size(root)} bytes")


if __name__ == "__main__":
    main()
