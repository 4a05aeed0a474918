#!/usr/bin/env bash
# Session 32, call 3 (~120 s, on the machine call 2 left warm, Triton's cache still there): call 1's prefill part
# again, alone: bench_torch.py --part prefill, fla / kda on the six standard workloads in one process, main = 9657eae.
# Ran as one command line (this file is that line): carry [".carry/lease", ".carry/ab/main.tar.xz",
# ".carry/ab/main.COMMIT", ".whl"]; /tmp/ab/main and /tmp/site were call 2's.
mkdir -p $OUT && export LD_LIBRARY_PATH=/tmp/ab/main KDA_TORCH_LIBRARY=/tmp/ab/main/libkda_torch.so PYTHONPATH="/tmp/site:$PWD/python"; timeout 280 python3 scripts/bench_torch.py --part prefill --impl fla --impl kda --iters 100 --commit 9657eae --json $OUT/peers_prefill.json > $OUT/peers_prefill.log 2>&1; echo rc=$?; grep -E "^[a-z0-9-]+:|median|/ fla" $OUT/peers_prefill.log; date -u
