// checkpoints.h: index arithmetic of the prefix-cache state checkpoints (kda_forward_args_t::state_checkpoints),
// shared by host and device code so that the CUDA kernels walk the same schedule the CPU backends write.
//
// Checkpoint j of sequence n holds the state after checkpoint_tokens(n, j) tokens of that sequence (0: the initial
// state). Counts outside [0, len] are never written; several entries may share one count (each is written); the
// offsets need not be increasing. A kernel walks the distinct counts in increasing order: it starts from
// next_checkpoint_count(p, n, len, -1) and, after writing every entry of count c, asks for the next count after c.
// kNoCheckpoint (larger than any token count) ends the walk, so a kernel can compare its token counter with the
// next count without a separate "checkpoints on" test.
#pragma once

#include <stdint.h>

#include "common/params.h"

namespace kda {

constexpr int64_t kNoCheckpoint = INT64_MAX;

// Folds count t into `best`, the smallest count seen so far in (after, len]: the min-reduction step of the
// search for the next count (a count <= after is already written, one past len is never written).
KDA_HOST_DEVICE int64_t checkpoint_fold_next(int64_t best, int64_t t, int64_t after, int64_t len) {
  return (t > after && t <= len && t < best) ? t : best;
}

// Fixed-interval form (count of entry j = (j + 1) * interval, interval > 0): the entry holding count `count`,
// or -1 when none does.
KDA_HOST_DEVICE int64_t interval_checkpoint_index(int64_t count, int64_t interval, int64_t n_ckpt) {
  if (count <= 0 || interval <= 0 || count % interval != 0) return -1;
  const int64_t j = count / interval - 1;
  return j < n_ckpt ? j : -1;
}

// Fixed-interval form: the smallest count in (after, len] held by one of the n_ckpt entries, or kNoCheckpoint.
KDA_HOST_DEVICE int64_t interval_next_checkpoint(int64_t interval, int64_t n_ckpt, int64_t len, int64_t after) {
  if (interval <= 0) return kNoCheckpoint;
  const int64_t j = after < 0 ? 0 : after / interval;  // first entry whose count (j + 1) * interval exceeds after
  if (j >= n_ckpt) return kNoCheckpoint;
  const int64_t t = (j + 1) * interval;
  return t <= len ? t : kNoCheckpoint;
}

// The smallest checkpoint count of sequence n (of len tokens) in (after, len], or kNoCheckpoint (also without
// checkpoints). after = -1 starts the walk (count 0, the initial state, is a legal count). A sequential scan over
// the entries: the CUDA kernels split the same scan over a warp's lanes with checkpoint_fold_next.
KDA_HOST_DEVICE int64_t next_checkpoint_count(const ForwardParams& p, int64_t n, int64_t len, int64_t after) {
  if (!p.has_checkpoints()) return kNoCheckpoint;
  if (p.ckpt_offsets.data == nullptr) return interval_next_checkpoint(p.ckpt_interval, p.n_ckpt, len, after);
  int64_t best = kNoCheckpoint;
  for (int64_t j = 0; j < p.n_ckpt; ++j) best = checkpoint_fold_next(best, p.checkpoint_tokens(n, j), after, len);
  return best;
}

}  // namespace kda
