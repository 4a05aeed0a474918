// state_stage.cuh: a chain's [64][128] fp32 state tile moved between a tensor in global memory and a dense
// shared-memory buffer [64][128], by all of the CTA's threads in compact loops: the start and end of the sm90 state
// and reverse passes (initial_state / final_state, dS_final / dh0), where each thread then takes its own fragment
// from the buffer or puts it there.
// Why: the thread's fragment read or written in place (64 elements, each with its own state_offset) unrolled into
// ~4,500 straight-line instructions each way, run once a chain, so never from the instruction cache: the state
// pass's prologue was 4% of its h64-fixed time (~27 us, ncu session 18), and a chain's start and end ~30 us, which
// put the wgmma state pass 60 us behind the mma.sync one at h64-mixed (~6 chains an SM) and ~200 us at h96-uniform.
// Device code (state_wgmma.cu, reverse_wgmma.cu).
#pragma once

namespace kda::cuda::sm90 {

constexpr int kStageRows = 64, kStageCols = 128;

// The element of step i of thread tid: rows_fastest walks r across consecutive threads (for tensors whose unit
// stride is along r), else c, so the global side is coalesced in either state layout.
struct StageElem {
  int r, c;
};
template <int kThreads>
__device__ __forceinline__ StageElem stage_elem(int tid, int i, bool rows_fastest) {
  const int e = tid + i * kThreads;
  return rows_fastest ? StageElem{e % kStageRows, e / kStageRows} : StageElem{e / kStageCols, e % kStageCols};
}

// dst[r][c] = at(r, c) over the tile, kBatch loads in flight a thread before their stores (an unrolled batch inside
// a loop that is not: a few hundred instructions). The caller synchronizes before anyone reads dst.
template <int kThreads, class At>
__device__ __forceinline__ void stage_in(float* dst, bool rows_fastest, int tid, At at) {
  constexpr int kPer = kStageRows * kStageCols / kThreads, kBatch = 8;
  static_assert(kPer % kBatch == 0, "stage_in: whole batches a thread");
#pragma unroll 1
  for (int i0 = 0; i0 < kPer; i0 += kBatch) {
    float x[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const StageElem s = stage_elem<kThreads>(tid, i0 + j, rows_fastest);
      x[j] = at(s.r, s.c);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const StageElem s = stage_elem<kThreads>(tid, i0 + j, rows_fastest);
      dst[s.r * kStageCols + s.c] = x[j];
    }
  }
}

// put(r, c, src[r][c]) over the tile. The caller synchronizes after the last write of src.
template <int kThreads, class Put>
__device__ __forceinline__ void stage_out(const float* src, bool rows_fastest, int tid, Put put) {
  constexpr int kPer = kStageRows * kStageCols / kThreads;
#pragma unroll 4
  for (int i = 0; i < kPer; ++i) {
    const StageElem s = stage_elem<kThreads>(tid, i, rows_fastest);
    put(s.r, s.c, src[s.r * kStageCols + s.c]);
  }
}

}  // namespace kda::cuda::sm90
