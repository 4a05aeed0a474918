// chunk_grad_tc.cu: launch 5 of backward_chunked.cu, the tame chunks' dq, dk and dg on tensor cores a CTA per (chunk,
// value head, 64-channel half) (grad_tc_task.cuh holds the task and says what it computes).
#include <cstdint>

#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/grad_tc_task.cuh"

namespace kda::cuda::chunk {
namespace {

using grad_tc::kHalf;
using grad_tc::kThreads;
using grad_tc::TcLayout;

// bl: the workspace's layout, formed on the host (each thread forming it was 2% of this kernel's instructions).
// kQk: dq and dk finished here (grad_tc_finishes_qk: H = HV), else dq_hat / dk_hat over QS / BK.
template <int K, int V, class Spec, bool kQk>
__global__ void __launch_bounds__(kThreads, 2) grad_tc_kernel(const BackwardParams bp, char* ws,
                                                              const BackwardLayout bl) {
  extern __shared__ __align__(16) float smem[];
  grad_tc::grad_tc_task<K, V, Spec, kQk>(bp, ws, bl, blockIdx.x, smem);
}

template <int K, int V, class Spec, bool kQk>
cudaError_t launch_spec(const BackwardParams& bp, char* ws, cudaStream_t s) {
  const size_t bytes = TcLayout::kBytes;
  const auto kernel = grad_tc_kernel<K, V, Spec, kQk>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  const ForwardParams& p = bp.f;
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, K, V, p.group);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(bl.fwd.cap * p.HV * (K / kHalf)));  // a task's halves adjacent
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = bytes;
  cfg.stream = s;
  cudaLaunchAttribute pair[1];
  if (kQk && K / kHalf == 2) {  // the halves as one cluster (HalfPair)
    pair[0].id = cudaLaunchAttributeClusterDimension;
    pair[0].val.clusterDim.x = 2;
    pair[0].val.clusterDim.y = 1;
    pair[0].val.clusterDim.z = 1;
    cfg.attrs = pair;
    cfg.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&cfg, kernel, bp, ws, bl);
}

}  // namespace

size_t grad_tc_smem_bytes() { return TcLayout::kBytes; }

bool grad_tc_finishes_qk(const BackwardParams& bp) {
  const ForwardParams& p = bp.f;
  if (p.group != 1) return false;  // a group's dq_hat / dk_hat are summed over its value heads first
  if (p.K == kHalf) return true;
  // K = 128: the halves' cluster, on the Hopper path's device (the sm_90a build of this file).
  int major = 0;
  if (p.backend != KDA_BACKEND_CUDA_HOPPER ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, p.device_id) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9;
}

cudaError_t launch_grad_tc(const BackwardParams& bp, char* ws, cudaStream_t s) {
  const ForwardParams& p = bp.f;
  const bool qk = grad_tc_finishes_qk(bp);
  return dispatch_kn<64, 128>(p.K, p.V, [&](auto k, auto v) {
    constexpr int K = decltype(k)::value, V = decltype(v)::value;
    return with_io_spec(grad_io_fast(bp), p.gate_mode, [&](auto spec) {
      using Spec = decltype(spec);
      return qk ? launch_spec<K, V, Spec, true>(bp, ws, s) : launch_spec<K, V, Spec, false>(bp, ws, s);
    });
  });
}

}  // namespace kda::cuda::chunk
