// chunk_products.cu: launch 4 of backward_chunked.cu, the gradient pass's matrix products a CTA per (chunk, value
// head) (products_task.cuh holds the task and says what it computes).
#include <climits>
#include <cstdint>

#include "cuda/generic/chunk_kernels.h"
#include "cuda/generic/products_task.cuh"

namespace kda::cuda::chunk {
namespace {

using products::kThreads;
using products::ProdSmem;

template <int K, int V, bool kHopper>
__global__ void __launch_bounds__(kThreads, 2) products_kernel(const BackwardParams bp, char* ws, int hv0, int heads,
                                                               const __grid_constant__ sm90::ProductsMaps maps) {
  extern __shared__ __align__(1024) float smem[];  // 1 KB: the wgmma P1's swizzled planes
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched beside a reverse pass over other heads (chunk_kernels.h HeadRange): no CTA waits for it but the last,
  // so this grid's completion implies that pass's. Without such a launch it returns at once.
  if (blockIdx.x == gridDim.x - 1) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  products::products_task<K, V, kHopper>(bp, ws, hv0, heads, maps, blockIdx.x, smem);
}

template <int K, int V, bool kHopper>
cudaError_t launch(const BackwardParams& bp, char* ws, cudaStream_t s, const HeadRange& heads) {
  const auto kernel = products_kernel<K, V, kHopper>;
  const size_t bytes = ProdSmem<K, V>::kBytes;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) return e;
  const ForwardParams& p = bp.f;
  const BackwardLayout bl = backward_layout(p.B, p.T, p.N, p.HV, K, V, p.group);
  const int n = heads.count_of(p.HV);
  const int64_t tasks = bl.fwd.cap * n;
  if (tasks > INT_MAX) return cudaErrorInvalidConfiguration;  // chunked_backward_support refuses such sizes first
  // The wgmma P1's slices: maps over the saves of every task (chunk, value head) of the workspace.
  sm90::ProductsMaps maps{};
  if (kHopper && (e = sm90::encode_products_maps(ws + bl.starts, ws + bl.dsend, ws + bl.vnew, ws + bl.du,
                                                 bl.fwd.cap * p.HV, &maps)) != cudaSuccess)
    return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(tasks));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = bytes;
  cfg.stream = s;
  return launch_maybe_beside(cfg, heads.beside_previous, kernel, bp, ws, heads.first, n, maps);
}

}  // namespace

size_t products_smem_bytes(int K, int V) {
  return dispatch_kn<64, 128>(K, V, [](auto k, auto v) {
    return ProdSmem<decltype(k)::value, decltype(v)::value>::kBytes;
  });
}

cudaError_t launch_products(const BackwardParams& bp, char* ws, cudaStream_t s, const HeadRange& heads) {
  const ForwardParams& p = bp.f;
  // The Hopper path (KDA_BACKEND_CUDA_HOPPER, which GENERIC and AUTO resolve to on sm_90) takes the wgmma P1 where
  // the state pass's wgmma is available (sm_90, CuTe built in) and the slices' maps can address every task;
  // KDA_BACKEND_CUDA_CHUNKED keeps mma.sync everywhere.
  if (p.K == 128 && p.V == 128 && p.backend == KDA_BACKEND_CUDA_HOPPER && state_wgmma_available(p) &&
      sm90::products_maps_fit(backward_layout(p.B, p.T, p.N, p.HV, 128, 128, p.group).fwd.cap * p.HV))
    return launch<128, 128, true>(bp, ws, s, heads);
  return dispatch_kn<64, 128>(p.K, p.V, [&](auto k, auto v) {
    return launch<decltype(k)::value, decltype(v)::value, false>(bp, ws, s, heads);
  });
}

}  // namespace kda::cuda::chunk
