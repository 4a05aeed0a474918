// chunk_segments.cu: the state pass with its chains cut into segments, for few chains on many SMs (chunk_map.h
// plan_segments; docs/hopper.md "Few heads, long sequences"): pass 1 and pass 2 of the generic state kernel
// (chunk_state.cu, SegmentArgs) and, between them, the combine that hands each segment its exact start state.
// Everything in the caller's workspace (chunk_map.h segment_layout, after the forward's own regions), on the caller's
// stream, no host sync: the plan is a function of the shapes and the SM count alone.
#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"

namespace kda::cuda::chunk {
namespace {

constexpr int kCombineRows = 16;  // state rows a CTA carries through the combine

// X_{j+1} = X_j M_j + B_j for j = 1 .. s - 2 (X_1: pass 1's end of segment 0), in fp32 with the terms summed in k
// order from B_j. One CTA per (chain, 16 rows of X), K threads, thread d owning column d: a row of X depends on its
// own row only, so the chains' rows run in parallel and only the s - 2 steps are sequential. Its rows of X in shared
// memory (16 K floats), M_j's row k read by all K threads at once (coalesced, from L2).
template <int K>
__global__ void __launch_bounds__(K) combine_kernel(int V, int s, const float* ends, float* starts) {
  __shared__ float X[kCombineRows][K];
  const int blocks_per_chain = V / kCombineRows;
  const int64_t chain = blockIdx.x / blocks_per_chain;
  const int r0 = static_cast<int>(blockIdx.x % blocks_per_chain) * kCombineRows, d = threadIdx.x;
  const int64_t VK = int64_t{V} * K;
#pragma unroll
  for (int r = 0; r < kCombineRows; ++r) X[r][d] = starts[segment_start_at(chain, 1, s, V, K) + (r0 + r) * K + d];
  for (int j = 1; j + 1 < s; ++j) {
    __syncthreads();  // X complete (the loads above, or the previous step's stores)
    const float* const e = ends + segment_end_at(chain, j, s, V, K);  // B_j's V rows, then M_j's K rows
    float acc[kCombineRows];
#pragma unroll
    for (int r = 0; r < kCombineRows; ++r) acc[r] = e[int64_t{r0 + r} * K + d];
    for (int k = 0; k < K; ++k) {
      const float m = e[VK + int64_t{k} * K + d];
#pragma unroll
      for (int r = 0; r < kCombineRows; ++r) acc[r] = fmaf(X[r][k], m, acc[r]);
    }
    __syncthreads();  // every read of X_j done
#pragma unroll
    for (int r = 0; r < kCombineRows; ++r) {
      X[r][d] = acc[r];
      starts[segment_start_at(chain, j + 1, s, V, K) + (r0 + r) * K + d] = acc[r];
    }
  }
}

}  // namespace

SegmentPlan segment_plan(const ForwardParams& p, int sms) {
  // Not where the forward keeps the state pass's intermediates for a backward (the saving forward, the recompute:
  // they take the unsplit pass), and not for K = 64's transition rows below one 64-row tile (K % bv, plan_segments).
  if (p.save_for_backward || p.N == 0) return SegmentPlan{1, 64};
  // Without cu_seqlens every chain has T tokens; a packed batch's longest is at most B T (its lengths are on the
  // device: each chain cuts its own chunk count, so a shorter one only has shorter segments).
  return plan_segments(p.N * p.HV, chunks_of(p.B * p.T), p.V, p.K, sms);
}

size_t segment_workspace_bytes(const ForwardParams& p, int sms) {
  const int64_t base = workspace_layout(p.B * p.T, p.N, p.HV, p.K, p.V).bytes;
  const SegmentPlan plan = segment_plan(p, sms);
  if (plan.segments <= 1) return static_cast<size_t>(base);
  return static_cast<size_t>(segment_layout(base, p.N * p.HV, plan.segments, p.K, p.V).bytes);
}

cudaError_t launch_segmented_state(const ForwardParams& p, char* ws, const SegmentPlan& plan, cudaStream_t s) {
  const int64_t chains = p.N * p.HV;
  const SegmentLayout sl =
      segment_layout(workspace_layout(p.B * p.T, p.N, p.HV, p.K, p.V).bytes, chains, plan.segments, p.K, p.V);
  SegmentArgs sg{plan.segments, 1, reinterpret_cast<float*>(ws + sl.ends), reinterpret_cast<float*>(ws + sl.starts)};
  cudaError_t e = launch_state_segment_pass(p, ws, plan.bv, sg, s);
  if (e != cudaSuccess || (e = cudaGetLastError()) != cudaSuccess) return e;
  if (plan.segments > 2) {
    const unsigned blocks = static_cast<unsigned>(chains * (p.V / kCombineRows));
    if (p.K == 128)
      combine_kernel<128><<<blocks, 128, 0, s>>>(p.V, plan.segments, sg.ends, sg.starts);
    else
      combine_kernel<64><<<blocks, 64, 0, s>>>(p.V, plan.segments, sg.ends, sg.starts);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
  }
  sg.pass = 2;
  return launch_state_segment_pass(p, ws, plan.bv, sg, s);
}

}  // namespace kda::cuda::chunk
