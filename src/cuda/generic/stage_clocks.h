// stage_clocks.h: per-warp clock stamps of phase 1 (chunk_prepare.cu) and of the sm_90a state pass (state_wgmma.cu),
// compiled in only with -DKDA_STAGE_CLOCKS=ON (scripts/gpu_build.sh --stage-clocks): when each warp of a task (a
// chunk step) reached each of the loop's CTA barriers (and a few marks inside stages), in the SM's cycles. ncu's stall
// samples say where warps wait; these say which warp's work each barrier waited for, stage by stage, i.e. the
// critical path (kda-bench --stage-clocks, scripts/stage_clocks.py).
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

// Where a kernel's stamps go: the device buffer, and how many of its first CTAs record (none without a buffer). Each
// instrumented kernel keeps one in constant memory: a stamp's read of it is then no load to wait for, which from
// global memory could also queue behind the kernel's own loads (phase 1's S5c rows).
struct Buffer {
  unsigned long long* buf;
  int ctas;
};
inline Buffer make_buffer(void* buf, int ctas) { return {static_cast<unsigned long long*>(buf), buf ? ctas : 0}; }

// Points the next forwards' phase 1 at `buf` (device memory of buffer_bytes(ctas), zeroed by the caller; CTAs at or
// past `ctas` record nothing); nullptr turns the stamps off. Returns the cudaError_t of the symbol copy (0: success).
// Defined only in a build with KDA_STAGE_CLOCKS.
int set_buffer(void* buf, int ctas);

// The state pass (state_wgmma.cu, the forward's instances): a CTA walks a chain's chunks in steps of two phases,
// each ending at a CTA barrier; its two warpgroups are the chain (warps 0-3) and the output (warps 4-7). Each warp's
// lane 0 stamps, a step:
//   0  the step's start;
//   1  its arrival at phase A's barrier (group A's copies seen landed: the mbarrier's wait is before the barrier);
//   2  phase A's products done (chain: W S^T; output: Qg S^T);
//   3  phase A's work done (chain: V_new's planes stored);
//   4  its arrival at phase B's barrier (group B landed);
//   5  phase B's products done (chain: the decay and V_new^T Kd; output: A_qk V_new);
//   6  phase B's work done (chain: S's planes stored; output: o stored).
// A warpgroup without a product in a phase (the backward's recompute's output warps) leaves 2 and 5 at zero.
namespace state {
constexpr char kMagic[8] = "KDASTC1";
constexpr int kStamps = 7;
constexpr int kWarps = 8;       // state_wgmma.cu's kThreads = 256
constexpr int kMaxSteps = 128;  // a CTA's first chunk steps that are recorded
KDA_HOST_DEVICE constexpr int64_t index(int64_t cta, int warp, int step, int s) {
  return ((cta * kWarps + warp) * kMaxSteps + step) * kStamps + s;
}
KDA_HOST_DEVICE constexpr size_t buffer_bytes(int ctas) {
  return static_cast<size_t>(ctas) * kWarps * kMaxSteps * kStamps * 8;
}
// As stage_clocks::set_buffer, for the state pass's CTAs below `ctas`.
int set_buffer(void* buf, int ctas);
}  // namespace state

}  // namespace kda::stage_clocks
