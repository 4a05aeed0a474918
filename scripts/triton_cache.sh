# triton_cache.sh: Triton's cache (FLA's compiled kernels and its autotuning picks) carried between device calls, so
# that FLA's compiling and autotuning (326-390 s for one training workload on a fresh machine, session 49; the seven
# prefill workloads ran past a 400 s limit in sessions 55 and 56) is paid once. Sourced by gpu_check.sh and
# lease_lib.sh from the repository root.
#   triton_cache_restore   TRITON_CACHE_DIR from .carry/triton/part-* where a call carries them, with
#                          TRITON_CACHE_AUTOTUNING=1: the autotuner saves its picks there and skips its timing runs
#                          when a pick is found
#   triton_cache_save      the cache, slimmed to what a cache hit loads (triton_cache_slim.py), as gzip parts of
#                          15 MiB in $OUT/triton/ (a call hands back files of at most 16 MiB; session 56's whole cache
#                          was over that), written aside and moved into place whole, so a call cut off mid-write keeps
#                          the previous parts (gzip, not xz: session 15's xz of the cache ran ~60 s and was cut off);
#                          copy them to .carry/triton/ here for the next call
triton_cache_restore() {
  # One path on every machine: a group file names its files by absolute path.
  export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/kda-triton-cache} TRITON_CACHE_AUTOTUNING=1
  mkdir -p "$TRITON_CACHE_DIR"
  if compgen -G ".carry/triton/part-*" > /dev/null; then cat .carry/triton/part-* | tar -xzf - -C "$TRITON_CACHE_DIR"; fi
}
triton_cache_save() {
  [ -n "$(ls -A "${TRITON_CACHE_DIR:-/nonexistent}" 2>/dev/null)" ] || return 0
  python3 scripts/triton_cache_slim.py "$TRITON_CACHE_DIR"
  rm -rf "$OUT/triton-part" && mkdir -p "$OUT/triton-part" &&
    tar -czf - -C "$TRITON_CACHE_DIR" . | split -b 15m - "$OUT/triton-part/part-" &&
    rm -rf "$OUT/triton" && mv "$OUT/triton-part" "$OUT/triton" && du -sh "$OUT/triton"
}
