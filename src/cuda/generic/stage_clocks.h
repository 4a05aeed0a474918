// stage_clocks.h: phase 1's per-warp clock stamps (chunk_prepare.cu), compiled in only with -DKDA_STAGE_CLOCKS=ON
// (scripts/gpu_build.sh --stage-clocks): when each warp of a task reached each of the task loop's CTA barriers
// (and a few marks inside stages), in the SM's cycles. ncu's stall samples say where warps wait; these say
// which warp's work each barrier waited for, stage by stage, i.e. phase 1's critical path (kda-bench --stage-clocks,
// scripts/stage_clocks.py).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/params.h"  // KDA_HOST_DEVICE

namespace kda::stage_clocks {

// The task loop's CTA barriers of a plain forward, in order: S0, S0b, S2a, S1, S2b, S3, S4, S5a (T's planes), S5c.
// (The 3xTF32 S5 of a backward's recompute has two of its own, not stamped: its stamp 1 + 7 stays 0.)
constexpr int kBarriers = 9;
// Marks inside stages, stamped by the warps that pass them (scripts/stage_clocks.py MARKS):
//   0  S4's round 0 done (warps 0-3);
//   1  S0's rows staged (every warp: its loads arrived and were converted; v's are used past S0's barrier);
//   2  S0: the previous task's bulk copies read out (warps 0-5, which issued them, wait for that there);
//   3  S5c's row loads of the next task issued (every warp).
// Marks 1-2 say which of the loads and the copies S0's barrier waits for. (Until session 60 marks 1-2 were S4's stage
// 1 and 2 ends: file format KDACLK2.)
constexpr int kMarks = 4;
// The file's first 8 bytes (tools/common/device.cpp writes it, scripts/stage_clocks.py reads it): a new number
// whenever what a stamp means changes.
constexpr char kMagic[8] = "KDACLK3";
// The task's start, each barrier's arrival, then the marks. No departures: a barrier releases at its last arrival,
// and a clock read after BAR.SYNC.DEFER_BLOCKING issues before the release (session 59: such stamps were about their
// warp's arrival, and stages measured between them ended at a barrier's first arrival).
constexpr int kStamps = 1 + kBarriers + kMarks;
constexpr int kWarps = 16;                  // phase 1's CTA (kThreads = 512)
constexpr int kMaxTasks = 128;              // a CTA's first tasks that are recorded

// The stamp of (CTA, warp, the CTA's task number t, stamp s) in a buffer of ctas x kWarps x kMaxTasks x kStamps
// uint64 values, zero where nothing was written.
KDA_HOST_DEVICE constexpr int64_t index(int64_t cta, int warp, int t, int s) {
  return ((cta * kWarps + warp) * kMaxTasks + t) * kStamps + s;
}
KDA_HOST_DEVICE constexpr size_t buffer_bytes(int ctas) {
  return static_cast<size_t>(ctas) * kWarps * kMaxTasks * kStamps * 8;
}

// Points the next forwards' phase 1 at `buf` (device memory of buffer_bytes(ctas), zeroed by the caller; CTAs at or
// past `ctas` record nothing); nullptr turns the stamps off. Returns the cudaError_t of the symbol copy (0: success).
// Defined only in a build with KDA_STAGE_CLOCKS.
int set_buffer(void* buf, int ctas);

}  // namespace kda::stage_clocks
