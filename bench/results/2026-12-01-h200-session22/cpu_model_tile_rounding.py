"""cpu_model_tile_rounding.py: scripts/models/chunk_backward_rounding.py with one of the recompute's phase-1 tiles
rounded after it is formed (PERTURB=TILE:HOW, TILE one of Qg Kd Aqk W U Ap Tm, HOW tf32 (nearest), rz (tf32 toward
zero) or bf16), as an outside implementation for kda-verify: which tile's precision gives the H200's signature on
backward-full's near-identical keys at beta = 2 (session 22). Run from the repository root:
  PERTURB=Aqk:tf32 build-cpu/kda-verify --suite backward-full --fp32-grads --seed 14329222173504304775 \
    --filter near_identical_keys_beta_at_2 --json /tmp/m.json --impl "cmd:python3 \
    bench/results/2026-12-01-h200-session22/cpu_model_tile_rounding.py --form kernels --pairs blocked --products bf16x3"
Measured (relative RMSE dq / dk / dv): plan 3.99e-4 / 2.46e-4 / 3.91e-4; Aqk:tf32 3.99e-4 / 2.49e-4 / 2.26e-3;
Aqk:rz 3.99e-4 / 2.48e-4 / 2.38e-3; Aqk:bf16 3.99e-4 / 3.35e-4 / 1.64e-2; Tm:tf32 3.99e-4 / 2.46e-4 / 7.50e-4;
Ap:tf32 3.99e-4 / 2.46e-4 / 3.91e-4; U:tf32 2.33e-3 / 2.28e-3 / 3.91e-4; Kd:tf32 1.45e-2 / 4.39e-3 / 1.43e-2;
Qg:tf32 3.99e-4 / 3.10e-4 / 4.27e-4. The H200 (main): dv 3.39e-3, the worst gradient.
"""
import os
import sys
import numpy as np
_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'scripts')
sys.path.insert(0, os.path.join(_ROOT, 'models'))
sys.path.insert(0, os.path.join(_ROOT, 'verify_impls'))
import chunk_backward_rounding as cbr  # noqa: E402
import two_phase as tp  # noqa: E402
mode, how = os.environ['PERTURB'].split(':')
orig = tp.phase1


def rz(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return u.view(np.float32)


def ph(*a, **k):
    r = list(orig(*a, **k))  # Qg, Kd, dec, Aqk, W, U, Ap, Tm
    idx = {'Qg': 0, 'Kd': 1, 'Aqk': 3, 'W': 4, 'U': 5, 'Ap': 6, 'Tm': 7}[mode]
    r[idx] = rz(r[idx]) if how == 'rz' else tp.bf16(r[idx]) if how == 'bf16' else tp.tf32(r[idx])
    return tuple(r)


tp.phase1 = ph
cbr.main(sys.argv[1:])
