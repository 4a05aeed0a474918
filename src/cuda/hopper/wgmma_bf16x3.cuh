// wgmma_bf16x3.cuh: one warpgroup's acc += A B^T from shared memory on wgmma (CuTe's SM90 GMMA atoms) in bf16x3: both
// operands as bf16 hi / lo planes, per k-block lo hi, hi lo, hi hi (the order of chunk_common.cuh's mma_bf16x3), fp32
// accumulation onto what acc holds (clear it first for a plain product). The planes must be in the GMMA shared-memory
// layouts the TiledMMA was made for and published to the async proxy (fence.proxy.async, then a barrier) before the
// call; it returns when the products are done (their operands may be overwritten after a barrier).
// Device code for sm_90a with CuTe (state_wgmma.cu, reverse_wgmma.cu, tests/gpu/test_wgmma_layout.cu).
#pragma once

#include <cute/atom/mma_atom.hpp>
#include <cute/tensor.hpp>

namespace kda::cuda::sm90 {

struct NoWork {
  __device__ void operator()() const {}
};

// thr: the thread's slice of the TiledMMA (mma.get_thread_slice(thread index in the warpgroup)); sAh / sAl (M, K)
// and sBh / sBl (N, K) shared-memory tensors; acc: partition_fragment_C(mma, (M, N)). kSplit = false: the single
// product ah bh (the layout test's probe of the operand layouts). during(): work that needs neither acc nor the
// products' operands, run after the products are issued and before they are waited for (their latency hides it).
template <bool kSplit = true, class TiledMma, class ThrMma, class TA, class TB, class Acc, class During = NoWork>
__device__ __forceinline__ void wgmma_bf16x3(TiledMma& mma, const ThrMma& thr, const TA& sAh, const TA& sAl,
                                             const TB& sBh, const TB& sBl, Acc& acc, During&& during = {}) {
  using namespace cute;
  Tensor tAh = thr.make_fragment_A(thr.partition_A(sAh));
  Tensor tAl = thr.make_fragment_A(thr.partition_A(sAl));
  Tensor tBh = thr.make_fragment_B(thr.partition_B(sBh));
  Tensor tBl = thr.make_fragment_B(thr.partition_B(sBl));
  mma.accumulate_ = GMMA::ScaleOut::One;
  warpgroup_fence_operand(acc);
  warpgroup_arrive();
  CUTE_UNROLL
  for (int kb = 0; kb < size<2>(tAh); ++kb) {
    if constexpr (kSplit) {
      gemm(mma, tAl(_, _, kb), tBh(_, _, kb), acc);
      gemm(mma, tAh(_, _, kb), tBl(_, _, kb), acc);
    }
    gemm(mma, tAh(_, _, kb), tBh(_, _, kb), acc);
  }
  warpgroup_commit_batch();
  during();
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc);
}

}  // namespace kda::cuda::sm90
