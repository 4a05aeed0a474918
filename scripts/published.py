"""published.py: the peers' H200 figures published in the workloads spec (../shared/spec/workloads.md, 2026-11-29),
for the columns no run here can measure (FlashKDA is not on PyPI) and for plots of files without a measured peer.
Fixed references, labelled as such wherever they are printed; never a substitute for a same-run measurement."""
# FlashKDA, ms per call.
FLASHKDA_MS = {"h96-fixed": 1.407, "h96-mixed": 1.396, "h96-uniform": 1.193,
               "h64-fixed": 1.193, "h64-mixed": 1.020, "h64-uniform": 0.812}
# FLA chunk_kda (safe_gate=True), ms per call.
FLA_SPEC_MS = {"h96-fixed": 2.626, "h96-mixed": 2.672, "h96-uniform": 2.638,
               "h64-fixed": 1.756, "h64-mixed": 1.809, "h64-uniform": 1.808}
