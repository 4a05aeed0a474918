// chunk_segments.cu: the state pass with its chains cut into segments, for few chains on many SMs (chunk_map.h
// plan_segments; docs/hopper.md "Few heads, long sequences"): pass 1 and pass 2 of the state kernel (SegmentArgs:
// hopper/state_wgmma.cu where it runs, else chunk_state.cu) and, between them, the combine that hands each segment its
// exact start state.
// Everything in the caller's workspace (chunk_map.h segment_layout, after the forward's own regions), on the caller's
// stream, no host sync: the plan is a function of the shapes and the SM count alone.
#include <cstdint>

#include "cuda/device_common.cuh"
#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/chunk_map.h"

namespace kda::cuda::chunk {
namespace {

constexpr int kCombineRows = 8;  // state rows a CTA carries through the combine (h4-32k: 4 chains x 16 = 64 CTAs)
constexpr int kRingSlots = 4;    // M_j streams through shared memory in quarters (K / 4 rows), three in flight

// Shared memory of combine_kernel<K>: the ring of M quarters, then X_j transposed, [K][kCombineRows] (K = 128: 68 KB).
constexpr size_t combine_smem_bytes(int K) {
  return sizeof(float) * (size_t{kRingSlots} * static_cast<size_t>(K / 4) * K + static_cast<size_t>(K) * kCombineRows);
}

// X_{j+1} = X_j M_j + B_j for j = 1 .. s - 2 (X_1: pass 1's end of segment 0), in fp32 with the terms summed in k
// order from B_j. One CTA per (chain, kCombineRows rows of X), K threads, thread d owning column d: a row of X depends
// on its own row only, so the chains' rows run in parallel and only the s - 2 steps are sequential. Each step's
// arithmetic is 8 rows x K x K FMA a CTA (K = 128: ~1 us of issue); what paced it was M_j's K rows read one at a time
// from global memory, each a dependent latency (ncu, session 51: 414 us for h4-32k's 14 steps, a third of its
// forward; 45 us, 3.2 us a step, in this form).
// So M_j's quarters (K / 4 rows) go through a ring of kRingSlots slots on cp.async, continuous across steps: while a
// quarter is multiplied the next three are in flight, and B_{j+1}'s rows are loaded into registers during step j.
// X_j sits transposed in shared memory so a k-step reads its 8 rows as two broadcast 16-byte loads.
// The 3.2 us a step is not yet explained: two warps a scheduler (two row groups) and 20% fewer shared-memory
// wavefronts (two columns a thread) each measured the same 45 us (session 52, docs/hopper.md).
template <int K>
__global__ void __launch_bounds__(K) combine_kernel(int V, int s, const float* ends, float* starts) {
  constexpr int kQ = K / 4, kSlot = kQ * K, R = kCombineRows;
  static_assert(K % 4 == 0 && kQ * K % (4 * K) == 0, "a quarter of M is whole 16-byte copies, K of them a pass");
  extern __shared__ float4 combine_smem[];
  float* const ring = reinterpret_cast<float*>(combine_smem);  // [kRingSlots][kQ][K]
  float* const Xt = ring + kRingSlots * kSlot;                   // [K][R]: X_j's rows r0 .. r0 + R - 1, transposed
  const int blocks_per_chain = V / R;
  const int64_t chain = blockIdx.x / blocks_per_chain;
  const int r0 = static_cast<int>(blockIdx.x % blocks_per_chain) * R, d = threadIdx.x;
  const int64_t VK = int64_t{V} * K;
  const int units = 4 * (s - 2);  // unit u: M_j's quarter u % 4, j = 1 + u / 4
  // Unit u's copy into slot u % kRingSlots, one commit group a unit (empty past the last) so the waits count evenly.
  auto issue = [&](int u) {
    if (u < units) {
      const float* const src = ends + segment_end_at(chain, 1 + u / 4, s, V, K) + VK + int64_t{u % 4} * kSlot;
      float* const dst = ring + (u % kRingSlots) * kSlot;
#pragma unroll
      for (int i = 4 * d; i < kSlot; i += 4 * K) cp_async16(dst + i, src + i);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int u = 0; u < kRingSlots - 1; ++u) issue(u);
#pragma unroll
  for (int r = 0; r < R; ++r) Xt[d * R + r] = starts[segment_start_at(chain, 1, s, V, K) + (r0 + r) * K + d];
  float b[R];
#pragma unroll
  for (int r = 0; r < R; ++r) b[r] = ends[segment_end_at(chain, 1, s, V, K) + (r0 + r) * K + d];
  for (int j = 1; j + 1 < s; ++j) {
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = b[r];
    if (j + 2 < s) {  // B_{j+1}'s rows, landing during this step
#pragma unroll
      for (int r = 0; r < R; ++r) b[r] = ends[segment_end_at(chain, j + 1, s, V, K) + (r0 + r) * K + d];
    }
#pragma unroll 1
    for (int q = 0; q < 4; ++q) {
      const int u = 4 * (j - 1) + q;
      cp_async_wait<kRingSlots - 2>();  // this thread's copies of unit u landed
      __syncthreads();                  // everyone's; unit u - 1's slot read by all; at q = 0 X_j complete
      issue(u + kRingSlots - 1);        // into unit u - 1's slot
      const float* const M = ring + (u % kRingSlots) * kSlot;
      const float* const x = Xt + q * kQ * R;
#pragma unroll 8
      for (int k = 0; k < kQ; ++k) {
        const float m = M[k * K + d];
        const float4 xa = *reinterpret_cast<const float4*>(x + k * R);
        const float4 xb = *reinterpret_cast<const float4*>(x + k * R + 4);
        const float xs[R] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = fmaf(xs[r], m, acc[r]);
      }
    }
    __syncthreads();  // every read of X_j done
#pragma unroll
    for (int r = 0; r < R; ++r) {
      Xt[d * R + r] = acc[r];
      starts[segment_start_at(chain, j + 1, s, V, K) + (r0 + r) * K + d] = acc[r];
    }
  }
  cp_async_wait_all();  // no copy outlives the CTA (the last groups are empty)
}

}  // namespace

SegmentPlan segment_plan(const ForwardParams& p, int sms) {
  // Not where the forward keeps the state pass's intermediates for a backward (the saving forward, the recompute:
  // they take the unsplit pass), and not for K = 64's transition rows below one 64-row tile (K % bv, plan_segments).
  if (p.save_for_backward || p.N == 0) return SegmentPlan{1, 64};
  // Without cu_seqlens every chain has T tokens; a packed batch's longest is at most B T (its lengths are on the
  // device: each chain cuts its own chunk count, so a shorter one only has shorter segments).
  return plan_segments(p.N * p.HV, chunks_of(p.B * p.T), p.V, p.K, sms, state_wgmma_runs(p, 64));
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
    const size_t smem = combine_smem_bytes(p.K);
    auto kernel = p.K == 128 ? combine_kernel<128> : combine_kernel<64>;
    if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem))) !=
        cudaSuccess)
      return e;
    kernel<<<blocks, p.K, smem, s>>>(p.V, plan.segments, sg.ends, sg.starts);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
  }
  sg.pass = 2;
  return launch_state_segment_pass(p, ws, plan.bv, sg, s);
}

}  // namespace kda::cuda::chunk
